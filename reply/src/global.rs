//! The 2008 baseline, on purpose: one service-wide list of pending replies under one mutex,
//! one condition variable, and a pool of service threads. At a commit every service thread is
//! woken; each takes one reply at a time under the lock and releases it outside. It exists so
//! that anyone can measure, on their own hardware, what the per-partition queues of
//! [`ReplyEngine`](crate::ReplyEngine) buy (`benches/global_vs_percpu.rs`).
//!
//! Its lock is instrumented: [`GlobalReplies::lock_wait`] sums the time callers waited to take
//! it, the figure the per-partition design exists to remove.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::Outcome;

/// The service-wide pending list.
pub struct GlobalReplies<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    waited_ns: AtomicU64,
    acquisitions: AtomicU64,
}

struct State<T> {
    /// By transno; equal transnos keep push order.
    pending: VecDeque<(u64, T)>,
    last_committed: u64,
    failed: bool,
    stopped: bool,
}

/// Time callers spent waiting for the service lock, and how often they took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockWait {
    pub waited_ns: u64,
    pub acquisitions: u64,
}

impl<T> GlobalReplies<T> {
    pub fn new(last_committed: u64) -> Self {
        GlobalReplies {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                last_committed,
                failed: false,
                stopped: false,
            }),
            ready: Condvar::new(),
            waited_ns: AtomicU64::new(0),
            acquisitions: AtomicU64::new(0),
        }
    }

    /// Takes the service lock, counting the wait.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        let started = Instant::now();
        let guard = self.state.lock();
        self.waited_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        guard
    }

    /// Queues a reply until `transno` is durable.
    pub fn push(&self, transno: u64, payload: T) {
        let mut state = self.lock();
        let at = match state.pending.back() {
            Some(&(newest, _)) if newest > transno => {
                state.pending.partition_point(|(t, _)| *t <= transno)
            }
            _ => state.pending.len(),
        };
        state.pending.insert(at, (transno, payload));
        if transno <= state.last_committed || state.failed {
            self.ready.notify_one();
        }
    }

    /// A commit: every service thread wakes (the baseline's thundering herd, kept on purpose).
    pub fn publish(&self, last_committed: u64) {
        let mut state = self.lock();
        state.last_committed = state.last_committed.max(last_committed);
        drop(state);
        self.ready.notify_all();
    }

    /// The journal failed: everything pending leaves as [`Outcome::Failed`].
    pub fn fail(&self) {
        self.lock().failed = true;
        self.ready.notify_all();
    }

    /// Stops every service thread once it has nothing ready.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.ready.notify_all();
    }

    /// A service thread's life: wait for a ready reply, take one under the lock, release it
    /// outside the lock; until [`GlobalReplies::stop`] with nothing ready. Returns how many it
    /// released.
    pub fn serve(&self, mut release: impl FnMut(T, Outcome)) -> u64 {
        let mut released = 0;
        let mut state = self.lock();
        loop {
            let ready = state
                .pending
                .front()
                .is_some_and(|(t, _)| *t <= state.last_committed || state.failed);
            if ready {
                let (transno, payload) = state.pending.pop_front().expect("just seen");
                let outcome = if transno <= state.last_committed {
                    Outcome::Committed {
                        last_committed: state.last_committed,
                    }
                } else {
                    Outcome::Failed
                };
                drop(state);
                release(payload, outcome);
                released += 1;
                state = self.lock();
                continue;
            }
            if state.stopped {
                return released;
            }
            self.ready.wait(&mut state);
        }
    }

    /// Replies waiting.
    pub fn depth(&self) -> usize {
        self.lock().pending.len()
    }

    /// The service lock's wait so far.
    pub fn lock_wait(&self) -> LockWait {
        LockWait {
            waited_ns: self.waited_ns.load(Ordering::Relaxed),
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn service_threads_release_each_reply_once_in_the_commit_that_covers_it() {
        let replies = Arc::new(GlobalReplies::<u64>::new(0));
        let seen: Arc<Mutex<Vec<(u64, Outcome)>>> = Arc::default();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (replies, seen) = (replies.clone(), seen.clone());
                std::thread::spawn(move || replies.serve(|t, o| seen.lock().push((t, o))))
            })
            .collect();
        // Out of order, and one already durable when pushed.
        for t in [3, 1, 2, 5, 4] {
            replies.push(t, t);
        }
        replies.publish(3);
        while seen.lock().len() < 3 {
            std::thread::yield_now();
        }
        assert_eq!(replies.depth(), 2, "4 and 5 wait for their commit");
        replies.push(2, 2); // at or below last_committed: ready at once
        replies.fail();
        replies.stop();
        let released: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(released, 6);
        let mut seen = seen.lock().clone();
        seen.sort_by_key(|(t, _)| *t);
        let committed = Outcome::Committed { last_committed: 3 };
        assert_eq!(
            seen,
            [
                (1, committed),
                (2, committed),
                (2, committed),
                (3, committed),
                (4, Outcome::Failed),
                (5, Outcome::Failed),
            ]
        );
        assert!(replies.lock_wait().acquisitions >= 6);
    }

    #[test]
    fn stop_ends_idle_service_threads() {
        let replies = Arc::new(GlobalReplies::<()>::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (replies, count) = (replies.clone(), count.clone());
                std::thread::spawn(move || {
                    replies.serve(|_, _| {
                        count.fetch_add(1, Ordering::Relaxed);
                    })
                })
            })
            .collect();
        replies.stop();
        for t in threads {
            assert_eq!(t.join().unwrap(), 0);
        }
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
