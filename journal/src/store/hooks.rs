//! The journal's hooks for tests and benchmarks, never set in production: a failure injected
//! into a commit, a close that leaves the edit log as a crash would, and a sync latency
//! emulated for several servers on one disk. Kept apart from the write path so that the
//! commit reads as what production runs: each hook is one call there.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rocksdb::WriteOptions;

use super::Journal;
use super::raw_batch::RawBatch;
use crate::error::{Error, Fault, InjectedFailure, Result};

impl Journal {
    /// Test hook: the commit after `failure.after_commits` successful ones fails with its
    /// fault, and the journal stops, as after a disk error. Never set in production.
    pub fn inject_failure(&mut self, failure: InjectedFailure) {
        self.injected = Some(failure);
    }

    /// Test hook: closes the journal as a crash would leave the edit log: the edits the
    /// checkpointer holds are not written out (the next open does that). Never used in
    /// production.
    pub fn close_without_checkpoint(mut self) {
        if let Some(mut checkpointer) = self.checkpointer.take() {
            let _ = checkpointer.abandon();
        }
    }

    /// Benchmark hook: each commit's synced write takes at least `latency`, as on a device
    /// whose sync takes that long: several servers on one machine's one disk can then be
    /// bound each by a device of its own (`bench/shards.sh`). Never set in production.
    pub fn emulate_sync_latency(&mut self, latency: Duration) {
        self.sync_latency = Some(latency);
    }

    /// Fails the commit about to write `batch` when an injected failure is due
    /// ([`Journal::inject_failure`]): the journal stops as after that fault, and a sync fault
    /// leaves the batch written but never synced.
    pub(super) fn fail_if_injected(&self, batch: &mut RawBatch) -> Result<()> {
        let Some(injected) = self.injected else {
            return Ok(());
        };
        if self.commits.load(Ordering::Relaxed) < injected.after_commits {
            return Ok(());
        }
        self.failed.store(true, Ordering::Release);
        if injected.fault == Fault::Sync {
            // Written, never synced: in the page cache, as after a failed fsync.
            let mut unsynced = WriteOptions::default();
            unsynced.set_sync(false);
            let _ = self.db.write_opt(batch.write_batch(), &unsynced);
        }
        Err(Error::Injected(injected.fault))
    }

    /// Stretches a synced write that began at `started` to the emulated sync latency
    /// ([`Journal::emulate_sync_latency`]), if one is set.
    pub(super) fn wait_out_sync_latency(&self, started: Instant) {
        if let Some(left) = self
            .sync_latency
            .and_then(|latency| latency.checked_sub(started.elapsed()))
        {
            std::thread::sleep(left);
        }
    }
}
