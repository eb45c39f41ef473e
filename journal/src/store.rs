//! The journal store: open with recovery, group commit, reads of committed state and scans
//! for start-up and fsck.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rocksdb::{
    ColumnFamily, DB, Direction, FlushOptions, IteratorMode, ReadOptions, WriteBatch, WriteOptions,
};

use crate::error::{Error, Fault, Result};
use crate::options::{Tuning, block_cache, cf_descriptors, db_options, full_scan};
use crate::resend::{ClientResend, ClientSlots};
use crate::schema::*;

/// How the journal is opened.
#[derive(Clone, Debug, Default)]
pub struct JournalOptions {
    /// Test hook: the commit after this many successful ones fails with `fault`, and the
    /// journal stops. `None` in production.
    pub fail_after_commits: Option<u64>,
    /// What that failure is.
    pub fault: Fault,
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
}

/// What one group commit did.
#[derive(Clone, Copy, Debug)]
pub struct CommitInfo {
    pub last_committed: u64,
    /// Transactions in the batch.
    pub transactions: usize,
    /// Bytes in the RocksDB write batch.
    pub bytes: usize,
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
}

/// The journal: a RocksDB database with the mds schema.
pub struct Journal {
    db: DB,
    path: PathBuf,
    last_committed: AtomicU64,
    next_ino: AtomicU64,
    commits: AtomicU64,
    failed: AtomicBool,
    options: JournalOptions,
    opts: rocksdb::Options,
    /// Which resend slots each client has on disk (`resend.rs`); the committer's alone.
    resend_slots: Mutex<HashMap<u64, ClientSlots>>,
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
    /// Opens (creating if needed) the store at `path`, checks its schema version and recovers
    /// `last_committed` and the next inode number. A new store gets its root directory in its
    /// first, synced, batch.
    pub fn open(path: &Path, options: JournalOptions) -> Result<(Journal, Recovered)> {
        Self::open_tuned(path, options, &Tuning::default())
    }

    /// [`Journal::open`] with other RocksDB sizes (tests shrink them).
    pub(crate) fn open_tuned(
        path: &Path,
        options: JournalOptions,
        tuning: &Tuning,
    ) -> Result<(Journal, Recovered)> {
        let opts = db_options(tuning);
        let cache = block_cache();
        let db = DB::open_cf_descriptors(&opts, path, cf_descriptors(&cache, tuning))
            .map_err(|e| explain_open_failure(&opts, path, e))?;
        Self::finish_open(db, opts, path, options, true)
    }

    /// Opens an existing store read-only (for `mds fsck` and other offline tools).
    pub fn open_read_only(path: &Path) -> Result<(Journal, Recovered)> {
        if !path.join("CURRENT").is_file() {
            return Err(Error::NoStore {
                path: path.display().to_string(),
            });
        }
        let tuning = Tuning::default();
        let mut opts = db_options(&tuning);
        opts.create_if_missing(false);
        let cache = block_cache();
        let db =
            DB::open_cf_descriptors_read_only(&opts, path, cf_descriptors(&cache, &tuning), false)?;
        Self::finish_open(db, opts, path, JournalOptions::default(), false)
    }

    fn finish_open(
        db: DB,
        opts: rocksdb::Options,
        path: &Path,
        options: JournalOptions,
        writable: bool,
    ) -> Result<(Journal, Recovered)> {
        let journal = Journal {
            db,
            path: path.to_owned(),
            last_committed: AtomicU64::new(0),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            commits: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            options,
            opts,
            resend_slots: Mutex::new(HashMap::new()),
        };
        let meta = journal.cf(CF_META);
        let created = match journal.db.get_cf(meta, META_SCHEMA_VERSION)? {
            Some(v) => {
                let found =
                    u32::from_le_bytes(v.as_slice().try_into().map_err(|_| Error::Corrupt {
                        what: "schema version",
                        detail: format!("{} bytes", v.len()),
                    })?);
                if found == SCHEMA_VERSION_WITHOUT_RESEND && journal.resend_family_is_empty()? {
                    // The previous version never wrote resend records: nothing to convert.
                    if writable {
                        journal.db.put_cf_opt(
                            meta,
                            META_SCHEMA_VERSION,
                            SCHEMA_VERSION.to_le_bytes(),
                            &synced(),
                        )?;
                    }
                } else if found != SCHEMA_VERSION {
                    return Err(Error::SchemaVersion {
                        path: path.display().to_string(),
                        found,
                        expected: SCHEMA_VERSION,
                    });
                }
                false
            }
            None if writable => {
                journal.initialize()?;
                true
            }
            None => {
                return Err(Error::Corrupt {
                    what: "store",
                    detail: format!("{} has no schema version", path.display()),
                });
            }
        };
        let last_committed = match journal.db.get_cf(meta, META_LAST_COMMITTED)? {
            Some(v) => decode_meta_u64("last_committed", &v)?,
            None => 0,
        };
        let next_ino = match journal.db.get_cf(meta, META_NEXT_INO)? {
            Some(v) => decode_meta_u64("next_ino", &v)?,
            None => ROOT_INO + 1,
        };
        let mut known_clients = Vec::new();
        for item in journal.db.prefix_iterator_cf(meta, META_CLIENT_PREFIX) {
            let (key, _) = item?;
            let Some(id) = key.strip_prefix(META_CLIENT_PREFIX) else {
                break; // past the prefix
            };
            known_clients.push(decode_u64_key("known client key", id)?);
        }
        let mut slots = Vec::new();
        journal.scan_resend(|client, slot, value| {
            slots.push((client, slot, value));
            Ok(())
        })?;
        let (resend_slots, resend) = crate::resend::recover(slots);
        *journal.resend_slots.lock().expect("not poisoned") = resend_slots;
        journal
            .last_committed
            .store(last_committed, Ordering::SeqCst);
        journal.next_ino.store(next_ino, Ordering::SeqCst);
        Ok((
            journal,
            Recovered {
                last_committed,
                next_ino,
                created,
                known_clients,
                resend,
            },
        ))
    }

    /// Writes the schema version and the root directory of a new store, synced.
    fn initialize(&self) -> Result<()> {
        let root = Inode::root(now_ns());
        let mut batch = WriteBatch::default();
        let meta = self.cf(CF_META);
        batch.put_cf(meta, META_SCHEMA_VERSION, SCHEMA_VERSION.to_le_bytes());
        batch.put_cf(meta, META_LAST_COMMITTED, 0u64.to_le_bytes());
        batch.put_cf(meta, META_NEXT_INO, (ROOT_INO + 1).to_le_bytes());
        batch.put_cf(self.cf(CF_INODES), ino_key(ROOT_INO), encode(&root));
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    fn resend_family_is_empty(&self) -> Result<bool> {
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_CLIENTS));
        iter.seek_to_first();
        iter.status()?;
        Ok(!iter.valid())
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

    /// Writes client changes alone (`KnowClient`, `ForgetClient`, `DropResend`), synced, when
    /// no transaction is there to carry them: they advance no transno. Other ops are refused.
    pub fn write_client_changes(&self, ops: &[JournalOp]) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        let meta = self.cf(CF_META);
        let mut batch = WriteBatch::default();
        let mut slots = self.resend_slots.lock().expect("not poisoned");
        for op in ops {
            match op {
                JournalOp::KnowClient { client } => batch.put_cf(meta, client_key(*client), []),
                JournalOp::ForgetClient { client } => batch.delete_cf(meta, client_key(*client)),
                JournalOp::DropResend { client } => {
                    self.drop_resend(&mut batch, &mut slots, *client)
                }
                other => {
                    return Err(Error::Corrupt {
                        what: "client change",
                        detail: format!("not a client change: {other:?}"),
                    });
                }
            }
        }
        if let Err(e) = self.db.write_opt(batch, &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    /// Writes every memtable to table files and waits for it, so that the next open has no
    /// write-ahead log to replay: for a clean stop, after the last commit. Without it a
    /// restart replays up to `max_total_wal_size` of WAL (RocksDB's close does not flush
    /// while the WAL holds the data) and writes those tables then, at start-up. Refused once
    /// the journal has failed: the next open recovers from the WAL as after a crash.
    pub fn flush(&self) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
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
        let Some(last) = records.last() else {
            return Ok(CommitInfo {
                last_committed: self.last_committed(),
                transactions: 0,
                bytes: 0,
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
        let (inodes, dentries, clients, meta) = (
            self.cf(CF_INODES),
            self.cf(CF_DENTRIES),
            self.cf(CF_CLIENTS),
            self.cf(CF_META),
        );
        let mut next_ino = self.next_ino.load(Ordering::Relaxed);
        let mut batch = WriteBatch::default();
        let mut scratch = Vec::with_capacity(128);
        let mut key = Vec::with_capacity(64);
        let mut slots = self.resend_slots.lock().expect("not poisoned");
        // Resend records with their client and its watermark, written after the loop, one
        // slot per client per commit: sorted by client then, rather than hashed per record.
        let mut resend: Vec<(u64, u64, &ResendRecord)> = Vec::new();
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
                        dentry_key_into(&mut key, *parent, name);
                        scratch.clear();
                        let bytes = postcard::to_extend(entry, std::mem::take(&mut scratch))
                            .expect("encoding into a Vec cannot fail");
                        batch.put_cf(dentries, &key, &bytes);
                        scratch = bytes;
                    }
                    JournalOp::DeleteDentry { parent, name } => {
                        dentry_key_into(&mut key, *parent, name);
                        batch.delete_cf(dentries, &key);
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
                        self.drop_resend(&mut batch, &mut slots, *client);
                    }
                    JournalOp::KnowClient { client } => batch.put_cf(meta, client_key(*client), []),
                    JournalOp::ForgetClient { client } => {
                        batch.delete_cf(meta, client_key(*client))
                    }
                }
            }
        }
        next_ino = next_ino.max(put_last_inode_images(
            &mut batch,
            inodes,
            records,
            &mut scratch,
        ));
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
            let slot = known.take(highest);
            let value = ResendSlotRef {
                acked_xid: known.acked_xid,
                records: std::mem::take(&mut group),
            };
            scratch.clear();
            let bytes = postcard::to_extend(&value, std::mem::take(&mut scratch))
                .expect("encoding into a Vec cannot fail");
            batch.put_cf(clients, resend_key(client, slot), &bytes);
            scratch = bytes;
            group = value.records;
        }
        drop(slots);
        batch.put_cf(meta, META_LAST_COMMITTED, last.transno.to_le_bytes());
        batch.put_cf(meta, META_NEXT_INO, next_ino.to_le_bytes());
        let bytes = batch.size_in_bytes();
        let build = started.elapsed();

        if let Some(limit) = self.options.fail_after_commits
            && self.commits.load(Ordering::Relaxed) >= limit
        {
            self.failed.store(true, Ordering::Release);
            if self.options.fault == Fault::Sync {
                // Written, never synced: in the page cache, as after a failed fsync.
                let mut unsynced = WriteOptions::default();
                unsynced.set_sync(false);
                let _ = self.db.write_opt(batch, &unsynced);
            }
            return Err(Error::Injected(self.options.fault));
        }
        let write_started = Instant::now();
        if let Err(e) = self.db.write_opt(batch, &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        let write_sync = write_started.elapsed();
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.next_ino.store(next_ino, Ordering::Relaxed);
        self.last_committed.store(last.transno, Ordering::Release);
        Ok(CommitInfo {
            last_committed: last.transno,
            transactions: records.len(),
            bytes,
            build,
            write_sync,
        })
    }

    /// Reads one committed inode.
    pub fn inode(&self, ino: u64) -> Result<Option<Inode>> {
        match self.db.get_pinned_cf(self.cf(CF_INODES), ino_key(ino))? {
            Some(v) => Ok(Some(decode("inode", &v)?)),
            None => Ok(None),
        }
    }

    /// Reads one committed directory entry.
    pub fn dentry(&self, parent: u64, name: &str) -> Result<Option<Dentry>> {
        match self
            .db
            .get_pinned_cf(self.cf(CF_DENTRIES), dentry_key(parent, name))?
        {
            Some(v) => Ok(Some(decode("dentry", &v)?)),
            None => Ok(None),
        }
    }

    /// Deletes every slot `client` has, one point delete each, and forgets them.
    fn drop_resend(
        &self,
        batch: &mut WriteBatch,
        slots: &mut HashMap<u64, ClientSlots>,
        client: u64,
    ) {
        if let Some(known) = slots.remove(&client) {
            for slot in 0..known.highest.len() {
                batch.delete_cf(self.cf(CF_CLIENTS), resend_key(client, slot as u32));
            }
        }
    }

    /// Calls `f` on every committed inode in inode-number order.
    pub fn scan_inodes(&self, mut f: impl FnMut(Inode) -> Result<()>) -> Result<()> {
        for item in self.scan(CF_INODES) {
            let (key, value) = item?;
            let inode: Inode = decode("inode", &value)?;
            let ino = decode_u64_key("inode key", &key)?;
            if ino != inode.ino {
                return Err(Error::Corrupt {
                    what: "inode",
                    detail: format!("key {ino} holds inode {}", inode.ino),
                });
            }
            f(inode)?;
        }
        Ok(())
    }

    /// Calls `f(parent, name, entry)` on every committed directory entry, grouped by parent
    /// and in name-byte order within one directory.
    pub fn scan_dentries(
        &self,
        mut f: impl FnMut(u64, String, Dentry) -> Result<()>,
    ) -> Result<()> {
        for item in self.scan(CF_DENTRIES) {
            let (key, value) = item?;
            let (parent, name) = decode_dentry_key(&key)?;
            f(parent, name, decode("dentry", &value)?)?;
        }
        Ok(())
    }

    /// Calls `f(client, slot, value)` on every resend slot, in client then slot order.
    pub fn scan_resend(&self, mut f: impl FnMut(u64, u32, ResendSlot) -> Result<()>) -> Result<()> {
        for item in self.scan(CF_CLIENTS) {
            let (key, value) = item?;
            let (client, slot) = decode_resend_key(&key)?;
            f(client, slot, decode("resend slot", &value)?)?;
        }
        Ok(())
    }

    /// An iterator over a whole family, from its first key, that leaves the block cache alone
    /// (`options::full_scan`).
    fn scan(&self, family: &str) -> rocksdb::DBIteratorWithThreadMode<'_, DB> {
        self.db
            .iterator_cf_opt(self.cf(family), full_scan(), IteratorMode::Start)
    }

    /// Lists committed entries of one directory after `cursor` (exclusive), at most `limit`.
    pub fn list_dentries(
        &self,
        parent: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Dentry)>> {
        let start = dentry_key(parent, cursor.unwrap_or(""));
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound((parent + 1).to_be_bytes().to_vec());
        let iter = self.db.iterator_cf_opt(
            self.cf(CF_DENTRIES),
            read,
            IteratorMode::From(&start, Direction::Forward),
        );
        let mut out = Vec::new();
        for item in iter {
            let (key, value) = item?;
            let (_, name) = decode_dentry_key(&key)?;
            if cursor == Some(name.as_str()) {
                continue;
            }
            out.push((name, decode("dentry", &value)?));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
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
            .map(|name| {
                let cf = self.cf(name);
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
        }
    }
}

/// A writable open must name every column family in the store, so a store of a newer schema
/// with a family added fails inside RocksDB ("Column families not opened"), before
/// `finish_open` can read its version; say what that most likely means. (A read-only open may
/// leave families out, so it gets as far as the version check.)
fn explain_open_failure(opts: &rocksdb::Options, path: &Path, e: rocksdb::Error) -> Error {
    let unknown: Vec<String> = DB::list_cf(opts, path)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != "default" && !ALL_CFS.contains(&f.as_str()))
        .collect();
    if unknown.is_empty() {
        return e.into();
    }
    Error::UnknownFamilies {
        path: path.display().to_string(),
        families: unknown.join(", "),
        expected: SCHEMA_VERSION,
    }
}

fn synced() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    opts
}

/// Writes each inode the batch puts or deletes once, with its last state (a put or a
/// delete), found by walking the ops backwards: one hash per inode op. Returns the inode
/// high-water mark the puts imply (one past the largest number put; 0 if none).
///
/// A batch is one atomic `WriteBatch`, so no reader and no recovery ever sees an inode's state
/// between two of its records. Yet under load most creates in a batch share their directory
/// with others (each re-images it: mtime, size, entry count), and every image would cost a
/// memtable entry, WAL bytes and the flush's sort and write, the same as a new inode's. The
/// order of the puts within the batch does not matter: each key is written once.
fn put_last_inode_images(
    batch: &mut WriteBatch,
    inodes: &ColumnFamily,
    records: &[TxRecord],
    scratch: &mut Vec<u8>,
) -> u64 {
    let mut next_ino = 0;
    let mut written = foldhash::HashSet::default();
    for op in records.iter().rev().flat_map(|r| r.ops.iter().rev()) {
        let (ino, image) = match op {
            JournalOp::PutInode(inode) => (inode.ino, Some(inode)),
            JournalOp::DeleteInode(ino) => (*ino, None),
            _ => continue,
        };
        if image.is_some() {
            next_ino = next_ino.max(ino + 1);
        }
        if !written.insert(ino) {
            continue; // a later op of this batch replaced it
        }
        match image {
            Some(inode) => {
                scratch.clear();
                let bytes = postcard::to_extend(inode, std::mem::take(scratch))
                    .expect("encoding into a Vec cannot fail");
                batch.put_cf(inodes, ino_key(ino), &bytes);
                *scratch = bytes;
            }
            None => batch.delete_cf(inodes, ino_key(ino)),
        }
    }
    next_ino
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ENCODING_CHANGED, hex};

    /// Every key and value in the store, family by family, as hex.
    fn raw_contents(j: &Journal) -> Vec<String> {
        let mut out = Vec::new();
        for name in ALL_CFS {
            for item in j.db.iterator_cf(j.cf(name), IteratorMode::Start) {
                let (key, value) = item.unwrap();
                out.push(format!("{name} {} = {}", hex(&key), hex(&value)));
            }
        }
        out
    }

    /// What two committed transactions leave on disk, byte for byte: the key layouts, the
    /// record encodings and the `meta` values together. Transactions themselves are never
    /// stored whole; this is what a `TxRecord` and each kind of `JournalOp` become.
    #[test]
    fn what_a_commit_writes_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let inode = |ino, kind, nlink, parent, entries, transno| Inode {
            ino,
            kind,
            mode: 0o755,
            uid: 1000,
            gid: 100,
            nlink,
            size: 0,
            ctime_ns: 1_000,
            mtime_ns: 2_000,
            generation: ino,
            parent,
            entries,
            transno,
        };
        let resend = |xid| JournalOp::PutResend {
            client: 7,
            acked_xid: xid - 1,
            record: ResendRecord {
                xid,
                transno: xid,
                reply: vec![0xee],
            },
        };
        // mkdir /d (inode 2), then create /d/f (inode 3) and unlink /g (inode 4, made and
        // removed in one batch, so only its absence shows), with resend records for xids 1
        // and 2 of client 7; the request of xid 2 says the client has the reply of xid 1.
        let records = [
            TxRecord {
                transno: 1,
                ops: vec![
                    JournalOp::PutInode(inode(2, FileKind::Directory, 2, ROOT_INO, 0, 1)),
                    JournalOp::PutDentry {
                        parent: ROOT_INO,
                        name: "d".into(),
                        entry: Dentry {
                            ino: 2,
                            kind: FileKind::Directory,
                        },
                    },
                    JournalOp::PutInode(inode(ROOT_INO, FileKind::Directory, 3, ROOT_INO, 1, 1)),
                    JournalOp::PutInode(inode(4, FileKind::File, 1, 0, 0, 1)),
                    JournalOp::PutDentry {
                        parent: ROOT_INO,
                        name: "g".into(),
                        entry: Dentry {
                            ino: 4,
                            kind: FileKind::File,
                        },
                    },
                    resend(1),
                ],
            },
            TxRecord {
                transno: 2,
                ops: vec![
                    JournalOp::PutInode(inode(3, FileKind::File, 1, 0, 0, 2)),
                    JournalOp::PutDentry {
                        parent: 2,
                        name: "f".into(),
                        entry: Dentry {
                            ino: 3,
                            kind: FileKind::File,
                        },
                    },
                    JournalOp::PutInode(inode(2, FileKind::Directory, 2, ROOT_INO, 1, 2)),
                    JournalOp::DeleteDentry {
                        parent: ROOT_INO,
                        name: "g".into(),
                    },
                    JournalOp::DeleteInode(4),
                    resend(2),
                ],
            },
        ];
        j.commit(&records).unwrap();
        let golden = [
            // key: ino, u64 BE. value: postcard Inode.
            "inodes 0000000000000001 = 0100ed03e807640300d00fa01f01010101",
            "inodes 0000000000000002 = 0200ed03e807640200d00fa01f02010102",
            "inodes 0000000000000003 = 0301ed03e807640100d00fa01f03000002",
            // key: parent u64 BE ++ name's UTF-8 ("d", "f"). value: postcard Dentry.
            "dentries 000000000000000164 = 0200",
            "dentries 000000000000000266 = 0301",
            // key: client u64 BE ++ slot u32 BE. value: postcard ResendSlot: watermark 1, then
            // the records above it (xid 2, transno 2, reply ee); xid 1's was never written.
            "clients 000000000000000700000000 = 0101020201ee",
            // "last_committed", "next_ino" (one past the highest inode put), "schema_version":
            // u64, u64 and u32, little-endian.
            "meta 6c6173745f636f6d6d6974746564 = 0200000000000000",
            "meta 6e6578745f696e6f = 0500000000000000",
            "meta 736368656d615f76657273696f6e = 02000000",
        ];
        assert_eq!(raw_contents(&j), golden, "{ENCODING_CHANGED}");
    }

    /// A directory imaged by every create of a batch is written once, with its last image;
    /// an inode put and deleted in one batch only as its deletion, one deleted and put again
    /// only as its last image.
    #[test]
    fn a_batch_writes_each_inode_once_with_its_last_state() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let image = |ino, kind, entries, transno| {
            JournalOp::PutInode(Inode {
                ino,
                kind,
                mode: 0o755,
                uid: 0,
                gid: 0,
                nlink: 1,
                size: entries,
                ctime_ns: transno as i64,
                mtime_ns: transno as i64,
                generation: ino,
                parent: ROOT_INO,
                entries,
                transno,
            })
        };
        let memtable_entries = |j: &Journal| {
            j.db.property_int_value_cf(j.cf(CF_INODES), "rocksdb.num-entries-active-mem-table")
                .unwrap()
                .unwrap()
        };
        let before = memtable_entries(&j);
        // Ten creates in directory 2: each puts its file (10..20) and re-images the directory.
        // File 19, the highest, is then unlinked; file 11 unlinked and its inode number put
        // again (a store never reuses one, but the batch must not care).
        let mut records: Vec<TxRecord> = (1..=10u64)
            .map(|t| TxRecord {
                transno: t,
                ops: vec![
                    image(9 + t, FileKind::File, 0, t),
                    image(2, FileKind::Directory, t, t),
                ],
            })
            .collect();
        records.push(TxRecord {
            transno: 11,
            ops: vec![JournalOp::DeleteInode(19), JournalOp::DeleteInode(11)],
        });
        records.push(TxRecord {
            transno: 12,
            ops: vec![image(11, FileKind::File, 0, 12)],
        });
        j.commit(&records).unwrap();
        // Directory 2 once, files 10..=18 once each, file 19's deletion.
        assert_eq!(memtable_entries(&j) - before, 1 + 9 + 1);
        assert_eq!(j.inode(2).unwrap().unwrap().entries, 10, "the last image");
        assert_eq!(j.inode(19).unwrap(), None);
        assert_eq!(j.inode(11).unwrap().unwrap().transno, 12);
        assert_eq!(j.inode(18).unwrap().unwrap().transno, 9);
        // next_ino still counts every inode put, written or not: 19's put was not written.
        drop(j);
        let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert_eq!(recovered.next_ino, 20);
    }

    fn put_resend(client: u64, acked_xid: u64, xid: u64) -> JournalOp {
        JournalOp::PutResend {
            client,
            acked_xid,
            record: ResendRecord {
                xid,
                transno: 0,
                reply: vec![xid as u8],
            },
        }
    }

    /// Commits one transaction per op list, each with the next transno.
    fn commit_each(j: &Journal, ops: Vec<Vec<JournalOp>>) {
        for ops in ops {
            let transno = j.last_committed() + 1;
            j.commit(&[TxRecord { transno, ops }]).unwrap();
        }
    }

    fn clients_keys(j: &Journal) -> Vec<String> {
        raw_contents(j)
            .into_iter()
            .filter_map(|l| l.strip_prefix("clients ").map(|k| k[..24].to_owned()))
            .collect()
    }

    #[test]
    fn resend_slots_are_overwritten_in_place_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            commit_each(
                &j,
                vec![
                    vec![put_resend(7, 0, 1)],
                    vec![put_resend(7, 0, 2), put_resend(9, 0, 1)],
                    // Client 7 has the replies of 1 and 2 now: slot 0 is free again.
                    vec![put_resend(7, 2, 3)],
                    vec![put_resend(7, 2, 4)],
                ],
            );
            let keys = clients_keys(&j);
            assert_eq!(
                keys,
                [
                    "000000000000000700000000",
                    "000000000000000700000001",
                    "000000000000000900000000"
                ],
                "two slots for client 7 however many commits"
            );
        }
        let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let xids: Vec<(u64, u64, Vec<u64>)> = recovered
            .resend
            .iter()
            .map(|c| {
                (
                    c.client,
                    c.acked_xid,
                    c.records.iter().map(|r| r.xid).collect(),
                )
            })
            .collect();
        assert_eq!(xids, [(7, 2, vec![3, 4]), (9, 0, vec![1])]);
        // The slot state survived too: after the client acks 3, the slot of 3 is reused.
        commit_each(&j, vec![vec![put_resend(7, 3, 5)]]);
        assert_eq!(clients_keys(&j).len(), 3);
        // A session's end deletes its slots, and a record put after the drop in the same
        // batch (a new session of the same identity) is kept.
        commit_each(
            &j,
            vec![vec![
                put_resend(9, 0, 2),
                JournalOp::DropResend { client: 9 },
                JournalOp::DropResend { client: 7 },
                put_resend(7, 5, 6),
            ]],
        );
        assert_eq!(clients_keys(&j), ["000000000000000700000000"]);
        j.write_client_changes(&[JournalOp::DropResend { client: 7 }])
            .unwrap();
        assert!(clients_keys(&j).is_empty());
    }

    #[test]
    fn records_the_client_already_has_replies_for_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        // In one batch: xid 1, then a request saying the client has the reply of 1 and 2.
        let records = [
            TxRecord {
                transno: 1,
                ops: vec![put_resend(7, 0, 1)],
            },
            TxRecord {
                transno: 2,
                ops: vec![put_resend(7, 2, 2)],
            },
        ];
        j.commit(&records).unwrap();
        assert!(clients_keys(&j).is_empty());
    }

    #[test]
    fn a_store_of_the_version_before_resend_records_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 1u32.to_le_bytes())
                .unwrap();
        }
        assert!(Journal::open_read_only(dir.path()).is_ok(), "fsck reads it");
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            let v = j.db.get_cf(j.cf(CF_META), META_SCHEMA_VERSION).unwrap();
            assert_eq!(v.unwrap(), SCHEMA_VERSION.to_le_bytes());
        }
        // Version 1 with something in `clients` is not what version 1 wrote: refused.
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            commit_each(&j, vec![vec![put_resend(7, 0, 1)]]);
            j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 1u32.to_le_bytes())
                .unwrap();
        }
        let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
        assert!(
            matches!(err, Error::SchemaVersion { found: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_store_of_another_schema_version_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 99u32.to_le_bytes())
                .unwrap();
        }
        let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::SchemaVersion {
                    found: 99,
                    expected: SCHEMA_VERSION,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("schema version 99"));
    }

    #[test]
    fn a_store_with_an_unknown_column_family_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            j.db.create_cf("from_the_future", &rocksdb::Options::default())
                .unwrap();
        }
        let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
        assert!(
            matches!(&err, Error::UnknownFamilies { families, .. } if families == "from_the_future"),
            "{err}"
        );
        assert!(err.to_string().contains("docs/schema.md"), "{err}");
        // Read-only opens may leave a family out: fsck still gets to the store's contents.
        assert!(Journal::open_read_only(dir.path()).is_ok());
    }

    /// One commit of `creates` creates in the root, each with its resend record, as the server
    /// journals them: like every commit, it writes `meta` and `clients` too. Returns the
    /// bytes written.
    fn commit_creates(j: &Journal, creates: u64) -> usize {
        let first = j.last_committed() + 1;
        let records: Vec<TxRecord> = (first..first + creates)
            .map(|transno| {
                let ino = transno + 1;
                TxRecord {
                    transno,
                    ops: vec![
                        JournalOp::PutInode(Inode {
                            ino,
                            kind: FileKind::File,
                            mode: 0o644,
                            uid: 1000,
                            gid: 1000,
                            nlink: 1,
                            size: 0,
                            ctime_ns: 1,
                            mtime_ns: 1,
                            generation: transno,
                            parent: 0,
                            entries: 0,
                            transno,
                        }),
                        JournalOp::PutDentry {
                            parent: ROOT_INO,
                            name: format!("f.{ino:016}"),
                            entry: Dentry {
                                ino,
                                kind: FileKind::File,
                            },
                        },
                        JournalOp::PutResend {
                            client: 7,
                            acked_xid: first - 1,
                            record: ResendRecord {
                                xid: transno,
                                transno,
                                reply: vec![0x5a; 35],
                            },
                        },
                    ],
                }
            })
            .collect();
        j.commit(&records).unwrap().bytes
    }

    /// Waits until RocksDB has no flush queued or running: they run on its background thread,
    /// so wait for them to be done rather than for some time.
    fn wait_for_flushes(j: &Journal) {
        let int = |value: std::result::Result<Option<u64>, rocksdb::Error>| value.unwrap();
        for _ in 0..6000 {
            let pending = ALL_CFS.iter().any(|name| {
                int(j
                    .db
                    .property_int_value_cf(j.cf(name), "rocksdb.mem-table-flush-pending"))
                    != Some(0)
            });
            let running = int(j.db.property_int_value("rocksdb.num-running-flushes")) != Some(0);
            if !pending && !running {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("RocksDB's flushes were still not done after a minute");
    }

    /// Bytes of write-ahead log a crash now would leave to replay: the `*.log` files RocksDB
    /// still needs (numbered from `rocksdb.min-log-number-to-keep` on), once the flushes
    /// asked for are done. Files it no longer needs but has not deleted yet do not count.
    fn live_wal_bytes(j: &Journal) -> u64 {
        wait_for_flushes(j);
        let oldest_needed =
            j.db.property_int_value("rocksdb.min-log-number-to-keep")
                .unwrap()
                .unwrap();
        std::fs::read_dir(j.path())
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let number: u64 = name.strip_suffix(".log")?.parse().ok()?;
                (number >= oldest_needed).then(|| entry.metadata().unwrap().len())
            })
            .sum()
    }

    /// `meta` and `clients` have data in every WAL file, since every commit writes them; with
    /// no limit they keep every WAL file alive (here, everything written), and with one, what
    /// a crash would replay stays near the limit however much is committed. Flushes forced
    /// by the limit lose nothing.
    #[test]
    fn the_wal_a_crash_would_replay_stays_near_its_limit() {
        let limit: u64 = 1 << 20;
        // Write buffers far larger than what the test writes: only the limit forces flushes.
        let limited = Tuning {
            max_total_wal_size: limit,
            namespace_write_buffer: 32 << 20,
            per_commit_write_buffer: 16 << 20,
        };
        // 0 is RocksDB's default: four times the write buffers of all families, here 1 GiB.
        let unlimited = Tuning {
            max_total_wal_size: 0,
            ..limited
        };
        let (commits, creates) = (400, 200);
        let mut most_live = Vec::new();
        for tuning in [limited, unlimited] {
            let dir = tempfile::tempdir().unwrap();
            let (j, _) =
                Journal::open_tuned(dir.path(), JournalOptions::default(), &tuning).unwrap();
            let mut written = 0;
            let mut most = 0;
            for i in 0..commits {
                written += commit_creates(&j, creates);
                if i % 20 == 19 {
                    most = most.max(live_wal_bytes(&j));
                }
            }
            assert!(
                written as u64 >= 8 * limit,
                "the test writes {written} bytes"
            );
            most_live.push(most);
            drop(j);
            let (j, recovered) =
                Journal::open_tuned(dir.path(), JournalOptions::default(), &tuning).unwrap();
            assert_eq!(recovered.last_committed, commits * creates);
            let mut inodes = 0;
            j.scan_inodes(|_| {
                inodes += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(
                inodes,
                1 + commits * creates,
                "every committed inode is back"
            );
        }
        let [with_limit, without] = most_live[..] else {
            unreachable!()
        };
        assert!(
            with_limit <= 2 * limit,
            "live WAL reached {with_limit} bytes with a limit of {limit}"
        );
        assert!(
            without >= 4 * with_limit,
            "without the limit the live WAL reached only {without} bytes: the test no longer \
             shows the per-commit families pinning it"
        );
    }

    /// What a clean stop does before closing: afterwards a crash, or the next open, has no
    /// WAL to replay, and nothing committed is lost.
    #[test]
    fn a_flushed_journal_leaves_no_wal_to_replay() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            for _ in 0..10 {
                commit_creates(&j, 100);
            }
            assert!(live_wal_bytes(&j) > 0);
            j.flush().unwrap();
            assert_eq!(live_wal_bytes(&j), 0);
        }
        let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert_eq!(recovered.last_committed, 1000);
        assert!(j.inode(1001).unwrap().is_some());
    }

    /// Start-up and fsck read every block once: they must not fill the block cache (a
    /// point read does, which shows the property would have seen it).
    #[test]
    fn full_scans_leave_the_block_cache_alone() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            for _ in 0..10 {
                commit_creates(&j, 100);
            }
            for name in ALL_CFS {
                j.db.flush_cf(j.cf(name)).unwrap();
            }
        }
        // Everything is in table files now, which only the cache would keep in memory.
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        // Asked of a family of ours: the cache is theirs (`default` has RocksDB's own).
        let cached = || {
            j.db.property_int_value_cf(j.cf(CF_INODES), "rocksdb.block-cache-usage")
                .unwrap()
                .unwrap()
        };
        let before = cached();
        let mut found = 0;
        j.scan_inodes(|_| {
            found += 1;
            Ok(())
        })
        .unwrap();
        j.scan_dentries(|_, _, _| {
            found += 1;
            Ok(())
        })
        .unwrap();
        j.scan_resend(|_, _, _| {
            found += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            found,
            1001 + 1000 + 1,
            "root, 1000 files and their entries, one slot"
        );
        assert_eq!(cached(), before, "a full scan filled the block cache");
        j.inode(500).unwrap().unwrap();
        assert!(cached() > before, "a point read caches its block");
    }
}
