//! Dispatch of the requests that span two shards (remote directories, whose namespace side
//! is `namespace/ops/remote.rs`):
//!
//! - MKDIR_REMOTE, on the parent's shard: the session's records first (a resend joins the
//!   original or is answered from its record — exactly once, as for any mutation); then
//!   the name is marked under way, MKDIR's checks are made, the child's shard is asked to
//!   make the directory (MAKE_PENDING_DIR: durable and pending there before it answers), and
//!   the entry is made here with its resend record. Answered after its commit, never early:
//!   no replay could make the other shard's half again. Every answer leaves through the
//!   reply queue, so a resend that joined it while it waited for the other shard is answered
//!   on the session's connection of now.
//! - MAKE_PENDING_DIR, on the child's shard: a mutation as any other, answered after its
//!   commit even with `--ack early` (its asker must not put an entry for what a crash could
//!   lose).
//! - RESOLVE_REMOTE, on the parent's shard (the child's scrub asks it): EBUSY while a
//!   MKDIR_REMOTE of that name is under way, else the namespace's answer — a Done held until
//!   everything executed so far is durable, so the entry it found is.

use std::sync::Arc;

use mds_proto::{Body, Errno, Op, Request};

use super::{Answer, Core, begin_mutation, journal};
use crate::metrics::PartitionMetrics;
use crate::namespace::{Caller, Exec};
use crate::peers::CrashPoint;
use crate::queue::Response;
use crate::session::Session;

/// MKDIR_REMOTE of `request` (whose op it is) to another shard than this one, which holds
/// the parent.
pub(super) async fn mkdir_remote(
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    request: Request,
) -> Answer {
    let Request { xid, op, cred, .. } = request;
    let Op::MkdirRemote {
        parent,
        name,
        mode,
        shard,
    } = op
    else {
        unreachable!("called for MKDIR_REMOTE only");
    };
    let opcode = mds_proto::opcode::MKDIR_REMOTE;
    let Some(view) = core.cluster.as_ref() else {
        unreachable!("dispatch makes it a MKDIR outside a cluster");
    };
    if let Some(answer) = begin_mutation(metrics, session, xid, opcode, false) {
        return answer;
    }
    let through_queue = |result: Result<Body, Errno>| {
        // Through the queue whether or not a resend joined it: see `answer_begun`.
        let _ = session.abandon(xid);
        Answer::at_commit(
            core.replies.last_committed(),
            Response::new(xid, opcode, 0, result),
            false,
        )
    };
    if core.namespace.is_read_only() {
        return through_queue(Err(Errno::EIO));
    }
    let Some(_under_way) = view.peers.begin(parent, &name) else {
        // Another client's MKDIR_REMOTE of this name is under way: asked again, it finds the
        // name taken or free.
        return through_queue(Err(Errno::EBUSY));
    };
    let caller = Caller {
        client: session.client(),
        cred: &cred,
        last_committed: core.replies.last_committed(),
        reuse_ino: None,
        replay: false,
    };
    let (uid, gid, mode) = match core
        .namespace
        .check_remote_mkdir(&caller, parent, &name, mode)
    {
        Ok(owner) => owner,
        Err(e) => return through_queue(Err(e)),
    };
    let made = view
        .peers
        .call(Op::MakePendingDir {
            shard,
            parent,
            name: name.clone(),
            mode,
            uid,
            gid,
        })
        .await;
    let child = match made {
        Ok(Body::Attr(child)) => child,
        Ok(_) => return through_queue(Err(Errno::EIO)),
        Err(e) => return through_queue(Err(e)),
    };
    view.peers.crash_if(CrashPoint::BeforeEntry);
    let caller = Caller {
        last_committed: core.replies.last_committed(),
        ..caller
    };
    match core.namespace.link_remote_dir(&caller, parent, name, child) {
        // Taken meanwhile (or the parent went): the pending directory the other shard made is
        // deleted by its scrub, which finds no entry for it here.
        Exec::Now { result, .. } => through_queue(result),
        Exec::Mutation {
            transno,
            record,
            body,
            built_on,
        } => {
            let (_, encoded) = journal(core, session, record, xid, &body, false);
            session.remember(xid, transno, body.clone(), 0);
            if view.peers.crashes_at(CrashPoint::EntryCommitted) {
                wait_until_durable(core, transno).await;
                view.peers.crash_if(CrashPoint::EntryCommitted);
            }
            let response = Response {
                encoded: Some(encoded),
                ..Response::new(xid, opcode, transno, Ok(body))
            };
            Answer::at_commit(transno.max(built_on), response, false)
        }
    }
}

/// RESOLVE_REMOTE, on the parent's shard.
pub(super) fn resolve_remote(core: &Core, session: &Session, request: &Request) -> Option<Answer> {
    let Op::ResolveRemote { parent, name, .. } = &request.op else {
        return None;
    };
    let view = core.cluster.as_ref()?;
    let (xid, opcode) = (request.xid, request.op.opcode());
    session.note_replied(xid);
    if view.peers.is_in_flight(*parent, name) {
        return Some(Answer::now(Response::new(
            xid,
            opcode,
            0,
            Err(Errno::EBUSY),
        )));
    }
    let caller = Caller {
        client: session.client(),
        cred: &request.cred,
        last_committed: core.replies.last_committed(),
        reuse_ino: None,
        replay: false,
    };
    let Exec::Now { result, wait } = core.namespace.execute(request.op.clone(), &caller) else {
        unreachable!("RESOLVE_REMOTE changes nothing");
    };
    // What was found is answered once it is durable: the entry, and whatever it built on.
    let until = match &result {
        Ok(_) => core.namespace.last_transno().max(wait),
        Err(_) => wait,
    };
    Some(Answer::at_commit(
        until.max(core.replies.last_committed()),
        Response::new(xid, opcode, 0, result),
        false,
    ))
}

/// The test hook after MAKE_PENDING_DIR executed (`transno`), on the child's shard: killed
/// once it is durable, its reply never sent.
pub(super) async fn crash_after_pending(core: &Core, transno: u64) {
    if let Some(view) = core
        .cluster
        .as_ref()
        .filter(|v| v.peers.crashes_at(CrashPoint::PendingDirCommitted))
    {
        wait_until_durable(core, transno).await;
        view.peers.crash_if(CrashPoint::PendingDirCommitted);
    }
}

async fn wait_until_durable(core: &Core, transno: u64) {
    core.to_committer(crate::committer::CommitMsg::Flush(transno));
    while core.replies.last_committed() < transno {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}
