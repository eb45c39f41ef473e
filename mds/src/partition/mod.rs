//! A partition: one OS thread bound to one core, running a single-threaded tokio runtime. It
//! owns its connections (accepted on its own SO_REUSEPORT listener), reads their requests and
//! has them dispatched (`dispatch/mod.rs`) on that one thread with no hand-off, delivers the
//! answers, owns its queue of pending replies, and runs the writer task of each of its sockets
//! (a drain on any thread may send to a socket directly while its writer is idle: `output.rs`).
//!
//! Hot path (marked as TiKV marks its own): the read loop and `deliver` in `partition/serve/mod.rs`,
//! `dispatch`, and the drain in `drain.rs`. No logging above debug, no lock but the touched inodes' stripes, the
//! session's and the connection's own small locks, and this partition's reply queue; one clock
//! read per socket read and one per drain.

mod admission;
mod drain;
mod serve;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::auth::Authenticator;
use crate::dispatch::Core;
use crate::metrics::PartitionMetrics;
use crate::output::ConnOutput;

pub use admission::Unauthenticated;

use crate::config::{CredCheck, Limits};
pub use drain::{DrainWakes, drain_partition, serve_global};

/// What all partitions share: the [`Core`] that dispatch needs, the client port's settings,
/// the drains' wakes, and the shutdown's two steps.
pub struct Shared {
    pub core: Core,
    pub net: Net,
    /// The per-CPU path's drain wakes, and the partner draining they drive.
    pub wakes: Arc<DrainWakes>,
    /// Notified after each drain (per-CPU) or commit (global): commits made progress
    /// (readers paused on `max_uncommitted` look again).
    pub progress: Arc<Notify>,
    /// Cancelled at the first SIGTERM/SIGINT: stop accepting and reading, let pending replies
    /// leave.
    pub shutdown: CancellationToken,
    /// Cancelled when the shutdown grace period is over, or at a second signal: writers stop
    /// whether their clients read or not.
    pub cut: CancellationToken,
}

/// The client port's settings: who may connect, and the bounds on each connection.
pub struct Net {
    pub limits: Limits,
    /// The shared key CONNECT must prove (`--auth-key`); none: anyone may connect.
    pub auth: Option<Authenticator>,
    /// TLS on the client port (`--tls-cert`); none: plain TCP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Connections that have not completed their handshake, by address.
    pub unauthenticated: Unauthenticated,
    /// Whose credentials a request may carry (`--cred-check`).
    pub cred_check: CredCheck,
    /// Identifies this server start (in CONNECT replies).
    pub boot: u64,
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
            let limits = shared.net.limits;
            let partition = Rc::new(Partition {
                id,
                shared,
                metrics: PartitionMetrics::register(id),
                connections: TaskTracker::new(),
                touched: RefCell::new(Vec::new()),
                slots: Arc::new(Semaphore::new(limits.max_connections)),
            });
            local.block_on(&rt, partition.run(listener));
            drop(done);
        })
}

struct Partition {
    id: usize,
    shared: Arc<Shared>,
    metrics: PartitionMetrics,
    /// Connections still being served, each a task it tracks: shutdown waits for them all.
    connections: TaskTracker,
    /// Scratch of the drains run on this thread: the connections they appended to.
    touched: RefCell<Vec<Arc<ConnOutput>>>,
    /// Connection slots: one per connection that completed its handshake.
    slots: Arc<Semaphore>,
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
            .core
            .replies
            .per_cpu_engine()
            .map(|_| tokio::task::spawn_local(self.clone().drain_loop()));
        let refused = Self::refusal_counters();
        let mut backoff = Duration::from_millis(1);
        loop {
            let accepted = tokio::select! {
                () = self.shared.shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(1);
                    // A handshake slot of its own, and one of its address's and prefix's: a
                    // connection takes a connection slot only once it has proved itself
                    // (`serve/handshake.rs`), so unauthenticated ones never crowd out
                    // clients.
                    match self.handshake_slot(peer) {
                        Ok((slot, evicted)) => {
                            if evicted {
                                // The oldest connection in its handshake closes for it.
                                refused.count_eviction();
                            }
                            // What a poll of the connection sends the committer leaves as
                            // one message: one hand-off a read, not one a request.
                            let served = self
                                .shared
                                .core
                                .commit_tx
                                .gathering(self.clone().accept(stream, peer, slot));
                            self.connections.spawn_local(served);
                        }
                        Err(why) => {
                            // Full: say so and close, rather than leave the client hanging in
                            // the kernel's backlog with no idea why.
                            warn!(partition = self.id, %peer, "refusing connection: {}", why.describe(&self.shared.net.limits));
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
        self.connections.close();
        self.connections.wait().await;
        if let Some(drain) = drain {
            // Replies still queued here may leave through another partition's connection (a
            // client that reconnected there and resent), and commit notices settle clients
            // that have left: the drain goes on until the queue is empty, or until the
            // connections are cut.
            loop {
                let progress = self.shared.progress.notified();
                if self.shared.core.replies.depth(self.id) == 0 {
                    break;
                }
                tokio::select! {
                    () = self.shared.cut.cancelled() => break,
                    () = progress => {}
                }
            }
            drain.abort();
        }
    }
}
