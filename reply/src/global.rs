//! The 2008 baseline, on purpose: one service-wide list of pending replies under one mutex,
//! one condition variable, and a pool of service threads. At a commit every service thread is
//! woken; each takes one reply at a time under the lock and releases it outside. It exists so
//! that anyone can measure, on their own hardware, what the per-partition queues of
//! [`ReplyEngine`](crate::ReplyEngine) buy (`benches/global_vs_percpu.rs`).
//!
//! Its lock is instrumented: [`GlobalReplies::lock_wait`] sums the time callers waited to take
//! it, the figure the per-partition design exists to remove, and an observer given with
//! [`GlobalReplies::observe_lock_wait`] sees each wait (the server's histogram).
//! `last_committed` and the depth are mirrored in atomics, so that the server's hot path
//! (every request reads `last_committed`) and its metrics do not take the service lock: the
//! baseline contends where the 2008 design did, in the reply hand-off, not elsewhere.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::Outcome;

/// The service-wide pending list.
pub struct GlobalReplies<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    waited_ns: AtomicU64,
    acquisitions: AtomicU64,
    /// Sees every wait for the lock, if set.
    observer: Option<Box<dyn Fn(Duration) + Send + Sync>>,
    /// `State::last_committed`, readable without the lock.
    last_committed: AtomicU64,
    /// `State::pending.len()`, readable without the lock.
    depth: AtomicUsize,
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
            observer: None,
            last_committed: AtomicU64::new(last_committed),
            depth: AtomicUsize::new(0),
        }
    }

    /// Calls `observer` with every wait for the service lock, after it was taken.
    pub fn observe_lock_wait(
        mut self,
        observer: impl Fn(Duration) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Box::new(observer));
        self
    }

    /// Takes the service lock, counting the wait.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        let started = Instant::now();
        let guard = self.state.lock();
        let waited = started.elapsed();
        self.waited_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        if let Some(observe) = &self.observer {
            observe(waited);
        }
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
        self.depth.store(state.pending.len(), Ordering::Relaxed);
        if transno <= state.last_committed || state.failed {
            self.ready.notify_one();
        }
    }

    /// A commit: every service thread wakes (the baseline's thundering herd, kept on purpose).
    pub fn publish(&self, last_committed: u64) {
        let mut state = self.lock();
        state.last_committed = state.last_committed.max(last_committed);
        self.last_committed
            .store(state.last_committed, Ordering::SeqCst);
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
    pub fn serve(&self, release: impl FnMut(T, Outcome)) -> u64 {
        self.serve_inner(release, None)
    }

    /// [`GlobalReplies::serve`], calling `idle` whenever the thread finds nothing ready,
    /// before it sleeps: where a caller settles what it batched over the replies it released.
    /// (It costs one more lock acquisition per idle moment, which `serve` does not pay.)
    pub fn serve_until_idle(&self, release: impl FnMut(T, Outcome), mut idle: impl FnMut()) -> u64 {
        self.serve_inner(release, Some(&mut idle))
    }

    fn serve_inner(
        &self,
        mut release: impl FnMut(T, Outcome),
        mut idle: Option<&mut dyn FnMut()>,
    ) -> u64 {
        let mut released = 0;
        let mut state = self.lock();
        loop {
            let ready = state
                .pending
                .front()
                .is_some_and(|(t, _)| *t <= state.last_committed || state.failed);
            if ready {
                let (transno, payload) = state.pending.pop_front().expect("just seen");
                self.depth.store(state.pending.len(), Ordering::Relaxed);
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
            if let Some(idle) = idle.as_mut() {
                drop(state);
                idle();
                state = self.lock();
                if state
                    .pending
                    .front()
                    .is_some_and(|(t, _)| *t <= state.last_committed || state.failed)
                {
                    continue;
                }
            }
            if state.stopped {
                return released;
            }
            self.ready.wait(&mut state);
        }
    }

    /// Replies waiting.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// The newest `last_committed` published.
    pub fn last_committed(&self) -> u64 {
        self.last_committed.load(Ordering::SeqCst)
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
        assert_eq!(replies.last_committed(), 3);
        assert_eq!(replies.depth(), 0);
    }

    #[test]
    fn the_observer_sees_every_lock_acquisition() {
        let seen = Arc::new(AtomicUsize::new(0));
        let replies = GlobalReplies::<u64>::new(0).observe_lock_wait({
            let seen = seen.clone();
            move |_| {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        });
        replies.push(1, 1);
        replies.push(2, 2);
        replies.publish(2);
        assert_eq!(replies.depth(), 2);
        assert_eq!(replies.last_committed(), 2);
        assert_eq!(
            seen.load(Ordering::Relaxed) as u64,
            replies.lock_wait().acquisitions
        );
        assert_eq!(seen.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn stop_ends_idle_service_threads() {
        let replies = Arc::new(GlobalReplies::<()>::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (replies, count) = (replies.clone(), count.clone());
                std::thread::spawn(move || {
                    replies.serve(|(), _| {
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
