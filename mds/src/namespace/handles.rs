//! Open handles: which handle numbers each client holds, on which inode, opened for what. The
//! numbers are the client's (OPEN names one; READ, WRITE, SETATTR and RELEASE name it again),
//! unique among that client's handles, so the table is keyed by (client, handle) and sharded
//! by client: one client's handles are in one shard, which is what a session's end releases.
//!
//! Handles live in memory only. A server restart loses them; the client takes them back with
//! a reopen (`Op::Open { reopen: true }`), and what they kept alive on disk — orphans — waits
//! for that in the journal (`ops/open.rs`).
//!
//! Two caps bound what they hold, as a process's `RLIMIT_NOFILE` and Linux's `fs.file-max`
//! do: handles per client (`--max-open-per-session`, EMFILE past it) and handles in all
//! (`--max-open-files`, ENFILE). OPEN is not a mutation, so neither the resend records' cap nor
//! the in-flight cap bounds it, and handles outlive their connection until the session ends:
//! without these, one connection's OPENs of one directory grew the server without end.
//!
//! Lock order: an inode's lock (the table's stripe) before a shard of this one, never the
//! other way round; a RELEASE reads its handle, lets go, takes the inode's lock, and takes the
//! handle out under it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use mds_proto::Errno;
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

/// Most handles open at once: per client, and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenCaps {
    /// Handles one client identity may hold (`--max-open-per-session`).
    pub per_session: u64,
    /// Handles all clients may hold together (`--max-open-files`).
    pub total: u64,
}

impl OpenCaps {
    /// No cap: what tests of other things run with.
    pub const NONE: OpenCaps = OpenCaps {
        per_session: u64::MAX,
        total: u64::MAX,
    };
}

impl Default for OpenCaps {
    fn default() -> Self {
        OpenCaps::NONE
    }
}

/// Every open handle, by client.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    shards: [Mutex<HashMap<u64, HashMap<u64, OpenHandle>>>; SHARDS],
    open: AtomicU64,
    caps: OpenCaps,
}

/// Why [`Handles::insert`] recorded nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotInserted {
    /// The client holds a handle by that number already.
    Taken,
    /// The client holds `per_session` handles (EMFILE) or everyone `total` (ENFILE).
    Capped(Errno),
}

impl Handles {
    pub(crate) fn with_caps(caps: OpenCaps) -> Handles {
        Handles {
            caps,
            ..Handles::default()
        }
    }

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

    /// Records a new handle, or says why not (and nothing changes): the client has one by
    /// that number already, or a cap is reached. A number the client holds is never counted
    /// again, so the same OPEN resent is answered as before even at the cap.
    pub(crate) fn insert(
        &self,
        client: u64,
        handle: u64,
        open: OpenHandle,
    ) -> Result<(), NotInserted> {
        let mut shard = self.shard(client).lock();
        let mine = shard.entry(client).or_default();
        if mine.contains_key(&handle) {
            return Err(NotInserted::Taken);
        }
        if mine.len() as u64 >= self.caps.per_session {
            if mine.is_empty() {
                shard.remove(&client);
            }
            return Err(NotInserted::Capped(Errno::EMFILE));
        }
        // Taken before it is checked, so that OPENs on two threads cannot both pass the cap
        // with one handle left.
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.caps.total {
            self.open.fetch_sub(1, Ordering::Relaxed);
            if mine.is_empty() {
                shard.remove(&client);
            }
            return Err(NotInserted::Capped(Errno::ENFILE));
        }
        mine.insert(handle, open);
        Ok(())
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
        assert_eq!(h.insert(1, 7, on(10)), Ok(()));
        assert_eq!(
            h.insert(1, 7, on(11)),
            Err(NotInserted::Taken),
            "a number the client holds already"
        );
        assert_eq!(
            h.insert(2, 7, on(11)),
            Ok(()),
            "another client's 7 is another handle"
        );
        assert_eq!(h.insert(17, 1, on(12)), Ok(()), "same shard as client 1");
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

    #[test]
    fn a_client_is_capped_at_its_share_and_everyone_at_the_total() {
        let h = Handles::with_caps(OpenCaps {
            per_session: 3,
            total: 5,
        });
        for n in 0..3 {
            assert_eq!(h.insert(1, n, on(10)), Ok(()));
        }
        assert_eq!(
            h.insert(1, 3, on(10)),
            Err(NotInserted::Capped(Errno::EMFILE))
        );
        assert_eq!(
            h.insert(1, 0, on(10)),
            Err(NotInserted::Taken),
            "a number it holds is not a new handle, at the cap too"
        );
        assert_eq!(h.insert(2, 0, on(10)), Ok(()));
        assert_eq!(h.insert(3, 0, on(10)), Ok(()));
        assert_eq!(
            h.insert(4, 0, on(10)),
            Err(NotInserted::Capped(Errno::ENFILE))
        );
        assert!(!h.holds_any(4), "a refused client holds nothing");
        assert_eq!(h.count(), 5);
        // A release makes room for anyone, a session's end for its share.
        assert!(h.remove(2, 0, 10).is_some());
        assert_eq!(h.insert(4, 0, on(10)), Ok(()));
        assert_eq!(h.take_all(1).len(), 3);
        assert_eq!(h.insert(1, 9, on(10)), Ok(()));
        assert_eq!(h.count(), 3, "clients 3, 4 and 1 hold one each");
    }
}
