//! The group commit: a group of transactions made durable in one synced write batch, with
//! the new `last_committed`, the next inode number and the ceilings. [`Journal::commit`] is
//! its steps in order: refuse a stopped journal, check the records' order, build the batch
//! ([`CommitChanges`] gathers it from the records' operations), write it synced, then hand
//! its edit to the checkpointer and publish what is durable.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::edits::{Checkpointer, EditKey};
use super::images::{Births, creates, put_dentry, put_last_inode_images};
use super::raw_batch::{Families, RawBatch};
use super::{CommitInfo, Journal, synced};
use crate::error::{Error, Result};
use crate::resend::ClientSlots;
use crate::schema::{
    Dentry, JournalOp, META_LAST_COMMITTED, META_NEXT_INO, META_NEXT_SLICE, PendingDir,
    ResendRecord, ResendSlotRef, TxRecord, client_key, data_key, data_key_end, dentry_key_into,
    encode, garbage_key, gone_key, ino_key, layout_key, named_key_into, pending_key, resend_key,
    session_key,
};

/// A `DeleteData` of at most this many blocks is point deletes: a small file's removal (a
/// 16-block file is 64 KiB) leaves no range tombstone behind, which RocksDB's reads of the
/// family would have to step over until compaction.
const POINT_DELETES_MAX: u32 = 16;

/// Bytes of write batch a commit reserves per record: a create's inode, entry and share of
/// its resend slot and directory image come to ~150 (the entry with its inode's image
/// embedded ~120 of them).
const COMMIT_BYTES_PER_RECORD: usize = 192;

/// A commit's batch as built: the batch, its edit (with the edit log), and the next inode
/// number it records.
struct BuiltCommit {
    batch: RawBatch,
    edit: Option<(EditKey, Range<usize>)>,
    next_ino: u64,
}

impl Journal {
    /// Makes a group of transactions durable in one synced `WriteBatch`, together with the new
    /// `last_committed` and inode high-water mark.
    ///
    /// `records` must be in transno order and contiguous from `last_committed + 1`: that is
    /// what keeps `last_committed` contiguous and makes later updates of one key win, as the
    /// serial order says. Any failure stops the journal for good (fail-stop); it is never
    /// retried, because after a failed fsync the state of the disk is unknown.
    pub fn commit(&self, records: &[TxRecord]) -> Result<CommitInfo> {
        self.refuse_if_stopped()?;
        let Some(last) = records.last() else {
            return Ok(self.nothing_to_commit());
        };
        let started = Instant::now();
        self.check_contiguous(records)?;
        let BuiltCommit {
            mut batch,
            edit,
            next_ino,
        } = self.build_commit(records, last.transno)?;
        let ceilings = self.wanted_ceilings(last.transno, next_ino);
        self.put_ceilings(&mut batch, ceilings);
        let bytes = batch.size_in_bytes();
        let build = started.elapsed();

        self.fail_if_injected(&mut batch)?;
        let write_sync = self.write_synced(&mut batch)?;
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

    /// Refuses to commit once the journal has stopped: after a failed write, or when the edit
    /// log's checkpointer failed (which stops it from now on).
    fn refuse_if_stopped(&self) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        if let Some(failure) = self.checkpointer.as_ref().and_then(Checkpointer::failure) {
            self.failed.store(true, Ordering::Release);
            return Err(Error::Checkpoint(failure));
        }
        Ok(())
    }

    /// What a commit of no records did: nothing; the state as it is.
    fn nothing_to_commit(&self) -> CommitInfo {
        CommitInfo {
            last_committed: self.last_committed(),
            transactions: 0,
            bytes: 0,
            ceilings: self.ceilings(),
            build: Duration::ZERO,
            write_sync: Duration::ZERO,
        }
    }

    /// Refuses records that do not follow on from `last_committed` one by one (the commit
    /// contract: the caller's bug, not the disk's).
    fn check_contiguous(&self, records: &[TxRecord]) -> Result<()> {
        for (expected, record) in (self.last_committed() + 1..).zip(records) {
            if record.transno != expected {
                return Err(Error::OutOfOrder {
                    expected,
                    got: record.transno,
                });
            }
        }
        Ok(())
    }

    /// The commit's batch, but for its ceilings: the changes to `inodes`, `dentries` and the
    /// resend slots first (with the edit log, the commit's edit), then every other family's,
    /// then `last_committed` (`last_transno`) and the next inode number.
    fn build_commit(&self, records: &[TxRecord], last_transno: u64) -> Result<BuiltCommit> {
        let mut next_ino = self.next_ino.load(Ordering::Relaxed);
        let namespace = self.changes_batch(COMMIT_BYTES_PER_RECORD * records.len());
        let mut changes = CommitChanges::new(self.families, namespace, records.len());
        let mut slots = self.resend_slots.lock().expect("not poisoned");
        for record in records {
            for op in &record.ops {
                changes.add(self, &mut slots, record, op);
            }
        }
        next_ino = next_ino.max(put_last_inode_images(
            &mut changes.namespace,
            self.families,
            records,
            changes.births,
        ));
        put_resend_slots(
            &mut changes.namespace,
            self.families.clients,
            &mut changes.resend,
            &mut slots,
        )?;
        drop(slots);
        let meta = self.families.meta;
        let (mut batch, edit) = self.as_edit(changes.namespace, || EditKey::commit(last_transno));
        batch.append(&changes.others);
        batch.put(meta, META_LAST_COMMITTED, last_transno.to_le_bytes());
        batch.put(meta, META_NEXT_INO, next_ino.to_le_bytes());
        Ok(BuiltCommit {
            batch,
            edit,
            next_ino,
        })
    }

    /// Writes a commit's batch, synced: its one trip to the device. A failure stops the
    /// journal. Returns the time the write and sync took.
    fn write_synced(&self, batch: &mut RawBatch) -> Result<Duration> {
        let write_started = Instant::now();
        if let Err(e) = self.db.write_opt(batch.write_batch(), &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        self.wait_out_sync_latency(write_started);
        Ok(write_started.elapsed())
    }
}

/// A commit's changes, gathered from its records' operations in transno order.
struct CommitChanges<'r> {
    families: Families,
    /// The changes to `inodes` and `dentries`, then the resend slots: with the edit log they
    /// become the commit's edit, one value at the head of its batch, else its first records;
    /// the rest of the batch follows them in the same bytes, so they are never copied. Sized
    /// once: grown by doubling, a busy commit's batch was copied a dozen times.
    namespace: RawBatch,
    /// What the operations write to other families, appended after the namespace's and the
    /// resend slots' changes (a create writes none there).
    others: RawBatch,
    /// Resend records with their client and its watermark, written after the operations, one
    /// slot per client per commit ([`put_resend_slots`]): sorted by client then, rather than
    /// hashed per record. Nearly every record of a busy batch carries one: sized once, not
    /// grown by doubling (a dozen reallocations and copies a commit, counted).
    resend: Vec<(u64, u64, &'r ResendRecord)>,
    /// The entries of inodes this commit creates, written after the operations with the
    /// inode's last image in their value (`schema::embedded_image`), which then needs no key
    /// of its own: one key a create, not two. Any other change to such an entry in the commit
    /// writes it first, as it came, and the inode's image goes under its own key.
    births: Births<'r>,
    /// The key being built, kept from one operation to the next.
    key: Vec<u8>,
}

impl<'r> CommitChanges<'r> {
    fn new(families: Families, namespace: RawBatch, records: usize) -> CommitChanges<'r> {
        CommitChanges {
            families,
            namespace,
            others: RawBatch::with_capacity(0),
            resend: Vec::with_capacity(records),
            births: Births::default(),
            key: Vec::with_capacity(64),
        }
    }

    /// Adds one operation of `record` to the batches. Inodes are not written here: each once
    /// per commit, with its last state ([`put_last_inode_images`]). Inlined into the loop of
    /// `build_commit`, as the match was before it had a name: called a few times a create, a
    /// call of its own cost the commit ~90 instructions a create (`bench/cachegrind.sh`).
    #[inline]
    fn add(
        &mut self,
        journal: &Journal,
        slots: &mut HashMap<u64, ClientSlots>,
        record: &'r TxRecord,
        op: &'r JournalOp,
    ) {
        let Families {
            meta,
            xattrs,
            data,
            orphans,
            ..
        } = self.families;
        match op {
            JournalOp::PutInode(_) | JournalOp::DeleteInode(_) => {}
            JournalOp::PutDentry {
                parent,
                name,
                entry,
            } => self.put_entry(record, *parent, name, entry),
            JournalOp::DeleteDentry {
                parent,
                name,
                child,
            } => self.delete_entry(*parent, name, *child),
            JournalOp::PutResend {
                client,
                acked_xid,
                record,
            } => self.resend.push((*client, *acked_xid, record)),
            JournalOp::DropResend { client } => {
                // Earlier records of the batch go with the rest (their client has their
                // replies, or its session would not have ended); later ones are a new
                // session's and are kept.
                self.resend.retain(|(c, _, _)| c != client);
                journal.drop_resend(&mut self.namespace, &mut self.others, slots, *client);
            }
            JournalOp::KnowClient { client } => self.others.put(meta, client_key(*client), []),
            JournalOp::ForgetClient { client } => self.others.delete(meta, client_key(*client)),
            JournalOp::BindSession { client, secret } => {
                self.others.put(meta, session_key(*client), secret);
            }
            JournalOp::PutXattr { ino, name, value } => {
                named_key_into(&mut self.key, *ino, name);
                self.others.put(xattrs, &self.key, value);
            }
            JournalOp::DeleteXattr { ino, name } => {
                named_key_into(&mut self.key, *ino, name);
                self.others.delete(xattrs, &self.key);
            }
            JournalOp::PutData { ino, block, bytes } => {
                self.others.put(data, data_key(*ino, *block), bytes);
            }
            JournalOp::DeleteData { ino, from, to } => self.delete_data(*ino, *from, *to),
            JournalOp::PutOrphan { ino, owners } => {
                self.others.put(orphans, ino_key(*ino), encode(owners));
            }
            JournalOp::DeleteOrphan(ino) => self.others.delete(orphans, ino_key(*ino)),
            JournalOp::PutPendingDir(p) => self.put_pending_dir(p),
            JournalOp::DeletePendingDir(ino) => self.others.delete(meta, pending_key(*ino)),
            JournalOp::PutLayout { ino, placed } => {
                self.others.put(meta, layout_key(*ino), encode(placed));
            }
            JournalOp::LayoutGone { ino, since } => {
                self.others.put(meta, gone_key(*ino), encode(since));
            }
            JournalOp::DeleteLayout(ino) => {
                self.others.delete(meta, layout_key(*ino));
                self.others.delete(meta, gone_key(*ino));
            }
            JournalOp::PutGarbage { slice, size, since } => {
                self.others
                    .put(meta, garbage_key(*slice), encode(&(*size, *since)));
            }
            JournalOp::DeleteGarbage(slice) => self.others.delete(meta, garbage_key(*slice)),
            JournalOp::NextSlice(next) => {
                self.others.put(meta, META_NEXT_SLICE, next.to_le_bytes());
            }
        }
    }

    /// An entry put: kept back as a birth when `record` creates its inode, else written as it
    /// comes (after the entry's birth, if this commit made one).
    #[inline]
    fn put_entry(&mut self, record: &TxRecord, parent: u64, name: &'r str, entry: &Dentry) {
        let dentries = self.families.dentries;
        if creates(record, entry.ino) {
            self.births.add(entry.ino, parent, name, *entry);
        } else {
            self.births
                .write_plain(&mut self.namespace, dentries, &mut self.key, entry.ino);
            put_dentry(
                &mut self.namespace,
                dentries,
                &mut self.key,
                parent,
                name,
                entry,
            );
        }
    }

    /// An entry deleted (after the entry's birth, if this commit made one).
    fn delete_entry(&mut self, parent: u64, name: &str, child: u64) {
        let dentries = self.families.dentries;
        self.births
            .write_plain(&mut self.namespace, dentries, &mut self.key, child);
        dentry_key_into(&mut self.key, child, parent, name);
        self.namespace.delete(dentries, &self.key);
    }

    /// A file's blocks `from..to` deleted: point deletes for a few, a range deletion for more
    /// ([`POINT_DELETES_MAX`]).
    fn delete_data(&mut self, ino: u64, from: u32, to: u32) {
        let data = self.families.data;
        if to.saturating_sub(from) <= POINT_DELETES_MAX {
            for block in from..to {
                self.others.delete(data, data_key(ino, block));
            }
        } else {
            self.others
                .delete_range(data, data_key(ino, from), data_key_end(ino, to));
        }
    }

    /// A directory made for another shard's entry, pending until that entry is found.
    fn put_pending_dir(&mut self, p: &PendingDir) {
        let mut value = encode(&(p.parent, &p.name));
        if p.removing {
            value.extend(encode(&true));
        }
        self.others
            .put(self.families.meta, pending_key(p.ino), value);
    }
}

/// Writes the commit's resend records into `batch`, one slot per client: the records whose
/// replies the client may not have yet (above its highest watermark in the commit), under
/// a slot its [`ClientSlots`] gives.
///
/// The resend slots go with the namespace's changes: with the edit log, in the commit's
/// edit, which the checkpointer writes to `clients` with the images. At one request in
/// flight a client's slot is rewritten by every commit, and as a key of the commit's own it
/// cost RocksDB an in-place memtable update and a record of the batch (~1,900 instructions a
/// create at 64 x 1, counted: docs/BENCHMARKS.md, "Resend slots in the commit's edit").
fn put_resend_slots(
    batch: &mut RawBatch,
    clients: u32,
    resend: &mut [(u64, u64, &ResendRecord)],
    slots: &mut HashMap<u64, ClientSlots>,
) -> Result<()> {
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
            batch.put(clients, resend_key(client, slot), bytes);
        });
        group = value.records;
    }
    Ok(())
}
