//! Reply slots: where each request in flight on one connection waits for its reply, by xid.
//!
//! A slot is one entry of a table under one lock, not a channel per request: the reader task
//! puts the reply in the slot and wakes whoever waits there, and the waiting caller takes it
//! out on its next poll. A `tokio::sync::oneshot` per request cost an allocation, its free
//! and the atomics of a second waker cell (~600 instructions a request in loadgen's profile);
//! the slots' own locks and lookups take back part of that: ~200 a create less in all,
//! counted (`SIDE=loadgen ./bench/cachegrind.sh`, 4,153 -> 3,947).
//!
//! What the slot keeps is what the connection needs to know of a request: a caller that stops
//! waiting (its future dropped) leaves its slot *abandoned* rather than gone, so the reply
//! that comes later is still recognised as an answer to this client's request — the session
//! learns it was answered, as it did when a dropped receiver's sender was still in the table.
//! Closing the connection wakes every waiter; one whose reply had already arrived still gets
//! it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use mds_proto::Reply;

enum Slot {
    /// Sent; the waker of whoever polled last (none before the first poll).
    Waiting(Option<Waker>),
    /// Answered; not taken yet.
    Ready(Reply),
    /// Its caller stopped waiting: the reply, when it comes, goes nowhere.
    Abandoned,
}

/// The slots of one connection.
#[derive(Default)]
pub(crate) struct ReplySlots {
    /// By xid. The client picks its xids, so no one can choose keys that collide: a fast
    /// hash rather than SipHash's (~300 instructions a request, counted).
    table: parking_lot::Mutex<HashMap<u64, Slot, foldhash::fast::RandomState>>,
}

/// What [`ReplySlots::deliver`] did with a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// No request of this connection waits for that xid.
    Unknown,
    /// Its caller had stopped waiting: dropped.
    Abandoned,
    /// Put in its slot, its caller woken.
    Handed,
}

impl ReplySlots {
    /// Opens `xid`'s slot, before its request is sent.
    pub(crate) fn open(&self, xid: u64) {
        self.table.lock().insert(xid, Slot::Waiting(None));
    }

    /// Forgets `xid`'s slot: its request was never sent.
    pub(crate) fn cancel(&self, xid: u64) {
        self.table.lock().remove(&xid);
    }

    /// Slots open: requests sent and not answered, and answers not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.table.lock().len()
    }

    /// Puts `reply` in its slot and wakes its caller. `taken` runs first, only if the reply
    /// answers a request of this connection still unanswered, and before its caller can see
    /// it.
    pub(crate) fn deliver(&self, reply: Reply, taken: impl FnOnce(&Reply)) -> Delivery {
        let waker = {
            let mut table = self.table.lock();
            match table.get_mut(&reply.xid) {
                Some(slot @ Slot::Waiting(_)) => {
                    taken(&reply);
                    let Slot::Waiting(waker) = std::mem::replace(slot, Slot::Ready(reply)) else {
                        unreachable!("matched as waiting")
                    };
                    waker
                }
                Some(Slot::Abandoned) => {
                    taken(&reply);
                    table.remove(&reply.xid);
                    return Delivery::Abandoned;
                }
                // Answered already: the server answers each xid once, so this is a refusal's
                // answer (which the caller gets) meeting the real one, which is dropped as it
                // was when the refusal emptied the table: the session does not keep a request
                // its caller was told failed.
                Some(Slot::Ready(_)) | None => return Delivery::Unknown,
            }
        };
        // Outside the lock: the woken caller takes its reply under it.
        if let Some(waker) = waker {
            waker.wake();
        }
        Delivery::Handed
    }

    /// Answers every request still waiting with `answer(xid)` (a connection-level refusal),
    /// calling `taken` with each answered xid, abandoned ones included.
    pub(crate) fn answer_all(&self, answer: impl Fn(u64) -> Reply, mut taken: impl FnMut(u64)) {
        let mut wakers = Vec::new();
        {
            let mut table = self.table.lock();
            table.retain(|&xid, slot| match slot {
                Slot::Waiting(waker) => {
                    taken(xid);
                    wakers.extend(waker.take());
                    *slot = Slot::Ready(answer(xid));
                    true
                }
                Slot::Ready(_) => true,
                Slot::Abandoned => {
                    taken(xid);
                    false
                }
            });
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// The connection is closed: every caller still waiting is woken to find its slot gone.
    /// Answers not taken yet stay for their callers.
    pub(crate) fn close(&self) {
        let mut wakers = Vec::new();
        self.table.lock().retain(|_, slot| match slot {
            Slot::Waiting(waker) => {
                wakers.extend(waker.take());
                false
            }
            Slot::Ready(_) => true,
            Slot::Abandoned => false,
        });
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Waits in `xid`'s slot, opened by [`ReplySlots::open`].
    pub(crate) fn wait(&self, xid: u64) -> ReplyWait<'_> {
        ReplyWait {
            slots: self,
            xid,
            done: false,
        }
    }
}

/// A caller waiting in its slot. `None`: the connection closed before the reply came.
/// Dropped before that, it leaves the slot abandoned.
pub(crate) struct ReplyWait<'a> {
    slots: &'a ReplySlots,
    xid: u64,
    done: bool,
}

impl Future for ReplyWait<'_> {
    type Output = Option<Reply>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Reply>> {
        let mut table = self.slots.table.lock();
        let answer = match table.get_mut(&self.xid) {
            Some(Slot::Waiting(waker)) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            Some(Slot::Ready(_)) => match table.remove(&self.xid) {
                Some(Slot::Ready(reply)) => Some(reply),
                _ => unreachable!("the slot was just seen ready"),
            },
            // Closed, or polled again after it completed.
            Some(Slot::Abandoned) | None => None,
        };
        drop(table);
        self.done = true;
        Poll::Ready(answer)
    }
}

impl Drop for ReplyWait<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut table = self.slots.table.lock();
        match table.get_mut(&self.xid) {
            Some(slot @ Slot::Waiting(_)) => *slot = Slot::Abandoned,
            Some(Slot::Ready(_)) => {
                table.remove(&self.xid);
            }
            Some(Slot::Abandoned) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::task::noop_waker_ref;
    use mds_proto::{Body, Errno};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    fn reply(xid: u64) -> Reply {
        Reply::new(xid, 7, 3, Ok(Body::Notice))
    }

    /// Counts its wakes.
    struct Counter(AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_reply_wakes_its_caller_who_takes_it() {
        let slots = ReplySlots::default();
        slots.open(5);
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = slots.wait(5);
        assert!(wait.poll_unpin(&mut cx).is_pending());
        let mut seen = Vec::new();
        assert_eq!(
            slots.deliver(reply(5), |r| seen.push(r.xid)),
            Delivery::Handed
        );
        assert_eq!(seen, [5]);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        match wait.poll_unpin(&mut cx) {
            Poll::Ready(Some(r)) => assert_eq!((r.xid, r.transno), (5, 7)),
            other => panic!("{other:?}"),
        }
        drop(wait);
        assert_eq!(slots.len(), 0, "the slot is gone once taken");
    }

    #[test]
    fn a_reply_before_the_first_poll_is_there_at_it() {
        let slots = ReplySlots::default();
        slots.open(1);
        assert_eq!(slots.deliver(reply(1), |_| {}), Delivery::Handed);
        let got = slots.wait(1).now_or_never().expect("ready at once");
        assert_eq!(got.map(|r| r.xid), Some(1));
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn a_reply_nobody_asked_for_is_unknown_and_not_taken() {
        let slots = ReplySlots::default();
        slots.open(1);
        let mut called = false;
        assert_eq!(
            slots.deliver(reply(2), |_| called = true),
            Delivery::Unknown
        );
        assert!(!called);
        assert_eq!(slots.len(), 1);
    }

    #[test]
    fn a_dropped_caller_leaves_its_slot_to_recognise_the_reply() {
        let slots = ReplySlots::default();
        slots.open(9);
        let mut wait = slots.wait(9);
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(wait.poll_unpin(&mut cx).is_pending());
        drop(wait);
        assert_eq!(slots.len(), 1, "abandoned, still known");
        let mut taken = false;
        assert_eq!(
            slots.deliver(reply(9), |_| taken = true),
            Delivery::Abandoned
        );
        assert!(taken, "the session still learns it was answered");
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn a_dropped_caller_whose_reply_came_frees_its_slot() {
        let slots = ReplySlots::default();
        slots.open(4);
        let wait = slots.wait(4);
        slots.deliver(reply(4), |_| {});
        drop(wait);
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn closing_wakes_the_waiting_and_keeps_answers_not_taken() {
        let slots = ReplySlots::default();
        for xid in 1..=3 {
            slots.open(xid);
        }
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut one = slots.wait(1);
        let mut two = slots.wait(2);
        assert!(one.poll_unpin(&mut cx).is_pending());
        assert!(two.poll_unpin(&mut cx).is_pending());
        drop(slots.wait(3)); // abandoned
        slots.deliver(reply(2), |_| {});
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        slots.close();
        assert_eq!(counter.0.load(Ordering::SeqCst), 2, "1 woken by the close");
        assert!(matches!(one.poll_unpin(&mut cx), Poll::Ready(None)));
        assert!(matches!(two.poll_unpin(&mut cx), Poll::Ready(Some(r)) if r.xid == 2));
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn a_refusal_answers_every_waiting_request_and_forgets_the_abandoned() {
        let slots = ReplySlots::default();
        slots.open(1);
        slots.open(2);
        slots.open(3);
        slots.deliver(reply(3), |_| {});
        drop(slots.wait(2));
        let mut taken = Vec::new();
        slots.answer_all(
            |xid| Reply::new(xid, 0, 0, Err(Errno::EBUSY)),
            |xid| taken.push(xid),
        );
        taken.sort_unstable();
        assert_eq!(taken, [1, 2], "3 was answered already");
        let one = slots.wait(1).now_or_never().flatten().expect("answered");
        assert_eq!(one.result, Err(Errno::EBUSY));
        let three = slots.wait(3).now_or_never().flatten().expect("answered");
        assert_eq!(three.result, Ok(Body::Notice), "the real answer stands");
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn a_reply_after_the_refusal_answered_its_slot_is_not_taken() {
        let slots = ReplySlots::default();
        slots.open(1);
        slots.answer_all(|xid| Reply::new(xid, 0, 0, Err(Errno::EBUSY)), |_| {});
        let mut taken = false;
        assert_eq!(slots.deliver(reply(1), |_| taken = true), Delivery::Unknown);
        assert!(
            !taken,
            "the session must not keep what its caller was told failed"
        );
        let one = slots.wait(1).now_or_never().flatten().expect("answered");
        assert_eq!(one.result, Err(Errno::EBUSY), "the refusal stands");
    }

    #[test]
    fn a_new_waker_replaces_the_old() {
        let slots = ReplySlots::default();
        slots.open(1);
        let first = Arc::new(Counter(AtomicUsize::new(0)));
        let second = Arc::new(Counter(AtomicUsize::new(0)));
        let mut wait = slots.wait(1);
        let w1 = Waker::from(first.clone());
        let w2 = Waker::from(second.clone());
        assert!(wait.poll_unpin(&mut Context::from_waker(&w1)).is_pending());
        assert!(wait.poll_unpin(&mut Context::from_waker(&w2)).is_pending());
        slots.deliver(reply(1), |_| {});
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn waiting_across_threads_gets_every_reply() {
        let slots = Arc::new(ReplySlots::default());
        let n = 2_000;
        for xid in 1..=n {
            slots.open(xid);
        }
        let deliverer = {
            let slots = slots.clone();
            std::thread::spawn(move || {
                for xid in 1..=n {
                    assert_eq!(slots.deliver(reply(xid), |_| {}), Delivery::Handed);
                }
            })
        };
        let got = futures::executor::block_on(async {
            let mut got = 0;
            for xid in 1..=n {
                got += u64::from(slots.wait(xid).await.is_some_and(|r| r.xid == xid));
            }
            got
        });
        deliverer.join().unwrap();
        assert_eq!(got, n);
        assert_eq!(slots.len(), 0);
    }
}
