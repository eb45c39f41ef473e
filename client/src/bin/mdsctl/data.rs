//! mdsctl's commands on a regular file's data, through a handle and in pieces of at most
//! `MAX_IO` bytes: `write` copies stdin into a file, `cat` prints one's bytes to stdout;
//! `layout` says where a file's data is (the server, or the object store's slices).

use std::io::Write as _;

use clap::Subcommand;
use mds_client::proto::{Attr, Body, Errno, MAX_IO, Op, OpenFlags};
use mds_client::units::parse_bytes;
use mds_client::{Handle, Router};
use serde_json::json;

use crate::failure::{Failure, at};
use crate::show::{attr_json, print_json};
use crate::values::{hex, parse_mode};

/// The commands on a file's data.
#[derive(Subcommand)]
pub(crate) enum DataCommand {
    /// Copy stdin into a regular file, creating it if there is none (cut to 0 bytes first if
    /// it exists, unless --append or --offset).
    ///
    /// With -o json: the file's attributes after the last write and "written" (bytes).
    Write {
        /// Permission bits, octal, of a file this creates.
        #[arg(short, long, default_value = "644", value_parser = parse_mode)]
        mode: u32,
        /// Add to the end of the file (O_APPEND) instead of replacing what it holds.
        #[arg(short, long, conflicts_with = "offset")]
        append: bool,
        /// Write from this byte on, leaving the rest of the file as it is (no truncate;
        /// writing past the end leaves a hole, read as zeros).
        #[arg(long, value_parser = parse_bytes)]
        offset: Option<u64>,
        path: String,
    },
    /// Print a regular file's bytes to stdout, as they are (a file on the server: one whose
    /// data is in the object store is read through a mount).
    ///
    /// With -o json: {"path", "size", "data" (UTF-8, lossy), "data_hex"}.
    Cat { path: String },
    /// Print where a regular file's data is: on the server, or in the object store as its
    /// layout says — one line per piece, oldest first (a later one wins where they overlap):
    /// the file's byte range, the slice (hex) and the range in it.
    ///
    /// With -o json: {"path", "size", "objects", "placed": [{"slice", "slice_size",
    /// "slice_off", "file_off", "len"}]}.
    Layout { path: String },
}

/// One command on a file's data, its output on stdout (the bytes, or with `json` one
/// document).
pub(crate) async fn execute(
    client: &Router,
    command: DataCommand,
    json: bool,
) -> Result<(), Failure> {
    match command {
        DataCommand::Write {
            mode,
            append,
            offset,
            path,
        } => write(client, json, &path, mode, append, offset).await,
        DataCommand::Cat { path } => cat(client, json, &path).await,
        DataCommand::Layout { path } => layout(client, json, &path).await,
    }
}

/// The inode `path` names, created (as a regular file of `mode`) if nothing does: (its
/// attributes, whether this made it).
async fn find_or_create(client: &Router, path: &str, mode: u32) -> Result<(Attr, bool), Failure> {
    match client.resolve(path).await {
        Ok(found) => return Ok((found, false)),
        Err(e) if e.errno() == Some(Errno::ENOENT) => {}
        Err(e) => return Err(Failure::Client(path.to_owned(), e)),
    }
    let (parent, name) = client.resolve_parent(path).await.map_err(at(path))?;
    match client.create(parent, name, mode).await {
        Ok(made) => Ok((made, true)),
        // Someone else made it meanwhile.
        Err(e) if e.errno() == Some(Errno::EEXIST) => {
            let found = client.lookup(parent, name).await.map_err(at(path))?;
            Ok((found, false))
        }
        Err(e) => Err(Failure::Client(path.to_owned(), e)),
    }
}

/// `write`: stdin into `path` through a handle opened to write, one piece of at most
/// `MAX_IO` bytes as each is read (stdin is never held whole). A file that exists is cut to
/// 0 bytes by the OPEN, unless `append` or `offset` say otherwise.
async fn write(
    client: &Router,
    json: bool,
    path: &str,
    mode: u32,
    append: bool,
    offset: Option<u64>,
) -> Result<(), Failure> {
    let (file, made) = find_or_create(client, path, mode).await?;
    let flags = OpenFlags {
        write: true,
        // A file just made is empty already: no truncate, which would be one more change.
        truncate: !made && !append && offset.is_none(),
        append,
        ..OpenFlags::default()
    };
    let (handle, opened) = client.open(file.ino, flags).await.map_err(at(path))?;
    let copied = copy_stdin(client, path, handle, offset.unwrap_or(0), opened).await;
    // Released whatever the copy came to: the server keeps an open handle until then.
    let released = client.release(handle).await.map_err(at(path));
    let (written, attr) = copied?;
    released?;
    if json {
        let mut shown = attr_json(path, &attr);
        shown["written"] = written.into();
        print_json(&shown);
    }
    Ok(())
}

/// Copies stdin through `handle` from `offset`: (bytes written, the attributes after the
/// last write, or `opened` if stdin was empty).
async fn copy_stdin(
    client: &Router,
    path: &str,
    handle: Handle,
    offset: u64,
    opened: Attr,
) -> Result<(u64, Attr), Failure> {
    let mut pieces = stdin_pieces();
    let (mut written, mut attr) = (0u64, opened);
    while let Some(piece) = pieces.recv().await {
        let piece = piece.map_err(Failure::Stdin)?;
        attr = client
            .write(handle, offset + written, &piece)
            .await
            .map_err(at(path))?;
        written += piece.len() as u64;
    }
    Ok((written, attr))
}

/// Reads stdin on a thread of its own, in pieces of `MAX_IO` bytes (the last one shorter,
/// none empty): the runtime, and `--timeout` with it, never waits on a blocked read, and the
/// next piece is read while the last one is being written.
fn stdin_pieces() -> tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    use std::io::Read as _;
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            // A pipe gives what it has; fill the piece so each WRITE carries a whole one.
            let mut piece = vec![0u8; MAX_IO];
            let mut filled = 0;
            while filled < piece.len() {
                match stdin.read(&mut piece[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                }
            }
            let last = filled < piece.len();
            piece.truncate(filled);
            // A send fails once the copy gave up: nobody wants the rest.
            if (filled > 0 && tx.blocking_send(Ok(piece)).is_err()) || last {
                return;
            }
        }
    });
    rx
}

/// `layout`: LAYOUT of the file, without a handle (the caller's read permission is checked).
async fn layout(client: &Router, json: bool, path: &str) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let body = client
        .call(Op::Layout { ino, handle: 0 })
        .await
        .map_err(at(path))?;
    let Body::Layout(layout) = body else {
        return Err(Failure::Client(
            path.to_owned(),
            mds_client::ClientError::Errno(Errno::EPROTO),
        ));
    };
    if json {
        let placed: Vec<_> = layout
            .placed
            .iter()
            .map(|p| {
                json!({"slice": p.slice, "slice_size": p.slice_size, "slice_off": p.slice_off,
                       "file_off": p.file_off, "len": p.len})
            })
            .collect();
        print_json(
            &json!({"path": path, "size": layout.size, "objects": layout.objects,
                           "placed": placed}),
        );
        return Ok(());
    }
    let place = if layout.objects {
        "the object store"
    } else {
        "the server"
    };
    println!("{path}: {} bytes, on {place}", layout.size);
    for p in &layout.placed {
        println!(
            "  {}..{}  slice {:016x} bytes {}..{} of {}",
            p.file_off,
            p.file_end(),
            p.slice,
            p.slice_off,
            p.slice_off + p.len,
            p.slice_size
        );
    }
    Ok(())
}

/// `cat`: the file's bytes on stdout, each piece as it comes (or one JSON document).
async fn cat(client: &Router, json: bool, path: &str) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let flags = OpenFlags {
        read: true,
        ..OpenFlags::default()
    };
    let (handle, _) = client.open(ino, flags).await.map_err(at(path))?;
    let printed = print_file(client, json, path, handle).await;
    let released = client.release(handle).await.map_err(at(path));
    printed?;
    released
}

async fn print_file(
    client: &Router,
    json: bool,
    path: &str,
    handle: Handle,
) -> Result<(), Failure> {
    if json {
        let data = client.read_to_end(handle).await.map_err(at(path))?;
        print_json(&json!({
            "path": path,
            "size": data.len(),
            "data": String::from_utf8_lossy(&data),
            "data_hex": hex(&data),
        }));
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let piece = client
            .read(handle, offset, MAX_IO as u32)
            .await
            .map_err(at(path))?;
        if let Err(e) = out.write_all(&piece) {
            // A reader that went away (`| head`) is not the server's failure.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            panic!("writing to stdout: {e}");
        }
        offset += piece.len() as u64;
        if piece.len() < MAX_IO {
            break;
        }
    }
    out.flush()
        .unwrap_or_else(|e| panic!("writing to stdout: {e}"));
    Ok(())
}
