//! One connection on its partition: the TLS handshake if the port has one, the read loop, the
//! CONNECT handshake (`serve/handshake.rs`, with the shared-key challenge when the server has a
//! key), and each request executed on the spot — answered at once, or queued in the reply
//! engine until what it depends on is durable.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use mds_proto::{self as protocol, Body, Errno, MAX_GROUPS, Op, Reply, Request, StatFs};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;
use tracing::{debug, warn};

mod handshake;

use super::conn::{ConnOutput, write_loop};
use super::{HeldReply, Partition, Payload, Waiting};
use crate::committer::CommitMsg;
use crate::namespace::{Caller, Exec, Journaling};
use crate::session::{Answered, Begin, Session};
use handshake::{CONNECT, Handshaking};

/// Why the read loop ended.
enum Ended {
    /// The client closed, the server is shutting down, or a request was refused: let what is
    /// pending leave, then close.
    Normally,
    /// The client stopped reading its replies: cut at once.
    SlowClient,
    /// A newer connection of the same client took this one's place: its pending replies go
    /// there.
    Replaced,
}

/// A reply on its way into the reply queue.
struct Pending {
    xid: u64,
    op: u8,
    /// The transno the reply reports (0 for reads and errors).
    transno: u64,
    result: Result<Body, Errno>,
    /// Held back by commit-on-share.
    cos: bool,
}

impl Pending {
    fn reply(xid: u64, op: u8, transno: u64, result: Result<Body, Errno>) -> Pending {
        Pending {
            xid,
            op,
            transno,
            result,
            cos: false,
        }
    }
}

/// A request was refused and the connection must close (an EPROTO reply is queued).
struct Refused;

impl Partition {
    /// An accepted socket: with TLS on the port, its handshake first (bounded by the CONNECT
    /// deadline), then the connection is served over the TLS stream's halves; without, over
    /// the socket's own halves, as before TLS existed.
    pub(super) async fn accept(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let _ = stream.set_nodelay(true);
        let Some(acceptor) = self.shared.tls.clone() else {
            let (rd, wr) = stream.into_split();
            return self.serve(rd, wr, peer, permit).await;
        };
        let deadline = self.shared.limits.connect_deadline;
        let handshake = tokio::select! {
            _ = self.shared.shutdown.cancelled() => return,
            r = tokio::time::timeout(deadline, acceptor.accept(stream)) => r,
        };
        match handshake {
            Ok(Ok(tls)) => {
                let (rd, wr) = tokio::io::split(tls);
                self.serve(rd, wr, peer, permit).await;
            }
            Ok(Err(e)) => {
                warn!(partition = self.id, %peer, cause = %e, "closing connection: TLS handshake failed");
                self.metrics.tls.increment(1);
            }
            Err(_) => {
                warn!(partition = self.id, %peer, after = ?deadline, "closing connection: no TLS handshake in time");
                metrics::counter!(crate::metrics::CONNECTIONS_TIMED_OUT, "reason" => "connect")
                    .increment(1);
            }
        }
    }

    async fn serve<R, W>(
        self: Rc<Self>,
        mut rd: R,
        wr: W,
        peer: SocketAddr,
        _permit: tokio::sync::OwnedSemaphorePermit,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + 'static,
    {
        let limits = self.shared.limits;
        let conn = Arc::new(ConnOutput::new(limits.max_inflight_per_conn));
        self.active.set(self.active.get() + 1);
        self.metrics.connections.increment(1.0);
        self.metrics.accepted.increment(1);
        let writer =
            tokio::task::spawn_local(write_loop(wr, conn.clone(), self.shared.cut.clone()));

        let mut codec = protocol::codec();
        let mut input = BytesMut::with_capacity(64 << 10);
        let mut session: Option<Arc<Session>> = None;
        let mut handshaking = Handshaking::new(peer);
        let mut answered: Vec<(u8, Result<(), Errno>)> = Vec::new();
        // Frames already read but not executed: the output passed its high-water mark
        // midway through a read.
        let mut unexecuted = false;
        let connect_deadline = std::time::Instant::now() + limits.connect_deadline;
        let ended = 'read: loop {
            conn.wait_for_space().await;
            if conn.is_closed() {
                break Ended::Normally;
            }
            if self.shared.over_uncommitted_cap() {
                // The disk is behind the clients: wait for commits before executing more.
                self.metrics.paused_uncommitted.increment(1);
                let progress = self.shared.progress.notified();
                if self.shared.over_uncommitted_cap() {
                    tokio::select! {
                        biased;
                        _ = self.shared.cut.cancelled() => break Ended::Normally,
                        _ = progress => {}
                        // A drain notifies; this only bounds a missed wake.
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                continue;
            }
            if conn.buffered() >= limits.output_high_water {
                self.metrics.paused_output.increment(1);
                // The client reads slower than it asks: execute nothing more for it until
                // its writer has made room, and cut it if the writer makes none for long.
                conn.wake_writer();
                let room = limits.output_high_water / 2;
                tokio::select! {
                    biased;
                    _ = self.shared.shutdown.cancelled() => break Ended::Normally,
                    _ = conn.replaced().cancelled() => break Ended::Replaced,
                    r = tokio::time::timeout(limits.output_stall, conn.wait_for_output_below(room)) => {
                        if r.is_err() {
                            warn!(
                                partition = self.id,
                                conn = conn.id(),
                                buffered = conn.buffered(),
                                stall = ?limits.output_stall,
                                "closing connection: client is not reading its replies"
                            );
                            self.metrics.slow_clients.increment(1);
                            break Ended::SlowClient;
                        }
                    }
                }
                continue;
            }
            if !unexecuted {
                // Silence is bounded: CONNECT must come soon, and a connection with nothing
                // in flight may not hold its slot forever.
                let (silence, why) = match &session {
                    None => (
                        connect_deadline.saturating_duration_since(std::time::Instant::now()),
                        "connect",
                    ),
                    Some(_) => (limits.idle_timeout, "idle"),
                };
                let read = tokio::select! {
                    biased;
                    _ = self.shared.shutdown.cancelled() => break Ended::Normally,
                    _ = conn.replaced().cancelled() => break Ended::Replaced,
                    r = rd.read_buf(&mut input) => r,
                    _ = tokio::time::sleep(silence), if session.is_none() || conn.inflight() == 0 => {
                        warn!(partition = self.id, conn = conn.id(), after = ?silence, "closing connection: {}", if why == "connect" { "no CONNECT in time" } else { "idle" });
                        metrics::counter!(crate::metrics::CONNECTIONS_TIMED_OUT, "reason" => why).increment(1);
                        break Ended::Normally;
                    }
                };
                match read {
                    Ok(0) | Err(_) => break Ended::Normally,
                    Ok(_) => {}
                }
            }
            unexecuted = false;
            let received = quanta::Instant::now();
            loop {
                if conn.buffered() >= limits.output_high_water || self.shared.over_uncommitted_cap()
                {
                    // Checked per request, not per read: one read of small requests with
                    // large replies (READDIR pages) would otherwise buffer them all.
                    unexecuted = true;
                    break;
                }
                match codec.decode(&mut input) {
                    Ok(Some(frame)) => {
                        if let Some(current) = &session
                            && self.shared.recovery.is_open()
                        {
                            // What is answered so far leaves before this request waits.
                            conn.wake_writer();
                            self.recovery_gate(current, &frame).await;
                        }
                        if self
                            .handle(
                                &conn,
                                &mut session,
                                &mut handshaking,
                                &frame,
                                received,
                                &mut answered,
                            )
                            .is_err()
                        {
                            break 'read Ended::Normally;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // Only an oversized length gets here: the stream cannot be resynced.
                        debug!(partition = self.id, conn = conn.id(), cause = %e, "oversized frame");
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            "closing connection: oversized frame"
                        );
                        self.metrics.oversized.increment(1);
                        self.reply_now(&conn, 0, Err(Errno::EPROTO));
                        break 'read Ended::Normally;
                    }
                }
            }
            let replied = quanta::Instant::now();
            for (op, result) in answered.drain(..) {
                self.metrics
                    .request(op as usize, result, replied - received);
            }
            self.drain_if_woken();
            if conn.buffered() > 0 {
                conn.wake_writer();
            }
        };
        if !self.shared.shutdown.is_cancelled() {
            handshaking.count_if_unproved(self.id, conn.id());
        }
        match ended {
            Ended::SlowClient => {
                conn.close();
                writer.abort();
            }
            Ended::Replaced => {
                // The client has moved to its newer connection and reads this one no more:
                // what is still pending is answered there; what is buffered here is dropped
                // rather than left to block a writer on a socket nobody reads.
                conn.close();
                writer.abort();
            }
            Ended::Normally => {
                // Stop reading; let this connection's pending replies leave before closing.
                conn.wake_writer();
                conn.wait_until_idle(|| {
                    session
                        .as_ref()
                        .is_some_and(|session| session.owes_replies_to(&conn))
                })
                .await;
                conn.close();
                let _ = writer.await;
            }
        }
        if let Some(session) = &session
            && self.shared.sessions.detach(session, &conn)
        {
            // The client left. Once what it was told early is durable the journal may forget
            // it: now, if that is already so, or when the last notice's release settles it.
            let durable = self.shared.engine.last_committed();
            session.settle(durable, |after| {
                self.shared.to_committer(CommitMsg::ForgetClient {
                    client: session.client(),
                    after,
                })
            });
            self.shared.forget_if_idle(session.client());
        }
        self.metrics.connections.decrement(1.0);
        self.active.set(self.active.get() - 1);
        if self.active.get() == 0 {
            self.idle.notify_one();
        }
    }

    /// Handles one request frame. `Err` closes the connection (an EPROTO reply is queued).
    /// Immediate replies push their opcode and result to `answered`, so the caller records
    /// their latency with one clock read per batch of requests.
    fn handle(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        handshaking: &mut Handshaking,
        frame: &[u8],
        received: quanta::Instant,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        let Some(current) = session.as_ref() else {
            return self.handshake(conn, session, handshaking, frame, answered);
        };
        let request: Request = match protocol::decode(frame) {
            Ok(r) => r,
            Err(e) => {
                warn!(partition = self.id, conn = conn.id(), cause = %e, "closing connection: malformed request");
                self.metrics.malformed.increment(1);
                self.reply_now(conn, 0, Err(Errno::EPROTO));
                return Err(Refused);
            }
        };
        let Request {
            xid,
            op,
            acked_xid,
            mut cred,
            replay,
        } = request;
        self.shared.namespace.effective_cred(&mut cred);
        let opcode = op.opcode();
        let immediate = |result: Result<Body, Errno>,
                         answered: &mut Vec<(u8, Result<(), Errno>)>| {
            answered.push((opcode, result.as_ref().map(|_| ()).map_err(|e| *e)));
            current.note_replied(xid);
            self.reply_now(conn, xid, result);
        };
        if cred.groups.len() > MAX_GROUPS {
            warn!(
                partition = self.id,
                conn = conn.id(),
                groups = cred.groups.len(),
                "closing connection: too many supplementary groups"
            );
            self.metrics.malformed.increment(1);
            immediate(Err(Errno::EPROTO), answered);
            return Err(Refused);
        }
        current.note_acked(acked_xid);
        if let Some(r) = replay
            && (!self.shared.recovery.is_open()
                || !op.is_mutation()
                || self.shared.namespace.last_transno() + 1 != r.transno)
        {
            // Not its turn (`recovery_gate` waited for it): the window closed, or its transno
            // is durable or was skipped already. The client must count it lost.
            self.shared.recovery.abandon(r.transno);
            immediate(Err(Errno::EINVAL), answered);
            return Ok(());
        }
        let engine = &self.shared.engine;
        match op {
            Op::Connect { .. } | Op::Authenticate { .. } => {
                warn!(
                    partition = self.id,
                    conn = conn.id(),
                    "closing connection: second {}",
                    if opcode == CONNECT {
                        "CONNECT"
                    } else {
                        "AUTHENTICATE"
                    }
                );
                self.metrics.handshake.increment(1);
                immediate(Err(Errno::EPROTO), answered);
                return Err(Refused);
            }
            Op::Ping => immediate(Ok(Body::Pong), answered),
            Op::Statfs => immediate(Ok(Body::StatFs(self.statfs())), answered),
            Op::Sync => {
                if current.begin(xid) != Begin::New {
                    return Ok(()); // a resend: the original's reply answers it
                }
                let upto = self.shared.namespace.last_transno();
                if upto <= engine.last_committed() {
                    current.abandon(xid);
                    immediate(Ok(Body::Done), answered);
                } else {
                    let pending = Pending::reply(xid, opcode, upto, Ok(Body::Done));
                    self.defer(conn, current, upto, received, pending);
                    self.shared.to_committer(CommitMsg::Flush(upto));
                }
            }
            op => {
                let mutation = op.is_mutation();
                if mutation {
                    match current.begin(xid) {
                        Begin::New => {}
                        // Pending still: the original's reply answers it.
                        Begin::Joined => return Ok(()),
                        Begin::Answered(Answered { transno, body }) => {
                            // Executed already, its reply lost on the way: the same answer
                            // again, never a second execution.
                            self.metrics.resent_answered.increment(1);
                            answered.push((opcode, Ok(())));
                            current.note_replied(xid);
                            self.reply_unsafe(conn, xid, transno, Ok(body));
                            return Ok(());
                        }
                    }
                }
                // After a journal failure nothing above `last_committed` will ever be durable,
                // and its clients were answered EIO: no read may show it, not even to the
                // client that made it (no client has identity 0), COS on or off. Such a read
                // waits for a commit that fails at once, and is answered the same way.
                let failed = self.shared.namespace.is_read_only();
                // Early replies: the journal must know a client before it holds an unsafe
                // reply, or a crash would leave the server unaware of what it must wait for.
                // The client's first early mutation sends KnowClient just before its record
                // (messages from one partition keep their order), from inside `execute`, so
                // only a mutation that executed makes the client known, as before records were
                // sent from there; `first_early` tells the code below it was the first.
                let first_early = std::cell::Cell::new(false);
                let known_at = std::cell::Cell::new(0);
                let send = |record: journal::TxRecord| {
                    if self.shared.ack_early {
                        let know = current.know(record.transno, || {
                            self.shared
                                .to_committer(CommitMsg::KnowClient(current.client()))
                        });
                        known_at.set(know.known_at);
                        if know.first {
                            first_early.set(true);
                        }
                    }
                    self.shared.to_committer(CommitMsg::Record(record));
                };
                let caller = Caller {
                    client: if failed { 0 } else { current.client() },
                    cred: &cred,
                    // Without commit-on-share nothing counts as uncommitted.
                    last_committed: if self.shared.cos || failed {
                        engine.last_committed()
                    } else {
                        u64::MAX
                    },
                    reuse_ino: replay.map(|r| r.ino).filter(|&ino| ino != 0),
                    journal: Some(Journaling {
                        send: &send,
                        client: current.client(),
                        xid,
                        acked_xid: current.acked_xid(),
                    }),
                };
                let exec = self.shared.namespace.execute(op, &caller);
                if let (Some(r), Exec::Now { .. }) = (replay, &exec) {
                    // A replay that no longer applies (what it built on was lost with a
                    // client that did not come back): its transno is skipped by an empty
                    // record, never handed out again, and its client counts it lost.
                    self.shared.namespace.skip_to(r.transno);
                    self.shared
                        .to_committer(CommitMsg::Record(journal::TxRecord {
                            transno: r.transno,
                            ops: Vec::new(),
                        }));
                    self.shared.recovery.replayed(r.transno);
                }
                match exec {
                    Exec::Now { result, wait: 0 } => {
                        if mutation {
                            current.abandon(xid);
                        }
                        immediate(result, answered);
                    }
                    Exec::Now { result, wait } => {
                        // Built on another client's uncommitted change: the answer waits
                        // for that change's commit, which is asked for now.
                        self.cos_conflict(opcode, wait);
                        self.metrics.cos_waiting.increment(1.0);
                        let pending = Pending {
                            cos: true,
                            ..Pending::reply(xid, opcode, 0, result)
                        };
                        self.defer(conn, current, wait, received, pending);
                    }
                    Exec::Mutation {
                        transno,
                        body,
                        built_on,
                        ..
                    } => {
                        // Its record (with the resend record) is with the committer already;
                        // the session keeps how it was answered for resends.
                        current.remember(xid, transno, body.clone());
                        if let Some(r) = replay {
                            debug_assert_eq!(r.transno, transno, "a replay takes its own transno");
                            self.shared.recovery.replayed(transno);
                            self.metrics.replayed.increment(1);
                        }
                        if !self.shared.ack_early {
                            let pending = Pending::reply(xid, opcode, transno, Ok(body));
                            self.defer(conn, current, transno, received, pending);
                            if built_on > 0 {
                                // Its own commit covers what it built on; start it now.
                                self.cos_conflict(opcode, transno);
                            }
                            return Ok(());
                        }
                        // Early. The client's first mutation is answered after its commit,
                        // which carries the client's record (sent just before the mutation's),
                        // and that commit starts now.
                        if first_early.get() {
                            let pending = Pending::reply(xid, opcode, transno, Ok(body));
                            self.defer(conn, current, transno.max(built_on), received, pending);
                            self.shared
                                .to_committer(CommitMsg::Flush(transno.max(built_on)));
                            if built_on > 0 {
                                self.metrics.cos_conflict(opcode);
                                self.shared.cos_conflicts.fetch_add(1, Ordering::Relaxed);
                            }
                            // Its commit settles the client (forgotten if nothing follows).
                            self.defer_notice(current, transno);
                            return Ok(());
                        }
                        // Early, but not before the journal knows the client (the commit of
                        // its first early mutation, which may still be in flight when a
                        // pipelined second one executes: a crash before it would find no
                        // record of a client holding unsafe replies), nor before what it
                        // built on is durable.
                        let unknown_until = Some(known_at.get())
                            .filter(|&t| t > engine.last_committed())
                            .unwrap_or(0);
                        if built_on > 0 || unknown_until > 0 {
                            if built_on > 0 {
                                self.cos_conflict(opcode, built_on);
                            }
                            let pending = Pending::reply(xid, opcode, transno, Ok(body));
                            self.defer(
                                conn,
                                current,
                                built_on.max(unknown_until),
                                received,
                                pending,
                            );
                        } else {
                            current.abandon(xid);
                            answered.push((opcode, Ok(())));
                            self.reply_unsafe(conn, xid, transno, Ok(body));
                        }
                        // Its commit will be announced to the client by a notice.
                        self.defer_notice(current, transno);
                    }
                }
            }
        }
        Ok(())
    }

    /// A request built on another client's uncommitted change: count it and ask for the
    /// commit of everything up to `upto` now, without blocking.
    fn cos_conflict(&self, opcode: u8, upto: u64) {
        self.metrics.cos_conflict(opcode);
        self.shared.cos_conflicts.fetch_add(1, Ordering::Relaxed);
        self.shared.to_committer(CommitMsg::Flush(upto));
    }

    /// Queues a reply until `until` is durable.
    fn defer(
        &self,
        conn: &Arc<ConnOutput>,
        session: &Arc<Session>,
        until: u64,
        received: quanta::Instant,
        reply: Pending,
    ) {
        conn.request_started();
        self.shared.engine.push(
            self.id,
            until,
            Payload {
                session: session.clone(),
                what: Waiting::Reply(HeldReply {
                    origin: conn.clone(),
                    xid: reply.xid,
                    transno: reply.transno,
                    op: reply.op,
                    received,
                    result: reply.result,
                    cos: reply.cos,
                }),
            },
        );
    }

    /// Queues an immediate reply on `conn`; the read loop wakes its writer once per read.
    fn reply_now(&self, conn: &ConnOutput, xid: u64, result: Result<Body, Errno>) {
        self.reply_unsafe(conn, xid, 0, result);
    }

    /// Queues an immediate reply that reports `transno`, possibly not durable yet (an early
    /// reply: `transno > last_committed` tells the client it is unsafe).
    fn reply_unsafe(&self, conn: &ConnOutput, xid: u64, transno: u64, result: Result<Body, Errno>) {
        conn.append(&Reply {
            xid,
            transno,
            last_committed: self.shared.engine.last_committed(),
            result,
        });
    }

    /// Queues, until `transno` is durable, the commit notice owed to `session`'s client for
    /// an early reply: one notice per connection per drain, whatever it covers.
    fn defer_notice(&self, session: &Arc<Session>, transno: u64) {
        self.metrics.unsafe_replies.increment(1.0);
        self.shared
            .engine
            .push(self.id, transno, Payload::notice(session, transno));
    }

    /// During recovery, holds `frame` back until it may run: a replay until its turn in
    /// transno order, anything else until the recovery is over (a known client's first
    /// request that is not a replay says it has replayed everything).
    async fn recovery_gate(&self, session: &Session, frame: &[u8]) {
        let Ok(request) = protocol::decode::<Request>(frame) else {
            return; // `handle` refuses it
        };
        let recovery = &self.shared.recovery;
        match request.replay {
            Some(r) => {
                // Refused (too late) or not, `handle` sees whether it is its turn.
                let _ = recovery.turn(r.transno, session.client()).await;
            }
            None => {
                if recovery.expects(session.client()) {
                    recovery.client_done(session.client());
                    if !session.is_known() {
                        // Back, done, and holding nothing early: the journal may forget it.
                        self.shared.to_committer(CommitMsg::ForgetClient {
                            client: session.client(),
                            after: 0,
                        });
                    }
                }
                recovery.closed().await;
            }
        }
    }

    fn statfs(&self) -> StatFs {
        let stats = &self.shared.commit_stats;
        let (directories, files) = self.shared.namespace.counts();
        StatFs {
            inodes: directories + files,
            directories,
            files,
            last_committed: self.shared.engine.last_committed(),
            last_transno: self.shared.namespace.last_transno(),
            commits: stats.commits.load(Ordering::Relaxed),
            committed_transactions: stats.transactions.load(Ordering::Relaxed),
            max_transactions_per_commit: stats.max_batch_seen.load(Ordering::Relaxed),
            partitions: self.shared.partitions as u32,
            read_only: self.shared.namespace.is_read_only(),
            cos_conflicts: self.shared.cos_conflicts.load(Ordering::Relaxed),
        }
    }
}
