//! The client library's connection: one TCP (or TLS) stream, many requests in flight,
//! replies matched by xid.
//!
//! Callers on any task or thread share one [`Client`] (it is cheap to clone); each call
//! encodes its request into a shared output buffer and waits on its own reply slot; the
//! connection's reader and writer tasks (`connection.rs`) move the bytes. Xids come from
//! the connection's [`Session`], which outlives it when the caller reconnects, and so do the
//! handles of the files it opens: a connect that reaches a new server start reopens them
//! after its replays. A request carries the session's credentials, or a caller's own
//! ([`Client::call_as`]: a mount sends each with its caller's). This file owns connecting,
//! the handshake and what follows it, and sending; the typed operations are in `ops.rs`,
//! path resolution in `paths.rs`.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs};

use mds_proto::{Body, Cred, NONCE_LEN, Op, PROTOCOL_VERSION, Replay, Reply};

use crate::auth::{AuthKey, SessionSecret};
use crate::connection::{Connection, Tasks};
use crate::error::{ClientError, Result, unexpected};
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

/// A connection to an mds server.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Connection>,
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
    /// handshake: CONNECT, and if the server challenges it, AUTHENTICATE with `key`. Then
    /// the session takes in the server start it reached, and gets back there what it holds.
    async fn start<R, W>(
        rd: R,
        wr: W,
        session: Arc<Session>,
        key: Option<&AuthKey>,
    ) -> Result<Client>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let inner = Arc::new(Connection::new(session));
        let tasks = Tasks::spawn(&inner, rd, wr);
        let mut client = Client {
            inner,
            _tasks: Arc::new(tasks),
            server_boot: 0,
            partition: 0,
        };
        let reply = client.handshake(key).await?;
        client.take_connected(reply).await?;
        Ok(client)
    }

    /// CONNECT, and AUTHENTICATE if the server challenges it: the reply that ends the
    /// handshake, `Connected` or the server's refusal.
    async fn handshake(&self, key: Option<&AuthKey>) -> Result<Reply> {
        let reply = self.call_reply(connect_op(self.session())).await?;
        match reply.result {
            Ok(Body::Challenge {
                nonce,
                key: key_wanted,
                session: session_wanted,
            }) => {
                let wanted = Wanted {
                    key: key_wanted,
                    session: session_wanted,
                };
                self.authenticate(&nonce, wanted, key).await
            }
            _ => Ok(reply),
        }
    }

    /// Answers the CONNECT's challenge: AUTHENTICATE with the proofs the server wants over
    /// this connection's `nonce`.
    async fn authenticate(
        &self,
        nonce: &[u8; NONCE_LEN],
        wanted: Wanted,
        key: Option<&AuthKey>,
    ) -> Result<Reply> {
        let session = self.session();
        // Prove what the server asks for over this connection's nonce: the shared key (a
        // server started with one), and the session secret (a reconnect of an identity
        // whose session the server keeps). A server that wants neither answers CONNECT
        // at once, and a client with a key connects anyway.
        let proof = match (wanted.key, session.peer_key(), key) {
            (false, _, _) => None,
            (true, Some(peer), _) => Some(peer.proof(nonce, session.id(), PROTOCOL_VERSION)),
            (true, None, Some(key)) => Some(key.proof(nonce, session.id(), PROTOCOL_VERSION)),
            (true, None, None) => return Err(ClientError::AuthRequired),
        };
        // Without the secret, no proof: the server refuses it and says so.
        let session_proof = wanted
            .session
            .then(|| session.secret().map(|s| s.proof(nonce, session.id())))
            .flatten();
        self.call_reply(Op::Authenticate {
            proof,
            session: session_proof,
        })
        .await
    }

    /// Takes in the handshake's answer: the server start and partition this connection
    /// reached, and the session's secret if the server issued one. Then replays to that
    /// start what the session must, and reopens its handles.
    async fn take_connected(&mut self, reply: Reply) -> Result<()> {
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
                self.server_boot = server_boot;
                self.partition = partition;
                let session = self.session();
                if let Some(secret) = session_secret {
                    session.set_secret(SessionSecret::from_bytes(secret));
                }
                let replay = session.connected(server_boot, ack_early, evicted, last_committed);
                self.inner.handshake_done();
                self.replay(replay, recovering).await
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
        let count = replays.requests.len();
        if recovering || replays.same_start {
            if count > 0 {
                tracing::info!(requests = count, "replaying what was answered early");
            }
            self.replay_unsafe(replays).await?;
        } else {
            if count > 0 {
                tracing::warn!(
                    requests = count,
                    "the server restarted and no longer waits for this client (evicted, or its \
                     recovery window closed): changes it answered early are lost"
                );
            }
            for (transno, request) in replays.requests {
                self.session().lose(transno, request);
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
                let session = client.session();
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
        let session = self.session();
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
        if let Some(errno) = self.inner.refusal() {
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
        let acked_xid = self.session().acked_xid();
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
        let (xid, acked_xid) = self.session().begin_for(&op);
        let reply = self.send(xid, acked_xid, &op, cred).await;
        if reply.is_err() {
            // Nobody will resend it (that is `send_as`): it must not hold the session's
            // watermark below it for good — the server would keep every later resend
            // record, and refuse the session's mutations once it keeps its cap of them.
            self.session().finish(xid);
        }
        reply
    }

    /// Sends `op` with an xid the session already handed out (`Session::begin`): the first
    /// send of a request that may need resending, or its resend after a reconnect.
    pub async fn send_as(&self, xid: u64, op: Op) -> Result<Reply> {
        let acked_xid = self.session().acked_xid();
        self.send(xid, acked_xid, &op, None).await
    }

    /// As [`Client::send_as`], with `cred` instead of the session's credentials (a resend
    /// must carry the ones its first send did).
    /// The op is borrowed: a resend sends the same one again. One future, not three nested
    /// ones: each layer of `async fn` is polled at the send and again at the reply (~150
    /// instructions a request through `send` and `send_request`, counted).
    pub async fn send_with_cred(&self, xid: u64, cred: &Cred, op: &Op) -> Result<Reply> {
        let acked_xid = self.session().acked_xid();
        self.session().sending(xid, op, cred);
        let reply = self.inner.enqueue(xid, acked_xid, op, cred, None)?;
        reply.await.ok_or_else(|| self.inner.gone())
    }

    /// Sends with `cred`, or the session's credentials if `None`.
    async fn send(&self, xid: u64, acked_xid: u64, op: &Op, cred: Option<&Cred>) -> Result<Reply> {
        let cred = cred.unwrap_or(self.session().cred());
        self.session().sending(xid, op, cred);
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
        let reply = self.inner.enqueue(xid, acked_xid, op, cred, replay)?;
        reply.await.ok_or_else(|| self.inner.gone())
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
        self.inner.last_committed()
    }

    /// The session this connection belongs to.
    pub fn session(&self) -> &Arc<Session> {
        self.inner.session()
    }

    /// Identifies the server start this connection reached.
    pub fn server_boot(&self) -> u64 {
        self.server_boot
    }

    /// The server partition serving this connection.
    pub fn partition(&self) -> u32 {
        self.partition
    }
}

/// The handshake's first request: CONNECT as `session`'s client. A server connecting to
/// another of its cluster says so (PEER_CONNECT), and proves the cluster's peer secret
/// instead of the shared key.
fn connect_op(session: &Session) -> Op {
    match session.peer_key() {
        Some(_) => Op::PeerConnect {
            version: PROTOCOL_VERSION,
            client: session.id(),
        },
        None => Op::Connect {
            version: PROTOCOL_VERSION,
            client: session.id(),
            atime: session.atime(),
            ack: session.ack_asked(),
        },
    }
}

/// What the server's challenge of the CONNECT asks to be proved.
#[derive(Clone, Copy)]
struct Wanted {
    /// The shared key (or, from a server of the cluster, the peer secret).
    key: bool,
    /// The secret of the session the server keeps for this identity.
    session: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use mds_proto::{
        self as protocol, Attr, DirEntry, Errno, Kind, MAX_IO, OpenFlags, Request, encode_frame,
    };
    use tokio_util::codec::FramedRead;

    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use bytes::BytesMut;
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
            blocks: 0,
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
}
