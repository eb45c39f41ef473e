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
use mds_proto::{
    self as protocol, Body, Cred, Errno, MAX_GROUPS, Op, Replay, Reply, Request, StatFs,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;
use tracing::{debug, error, warn};

mod handshake;

use super::admission::{Credentials, HandshakeSlot};
use super::conn::{ConnOutput, write_loop};
use super::{HeldReply, Partition, Payload, Waiting};
use crate::committer::CommitMsg;
use crate::namespace::{Caller, Exec, Journaling};
use crate::recovery::{Refusal, Turn};
use crate::session::{Answered, Begin, Session};
use crate::ticket::ReplayKey;
use handshake::{CONNECT, Handshaking};

/// Longest frame a connection may send before its handshake completes: CONNECT and
/// AUTHENTICATE are a few hundred bytes at most, and a connection nobody has authenticated
/// must not make the server hold a 64 KiB frame for it.
const MAX_HANDSHAKE_FRAME: usize = 1024;

/// Whether the frame at the head of `input` declares a length no handshake frame has.
fn handshake_frame_too_long(input: &[u8]) -> bool {
    input.len() >= 4
        && u32::from_be_bytes(input[..4].try_into().expect("4 bytes")) as usize
            > MAX_HANDSHAKE_FRAME
}

/// Who asks: the connection, its session, what its credentials may be, and when its
/// request's bytes were read.
#[derive(Clone, Copy)]
struct Asker<'a> {
    conn: &'a Arc<ConnOutput>,
    session: &'a Arc<Session>,
    credentials: &'a Credentials,
    received: quanta::Instant,
}

/// What [`Partition::check`] found of a request.
enum Checked {
    Valid,
    /// Refused with an answer; the connection goes on.
    Answered,
    /// Refused with EPROTO; the connection closes.
    Refused,
}

/// What [`Partition::admit`] found of a request.
enum Admitted<'a> {
    /// Execute it, with its recovery turn if it is a replay.
    Go(Option<Turn<'a>>),
    /// It was answered (joined, from its record, refused).
    Answered,
    /// A replay no honest client can send: the connection closes.
    Forged(&'static str),
}

/// Whether `op` makes an inode, whose number goes into its replay ticket.
fn creates(op: &Op) -> bool {
    matches!(op, Op::Create { .. } | Op::Mkdir { .. })
}

/// A namespace operation's request, its operation apart.
struct Executing {
    xid: u64,
    opcode: u8,
    /// A CREATE or MKDIR: the inode number it makes goes into its replay ticket.
    creates: bool,
    cred: Cred,
    replay: Option<Replay>,
}

/// How an executed mutation is to be answered.
struct Answering {
    xid: u64,
    opcode: u8,
    transno: u64,
    /// Another client's uncommitted change it built on (0: none).
    built_on: u64,
    ticket: u64,
    /// The client's first early mutation: its commit makes the journal know the client.
    first_early: bool,
    /// The transno whose commit makes the journal know the client.
    known_at: u64,
    /// Never answered on the spot: it may have been joined by a copy on a newer connection.
    through_engine: bool,
}

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
    /// The replay ticket of an early reply (0: none).
    ticket: u64,
}

impl Pending {
    fn reply(xid: u64, op: u8, transno: u64, result: Result<Body, Errno>) -> Pending {
        Pending {
            xid,
            op,
            transno,
            result,
            cos: false,
            ticket: 0,
        }
    }
}

/// A request was refused and the connection must close (an EPROTO reply is queued).
struct Refused;

impl Partition {
    /// An accepted socket, holding its handshake slot: with TLS on the port, its handshake
    /// first, then the connection is served over the TLS stream's halves; without, over the
    /// socket's own halves. One deadline covers the TLS handshake, CONNECT and its proof.
    pub(super) async fn accept(
        self: Rc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        slot: HandshakeSlot,
    ) {
        let _ = stream.set_nodelay(true);
        let limit = self.shared.limits.connect_deadline;
        let deadline = tokio::time::Instant::now() + limit;
        let local = stream.local_addr().unwrap_or(peer);
        let handshaking = Handshaking::new(peer, local, slot);
        let Some(acceptor) = self.shared.tls.clone() else {
            let (rd, wr) = stream.into_split();
            return self.serve(rd, wr, handshaking, deadline).await;
        };
        let handshake = tokio::select! {
            _ = self.shared.shutdown.cancelled() => return,
            r = tokio::time::timeout_at(deadline, acceptor.accept(stream)) => r,
        };
        match handshake {
            Ok(Ok(tls)) => {
                let (rd, wr) = tokio::io::split(tls);
                self.serve(rd, wr, handshaking, deadline).await;
            }
            Ok(Err(e)) => {
                warn!(partition = self.id, %peer, cause = %e, "closing connection: TLS handshake failed");
                self.metrics.tls.increment(1);
            }
            Err(_) => {
                warn!(partition = self.id, %peer, after = ?limit, "closing connection: no TLS handshake in time");
                metrics::counter!(crate::metrics::CONNECTIONS_TIMED_OUT, "reason" => "connect")
                    .increment(1);
            }
        }
    }

    async fn serve<R, W>(
        self: Rc<Self>,
        mut rd: R,
        wr: W,
        mut handshaking: Handshaking,
        connect_deadline: tokio::time::Instant,
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
        // Small until the handshake completes: a connection that never authenticates holds
        // little (`MAX_HANDSHAKE_FRAME` bounds what it may send before).
        let mut input = BytesMut::with_capacity(MAX_HANDSHAKE_FRAME);
        let mut session: Option<Arc<Session>> = None;
        let mut answered: Vec<(u8, Result<(), Errno>)> = Vec::new();
        // Frames already read but not executed: the output passed its high-water mark
        // midway through a read.
        let mut unexecuted = false;
        let ended = 'read: loop {
            conn.wait_for_space().await;
            if conn.is_closed() {
                break Ended::Normally;
            }
            if session.is_some() && self.shared.over_uncommitted_cap() {
                // The disk is behind the clients: wait for commits before executing more (a
                // handshake goes on: it executes nothing, and has its deadline to keep).
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
            if conn.owed() >= limits.output_high_water {
                if let Some(ended) = self.pause_for_output(&conn).await {
                    break ended;
                }
                continue;
            }
            if !unexecuted {
                // Silence is bounded: CONNECT must come soon, and a connection with nothing
                // in flight may not hold its slot forever.
                let (silence, why) = match &session {
                    None => (
                        connect_deadline.saturating_duration_since(tokio::time::Instant::now()),
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
                if conn.owed() >= limits.output_high_water
                    || (session.is_some() && self.shared.over_uncommitted_cap())
                {
                    // Checked per request, not per read: one read of small requests with
                    // large replies (READDIR pages) would otherwise buffer them all.
                    unexecuted = true;
                    break;
                }
                if session.is_none() && handshake_frame_too_long(&input) {
                    warn!(
                        partition = self.id,
                        conn = conn.id(),
                        "closing connection: a handshake frame longer than {MAX_HANDSHAKE_FRAME} bytes"
                    );
                    self.metrics.handshake.increment(1);
                    self.reply_now(&conn, 0, Err(Errno::EPROTO));
                    break 'read Ended::Normally;
                }
                let frame = match codec.decode(&mut input) {
                    Ok(Some(frame)) => frame,
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
                };
                let Some(current) = session.as_ref() else {
                    let shook = self.handshake(
                        &conn,
                        &mut session,
                        &mut handshaking,
                        &frame,
                        &mut answered,
                    );
                    if shook.is_err() {
                        break 'read Ended::Normally;
                    }
                    if session.is_some() {
                        // Authenticated: room for pipelined requests.
                        input.reserve(64 << 10);
                    }
                    continue;
                };
                let request: Request = match protocol::decode(&frame) {
                    Ok(r) => r,
                    Err(e) => {
                        warn!(partition = self.id, conn = conn.id(), cause = %e, "closing connection: malformed request");
                        self.metrics.malformed.increment(1);
                        self.reply_now(&conn, 0, Err(Errno::EPROTO));
                        break 'read Ended::Normally;
                    }
                };
                let asker = Asker {
                    conn: &conn,
                    session: current,
                    credentials: &handshaking.credentials,
                    received,
                };
                match self.check(&asker, &request, &mut answered) {
                    Checked::Valid => {}
                    Checked::Answered => continue,
                    Checked::Refused => break 'read Ended::Normally,
                }
                let turn = match self.admit(&asker, &request, &mut answered).await {
                    Admitted::Go(turn) => turn,
                    Admitted::Answered => continue,
                    Admitted::Forged(why) => {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            client = current.client(),
                            xid = request.xid,
                            "closing connection: forged replay: {why}"
                        );
                        self.metrics.forged_replays.increment(1);
                        self.reply_now(&conn, request.xid, Err(Errno::EPROTO));
                        break 'read Ended::Normally;
                    }
                };
                if self.handle(&asker, request, turn, &mut answered).is_err() {
                    break 'read Ended::Normally;
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
        if let Some(session) = &session {
            self.shared.recovery.disconnected(session.client());
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

    /// The client reads slower than it asks (or its replies wait for commits): executes
    /// nothing more for it until the owed output is below half the bound, and cuts it if its
    /// writer leaves unwritten bytes above that for long. Bytes held for a commit are the
    /// server's wait, not the client's: they pause it, but never cut it. `Some` ends the
    /// connection.
    async fn pause_for_output(&self, conn: &ConnOutput) -> Option<Ended> {
        let limits = self.shared.limits;
        self.metrics.paused_output.increment(1);
        conn.wake_writer();
        let room = limits.output_high_water / 2;
        loop {
            tokio::select! {
                biased;
                _ = self.shared.shutdown.cancelled() => return Some(Ended::Normally),
                _ = conn.replaced().cancelled() => return Some(Ended::Replaced),
                r = tokio::time::timeout(limits.output_stall, conn.wait_for_output_below(room)) => {
                    if r.is_ok() {
                        return None;
                    }
                    if conn.buffered() >= room {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            buffered = conn.buffered(),
                            stall = ?limits.output_stall,
                            "closing connection: client is not reading its replies"
                        );
                        self.metrics.slow_clients.increment(1);
                        return Some(Ended::SlowClient);
                    }
                }
            }
        }
    }
    /// Checks what every request must be before anything waits or executes: at most
    /// `MAX_GROUPS` supplementary groups (more closes the connection), and credentials this
    /// connection may carry (`--cred-check`; EPERM otherwise).
    fn check(
        &self,
        asker: &Asker<'_>,
        request: &Request,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Checked {
        let Asker {
            conn,
            session,
            credentials,
            ..
        } = *asker;
        let (xid, opcode) = (request.xid, request.op.opcode());
        let groups = request.cred.groups.len();
        let refusal = if groups > MAX_GROUPS {
            warn!(
                partition = self.id,
                conn = conn.id(),
                groups,
                "closing connection: too many supplementary groups"
            );
            self.metrics.malformed.increment(1);
            Errno::EPROTO
        } else if !credentials.admit(&request.cred) {
            // `--cred-check owner`: this connection may carry only its owner's credentials.
            debug!(
                partition = self.id,
                conn = conn.id(),
                uid = request.cred.uid,
                "refused: credentials other than the connection owner's"
            );
            self.metrics.credentials_refused.increment(1);
            Errno::EPERM
        } else {
            return Checked::Valid;
        };
        answered.push((opcode, Err(refusal)));
        session.note_replied(xid);
        self.reply_now(conn, xid, Err(refusal));
        if refusal == Errno::EPROTO {
            Checked::Refused
        } else {
            Checked::Answered
        }
    }

    /// What a request waits for before it executes. While the recovery window is open, a
    /// request that is not a replay waits until it closes (a known client's first such
    /// request says it has replayed everything). A replay is first looked up in its session —
    /// a copy in flight or executed already answers it — then waits for its turn in transno
    /// order (`Recovery::turn`); its session marks it pending meanwhile, so a copy resent on a
    /// newer connection joins it. A replay whose turn will not come is refused (its client
    /// counts it lost); one no honest client can send closes the connection.
    async fn admit(
        &self,
        asker: &Asker<'_>,
        request: &Request,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Admitted<'_> {
        let Asker { conn, session, .. } = *asker;
        let recovery = &self.shared.recovery;
        let Some(replay) = request.replay else {
            if recovery.is_open() {
                // What is answered so far leaves before this request waits.
                conn.wake_writer();
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
            return Admitted::Go(None);
        };
        if !request.op.is_mutation() {
            return Admitted::Forged("a replay of a request that changes nothing");
        }
        let (xid, opcode) = (request.xid, request.op.opcode());
        session.note_acked(request.acked_xid);
        if !self.begin_mutation(asker, xid, opcode, true, answered) {
            return Admitted::Answered;
        }
        let refused = |answered: &mut Vec<(u8, Result<(), Errno>)>| {
            // Too late (the window closed, or its transno was durable, skipped or taken by a
            // copy that did not execute), and it did not execute in this start: lost.
            session.abandon(xid);
            answered.push((opcode, Err(Errno::EINVAL)));
            self.reply_now(conn, xid, Err(Errno::EINVAL));
            Admitted::Answered
        };
        if !recovery.is_open() {
            return refused(answered);
        }
        conn.wake_writer();
        let mut buf = [0u8; 1024];
        let op = ReplayKey::encode_op(&request.op, &mut buf);
        match recovery.turn(session.client(), replay, &op).await {
            Ok(turn) => Admitted::Go(Some(turn)),
            Err(Refusal::TooLate) => refused(answered),
            Err(Refusal::Forged(why)) => {
                session.abandon(xid);
                Admitted::Forged(why)
            }
        }
    }

    /// Looks a mutation up in its session before it executes: `true` to execute it; `false`
    /// when it was answered — joined to a copy still waiting (its reply answers both),
    /// answered from its resend record (it executed already; with the ticket its first
    /// answer carried), or refused because the session keeps as many records as it may (not
    /// a `replay`, whose change its client was told of).
    fn begin_mutation(
        &self,
        asker: &Asker<'_>,
        xid: u64,
        opcode: u8,
        replay: bool,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> bool {
        let Asker { conn, session, .. } = *asker;
        let begun = if replay {
            session.begin_replay(xid)
        } else {
            session.begin(xid)
        };
        match begun {
            Begin::New => true,
            Begin::Joined => false,
            Begin::Answered(Answered {
                transno,
                body,
                ticket,
            }) => {
                // Executed already, its reply lost on the way (a replay cut off among them):
                // the same answer again, never a second execution.
                self.metrics.resent_answered.increment(1);
                answered.push((opcode, Ok(())));
                session.note_replied(xid);
                self.reply_unsafe(conn, xid, transno, Ok(body), ticket);
                false
            }
            Begin::Full => {
                // The client's watermark lags too far behind what it asked: nothing more
                // until it has acknowledged some replies.
                self.metrics.resend_full.increment(1);
                answered.push((opcode, Err(Errno::EBUSY)));
                session.note_replied(xid);
                self.reply_now(conn, xid, Err(Errno::EBUSY));
                false
            }
        }
    }

    /// Handles one request of a connection that has its session, checked and admitted.
    /// `Err` closes the connection (an EPROTO reply is queued). Immediate replies push their
    /// opcode and result to `answered`, so the caller records their latency with one clock
    /// read per batch of requests. `turn` is a replay's recovery turn: dropped unused, it
    /// skips its transno.
    fn handle(
        &self,
        asker: &Asker<'_>,
        request: Request,
        turn: Option<Turn<'_>>,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        let Asker {
            conn,
            session: current,
            received,
            ..
        } = *asker;
        let Request {
            xid,
            op,
            acked_xid,
            mut cred,
            replay,
        } = request;
        let opcode = op.opcode();
        let immediate = |result: Result<Body, Errno>,
                         answered: &mut Vec<(u8, Result<(), Errno>)>| {
            answered.push((opcode, result.as_ref().map(|_| ()).map_err(|e| *e)));
            current.note_replied(xid);
            self.reply_now(conn, xid, result);
        };
        self.shared.namespace.effective_cred(&mut cred);
        current.note_acked(acked_xid);
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
                Err(Refused)
            }
            Op::Ping => {
                immediate(Ok(Body::Pong), answered);
                Ok(())
            }
            Op::Statfs => {
                immediate(Ok(Body::StatFs(self.statfs())), answered);
                Ok(())
            }
            Op::Sync => {
                match current.begin(xid) {
                    Begin::New => {}
                    Begin::Full => {
                        self.metrics.resend_full.increment(1);
                        immediate(Err(Errno::EBUSY), answered);
                        return Ok(());
                    }
                    // A resend: the original's reply answers it.
                    Begin::Joined | Begin::Answered(_) => return Ok(()),
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
                Ok(())
            }
            op => {
                let request = Executing {
                    xid,
                    opcode,
                    creates: creates(&op),
                    cred,
                    replay,
                };
                self.execute(asker, request, op, turn, answered);
                Ok(())
            }
        }
    }

    /// A namespace operation: a mutation is first looked up in the session (a resend joins
    /// its original or is answered from its record; a replay whose turn did not come is
    /// answered from its record or refused), then executed; the answer leaves now, or waits
    /// in the reply engine for what it depends on.
    fn execute(
        &self,
        asker: &Asker<'_>,
        request: Executing,
        op: Op,
        turn: Option<Turn<'_>>,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) {
        let Asker {
            conn,
            session: current,
            ..
        } = *asker;
        let Executing {
            xid,
            opcode,
            creates,
            ref cred,
            replay,
        } = request;
        let mutation = op.is_mutation();
        // A replay with its turn was looked up in its session by `admit` already.
        let replayed = turn.is_some();
        if mutation && !replayed && !self.begin_mutation(asker, xid, opcode, false, answered) {
            return;
        }
        if replay.is_some() && !replayed {
            // `admit` answers every replay without a turn; nothing gets here.
            if mutation {
                current.abandon(xid);
            }
            answered.push((opcode, Err(Errno::EINVAL)));
            current.note_replied(xid);
            self.reply_now(conn, xid, Err(Errno::EINVAL));
            return;
        }
        if let Some(turn) = &turn
            && self.shared.namespace.last_transno() + 1 != turn.transno()
        {
            // Only replays take transnos while the window is open, each at its turn.
            error!(
                transno = turn.transno(),
                last = self.shared.namespace.last_transno(),
                "a replay's turn came out of order; stopping"
            );
            std::process::abort();
        }
        // After a journal failure nothing above `last_committed` will ever be durable, and
        // its clients were answered EIO: no read may show it, not even to the client that
        // made it (no client has identity 0), COS on or off. Such a read waits for a commit
        // that fails at once, and is answered the same way.
        let failed = self.shared.namespace.is_read_only();
        let engine = &self.shared.engine;
        // Early replies: the journal must know a client before it holds an unsafe reply, or
        // a crash would leave the server unaware of what it must wait for. The client's first
        // early mutation sends KnowClient just before its record (messages from one partition
        // keep their order), from inside `execute`, so only a mutation that executed makes
        // the client known; `first_early` tells the code below it was the first. Likewise
        // the session's secret goes to the journal before its first record.
        let first_early = std::cell::Cell::new(false);
        let known_at = std::cell::Cell::new(0);
        let send = |record: journal::TxRecord| {
            current.bind_once(|secret| {
                self.shared.to_committer(CommitMsg::BindSession {
                    client: current.client(),
                    secret: *secret.bytes(),
                })
            });
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
            cred,
            // Without commit-on-share nothing counts as uncommitted.
            last_committed: if self.shared.cos || failed {
                engine.last_committed()
            } else {
                u64::MAX
            },
            reuse_ino: turn
                .as_ref()
                .and(replay)
                .map(|r| r.ino)
                .filter(|&ino| ino != 0),
            journal: Some(Journaling {
                send: &send,
                client: current.client(),
                xid,
                acked_xid: current.acked_xid(),
            }),
        };
        // The ticket binds the operation as its request encoded it; made only for what can be
        // answered early.
        let mut buf = [0u8; 1024];
        let op_bytes = (self.shared.ack_early && mutation && !replayed)
            .then(|| ReplayKey::encode_op(&op, &mut buf));
        let exec = self.shared.namespace.execute(op, &caller);
        let Exec::Mutation {
            transno,
            body,
            built_on,
            ..
        } = exec
        else {
            let Exec::Now { result, wait } = exec else {
                unreachable!()
            };
            // A replay that no longer applies (what it built on was lost with a client that
            // did not come back) drops its turn here: its transno is skipped by an empty
            // record, never handed out again, and its client counts it lost.
            drop(turn);
            if mutation && !replayed {
                current.abandon(xid);
            }
            if replayed {
                // A copy of it resent on a newer connection may have joined it while it waited
                // for its turn: the answer goes through the reply engine, which releases it
                // to the session's connection of now (at once: what it waits for is durable).
                let until = wait.max(self.shared.engine.last_committed());
                let pending = Pending::reply(xid, opcode, 0, result);
                self.defer(conn, current, until, asker.received, pending);
            } else if wait == 0 {
                answered.push((opcode, result.as_ref().map(|_| ()).map_err(|e| *e)));
                current.note_replied(xid);
                self.reply_now(conn, xid, result);
            } else {
                // Built on another client's uncommitted change: the answer waits for that
                // change's commit, which is asked for now.
                self.cos_conflict(opcode, wait);
                self.metrics.cos_waiting.increment(1.0);
                let pending = Pending {
                    cos: true,
                    ..Pending::reply(xid, opcode, 0, result)
                };
                self.defer(conn, current, wait, asker.received, pending);
            }
            if mutation && self.shared.namespace.take_ceiling_request() {
                self.shared.to_committer(CommitMsg::RaiseCeilings);
            }
            return;
        };
        if let Some(turn) = turn {
            assert_eq!(turn.transno(), transno, "a replay takes its own transno");
            turn.executed();
            self.metrics.replayed.increment(1);
        }
        // Its record (with the resend record) is with the committer already; the session
        // keeps how it was answered for resends. A replay's answer carries no ticket: its
        // client keeps the original's, made for the original's xid.
        let ticket = op_bytes.map_or(0, |op| {
            self.ticket(current, xid, transno, creates, &body, &op)
        });
        current.remember(xid, transno, body.clone(), ticket);
        let answer = Answering {
            xid,
            opcode,
            transno,
            built_on,
            ticket,
            first_early: first_early.get(),
            known_at: known_at.get(),
            // As for a replay that failed: the reply leaves through the reply engine.
            through_engine: replayed,
        };
        self.answer_mutation(asker, answer, body, answered);
    }

    /// A mutation executed: its reply waits for its commit (`--ack commit`), or, early, for
    /// the commit that makes its client known and for what it built on, or leaves at once.
    fn answer_mutation(
        &self,
        asker: &Asker<'_>,
        answer: Answering,
        body: Body,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) {
        let Asker {
            conn,
            session: current,
            received,
            ..
        } = *asker;
        let Answering {
            xid,
            opcode,
            transno,
            built_on,
            ticket,
            first_early,
            known_at,
            through_engine,
        } = answer;
        let engine = &self.shared.engine;
        let reply = || Pending {
            ticket,
            ..Pending::reply(xid, opcode, transno, Ok(body.clone()))
        };
        if !self.shared.ack_early {
            self.defer(conn, current, transno, received, reply());
            if built_on > 0 {
                // Its own commit covers what it built on; start it now.
                self.cos_conflict(opcode, transno);
            }
            return;
        }
        // Early. The client's first mutation is answered after its commit, which carries the
        // client's record (sent just before the mutation's), and that commit starts now.
        if first_early {
            let until = transno.max(built_on);
            self.defer(conn, current, until, received, reply());
            self.shared.to_committer(CommitMsg::Flush(until));
            if built_on > 0 {
                self.metrics.cos_conflict(opcode);
                self.shared.cos_conflicts.fetch_add(1, Ordering::Relaxed);
            }
            // Its commit settles the client (forgotten if nothing follows).
            self.defer_notice(current, transno);
            return;
        }
        // Early, but not before the journal knows the client (the commit of its first early
        // mutation, which may still be in flight when a pipelined second one executes: a
        // crash before it would find no record of a client holding unsafe replies), nor
        // before what it built on is durable.
        let unknown_until = Some(known_at)
            .filter(|&t| t > engine.last_committed())
            .unwrap_or(0);
        if built_on > 0 || unknown_until > 0 || through_engine {
            if built_on > 0 {
                self.cos_conflict(opcode, built_on);
            }
            let until = built_on.max(unknown_until).max(engine.last_committed());
            self.defer(conn, current, until, received, reply());
        } else {
            current.abandon(xid);
            answered.push((opcode, Ok(())));
            self.reply_unsafe(conn, xid, transno, Ok(body), ticket);
        }
        // Its commit will be announced to the client by a notice.
        self.defer_notice(current, transno);
    }

    /// The replay ticket of a successful mutation's reply (`op` as its request encoded it):
    /// what its replay must carry after a restart. The inode number is the one a CREATE or
    /// MKDIR made, as the client library records it.
    fn ticket(
        &self,
        session: &Session,
        xid: u64,
        transno: u64,
        creates: bool,
        body: &Body,
        op: &[u8],
    ) -> u64 {
        let ino = match (creates, body) {
            (true, Body::Attr(attr)) => attr.ino,
            _ => 0,
        };
        self.shared
            .replay_key
            .ticket(session.client(), xid, transno, ino, op)
    }

    /// A request built on another client's uncommitted change: count it and ask for the
    /// commit of everything up to `upto` now, without blocking.
    fn cos_conflict(&self, opcode: u8, upto: u64) {
        self.metrics.cos_conflict(opcode);
        self.shared.cos_conflicts.fetch_add(1, Ordering::Relaxed);
        self.shared.to_committer(CommitMsg::Flush(upto));
    }

    /// Queues a reply until `until` is durable. A read's or an error's, held for another
    /// client's commit, counts against its connection's output bound meanwhile (a page of
    /// READDIR is tens of kilobytes; a mutation's reply is small and its count is bounded
    /// by `max_inflight_per_conn` already).
    fn defer(
        &self,
        conn: &Arc<ConnOutput>,
        session: &Arc<Session>,
        until: u64,
        received: quanta::Instant,
        reply: Pending,
    ) {
        conn.request_started();
        let held_bytes = if reply.cos {
            reply_size_hint(&reply.result)
        } else {
            0
        };
        if held_bytes > 0 {
            conn.hold(held_bytes);
        }
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
                    ticket: reply.ticket,
                    held_bytes,
                }),
            },
        );
    }

    /// Queues an immediate reply on `conn`; the read loop wakes its writer once per read.
    fn reply_now(&self, conn: &ConnOutput, xid: u64, result: Result<Body, Errno>) {
        self.reply_unsafe(conn, xid, 0, result, 0);
    }

    /// Queues an immediate reply that reports `transno`, possibly not durable yet (an early
    /// reply: `transno > last_committed` tells the client it is unsafe), with its ticket.
    fn reply_unsafe(
        &self,
        conn: &ConnOutput,
        xid: u64,
        transno: u64,
        result: Result<Body, Errno>,
        ticket: u64,
    ) {
        conn.append(&Reply {
            xid,
            transno,
            last_committed: self.shared.engine.last_committed(),
            result,
            ticket,
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

/// About how many bytes `result` takes as a reply on the wire, for the output bound of a
/// reply held for a commit: a READDIR page by its names, anything else as a small reply.
fn reply_size_hint(result: &Result<Body, Errno>) -> usize {
    match result {
        Ok(Body::Entries { entries, next }) => {
            // Per entry a name with its length, an inode number and a kind.
            let names: usize = entries.iter().map(|e| e.name.len() + 12).sum();
            names + next.as_ref().map_or(0, String::len) + 32
        }
        _ => 64,
    }
}
