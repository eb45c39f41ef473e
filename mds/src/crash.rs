//! Crash points: test hooks where a server kills itself (SIGKILL, as a power cut would) at one
//! step of an operation that spans two shards, so the tests can show each step's recovery.
//! One point at most is armed, once, at startup (`--inject-crash-at`, hidden); the request
//! path asks [`armed`] and calls [`now`], and no production structure carries the hook — as
//! TiKV's `fail_point!`, a process-wide registry the code under test only reads.

use std::sync::OnceLock;
use std::time::Duration;

use tracing::warn;

/// A step of a MKDIR_REMOTE or a remote RMDIR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CrashPoint {
    /// The child's shard, once the pending directory is durable, before it answers.
    PendingDirCommitted,
    /// The parent's shard, once the child's shard answered, before the entry is made.
    BeforeEntry,
    /// The parent's shard, once the entry is durable, before the client's reply leaves.
    EntryCommitted,
    /// RMDIR: the child's shard, once the directory is durably being removed, before it
    /// answers.
    RmdirPrepared,
    /// RMDIR: the parent's shard, once the child's shard answered, before the entry goes.
    BeforeEntryRemoved,
    /// RMDIR: the parent's shard, once the entry's removal is durable, before the client's
    /// reply leaves.
    EntryRemovedCommitted,
}

static ARMED: OnceLock<CrashPoint> = OnceLock::new();

/// Arms `point` for the life of the process (the first call decides; None arms nothing).
pub fn arm(point: Option<CrashPoint>) {
    if let Some(point) = point {
        let _ = ARMED.set(point);
    }
}

/// Whether the process dies at `point`.
pub fn armed(point: CrashPoint) -> bool {
    ARMED.get() == Some(&point)
}

/// Dies here if `point` is armed.
pub fn now(point: CrashPoint) {
    if armed(point) {
        warn!(?point, "test hook: killing the server (SIGKILL)");
        // SAFETY: kill(2) on this process has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_secs(60));
    }
}
