//! File locks across clients: fcntl's POSIX record locks (F_GETLK, F_SETLK, F_SETLKW, and OFD
//! locks, which the kernel hands over the same way) and flock(2), as the mount passes them on
//! — one table for the server, keyed by inode, each lock held by an [`Owner`]: a client's
//! session and the lock owner it names (FUSE's: the process's file table for POSIX locks, the
//! open file for flock and OFD locks).
//!
//! The rules are Linux's for POSIX locks (`fs/locks.c`, `posix_lock_inode`): an owner's own
//! locks never conflict with each other — a new lock replaces what it overlaps of them,
//! splitting a lock it cuts into and merging with touching locks of the same kind; two owners
//! conflict where their ranges overlap and either lock is exclusive. A request that may wait
//! (F_SETLKW) and meets a conflict is queued on its inode; every change of the inode's locks
//! looks through its queue in arrival order and grants each waiter nothing held conflicts with
//! any more — as Linux does, so a new request is weighed against what is held, not against
//! the queue. A wait that would close a cycle of owners each waiting for a lock the next
//! holds is refused with EDEADLK, as Linux refuses it (`posix_locks_deadlock`).
//!
//! Locks are state, not journaled mutations: a client's locks go when its session ends (its
//! expiry, or its eviction), a waiter when the connection it asked on ends. One mutex guards
//! the table: lock traffic is a few requests per file and its holders, never the create path,
//! and a deadlock check has to see every inode's waiters at once.

use std::collections::{HashMap, HashSet, VecDeque};

use mds_proto::{Errno, FileLock, LockKind};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::metrics::{FILE_LOCK_REQUESTS, FILE_LOCK_WAITING, FILE_LOCKS_HELD};

/// Most locks the table holds and queues in all, past which SETLK answers ENOLCK: a client
/// that splits a file into millions of one-byte locks must not take the server's memory.
pub const MAX_LOCKS: usize = 1 << 20;

/// Most locks and waits one client may have in the table, past which its SETLK answers
/// ENOLCK: one client must not fill the table for every other.
pub const MAX_LOCKS_PER_CLIENT: usize = 1 << 16;

/// Who holds a lock: a client's session and the lock owner it named. Owners of two clients
/// never match, whatever numbers they name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub client: u64,
    pub owner: u64,
}

/// One held lock: `start..=end`, shared (`write` false) or exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    owner: Owner,
    start: u64,
    end: u64,
    write: bool,
    pid: u32,
}

impl Held {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// Whether `self` keeps `owner` from taking `start..=end` (exclusive if `write`).
    fn blocks(&self, owner: Owner, start: u64, end: u64, write: bool) -> bool {
        self.owner != owner && self.overlaps(start, end) && (write || self.write)
    }
}

/// A queued F_SETLKW, answered through `tell` once granted (or refused).
struct Waiter {
    id: u64,
    /// The connection it came on: the wait ends with it.
    conn: u64,
    owner: Owner,
    lock: FileLock,
    tell: oneshot::Sender<Result<(), Errno>>,
}

/// One inode's locks and waiters.
#[derive(Default)]
struct Inode {
    held: Vec<Held>,
    waiting: VecDeque<Waiter>,
}

impl Inode {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.waiting.is_empty()
    }

    fn first_blocker(&self, owner: Owner, start: u64, end: u64, write: bool) -> Option<&Held> {
        self.held
            .iter()
            .find(|h| h.blocks(owner, start, end, write))
    }

    /// `owner`'s locks in `start..=end` replaced by `kind` (none for `Unlock`), as Linux's
    /// `posix_lock_inode` does: what the range cuts is trimmed or split, and a new lock merges
    /// with `owner`'s overlapping or touching locks of its kind. Returns the change in the
    /// number of held locks.
    fn set(&mut self, owner: Owner, lock: FileLock) -> isize {
        let before = self.held.len() as isize;
        let write = lock.kind == LockKind::Write;
        let (mut start, mut end) = (lock.start, lock.end);
        let mut kept = Vec::with_capacity(self.held.len() + 2);
        for h in self.held.drain(..) {
            if h.owner != owner {
                kept.push(h);
                continue;
            }
            let touches = h.start <= end.saturating_add(1) && start <= h.end.saturating_add(1);
            if lock.kind != LockKind::Unlock && h.write == write && touches {
                // Same kind, overlapping or adjacent: one lock over both.
                start = start.min(h.start);
                end = end.max(h.end);
                continue;
            }
            if !h.overlaps(start, end) {
                kept.push(h);
                continue;
            }
            // Another kind (or an unlock) over part of it: what lies outside stays.
            if h.start < start {
                kept.push(Held {
                    end: start - 1,
                    ..h
                });
            }
            if h.end > end {
                kept.push(Held {
                    start: end + 1,
                    ..h
                });
            }
        }
        if lock.kind != LockKind::Unlock {
            kept.push(Held {
                owner,
                start,
                end,
                write,
                pid: lock.pid,
            });
        }
        self.held = kept;
        self.held.len() as isize - before
    }

    /// Grants, in arrival order, each waiter nothing held conflicts with any more (a waiter
    /// granted first may hold back those behind it). Returns the change in held locks and
    /// how many waiters left the queue.
    ///
    /// Waiters are not held back by earlier waiters, only by held locks, as Linux does: an
    /// owner upgrading its read lock behind a waiting writer that its own read lock blocks
    /// would otherwise wait for ever, a cycle no deadlock check of held locks sees.
    fn grant_waiters(&mut self) -> (isize, usize) {
        let mut change = 0;
        let mut left = 0;
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &self.waiting[i];
            if w.tell.is_closed() {
                // Its asker is gone (the answer would go nowhere): not granted.
                self.waiting.remove(i);
                left += 1;
                continue;
            }
            let write = w.lock.kind == LockKind::Write;
            if self
                .first_blocker(w.owner, w.lock.start, w.lock.end, write)
                .is_some()
            {
                i += 1;
                continue;
            }
            let w = self.waiting.remove(i).expect("in range");
            change += self.set(w.owner, w.lock);
            let _ = w.tell.send(Ok(()));
            left += 1;
        }
        (change, left)
    }
}

/// What SETLK did.
#[derive(Debug)]
pub enum Set {
    /// Taken, or released: answer now.
    Done,
    /// Queued: answered when `granted` resolves (an error, or its sender dropped, if the
    /// wait was given up).
    Waiting {
        id: u64,
        granted: oneshot::Receiver<Result<(), Errno>>,
    },
}

/// The table's counts, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub held: usize,
    pub waiting: usize,
}

#[derive(Default)]
struct Table {
    inodes: HashMap<u64, Inode>,
    counts: Counts,
    next_wait: u64,
}

/// The server's file locks.
pub struct Locks {
    table: Mutex<Table>,
    /// [`MAX_LOCKS`] and [`MAX_LOCKS_PER_CLIENT`], or smaller caps in tests.
    caps: (usize, usize),
}

impl Default for Locks {
    fn default() -> Locks {
        Locks::with_caps(MAX_LOCKS, MAX_LOCKS_PER_CLIENT)
    }
}

impl Table {
    fn apply(&mut self, ino: u64, change: isize, left_queue: usize) {
        self.counts.held = self.counts.held.saturating_add_signed(change);
        self.counts.waiting -= left_queue;
        if self.inodes.get(&ino).is_some_and(Inode::is_empty) {
            self.inodes.remove(&ino);
        }
        self.publish();
    }

    fn publish(&self) {
        metrics::gauge!(FILE_LOCKS_HELD).set(self.counts.held as f64);
        metrics::gauge!(FILE_LOCK_WAITING).set(self.counts.waiting as f64);
    }

    /// The locks and waits of `client`, counted.
    fn of_client(&self, client: u64) -> usize {
        self.inodes
            .values()
            .map(|i| {
                i.held.iter().filter(|h| h.owner.client == client).count()
                    + i.waiting
                        .iter()
                        .filter(|w| w.owner.client == client)
                        .count()
            })
            .sum()
    }

    /// After a change of `ino`'s locks: the waiters it lets through.
    fn wake(&mut self, ino: u64) {
        let Some(inode) = self.inodes.get_mut(&ino) else {
            return;
        };
        let (change, left) = inode.grant_waiters();
        self.apply(ino, change, left);
    }

    /// Whether `owner` waiting for the holders of what blocks `lock` on `ino` would close a
    /// cycle: some holder of a blocking lock is (through the owners it waits for) waiting for
    /// `owner`.
    fn would_deadlock(&self, ino: u64, owner: Owner, lock: FileLock) -> bool {
        let write = lock.kind == LockKind::Write;
        let blockers = |ino: u64, who: Owner, start: u64, end: u64, write: bool| -> Vec<Owner> {
            self.inodes.get(&ino).map_or_else(Vec::new, |inode| {
                inode
                    .held
                    .iter()
                    .filter(|h| h.blocks(who, start, end, write))
                    .map(|h| h.owner)
                    .collect()
            })
        };
        let mut seen = HashSet::new();
        let mut next = blockers(ino, owner, lock.start, lock.end, write);
        while let Some(holder) = next.pop() {
            if holder == owner {
                return true;
            }
            if !seen.insert(holder) {
                continue;
            }
            for (&at, inode) in &self.inodes {
                for w in inode.waiting.iter().filter(|w| w.owner == holder) {
                    let w_write = w.lock.kind == LockKind::Write;
                    next.extend(blockers(at, holder, w.lock.start, w.lock.end, w_write));
                }
            }
        }
        false
    }
}

/// Makes the lock series exist from the server's start, at 0: dashboards and alerts see them
/// before the first lock.
pub fn register_metrics() {
    metrics::gauge!(FILE_LOCKS_HELD).set(0.0);
    metrics::gauge!(FILE_LOCK_WAITING).set(0.0);
    for result in ["granted", "conflict", "queued", "deadlock", "refused"] {
        metrics::counter!(FILE_LOCK_REQUESTS, "result" => result).increment(0);
    }
}

impl Locks {
    /// A table that holds at most `all` locks and waits, `per_client` of one client.
    pub fn with_caps(all: usize, per_client: usize) -> Locks {
        Locks {
            table: Mutex::default(),
            caps: (all, per_client),
        }
    }

    /// F_GETLK: the first lock another owner holds that keeps `owner` from `lock`, its pid
    /// told only to the same client; kind `Unlock` (and `lock`'s range) if none does.
    pub fn get(&self, ino: u64, owner: Owner, lock: FileLock) -> FileLock {
        let table = self.table.lock();
        let write = lock.kind == LockKind::Write;
        let found = table
            .inodes
            .get(&ino)
            .and_then(|i| i.first_blocker(owner, lock.start, lock.end, write));
        match found {
            Some(h) => FileLock {
                start: h.start,
                end: h.end,
                kind: if h.write {
                    LockKind::Write
                } else {
                    LockKind::Read
                },
                pid: if h.owner.client == owner.client {
                    h.pid
                } else {
                    0
                },
            },
            None => FileLock {
                kind: LockKind::Unlock,
                ..lock
            },
        }
    }

    /// F_SETLK / F_SETLKW (`wait`) of `owner` on `ino`, asked on connection `conn` (0: not
    /// known yet, [`Locks::bind_conn`] tells it).
    pub fn set(
        &self,
        ino: u64,
        owner: Owner,
        lock: FileLock,
        wait: bool,
        conn: u64,
    ) -> Result<Set, Errno> {
        if lock.start > lock.end {
            return Err(Errno::EINVAL);
        }
        let mut table = self.table.lock();
        let table = &mut *table;
        let write = lock.kind == LockKind::Write;
        if lock.kind != LockKind::Unlock {
            let (all, per_client) = self.caps;
            let total = table.counts.held + table.counts.waiting;
            // Counting one client's locks walks the table: only once the table could hold
            // more than a client may.
            if total >= all || (total >= per_client && table.of_client(owner.client) >= per_client)
            {
                return Err(Errno::ENOLCK);
            }
            let blocked = table.inodes.get(&ino).is_some_and(|i| {
                i.first_blocker(owner, lock.start, lock.end, write)
                    .is_some()
            });
            if blocked {
                if !wait {
                    return Err(Errno::EAGAIN);
                }
                if table.would_deadlock(ino, owner, lock) {
                    return Err(Errno::EDEADLK);
                }
                let (tell, granted) = oneshot::channel();
                table.next_wait += 1;
                let id = table.next_wait;
                table
                    .inodes
                    .entry(ino)
                    .or_default()
                    .waiting
                    .push_back(Waiter {
                        id,
                        conn,
                        owner,
                        lock,
                        tell,
                    });
                table.counts.waiting += 1;
                table.publish();
                return Ok(Set::Waiting { id, granted });
            }
        } else if !table.inodes.contains_key(&ino) {
            return Ok(Set::Done);
        }
        let change = table.inodes.entry(ino).or_default().set(owner, lock);
        table.apply(ino, change, 0);
        table.wake(ino);
        Ok(Set::Done)
    }

    /// The queued wait `id` on `ino` was asked on connection `conn`: it ends with it.
    pub fn bind_conn(&self, ino: u64, id: u64, conn: u64) {
        let mut table = self.table.lock();
        if let Some(w) = table
            .inodes
            .get_mut(&ino)
            .and_then(|i| i.waiting.iter_mut().find(|w| w.id == id))
        {
            w.conn = conn;
        }
    }

    /// Connection `conn` ended: the waits asked on it are given up (their answers would go
    /// nowhere; the client asks again on its next connection).
    pub fn cancel_conn(&self, conn: u64) {
        let mut table = self.table.lock();
        let touched: Vec<u64> = table
            .inodes
            .iter()
            .filter(|(_, i)| i.waiting.iter().any(|w| w.conn == conn))
            .map(|(&ino, _)| ino)
            .collect();
        for ino in touched {
            let inode = table.inodes.get_mut(&ino).expect("just seen");
            let before = inode.waiting.len();
            inode.waiting.retain(|w| w.conn != conn);
            let left = before - inode.waiting.len();
            table.apply(ino, 0, left);
            table.wake(ino);
        }
    }

    /// `client`'s session ended: every lock it holds goes, every wait of it is refused
    /// (EINTR), and the waiters that lets through are granted.
    pub fn release_client(&self, client: u64) {
        let mut table = self.table.lock();
        let touched: Vec<u64> = table
            .inodes
            .iter()
            .filter(|(_, i)| {
                i.held.iter().any(|h| h.owner.client == client)
                    || i.waiting.iter().any(|w| w.owner.client == client)
            })
            .map(|(&ino, _)| ino)
            .collect();
        for ino in touched {
            let inode = table.inodes.get_mut(&ino).expect("just seen");
            let held = inode.held.len();
            inode.held.retain(|h| h.owner.client != client);
            let change = inode.held.len() as isize - held as isize;
            let waiting = inode.waiting.len();
            for w in std::mem::take(&mut inode.waiting) {
                if w.owner.client == client {
                    let _ = w.tell.send(Err(Errno::EINTR));
                } else {
                    inode.waiting.push_back(w);
                }
            }
            let left = waiting - inode.waiting.len();
            table.apply(ino, change, left);
            table.wake(ino);
        }
    }

    /// Whether `client` holds a lock or waits for one (its session stays while it does).
    pub fn holds_any(&self, client: u64) -> bool {
        self.table.lock().inodes.values().any(|i| {
            i.held.iter().any(|h| h.owner.client == client)
                || i.waiting.iter().any(|w| w.owner.client == client)
        })
    }

    /// Locks held and requests waiting, in all.
    pub fn counts(&self) -> Counts {
        self.table.lock().counts
    }
}

#[cfg(test)]
mod tests;
