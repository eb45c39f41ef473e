//! Every metric the server exports, one job a file:
//!
//! - `catalogue`: the names, histogram buckets and help texts, and [`install`], which sets up
//!   the global recorder once per process;
//! - `handles`: what each component registers once and keeps on its hot path
//!   ([`CommitMetrics`], [`PartitionMetrics`]) and the clock drains are timed with;
//! - `latency`: the request-latency histogram, counted per partition and summed at scrape
//!   ([`RequestLatency`], [`write_request_durations`]);
//! - `scrape`: figures read only when Prometheus scrapes ([`ScrapeExtras`], RocksDB, /proc);
//! - `http`: the `/metrics` responder ([`serve`]) that renders both.
//!
//! Callers use the re-exports below (`crate::metrics::X`), not the files.

mod catalogue;
mod handles;
mod http;
mod latency;
mod scrape;

pub use catalogue::{
    AUTH_FAILURES, CLUSTER_SHARD_OWNED, COMMIT_BUILD, COMMIT_BYTES, COMMIT_NOTICES,
    COMMIT_TRANSACTIONS, COMMIT_WRITE_SYNC, COMMITS, COMMITTED_TRANSACTIONS, CONNECTIONS,
    CONNECTIONS_ACCEPTED, CONNECTIONS_REFUSED, CONNECTIONS_TIMED_OUT, COS_CONFLICTS, COS_WAIT,
    COS_WAITING, COUNT_BUCKETS, CREDENTIALS_REFUSED, DRAIN_DURATION, DRAIN_REPLIES, DRAIN_WAKES,
    FILE_LOCK_REQUESTS, FILE_LOCK_WAIT, FILE_LOCK_WAITING, FILE_LOCKS_HELD, FORCED_COMMITS,
    JOURNAL_ERRORS, LAST_COMMITTED, LAST_TRANSNO, LATENCY_BUCKETS, LEASE_RENEWAL, LEASE_RENEWED_AT,
    LEASE_TTL, LOCK_WAIT_BUCKETS, METRICS_REFUSED, OBJECT_GARBAGE, OBJECTS_DELETED, OPEN_REFUSED,
    PARTNER_DRAINS, PERMISSION_DENIED, PROTOCOL_ERRORS, QUEUE_DEPTH, RECOVERY_DURATION,
    RECOVERY_EVICTED, REMOTE_DIRS_PENDING, REMOTE_DIRS_SCRUBBED, REPLAYED, REQUEST_DURATION,
    REQUESTS, RESEND_FULL, SERVICE_LOCK_WAIT, SESSION_RECONNECTS, SESSIONS_EXPIRED,
    SESSIONS_REFUSED, SHARD_EPOCH, SHARD_MAP_WAITS, SHARD_OWNED, SKIPPED, SLOW_CLIENTS,
    STANDBY_FOLLOW_LOADS, STANDBY_FOLLOWED, STANDBY_FOLLOWED_AT, STANDBY_FOLLOWING,
    UNAUTHENTICATED, UNAUTHENTICATED_REFUSED, UNSAFE_REPLIES, install,
};
pub use handles::{CommitMetrics, PartitionMetrics, monotonic_ns};
pub use http::{Health, MAX_CONNECTIONS as METRICS_MAX_CONNECTIONS, serve};
pub use latency::{RequestLatency, write_request_durations};
pub use scrape::{ScrapeExtras, write_family, write_process, write_state, write_store};

/// Now, as Unix seconds: what the `*_timestamp_seconds` gauges hold.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
