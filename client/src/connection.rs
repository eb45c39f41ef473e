//! One connection's state shared by its callers and its two tasks: the outbox callers encode
//! their requests into, the writer task that sends it, the reply slots callers wait in, and
//! the reader task that fills them by xid and takes in the notices (xid 0) the server sends
//! unasked. [`crate::Client`] is the handle callers hold on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use mds_proto::{
    self as protocol, Body, Cred, Errno, Op, Replay, Reply, RequestRef, encode_request_frame,
};

use crate::error::{ClientError, Result};
use crate::reply_slots::{Delivery, ReplySlots, ReplyWait};
use crate::session::Session;

/// What one connection's callers and its two tasks share.
pub(crate) struct Connection {
    /// Encoded requests not yet written.
    outbox: parking_lot::Mutex<BytesMut>,
    /// Wakes the writer.
    wake: Notify,
    /// Replies handed to their callers since the writer last looked: callers woken, whose
    /// next requests may be about to be appended.
    delivered: AtomicUsize,
    /// Requests appended to `outbox` since the writer last looked: as many as `delivered`
    /// means every caller the burst woke has answered it already (see [`defer_write`]).
    appended: AtomicUsize,
    /// Where each request in flight waits for its reply.
    waiting: ReplySlots,
    session: Arc<Session>,
    /// The highest `last_committed` any reply carried.
    last_committed: AtomicU64,
    /// The CONNECT reply has been taken in by the session.
    handshaken: AtomicBool,
    closed: AtomicBool,
    /// Why the server closed the connection, if it said (EBUSY: it is full).
    refused: parking_lot::Mutex<Option<Errno>>,
}

impl Connection {
    /// A connection of `session`'s, nothing sent yet.
    pub(crate) fn new(session: Arc<Session>) -> Connection {
        Connection {
            outbox: parking_lot::Mutex::new(BytesMut::with_capacity(16 << 10)),
            wake: Notify::new(),
            delivered: AtomicUsize::new(0),
            appended: AtomicUsize::new(0),
            waiting: ReplySlots::default(),
            session,
            last_committed: AtomicU64::new(0),
            handshaken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            refused: parking_lot::Mutex::new(None),
        }
    }

    /// The session this connection belongs to.
    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The highest `last_committed` any reply carried.
    pub(crate) fn last_committed(&self) -> u64 {
        self.last_committed.load(Ordering::Relaxed)
    }

    /// Why the server closed the connection, if it said.
    pub(crate) fn refusal(&self) -> Option<Errno> {
        *self.refused.lock()
    }

    /// The session has taken in the CONNECT reply: from now on the replies' `last_committed`
    /// judges the unsafe requests it keeps.
    pub(crate) fn handshake_done(&self) {
        self.handshaken.store(true, Ordering::Release);
    }

    /// The error for a request the closed connection will never answer.
    pub(crate) fn gone(&self) -> ClientError {
        match *self.refused.lock() {
            Some(errno) => ClientError::Errno(errno),
            None => ClientError::Disconnected,
        }
    }

    /// Registers `xid`'s reply slot and appends its request to the outbox: what a send does
    /// before it waits. `Err` if the connection is closed already.
    pub(crate) fn enqueue(
        &self,
        xid: u64,
        acked_xid: u64,
        op: &Op,
        cred: &Cred,
        replay: Option<Replay>,
    ) -> Result<ReplyWait<'_>> {
        self.waiting.open(xid);
        if self.closed.load(Ordering::SeqCst) {
            self.waiting.cancel(xid);
            return Err(self.gone());
        }
        let request = RequestRef {
            xid,
            op,
            acked_xid,
            cred,
            replay,
        };
        encode_request_frame(&request, &mut self.outbox.lock());
        self.appended.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        Ok(self.waiting.wait(xid))
    }
}

/// The connection's reader and writer tasks, aborted when the last [`crate::Client`] clone
/// (which holds them) is dropped.
pub(crate) struct Tasks {
    reader: tokio::task::AbortHandle,
    writer: tokio::task::AbortHandle,
}

impl Tasks {
    /// Starts the writer on `wr` and the reader on `rd`, serving `connection`.
    pub(crate) fn spawn<R, W>(connection: &Arc<Connection>, rd: R, wr: W) -> Tasks
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let writer = tokio::spawn(write_outbox(connection.clone(), wr));
        let reader = tokio::spawn(read_replies(connection.clone(), rd));
        Tasks {
            reader: reader.abort_handle(),
            writer: writer.abort_handle(),
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// The writer task: each time it is woken, sends everything the outbox holds in one write,
/// until a write fails.
async fn write_outbox<W>(inner: Arc<Connection>, mut wr: W)
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let mut spare = BytesMut::with_capacity(16 << 10);
    loop {
        inner.wake.notified().await;
        let delivered = inner.delivered.swap(0, Ordering::Relaxed);
        let appended = inner.appended.swap(0, Ordering::Relaxed);
        if defer_write(delivered, appended, inner.waiting.len()) {
            tokio::task::yield_now().await;
        }
        std::mem::swap(&mut *inner.outbox.lock(), &mut spare);
        // The flush is free on a socket; a TLS stream may hold the tail of a
        // record until it.
        if !spare.is_empty() && (wr.write_all(&spare).await.is_err() || wr.flush().await.is_err()) {
            break;
        }
        spare.clear();
    }
}

/// The reader task: hands every reply read to its caller, until the stream ends or says
/// something this client cannot read; then closes the connection.
async fn read_replies<R>(inner: Arc<Connection>, mut rd: R)
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let mut input = BytesMut::new();
    'reading: loop {
        protocol::make_read_room(&mut input);
        match rd.read_buf(&mut input).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // Every whole frame of the read, decoded where it lies; dropped together.
        let mut at = 0;
        loop {
            match protocol::split_frame(&input[at..]) {
                Ok(Some((payload, used))) => {
                    at += used;
                    if !take_reply(&inner, payload) {
                        break 'reading;
                    }
                }
                Ok(None) => break,
                Err(_) => break 'reading,
            }
        }
        if at == input.len() {
            input.clear();
        } else {
            input.advance(at);
        }
    }
    inner.closed.store(true, Ordering::SeqCst);
    // Every caller still waiting wakes to `Disconnected`.
    inner.waiting.close();
}

/// Whether the writer, woken by an append, should let the runtime run what else is ready
/// before it writes, so that requests about to be appended leave in the same write.
///
/// Callers woken together (a burst of replies wakes one per reply) each append and notify;
/// woken from a task, the writer would run next on tokio's LIFO slot and send each request
/// alone: one `sendto` — the whole loopback TCP path — per request. A yield lets the callers
/// already runnable append first, so one write carries them all. But tokio runs a yielded
/// task only after everything else ready and a poll of its driver: on a runtime serving many
/// connections, after every other connection's burst too. loadgen's lanes answer a burst in
/// one task's poll, so their requests were all appended before the writer ran, and each
/// connection's requests still waited for every connection's replies to be read and answered
/// — on loadgen's core ~0.6 ms at 64 x 16, while the server's core idled for want of them
/// (docs/BENCHMARKS.md). So after a burst (`delivered` replies since the last write) the
/// writer waits only while fewer requests than replies have been appended: callers the burst
/// woke are still to come. With no reply since the last write (requests made on their own),
/// it waits while other requests are outstanding, as their replies wake callers at any
/// moment; with one request in flight nobody is coming, and the yield would only delay it (a
/// poll of the runtime's driver: loadgen at 1 x 1 took 27 -> 40 µs of CPU per request with an
/// unconditional yield).
fn defer_write(delivered: usize, appended: usize, outstanding: usize) -> bool {
    if delivered > 0 {
        appended < delivered
    } else {
        outstanding > 1
    }
}

/// Hands one reply frame's payload to the request waiting for it (or takes in a notice).
/// `false`: the connection is done (a refusal, or bytes this client cannot read).
fn take_reply(inner: &Connection, payload: &[u8]) -> bool {
    let reply = match protocol::decode_reply(payload) {
        Ok(reply) => reply,
        // A server of another protocol version refuses this one's CONNECT in
        // the layout every version reads.
        Err(_) => match protocol::decode_version_refusal(payload) {
            Some((xid, errno)) => Reply::new(xid, 0, 0, Err(errno)),
            None => return false,
        },
    };
    inner
        .last_committed
        .fetch_max(reply.last_committed, Ordering::Relaxed);
    // Until the handshake has told the session which server start this is,
    // its `last_committed` must not judge unsafe requests kept from another.
    let judged = inner.handshaken.load(Ordering::Acquire);
    if reply.xid == 0 {
        if reply.result == Ok(Body::Notice) {
            // `last_committed` moved: early replies up to it are safe.
            if judged {
                inner.session.committed(reply.last_committed);
            }
            return true;
        }
        // A connection-level error (EPROTO for bad input, EBUSY from a full
        // server); the server closes next. Every waiting request gets it, so
        // the caller learns why rather than just that the connection broke.
        if let Err(errno) = reply.result {
            *inner.refused.lock() = Some(errno);
            inner.waiting.answer_all(
                |xid| Reply::new(xid, 0, reply.last_committed, Err(errno)),
                // Answered, by the refusal: it holds the watermark no more.
                |xid| inner.session.finish(xid),
            );
        }
        return false;
    }
    // Only a reply someone takes counts as received. The server sends a reply
    // to the client's newest connection, which may be this one before the
    // request's resend is registered here (its caller saw the old connection
    // break): dropped, it must stay outstanding, so the watermark does not
    // pass it and the server keeps the record that answers the resend. Marked
    // answered here, the resend would tell the server to forget that record
    // and the request would run twice.
    let delivery = inner.waiting.deliver(reply, |reply| {
        inner.session.finish(reply.xid);
        if judged {
            inner.session.answered(reply);
        }
    });
    if delivery == Delivery::Handed {
        inner.delivered.fetch_add(1, Ordering::Relaxed);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer waits for the rest of a burst's callers only while some have not appended:
    /// after a burst every caller has answered, it writes at once; with nothing delivered,
    /// it waits while other requests are outstanding, and never with one request in flight.
    #[test]
    fn the_writer_waits_only_for_callers_still_to_come() {
        // A burst of 16, answered by one caller so far (separate tasks): wait for the rest.
        assert!(defer_write(16, 1, 16));
        // Every caller of the burst answered in one poll (loadgen's lanes): write now.
        assert!(!defer_write(16, 16, 16));
        assert!(!defer_write(1, 1, 16));
        // A reply whose caller sent nothing yet, others outstanding: wait.
        assert!(defer_write(1, 0, 16));
        // Requests made on their own: wait only while others are outstanding.
        assert!(defer_write(0, 1, 2));
        assert!(!defer_write(0, 1, 1));
    }
}
