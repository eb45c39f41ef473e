//! A partition: one OS thread bound to one core, running a single-threaded tokio runtime. It
//! owns its connections (accepted on its own SO_REUSEPORT listener), parses, executes and
//! answers their requests on that one thread with no hand-off, owns its queue of pending
//! replies, and is the only writer of its sockets.
//!
//! Hot path (marked as TiKV marks its own): the read loop and `handle` in `serve.rs`, and the
//! drain in `drain.rs`. No logging above debug, no lock but the touched inodes' stripes, the
//! session's and the connection's own small locks, and this partition's reply queue; one clock
//! read per socket read and one per drain.

mod admission;
mod conn;
mod drain;
mod replies;
mod serve;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crossbeam_channel::Sender;
use mds_proto::{Body, Errno};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::auth::Authenticator;
use crate::committer::{CommitMsg, CommitStats};
use crate::metrics::PartitionMetrics;
use crate::namespace::Namespace;
use crate::recovery::Recovery;
use crate::session::{Session, Sessions};

pub use admission::{CredCheck, Unauthenticated};
pub use conn::ConnOutput;
pub use drain::{DrainWakes, drain_partition, serve_global};
pub use replies::{Replies, ReplyPath};

/// What waits in the reply engine for a commit. Everything needed to deliver it is here and
/// `Send`, so any thread may release it: the owner's drain, or a partner's.
#[derive(Debug)]
pub struct Payload {
    /// The client's session: what is released goes to the client's connection at release
    /// time, which is a newer one if the client reconnected meanwhile.
    session: Arc<Session>,
    what: Waiting,
}

#[derive(Debug)]
// Not boxed: the whole payload already lives in the reply engine's per-reply allocation; a box
// would add a second allocation to every mutation.
enum Waiting {
    /// A reply held back until the commit.
    Reply(HeldReply),
    /// An early reply with this transno was sent before its commit: its client is owed a
    /// commit notice, and may be forgotten by the journal once it is durable.
    Notice(u64),
}

/// A reply held back until the commit it depends on is durable.
#[derive(Debug)]
struct HeldReply {
    /// The connection the request came in on: its in-flight count.
    origin: Arc<ConnOutput>,
    xid: u64,
    transno: u64,
    /// Opcode, for metrics.
    op: u8,
    /// When the request's bytes were read, for its latency.
    received: quanta::Instant,
    result: Result<Body, Errno>,
    /// A read or an error held back by commit-on-share (counted in a gauge while it waits).
    cos: bool,
    /// The replay ticket of an early reply (0: none).
    ticket: u64,
    /// The bytes this reply counts against its connection's output bound while it waits
    /// (`ConnOutput::hold`): a READDIR page held for another client's commit is as much
    /// output as one buffered.
    held_bytes: usize,
}

impl Payload {
    fn notice(session: &Arc<Session>, transno: u64) -> Payload {
        Payload {
            session: session.clone(),
            what: Waiting::Notice(transno),
        }
    }
}

/// Bounds that keep one client from hurting the others.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Mutations of one connection waiting for their commit; past it the connection is not
    /// read until replies leave.
    pub max_inflight_per_conn: usize,
    /// Unwritten reply bytes of one connection past which its requests are no longer
    /// executed, even within one read, until its writer has brought it below half of this.
    pub output_high_water: usize,
    /// How long a connection may stay above its high-water mark without its writer making
    /// room: past it the client is not reading its replies and is cut (its requests stay
    /// journaled; it may reconnect and resend).
    pub output_stall: Duration,
    /// Open connections per partition; accepting waits for a free slot.
    pub max_connections: usize,
    /// Mutations executed but not durable yet, server-wide, past which no partition executes
    /// another request until commits catch up: memory stays bounded when the disk (or a
    /// RocksDB write stall) is slower than the clients.
    pub max_uncommitted: u64,
    /// How long a new connection may take to send CONNECT.
    pub connect_deadline: Duration,
    /// How long a connection with nothing in flight may stay silent before it is closed.
    pub idle_timeout: Duration,
    /// Connections per partition that have not completed their handshake (TLS, CONNECT and
    /// its proof): bounded apart from `max_connections`, so a flood of them never takes a
    /// slot an authenticated client needs.
    pub max_unauthenticated: usize,
    /// Connections from one address that have not completed their handshake, server-wide.
    pub max_unauthenticated_per_address: usize,
    /// Resend records one session keeps (its client's executed mutations whose replies it
    /// has not acknowledged); past it the session's mutations are refused with EBUSY.
    pub max_resend_records: usize,
    /// Inode numbers the journal makes room for above the server's inode counter, each
    /// commit (`journal::Leases::inos`): what a crash may skip, and how far failed creates may
    /// burn numbers before the ceiling must be raised on its own.
    pub ino_lease: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflight_per_conn: 4096,
            output_high_water: 1 << 20,
            output_stall: Duration::from_secs(30),
            max_connections: 8192,
            max_uncommitted: 1 << 16,
            connect_deadline: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_unauthenticated: 1024,
            max_unauthenticated_per_address: 64,
            max_resend_records: crate::session::DEFAULT_MAX_RECORDS,
            ino_lease: journal::Leases::default().inos,
        }
    }
}

/// What all partitions share.
pub struct Shared {
    pub namespace: Arc<Namespace>,
    /// Pending replies: the per-CPU engine or the global baseline (`--reply-path`).
    pub engine: Arc<Replies>,
    /// The per-CPU path's drain wakes, and the partner draining they drive.
    pub wakes: Arc<DrainWakes>,
    pub commit_tx: Sender<CommitMsg>,
    pub commit_stats: Arc<CommitStats>,
    pub sessions: Arc<Sessions>,
    /// Commit-on-share is on (`--cos on`).
    pub cos: bool,
    /// Mutations are answered before their commit (`--ack early`).
    pub ack_early: bool,
    /// The recovery window after a restart (closed at once when no client is known).
    pub recovery: Recovery,
    /// Requests that built on another client's uncommitted change (STATFS reports it).
    pub cos_conflicts: AtomicU64,
    /// Identifies this server start (in CONNECT replies).
    pub boot: u64,
    pub partitions: usize,
    pub limits: Limits,
    /// Cancelled at the first SIGTERM/SIGINT: stop accepting and reading, let pending replies
    /// leave.
    pub shutdown: CancellationToken,
    /// Cancelled when the shutdown grace period is over, or at a second signal: writers stop
    /// whether their clients read or not.
    pub cut: CancellationToken,
    /// Notified after each drain (per-CPU) or commit (global): commits made progress
    /// (readers paused on `max_uncommitted` look again).
    pub progress: Arc<Notify>,
    /// The shared key CONNECT must prove (`--auth-key`); none: anyone may connect.
    pub auth: Option<Authenticator>,
    /// TLS on the client port (`--tls-cert`); none: plain TCP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Makes the replay tickets of early replies.
    pub replay_key: crate::ticket::ReplayKey,
    /// Connections that have not completed their handshake, by address.
    pub unauthenticated: Unauthenticated,
    /// Whose credentials a request may carry (`--cred-check`).
    pub cred_check: CredCheck,
}

impl Shared {
    /// Whether executed-but-not-durable mutations have reached `max_uncommitted`.
    pub fn over_uncommitted_cap(&self) -> bool {
        // Skipped or replayed transnos may put `last_committed` ahead for a moment.
        self.namespace
            .last_transno()
            .saturating_sub(self.engine.last_committed())
            >= self.limits.max_uncommitted
    }

    /// Forgets `client`'s session if it is idle, and then the journal's records of it.
    pub fn forget_if_idle(&self, client: u64) {
        self.sessions
            .forget_if_idle(client, || self.to_committer(CommitMsg::DropResend(client)));
    }

    /// Hands a message to the committer. The committer never goes away while partitions run;
    /// if it has, the journal can no longer make anything durable, and waiting would hang
    /// every client: stop the process (fail-stop).
    pub fn to_committer(&self, msg: CommitMsg) {
        if self.commit_tx.send(msg).is_err() {
            error!("the committer is gone; stopping rather than hang every client");
            std::process::abort();
        }
    }
}

/// Starts partition `id` on its own thread, pinned to `core` when given. The thread holds
/// `done` until it ends: the server learns that every partition has finished when the last
/// sender is dropped.
pub fn spawn(
    id: usize,
    core: Option<core_affinity::CoreId>,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    done: tokio::sync::mpsc::Sender<()>,
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
            let limits = shared.limits;
            let partition = Rc::new(Partition {
                id,
                shared,
                metrics: PartitionMetrics::register(id),
                active: Cell::new(0),
                idle: Notify::new(),
                touched: RefCell::new(Vec::new()),
                slots: Arc::new(Semaphore::new(limits.max_connections)),
                handshakes: Arc::new(Semaphore::new(limits.max_unauthenticated)),
            });
            local.block_on(&rt, partition.run(listener));
            drop(done);
        })
}

struct Partition {
    id: usize,
    shared: Arc<Shared>,
    metrics: PartitionMetrics,
    /// Connections still being served; shutdown waits for zero.
    active: Cell<usize>,
    idle: Notify,
    /// Scratch of the drains run on this thread: the connections they appended to.
    touched: RefCell<Vec<Arc<ConnOutput>>>,
    /// Connection slots: one per connection that completed its handshake.
    slots: Arc<Semaphore>,
    /// Handshake slots: one per connection that has not completed its handshake yet.
    handshakes: Arc<Semaphore>,
}

/// Tells a client the server is full (an EBUSY reply with xid 0, which every waiting request
/// of the client library then gets) and closes.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let mut frame = bytes::BytesMut::new();
    mds_proto::encode_frame(
        &mds_proto::Reply::new(0, 0, 0, Err(mds_proto::Errno::EBUSY)),
        &mut frame,
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&frame)).await;
    let _ = stream.shutdown().await;
}

impl Partition {
    async fn run(self: Rc<Self>, listener: std::net::TcpListener) {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                warn!(partition = self.id, cause = %e, "cannot register listener");
                return;
            }
        };
        // On the global path the service threads release replies; partitions only push.
        let drain = self
            .shared
            .engine
            .engine()
            .map(|_| tokio::task::spawn_local(self.clone().drain_loop()));
        let refused = admission::RefusedCounters::register();
        let mut backoff = Duration::from_millis(1);
        loop {
            let accepted = tokio::select! {
                _ = self.shared.shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(1);
                    // A handshake slot of its own, and one of its address's: a connection
                    // takes a connection slot only once it has proved itself
                    // (`serve/handshake.rs`), so unauthenticated ones never crowd out
                    // clients.
                    match self.handshake_slot(peer) {
                        Ok(slot) => {
                            tokio::task::spawn_local(self.clone().accept(stream, peer, slot));
                        }
                        Err(why) => {
                            // Full: say so and close, rather than leave the client hanging in
                            // the kernel's backlog with no idea why.
                            warn!(partition = self.id, %peer, "refusing connection: {}", why.describe(&self.shared.limits));
                            refused.count(why);
                            tokio::task::spawn_local(refuse(stream));
                        }
                    }
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
        if let Some(drain) = drain {
            // Replies still queued here may leave through another partition's connection (a
            // client that reconnected there and resent), and commit notices settle clients
            // that have left: the drain goes on until the queue is empty, or until the
            // connections are cut.
            loop {
                let progress = self.shared.progress.notified();
                if self.shared.engine.depth(self.id) == 0 {
                    break;
                }
                tokio::select! {
                    _ = self.shared.cut.cancelled() => break,
                    _ = progress => {}
                }
            }
            drain.abort();
        }
    }
}
