//! The committer: one thread that turns the partitions' journal records into group commits.
//!
//! It blocks for the first record, takes whatever else has arrived without blocking (and, with
//! `--commit-interval`, keeps gathering until the interval is over), cuts the longest run of
//! records contiguous from `last_committed + 1`, writes and syncs it as one batch, publishes
//! the new `last_committed` to the reply engine — which wakes each partition with replies to
//! release, once — and starts over. Records gather while a sync runs: gathering never waits
//! for a sync, and a commit starts at once — except that a commit of a few records may wait a
//! fraction of a sync for one more when the last commits say one follows (`commit_wait`,
//! `--commit-siblings`). It never encodes or sends a reply (HDFS-15869).
//!
//! A shard's owner on shared storage writes only while its lease surely holds (`lease.rs`):
//! each write to the store is preceded by a check of the lease's deadline, and one past it
//! stops the process before anything is written or answered.
//!
//! Partitions take transnos under their operations' locks but send the records afterwards, so
//! records can arrive slightly out of order across partitions. A record whose predecessor has
//! not arrived yet is held back to the next commit: that keeps `last_committed` contiguous,
//! and anything that built on the missing record has a larger transno and waits with it.

mod held;
pub mod lease;
mod outbox;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use journal::{Journal, JournalOp, TxRecord};
use reply::ReplyEngine;
use tracing::{error, info, warn};

use crate::commit_wait::{SiblingWait, Waited};
use crate::metrics::CommitMetrics;
use crate::namespace::Namespace;
use held::Held;
pub use outbox::{CommitterGone, Gathering, ToCommitter};

/// Who learns what the committer made durable. The committer names no reader of its own (the
/// TiKV write worker's `PersistedNotifier`): the reply engine is one.
pub trait CommitListener: Send + Sync + 'static {
    /// Every transno at or below `last_committed` is durable.
    fn committed(&self, last_committed: u64);
    /// The journal failed: nothing above the last published `last_committed` will be.
    fn failed(&self);
}

impl<T: Send + 'static> CommitListener for ReplyEngine<T> {
    fn committed(&self, last_committed: u64) {
        self.publish(last_committed);
    }

    fn failed(&self) {
        self.fail();
    }
}

/// What partitions send the committer.
#[derive(Debug)]
pub enum CommitMsg {
    /// A mutation's journal record.
    Record(TxRecord),
    /// Commit everything up to this transno as soon as it can, without waiting for
    /// `--commit-interval`: a SYNC, or a request that built on another client's uncommitted
    /// change (commit-on-share). It holds until that transno is durable, so a record that
    /// reaches the committer just after the flush does not wait a whole interval.
    Flush(u64),
    /// From now on commit everything at once, never waiting for the interval: the server is
    /// shutting down and waits for what is pending.
    Drain,
    /// Remember the client in the journal (with the next commit): it is about to hold a reply
    /// sent before its commit, so after a crash the server must wait for it to replay.
    KnowClient(u64),
    /// Forget the client with the first commit that makes transno `after` durable: by then it
    /// holds no reply that is not durable (or it was evicted, `after` 0).
    ForgetClient { client: u64, after: u64 },
    /// Drop the client's resend records (its session ended), with the next write.
    DropResend(u64),
    /// The object collector deleted these from the object store (`DeleteLayout`,
    /// `DeleteGarbage`): forget them with the next write.
    Collected(Vec<JournalOp>),
    /// Keep the secret of the client's new session with the next write, before any record
    /// of the session: a restart must not let anyone else take a session it restores.
    BindSession {
        client: u64,
        secret: [u8; journal::SECRET_LEN],
    },
    /// Recovery: every transno in `from..=to` will never be replayed; journal an empty record
    /// for each, so `last_committed` stays contiguous through them.
    Skip { from: u64, to: u64 },
    /// Inode numbers run short of the ceiling with nothing committing to raise it (creates
    /// that fail burn numbers): raise it now.
    RaiseCeilings,
    /// Write a checkpoint of the store to this directory, between two commits (the
    /// committer is the only writer, so it is consistent: every commit before it, none after).
    Checkpoint(std::path::PathBuf),
    /// Commit everything still held, then stop.
    Shutdown,
    /// What one poll of a partition's connection sent, in the order it was sent
    /// (`outbox.rs`): one hand-off for a read's records rather than one each.
    Batch(Vec<CommitMsg>),
}

impl CommitMsg {
    /// Whether it is, or carries, [`CommitMsg::Shutdown`].
    fn stops(&self) -> bool {
        match self {
            CommitMsg::Shutdown => true,
            CommitMsg::Batch(msgs) => msgs.iter().any(CommitMsg::stops),
            _ => false,
        }
    }
}

/// How commits are formed.
#[derive(Clone, Copy, Debug)]
pub struct CommitPolicy {
    /// How long a commit gathers before it starts; zero starts it as soon as the previous one
    /// finished (continuous group commit).
    pub interval: Duration,
    /// Most transactions in one commit.
    pub max_batch: usize,
    /// A small commit may wait a fraction of a sync for a sibling (`--commit-siblings`,
    /// `commit_wait`); only without an interval.
    pub siblings: bool,
}

/// Figures the committer keeps for STATFS and tests.
#[derive(Debug, Default)]
pub struct CommitStats {
    pub commits: AtomicU64,
    pub transactions: AtomicU64,
    pub max_batch_seen: AtomicU64,
    pub forced: AtomicU64,
    pub failed: AtomicBool,
    /// When the newest commit became durable (`metrics::monotonic_ns`): drains measure their
    /// duration from it.
    pub durable_at_ns: AtomicU64,
    /// The same moment on the wall clock (ns since the Unix epoch; 0 before the first
    /// commit), for `mds_last_commit_timestamp_seconds`: one wall-clock read per commit.
    pub durable_at_unix_ns: AtomicU64,
}

/// The running committer.
pub struct Committer {
    tx: Sender<CommitMsg>,
    stats: Arc<CommitStats>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// Starts the committer thread.
    pub fn start(
        journal: Arc<Journal>,
        namespace: Arc<Namespace>,
        listener: Arc<dyn CommitListener>,
        policy: CommitPolicy,
    ) -> Committer {
        let (tx, rx) = crossbeam_channel::unbounded();
        let stats = Arc::new(CommitStats::default());
        let worker = Worker {
            rx,
            journal,
            namespace,
            listener,
            policy,
            siblings: SiblingWait::new(policy.siblings && policy.interval.is_zero()),
            stats: stats.clone(),
            metrics: CommitMetrics::register(),
            held: Held::default(),
            last_committed: 0,
            raise_ceilings: false,
            opened: None,
            flush_upto: 0,
            draining: false,
            shutdown: false,
            clients: Vec::new(),
            checkpoints: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("mds-committer".into())
            .spawn(move || worker.run())
            .expect("spawning the committer thread");
        Committer {
            tx,
            stats,
            thread: Some(thread),
        }
    }

    /// The way to the committer, for partitions and whatever else commits.
    pub fn sender(&self) -> ToCommitter {
        ToCommitter::new(self.tx.clone())
    }

    pub fn stats(&self) -> Arc<CommitStats> {
        self.stats.clone()
    }

    /// Commits everything still held and joins the thread.
    pub fn shutdown(mut self) {
        let _ = self.tx.send(CommitMsg::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Worker {
    rx: Receiver<CommitMsg>,
    journal: Arc<Journal>,
    namespace: Arc<Namespace>,
    listener: Arc<dyn CommitListener>,
    policy: CommitPolicy,
    /// Whether a small commit waits for one more record, learnt from the last commits.
    siblings: SiblingWait,
    stats: Arc<CommitStats>,
    metrics: CommitMetrics,
    /// Records received and not yet committed, by transno.
    held: Held,
    /// What the last commit made durable.
    last_committed: u64,
    /// Raise the ceilings at the next idle moment.
    raise_ceilings: bool,
    /// When the open transaction received its first record (only with an interval).
    opened: Option<Instant>,
    /// The highest transno a flush asked for: until it is durable, no commit waits for the
    /// interval.
    flush_upto: u64,
    /// Set by [`CommitMsg::Drain`]: no commit waits for the interval any more.
    draining: bool,
    /// Known-client changes (and the object collector's forgets) waiting for a commit, each
    /// with the transno it must not precede.
    clients: Vec<(u64, JournalOp)>,
    /// Checkpoints asked for and not written yet.
    checkpoints: Vec<std::path::PathBuf>,
    shutdown: bool,
}

impl Worker {
    fn run(mut self) {
        journal::no_perf_counters_on_this_thread();
        let mut last_committed = self.journal.last_committed();
        self.last_committed = last_committed;
        loop {
            // Block until the next record in transno order is here (or we are told to stop).
            // Records already here mean a gap: a partition took an earlier transno and has not
            // sent its record yet, and every commit waits for it.
            let gap_since =
                (!self.held.is_empty() && !self.ready(last_committed)).then(Instant::now);
            while !self.ready(last_committed) && !self.shutdown {
                self.write_idle_client_changes(last_committed);
                self.write_checkpoints(last_committed);
                if std::mem::take(&mut self.raise_ceilings) && !self.raise_ceilings_now() {
                    return;
                }
                match self.rx.recv() {
                    Ok(msg) => self.take(msg),
                    Err(_) => self.shutdown = true,
                }
            }
            if let Some(since) = gap_since {
                self.metrics.gap_wait.record(since.elapsed().as_secs_f64());
            }
            self.gather(last_committed);
            self.wait_for_sibling(last_committed);
            if self.shutdown && !self.ready(last_committed) {
                self.finish(last_committed);
                return;
            }
            let mut batch = self.cut(last_committed);
            if batch.is_empty() {
                continue;
            }
            self.attach_client_changes(&mut batch);
            // Nothing left: the next record opens a new transaction. Records left over (past
            // --max-batch, or behind a missing transno) keep the old opening time: they have
            // waited already.
            if self.held.is_empty() {
                self.opened = None;
            }
            if self.flush_upto > last_committed {
                // Someone asked for this commit to start at once.
                self.stats.forced.fetch_add(1, Ordering::Relaxed);
                self.metrics.forced.increment(1);
            }
            // The ino ceiling this commit writes stays a lease above every number handed out,
            // burned ones included.
            self.journal
                .note_inode_counter(self.namespace.inode_counter());
            // Last before the write: a process stopped before this line and resumed after its
            // lease ran out stops here, its batch neither written nor answered.
            self.stop_unless_leased(batch.len());
            let started = Instant::now();
            match self.journal.commit(&batch) {
                Ok(info) => {
                    let waiting = !self.rx.is_empty();
                    self.siblings
                        .committed(batch.len(), started.elapsed(), waiting);
                    last_committed = info.last_committed;
                    self.last_committed = last_committed;
                    self.namespace.publish_ceilings(info.ceilings);
                    self.metrics
                        .record_commit(&info, self.namespace.last_transno());
                    let n = info.transactions as u64;
                    self.stats.commits.fetch_add(1, Ordering::Relaxed);
                    self.stats.transactions.fetch_add(n, Ordering::Relaxed);
                    self.stats.max_batch_seen.fetch_max(n, Ordering::Relaxed);
                    self.stats
                        .durable_at_ns
                        .store(crate::metrics::monotonic_ns(), Ordering::Release);
                    self.stats
                        .durable_at_unix_ns
                        .store(journal::now_ns() as u64, Ordering::Relaxed);
                    // Durable data leaves memory before replies tell anyone it is durable.
                    self.namespace.data_committed(last_committed);
                    self.listener.committed(last_committed);
                    // Asked for under load, when no idle moment comes: right after a commit.
                    self.write_checkpoints(last_committed);
                    self.namespace.give_back_ops(batch);
                }
                Err(e) => {
                    error!(cause = %e, last_committed, "journal commit failed; refusing mutations from now on");
                    self.fail(&e);
                    return;
                }
            }
        }
    }

    /// The journal failed: refuse mutations, fail what waits, and take nothing more.
    fn fail(&mut self, e: &journal::Error) {
        self.metrics.errors.increment(1);
        self.stats.failed.store(true, Ordering::SeqCst);
        self.namespace.set_read_only(e.is_no_space());
        self.listener.failed();
        self.discard_until_shutdown();
    }

    /// Before every write to the store: unless the shard's lease surely holds (always, outside
    /// shared storage), stops the process at once, as when etcd says the lease is gone — a
    /// standby may serve the store already, and what this server writes now would be lost or
    /// worse. `held` records are dropped with the process, their replies never sent (with
    /// `--ack early` the clients replay them to the next owner, as after a crash). Exiting
    /// rather than turning standby is the design's answer to every lost lease: a service
    /// manager restarts the server, which claims again or waits as its lease lets it.
    fn stop_unless_leased(&self, held: usize) {
        if let Err(expired) = lease::OWNER_LEASE.holds() {
            lease::fail_stop(&format!(
                "stopped committing: lease expired (its deadline, the TTL less a margin from \
                 the last renewal sent, passed {:?} ago); {held} records not written and \
                 never answered, last committed {}",
                expired.past_by, self.last_committed
            ));
        }
    }

    /// Raises the ceilings with a write of their own. Returns `false` if the journal failed
    /// (then everything is failed and the caller stops).
    fn raise_ceilings_now(&mut self) -> bool {
        self.stop_unless_leased(self.held.len());
        self.journal
            .note_inode_counter(self.namespace.inode_counter());
        match self.journal.raise_ceilings() {
            Ok(ceilings) => {
                self.namespace.publish_ceilings(ceilings);
                true
            }
            Err(e) => {
                error!(cause = %e, "raising the ceilings failed; refusing mutations from now on");
                self.fail(&e);
                false
            }
        }
    }

    /// Holds `record` until its commit. A transno that is durable already, or held already,
    /// means two operations believe they own it — the namespace is no longer what the journal
    /// will say — so the process stops (fail-stop) rather than commit either.
    fn hold(&mut self, record: TxRecord) {
        let transno = record.transno;
        if transno <= self.last_committed {
            error!(
                transno,
                last_committed = self.last_committed,
                "a record for a durable transno; stopping"
            );
            std::process::abort();
        }
        if self.held.insert(record).is_err() {
            error!(transno, "two records for one transno; stopping");
            std::process::abort();
        }
    }

    /// Whether the record after `last_committed` is held.
    fn ready(&self, last_committed: u64) -> bool {
        self.held.has(last_committed + 1)
    }

    fn take(&mut self, msg: CommitMsg) {
        match msg {
            CommitMsg::Record(record) => {
                if self.held.is_empty() && self.opened.is_none() && !self.policy.interval.is_zero()
                {
                    // The first record opens the transaction; the interval counts from here.
                    self.opened = Some(Instant::now());
                }
                self.hold(record);
            }
            CommitMsg::Skip { from, to } => {
                for transno in from..=to {
                    self.hold(TxRecord {
                        transno,
                        ops: Vec::new(),
                    });
                }
            }
            CommitMsg::RaiseCeilings => self.raise_ceilings = true,
            CommitMsg::BindSession { client, secret } => {
                self.clients
                    .push((0, JournalOp::BindSession { client, secret }));
            }
            CommitMsg::Flush(upto) => self.flush_upto = self.flush_upto.max(upto),
            CommitMsg::Drain => self.draining = true,
            CommitMsg::KnowClient(client) => {
                // Known again before a pending forget took effect: the forget is void.
                self.clients.retain(
                    |(_, op)| !matches!(op, JournalOp::ForgetClient { client: c } if *c == client),
                );
                self.clients.push((0, JournalOp::KnowClient { client }));
            }
            CommitMsg::ForgetClient { client, after } => {
                self.clients
                    .push((after, JournalOp::ForgetClient { client }));
            }
            CommitMsg::DropResend(client) => {
                self.clients.push((0, JournalOp::DropResend { client }));
            }
            CommitMsg::Collected(ops) => self.clients.extend(ops.into_iter().map(|op| (0, op))),
            CommitMsg::Checkpoint(dir) => self.checkpoints.push(dir),
            CommitMsg::Shutdown => self.shutdown = true,
            CommitMsg::Batch(msgs) => {
                for msg in msgs {
                    self.take(msg);
                }
            }
        }
    }

    /// Takes what has arrived without blocking; with an interval, keeps gathering until the
    /// open transaction has been open that long, the batch is full, or a flush or shutdown
    /// asks for the commit now.
    fn gather(&mut self, last_committed: u64) {
        while self.held.len() < self.policy.max_batch {
            match self.rx.try_recv() {
                Ok(msg) => self.take(msg),
                Err(_) => break,
            }
        }
        if self.policy.interval.is_zero() || self.draining || self.flush_upto > last_committed {
            return;
        }
        let deadline = self.opened.unwrap_or_else(Instant::now) + self.policy.interval;
        while self.held.len() < self.policy.max_batch
            && self.flush_upto <= last_committed
            && !self.draining
            && !self.shutdown
        {
            match self.rx.recv_deadline(deadline) {
                Ok(msg) => self.take(msg),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => self.shutdown = true,
            }
        }
    }

    /// A small batch and nothing else arrived: wait a little for one more record if the last
    /// commits say one usually follows (`commit_wait`), then take what else arrived. A flush,
    /// a drain or a shutdown ends the wait.
    fn wait_for_sibling(&mut self, last_committed: u64) {
        let hurry = |w: &Worker| w.draining || w.shutdown || w.flush_upto > last_committed;
        if hurry(self) {
            return;
        }
        let Some(wait) = self.siblings.wait_for(self.held.len()) else {
            return;
        };
        let started = Instant::now();
        let deadline = started + wait;
        let before = self.held.len();
        while self.held.len() == before && !hurry(self) {
            match self.rx.recv_deadline(deadline) {
                Ok(msg) => self.take(msg),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => self.shutdown = true,
            }
        }
        if self.held.len() > before {
            self.siblings.waited(Waited::Joined(started.elapsed()));
            self.metrics.sibling_joined.increment(1);
        } else if !hurry(self) {
            self.siblings.waited(Waited::TimedOut);
            self.metrics.sibling_timed_out.increment(1);
        }
        while self.held.len() < self.policy.max_batch {
            match self.rx.try_recv() {
                Ok(msg) => self.take(msg),
                Err(_) => break,
            }
        }
    }

    /// Puts the known-client changes this batch may carry into its last record, in the order
    /// they arrived (a client known, then forgotten, ends forgotten). They need no transno of
    /// their own: they ride with whatever commits next.
    fn attach_client_changes(&mut self, batch: &mut [TxRecord]) {
        let Some(last) = batch.last_mut() else { return };
        let upto = last.transno;
        let mut kept = Vec::new();
        for (after, op) in self.clients.drain(..) {
            if after <= upto {
                last.ops.push(op);
            } else {
                kept.push((after, op));
            }
        }
        self.clients = kept;
    }

    /// Writes the checkpoints asked for, between two commits.
    fn write_checkpoints(&mut self, last_committed: u64) {
        if !self.checkpoints.is_empty() {
            self.stop_unless_leased(self.held.len());
        }
        for dir in self.checkpoints.drain(..) {
            match self.journal.checkpoint(&dir) {
                Ok(()) => info!(last_committed, "checkpoint written to {}", dir.display()),
                Err(e) => error!(dir = %dir.display(), cause = %e, "checkpoint failed"),
            }
        }
    }

    /// With no transaction to carry them, writes the known-client changes that may be made
    /// now on their own: a client forgotten while the server idles stays forgotten after a
    /// crash (else the recovery window would wait for it).
    fn write_idle_client_changes(&mut self, last_committed: u64) {
        if self
            .clients
            .iter()
            .all(|(after, _)| *after > last_committed)
        {
            return;
        }
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.clients)
            .into_iter()
            .partition(|(after, _)| *after <= last_committed);
        self.clients = later;
        self.stop_unless_leased(self.held.len());
        let ops: Vec<JournalOp> = now.into_iter().map(|(_, op)| op).collect();
        if let Err(e) = self.journal.write_client_changes(&ops) {
            error!(cause = %e, "writing known-client changes failed");
        }
    }

    /// Takes the run of held records contiguous from `last_committed + 1`, `max_batch` at most.
    fn cut(&mut self, last_committed: u64) -> Vec<TxRecord> {
        self.held
            .take_from(last_committed + 1, self.policy.max_batch)
    }

    /// At shutdown: every partition has stopped, so a record still missing will never come.
    fn finish(&mut self, last_committed: u64) {
        self.write_idle_client_changes(last_committed);
        if !self.held.is_empty() {
            warn!(
                held = self.held.len(),
                last_committed,
                "records held back at shutdown behind a missing transno; not committed"
            );
        }
        info!(last_committed, "committer stopped");
    }

    /// After a failure nothing more is written; records still arriving are dropped (their
    /// replies fail through the engine) until shutdown.
    fn discard_until_shutdown(&mut self) {
        self.held.clear();
        while let Ok(msg) = self.rx.recv() {
            if msg.stops() {
                break;
            }
        }
    }
}
