//! The client library: one TCP connection, many requests in flight, replies matched by xid.
//!
//! Callers on any task or thread share one [`Client`] (it is cheap to clone); each call
//! encodes its request into a shared output buffer and waits on its own reply slot. A writer
//! task sends everything buffered with one write; a reader task routes replies by xid and
//! takes `last_committed` from notices (xid 0) the server sends unasked. Xids come from the
//! connection's [`Session`], which outlives it when the caller reconnects, and so do the
//! handles of the files it opens: a connect that reaches a new server start reopens them
//! after its replays. A request carries the session's credentials, or a caller's own
//! ([`Client::call_as`]: a mount sends each with its caller's). Path helpers resolve `/a/b/c`
//! by LOOKUP from the root, as `mdsctl` does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::Notify;

use mds_proto::{
    self as protocol, Attr, Body, Cred, DirEntry, Errno, Kind, MAX_IO, MAX_READDIR, Op, OpenFlags,
    PROTOCOL_VERSION, RenameHow, Replay, Reply, RequestRef, SetAttr, ShardMap, StatFs, Target,
    XattrSet, XattrValue, encode_request_frame,
};

use crate::auth::{AuthKey, SessionSecret};
use crate::handles::Handle;
use crate::reply_slots::{Delivery, ReplySlots, ReplyWait};
use crate::session::{Replays, Session};
use crate::tls::TlsClient;

/// The root directory's inode number.
pub const ROOT: u64 = mds_proto::ROOT_INO;

/// How to reach a server beyond its address: TLS, and the key for its challenge. The
/// default is plain TCP without a key.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// The shared key, proved when the server challenges the CONNECT.
    pub auth_key: Option<Arc<AuthKey>>,
    /// Speak TLS, trusting these anchors.
    pub tls: Option<Arc<TlsClient>>,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{0}")]
    Errno(Errno),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before the reply came.
    #[error("connection closed before the reply")]
    Disconnected,
    /// The server sent something this client does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server requires the shared key and this client was given none. (A key the server
    /// does not share is refused with `Errno(EAUTH)`.)
    #[error("the server requires authentication: give the shared key file (--auth-key FILE)")]
    AuthRequired,
    /// LOOKUP found an entry naming another shard's directory, inode `.0` (MKDIR_REMOTE):
    /// its attributes are on that shard ([`crate::Router::lookup`] asks it).
    #[error("the entry names inode {0:#x}, another shard's (ask that shard: mds_client::Router)")]
    Remote(u64),
}

impl ClientError {
    /// The server's error code, if that is what this is.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ClientError::Errno(e) => Some(*e),
            ClientError::Remote(_) => Some(Errno::EREMOTE),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

struct Inner {
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

impl Inner {
    /// The error for a request the closed connection will never answer.
    fn gone(&self) -> ClientError {
        match *self.refused.lock() {
            Some(errno) => ClientError::Errno(errno),
            None => ClientError::Disconnected,
        }
    }
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
fn take_reply(inner: &Inner, payload: &[u8]) -> bool {
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

/// Aborts the connection's tasks when the last [`Client`] clone is dropped.
struct Tasks {
    reader: tokio::task::AbortHandle,
    writer: tokio::task::AbortHandle,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// A connection to an mds server.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    _tasks: Arc<Tasks>,
    server_boot: u64,
    partition: u32,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("partition", &self.partition)
            .field("last_committed", &self.last_committed())
            .finish()
    }
}

impl Client {
    /// Connects as a new client (a fresh random identity with this process's credentials).
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client> {
        Client::connect_session(addr, Arc::new(Session::new())).await
    }

    /// Connects and performs the CONNECT handshake as `session`'s client: a reconnect with
    /// the same session replaces the server's older connection of that client, and xids keep
    /// counting where they were. Plain TCP, no key: [`Client::connect_with`] takes those.
    pub async fn connect_session(
        addr: impl ToSocketAddrs,
        session: Arc<Session>,
    ) -> Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (rd, wr) = stream.into_split();
        Client::start(rd, wr, session, None).await
    }

    /// As [`Client::connect_session`], to `addr` (HOST:PORT) with `options`: TLS if they
    /// say so, and the shared key if the server challenges the CONNECT.
    pub async fn connect_with(
        addr: &str,
        session: Arc<Session>,
        options: &ConnectOptions,
    ) -> Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let key = options.auth_key.as_deref();
        match &options.tls {
            None => {
                // Owned halves, no lock between them: the plain path costs what it did.
                let (rd, wr) = stream.into_split();
                Client::start(rd, wr, session, key).await
            }
            Some(tls) => {
                let (rd, wr) = tokio::io::split(tls.handshake(addr, stream).await?);
                Client::start(rd, wr, session, key).await
            }
        }
    }

    /// Starts the reader and writer tasks on a connected stream's halves and performs the
    /// handshake: CONNECT, and if the server challenges it, AUTHENTICATE with `key`.
    async fn start<R, W>(
        rd: R,
        mut wr: W,
        session: Arc<Session>,
        key: Option<&AuthKey>,
    ) -> Result<Client>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let inner = Arc::new(Inner {
            outbox: parking_lot::Mutex::new(BytesMut::with_capacity(16 << 10)),
            wake: Notify::new(),
            delivered: AtomicUsize::new(0),
            appended: AtomicUsize::new(0),
            waiting: ReplySlots::default(),
            session: session.clone(),
            last_committed: AtomicU64::new(0),
            handshaken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            refused: parking_lot::Mutex::new(None),
        });
        let writer = {
            let inner = inner.clone();
            tokio::spawn(async move {
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
                    if !spare.is_empty()
                        && (wr.write_all(&spare).await.is_err() || wr.flush().await.is_err())
                    {
                        break;
                    }
                    spare.clear();
                }
            })
        };
        let reader = {
            let inner = inner.clone();
            tokio::spawn(async move {
                let mut rd = rd;
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
            })
        };
        let mut client = Client {
            inner,
            _tasks: Arc::new(Tasks {
                reader: reader.abort_handle(),
                writer: writer.abort_handle(),
            }),
            server_boot: 0,
            partition: 0,
        };
        // A server connecting to another of its cluster says so, and proves the cluster's
        // peer secret instead of the shared key.
        let peer = session.peer_key();
        let connect = match peer {
            Some(_) => Op::PeerConnect {
                version: PROTOCOL_VERSION,
                client: session.id(),
            },
            None => Op::Connect {
                version: PROTOCOL_VERSION,
                client: session.id(),
            },
        };
        let mut reply = client.call_reply(connect).await?;
        if let Ok(Body::Challenge {
            nonce,
            key: key_wanted,
            session: session_wanted,
        }) = reply.result
        {
            // Prove what the server asks for over this connection's nonce: the shared key (a
            // server started with one), and the session secret (a reconnect of an identity
            // whose session the server keeps). A server that wants neither answers CONNECT
            // at once, and a client with a key connects anyway.
            let proof = match (key_wanted, peer, key) {
                (false, _, _) => None,
                (true, Some(peer), _) => Some(peer.proof(&nonce, session.id(), PROTOCOL_VERSION)),
                (true, None, Some(key)) => Some(key.proof(&nonce, session.id(), PROTOCOL_VERSION)),
                (true, None, None) => return Err(ClientError::AuthRequired),
            };
            // Without the secret, no proof: the server refuses it and says so.
            let session_proof = session_wanted
                .then(|| session.secret().map(|s| s.proof(&nonce, session.id())))
                .flatten();
            reply = client
                .call_reply(Op::Authenticate {
                    proof,
                    session: session_proof,
                })
                .await?;
        }
        let last_committed = reply.last_committed;
        match reply.result.map_err(ClientError::Errno)? {
            Body::Connected {
                server_boot,
                partition,
                ack_early,
                recovering,
                evicted,
                session_secret,
                ..
            } => {
                client.server_boot = server_boot;
                client.partition = partition;
                if let Some(secret) = session_secret {
                    session.set_secret(SessionSecret::from_bytes(secret));
                }
                let replay = session.connected(server_boot, ack_early, evicted, last_committed);
                client.inner.handshaken.store(true, Ordering::Release);
                client.replay(replay, recovering).await?;
                Ok(client)
            }
            other => Err(unexpected(other)),
        }
    }

    /// After a server restart: replays what was answered early and not durable, in transno
    /// order, with its transno, inode number and ticket, while the server's recovery window is
    /// open; reopens the handles the session holds; then tells the server it is done (any
    /// request that is not a replay does). What the server will not take back is lost, and
    /// counted (`Session::lost`). Replays whose answers were cut off are sent again to the
    /// same start too: the server answers those it executed from its records, whether its
    /// window is open or not.
    async fn replay(&self, replays: Replays, recovering: bool) -> Result<()> {
        if recovering || replays.same_start {
            self.replay_unsafe(replays).await?;
        } else {
            for (transno, request) in replays.requests {
                self.inner.session.lose(transno, request);
            }
        }
        // After the replays (a replayed WRITE or truncating OPEN names its handle as it was)
        // and before the request that ends the client's recovery.
        self.reopen_handles().await?;
        if recovering {
            self.ping().await
        } else {
            Ok(())
        }
    }

    /// Sends the replays, pipelined, and waits for every answer.
    async fn replay_unsafe(&self, replays: Replays) -> Result<()> {
        let sends = replays.requests.into_iter().map(|(transno, mut request)| {
            let client = self.clone();
            async move {
                // A new request of its own, or the same one again if its answer was cut off on
                // this start (then it is answered from the replay's record).
                let session = &client.inner.session;
                if request.replayed_as == 0 {
                    request.replayed_as = session.begin().0;
                }
                let replay = Replay {
                    xid: request.xid,
                    transno,
                    ino: request.ino,
                    ticket: request.ticket,
                };
                let sent = client
                    .send_replay(
                        request.replayed_as,
                        request.op.clone(),
                        &request.cred,
                        replay,
                    )
                    .await;
                let reply = match sent {
                    Ok(reply) => reply,
                    Err(e) => {
                        // Cut before its answer (the server went away again): whether it
                        // executed is unknown; replayed again after the next reconnect. Only
                        // the server's refusal loses it.
                        session.keep_unreplayed(transno, request);
                        return Err(e);
                    }
                };
                match reply.result {
                    Ok(_) => session.keep_unsafe(reply.transno, request),
                    Err(_) => session.lose(transno, request),
                }
                Ok::<(), ClientError>(())
            }
        });
        // Pipelined: the server executes them in global transno order as their turns come.
        for result in futures::future::join_all(sends).await {
            result?;
        }
        Ok(())
    }

    /// Takes back, pipelined, every handle the session holds that this server start has not
    /// opened: after a restart all of them — whether or not the server is still in its
    /// recovery window (if it closed, the reopen is tried anyway: a file nobody else touched
    /// is still there to open) — and after a connect whose reopens were cut off, those not
    /// answered. A handle the server refuses is dead: its later uses answer the refusal's
    /// errno. One whose answer was cut off stays as it was, to be reopened at the next
    /// connect.
    async fn reopen_handles(&self) -> Result<()> {
        let session = &self.inner.session;
        let boot = self.server_boot;
        let handles = session.handles_to_reopen(boot);
        if handles.is_empty() {
            return Ok(());
        }
        let sends = handles.into_iter().map(|handle| {
            let client = self.clone();
            async move { (handle, client.call_reply(handle.reopen_op()).await) }
        });
        let answers = futures::future::join_all(sends).await;
        // A connection-level refusal (EBUSY, EPROTO) answers every waiting request with its
        // errno: it says nothing of the handles, which stay to be reopened next time.
        if let Some(errno) = *self.inner.refused.lock() {
            return Err(ClientError::Errno(errno));
        }
        let mut failed = None;
        for (handle, answer) in answers {
            match answer.map(|reply| reply.result) {
                Ok(Ok(Body::Attr(_))) => session.handle_reopened(handle, boot),
                Ok(Ok(other)) => failed = Some(unexpected(other)),
                Ok(Err(errno)) => session.handle_died(handle, errno),
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// A replay goes with the credentials of the request it replays: what it creates is its
    /// caller's, as the original's was.
    async fn send_replay(&self, xid: u64, op: Op, cred: &Cred, replay: Replay) -> Result<Reply> {
        let acked_xid = self.inner.session.acked_xid();
        self.send_request(xid, acked_xid, &op, cred, Some(replay))
            .await
    }

    /// Sends `op` with the session's next xid and waits for its reply, whole.
    pub async fn call_reply(&self, op: Op) -> Result<Reply> {
        self.call_reply_with(None, op).await
    }

    /// As [`Client::call_reply`], with `cred` instead of the session's credentials: the
    /// server checks `op` against them, and what it creates is theirs.
    pub async fn call_reply_as(&self, cred: &Cred, op: Op) -> Result<Reply> {
        self.call_reply_with(Some(cred), op).await
    }

    /// `cred`, or the session's if `None`.
    async fn call_reply_with(&self, cred: Option<&Cred>, op: Op) -> Result<Reply> {
        let (xid, acked_xid) = self.inner.session.begin();
        let reply = self.send(xid, acked_xid, &op, cred).await;
        if reply.is_err() {
            // Nobody will resend it (that is `send_as`): it must not hold the session's
            // watermark below it for good — the server would keep every later resend
            // record, and refuse the session's mutations once it keeps its cap of them.
            self.inner.session.finish(xid);
        }
        reply
    }

    /// Sends `op` with an xid the session already handed out (`Session::begin`): the first
    /// send of a request that may need resending, or its resend after a reconnect.
    pub async fn send_as(&self, xid: u64, op: Op) -> Result<Reply> {
        let acked_xid = self.inner.session.acked_xid();
        self.send(xid, acked_xid, &op, None).await
    }

    /// As [`Client::send_as`], with `cred` instead of the session's credentials (a resend
    /// must carry the ones its first send did).
    /// The op is borrowed: a resend sends the same one again. One future, not three nested
    /// ones: each layer of `async fn` is polled at the send and again at the reply (~150
    /// instructions a request through `send` and `send_request`, counted).
    pub async fn send_with_cred(&self, xid: u64, cred: &Cred, op: &Op) -> Result<Reply> {
        let acked_xid = self.inner.session.acked_xid();
        self.inner.session.sending(xid, op, cred);
        let reply = self.enqueue(xid, acked_xid, op, cred, None)?;
        reply.await.ok_or_else(|| self.inner.gone())
    }

    /// Sends with `cred`, or the session's credentials if `None`.
    async fn send(&self, xid: u64, acked_xid: u64, op: &Op, cred: Option<&Cred>) -> Result<Reply> {
        let cred = cred.unwrap_or(self.inner.session.cred());
        self.inner.session.sending(xid, op, cred);
        self.send_request(xid, acked_xid, op, cred, None).await
    }

    async fn send_request(
        &self,
        xid: u64,
        acked_xid: u64,
        op: &Op,
        cred: &Cred,
        replay: Option<Replay>,
    ) -> Result<Reply> {
        let reply = self.enqueue(xid, acked_xid, op, cred, replay)?;
        reply.await.ok_or_else(|| self.inner.gone())
    }

    /// Registers `xid`'s reply slot and appends its request to the outbox: what a send does
    /// before it waits. `Err` if the connection is closed already.
    fn enqueue(
        &self,
        xid: u64,
        acked_xid: u64,
        op: &Op,
        cred: &Cred,
        replay: Option<Replay>,
    ) -> Result<ReplyWait<'_>> {
        self.inner.waiting.open(xid);
        if self.inner.closed.load(Ordering::SeqCst) {
            self.inner.waiting.cancel(xid);
            return Err(self.inner.gone());
        }
        let request = RequestRef {
            xid,
            op,
            acked_xid,
            cred,
            replay,
        };
        encode_request_frame(&request, &mut self.inner.outbox.lock());
        self.inner.appended.fetch_add(1, Ordering::Relaxed);
        self.inner.wake.notify_one();
        Ok(self.inner.waiting.wait(xid))
    }

    /// Sends `op` and returns the reply's body, or its error as `ClientError::Errno`.
    pub async fn call(&self, op: Op) -> Result<Body> {
        self.call_reply(op)
            .await?
            .result
            .map_err(ClientError::Errno)
    }

    /// As [`Client::call`], on behalf of `cred` (a mount's caller) rather than the session.
    pub async fn call_as(&self, cred: &Cred, op: Op) -> Result<Body> {
        self.call_reply_as(cred, op)
            .await?
            .result
            .map_err(ClientError::Errno)
    }

    /// The highest `last_committed` the server has reported on this connection.
    pub fn last_committed(&self) -> u64 {
        self.inner.last_committed.load(Ordering::Relaxed)
    }

    /// The session this connection belongs to.
    pub fn session(&self) -> &Arc<Session> {
        &self.inner.session
    }

    /// Identifies the server start this connection reached.
    pub fn server_boot(&self) -> u64 {
        self.server_boot
    }

    /// The server partition serving this connection.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub async fn ping(&self) -> Result<()> {
        self.call(Op::Ping).await.map(drop)
    }

    /// Creates a directory, owned by the session's credentials.
    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Mkdir { parent, name, mode }).await?)
    }

    /// Creates a regular file (exclusive), owned by the session's credentials.
    pub async fn create(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Create { parent, name, mode }).await?)
    }

    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        attr(
            self.call(Op::Lookup {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        attr(self.call(Op::Getattr { ino }).await?)
    }

    pub async fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr> {
        attr(self.call(Op::Setattr { ino, attr: set }).await?)
    }

    /// One page of a directory: entries after `cursor`, and the cursor of the next page.
    pub async fn readdir(
        &self,
        ino: u64,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<(Vec<DirEntry>, Option<String>)> {
        match self.call(Op::Readdir { ino, cursor, limit }).await? {
            Body::Entries { entries, next } => Ok((entries, next)),
            other => Err(unexpected(other)),
        }
    }

    /// A whole directory, page by page.
    pub async fn readdir_all(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = self.readdir(ino, cursor, MAX_READDIR).await?;
            all.extend(page);
            match next {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        done(
            self.call(Op::Unlink {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        done(
            self.call(Op::Rmdir {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn rename(&self, sp: u64, sn: &str, dp: u64, dn: &str) -> Result<()> {
        self.rename_how(sp, sn, dp, dn, RenameHow::Replace).await
    }

    /// RENAME with `renameat2`'s flags: never replace the target, or exchange the two.
    pub async fn rename_how(
        &self,
        sp: u64,
        sn: &str,
        dp: u64,
        dn: &str,
        how: RenameHow,
    ) -> Result<()> {
        done(
            self.call(Op::Rename {
                src_parent: sp,
                src_name: sn.into(),
                dst_parent: dp,
                dst_name: dn.into(),
                how,
            })
            .await?,
        )
    }

    /// A new name `name` in `parent` for the inode `ino`; the inode's attributes after.
    pub async fn link(&self, ino: u64, parent: u64, name: &str) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Link { ino, parent, name }).await?)
    }

    /// A symbolic link to `target`, owned by the session's credentials.
    pub async fn symlink(&self, parent: u64, name: &str, target: &[u8]) -> Result<Attr> {
        let (name, target) = (name.into(), Target(target.to_vec()));
        attr(
            self.call(Op::Symlink {
                parent,
                name,
                target,
            })
            .await?,
        )
    }

    pub async fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        match self.call(Op::Readlink { ino }).await? {
            Body::Target(t) => Ok(t.0),
            other => Err(unexpected(other)),
        }
    }

    /// A fifo, socket, device (`rdev`) or regular file, owned by the session's credentials.
    pub async fn mknod(
        &self,
        parent: u64,
        name: &str,
        kind: Kind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr> {
        let name = name.into();
        attr(
            self.call(Op::Mknod {
                parent,
                name,
                kind,
                mode,
                rdev,
            })
            .await?,
        )
    }

    pub async fn setxattr(&self, ino: u64, name: &str, value: &[u8], how: XattrSet) -> Result<()> {
        let (name, value) = (name.into(), XattrValue(value.to_vec()));
        done(
            self.call(Op::Setxattr {
                ino,
                name,
                value,
                how,
            })
            .await?,
        )
    }

    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        let name = name.into();
        match self.call(Op::Getxattr { ino, name }).await? {
            Body::Xattr(v) => Ok(v.0),
            other => Err(unexpected(other)),
        }
    }

    pub async fn listxattr(&self, ino: u64) -> Result<Vec<String>> {
        match self.call(Op::Listxattr { ino }).await? {
            Body::XattrNames(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    pub async fn removexattr(&self, ino: u64, name: &str) -> Result<()> {
        let name = name.into();
        done(self.call(Op::Removexattr { ino, name }).await?)
    }

    pub async fn statfs(&self) -> Result<StatFs> {
        match self.call(Op::Statfs).await? {
            Body::StatFs(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// Returns once every mutation the server executed before it is durable.
    pub async fn sync(&self) -> Result<()> {
        done(self.call(Op::Sync).await?)
    }

    /// Opens `ino` as `flags` say, under a handle number the session chooses, and records the
    /// handle in the session (which reopens it after a server restart). The file's attributes
    /// come with it (after the truncate, if `flags.truncate`).
    pub async fn open(&self, ino: u64, flags: OpenFlags) -> Result<(Handle, Attr)> {
        let session = &self.inner.session;
        let handle = session.new_handle(ino, flags);
        let opened = attr(self.call(handle.open_op()).await?)?;
        session.handle_opened(handle, self.server_boot);
        Ok((handle, opened))
    }

    /// Closes `handle`. Once the server has answered (Done, or an error: either way it is
    /// done with it) the session forgets it; a dead handle is forgotten without asking. A
    /// connection lost first leaves it held, to release again.
    pub async fn release(&self, handle: Handle) -> Result<()> {
        let session = &self.inner.session;
        if session.handle_error(handle).is_some() {
            session.handle_released(handle);
            return Ok(());
        }
        let answered = self.call(handle.release_op()).await;
        if matches!(answered, Ok(_) | Err(ClientError::Errno(_))) {
            session.handle_released(handle);
        }
        done(answered?)
    }

    /// Up to `len` bytes (at most [`MAX_IO`]; EINVAL, unsent, beyond) from `offset`: fewer
    /// at the end of the file, none past it.
    pub async fn read(&self, handle: Handle, offset: u64, len: u32) -> Result<Vec<u8>> {
        self.usable(handle)?;
        if len as usize > MAX_IO {
            return Err(ClientError::Errno(Errno::EINVAL));
        }
        match self.call(handle.read_op(offset, len)).await? {
            Body::Data(data) => Ok(data.0),
            other => Err(unexpected(other)),
        }
    }

    /// Writes `data` (at most [`MAX_IO`] bytes; EINVAL, unsent, beyond) at `offset`, or at
    /// the end of the file through a handle opened to append. The file's attributes after it
    /// (its new size and mtime).
    pub async fn write(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        self.usable(handle)?;
        if data.len() > MAX_IO {
            return Err(ClientError::Errno(Errno::EINVAL));
        }
        attr(self.call(handle.write_op(offset, data.to_vec())).await?)
    }

    /// `ftruncate(2)`: sets the size through `handle`, which must be open for writing.
    pub async fn ftruncate(&self, handle: Handle, size: u64) -> Result<Attr> {
        self.usable(handle)?;
        attr(self.call(handle.truncate_op(size)).await?)
    }

    /// Writes all of `data` from `offset` in [`MAX_IO`] pieces, one after the other. The
    /// file's attributes after the last piece (a GETATTR's when there is nothing to write).
    pub async fn write_all(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        if data.is_empty() {
            self.usable(handle)?;
            return self.getattr(handle.ino()).await;
        }
        let mut at = offset;
        let mut last = None;
        for piece in data.chunks(MAX_IO) {
            last = Some(self.write(handle, at, piece).await?);
            at += piece.len() as u64;
        }
        Ok(last.expect("data is not empty"))
    }

    /// The whole file from its start, read in [`MAX_IO`] pieces until one comes back short.
    pub async fn read_to_end(&self, handle: Handle) -> Result<Vec<u8>> {
        let mut all = Vec::new();
        loop {
            let piece = self.read(handle, all.len() as u64, MAX_IO as u32).await?;
            let short = piece.len() < MAX_IO;
            all.extend_from_slice(&piece);
            if short {
                return Ok(all);
            }
        }
    }

    /// The errno of a handle whose reopen was refused, before anything is sent.
    fn usable(&self, handle: Handle) -> Result<()> {
        match self.inner.session.handle_error(handle) {
            Some(errno) => Err(ClientError::Errno(errno)),
            None => Ok(()),
        }
    }

    /// Which server serves each shard of the cluster this server belongs to (outside a
    /// cluster: no shard, no servers).
    pub async fn shard_map(&self) -> Result<ShardMap> {
        match self.call(Op::ShardMap).await? {
            Body::ShardMap(map) => Ok(map),
            other => Err(unexpected(other)),
        }
    }

    /// The shard map once the server's view of the cluster is newer than etcd revision
    /// `after`, or after `wait` (the server holds it a minute at most) as it is, with the
    /// revision it reflects (SHARD_MAP_WAIT; 0 and an empty map outside a cluster). The
    /// server answers this connection's later requests only after it: a watcher of the map
    /// ([`crate::MapWatch`]) sends it on a connection of its own.
    pub async fn shard_map_after(
        &self,
        after: u64,
        wait: std::time::Duration,
    ) -> Result<(u64, ShardMap)> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        match self.call(Op::ShardMapWait { after, wait_ms }).await? {
            Body::ShardMapAt { revision, map } => Ok((revision, map)),
            other => Err(unexpected(other)),
        }
    }

    /// Resolves an absolute path by LOOKUP from the root.
    pub async fn resolve(&self, path: &str) -> Result<Attr> {
        let mut current = self.getattr(ROOT).await?;
        for name in components(path)? {
            current = self.lookup(current.ino, name).await?;
        }
        Ok(current)
    }

    /// Resolves all but the last component of `path`: (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(u64, &'p str)> {
        let parts = components(path)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(ClientError::Errno(Errno::EINVAL)); // "/" has no parent entry
        };
        let mut ino = ROOT;
        for name in dirs {
            ino = self.lookup(ino, name).await?.ino;
        }
        Ok((ino, last))
    }
}

/// Splits an absolute path into its names; relative paths are refused with EINVAL.
pub fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') {
        return Err(ClientError::Errno(Errno::EINVAL));
    }
    Ok(path.split('/').filter(|c| !c.is_empty()).collect())
}

fn attr(body: Body) -> Result<Attr> {
    match body {
        Body::Attr(a) => Ok(a),
        Body::Remote { ino, .. } => Err(ClientError::Remote(ino)),
        other => Err(unexpected(other)),
    }
}

fn done(body: Body) -> Result<()> {
    match body {
        Body::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

fn unexpected(body: Body) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {body:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use mds_proto::{Request, encode_frame};
    use tokio_util::codec::FramedRead;

    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::AsyncWriteExt;

    /// The client's half of the stream, counting the writes handed to it.
    struct CountingWriter {
        inner: tokio::io::WriteHalf<tokio::io::DuplexStream>,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
            if polled.is_ready() {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            polled
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A test server's answer to CONNECT: server start 1, partition 0, replies at commit.
    fn connected() -> Body {
        Body::Connected {
            version: PROTOCOL_VERSION,
            server_boot: 1,
            partition: 0,
            ack_early: false,
            recovering: false,
            evicted: false,
            session_secret: None,
        }
    }

    /// A server that answers CONNECT at once and pings `batch` at a time, in one write (as
    /// the real server's drain answers a commit's worth): each burst of replies wakes that
    /// many callers at once.
    async fn answer_in_bursts(stream: tokio::io::DuplexStream, batch: usize) {
        let (rd, mut wr) = tokio::io::split(stream);
        let mut frames = FramedRead::new(rd, protocol::codec());
        let mut out = BytesMut::new();
        let mut held = 0;
        while let Some(Ok(frame)) = frames.next().await {
            let request: Request = protocol::decode(&frame).unwrap();
            let connect = matches!(request.op, Op::Connect { .. });
            let result = if connect {
                Ok(connected())
            } else {
                Ok(Body::Pong)
            };
            let reply = Reply::new(request.xid, 0, 0, result);
            encode_frame(&reply, &mut out);
            held += usize::from(!connect);
            if connect || held == batch {
                held = 0;
                if wr.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
        }
    }

    /// A server that answers CONNECT, PING with PONG and READDIR with a page of `entries`
    /// names, writing what it owes `piece` bytes at a time: replies reach the client cut
    /// anywhere, several to a read or one over many.
    async fn answer_in_pieces(stream: tokio::io::DuplexStream, piece: usize, entries: usize) {
        let (rd, mut wr) = tokio::io::split(stream);
        let mut frames = FramedRead::new(rd, protocol::codec());
        while let Some(Ok(frame)) = frames.next().await {
            let request: Request = protocol::decode(&frame).unwrap();
            let result = match request.op {
                Op::Connect { .. } => Ok(connected()),
                Op::Readdir { .. } => Ok(Body::Entries {
                    entries: (0..entries)
                        .map(|i| DirEntry {
                            name: format!("{i:0>40}"),
                            ino: i as u64 + 2,
                            kind: Kind::File,
                        })
                        .collect(),
                    next: None,
                }),
                _ => Ok(Body::Pong),
            };
            let page = matches!(result, Ok(Body::Entries { .. }));
            let mut out = BytesMut::new();
            encode_frame(&Reply::new(request.xid, 0, 0, result), &mut out);
            if page {
                assert!(out.len() > protocol::READ_CHUNK && out.len() <= 4 + protocol::MAX_FRAME);
            }
            for chunk in out.chunks(piece) {
                if wr.write_all(chunk).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Replies cut into pieces of 1 to 7 bytes, and one longer than the reader's chunk, are
    /// each read whole and go to their callers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replies_cut_anywhere_are_read_whole() {
        for piece in [1, 2, 3, 5, 7, 4096] {
            let (ours, theirs) = tokio::io::duplex(1 << 10);
            // 44 bytes an entry: a page past the reader's 64 KiB chunk, under a frame's cap.
            let entries = 1540;
            tokio::spawn(answer_in_pieces(theirs, piece, entries));
            let (rd, wr) = tokio::io::split(ours);
            let client = Client::start(rd, wr, Arc::new(Session::new()), None)
                .await
                .unwrap();
            let pings: Vec<_> = (0..8)
                .map(|_| {
                    let client = client.clone();
                    tokio::spawn(async move { client.ping().await })
                })
                .collect();
            for ping in pings {
                ping.await.unwrap().unwrap();
            }
            let page = client
                .call(Op::Readdir {
                    ino: ROOT,
                    cursor: None,
                    limit: u32::MAX,
                })
                .await
                .unwrap();
            let Body::Entries { entries: got, .. } = page else {
                panic!("not a page: {page:?}");
            };
            assert_eq!(got.len(), entries, "piece {piece}");
            assert_eq!(got[entries - 1].name, format!("{:0>40}", entries - 1));
            client.ping().await.unwrap();
        }
    }

    /// A client whose server answers `burst` pings at a time in one write, and the count of
    /// the writes it has made so far.
    async fn client_answered_in_bursts(burst: usize) -> (Client, Arc<AtomicUsize>) {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        tokio::spawn(answer_in_bursts(theirs, burst));
        let (rd, wr) = tokio::io::split(ours);
        let writes = Arc::new(AtomicUsize::new(0));
        let wr = CountingWriter {
            inner: wr,
            writes: writes.clone(),
        };
        let client = Client::start(rd, wr, Arc::new(Session::new()), None)
            .await
            .unwrap();
        (client, writes)
    }

    /// 16 callers on one connection, each its own task sending its next request as soon as
    /// its reply comes: the requests woken by one burst of replies leave together. Sent one
    /// write per request, each would cost a trip through the kernel's TCP path.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn requests_woken_together_leave_in_one_write() {
        const CALLERS: usize = 16;
        const ROUNDS: usize = 50;
        let (client, writes) = client_answered_in_bursts(CALLERS).await;
        let before = writes.load(Ordering::Relaxed);
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        client.ping().await.unwrap();
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        let requests = CALLERS * ROUNDS;
        let writes = writes.load(Ordering::Relaxed) - before;
        assert!(
            writes * 4 <= requests,
            "{writes} writes for {requests} requests: callers woken together should share writes"
        );
    }

    /// loadgen's lanes: 16 callers polled by one task, each sending its next request as soon
    /// as its reply comes. Their requests are all appended by the time the writer runs, so it
    /// writes at once, and a burst's requests still leave together: one write a burst.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn requests_answered_in_one_task_leave_in_one_write_a_burst() {
        const CALLERS: usize = 16;
        const ROUNDS: usize = 50;
        let (client, writes) = client_answered_in_bursts(CALLERS).await;
        let before = writes.load(Ordering::Relaxed);
        let lanes = (0..CALLERS).map(|_| {
            let client = client.clone();
            async move {
                for _ in 0..ROUNDS {
                    client.ping().await.unwrap();
                }
            }
        });
        tokio::spawn(futures::future::join_all(lanes))
            .await
            .unwrap();
        let writes = writes.load(Ordering::Relaxed) - before;
        // One write a round, give or take the first (the lanes start one by one).
        assert!(
            writes <= ROUNDS + 2,
            "{writes} writes for {ROUNDS} bursts of {CALLERS}: a burst's requests should share a write"
        );
    }

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

    /// A connection that breaks before the CONNECT is answered (the server was killed as the
    /// client reconnected) leaves no xid outstanding (regression: the CONNECT's xid held the
    /// session's watermark for good, so the server kept every later resend record of it and,
    /// once it kept its cap of them, refused all its mutations).
    #[tokio::test]
    async fn a_handshake_cut_short_leaves_no_xid_outstanding() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        drop(theirs);
        let (rd, wr) = tokio::io::split(ours);
        let session = Arc::new(Session::new());
        assert!(Client::start(rd, wr, session.clone(), None).await.is_err());
        let (xid, acked) = session.begin();
        assert_eq!((xid, acked), (2, 1), "the CONNECT's xid 1 counts as done");
    }

    /// A server start that answers CONNECT as `boot`, OPEN with a file's attributes (or
    /// ESTALE for a reopen of a handle in `refused`), READ with 3 bytes and the rest with what
    /// they expect, and keeps every request it was sent, whole. With `ack_early` it says it
    /// answers early, and a CREATE gets transno 5 over `last_committed` 0, with a ticket.
    struct FakeStart {
        boot: u64,
        recovering: bool,
        ack_early: bool,
        refused: Vec<u64>,
        seen: Arc<parking_lot::Mutex<Vec<Request>>>,
    }

    fn file_attr(ino: u64) -> Attr {
        Attr {
            ino,
            kind: Kind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            rdev: 0,
            generation: 1,
        }
    }

    impl FakeStart {
        fn answer(&self, op: &Op) -> Reply {
            if self.ack_early && matches!(op, Op::Create { .. }) {
                return Reply {
                    ticket: 9,
                    ..Reply::new(0, 5, 0, Ok(Body::Attr(file_attr(42))))
                };
            }
            let result = match *op {
                Op::Connect { .. } => Ok(Body::Connected {
                    version: PROTOCOL_VERSION,
                    server_boot: self.boot,
                    partition: 0,
                    ack_early: self.ack_early,
                    recovering: self.recovering,
                    evicted: false,
                    session_secret: None,
                }),
                Op::Open {
                    handle,
                    reopen: true,
                    ..
                } if self.refused.contains(&handle) => Err(Errno::ESTALE),
                Op::Open { ino, .. } | Op::Getattr { ino } => Ok(Body::Attr(file_attr(ino))),
                Op::Read { .. } => Ok(Body::Data(protocol::Data(vec![1, 2, 3]))),
                Op::Release { .. } => Ok(Body::Done),
                _ => Ok(Body::Pong),
            };
            Reply::new(0, 0, 0, result)
        }

        /// Connects `session` to this start.
        async fn connect(
            self,
            session: &Arc<Session>,
        ) -> (Client, Arc<parking_lot::Mutex<Vec<Request>>>) {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let seen = self.seen.clone();
            tokio::spawn(async move {
                let (rd, mut wr) = tokio::io::split(theirs);
                let mut frames = FramedRead::new(rd, protocol::codec());
                while let Some(Ok(frame)) = frames.next().await {
                    let request: Request = protocol::decode(&frame).unwrap();
                    let reply = Reply {
                        xid: request.xid,
                        ..self.answer(&request.op)
                    };
                    self.seen.lock().push(request);
                    let mut out = BytesMut::new();
                    encode_frame(&reply, &mut out);
                    if wr.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
            let (rd, wr) = tokio::io::split(ours);
            let client = Client::start(rd, wr, session.clone(), None).await.unwrap();
            (client, seen)
        }
    }

    fn start(boot: u64, recovering: bool, refused: &[u64]) -> FakeStart {
        FakeStart {
            boot,
            recovering,
            ack_early: false,
            refused: refused.to_vec(),
            seen: Arc::default(),
        }
    }

    /// A connect to a new server start reopens every handle the session holds — after the
    /// replays, before the PING that ends recovery, recovering or not — and a handle the new
    /// start refuses is dead: its uses answer the refusal unsent, its release just forgets
    /// it. A connect to the same start again reopens nothing.
    #[tokio::test]
    async fn a_new_server_start_reopens_every_handle_and_a_refused_one_is_dead() {
        let session = Arc::new(Session::new());
        let rw = OpenFlags {
            read: true,
            write: true,
            truncate: true,
            append: false,
            exec: false,
        };
        let (first, _) = start(1, false, &[]).connect(&session).await;
        let (a, _) = first.open(10, rw).await.unwrap();
        let (b, _) = first.open(20, OpenFlags::default()).await.unwrap();
        assert_eq!((a.id(), b.id(), a.ino()), (1, 2, 10));
        assert_eq!(session.open_handles(), 2);
        drop(first);

        for recovering in [true, false] {
            let boot = if recovering { 2 } else { 3 };
            let (client, seen) = start(boot, recovering, &[b.id()]).connect(&session).await;
            let ops: Vec<Op> = seen.lock().iter().map(|r| r.op.clone()).collect();
            let mut expected = vec![Op::Open {
                ino: 10,
                handle: 1,
                flags: OpenFlags {
                    truncate: false,
                    ..rw
                },
                reopen: true,
            }];
            if recovering {
                // b is alive until this start refuses it.
                expected.push(b.reopen_op());
                expected.push(Op::Ping);
            }
            assert_eq!(ops[1..], expected[..], "recovering: {recovering}");
            assert_eq!(session.handle_error(b), Some(Errno::ESTALE));
            assert_eq!(session.handle_error(a), None);
            assert_eq!(client.read(a, 0, 3).await.unwrap(), [1, 2, 3]);
            let sent = seen.lock().len();
            let refused = client.read(b, 0, 3).await.unwrap_err();
            assert_eq!(refused.errno(), Some(Errno::ESTALE));
            assert_eq!(
                client.write(b, 0, b"x").await.unwrap_err().errno(),
                Some(Errno::ESTALE)
            );
            assert_eq!(seen.lock().len(), sent, "a dead handle's uses are not sent");
        }

        let (again, seen) = start(3, false, &[]).connect(&session).await;
        assert_eq!(seen.lock().len(), 1, "the same start: CONNECT alone");
        again.release(b).await.unwrap();
        assert_eq!(seen.lock().len(), 1, "a dead handle is released unsent");
        again.release(a).await.unwrap();
        assert_eq!(seen.lock()[1].op, Op::Release { handle: 1 });
        assert_eq!(session.open_handles(), 0);
        let (c, _) = again.open(30, OpenFlags::default()).await.unwrap();
        assert_eq!(c.id(), 3, "numbers are never used twice");
        assert_eq!(
            again
                .read(c, 0, MAX_IO as u32 + 1)
                .await
                .unwrap_err()
                .errno(),
            Some(Errno::EINVAL),
            "more than MAX_IO is refused unsent"
        );
    }

    /// A request sent on behalf of other credentials than the session's carries them, and so
    /// does its replay after a restart: what it created stays its caller's (regression guard
    /// for the mount, whose requests each carry their caller's credentials).
    #[tokio::test]
    async fn a_request_sent_as_a_caller_carries_its_credentials_into_its_replay() {
        let mine = Cred {
            uid: 7,
            gid: 7,
            groups: vec![],
        };
        let caller = Cred {
            uid: 1000,
            gid: 100,
            groups: vec![10, 20],
        };
        let session = Arc::new(Session::with_cred(mine.clone()));
        let (first, seen) = FakeStart {
            ack_early: true,
            ..start(1, false, &[])
        }
        .connect(&session)
        .await;
        let create = Op::Create {
            parent: 1,
            name: "f".into(),
            mode: 0o644,
        };
        first.call_as(&caller, create.clone()).await.unwrap();
        first.ping().await.unwrap();
        {
            let sent = seen.lock();
            assert_eq!(
                (sent[1].op.clone(), &sent[1].cred),
                (create.clone(), &caller)
            );
            assert_eq!(
                sent[2].cred, mine,
                "the session's own requests keep its credentials"
            );
        }
        assert_eq!(session.unsafe_count(), 1);
        drop(first);

        let (_second, seen) = FakeStart {
            ack_early: true,
            ..start(2, true, &[])
        }
        .connect(&session)
        .await;
        let sent = seen.lock();
        let replay = sent
            .iter()
            .find(|r| r.replay.is_some())
            .expect("the unsafe CREATE is replayed");
        assert_eq!(replay.op, create);
        assert_eq!(
            replay.cred, caller,
            "the replay carries the original's credentials"
        );
        let r = replay.replay.unwrap();
        assert_eq!((r.transno, r.ino, r.ticket), (5, 42, 9));
    }

    #[test]
    fn paths_split_into_names_and_must_be_absolute() {
        assert_eq!(components("/a//b/c/").unwrap(), vec!["a", "b", "c"]);
        assert!(components("/").unwrap().is_empty());
        assert_eq!(components("a/b").unwrap_err().errno(), Some(Errno::EINVAL));
    }
}
