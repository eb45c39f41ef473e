//! What dispatch needs of the server, shared by every partition ([`Core`]): the namespace,
//! the reply queue's `last_committed`, the committer's channel, the sessions, the recovery
//! window, the two modes and, in a cluster, the view of the other shards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mds_proto::StatFs;

use crate::committer::{CommitMsg, CommitStats, ToCommitter};
use crate::config::{Ack, Cos};
use crate::metrics::PartitionMetrics;
use crate::namespace::Namespace;
use crate::queue::{Queued, Replies};
use crate::recovery::Recovery;
use crate::session::Sessions;
use crate::ticket::ReplayKey;

/// File data written by mutations not durable yet past which no request is executed until a
/// commit makes room: memory holds that data (`namespace/ops/data.rs`) until then.
pub const MAX_PENDING_DATA: u64 = 64 << 20;

/// What dispatch needs of the server, shared by every partition.
pub struct Core {
    pub namespace: Arc<Namespace>,
    /// Pending replies: the per-CPU engine or the global baseline (`--reply-path`); dispatch
    /// reads its `last_committed`.
    pub replies: Arc<Replies>,
    pub commit_tx: ToCommitter,
    pub commit_stats: Arc<CommitStats>,
    pub sessions: Arc<Sessions>,
    pub cos: Cos,
    pub ack: Ack,
    /// The recovery window after a restart (closed at once when no client is known).
    pub recovery: Recovery,
    /// Makes and checks the replay tickets of early replies.
    pub replay_key: ReplayKey,
    /// Requests that built on another client's uncommitted change (STATFS reports it).
    pub cos_conflicts: AtomicU64,
    /// File locks (GETLK, SETLK): state of the sessions, not of the journal.
    pub locks: crate::locks::Locks,
    /// Partitions served (STATFS reports it).
    pub partitions: usize,
    /// Mutations executed but not durable yet past which no request is executed
    /// (`Limits::max_uncommitted`).
    pub max_uncommitted: u64,
    /// The store's directory: STATFS reports the space of the file system it is on.
    pub store_dir: std::path::PathBuf,
    /// The object store's address as clients open it (`Address::text`); empty: none.
    pub object_store: String,
    /// The view of the cluster this server serves a shard of (`--etcd`): which requests are
    /// another shard's, the shard map SHARD_MAP answers, and the peers. None outside a
    /// cluster.
    pub shard_view: Option<Arc<crate::shard::ShardView>>,
    /// Cancelled at the first SIGTERM (the partitions' `Shared::shutdown`): a request that
    /// waits for no commit, only for news (SHARD_MAP_WAIT), is answered at once, so that its
    /// connection closes with the others.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Core {
    /// Whether executed-but-not-durable mutations have reached `max_uncommitted`, or the
    /// file data they wrote, which memory holds until their commit, `MAX_PENDING_DATA`.
    pub fn over_uncommitted_cap(&self) -> bool {
        // Skipped or replayed transnos may put `last_committed` ahead for a moment.
        self.namespace
            .last_transno()
            .saturating_sub(self.replies.last_committed())
            >= self.max_uncommitted
            || self.namespace.pending_data_bytes() >= MAX_PENDING_DATA
    }

    /// Forgets `client`'s session if it is idle — it holds no open handle either, which
    /// keeps a session until it expires — and then the journal's records of it.
    pub fn forget_if_idle(&self, client: u64) {
        if self.namespace.holds_handles(client) || self.locks.holds_any(client) {
            return;
        }
        self.sessions
            .forget_if_idle(client, || self.to_committer(CommitMsg::DropResend(client)));
    }

    /// `client`'s session ended: its locks and handles are released, and the orphans that were
    /// their last go to the committer, each a record of its own (no reply waits on them).
    pub fn release_handles(&self, client: u64) {
        self.locks.release_client(client);
        let records = self
            .namespace
            .release_all(client, self.replies.last_committed());
        for record in records {
            self.to_committer(CommitMsg::Record(record));
        }
    }

    /// Recovery ended: the orphans no client took back go to the committer, each a record
    /// of its own.
    pub fn reclaim_orphans(&self) {
        for record in self
            .namespace
            .reclaim_orphans(self.replies.last_committed())
        {
            self.to_committer(CommitMsg::Record(record));
        }
    }

    /// Hands a message to the committer: at once, or with the rest of this poll of the
    /// connection's task when a partition gathers them (`committer/outbox.rs`).
    pub fn to_committer(&self, msg: CommitMsg) {
        self.commit_tx.send(msg);
    }

    /// Resolves once `transno` is durable (true), or the journal failed first (false): asks
    /// for its commit now and waits in the reply queue, woken by the commit's drain as a
    /// held reply is.
    pub async fn durable(&self, transno: u64) -> bool {
        let (tell, told) = tokio::sync::oneshot::channel();
        self.to_committer(CommitMsg::Flush(transno));
        self.replies.push(0, transno, Queued::Durable(tell));
        told.await.unwrap_or(false)
    }

    /// A request built on another client's uncommitted change: count it and, when `upto` is
    /// given, ask for the commit of everything up to it now, without blocking.
    pub(super) fn cos_conflict(&self, metrics: &PartitionMetrics, opcode: u8, upto: Option<u64>) {
        metrics.cos_conflict(opcode);
        self.cos_conflicts.fetch_add(1, Ordering::Relaxed);
        if let Some(upto) = upto {
            self.to_committer(CommitMsg::Flush(upto));
        }
    }

    pub(super) fn statfs(&self) -> StatFs {
        let stats = &self.commit_stats;
        let counts = self.namespace.counts();
        let space = crate::space::of(&self.store_dir).unwrap_or_default();
        StatFs {
            inodes: counts.inodes(),
            directories: counts.directories,
            files: counts.files,
            others: counts.others,
            xattr_bytes: counts.xattr_bytes,
            file_bytes: counts.file_bytes,
            data_bytes: counts.data_bytes,
            inline_data_max: self.namespace.inline_data_max(),
            object_store: self.object_store.clone(),
            open_handles: self.namespace.open_files().0,
            orphans: self.namespace.open_files().1,
            store_bytes: space.total,
            store_bytes_free: space.free,
            store_bytes_available: space.available,
            last_committed: self.replies.last_committed(),
            last_transno: self.namespace.last_transno(),
            commits: stats.commits.load(Ordering::Relaxed),
            committed_transactions: stats.transactions.load(Ordering::Relaxed),
            max_transactions_per_commit: stats.max_batch_seen.load(Ordering::Relaxed),
            partitions: self.partitions as u32,
            read_only: self.namespace.is_read_only(),
            cos_conflicts: self.cos_conflicts.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
impl Core {
    /// A core over `namespace` with a per-CPU reply queue of `partitions` partitions whose
    /// wakes go nowhere, a committer that is the returned channel, and no recovery window.
    pub(crate) fn for_tests(
        namespace: Namespace,
        partitions: usize,
        cos: Cos,
        ack: Ack,
    ) -> (Core, crossbeam_channel::Receiver<CommitMsg>) {
        let (commit_tx, commit_rx) = crossbeam_channel::unbounded();
        let wakers = (0..partitions)
            .map(|_| Box::new(|| {}) as reply::Waker)
            .collect();
        let key = ReplayKey::new(&[7; journal::SECRET_LEN]);
        let bounds = crate::recovery::Bounds {
            last_committed: 0,
            transno_ceiling: 0,
            ino_ceiling: 0,
            ino_floor: journal::first_ino(0),
        };
        let core = Core {
            namespace: Arc::new(namespace),
            replies: Arc::new(Replies::per_cpu(wakers, 0)),
            commit_tx: ToCommitter::new(commit_tx),
            commit_stats: Arc::default(),
            sessions: Arc::new(Sessions::new(usize::MAX)),
            cos,
            ack,
            recovery: Recovery::new(Vec::new(), bounds, key, Box::new(|_, _| {})),
            replay_key: key,
            cos_conflicts: AtomicU64::new(0),
            locks: crate::locks::Locks::default(),
            partitions,
            max_uncommitted: 1 << 16,
            store_dir: std::env::temp_dir(),
            object_store: String::new(),
            shard_view: None,
            shutdown: tokio_util::sync::CancellationToken::new(),
        };
        (core, commit_rx)
    }
}
