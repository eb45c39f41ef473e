//! A directory's entries, and the order READDIR lists them in.
//!
//! The entries are a B-tree keyed by one 64-bit word of each name ([`name_order_key`], from the
//! protocol's definition of READDIR's order, [`mds_proto::name_order`]): the name itself when it
//! has at most eight bytes, else its last eight bytes. Names that share that word (rare: a
//! common eight-byte ending) share one slot, ordered by their bytes there. A search compares
//! the 8-byte words of a node's keys as integers, where the B-tree of whole names it replaced
//! compared 40-byte keys through `memcmp`: fewer cache lines a level and fewer instructions
//! (docs/benchmarks/in-memory.md, "A directory's entries keyed by a word of their name"). The names and
//! entries stay in the nodes: boxed, a node was ~190 bytes and creates at 1,024 outstanding
//! ~4% faster, but a LOOKUP followed one more pointer and lost ~15%.
//! Names made from a counter — `file.1`, `file.2`, mdtest's and loadgen's — end in the digits
//! that change, so they stay next to each other in this order and their creates keep landing
//! in the same few leaves, as in byte order; a hash of the name spread them over cold leaves
//! (measured, and not taken, before).
//!
//! The order is `(name_order_key(name), name)`: byte order among names of up to eight bytes, and
//! otherwise the order of their ends. READDIR pages through it by cursor (a name), so a page
//! starts right after its cursor whether or not that name is still there.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::Bound;

use mds_proto::name_order_key;

use super::node::{DirName, Entry};

/// A directory's entries by name, in directory order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Entries {
    by_key: BTreeMap<u64, Names>,
    len: usize,
}

/// The names that share one order key.
#[derive(Clone, Debug)]
enum Names {
    One(DirName, Entry),
    /// Two or more, by bytes.
    Many(BTreeMap<DirName, Entry>),
}

impl Names {
    fn get(&self, name: &[u8]) -> Option<&Entry> {
        match self {
            Names::One(n, e) => (n.as_bytes() == name).then_some(e),
            Names::Many(m) => m.get(name),
        }
    }

    fn get_mut(&mut self, name: &[u8]) -> Option<&mut Entry> {
        match self {
            Names::One(n, e) => (n.as_bytes() == name).then_some(e),
            Names::Many(m) => m.get_mut(name),
        }
    }

    /// Adds a name that is not among these.
    fn add(&mut self, name: DirName, entry: Entry) -> &mut Entry {
        if let Names::One(first, its) = self {
            // A second name for the slot: rare, so the first name's copy costs nothing.
            *self = Names::Many(BTreeMap::from([(first.clone(), *its)]));
        }
        let Names::Many(many) = self else {
            unreachable!("one name became many just above")
        };
        many.entry(name).or_insert(entry)
    }

    /// These names after `cursor` in byte order (all of them with no cursor).
    fn after(&self, cursor: Option<&[u8]>) -> NamesIter<'_> {
        match self {
            Names::One(n, e) => {
                NamesIter::One(cursor.is_none_or(|c| n.as_bytes() > c).then_some((n, e)))
            }
            Names::Many(m) => NamesIter::Many(match cursor {
                Some(c) => m.range::<[u8], _>((Bound::Excluded(c), Bound::Unbounded)),
                None => m.range::<[u8], _>(..),
            }),
        }
    }
}

/// The names of one slot, in order.
enum NamesIter<'a> {
    One(Option<(&'a DirName, &'a Entry)>),
    Many(btree_map::Range<'a, DirName, Entry>),
}

impl<'a> Iterator for NamesIter<'a> {
    type Item = (&'a DirName, &'a Entry);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            NamesIter::One(one) => one.take(),
            NamesIter::Many(many) => many.next(),
        }
    }
}

/// The entries from a point of directory order on ([`Entries::after`]): the rest of one
/// slot's names, then every name of the slots after it.
pub(crate) struct After<'a> {
    slots: btree_map::Range<'a, u64, Names>,
    names: NamesIter<'a>,
}

impl<'a> Iterator for After<'a> {
    type Item = (&'a DirName, &'a Entry);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.names.next() {
                return Some(item);
            }
            // A slot of one name (nearly all of them) is given out at once.
            match self.slots.next()? {
                (_, Names::One(name, entry)) => return Some((name, entry)),
                (_, names) => self.names = names.after(None),
            }
        }
    }
}

/// What [`Entries::slot`] found for a name.
pub(crate) enum Slot<'a> {
    /// The name has this entry.
    Taken(&'a mut Entry),
    /// The name is free; [`Free::insert`] gives it an entry without searching again.
    Free(Free<'a>),
}

/// A free name's place, found by [`Entries::slot`].
pub(crate) struct Free<'a> {
    name: DirName,
    len: &'a mut usize,
    at: FreeAt<'a>,
}

/// What [`Entries::find`] found: the name's entry, or the count and place a new one takes.
enum Found<'a> {
    Taken(&'a mut Entry),
    Free(&'a mut usize, FreeAt<'a>),
}

enum FreeAt<'a> {
    /// No name has its order key.
    NewKey(btree_map::VacantEntry<'a, u64, Names>),
    /// Other names share its order key.
    Shared(&'a mut Names),
}

impl<'a> Free<'a> {
    /// Gives the name `entry`.
    pub(crate) fn insert(self, entry: Entry) -> &'a mut Entry {
        *self.len += 1;
        match self.at {
            FreeAt::NewKey(vacant) => match vacant.insert(Names::One(self.name, entry)) {
                Names::One(_, entry) => entry,
                Names::Many(_) => unreachable!("inserted as one"),
            },
            FreeAt::Shared(names) => names.add(self.name, entry),
        }
    }
}

impl Entries {
    pub(crate) fn new() -> Entries {
        Entries::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn get(&self, name: &[u8]) -> Option<&Entry> {
        self.by_key.get(&name_order_key(name))?.get(name)
    }

    /// The name's entry, or its free place: one search for a create's check and insert.
    pub(crate) fn slot(&mut self, name: &str) -> Slot<'_> {
        match self.find(name.as_bytes()) {
            Found::Taken(entry) => Slot::Taken(entry),
            Found::Free(len, at) => Slot::Free(Free {
                name: DirName::new(name),
                len,
                at,
            }),
        }
    }

    /// Gives `name` `entry`, returning the entry it replaces.
    pub(crate) fn insert(&mut self, name: DirName, entry: Entry) -> Option<Entry> {
        match self.find(name.as_bytes()) {
            Found::Taken(old) => Some(std::mem::replace(old, entry)),
            Found::Free(len, at) => {
                Free { name, len, at }.insert(entry);
                None
            }
        }
    }

    /// The search under [`Entries::slot`] and [`Entries::insert`], before a name is made (an
    /// insert brings its own).
    fn find(&mut self, name: &[u8]) -> Found<'_> {
        match self.by_key.entry(name_order_key(name)) {
            btree_map::Entry::Vacant(vacant) => Found::Free(&mut self.len, FreeAt::NewKey(vacant)),
            btree_map::Entry::Occupied(occupied) => {
                let names = occupied.into_mut();
                if names.get(name).is_some() {
                    return Found::Taken(names.get_mut(name).expect("found just above"));
                }
                Found::Free(&mut self.len, FreeAt::Shared(names))
            }
        }
    }

    /// Removes `name`'s entry, returning it.
    pub(crate) fn remove(&mut self, name: &[u8]) -> Option<Entry> {
        let btree_map::Entry::Occupied(mut slot) = self.by_key.entry(name_order_key(name)) else {
            return None;
        };
        let removed = match slot.get_mut() {
            Names::One(n, e) => {
                if n.as_bytes() != name {
                    return None;
                }
                let removed = *e;
                slot.remove();
                removed
            }
            Names::Many(many) => {
                let removed = many.remove(name)?;
                if many.len() == 1 {
                    let (n, e) = many.pop_first().expect("one left");
                    *slot.get_mut() = Names::One(n, e);
                }
                removed
            }
        };
        self.len -= 1;
        Some(removed)
    }

    /// Every entry, in directory order.
    pub(crate) fn iter(&self) -> After<'_> {
        self.after(None)
    }

    /// The entries after `cursor` in directory order (all of them with no cursor), whether
    /// or not `cursor` names one.
    pub(crate) fn after(&self, cursor: Option<&[u8]>) -> After<'_> {
        let Some(cursor) = cursor else {
            return After {
                slots: self.by_key.range(..),
                names: NamesIter::One(None),
            };
        };
        let from = name_order_key(cursor);
        let mut slots = self.by_key.range(from..);
        // The cursor's own slot, if it has one: only its names after the cursor.
        let names = match self.by_key.get(&from) {
            Some(names) => {
                slots.next();
                names.after(Some(cursor))
            }
            None => NamesIter::One(None),
        };
        After { slots, names }
    }
}

/// Built in one pass from entries in any order (start-up's): sorted into directory order
/// first. Of two entries under one name, the later is kept.
impl FromIterator<(DirName, Entry)> for Entries {
    fn from_iter<I: IntoIterator<Item = (DirName, Entry)>>(iter: I) -> Entries {
        let mut all: Vec<(u64, DirName, Entry)> = iter
            .into_iter()
            .map(|(name, entry)| (name_order_key(name.as_bytes()), name, entry))
            .collect();
        // Stable: of equal names, the later stays after the earlier and replaces it below.
        all.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let mut slots: Vec<(u64, Names)> = Vec::with_capacity(all.len());
        let mut len = 0;
        for (key, name, entry) in all {
            match slots.last_mut() {
                Some((last, names)) if *last == key => {
                    if let Some(old) = names.get_mut(name.as_bytes()) {
                        *old = entry;
                    } else {
                        names.add(name, entry);
                        len += 1;
                    }
                }
                _ => {
                    slots.push((key, Names::One(name, entry)));
                    len += 1;
                }
            }
        }
        Entries {
            by_key: slots.into_iter().collect(),
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::node::{FileKind, Stamp};
    use mds_proto::name_order;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn entry(ino: u64) -> Entry {
        Entry {
            ino,
            kind: FileKind::File,
            stamp: Stamp::default(),
        }
    }

    /// Short names, names inline or not, and names that share their last eight bytes (and so
    /// a slot) with others.
    const NAMES: &str = "[a-zé.\\-]{1,12}|[ab]{30,36}|[a-c]{1,3}zzzzzzzz|.{1,80}";

    fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
        let mut v: Vec<String> = names.collect();
        v.sort_by(|a, b| name_order(a.as_bytes(), b.as_bytes()));
        v
    }

    #[test]
    fn short_names_sort_as_bytes_and_long_ones_by_their_ends() {
        let names = [
            "b",
            "ab",
            "a",
            "file.10",
            "file.9",
            "a-long-name.2",
            "z-long-name.1",
        ];
        let dir: Entries = names
            .iter()
            .enumerate()
            .map(|(i, n)| (DirName::new(n), entry(i as u64)))
            .collect();
        let listed: Vec<&str> = dir.iter().map(|(n, _)| n.as_str()).collect();
        // "file.10" and "file.9" have at most eight bytes: byte order. The long ones sort by
        // "g-name.1" and "g-name.2": a counter at the end keeps its run together.
        assert_eq!(
            listed,
            [
                "a",
                "ab",
                "b",
                "file.10",
                "file.9",
                "z-long-name.1",
                "a-long-name.2"
            ]
        );
        assert_eq!(dir.len(), 7);
    }

    #[test]
    fn names_sharing_their_end_share_a_slot_until_one_is_left() {
        let mut dir = Entries::new();
        for (i, n) in ["xx-shared-end", "yy-shared-end", "zz-shared-end"]
            .iter()
            .enumerate()
        {
            assert!(dir.insert(DirName::new(n), entry(i as u64)).is_none());
        }
        assert_eq!(dir.by_key.len(), 1, "one slot for three names");
        assert_eq!(dir.get(b"yy-shared-end").map(|e| e.ino), Some(1));
        assert_eq!(dir.remove(b"xx-shared-end").map(|e| e.ino), Some(0));
        assert_eq!(dir.remove(b"xx-shared-end").map(|e| e.ino), None);
        assert_eq!(dir.remove(b"zz-shared-end").map(|e| e.ino), Some(2));
        assert!(matches!(
            dir.by_key.values().next().unwrap(),
            Names::One(..)
        ));
        assert_eq!(dir.get(b"yy-shared-end").map(|e| e.ino), Some(1));
        assert_eq!(dir.remove(b"yy-shared-end").map(|e| e.ino), Some(1));
        assert!(dir.is_empty() && dir.by_key.is_empty());
    }

    #[test]
    fn a_slot_finds_a_taken_name_and_fills_a_free_one() {
        let mut dir = Entries::new();
        dir.insert(DirName::new("one-shared-end"), entry(1));
        match dir.slot("one-shared-end") {
            Slot::Taken(e) => e.ino = 10,
            Slot::Free(_) => panic!("the name is taken"),
        }
        assert_eq!(dir.get(b"one-shared-end").map(|e| e.ino), Some(10));
        for (name, ino) in [("two-shared-end", 2), ("short", 3)] {
            match dir.slot(name) {
                Slot::Taken(_) => panic!("{name} is free"),
                Slot::Free(free) => assert_eq!(free.insert(entry(ino)).ino, ino),
            }
        }
        assert_eq!(dir.len(), 3);
        assert_eq!(dir.get(b"two-shared-end").map(|e| e.ino), Some(2));
        assert_eq!(dir.get(b"short").map(|e| e.ino), Some(3));
    }

    proptest! {
        /// Built at once or by inserts and removes, a directory holds what a set of the same
        /// names would, lists them in directory order, finds each by its bytes and no other,
        /// and pages from any cursor — one of its names or not — as the set would.
        #[test]
        fn a_directory_holds_lists_and_pages_as_a_set_of_its_names_would(
            names in proptest::collection::btree_set(NAMES, 1..40),
            others in proptest::collection::vec(NAMES, 0..20),
            removed in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let ino = |n: &String| n.len() as u64;
            let built: Entries = names.iter().map(|n| (DirName::new(n), entry(ino(n)))).collect();
            let mut grown = Entries::new();
            for n in names.iter().chain(&others) {
                grown.insert(DirName::new(n), entry(ino(n)));
            }
            let mut set: std::collections::BTreeSet<String> = names.clone();
            set.extend(others.iter().cloned());
            let gone: Vec<String> = removed
                .iter()
                .map(|i| i.get(&set.iter().cloned().collect::<Vec<_>>()).clone())
                .collect();
            for n in &gone {
                let was = set.remove(n);
                prop_assert_eq!(grown.remove(n.as_bytes()).is_some(), was);
            }
            for (dir, set) in [(&built, &names), (&grown, &set)] {
                prop_assert_eq!(dir.len(), set.len());
                let listed: Vec<&str> = dir.iter().map(|(n, _)| n.as_str()).collect();
                let want = sorted(set.iter().cloned());
                prop_assert_eq!(&listed, &want);
                for n in names.iter().chain(&others).chain(&gone) {
                    let expected = set.contains(n).then_some(ino(n));
                    prop_assert_eq!(dir.get(n.as_bytes()).map(|e| e.ino), expected);
                    let page: Vec<&str> =
                        dir.after(Some(n.as_bytes())).map(|(k, _)| k.as_str()).collect();
                    let expected: Vec<&str> = want
                        .iter()
                        .filter(|w| name_order(w.as_bytes(), n.as_bytes()) == Ordering::Greater)
                        .map(String::as_str)
                        .collect();
                    prop_assert_eq!(page, expected);
                }
            }
        }
    }
}
