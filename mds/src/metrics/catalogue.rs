//! The catalogue: every metric name the server's own handles use, the histogram buckets, the
//! help texts, and the one-time install of the global recorder that holds them. Components
//! register their handles from these names ([`super::handles`]); figures read only at scrape
//! time are named where they are written ([`super::scrape`] and the server's wiring).
//!
//! Names start with `mds_`, carry their unit, counters end in `_total`, and every histogram
//! has explicit buckets — without them the exporter renders summaries, which Grafana cannot
//! aggregate across instances.

use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets, seconds: 10 µs to 10 s, dense from 50 µs to 10 ms where requests,
/// commits (an fdatasync here costs 0.2–0.9 ms) and drains live, so p50 and p99 land in
/// different, narrow buckets rather than in one wide one each.
// Bucket bounds read as a column of decimals; separators inside them would not help.
#[allow(clippy::unreadable_literal)]
pub const LATENCY_BUCKETS: [f64; 27] = [
    0.00001, 0.000025, 0.00005, 0.000075, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075,
    0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0,
];
/// Count buckets (transactions per commit, replies per drain): 1 to 100k.
pub const COUNT_BUCKETS: [f64; 18] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0, 100_000.0,
];

pub const REQUESTS: &str = "mds_requests_total";
pub const REQUEST_DURATION: &str = "mds_request_duration_seconds";
pub const COMMITS: &str = "mds_commits_total";
pub const COMMIT_WRITE_SYNC: &str = "mds_commit_write_sync_duration_seconds";
pub const COMMIT_BUILD: &str = "mds_commit_build_duration_seconds";
pub const COMMIT_GAP_WAIT: &str = "mds_commit_gap_wait_seconds";
pub const COMMIT_TRANSACTIONS: &str = "mds_commit_transactions";
pub const COMMITTED_TRANSACTIONS: &str = "mds_committed_transactions_total";
pub const COMMIT_BYTES: &str = "mds_commit_bytes_total";
pub const FORCED_COMMITS: &str = "mds_forced_commits_total";
pub const COMMIT_SIBLING_WAITS: &str = "mds_commit_sibling_waits_total";
pub const SHARD_OWNED: &str = "mds_shard_owned";
pub const SHARD_EPOCH: &str = "mds_shard_epoch";
pub const LEASE_RENEWAL: &str = "mds_lease_renewal_duration_seconds";
pub const LEASE_TTL: &str = "mds_lease_ttl_seconds";
pub const LEASE_RENEWED_AT: &str = "mds_lease_last_renewal_timestamp_seconds";
pub const CLUSTER_SHARD_OWNED: &str = "mds_cluster_shard_has_owner";
pub const SHARD_MAP_WAITS: &str = "mds_shard_map_waits";
pub const STANDBY_FOLLOWED: &str = "mds_standby_followed_transno";
pub const STANDBY_FOLLOW_LOADS: &str = "mds_standby_follow_loads_total";
pub const STANDBY_FOLLOWING: &str = "mds_standby_following";
pub const STANDBY_FOLLOWED_AT: &str = "mds_standby_last_follow_timestamp_seconds";
pub const REMOTE_DIRS_PENDING: &str = "mds_remote_dirs_pending";
pub const REMOTE_DIRS_SCRUBBED: &str = "mds_remote_dirs_scrubbed_total";
pub const OBJECTS_DELETED: &str = "mds_object_slices_deleted_total";
pub const OBJECT_GARBAGE: &str = "mds_object_garbage_waiting";
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
pub const PERMISSION_DENIED: &str = "mds_permission_denied_total";
pub const COS_WAITING: &str = "mds_cos_waiting_replies";
pub const COS_WAIT: &str = "mds_cos_wait_seconds";
pub const FILE_LOCKS_HELD: &str = "mds_file_locks_held";
pub const FILE_LOCK_WAITING: &str = "mds_file_lock_waiting_requests";
pub const FILE_LOCK_WAIT: &str = "mds_file_lock_wait_seconds";
pub const FILE_LOCK_REQUESTS: &str = "mds_file_lock_requests_total";
pub const UNSAFE_REPLIES: &str = "mds_unsafe_replies";
pub const COMMIT_NOTICES: &str = "mds_commit_notices_total";
pub const REPLAYED: &str = "mds_replayed_requests_total";
pub const SKIPPED: &str = "mds_skipped_transnos_total";
pub const RESENT_ANSWERED: &str = "mds_resent_answered_total";
pub const SESSIONS_EXPIRED: &str = "mds_sessions_expired_total";
pub const READS_PAUSED: &str = "mds_reads_paused_total";
pub const CONNECTIONS_REFUSED: &str = "mds_connections_refused_total";
pub const CONNECTIONS_TIMED_OUT: &str = "mds_connections_timed_out_total";
pub const RECOVERY_DURATION: &str = "mds_recovery_duration_seconds";
pub const RECOVERY_EVICTED: &str = "mds_recovery_evicted_clients_total";
pub const PARTNER_DRAINS: &str = "mds_partner_drains_total";
pub const SERVICE_LOCK_WAIT: &str = "mds_service_lock_wait_seconds";
pub const AUTH_FAILURES: &str = "mds_auth_failures_total";
pub const UNAUTHENTICATED_REFUSED: &str = "mds_unauthenticated_refused_total";
pub const UNAUTHENTICATED: &str = "mds_unauthenticated_connections";
pub const RESEND_FULL: &str = "mds_resend_full_total";
pub const OPEN_REFUSED: &str = "mds_open_refused_total";
pub const SESSIONS_REFUSED: &str = "mds_sessions_refused_total";
pub const CREDENTIALS_REFUSED: &str = "mds_credentials_refused_total";
pub const METRICS_REFUSED: &str = "mds_metrics_connections_refused_total";

/// Lock-wait buckets, seconds: 100 ns to 100 ms. An uncontended acquisition costs tens of
/// nanoseconds, a contended one microseconds, a waiter descheduled behind the holder
/// milliseconds: the latency buckets would put all but the last in their first bucket.
pub const LOCK_WAIT_BUCKETS: [f64; 15] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 5e-3, 0.025,
    0.1,
];

/// Installs the global recorder with its buckets and help texts, once per process, before any
/// component registers its handles; later calls (a test running servers in-process) get the
/// same handle.
pub fn install() -> crate::error::Result<PrometheusHandle> {
    // A lock, not a `OnceLock`: two servers starting at once must not both try to install.
    static HANDLE: parking_lot::Mutex<Option<PrometheusHandle>> = parking_lot::Mutex::new(None);
    let bad =
        |e: metrics_exporter_prometheus::BuildError| crate::error::Error::Metrics(e.to_string());
    let mut installed = HANDLE.lock();
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(SERVICE_LOCK_WAIT.into()), &LOCK_WAIT_BUCKETS)
        .map_err(bad)?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
        .map_err(bad)?
        .set_buckets_for_metric(Matcher::Full(COMMIT_TRANSACTIONS.into()), &COUNT_BUCKETS)
        .map_err(bad)?
        .set_buckets_for_metric(Matcher::Full(DRAIN_REPLIES.into()), &COUNT_BUCKETS)
        .map_err(bad)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| crate::error::Error::Metrics(e.to_string()))?;
    describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// Every series' help text and unit, registered once at install.
fn describe() {
    describe_requests_and_commits();
    describe_partitions();
    describe_sessions_and_security();
    describe_cluster();
    describe_objects();
}

/// The object store's collector (`crate::objects`).
fn describe_objects() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        OBJECTS_DELETED,
        "Slices the object collector deleted from the object store, by source: deleted_file (a deleted file's layout), cut_out (cut out of a live file by a truncate or an overwrite), unnamed (found by listing: uploaded, never committed)."
    );
    describe_gauge!(
        OBJECT_GARBAGE,
        "Deleted files' layouts and cut-out slices waiting for --object-grace before the collector deletes them, at its last round."
    );
}

/// A cluster's server (`--etcd`): its shard, its lease, and every shard's owner as it sees.
fn describe_cluster() {
    use metrics::{describe_gauge, describe_histogram};
    describe_gauge!(
        SHARD_OWNED,
        "1 while this server owns the shard (label shard), by its lease in etcd."
    );
    describe_gauge!(
        SHARD_EPOCH,
        "The epoch of this server's claim on the shard: the etcd revision that created its owner key, written into the store at takeover."
    );
    describe_histogram!(
        LEASE_RENEWAL,
        Unit::Seconds,
        "Time etcd took to answer one renewal of this server's lease."
    );
    describe_gauge!(
        LEASE_TTL,
        Unit::Seconds,
        "The TTL etcd gave this server's lease at its last renewal (at the grant before any)."
    );
    describe_gauge!(
        LEASE_RENEWED_AT,
        Unit::Seconds,
        "Unix time of the last successful renewal of this server's lease: alert when time() minus this nears the TTL."
    );
    describe_gauge!(
        CLUSTER_SHARD_OWNED,
        "Whether each shard of the cluster (label shard) has an owner in etcd, as this server's watch sees it."
    );
    describe_gauge!(
        STANDBY_FOLLOWED,
        "A standby following a shard (--follow; label shard): the last commit of the shard its warm namespace holds. Behind the owner's mds_last_committed_transno by what it has not read yet."
    );
    describe_gauge!(
        STANDBY_FOLLOWING,
        "1 while a following standby (label shard) holds the shard's namespace and reads its owner's log; 0 while it has none (loading it, or failing to), and once it stopped following (it took a shard over, or is stopping)."
    );
    describe_gauge!(
        STANDBY_FOLLOWED_AT,
        Unit::Seconds,
        "Unix time a following standby (label shard) last read its owner's log to the end: every 100 ms while it follows; alert when time() minus this grows while mds_standby_following is 1."
    );
    metrics::describe_counter!(
        STANDBY_FOLLOW_LOADS,
        "Times a standby loaded the shard it follows (label shard): once at start, and again each time it could not follow the owner's log."
    );
    describe_gauge!(
        SHARD_MAP_WAITS,
        "SHARD_MAP_WAIT requests held now, each waiting for a change of the shard map: clients watching the map from this server, each on a connection of its own."
    );
}

/// Requests, commits and the journal.
fn describe_requests_and_commits() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        "Requests answered, by operation and result (ok or the POSIX error)."
    );
    // REQUEST_DURATION is described where it is written (`latency.rs`).
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
        COMMIT_GAP_WAIT,
        Unit::Seconds,
        "Time the committer waited with records in hand because an earlier transno's record had not arrived (its partition took the transno and had not sent the record yet): time every commit was held by one partition."
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
        "Commits asked to start at once, by a SYNC or by a request that built on another client's uncommitted change (commit-on-share), rather than at the commit interval or a full batch."
    );
    describe_counter!(
        COMMIT_SIBLING_WAITS,
        "Small commits that waited a fraction of a sync for one more mutation (--commit-siblings), by outcome: joined (one came and shared the sync) or timed_out."
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
}

/// Each partition: its queue, drains, connections and commit-on-share.
fn describe_partitions() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
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
        "Time from a commit being durable to its partition having queued the released replies for their sockets (per drain; with --reply-path global, per reply released by a service thread)."
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
        "Connections closed for bad input, by kind (oversized, malformed, handshake, tls: a TLS handshake that failed, e.g. a plain-TCP client on a TLS port; forged_replay: a replay no honest client can send during recovery, from a client the journal did not know, without the ticket of its early reply, or past the ceilings)."
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
        "Requests that built on another client's uncommitted change, by operation: each asked for an immediate commit, and its reply waited for it (commit-on-share)."
    );
    describe_counter!(
        PERMISSION_DENIED,
        "Requests refused for permission, by operation: EACCES (a missing read, write or search bit) or EPERM (only the owner or root may; the sticky bit)."
    );
    describe_histogram!(
        COS_WAIT,
        Unit::Seconds,
        "How long replies held back by commit-on-share waited, from their request to their release."
    );
    describe_gauge!(
        FILE_LOCKS_HELD,
        "File locks (fcntl record locks, OFD locks, flock) clients hold now, each range of each owner one."
    );
    describe_gauge!(
        FILE_LOCK_WAITING,
        "SETLK requests asked to wait (F_SETLKW, flock without LOCK_NB) queued now behind a conflicting lock."
    );
    describe_histogram!(
        FILE_LOCK_WAIT,
        Unit::Seconds,
        "How long queued SETLK requests waited, from their queueing to their grant or refusal."
    );
    describe_counter!(
        FILE_LOCK_REQUESTS,
        "SETLK requests by result: granted (at once, unlocks included), conflict (EAGAIN), queued (waited: see mds_file_lock_wait_seconds), deadlock (EDEADLK), refused (no handle or permission, ENOLCK, a bad range)."
    );
}

/// Early replies and recovery, sessions, admission and authentication.
fn describe_sessions_and_security() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        UNSAFE_REPLIES,
        "Replies sent before their commit (--ack early) whose commit is not durable yet."
    );
    describe_counter!(
        COMMIT_NOTICES,
        "Commit notices sent: one per connection per last_committed that covers an early reply."
    );
    describe_counter!(
        REPLAYED,
        "Requests replayed by returning clients during recovery and executed again."
    );
    describe_counter!(
        SKIPPED,
        "Transnos skipped by an empty journal record when the recovery window closed before anyone replayed them."
    );
    describe_counter!(
        RESENT_ANSWERED,
        "Resent mutations answered from their resend record (the original executed, its reply was lost) instead of executed twice."
    );
    describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections refused with EBUSY because their partition had its --max-connections open already."
    );
    describe_counter!(
        CONNECTIONS_TIMED_OUT,
        "Connections closed by the server for silence, by reason: connect (no CONNECT in time) or idle (nothing in flight, nothing sent)."
    );
    describe_counter!(
        READS_PAUSED,
        "Times a connection's requests stopped being executed until there was room, by reason: output (its client reads its replies slower than it sends requests) or uncommitted (the server's executed-but-not-durable mutations reached their cap)."
    );
    describe_counter!(
        SESSIONS_EXPIRED,
        "Sessions forgotten, with their resend records, after their client stayed away longer than --session-expiry."
    );
    describe_gauge!(
        RECOVERY_DURATION,
        Unit::Seconds,
        "How long the last recovery window stayed open, from its opening at start-up to its close (every known client replayed, or --recovery-window passed); 0 while none has closed."
    );
    describe_counter!(
        RECOVERY_EVICTED,
        "Known clients evicted by a recovery window that closed before they finished replaying, by reason: gone (not connected at the close), quiet (connected, but no replay or handle taken back for 5 s after the close), hard_end (still not done three windows after the opening). Each loses its unsafe changes."
    );
    describe_counter!(
        PARTNER_DRAINS,
        "Drains of a partition's reply queue run by its partner because its own drain had not begun within --partner-drain-after of a commit waking it, by the partition drained for (per-CPU reply path)."
    );
    describe_histogram!(
        SERVICE_LOCK_WAIT,
        Unit::Seconds,
        "Time taken to acquire the service-wide reply lock, per acquisition (--reply-path global only): what per-CPU queues remove."
    );
    describe_counter!(
        AUTH_FAILURES,
        "Connections refused at CONNECT, by reason: missing (the challenge got no proof), wrong (a proof under another key), replayed (a proof already accepted on another connection), session (the server keeps a session for the identity and its secret was not proved), credentials (--cred-check owner: no owner the server can learn)."
    );
    describe_counter!(
        UNAUTHENTICATED_REFUSED,
        "Connections in their handshake refused for room, by reason: address or prefix (refused at accept: that address, or its /24 or /64, has its cap of connections in their handshake), or partition (its handshake slots are all taken: the oldest connection still in its handshake, silent ones first, is closed to make room for the new one)."
    );
    describe_gauge!(
        UNAUTHENTICATED,
        "Connections accepted that have not completed their handshake (TLS, CONNECT and its proofs), all partitions."
    );
    describe_counter!(
        RESEND_FULL,
        "Mutations refused with EBUSY because their session keeps as many resend records as it may: its client has not acknowledged the replies of that many executed requests."
    );
    describe_counter!(
        OPEN_REFUSED,
        "OPENs refused because a cap on open handles was reached, by reason: session (EMFILE: the client holds --max-open-per-session) or server (ENFILE: all clients hold --max-open-files)."
    );
    describe_counter!(
        SESSIONS_REFUSED,
        "CONNECTs of a new client identity refused with EBUSY because the server keeps --max-sessions sessions already."
    );
    describe_counter!(
        CREDENTIALS_REFUSED,
        "Requests refused with EPERM by --cred-check owner: credentials other than their connection owner's, on a connection from an unprivileged port without the key."
    );
    describe_counter!(
        METRICS_REFUSED,
        "Connections to the metrics endpoint closed unanswered: too many open at once, or no complete request in time."
    );
    describe_gauge!(
        COS_WAITING,
        "Replies of reads and errors waiting for another client's change to be durable (commit-on-share)."
    );
}
