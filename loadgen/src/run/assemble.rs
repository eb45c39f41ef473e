//! Turning what the lanes measured into the [`Report`]: merging their tallies as each lane
//! ends and the threads' latency histograms at the end, asking the server for its figures
//! after the run, and filling in the report's fields (the types and their text and JSON
//! forms live in `crate::report`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use anyhow::Context;
use mds_client::resilient::Downtime;
use mds_client::{Client, ConnectOptions, Session};
use mds_proto::StatFs;

use super::lanes::{LaneResult, OpTally};
use super::latency::PerKind;
use super::plan::{Plan, Stop};
use super::setup::Spread;
use crate::report::{self, Latency, OpCounts, Parameters, Report, ServerFigures, ShardPart};
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
    /// Operations answered without error, by shard (`--spread-shards`).
    per_shard: BTreeMap<u16, u64>,
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
            per_shard: BTreeMap::new(),
        }
    }

    /// Adds one lane's results.
    pub(super) fn add(&mut self, r: LaneResult) {
        if let Some(shard) = r.shard {
            *self.per_shard.entry(shard).or_default() +=
                r.per_op.values().map(|c| c.ok).sum::<u64>();
        }
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

/// With `--spread-shards`, where the server's figures come from: every shard's server, asked
/// anew each time, the figures added up.
#[derive(Clone)]
pub(super) struct Summed {
    pub(super) servers: Vec<String>,
    pub(super) connect: ConnectOptions,
}

impl Summed {
    /// The commits and the transactions in them, over every shard (what the ops-per-commit
    /// line needs); the rest of STATFS is left at 0.
    pub(super) async fn statfs(&self) -> anyhow::Result<StatFs> {
        let mut sum = StatFs::default();
        for server in &self.servers {
            let client = Client::connect_with(server, Arc::new(Session::new()), &self.connect)
                .await
                .with_context(|| format!("connecting to {server}"))?;
            let s = client
                .statfs()
                .await
                .with_context(|| format!("STATFS of {server}"))?;
            sum.commits += s.commits;
            sum.committed_transactions += s.committed_transactions;
        }
        Ok(sum)
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

pub(super) fn report(
    plan: &Plan,
    totals: Totals,
    latencies: &PerKind,
    outcome: Outcome,
    spread: Option<&Spread>,
) -> Report {
    let Totals {
        per_op,
        errors,
        resent,
        warmup_ops,
        bytes_written,
        bytes_read,
        sends: _,
        per_shard,
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
    let per_sec = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    let rate = per_sec(ops);
    let shards = spread.map(|s| {
        s.shards
            .iter()
            .map(|at| {
                let ops = per_shard.get(&at.shard).copied().unwrap_or(0);
                let part = ShardPart {
                    server: at.address.clone(),
                    threads: s.of_thread.iter().filter(|&&t| t == at.shard).count(),
                    ops,
                    rate_per_sec: per_sec(ops),
                };
                (at.shard.to_string(), part)
            })
            .collect()
    });
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
            spread_shards: plan.spread_shards,
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
        shards,
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
