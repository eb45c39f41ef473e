//! The edit log (`JournalOptions::edit_log`): a commit writes its changes to the namespace
//! families (`inodes`, `dentries`) and to its clients' resend slots (`clients`) as one value
//! in the `edits` family — the records it would have put in its own batch, in RocksDB's batch
//! format — instead of a key each; and a background thread, the checkpointer, writes the
//! images those edits leave into sorted table files and ingests them (RocksDB's
//! `SstFileWriter` and `IngestExternalFile`), then deletes the edits it wrote. HDFS's edits
//! and fsimage, with RocksDB holding both. Client changes written between commits
//! (`Journal::write_client_changes`) that touch `clients` are an edit of their own, keyed
//! after the last commit's ([`EditKey::client`]): every change to `clients` goes through the
//! edits in order, so none written later is undone by an older one a checkpoint applies.
//!
//! Why: a key through a write batch costs RocksDB a memtable insert, then the flush's walk and
//! rewrite of the memtable (~3,700 instructions a key, counted); a key in a sorted file built
//! by hand costs the table builder alone (~1,200), and a directory re-imaged by every create
//! in it is written once a checkpoint, not once a commit.
//!
//! Recovery: the edits of a commit are in the same synced batch as the rest of the commit, so
//! whatever is committed has its edits in the store. An edit is the full new value of each key
//! it names (or its deletion), so applying edits again over images that already hold them, in
//! commit order, ends where applying them once does: a checkpoint cut short anywhere (a
//! family ingested and the other not, or both and the edits not yet deleted) is finished by
//! the next open, which applies every edit left before it reads anything. A read-only open
//! cannot write; it reads the edits left over the images (`Overlay`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use rocksdb::{
    DB, DBCompressionType, IngestExternalFileOptions, IteratorMode, ReadOptions, SstFileWriter,
};

use super::raw_batch::Families;
use crate::error::{Error, Result};
use crate::options::{Tuning, block_cache, cf_options, full_scan};
use crate::schema::{CF_CLIENTS, CF_DENTRIES, CF_EDITS, CF_INODES};

/// Edit bytes the checkpointer gathers before it writes them out: about half a namespace
/// write buffer's worth of keys, so a checkpoint's table files are of the size a flush's were.
pub(crate) const CHECKPOINT_BYTES: usize = 32 << 20;

/// Checkpoints' worth of edits handed over and not yet taken by the checkpointer before a
/// commit waits for it: a bound on the memory a checkpointer that cannot keep up holds, as
/// RocksDB's write stall bounds its memtables. (A checkpoint of `CHECKPOINT_BYTES` takes ~0.1 s
/// of a core; it gathers in a second or more of commits.)
const CHECKPOINT_QUEUE: usize = 2;

/// The key of a commit's edits: its last transno, big-endian, so that the family is in
/// commit order.
pub(crate) fn edit_key(transno: u64) -> [u8; 8] {
    transno.to_be_bytes()
}

/// An edit's key as stored: a commit's ([`edit_key`]) or a client change's
/// ([`EditKey::client`]). What a checkpoint deletes is up to the last key it wrote out, not up
/// to a transno: a client change written after a commit the checkpointer already took has the
/// commit's transno in its key, and must stay until it is written out itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EditKey {
    bytes: [u8; 16],
    len: usize,
}

impl EditKey {
    /// The key of the edit of the commit whose last transno is `transno`.
    pub(crate) fn commit(transno: u64) -> EditKey {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&edit_key(transno));
        EditKey { bytes, len: 8 }
    }

    /// The key of client changes written between commits (`Journal::write_client_changes`),
    /// the `seq`th after the commit of `last_committed`: that commit's key, then `seq`. A key
    /// of 8 bytes sorts before every longer one it begins, and every one of those before the
    /// next commit's.
    pub(crate) fn client(last_committed: u64, seq: u64) -> EditKey {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&edit_key(last_committed));
        bytes[8..].copy_from_slice(&seq.to_be_bytes());
        EditKey { bytes, len: 16 }
    }

    /// A stored key: 8 bytes (a commit's) or 16 (a client change's).
    fn stored(key: &[u8]) -> Result<EditKey> {
        let len = key.len();
        if len != 8 && len != 16 {
            return Err(Error::Corrupt {
                what: "edit key",
                detail: format!("{len} bytes"),
            });
        }
        let mut bytes = [0; 16];
        bytes[..len].copy_from_slice(key);
        Ok(EditKey { bytes, len })
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The least key after this one (its bytes and a zero byte): the end of a range that
    /// ends with it.
    fn successor(&self) -> Vec<u8> {
        let mut after = self.as_bytes().to_vec();
        after.push(0);
        after
    }
}

/// RocksDB's record types (`db/dbformat.h`) a namespace edit holds.
const TYPE_FAMILY_DELETION: u8 = 0x4;
const TYPE_FAMILY_VALUE: u8 = 0x5;
/// A batch's header: its sequence number and record count.
const HEADER: usize = 12;

/// One key's change: its new value, or `None` for a deletion.
type Change<'a> = (&'a [u8], Option<&'a [u8]>);

/// The changes of a run of edits, by family, in commit order.
#[derive(Debug, Default)]
pub(crate) struct Gathered<'a> {
    pub(crate) inodes: Vec<Change<'a>>,
    pub(crate) dentries: Vec<Change<'a>>,
    pub(crate) clients: Vec<Change<'a>>,
}

impl<'a> Gathered<'a> {
    /// Reads one edit's records (a batch's bytes, header included) into the families'
    /// lists.
    pub(crate) fn add(&mut self, families: Families, edit: &'a [u8]) -> Result<()> {
        let corrupt = |detail: String| Error::Corrupt {
            what: "namespace edit",
            detail,
        };
        let (header, mut rest) = edit
            .split_at_checked(HEADER)
            .ok_or_else(|| corrupt(format!("{} bytes, shorter than a header", edit.len())))?;
        let count = u32::from_le_bytes(header[8..].try_into().expect("four bytes"));
        let mut read = 0u32;
        while let Some((&kind, after)) = rest.split_first() {
            read += 1;
            rest = after;
            let family = varint32(&mut rest).ok_or_else(|| corrupt("a family cut short".into()))?;
            let key = slice(&mut rest).ok_or_else(|| corrupt("a key cut short".into()))?;
            let value = match kind {
                TYPE_FAMILY_VALUE => {
                    Some(slice(&mut rest).ok_or_else(|| corrupt("a value cut short".into()))?)
                }
                TYPE_FAMILY_DELETION => None,
                other => return Err(corrupt(format!("a record of type {other:#x}"))),
            };
            let list = if family == families.inodes {
                &mut self.inodes
            } else if family == families.dentries {
                &mut self.dentries
            } else if family == families.clients {
                &mut self.clients
            } else {
                return Err(corrupt(format!("a record for family {family}")));
            };
            list.push((key, value));
        }
        if read != count {
            return Err(corrupt(format!(
                "{read} records where the header says {count}"
            )));
        }
        Ok(())
    }
}

fn varint32(bytes: &mut &[u8]) -> Option<u32> {
    let mut n = 0u32;
    for shift in (0..35).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        n |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

fn slice<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint32(bytes)?).ok()?;
    let (s, rest) = bytes.split_at_checked(len)?;
    *bytes = rest;
    Some(s)
}

/// Each key's last change, in key order, of equal keys the last kept. A run of edits is
/// mostly in key order already: inode numbers and the entries keyed by them grow with each
/// create, and with two partitions they are two such sequences interleaved (each takes its
/// numbers in runs, `mds/src/namespace/ino_run.rs`). Those are merged in one pass
/// ([`merged_if_two_runs`]); anything else keeps each key's last change first and sorts
/// those ([`last_of_each_sorted`]). Keys compare by [`head`] first.
pub(crate) fn last_changes(changes: Vec<Change<'_>>) -> Vec<Change<'_>> {
    let Some(sorted) = merged_if_two_runs(&changes) else {
        return last_of_each_sorted(changes);
    };
    let mut last: Vec<Change<'_>> = Vec::with_capacity(sorted.len());
    for change in sorted {
        match last.last_mut() {
            Some(prev) if prev.0 == change.0 => *prev = change,
            _ => last.push(change),
        }
    }
    last
}

/// Each key's last change, found with a hash of the keys, then those alone sorted. What is
/// not in runs is mostly the same few keys again and again: a directory re-imaged by every
/// create in it, a checkpoint holding each of 64 clients' directories once a commit. A
/// stable sort of every change took ~860 instructions a create at 64 x 1 (counted,
/// docs/BENCHMARKS.md, "A checkpoint's repeated images kept once before the sort"); here
/// each change costs a hash and a probe, and the sort sees each key once.
fn last_of_each_sorted(changes: Vec<Change<'_>>) -> Vec<Change<'_>> {
    let mut at: foldhash::HashMap<&[u8], usize> =
        foldhash::HashMapExt::with_capacity(changes.len());
    let mut last: Vec<Change<'_>> = Vec::with_capacity(changes.len());
    for change in changes {
        match at.entry(change.0) {
            std::collections::hash_map::Entry::Occupied(seen) => last[*seen.get()] = change,
            std::collections::hash_map::Entry::Vacant(new) => {
                new.insert(last.len());
                last.push(change);
            }
        }
    }
    // Each key once: an unstable sort cannot reorder equal ones.
    last.sort_unstable_by(|a, b| head(a.0).cmp(&head(b.0)).then_with(|| a.0.cmp(b.0)));
    last
}

/// `changes` in key order (equal keys in their order in the list) if they are at most two
/// increasing runs interleaved — each change goes after the last of one of them — else
/// `None`. A stable sort of two interleaved runs merged short runs at every level, ~400
/// instructions a create at 64 x 16 with two partitions (docs/BENCHMARKS.md, "Inode numbers
/// in runs"); this is one pass to split them and one to merge.
fn merged_if_two_runs<'a>(changes: &[Change<'a>]) -> Option<Vec<Change<'a>>> {
    let mut runs: [Vec<(usize, Change<'a>)>; 2] = [Vec::new(), Vec::new()];
    for (at, change) in changes.iter().enumerate() {
        let fits = |run: &Vec<(usize, Change<'a>)>| {
            run.last()
                .is_none_or(|(_, last)| in_order(last.0, change.0))
        };
        let run = runs.iter_mut().find(|run| fits(run))?;
        run.push((at, *change));
    }
    let [first, second] = runs;
    let mut merged = Vec::with_capacity(changes.len());
    let (mut a, mut b) = (first.iter().peekable(), second.iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (None, None) => break,
            // Equal keys in their order in the list: the last of them is the one kept.
            (Some(x), Some(y)) => {
                if in_order(x.1.0, y.1.0) && (x.1.0 != y.1.0 || x.0 < y.0) {
                    a.next()
                } else {
                    b.next()
                }
            }
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
        };
        merged.extend(next.map(|(_, c)| *c));
    }
    Some(merged)
}

/// Whether key `a` goes before `b`, or is equal to it.
fn in_order(a: &[u8], b: &[u8]) -> bool {
    (head(a), a) <= (head(b), b)
}

/// A key's first 8 bytes as a big-endian number, zero-padded: keys in its order are in the
/// order of their bytes, and since inode and entry keys begin with an inode number it settles
/// nearly every comparison above without a `memcmp`.
fn head(key: &[u8]) -> u64 {
    if let Some(first) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    let mut padded = [0u8; 8];
    padded[..key.len()].copy_from_slice(key);
    u64::from_be_bytes(padded)
}

/// Writes the images `edits` (each a commit's edit, in commit order) leave, family by
/// family, into a sorted table file and ingests it; `dir` holds the files meanwhile.
pub(crate) fn apply(db: &DB, families: Families, dir: &Path, edits: &[&[u8]]) -> Result<()> {
    let mut gathered = Gathered::default();
    for edit in edits {
        gathered.add(families, edit)?;
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error(&dir.display().to_string(), &e))?;
    let tuning = Tuning::default();
    let cache = block_cache();
    for (name, changes) in [
        (CF_INODES, gathered.inodes),
        (CF_DENTRIES, gathered.dentries),
        (CF_CLIENTS, gathered.clients),
    ] {
        if changes.is_empty() {
            continue;
        }
        let file = dir.join(format!("{name}.sst"));
        let mut opts = cf_options(&cache, &tuning, name);
        // Plain, as a flush writes level 0 (`options::cf_options`): compaction compresses
        // what it moves further down. (LZ4 here was ~1,400 instructions a create, counted.)
        // The writer takes the last level's compression when there is a list by level.
        opts.set_compression_type(DBCompressionType::None);
        opts.set_compression_per_level(&[DBCompressionType::None]);
        let mut writer = SstFileWriter::create(&opts);
        writer.open(&file)?;
        for (key, value) in last_changes(changes) {
            match value {
                Some(value) => writer.put(key, value)?,
                None => writer.delete(key)?,
            }
        }
        writer.finish()?;
        let mut ingest = IngestExternalFileOptions::default();
        // The file is the store's now: linked in, not copied.
        ingest.set_move_files(true);
        let cf = db.cf_handle(name).ok_or(Error::Corrupt {
            what: "store",
            detail: format!("no {name} family"),
        })?;
        db.ingest_external_file_cf_opts(cf, &ingest, vec![&file])?;
        let _ = std::fs::remove_file(&file);
    }
    Ok(())
}

/// Deletes the edits up to the one keyed `through`, which is included (all applied).
pub(crate) fn forget(db: &DB, through: &EditKey) -> Result<()> {
    let cf = edits_family(db)?;
    db.delete_range_cf(cf, edit_key(0).as_slice(), through.successor().as_slice())?;
    Ok(())
}

/// Flushes the `edits` memtable, in the background, once a checkpoint has deleted what it
/// holds (when it holds `at_least` bytes: less is not worth a table file). A flush drops what
/// a range deletion in the same memtable covers, so it writes only the edits of commits since
/// the checkpoint's. Left to fill its write buffer, the memtable flushed with up to a
/// checkpoint's worth of edits still live, and table files held them until compaction
/// removed them again: at 64 x 1, two 32 MB files in 10 s against ~0.65 MB a checkpoint now
/// (docs/BENCHMARKS.md, "Resend slots in the commit's edit").
fn flush_forgotten(db: &DB, at_least: usize) -> Result<()> {
    let cf = edits_family(db)?;
    let active = db
        .property_int_value_cf(cf, "rocksdb.cur-size-active-mem-table")?
        .unwrap_or(0);
    if active >= at_least as u64 {
        let mut background = rocksdb::FlushOptions::default();
        background.set_wait(false);
        db.flush_cf_opt(cf, &background)?;
    }
    Ok(())
}

fn edits_family(db: &DB) -> Result<&rocksdb::ColumnFamily> {
    db.cf_handle(CF_EDITS).ok_or(Error::Corrupt {
        what: "store",
        detail: format!("no {CF_EDITS} family"),
    })
}

/// Every edit the store holds (as `read` sees it), in commit order, with its key.
pub(crate) fn stored(db: &DB, read: ReadOptions) -> Result<Vec<(EditKey, Box<[u8]>)>> {
    let Some(cf) = db.cf_handle(CF_EDITS) else {
        return Ok(Vec::new()); // a read-only open of a store from before the edit log
    };
    let mut edits = Vec::new();
    for item in db.iterator_cf_opt(cf, read, IteratorMode::Start) {
        let (key, value) = item?;
        edits.push((EditKey::stored(&key)?, value));
    }
    Ok(edits)
}

/// At a writable open: applies every edit the store holds and deletes them, so that the
/// images alone are the committed namespace again. Returns how many there were.
pub(crate) fn apply_stored(db: &DB, families: Families, dir: &Path) -> Result<usize> {
    let edits = stored(db, full_scan())?;
    let Some(&(last, _)) = edits.last() else {
        return Ok(0);
    };
    let bytes: Vec<&[u8]> = edits.iter().map(|(_, edit)| &**edit).collect();
    apply(db, families, dir, &bytes)?;
    forget(db, &last)?;
    Ok(edits.len())
}

/// A family's changes in the edit log: each key's last change (`None`: deleted).
pub(crate) type Changes = BTreeMap<Box<[u8]>, Option<Box<[u8]>>>;

/// [`Changes`] from one key on.
type ChangesFrom<'a> = std::collections::btree_map::Range<'a, Box<[u8]>, Option<Box<[u8]>>>;

/// The changes of the edits a store holds, by family and key, for reads of the images that
/// must see them too: a read-only open's (which cannot apply them), or any read while the
/// checkpointer has edits to write out. Read through the same snapshot as the images.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    pub(crate) inodes: Changes,
    pub(crate) dentries: Changes,
    pub(crate) clients: Changes,
}

impl Overlay {
    pub(crate) fn read(db: &DB, families: Families, read: ReadOptions) -> Result<Overlay> {
        let edits = stored(db, read)?;
        let mut gathered = Gathered::default();
        for (_, edit) in &edits {
            gathered.add(families, edit)?;
        }
        let own = |changes: Vec<Change<'_>>| {
            changes
                .into_iter()
                .map(|(k, v)| (Box::from(k), v.map(Box::from)))
                .collect()
        };
        Ok(Overlay {
            inodes: own(gathered.inodes),
            dentries: own(gathered.dentries),
            clients: own(gathered.clients),
        })
    }
}

/// A family's keys and values in key order: the images' (`images`, from RocksDB), with the
/// edit log's changes read over them (`changes`, from the same key on).
pub(crate) struct Overlaid<'a, I: Iterator> {
    images: std::iter::Peekable<I>,
    changes: std::iter::Peekable<ChangesFrom<'a>>,
}

impl<'a, I> Overlaid<'a, I>
where
    I: Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>,
{
    pub(crate) fn new(images: I, changes: &'a Changes, from: &[u8]) -> Overlaid<'a, I> {
        Overlaid {
            images: images.peekable(),
            changes: changes
                .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
                .peekable(),
        }
    }
}

impl<I> Iterator for Overlaid<'_, I>
where
    I: Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>,
{
    type Item = Result<(Box<[u8]>, Box<[u8]>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some((key, _)) = self.changes.peek() else {
                return self.images.next().map(|item| item.map_err(Error::from));
            };
            match self.images.peek() {
                Some(Ok((image_key, _))) if image_key < *key => {
                    return self.images.next().map(|item| item.map_err(Error::from));
                }
                Some(Ok((image_key, _))) if image_key == *key => {
                    self.images.next(); // the change replaces it
                }
                Some(Err(_)) => return self.images.next().map(|item| item.map_err(Error::from)),
                _ => {}
            }
            let (key, change) = self.changes.next().expect("peeked");
            if let Some(value) = change {
                return Some(Ok((key.clone(), value.clone())));
            }
        }
    }
}

/// A checkpoint's own I/O failed (not a damaged store: no `Error::Corrupt`).
fn io_error(what: &str, e: &std::io::Error) -> Error {
    Error::Checkpoint(format!("{what}: {e}"))
}

/// A durable commit's edit as the checkpointer holds it: the commit's batch, cut after the
/// edit, which is the batch's first value, and where the edit begins in it. Not copied out.
pub(crate) struct Edit {
    bytes: Vec<u8>,
    start: usize,
}

impl Edit {
    /// The edit at `range` of a commit's batch `bytes`.
    pub(crate) fn within(mut bytes: Vec<u8>, range: std::ops::Range<usize>) -> Edit {
        bytes.truncate(range.end);
        // The batch was sized for the whole commit (its resend records and meta come after
        // the edit): held until a checkpoint, that room would be memory beyond the edit bytes
        // checkpoints are sized by. Shrinking gives the tail back in place (a realloc to a
        // smaller size does not copy), once a commit.
        bytes.shrink_to_fit();
        Edit {
            bytes,
            start: range.start,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    fn len(&self) -> usize {
        self.bytes.len() - self.start
    }
}

/// What the committer hands the checkpointer.
enum Message {
    /// Durable commits' edits (and client changes'), each with its key, in commit order.
    Edits(Vec<(EditKey, Edit)>),
    /// Write out what was handed over now, and say how it went.
    WriteOut(SyncSender<Result<()>>),
    /// Write out what was handed over, then stop (a clean close).
    Stop,
    /// Stop without writing anything out, as a crash would (a test hook).
    Abandon,
}

/// What the checkpointer has done, for metrics, and why it stopped if it failed.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) checkpoints: AtomicU64,
    pub(crate) nanos: AtomicU64,
    /// Edit bytes handed over and not yet written out.
    pub(crate) held_bytes: AtomicU64,
    /// The error a checkpoint stopped on: the journal stops too (fail-stop, as after a
    /// failed write), and the next open writes the edits out.
    pub(crate) failure: Mutex<Option<String>>,
}

/// Edits of durable commits the committer holds for the checkpointer, and their bytes.
#[derive(Default)]
struct HeldEdits {
    edits: Vec<(EditKey, Edit)>,
    bytes: usize,
}

/// The checkpointer thread, the channel to it, and the edits gathered for it.
pub(crate) struct Checkpointer {
    tx: SyncSender<Message>,
    /// Edits of durable commits not handed over yet, and their bytes: the thread is woken
    /// once a checkpoint's worth, not once a commit (a wake and two context switches a
    /// commit, on a core the committer and the partitions share).
    gathered: Mutex<HeldEdits>,
    checkpoint_bytes: usize,
    thread: Option<JoinHandle<Result<()>>>,
    pub(crate) progress: Arc<Progress>,
}

impl Checkpointer {
    pub(crate) fn start(
        db: Arc<DB>,
        families: Families,
        dir: PathBuf,
        checkpoint_bytes: usize,
    ) -> Result<Checkpointer> {
        let (tx, rx) = std::sync::mpsc::sync_channel(CHECKPOINT_QUEUE);
        let progress = Arc::new(Progress::default());
        let shared = Arc::clone(&progress);
        let thread = std::thread::Builder::new()
            .name("checkpointer".into())
            .spawn(move || {
                let outcome = run(&db, families, &dir, checkpoint_bytes, &rx, &shared);
                if let Err(e) = &outcome {
                    *shared.failure.lock().expect("not poisoned") = Some(e.to_string());
                }
                outcome
            })
            .map_err(|e| io_error("starting the checkpointer thread", &e))?;
        Ok(Checkpointer {
            tx,
            gathered: Mutex::default(),
            checkpoint_bytes,
            thread: Some(thread),
            progress,
        })
    }

    /// Takes a durable commit's (or client change's) edit, stored under `key`, and hands the
    /// gathered edits over once they are a checkpoint's worth.
    pub(crate) fn committed(&self, key: EditKey, edit: Edit) {
        self.progress
            .held_bytes
            .fetch_add(edit.len() as u64, Ordering::Relaxed);
        let mut gathered = self.gathered.lock().expect("not poisoned");
        gathered.bytes += edit.len();
        gathered.edits.push((key, edit));
        if gathered.bytes >= self.checkpoint_bytes {
            let edits = std::mem::take(&mut *gathered).edits;
            drop(gathered);
            // A checkpointer that stopped on an error leaves the edits in the store: the next
            // open applies them (and the journal stops at its next commit: `failure`).
            let _ = self.tx.send(Message::Edits(edits));
        }
    }

    /// Hands over whatever edits are gathered, ahead of `then`.
    fn send_gathered_then(&self, then: Message) -> std::result::Result<(), ()> {
        let edits = std::mem::take(&mut *self.gathered.lock().expect("not poisoned")).edits;
        if !edits.is_empty() {
            self.tx.send(Message::Edits(edits)).map_err(|_| ())?;
        }
        self.tx.send(then).map_err(|_| ())
    }

    /// Why the checkpointer stopped, if it failed.
    pub(crate) fn failure(&self) -> Option<String> {
        self.progress.failure.lock().expect("not poisoned").clone()
    }

    /// Writes out what was handed over so far, and waits for it.
    pub(crate) fn write_out(&self) -> Result<()> {
        let (done, outcome) = std::sync::mpsc::sync_channel(1);
        self.send_gathered_then(Message::WriteOut(done))
            .map_err(|()| stopped())?;
        outcome.recv().map_err(|_| stopped())?
    }

    /// Writes out what was handed over and waits for the thread.
    pub(crate) fn stop(&mut self) -> Result<()> {
        self.end(Message::Stop)
    }

    /// Stops the thread without writing out what it holds (the edits stay in the store).
    pub(crate) fn abandon(&mut self) -> Result<()> {
        self.end(Message::Abandon)
    }

    fn end(&mut self, how: Message) -> Result<()> {
        let _ = match how {
            // The edits gathered are in the store: abandoned with the rest.
            Message::Abandon => self.tx.send(how).map_err(|_| ()),
            _ => self.send_gathered_then(how),
        };
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(outcome)) => outcome,
            Some(Err(_)) => Err(Error::Checkpoint("the checkpointer panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn stopped() -> Error {
    Error::Checkpoint(
        "the checkpointer stopped after an error (the next open writes the edits out)".into(),
    )
}

fn run(
    db: &DB,
    families: Families,
    dir: &Path,
    checkpoint_bytes: usize,
    rx: &Receiver<Message>,
    progress: &Progress,
) -> Result<()> {
    let mut held: Vec<(EditKey, Edit)> = Vec::new();
    let mut bytes = 0;
    let write_out = |held: &mut Vec<(EditKey, Edit)>| -> Result<()> {
        if let Some(&(last, _)) = held.last() {
            let started = Instant::now();
            let edits: Vec<&[u8]> = held.iter().map(|(_, e)| e.as_slice()).collect();
            apply(db, families, dir, &edits)?;
            forget(db, &last)?;
            flush_forgotten(db, checkpoint_bytes / 2)?;
            let written: usize = held.iter().map(|(_, e)| e.len()).sum();
            held.clear();
            progress
                .held_bytes
                .fetch_sub(written as u64, Ordering::Relaxed);
            progress.checkpoints.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            progress.nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        Ok(())
    };
    loop {
        match rx.recv() {
            Ok(Message::Edits(edits)) => {
                bytes += edits.iter().map(|(_, edit)| edit.len()).sum::<usize>();
                held.extend(edits);
                if bytes >= checkpoint_bytes {
                    write_out(&mut held)?;
                    bytes = 0;
                }
            }
            Ok(Message::WriteOut(done)) => {
                let outcome = write_out(&mut held);
                bytes = 0;
                let failed = outcome.is_err();
                let _ = done.send(outcome);
                if failed {
                    return Err(stopped());
                }
            }
            Ok(Message::Stop) | Err(_) => return write_out(&mut held),
            Ok(Message::Abandon) => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Edit;

    #[test]
    fn an_edit_holds_its_own_bytes_not_the_rest_of_its_commits_batch() {
        let edit_bytes: Vec<u8> = (0..100).collect();
        let mut batch = Vec::with_capacity(64 << 10);
        batch.extend_from_slice(&[0; 40]); // the room in front and the put's header
        batch.extend_from_slice(&edit_bytes);
        batch.extend_from_slice(&[9; 500]); // the rest of the commit
        let edit = Edit::within(batch, 40..140);
        assert_eq!(edit.as_slice(), edit_bytes);
        assert_eq!(edit.len(), 100);
        assert!(
            edit.bytes.capacity() < 1024,
            "holds {} bytes for a 100-byte edit",
            edit.bytes.capacity()
        );
    }
}
