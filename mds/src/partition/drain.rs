//! The drain: releasing a partition's committed replies into their clients' connections.
//!
//! [`drain_partition`] is safe on any thread — the owner's drain loop calls it when the
//! committer wakes it, and a partner may call it for a partition whose owner is busy: the
//! reply engine hands each reply out exactly once, and a connection's output accepts appends
//! from any thread. Each reply goes to its client's connection *now* (the session's), which
//! is a newer one if the client reconnected while it waited.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use mds_proto::{Body, Errno, Reply};
use reply::{Outcome, Waker};
use tokio::sync::Notify;

use super::Partition;
use crate::committer::CommitMsg;
use crate::dispatch::Core;
use crate::metrics::PartitionMetrics;
use crate::output::ConnOutput;
use crate::queue::{HeldReply, Queued, Response};

/// Releases everything of `partition` that can leave now, encoding each reply into its
/// client's connection, then sending each touched connection's bytes (or waking its writer)
/// once. `touched` is scratch space the
/// caller keeps between drains. Returns how many replies were released. Per-CPU path only.
pub fn drain_partition(
    core: &Core,
    partition: usize,
    metrics: &PartitionMetrics,
    touched: &mut Vec<Arc<ConnOutput>>,
) -> usize {
    let started = quanta::Instant::now();
    let Some(engine) = core.replies.per_cpu_engine() else {
        return 0;
    };
    let released = engine.drain(partition, |queued, outcome| {
        release(core, metrics, started, queued, outcome, touched);
    });
    for conn in touched.drain(..) {
        conn.send_or_wake();
    }
    released
}

/// A global-path service thread's life (`--reply-path global`): take one reply at a time
/// under the service lock, release it outside, wake its writer; until the list is stopped.
/// Metrics are the reply's own partition's.
pub fn serve_global(core: &Core) -> u64 {
    let (Some(list), Some(partitions)) = (core.replies.global_list(), core.replies.partitions())
    else {
        return 0;
    };
    let metrics: Vec<PartitionMetrics> = (0..partitions).map(PartitionMetrics::register).collect();
    let mut touched = Vec::with_capacity(1);
    list.serve(|(partition, queued), outcome| {
        let started = quanta::Instant::now();
        let metrics = &metrics[partition];
        release(core, metrics, started, queued, outcome, &mut touched);
        for conn in touched.drain(..) {
            conn.send_or_wake();
        }
        // This path's drain duration: from the commit being durable to this reply being
        // queued for its socket (per reply; the per-CPU path records it per drain, that is,
        // for the last reply of each drain).
        let durable = core.commit_stats.durable_at_ns.load(Ordering::Acquire);
        let spent = crate::metrics::monotonic_ns().saturating_sub(durable);
        metrics.drain_duration.record(spent as f64 / 1e9);
    })
}

/// Releases one reply (or commit notice) whose wait ended with `outcome`: counts it, settles
/// its session, and appends it to its client's connection of now, pushing that connection on
/// `touched` when it owes its writer a wake.
fn release(
    core: &Core,
    metrics: &PartitionMetrics,
    started: quanta::Instant,
    queued: Queued,
    outcome: Outcome,
    touched: &mut Vec<Arc<ConnOutput>>,
) {
    let held = match queued {
        Queued::Reply(held) => held,
        Queued::Durable(waiter) => {
            let _ = waiter.send(matches!(outcome, Outcome::Committed { .. }));
            return;
        }
        Queued::Notice { session, transno } => {
            metrics.unsafe_replies.decrement(1.0);
            // Gone, and nothing it was told early is pending any more: the journal may
            // forget it (if it comes back, its next early reply makes it known first).
            let forget = |after| {
                core.to_committer(CommitMsg::ForgetClient {
                    client: session.client(),
                    after,
                });
            };
            if matches!(outcome, Outcome::Committed { .. }) && session.settle(transno, forget) {
                core.forget_if_idle(session.client());
            }
            // Early replies: tell the client what is durable now, once per connection
            // per `last_committed`. After a journal failure there is nothing to announce.
            if let (Outcome::Committed { last_committed }, Some(conn)) =
                (outcome, session.connection())
                && conn.owes_notice(last_committed)
            {
                metrics.commit_notices.increment(1);
                let notice = Reply::new(0, 0, last_committed, Ok(Body::Notice));
                if conn.append(&notice) {
                    touched.push(conn);
                }
            }
            return;
        }
    };
    let HeldReply {
        session,
        inflight,
        response,
        received,
        cos,
    } = held;
    let Response {
        xid,
        op,
        transno,
        result,
        ticket,
        encoded,
    } = response;
    let (result, last_committed) = match outcome {
        Outcome::Committed { last_committed } => (result, last_committed),
        // What it waited for is lost: a mutation is not durable, and a read built on a
        // change that will not survive must not be answered from it either.
        // A mutation is told why (ENOSPC for a full disk); a read, that what it would have
        // shown is gone (EIO).
        Outcome::Failed if transno > 0 => {
            (Err(core.namespace.refusal()), core.replies.last_committed())
        }
        Outcome::Failed => (Err(Errno::EIO), core.replies.last_committed()),
    };
    if cos {
        metrics.cos_waiting.decrement(1.0);
        metrics.cos_wait.record((started - received).as_secs_f64());
    }
    metrics.request(
        op as usize,
        result.as_ref().map(|_| ()).map_err(|e| *e),
        started - received,
    );
    let durable = matches!(outcome, Outcome::Committed { .. });
    let (to, idle) = session.release(xid, durable);
    if idle {
        core.forget_if_idle(session.client());
    }
    if let Some(to) = to {
        let ok = result.is_ok();
        let reply = Reply {
            xid,
            transno: if ok { transno } else { 0 },
            last_committed,
            result,
            ticket: if ok { ticket } else { 0 },
        };
        if to.conn().append_with(&reply, encoded.as_deref()) {
            touched.push(to.conn().clone());
        }
    }
    // The guards drop only now, the reply appended: a closing connection waits for its
    // count to reach zero and then lets its writer stop at the first empty buffer, so a
    // reply counted done before it was appended could be left behind. (Without a
    // connection, the client is away; it will resend, or has given up.)
    drop(inflight);
}

/// The per-CPU path's wakes. Each partition has its own (the committer's, through the reply
/// engine's waker) and the moment the first wake its drain has not begun on came; a partner —
/// the next partition — watches that moment and drains the queue itself once it is older than
/// `--partner-drain-after` (the ptlrpcd lesson: a partition whose core is busy elsewhere must
/// not hold its clients' replies). The replies still leave through the owner's connections.
pub struct DrainWakes {
    own: Box<[Arc<Notify>]>,
    /// Tells a partition that the partition it watches was woken.
    watch: Box<[Notify]>,
    /// `metrics::monotonic_ns` of the first wake not yet acted on; 0 when none.
    woken_at: Box<[CachePadded<AtomicU64>]>,
    /// How long a woken partition may take to begin draining; `None`: partners never drain.
    partner_after: Option<Duration>,
    /// Fault injection for tests: partition 0's drain waits this long after each wake before
    /// it begins, as if its core were busy elsewhere.
    stall: Option<Duration>,
}

impl DrainWakes {
    pub fn new(
        partitions: usize,
        partner_after: Duration,
        stall: Option<Duration>,
    ) -> Arc<DrainWakes> {
        Arc::new(DrainWakes {
            own: (0..partitions).map(|_| Arc::new(Notify::new())).collect(),
            watch: (0..partitions).map(|_| Notify::new()).collect(),
            woken_at: (0..partitions)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            partner_after: (partitions > 1 && !partner_after.is_zero()).then_some(partner_after),
            stall,
        })
    }

    /// The reply engine's waker for `partition`: one clock read and at most two coalescing
    /// notifications per partition per commit.
    pub fn waker(self: &Arc<Self>, partition: usize) -> Waker {
        let wakes = self.clone();
        Box::new(move || {
            let _ = wakes.woken_at[partition].compare_exchange(
                0,
                crate::metrics::monotonic_ns(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if let Some(partner) = wakes.partner_of(partition) {
                wakes.watch[partner].notify_one();
            }
            wakes.own[partition].notify_one();
        })
    }

    /// The partition that drains for `partition` when it is late, if partners drain at all.
    fn partner_of(&self, partition: usize) -> Option<usize> {
        self.partner_after.map(|_| (partition + 1) % self.own.len())
    }

    /// The partition `partner` drains for.
    fn watched_by(&self, partner: usize) -> usize {
        (partner + self.own.len() - 1) % self.own.len()
    }

    /// `partition`'s drain begins: it acts on every wake so far.
    fn begin(&self, partition: usize) {
        self.woken_at[partition].store(0, Ordering::Release);
    }

    /// Whether `partition` was woken since its last drain began; if so, the caller begins
    /// one now (one load when not woken, the common case between commits).
    fn take_woken(&self, partition: usize) -> bool {
        self.woken_at[partition].load(Ordering::Acquire) != 0
            && self.woken_at[partition].swap(0, Ordering::AcqRel) != 0
    }

    /// Whether `partition` has been woken and has not begun draining for `after` or more:
    /// `Ok(())` claims the drain for the caller (the owner will find nothing); `Err(Some(t))`:
    /// look again at `t` (monotonic ns); `Err(None)`: nothing is owed.
    fn claim_overdue(&self, partition: usize, after: Duration) -> Result<(), Option<u64>> {
        let woken = self.woken_at[partition].load(Ordering::Acquire);
        if woken == 0 {
            return Err(None);
        }
        let due = woken + after.as_nanos() as u64;
        if crate::metrics::monotonic_ns() < due {
            return Err(Some(due));
        }
        self.woken_at[partition]
            .compare_exchange(woken, 0, Ordering::AcqRel, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| None)
    }
}

impl Partition {
    /// Waits for the committer's wakes and releases this partition's committed replies: one
    /// queue-lock acquisition per drain, each reply encoded into its connection's buffer, one
    /// write per connection per drain. Between its own drains it watches the partition before
    /// it and drains that one's queue when its drain is overdue.
    pub(super) async fn drain_loop(self: Rc<Self>) {
        let wakes = self.shared.wakes.clone();
        let own = wakes.own[self.id].clone();
        let watched = wakes.watched_by(self.id);
        let watched_metrics = PartitionMetrics::register(watched);
        let partner_drains =
            metrics::counter!(crate::metrics::PARTNER_DRAINS, "partition" => watched.to_string());
        partner_drains.increment(0);
        let stall = wakes.stall.filter(|_| self.id == 0);
        // When to look at the watched partition again.
        let mut look_at: Option<u64> = None;
        loop {
            let sleep_for = look_at
                .map(|at| Duration::from_nanos(at.saturating_sub(crate::metrics::monotonic_ns())));
            tokio::select! {
                // The partner's look first when it is due: with its own wakes always ready
                // (a busy partition), a partner polled second would never look, and would
                // stop draining for its neighbour exactly under load.
                biased;
                () = tokio::time::sleep(sleep_for.unwrap_or_default()), if sleep_for.is_some() => {
                    let after = wakes.partner_after.expect("watching only with partners");
                    look_at = match wakes.claim_overdue(watched, after) {
                        Ok(()) => {
                            partner_drains.increment(1);
                            let released = drain_partition(&self.shared.core, watched, &watched_metrics, &mut self.touched.borrow_mut());
                            watched_metrics.drain_replies.record(released as f64);
                            self.shared.progress.notify_waiters();
                            None
                        }
                        Err(again) => again,
                    };
                }
                () = own.notified() => {
                    if let Some(stall) = stall {
                        tokio::time::sleep(stall).await;
                    }
                    wakes.begin(self.id);
                    self.drain_own(&mut self.touched.borrow_mut());
                }
                () = wakes.watch[self.id].notified(), if wakes.partner_after.is_some() => {
                    look_at.get_or_insert(0);
                }
            }
        }
    }

    /// Drains this partition's queue now if a commit woke it and no drain has begun since:
    /// called by a connection between two reads, so the replies a commit released leave
    /// without waiting for the drain task's turn behind every connection ready to run (at
    /// 64 x 16 that turn came milliseconds late, and the global baseline's service threads
    /// were faster than this path).
    pub(super) fn drain_if_woken(&self) {
        // A partition whose drain is stalled on purpose (tests) begins none here either.
        let stalled = self.id == 0 && self.shared.wakes.stall.is_some();
        if !stalled
            && self.shared.core.replies.per_cpu_engine().is_some()
            && self.shared.wakes.take_woken(self.id)
        {
            self.drain_own(&mut self.touched.borrow_mut());
        }
    }

    /// One drain of this partition's own queue.
    fn drain_own(&self, touched: &mut Vec<Arc<ConnOutput>>) {
        let released = drain_partition(&self.shared.core, self.id, &self.metrics, touched);
        self.metrics.drain_wakes.increment(1);
        self.shared.progress.notify_waiters();
        self.metrics.drain_replies.record(released as f64);
        // From the commit being durable to its replies being queued for their sockets.
        let durable = self
            .shared
            .core
            .commit_stats
            .durable_at_ns
            .load(Ordering::Acquire);
        let spent = crate::metrics::monotonic_ns().saturating_sub(durable);
        self.metrics.drain_duration.record(spent as f64 / 1e9);
        self.metrics
            .queue_depth
            .set(self.shared.core.replies.depth(self.id) as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::atomic::AtomicUsize;

    use mds_proto::Body;
    use tokio_util::sync::CancellationToken;

    use crate::config::{Ack, Cos};
    use crate::namespace::Namespace;
    use crate::output::write_loop;

    /// A two-partition per-CPU core on an empty namespace, with no committer.
    fn per_cpu_core() -> Arc<Core> {
        let (core, _commits) = Core::for_tests(Namespace::empty(), 2, Cos::On, Ack::Commit);
        Arc::new(core)
    }

    /// Queues on partition 0 the reply to a CREATE, xid and transno `t`, made on `origin`
    /// and counted in flight there (as the connection's `deliver` does).
    fn push_reply(
        core: &Core,
        session: &Arc<crate::session::Session>,
        origin: &Arc<ConnOutput>,
        t: u64,
    ) {
        let held = HeldReply {
            session: session.clone(),
            inflight: origin.start(0),
            response: Response::new(t, 3, t, Ok(Body::Done)),
            received: quanta::Instant::now(),
            cos: false,
        };
        core.replies.push(0, t, Queued::Reply(held));
    }

    /// `Core::durable`, the remote steps' wait for their own commit: a notification through
    /// the reply queue, told when the commit's drain passes it — not before, and false when
    /// the journal failed instead.
    #[test]
    fn a_wait_for_durability_is_woken_by_the_commits_drain() {
        let (core, commits) = Core::for_tests(Namespace::empty(), 2, Cos::On, Ack::Commit);
        let core = Arc::new(core);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let engine = || core.replies.per_cpu_engine().unwrap();
        let metrics = PartitionMetrics::register(0);
        let drain = || drain_partition(&core, 0, &metrics, &mut Vec::new());
        rt.block_on(async {
            let waiting = tokio::spawn({
                let core = core.clone();
                async move { core.durable(5).await }
            });
            tokio::task::yield_now().await;
            // It asked for the commit it waits for.
            assert!(matches!(commits.try_recv(), Ok(CommitMsg::Flush(5))));
            engine().publish(4);
            drain();
            tokio::task::yield_now().await;
            assert!(
                !waiting.is_finished(),
                "woken before its transno was durable"
            );
            engine().publish(5);
            assert_eq!(drain(), 1);
            assert!(waiting.await.unwrap());

            let failing = tokio::spawn({
                let core = core.clone();
                async move { core.durable(9).await }
            });
            tokio::task::yield_now().await;
            engine().fail();
            drain();
            assert!(
                !failing.await.unwrap(),
                "a failed journal is not durability"
            );
            // Already durable: answered at the next drain, at once.
            let (core2, _c) = Core::for_tests(Namespace::empty(), 1, Cos::On, Ack::Commit);
            core2.replies.per_cpu_engine().unwrap().publish(3);
            let done = tokio::spawn(async move {
                let metrics = PartitionMetrics::register(0);
                let core2 = Arc::new(core2);
                let waiter = {
                    let core2 = core2.clone();
                    tokio::spawn(async move { core2.durable(2).await })
                };
                tokio::task::yield_now().await;
                drain_partition(&core2, 0, &metrics, &mut Vec::new());
                waiter.await.unwrap()
            });
            assert!(done.await.unwrap());
        });
    }

    /// The owner's drain and a partner's drain race over one partition's queue while the
    /// committer publishes in steps: every reply reaches its client's socket exactly once.
    #[test]
    fn a_partner_thread_drains_beside_the_owner_and_each_reply_arrives_once() {
        const N: u64 = 20_000;
        let core = per_cpu_core();

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client_side = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let conn = Arc::new(ConnOutput::new(usize::MAX));
        let session = core
            .sessions
            .attach(7, conn.clone(), |_| true)
            .unwrap()
            .session;
        let writer = {
            let (conn, cut) = (conn.clone(), CancellationToken::new());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    server_side.set_nonblocking(true).unwrap();
                    let stream = tokio::net::TcpStream::from_std(server_side).unwrap();
                    let (_rd, wr) = stream.into_split();
                    write_loop(wr, conn, cut).await;
                });
            })
        };

        for t in 1..=N {
            assert_eq!(
                session.begin(t, mds_proto::opcode::CREATE),
                crate::session::Begin::New
            );
            push_reply(&core, &session, &conn, t);
        }
        let released = Arc::new(AtomicUsize::new(0));
        let drainers: Vec<_> = (0..2)
            .map(|_| {
                let (core, released) = (core.clone(), released.clone());
                std::thread::spawn(move || {
                    let metrics = PartitionMetrics::register(0);
                    let mut touched = Vec::new();
                    while released.load(Ordering::SeqCst) < N as usize {
                        let n = drain_partition(&core, 0, &metrics, &mut touched);
                        released.fetch_add(n, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for lc in (0..=N).step_by(997).chain([N]) {
            core.replies.per_cpu_engine().unwrap().publish(lc);
        }
        for d in drainers {
            d.join().unwrap();
        }
        assert_eq!(released.load(Ordering::SeqCst), N as usize);
        assert_eq!(conn.inflight(), 0);
        conn.close();
        writer.join().unwrap();

        let mut bytes = Vec::new();
        client_side.read_to_end(&mut bytes).unwrap();
        let mut xids = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let reply: Reply = mds_proto::decode(&rest[4..4 + len]).unwrap();
            assert_eq!(reply.transno, reply.xid);
            assert!(reply.last_committed >= reply.transno);
            xids.push(reply.xid);
            rest = &rest[4 + len..];
        }
        xids.sort_unstable();
        assert_eq!(xids, (1..=N).collect::<Vec<_>>(), "each reply exactly once");
        assert_eq!(session.pending(), 0);
        assert_eq!(session.replied_xid(), N);
    }

    /// A closing connection's reader waits until none of its mutations is in flight, then
    /// closes, and the writer stops once the buffer is empty: so by the time a drain counts a
    /// reply done, that reply must be in the buffer, or a shutdown drops it (the client sees
    /// its connection close with a create unanswered).
    #[test]
    fn a_reply_is_buffered_before_its_connection_counts_it_done() {
        const N: u64 = 2_000;
        let core = per_cpu_core();
        let conn = Arc::new(ConnOutput::new(usize::MAX));
        let session = core
            .sessions
            .attach(7, conn.clone(), |_| true)
            .unwrap()
            .session;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drainer = {
            let (core, stop) = (core.clone(), stop.clone());
            std::thread::spawn(move || {
                let metrics = PartitionMetrics::register(0);
                let mut touched = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    drain_partition(&core, 0, &metrics, &mut touched);
                }
            })
        };
        let mut unbuffered = 0;
        for t in 1..=N {
            let before = conn.buffered();
            assert_eq!(
                session.begin(t, mds_proto::opcode::CREATE),
                crate::session::Begin::New
            );
            push_reply(&core, &session, &conn, t);
            core.replies.per_cpu_engine().unwrap().publish(t);
            // What `wait_until_idle` waits for, watched as closely as a thread can.
            while conn.inflight() > 0 {
                assert!(!drainer.is_finished(), "the drainer stopped");
                std::hint::spin_loop();
            }
            if conn.buffered() == before {
                unbuffered += 1;
            }
        }
        stop.store(true, Ordering::Release);
        drainer.join().unwrap();
        assert_eq!(
            unbuffered, 0,
            "replies counted done before they were buffered"
        );
    }

    /// A client reconnected and resent a mutation still waiting for its commit: the resend
    /// joins the original, counted in flight only on the old connection, and the reply leaves
    /// through the new one. The new connection's closing reader must wait for it too.
    #[test]
    fn a_closing_connection_waits_for_a_reply_its_client_resent_on_it() {
        let core = per_cpu_core();
        let old = Arc::new(ConnOutput::new(usize::MAX));
        let new = Arc::new(ConnOutput::new(usize::MAX));
        let session = core
            .sessions
            .attach(7, old.clone(), |_| true)
            .unwrap()
            .session;
        assert_eq!(
            session.begin(1, mds_proto::opcode::CREATE),
            crate::session::Begin::New
        );
        push_reply(&core, &session, &old, 1);
        assert!(
            core.sessions
                .attach(7, new.clone(), |_| true)
                .unwrap()
                .replaced
                .is_some()
        );
        assert_eq!(
            session.begin(1, mds_proto::opcode::CREATE),
            crate::session::Begin::Joined
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let closing = || new.wait_until_idle(|| session.owes_replies_to(&new));
        let early =
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), closing()).await });
        assert!(
            early.is_err(),
            "the new connection closed with a reply owed"
        );

        let drainer = {
            let core = core.clone();
            std::thread::spawn(move || {
                core.replies.per_cpu_engine().unwrap().publish(1);
                let metrics = PartitionMetrics::register(0);
                while drain_partition(&core, 0, &metrics, &mut Vec::new()) == 0 {
                    std::thread::yield_now();
                }
            })
        };
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), closing()).await })
            .expect("the reply's drain wakes the closing reader");
        assert!(
            new.buffered() > 0,
            "the reply is buffered before the reader closes"
        );
        assert_eq!(old.buffered(), 0);
        drainer.join().unwrap();
        // Counted done on the old connection only after the append (and so, perhaps, after
        // the new one's reader has looked).
        assert_eq!(old.inflight(), 0);
    }
}
