//! A commit's write batch, encoded by hand in RocksDB's own batch format and handed to RocksDB
//! whole, and the numbers RocksDB gives the column families, which that format names them by.
//!
//! Through the C API every key of a commit was one call into `WriteBatch::Put`: the family's
//! number looked up from its handle, a save point taken and committed, the bytes appended to a
//! string grown by doubling — ~630 instructions a key, counted, and a create writes more than
//! two. Here a key is a type byte, a few varints and two copies into one buffer.
//!
//! The format (RocksDB's `db/write_batch.cc`, the bytes it logs as they are): a 12-byte
//! header, the sequence number (u64 little-endian, 0 here: RocksDB sets it when it writes)
//! and the number of records (u32 little-endian); then each record, for a family other than
//! the default one: its type byte, the family's number (varint32), the key (varint32 length,
//! then the bytes), and for a put the value, for a range deletion the end key, likewise. The
//! tests hold these bytes to those RocksDB's own `WriteBatch` makes for the same operations.

use rocksdb::{DB, WriteBatch, WriteBatchIteratorCf};

use crate::schema::{
    CF_CLIENTS, CF_DATA, CF_DENTRIES, CF_EDITS, CF_INODES, CF_META, CF_ORPHANS, CF_XATTRS,
};

/// RocksDB's record types (`db/dbformat.h`, `ValueType`) for a family other than the default.
const TYPE_FAMILY_DELETION: u8 = 0x4;
const TYPE_FAMILY_VALUE: u8 = 0x5;
const TYPE_FAMILY_RANGE_DELETION: u8 = 0xE;
/// The sequence number and the record count.
const HEADER: usize = 12;

/// Room a batch that may become another's value ([`RawBatch::into_value_of`]) keeps in front
/// of its header: the other batch's header and its put's type, family, key and value length.
const WRAP_ROOM: usize = HEADER + 1 + 5 + 1 + MAX_WRAP_KEY + 5;
/// The longest key a wrapped batch is put under (the edits family's keys are 8 bytes).
const MAX_WRAP_KEY: usize = 16;

/// A write batch being built.
pub(crate) struct RawBatch {
    /// The batch's bytes from `start`; before it, room left to wrap it.
    rep: Vec<u8>,
    start: usize,
    count: u32,
}

impl RawBatch {
    /// An empty batch with room for `bytes` of records, so that a commit's batch is not grown
    /// by doubling (each doubling copies everything written so far).
    pub(crate) fn with_capacity(bytes: usize) -> RawBatch {
        RawBatch::with_room(0, bytes)
    }

    /// The same, with room in front to become the value of a put in a batch of its own
    /// ([`RawBatch::into_value_of`]) without being copied.
    pub(crate) fn wrappable(bytes: usize) -> RawBatch {
        RawBatch::with_room(WRAP_ROOM, bytes)
    }

    fn with_room(start: usize, bytes: usize) -> RawBatch {
        let mut rep = Vec::with_capacity(start + HEADER + bytes);
        rep.resize(start + HEADER, 0);
        RawBatch {
            rep,
            start,
            count: 0,
        }
    }

    /// This batch, whole (header and count included), as the value of one put into `family`
    /// under `key` in a new batch that begins with that put, and may grow on: the put's
    /// header is written into the room kept in front, so the records are not copied. Returns
    /// the new batch and where the value lies in its bytes ([`RawBatch::into_rep`]).
    /// The batch must be [`RawBatch::wrappable`] and `key` at most 16 bytes.
    pub(crate) fn into_value_of(
        mut self,
        family: u32,
        key: &[u8],
    ) -> (RawBatch, std::ops::Range<usize>) {
        assert!(key.len() <= MAX_WRAP_KEY, "a wrapped batch's key is short");
        self.seal();
        let value = self.start..self.rep.len();
        let mut head = Vec::with_capacity(WRAP_ROOM);
        head.resize(HEADER, 0);
        head.push(TYPE_FAMILY_VALUE);
        varint32(&mut head, family);
        varint32(&mut head, key.len() as u32);
        head.extend_from_slice(key);
        varint32(
            &mut head,
            u32::try_from(value.len()).expect("a value under 4 GiB"),
        );
        let start = self
            .start
            .checked_sub(head.len())
            .expect("a batch made wrappable");
        self.rep[start..value.start].copy_from_slice(&head);
        let outer = RawBatch {
            rep: self.rep,
            start,
            count: 1,
        };
        (outer, value)
    }

    pub(crate) fn put(&mut self, family: u32, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.record(TYPE_FAMILY_VALUE, family, key.as_ref());
        self.slice(value.as_ref());
    }

    /// Puts one value made of `first` followed by `second`, without joining them elsewhere.
    pub(crate) fn put_joined(&mut self, family: u32, key: &[u8], first: &[u8], second: &[u8]) {
        self.record(TYPE_FAMILY_VALUE, family, key);
        varint32(
            &mut self.rep,
            u32::try_from(first.len() + second.len()).expect("a value under 4 GiB"),
        );
        self.rep.extend_from_slice(first);
        self.rep.extend_from_slice(second);
    }

    pub(crate) fn delete(&mut self, family: u32, key: impl AsRef<[u8]>) {
        self.record(TYPE_FAMILY_DELETION, family, key.as_ref());
    }

    /// Deletes the keys from `begin` (included) to `end` (excluded).
    pub(crate) fn delete_range(
        &mut self,
        family: u32,
        begin: impl AsRef<[u8]>,
        end: impl AsRef<[u8]>,
    ) {
        self.record(TYPE_FAMILY_RANGE_DELETION, family, begin.as_ref());
        self.slice(end.as_ref());
    }

    /// The batch's bytes so far, header included (what RocksDB's `size_in_bytes` says).
    pub(crate) fn size_in_bytes(&self) -> usize {
        self.rep.len() - self.start
    }

    /// Whether no record was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The batch as RocksDB takes it (one copy of the bytes); the batch stays as it was.
    pub(crate) fn write_batch(&mut self) -> WriteBatch {
        self.seal();
        WriteBatch::from_data(&self.rep[self.start..])
    }

    /// The same, for a batch that is not needed afterwards.
    pub(crate) fn into_write_batch(mut self) -> WriteBatch {
        self.write_batch()
    }

    /// The batch's bytes, header and count included: what RocksDB's `WriteBatch::data` of
    /// the same batch would be.
    #[cfg(test)]
    pub(crate) fn into_bytes(mut self) -> Vec<u8> {
        self.seal();
        self.rep.drain(..self.start);
        self.rep
    }

    /// All the bytes kept, the room in front included: the ranges [`RawBatch::into_value_of`]
    /// returns are into these.
    pub(crate) fn into_rep(mut self) -> Vec<u8> {
        self.seal();
        self.rep
    }

    /// Adds `other`'s records after this batch's.
    pub(crate) fn append(&mut self, other: &RawBatch) {
        self.rep
            .extend_from_slice(&other.rep[other.start + HEADER..]);
        self.count += other.count;
    }

    /// Writes the record count into the header.
    fn seal(&mut self) {
        let at = self.start + 8;
        self.rep[at..at + 4].copy_from_slice(&self.count.to_le_bytes());
    }

    fn record(&mut self, kind: u8, family: u32, key: &[u8]) {
        self.count += 1;
        self.rep.push(kind);
        varint32(&mut self.rep, family);
        self.slice(key);
    }

    fn slice(&mut self, bytes: &[u8]) {
        // Keys and values here are a few KiB at most (a data block is 4 KiB).
        varint32(
            &mut self.rep,
            u32::try_from(bytes.len()).expect("a key or value under 4 GiB"),
        );
        self.rep.extend_from_slice(bytes);
    }
}

/// RocksDB's `EncodeVarint32`: seven bits a byte, low first, the high bit set on all but the
/// last.
fn varint32(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The numbers RocksDB gave the store's column families (a family absent from the store, in
/// a read-only open of an older one: `u32::MAX`, which RocksDB refuses in a batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Families {
    pub(crate) inodes: u32,
    pub(crate) dentries: u32,
    pub(crate) clients: u32,
    pub(crate) meta: u32,
    pub(crate) xattrs: u32,
    pub(crate) data: u32,
    pub(crate) orphans: u32,
    pub(crate) edits: u32,
}

impl Families {
    pub(crate) fn of(db: &DB) -> Families {
        let id = |name| family_id(db, name).unwrap_or(u32::MAX);
        Families {
            inodes: id(CF_INODES),
            dentries: id(CF_DENTRIES),
            clients: id(CF_CLIENTS),
            meta: id(CF_META),
            xattrs: id(CF_XATTRS),
            data: id(CF_DATA),
            orphans: id(CF_ORPHANS),
            edits: id(CF_EDITS),
        }
    }
}

/// The number RocksDB gave the family `name` (None if the store has none by that name): a
/// family's handle carries it into every batch that writes it, so a batch written here,
/// never to the store, says it.
pub(crate) fn family_id(db: &DB, name: &str) -> Option<u32> {
    struct Probe(Option<u32>);
    impl WriteBatchIteratorCf for Probe {
        fn put_cf(&mut self, cf_id: u32, _: &[u8], _: &[u8]) {
            self.0 = Some(cf_id);
        }
        fn delete_cf(&mut self, _: u32, _: &[u8]) {}
        fn merge_cf(&mut self, _: u32, _: &[u8], _: &[u8]) {}
    }
    let mut probe = WriteBatch::default();
    probe.put_cf(db.cf_handle(name)?, [], []);
    let mut found = Probe(None);
    probe.iterate_cf(&mut found);
    found.0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One operation of a batch, on family `family` of two.
    #[derive(Clone, Debug)]
    enum Op {
        Put(usize, Vec<u8>, Vec<u8>),
        Delete(usize, Vec<u8>),
        DeleteRange(usize, Vec<u8>, Vec<u8>),
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // Lengths on both sides of one varint byte (127/128) and of two (16,383/16,384).
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::collection::vec(any::<u8>(), 16_380..16_390),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..2usize, bytes(), bytes()).prop_map(|(f, k, v)| Op::Put(f, k, v)),
            (0..2usize, bytes()).prop_map(|(f, k)| Op::Delete(f, k)),
            (0..2usize, bytes(), bytes()).prop_map(|(f, b, e)| Op::DeleteRange(f, b, e)),
        ]
    }

    /// A store whose families have numbers of one varint byte and of two: the tests' batches
    /// go to `inodes` (1) and to a family created after 130 others. One for every case.
    fn store() -> &'static DB {
        static STORE: std::sync::OnceLock<(tempfile::TempDir, DB)> = std::sync::OnceLock::new();
        &STORE
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let mut opts = rocksdb::Options::default();
                opts.create_if_missing(true);
                opts.create_missing_column_families(true);
                let mut db = DB::open_cf(&opts, dir.path(), [CF_INODES]).unwrap();
                for n in 0..130 {
                    db.create_cf(format!("f{n}"), &opts).unwrap();
                }
                (dir, db)
            })
            .1
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The hand-made bytes are RocksDB's own for the same operations, and RocksDB reads
        /// them back as those operations.
        #[test]
        fn a_batch_by_hand_is_rocksdbs(ops in proptest::collection::vec(op(), 0..12)) {
            let db = store();
            let names = [CF_INODES, "f129"];
            let ids = names.map(|n| family_id(db, n).unwrap());
            prop_assert!(ids[1] >= 128, "a family number of two varint bytes: {}", ids[1]);
            let mut theirs = WriteBatch::default();
            let mut ours = RawBatch::with_capacity(16);
            for op in &ops {
                apply(db, names, ids, op, &mut theirs, &mut ours);
            }
            prop_assert_eq!(ours.size_in_bytes(), theirs.size_in_bytes());
            let ours = ours.into_write_batch();
            prop_assert_eq!(ours.data(), theirs.data());
            prop_assert_eq!(ours.len(), ops.len());
        }
    }

    /// Puts `op` into both batches.
    fn apply(
        db: &DB,
        names: [&str; 2],
        ids: [u32; 2],
        op: &Op,
        theirs: &mut WriteBatch,
        ours: &mut RawBatch,
    ) {
        match op {
            Op::Put(f, k, v) => {
                theirs.put_cf(db.cf_handle(names[*f]).unwrap(), k, v);
                ours.put(ids[*f], k, v);
            }
            Op::Delete(f, k) => {
                theirs.delete_cf(db.cf_handle(names[*f]).unwrap(), k);
                ours.delete(ids[*f], k);
            }
            Op::DeleteRange(f, b, e) => {
                theirs.delete_range_cf(db.cf_handle(names[*f]).unwrap(), b, e);
                ours.delete_range(ids[*f], b, e);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// A batch wrapped as another's value is RocksDB's batch of that put, and then of
        /// what was added after it; the range returned is the inner batch's bytes.
        #[test]
        fn a_wrapped_batch_is_rocksdbs_put_of_it(
            inner in proptest::collection::vec(op(), 0..6),
            after in proptest::collection::vec(op(), 0..4),
            key in proptest::collection::vec(any::<u8>(), 0..=16),
            family in 0..2usize,
        ) {
            let db = store();
            let names = [CF_INODES, "f129"];
            let ids = names.map(|n| family_id(db, n).unwrap());
            let mut plain = WriteBatch::default();
            let mut wrapped = RawBatch::wrappable(0);
            for op in &inner {
                apply(db, names, ids, op, &mut plain, &mut wrapped);
            }
            let (mut ours, value) = wrapped.into_value_of(ids[family], &key);
            let mut theirs = WriteBatch::default();
            theirs.put_cf(db.cf_handle(names[family]).unwrap(), &key, plain.data());
            for op in &after {
                apply(db, names, ids, op, &mut theirs, &mut ours);
            }
            prop_assert_eq!(ours.size_in_bytes(), theirs.size_in_bytes());
            let written = ours.write_batch();
            prop_assert_eq!(written.data(), theirs.data());
            prop_assert_eq!(&ours.into_rep()[value], plain.data());
        }
    }

    /// A batch by hand is written and read back like any other.
    #[test]
    fn a_batch_by_hand_is_written() {
        let db = store();
        let (inodes, other) = (
            db.cf_handle(CF_INODES).unwrap(),
            db.cf_handle("f129").unwrap(),
        );
        db.put_cf(inodes, b"gone", b"x").unwrap();
        db.put_cf(other, b"b", b"x").unwrap();
        let mut batch = RawBatch::with_capacity(0);
        batch.put(family_id(db, CF_INODES).unwrap(), b"k", b"v");
        batch.delete(family_id(db, CF_INODES).unwrap(), b"gone");
        batch.delete_range(family_id(db, "f129").unwrap(), b"a", b"c");
        batch.put(family_id(db, "f129").unwrap(), b"c", [7; 300]);
        db.write(batch.into_write_batch()).unwrap();
        assert_eq!(db.get_cf(inodes, b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(db.get_cf(inodes, b"gone").unwrap(), None);
        assert_eq!(db.get_cf(other, b"b").unwrap(), None);
        assert_eq!(db.get_cf(other, b"c").unwrap(), Some(vec![7; 300]));
        assert_eq!(family_id(db, "no such family"), None);
    }
}
