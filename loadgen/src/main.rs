//! `loadgen`: drives an mds server and prints what it measured, starting with the create-rate
//! line of the 2008 report: `Rate: N creates/sec (total: T threads C creates S secs)`.
//!
//! Exit status: 0 when the run finished with no unexpected errors; 1 when it saw unexpected
//! errors or the server stayed away past `--reconnect-timeout`; 2 when it could not start.
//! With `--json -` the JSON is all of stdout and the text report goes to stderr.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod report;
mod run;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use mds_client::ConnectOptions;
use mds_client::auth::AuthKey;
use mds_client::tls::TlsClient;

use run::{Plan, Stop};
use workload::{Kind, Mix};

#[derive(Parser)]
#[command(
    name = "loadgen",
    version,
    about = "Load generator for the mds metadata server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create files: each thread in its own directory under --dir (or all in --dir with
    /// --shared-dir).
    Create(Common),
    /// Create directories.
    Mkdir(Common),
    /// GETATTR the files a create run made.
    Stat(Common),
    /// LOOKUP the files a create run made, by name.
    Lookup(Common),
    /// Remove the files a create run made (each once; the run ends when none are left).
    Unlink(Common),
    /// READDIR the directories, page after page.
    Readdir(Common),
    /// Hard-link the files a create run made, each in turn, under new names beside them.
    Link(Common),
    /// Create symbolic links beside the files a create run made, each naming one of them (a
    /// fixed target in a directory that held none).
    Symlink(Common),
    /// Set user.loadgen (--xattr-size bytes) on the files a create run made, each in turn.
    Setxattr {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        xattr: XattrArgs,
    },
    /// Create files and write --size bytes into each: CREATE, OPEN, WRITE in pieces of at
    /// most 64 KiB, RELEASE, counted as one operation per file (with --read-back, READ back
    /// and checked before the RELEASE).
    Write {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        file: FileArgs,
    },
    /// A weighted mix, e.g. --mix create=60,stat=30,unlink=10.
    Mix {
        #[command(flatten)]
        common: Common,
        /// Operation weights: create, mkdir, stat, lookup, unlink, readdir, link, symlink,
        /// setxattr, write.
        #[arg(long)]
        mix: String,
        #[command(flatten)]
        xattr: XattrArgs,
        #[command(flatten)]
        file: FileArgs,
    },
}

#[derive(Args, Clone)]
struct FileArgs {
    /// Bytes each write puts in its new file (e.g. 4096, 4k, 1MiB: k is 1024 here), sent in
    /// pieces of at most 64 KiB.
    #[arg(long, default_value_t = workload::DEFAULT_WRITE_SIZE, value_parser = mds_client::units::parse_bytes)]
    size: u64,
    /// Read each file back after writing it, through the same handle, and check every byte
    /// (a write-then-read benchmark: its rate is files created, written and read per second).
    /// A file that reads back wrong stops the run (exit 1).
    #[arg(long)]
    read_back: bool,
}

impl Default for FileArgs {
    fn default() -> FileArgs {
        FileArgs {
            size: workload::DEFAULT_WRITE_SIZE,
            read_back: false,
        }
    }
}

#[derive(Args, Clone)]
struct XattrArgs {
    /// Bytes in the value each SETXATTR sets on user.loadgen (0 to 65536).
    #[arg(
        long,
        default_value_t = workload::DEFAULT_XATTR_SIZE,
        value_parser = clap::value_parser!(u32).range(0..=mds_proto::MAX_XATTR_VALUE as i64),
    )]
    xattr_size: u32,
}

impl Default for XattrArgs {
    fn default() -> XattrArgs {
        XattrArgs {
            xattr_size: workload::DEFAULT_XATTR_SIZE,
        }
    }
}

#[derive(Args, Clone)]
struct Common {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:7400")]
    server: String,
    /// The shared key file, for a server started with --auth-key (the same file; only its
    /// owner may read it). Every connection answers the server's challenge once, when it
    /// connects or reconnects.
    #[arg(long, env = "MDS_AUTH_KEY")]
    auth_key: Option<PathBuf>,
    /// Speak TLS, trusting the certificates in this PEM file (the CA that signed the server's
    /// certificate, or that certificate itself).
    #[arg(long, env = "MDS_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry. Default: the host part of --server.
    #[arg(long, env = "MDS_TLS_SERVER_NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
    /// Client threads (each with its own directory and connections).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// How long to run (e.g. 300, 10s, 2m; a bare number is seconds). One of --duration or
    /// --count is needed.
    #[arg(long, value_parser = mds_client::units::parse_duration, conflicts_with = "count")]
    duration: Option<Duration>,
    /// Total operations across all threads (e.g. 10000, 100k).
    #[arg(long, value_parser = mds_client::units::parse_count)]
    count: Option<usize>,
    /// Requests each thread keeps in flight.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Connections per thread; a thread's requests are spread over them.
    #[arg(long, default_value_t = 1)]
    conns_per_thread: usize,
    /// Directory to work under.
    #[arg(long, default_value = "/loadgen")]
    dir: String,
    /// All threads work in --dir itself instead of a directory each.
    #[arg(long)]
    shared_dir: bool,
    /// In a cluster (--server any of its servers): thread t works on the t-th of the shards
    /// that have an owner when the run starts, round robin. Its directory under --dir is made
    /// on that shard (a remote directory, MKDIR_REMOTE; one already there must be on it) and
    /// its connections go to that shard's server, so each shard serves its threads' creates;
    /// the report gives each shard's rate, and the server figures add up every shard's.
    #[arg(long, conflicts_with = "shared_dir")]
    spread_shards: bool,
    /// Open loop at this total rate (operations per second, e.g. 400, 5k); the lanes' sends
    /// are staggered evenly, and latency is measured from each request's intended send time.
    #[arg(long, value_parser = mds_client::units::parse_rate)]
    rate: Option<f64>,
    /// Run this long first without counting (e.g. 10s): the operations are done but are not
    /// in the rate, the latencies or the counts; --duration and --count start after it.
    #[arg(long, value_parser = mds_client::units::parse_duration)]
    warmup: Option<Duration>,
    /// Write the full report as JSON (shape: loadgen/schema/report.schema.json); `-` writes it
    /// to stdout and the text report to stderr.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the path of every acknowledged create, one per line (a write's file too, once
    /// its CREATE is answered).
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// No progress bar (on a terminal) or progress lines (otherwise).
    #[arg(long)]
    quiet: bool,
    /// When not on a terminal, print a progress line on stderr this often.
    #[arg(long, default_value = "10s", value_parser = mds_client::units::parse_duration)]
    progress_interval: Duration,
    /// Write each request's intended send time (ns from the start, one a line; the open
    /// loop's schedule): for tests of pacing.
    #[arg(long, hide = true)]
    send_log: Option<PathBuf>,
    /// How long to keep reconnecting when the server goes away.
    #[arg(long, default_value = "30s", value_parser = mds_client::units::parse_duration)]
    reconnect_timeout: Duration,
}

fn plan(
    workload: &str,
    mix: Mix,
    c: Common,
    xattr: XattrArgs,
    file: FileArgs,
) -> anyhow::Result<(Plan, Option<PathBuf>)> {
    let stop = match (c.duration, c.count) {
        (Some(d), None) => Stop::Duration(d),
        (None, Some(n)) => Stop::Count(n as u64),
        (None, None) => anyhow::bail!("give --duration or --count"),
        (Some(_), Some(_)) => unreachable!("clap refuses both"),
    };
    if c.threads == 0 || c.depth == 0 || c.conns_per_thread == 0 {
        anyhow::bail!("--threads, --depth and --conns-per-thread must be at least 1");
    }
    let auth_key = match &c.auth_key {
        Some(path) => Some(Arc::new(AuthKey::from_file(path).context("--auth-key")?)),
        None => None,
    };
    let tls = match &c.tls_ca {
        Some(ca) => Some(Arc::new(
            TlsClient::from_ca_file(ca, c.tls_server_name.as_deref()).context("--tls-ca")?,
        )),
        None => None,
    };
    Ok((
        Plan {
            server: c.server,
            connect: ConnectOptions { auth_key, tls },
            workload: workload.to_owned(),
            mix,
            threads: c.threads,
            depth: c.depth,
            conns_per_thread: c.conns_per_thread.min(c.depth),
            stop,
            dir: c.dir,
            shared_dir: c.shared_dir,
            spread_shards: c.spread_shards,
            rate: c.rate,
            ack_log: c.ack_log,
            quiet: c.quiet,
            reconnect_timeout: c.reconnect_timeout,
            warmup: c.warmup.unwrap_or_default(),
            progress_interval: c.progress_interval,
            send_log: c.send_log,
            xattr_size: xattr.xattr_size as usize,
            write_size: file.size,
            read_back: file.read_back,
        },
        c.json,
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let single = |kind: Kind, c: Common| {
        let (xattr, file) = (XattrArgs::default(), FileArgs::default());
        plan(kind.name(), Mix::single(kind), c, xattr, file)
    };
    let planned = match cli.command {
        Command::Create(c) => single(Kind::Create, c),
        Command::Mkdir(c) => single(Kind::Mkdir, c),
        Command::Stat(c) => single(Kind::Stat, c),
        Command::Lookup(c) => single(Kind::Lookup, c),
        Command::Unlink(c) => single(Kind::Unlink, c),
        Command::Readdir(c) => single(Kind::Readdir, c),
        Command::Link(c) => single(Kind::Link, c),
        Command::Symlink(c) => single(Kind::Symlink, c),
        Command::Setxattr { common, xattr } => {
            let file = FileArgs::default();
            plan("setxattr", Mix::single(Kind::Setxattr), common, xattr, file)
        }
        Command::Write { common, file } => {
            let xattr = XattrArgs::default();
            plan("write", Mix::single(Kind::Write), common, xattr, file)
        }
        Command::Mix {
            common,
            mix,
            xattr,
            file,
        } => Mix::parse(&mix).and_then(|m| plan("mix", m, common, xattr, file)),
    };
    let (plan, json) = match planned {
        Ok(p) => p,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the runtime");
    let report = match rt.block_on(run::run(plan)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            return ExitCode::from(2);
        }
    };
    let json_text = || serde_json::to_string_pretty(&report).expect("the report serialises") + "\n";
    match json {
        // stdout is the JSON alone, so it can be piped into a parser.
        Some(path) if path.as_os_str() == "-" => {
            eprint!("{}", report.text());
            print!("{}", json_text());
        }
        Some(path) => {
            print!("{}", report.text());
            if let Err(e) = std::fs::write(&path, json_text()) {
                eprintln!("loadgen: writing {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
        None => print!("{}", report.text()),
    }
    if report.failure.is_some() || !report.errors.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
