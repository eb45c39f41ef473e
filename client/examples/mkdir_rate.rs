//! Times MKDIR against MKDIR_REMOTE through a cluster's router, side by side in one run:
//! `COUNT` local directories (in the root, on shard 0), then `COUNT` remote ones (the root's
//! entry, the inode on shard `SHARD`), one at a time from `CLIENTS` tasks, and prints the
//! rate of each and their ratio. `bench/remote-mkdir.sh` starts the cluster it runs against.
//!   cargo run --release --example mkdir_rate -- ADDR [COUNT] [CLIENTS] [SHARD]

use std::sync::Arc;
use std::time::Instant;

use mds_client::{ConnectOptions, ROOT, Router};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .ok_or("usage: mkdir_rate ADDR [COUNT] [CLIENTS] [SHARD]")?;
    let count: usize = args.get(1).map_or(Ok(2000), |a| a.parse())?;
    let clients: usize = args.get(2).map_or(Ok(4), |a| a.parse())?;
    let shard: u16 = args.get(3).map_or(Ok(1), |a| a.parse())?;
    let mut rates = Vec::new();
    for (what, on) in [("local mkdir", None), ("remote mkdir", Some(shard))] {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let router = Arc::new(Router::connect(addr, &ConnectOptions::default()).await?);
            let tag = what.split(' ').next().unwrap_or("d").to_owned();
            tasks.push(tokio::spawn(async move {
                for i in (c..count).step_by(clients) {
                    let name = format!("{tag}-{i}");
                    match on {
                        Some(shard) => router.mkdir_on(ROOT, &name, 0o755, shard).await?,
                        None => router.mkdir(ROOT, &name, 0o755).await?,
                    };
                }
                Ok::<_, mds_client::ClientError>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let secs = started.elapsed().as_secs_f64();
        let rate = count as f64 / secs;
        println!(
            "{what}: {count} in {secs:.2} s, {rate:.0}/s ({clients} clients, one at a time each)"
        );
        rates.push(rate);
    }
    println!("remote/local: {:.2}", rates[1] / rates[0]);
    Ok(())
}
