//! Turning what the lanes measured into the [`Report`]: merging their histograms and
//! tallies as each lane ends, asking the server for its figures after the run, and filling in
//! the report's fields (the types and their text and JSON forms live in `crate::report`).

use std::collections::BTreeMap;

use anyhow::Context;
use hdrhistogram::Histogram;
use mds_client::Client;
use mds_proto::StatFs;

use super::lanes::LaneResult;
use super::{Plan, Stop};
use crate::report::{self, Latency, OpCounts, Parameters, Report, ServerFigures};

/// Every lane's results merged so far.
pub(super) struct Totals {
    latency: Histogram<u64>,
    per_op: BTreeMap<String, OpCounts>,
    errors: BTreeMap<String, u64>,
    resent: u64,
    resent_eexist: u64,
}

impl Totals {
    pub(super) fn new() -> Totals {
        Totals {
            latency: report::new_histogram(),
            per_op: BTreeMap::new(),
            errors: BTreeMap::new(),
            resent: 0,
            resent_eexist: 0,
        }
    }

    /// Adds one lane's results.
    pub(super) fn add(&mut self, r: LaneResult) -> anyhow::Result<()> {
        self.latency
            .add(&r.latency)
            .context("merging latency histograms")?;
        for (k, c) in r.per_op {
            let e = self.per_op.entry(k.name().to_owned()).or_default();
            e.ok += c.ok;
            e.errors += c.errors;
        }
        for (k, n) in r.errors {
            *self.errors.entry(k.to_owned()).or_default() += n;
        }
        self.resent += r.resent;
        self.resent_eexist += r.resent_eexist;
        Ok(())
    }
}

/// The server's view of the run; none when it is gone (the run then reports a failure).
pub(super) async fn statfs_after(setup: &Client, server: &str) -> Option<StatFs> {
    match setup.statfs().await {
        Ok(s) => Some(s),
        Err(_) => match Client::connect(server).await {
            // The setup connection may have died in a server restart: ask anew.
            Ok(c) => c.statfs().await.ok(),
            Err(_) => None,
        },
    }
}

/// What the run ended with besides the lanes' totals.
pub(super) struct Outcome {
    pub(super) elapsed: f64,
    pub(super) reconnects: u64,
    pub(super) before: StatFs,
    pub(super) after: Option<StatFs>,
    pub(super) failure: Option<String>,
}

pub(super) fn report(plan: &Plan, totals: Totals, outcome: Outcome) -> Report {
    let Totals {
        latency,
        per_op,
        errors,
        resent,
        resent_eexist,
    } = totals;
    let Outcome {
        elapsed,
        reconnects,
        before,
        after,
        failure,
    } = outcome;
    let ops: u64 = per_op.values().map(|c| c.ok).sum();
    let single = plan.mix.kinds().count() == 1;
    let ops_name = if single {
        plan.mix
            .kinds()
            .next()
            .map(|k| k.plural())
            .unwrap_or("ops")
            .to_owned()
    } else {
        "ops".to_owned()
    };
    let rate = if elapsed > 0.0 {
        ops as f64 / elapsed
    } else {
        0.0
    };
    Report {
        tool: "loadgen",
        version: env!("CARGO_PKG_VERSION"),
        workload: plan.workload.clone(),
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
        },
        ops,
        rate_line: report::rate_line(rate, plan.threads, ops, &ops_name, elapsed),
        ops_name,
        elapsed_secs: elapsed,
        rate_per_sec: rate,
        latency_us: Latency::from_histogram(&latency),
        errors,
        per_op,
        resent,
        resent_eexist,
        reconnects,
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
