//! Dispatch: what the server does with one request of a client that has its session, and when
//! its reply may leave. It owns every decision between the decoded request and the reply —
//! the session's records (a resend joins its original or is answered from its record), the
//! recovery window and a replay's turn, the namespace's execution, the journal record and its
//! resend record handed to the committer, commit-on-share, and early or commit-deferred
//! replies (with the first early mutation of a client answered only after its commit) — and
//! returns them as an [`Answer`]. It touches no socket: the connection appends what is
//! answered now and queues what waits (`partition/serve/mod.rs`), so every decision here can be
//! unit-tested with a namespace in memory and a channel for a committer.
//!
//! What all of it needs is the [`Core`]: the namespace, the reply queue's `last_committed`,
//! the committer's channel, the sessions, the recovery window and the two modes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::Sender;
use mds_proto::{Body, Errno, Op, Request, StatFs};
use tracing::{debug, error};

use crate::committer::{CommitMsg, CommitStats};
use crate::config::{Ack, Cos};
use crate::metrics::PartitionMetrics;
use crate::namespace::{Caller, Exec, Namespace};
use crate::queue::{Replies, Response};
use crate::recovery::{Recovery, Refusal, Turn};
use crate::session::{Answered, Begin, Session, Sessions};
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
    pub commit_tx: Sender<CommitMsg>,
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
    /// Partitions served (STATFS reports it).
    pub partitions: usize,
    /// Mutations executed but not durable yet past which no request is executed
    /// (`Limits::max_uncommitted`).
    pub max_uncommitted: u64,
    /// The store's directory: STATFS reports the space of the file system it is on.
    pub store_dir: std::path::PathBuf,
    /// The cluster this server is a shard of (`--etcd`): which requests are another shard's,
    /// and the shard map SHARD_MAP answers. None outside a cluster.
    pub cluster: Option<Arc<crate::cluster::ClusterView>>,
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
        if self.namespace.holds_handles(client) {
            return;
        }
        self.sessions
            .forget_if_idle(client, || self.to_committer(CommitMsg::DropResend(client)));
    }

    /// `client`'s session ended: its handles are released, and the orphans that were
    /// their last go to the committer, each a record of its own (no reply waits on them).
    pub fn release_handles(&self, client: u64) {
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
    /// connection's task when a partition gathers them (`committer/outbox.rs`). The committer
    /// never goes away while partitions run; if it has, the journal can no longer make
    /// anything durable, and waiting would hang every client: stop the process (fail-stop).
    pub fn to_committer(&self, msg: CommitMsg) {
        if crate::committer::send(&self.commit_tx, msg).is_err() {
            error!("the committer is gone; stopping rather than hang every client");
            std::process::abort();
        }
    }

    /// A request built on another client's uncommitted change: count it and, when `upto` is
    /// given, ask for the commit of everything up to it now, without blocking.
    fn cos_conflict(&self, metrics: &PartitionMetrics, opcode: u8, upto: Option<u64>) {
        metrics.cos_conflict(opcode);
        self.cos_conflicts.fetch_add(1, Ordering::Relaxed);
        if let Some(upto) = upto {
            self.to_committer(CommitMsg::Flush(upto));
        }
    }

    fn statfs(&self) -> StatFs {
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
            inline_data_max: self.namespace.inline_data_max(),
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
            commit_tx,
            commit_stats: Arc::default(),
            sessions: Arc::new(Sessions::new(usize::MAX)),
            cos,
            ack,
            recovery: Recovery::new(Vec::new(), bounds, key, Box::new(|_, _| {})),
            replay_key: key,
            cos_conflicts: AtomicU64::new(0),
            partitions,
            max_uncommitted: 1 << 16,
            store_dir: std::env::temp_dir(),
            cluster: None,
            shutdown: tokio_util::sync::CancellationToken::new(),
        };
        (core, commit_rx)
    }
}

/// What dispatch decided for one request.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub deliver: Deliver,
    /// An early reply was given for this transno: the session's client is owed a commit
    /// notice once it is durable (queued after the reply, if the reply is queued).
    pub notice: Option<u64>,
}

/// When, and whether, a reply leaves.
#[derive(Debug, PartialEq)]
pub enum Deliver {
    /// Now. A reply whose `transno` is above `last_committed` is an early one.
    Now(Response),
    /// Once `until` is durable. `cos`: a read or an error held back by commit-on-share,
    /// whose bytes count against its connection's output bound while it waits.
    AtCommit {
        until: u64,
        response: Response,
        cos: bool,
    },
    /// Never from here: a copy of the request in flight answers it.
    Joined,
    /// An EPROTO refusal now, and the connection closes.
    Close { response: Response, why: Closing },
}

/// Why dispatch closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// A second CONNECT or AUTHENTICATE on a connection that has its session.
    Handshake(&'static str),
    /// A replay no honest client can send.
    Forged(&'static str),
    /// A request under the xid of another still waiting or answered
    /// ([`crate::session::Begin::Reused`]).
    XidReused,
}

impl Answer {
    fn now(response: Response) -> Answer {
        Answer {
            deliver: Deliver::Now(response),
            notice: None,
        }
    }

    fn at_commit(until: u64, response: Response, cos: bool) -> Answer {
        Answer {
            deliver: Deliver::AtCommit {
                until,
                response,
                cos,
            },
            notice: None,
        }
    }

    fn joined() -> Answer {
        Answer {
            deliver: Deliver::Joined,
            notice: None,
        }
    }

    fn close(xid: u64, op: u8, why: Closing) -> Answer {
        Answer {
            deliver: Deliver::Close {
                response: Response::new(xid, op, 0, Err(Errno::EPROTO)),
                why,
            },
            notice: None,
        }
    }
}

/// Who sent a request: what its connection proved at its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A client (whatever it proved: the shared key, a session secret, nothing).
    Client,
    /// Another server of the cluster: its connection began with PEER_CONNECT and proved the
    /// cluster's peer secret. Only it may send what only servers send
    /// ([`Op::is_server_only`]), and its credentials are taken as they are: no root squash.
    Peer,
}

/// Dispatches one request of `session`'s client, its credentials checked by the connection:
/// waits for the recovery window (or a replay's turn) if it must, executes it, and says how
/// to answer it. Everything the session and the journal must know of it is done when this
/// returns.
pub async fn dispatch(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    mut request: Request,
    origin: Origin,
) -> Answer {
    // The watermark first: a replay's session lookup trims by it.
    session.note_acked(request.acked_xid);
    // What only the cluster's servers send is refused on any other connection before
    // anything else — before routing, the recovery window, or a look at the names it gives
    // (RESOLVE_REMOTE's EBUSY would tell which are under way) — whatever uid it claims.
    if request.op.is_server_only() && origin != Origin::Peer {
        session.note_replied(request.xid);
        debug!(
            client = session.client(),
            op = request.op.name(),
            "refused: only the cluster's servers send it, on a connection that proved the peer \
             secret"
        );
        return Answer::now(Response::new(
            request.xid,
            request.op.opcode(),
            0,
            Err(Errno::EPERM),
        ));
    }
    // Another shard's request is refused before anything else, recovery window included: no
    // request of this store's was ever another shard's, so it has no record to answer from.
    if let Some(refused) = core.cluster.as_ref().and_then(|c| c.refuse(&request.op)) {
        session.note_replied(request.xid);
        return Answer::now(Response::new(
            request.xid,
            request.op.opcode(),
            0,
            Err(refused),
        ));
    }
    let turn = match admit(core, metrics, session, &request).await {
        Admitted::Go(turn) => turn,
        Admitted::Answered(answer) => return answer,
    };
    // A peer speaks as root for the cluster (a step of a client's operation the asking
    // server checked already): never squashed.
    if origin == Origin::Client {
        core.namespace.effective_cred(&mut request.cred);
    }
    let (xid, opcode) = (request.xid, request.op.opcode());
    let now = |result| {
        session.note_replied(xid);
        Answer::now(Response::new(xid, opcode, 0, result))
    };
    let second = |what| {
        session.note_replied(xid);
        Answer::close(xid, opcode, Closing::Handshake(what))
    };
    match request.op {
        Op::Connect { .. } => second("CONNECT"),
        Op::PeerConnect { .. } => second("PEER_CONNECT"),
        Op::ShardMap => now(Ok(Body::ShardMap(
            core.cluster
                .as_ref()
                .map(|c| c.shard_map())
                .unwrap_or_default(),
        ))),
        Op::ShardMapWait { after, wait_ms } => {
            // Held on this connection alone (its later requests wait behind it): watchers
            // send it on a connection of their own. Outside a cluster nothing ever changes.
            let (revision, map) = match &core.cluster {
                Some(cluster) => {
                    let wait = std::time::Duration::from_millis(wait_ms.into());
                    cluster.shard_map_after(after, wait, &core.shutdown).await
                }
                None => (0, mds_proto::ShardMap::default()),
            };
            now(Ok(Body::ShardMapAt { revision, map }))
        }
        Op::Authenticate { .. } => second("AUTHENTICATE"),
        Op::Ping => now(Ok(Body::Pong)),
        Op::Statfs => now(Ok(Body::StatFs(Box::new(core.statfs())))),
        Op::Sync => sync(core, metrics, session, xid, opcode),
        Op::MkdirRemote { shard, .. } => {
            let own = core.cluster.as_ref().map(|c| c.shard().unwrap_or(0));
            match own {
                Some(own) if own != shard => {
                    remote::mkdir_remote(core, metrics, session, request).await
                }
                // On the parent's own shard: a MKDIR. Outside a cluster shard 0 is the only
                // one there is.
                None if shard != 0 => now(Err(Errno::EINVAL)),
                _ => {
                    let Op::MkdirRemote {
                        parent, name, mode, ..
                    } = request.op
                    else {
                        unreachable!("matched above")
                    };
                    request.op = Op::Mkdir { parent, name, mode };
                    execute(core, metrics, session, request, turn)
                }
            }
        }
        Op::ResolveRemote { .. } => remote::resolve_remote(core, session, &request)
            .unwrap_or_else(|| now(Err(Errno::EINVAL))),
        Op::MakePendingDir { .. } | Op::PrepareRmdir { .. } if core.cluster.is_none() => {
            now(Err(Errno::EINVAL))
        }
        // The parent it names must be on a shard the cluster has: no entry could ever name
        // the directory otherwise, and the scrub would ask a shard nobody serves.
        Op::MakePendingDir { parent, .. } | Op::PrepareRmdir { parent, .. }
            if !core
                .cluster
                .as_ref()
                .is_some_and(|c| c.peers.has_shard(mds_proto::shard_of(parent))) =>
        {
            now(Err(Errno::EINVAL))
        }
        Op::MakePendingDir { .. } | Op::PrepareRmdir { .. } => {
            let answer = execute(core, metrics, session, request, turn);
            if let Deliver::AtCommit { until, .. } = &answer.deliver {
                remote::crash_after_child_step(core, opcode, *until).await;
            }
            answer
        }
        // In a cluster, the entry may name another shard's directory. Not for a replay: what
        // was answered early was never a remote directory's (those are answered at commit).
        Op::Rmdir { .. } if core.cluster.is_some() && turn.is_none() => {
            remote::rmdir(core, metrics, session, request).await
        }
        _ => execute(core, metrics, session, request, turn),
    }
}

/// What [`admit`] found of a request.
// Returned once per request and matched at once: boxing the answer would allocate for every
// request that is answered here, to shrink a value that never sits anywhere.
#[allow(clippy::large_enum_variant)]
enum Admitted<'a> {
    /// Execute it, with its recovery turn if it is a replay.
    Go(Option<Turn<'a>>),
    /// Answered already (joined, from its record, refused, forged).
    Answered(Answer),
}

/// What a request waits for before it executes. While the recovery window is open, a
/// request that is not a replay waits until it closes (a known client's first such request
/// says it has replayed everything). A replay is first looked up in its session — a copy in
/// flight or executed already answers it — then waits for its turn in transno order
/// (`Recovery::turn`); its session marks it pending meanwhile, so a copy resent on a newer
/// connection joins it. A replay whose turn will not come is refused (its client counts it
/// lost); one no honest client can send closes the connection.
async fn admit<'a>(
    core: &'a Core,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    request: &Request,
) -> Admitted<'a> {
    let recovery = &core.recovery;
    let Some(replay) = request.replay else {
        if matches!(request.op, Op::Open { reopen: true, .. }) && !request.op.is_mutation() {
            // A client taking back a handle the restart lost: after its replays and before
            // anything else, inside the window — it must not end the window (it is not
            // done), nor wait for it (the orphans it keeps are reclaimed when it ends). It
            // takes no transno, so it may run among the replays. Until the window's hard end
            // it is progress, as a replay is: this client's quiet clock starts again.
            recovery.progressed(session.client());
            return Admitted::Go(None);
        }
        if matches!(request.op, Op::ShardMap | Op::ShardMapWait { .. }) {
            // Who serves what, not the namespace: a client looking for its shard's new owner
            // asks before it has replayed anything (and may be another server's client, or a
            // watcher of the map), so it neither waits for the window nor says this client is
            // done.
            return Admitted::Go(None);
        }
        if recovery.is_open() {
            if recovery.expects(session.client()) {
                recovery.client_done(session.client());
                if !session.is_known() {
                    // Back, done, and holding nothing early: the journal may forget it.
                    core.to_committer(CommitMsg::ForgetClient {
                        client: session.client(),
                        after: 0,
                    });
                }
            }
            recovery.closed().await;
        }
        return Admitted::Go(None);
    };
    let (xid, opcode) = (request.xid, request.op.opcode());
    if !request.op.is_mutation() {
        return Admitted::Answered(Answer::close(
            xid,
            opcode,
            Closing::Forged("a replay of a request that changes nothing"),
        ));
    }
    if let Some(answer) = begin_mutation(metrics, session, xid, opcode, true) {
        return Admitted::Answered(answer);
    }
    let refused = || {
        // Too late (the window closed, or its transno was durable, skipped or taken by a
        // copy that did not execute), and it did not execute in this start: lost.
        Admitted::Answered(answer_begun(
            core,
            session,
            Response::new(xid, opcode, 0, Err(Errno::EINVAL)),
        ))
    };
    if !recovery.is_open() {
        return refused();
    }
    let mut buf = [0u8; 1024];
    let op = ReplayKey::encode_op(&request.op, &mut buf);
    match recovery.turn(session.client(), replay, &op).await {
        Ok(turn) => Admitted::Go(Some(turn)),
        Err(Refusal::TooLate) => refused(),
        Err(Refusal::Forged(why)) => {
            // A copy that joined it goes unanswered: the connection of a forger closes.
            let _ = session.abandon(xid);
            Admitted::Answered(Answer::close(xid, opcode, Closing::Forged(why)))
        }
    }
}

/// Looks a mutation up in its session before it executes: `None` to execute it; otherwise how
/// it is answered — joined to a copy still waiting (its reply answers both), from its resend
/// record (it executed already; with the ticket its first answer carried), or refused because
/// the session keeps as many records as it may (not a `replay`, whose change its client was
/// told of).
fn begin_mutation(
    metrics: &PartitionMetrics,
    session: &Session,
    xid: u64,
    opcode: u8,
    replay: bool,
) -> Option<Answer> {
    let begun = if replay {
        session.begin_replay(xid, opcode)
    } else {
        session.begin(xid, opcode)
    };
    let response = match begun {
        Begin::New => return None,
        Begin::Joined => return Some(Answer::joined()),
        Begin::Answered(Answered {
            transno,
            body,
            ticket,
            ..
        }) => {
            // Executed already, its reply lost on the way (a replay cut off among them): the
            // same answer again, never a second execution.
            metrics.resent_answered.increment(1);
            Response {
                ticket,
                ..Response::new(xid, opcode, transno, Ok(body))
            }
        }
        Begin::Full => {
            // The client's watermark lags too far behind what it asked: nothing more until
            // it has acknowledged some replies.
            metrics.resend_full.increment(1);
            Response::new(xid, opcode, 0, Err(Errno::EBUSY))
        }
        // Whatever holds the xid already is answered as it would have been.
        Begin::Reused => return Some(Answer::close(xid, opcode, Closing::XidReused)),
    };
    session.note_replied(xid);
    Some(Answer::now(response))
}

/// SYNC: answered once everything handed out so far is durable, whose commit it asks for.
fn sync(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Session,
    xid: u64,
    opcode: u8,
) -> Answer {
    match session.begin(xid, opcode) {
        Begin::New => {}
        Begin::Full => {
            metrics.resend_full.increment(1);
            session.note_replied(xid);
            return Answer::now(Response::new(xid, opcode, 0, Err(Errno::EBUSY)));
        }
        // A resend: the original's reply answers it.
        Begin::Joined | Begin::Answered(_) => return Answer::joined(),
        Begin::Reused => return Answer::close(xid, opcode, Closing::XidReused),
    }
    let upto = core.namespace.last_transno();
    let done = Response::new(xid, opcode, 0, Ok(Body::Done));
    if upto <= core.replies.last_committed() {
        return answer_begun(core, session, done);
    }
    core.to_committer(CommitMsg::Flush(upto));
    Answer::at_commit(
        upto,
        Response {
            transno: upto,
            ..done
        },
        false,
    )
}

/// A namespace operation: a mutation is first looked up in its session (unless it is a
/// replay, which `admit` looked up), then executed; its record goes to the committer at once.
fn execute(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    request: Request,
    turn: Option<Turn<'_>>,
) -> Answer {
    let Request {
        xid,
        op,
        acked_xid: _,
        cred,
        replay,
    } = request;
    let opcode = op.opcode();
    let mutation = op.is_mutation();
    let replayed = turn.is_some();
    if mutation
        && !replayed
        && let Some(answer) = begin_mutation(metrics, session, xid, opcode, false)
    {
        return answer;
    }
    if replay.is_some() && !replayed {
        // `admit` answers every replay without a turn; nothing gets here.
        let refused = Response::new(xid, opcode, 0, Err(Errno::EINVAL));
        if mutation {
            return answer_begun(core, session, refused);
        }
        session.note_replied(xid);
        return Answer::now(refused);
    }
    if let Some(turn) = &turn
        && core.namespace.last_transno() + 1 != turn.transno()
    {
        // Only replays take transnos while the window is open, each at its turn.
        error!(
            transno = turn.transno(),
            last = core.namespace.last_transno(),
            "a replay's turn came out of order; stopping"
        );
        std::process::abort();
    }
    // After a journal failure nothing above `last_committed` will ever be durable, and its
    // clients were answered EIO: no read may show it, not even to the client that made it (no
    // client has identity 0), COS on or off. Such a read waits for a commit that fails at
    // once, and is answered the same way.
    let failed = core.namespace.is_read_only();
    let caller = Caller {
        client: if failed { 0 } else { session.client() },
        cred: &cred,
        // Without commit-on-share nothing counts as uncommitted.
        last_committed: if core.cos == Cos::On || failed {
            core.replies.last_committed()
        } else {
            u64::MAX
        },
        reuse_ino: turn
            .as_ref()
            .and(replay)
            .map(|r| r.ino)
            .filter(|&ino| ino != 0),
        replay: replayed,
    };
    // The ticket binds the operation as its request encoded it; made only for what can be
    // answered early (before `execute` takes the operation).
    let mut buf = [0u8; 1024];
    let op_bytes = (core.ack == Ack::Early && mutation && !replayed && !answered_at_commit(opcode))
        .then(|| ReplayKey::encode_op(&op, &mut buf));
    let creates = op.creates_inode();
    match core.namespace.execute(op, &caller) {
        Exec::Now { result, wait } => {
            // A replay that no longer applies (what it built on was lost with a client that
            // did not come back) drops its turn here: its transno is skipped by an empty
            // record, never handed out again, and its client counts it lost.
            drop(turn);
            let response = Response::new(xid, opcode, 0, result);
            answer_unchanged(core, metrics, session, response, wait, mutation, replayed)
        }
        Exec::Mutation {
            transno,
            record,
            body,
            built_on,
        } => {
            let early = !answered_at_commit(opcode);
            let (known_at, encoded) = journal(core, session, record, xid, &body, early);
            if let Some(turn) = turn {
                assert_eq!(turn.transno(), transno, "a replay takes its own transno");
                turn.executed();
                metrics.replayed.increment(1);
            }
            // The session keeps how it was answered, for resends. A replay's answer carries
            // no ticket: its client keeps the original's, made for the original's xid.
            let ticket = op_bytes.map_or(0, |op| {
                let ino = match (creates, &body) {
                    (true, Body::Attr(attr)) => attr.ino,
                    _ => 0,
                };
                core.replay_key
                    .ticket(session.client(), xid, transno, ino, &op)
            });
            session.remember(xid, opcode, transno, body.clone(), ticket);
            let response = Response {
                ticket,
                encoded: Some(encoded),
                ..Response::new(xid, opcode, transno, Ok(body))
            };
            let mutation = Executed {
                built_on,
                known_at,
                // As for a replay that failed: the reply leaves through the reply queue.
                through_queue: replayed,
            };
            answer_mutation(core, metrics, session, response, mutation)
        }
    }
}

/// An operation that changed nothing (a read, an error, a mutation that failed): answered
/// now, or — built on another client's uncommitted change (`wait`) — once that is durable;
/// a replay's answer always through the reply queue.
fn answer_unchanged(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Session,
    response: Response,
    wait: u64,
    mutation: bool,
    replayed: bool,
) -> Answer {
    let (xid, opcode) = (response.xid, response.op);
    let joined = mutation && !replayed && session.abandon(xid);
    if mutation && core.namespace.take_ceiling_request() {
        core.to_committer(CommitMsg::RaiseCeilings);
    }
    if replayed || (joined && wait == 0) {
        // A copy of it resent on a newer connection may have joined it while it waited for
        // its turn (or executed): the answer goes through the reply queue, which releases it
        // to the session's connection of now (at once: what it waits for is durable).
        Answer::at_commit(wait.max(core.replies.last_committed()), response, false)
    } else if wait == 0 {
        session.note_replied(xid);
        Answer::now(response)
    } else {
        // Built on another client's uncommitted change: the answer waits for that change's
        // commit, which is asked for now.
        core.cos_conflict(metrics, opcode, Some(wait));
        Answer::at_commit(wait, response, true)
    }
}

/// A request `begin` marked pending, answered on the spot: on the connection it came in on,
/// unless a resend of it joined it meanwhile (its client reconnected while it executed).
/// That copy waits on the session's connection of now, and the original's connection may be
/// cut: the answer goes through the reply queue, released at once (nothing to wait for) to
/// wherever the client is.
fn answer_begun(core: &Core, session: &Session, response: Response) -> Answer {
    if session.abandon(response.xid) {
        Answer::at_commit(core.replies.last_committed(), response, false)
    } else {
        Answer::now(response)
    }
}

/// Hands a mutation's record to the committer, with its resend record added, right after it
/// executed: a transno taken holds every later commit until its record arrives, so nothing
/// may come between. Before it, what the journal must know first: the session's secret at its
/// first record, and with early replies the client itself at its first early mutation.
/// Returns, with early replies, the transno whose commit makes the client known (and whether
/// this mutation's is it); and the body encoded, as the resend record keeps it, for the reply.
/// The steps another shard takes for a remote directory (MAKE_PENDING_DIR, PREPARE_RMDIR)
/// are never answered early, `--ack early` or not: the asker changes its entry on the
/// strength of the answer, and no replay could make that right after a crash lost the step.
fn answered_at_commit(opcode: u8) -> bool {
    use mds_proto::opcode::{MAKE_PENDING_DIR, PREPARE_RMDIR};
    opcode == MAKE_PENDING_DIR || opcode == PREPARE_RMDIR
}

fn journal(
    core: &Core,
    session: &Session,
    mut record: journal::TxRecord,
    xid: u64,
    body: &Body,
    early: bool,
) -> (Option<crate::session::Know>, crate::queue::EncodedBody) {
    session.bind_once(|secret| {
        core.to_committer(CommitMsg::BindSession {
            client: session.client(),
            secret: *secret.bytes(),
        });
    });
    let known = (early && core.ack == Ack::Early).then(|| {
        session.know(record.transno, || {
            core.to_committer(CommitMsg::KnowClient(session.client()));
        })
    });
    // How it was answered goes with the change itself, so that a resend is answered the same
    // way even after a restart. Encoded once: the reply is framed from a copy of the bytes.
    let reply = mds_proto::encode_body_with(body, journal::ReplyBytes::from_slice);
    // Copied whole: `SmallVec::clone` collects the bytes one at a time (~150 instructions a
    // create for a ~40-byte body, counted).
    let encoded = journal::ReplyBytes::from_slice(&reply);
    record.ops.push(journal::JournalOp::PutResend {
        client: session.client(),
        acked_xid: session.acked_xid(),
        record: journal::ResendRecord {
            xid,
            transno: record.transno,
            reply,
        },
    });
    core.to_committer(CommitMsg::Record(record));
    (known, encoded)
}

/// What decides when an executed mutation's reply may leave.
struct Executed {
    /// Another client's uncommitted change it built on (0: none).
    built_on: u64,
    /// With early replies: the transno whose commit makes the journal know the client, and
    /// whether it is this one's.
    known_at: Option<crate::session::Know>,
    /// Never answered on the spot: a copy on a newer connection may have joined it.
    through_queue: bool,
}

/// A mutation executed: its reply waits for its commit (`--ack commit`), or, early, for the
/// commit that makes its client known and for what it built on, or leaves at once.
fn answer_mutation(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Session,
    response: Response,
    mutation: Executed,
) -> Answer {
    let (opcode, transno) = (response.op, response.transno);
    let Executed {
        built_on,
        known_at,
        through_queue,
    } = mutation;
    let Some(know) = known_at else {
        // Commit-deferred: its own commit covers what it built on; that commit starts now.
        if built_on > 0 {
            core.cos_conflict(metrics, opcode, Some(transno));
        }
        return Answer::at_commit(transno, response, false);
    };
    // Early. Its commit will be announced to the client by a notice.
    let answer = if know.first {
        // The client's first early mutation is answered after its commit, which carries the
        // client's record (sent just before the mutation's), and that commit starts now.
        let until = transno.max(built_on);
        core.to_committer(CommitMsg::Flush(until));
        if built_on > 0 {
            core.cos_conflict(metrics, opcode, None);
        }
        Answer::at_commit(until, response, false)
    } else {
        // Not before the journal knows the client (the commit of its first early mutation,
        // which may still be in flight when a pipelined second one executes: a crash before
        // it would find no record of a client holding unsafe replies), nor before what it
        // built on is durable.
        let last_committed = core.replies.last_committed();
        let unknown_until = Some(know.known_at)
            .filter(|&t| t > last_committed)
            .unwrap_or(0);
        if built_on > 0 || unknown_until > 0 || through_queue {
            if built_on > 0 {
                core.cos_conflict(metrics, opcode, Some(built_on));
            }
            let until = built_on.max(unknown_until).max(last_committed);
            Answer::at_commit(until, response, false)
        } else {
            answer_begun(core, session, response)
        }
    };
    Answer {
        notice: Some(transno),
        ..answer
    }
}

mod remote;
#[cfg(test)]
mod tests;
