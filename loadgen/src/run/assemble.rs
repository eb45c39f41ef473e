//! Turning what the lanes measured into the [`Report`]: merging their tallies as each lane
//! ends and the threads' latency histograms at the end, asking the server for its figures
//! after the run, and filling in the report's fields (the types and their text and JSON
//! forms live in `crate::report`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use mds_client::Client;
use mds_client::resilient::Downtime;
use mds_proto::StatFs;

use super::lanes::{LaneResult, OpTally};
use super::latency::PerKind;
use super::{Plan, Stop};
use crate::report::{self, Latency, OpCounts, Parameters, Report, ServerFigures};
use crate::workload::Kind;

/// Every lane's results merged so far.
pub(super) struct Totals {
    per_op: BTreeMap<Kind, OpTally>,
    errors: BTreeMap<String, u64>,
    resent: u64,
    warmup_ops: u64,
    bytes_written: u64,
    bytes_read: u64,
    sends: Vec<u64>,
}

impl Totals {
    pub(super) fn new() -> Totals {
        Totals {
            per_op: BTreeMap::new(),
            errors: BTreeMap::new(),
            resent: 0,
            warmup_ops: 0,
            bytes_written: 0,
            bytes_read: 0,
            sends: Vec::new(),
        }
    }

    /// Adds one lane's results.
    pub(super) fn add(&mut self, r: LaneResult) {
        for (k, c) in r.per_op {
            let e = self.per_op.entry(k).or_default();
            e.ok += c.ok;
            e.errors += c.errors;
        }
        for (k, n) in r.errors {
            *self.errors.entry(k.to_owned()).or_default() += n;
        }
        self.resent += r.resent;
        self.warmup_ops += r.warmup_ops;
        self.bytes_written += r.bytes_written;
        self.bytes_read += r.bytes_read;
        self.sends.extend(r.sends);
    }

    /// Writes every intended send time, in order, one a line (nanoseconds from the run's
    /// start).
    pub(super) fn write_send_log(&mut self, path: &Path) -> anyhow::Result<()> {
        self.sends.sort_unstable();
        let file = std::fs::File::create(path)
            .with_context(|| format!("creating send log {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        for t in &self.sends {
            writeln!(out, "{t}")?;
        }
        out.flush()
            .with_context(|| format!("writing send log {}", path.display()))
    }
}

/// What the Rate line calls the operations: "creates", "stats", …, "ops" for a mix.
pub(super) fn ops_name(plan: &Plan) -> String {
    let mut kinds = plan.mix.kinds();
    match (kinds.next(), kinds.next()) {
        (Some(k), None) => k.plural().to_owned(),
        _ => "ops".to_owned(),
    }
}

/// The server's view of the run; none when it is gone (the run then reports a failure).
pub(super) async fn statfs_after(setup: &Client, plan: &Plan) -> Option<StatFs> {
    match setup.statfs().await {
        Ok(s) => Some(s),
        Err(_) => match plan.connect().await {
            // The setup connection may have died in a server restart: ask anew.
            Ok(c) => c.statfs().await.ok(),
            Err(_) => None,
        },
    }
}

/// What the run ended with besides the lanes' totals.
pub(super) struct Outcome {
    /// The measured window (after the warm-up), wall clock.
    pub(super) wall: Duration,
    /// Time down within it.
    pub(super) down: Downtime,
    pub(super) started_at: SystemTime,
    pub(super) ended_at: SystemTime,
    pub(super) reconnects: u64,
    pub(super) before: StatFs,
    pub(super) after: Option<StatFs>,
    pub(super) failure: Option<String>,
}

pub(super) fn report(plan: &Plan, totals: Totals, latencies: &PerKind, outcome: Outcome) -> Report {
    let Totals {
        per_op,
        errors,
        resent,
        warmup_ops,
        bytes_written,
        bytes_read,
        sends: _,
    } = totals;
    let Outcome {
        wall,
        down,
        started_at,
        ended_at,
        reconnects,
        before,
        after,
        failure,
    } = outcome;
    // Every counted request is in exactly one kind's histogram: their sum is the total.
    let mut latency = report::new_histogram();
    for h in latencies.values() {
        latency.add(h).expect("histograms of one shape");
    }
    let empty = report::new_histogram();
    let per_op: BTreeMap<String, OpCounts> = per_op
        .into_iter()
        .map(|(k, t)| {
            (
                k.name().to_owned(),
                OpCounts {
                    ok: t.ok,
                    errors: t.errors,
                    latency_us: Latency::from_histogram(latencies.get(&k).unwrap_or(&empty)),
                },
            )
        })
        .collect();
    let ops: u64 = per_op.values().map(|c| c.ok).sum();
    let ops_name = ops_name(plan);
    let writes = plan.mix.kinds().any(|k| k == Kind::Write);
    // The rate is over the time some connection was up: while every one was down nothing
    // could be answered, and that time (reported apart) says nothing about the server's pace.
    let elapsed = wall.saturating_sub(down.all_down).as_secs_f64();
    let rate = if elapsed > 0.0 {
        ops as f64 / elapsed
    } else {
        0.0
    };
    Report {
        tool: "loadgen",
        version: env!("CARGO_PKG_VERSION"),
        workload: plan.workload.clone(),
        host: report::hostname(),
        started_at: report::rfc3339(started_at),
        ended_at: report::rfc3339(ended_at),
        parameters: Parameters {
            server: plan.server.clone(),
            threads: plan.threads,
            depth: plan.depth,
            conns_per_thread: plan.conns_per_thread,
            duration_secs: match plan.stop {
                Stop::Duration(d) => Some(d.as_secs_f64()),
                Stop::Count(_) => None,
            },
            count: match plan.stop {
                Stop::Count(n) => Some(n),
                Stop::Duration(_) => None,
            },
            dir: plan.dir.clone(),
            shared_dir: plan.shared_dir,
            rate: plan.rate,
            mix: plan.mix.spec(),
            reconnect_timeout_secs: plan.reconnect_timeout.as_secs_f64(),
            warmup_secs: plan.warmup.as_secs_f64(),
            xattr_size: plan
                .mix
                .kinds()
                .any(|k| k == Kind::Setxattr)
                .then_some(plan.xattr_size),
            size: writes.then_some(plan.write_size),
            read_back: writes.then_some(plan.read_back),
        },
        ops,
        rate_line: report::rate_line(rate, plan.threads, ops, &ops_name, elapsed),
        ops_name,
        elapsed_secs: elapsed,
        wall_secs: wall.as_secs_f64(),
        rate_per_sec: rate,
        latency_us: Latency::from_histogram(&latency),
        errors,
        per_op,
        resent,
        reconnects,
        connections: plan.threads * plan.conns_per_thread,
        disconnected_secs: down.summed.as_secs_f64(),
        all_disconnected_secs: down.all_down.as_secs_f64(),
        warmup_ops,
        bytes_written,
        bytes_read,
        server: after.map(|after| server_figures(&before, &after)),
        failure,
    }
}

fn server_figures(before: &StatFs, after: &StatFs) -> ServerFigures {
    let commits = after.commits.saturating_sub(before.commits);
    let txns = after
        .committed_transactions
        .saturating_sub(before.committed_transactions);
    ServerFigures {
        commits,
        committed_transactions: txns,
        ops_per_commit: if commits > 0 {
            txns as f64 / commits as f64
        } else {
            0.0
        },
    }
}
