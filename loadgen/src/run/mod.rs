//! Running a workload: set up the directories, open `--conns-per-thread` connections per
//! thread, start `--depth` lanes per thread, let them issue requests (closed loop, or open
//! loop at `--rate`), show progress, and gather one HDR histogram per lane into the report.
//! The measured window starts after `--warmup` and leaves out the time when every connection
//! was down (that time is reported on its own).
//!
//! This file holds the plan and the order of the phases; each phase has its own file:
//! `setup.rs` (connections, directories, existing files, lanes, ack log), `lanes.rs` (the
//! request loops), `files.rs` (a `write`'s requests), `progress.rs` (the progress bar or lines) and `assemble.rs` (lane results
//! into the report).

mod assemble;
mod files;
mod lanes;
mod latency;
mod progress;
mod setup;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use mds_client::ConnectOptions;
use mds_client::resilient::{Downtime, Outages};

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
// Its bools are the command line's switches, one each.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Debug)]
pub struct Plan {
    pub server: String,
    /// TLS and the shared key, for every connection of the run (reconnects too).
    pub connect: ConnectOptions,
    pub workload: String,
    pub mix: Mix,
    pub threads: usize,
    pub depth: usize,
    pub conns_per_thread: usize,
    pub stop: Stop,
    pub dir: String,
    pub shared_dir: bool,
    /// Each thread on a shard of the cluster, round robin (`--spread-shards`).
    pub spread_shards: bool,
    pub rate: Option<f64>,
    pub ack_log: Option<PathBuf>,
    pub quiet: bool,
    pub reconnect_timeout: Duration,
    /// Run this long first without counting anything.
    pub warmup: Duration,
    /// How often to print a progress line when there is no terminal for the bar.
    pub progress_interval: Duration,
    /// Write every request's send time here (nanoseconds from the start, one a line): how the
    /// tests see the open loop's pacing.
    pub send_log: Option<PathBuf>,
    /// Bytes of the value each `setxattr` sets.
    pub xattr_size: usize,
    /// Bytes each `write` puts in its new file.
    pub write_size: u64,
    /// Each `write` reads its file back and checks it.
    pub read_back: bool,
}

impl Plan {
    /// What the lanes' requests carry.
    fn payloads(&self) -> lanes::Payloads {
        lanes::Payloads {
            xattr_size: self.xattr_size,
            file: files::FileWork {
                size: self.write_size,
                read_back: self.read_back,
            },
        }
    }

    /// A new client (a fresh identity) on the server, as the run's options say.
    pub async fn connect(&self) -> mds_client::Result<mds_client::Client> {
        let session = Arc::new(mds_client::Session::new());
        mds_client::Client::connect_with(&self.server, session, &self.connect).await
    }
}

/// What the whole run shares.
struct Shared {
    stop: AtomicBool,
    /// Operations left to start in a `--count` run.
    budget: AtomicU64,
    counted: bool,
    /// Counted operations answered so far, and warm-up ones.
    done: AtomicU64,
    warmup_done: AtomicU64,
    /// The end of the warm-up: requests intended from then on count.
    measure_from: Instant,
    outages: Arc<Outages>,
    /// Down time as of `measure_from` (what the warm-up saw), once it has passed.
    downtime_at_start: std::sync::Mutex<Option<Downtime>>,
    send_log: bool,
    ack_log: Option<std::sync::mpsc::Sender<String>>,
    failure: std::sync::Mutex<Option<String>>,
    latencies: latency::Latencies,
}

impl Shared {
    /// Takes the right to start one more counted operation.
    fn take_one(&self) -> bool {
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
