//! Open handles: which handle numbers each client holds, on which inode, opened for what. The
//! numbers are the client's (OPEN names one; READ, WRITE, SETATTR and RELEASE name it again),
//! unique among that client's handles, so the table is keyed by (client, handle) and sharded
//! by client: one client's handles are in one shard, which is what a session's end releases.
//!
//! Handles live in memory only. A server restart loses them; the client takes them back with
//! a reopen (`Op::Open { reopen: true }`), and what they kept alive on disk — orphans — waits
//! for that in the journal (`ops/open.rs`).
//!
//! Lock order: an inode's lock (the table's stripe) before a shard of this one, never the
//! other way round; a RELEASE reads its handle, lets go, takes the inode's lock, and takes the
//! handle out under it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Shards of the table; a power of two.
const SHARDS: usize = 16;

/// What a handle was opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenHandle {
    pub ino: u64,
    pub read: bool,
    pub write: bool,
    pub append: bool,
}

/// Every open handle, by client.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    shards: [Mutex<HashMap<u64, HashMap<u64, OpenHandle>>>; SHARDS],
    open: AtomicU64,
}

impl Handles {
    fn shard(&self, client: u64) -> &Mutex<HashMap<u64, HashMap<u64, OpenHandle>>> {
        // Client identities are random (the library draws them), so their low bits spread.
        &self.shards[(client as usize) & (SHARDS - 1)]
    }

    /// The handle `handle` of `client`, if it is open.
    pub(crate) fn get(&self, client: u64, handle: u64) -> Option<OpenHandle> {
        self.shard(client)
            .lock()
            .get(&client)?
            .get(&handle)
            .copied()
    }

    /// Records a new handle; `false` (and nothing changes) if the client has one by that
    /// number already.
    pub(crate) fn insert(&self, client: u64, handle: u64, open: OpenHandle) -> bool {
        let mut shard = self.shard(client).lock();
        let mine = shard.entry(client).or_default();
        if mine.contains_key(&handle) {
            return false;
        }
        mine.insert(handle, open);
        self.open.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes the handle out if it is still open on `ino`.
    pub(crate) fn remove(&self, client: u64, handle: u64, ino: u64) -> Option<OpenHandle> {
        let mut shard = self.shard(client).lock();
        let mine = shard.get_mut(&client)?;
        if mine.get(&handle)?.ino != ino {
            return None;
        }
        let open = mine.remove(&handle);
        if mine.is_empty() {
            shard.remove(&client);
        }
        self.open.fetch_sub(1, Ordering::Relaxed);
        open
    }

    /// Takes out every handle of `client` (its session ended), as (handle, what it was).
    pub(crate) fn take_all(&self, client: u64) -> Vec<(u64, OpenHandle)> {
        let taken: Vec<_> = self
            .shard(client)
            .lock()
            .remove(&client)
            .map(|m| m.into_iter().collect())
            .unwrap_or_default();
        self.open.fetch_sub(taken.len() as u64, Ordering::Relaxed);
        taken
    }

    /// Whether `client` holds any handle.
    pub(crate) fn holds_any(&self, client: u64) -> bool {
        self.shard(client).lock().contains_key(&client)
    }

    /// Handles open, all clients'.
    pub(crate) fn count(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(ino: u64) -> OpenHandle {
        OpenHandle {
            ino,
            read: true,
            write: false,
            append: false,
        }
    }

    #[test]
    fn handles_are_per_client_and_unique_per_number() {
        let h = Handles::default();
        assert!(h.insert(1, 7, on(10)));
        assert!(!h.insert(1, 7, on(11)), "a number the client holds already");
        assert!(
            h.insert(2, 7, on(11)),
            "another client's 7 is another handle"
        );
        assert!(h.insert(17, 1, on(12)), "same shard as client 1");
        assert_eq!(h.count(), 3);
        assert_eq!(h.get(1, 7), Some(on(10)));
        assert_eq!(h.remove(1, 7, 11), None, "not open on that inode");
        assert_eq!(h.remove(1, 7, 10), Some(on(10)));
        assert!(!h.holds_any(1));
        assert!(h.holds_any(17));
        assert_eq!(h.take_all(2), vec![(7, on(11))]);
        assert_eq!(h.take_all(2), vec![]);
        assert_eq!(h.count(), 1);
    }
}
