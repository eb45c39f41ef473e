//! The run's results: the Rate line in the 2008 report's shape (with fractional seconds, as
//! later mdsrate printed them), latency percentiles from merged HDR histograms (overall and
//! by operation), errors by POSIX code, time disconnected, the server's mutations per commit,
//! and the JSON form (its shape is `loadgen/schema/report.schema.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Everything a run reports; serialised as the `--json` file.
#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    pub workload: String,
    /// The machine loadgen ran on.
    pub host: String,
    /// The measured window (after any warm-up), RFC 3339 UTC.
    pub started_at: String,
    pub ended_at: String,
    pub parameters: Parameters,
    /// Successful operations.
    pub ops: u64,
    /// What `ops` counts, as the Rate line names it ("creates", "stats", "ops" for a mix).
    pub ops_name: String,
    /// The Rate line's seconds: the measured window less the time every connection was down.
    pub elapsed_secs: f64,
    /// The measured window, wall clock.
    pub wall_secs: f64,
    pub rate_per_sec: f64,
    pub rate_line: String,
    pub latency_us: Latency,
    /// Unexpected errors by POSIX name.
    pub errors: BTreeMap<String, u64>,
    /// Successes and errors by operation kind.
    pub per_op: BTreeMap<String, OpCounts>,
    /// Requests resent after a reconnect.
    pub resent: u64,
    pub reconnects: u64,
    /// Connections the lanes used (threads × connections per thread).
    pub connections: usize,
    /// Time each connection spent down (from a break being noticed until it reconnected or
    /// gave up), summed over the connections.
    pub disconnected_secs: f64,
    /// Time when every connection was down at once: left out of `elapsed_secs`.
    pub all_disconnected_secs: f64,
    /// Operations done during the warm-up, counted nowhere else.
    pub warmup_ops: u64,
    /// File data the counted `write`s wrote, and read back (`--read-back`); 0 without them.
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// The server's own figures over the run (STATFS before and after); `None` when the
    /// server could not be asked at the end.
    pub server: Option<ServerFigures>,
    /// With `--spread-shards`, each shard's part of the run, by shard number; `None`
    /// otherwise.
    pub shards: Option<BTreeMap<String, ShardPart>>,
    /// Why the run stopped early, if it did.
    pub failure: Option<String>,
}

/// One shard's part of a run spread over shards: the threads on it and what they did.
#[derive(Debug, Serialize)]
pub struct ShardPart {
    /// Its server when the run started.
    pub server: String,
    pub threads: usize,
    /// Operations answered without error, counted as `ops` is.
    pub ops: u64,
    /// Those over the run's `elapsed_secs`.
    pub rate_per_sec: f64,
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
    pub spread_shards: bool,
    pub rate: Option<f64>,
    pub mix: String,
    pub reconnect_timeout_secs: f64,
    pub warmup_secs: f64,
    /// Bytes of each SETXATTR's value (`--xattr-size`); `None` when the mix sets none.
    pub xattr_size: Option<usize>,
    /// Bytes each `write` puts in its file (`--size`), and whether it reads them back
    /// (`--read-back`); `None` when the mix writes none.
    pub size: Option<u64>,
    pub read_back: Option<bool>,
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
    /// This operation's latency alone.
    pub latency_us: Latency,
}

#[derive(Debug, Default, Serialize)]
pub struct ServerFigures {
    pub commits: u64,
    pub committed_transactions: u64,
    /// Mutations per commit during the run; 0 when nothing was committed.
    pub ops_per_commit: f64,
}

/// `Rate: 3101.77 creates/sec (total: 2 threads 930530 creates 300.12 secs)`: the 2008 line
/// with the seconds to two decimals (whole seconds printed `1000 creates 0 secs` for short
/// runs); every word and its place are as they were.
pub fn rate_line(rate: f64, threads: usize, ops: u64, name: &str, secs: f64) -> String {
    format!("Rate: {rate:.2} {name}/sec (total: {threads} threads {ops} {name} {secs:.2} secs)")
}

/// `t` as RFC 3339 in UTC to the millisecond, e.g. `2026-11-30T09:06:01.250Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): the workspace has no date crate, and loadgen needs only this.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// This machine's name, for telling reports from several load hosts apart.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn latency_text(l: &Latency) -> String {
    format!(
        "p50 {} p90 {} p99 {} p99.9 {} max {} (mean {:.0}, {} samples)",
        l.p50, l.p90, l.p99, l.p99_9, l.max, l.mean, l.samples
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
        let _ = writeln!(out, "latency (us): {}", latency_text(&self.latency_us));
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
            for (k, v) in &self.per_op {
                let _ = writeln!(out, "  {k} latency (us): {}", latency_text(&v.latency_us));
            }
        }
        if self.bytes_written > 0 || self.bytes_read > 0 {
            let per_sec = |bytes: u64| {
                if self.elapsed_secs > 0.0 {
                    bytes as f64 / self.elapsed_secs / f64::from(1 << 20)
                } else {
                    0.0
                }
            };
            let _ = writeln!(
                out,
                "data: {} bytes written ({:.2} MiB/s), {} read back ({:.2} MiB/s)",
                self.bytes_written,
                per_sec(self.bytes_written),
                self.bytes_read,
                per_sec(self.bytes_read)
            );
        }
        if self.parameters.warmup_secs > 0.0 {
            let _ = writeln!(
                out,
                "warm-up: {:.2} secs, {} {} not counted",
                self.parameters.warmup_secs, self.warmup_ops, self.ops_name
            );
        }
        if self.disconnected_secs > 0.0 {
            let _ = writeln!(
                out,
                "disconnected: {:.2} secs summed over {} connections; all down {:.2} secs, \
                 left out of the Rate line's {:.2} of {:.2} secs",
                self.disconnected_secs,
                self.connections,
                self.all_disconnected_secs,
                self.elapsed_secs,
                self.wall_secs
            );
        }
        if self.resent > 0 || self.reconnects > 0 {
            let _ = writeln!(
                out,
                "reconnects: {}, resent: {}",
                self.reconnects, self.resent
            );
        }
        if let Some(shards) = &self.shards {
            let list: Vec<String> = shards
                .iter()
                .map(|(shard, p)| {
                    format!(
                        "{shard} {:.2}/sec ({} {} by {} threads, {})",
                        p.rate_per_sec, p.ops, self.ops_name, p.threads, p.server
                    )
                })
                .collect();
            let _ = writeln!(out, "shards: {}", list.join("; "));
        }
        match &self.server {
            Some(s) => {
                let every = if self.shards.is_some() {
                    ", every shard's"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "server: {:.1} ops per commit ({} mutations in {} commits{every})",
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
            rate_line(3101.7666, 2, 930_530, "creates", 300.123),
            "Rate: 3101.77 creates/sec (total: 2 threads 930530 creates 300.12 secs)"
        );
        // A short run: the old line said `0 secs` beside a rate of thousands.
        assert_eq!(
            rate_line(2380.95, 1, 1000, "creates", 0.42),
            "Rate: 2380.95 creates/sec (total: 1 threads 1000 creates 0.42 secs)"
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |secs: u64, millis: u64| {
            rfc3339(UNIX_EPOCH + std::time::Duration::from_millis(secs * 1000 + millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_700_000_000, 250), "2023-11-14T22:13:20.250Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
        assert!(!hostname().is_empty());
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
