//! A partition thread's messages to the committer, gathered while one connection's task is
//! polled and handed over as one [`CommitMsg::Batch`] when that poll returns.
//!
//! A read of 16 pipelined creates sent 16 records, each a channel send on the partition's
//! thread and a receive on the committer's (~250 instructions a create together, counted in
//! docs/benchmarks/create-path.md, "One hand-off a read"). Gathered, the read costs one send and one receive. Nothing waits
//! longer for it than the rest of that poll: the poll ends when the read's requests are all
//! dispatched, or earlier when one of them must wait (a recovery turn, another shard's
//! answer, a commit it asked for) — and a poll that returns `Pending` hands over what it
//! gathered before it yields, so no request waits on a record still in the outbox.
//!
//! The outbox is the thread's own (partitions run one current-thread runtime each, so one
//! task is polled at a time): [`Gathering`] opens it around each poll of the future it wraps,
//! and [`send`] puts a message there while it is open and on the channel otherwise.
//! [`ToCommitter`] is the only way the rest of the server reaches the committer: the
//! partitions, the recovery window's skips and the scrub all send through it, so every
//! message passes the outbox and a committer that is gone is handled in one place. A poll
//! that gathered one message sends it alone and keeps the outbox's room for the next poll: at
//! one request in flight that is every poll, and a fresh outbox each time was an allocation
//! and a free of 32 messages' room a create (~500 instructions, counted).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crossbeam_channel::{SendError, Sender};
use tracing::error;

use super::CommitMsg;

/// Room for one read's records and the messages that go with them; a read of more grows it.
const GATHERED_CAPACITY: usize = 32;

/// This thread's outbox: what a poll gathered, and whether a [`Gathering`] future is being
/// polled (the room of `gathered` outlives the poll when its messages left one at a time).
struct Outbox {
    open: bool,
    gathered: Vec<CommitMsg>,
}

thread_local! {
    static OUTBOX: RefCell<Outbox> = const {
        RefCell::new(Outbox {
            open: false,
            gathered: Vec::new(),
        })
    };
}

/// The committer's address: the one route of every message to it.
#[derive(Clone, Debug)]
pub struct ToCommitter(Sender<CommitMsg>);

/// The committer has ended (the process is shutting down, or its thread failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitterGone;

impl ToCommitter {
    pub fn new(tx: Sender<CommitMsg>) -> ToCommitter {
        ToCommitter(tx)
    }

    /// Sends `msg`. The committer never goes away while partitions run; if it has, the
    /// journal can no longer make anything durable, and waiting would hang every client:
    /// stop the process (fail-stop).
    pub fn send(&self, msg: CommitMsg) {
        if send(&self.0, msg).is_err() {
            committer_gone();
        }
    }

    /// Sends `msg` from work that may outlive the committer at shutdown (the scrub, on the
    /// cluster thread's runtime): [`CommitterGone`] tells it to end.
    pub fn offer(&self, msg: CommitMsg) -> Result<(), CommitterGone> {
        send(&self.0, msg).map_err(|_| CommitterGone)
    }

    /// `inner`, whose messages each poll gathers into one ([`Gathering`]).
    pub fn gathering<F: Future>(&self, inner: F) -> Gathering<F> {
        Gathering {
            inner: Box::pin(inner),
            tx: self.0.clone(),
        }
    }
}

fn committer_gone() -> ! {
    error!("the committer is gone; stopping rather than hang every client");
    std::process::abort();
}

/// Sends `msg` to the committer: into this thread's outbox while a [`Gathering`] poll is under
/// way (it leaves, in order with the rest, when the poll returns), on `tx` at once otherwise.
fn send(tx: &Sender<CommitMsg>, msg: CommitMsg) -> Result<(), SendError<CommitMsg>> {
    let direct = OUTBOX.with(|outbox| {
        let mut outbox = outbox.borrow_mut();
        if !outbox.open {
            return Some(msg);
        }
        if outbox.gathered.capacity() == 0 {
            outbox.gathered.reserve(GATHERED_CAPACITY);
        }
        outbox.gathered.push(msg);
        None
    });
    match direct {
        Some(msg) => tx.send(msg),
        None => Ok(()),
    }
}

/// A future whose every poll gathers what it sends the committer into one message.
pub struct Gathering<F> {
    inner: Pin<Box<F>>,
    tx: Sender<CommitMsg>,
}

impl<F: Future> Future for Gathering<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Opened here unless a poll further out opened it already (that one hands over).
        let opened = OUTBOX.with(|outbox| !std::mem::replace(&mut outbox.borrow_mut().open, true));
        // Built only when opened here: a `HandOver` dropped at once would hand over early.
        let _hand_over = opened.then(|| HandOver { tx: &this.tx });
        this.inner.as_mut().poll(cx)
    }
}

/// Closes the outbox and sends what it gathered, when the poll returns or unwinds.
struct HandOver<'a> {
    tx: &'a Sender<CommitMsg>,
}

impl Drop for HandOver<'_> {
    fn drop(&mut self) {
        let msg = OUTBOX.with(|outbox| {
            let mut outbox = outbox.borrow_mut();
            outbox.open = false;
            match outbox.gathered.len() {
                0 => None,
                // Sent alone; the room stays for the next poll.
                1 => outbox.gathered.pop(),
                _ => Some(CommitMsg::Batch(std::mem::take(&mut outbox.gathered))),
            }
        });
        let Some(msg) = msg else {
            return;
        };
        if self.tx.send(msg).is_err() {
            committer_gone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(upto: u64) -> CommitMsg {
        CommitMsg::Flush(upto)
    }

    /// The flushes a message carries, in order, batches opened.
    fn flushes(msg: CommitMsg) -> Vec<u64> {
        match msg {
            CommitMsg::Flush(upto) => vec![upto],
            CommitMsg::Batch(msgs) => msgs.into_iter().flat_map(flushes).collect(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn outside_a_poll_a_message_goes_at_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        send(&tx, flush(1)).unwrap();
        assert_eq!(flushes(rx.try_recv().unwrap()), [1]);
    }

    #[test]
    fn one_poll_hands_over_one_batch_in_order() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let inner = {
            let tx = tx.clone();
            let rx = rx.clone();
            async move {
                for upto in 1..=40 {
                    send(&tx, flush(upto)).unwrap();
                }
                // Nothing left while the poll runs.
                assert!(rx.is_empty());
            }
        };
        block_on(ToCommitter::new(tx.clone()).gathering(inner));
        let msg = rx.try_recv().unwrap();
        assert!(matches!(&msg, CommitMsg::Batch(m) if m.len() == 40));
        assert_eq!(flushes(msg), (1..=40).collect::<Vec<_>>());
        assert!(rx.is_empty());
        // Closed again: the next message goes at once.
        send(&tx, flush(41)).unwrap();
        assert_eq!(flushes(rx.try_recv().unwrap()), [41]);
    }

    #[test]
    fn a_single_message_goes_unwrapped() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let inner = {
            let tx = tx.clone();
            async move { send(&tx, flush(7)).unwrap() }
        };
        block_on(ToCommitter::new(tx).gathering(inner));
        assert!(matches!(rx.try_recv().unwrap(), CommitMsg::Flush(7)));
    }

    #[test]
    fn a_poll_of_one_message_keeps_the_outboxs_room_for_the_next() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let room = || OUTBOX.with(|outbox| outbox.borrow().gathered.capacity());
        for upto in 1..=3 {
            let inner = {
                let tx = tx.clone();
                async move { send(&tx, flush(upto)).unwrap() }
            };
            block_on(ToCommitter::new(tx.clone()).gathering(inner));
            assert!(matches!(rx.try_recv().unwrap(), CommitMsg::Flush(u) if u == upto));
            assert!(room() >= GATHERED_CAPACITY, "kept, not freed");
        }
        // A batch takes the room with it; the next poll makes new room.
        let inner = {
            let tx = tx.clone();
            async move {
                send(&tx, flush(4)).unwrap();
                send(&tx, flush(5)).unwrap();
            }
        };
        block_on(ToCommitter::new(tx).gathering(inner));
        assert_eq!(flushes(rx.try_recv().unwrap()), [4, 5]);
        assert_eq!(room(), 0);
    }

    #[test]
    fn a_poll_that_waits_hands_over_before_it_yields() {
        // The inner future waits for the committer to see its first message, as a request
        // that waits for its own commit does: it would hang if the message stayed gathered.
        let (tx, rx) = crossbeam_channel::unbounded();
        let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<u64>();
        let committer = std::thread::spawn(move || {
            let first = flushes(rx.recv().unwrap());
            seen_tx.send(first[0]).unwrap();
            flushes(rx.recv().unwrap())
        });
        let inner = {
            let tx = tx.clone();
            async move {
                send(&tx, flush(1)).unwrap();
                let seen = seen_rx.await.unwrap();
                send(&tx, flush(seen + 1)).unwrap();
                send(&tx, flush(seen + 2)).unwrap();
            }
        };
        block_on(ToCommitter::new(tx).gathering(inner));
        assert_eq!(committer.join().unwrap(), [2, 3]);
    }

    #[test]
    fn a_nested_poll_leaves_the_hand_over_to_the_outer_one() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let inner = {
            let tx = tx.clone();
            let rx = rx.clone();
            async move {
                send(&tx, flush(1)).unwrap();
                let nested = {
                    let tx = tx.clone();
                    async move { send(&tx, flush(2)).unwrap() }
                };
                ToCommitter::new(tx.clone()).gathering(nested).await;
                assert!(rx.is_empty(), "the nested poll handed over early");
                send(&tx, flush(3)).unwrap();
            }
        };
        block_on(ToCommitter::new(tx).gathering(inner));
        assert_eq!(flushes(rx.try_recv().unwrap()), [1, 2, 3]);
        assert!(rx.is_empty());
    }

    #[test]
    fn a_panicking_poll_still_hands_over_and_closes() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let inner = {
            let tx = tx.clone();
            async move {
                send(&tx, flush(1)).unwrap();
                send(&tx, flush(2)).unwrap();
                panic!("a bug in a request");
            }
        };
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            block_on(ToCommitter::new(tx.clone()).gathering(inner));
        }));
        assert!(unwound.is_err());
        assert_eq!(flushes(rx.try_recv().unwrap()), [1, 2]);
        send(&tx, flush(3)).unwrap();
        assert_eq!(flushes(rx.try_recv().unwrap()), [3]);
    }
}
