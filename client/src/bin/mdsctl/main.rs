//! `mdsctl`: the mds client by hand. Paths are absolute and resolved by LOOKUP from the root,
//! name by name: a symbolic link is never followed, at the end of a path or inside one (`stat`,
//! `ln` and the rest act on the link itself; `readlink` prints where it points; `write` and
//! `cat` open the path itself, which the server refuses with ELOOP for a link). A file's data
//! goes through a handle, in pieces of at most `MAX_IO` bytes: `write` copies stdin into one,
//! `cat` prints one's bytes to stdout.
//!
//! Output is text for people, or with `-o json` one JSON document on stdout per run. Exit
//! status: 0 done; 1 the server (or the path check) answered with a POSIX error, whose name
//! (e.g. `ENOENT`) is printed on stderr, or `write` could not read stdin; 2 bad usage (clap's, including a value a flag cannot
//! take: a mode, a time, an attribute value, device numbers where they do not belong); 3 the
//! server could not be reached, did not answer within `--timeout`, closed the connection, or
//! sent something this client does not understand.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod show;
mod values;

use show::{attr_json, entry_json, print_attr, print_status, status_json};
use values::{XattrBytes, hex, makedev, parse_mode, parse_set_time, parse_xattr_value, xattr_text};

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use mds_client::auth::AuthKey;
use mds_client::proto::{
    Attr, Errno, Kind, MAX_IO, OpenFlags, RenameHow, SetAttr, SetTime, XattrSet,
};
use mds_client::tls::TlsClient;
use mds_client::units::{parse_bytes, parse_duration};
use mds_client::{ClientError, ConnectOptions, Handle, Router};
use serde_json::{Value, json};

/// The server answered with an error (or a path was refused before it was sent).
const EXIT_SERVER_ERROR: u8 = 1;
/// Could not reach the server, no answer in time, connection lost, or a protocol failure.
const EXIT_UNREACHABLE: u8 = 3;
/// Bad usage: clap's own, or a key or CA file that cannot be used.
const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "mdsctl",
    version,
    about = "Talk to an mds server by hand",
    after_help = "Exit status: 0 done; 1 the server answered with an error (its POSIX name on \
                  stderr), or stdin could not be read; 2 bad usage; 3 the server could not be reached, did not answer \
                  within --timeout, or broke the protocol."
)]
struct Cli {
    /// Server address, HOST:PORT.
    #[arg(
        long,
        default_value = "127.0.0.1:7400",
        env = "MDS_SERVER",
        global = true
    )]
    server: String,
    /// Output format: `text` for people, `json` for programs (one JSON document on stdout).
    #[arg(short, long, value_enum, default_value_t = Output::Text, global = true)]
    output: Output,
    /// Give up after this long without the command having finished (e.g. 500ms, 30s; 0: wait
    /// forever). Exit status 3.
    #[arg(long, default_value = "30s", value_parser = parse_duration, global = true)]
    timeout: Duration,
    /// The shared key file, for a server started with --auth-key (the same file; only its
    /// owner may read it).
    #[arg(long, env = "MDS_AUTH_KEY", global = true)]
    auth_key: Option<PathBuf>,
    /// Speak TLS, trusting the certificates in this PEM file (the CA that signed the server's
    /// certificate, or that certificate itself).
    #[arg(long, env = "MDS_TLS_CA", global = true)]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry. Default: the host part of --server.
    #[arg(long, env = "MDS_TLS_SERVER_NAME", global = true, requires = "tls_ca")]
    tls_server_name: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// MKNOD's TYPE, in mknod(1)'s letters.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NodeType {
    /// A fifo (named pipe).
    #[value(name = "p")]
    Fifo,
    /// A socket.
    #[value(name = "s")]
    Socket,
    /// A character device (`u`: the same, unbuffered).
    #[value(name = "c", alias = "u")]
    CharDevice,
    /// A block device.
    #[value(name = "b")]
    BlockDevice,
}

impl NodeType {
    fn kind(self) -> Kind {
        match self {
            NodeType::Fifo => Kind::Fifo,
            NodeType::Socket => Kind::Socket,
            NodeType::CharDevice => Kind::CharDevice,
            NodeType::BlockDevice => Kind::BlockDevice,
        }
    }
}

/// MKNOD's TYPEs that need MAJOR and MINOR, as clap's `required_if_eq_any` takes them.
const DEVICE_TYPES: [(&str, &str); 3] = [("node", "c"), ("node", "u"), ("node", "b")];

#[derive(Subcommand)]
enum Command {
    /// Create directories.
    Mkdir {
        /// Permission bits, octal.
        #[arg(short, long, default_value = "755", value_parser = parse_mode)]
        mode: u32,
        /// Create missing parents too, and accept directories that exist.
        #[arg(short, long)]
        parents: bool,
        /// In a cluster: the directory's inode and everything put in it live on shard N,
        /// its entry on its parent's shard (a remote directory, as Lustre's `lfs mkdir -i`).
        #[arg(long, value_name = "N", conflicts_with = "parents")]
        shard: Option<u16>,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create regular files (exclusive: EEXIST if the name exists).
    Create {
        #[arg(short, long, default_value = "644", value_parser = parse_mode)]
        mode: u32,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Print attributes (of a symbolic link itself, not of what it points at).
    Stat {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// List a directory, one name per line.
    Ls {
        #[arg(default_value = "/")]
        path: String,
        /// Print inode and kind letter (as `ls -l`: d, -, l, p, s, c, b) before each name.
        #[arg(short, long)]
        long: bool,
    },
    /// Remove files (and symbolic links, fifos, sockets, devices).
    Rm {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove empty directories.
    Rmdir {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename SRC to DST (replacing a file, or an empty directory, at DST).
    Mv {
        /// Refuse with EEXIST if DST exists (renameat2's RENAME_NOREPLACE).
        #[arg(long, conflicts_with = "exchange")]
        no_replace: bool,
        /// Swap SRC and DST, which must both exist (renameat2's RENAME_EXCHANGE).
        #[arg(long)]
        exchange: bool,
        src: String,
        dst: String,
    },
    /// Make LINK a hard link to TARGET (not a directory), or with -s a symbolic link.
    Ln {
        /// Make a symbolic link whose target is TARGET as given, byte for byte (not resolved:
        /// it may be relative, or name nothing).
        #[arg(short, long)]
        symbolic: bool,
        /// Hard link: the path of the inode to link. Symbolic: the target, any bytes.
        target: OsString,
        link: String,
    },
    /// Print where a symbolic link points (its bytes as they are, then a newline).
    Readlink { path: String },
    /// Make a fifo, a socket or a device (devices are root's).
    Mknod {
        /// Permission bits, octal.
        #[arg(short, long, default_value = "644", value_parser = parse_mode)]
        mode: u32,
        path: String,
        #[arg(value_enum, value_name = "TYPE")]
        node: NodeType,
        /// The device's major number: required for c, u and b, refused for p and s.
        #[arg(required_if_eq_any(DEVICE_TYPES))]
        major: Option<u32>,
        /// The device's minor number: with MAJOR.
        #[arg(required_if_eq_any(DEVICE_TYPES))]
        minor: Option<u32>,
    },
    /// Change attributes.
    Setattr {
        path: String,
        #[arg(long, value_parser = parse_mode)]
        mode: Option<u32>,
        #[arg(long)]
        uid: Option<u32>,
        #[arg(long)]
        gid: Option<u32>,
        #[arg(long)]
        size: Option<u64>,
        /// Access time: `now` (the server's clock), an RFC 3339 time (2024-05-01T12:00:00Z), or
        /// nanoseconds since the Unix epoch.
        #[arg(long, value_parser = parse_set_time)]
        atime: Option<SetTime>,
        /// Modification time, as --atime.
        #[arg(long, value_parser = parse_set_time)]
        mtime: Option<SetTime>,
    },
    /// Set an extended attribute (-n NAME [-v VALUE]) or remove one (-x NAME), as setfattr(1).
    Setfattr {
        /// The attribute's name, with its namespace (user.comment).
        #[arg(
            short,
            long,
            required_unless_present = "remove",
            conflicts_with = "remove"
        )]
        name: Option<String>,
        /// The value (default: empty): text as given, `0x` and hex digits for bytes, or a
        /// string in double quotes where `\NNN` (octal), `\\` and `\"` are escapes.
        #[arg(short, long, value_parser = parse_xattr_value, requires = "name")]
        value: Option<XattrBytes>,
        /// Remove this attribute (ENODATA if there is none).
        #[arg(short = 'x', long, value_name = "NAME")]
        remove: Option<String>,
        /// Refuse with EEXIST if the attribute exists (XATTR_CREATE).
        #[arg(long, conflicts_with_all = ["replace", "remove"])]
        create: bool,
        /// Refuse with ENODATA if the attribute does not exist (XATTR_REPLACE).
        #[arg(long, conflicts_with = "remove")]
        replace: bool,
        path: String,
    },
    /// Print extended attributes, as getfattr(1): one with -n, else all of them.
    ///
    /// One NAME="VALUE" line each, a value that is not text as 0x and hex digits (what
    /// setfattr -v reads back). With -o json: {"path", "xattrs": [{"name", "value" (UTF-8,
    /// lossy), "value_hex"}]}.
    Getfattr {
        /// Only this attribute (ENODATA if there is none).
        #[arg(short, long, conflicts_with = "dump")]
        name: Option<String>,
        /// All attributes with their values (also what no -n means).
        #[arg(short, long)]
        dump: bool,
        path: String,
    },
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
    /// Print a regular file's bytes to stdout, as they are.
    ///
    /// With -o json: {"path", "size", "data" (UTF-8, lossy), "data_hex"}.
    Cat { path: String },
    /// Wait until everything the server executed so far is durable.
    Sync,
    /// Print server figures (STATFS).
    Status,
}

/// What clap's attributes cannot say: device numbers are refused for a fifo or a socket.
fn check_usage(cli: &Cli) -> Result<(), clap::Error> {
    if let Command::Mknod {
        node: NodeType::Fifo | NodeType::Socket,
        major: Some(_),
        ..
    } = cli.command
    {
        let mut cmd = Cli::command();
        cmd.build();
        let mknod = cmd
            .find_subcommand_mut("mknod")
            .expect("mknod is a subcommand");
        return Err(mknod.error(
            ErrorKind::ArgumentConflict,
            "MAJOR and MINOR are for devices (c, u, b), not for a fifo (p) or a socket (s)",
        ));
    }
    Ok(())
}

/// TLS and the shared key, from the flags.
fn connect_options(cli: &Cli) -> Result<ConnectOptions, String> {
    let auth_key = match &cli.auth_key {
        Some(path) => Some(Arc::new(
            AuthKey::from_file(path).map_err(|e| format!("--auth-key: {e}"))?,
        )),
        None => None,
    };
    let tls = match &cli.tls_ca {
        Some(ca) => Some(Arc::new(
            TlsClient::from_ca_file(ca, cli.tls_server_name.as_deref())
                .map_err(|e| format!("--tls-ca: {e}"))?,
        )),
        None => None,
    };
    Ok(ConnectOptions { auth_key, tls })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = check_usage(&cli) {
        e.exit();
    }
    let options = match connect_options(&cli) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("mdsctl: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a runtime");
    let (server, limit) = (cli.server.clone(), cli.timeout);
    let result = rt.block_on(async {
        if limit.is_zero() {
            run(cli, options).await
        } else {
            tokio::time::timeout(limit, run(cli, options))
                .await
                .unwrap_or(Err(Failure::Timeout))
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Timeout) => {
            eprintln!(
                "mdsctl: {server}: no answer within {} (--timeout)",
                humantime::format_duration(limit)
            );
            ExitCode::from(EXIT_UNREACHABLE)
        }
        Err(Failure::Stdin(e)) => {
            eprintln!("mdsctl: reading stdin: {e}");
            ExitCode::from(EXIT_SERVER_ERROR)
        }
        Err(Failure::Client(what, e)) => match e.errno() {
            // Refused at CONNECT: the name, and what to do about it.
            Some(Errno::EAUTH) => {
                eprintln!("mdsctl: {what}: EAUTH: the server refused this key (--auth-key)");
                ExitCode::from(EXIT_SERVER_ERROR)
            }
            None if matches!(e, ClientError::AuthRequired) => {
                eprintln!("mdsctl: {what}: EAUTH: {e}");
                ExitCode::from(EXIT_SERVER_ERROR)
            }
            Some(errno) => {
                eprintln!("mdsctl: {what}: {errno}");
                ExitCode::from(EXIT_SERVER_ERROR)
            }
            None => {
                eprintln!("mdsctl: {what}: {e}");
                ExitCode::from(EXIT_UNREACHABLE)
            }
        },
    }
}

enum Failure {
    /// What was being done, and how it failed.
    Client(String, ClientError),
    /// `write` could not read its input.
    Stdin(std::io::Error),
    /// `--timeout` passed first.
    Timeout,
}

fn at(what: impl Into<String>) -> impl FnOnce(ClientError) -> Failure {
    let what = what.into();
    move |e| Failure::Client(what, e)
}

/// Prints one JSON document on stdout.
fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a Value always serializes")
    );
}

async fn run(cli: Cli, options: ConnectOptions) -> Result<(), Failure> {
    let json = cli.output == Output::Json;
    // Any server of a cluster will do: each request goes to the shard of what it names.
    let client = Router::connect(&cli.server, &options)
        .await
        .map_err(at(format!("connect {}", cli.server)))?;
    execute(&client, cli.command, json, &cli.server).await?;
    // A server with early replies (`--ack early`) may have answered before the commit: say
    // so, as a client that goes away now would otherwise not know.
    let unsafe_changes = client.unsafe_count().await;
    if unsafe_changes > 0 {
        eprintln!(
            "mdsctl: {unsafe_changes} change(s) done but not committed yet (the server commits \
             them shortly; `mdsctl sync` waits for that)"
        );
    }
    Ok(())
}

/// One command, its output on stdout (text, or with `json` one document).
async fn execute(
    client: &Router,
    command: Command,
    json: bool,
    server: &str,
) -> Result<(), Failure> {
    match command {
        Command::Mkdir {
            mode,
            parents,
            shard,
            paths,
        } => mkdir(client, json, mode, (parents, shard), paths).await,
        Command::Create { mode, paths } => create(client, json, mode, paths).await,
        Command::Stat { paths } => stat(client, json, paths).await,
        Command::Ls { path, long } => ls(client, json, &path, long).await,
        Command::Rm { paths } => remove(client, json, paths, false).await,
        Command::Rmdir { paths } => remove(client, json, paths, true).await,
        Command::Mv {
            no_replace,
            exchange,
            src,
            dst,
        } => mv(client, json, &src, &dst, rename_how(no_replace, exchange)).await,
        Command::Ln {
            symbolic,
            target,
            link,
        } => ln(client, json, &target, &link, symbolic).await,
        Command::Readlink { path } => readlink(client, json, &path).await,
        Command::Mknod {
            mode,
            path,
            node,
            major,
            minor,
        } => {
            let rdev = makedev(major.unwrap_or(0), minor.unwrap_or(0));
            mknod(client, json, &path, node.kind(), mode, rdev).await
        }
        Command::Setattr {
            path,
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        } => {
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                handle: None,
            };
            setattr(client, json, &path, set).await
        }
        Command::Setfattr {
            remove: Some(name),
            path,
            ..
        } => removexattr(client, json, &path, &name).await,
        Command::Setfattr {
            name,
            value,
            create,
            replace,
            path,
            ..
        } => {
            let name = name.expect("clap: -n is required without -x");
            let value = value.map(|v| v.0).unwrap_or_default();
            let how = xattr_set(create, replace);
            setxattr(client, json, &path, &name, &value, how).await
        }
        Command::Getfattr { name, path, .. } => {
            getfattr(client, json, &path, name.as_deref()).await
        }
        Command::Write {
            mode,
            append,
            offset,
            path,
        } => write(client, json, &path, mode, append, offset).await,
        Command::Cat { path } => cat(client, json, &path).await,
        Command::Sync => {
            client.sync().await.map_err(at("sync"))?;
            if json {
                print_json(&json!({ "last_committed": client.last_committed().await }));
            }
            Ok(())
        }
        Command::Status => {
            let s = client.statfs().await.map_err(at("status"))?;
            if json {
                print_json(&status_json(server, &s));
            } else {
                print_status(server, &s);
            }
            Ok(())
        }
    }
}

/// `mv`'s flags (clap lets one at most through).
fn rename_how(no_replace: bool, exchange: bool) -> RenameHow {
    match (no_replace, exchange) {
        (_, true) => RenameHow::Exchange,
        (true, false) => RenameHow::NoReplace,
        (false, false) => RenameHow::Replace,
    }
}

/// `setfattr`'s flags (clap lets one at most through).
fn xattr_set(create: bool, replace: bool) -> XattrSet {
    match (create, replace) {
        (true, _) => XattrSet::Create,
        (false, true) => XattrSet::Replace,
        (false, false) => XattrSet::Either,
    }
}

async fn mkdir(
    client: &Router,
    json: bool,
    mode: u32,
    (parents, shard): (bool, Option<u16>),
    paths: Vec<String>,
) -> Result<(), Failure> {
    let mut made = Vec::new();
    for path in paths {
        let attr = if parents {
            mkdir_p(client, &path, mode).await.map_err(at(&path))?
        } else {
            let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
            match shard {
                Some(shard) => client.mkdir_on(parent, name, mode, shard).await,
                None => client.mkdir(parent, name, mode).await,
            }
            .map_err(at(&path))?
        };
        made.push(attr_json(&path, &attr));
    }
    if json {
        print_json(&Value::Array(made));
    }
    Ok(())
}

async fn create(client: &Router, json: bool, mode: u32, paths: Vec<String>) -> Result<(), Failure> {
    let mut made = Vec::new();
    for path in paths {
        let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
        let attr = client.create(parent, name, mode).await.map_err(at(&path))?;
        made.push(attr_json(&path, &attr));
    }
    if json {
        print_json(&Value::Array(made));
    }
    Ok(())
}

async fn stat(client: &Router, json: bool, paths: Vec<String>) -> Result<(), Failure> {
    let mut attrs = Vec::new();
    for path in paths {
        let attr = client.resolve(&path).await.map_err(at(&path))?;
        if json {
            attrs.push(attr_json(&path, &attr));
        } else {
            print_attr(&path, &attr);
        }
    }
    if json {
        print_json(&Value::Array(attrs));
    }
    Ok(())
}

async fn ls(client: &Router, json: bool, path: &str, long: bool) -> Result<(), Failure> {
    let dir = client.resolve(path).await.map_err(at(path))?;
    let entries = client.readdir_all(dir.ino).await.map_err(at(path))?;
    if json {
        print_json(&Value::Array(entries.iter().map(entry_json).collect()));
        return Ok(());
    }
    for entry in &entries {
        if long {
            println!("{:>10} {} {}", entry.ino, entry.kind.letter(), entry.name);
        } else {
            println!("{}", entry.name);
        }
    }
    Ok(())
}

/// `rm` (UNLINK), or with `dirs` `rmdir`.
async fn remove(
    client: &Router,
    json: bool,
    paths: Vec<String>,
    dirs: bool,
) -> Result<(), Failure> {
    let mut done = Vec::new();
    for path in paths {
        let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
        if dirs {
            client.rmdir(parent, name).await.map_err(at(&path))?;
        } else {
            client.unlink(parent, name).await.map_err(at(&path))?;
        }
        done.push(json!({ "path": path }));
    }
    if json {
        print_json(&Value::Array(done));
    }
    Ok(())
}

async fn mv(
    client: &Router,
    json: bool,
    src: &str,
    dst: &str,
    how: RenameHow,
) -> Result<(), Failure> {
    let (sp, sn) = client.resolve_parent(src).await.map_err(at(src))?;
    let (dp, dn) = client.resolve_parent(dst).await.map_err(at(dst))?;
    let arrow = if how == RenameHow::Exchange {
        "<->"
    } else {
        "->"
    };
    client
        .rename_how(sp, sn, dp, dn, how)
        .await
        .map_err(at(format!("{src} {arrow} {dst}")))?;
    if json {
        let how = match how {
            RenameHow::Replace => "replace",
            RenameHow::NoReplace => "no-replace",
            RenameHow::Exchange => "exchange",
        };
        print_json(&json!({ "src": src, "dst": dst, "how": how }));
    }
    Ok(())
}

/// `ln`: a hard link to TARGET's inode, or with `symbolic` a symbolic link to the string
/// TARGET. Prints (json) the attributes of the inode LINK names.
async fn ln(
    client: &Router,
    json: bool,
    target: &OsStr,
    link: &str,
    symbolic: bool,
) -> Result<(), Failure> {
    let shown = target.to_string_lossy();
    let attr = if symbolic {
        let (parent, name) = client.resolve_parent(link).await.map_err(at(link))?;
        client
            .symlink(parent, name, target.as_bytes())
            .await
            .map_err(at(format!("{link} -> {shown}")))?
    } else {
        // Names on the server are UTF-8: a path that is not names nothing there.
        let path = target
            .to_str()
            .ok_or(ClientError::Errno(Errno::EINVAL))
            .map_err(at(shown.as_ref()))?;
        let ino = client.resolve(path).await.map_err(at(path))?.ino;
        let (parent, name) = client.resolve_parent(link).await.map_err(at(link))?;
        client
            .link(ino, parent, name)
            .await
            .map_err(at(format!("{link} => {path}")))?
    };
    if json {
        print_json(&attr_json(link, &attr));
    }
    Ok(())
}

async fn readlink(client: &Router, json: bool, path: &str) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let target = client.readlink(ino).await.map_err(at(path))?;
    if json {
        print_json(&json!({
            "path": path,
            "target": String::from_utf8_lossy(&target),
            "target_hex": hex(&target),
        }));
    } else {
        // The bytes as they are (a target need not be UTF-8), as readlink(1) prints them.
        let mut out = std::io::stdout().lock();
        out.write_all(&target)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .unwrap_or_else(|e| panic!("writing to stdout: {e}"));
    }
    Ok(())
}

async fn mknod(
    client: &Router,
    json: bool,
    path: &str,
    kind: Kind,
    mode: u32,
    rdev: u64,
) -> Result<(), Failure> {
    let (parent, name) = client.resolve_parent(path).await.map_err(at(path))?;
    let attr = client
        .mknod(parent, name, kind, mode, rdev)
        .await
        .map_err(at(path))?;
    if json {
        print_json(&attr_json(path, &attr));
    }
    Ok(())
}

async fn setattr(client: &Router, json: bool, path: &str, set: SetAttr) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let attr = client.setattr(ino, set).await.map_err(at(path))?;
    if json {
        print_json(&attr_json(path, &attr));
    } else {
        print_attr(path, &attr);
    }
    Ok(())
}

async fn setxattr(
    client: &Router,
    json: bool,
    path: &str,
    name: &str,
    value: &[u8],
    how: XattrSet,
) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    client
        .setxattr(ino, name, value, how)
        .await
        .map_err(at(format!("{path}: {name}")))?;
    if json {
        print_json(&json!({ "path": path, "name": name, "size": value.len() }));
    }
    Ok(())
}

async fn removexattr(client: &Router, json: bool, path: &str, name: &str) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    client
        .removexattr(ino, name)
        .await
        .map_err(at(format!("{path}: {name}")))?;
    if json {
        print_json(&json!({ "path": path, "removed": name }));
    }
    Ok(())
}

/// `getfattr -n NAME`, or every attribute. Text: `NAME="VALUE"` lines; json: `{"path",
/// "xattrs": [{"name", "value" (lossy UTF-8), "value_hex"}]}` either way.
async fn getfattr(
    client: &Router,
    json: bool,
    path: &str,
    name: Option<&str>,
) -> Result<(), Failure> {
    let ino = client.resolve(path).await.map_err(at(path))?.ino;
    let mut found = Vec::new();
    if let Some(name) = name {
        let value = client
            .getxattr(ino, name)
            .await
            .map_err(at(format!("{path}: {name}")))?;
        found.push((name.to_owned(), value));
    } else {
        for name in client.listxattr(ino).await.map_err(at(path))? {
            match client.getxattr(ino, &name).await {
                Ok(value) => found.push((name, value)),
                // Removed since it was listed.
                Err(e) if e.errno() == Some(Errno::ENODATA) => {}
                Err(e) => return Err(Failure::Client(format!("{path}: {name}"), e)),
            }
        }
    }
    if json {
        let xattrs = found
            .iter()
            .map(|(name, value)| {
                json!({
                    "name": name,
                    "value": String::from_utf8_lossy(value),
                    "value_hex": hex(value),
                })
            })
            .collect();
        print_json(&json!({ "path": path, "xattrs": Value::Array(xattrs) }));
    } else {
        for (name, value) in &found {
            println!("{name}={}", xattr_text(value));
        }
    }
    Ok(())
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

/// `mkdir -p`: the attributes of the last directory, made or found.
async fn mkdir_p(client: &Router, path: &str, mode: u32) -> Result<Attr, ClientError> {
    use mds_client::proto::Errno::{EEXIST, ENOENT, ENOTDIR};
    let mut attr = client.getattr(mds_client::ROOT).await?;
    for name in mds_client::components(path)? {
        attr = match client.lookup(attr.ino, name).await {
            Ok(found) if found.kind == Kind::Directory => found,
            Ok(_) => return Err(ClientError::Errno(ENOTDIR)),
            Err(e) if e.errno() == Some(ENOENT) => match client.mkdir(attr.ino, name, mode).await {
                Ok(made) => made,
                // Someone else made it meanwhile.
                Err(e) if e.errno() == Some(EEXIST) => {
                    let found = client.lookup(attr.ino, name).await?;
                    if found.kind != Kind::Directory {
                        return Err(ClientError::Errno(ENOTDIR));
                    }
                    found
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
