//! The inode table: every inode in memory, striped over many small mutexes.
//!
//! An operation locks the stripes of all inodes it touches, in stripe order (so two operations
//! can never wait on each other in a cycle), does its checks and changes, takes its transno,
//! and unlocks. There is no service-wide lock: independent operations on different
//! directories only meet when their inodes hash to one stripe.

use std::collections::HashMap;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use super::node::Node;

/// Number of stripes; a power of two.
const STRIPES: usize = 1024;

type Stripe = HashMap<u64, Node>;

pub(crate) struct Table {
    stripes: Box<[CachePadded<Mutex<Stripe>>]>,
}

fn stripe_of(ino: u64) -> usize {
    // Fibonacci hashing spreads consecutive inode numbers over all stripes.
    (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STRIPES.trailing_zeros())) as usize
}

impl Table {
    pub fn new() -> Self {
        Table {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(Mutex::new(HashMap::new())))
                .collect(),
        }
    }

    /// Locks the stripes holding `inos` (duplicates allowed), in stripe order.
    pub fn lock(&self, inos: &[u64]) -> Locked<'_> {
        let mut idx: Vec<usize> = inos.iter().map(|&i| stripe_of(i)).collect();
        idx.sort_unstable();
        idx.dedup();
        Locked {
            guards: idx
                .into_iter()
                .map(|i| (i, self.stripes[i].lock()))
                .collect(),
        }
    }

    /// Inserts without other locks held (start-up loading).
    pub fn insert_unlocked(&self, node: Node) {
        self.stripes[stripe_of(node.attr.ino)]
            .lock()
            .insert(node.attr.ino, node);
    }

    /// Runs `f` on every node, one stripe at a time.
    #[cfg(test)]
    pub fn for_each(&self, mut f: impl FnMut(&mut Node)) {
        for stripe in self.stripes.iter() {
            for node in stripe.lock().values_mut() {
                f(node);
            }
        }
    }
}

/// The stripes one operation holds.
pub(crate) struct Locked<'a> {
    guards: Vec<(usize, MutexGuard<'a, Stripe>)>,
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
        self.stripe(ino).get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.stripe_mut(ino).get_mut(&ino)
    }

    pub fn insert(&mut self, node: Node) {
        let ino = node.attr.ino;
        self.stripe_mut(ino).insert(ino, node);
    }

    pub fn remove(&mut self, ino: u64) -> Option<Node> {
        self.stripe_mut(ino).remove(&ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_inodes_spread_over_stripes() {
        let used: std::collections::HashSet<_> = (1..=4096u64).map(stripe_of).collect();
        assert!(
            used.len() > STRIPES * 9 / 10,
            "only {} stripes used",
            used.len()
        );
    }

    #[test]
    fn locking_the_same_stripe_twice_in_one_set_does_not_deadlock() {
        let t = Table::new();
        let a = 1u64;
        let b = (2..).find(|&i| stripe_of(i) == stripe_of(a)).unwrap();
        let l = t.lock(&[a, b, a]);
        assert!(l.get(a).is_none());
    }
}
