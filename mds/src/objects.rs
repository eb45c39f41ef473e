//! The object collector: deletes from the object store what no committed layout names any
//! more, after `--object-grace`. Three sources, each checked against the store's committed
//! state only:
//!
//! - deleted files (`layout_gone/` records): every slice of the layout they left;
//! - slices a truncate or an overwrite cut out of a live file's layout (`garbage/` records);
//! - a listing of the object store: a slice of this shard's range, below the durable slice
//!   counter, that no layout names and that is older than the grace — an upload whose
//!   WRITE_SLICES never committed (a mount that died between the two, or a crash of the
//!   server before the commit).
//!
//! What it deleted is forgotten (`CommitMsg::Collected`) with the next write after the
//! deletion, so a crash between the two deletes again, which a store answers as done. The
//! grace is the bound on how long a client may hold an uploaded slice before its WRITE_SLICES:
//! a mount sends it right after the upload.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use journal::{Journal, JournalOp};
use mds_objects::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::committer::{CommitMsg, ToCommitter};
use crate::metrics::{OBJECT_GARBAGE, OBJECTS_DELETED};
use crate::namespace::unix_now;

/// The collector's work: where, what to compare with, and how long to wait.
pub struct Collector {
    pub store: Store,
    pub journal: Arc<Journal>,
    pub commit_tx: ToCommitter,
    pub grace: Duration,
    /// Slice ids this shard hands out: the listing touches no other.
    pub slices: Range<u64>,
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Slices deleted for deleted files, for cut-out pieces, and found by the listing.
    pub of_deleted_files: u64,
    pub cut_out: u64,
    pub unnamed: u64,
    /// Records still waiting for their grace.
    pub waiting: u64,
}

impl Collector {
    /// The object store's address as clients open it.
    pub fn address(&self) -> String {
        self.store.address().text()
    }

    /// Rounds every quarter of the grace (1 s to 1 min) until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let every = (self.grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let deleted = |source: &'static str| metrics::counter!(OBJECTS_DELETED, "source" => source);
        for source in ["deleted_file", "cut_out", "unnamed"] {
            deleted(source).increment(0);
        }
        metrics::gauge!(OBJECT_GARBAGE).set(0.0);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            match self.round().await {
                Ok(round) => {
                    deleted("deleted_file").increment(round.of_deleted_files);
                    deleted("cut_out").increment(round.cut_out);
                    deleted("unnamed").increment(round.unnamed);
                    metrics::gauge!(OBJECT_GARBAGE).set(round.waiting as f64);
                    if round.unnamed > 0 {
                        info!(
                            slices = round.unnamed,
                            "object collector: deleted slices no layout names"
                        );
                    }
                }
                Err(e) => warn!(error = %e, "object collector: round failed; trying again later"),
            }
        }
    }

    /// One round: the journaled records past their grace, then the listing.
    pub async fn round(&self) -> Result<Round, String> {
        let now = unix_now();
        let grace = self.grace.as_secs();
        let due = |since: u64| now.saturating_sub(since) >= grace;
        let journal = self.journal.clone();
        let (gone, garbage) = tokio::task::spawn_blocking(move || {
            Ok::<_, journal::Error>((journal.gone_layouts()?, journal.garbage()?))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let mut round = Round::default();
        let mut forget = Vec::new();
        for (ino, since) in gone {
            if !due(since) {
                round.waiting += 1;
                continue;
            }
            let layout = self
                .journal
                .layout(ino)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            let mut seen = HashSet::new();
            for p in layout.iter().filter(|p| seen.insert(p.slice)) {
                self.delete(p.slice, p.slice_size).await?;
                round.of_deleted_files += 1;
            }
            forget.push(JournalOp::DeleteLayout(ino));
        }
        for (slice, size, since) in garbage {
            if !due(since) {
                round.waiting += 1;
                continue;
            }
            self.delete(slice, size).await?;
            round.cut_out += 1;
            forget.push(JournalOp::DeleteGarbage(slice));
        }
        if !forget.is_empty() && self.commit_tx.offer(CommitMsg::Collected(forget)).is_err() {
            return Ok(round); // shutting down: the next start deletes them again
        }
        round.unnamed = self.unnamed(now, grace).await?;
        Ok(round)
    }

    /// Deletes the slices of this shard's range that no committed layout names, older than
    /// the grace and below the durable slice counter (an id at or above it was never handed
    /// out: not ours to judge).
    async fn unnamed(&self, now: u64, grace: u64) -> Result<u64, String> {
        let listing = self.store.list().await.map_err(|e| e.to_string())?;
        let journal = self.journal.clone();
        let (named, next) = tokio::task::spawn_blocking(move || {
            let mut named = HashSet::new();
            journal.scan_layouts(|_, layout| {
                named.extend(layout.iter().map(|p| p.slice));
                Ok(())
            })?;
            Ok::<_, journal::Error>((named, journal.next_slice()?.unwrap_or(0)))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let mut deleted = 0;
        let mut done = HashSet::new();
        for block in &listing.blocks {
            let old = now.saturating_sub(u64::try_from(block.modified).unwrap_or(0)) >= grace;
            let ours = self.slices.contains(&block.id) && block.id < next;
            if !ours || !old || named.contains(&block.id) || done.contains(&block.id) {
                continue;
            }
            // Every block of the slice up to the last one the listing has.
            let last = listing
                .blocks
                .iter()
                .filter(|b| b.id == block.id)
                .map(|b| u64::from(b.block))
                .max()
                .unwrap_or(0);
            self.delete(block.id, (last + 1) * mds_objects::BLOCK)
                .await?;
            done.insert(block.id);
            deleted += 1;
        }
        Ok(deleted)
    }

    async fn delete(&self, slice: u64, size: u64) -> Result<(), String> {
        self.store
            .delete_slice(slice, size)
            .await
            .map_err(|e| format!("deleting slice {slice:016x}: {e}"))
    }
}
