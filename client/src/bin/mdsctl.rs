//! `mdsctl`: the mds client by hand. Paths are absolute and resolved by LOOKUP from the root.
//! On a server error it prints the POSIX name (e.g. `ENOENT`) on stderr and exits 1.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use mds_client::proto::{Attr, Kind, SetAttr};
use mds_client::{Client, ClientError};

#[derive(Parser)]
#[command(name = "mdsctl", version, about = "Talk to an mds server by hand")]
struct Cli {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:7400", env = "MDS_SERVER")]
    server: String,
    #[command(subcommand)]
    command: Command,
}

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
    /// Print attributes.
    Stat {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// List a directory, one name per line.
    Ls {
        #[arg(default_value = "/")]
        path: String,
        /// Print inode and kind before each name.
        #[arg(short, long)]
        long: bool,
    },
    /// Remove files.
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
    Mv { src: String, dst: String },
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
    },
    /// Wait until everything the server executed so far is durable.
    Sync,
    /// Print server figures (STATFS).
    Status,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("invalid mode {s:?} (octal, e.g. 755)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err((what, e)) => {
            match e.errno() {
                Some(errno) => eprintln!("mdsctl: {what}: {errno}"),
                None => eprintln!("mdsctl: {what}: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}

type Failure = (String, ClientError);

fn at(what: impl Into<String>) -> impl FnOnce(ClientError) -> Failure {
    let what = what.into();
    move |e| (what, e)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let client = Client::connect(cli.server.as_str())
        .await
        .map_err(at(format!("connect {}", cli.server)))?;
    match cli.command {
        Command::Mkdir {
            mode,
            parents,
            paths,
        } => {
            for path in paths {
                if parents {
                    mkdir_p(&client, &path, mode).await.map_err(at(&path))?;
                } else {
                    let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                    client.mkdir(parent, name, mode).await.map_err(at(&path))?;
                }
            }
        }
        Command::Create { mode, paths } => {
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                client.create(parent, name, mode).await.map_err(at(&path))?;
            }
        }
        Command::Stat { paths } => {
            for path in paths {
                let attr = client.resolve(&path).await.map_err(at(&path))?;
                print_attr(&path, &attr);
            }
        }
        Command::Ls { path, long } => {
            let dir = client.resolve(&path).await.map_err(at(&path))?;
            for entry in client.readdir_all(dir.ino).await.map_err(at(&path))? {
                if long {
                    let kind = if entry.kind == Kind::Directory {
                        "d"
                    } else {
                        "-"
                    };
                    println!("{:>10} {kind} {}", entry.ino, entry.name);
                } else {
                    println!("{}", entry.name);
                }
            }
        }
        Command::Rm { paths } => {
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                client.unlink(parent, name).await.map_err(at(&path))?;
            }
        }
        Command::Rmdir { paths } => {
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                client.rmdir(parent, name).await.map_err(at(&path))?;
            }
        }
        Command::Mv { src, dst } => {
            let (sp, sn) = client.resolve_parent(&src).await.map_err(at(&src))?;
            let (dp, dn) = client.resolve_parent(&dst).await.map_err(at(&dst))?;
            client
                .rename(sp, sn, dp, dn)
                .await
                .map_err(at(format!("{src} -> {dst}")))?;
        }
        Command::Setattr {
            path,
            mode,
            uid,
            gid,
            size,
        } => {
            let ino = client.resolve(&path).await.map_err(at(&path))?.ino;
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                mtime_ns: None,
            };
            let attr = client.setattr(ino, set).await.map_err(at(&path))?;
            print_attr(&path, &attr);
        }
        Command::Sync => client.sync().await.map_err(at("sync"))?,
        Command::Status => {
            let s = client.statfs().await.map_err(at("status"))?;
            println!("server:          {}", cli.server);
            println!("inodes:          {}", s.inodes);
            println!("directories:     {}", s.directories);
            println!("files:           {}", s.files);
            println!("last_committed:  {}", s.last_committed);
            println!("last_transno:    {}", s.last_transno);
            println!("commits:         {}", s.commits);
            println!("committed_txns:  {}", s.committed_transactions);
            let per = if s.commits > 0 {
                s.committed_transactions as f64 / s.commits as f64
            } else {
                0.0
            };
            println!(
                "txns_per_commit: {per:.2} (max {})",
                s.max_transactions_per_commit
            );
            println!("partitions:      {}", s.partitions);
            println!("read_only:       {}", s.read_only);
            println!("cos_conflicts:   {}", s.cos_conflicts);
        }
    }
    Ok(())
}

async fn mkdir_p(client: &Client, path: &str, mode: u32) -> Result<(), ClientError> {
    let mut ino = mds_client::ROOT;
    for name in mds_client::components(path)? {
        ino = match client.lookup(ino, name).await {
            Ok(attr) if attr.kind == Kind::Directory => attr.ino,
            Ok(_) => return Err(ClientError::Errno(mds_client::proto::Errno::ENOTDIR)),
            Err(e) if e.errno() == Some(mds_client::proto::Errno::ENOENT) => {
                match client.mkdir(ino, name, mode).await {
                    Ok(attr) => attr.ino,
                    // Someone else made it meanwhile.
                    Err(e) if e.errno() == Some(mds_client::proto::Errno::EEXIST) => {
                        client.lookup(ino, name).await?.ino
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
    }
    Ok(())
}

fn print_attr(path: &str, a: &Attr) {
    let kind = match a.kind {
        Kind::Directory => "directory",
        Kind::File => "file",
    };
    let time = |ns: i64| {
        humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
    };
    println!("path:       {path}");
    println!("inode:      {}", a.ino);
    println!("kind:       {kind}");
    println!("mode:       {:04o}", a.mode);
    println!("uid:        {}", a.uid);
    println!("gid:        {}", a.gid);
    println!("nlink:      {}", a.nlink);
    println!("size:       {}", a.size);
    println!("ctime:      {}", time(a.ctime_ns));
    println!("mtime:      {}", time(a.mtime_ns));
    println!("generation: {}", a.generation);
}
