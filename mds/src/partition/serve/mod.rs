//! One connection on its partition: the TLS handshake if the port has one, the read loop, the
//! CONNECT handshake (`serve/handshake.rs`, with the shared-key challenge when the server has a
//! key), and each request's answer from dispatch (`dispatch/mod.rs`) delivered — appended at
//! once, or queued in the reply queue until what it depends on is durable. What to answer,
//! and when, is dispatch's; what this file decides is how much it reads and when it closes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use mds_proto::{self as protocol, Body, Errno, MAX_GROUPS, Reply, Request};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::{debug, warn};

mod handshake;

use super::Partition;
use super::admission::{Credentials, HandshakeSlot};
use crate::committer::CommitMsg;
use crate::dispatch::{Answer, Closing, Deliver, dispatch};
use crate::output::{ConnOutput, WriteHalf, write_loop};
use crate::queue::{HeldReply, Queued, Response};
use crate::session::Session;
use handshake::{Handshaking, Refused};

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

/// One read of `rd` into `input`. An authenticated connection's buffer is kept roomy for
/// pipelined requests ([`protocol::make_read_room`]); before authentication it stays as
/// small as [`MAX_HANDSHAKE_FRAME`] keeps it.
async fn read_into<R: AsyncRead + Unpin>(
    rd: &mut R,
    input: &mut BytesMut,
    authenticated: bool,
) -> std::io::Result<usize> {
    if authenticated {
        protocol::make_read_room(input);
    }
    rd.read_buf(input).await
}

/// The opcode and result of each reply appended at once during one read, so their latency is
/// recorded with one clock read per read.
type AnsweredAtOnce = Vec<(u8, Result<(), Errno>)>;

/// What [`Partition::check`] found of a request.
enum Checked {
    Valid,
    /// Refused with an answer; the connection goes on.
    RefusedWithAnswer,
    /// Refused with EPROTO; the connection closes.
    Refused,
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

/// The ends a connection's reads wait for besides its socket, the server's shutdown and the
/// connection's replacement by a newer one of its session: one future for the connection's
/// life, on the token both cancel ([`ConnOutput::ends`]), registered with it once. A future
/// made for each read registered and unregistered itself with each token every time, under
/// the token's lock: with the socket polled first, 22,896 -> 21,795 server instructions a
/// create at one request in flight (docs/benchmarks/create-path.md, "The ends a read waits for, made
/// once"); and each poll of a registered one still takes that lock, so there is one, not
/// one a token.
struct Ending {
    either: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Ending {
    fn new(conn: &ConnOutput) -> Ending {
        Ending {
            either: Box::pin(conn.ends().clone().cancelled_owned()),
        }
    }

    /// Which end came: the shutdown, else the replacement.
    fn ended(shutdown: &CancellationToken) -> Ended {
        if shutdown.is_cancelled() {
            Ended::Normally
        } else {
            Ended::Replaced
        }
    }
}

/// One connection's read side: what it has read and not executed, and who it is so far.
struct Reader {
    /// What was read and not executed yet: whole frames, then perhaps the start of one.
    input: BytesMut,
    /// Set once the handshake completes.
    session: Option<Arc<Session>>,
    handshaking: Handshaking,
    answered: AnsweredAtOnce,
    /// Frames already read but not executed: the output passed its high-water mark midway
    /// through a read, or the next one is a mutation and the server's uncommitted work is at
    /// its cap.
    unexecuted: bool,
    /// The next frame is a mutation held back by the uncommitted-work cap: the connection
    /// waits for commits. Only a mutation is held so — a read adds nothing the disk must
    /// catch up with — so a connection that only reads is never paused by another's writes.
    awaiting_commits: bool,
    /// When CONNECT (and its proof) must have come by.
    connect_deadline: tokio::time::Instant,
}

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
        let limit = self.shared.net.limits.connect_deadline;
        let deadline = tokio::time::Instant::now() + limit;
        let local = stream.local_addr().unwrap_or(peer);
        let handshaking = Handshaking::new(peer, local, slot);
        let Some(acceptor) = self.shared.net.tls.clone() else {
            let (rd, wr) = stream.into_split();
            return self.serve(rd, wr, handshaking, deadline).await;
        };
        let handshake = tokio::select! {
            () = self.shared.shutdown.cancelled() => return,
            () = handshaking.evicted() => {
                debug!(partition = self.id, %peer, "closing connection: its handshake slot went to a newer one");
                return;
            }
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

    /// Serves one connection from its first byte to its close: the writer task, the read
    /// loop, then what closing owes the client's session.
    async fn serve<R, W>(
        self: Rc<Self>,
        mut rd: R,
        wr: W,
        handshaking: Handshaking,
        connect_deadline: tokio::time::Instant,
    ) where
        R: AsyncRead + Unpin,
        W: WriteHalf + 'static,
    {
        let conn = Arc::new(ConnOutput::within(
            self.shared.net.limits.max_inflight_per_conn,
            &self.shared.shutdown,
        ));
        self.metrics.connections.increment(1.0);
        self.metrics.accepted.increment(1);
        let writer =
            tokio::task::spawn_local(write_loop(wr, conn.clone(), self.shared.cut.clone()));
        let mut reader = Reader {
            // Small until the handshake completes: a connection that never authenticates
            // holds little (`MAX_HANDSHAKE_FRAME` bounds what it may send before).
            input: BytesMut::with_capacity(MAX_HANDSHAKE_FRAME),
            session: None,
            handshaking,
            answered: Vec::new(),
            unexecuted: false,
            awaiting_commits: false,
            connect_deadline,
        };
        let ended = self.read_loop(&mut rd, &conn, &mut reader).await;
        if !self.shared.shutdown.is_cancelled() {
            reader.handshaking.count_if_unproved(self.id, conn.id());
        }
        self.close(&conn, writer, reader.session.as_ref(), ended)
            .await;
        self.metrics.connections.decrement(1.0);
    }

    /// Reads and executes until the connection ends, pausing while its client owes too much
    /// output or the server's uncommitted work is at its cap.
    async fn read_loop<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        conn: &Arc<ConnOutput>,
        reader: &mut Reader,
    ) -> Ended {
        let limits = self.shared.net.limits;
        let mut ending = Ending::new(conn);
        loop {
            conn.wait_for_space().await;
            if conn.is_closed() {
                return Ended::Normally;
            }
            if reader.awaiting_commits {
                if !self.shared.core.over_uncommitted_cap() {
                    reader.awaiting_commits = false;
                    continue;
                }
                // The disk is behind the clients and this connection's next request is a
                // mutation: wait for commits before executing it.
                self.metrics.paused_uncommitted.increment(1);
                let progress = self.shared.progress.notified();
                if self.shared.core.over_uncommitted_cap() {
                    tokio::select! {
                        biased;
                        () = self.shared.cut.cancelled() => return Ended::Normally,
                        () = progress => {}
                        // A drain notifies; this only bounds a missed wake.
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                continue;
            }
            if conn.owed() >= limits.output_high_water {
                if let Some(ended) = self.pause_for_output(conn, &mut ending).await {
                    return ended;
                }
                continue;
            }
            if !reader.unexecuted
                && let Some(ended) = self.read_some(rd, conn, reader, &mut ending).await
            {
                return ended;
            }
            reader.unexecuted = false;
            let received = quanta::Instant::now();
            if let Some(ended) = self.execute_read(conn, reader, received).await {
                return ended;
            }
            let replied = quanta::Instant::now();
            for (op, result) in reader.answered.drain(..) {
                self.metrics
                    .request(op as usize, result, replied - received);
            }
            self.drain_if_woken();
            if conn.buffered() > 0 {
                conn.send_or_wake();
            }
        }
    }

    /// One read of the socket into the reader's input; `Some` ends the connection (closed,
    /// shutdown, replaced, or silent past its deadline).
    async fn read_some<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        conn: &Arc<ConnOutput>,
        reader: &mut Reader,
        ending: &mut Ending,
    ) -> Option<Ended> {
        // Silence is bounded: CONNECT must come soon, and a connection with nothing in
        // flight may not hold its slot forever.
        let (silence, why) = match &reader.session {
            None => (
                reader
                    .connect_deadline
                    .saturating_duration_since(tokio::time::Instant::now()),
                "connect",
            ),
            Some(_) => (self.shared.net.limits.idle_timeout, "idle"),
        };
        let silent_may_close = reader.session.is_none() || conn.inflight() == 0;
        // The socket first: a read that is ready returns without polling the ends (each
        // poll takes its token's lock), which are polled only while the read waits. A
        // shutdown or replacement that came meanwhile still wins over what was read.
        let read = tokio::select! {
            biased;
            r = read_into(rd, &mut reader.input, reader.session.is_some()) => {
                // One token for both ends (each look takes its lock).
                if conn.ends().is_cancelled() {
                    return Some(Ending::ended(&self.shared.shutdown));
                }
                r
            }
            () = &mut ending.either => return Some(Ending::ended(&self.shared.shutdown)),
            () = reader.handshaking.evicted(), if reader.session.is_none() => {
                // A full partition gave its slot to a newer connection: told as a full
                // server tells it, EBUSY under xid 0, then closed.
                debug!(partition = self.id, conn = conn.id(), "closing connection: its handshake slot went to a newer one");
                self.reply_now(conn, 0, Err(Errno::EBUSY));
                return Some(Ended::Normally);
            }
            () = tokio::time::sleep(silence), if silent_may_close => {
                warn!(partition = self.id, conn = conn.id(), after = ?silence, "closing connection: {}", if why == "connect" { "no CONNECT in time" } else { "idle" });
                metrics::counter!(crate::metrics::CONNECTIONS_TIMED_OUT, "reason" => why).increment(1);
                return Some(Ended::Normally);
            }
        };
        match read {
            Ok(0) | Err(_) => Some(Ended::Normally),
            Ok(_) => None,
        }
    }

    /// Executes the whole frames read so far, each answered or queued before the next is
    /// decoded; stops early (leaving the rest for later) when the output or the uncommitted
    /// work passes its bound. `Some` ends the connection.
    async fn execute_read(
        &self,
        conn: &Arc<ConnOutput>,
        reader: &mut Reader,
        received: quanta::Instant,
    ) -> Option<Ended> {
        let limits = self.shared.net.limits;
        loop {
            if conn.owed() >= limits.output_high_water {
                // Checked per request, not per read: one read of small requests with large
                // replies (READDIR pages) would otherwise buffer them all.
                reader.unexecuted = true;
                return None;
            }
            if reader.session.is_none() && handshake_frame_too_long(&reader.input) {
                warn!(
                    partition = self.id,
                    conn = conn.id(),
                    "closing connection: a handshake frame longer than {MAX_HANDSHAKE_FRAME} bytes"
                );
                self.metrics.handshake.increment(1);
                self.reply_now(conn, 0, Err(Errno::EPROTO));
                return Some(Ended::Normally);
            }
            // Each frame read where it lies and dropped once decoded: split off as a
            // `BytesMut` of its own (the codec's way), a frame cost a reference count, an
            // advance and a drop (~370 instructions a frame in the client, counted).
            let (frame, used) = match protocol::split_frame(&reader.input) {
                Ok(Some(found)) => found,
                Ok(None) => return None,
                Err(e) => {
                    // The stream cannot be resynced.
                    debug!(partition = self.id, conn = conn.id(), cause = %e, "oversized frame");
                    warn!(
                        partition = self.id,
                        conn = conn.id(),
                        "closing connection: oversized frame"
                    );
                    self.metrics.oversized.increment(1);
                    self.reply_now(conn, 0, Err(Errno::EPROTO));
                    return Some(Ended::Normally);
                }
            };
            let Some(session) = reader.session.as_ref() else {
                let shook = self.handshake(
                    conn,
                    &mut reader.session,
                    &mut reader.handshaking,
                    frame,
                    &mut reader.answered,
                );
                reader.input.advance(used);
                if shook.is_err() {
                    return Some(Ended::Normally);
                }
                if reader.session.is_some() {
                    // Authenticated: room for pipelined requests.
                    reader.input.reserve(protocol::READ_CHUNK);
                }
                continue;
            };
            let decoded = protocol::decode_request(frame);
            if decoded.as_ref().is_ok_and(|r| r.op.is_mutation())
                && self.shared.core.over_uncommitted_cap()
            {
                // Left in the input, decoded again once commits made room: a handshake, a
                // read, and a mutation that comes before the cap was reached go on.
                reader.unexecuted = true;
                reader.awaiting_commits = true;
                return None;
            }
            reader.input.advance(used);
            let request: Request = match decoded {
                Ok(r) => r,
                Err(e) => {
                    warn!(partition = self.id, conn = conn.id(), cause = %e, "closing connection: malformed request");
                    self.metrics.malformed.increment(1);
                    self.reply_now(conn, 0, Err(Errno::EPROTO));
                    return Some(Ended::Normally);
                }
            };
            let credentials = &reader.handshaking.credentials;
            match self.check(conn, session, credentials, &request, &mut reader.answered) {
                Checked::Valid => {}
                Checked::RefusedWithAnswer => continue,
                Checked::Refused => return Some(Ended::Normally),
            }
            if self.shared.core.recovery.is_open()
                || matches!(request.op, protocol::Op::ShardMapWait { .. })
            {
                // The request may wait for its turn or for the window, or (a long-poll of
                // the shard map) for news: what is answered so far leaves first.
                conn.wake_writer();
            }
            let origin = reader.handshaking.origin;
            let answer = dispatch(&self.shared.core, &self.metrics, session, request, origin).await;
            let delivered = self.deliver(conn, session, received, answer, &mut reader.answered);
            if delivered.is_err() {
                return Some(Ended::Normally);
            }
        }
    }

    /// Puts dispatch's answer where it goes: appended now, or queued until its commit (then
    /// counted in flight on this connection until it leaves), and the commit notice owed for
    /// an early reply queued after it. `Err`: the connection closes.
    fn deliver(
        &self,
        conn: &Arc<ConnOutput>,
        session: &Arc<Session>,
        received: quanta::Instant,
        answer: Answer,
        answered: &mut AnsweredAtOnce,
    ) -> Result<(), Refused> {
        let Answer { deliver, notice } = answer;
        let delivered = match deliver {
            Deliver::Now(response) => {
                answered.push((response.op, outcome(&response.result)));
                self.append(conn, response);
                Ok(())
            }
            Deliver::AtCommit {
                until,
                response,
                cos,
            } => {
                // A read's or an error's, held for another client's commit, counts against
                // its connection's output bound meanwhile (a page of READDIR is tens of
                // kilobytes; a mutation's reply is small and its count is bounded by
                // `max_inflight_per_conn` already).
                let held_bytes = if cos { response.size_hint() } else { 0 };
                if cos {
                    self.metrics.cos_waiting.increment(1.0);
                }
                let held = HeldReply {
                    session: session.clone(),
                    inflight: conn.start(held_bytes),
                    response,
                    received,
                    cos,
                };
                self.shared
                    .core
                    .replies
                    .push(self.id, until, Queued::Reply(held));
                Ok(())
            }
            Deliver::Locked {
                xid,
                ino,
                wait,
                granted,
            } => {
                // This connection's read loop cancels its waits when it ends, which it has
                // not yet: the wait is this connection's.
                self.shared.core.locks.bind_conn(ino, wait, conn.id());
                self.answer_when_granted(conn, session, (xid, ino), granted);
                Ok(())
            }
            Deliver::Joined => Ok(()),
            Deliver::Close { response, why } => {
                let client = session.client();
                match why {
                    Closing::Handshake(what) => {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            "closing connection: second {what}"
                        );
                        self.metrics.handshake.increment(1);
                    }
                    Closing::Forged(why) => {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            client,
                            xid = response.xid,
                            "closing connection: forged replay: {why}"
                        );
                        self.metrics.forged_replays.increment(1);
                    }
                    Closing::XidReused => {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            client,
                            xid = response.xid,
                            op = response.op,
                            "closing connection: a request under the xid of another the \
                             session still holds (not a resend: another operation)"
                        );
                        self.metrics.xid_reused.increment(1);
                    }
                }
                answered.push((response.op, outcome(&response.result)));
                self.append(conn, response);
                Err(Refused)
            }
        };
        if let Some(transno) = notice {
            // One notice per connection per drain, whatever it covers.
            self.metrics.unsafe_replies.increment(1.0);
            let notice = Queued::Notice {
                session: session.clone(),
                transno,
            };
            self.shared.core.replies.push(self.id, transno, notice);
        }
        delivered
    }

    /// The read loop ended: cut at once, or let what is pending leave and then close; and the
    /// client's session told the connection is gone.
    async fn close(
        &self,
        conn: &Arc<ConnOutput>,
        writer: tokio::task::JoinHandle<()>,
        session: Option<&Arc<Session>>,
        ended: Ended,
    ) {
        // Its lock waits are given up: their answers would go nowhere, and a client that
        // reconnects asks again.
        self.shared.core.locks.cancel_conn(conn.id());
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
                conn.wait_until_idle(|| session.is_some_and(|s| s.owes_replies_to(conn)))
                    .await;
                conn.close();
                let _ = writer.await;
            }
        }
        let Some(session) = session else {
            return;
        };
        let core = &self.shared.core;
        core.recovery.disconnected(session.client());
        if core.sessions.detach(session, conn) {
            // The client left. Once what it was told early is durable the journal may forget
            // it: now, if that is already so, or when the last notice's release settles it.
            let durable = core.replies.last_committed();
            session.settle(durable, |after| {
                core.to_committer(CommitMsg::ForgetClient {
                    client: session.client(),
                    after,
                });
            });
            core.forget_if_idle(session.client());
        }
    }

    /// The client reads slower than it asks (or its replies wait for commits): executes
    /// nothing more for it until the owed output is below half the bound, and cuts it if its
    /// writer leaves unwritten bytes above that for long. Bytes held for a commit are the
    /// server's wait, not the client's: they pause it, but never cut it. `Some` ends the
    /// connection.
    async fn pause_for_output(&self, conn: &ConnOutput, ending: &mut Ending) -> Option<Ended> {
        let limits = self.shared.net.limits;
        self.metrics.paused_output.increment(1);
        conn.wake_writer();
        let room = limits.output_high_water / 2;
        loop {
            tokio::select! {
                biased;
                () = &mut ending.either => return Some(Ending::ended(&self.shared.shutdown)),
                r = tokio::time::timeout(limits.output_stall, conn.wait_for_output_below(room)) => {
                    if r.is_ok() {
                        return None;
                    }
                    if conn.unwritten() >= room {
                        warn!(
                            partition = self.id,
                            conn = conn.id(),
                            unwritten = conn.unwritten(),
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
        conn: &ConnOutput,
        session: &Session,
        credentials: &Credentials,
        request: &Request,
        answered: &mut AnsweredAtOnce,
    ) -> Checked {
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
            Checked::RefusedWithAnswer
        }
    }

    /// Queues an immediate reply on `conn`; the read loop wakes its writer once per read.
    /// A queued SETLK of `ino`: its answer leaves when the lock is granted or refused, from a task of
    /// its own, so the connection's later requests go on meanwhile. A wait given up (its
    /// connection ended, its client's session too) answers EINTR if anyone still reads.
    fn answer_when_granted(
        &self,
        conn: &Arc<ConnOutput>,
        session: &Arc<Session>,
        (xid, ino): (u64, u64),
        granted: crate::dispatch::Granted,
    ) {
        let (conn, session) = (conn.clone(), session.clone());
        let replies = self.shared.core.replies.clone();
        let shared = self.shared.clone();
        let queued = std::time::Instant::now();
        tokio::spawn(async move {
            let result = granted.0.await.unwrap_or(Err(Errno::EINTR));
            metrics::histogram!(crate::metrics::FILE_LOCK_WAIT)
                .record(queued.elapsed().as_secs_f64());
            if conn.is_closed() {
                return;
            }
            session.note_replied(xid);
            let reply = Reply {
                xid,
                transno: 0,
                last_committed: replies.last_committed(),
                // The attributes as the grant finds them: after the last holder's changes.
                result: result.map(|()| crate::dispatch::locks::granted_attr(&shared.core, ino)),
                ticket: 0,
            };
            conn.append(&reply);
            conn.send_or_wake();
        });
    }

    fn reply_now(&self, conn: &ConnOutput, xid: u64, result: Result<Body, Errno>) {
        self.append(conn, Response::new(xid, 0, 0, result));
    }

    /// Appends `response` to `conn` now, with the `last_committed` of now. One whose transno
    /// is above it is an early reply: the client learns from that it is not durable yet.
    fn append(&self, conn: &ConnOutput, response: Response) {
        let reply = Reply {
            xid: response.xid,
            transno: response.transno,
            last_committed: self.shared.core.replies.last_committed(),
            result: response.result,
            ticket: response.ticket,
        };
        conn.append_with(&reply, response.encoded.as_deref());
    }
}

/// A result as request metrics count it.
fn outcome(result: &Result<Body, Errno>) -> Result<(), Errno> {
    result.as_ref().map(|_| ()).map_err(|e| *e)
}
