//! Running a workload: set up the directories, open `--conns-per-thread` connections per
//! thread, start `--depth` lanes per thread, let them issue requests (closed loop, or open
//! loop at `--rate`), show progress, and gather one HDR histogram per lane into the report.
//!
//! This file holds the plan and the order of the phases; each phase has its own file:
//! `setup.rs` (connections, directories, existing files, lanes, ack log), `lanes.rs` (the
//! request loops), `progress.rs` (the progress bar) and `assemble.rs` (lane results into the
//! report).

mod assemble;
mod lanes;
mod progress;
mod setup;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::report::Report;
use crate::workload::Mix;

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    Duration(Duration),
    /// Total successful-or-failed operations across all threads.
    Count(u64),
}

/// A run's full description.
#[derive(Clone, Debug)]
pub struct Plan {
    pub server: String,
    pub workload: String,
    pub mix: Mix,
    pub threads: usize,
    pub depth: usize,
    pub conns_per_thread: usize,
    pub stop: Stop,
    pub dir: String,
    pub shared_dir: bool,
    pub rate: Option<f64>,
    pub ack_log: Option<PathBuf>,
    pub quiet: bool,
    pub reconnect_timeout: Duration,
}

/// What the whole run shares.
struct Shared {
    stop: AtomicBool,
    /// Operations left to start in a `--count` run.
    budget: AtomicU64,
    counted: bool,
    done: AtomicU64,
    reconnects: Arc<AtomicU64>,
    ack_log: Option<std::sync::mpsc::Sender<String>>,
    failure: std::sync::Mutex<Option<String>>,
}

impl Shared {
    /// Takes the right to start one more operation.
    fn start_one(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        if self.counted {
            return self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok();
        }
        true
    }
}

pub async fn run(plan: Plan) -> anyhow::Result<Report> {
    let reconnects = Arc::new(AtomicU64::new(0));
    let (setup, lanes) = setup::prepare(&plan, &reconnects).await?;
    let (ack_tx, ack_writer) = match &plan.ack_log {
        Some(path) => {
            let (tx, writer) = setup::AckLog::start(path)?;
            (Some(tx), Some(writer))
        }
        None => (None, None),
    };

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        budget: AtomicU64::new(match plan.stop {
            Stop::Count(n) => n,
            Stop::Duration(_) => 0,
        }),
        counted: matches!(plan.stop, Stop::Count(_)),
        done: AtomicU64::new(0),
        reconnects: reconnects.clone(),
        ack_log: ack_tx,
        failure: std::sync::Mutex::new(None),
    });
    let before = setup.statfs().await?;
    let started = Instant::now();
    let tasks = lanes::start(lanes, &plan.mix, &shared, started, plan.rate);

    let progress = progress::progress_bar(&plan, shared.clone(), started);
    if let Stop::Duration(d) = plan.stop {
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            shared.stop.store(true, Ordering::Relaxed);
        });
    }
    let mut totals = assemble::Totals::new();
    for task in tasks {
        totals.add(task.await.context("a lane panicked")?)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    let failure = shared.failure.lock().unwrap().take();
    // The writer ends when the last sender goes: the one in `Shared`.
    let ack_tx = Arc::into_inner(shared).and_then(|s| s.ack_log);
    drop(ack_tx);
    if let Some(writer) = ack_writer {
        writer.finish()?;
    }

    let after = assemble::statfs_after(&setup, &plan.server).await;
    let outcome = assemble::Outcome {
        elapsed,
        reconnects: reconnects.load(Ordering::Relaxed),
        before,
        after,
        failure,
    };
    Ok(assemble::report(&plan, totals, outcome))
}
