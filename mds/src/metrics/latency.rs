//! The request-latency histogram, `mds_request_duration_seconds{op}`, kept by the server
//! rather than by the `metrics` exporter: each partition owns its own table of bucket counters
//! ([`RequestLatency`]), a request adds one to the bucket its latency falls in, and a scrape
//! sums the tables and writes the family itself ([`write_request_durations`]).
//!
//! Why not the exporter's histogram: it keeps every sample — each `record` pushes the value
//! onto a shared, epoch-managed list that a scrape drains into buckets — and that push was
//! ~300 instructions of every request's (counted with callgrind at 64 x 16:
//! `PartitionMetrics::request` 319 a create), with every partition pushing onto the same
//! list. Here a request finds its bucket among the 27 bounds by binary search on integer
//! nanoseconds and makes two relaxed atomic adds to counters only its partition writes (a
//! partner's drain may also write them, which is why they are atomics). The text is the one
//! the exporter wrote: the same name, labels, bounds (`LATENCY_BUCKETS`), `_sum` in seconds
//! and `_count`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::catalogue::{LATENCY_BUCKETS, REQUEST_DURATION};

/// The help text of [`REQUEST_DURATION`].
const HELP: &str = "Time from a request's arrival to its reply being queued for the socket, by operation; mutations include the wait for their commit.";

/// [`LATENCY_BUCKETS`] in nanoseconds, each rounded to the nearest.
const BOUNDS_NS: [u64; LATENCY_BUCKETS.len()] = {
    let mut ns = [0; LATENCY_BUCKETS.len()];
    let mut i = 0;
    while i < ns.len() {
        ns[i] = (LATENCY_BUCKETS[i] * 1e9 + 0.5) as u64;
        i += 1;
    }
    ns
};

/// Every table registered in this process; a scrape sums them. Like the exporter's registry,
/// which holds every handle for the process's life, a table stays once registered (a server
/// registers one a partition, once).
static TABLES: Mutex<Vec<Arc<RequestLatency>>> = Mutex::new(Vec::new());

/// One operation's counts: per bucket (not cumulative; the last is above every bound) and the
/// sum of the latencies.
struct OpCounts {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

/// One partition's latency counts, by operation (indexed as `Op::NAMES`).
pub struct RequestLatency {
    ops: Box<[OpCounts]>,
    names: &'static [&'static str],
}

impl RequestLatency {
    /// A table for the operations `names` (a partition's, indexed by opcode), registered for
    /// the scrape.
    pub fn register(names: &'static [&'static str]) -> Arc<RequestLatency> {
        let table = Arc::new(RequestLatency::new(names));
        TABLES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::clone(&table));
        table
    }

    fn new(names: &'static [&'static str]) -> RequestLatency {
        RequestLatency {
            ops: names
                .iter()
                .map(|_| OpCounts {
                    buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                    sum_ns: AtomicU64::new(0),
                })
                .collect(),
            names,
        }
    }

    /// Counts one request of operation `op` that took `latency`.
    #[inline]
    pub fn record(&self, op: usize, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let counts = &self.ops[op];
        // The first bound at or above the latency: Prometheus's `le` is inclusive.
        let bucket = BOUNDS_NS.partition_point(|&bound| bound < ns);
        counts.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        counts.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// Appends the `mds_request_duration_seconds` family: every registered table summed, one
/// series per operation of the first table's (every table has the same), cumulative buckets.
/// Nothing when no table is registered (no partition has started).
pub fn write_request_durations(out: &mut String) {
    let tables = TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    render(&tables, out);
}

/// Writes the family for `tables`, summed.
fn render(tables: &[Arc<RequestLatency>], out: &mut String) {
    let Some(first) = tables.first() else {
        return;
    };
    let _ = writeln!(out, "# HELP {REQUEST_DURATION} {HELP}");
    let _ = writeln!(out, "# TYPE {REQUEST_DURATION} histogram");
    for (op, name) in first.names.iter().enumerate() {
        let mut buckets = [0u64; LATENCY_BUCKETS.len() + 1];
        let mut sum_ns = 0u64;
        for table in tables {
            let Some(counts) = table.ops.get(op) else {
                continue;
            };
            for (total, count) in buckets.iter_mut().zip(&counts.buckets) {
                *total += count.load(Ordering::Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(counts.sum_ns.load(Ordering::Relaxed));
        }
        let mut cumulative = 0;
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&buckets) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{REQUEST_DURATION}_bucket{{op=\"{name}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += buckets[LATENCY_BUCKETS.len()];
        let _ = writeln!(
            out,
            "{REQUEST_DURATION}_bucket{{op=\"{name}\",le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            out,
            "{REQUEST_DURATION}_sum{{op=\"{name}\"}} {}",
            sum_ns as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "{REQUEST_DURATION}_count{{op=\"{name}\"}} {cumulative}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The cumulative count of series `op` at bound `le` in `text`.
    fn bucket(text: &str, op: &str, le: &str) -> u64 {
        let prefix = format!("{REQUEST_DURATION}_bucket{{op=\"{op}\",le=\"{le}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn bounds_are_the_buckets_in_nanoseconds() {
        assert_eq!(BOUNDS_NS[0], 10_000);
        assert_eq!(BOUNDS_NS[1], 25_000);
        assert_eq!(BOUNDS_NS[LATENCY_BUCKETS.len() - 1], 10_000_000_000);
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    proptest! {
        /// Whatever the latencies, each cumulative bucket counts those at or below its bound
        /// (`le` is inclusive, as the exporter counted), `+Inf` and `_count` count them all,
        /// and `_sum` is their total in seconds. The operation names are this test's own, so
        /// tables other tests register (they add to other series) do not change these.
        #[test]
        fn buckets_count_what_is_at_or_below_each_bound(
            latencies in proptest::collection::vec(
                prop_oneof![0u64..20_000_000_000, proptest::sample::select(BOUNDS_NS.to_vec())],
                0..200,
            ),
        ) {
            let names: &'static [&'static str] = &["idle", "busy"];
            // Two partitions' tables, summed by the scrape.
            let one = Arc::new(RequestLatency::new(names));
            let two = Arc::new(RequestLatency::new(names));
            for (i, ns) in latencies.iter().enumerate() {
                let table = if i % 2 == 0 { &one } else { &two };
                table.record(1, Duration::from_nanos(*ns));
            }
            let mut text = String::new();
            render(&[one, two], &mut text);
            for (bound, le) in BOUNDS_NS.iter().zip(LATENCY_BUCKETS) {
                let expected = latencies.iter().filter(|ns| *ns <= bound).count() as u64;
                prop_assert_eq!(bucket(&text, names[1], &le.to_string()), expected);
                prop_assert_eq!(bucket(&text, names[0], &le.to_string()), 0);
            }
            let all = latencies.len() as u64;
            prop_assert_eq!(bucket(&text, names[1], "+Inf"), all);
            let count = format!("{REQUEST_DURATION}_count{{op=\"{}\"}} {all}", names[1]);
            prop_assert!(text.lines().any(|l| l == count), "{}", count);
            let sum: u64 = latencies.iter().sum();
            let line = format!("{REQUEST_DURATION}_sum{{op=\"{}\"}} {}", names[1], sum as f64 / 1e9);
            prop_assert!(text.lines().any(|l| l == line), "{}", line);
        }
    }
}
