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

use mds_proto::{Body, Errno, Op, Request};
use tracing::debug;

use crate::committer::CommitMsg;
use crate::metrics::PartitionMetrics;
use crate::queue::Response;
use crate::recovery::{Refusal, Turn};
use crate::session::Session;
use crate::ticket::ReplayKey;

mod answer;
mod core;
mod execute;
pub mod locks;

pub use answer::{Answer, Closing, Deliver, Granted};
pub use core::{Core, MAX_PENDING_DATA};
use execute::{answer_begun, begin_mutation, execute, sync};

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

/// What is refused before the recovery window or any look at the request's names: what only
/// the cluster's servers send, on any other connection, and another shard's request.
fn refused_before_admission(
    core: &Core,
    session: &Session,
    request: &Request,
    origin: Origin,
) -> Option<Answer> {
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
        return Some(Answer::now(Response::new(
            request.xid,
            request.op.opcode(),
            0,
            Err(Errno::EPERM),
        )));
    }
    // Another shard's request is refused before anything else, recovery window included: no
    // request of this store's was ever another shard's, so it has no record to answer from.
    if let Some(refused) = core.shard_view.as_ref().and_then(|c| c.refuse(&request.op)) {
        session.note_replied(request.xid);
        return Some(Answer::now(Response::new(
            request.xid,
            request.op.opcode(),
            0,
            Err(refused),
        )));
    }
    None
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
    if let Some(refused) = refused_before_admission(core, session, &request, origin) {
        return refused;
    }
    let turn = match admit(core, metrics, session, &request).await {
        Admitted::Go(turn) => turn,
        Admitted::Settled(answer) => return answer,
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
            core.shard_view
                .as_ref()
                .map(|c| c.shard_map())
                .unwrap_or_default(),
        ))),
        Op::ShardMapWait { after, wait_ms } => {
            // Held on this connection alone (its later requests wait behind it): watchers
            // send it on a connection of their own. Outside a cluster nothing ever changes.
            let (revision, map) = match &core.shard_view {
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
        Op::Getlk { .. } | Op::Setlk { .. } => locks::answer(core, session, request),
        Op::Statfs => now(Ok(Body::StatFs(Box::new(core.statfs())))),
        Op::Sync => sync(core, metrics, session, xid, opcode),
        Op::MkdirRemote {
            parent,
            name,
            mode,
            shard,
        } => {
            let view = core.shard_view.as_deref();
            match view.map(|v| (v, v.shard().unwrap_or(0))) {
                Some((view, own)) if own != shard => {
                    let dir = remote::RemoteMkdir {
                        parent,
                        name,
                        mode,
                        shard,
                    };
                    let asker = (xid, request.cred);
                    remote::mkdir_remote(core, view, metrics, session, asker, dir).await
                }
                // On the parent's own shard: a MKDIR. Outside a cluster shard 0 is the only
                // one there is.
                None if shard != 0 => now(Err(Errno::EINVAL)),
                _ => {
                    request.op = Op::Mkdir { parent, name, mode };
                    execute(core, metrics, session, request, turn)
                }
            }
        }
        Op::ResolveRemote { .. } => remote::resolve_remote(core, session, &request)
            .unwrap_or_else(|| now(Err(Errno::EINVAL))),
        Op::MakePendingDir { .. } | Op::PrepareRmdir { .. } if core.shard_view.is_none() => {
            now(Err(Errno::EINVAL))
        }
        // The parent it names must be on a shard the cluster has: no entry could ever name
        // the directory otherwise, and the scrub would ask a shard nobody serves.
        Op::MakePendingDir { parent, .. } | Op::PrepareRmdir { parent, .. }
            if !core
                .shard_view
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
        Op::Rmdir { parent, ref name } if turn.is_none() => match core.shard_view.as_deref() {
            Some(view) => {
                let entry = (parent, name.clone());
                remote::rmdir(core, view, metrics, session, request, entry).await
            }
            None => execute(core, metrics, session, request, turn),
        },
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
    /// Not executed: its answer is settled already (joined, from its record, refused,
    /// forged).
    Settled(Answer),
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
        return Admitted::Settled(Answer::close(
            xid,
            opcode,
            Closing::Forged("a replay of a request that changes nothing"),
        ));
    }
    if let Some(answer) = begin_mutation(metrics, session, xid, opcode, true) {
        return Admitted::Settled(answer);
    }
    let refused = || {
        // Too late (the window closed, or its transno was durable, skipped or taken by a
        // copy that did not execute), and it did not execute in this start: lost.
        Admitted::Settled(answer_begun(
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
            Admitted::Settled(Answer::close(xid, opcode, Closing::Forged(why)))
        }
    }
}

mod remote;
#[cfg(test)]
mod tests;
