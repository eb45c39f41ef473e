//! mdsctl's commands on the namespace: names made and removed (`mkdir`, `create`, `rm`,
//! `rmdir`, `mv`, `ln`, `mknod`), what they name (`stat`, `ls`, `readlink`) and attributes
//! (`setattr`). Each resolves its paths by LOOKUP from the root, name by name, and asks the
//! server once per path.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;

use clap::{Subcommand, ValueEnum};
use mds_client::proto::{Attr, Errno, Kind, RenameHow, SetAttr, SetTime};
use mds_client::{ClientError, Router};
use serde_json::{Value, json};

use crate::failure::{Failure, at};
use crate::show::{attr_json, entry_json, print_attr, print_json};
use crate::values::{hex, makedev, parse_mode, parse_set_time};

/// The commands on names, links and attributes.
#[derive(Subcommand)]
pub(crate) enum NameCommand {
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
}

/// MKNOD's TYPE, in mknod(1)'s letters.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum NodeType {
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

/// One command on the namespace, its output on stdout (text, or with `json` one document).
pub(crate) async fn execute(
    client: &Router,
    command: NameCommand,
    json: bool,
) -> Result<(), Failure> {
    match command {
        NameCommand::Mkdir {
            mode,
            parents,
            shard,
            paths,
        } => mkdir(client, json, mode, (parents, shard), paths).await,
        NameCommand::Create { mode, paths } => create(client, json, mode, paths).await,
        NameCommand::Stat { paths } => stat(client, json, paths).await,
        NameCommand::Ls { path, long } => ls(client, json, &path, long).await,
        NameCommand::Rm { paths } => remove(client, json, paths, false).await,
        NameCommand::Rmdir { paths } => remove(client, json, paths, true).await,
        NameCommand::Mv {
            no_replace,
            exchange,
            src,
            dst,
        } => mv(client, json, &src, &dst, rename_how(no_replace, exchange)).await,
        NameCommand::Ln {
            symbolic,
            target,
            link,
        } => ln(client, json, &target, &link, symbolic).await,
        NameCommand::Readlink { path } => readlink(client, json, &path).await,
        NameCommand::Mknod {
            mode,
            path,
            node,
            major,
            minor,
        } => {
            let rdev = makedev(major.unwrap_or(0), minor.unwrap_or(0));
            mknod(client, json, &path, node.kind(), mode, rdev).await
        }
        NameCommand::Setattr {
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
