//! The handles each component registers once and keeps: the committer's
//! ([`CommitMetrics`]) and one partition's ([`PartitionMetrics`]), plus the monotonic clock
//! the committer and the drains share to time a drain. A stored handle costs ~13 ns per
//! counter increment; a `counter!` lookup by name on the request path would cost ~120 ns
//! (`cargo bench -p mds --bench metrics_overhead`).

use std::time::Duration;

use journal::CommitInfo;
use metrics::{Counter, Gauge, Histogram};

use mds_proto::{Errno, Op};

use super::catalogue::{
    COMMIT_BUILD, COMMIT_BYTES, COMMIT_GAP_WAIT, COMMIT_NOTICES, COMMIT_SIBLING_WAITS,
    COMMIT_TRANSACTIONS, COMMIT_WRITE_SYNC, COMMITS, COMMITTED_TRANSACTIONS, CONNECTIONS,
    CONNECTIONS_ACCEPTED, COS_CONFLICTS, COS_WAIT, COS_WAITING, CREDENTIALS_REFUSED,
    DRAIN_DURATION, DRAIN_REPLIES, DRAIN_WAKES, FORCED_COMMITS, JOURNAL_ERRORS, LAST_COMMITTED,
    LAST_TRANSNO, OPEN_REFUSED, PERMISSION_DENIED, PROTOCOL_ERRORS, QUEUE_DEPTH, READS_PAUSED,
    REPLAYED, REQUESTS, RESEND_FULL, RESENT_ANSWERED, SESSION_RECONNECTS, SLOW_CLIENTS,
    UNSAFE_REPLIES,
};
use super::latency::RequestLatency;

/// Nanoseconds on a process-wide monotonic clock (quanta, ~15 ns a read): what the committer
/// stamps when a commit is durable and the drain subtracts.
pub fn monotonic_ns() -> u64 {
    static BASE: std::sync::OnceLock<quanta::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(quanta::Instant::now);
    quanta::Instant::now().duration_since(base).as_nanos() as u64
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
    /// Time the committer waited, records in hand, for an earlier transno's record.
    pub gap_wait: Histogram,
    /// Small commits that waited for a sibling (`--commit-siblings`): one came, none did.
    pub sibling_joined: Counter,
    pub sibling_timed_out: Counter,
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
            gap_wait: metrics::histogram!(COMMIT_GAP_WAIT),
            sibling_joined: metrics::counter!(COMMIT_SIBLING_WAITS, "outcome" => "joined"),
            sibling_timed_out: metrics::counter!(COMMIT_SIBLING_WAITS, "outcome" => "timed_out"),
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

/// The operations a permission check can refuse (`namespace/ops/mod.rs`): the series of
/// [`PERMISSION_DENIED`] exist for these, from start-up, and for no other.
const PERMISSION_CHECKED: [&str; 15] = [
    "mkdir",
    "create",
    "lookup",
    "setattr",
    "readdir",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "symlink",
    "mknod",
    "setxattr",
    "getxattr",
    "removexattr",
    "open",
];

/// One partition's handles.
pub struct PartitionMetrics {
    /// `[op][result]`.
    requests: Vec<[Counter; RESULTS]>,
    latency: std::sync::Arc<RequestLatency>,
    pub queue_depth: Gauge,
    pub drain_replies: Histogram,
    pub drain_duration: Histogram,
    pub drain_wakes: Counter,
    pub connections: Gauge,
    pub accepted: Counter,
    pub oversized: Counter,
    pub malformed: Counter,
    pub handshake: Counter,
    /// TLS handshakes that failed (a plain-TCP client on a TLS port, an untrusted
    /// certificate on the client's side).
    pub tls: Counter,
    pub slow_clients: Counter,
    /// CONNECTs that replaced an older connection of the same client.
    pub sessions_replaced: Counter,
    /// Commit-on-share conflicts, by opcode.
    cos_conflicts: Vec<Counter>,
    /// Requests refused with EACCES or EPERM, by opcode; `None` for operations no permission
    /// check can refuse.
    permission_denied: Vec<Option<Counter>>,
    /// Replies of reads and errors waiting for another client's commit.
    pub cos_waiting: Gauge,
    /// How long those waited.
    pub cos_wait: Histogram,
    /// Early replies whose commit is not durable yet.
    pub unsafe_replies: Gauge,
    /// Commit notices appended to connections.
    pub commit_notices: Counter,
    /// Replays executed during recovery.
    pub replayed: Counter,
    /// Resent mutations answered from their resend record rather than executed again.
    pub resent_answered: Counter,
    /// Mutations refused because their session keeps as many resend records as it may.
    pub resend_full: Counter,
    /// Requests refused by `--cred-check owner`.
    pub credentials_refused: Counter,
    /// OPENs refused at a cap on open handles: the session's (EMFILE), the server's (ENFILE).
    open_refused: [Counter; 2],
    /// Replays refused as forged during recovery (their connection is closed).
    pub forged_replays: Counter,
    /// Requests under the xid of another the session still holds (`Begin::Reused`).
    pub xid_reused: Counter,
    /// Times a reader stopped executing requests: its client's unwritten replies passed the
    /// high-water mark, or the server's uncommitted work reached its cap.
    pub paused_output: Counter,
    pub paused_uncommitted: Counter,
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
        let latency = RequestLatency::register(Op::NAMES);
        let protocol = |kind: &'static str| metrics::counter!(PROTOCOL_ERRORS, "kind" => kind);
        let sessions_replaced = metrics::counter!(SESSION_RECONNECTS);
        // The series exists from startup, not from the first reconnect, so the dashboard's
        // "Session reconnects" panel shows zero rather than no data. Registering the handle
        // already creates it; adding zero says so, and keeps it if registration ever becomes
        // lazy.
        sessions_replaced.increment(0);
        let paused = |reason: &'static str| {
            let c = metrics::counter!(READS_PAUSED, "reason" => reason);
            c.increment(0);
            c
        };
        let resent_answered = metrics::counter!(RESENT_ANSWERED);
        resent_answered.increment(0);
        let from_start = |name: &'static str| {
            let c = metrics::counter!(name);
            c.increment(0);
            c
        };
        let cos_conflicts = Op::NAMES
            .iter()
            .map(|op| metrics::counter!(COS_CONFLICTS, "op" => *op))
            .collect();
        let permission_denied = Op::NAMES
            .iter()
            .map(|op| {
                PERMISSION_CHECKED.contains(op).then(|| {
                    let c = metrics::counter!(PERMISSION_DENIED, "op" => *op);
                    c.increment(0);
                    c
                })
            })
            .collect();
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
            tls: protocol("tls"),
            slow_clients: metrics::counter!(SLOW_CLIENTS),
            sessions_replaced,
            cos_conflicts,
            permission_denied,
            cos_waiting: metrics::gauge!(COS_WAITING),
            cos_wait: metrics::histogram!(COS_WAIT),
            unsafe_replies: metrics::gauge!(UNSAFE_REPLIES),
            commit_notices: metrics::counter!(COMMIT_NOTICES),
            replayed: metrics::counter!(REPLAYED),
            resent_answered,
            resend_full: from_start(RESEND_FULL),
            credentials_refused: from_start(CREDENTIALS_REFUSED),
            open_refused: ["session", "server"].map(|reason| {
                let c = metrics::counter!(OPEN_REFUSED, "reason" => reason);
                c.increment(0);
                c
            }),
            forged_replays: {
                let c = protocol("forged_replay");
                c.increment(0);
                c
            },
            xid_reused: {
                let c = protocol("xid_reused");
                c.increment(0);
                c
            },
            paused_output: paused("output"),
            paused_uncommitted: paused("uncommitted"),
        }
    }

    /// Counts a request of opcode `op` that built on another client's uncommitted change.
    pub fn cos_conflict(&self, op: u8) {
        self.cos_conflicts[op as usize].increment(1);
    }

    /// Counts one answered request and records its latency. A refusal for permission, or
    /// at a cap on open handles, is also counted as such, here where every answer passes (at
    /// once or after a wait).
    pub fn request(&self, op: usize, result: Result<(), Errno>, latency: Duration) {
        let r = match result {
            Ok(()) => 0,
            Err(e) => {
                if matches!(e, Errno::EACCES | Errno::EPERM)
                    && let Some(denied) = &self.permission_denied[op]
                {
                    denied.increment(1);
                }
                if op == usize::from(mds_proto::opcode::OPEN) {
                    match e {
                        Errno::EMFILE => self.open_refused[0].increment(1),
                        Errno::ENFILE => self.open_refused[1].increment(1),
                        _ => {}
                    }
                }
                1 + Errno::ALL.iter().position(|x| *x == e).unwrap_or(0)
            }
        };
        self.requests[op][r].increment(1);
        // A SHARD_MAP_WAIT's time is the wait its client asked for, not the server's work:
        // recorded, every long-poll would read as a request of up to a minute.
        if op != usize::from(mds_proto::opcode::SHARD_MAP_WAIT) {
            self.latency.record(op, latency);
        }
    }
}
