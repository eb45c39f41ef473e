//! Opening a store: writable ([`Journal::open`]), read-only for offline tools, and — in
//! `follow.rs` — as a standby's follower; then what every open does once RocksDB has the
//! files open ([`Journal::finish_open`]): whose store it is (`claim.rs`), its schema brought
//! current (`upgrade.rs`), and the counters, resend records, replay key, ceilings and session
//! bindings recovered from it, with the ceilings raised for the new start.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mds_proto::{first_ino, ino_limit};
use rocksdb::{Cache, DB, Options};

use super::claim::admit;
use super::edits::{self, Checkpointer};
use super::raw_batch::Families;
use super::{Ceilings, Journal, JournalOptions, Recovered, synced};
use crate::error::{Error, Result};
use crate::options::{Tuning, block_cache, cf_descriptors, cf_options, db_options};
use crate::resend::{ClientResend, ClientSlots};
use crate::schema::{
    ADDED_CFS, ALL_CFS, CF_META, META_EDIT_LOG, META_LAST_COMMITTED, META_NEXT_INO,
    META_REPLAY_KEY, META_SCHEMA_VERSION, META_SHARD, ROOT_INO, SCHEMA_VERSION, SECRET_LEN, decode,
    decode_meta_u64, encode,
};
use crate::shard::ShardIdentity;

/// How long a cluster's store keeps a log file its memtables no longer need
/// ([`writable_db_options`]): a following standby reads the batches in it. Its reads come
/// every 100 ms, and its last one a moment after the owner stopped.
const ARCHIVED_LOG_TTL: Duration = Duration::from_secs(60);
/// And at most this many MiB of them, whatever their age.
const ARCHIVED_LOG_MB: u64 = 1024;

/// Log files kept to be written over with the edit log on ([`writable_db_options`]): at 64
/// outstanding creates, 70–72k -> 78–83k creates a second once they are reused (the server on
/// a core of its own; docs/BENCHMARKS.md, "Resend slots in the commit's edit"). A few are
/// enough, one reused at each new log file; each is disk kept, up to its old length.
const RECYCLED_LOGS: usize = 4;

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
        if options.edit_log.is_some() && options.shard.is_some() {
            return Err(Error::EditLogInCluster);
        }
        let opts = writable_db_options(&options, tuning);
        let cache = block_cache();
        let missing = families_missing(&opts, path)?;
        let families = cf_descriptors(&cache, tuning)
            .into_iter()
            .filter(|d| !missing.contains(&d.name()));
        let db = DB::open_cf_descriptors(&opts, path, families)
            .map_err(|e| explain_open_failure(&opts, path, e))?;
        let (mut journal, mut recovered) = Self::finish_open(db, opts, path, options, true)?;
        journal.add_families(&missing, &cache, tuning)?;
        journal.write_out_stored_edits()?;
        if journal.counting_pending()? {
            // An upgrade from before version 9: every resend record holds a reply in the
            // shape of protocol 10 or older (an `Attr` without `blocks`), which no client of
            // this build's protocol could resend for, and this build cannot decode. Dropped
            // once the edits left are written out (they may carry some), before the count
            // that ends the upgrade: a crash in between drops again, finding nothing.
            recovered.resend_dropped = journal.drop_resend_records()?;
            recovered.resend.clear();
            journal.resend_slots.lock().expect("not poisoned").clear();
        }
        journal.count_file_data()?;
        journal.start_or_end_edit_log()?;
        Ok((journal, recovered))
    }

    /// Whether a claim may open the store at `path` (none there yet: it may), read without
    /// writing and without RocksDB's lock: a claimant learns it is fenced off at once, even
    /// while the store's current owner still holds it. The writable open checks again, under
    /// the lock.
    pub fn check_claim(path: &Path, claim: &ShardIdentity) -> Result<()> {
        if !path.join("CURRENT").is_file() {
            return Ok(());
        }
        let (_, recovered) = Self::open_read_only(path)?;
        admit(
            &path.display().to_string(),
            recovered.shard.as_ref(),
            Some(claim),
        )
        .map(drop)
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
        // A store of an older schema may lack families this build added (`ADDED_CFS`): a
        // read-only open cannot create them, so it opens what is there, and reads of a
        // missing family find nothing.
        let present = DB::list_cf(&opts, path)?;
        let families = cf_descriptors(&cache, &tuning)
            .into_iter()
            .filter(|d| present.iter().any(|p| p == d.name()));
        let db = DB::open_cf_descriptors_read_only(&opts, path, families, false)?;
        Self::finish_open(db, opts, path, JournalOptions::default(), false)
    }

    /// What every open does once RocksDB has the files open (`writable`: for serving):
    /// checks whose store it is and brings its schema current before anything else is
    /// written, then recovers what the server starts from. A writable open raises the
    /// ceilings a lease above what the last start may have handed out before it returns.
    pub(super) fn finish_open(
        db: DB,
        opts: Options,
        path: &Path,
        options: JournalOptions,
        writable: bool,
    ) -> Result<(Journal, Recovered)> {
        let mut journal = Journal::unopened(db, opts, path, options);
        let (stored_shard, shard) = journal.whose_store(path, writable)?;
        let schema = journal.bring_schema_current(path, writable, shard.as_ref())?;
        if writable && !schema.created {
            journal.record_claim(shard.as_ref(), stored_shard.as_ref())?;
        }
        let shard_number = shard.as_ref().map_or(0, |s| s.shard);
        let (last_committed, next_ino) = journal.stored_counters(shard_number)?;
        let known_clients = journal.known_clients()?;
        let (resend_slots, resend) = journal.recover_resend()?;
        let replay_key = journal.replay_key(writable)?;
        let ceilings = journal.stored_ceilings(last_committed, next_ino)?;
        journal.start_from(last_committed, next_ino, ceilings);
        let leased = if writable {
            // This start's inode numbers begin above every one the last start may have handed
            // out; room for them is on disk before anyone is served.
            journal.note_inode_counter(next_ino.max(ceilings.ino));
            journal.raise_ceilings()?
        } else {
            ceilings
        };
        let sessions = journal.sessions(writable, &known_clients, &resend_slots)?;
        *journal.resend_slots.lock().expect("not poisoned") = resend_slots;
        Ok((
            journal,
            Recovered {
                last_committed,
                next_ino,
                created: schema.created,
                known_clients,
                resend,
                replay_key,
                ceilings,
                leased,
                sessions,
                upgraded_from: schema.upgraded_from,
                resend_dropped: 0,
                shard,
                ino_limit: ino_limit(shard_number),
                schema_version: if writable {
                    SCHEMA_VERSION
                } else {
                    schema.version
                },
            },
        ))
    }

    /// The journal on a store RocksDB has just opened, before anything is read from it.
    fn unopened(db: DB, opts: Options, path: &Path, options: JournalOptions) -> Journal {
        let families = Families::of(&db);
        Journal {
            db: Arc::new(db),
            path: path.to_owned(),
            last_committed: AtomicU64::new(0),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            commits: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            options,
            injected: None,
            sync_latency: None,
            opts,
            resend_slots: Mutex::new(HashMap::new()),
            transno_ceiling: AtomicU64::new(0),
            ino_ceiling: AtomicU64::new(0),
            inode_counter: AtomicU64::new(0),
            v2_inodes: false,
            parent_keyed_dentries: false,
            families,
            checkpointer: None,
            client_edits: AtomicU64::new(0),
        }
    }

    /// The shard identity the store holds, and the one it is opened as: its own for a
    /// read-only open, the claim for a new store, and for an existing one the claim if
    /// [`admit`] lets it in — checked before anything is written to the store, an upgrade
    /// included.
    fn whose_store(
        &self,
        path: &Path,
        writable: bool,
    ) -> Result<(Option<ShardIdentity>, Option<ShardIdentity>)> {
        let meta = self.cf(CF_META);
        let stored = match self.db.get_cf(meta, META_SHARD)? {
            Some(v) => Some(decode::<ShardIdentity>("shard identity", &v)?),
            None => None,
        };
        let is_new = self.db.get_cf(meta, META_SCHEMA_VERSION)?.is_none();
        let shard = if !writable {
            stored.clone()
        } else if is_new {
            self.options.shard.clone()
        } else {
            admit(
                &path.display().to_string(),
                stored.as_ref(),
                self.options.shard.as_ref(),
            )?
        };
        Ok((stored, shard))
    }

    /// Writes the identity an existing store is opened as when it is not the one stored (a
    /// newer epoch, or a store adopted into a cluster), synced, before anyone is served. A new
    /// store got it with its first batch.
    fn record_claim(
        &self,
        claimed: Option<&ShardIdentity>,
        stored: Option<&ShardIdentity>,
    ) -> Result<()> {
        match claimed {
            Some(claimed) if Some(claimed) != stored => {
                self.put_synced(META_SHARD, &encode(claimed))
            }
            _ => Ok(()),
        }
    }

    /// `last_committed` and the next inode number as the store holds them (missing: 0, and
    /// shard `shard`'s first inode number).
    fn stored_counters(&self, shard: u16) -> Result<(u64, u64)> {
        let meta = self.cf(CF_META);
        let last_committed = match self.db.get_cf(meta, META_LAST_COMMITTED)? {
            Some(v) => decode_meta_u64("last_committed", &v)?,
            None => 0,
        };
        let next_ino = match self.db.get_cf(meta, META_NEXT_INO)? {
            Some(v) => decode_meta_u64("next_ino", &v)?,
            None => first_ino(shard),
        };
        Ok((last_committed, next_ino))
    }

    /// Every resend slot on disk, read back as each client's slots and the records a resend
    /// may still be answered from.
    fn recover_resend(&self) -> Result<(HashMap<u64, ClientSlots>, Vec<ClientResend>)> {
        let mut slots = Vec::new();
        self.scan_resend(|client, slot, value| {
            slots.push((client, slot, value));
            Ok(())
        })?;
        Ok(crate::resend::recover(slots))
    }

    /// The store's replay key; a writable open of a store without one (new, or written by a
    /// build before tickets) draws it and writes it, synced, before anyone can be given a
    /// ticket made with it.
    fn replay_key(&self, writable: bool) -> Result<[u8; SECRET_LEN]> {
        let meta = self.cf(CF_META);
        if let Some(v) = self.db.get_cf(meta, META_REPLAY_KEY)? {
            return v.as_slice().try_into().map_err(|_| Error::Corrupt {
                what: "replay key",
                detail: format!("{} bytes", v.len()),
            });
        }
        let mut key = [0u8; SECRET_LEN];
        if writable {
            getrandom::fill(&mut key).map_err(|e| Error::Random(e.to_string()))?;
            self.db.put_cf_opt(meta, META_REPLAY_KEY, key, &synced())?;
        }
        Ok(key)
    }

    /// Starts the in-memory counters and ceilings from what the store holds.
    fn start_from(&self, last_committed: u64, next_ino: u64, ceilings: Ceilings) {
        self.last_committed.store(last_committed, Ordering::SeqCst);
        self.next_ino.store(next_ino, Ordering::SeqCst);
        self.transno_ceiling
            .store(ceilings.transno, Ordering::SeqCst);
        self.ino_ceiling.store(ceilings.ino, Ordering::SeqCst);
    }

    /// Creates the families an older schema's store lacked at open ([`families_missing`]),
    /// once the open has made it current, and takes their numbers for the commits' batches.
    fn add_families(&mut self, missing: &[&str], cache: &Cache, tuning: &Tuning) -> Result<()> {
        for name in missing {
            Arc::get_mut(&mut self.db)
                .expect("no thread holds the store yet")
                .create_cf(name, &cf_options(cache, tuning, name))?;
        }
        if [
            self.families.data,
            self.families.xattrs,
            self.families.edits,
        ]
        .contains(&u32::MAX)
        {
            self.families = Families::of(&self.db); // the families just added
        }
        Ok(())
    }

    /// Writes every edit the store holds into the images, whatever this open's setting:
    /// before anything reads the namespace, the images alone hold it from here on. A
    /// checkpoint cut short may have left its files.
    fn write_out_stored_edits(&self) -> Result<()> {
        let _ = std::fs::remove_dir_all(self.checkpoint_dir());
        edits::apply_stored(&self.db, self.families, &self.checkpoint_dir())?;
        Ok(())
    }

    /// With the edit log: marks the store as written so (a follower refuses it) and starts
    /// the checkpointer. Without it: clears a mark an earlier open left.
    fn start_or_end_edit_log(&mut self) -> Result<()> {
        let meta = self.cf(CF_META);
        match self.options.edit_log {
            Some(edit_log) => {
                self.put_synced(META_EDIT_LOG, &[])?;
                self.checkpointer = Some(Checkpointer::start(
                    Arc::clone(&self.db),
                    self.families,
                    self.checkpoint_dir(),
                    edit_log.checkpoint_bytes,
                )?);
            }
            None if self.db.get_cf(meta, META_EDIT_LOG)?.is_some() => {
                self.db.delete_cf_opt(meta, META_EDIT_LOG, &synced())?;
            }
            None => {}
        }
        Ok(())
    }
}

/// RocksDB's options for a writable open with `options`.
fn writable_db_options(options: &JournalOptions, tuning: &Tuning) -> Options {
    let mut opts = db_options(tuning);
    if options.edit_log.is_some() {
        // Log files are written over from their start once no family needs them, within
        // their old length: a sync then writes the data alone, where an append also wrote
        // the inode's new size (a second device round trip a commit, on this ext4). Not in
        // a cluster, where the edit log is refused (`Journal::open_tuned`): a standby's
        // reader of the log spins on a file written over under it (docs/BENCHMARKS.md,
        // "Reused log files").
        opts.set_recycle_log_file_num(RECYCLED_LOGS);
    }
    if options.shard.is_some() {
        // A cluster's standby may follow this store (`follow.rs`): the log files a flush
        // makes obsolete are archived a while instead of deleted, so that a follower reads
        // the last batches of an owner that flushed as it stopped (a planned handover).
        opts.set_wal_ttl_seconds(ARCHIVED_LOG_TTL.as_secs());
        opts.set_wal_size_limit_mb(ARCHIVED_LOG_MB);
    }
    opts
}

/// The families this build added that the store at `path` lacks (none for a new store).
///
/// A store of an older schema lacks the families later versions added (`xattrs` in
/// version 3, `data` and `orphans` in 4). It is opened with the families it has, so
/// that one the checks at open refuse is left as it was — its own build could not open
/// it again with a family it does not know — and gets them once it is current (a
/// crash in between leaves a current store without them: the next open adds them).
fn families_missing(opts: &Options, path: &Path) -> Result<Vec<&'static str>> {
    let present = path
        .join("CURRENT")
        .is_file()
        .then(|| DB::list_cf(opts, path))
        .transpose()?;
    Ok(ADDED_CFS
        .into_iter()
        .filter(|name| {
            present
                .as_ref()
                .is_some_and(|p| !p.iter().any(|f| f == name))
        })
        .collect())
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
