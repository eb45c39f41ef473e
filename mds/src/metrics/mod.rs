//! Every metric the server exports: names, help texts, histogram buckets, and the handles each
//! component registers once and keeps (a handle costs ~13 ns per counter increment; a
//! `counter!` lookup on the request path would cost ~120 ns).
//!
//! Names start with `mds_`, carry their unit, counters end in `_total`, and every histogram
//! has explicit buckets — without them the exporter renders summaries, which Grafana cannot
//! aggregate across instances.

use std::fmt::Write as _;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use journal::CommitInfo;
use metrics::{Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::debug;

use mds_proto::{Errno, Op};

/// Nanoseconds on a process-wide monotonic clock (quanta, ~15 ns a read): what the committer
/// stamps when a commit is durable and the drain subtracts.
pub fn monotonic_ns() -> u64 {
    static BASE: std::sync::OnceLock<quanta::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(quanta::Instant::now);
    quanta::Instant::now().duration_since(base).as_nanos() as u64
}

/// Latency buckets, seconds: 10 µs to 10 s.
pub const LATENCY_BUCKETS: [f64; 19] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Count buckets (transactions per commit, replies per drain): 1 to 100k.
pub const COUNT_BUCKETS: [f64; 18] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0, 100000.0,
];

pub const REQUESTS: &str = "mds_requests_total";
pub const REQUEST_DURATION: &str = "mds_request_duration_seconds";
pub const COMMITS: &str = "mds_commits_total";
pub const COMMIT_WRITE_SYNC: &str = "mds_commit_write_sync_duration_seconds";
pub const COMMIT_BUILD: &str = "mds_commit_build_duration_seconds";
pub const COMMIT_TRANSACTIONS: &str = "mds_commit_transactions";
pub const COMMITTED_TRANSACTIONS: &str = "mds_committed_transactions_total";
pub const COMMIT_BYTES: &str = "mds_commit_bytes_total";
pub const FORCED_COMMITS: &str = "mds_forced_commits_total";
pub const JOURNAL_ERRORS: &str = "mds_journal_errors_total";
pub const LAST_COMMITTED: &str = "mds_last_committed_transno";
pub const LAST_TRANSNO: &str = "mds_last_assigned_transno";
pub const QUEUE_DEPTH: &str = "mds_partition_queue_depth";
pub const DRAIN_REPLIES: &str = "mds_drain_replies";
pub const DRAIN_DURATION: &str = "mds_drain_duration_seconds";
pub const DRAIN_WAKES: &str = "mds_drain_wakes_total";
pub const CONNECTIONS: &str = "mds_connections";
pub const CONNECTIONS_ACCEPTED: &str = "mds_connections_accepted_total";
pub const PROTOCOL_ERRORS: &str = "mds_protocol_errors_total";
pub const SLOW_CLIENTS: &str = "mds_slow_client_disconnects_total";
pub const SESSION_RECONNECTS: &str = "mds_session_reconnects_total";
pub const COS_CONFLICTS: &str = "mds_cos_conflicts_total";
pub const COS_WAITING: &str = "mds_cos_waiting_requests";
pub const RESEND_REPLIES: &str = "mds_resend_replies_total";

/// Installs the global recorder with its buckets and help texts, once per process, before any
/// component registers its handles; later calls (a test running servers in-process) get the
/// same handle.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    // A lock, not a `OnceLock`: two servers starting at once must not both try to install.
    static HANDLE: parking_lot::Mutex<Option<PrometheusHandle>> = parking_lot::Mutex::new(None);
    let mut installed = HANDLE.lock();
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(COMMIT_TRANSACTIONS.into()), &COUNT_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(DRAIN_REPLIES.into()), &COUNT_BUCKETS)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        "Requests answered, by operation and result (ok or the POSIX error)."
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from a request's arrival to its reply being queued for the socket, by operation; mutations include the wait for their commit."
    );
    describe_counter!(COMMITS, "Group commits written and synced.");
    describe_histogram!(
        COMMIT_WRITE_SYNC,
        Unit::Seconds,
        "Time in RocksDB's synced write of one group commit (WAL append, fsync, memtable)."
    );
    describe_histogram!(
        COMMIT_BUILD,
        Unit::Seconds,
        "Time to encode one group commit's write batch."
    );
    describe_histogram!(
        COMMIT_TRANSACTIONS,
        "Transactions (mutations) per group commit."
    );
    describe_counter!(COMMITTED_TRANSACTIONS, "Transactions made durable.");
    describe_counter!(
        COMMIT_BYTES,
        Unit::Bytes,
        "Bytes of write batches committed."
    );
    describe_counter!(
        FORCED_COMMITS,
        "Commits started early on request (SYNC, commit-on-share conflicts, shutdown)."
    );
    describe_counter!(
        JOURNAL_ERRORS,
        "Journal write or sync failures (the server turns read-only at the first)."
    );
    describe_gauge!(LAST_COMMITTED, "Every transno up to this one is durable.");
    describe_gauge!(
        LAST_TRANSNO,
        "The last transno handed out; minus last_committed, the commit lag."
    );
    describe_gauge!(
        QUEUE_DEPTH,
        "Replies waiting for their commit in one partition's queue."
    );
    describe_histogram!(
        DRAIN_REPLIES,
        "Replies released by one drain of one partition."
    );
    describe_histogram!(
        DRAIN_DURATION,
        Unit::Seconds,
        "Time from a commit being durable to its partition having queued the released replies for their sockets."
    );
    describe_counter!(
        DRAIN_WAKES,
        "Drains run by a partition (at most one per partition per commit)."
    );
    describe_gauge!(CONNECTIONS, "Open client connections, by partition.");
    describe_counter!(
        CONNECTIONS_ACCEPTED,
        "Client connections accepted, by partition."
    );
    describe_counter!(
        PROTOCOL_ERRORS,
        "Connections closed for bad input, by kind (oversized, malformed, handshake)."
    );
    describe_counter!(
        SLOW_CLIENTS,
        "Connections closed because their unread replies passed the output bound."
    );
    describe_counter!(
        SESSION_RECONNECTS,
        "CONNECTs with a client identity that already had a connection, which they replaced."
    );
    describe_counter!(
        COS_CONFLICTS,
        "Requests that touched another client's uncommitted change (commit-on-share)."
    );
    describe_gauge!(
        COS_WAITING,
        "Requests waiting for a commit-on-share lock to be released."
    );
    describe_counter!(
        RESEND_REPLIES,
        "Resent requests answered from their resend record."
    );
}

/// The committer's handles.
pub struct CommitMetrics {
    pub commits: Counter,
    pub forced: Counter,
    pub errors: Counter,
    write_sync: Histogram,
    build: Histogram,
    transactions: Histogram,
    committed: Counter,
    bytes: Counter,
    last_committed: Gauge,
    last_transno: Gauge,
}

impl CommitMetrics {
    pub fn register() -> Self {
        CommitMetrics {
            commits: metrics::counter!(COMMITS),
            forced: metrics::counter!(FORCED_COMMITS),
            errors: metrics::counter!(JOURNAL_ERRORS),
            write_sync: metrics::histogram!(COMMIT_WRITE_SYNC),
            build: metrics::histogram!(COMMIT_BUILD),
            transactions: metrics::histogram!(COMMIT_TRANSACTIONS),
            committed: metrics::counter!(COMMITTED_TRANSACTIONS),
            bytes: metrics::counter!(COMMIT_BYTES),
            last_committed: metrics::gauge!(LAST_COMMITTED),
            last_transno: metrics::gauge!(LAST_TRANSNO),
        }
    }

    pub fn record_commit(&self, info: &CommitInfo, last_transno: u64) {
        self.commits.increment(1);
        self.write_sync.record(info.write_sync.as_secs_f64());
        self.build.record(info.build.as_secs_f64());
        self.transactions.record(info.transactions as f64);
        self.committed.increment(info.transactions as u64);
        self.bytes.increment(info.bytes as u64);
        self.last_committed.set(info.last_committed as f64);
        self.last_transno.set(last_transno as f64);
    }
}

/// Index of "ok" in the result dimension of [`PartitionMetrics::requests`]; errno `i` is at
/// `1 + i` in [`Errno::ALL`] order.
const RESULTS: usize = 1 + Errno::ALL.len();

/// One partition's handles.
pub struct PartitionMetrics {
    /// `[op][result]`.
    requests: Vec<[Counter; RESULTS]>,
    latency: Vec<Histogram>,
    pub queue_depth: Gauge,
    pub drain_replies: Histogram,
    pub drain_duration: Histogram,
    pub drain_wakes: Counter,
    pub connections: Gauge,
    pub accepted: Counter,
    pub oversized: Counter,
    pub malformed: Counter,
    pub handshake: Counter,
    pub slow_clients: Counter,
    /// CONNECTs that replaced an older connection of the same client.
    pub sessions_replaced: Counter,
}

impl PartitionMetrics {
    pub fn register(partition: usize) -> Self {
        let p = partition.to_string();
        let requests = Op::NAMES
            .iter()
            .map(|op| {
                std::array::from_fn(|r| {
                    let result = if r == 0 {
                        "ok"
                    } else {
                        Errno::ALL[r - 1].name()
                    };
                    metrics::counter!(REQUESTS, "op" => *op, "result" => result)
                })
            })
            .collect();
        let latency = Op::NAMES
            .iter()
            .map(|op| metrics::histogram!(REQUEST_DURATION, "op" => *op))
            .collect();
        let protocol = |kind: &'static str| metrics::counter!(PROTOCOL_ERRORS, "kind" => kind);
        // Series that exist from the start even before anything happens, so that dashboards
        // show zero rather than no data.
        metrics::counter!(COS_CONFLICTS).absolute(0);
        metrics::gauge!(COS_WAITING).set(0.0);
        metrics::counter!(RESEND_REPLIES).absolute(0);
        PartitionMetrics {
            requests,
            latency,
            queue_depth: metrics::gauge!(QUEUE_DEPTH, "partition" => p.clone()),
            drain_replies: metrics::histogram!(DRAIN_REPLIES, "partition" => p.clone()),
            drain_duration: metrics::histogram!(DRAIN_DURATION, "partition" => p.clone()),
            drain_wakes: metrics::counter!(DRAIN_WAKES, "partition" => p.clone()),
            connections: metrics::gauge!(CONNECTIONS, "partition" => p.clone()),
            accepted: metrics::counter!(CONNECTIONS_ACCEPTED, "partition" => p),
            oversized: protocol("oversized"),
            malformed: protocol("malformed"),
            handshake: protocol("handshake"),
            slow_clients: metrics::counter!(SLOW_CLIENTS),
            sessions_replaced: metrics::counter!(SESSION_RECONNECTS),
        }
    }

    /// Counts one answered request and records its latency.
    pub fn request(&self, op: usize, result: Result<(), Errno>, latency: Duration) {
        let r = match result {
            Ok(()) => 0,
            Err(e) => 1 + Errno::ALL.iter().position(|x| *x == e).unwrap_or(0),
        };
        self.requests[op][r].increment(1);
        self.latency[op].record(latency.as_secs_f64());
    }
}

/// Serves `GET /metrics` (Prometheus text format) on `listener` until the task is dropped:
/// the exporter's rendering plus `extras`. A listener of our own, rather than the exporter's,
/// so the server can bind port 0 and log the address it got.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    extras: ScrapeExtras,
) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        // Without upkeep, histogram samples pile up in the recorder (CRATES.md).
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handle = handle.clone();
        let extras = extras.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut read = 0;
            // Read until the end of the request head; bodies are not expected.
            while read < buf.len() {
                match stream.read(&mut buf[read..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => read += n,
                }
                if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..read]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, ctype, body) = if head.starts_with("GET ")
                && (path == "/metrics" || path.starts_with("/metrics?"))
            {
                let mut text = handle.render();
                extras(&mut text);
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
            } else if head.starts_with("GET ") && path == "/" {
                (
                    "200 OK",
                    "text/plain; charset=utf-8",
                    "mds: metrics at /metrics\n".to_owned(),
                )
            } else {
                (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "not found\n".to_owned(),
                )
            };
            debug!(%peer, path, status, "metrics request");
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Figures read only when Prometheus scrapes (RocksDB properties, process figures, total
/// pending replies), appended to the exporter's text by [`serve`]. They are rendered here
/// rather than through `metrics` handles because they are floating-point counters (CPU and
/// stall seconds), which `metrics` counters (u64) cannot carry in base units, and because
/// reading them costs nothing between scrapes.
pub type ScrapeExtras = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Appends one metric family in Prometheus text format.
pub fn write_family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// RocksDB's sizes and counters, read per column family.
pub fn write_store(out: &mut String, stats: &journal::StoreStats) {
    let per_cf = |pick: fn(&(&'static str, u64, u64, u64)) -> u64| -> Vec<(String, f64)> {
        stats
            .families
            .iter()
            .map(|f| (format!("cf=\"{}\"", f.0), pick(f) as f64))
            .collect()
    };
    let families = [
        (
            "mds_rocksdb_estimated_keys",
            "RocksDB's estimate of keys, by column family.",
            per_cf(|f| f.1),
        ),
        (
            "mds_rocksdb_live_sst_bytes",
            "Live SST file bytes, by column family.",
            per_cf(|f| f.2),
        ),
        (
            "mds_rocksdb_memtable_bytes",
            "Memtable bytes, by column family.",
            per_cf(|f| f.3),
        ),
    ];
    for (name, help, samples) in &families {
        let samples: Vec<(&str, f64)> = samples.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        write_family(out, name, "gauge", help, &samples);
    }
    write_family(
        out,
        "mds_rocksdb_stall_seconds_total",
        "counter",
        "Time RocksDB stalled writes.",
        &[("", stats.stall_micros as f64 / 1e6)],
    );
    write_family(
        out,
        "mds_rocksdb_wal_syncs_total",
        "counter",
        "WAL syncs RocksDB performed.",
        &[("", stats.wal_syncs as f64)],
    );
}

/// The process's CPU time, resident memory, open descriptors and threads, from /proc.
pub fn write_process(out: &mut String) {
    let Some(p) = process_figures() else { return };
    write_family(
        out,
        "mds_process_cpu_seconds_total",
        "counter",
        "User and system CPU time of the mds process.",
        &[("", p.cpu_seconds)],
    );
    write_family(
        out,
        "mds_process_resident_memory_bytes",
        "gauge",
        "Resident memory of the mds process.",
        &[("", p.resident_bytes)],
    );
    write_family(
        out,
        "mds_process_open_fds",
        "gauge",
        "Open file descriptors of the mds process.",
        &[("", p.open_fds)],
    );
    write_family(
        out,
        "mds_process_threads",
        "gauge",
        "Threads of the mds process.",
        &[("", p.threads)],
    );
}

struct ProcessFigures {
    cpu_seconds: f64,
    resident_bytes: f64,
    open_fds: f64,
    threads: f64,
}

fn process_figures() -> Option<ProcessFigures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // SAFETY: sysconf has no memory effects.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
        )
    };
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // After ")": state is index 0, so utime (14th field) is 11, stime 12, num_threads 17,
    // rss 21.
    Some(ProcessFigures {
        cpu_seconds: (field(11)? + field(12)?) / ticks,
        threads: field(17)?,
        resident_bytes: field(21)? * page,
        open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
    })
}
