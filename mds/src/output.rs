//! One connection's output: a reply sink any thread may fill, the writer task that empties
//! it into the socket, and the guard ([`InFlight`]) that counts a reply in flight on it for as
//! long as the guard lives. It imports nothing of the partitions or sessions that use it.
//!
//! The owner partition's drain, a partner partition draining for it, and the connection's own
//! reader (immediate replies) all append encoded replies to [`ConnOutput`] under its small
//! lock. Whoever appended then hands the bytes to a plain TCP socket itself when the writer
//! task is idle ([`ConnOutput::send_now`]: one `send` under that lock, as Redis writes its
//! replies before it sleeps), and wakes the writer only for what the socket did not take, or
//! for TLS. The writer task writes everything else; while it holds bytes it took, nobody else
//! writes the socket (the knfsd lesson: one writer at a time, and the order of the bytes is
//! the order of the appends). A drain wakes the writer once per connection per drain:
//! [`ConnOutput::append`] says whether the buffer was empty, and only the appender that found
//! it empty owes the socket a send — whoever appended before it owes one already, or the
//! writer has not yet taken what it will take with this.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::{Buf, BytesMut};
use mds_proto::{Reply, encode_frame};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Server-wide connection ids: a session compares them to tell its connections apart.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// A connection's output side and flow control, shared (`Arc`) by its reader, its writer, the
/// session it belongs to, and every pending reply of its requests.
#[derive(Debug)]
pub struct ConnOutput {
    id: u64,
    /// Encoded replies not yet handed to the socket, and who may hand them over.
    buf: Mutex<Unsent>,
    /// `buf`'s length, set under its lock: the reader checks it before every request, and
    /// an atomic load there costs less than the lock.
    buffered: AtomicUsize,
    /// Bytes the writer task took from `buf` and has not handed to the socket yet: owed as
    /// much as `buffered`. Uncounted, a client that stopped reading held a whole buffer in
    /// the writer's hands beside a new one filling up to the bound (1.3 MiB against a
    /// 1.06 MiB bound, measured).
    writing: AtomicUsize,
    /// Bytes of replies held in the reply queue for another client's commit (commit-on-
    /// share) that will leave through this connection: owed output as much as `buffered`,
    /// and bounded with it. Counted by the [`InFlight`] guards that hold them.
    held: AtomicUsize,
    /// Wakes the writer.
    ready: Notify,
    /// Replies waiting to leave through this connection: its live [`InFlight`] guards.
    inflight: AtomicUsize,
    /// Past this many in-flight mutations the reader stops reading.
    max_inflight: usize,
    /// Wakes the reader when in-flight mutations leave or the connection breaks.
    space: Notify,
    /// Wakes a reader paused on unwritten output when the writer has handed a buffer to the
    /// socket.
    drained: Notify,
    /// The socket is broken or the connection is winding down: the writer stops once the
    /// buffer is empty.
    closed: AtomicBool,
    /// Cancelled when a newer connection of the same client replaced this one.
    replaced: CancellationToken,
    /// Cancelled when `replaced` is, and with the server's shutdown (a child of its token):
    /// the one token a reader waits on for both.
    ends: CancellationToken,
    /// The `last_committed` of the last commit notice appended: one notice per value.
    noticed: AtomicU64,
}

impl ConnOutput {
    pub fn new(max_inflight: usize) -> ConnOutput {
        ConnOutput::within(max_inflight, &CancellationToken::new())
    }

    /// A connection of a server whose shutdown is `shutdown`: [`ConnOutput::ends`] is a child
    /// of it, so a reader waits on one token for both ends, not two (each poll of a token's
    /// future takes its lock: ~170 instructions a wait, counted).
    pub fn within(max_inflight: usize, shutdown: &CancellationToken) -> ConnOutput {
        ConnOutput {
            id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            // Empty until the first reply: a connection that never completes its handshake
            // holds no buffer beyond its refusal's.
            buf: Mutex::new(Unsent::default()),
            buffered: AtomicUsize::new(0),
            writing: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            ready: Notify::new(),
            inflight: AtomicUsize::new(0),
            max_inflight,
            space: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            replaced: CancellationToken::new(),
            ends: shutdown.child_token(),
            noticed: AtomicU64::new(0),
        }
    }

    /// Whether this connection is owed a commit notice for `last_committed` (and records
    /// that it gets one): drains, the owner's or a partner's, send one per value at most.
    pub fn owes_notice(&self, last_committed: u64) -> bool {
        self.noticed.fetch_max(last_committed, Ordering::AcqRel) < last_committed
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Appends one encoded reply. Returns whether the buffer was empty: then the caller must
    /// call [`ConnOutput::wake_writer`] once it has appended what it has for this connection.
    pub fn append(&self, reply: &Reply) -> bool {
        self.append_with(reply, None)
    }

    /// [`ConnOutput::append`], framed around `encoded` — the successful reply's body as
    /// `mds_proto::encode` wrote it for its resend record — when that is at hand, rather than
    /// encoding the body again.
    pub fn append_with(&self, reply: &Reply, encoded: Option<&[u8]>) -> bool {
        let mut out = self.buf.lock();
        let buf = &mut out.bytes;
        let was_empty = buf.is_empty();
        match (&reply.result, encoded) {
            (Ok(_), Some(body)) => mds_proto::encode_reply_frame(
                reply.xid,
                reply.transno,
                reply.last_committed,
                body,
                reply.ticket,
                buf,
            ),
            _ => encode_frame(reply, buf),
        }
        self.buffered.store(buf.len(), Ordering::Release);
        was_empty
    }

    /// Appends the refusal of a client of another protocol version, in the layout every
    /// version reads ([`mds_proto::encode_version_refusal`]).
    pub fn append_version_refusal(&self, xid: u64, last_committed: u64) {
        let mut out = self.buf.lock();
        let buf = &mut out.bytes;
        mds_proto::encode_version_refusal(xid, last_committed, mds_proto::Errno::EPROTO, buf);
        self.buffered.store(buf.len(), Ordering::Release);
    }

    /// Reply bytes not yet handed to the socket.
    pub fn buffered(&self) -> usize {
        self.buffered.load(Ordering::Acquire)
    }

    /// Reply bytes not yet written to the socket: buffered, and in the writer's hands.
    pub fn unwritten(&self) -> usize {
        self.buffered() + self.writing.load(Ordering::Acquire)
    }

    /// Reply bytes this connection owes its client: unwritten, and held for a commit.
    pub fn owed(&self) -> usize {
        self.unwritten() + self.held.load(Ordering::Acquire)
    }

    /// A reply now waits to leave through this connection (a mutation's for its commit, a
    /// read's for another client's commit, one joined from an older connection on its way
    /// here): counted in flight until the guard is dropped, and `held_bytes` of it counted
    /// against the output bound meanwhile. A closing connection waits for every guard; a
    /// reader paused on either bound is woken when one drops.
    pub fn start(self: &Arc<Self>, held_bytes: usize) -> InFlight {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        if held_bytes > 0 {
            self.held.fetch_add(held_bytes, Ordering::AcqRel);
        }
        InFlight {
            conn: self.clone(),
            held_bytes,
        }
    }

    /// A guard dropped: wakes the reader when that may let it read again, or when nothing is
    /// in flight any more (a closing connection waits for that).
    fn done(&self, held_bytes: usize) {
        if held_bytes > 0 {
            self.held.fetch_sub(held_bytes, Ordering::AcqRel);
            self.drained.notify_one();
        }
        let before = self.inflight.fetch_sub(1, Ordering::AcqRel);
        if before >= self.max_inflight || before == 1 {
            self.space.notify_one();
        }
    }

    pub fn wake_writer(&self) {
        self.ready.notify_one();
    }

    /// Hands what is buffered to the socket from the calling thread, when the connection is
    /// plain TCP, open, and its writer holds no bytes it took: one non-blocking `send` under
    /// the buffer's lock. Returns true when nothing is left to write; false when the caller
    /// must [`ConnOutput::wake_writer`] for the rest (the socket was full or broken, the writer
    /// is busy, or it is a TLS stream). Waking the writer task instead, per connection and
    /// drain, cost ~1,300 instructions a create at one request in flight (docs/benchmarks/create-path.md, "Replies sent by whoever appended them").
    pub fn send_now(&self) -> bool {
        let mut out = self.buf.lock();
        if out.bytes.is_empty() {
            return true;
        }
        let Some(socket) = out.socket.filter(|_| !out.writing && !self.is_closed()) else {
            return false;
        };
        match send_nonblocking(socket, &out.bytes) {
            Ok(sent) if sent == out.bytes.len() => {
                out.bytes.clear();
                self.buffered.store(0, Ordering::Release);
                drop(out);
                self.drained.notify_one();
                true
            }
            Ok(sent) => {
                // The rest stays first in line; the writer waits for room and sends it.
                out.bytes.advance(sent);
                self.buffered.store(out.bytes.len(), Ordering::Release);
                false
            }
            // Full (EAGAIN) or broken: the writer's own write meets the same and acts on it.
            Err(_) => false,
        }
    }

    /// What a drain or the reader owes a connection it appended to: the bytes sent now when
    /// [`ConnOutput::send_now`] can, else the writer woken for them.
    pub fn send_or_wake(&self) {
        if !self.send_now() {
            self.wake_writer();
        }
    }

    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Waits until fewer than `max_inflight` mutations are in flight, or the connection
    /// closed.
    pub async fn wait_for_space(&self) {
        while self.inflight() >= self.max_inflight && !self.is_closed() {
            self.space.notified().await;
        }
    }

    /// Waits until fewer than `limit` reply bytes are owed (unwritten or held), or the
    /// connection closed.
    pub async fn wait_for_output_below(&self, limit: usize) {
        loop {
            let drained = self.drained.notified();
            if self.owed() < limit || self.is_closed() {
                return;
            }
            drained.await;
        }
    }

    /// Waits until no mutation of this connection is in flight and `owed_elsewhere` (replies
    /// this connection will carry for requests that came in on another) is false, or the
    /// connection closed. Such a reply is counted in flight here from the moment it stops
    /// being owed until it is appended (`Session::release`), so the wait sees it throughout.
    ///
    /// Replies are owed to a connection only while it is its client's newest: once a newer
    /// one replaced it (a client that reconnected while this one was closing), they leave
    /// there, and this one stops waiting for them.
    pub async fn wait_until_idle(&self, owed_elsewhere: impl Fn() -> bool) {
        loop {
            let owed = !self.replaced.is_cancelled() && owed_elsewhere();
            if (self.inflight() == 0 && !owed) || self.is_closed() {
                return;
            }
            tokio::select! {
                () = self.space.notified() => {}
                () = self.replaced.cancelled(), if owed => {}
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Lets the writer finish what is buffered and stop.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
        self.space.notify_one();
        self.drained.notify_one();
    }

    /// A newer connection of the same client took this one's place: its reader stops.
    pub fn replace(&self) {
        self.replaced.cancel();
        self.ends.cancel();
    }

    pub fn replaced(&self) -> &CancellationToken {
        &self.replaced
    }

    /// Cancelled when this connection was replaced or the server shuts down (for a
    /// connection made [`ConnOutput::within`] its shutdown token).
    pub fn ends(&self) -> &CancellationToken {
        &self.ends
    }
}

/// A reply in flight on a connection, from [`ConnOutput::start`] until it is dropped: after
/// the reply is appended (wherever it went), or when it is given up. Owned, so the count can
/// never fall out of step with the replies: shutdown and a closing connection wait on these.
#[derive(Debug)]
pub struct InFlight {
    conn: Arc<ConnOutput>,
    held_bytes: usize,
}

impl InFlight {
    /// The connection it is counted on.
    pub fn conn(&self) -> &Arc<ConnOutput> {
        &self.conn
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.done(self.held_bytes);
    }
}

/// A connection's bytes not yet handed to its socket, under [`ConnOutput`]'s lock with what
/// says who may hand them over.
#[derive(Debug, Default)]
struct Unsent {
    bytes: BytesMut,
    /// The writer task holds bytes it took from here and has not written them all: nobody
    /// else may write the socket, or what they send would overtake those.
    writing: bool,
    /// The plain TCP socket, for [`ConnOutput::send_now`], while the writer task owns its
    /// write half: set and cleared under this lock by [`Lent`], so a sender holding the lock
    /// and seeing it knows the descriptor is still this connection's.
    socket: Option<RawFd>,
}

/// The writer task's write half, lent to [`ConnOutput::send_now`] by its descriptor while the
/// task lives: withdrawn under the buffer's lock before the half can be dropped (in `drop`,
/// which runs before the fields are dropped, also when the task is aborted), so the
/// descriptor is never used after the socket may have closed and its number been reused.
struct Lent<W> {
    wr: W,
    conn: Arc<ConnOutput>,
}

impl<W> Lent<W> {
    fn new(wr: W, conn: Arc<ConnOutput>, socket: Option<RawFd>) -> Lent<W> {
        conn.buf.lock().socket = socket;
        Lent { wr, conn }
    }

    fn withdraw(&self) {
        self.conn.buf.lock().socket = None;
    }
}

impl<W> Drop for Lent<W> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// One non-blocking `send` of `bytes` to `socket`; `MSG_NOSIGNAL`: a peer that closed gives
/// EPIPE, not a signal.
fn send_nonblocking(socket: RawFd, bytes: &[u8]) -> std::io::Result<usize> {
    // SAFETY: `bytes` is a live slice for the call's duration; `socket` is an open socket of
    // this connection: [`Unsent::socket`] holds it only while the write half that owns the
    // descriptor lives, and callers read it under the same lock that `Lent` withdraws it under.
    let sent = unsafe {
        libc::send(
            socket,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(sent).map_err(|_| std::io::Error::last_os_error())
}

/// A connection's write half as its writer task takes it: a plain TCP half lends its socket
/// to [`ConnOutput::send_now`] while the task runs; any other stream (TLS) is written by the
/// task alone.
pub trait WriteHalf: AsyncWrite + Unpin {
    /// The socket a thread may `send` to directly, if the bytes go to it as they are.
    fn socket(&self) -> Option<RawFd>;
}

impl WriteHalf for OwnedWriteHalf {
    fn socket(&self) -> Option<RawFd> {
        Some(self.as_ref().as_raw_fd())
    }
}

impl<T: AsyncRead + AsyncWrite> WriteHalf for tokio::io::WriteHalf<T> {
    fn socket(&self) -> Option<RawFd> {
        None
    }
}

/// Writes whatever the connection's buffer holds, one `write_all` per wake, swapping two
/// buffers so neither is reallocated; lends a plain socket to [`ConnOutput::send_now`]
/// meanwhile. `cut` ends it at once, written or not (a client that does not read, past the
/// shutdown grace period): one future waits for it for the loop's life, registered with the
/// token once rather than at every write and wait.
pub async fn write_loop<W: WriteHalf>(wr: W, conn: Arc<ConnOutput>, cut: CancellationToken) {
    let socket = wr.socket();
    write_lent(Lent::new(wr, conn, socket), cut).await;
}

async fn write_lent<W: AsyncWrite + Unpin>(mut wr: Lent<W>, cut: CancellationToken) {
    let conn = wr.conn.clone();
    let mut spare = BytesMut::new();
    let cut = cut.cancelled();
    tokio::pin!(cut);
    loop {
        {
            let mut out = conn.buf.lock();
            if !out.bytes.is_empty() {
                std::mem::swap(&mut out.bytes, &mut spare);
                out.writing = true;
                // Still owed until written: counted in `writing` before `buffered` drops, so
                // a reader never sees them in neither.
                conn.writing.store(spare.len(), Ordering::Release);
                conn.buffered.store(0, Ordering::Release);
            }
        }
        if !spare.is_empty() {
            // Written a piece at a time, each counted off as the socket takes it: a reader
            // paused on the bound reads again as soon as there is room, not only once the
            // whole buffer is gone. The flush is free on a socket; a TLS stream may hold the
            // tail of a record until it.
            let write = async {
                let mut at = 0;
                while at < spare.len() {
                    let n = wr.wr.write(&spare[at..]).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::WriteZero.into());
                    }
                    at += n;
                    conn.writing.store(spare.len() - at, Ordering::Release);
                    if at < spare.len() {
                        // Only a partial write: a whole one is notified below, once.
                        conn.drained.notify_one();
                    }
                }
                wr.wr.flush().await
            };
            let written = tokio::select! {
                r = write => r.is_ok(),
                () = &mut cut => false,
            };
            if !written {
                conn.writing.store(0, Ordering::Release);
                conn.close();
                return;
            }
            spare.clear();
            conn.buf.lock().writing = false;
            conn.drained.notify_one();
            continue;
        }
        if conn.is_closed() {
            break;
        }
        tokio::select! {
            () = conn.ready.notified() => {}
            () = &mut cut => {
                conn.close();
                return;
            }
        }
    }
    wr.withdraw();
    let _ = wr.wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use mds_proto::{Body, decode};

    fn reply(xid: u64) -> Reply {
        Reply::new(xid, xid, xid, Ok(Body::Done))
    }

    #[test]
    fn a_reader_s_one_token_ends_with_the_shutdown_or_the_replacement_and_only_one_of_them_replaces()
     {
        let shutdown = CancellationToken::new();
        let (a, b) = (
            ConnOutput::within(4, &shutdown),
            ConnOutput::within(4, &shutdown),
        );
        a.replace();
        assert!(a.ends().is_cancelled() && a.replaced().is_cancelled());
        assert!(!b.ends().is_cancelled() && !shutdown.is_cancelled());
        shutdown.cancel();
        assert!(b.ends().is_cancelled());
        // Shutting down is not being replaced: a closing connection still waits for the
        // replies owed to it (`wait_until_idle`).
        assert!(!b.replaced().is_cancelled());
    }

    #[test]
    fn only_the_append_that_finds_the_buffer_empty_owes_a_wake() {
        let out = ConnOutput::new(4);
        assert!(out.append(&reply(1)));
        assert!(!out.append(&reply(2)));
        let taken = std::mem::take(&mut out.buf.lock().bytes);
        assert!(
            out.append(&reply(3)),
            "the writer took everything: wake it again"
        );
        let len = u32::from_be_bytes(taken[..4].try_into().unwrap()) as usize;
        assert_eq!(decode::<Reply>(&taken[4..4 + len]).unwrap(), reply(1));
    }

    #[test]
    fn any_thread_may_fill_it() {
        let out = std::sync::Arc::new(ConnOutput::new(4));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let out = out.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        out.append(&reply(t * 1000 + i + 1));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let buf = out.buf.lock();
        let mut rest = &buf.bytes[..];
        let mut seen = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            seen.push(decode::<Reply>(&rest[4..4 + len]).unwrap().xid);
            rest = &rest[4 + len..];
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            (1..=4000).collect::<Vec<_>>(),
            "whole frames, none lost"
        );
    }

    #[test]
    fn the_reader_is_woken_when_it_may_read_again_and_when_all_is_answered() {
        let out = Arc::new(ConnOutput::new(2));
        let first = out.start(0);
        let second = out.start(100);
        assert_eq!(out.owed(), 100, "held bytes count as owed output");
        drop(second); // 2 -> 1: below the bound again
        assert_eq!((out.inflight(), out.owed()), (1, 0));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            out.wait_for_space().await;
            drop(first); // 1 -> 0
            out.wait_until_idle(|| false).await;
        });
    }

    #[test]
    fn a_closing_connection_stops_waiting_for_replies_a_newer_one_took_over() {
        let out = ConnOutput::new(4);
        let owed = AtomicBool::new(true);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let wait = out.wait_until_idle(|| owed.load(Ordering::Acquire));
            tokio::pin!(wait);
            let early = tokio::time::timeout(std::time::Duration::from_millis(20), &mut wait);
            assert!(early.await.is_err(), "replies are owed to it");
            // The client reconnected: its session now owes them to the newer connection,
            // which wakes nobody here but the replacement itself.
            owed.store(false, Ordering::Release);
            out.replace();
            tokio::time::timeout(std::time::Duration::from_secs(30), wait)
                .await
                .expect("the replacement ends the wait");
        });
    }

    /// A connected pair on loopback: the client's blocking end, and the server's end as tokio
    /// halves (built inside a runtime).
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    /// Every whole frame in `bytes`, as replies' xids.
    fn xids(bytes: &[u8]) -> Vec<u64> {
        let mut rest = bytes;
        let mut seen = Vec::new();
        while rest.len() >= 4 {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            seen.push(decode::<Reply>(&rest[4..4 + len]).unwrap().xid);
            rest = &rest[4 + len..];
        }
        assert!(rest.is_empty(), "no torn frame");
        seen
    }

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_idle_writers_socket_is_written_by_the_appender_itself() {
        use std::io::Read;
        let (mut client, server) = pair();
        let out = Arc::new(ConnOutput::new(4));
        let cut = CancellationToken::new();
        current_thread().block_on(async {
            let (_rd, wr) = tokio::net::TcpStream::from_std(server)
                .unwrap()
                .into_split();
            let writer = tokio::spawn(write_loop(wr, out.clone(), cut.clone()));
            tokio::task::yield_now().await; // the writer lends its socket and waits
            assert!(out.append(&reply(1)));
            assert!(out.send_now(), "sent here, nothing left for the writer");
            assert_eq!(out.buffered(), 0);
            assert!(out.send_now(), "an empty buffer owes nothing");
            let mut frame = vec![0; out_len(&reply(1))];
            client.read_exact(&mut frame).unwrap();
            assert_eq!(xids(&frame), [1]);

            // While the writer holds bytes it took, nobody else writes the socket.
            out.buf.lock().writing = true;
            assert!(out.append(&reply(2)));
            assert!(!out.send_now(), "the writer is busy: wake it instead");
            assert_eq!(out.buffered(), out_len(&reply(2)));
            out.buf.lock().writing = false;

            // A writer that ended (cut, or aborted) has withdrawn its socket.
            cut.cancel();
            writer.await.unwrap();
            assert!(out.buf.lock().socket.is_none());
            assert!(!out.send_now(), "no socket lent: the bytes stay");
            let aborted = Arc::new(ConnOutput::new(4));
            let (_client, server) = pair();
            let (_rd, wr) = tokio::net::TcpStream::from_std(server)
                .unwrap()
                .into_split();
            let task = tokio::spawn(write_loop(wr, aborted.clone(), CancellationToken::new()));
            tokio::task::yield_now().await;
            assert!(aborted.buf.lock().socket.is_some());
            task.abort();
            let _ = task.await;
            assert!(aborted.buf.lock().socket.is_none(), "withdrawn on drop too");
        });
    }

    /// The encoded length of `r` as a frame.
    fn out_len(r: &Reply) -> usize {
        let mut b = BytesMut::new();
        encode_frame(r, &mut b);
        b.len()
    }

    #[test]
    fn what_a_full_socket_did_not_take_leaves_first_through_the_writer() {
        use std::io::Read;
        let (mut client, server) = pair();
        let out = Arc::new(ConnOutput::new(usize::MAX));
        let cut = CancellationToken::new();
        let sent = current_thread().block_on(async {
            let (_rd, wr) = tokio::net::TcpStream::from_std(server)
                .unwrap()
                .into_split();
            let writer = tokio::spawn(write_loop(wr, out.clone(), cut.clone()));
            tokio::task::yield_now().await;
            // The client reads nothing: send until the socket takes no more.
            let mut xid = 0;
            loop {
                for _ in 0..64 {
                    xid += 1;
                    out.append(&reply(xid));
                }
                if !out.send_now() {
                    break;
                }
                assert!(xid < 10_000_000, "the socket never filled");
            }
            assert!(out.buffered() > 0, "the rest waits in the buffer");
            // Later replies queue behind the rest; the writer sends it all, in order, as the
            // client reads.
            for _ in 0..100 {
                xid += 1;
                out.append(&reply(xid));
            }
            out.wake_writer();
            let reader = std::thread::spawn(move || {
                let mut bytes = Vec::new();
                client.read_to_end(&mut bytes).unwrap();
                bytes
            });
            while out.buffered() > 0 || out.buf.lock().writing {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            out.close();
            writer.await.unwrap();
            (xid, reader)
        });
        let (xid, reader) = sent;
        assert_eq!(xids(&reader.join().unwrap()), (1..=xid).collect::<Vec<_>>());
    }

    /// Bytes the kernel holds of a connection: what `sender`'s socket has not sent or had
    /// acknowledged, and what `receiver`'s has received and not read.
    fn in_kernel(sender: RawFd, receiver: RawFd) -> usize {
        let (mut unsent, mut unread): (libc::c_int, libc::c_int) = (0, 0);
        // SAFETY: both are open TCP sockets of this test, and each ioctl writes one int.
        unsafe {
            assert_eq!(libc::ioctl(sender, libc::TIOCOUTQ, &raw mut unsent), 0);
            assert_eq!(libc::ioctl(receiver, libc::FIONREAD, &raw mut unread), 0);
        }
        (unsent + unread) as usize
    }

    #[test]
    fn what_the_writer_took_and_could_not_write_is_still_owed() {
        let (client, server) = pair();
        let out = Arc::new(ConnOutput::new(usize::MAX));
        let cut = CancellationToken::new();
        current_thread().block_on(async {
            let stream = tokio::net::TcpStream::from_std(server).unwrap();
            let socket = stream.as_raw_fd();
            let (_rd, wr) = stream.into_split();
            let writer = tokio::spawn(write_loop(wr, out.clone(), cut.clone()));
            tokio::task::yield_now().await;
            // 8 MiB for a client that reads nothing: more than the kernel takes.
            let mut xid = 0;
            while out.buffered() < 8 << 20 {
                xid += 1;
                out.append(&reply(xid));
            }
            let total = out.buffered();
            out.wake_writer();
            // The writer takes it all, writes what the socket takes, and waits for room:
            // what it holds stays owed until written, so every byte is owed or in the kernel.
            let mut last = (0, 0, 0);
            for _ in 0..5000 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                last = (
                    out.buffered(),
                    out.owed(),
                    in_kernel(socket, client.as_raw_fd()),
                );
                if last.0 == 0 && last.1 > 0 && last.1 + last.2 == total {
                    break;
                }
            }
            let (buffered, owed, kernel) = last;
            assert!(
                buffered == 0 && owed + kernel == total,
                "{total} appended: {owed} owed and {kernel} in the kernel ({buffered} buffered)"
            );
            cut.cancel();
            writer.await.unwrap();
        });
        assert_eq!(out.owed(), 0, "a writer that was cut owes nothing more");
    }

    #[test]
    fn a_tls_stream_is_written_by_its_writer_alone() {
        let out = Arc::new(ConnOutput::new(4));
        current_thread().block_on(async {
            let (ours, _theirs) = tokio::io::duplex(1 << 16);
            let (_rd, wr) = tokio::io::split(ours);
            let cut = CancellationToken::new();
            let writer = tokio::spawn(write_loop(wr, out.clone(), cut.clone()));
            tokio::task::yield_now().await;
            assert!(out.append(&reply(1)));
            assert!(!out.send_now(), "no socket of its own to send to");
            cut.cancel();
            writer.await.unwrap();
        });
    }
}
