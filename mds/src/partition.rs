//! A partition: one OS thread bound to one core, running a single-threaded tokio runtime. It
//! owns its connections (accepted on its own SO_REUSEPORT listener), parses, executes and
//! answers their requests on that one thread with no hand-off, owns its queue of pending
//! replies, and is the only writer of its sockets.
//!
//! Hot path (marked as TiKV marks its own): `serve`'s read loop, `handle`, and `drain_loop`.
//! No logging above debug, no lock but the touched inodes' stripes and this partition's own
//! reply queue, one clock read per socket read and one per drain.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use crossbeam_channel::Sender;
use reply::{Outcome, ReplyEngine};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{Notify, Semaphore};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::committer::{CommitMsg, CommitStats};
use crate::metrics::PartitionMetrics;
use crate::namespace::{Exec, Namespace};
use crate::protocol::{
    self, Body, Errno, Op, PROTOCOL_VERSION, Reply, Request, StatFs, encode_frame,
};

/// A reply waiting in the reply engine for its commit.
#[derive(Debug)]
pub struct Payload {
    /// The partition-local connection to answer on.
    conn: u64,
    xid: u64,
    transno: u64,
    /// Opcode, for metrics.
    op: u8,
    /// When the request's bytes were read, for its latency.
    received: quanta::Instant,
    body: Body,
}

/// Bounds that keep one client from hurting the others.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Mutations of one connection waiting for their commit; past it the connection is not
    /// read until replies leave.
    pub max_inflight_per_conn: usize,
    /// Unwritten reply bytes of one connection; past it the client is not reading its replies
    /// and the connection is closed (its requests stay journaled; it may reconnect).
    pub max_output_per_conn: usize,
    /// Open connections per partition; accepting waits for a free slot.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflight_per_conn: 4096,
            max_output_per_conn: 16 << 20,
            max_connections: 8192,
        }
    }
}

/// What all partitions share.
pub struct Shared {
    pub namespace: Arc<Namespace>,
    pub engine: Arc<ReplyEngine<Payload>>,
    pub commit_tx: Sender<CommitMsg>,
    pub commit_stats: Arc<CommitStats>,
    /// Identifies this server start (in CONNECT replies).
    pub boot: u64,
    pub partitions: usize,
    pub limits: Limits,
    /// Cancelled at SIGTERM/SIGINT: stop accepting and reading, let pending replies leave.
    pub shutdown: CancellationToken,
}

/// Starts partition `id` on its own thread, pinned to `core` when given.
pub fn spawn(
    id: usize,
    core: Option<core_affinity::CoreId>,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    wake: Arc<Notify>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("mds-part-{id}"))
        .spawn(move || {
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a partition runtime");
            let local = tokio::task::LocalSet::new();
            let partition = Rc::new(Partition {
                id,
                shared,
                conns: RefCell::new(HashMap::new()),
                next_conn: Cell::new(0),
                metrics: PartitionMetrics::register(id),
                active: Cell::new(0),
                idle: Notify::new(),
            });
            local.block_on(&rt, partition.run(listener, wake));
        })
}

struct Partition {
    id: usize,
    shared: Arc<Shared>,
    conns: RefCell<HashMap<u64, Rc<Conn>>>,
    next_conn: Cell<u64>,
    metrics: PartitionMetrics,
    /// Connections still being served; shutdown waits for zero.
    active: Cell<usize>,
    idle: Notify,
}

/// One connection's output side and flow control, shared by its reader, its writer and the
/// partition's drain — all on the partition's thread, hence `Cell`/`RefCell`.
struct Conn {
    id: u64,
    /// Encoded replies not yet handed to the socket.
    out: RefCell<BytesMut>,
    /// Wakes the writer.
    ready: Notify,
    /// Mutations waiting for their commit.
    inflight: Cell<usize>,
    /// Wakes the reader when in-flight mutations leave or the connection breaks.
    space: Notify,
    /// The socket is broken or the connection is winding down.
    closed: Cell<bool>,
    /// Set while the current drain has written to this connection.
    touched: Cell<bool>,
}

/// Per-connection protocol state.
struct Session {
    client: Option<u64>,
}

impl Partition {
    async fn run(self: Rc<Self>, listener: std::net::TcpListener, wake: Arc<Notify>) {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(partition = self.id, cause = %e, "cannot register listener");
                return;
            }
        };
        let drain = tokio::task::spawn_local(self.clone().drain_loop(wake));
        let permits = Arc::new(Semaphore::new(self.shared.limits.max_connections));
        let mut backoff = Duration::from_millis(1);
        loop {
            // Take a connection slot before accepting (mini-redis): at the bound, the kernel's
            // backlog holds new clients instead of this partition drowning in them.
            let permit = tokio::select! {
                _ = self.shared.shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
            };
            let accepted = tokio::select! {
                _ = self.shared.shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(1);
                    tokio::task::spawn_local(self.clone().serve(stream, permit));
                }
                Err(e) => {
                    // Usually EMFILE: back off rather than spin.
                    warn!(partition = self.id, cause = %e, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        drop(listener);
        while self.active.get() > 0 {
            self.idle.notified().await;
        }
        drain.abort();
    }

    async fn serve(self: Rc<Self>, stream: TcpStream, _permit: tokio::sync::OwnedSemaphorePermit) {
        let _ = stream.set_nodelay(true);
        let (mut rd, wr) = stream.into_split();
        let id = self.next_conn.get();
        self.next_conn.set(id + 1);
        let conn = Rc::new(Conn {
            id,
            out: RefCell::new(BytesMut::with_capacity(16 << 10)),
            ready: Notify::new(),
            inflight: Cell::new(0),
            space: Notify::new(),
            closed: Cell::new(false),
            touched: Cell::new(false),
        });
        self.conns.borrow_mut().insert(id, conn.clone());
        self.active.set(self.active.get() + 1);
        self.metrics.connections.increment(1.0);
        self.metrics.accepted.increment(1);
        let writer = tokio::task::spawn_local(write_loop(wr, conn.clone()));

        let mut codec = protocol::codec();
        let mut input = BytesMut::with_capacity(64 << 10);
        let mut session = Session { client: None };
        let mut answered: Vec<(u8, Result<(), Errno>)> = Vec::new();
        let limits = self.shared.limits;
        let mut aborted = false;
        'read: loop {
            while conn.inflight.get() >= limits.max_inflight_per_conn && !conn.closed.get() {
                conn.space.notified().await;
            }
            if conn.closed.get() {
                break;
            }
            let read = tokio::select! {
                biased;
                _ = self.shared.shutdown.cancelled() => break,
                r = rd.read_buf(&mut input) => r,
            };
            match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let received = quanta::Instant::now();
            loop {
                match codec.decode(&mut input) {
                    Ok(Some(frame)) => {
                        if self
                            .handle(&conn, &mut session, &frame, received, &mut answered)
                            .is_err()
                        {
                            break 'read;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // Only an oversized length gets here: the stream cannot be resynced.
                        debug!(partition = self.id, conn = id, cause = %e, "oversized frame");
                        warn!(
                            partition = self.id,
                            conn = id,
                            "closing connection: oversized frame"
                        );
                        self.metrics.oversized.increment(1);
                        reply_now(
                            &conn,
                            0,
                            Err(Errno::EPROTO),
                            self.shared.engine.last_committed(),
                        );
                        break 'read;
                    }
                }
            }
            let replied = quanta::Instant::now();
            for (op, result) in answered.drain(..) {
                self.metrics
                    .request(op as usize, result, replied - received);
            }
            let buffered = conn.out.borrow().len();
            if buffered > 0 {
                conn.ready.notify_one();
            }
            if buffered > limits.max_output_per_conn {
                warn!(
                    partition = self.id,
                    conn = id,
                    buffered,
                    "closing connection: client is not reading its replies"
                );
                self.metrics.slow_clients.increment(1);
                aborted = true;
                break;
            }
        }
        if aborted {
            writer.abort();
        } else {
            // Stop reading; let this connection's pending replies leave before closing.
            if !conn.out.borrow().is_empty() {
                conn.ready.notify_one();
            }
            while conn.inflight.get() > 0 && !conn.closed.get() {
                conn.space.notified().await;
            }
            conn.closed.set(true);
            conn.ready.notify_one();
            let _ = writer.await;
        }
        self.conns.borrow_mut().remove(&id);
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
        conn: &Conn,
        session: &mut Session,
        frame: &[u8],
        received: quanta::Instant,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), ()> {
        let engine = &self.shared.engine;
        let request: Request = match protocol::decode(frame) {
            Ok(r) => r,
            Err(e) => {
                warn!(partition = self.id, conn = conn.id, cause = %e, "closing connection: malformed request");
                self.metrics.malformed.increment(1);
                reply_now(conn, 0, Err(Errno::EPROTO), engine.last_committed());
                return Err(());
            }
        };
        let xid = request.xid;
        let op = request.op.opcode();
        let immediate = |result: Result<Body, Errno>,
                         answered: &mut Vec<(u8, Result<(), Errno>)>| {
            answered.push((op, result.as_ref().map(|_| ()).map_err(|e| *e)));
            reply_now(conn, xid, result, engine.last_committed());
        };
        match (request.op, session.client) {
            (Op::Connect { version, client }, _) => {
                if version != PROTOCOL_VERSION {
                    warn!(
                        partition = self.id,
                        conn = conn.id,
                        version,
                        "closing connection: unsupported protocol version"
                    );
                    self.metrics.handshake.increment(1);
                    immediate(Err(Errno::EPROTO), answered);
                    return Err(());
                }
                session.client = Some(client);
                immediate(
                    Ok(Body::Connected {
                        version: PROTOCOL_VERSION,
                        server_boot: self.shared.boot,
                        partition: self.id as u32,
                    }),
                    answered,
                );
            }
            (_, None) => {
                warn!(
                    partition = self.id,
                    conn = conn.id,
                    "closing connection: request before CONNECT"
                );
                self.metrics.handshake.increment(1);
                immediate(Err(Errno::EPROTO), answered);
                return Err(());
            }
            (Op::Ping, _) => immediate(Ok(Body::Pong), answered),
            (Op::Statfs, _) => immediate(Ok(Body::StatFs(self.statfs())), answered),
            (Op::Sync, _) => {
                let upto = self.shared.namespace.last_transno();
                if upto <= engine.last_committed() {
                    immediate(Ok(Body::Done), answered);
                } else {
                    self.defer(conn, xid, op, upto, received, Body::Done);
                    let _ = self.shared.commit_tx.send(CommitMsg::Flush);
                }
            }
            (op_value, Some(_client)) => match self.shared.namespace.execute(op_value) {
                Exec::Now(result) => immediate(result, answered),
                Exec::Mutation {
                    transno,
                    record,
                    body,
                } => {
                    self.defer(conn, xid, op, transno, received, body);
                    let _ = self.shared.commit_tx.send(CommitMsg::Record(record));
                }
            },
        }
        Ok(())
    }

    /// Queues a reply until `transno` is durable.
    fn defer(
        &self,
        conn: &Conn,
        xid: u64,
        op: u8,
        transno: u64,
        received: quanta::Instant,
        body: Body,
    ) {
        conn.inflight.set(conn.inflight.get() + 1);
        self.shared.engine.push(
            self.id,
            transno,
            Payload {
                conn: conn.id,
                xid,
                transno,
                op,
                received,
                body,
            },
        );
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
        }
    }

    /// Waits for the committer's wakes and releases this partition's committed replies: one
    /// queue-lock acquisition per drain, each reply encoded into its connection's buffer, one
    /// write per connection per drain.
    async fn drain_loop(self: Rc<Self>, wake: Arc<Notify>) {
        let mut touched: Vec<Rc<Conn>> = Vec::new();
        loop {
            wake.notified().await;
            let started = quanta::Instant::now();
            let engine = &self.shared.engine;
            let released = {
                let conns = self.conns.borrow();
                engine.drain(self.id, |p: Payload, outcome| {
                    let (result, last_committed) = match outcome {
                        Outcome::Committed { last_committed } => (Ok(p.body), last_committed),
                        Outcome::Failed => (Err(Errno::EIO), engine.last_committed()),
                    };
                    self.metrics.request(
                        p.op as usize,
                        result.as_ref().map(|_| ()).map_err(|e| *e),
                        started - p.received,
                    );
                    let Some(conn) = conns.get(&p.conn) else {
                        return; // the connection broke; its reply has nowhere to go
                    };
                    conn.inflight.set(conn.inflight.get() - 1);
                    let reply = Reply {
                        xid: p.xid,
                        transno: if result.is_ok() { p.transno } else { 0 },
                        last_committed,
                        result,
                    };
                    encode_frame(&reply, &mut conn.out.borrow_mut());
                    if !conn.touched.replace(true) {
                        touched.push(conn.clone());
                    }
                })
            };
            for conn in touched.drain(..) {
                conn.touched.set(false);
                conn.ready.notify_one();
                conn.space.notify_one();
            }
            self.metrics.drain_wakes.increment(1);
            self.metrics.drain_replies.record(released as f64);
            // From the commit being durable to its replies being queued for their sockets.
            let durable = self
                .shared
                .commit_stats
                .durable_at_ns
                .load(Ordering::Acquire);
            let spent = crate::metrics::monotonic_ns().saturating_sub(durable);
            self.metrics.drain_duration.record(spent as f64 / 1e9);
            self.metrics.queue_depth.set(engine.depth(self.id) as f64);
        }
    }
}

/// Queues an immediate reply on `conn`.
fn reply_now(conn: &Conn, xid: u64, result: Result<Body, Errno>, last_committed: u64) {
    let reply = Reply {
        xid,
        transno: 0,
        last_committed,
        result,
    };
    encode_frame(&reply, &mut conn.out.borrow_mut());
}

/// Writes whatever the connection's buffer holds, one `write_all` per wake, swapping two
/// buffers so neither is reallocated.
async fn write_loop(mut wr: OwnedWriteHalf, conn: Rc<Conn>) {
    let mut spare = BytesMut::with_capacity(16 << 10);
    loop {
        {
            let mut out = conn.out.borrow_mut();
            if !out.is_empty() {
                std::mem::swap(&mut *out, &mut spare);
            }
        }
        if !spare.is_empty() {
            if wr.write_all(&spare).await.is_err() {
                conn.closed.set(true);
                conn.space.notify_one();
                return;
            }
            spare.clear();
            continue;
        }
        if conn.closed.get() {
            break;
        }
        conn.ready.notified().await;
    }
    let _ = wr.shutdown().await;
}
