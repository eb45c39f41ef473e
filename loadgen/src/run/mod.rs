//! Running a workload: set up the directories, open `--conns-per-thread` connections per
//! thread, start `--depth` lanes per thread, let them issue requests (closed loop, or open
//! loop at `--rate`), show progress, and gather one HDR histogram per lane into the report.
//! The measured window starts after `--warmup` and leaves out the time when every connection
//! was down (that time is reported on its own).
//!
//! This file holds the order of the phases; each phase has its own file: `setup.rs`
//! (connections, directories, existing files, lanes, ack log), `lanes.rs` (the request
//! loops), `files.rs` (a `write`'s requests), `progress.rs` (the progress bar or lines) and
//! `assemble.rs` (lane results into the report). What they all read is below them:
//! `plan.rs` (the run's description) and `shared.rs` (the state the running lanes share).

mod assemble;
mod files;
mod lanes;
mod latency;
mod plan;
mod progress;
mod setup;
mod shared;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use anyhow::Context;
use mds_client::resilient::{Downtime, Outages};

pub use plan::{Plan, Stop};
use shared::Shared;

use crate::report::Report;

pub async fn run(plan: Plan) -> anyhow::Result<Report> {
    let outages = Outages::new();
    let (setup, lanes, spread) = setup::prepare(&plan, &outages).await?;
    let (ack_tx, ack_writer) = match &plan.ack_log {
        Some(path) => {
            let (tx, writer) = setup::AckLog::start(path)?;
            (Some(tx), Some(writer))
        }
        None => (None, None),
    };

    // Spread over shards, the server's figures are every shard's, added up.
    let summed = spread.as_ref().map(|s| assemble::Summed {
        servers: s.servers(),
        connect: plan.connect.clone(),
    });
    let before = match &summed {
        Some(summed) => summed.statfs().await?,
        None => setup.statfs().await?,
    };
    // The setup connection made the directories; from here on only reads are asked, on a
    // connection of their own. A server answering early (`--ack early`) keeps a connected
    // client that changed something in its journal, and after a crash waits for it to come
    // back: an idle setup connection that never reconnects would hold up its recovery.
    let setup = {
        drop(setup);
        plan.connect()
            .await
            .with_context(|| format!("connecting to {}", plan.server))?
    };
    let started = Instant::now();
    let started_wall = SystemTime::now();
    let measure_from = started + plan.warmup;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        budget: AtomicU64::new(match plan.stop {
            Stop::Count(n) => n,
            Stop::Duration(_) => 0,
        }),
        counted: matches!(plan.stop, Stop::Count(_)),
        done: AtomicU64::new(0),
        warmup_done: AtomicU64::new(0),
        measure_from,
        outages: outages.clone(),
        downtime_at_start: std::sync::Mutex::new(None),
        send_log: plan.send_log.is_some(),
        ack_log: ack_tx,
        failure: std::sync::Mutex::new(None),
        latencies: latency::Latencies::new(),
    });
    let tasks = lanes::start(lanes, plan.depth, &plan.mix, &shared, started, plan.rate);

    let progress = progress::start(&plan, shared.clone(), started);
    // The server's figures as the warm-up ends, so they cover the measured window only.
    let at_warmup_end = Arc::new(std::sync::Mutex::new(None));
    // The phases' clock: the warm-up's end, then the measured duration's.
    let phases = {
        let shared = shared.clone();
        let stop = plan.stop;
        let setup = setup.clone();
        let at_warmup_end = at_warmup_end.clone();
        let warmup = !plan.warmup.is_zero();
        let summed = summed.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            *shared.downtime_at_start.lock().unwrap() = Some(outages.downtime(measure_from));
            if warmup {
                let figures = match &summed {
                    Some(summed) => summed.statfs().await.ok(),
                    None => setup.statfs().await.ok(),
                };
                *at_warmup_end.lock().unwrap() = figures;
            }
            if let Stop::Duration(d) = stop {
                tokio::time::sleep_until((measure_from + d).into()).await;
                shared.stop.store(true, Ordering::Relaxed);
            }
        })
    };
    let mut totals = assemble::Totals::new();
    for task in tasks {
        for lane in task.await.context("a lane panicked")? {
            totals.add(lane);
        }
    }
    let ended = Instant::now();
    let ended_wall = SystemTime::now();
    shared.stop.store(true, Ordering::Relaxed);
    phases.abort();
    progress.finish();
    let failure = shared.failure.lock().unwrap().take();
    let latencies = shared.latencies.merged()?;
    let down_at_start = shared.downtime_at_start.lock().unwrap().take();
    let down_at_end = shared.outages.downtime(ended);
    let reconnects = shared.outages.reconnects();
    // The writer ends when the last sender goes: the one in `Shared`.
    let ack_tx = Arc::into_inner(shared).and_then(|s| s.ack_log);
    drop(ack_tx);
    if let Some(writer) = ack_writer {
        writer.finish()?;
    }
    if let Some(path) = &plan.send_log {
        totals.write_send_log(path)?;
    }

    // The measured window, and the time in it when no connection was up.
    let wall = ended.saturating_duration_since(measure_from);
    let down = match down_at_start {
        Some(start) if !wall.is_zero() => Downtime {
            summed: down_at_end.summed.saturating_sub(start.summed),
            all_down: down_at_end.all_down.saturating_sub(start.all_down),
        },
        // The run ended within the warm-up: nothing was measured.
        _ => Downtime::default(),
    };
    // Without a warm-up figure (no warm-up, or the server did not answer then) the server's
    // figures start before the run.
    let before = at_warmup_end.lock().unwrap().take().unwrap_or(before);
    let after = match &summed {
        Some(summed) => summed.statfs().await.ok(),
        None => assemble::statfs_after(&setup, &plan).await,
    };
    let outcome = assemble::Outcome {
        wall,
        down,
        started_at: started_wall + plan.warmup,
        ended_at: ended_wall,
        reconnects,
        before,
        after,
        failure,
    };
    Ok(assemble::report(
        &plan,
        totals,
        &latencies,
        outcome,
        spread.as_ref(),
    ))
}
