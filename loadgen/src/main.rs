//! `loadgen`: drives an mds server and prints what it measured, starting with the create-rate
//! line of the 2008 report: `Rate: N creates/sec (total: T threads C creates S secs)`.
//!
//! Exit status: 0 when the run finished with no unexpected errors; 1 when it saw unexpected
//! errors or the server stayed away past `--reconnect-timeout`; 2 when it could not start.

mod report;
mod run;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
    /// A weighted mix, e.g. --mix create=60,stat=30,unlink=10.
    Mix {
        #[command(flatten)]
        common: Common,
        /// Operation weights: create, mkdir, stat, lookup, unlink, readdir.
        #[arg(long)]
        mix: String,
    },
}

#[derive(Args, Clone)]
struct Common {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:7400")]
    server: String,
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
    /// Open loop at this total rate (operations per second); latency is measured from each
    /// request's intended send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Write the full report as JSON (shape: loadgen/schema/report.schema.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the path of every acknowledged create, one per line.
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// How long to keep reconnecting when the server goes away.
    #[arg(long, default_value = "30s", value_parser = mds_client::units::parse_duration)]
    reconnect_timeout: Duration,
}

fn plan(workload: &str, mix: Mix, c: Common) -> anyhow::Result<(Plan, Option<PathBuf>)> {
    let stop = match (c.duration, c.count) {
        (Some(d), None) => Stop::Duration(d),
        (None, Some(n)) => Stop::Count(n as u64),
        (None, None) => anyhow::bail!("give --duration or --count"),
        (Some(_), Some(_)) => unreachable!("clap refuses both"),
    };
    if c.threads == 0 || c.depth == 0 || c.conns_per_thread == 0 {
        anyhow::bail!("--threads, --depth and --conns-per-thread must be at least 1");
    }
    if let Some(r) = c.rate
        && !(r > 0.0 && r.is_finite())
    {
        anyhow::bail!("--rate must be a positive number of operations per second");
    }
    Ok((
        Plan {
            server: c.server,
            workload: workload.to_owned(),
            mix,
            threads: c.threads,
            depth: c.depth,
            conns_per_thread: c.conns_per_thread.min(c.depth),
            stop,
            dir: c.dir,
            shared_dir: c.shared_dir,
            rate: c.rate,
            ack_log: c.ack_log,
            quiet: c.quiet,
            reconnect_timeout: c.reconnect_timeout,
        },
        c.json,
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let planned = match cli.command {
        Command::Create(c) => plan("create", Mix::single(Kind::Create), c),
        Command::Mkdir(c) => plan("mkdir", Mix::single(Kind::Mkdir), c),
        Command::Stat(c) => plan("stat", Mix::single(Kind::Stat), c),
        Command::Lookup(c) => plan("lookup", Mix::single(Kind::Lookup), c),
        Command::Unlink(c) => plan("unlink", Mix::single(Kind::Unlink), c),
        Command::Readdir(c) => plan("readdir", Mix::single(Kind::Readdir), c),
        Command::Mix { common, mix } => Mix::parse(&mix).and_then(|m| plan("mix", m, common)),
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
    print!("{}", report.text());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).expect("the report serialises");
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("loadgen: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.failure.is_some() || !report.errors.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
