//! The reply engine: per-partition queues of pending replies, the committer's publish, and the
//! partition's drain.
//!
//! A queue accepts transnos in any order and keeps them sorted (equal transnos in push order),
//! so a drain can take a prefix: a partition pushes its own replies in the order it assigns
//! transnos, which is an O(1) append, but commit-on-share waiters, resends and replay push
//! transnos older than the queue's newest, and those are inserted at their place, found by a
//! search from the back because they are usually only a little older.
//!
//! The hand-over between committer and drain is lock-free on the committer's side and
//! model-checked with loom (`tests/loom.rs`):
//! - a push that becomes its queue's front stores the queue's head transno under the queue's
//!   own lock; every push then re-reads `last_committed` and wakes its own partition if the
//!   commit already happened (a SYNC may wait for a transno that is already durable);
//! - the committer stores `last_committed`, then reads each queue's head and wakes the
//!   partitions whose head is at or below it;
//! - a drain reads `last_committed`, then takes everything at or below it and stores the new
//!   head.
//!
//! Push and publish each store, then load what the other stored (the Dekker pattern): a
//! `SeqCst` fence between the store and the load on both sides guarantees that at least one
//! of them sees the other, so no reply waits for a wake that never comes. A push that does not
//! become the front stores nothing, but the head it leaves is at or below its transno and was
//! stored before its lock was taken, so the same argument holds. (The fence, not `SeqCst` on
//! the accesses, is also what loom can model.) The drain needs no fence: whichever head the
//! committer reads, its decision is right.
//!
//! A reply leaves as [`Outcome::Failed`] only when the drain saw the journal's failure: without
//! it, a drain takes only what `last_committed` covers and releases all of it as committed.

use std::collections::VecDeque;

use crossbeam_utils::CachePadded;

use crate::pending::PendingReply;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, fence};

/// Wakes one partition's drain. Called by the committer once per partition per commit, and
/// by a push that finds its transno already committed. Must be cheap and must coalesce (a
/// wake while one is already pending is one wake), as `tokio::sync::Notify::notify_one` does.
pub type Waker = Box<dyn Fn() + Send + Sync>;

/// How a released reply's transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its transno is durable: send the reply as it is. `last_committed` is the value the
    /// drain used, at or above the reply's transno: what the reply may report.
    Committed { last_committed: u64 },
    /// The journal failed before its transno became durable: it must be answered EIO.
    Failed,
}

/// The transno stored as a queue's head when the queue is empty.
const EMPTY: u64 = u64::MAX;

struct Queue<T> {
    /// Pending replies sorted by transno, equal transnos in push order. Held by value, not
    /// behind an `Arc`: nothing outside the queue holds a pending reply, and an allocation and
    /// a free per reply were a third of a drain's cost (docs/benchmarks/reply-path.md, "Per-partition queues against the global baseline").
    pending: Mutex<VecDeque<PendingReply<T>>>,
    /// Transno of the first pending reply, `EMPTY` if none: what the committer checks to
    /// decide whether this partition needs a wake, without taking the queue's lock.
    head: AtomicU64,
    /// Replies in the queue, readable without the lock (metrics).
    depth: AtomicUsize,
    /// The buffer the last drain released from, emptied, with its capacity: the next drain
    /// takes its replies into it, so a drain allocates nothing in the steady state.
    spare: Mutex<VecDeque<PendingReply<T>>>,
    wake: Waker,
}

/// Pending replies of all partitions.
pub struct ReplyEngine<T> {
    last_committed: CachePadded<AtomicU64>,
    /// Set once when the journal fails: everything pending above `last_committed` fails.
    failed: AtomicBool,
    queues: Box<[CachePadded<Queue<T>>]>,
}

impl<T> std::fmt::Debug for ReplyEngine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyEngine")
            .field("last_committed", &self.last_committed())
            .field("partitions", &self.queues.len())
            .finish()
    }
}

impl<T> ReplyEngine<T> {
    /// An engine with one queue per waker, starting at the recovered `last_committed`.
    pub fn new(wakers: Vec<Waker>, last_committed: u64) -> Self {
        let queues = wakers
            .into_iter()
            .map(|wake| {
                CachePadded::new(Queue {
                    pending: Mutex::new(VecDeque::new()),
                    head: AtomicU64::new(EMPTY),
                    depth: AtomicUsize::new(0),
                    spare: Mutex::new(VecDeque::new()),
                    wake,
                })
            })
            .collect();
        ReplyEngine {
            last_committed: CachePadded::new(AtomicU64::new(last_committed)),
            failed: AtomicBool::new(false),
            queues,
        }
    }

    /// The newest `last_committed` the committer published.
    pub fn last_committed(&self) -> u64 {
        self.last_committed.load(Ordering::SeqCst)
    }

    /// Whether the journal failed.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Queues a reply on `partition` until `transno` is durable. Transnos may come in any
    /// order; one at or above the newest queued is the cheap case.
    pub fn push(&self, partition: usize, transno: u64, payload: T) {
        let queue = &self.queues[partition];
        let reply = PendingReply::new(transno, payload);
        {
            let mut pending = queue.pending.lock();
            match pending.back() {
                Some(newest) if newest.transno() <= transno => pending.push_back(reply),
                Some(_) => {
                    let at = insertion_point(&pending, transno);
                    if at == 0 {
                        queue.head.store(transno, Ordering::SeqCst);
                    }
                    pending.insert(at, reply);
                }
                None => {
                    queue.head.store(transno, Ordering::SeqCst);
                    pending.push_back(reply);
                }
            }
            queue.depth.fetch_add(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        if transno <= self.last_committed.load(Ordering::SeqCst) || self.is_failed() {
            // The commit (or the failure) may have been published before this push was
            // visible to the committer: do not wait for a wake that will not come.
            Self::wake(queue);
        }
    }

    /// The committer's side of a successful commit: publish `last_committed`, wake each
    /// partition with something to release. Never encodes or sends anything.
    pub fn publish(&self, last_committed: u64) {
        self.last_committed.store(last_committed, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for queue in &self.queues {
            if queue.head.load(Ordering::SeqCst) <= last_committed {
                Self::wake(queue);
            }
        }
    }

    /// The committer's side of a journal failure: everything still pending above
    /// `last_committed` is released as [`Outcome::Failed`].
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for queue in &self.queues {
            if queue.head.load(Ordering::SeqCst) != EMPTY {
                Self::wake(queue);
            }
        }
    }

    fn wake(queue: &Queue<T>) {
        (queue.wake)();
    }

    /// Takes every reply of `partition` that can leave now — all at or below
    /// `last_committed`, or all of them once the journal failed — in one step under the
    /// queue's lock, then releases each under its own lock, outside the queue's lock, calling
    /// `release` with its payload. Returns how many were released. Safe to call from any
    /// thread (a partner may drain for a stalled owner): each payload leaves exactly once.
    pub fn drain(&self, partition: usize, mut release: impl FnMut(T, Outcome)) -> usize {
        let queue = &self.queues[partition];
        // Failure first: once it is seen, `last_committed` is final.
        let failed = self.failed.load(Ordering::SeqCst);
        let last_committed = self.last_committed.load(Ordering::SeqCst);
        // A partner racing the owner finds the spare taken and starts from an empty buffer.
        let mut taken = std::mem::take(&mut *queue.spare.lock());
        {
            let mut pending = queue.pending.lock();
            let n = if failed {
                pending.len()
            } else {
                pending.partition_point(|r| r.transno() <= last_committed)
            };
            if n == 0 {
                drop(pending);
                *queue.spare.lock() = taken;
                return 0;
            }
            if n == pending.len() {
                // The usual case, a commit covering the whole queue: swap buffers, copy none.
                std::mem::swap(&mut *pending, &mut taken);
            } else {
                taken.extend(pending.drain(..n));
            }
            let head = pending
                .front()
                .map_or(EMPTY, super::pending::PendingReply::transno);
            queue.head.store(head, Ordering::SeqCst);
            queue.depth.fetch_sub(n, Ordering::Relaxed);
        }
        let committed = Outcome::Committed { last_committed };
        let mut released = 0;
        for reply in taken.drain(..) {
            // Only the failure read above may fail a reply. Without it the drain took only the
            // sorted prefix `last_committed` covers, and all of that is committed.
            debug_assert!(failed || reply.transno() <= last_committed);
            let outcome = if failed && reply.transno() > last_committed {
                Outcome::Failed
            } else {
                committed
            };
            if let Some(payload) = reply.take() {
                release(payload, outcome);
                released += 1;
            }
        }
        *queue.spare.lock() = taken;
        released
    }

    /// Replies waiting in `partition`'s queue.
    pub fn depth(&self, partition: usize) -> usize {
        self.queues[partition].depth.load(Ordering::Relaxed)
    }

    /// Replies waiting in all queues.
    pub fn total_depth(&self) -> usize {
        (0..self.queues.len()).map(|p| self.depth(p)).sum()
    }
}

/// Where a reply with `transno` goes in `pending`: after every reply at or below it, so equal
/// transnos keep push order. The search gallops from the back (steps of 1, 2, 4, ...) and then
/// bisects, so an out-of-order transno that is only a little older than the newest costs a few
/// comparisons whatever the queue's length.
fn insertion_point<T>(pending: &VecDeque<PendingReply<T>>, transno: u64) -> usize {
    // Everything at or after `above` is above `transno`; everything before `below` is not.
    let mut above = pending.len();
    let mut below = 0;
    let mut step = 1;
    while step <= above {
        let probe = above - step;
        if pending[probe].transno() <= transno {
            below = probe + 1;
            break;
        }
        above = probe;
        step *= 2;
    }
    while below < above {
        let mid = below + (above - below) / 2;
        if pending[mid].transno() <= transno {
            below = mid + 1;
        } else {
            above = mid;
        }
    }
    below
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize as StdCounter;

    fn counting(n: usize) -> (ReplyEngine<u64>, Vec<Arc<StdCounter>>) {
        let counters: Vec<_> = (0..n).map(|_| Arc::new(StdCounter::new(0))).collect();
        let wakers = counters
            .iter()
            .map(|c| {
                let c = c.clone();
                Box::new(move || {
                    c.fetch_add(1, Ordering::SeqCst);
                }) as Waker
            })
            .collect();
        (ReplyEngine::new(wakers, 0), counters)
    }

    fn drain_all(engine: &ReplyEngine<u64>, p: usize) -> Vec<(u64, Outcome)> {
        let mut out = Vec::new();
        engine.drain(p, |v, o| out.push((v, o)));
        out
    }

    #[test]
    fn drain_takes_exactly_what_is_committed_in_transno_order() {
        let (engine, _) = counting(1);
        for t in 1..=10 {
            engine.push(0, t, t * 100);
        }
        assert_eq!(drain_all(&engine, 0), vec![]);
        engine.publish(4);
        let got: Vec<u64> = drain_all(&engine, 0).into_iter().map(|(v, _)| v).collect();
        assert_eq!(got, vec![100, 200, 300, 400]);
        assert_eq!(engine.depth(0), 6);
        engine.publish(10);
        assert_eq!(drain_all(&engine, 0).len(), 6);
        assert_eq!(engine.depth(0), 0);
    }

    #[test]
    fn one_wake_per_partition_per_commit_and_none_for_idle_partitions() {
        let (engine, wakes) = counting(3);
        for t in 1..=1000 {
            engine.push(0, t, t);
        }
        engine.push(1, 1001, 0);
        engine.publish(1000);
        assert_eq!(wakes[0].load(Ordering::SeqCst), 1, "1000 replies, one wake");
        assert_eq!(
            wakes[1].load(Ordering::SeqCst),
            0,
            "its head is not committed yet"
        );
        assert_eq!(wakes[2].load(Ordering::SeqCst), 0, "nothing pending");
        assert_eq!(drain_all(&engine, 0).len(), 1000);
        engine.publish(1001);
        assert_eq!(
            wakes[0].load(Ordering::SeqCst),
            1,
            "drained queue is not woken again"
        );
        assert_eq!(wakes[1].load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_push_below_last_committed_wakes_its_own_partition() {
        let (engine, wakes) = counting(1);
        engine.publish(5);
        engine.push(0, 5, 1);
        assert_eq!(wakes[0].load(Ordering::SeqCst), 1);
        assert_eq!(
            drain_all(&engine, 0),
            vec![(1, Outcome::Committed { last_committed: 5 })]
        );
    }

    #[test]
    fn failure_releases_everything_pending_as_failed() {
        let (engine, wakes) = counting(2);
        engine.push(0, 1, 1);
        engine.push(0, 2, 2);
        engine.publish(1);
        engine.fail();
        assert_eq!(wakes[0].load(Ordering::SeqCst), 2);
        assert_eq!(wakes[1].load(Ordering::SeqCst), 0);
        assert_eq!(
            drain_all(&engine, 0),
            vec![
                (1, Outcome::Committed { last_committed: 1 }),
                (2, Outcome::Failed)
            ]
        );
        engine.push(0, 3, 3);
        assert_eq!(drain_all(&engine, 0), vec![(3, Outcome::Failed)]);
    }

    #[test]
    fn out_of_order_pushes_leave_in_transno_order_once_each_when_committed() {
        let (engine, _) = counting(1);
        // Payloads tell the two pushes of transno 3 apart: ties leave in push order.
        for (i, t) in [5, 3, 9, 1, 7, 3].into_iter().enumerate() {
            engine.push(0, t, t * 10 + i as u64);
        }
        assert_eq!(drain_all(&engine, 0), vec![]);
        let committed = |last_committed| Outcome::Committed { last_committed };
        engine.publish(2);
        assert_eq!(drain_all(&engine, 0), vec![(13, committed(2))]);
        engine.publish(4);
        assert_eq!(
            drain_all(&engine, 0),
            vec![(31, committed(4)), (35, committed(4))]
        );
        // Older than everything queued, and already committed.
        engine.push(0, 2, 26);
        engine.publish(7);
        assert_eq!(
            drain_all(&engine, 0),
            vec![(26, committed(7)), (50, committed(7)), (74, committed(7))]
        );
        assert_eq!(engine.depth(0), 1);
        engine.publish(8);
        assert_eq!(drain_all(&engine, 0), vec![]);
        engine.publish(9);
        assert_eq!(drain_all(&engine, 0), vec![(92, committed(9))]);
        assert_eq!(engine.depth(0), 0);
    }

    #[test]
    fn any_push_order_drains_like_a_stable_sort() {
        let (engine, _) = counting(1);
        // A fixed LCG: transnos within a window, with ties, pushed and published in bursts.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            seed >> 33
        };
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut last_committed = 0u64;
        for round in 0..200u64 {
            for i in 0..next() % 40 {
                let transno = last_committed.saturating_sub(8) + next() % 64;
                let payload = round << 32 | i;
                engine.push(0, transno, payload);
                model.push((transno, payload));
            }
            last_committed += next() % 24;
            engine.publish(last_committed);
            // What a stable sort by transno puts first, as far as `last_committed` covers.
            model.sort_by_key(|&(t, _)| t);
            let n = model.partition_point(|&(t, _)| t <= last_committed);
            let expected: Vec<(u64, Outcome)> = model
                .drain(..n)
                .map(|(_, p)| (p, Outcome::Committed { last_committed }))
                .collect();
            assert_eq!(drain_all(&engine, 0), expected, "round {round}");
            assert_eq!(engine.depth(0), model.len());
        }
    }

    #[test]
    fn an_older_push_becomes_the_head_the_committer_checks() {
        let (engine, wakes) = counting(1);
        engine.push(0, 10, 10);
        engine.push(0, 12, 12);
        engine.push(0, 3, 3);
        engine.publish(5);
        assert_eq!(wakes[0].load(Ordering::SeqCst), 1, "head 3 is committed");
        assert_eq!(
            drain_all(&engine, 0),
            vec![(3, Outcome::Committed { last_committed: 5 })]
        );
        engine.publish(9);
        assert_eq!(wakes[0].load(Ordering::SeqCst), 1, "head 10 is not");
    }

    #[test]
    fn an_older_push_that_becomes_a_committed_head_wakes_its_own_partition() {
        let (engine, wakes) = counting(2);
        engine.push(0, 10, 10);
        engine.push(0, 12, 12);
        engine.publish(5);
        assert_eq!(
            wakes[0].load(Ordering::SeqCst),
            0,
            "head 10 is not committed"
        );
        engine.push(0, 3, 3);
        assert_eq!(wakes[0].load(Ordering::SeqCst), 1);
        assert_eq!(wakes[1].load(Ordering::SeqCst), 0);
        assert_eq!(
            drain_all(&engine, 0),
            vec![(3, Outcome::Committed { last_committed: 5 })]
        );
        assert_eq!(engine.depth(0), 2);
    }

    #[test]
    fn failure_fails_exactly_what_is_above_last_committed_in_any_push_order() {
        let (engine, _) = counting(1);
        for t in [5, 3, 9, 1, 7] {
            engine.push(0, t, t);
        }
        engine.publish(4);
        engine.fail();
        let committed = Outcome::Committed { last_committed: 4 };
        assert_eq!(
            drain_all(&engine, 0),
            vec![
                (1, committed),
                (3, committed),
                (5, Outcome::Failed),
                (7, Outcome::Failed),
                (9, Outcome::Failed)
            ]
        );
        // After the failure, a late push is still judged by its transno.
        engine.push(0, 6, 6);
        engine.push(0, 2, 2);
        assert_eq!(
            drain_all(&engine, 0),
            vec![(2, committed), (6, Outcome::Failed)]
        );
    }

    #[test]
    fn racing_drainers_release_each_reply_exactly_once() {
        let (engine, _) = counting(1);
        let engine = Arc::new(engine);
        for t in 1..=20_000 {
            engine.push(0, t, t);
        }
        let mut handles = Vec::new();
        for _ in 0..4 {
            let engine = engine.clone();
            handles.push(std::thread::spawn(move || {
                let mut seen = Vec::new();
                for lc in (0..=20_000).step_by(997) {
                    engine.publish(lc.max(engine.last_committed()));
                    engine.drain(0, |v, _| seen.push(v));
                }
                engine.publish(20_000);
                engine.drain(0, |v, _| seen.push(v));
                seen
            }));
        }
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (1..=20_000).collect::<Vec<_>>());
    }
}
