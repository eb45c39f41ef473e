//! The reply queue: where replies wait for their commit, behind one interface for the two
//! designs the server can run (`--reply-path`): the per-CPU reply engine (each partition's own
//! queue, drained by its owner or a partner, one wake per partition per commit), or the global
//! baseline (one service-wide locked list, a pool of service threads all woken at each
//! commit). Partitions push, the committer publishes, and the rest of the server reads
//! `last_committed` and the depths without knowing which design it runs.
//!
//! What waits is a [`Queued`]: a [`HeldReply`] — a [`Response`] with the guard that counts it
//! in flight on the connection it came in on — or a commit notice owed to a session.

use std::sync::Arc;

use mds_proto::{Body, Errno};
use reply::{GlobalReplies, ReplyEngine, Waker};
use tokio::sync::Notify;

use crate::committer::CommitListener;
use crate::output::InFlight;
use crate::session::Session;

/// An encoded reply body (see [`Response::encoded`]): the type of the resend record's copy,
/// so that one is the other's clone.
pub type EncodedBody = journal::ReplyBytes;

/// A reply as dispatch decided it, before it is encoded: the wire `Reply` gets
/// `last_committed` when it is appended.
#[derive(Debug, PartialEq)]
pub struct Response {
    pub xid: u64,
    /// Opcode, for metrics.
    pub op: u8,
    /// The transno the reply reports (0 for reads and errors).
    pub transno: u64,
    pub result: Result<Body, Errno>,
    /// The replay ticket of an early reply (0: none).
    pub ticket: u64,
    /// An executed mutation's body as `mds_proto::encode` wrote it for its resend record: its
    /// reply is framed around these bytes (`mds_proto::encode_reply_frame`), not encoded again.
    /// Inline up to `journal::REPLY_INLINE` bytes (an attribute body is ~40): a copy, no allocation.
    pub encoded: Option<EncodedBody>,
}

impl Response {
    pub fn new(xid: u64, op: u8, transno: u64, result: Result<Body, Errno>) -> Response {
        Response {
            xid,
            op,
            transno,
            result,
            ticket: 0,
            encoded: None,
        }
    }

    /// About how many bytes it takes as a reply on the wire, for the output bound of a reply
    /// held for another client's commit: a READDIR page by its names, anything else as a
    /// small reply.
    pub fn size_hint(&self) -> usize {
        match &self.result {
            Ok(Body::Entries { entries, next }) => {
                // Per entry a name with its length, an inode number and a kind.
                let names: usize = entries.iter().map(|e| e.name.len() + 12).sum();
                names + next.as_ref().map_or(0, String::len) + 32
            }
            _ => 64,
        }
    }
}

/// What waits in the reply queue for a commit. Everything needed to deliver it is here and
/// `Send`, so any thread may release it: the owner's drain, or a partner's.
#[derive(Debug)]
// Not boxed: it already lives in the reply engine's per-reply allocation; a box would add a
// second allocation to every mutation (the reply's body, kept inline, makes it large).
#[allow(clippy::large_enum_variant)]
pub enum Queued {
    /// A reply held back until the commit it depends on is durable.
    Reply(HeldReply),
    /// An early reply with this transno was sent before its commit: the session's client is
    /// owed a commit notice, and may be forgotten by the journal once it is durable.
    Notice { session: Arc<Session>, transno: u64 },
    /// Someone waits for its transno to be durable ([`crate::dispatch::Core::durable`]):
    /// told true once it is, false if the journal failed first.
    Durable(tokio::sync::oneshot::Sender<bool>),
}

/// A reply held back until the commit it depends on is durable.
#[derive(Debug)]
pub struct HeldReply {
    /// The client's session: the reply goes to the client's connection at release time,
    /// which is a newer one if the client reconnected meanwhile.
    pub session: Arc<Session>,
    /// Counts it in flight on the connection it came in on until it is appended (wherever
    /// that is); a reply held by commit-on-share also counts its bytes against that
    /// connection's output bound meanwhile.
    pub inflight: InFlight,
    pub response: Response,
    /// When the request's bytes were read, for its latency.
    pub received: quanta::Instant,
    /// A read or an error held back by commit-on-share (counted in a gauge while it waits).
    pub cos: bool,
}

/// Which design holds pending replies.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReplyPath {
    /// A queue per partition, drained by its own thread (or a partner) when a commit wakes it.
    PerCpu,
    /// One service-wide mutex-protected list and one condition variable, drained by
    /// `--service-threads` threads that the commit wakes together: the 2008 design, kept to
    /// measure against.
    Global,
}

/// Pending replies, in whichever design the server runs.
pub enum Replies {
    PerCpu(ReplyEngine<Queued>),
    Global {
        /// Each payload with the partition it came from: its metrics are that partition's.
        list: GlobalReplies<(usize, Queued)>,
        /// What the per-CPU drains notify after each drain; here, each commit.
        progress: Arc<Notify>,
        partitions: usize,
    },
}

impl Replies {
    /// The per-CPU engine, with one waker per partition.
    pub fn per_cpu(wakers: Vec<Waker>, last_committed: u64) -> Replies {
        Replies::PerCpu(ReplyEngine::new(wakers, last_committed))
    }

    /// The global list; `list` carries its lock-wait observer, if any.
    pub fn global(
        list: GlobalReplies<(usize, Queued)>,
        progress: Arc<Notify>,
        partitions: usize,
    ) -> Replies {
        Replies::Global {
            list,
            progress,
            partitions,
        }
    }

    /// Queues `payload` of `partition` until `transno` is durable.
    pub fn push(&self, partition: usize, transno: u64, payload: Queued) {
        match self {
            Replies::PerCpu(engine) => {
                engine.push(partition, transno, payload);
            }
            Replies::Global { list, .. } => list.push(transno, (partition, payload)),
        }
    }

    /// The newest `last_committed` the committer published.
    pub fn last_committed(&self) -> u64 {
        match self {
            Replies::PerCpu(engine) => engine.last_committed(),
            Replies::Global { list, .. } => list.last_committed(),
        }
    }

    /// Replies waiting in `partition`'s queue (the global list is counted as partition 0's).
    pub fn depth(&self, partition: usize) -> usize {
        match self {
            Replies::PerCpu(engine) => engine.depth(partition),
            Replies::Global { list, .. } if partition == 0 => list.depth(),
            Replies::Global { .. } => 0,
        }
    }

    /// Replies waiting, all partitions.
    pub fn total_depth(&self) -> usize {
        match self {
            Replies::PerCpu(engine) => engine.total_depth(),
            Replies::Global { list, .. } => list.depth(),
        }
    }

    /// The per-CPU engine, when that is the design running.
    pub fn per_cpu_engine(&self) -> Option<&ReplyEngine<Queued>> {
        match self {
            Replies::PerCpu(engine) => Some(engine),
            Replies::Global { .. } => None,
        }
    }

    /// The global list, when that is the design running.
    pub fn global_list(&self) -> Option<&GlobalReplies<(usize, Queued)>> {
        match self {
            Replies::PerCpu(_) => None,
            Replies::Global { list, .. } => Some(list),
        }
    }

    /// Partitions served (for the global list, what service threads attribute metrics to).
    pub fn partitions(&self) -> Option<usize> {
        match self {
            Replies::PerCpu(_) => None,
            Replies::Global { partitions, .. } => Some(*partitions),
        }
    }
}

impl CommitListener for Replies {
    fn committed(&self, last_committed: u64) {
        match self {
            Replies::PerCpu(engine) => engine.publish(last_committed),
            Replies::Global { list, progress, .. } => {
                list.publish(last_committed);
                progress.notify_waiters();
            }
        }
    }

    fn failed(&self) {
        match self {
            Replies::PerCpu(engine) => engine.fail(),
            Replies::Global { list, progress, .. } => {
                list.fail();
                progress.notify_waiters();
            }
        }
    }
}
