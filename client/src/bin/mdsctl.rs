//! `mdsctl`: the mds client by hand. Paths are absolute and resolved by LOOKUP from the root.
//!
//! Output is text for people, or with `-o json` one JSON document on stdout per run. Exit
//! status: 0 done; 1 the server (or the path check) answered with a POSIX error, whose name
//! (e.g. `ENOENT`) is printed on stderr; 2 bad usage (clap's); 3 the server could not be
//! reached, did not answer within `--timeout`, closed the connection, or sent something this
//! client does not understand.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use mds_client::auth::AuthKey;
use mds_client::proto::{Attr, DirEntry, Errno, Kind, SetAttr, StatFs};
use mds_client::tls::TlsClient;
use mds_client::units::parse_duration;
use mds_client::{Client, ClientError, ConnectOptions, Session};
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
                  stderr); 2 bad usage; 3 the server could not be reached, did not answer \
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
    let client = Client::connect_with(&cli.server, Arc::new(Session::new()), &options)
        .await
        .map_err(at(format!("connect {}", cli.server)))?;
    match cli.command {
        Command::Mkdir {
            mode,
            parents,
            paths,
        } => {
            let mut made = Vec::new();
            for path in paths {
                let attr = if parents {
                    mkdir_p(&client, &path, mode).await.map_err(at(&path))?
                } else {
                    let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                    client.mkdir(parent, name, mode).await.map_err(at(&path))?
                };
                made.push(attr_json(&path, &attr));
            }
            if json {
                print_json(&Value::Array(made));
            }
        }
        Command::Create { mode, paths } => {
            let mut made = Vec::new();
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                let attr = client.create(parent, name, mode).await.map_err(at(&path))?;
                made.push(attr_json(&path, &attr));
            }
            if json {
                print_json(&Value::Array(made));
            }
        }
        Command::Stat { paths } => {
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
        }
        Command::Ls { path, long } => {
            let dir = client.resolve(&path).await.map_err(at(&path))?;
            let entries = client.readdir_all(dir.ino).await.map_err(at(&path))?;
            if json {
                print_json(&Value::Array(entries.iter().map(entry_json).collect()));
            }
            for entry in entries.iter().filter(|_| !json) {
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
            let mut done = Vec::new();
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                client.unlink(parent, name).await.map_err(at(&path))?;
                done.push(json!({ "path": path }));
            }
            if json {
                print_json(&Value::Array(done));
            }
        }
        Command::Rmdir { paths } => {
            let mut done = Vec::new();
            for path in paths {
                let (parent, name) = client.resolve_parent(&path).await.map_err(at(&path))?;
                client.rmdir(parent, name).await.map_err(at(&path))?;
                done.push(json!({ "path": path }));
            }
            if json {
                print_json(&Value::Array(done));
            }
        }
        Command::Mv { src, dst } => {
            let (sp, sn) = client.resolve_parent(&src).await.map_err(at(&src))?;
            let (dp, dn) = client.resolve_parent(&dst).await.map_err(at(&dst))?;
            client
                .rename(sp, sn, dp, dn)
                .await
                .map_err(at(format!("{src} -> {dst}")))?;
            if json {
                print_json(&json!({ "src": src, "dst": dst }));
            }
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
            if json {
                print_json(&attr_json(&path, &attr));
            } else {
                print_attr(&path, &attr);
            }
        }
        Command::Sync => {
            client.sync().await.map_err(at("sync"))?;
            if json {
                print_json(&json!({ "last_committed": client.last_committed() }));
            }
        }
        Command::Status => {
            let s = client.statfs().await.map_err(at("status"))?;
            if json {
                print_json(&status_json(&cli.server, &s));
            } else {
                print_status(&cli.server, &s);
            }
        }
    }
    // A server with early replies (`--ack early`) may have answered before the commit: say
    // so, as a client that goes away now would otherwise not know.
    let unsafe_changes = client.session().unsafe_count();
    if unsafe_changes > 0 {
        eprintln!(
            "mdsctl: {unsafe_changes} change(s) done but not committed yet (the server commits \
             them shortly; `mdsctl sync` waits for that)"
        );
    }
    Ok(())
}

/// `mkdir -p`: the attributes of the last directory, made or found.
async fn mkdir_p(client: &Client, path: &str, mode: u32) -> Result<Attr, ClientError> {
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

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Directory => "directory",
        Kind::File => "file",
    }
}

fn rfc3339(ns: i64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)).to_string()
}

fn attr_json(path: &str, a: &Attr) -> Value {
    json!({
        "path": path,
        "inode": a.ino,
        "kind": kind_name(a.kind),
        "mode": format!("{:04o}", a.mode),
        "uid": a.uid,
        "gid": a.gid,
        "nlink": a.nlink,
        "size": a.size,
        "ctime": rfc3339(a.ctime_ns),
        "ctime_ns": a.ctime_ns,
        "mtime": rfc3339(a.mtime_ns),
        "mtime_ns": a.mtime_ns,
        "generation": a.generation,
    })
}

fn entry_json(e: &DirEntry) -> Value {
    json!({ "name": e.name, "inode": e.ino, "kind": kind_name(e.kind) })
}

fn per_commit(s: &StatFs) -> f64 {
    if s.commits > 0 {
        s.committed_transactions as f64 / s.commits as f64
    } else {
        0.0
    }
}

fn status_json(server: &str, s: &StatFs) -> Value {
    json!({
        "server": server,
        "inodes": s.inodes,
        "directories": s.directories,
        "files": s.files,
        "last_committed": s.last_committed,
        "last_transno": s.last_transno,
        "commits": s.commits,
        "committed_txns": s.committed_transactions,
        "txns_per_commit": per_commit(s),
        "max_txns_per_commit": s.max_transactions_per_commit,
        "partitions": s.partitions,
        "read_only": s.read_only,
        "cos_conflicts": s.cos_conflicts,
    })
}

fn print_status(server: &str, s: &StatFs) {
    println!("server:          {server}");
    println!("inodes:          {}", s.inodes);
    println!("directories:     {}", s.directories);
    println!("files:           {}", s.files);
    println!("last_committed:  {}", s.last_committed);
    println!("last_transno:    {}", s.last_transno);
    println!("commits:         {}", s.commits);
    println!("committed_txns:  {}", s.committed_transactions);
    println!(
        "txns_per_commit: {:.2} (max {})",
        per_commit(s),
        s.max_transactions_per_commit
    );
    println!("partitions:      {}", s.partitions);
    println!("read_only:       {}", s.read_only);
    println!("cos_conflicts:   {}", s.cos_conflicts);
}

fn print_attr(path: &str, a: &Attr) {
    println!("path:       {path}");
    println!("inode:      {}", a.ino);
    println!("kind:       {}", kind_name(a.kind));
    println!("mode:       {:04o}", a.mode);
    println!("uid:        {}", a.uid);
    println!("gid:        {}", a.gid);
    println!("nlink:      {}", a.nlink);
    println!("size:       {}", a.size);
    println!("ctime:      {}", rfc3339(a.ctime_ns));
    println!("mtime:      {}", rfc3339(a.mtime_ns));
    println!("generation: {}", a.generation);
}
