//! Which images a commit writes, and where: each inode the batch touches once, with its last
//! state ([`put_last_inode_images`]); and an inode the commit creates inside the value of the
//! entry it was created with rather than under a key of its own (schema 6, `docs/schema.md`
//! "A new inode's image in its entry"): the entries of such births are kept back in
//! [`Births`] until the commit's last images are known.

use super::raw_batch::{Families, RawBatch};
use crate::schema::{Dentry, Inode, JournalOp, TxRecord, dentry_key_into, ino_key};

/// Writes each inode the batch puts or deletes once, with its last state ([`last_images`]).
/// Returns the inode high-water mark the puts imply (one past the largest number put; 0 if
/// none).
pub(super) fn put_last_inode_images(
    batch: &mut RawBatch,
    families: Families,
    records: &[TxRecord],
    births: Births<'_>,
) -> u64 {
    let (mut last, next_ino) = last_images(records);
    let mut embedded = vec![false; last.len()];
    let mut key = Vec::with_capacity(64);
    for birth in births.pending() {
        // `last` is in inode order. A birth whose inode is gone again by the end of the
        // commit had its entry deleted too (written plain then): only live ones are here.
        let image = last
            .binary_search_by_key(&birth.child, |(ino, _)| *ino)
            .ok()
            .and_then(|at| last[at].1.take().map(|image| (at, image)));
        match image {
            Some((at, image)) => {
                dentry_key_into(&mut key, birth.child, birth.parent, birth.name);
                crate::schema::with_dentry_bytes(&birth.entry, |entry| {
                    crate::schema::with_inode_bytes(image, |image| {
                        batch.put_joined(families.dentries, &key, entry, image);
                    });
                });
                embedded[at] = true;
            }
            None => put_dentry(
                batch,
                families.dentries,
                &mut key,
                birth.parent,
                birth.name,
                &birth.entry,
            ),
        }
    }
    for ((ino, image), embedded) in last.into_iter().zip(embedded) {
        match image {
            Some(inode) => {
                crate::schema::with_inode_bytes(inode, |bytes| {
                    batch.put(families.inodes, ino_key(ino), bytes);
                });
            }
            None if embedded => {}
            None => batch.delete(families.inodes, ino_key(ino)),
        }
    }
    next_ino
}

/// Whether `record` creates inode `ino`: its image is in the record, with the record's
/// transno as its generation (the transno that created it: `Inode::generation`). No earlier
/// commit wrote that inode's key, so its entry may carry its image instead.
pub(super) fn creates(record: &TxRecord, ino: u64) -> bool {
    record.ops.iter().any(|op| {
        matches!(op, JournalOp::PutInode(inode) if inode.ino == ino && inode.generation == record.transno)
    })
}

pub(super) fn put_dentry(
    batch: &mut RawBatch,
    dentries: u32,
    key: &mut Vec<u8>,
    parent: u64,
    name: &str,
    entry: &Dentry,
) {
    dentry_key_into(key, entry.ino, parent, name);
    crate::schema::with_dentry_bytes(entry, |bytes| batch.put(dentries, &*key, bytes));
}

/// The entries a commit's new inodes were created with, kept back until the commit's last
/// images are known (`put_last_inode_images`).
#[derive(Default)]
pub(super) struct Births<'a> {
    list: Vec<Birth<'a>>,
    /// Child to its place in `list`: made only once a commit has an entry change besides its
    /// creates' (most commits of a create load have none).
    by_child: Option<foldhash::HashMap<u64, usize>>,
}

struct Birth<'a> {
    child: u64,
    parent: u64,
    name: &'a str,
    entry: Dentry,
    /// Still kept back (not yet written plain).
    pending: bool,
}

impl<'a> Births<'a> {
    pub(super) fn add(&mut self, child: u64, parent: u64, name: &'a str, entry: Dentry) {
        if let Some(by_child) = &mut self.by_child {
            by_child.insert(child, self.list.len());
        }
        self.list.push(Birth {
            child,
            parent,
            name,
            entry,
            pending: true,
        });
    }

    fn at(&mut self, child: u64) -> Option<usize> {
        if self.list.is_empty() {
            return None;
        }
        let list = &self.list;
        let by_child = self.by_child.get_or_insert_with(|| {
            list.iter()
                .enumerate()
                .map(|(at, birth)| (birth.child, at))
                .collect()
        });
        by_child.get(&child).copied()
    }

    /// Another change to `child`'s entries: its birth entry, if kept back, is written now as
    /// it came (before the change), and its image goes under its own key.
    pub(super) fn write_plain(
        &mut self,
        batch: &mut RawBatch,
        dentries: u32,
        key: &mut Vec<u8>,
        child: u64,
    ) {
        let Some(at) = self.at(child) else {
            return;
        };
        let birth = &mut self.list[at];
        if birth.pending {
            birth.pending = false;
            put_dentry(batch, dentries, key, birth.parent, birth.name, &birth.entry);
        }
    }

    fn pending(&self) -> impl Iterator<Item = &Birth<'a>> {
        self.list.iter().filter(|birth| birth.pending)
    }
}

/// Each inode the batch puts or deletes, once, with its last state (`None`: deleted), in
/// inode number order; and the high-water mark the puts imply. Found by walking the ops
/// backwards: one hash per inode op.
///
/// A batch is one atomic `WriteBatch`, so no reader and no recovery ever sees an inode's state
/// between two of its records. Yet under load most creates in a batch share their directory
/// with others (each re-images it: mtime, size, entry count), and every image would cost a
/// memtable entry, WAL bytes and the flush's write, the same as a new inode's. Number order is
/// key order: the `inodes` memtable's insert hint (`options::INODE_HINT_PREFIX`) then finds
/// each key's place beside the one before it.
pub(super) fn last_images(records: &[TxRecord]) -> (Vec<(u64, Option<&Inode>)>, u64) {
    let mut next_ino = 0;
    // A create images two inodes (the new one and its directory): room for that many up
    // front, rather than rehashing and regrowing as the batch is walked.
    let room = records.len() * 2;
    let mut written: foldhash::HashSet<u64> = foldhash::HashSetExt::with_capacity(room);
    let mut last = Vec::with_capacity(room);
    for op in records.iter().rev().flat_map(|r| r.ops.iter().rev()) {
        let (ino, image) = match op {
            JournalOp::PutInode(inode) => (inode.ino, Some(inode)),
            JournalOp::DeleteInode(ino) => (*ino, None),
            _ => continue,
        };
        if image.is_some() {
            next_ino = next_ino.max(ino.saturating_add(1));
        }
        if written.insert(ino) {
            last.push((ino, image)); // else a later op of this batch replaced it
        }
    }
    last.sort_unstable_by_key(|(ino, _)| *ino);
    (last, next_ino)
}
