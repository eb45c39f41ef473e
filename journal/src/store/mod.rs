//! The journal store: the group commit, here; each other part of the journal's work is an
//! `impl Journal` block of its own file: opening a store with recovery (`open.rs`, with
//! `claim.rs` and `upgrade.rs`), reads of committed state and the scans of start-up and fsck
//! (`read.rs`), what it keeps of its clients between commits (`clients.rs`), the transno and
//! inode-number leases (`ceilings.rs`), and a standby's follower (`follow.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocksdb::{ColumnFamily, DB, FlushOptions, WriteBatch, WriteOptions};

use crate::error::InjectedFailure;
use crate::error::{Error, Fault, Result};
use crate::resend::{ClientResend, ClientSlots};
use crate::schema::{
    ALL_CFS, CF_META, JournalOp, META_LAST_COMMITTED, META_NEXT_INO, ResendRecord, ResendSlotRef,
    SECRET_LEN, TxRecord, client_key, data_key, data_key_end, dentry_key_into, encode, ino_key,
    named_key_into, pending_key, resend_key, session_key,
};
use crate::shard::ShardIdentity;
use edits::{Checkpointer, Edit, EditKey};
use images::{Births, creates, put_dentry, put_last_inode_images};
use raw_batch::{Families, RawBatch};

/// How the journal is opened.
#[derive(Clone, Debug, Default)]
pub struct JournalOptions {
    /// How far past what is durable the server may hand out transnos and inode numbers:
    /// each commit raises the ceilings to this far above it ([`Ceilings`]).
    pub leases: Leases,
    /// The shard of a cluster this open serves, as its server claimed it; None outside a
    /// cluster. Checked against the store's own (`claim.rs`) before anything is
    /// written, and written into it, synced, before the open returns.
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
    /// The cluster shard the store is (after this open: the claim's epoch); None for a store
    /// made and served outside a cluster, which is shard 0.
    pub shard: Option<ShardIdentity>,
    /// Inode numbers at or above this one are not this store's shard's to hand out.
    pub ino_limit: u64,
    /// The store's schema version as this open found it: older than [`SCHEMA_VERSION`] only
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

/// A `DeleteData` of at most this many blocks is point deletes: a small file's removal (a
/// 16-block file is 64 KiB) leaves no range tombstone behind, which RocksDB's reads of the
/// family would have to step over until compaction.
const POINT_DELETES_MAX: u32 = 16;

/// Bytes of write batch a commit reserves per record: a create's inode, entry and share of
/// its resend slot and directory image come to ~150 (the entry with its inode's image
/// embedded ~120 of them).
const COMMIT_BYTES_PER_RECORD: usize = 192;

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
    /// Inodes are in the layout of schema version 2 ([`InodeV2`]): a read-only open of a store
    /// no build of version 3 has opened for writing yet.
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

    /// One meta key, synced (start-up writes only).
    fn put_synced(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), key, value);
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Writes a consistent copy of the store to `dir` (which must not exist yet) while the
    /// store is in use: RocksDB's checkpoint, hard links to the immutable table files where
    /// `dir` is on the same file system and copies of the rest. Everything committed before
    /// the call is in it; call it between commits (the committer does).
    pub fn checkpoint(&self, dir: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
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

    /// Where a checkpoint writes its table files before they are ingested.
    fn checkpoint_dir(&self) -> PathBuf {
        self.path.join("checkpoint")
    }

    /// Makes a group of transactions durable in one synced `WriteBatch`, together with the new
    /// `last_committed` and inode high-water mark.
    ///
    /// `records` must be in transno order and contiguous from `last_committed + 1`: that is
    /// what keeps `last_committed` contiguous and makes later updates of one key win, as the
    /// serial order says. Any failure stops the journal for good (fail-stop); it is never
    /// retried, because after a failed fsync the state of the disk is unknown.
    pub fn commit(&self, records: &[TxRecord]) -> Result<CommitInfo> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        if let Some(failure) = self.checkpointer.as_ref().and_then(Checkpointer::failure) {
            self.failed.store(true, Ordering::Release);
            return Err(Error::Checkpoint(failure));
        }
        let Some(last) = records.last() else {
            return Ok(CommitInfo {
                last_committed: self.last_committed(),
                transactions: 0,
                bytes: 0,
                ceilings: self.ceilings(),
                build: Duration::ZERO,
                write_sync: Duration::ZERO,
            });
        };
        let started = Instant::now();
        for (expected, record) in (self.last_committed() + 1..).zip(records) {
            if record.transno != expected {
                return Err(Error::OutOfOrder {
                    expected,
                    got: record.transno,
                });
            }
        }
        let Families {
            inodes: _,
            dentries,
            clients,
            meta,
            xattrs,
            data,
            orphans,
            edits: _,
        } = self.families;
        let mut next_ino = self.next_ino.load(Ordering::Relaxed);
        // The changes to `inodes` and `dentries` first: with the edit log they become the
        // commit's edit, one value at the head of its batch, else its first records; the rest
        // of the batch follows them in the same bytes, so they are never copied. Sized once:
        // grown by doubling, a busy commit's batch was copied a dozen times.
        let capacity = COMMIT_BYTES_PER_RECORD * records.len();
        let mut ns = self.changes_batch(capacity);
        // What the loop writes to other families, appended after the namespace's and the
        // resend slots' changes (a create writes none there).
        let mut others = RawBatch::with_capacity(0);
        let mut key = Vec::with_capacity(64);
        let mut slots = self.resend_slots.lock().expect("not poisoned");
        // Resend records with their client and its watermark, written after the loop, one
        // slot per client per commit: sorted by client then, rather than hashed per record.
        // Nearly every record of a busy batch carries one: sized once, not grown by doubling
        // (a dozen reallocations and copies a commit, counted).
        let mut resend: Vec<(u64, u64, &ResendRecord)> = Vec::with_capacity(records.len());
        // The entries of inodes this commit creates, written after the loop with the inode's
        // last image in their value (`schema::embedded_image`), which then needs no key of its
        // own: one key a create, not two. Any other change to such an entry in the commit
        // writes it first, as it came, and the inode's image goes under its own key.
        let mut births = Births::default();
        for record in records {
            for op in &record.ops {
                match op {
                    // Written once per inode, with its last state: below.
                    JournalOp::PutInode(_) | JournalOp::DeleteInode(_) => {}
                    JournalOp::PutDentry {
                        parent,
                        name,
                        entry,
                    } => {
                        if creates(record, entry.ino) {
                            births.add(entry.ino, *parent, name, *entry);
                        } else {
                            births.write_plain(&mut ns, dentries, &mut key, entry.ino);
                            put_dentry(&mut ns, dentries, &mut key, *parent, name, entry);
                        }
                    }
                    JournalOp::DeleteDentry {
                        parent,
                        name,
                        child,
                    } => {
                        births.write_plain(&mut ns, dentries, &mut key, *child);
                        dentry_key_into(&mut key, *child, *parent, name);
                        ns.delete(dentries, &key);
                    }
                    JournalOp::PutResend {
                        client,
                        acked_xid,
                        record,
                    } => {
                        resend.push((*client, *acked_xid, record));
                    }
                    JournalOp::DropResend { client } => {
                        // Earlier records of the batch go with the rest (their client has
                        // their replies, or its session would not have ended); later ones are
                        // a new session's and are kept.
                        resend.retain(|(c, _, _)| c != client);
                        self.drop_resend(&mut ns, &mut others, &mut slots, *client);
                    }
                    JournalOp::KnowClient { client } => others.put(meta, client_key(*client), []),
                    JournalOp::ForgetClient { client } => {
                        others.delete(meta, client_key(*client));
                    }
                    JournalOp::BindSession { client, secret } => {
                        others.put(meta, session_key(*client), secret);
                    }
                    JournalOp::PutXattr { ino, name, value } => {
                        named_key_into(&mut key, *ino, name);
                        others.put(xattrs, &key, value);
                    }
                    JournalOp::DeleteXattr { ino, name } => {
                        named_key_into(&mut key, *ino, name);
                        others.delete(xattrs, &key);
                    }
                    JournalOp::PutData { ino, block, bytes } => {
                        others.put(data, data_key(*ino, *block), bytes);
                    }
                    JournalOp::DeleteData { ino, from, to } => {
                        if to.saturating_sub(*from) <= POINT_DELETES_MAX {
                            for block in *from..*to {
                                others.delete(data, data_key(*ino, block));
                            }
                        } else {
                            others.delete_range(
                                data,
                                data_key(*ino, *from),
                                data_key_end(*ino, *to),
                            );
                        }
                    }
                    JournalOp::PutOrphan { ino, owners } => {
                        others.put(orphans, ino_key(*ino), encode(owners));
                    }
                    JournalOp::DeleteOrphan(ino) => others.delete(orphans, ino_key(*ino)),
                    JournalOp::PutPendingDir(p) => {
                        let mut value = encode(&(p.parent, &p.name));
                        if p.removing {
                            value.extend(encode(&true));
                        }
                        others.put(meta, pending_key(p.ino), value);
                    }
                    JournalOp::DeletePendingDir(ino) => others.delete(meta, pending_key(*ino)),
                }
            }
        }
        next_ino = next_ino.max(put_last_inode_images(
            &mut ns,
            self.families,
            records,
            births,
        ));
        // The resend slots go with the namespace's changes: with the edit log, in the
        // commit's edit, which the checkpointer writes to `clients` with the images. At one
        // request in flight a client's slot is rewritten by every commit, and as a key of the
        // commit's own it cost RocksDB an in-place memtable update and a record of the batch
        // (~1,900 instructions a create at 64 x 1, counted: docs/BENCHMARKS.md, "Resend
        // slots in the commit's edit").
        // Stable: one client's records stay in the order they came.
        resend.sort_by_key(|(client, _, _)| *client);
        let mut group = Vec::new();
        for run in resend.chunk_by(|a, b| a.0 == b.0) {
            let client = run[0].0;
            let known = slots.entry(client).or_default();
            known.ack(run.iter().map(|(_, acked, _)| *acked).max().unwrap_or(0));
            group.clear();
            group.extend(
                run.iter()
                    .map(|(_, _, r)| *r)
                    .filter(|r| r.xid > known.acked_xid),
            );
            let Some(highest) = group.iter().map(|r| r.xid).max() else {
                continue; // every reply already at the client
            };
            let Some(slot) = known.take(highest) else {
                // The server caps a session's records far below this: a bug, not a client.
                return Err(Error::TooManyResendSlots { client });
            };
            let value = ResendSlotRef {
                acked_xid: known.acked_xid,
                records: std::mem::take(&mut group),
            };
            crate::schema::with_slot_bytes(&value, |bytes| {
                ns.put(clients, resend_key(client, slot), bytes);
            });
            group = value.records;
        }
        drop(slots);
        let (mut batch, edit) = self.as_edit(ns, || EditKey::commit(last.transno));
        batch.append(&others);
        batch.put(meta, META_LAST_COMMITTED, last.transno.to_le_bytes());
        batch.put(meta, META_NEXT_INO, next_ino.to_le_bytes());
        let ceilings = self.wanted_ceilings(last.transno, next_ino);
        self.put_ceilings(&mut batch, ceilings);
        let bytes = batch.size_in_bytes();
        let build = started.elapsed();

        if let Some(injected) = self.injected
            && self.commits.load(Ordering::Relaxed) >= injected.after_commits
        {
            self.failed.store(true, Ordering::Release);
            if injected.fault == Fault::Sync {
                // Written, never synced: in the page cache, as after a failed fsync.
                let mut unsynced = WriteOptions::default();
                unsynced.set_sync(false);
                let _ = self.db.write_opt(batch.into_write_batch(), &unsynced);
            }
            return Err(Error::Injected(injected.fault));
        }
        let write_started = Instant::now();
        if let Err(e) = self.db.write_opt(batch.write_batch(), &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        if let Some(left) = self
            .sync_latency
            .and_then(|latency| latency.checked_sub(write_started.elapsed()))
        {
            std::thread::sleep(left);
        }
        let write_sync = write_started.elapsed();
        self.hand_over(batch, edit);
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.next_ino.store(next_ino, Ordering::Relaxed);
        self.publish_ceilings(ceilings);
        self.last_committed.store(last.transno, Ordering::Release);
        Ok(CommitInfo {
            last_committed: last.transno,
            transactions: records.len(),
            bytes,
            ceilings,
            build,
            write_sync,
        })
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
}

fn synced() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    opts
}

mod ceilings;
mod claim;
mod clients;
#[cfg(test)]
mod edit_tests;
mod edits;
mod follow;
mod images;
mod open;
mod raw_batch;
mod read;
mod upgrade;
pub use follow::Change;

#[cfg(test)]
mod tests;
