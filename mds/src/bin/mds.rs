//! `mds`: the metadata server (`mds serve`) and its offline tools (`mds fsck`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mds::config::{CommandLine, Config};

#[derive(Parser)]
#[command(name = "mds", version, about = "A commit-deferred metadata server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a namespace until SIGTERM/SIGINT.
    Serve(Box<Config>),
    /// Check an offline store; exits 1 if anything is wrong, printing each finding.
    Fsck {
        /// Data directory of a stopped server.
        #[arg(long)]
        data: PathBuf,
    },
}

fn main() -> ExitCode {
    mds::server::abort_on_panic();
    tracing_subscriber::fmt()
        .with_env_filter(
            // MDS_LOG first, then the usual RUST_LOG, then info.
            tracing_subscriber::EnvFilter::try_from_env("MDS_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A config file's keys are the defaults its flags override.
    let cli: Cli = match mds::config::parse_command_line(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(CommandLine::Flags(e)) => e.exit(),
        Err(CommandLine::File(e)) => {
            eprintln!("mds: {}", mds::error::chain(&e));
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(config) => match config.resolve().and_then(mds::server::run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mds: {}", mds::error::chain(&e));
                ExitCode::FAILURE
            }
        },
        Command::Fsck { data } => match mds::fsck::check(&data) {
            Ok(report) => {
                for finding in &report.findings {
                    println!("{finding}");
                }
                println!(
                    "{}: {} inodes, {} entries, orphans: {}, {} data blocks ({} bytes), \
                     last_committed {}, {} findings",
                    data.display(),
                    report.inodes,
                    report.entries,
                    report.orphans,
                    report.data_blocks,
                    report.data_bytes,
                    report.last_committed,
                    report.findings.len()
                );
                if report.is_clean() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("mds fsck: {}", mds::error::chain(&e));
                ExitCode::from(2)
            }
        },
    }
}
