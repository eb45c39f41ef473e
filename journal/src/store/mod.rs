//! The journal store: the [`Journal`] over one RocksDB database, what it is opened with, and
//! what it reports. Its work is one `impl Journal` block per file, each owning one part:
//!
//! - `open.rs`: opening a store, with recovery; `claim.rs` admits a cluster's claim, and
//!   `upgrade.rs` brings an older schema current;
//! - `commit.rs`: the group commit, one synced batch per group of transactions;
//! - `clients.rs`: known clients, session bindings and resend slots written between commits;
//! - `ceilings.rs`: the transno and inode-number leases;
//! - `read.rs`: reads of committed state, and the scans of start-up and fsck;
//! - `follow.rs`: a standby's follower of a store another process owns;
//! - `hooks.rs`: failure injection and the other test and benchmark hooks.
//!
//! Below them: `raw_batch.rs` (write batches by hand), `images.rs` (a commit's last inode
//! images) and `edits.rs` (the edit log and its checkpointer). This file keeps what they
//! share: the types, the journal's state, and the edit log's part in every write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocksdb::{ColumnFamily, DB, FlushOptions, WriteBatch, WriteOptions};

use crate::error::{Error, InjectedFailure, Result};
use crate::resend::{ClientResend, ClientSlots};
use crate::schema::{ALL_CFS, CF_META, SECRET_LEN};
use crate::shard::ShardIdentity;
use edits::{Checkpointer, Edit, EditKey};
use raw_batch::{Families, RawBatch};

/// How the journal is opened.
#[derive(Clone, Debug, Default)]
pub struct JournalOptions {
    /// How far past what is durable the server may hand out transnos and inode numbers:
    /// each commit raises the ceilings to this far above it ([`Ceilings`]).
    pub leases: Leases,
    /// The shard of a cluster this open serves, as its server claimed it; None outside a
    /// cluster. Checked against the store's own (`claim.rs`) before anything is written, and
    /// written into it, synced, before the open returns.
    pub shard: Option<ShardIdentity>,
    /// Write each commit's changes to inodes and entries as one edit, and their images at
    /// checkpoints (`store/edits.rs`), rather than a key each in every commit. Not for a
    /// cluster's store ([`Error::EditLogInCluster`]): a standby follows that from RocksDB's
    /// log. Whatever the setting, a writable open first writes out every edit the store holds.
    pub edit_log: Option<EditLog>,
}

/// How the edit log checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EditLog {
    /// Edit bytes gathered before a checkpoint writes their images out.
    pub checkpoint_bytes: usize,
}

impl Default for EditLog {
    fn default() -> EditLog {
        EditLog {
            checkpoint_bytes: edits::CHECKPOINT_BYTES,
        }
    }
}

/// The widths of the transno and inode-number leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leases {
    /// Transnos above the last one committed that the server may hand out.
    pub transnos: u64,
    /// Inode numbers above the highest one in use that the server may hand out.
    pub inos: u64,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            transnos: 1 << 17,
            inos: 1 << 20,
        }
    }
}

/// What the server may hand out: transnos up to and including `transno`, inode numbers below
/// `ino`. Each is on disk before the server may use it, so after a crash they bound every
/// transno and inode number any client may have been told of; they never go down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ceilings {
    pub transno: u64,
    pub ino: u64,
}

/// What recovery found at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Every transno up to this one is durable; the next transaction gets the one after.
    pub last_committed: u64,
    /// The next inode number to hand out (inode numbers are never reused).
    pub next_ino: u64,
    /// Whether this open created the store.
    pub created: bool,
    /// Clients that may hold replies sent before their commit (`--ack early`) and were not
    /// forgotten before the server stopped: after a crash, the ones to wait for.
    pub known_clients: Vec<u64>,
    /// Resend records of requests whose replies the clients may not have received, by
    /// client: a resend of one is answered from its record, also after this restart.
    pub resend: Vec<ClientResend>,
    /// The key the server makes replay tickets with: the same at every open of this store,
    /// so a ticket issued before a crash still proves a replay after it.
    pub replay_key: [u8; SECRET_LEN],
    /// The ceilings on disk at open: no transno above, and no inode number at or above, them
    /// can have been handed out before this open — what bounds every replay after a crash.
    pub ceilings: Ceilings,
    /// The ceilings this open made durable for the new start (a writable open raises them a
    /// lease above `ceilings`: new inode numbers start at `ceilings.ino`); a read-only open
    /// leaves them as they were.
    pub leased: Ceilings,
    /// The session secrets of the clients whose sessions the journal keeps (resend records,
    /// or known): (client, secret), in client order.
    pub sessions: Vec<(u64, [u8; SECRET_LEN])>,
    /// The schema version this open upgraded the store from, if it did.
    pub upgraded_from: Option<u32>,
    /// Resend records an upgrade from before version 9 dropped: their replies are in the
    /// shape of protocol 10 or older, whose clients no server of this build lets connect.
    pub resend_dropped: usize,
    /// The cluster shard the store is (after this open: the claim's epoch); None for a store
    /// made and served outside a cluster, which is shard 0.
    pub shard: Option<ShardIdentity>,
    /// Inode numbers at or above this one are not this store's shard's to hand out.
    pub ino_limit: u64,
    /// The store's schema version as this open found it: older than [`crate::SCHEMA_VERSION`] only
    /// for a read-only open of a store no build of this version has opened for writing.
    pub schema_version: u32,
}

/// What one group commit did.
#[derive(Clone, Copy, Debug)]
pub struct CommitInfo {
    pub last_committed: u64,
    /// Transactions in the batch.
    pub transactions: usize,
    /// Bytes in the RocksDB write batch.
    pub bytes: usize,
    /// The ceilings durable with this commit.
    pub ceilings: Ceilings,
    /// Time to build the write batch (encoding records).
    pub build: Duration,
    /// Time in RocksDB's synced write (WAL append + fsync + memtable insert).
    pub write_sync: Duration,
}

/// Sizes and counters read from RocksDB, for metrics.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    /// Per column family: (name, estimated keys, live SST bytes, memtable bytes).
    pub families: Vec<(&'static str, u64, u64, u64)>,
    /// Microseconds writes were stalled by RocksDB since open.
    pub stall_micros: u64,
    /// WAL syncs since open.
    pub wal_syncs: u64,
    /// The edit log's checkpoints, when the journal writes one.
    pub checkpoints: Option<Checkpoints>,
}

/// What the edit log's checkpointer has done since open.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Checkpoints {
    /// Checkpoints written.
    pub written: u64,
    /// Time they took, in seconds.
    pub seconds: f64,
    /// Edit bytes committed and not yet written out.
    pub held_bytes: u64,
}

/// The journal: a RocksDB database with the mds schema.
pub struct Journal {
    db: Arc<DB>,
    path: PathBuf,
    last_committed: AtomicU64,
    next_ino: AtomicU64,
    commits: AtomicU64,
    failed: AtomicBool,
    options: JournalOptions,
    /// A failure to inject into a commit (tests: [`Journal::inject_failure`]).
    injected: Option<InjectedFailure>,
    /// The least a commit's synced write takes (benchmarks: [`Journal::emulate_sync_latency`]).
    sync_latency: Option<Duration>,
    opts: rocksdb::Options,
    /// Which resend slots each client has on disk (`resend.rs`); the committer's alone.
    resend_slots: Mutex<HashMap<u64, ClientSlots>>,
    /// The durable ceilings (`Ceilings`), raised by each commit.
    transno_ceiling: AtomicU64,
    ino_ceiling: AtomicU64,
    /// The server's inode counter as last reported (`Journal::note_inode_counter`): the ino
    /// ceiling is kept a lease above it, whatever the creates that burned numbers left behind.
    inode_counter: AtomicU64,
    /// Inodes are in the layout of schema version 2 ([`crate::schema::InodeV2`]): a read-only
    /// open of a store no build of version 3 has opened for writing yet.
    v2_inodes: bool,
    /// Entries may be in the layout of schema versions before 5 ([`crate::schema::named_key`]):
    /// a read-only open of a store no build of version 5 has opened for writing yet (or whose
    /// upgrade was cut short), read key by key in the layout each has.
    parent_keyed_dentries: bool,
    /// The families' numbers, which a commit's batch names them by ([`RawBatch`]).
    families: Families,
    /// With the edit log: the thread that writes the edits' images out (writable opens).
    checkpointer: Option<Checkpointer>,
    /// Client changes written between commits as edits of their own, this open: the last
    /// part of their keys ([`EditKey::client`]). The open writes out every edit it
    /// finds before it writes one, so none of an earlier open's is there to meet.
    client_edits: AtomicU64,
}

impl Drop for Journal {
    /// A clean close writes the edits handed over so far into the images.
    fn drop(&mut self) {
        if let Some(mut checkpointer) = self.checkpointer.take() {
            let _ = checkpointer.stop();
        }
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .field("last_committed", &self.last_committed())
            .finish()
    }
}

impl Journal {
    /// Every transno up to this one is durable.
    pub fn last_committed(&self) -> u64 {
        self.last_committed.load(Ordering::Acquire)
    }

    /// Whether an earlier write failed and the journal stopped.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a consistent copy of the store to `dir` (which must not exist yet) while the
    /// store is in use: RocksDB's checkpoint, hard links to the immutable table files where
    /// `dir` is on the same file system and copies of the rest. Everything committed before
    /// the call is in it; call it between commits (the committer does).
    pub fn checkpoint(&self, dir: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }

    /// Writes every memtable to table files and waits for it, so that the next open has no
    /// write-ahead log to replay: for a clean stop, after the last commit. Without it a
    /// restart replays up to `max_total_wal_size` of WAL (RocksDB's close does not flush
    /// while the WAL holds the data) and writes those tables then, at start-up. Refused once
    /// the journal has failed: the next open recovers from the WAL as after a crash. With the
    /// edit log, the edits handed to the checkpointer are written out first.
    pub fn flush(&self) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.write_out()?;
        }
        let families: Vec<&ColumnFamily> = ALL_CFS.iter().map(|name| self.cf(name)).collect();
        let mut wait = FlushOptions::default();
        wait.set_wait(true);
        self.db.flush_cfs_opt(&families, &wait)?;
        Ok(())
    }

    /// Sizes and counters for metrics: per-family key estimates and sizes, stall time, WAL
    /// syncs. Read per column family, or RocksDB reports only the default one.
    pub fn stats(&self) -> StoreStats {
        let prop = |cf: &ColumnFamily, name: &str| {
            self.db
                .property_int_value_cf(cf, name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let families = ALL_CFS
            .iter()
            .filter_map(|name| Some((name, self.db.cf_handle(name)?)))
            .map(|(name, cf)| {
                (
                    *name,
                    prop(cf, "rocksdb.estimate-num-keys"),
                    prop(cf, "rocksdb.live-sst-files-size"),
                    prop(cf, "rocksdb.cur-size-all-mem-tables"),
                )
            })
            .collect();
        StoreStats {
            families,
            stall_micros: self
                .opts
                .get_ticker_count(rocksdb::statistics::Ticker::StallMicros),
            wal_syncs: self
                .opts
                .get_ticker_count(rocksdb::statistics::Ticker::WalFileSynced),
            checkpoints: self.checkpointer.as_ref().map(|c| {
                let progress = &c.progress;
                Checkpoints {
                    written: progress.checkpoints.load(Ordering::Relaxed),
                    seconds: progress.nanos.load(Ordering::Relaxed) as f64 / 1e9,
                    held_bytes: progress.held_bytes.load(Ordering::Relaxed),
                }
            }),
        }
    }

    /// A batch for changes that may become an edit ([`Journal::as_edit`]): with the edit log,
    /// with room kept in front for the put that wraps them.
    fn changes_batch(&self, capacity: usize) -> RawBatch {
        match self.checkpointer {
            Some(_) => RawBatch::wrappable(capacity),
            None => RawBatch::with_capacity(capacity),
        }
    }

    /// With the edit log, `changes` (if any) as one edit keyed `key()`, at the head of a new
    /// batch that may grow on, and the edit's key and place in it; else the batch they are.
    fn as_edit(
        &self,
        changes: RawBatch,
        key: impl FnOnce() -> EditKey,
    ) -> (RawBatch, Option<(EditKey, std::ops::Range<usize>)>) {
        match &self.checkpointer {
            Some(_) if !changes.is_empty() => {
                let key = key();
                let (batch, edit) = changes.into_value_of(self.families.edits, key.as_bytes());
                (batch, Some((key, edit)))
            }
            _ => (changes, None),
        }
    }

    /// After `batch` is durable: its edit ([`Journal::as_edit`]) to the checkpointer.
    fn hand_over(&self, batch: RawBatch, edit: Option<(EditKey, std::ops::Range<usize>)>) {
        if let (Some(checkpointer), Some((key, edit))) = (&self.checkpointer, edit) {
            checkpointer.committed(key, Edit::within(batch.into_rep(), edit));
        }
    }

    /// One meta key, synced (start-up writes only).
    fn put_synced(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), key, value);
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    /// A column family's handle, by name.
    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Where a checkpoint writes its table files before they are ingested.
    fn checkpoint_dir(&self) -> PathBuf {
        self.path.join("checkpoint")
    }
}

/// Write options of a synced write: durable when it returns.
fn synced() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    opts
}

mod ceilings;
mod claim;
mod clients;
mod commit;
#[cfg(test)]
mod edit_tests;
mod edits;
mod follow;
mod hooks;
mod images;
mod open;
mod raw_batch;
mod read;
mod upgrade;
pub use follow::Change;

#[cfg(test)]
mod tests;
