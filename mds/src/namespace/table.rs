//! The inode table: every inode in memory, striped over many small mutexes.
//!
//! An operation locks the stripes of all inodes it touches, in stripe order (so two operations
//! can never wait on each other in a cycle), does its checks and changes, takes its transno,
//! and unlocks. There is no service-wide lock: independent operations on different
//! directories only meet when their inodes hash to one stripe.
//!
//! A stripe also remembers, for commit-on-share, the stamps of the inodes removed from it
//! whose removal may not be durable yet: an answer that an inode is gone (ESTALE) builds on
//! its removal as much as an answer about a live inode builds on its last change. Only
//! removals write there, so creates and reads of live inodes never touch it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use super::ino_run::RUN_BITS;
use super::node::{Node, Stamp};

/// Number of stripes; a power of two.
const STRIPES: usize = 1024;
const STRIPE_BITS: u32 = STRIPES.trailing_zeros();

/// The hash of an inode number in its stripe's map, built so that the inodes a stripe gets one
/// after another sit in neighbouring buckets.
///
/// Inode numbers are handed out in sequence, a block of 64 at a time to each creating thread
/// (`ino_run`), and a stripe holds whole blocks ~1024 blocks apart (see `stripe_of`). So
/// [`dense`] — the block's number in its stripe, `block >> STRIPE_BITS` (steps of 0, 1 or 2
/// between a stripe's blocks), then the number's place in its block — numbers a stripe's
/// inodes nearly densely in creation order, and hashbrown (std's HashMap) takes the home
/// bucket from the hash's low bits. A stripe's table then fills in order, and growing it (each
/// doubling moves every ~170-byte node) copies runs of neighbours instead of scattering each
/// node to a random bucket — a stripe's table is about a megabyte under load, hundreds of
/// megabytes over all stripes. Against foldhash, server CPU per create at 64 x 16 read 0.89,
/// 0.90 and 0.98 in three runs (with `ino mod 1024` stripes of single numbers), where the same
/// build against itself reads 0.96 to 1.03: a few percent (docs/benchmarks/in-memory.md). hashbrown
/// compares a tag taken from the hash's top seven bits (on a 64-bit target) before it compares
/// keys, so those are mixed: neighbours, and numbers that share a home bucket, get different
/// tags.
///
/// The keys are inode numbers the server hands out (a replayed create takes back the number it
/// was given before): numbers that did collide would slow only their own stripe, never make a
/// lookup wrong. Only `u64` keys reach this hasher (`InoMap`).
#[derive(Clone, Copy, Default)]
struct InoHasher(u64);

const TAG_BITS: u64 = 0x7f << 57;

impl Hasher for InoHasher {
    fn write_u64(&mut self, ino: u64) {
        let dense = dense(ino);
        self.0 = dense | tag(dense);
    }

    /// `Hasher` requires it; no key of `InoMap` calls it. It hashes the bytes (FNV-1a) rather
    /// than panic.
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// `ino`'s place among its stripe's inodes: below 2^54, so clear of the tag's bits.
fn dense(ino: u64) -> u64 {
    ((ino >> RUN_BITS >> STRIPE_BITS) << RUN_BITS) | (ino & ((1 << RUN_BITS) - 1))
}

/// Fibonacci hashing of the dense number: neighbours' tags are as far apart as they can be.
fn tag(dense: u64) -> u64 {
    dense.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TAG_BITS
}

type InoMap<V> = HashMap<u64, V, BuildHasherDefault<InoHasher>>;

/// How many removed inodes a stripe remembers before it first drops the durable ones.
const REMOVED_PURGE_AT: usize = 64;

/// How far ahead of full the stripes grow their maps, as a fraction of a doubling: stripe `i`
/// doubles its map once it is `i / (GROWTH_SPREAD * STRIPES)` short of full.
///
/// Fibonacci striping fills every stripe alike (within a few percent), so left to hashbrown
/// all 1024 maps double within ~7% of each other's population, up to 590 of them within one
/// run of 1024 creates: at 900k inodes each doubling moves ~150 KB of nodes into pages
/// faulted in fresh, and every request in flight waited for the burst (20-150 ms at 64 x 16,
/// the client's p99.9, docs/benchmarks/tail.md). Each stripe growing at its own point spreads the
/// doublings over the last eighth of each doubling of the population as well (at most ~160
/// in a run of 1024 creates), for about 6% more bucket memory on average (the earliest
/// stripe grows 7/8 full).
const GROWTH_SPREAD: usize = 8;

/// The inodes of one stripe, and the recent removals among them.
struct Stripe {
    nodes: InoMap<Node>,
    /// This stripe's place in the growth order: how far short of full (in
    /// `1 / (GROWTH_SPREAD * STRIPES)` of the map's capacity) it grows. See [`GROWTH_SPREAD`].
    grows_early_by: usize,
    /// Commit-on-share: inodes removed by changes that may not be durable yet, with the stamp
    /// their removal left. Empty (no allocation) until the first removal in the stripe.
    removed: InoMap<Stamp>,
    /// Size of `removed` at which it is next purged of durable removals: twice what the last
    /// purge kept (at least `REMOVED_PURGE_AT`), so a stripe whose removals all stay held
    /// for a while is not scanned again on every removal.
    purge_removed_at: usize,
}

impl Stripe {
    fn new(index: usize) -> Stripe {
        Stripe {
            nodes: InoMap::default(),
            grows_early_by: index,
            removed: InoMap::default(),
            purge_removed_at: REMOVED_PURGE_AT,
        }
    }

    /// Doubles the map ahead of the next insert once it is as full as this stripe grows at
    /// ([`GROWTH_SPREAD`]); hashbrown would double it at full.
    #[inline]
    fn make_room(&mut self) {
        let capacity = self.nodes.capacity();
        let early = capacity * self.grows_early_by / (GROWTH_SPREAD * STRIPES);
        if self.nodes.len() >= capacity - early {
            self.grow();
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        // One more than the capacity: hashbrown doubles the buckets (or, with removals'
        // tombstones taking room, may rehash in place; either way there is room again).
        self.nodes
            .reserve(self.nodes.capacity() + 1 - self.nodes.len());
    }
}

/// The stamp the removal of `ino` left in `removed`, if it is still remembered. Only answers
/// that an inode is gone come here: kept out of the callers' hot paths.
#[cold]
#[inline(never)]
fn removal_stamp(removed: &InoMap<Stamp>, ino: u64) -> Stamp {
    removed.get(&ino).copied().unwrap_or_default()
}

pub(crate) struct Table {
    stripes: Box<[CachePadded<Mutex<Stripe>>]>,
}

fn stripe_of(ino: u64) -> usize {
    // A block of 64 consecutive numbers, one creating thread's run (`ino_run`), shares a
    // stripe: that thread's creates find its lock, control bytes and neighbouring slots in
    // cache (LL misses a create at 64 x 16: 88.0 -> 80.8, docs/benchmarks/in-memory.md). Fibonacci hashing of the block
    // spreads consecutive blocks over all stripes, and blocks at any regular stride too (with
    // `block mod STRIPES`, blocks 1024 apart would all meet in one stripe). A stripe's blocks
    // are 1024 apart on average, in gaps of at most three sizes (the three-distance theorem).
    ((ino >> RUN_BITS).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STRIPE_BITS)) as usize
}

impl Table {
    pub fn new() -> Self {
        Table {
            stripes: (0..STRIPES)
                .map(|i| CachePadded::new(Mutex::new(Stripe::new(i))))
                .collect(),
        }
    }

    /// Locks the stripes holding `inos` (duplicates allowed), in stripe order. Up to
    /// `INLINE_LOCKS` of them without an allocation: every operation locks one to four.
    pub fn lock(&self, inos: &[u64]) -> Locked<'_> {
        let mut guards = SmallVec::new();
        // Most operations lock one inode or two (a create: its directory and the new inode):
        // pushed in order, without the collect, sort and dedup of a short list.
        match *inos {
            [ino] => {
                let i = stripe_of(ino);
                guards.push((i, self.stripes[i].lock()));
                return Locked { guards };
            }
            [a, b] => {
                let (a, b) = (stripe_of(a), stripe_of(b));
                let (low, high) = (a.min(b), a.max(b));
                guards.push((low, self.stripes[low].lock()));
                if high != low {
                    guards.push((high, self.stripes[high].lock()));
                }
                return Locked { guards };
            }
            _ => {}
        }
        let mut idx: SmallVec<[usize; INLINE_LOCKS]> = inos.iter().map(|&i| stripe_of(i)).collect();
        idx.sort_unstable();
        idx.dedup();
        for i in idx {
            guards.push((i, self.stripes[i].lock()));
        }
        Locked { guards }
    }

    /// Inserts without other locks held (start-up loading).
    pub fn insert_unlocked(&self, node: Node) {
        let mut stripe = self.stripes[stripe_of(node.attr.ino)].lock();
        stripe.make_room();
        stripe.nodes.insert(node.attr.ino, node);
    }

    /// Runs `f` on every node, one stripe at a time.
    #[cfg(test)]
    pub fn for_each(&self, mut f: impl FnMut(&mut Node)) {
        for stripe in &self.stripes {
            for node in stripe.lock().nodes.values_mut() {
                f(node);
            }
        }
    }
}

/// The most stripes an operation holds (RENAME's two directories and two inodes) kept inline.
const INLINE_LOCKS: usize = 4;

/// The stripes one operation holds.
pub(crate) struct Locked<'a> {
    guards: SmallVec<[(usize, MutexGuard<'a, Stripe>); INLINE_LOCKS]>,
}

impl Locked<'_> {
    fn stripe(&self, ino: u64) -> &Stripe {
        let s = stripe_of(ino);
        &self
            .guards
            .iter()
            .find(|(i, _)| *i == s)
            .expect("inode's stripe is locked")
            .1
    }

    fn stripe_mut(&mut self, ino: u64) -> &mut Stripe {
        let s = stripe_of(ino);
        &mut self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == s)
            .expect("inode's stripe is locked")
            .1
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.stripe(ino).nodes.get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.stripe_mut(ino).nodes.get_mut(&ino)
    }

    /// The inode `ino`, or if there is none, the stamp its removal left: the empty stamp if
    /// it never existed or its removal is durable and purged (either way it holds nobody).
    /// Inlined, with the removal's lookup out of line: every operation's path to a live inode
    /// goes through here, and should cost what `get` does.
    #[inline]
    pub fn get_or_removed(&self, ino: u64) -> Result<&Node, Stamp> {
        let stripe = self.stripe(ino);
        match stripe.nodes.get(&ino) {
            Some(node) => Ok(node),
            None => Err(removal_stamp(&stripe.removed, ino)),
        }
    }

    /// As [`Locked::get_or_removed`], to change the inode.
    #[inline]
    pub fn get_mut_or_removed(&mut self, ino: u64) -> Result<&mut Node, Stamp> {
        let stripe = self.stripe_mut(ino);
        match stripe.nodes.get_mut(&ino) {
            Some(node) => Ok(node),
            None => Err(removal_stamp(&stripe.removed, ino)),
        }
    }

    /// Inserts a new inode, and says whether it did: a live inode with its number is never
    /// replaced.
    #[must_use]
    pub fn insert(&mut self, node: Node) -> bool {
        let ino = node.attr.ino;
        let stripe = self.stripe_mut(ino);
        stripe.make_room();
        match stripe.nodes.entry(ino) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(node);
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        }
    }

    pub fn remove(&mut self, ino: u64) -> Option<Node> {
        self.stripe_mut(ino).nodes.remove(&ino)
    }

    /// Remembers that inode `ino` was removed with `stamp`, dropping removals that are
    /// durable by `last_committed` once the stripe has gathered many (they can hold nobody
    /// back any more). Inode numbers are never reused, so nothing ever takes the stamp back.
    pub fn note_removed(&mut self, ino: u64, stamp: Stamp, last_committed: u64) {
        let stripe = self.stripe_mut(ino);
        if stripe.removed.len() >= stripe.purge_removed_at {
            stripe.removed.retain(|_, s| s.uncommitted(last_committed));
            stripe.purge_removed_at = (2 * stripe.removed.len()).max(REMOVED_PURGE_AT);
        }
        stripe.removed.insert(ino, stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ino_hash(ino: u64) -> u64 {
        let mut h = InoHasher::default();
        h.write_u64(ino);
        h.finish()
    }

    #[test]
    fn a_stripes_inodes_in_creation_order_hash_to_neighbouring_buckets_with_mixed_tags() {
        let stripe: Vec<u64> = (1..1u64 << 26).filter(|&i| stripe_of(i) == 5).collect();
        let dense = |ino: u64| ino_hash(ino) & !TAG_BITS;
        let tag_of = |ino: u64| ino_hash(ino) & TAG_BITS;
        let block = |ino: u64| ino >> RUN_BITS;
        // Whole blocks: within one, dense numbers step by one; from one block to the next,
        // the block's place steps by 0, 1 or 2.
        for pair in stripe.windows(2) {
            if block(pair[0]) == block(pair[1]) {
                assert_eq!(dense(pair[1]), dense(pair[0]) + 1, "{pair:?}");
            } else {
                let step = (dense(pair[1]) >> RUN_BITS) - (dense(pair[0]) >> RUN_BITS);
                assert!(step <= 2, "{pair:?} step {step}");
            }
        }
        let span = dense(stripe[stripe.len() - 1]) - dense(stripe[0]);
        let members = stripe.len() as u64;
        assert!(
            span.abs_diff(members) < members / 50,
            "{span} over {members}"
        );
        let tags: std::collections::HashSet<u64> = stripe.iter().map(|&i| tag_of(i)).collect();
        assert_eq!(tags.len(), 128, "every tag is used");
        // A hashbrown group is 16 buckets from wherever a probe starts: within any 16
        // neighbours, different dense numbers have different tags.
        for window in stripe.windows(16) {
            let mut by_dense: std::collections::HashMap<u64, u64> =
                std::collections::HashMap::default();
            for &ino in window {
                by_dense.insert(dense(ino), tag_of(ino));
            }
            let distinct: std::collections::HashSet<u64> = by_dense.values().copied().collect();
            assert_eq!(distinct.len(), by_dense.len(), "{window:?}");
        }
        // Numbers that share a home bucket in a table of 2^k buckets differ in tag.
        for d in [1u64, 77, 123_456, 1 << 40] {
            for k in 4..=24 {
                assert_ne!(tag(d), tag(d + (1 << k)), "{d} {k}");
            }
        }
    }

    #[test]
    fn the_inode_map_finds_what_it_holds_and_nothing_else() {
        // Numbers 2^20 apart, whose dense numbers share a home bucket in any table of up to
        // 1024 buckets; a stripe's neighbours; both ends of the range.
        let held: Vec<u64> = (0..3000u64)
            .map(|i| (i << 20) + 7)
            .chain((0..2000u64).map(|i| i * 1021 + 5))
            .chain([0, u64::MAX, 1 << 63])
            .collect();
        let mut map = InoMap::default();
        for &ino in &held {
            assert!(map.insert(ino, !ino).is_none(), "{ino}");
        }
        for &ino in &held {
            assert_eq!(map.get(&ino), Some(&!ino));
        }
        let set: std::collections::HashSet<u64> = held.iter().copied().collect();
        for absent in (0..4_000_000_000u64)
            .step_by(999_983)
            .filter(|i| !set.contains(i))
        {
            assert_eq!(map.get(&absent), None, "{absent}");
        }
        for &ino in held.iter().step_by(2) {
            assert_eq!(map.remove(&ino), Some(!ino));
        }
        for (i, &ino) in held.iter().enumerate() {
            assert_eq!(map.contains_key(&ino), i % 2 == 1, "{ino}");
        }
    }

    #[test]
    fn a_block_shares_a_stripe_and_blocks_at_any_stride_spread_over_stripes() {
        let run = 1u64 << RUN_BITS;
        for block in [0u64, 1, 77, 1 << 40] {
            let first = stripe_of(block * run);
            assert!((block * run..(block + 1) * run).all(|i| stripe_of(i) == first));
        }
        for stride in [1u64, 2, 64, 1000, 1024, 4096, 1 << 20] {
            let used: std::collections::HashSet<_> =
                (1..=4096u64).map(|i| stripe_of(i * stride * run)).collect();
            assert!(
                used.len() > STRIPES / 2,
                "stride {stride} blocks: only {} stripes used",
                used.len()
            );
        }
    }

    #[test]
    fn a_stripe_forgets_removals_once_durable_and_purges_less_often_while_they_are_held() {
        let t = Table::new();
        let first = 1u64;
        let same_stripe: Vec<u64> = (1..)
            .filter(|&i| stripe_of(i) == stripe_of(first))
            .take(3 * REMOVED_PURGE_AT)
            .collect();
        let removal = |transno: u64| {
            let mut s = Stamp::default();
            s.write(7, transno);
            s
        };
        let mut l = t.lock(&[first]);
        let removed = |l: &Locked<'_>| l.stripe(first).removed.len();
        // All held (nothing durable): the first purge keeps them all, the next waits for twice
        // as many.
        for (i, &ino) in same_stripe[..=REMOVED_PURGE_AT].iter().enumerate() {
            l.note_removed(ino, removal(i as u64 + 1), 0);
        }
        assert_eq!(removed(&l), REMOVED_PURGE_AT + 1);
        assert_eq!(l.stripe(first).purge_removed_at, 2 * REMOVED_PURGE_AT);
        assert_eq!(
            l.get_or_removed(same_stripe[0]).map(|_| ()),
            Err(removal(1))
        );
        // Everything durable but the newest: the next purge drops the rest.
        let last_committed = (2 * REMOVED_PURGE_AT - 1) as u64;
        for (i, &ino) in same_stripe[REMOVED_PURGE_AT + 1..=2 * REMOVED_PURGE_AT]
            .iter()
            .enumerate()
        {
            l.note_removed(
                ino,
                removal((REMOVED_PURGE_AT + 2 + i) as u64),
                last_committed,
            );
        }
        assert_eq!(
            removed(&l),
            2,
            "the newest held one, and the one just removed"
        );
        assert_eq!(l.stripe(first).purge_removed_at, REMOVED_PURGE_AT);
        assert_eq!(
            l.get_or_removed(same_stripe[0]).map(|_| ()),
            Err(Stamp::default()),
            "durable and purged: holds nobody"
        );
    }

    /// A live inode is never replaced (regression: a create whose number had wrapped onto
    /// the root's replaced it, in memory and in the journal).
    #[test]
    fn an_insert_never_replaces_a_live_inode() {
        use crate::namespace::node::{FileKind, InodeAttr};
        let t = Table::new();
        let node = |mode| {
            let mut attr = InodeAttr::from_record(journal::Inode::root(0));
            attr.kind = FileKind::File;
            attr.mode = mode;
            Node::new(attr, None)
        };
        let mut l = t.lock(&[1]);
        assert!(l.insert(node(0o644)));
        assert!(!l.insert(node(0o600)), "refused");
        assert_eq!(l.get(1).unwrap().attr.mode, 0o644, "the first one stays");
    }

    /// One or two inodes (the paths without a sorted list): each stripe locked once, the
    /// stripes in ascending order (the order every operation takes them in, so that two
    /// operations never wait on each other), whichever order the inodes are given in.
    #[test]
    fn one_or_two_inodes_lock_each_stripe_once_in_stripe_order() {
        let t = Table::new();
        let a = 1u64;
        let same = (2..u64::MAX)
            .find(|&i| stripe_of(i) == stripe_of(a))
            .unwrap();
        let other = (2..u64::MAX)
            .find(|&i| stripe_of(i) != stripe_of(a))
            .unwrap();
        let stripes = |l: &Locked<'_>| l.guards.iter().map(|(i, _)| *i).collect::<Vec<_>>();
        assert_eq!(stripes(&t.lock(&[a])), [stripe_of(a)]);
        for pair in [[a, same], [same, a], [a, a]] {
            assert_eq!(stripes(&t.lock(&pair)), [stripe_of(a)], "{pair:?}");
        }
        let mut both = [stripe_of(a), stripe_of(other)];
        both.sort_unstable();
        for pair in [[a, other], [other, a]] {
            assert_eq!(stripes(&t.lock(&pair)), both, "{pair:?}");
        }
    }

    /// The stripes fill alike, so growing at full would double most of the 1024 maps within a
    /// few thousand creates of each other; each grows at its own point instead, spread over
    /// the last eighth of the doubling too ([`GROWTH_SPREAD`]).
    #[test]
    fn the_stripes_double_their_maps_at_spread_out_points_not_together() {
        use crate::namespace::node::{FileKind, InodeAttr};
        // For the doublings to at least `TO`: the population at which each stripe made it.
        const TO: usize = 112;
        let t = Table::new();
        let mut attr = InodeAttr::from_record(journal::Inode::root(0));
        attr.kind = FileKind::File;
        let mut capacity = vec![0usize; STRIPES];
        let mut reached_at = vec![None; STRIPES];
        let n = (STRIPES * TO) as u64;
        for ino in 1..=n {
            attr.ino = ino;
            let mut l = t.lock(&[ino]);
            assert!(l.insert(Node::new(attr.clone(), None)));
            let i = stripe_of(ino);
            let now = l.stripe(ino).nodes.capacity();
            if now != capacity[i] {
                capacity[i] = now;
                if now >= TO && reached_at[i].is_none() {
                    reached_at[i] = Some(ino);
                }
            }
        }
        let reached: Vec<u64> = reached_at
            .iter()
            .map(|r| r.expect("every stripe grew"))
            .collect();
        let (first, last) = (reached.iter().min().unwrap(), reached.iter().max().unwrap());
        // Left to hashbrown, every stripe reaches 112 within ~7% of the population (55,720 to
        // 59,892); spread, across a sixth of it.
        assert!(
            (last - first) * 10 > *last,
            "stripes grew between {first} and {last} inodes"
        );
        // No run of 1024 creates (one per stripe) doubles more than a quarter of the maps:
        // left to hashbrown, 590 do; spread, ~160.
        let mut sorted = reached.clone();
        sorted.sort_unstable();
        let crowded = sorted
            .iter()
            .enumerate()
            .map(|(k, &at)| {
                sorted[k..]
                    .iter()
                    .take_while(|&&b| b < at + STRIPES as u64)
                    .count()
            })
            .max()
            .unwrap();
        assert!(
            crowded <= STRIPES / 4,
            "{crowded} stripes grew within 1024 creates"
        );
        // Growing early loses nothing: every inode is where it was put.
        for ino in (1..=n).step_by(97) {
            assert_eq!(t.lock(&[ino]).get(ino).map(|node| node.attr.ino), Some(ino));
        }
    }

    /// Creates and removals churning through one stripe leave tombstones that take room from
    /// its map; growing early must then rehash or grow once and go on, not grow without end,
    /// and lose nothing.
    #[test]
    fn a_stripe_churning_creates_and_removals_keeps_its_map_bounded_and_whole() {
        use crate::namespace::node::{FileKind, InodeAttr};
        let t = Table::new();
        // The last stripe grows earliest (an eighth short of full).
        let stripe = STRIPES - 1;
        let inos: Vec<u64> = (1..)
            .filter(|&i| stripe_of(i) == stripe)
            .take(20_000)
            .collect();
        let mut attr = InodeAttr::from_record(journal::Inode::root(0));
        attr.kind = FileKind::File;
        let mut l = t.lock(&[inos[0]]);
        let mut live = std::collections::VecDeque::new();
        let mut most = 0;
        for &ino in &inos {
            attr.ino = ino;
            assert!(l.insert(Node::new(attr.clone(), None)));
            live.push_back(ino);
            // At most 300 alive at once: the oldest goes as each new one comes.
            if live.len() > 300 {
                let gone = live.pop_front().unwrap();
                assert!(l.remove(gone).is_some());
            }
            most = most.max(l.stripe(ino).nodes.capacity());
        }
        assert!(most < 4 * 300, "capacity reached {most} for 300 inodes");
        for &ino in &live {
            assert_eq!(l.get(ino).map(|node| node.attr.ino), Some(ino));
        }
        assert_eq!(l.stripe(inos[0]).nodes.len(), live.len());
    }

    #[test]
    fn locking_the_same_stripe_twice_in_one_set_does_not_deadlock() {
        let t = Table::new();
        let a = 1u64;
        let b = (2..u64::MAX)
            .find(|&i| stripe_of(i) == stripe_of(a))
            .unwrap();
        let l = t.lock(&[a, b, a]);
        assert!(l.get(a).is_none());
    }
}
