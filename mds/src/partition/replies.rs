//! Where replies wait for their commit, behind one interface for the two designs the server can
//! run (`--reply-path`): the per-CPU reply engine (each partition's own queue, drained by its
//! owner or a partner, one wake per partition per commit), or the global baseline (one
//! service-wide locked list, a pool of service threads all woken at each commit). Partitions
//! push, the committer publishes, and the rest of the server reads `last_committed` and the
//! depths without knowing which design it runs.

use std::sync::Arc;

use reply::{GlobalReplies, ReplyEngine, Waker};
use tokio::sync::Notify;

use super::Payload;
use crate::committer::CommitListener;

/// Which design holds pending replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
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
    PerCpu(ReplyEngine<Payload>),
    Global {
        /// Each payload with the partition it came from: its metrics are that partition's.
        list: GlobalReplies<(usize, Payload)>,
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
        list: GlobalReplies<(usize, Payload)>,
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
    pub fn push(&self, partition: usize, transno: u64, payload: Payload) {
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
    pub fn engine(&self) -> Option<&ReplyEngine<Payload>> {
        match self {
            Replies::PerCpu(engine) => Some(engine),
            Replies::Global { .. } => None,
        }
    }

    /// The global list, when that is the design running.
    pub fn global_list(&self) -> Option<&GlobalReplies<(usize, Payload)>> {
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
