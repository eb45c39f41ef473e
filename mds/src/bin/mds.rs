//! `mds`: the metadata server (`mds serve`), its offline tools (`mds fsck`) and a cluster's
//! configuration in etcd (`mds cluster init`, `mds cluster status`).

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
    #[command(group(clap::ArgGroup::new("what").required(true).args(["data", "cluster"])))]
    Fsck {
        /// Data directory of a stopped server.
        #[arg(long)]
        data: Option<PathBuf>,
        /// A stopped cluster's data root (`mds cluster init --data-root`): every shard-N
        /// store in it, and the remote directories' halves across them.
        #[arg(long, value_name = "ROOT")]
        cluster: Option<PathBuf>,
    },
    /// A cluster of shards whose configuration and owners live in etcd.
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Writes a cluster's configuration into etcd, once (a second init is refused).
    Init {
        /// etcd endpoints, HOST:PORT, comma-separated.
        #[arg(long)]
        etcd: String,
        /// The cluster's name: its keys are under /mds/NAME/.
        #[arg(long, default_value = "mds")]
        cluster: String,
        /// Shards 0 to N-1 (shard 0 holds the root).
        #[arg(long)]
        shards: u16,
        /// Shard N's store is DIR/shard-N, on every server that may serve it (an absolute
        /// path).
        #[arg(long)]
        data_root: PathBuf,
        /// Seconds an owner's lease lives without renewal (3 to 600).
        #[arg(long, default_value_t = 5)]
        lease_ttl: u32,
        /// The stores are on storage several hosts mount: an owner commits only while its
        /// lease surely holds (its last renewal's sending time plus the TTL less a margin) and
        /// stops past that, since another host may have claimed the shard; a claimant waits
        /// the TTL and margin again before it opens the store.
        #[arg(long)]
        shared_storage: bool,
    },
    /// Prints the configuration and every shard's owner and epoch.
    Status {
        #[arg(long)]
        etcd: String,
        #[arg(long, default_value = "mds")]
        cluster: String,
    },
    /// Replaces the secret the cluster's servers prove to each other with a fresh random
    /// one: each running server takes it within 10 s, and connections between servers made
    /// from then on must prove it.
    RotatePeerSecret {
        #[arg(long)]
        etcd: String,
        #[arg(long, default_value = "mds")]
        cluster: String,
    },
}

fn cluster_command(command: ClusterCommand) -> ExitCode {
    let done = match command {
        ClusterCommand::Init {
            etcd,
            cluster,
            shards,
            data_root,
            lease_ttl,
            shared_storage,
        } => {
            let config = mds_cluster::ClusterConfig {
                shards,
                data_root,
                lease_ttl_secs: lease_ttl,
                shared_storage,
            };
            mds::cluster::init(&etcd, &cluster, &config).map(|()| {
                println!(
                    "cluster {cluster:?} initialized: {shards} shards, stores under {}",
                    config.data_root.display()
                );
            })
        }
        ClusterCommand::Status { etcd, cluster } => {
            mds::cluster::status(&etcd, &cluster).map(|text| print!("{text}"))
        }
        ClusterCommand::RotatePeerSecret { etcd, cluster } => {
            mds::cluster::rotate_peer_secret(&etcd, &cluster).map(|()| {
                println!(
                    "cluster {cluster:?}: new peer secret written; servers take it within {} s",
                    mds::cluster::PEER_SECRET_REFRESH.as_secs()
                );
            })
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mds cluster: {}", mds::error::chain(&e));
            ExitCode::FAILURE
        }
    }
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
        // A cluster's shard is served by the cluster's supervisor, which runs the server
        // below it; a server of its own is the server alone.
        Command::Serve(config) => match config.resolve().and_then(|config| {
            if config.keys.etcd.is_some() {
                mds::cluster::run(config)
            } else {
                mds::server::run(config)
            }
        }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mds: {}", mds::error::chain(&e));
                ExitCode::FAILURE
            }
        },
        Command::Cluster(command) => cluster_command(command),
        Command::Fsck { data, cluster } => {
            let clean = match (data, cluster) {
                (Some(data), _) => mds::fsck::check(&data).map(|report| {
                    print_fsck(&data, &report);
                    report.is_clean()
                }),
                (None, Some(root)) => mds::fsck::check_cluster(&root).map(|(reports, across)| {
                    for (store, report) in &reports {
                        print_fsck(store, report);
                    }
                    for finding in &across {
                        println!("{finding}");
                    }
                    let findings =
                        across.len() + reports.iter().map(|(_, r)| r.findings.len()).sum::<usize>();
                    println!(
                        "{}: {} shards, {findings} findings",
                        root.display(),
                        reports.len()
                    );
                    findings == 0 && !reports.is_empty()
                }),
                (None, None) => unreachable!("clap requires --data or --cluster"),
            };
            match clean {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("mds fsck: {}", mds::error::chain(&e));
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// One store's findings and its summary line.
fn print_fsck(data: &std::path::Path, report: &mds::fsck::Report) {
    for finding in &report.findings {
        println!("{finding}");
    }
    let remote = if report.remote_entries.is_empty() && report.remote_roots.is_empty() {
        String::new()
    } else {
        format!(
            ", remote directories: {} entries, {} here ({} pending)",
            report.remote_entries.len(),
            report.remote_roots.len(),
            report.pending.len()
        )
    };
    if report.layouts > 0 || report.unnamed_slices.is_some_and(|n| n > 0) {
        let unnamed = report
            .unnamed_slices
            .map_or_else(|| "not listed".to_owned(), |n| n.to_string());
        println!(
            "{}: {} files in objects naming {} slices, {} waiting for the collector, \
             unnamed slices in the store: {unnamed}",
            data.display(),
            report.layouts,
            report.named_slices,
            report.garbage
        );
    }
    println!(
        "{}: {} inodes, {} entries, orphans: {}, {} data blocks ({} bytes), \
         last_committed {}{remote}, {} findings",
        data.display(),
        report.inodes,
        report.entries,
        report.orphans,
        report.data_blocks,
        report.data_bytes,
        report.last_committed,
        report.findings.len()
    );
}
