//! The run's results: the Rate line exactly as the 2008 report printed it, latency percentiles
//! from merged HDR histograms, errors by POSIX code, the server's mutations per commit, and
//! the JSON form (its shape is `loadgen/schema/report.schema.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Everything a run reports; serialised as the `--json` file.
#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    pub workload: String,
    pub parameters: Parameters,
    /// Successful operations.
    pub ops: u64,
    /// What `ops` counts, as the Rate line names it ("creates", "stats", "ops" for a mix).
    pub ops_name: String,
    pub elapsed_secs: f64,
    pub rate_per_sec: f64,
    pub rate_line: String,
    pub latency_us: Latency,
    /// Unexpected errors by POSIX name.
    pub errors: BTreeMap<String, u64>,
    /// Successes and errors by operation kind.
    pub per_op: BTreeMap<String, OpCounts>,
    /// Requests resent after a reconnect.
    pub resent: u64,
    /// Resent creates or mkdirs answered EEXIST: they had executed before the connection
    /// broke. Counted apart from errors until the server answers resends from its records.
    pub resent_eexist: u64,
    pub reconnects: u64,
    /// The server's own figures over the run (STATFS before and after); `None` when the
    /// server could not be asked at the end.
    pub server: Option<ServerFigures>,
    /// Why the run stopped early, if it did.
    pub failure: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Parameters {
    pub server: String,
    pub threads: usize,
    pub depth: usize,
    pub conns_per_thread: usize,
    pub duration_secs: Option<f64>,
    pub count: Option<u64>,
    pub dir: String,
    pub shared_dir: bool,
    pub rate: Option<f64>,
    pub mix: String,
    pub reconnect_timeout_secs: f64,
}

/// Latency in microseconds, measured from each request's intended send time.
#[derive(Debug, Default, Serialize)]
pub struct Latency {
    pub samples: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            samples: h.len(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct OpCounts {
    pub ok: u64,
    pub errors: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct ServerFigures {
    pub commits: u64,
    pub committed_transactions: u64,
    /// Mutations per commit during the run; 0 when nothing was committed.
    pub ops_per_commit: f64,
}

/// `Rate: 3101.77 creates/sec (total: 2 threads 930530 creates 300 secs)`.
pub fn rate_line(rate: f64, threads: usize, ops: u64, name: &str, secs: f64) -> String {
    format!(
        "Rate: {rate:.2} {name}/sec (total: {threads} threads {ops} {name} {} secs)",
        secs.round() as u64
    )
}

/// A new latency histogram: 1 µs to one hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

impl Report {
    /// The human summary: the Rate line alone on its first line, then the rest.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.rate_line);
        let l = &self.latency_us;
        let _ = writeln!(
            out,
            "latency (us): p50 {} p90 {} p99 {} p99.9 {} max {} (mean {:.0}, {} samples)",
            l.p50, l.p90, l.p99, l.p99_9, l.max, l.mean, l.samples
        );
        if self.errors.is_empty() {
            let _ = writeln!(out, "errors: none");
        } else {
            let list: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(out, "errors: {}", list.join(", "));
        }
        if self.per_op.len() > 1 {
            let list: Vec<String> = self
                .per_op
                .iter()
                .map(|(k, v)| format!("{k} {}", v.ok))
                .collect();
            let _ = writeln!(out, "by op: {}", list.join(", "));
        }
        if self.resent > 0 || self.reconnects > 0 {
            let _ = writeln!(
                out,
                "reconnects: {}, resent: {} ({} resent creates answered EEXIST: they ran before the break; \
                 the server does not answer resends from records yet)",
                self.reconnects, self.resent, self.resent_eexist
            );
        }
        match &self.server {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "server: {:.1} ops per commit ({} mutations in {} commits)",
                    s.ops_per_commit, s.committed_transactions, s.commits
                );
            }
            None => {
                let _ = writeln!(out, "server: unreachable at the end of the run");
            }
        }
        if let Some(f) = &self.failure {
            let _ = writeln!(out, "stopped early: {f}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_line_is_the_2008_format() {
        assert_eq!(
            rate_line(3101.7666, 2, 930530, "creates", 300.2),
            "Rate: 3101.77 creates/sec (total: 2 threads 930530 creates 300 secs)"
        );
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let l = Latency::from_histogram(&h);
        assert_eq!(l.samples, 1000);
        assert!((499..=501).contains(&l.p50), "{}", l.p50);
        assert!((989..=991).contains(&l.p99), "{}", l.p99);
        assert_eq!(l.max, 1000);
        assert_eq!(Latency::from_histogram(&new_histogram()).samples, 0);
    }
}
