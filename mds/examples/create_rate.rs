//! A short create workload through the client library: N clients, each creating files in its
//! own directory with `--depth` requests in flight, for `--duration` seconds; prints the rate
//! in the 2008 report's format and the server's mutations per commit. (`loadgen` is the full
//! tool; this is the smallest honest driver of the client library.)
//!
//! Run: `cargo run --release -p mds --example create_rate -- --server 127.0.0.1:7400`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use mds::client::{Client, ROOT};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    server: String,
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 64)]
    threads: usize,
    /// Requests each client keeps in flight.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run_id = std::process::id();
    let setup = Client::connect(args.server.as_str(), u64::from(run_id) << 32).await?;
    let top = match setup
        .mkdir(ROOT, &format!("create-rate.{run_id}"), 0o755)
        .await
    {
        Ok(a) => a.ino,
        Err(_) => {
            setup
                .lookup(ROOT, &format!("create-rate.{run_id}"))
                .await?
                .ino
        }
    };
    let before = setup.statfs().await?;
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..args.threads {
        let client = Client::connect(
            args.server.as_str(),
            u64::from(run_id) << 32 | (t as u64 + 1),
        )
        .await?;
        let dir = client.mkdir(top, &format!("t{t}"), 0o755).await?.ino;
        for lane in 0..args.depth {
            let (client, stop, created) = (client.clone(), stop.clone(), created.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    client.create(dir, &format!("f{lane}.{n}"), 0o644).await?;
                    created.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                anyhow::Ok(())
            }));
        }
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let total = created.load(Ordering::Relaxed);
    let after = setup.statfs().await?;
    println!(
        "Rate: {:.2} creates/sec (total: {} threads {} creates {} secs)",
        total as f64 / secs,
        args.threads,
        total,
        secs.round() as u64
    );
    let commits = after.commits - before.commits;
    if commits > 0 {
        println!(
            "server: {:.1} mutations per commit over {commits} commits",
            (after.committed_transactions - before.committed_transactions) as f64 / commits as f64
        );
    }
    Ok(())
}
