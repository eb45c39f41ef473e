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
//! - RMDIR in a cluster, on the parent's shard: an entry of this shard's own is removed as on
//!   one server; one naming another shard's directory in reverse of MKDIR_REMOTE — the
//!   session's records, the name marked under way, the child's shard asked to mark the
//!   directory being removed (PREPARE_RMDIR: empty, durable before it answers, no new entry
//!   from then on), and the entry removed here with its resend record, answered after its
//!   commit. The child's scrub deletes the directory once it finds the entry gone.
//! - PREPARE_RMDIR, on the child's shard: a mutation as any other, answered after its commit.
//! - RESOLVE_REMOTE, on the parent's shard (the child's scrub asks it): EBUSY while a
//!   MKDIR_REMOTE or a remote RMDIR of that name is under way, else the namespace's answer,
//!   held until everything executed so far is durable: the entry it found, or its removal.

use std::sync::Arc;

use mds_proto::{Body, Errno, Op, Request};

use super::answer::Answer;
use super::core::Core;
use super::execute::{begin_mutation, execute, journal};
use crate::crash::{self, CrashPoint};
use crate::metrics::PartitionMetrics;
use crate::namespace::{Caller, Exec};
use crate::queue::Response;
use crate::session::Session;
use crate::shard::{NameUnderWay, ShardView};

/// A MKDIR_REMOTE's directory: `name` in `parent` (on this shard), made on `shard`.
pub(super) struct RemoteMkdir {
    pub parent: u64,
    pub name: String,
    pub mode: u32,
    pub shard: u16,
}

/// MKDIR_REMOTE `xid` of `dir` to another shard than this one (`view`'s), which holds the
/// parent.
pub(super) async fn mkdir_remote(
    core: &Core,
    view: &ShardView,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    (xid, cred): (u64, mds_proto::Cred),
    dir: RemoteMkdir,
) -> Answer {
    let RemoteMkdir {
        parent,
        name,
        mode,
        shard,
    } = dir;
    let opcode = mds_proto::opcode::MKDIR_REMOTE;
    let _under_way =
        match begin_under_way(view, core, metrics, session, (xid, opcode), parent, &name) {
            Ok(held) => held,
            Err(answer) => return *answer,
        };
    let through_queue = |result| answer_queued(core, session, xid, opcode, result);
    let caller = Caller {
        client: session.client(),
        cred: &cred,
        last_committed: core.replies.last_committed(),
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
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
    crash::now(CrashPoint::BeforeEntry);
    let caller = Caller {
        last_committed: core.replies.last_committed(),
        ..caller
    };
    let made = core.namespace.link_remote_dir(&caller, parent, name, child);
    // Taken meanwhile (or the parent went): the pending directory the other shard made is
    // deleted by its scrub, which finds no entry for it here.
    answer_entry_change(core, session, xid, opcode, made, CrashPoint::EntryCommitted).await
}

/// RMDIR of `name` in `parent`, on the parent's shard of a cluster (`view`'s); `request` is
/// the RMDIR itself, executed as one server's when the entry names this shard's directory.
pub(super) async fn rmdir(
    core: &Core,
    view: &ShardView,
    metrics: &PartitionMetrics,
    session: &Arc<Session>,
    request: Request,
    (parent, name): (u64, String),
) -> Answer {
    // A first look tells the two kinds of entry apart. Whatever else it finds (no entry, a
    // refusal) RMDIR answers itself, after the session's records: a resend of a removal
    // that happened finds no entry, and is answered from its record.
    let remote =
        core.namespace
            .check_remote_rmdir(&caller(core, session, &request.cred), parent, &name);
    if !matches!(remote, Ok(Some(_))) {
        return execute(core, metrics, session, request, None);
    }
    let Request { xid, cred, .. } = request;
    let opcode = mds_proto::opcode::RMDIR;
    let _under_way =
        match begin_under_way(view, core, metrics, session, (xid, opcode), parent, &name) {
            Ok(held) => held,
            Err(answer) => return *answer,
        };
    let through_queue = |result| answer_queued(core, session, xid, opcode, result);
    // Looked at again now that the name is held: the first look was before the session's
    // records, and nothing held the name.
    let (ino, owner) =
        match core
            .namespace
            .check_remote_rmdir(&caller(core, session, &cred), parent, &name)
        {
            Ok(Some(found)) => found,
            // Made this shard's own meanwhile: asked again, it is removed as one.
            Ok(None) => return through_queue(Err(Errno::EBUSY)),
            Err(e) => return through_queue(Err(e)),
        };
    let prepared = view
        .peers
        .call(Op::PrepareRmdir {
            ino,
            parent,
            name: name.clone(),
            owner,
        })
        .await;
    match prepared {
        Ok(Body::Done) => {}
        Ok(_) => return through_queue(Err(Errno::EIO)),
        Err(e) => return through_queue(Err(e)),
    }
    crash::now(CrashPoint::BeforeEntryRemoved);
    let removed =
        core.namespace
            .unlink_remote_dir(&caller(core, session, &cred), parent, name, ino);
    // Refused (the parent's permissions changed since the look): the child's scrub finds
    // the entry still here and keeps the directory.
    answer_entry_change(
        core,
        session,
        xid,
        opcode,
        removed,
        CrashPoint::EntryRemovedCommitted,
    )
    .await
}

/// The start of a MKDIR_REMOTE or remote RMDIR (`xid`, `opcode`) of `name` in `parent`: the
/// session's records (a resend joins the original or is answered from its record), then the
/// name held under way until the guard drops — or the answer, if it goes no further: EIO
/// when the store is read-only, EBUSY while another client's MKDIR_REMOTE or remote RMDIR
/// of the name is under way (asked again, it finds the name as that one left it).
fn begin_under_way<'a>(
    view: &'a ShardView,
    core: &Core,
    metrics: &PartitionMetrics,
    session: &Session,
    (xid, opcode): (u64, u8),
    parent: u64,
    name: &str,
) -> Result<NameUnderWay<'a>, Box<Answer>> {
    // Boxed: the refusals are rare, the guard is the usual way out.
    if let Some(answer) = begin_mutation(metrics, session, xid, opcode, false) {
        return Err(Box::new(answer));
    }
    let refuse = |errno| Box::new(answer_queued(core, session, xid, opcode, Err(errno)));
    if core.namespace.is_read_only() {
        return Err(refuse(Errno::EIO));
    }
    view.peers
        .begin(parent, name)
        .ok_or_else(|| refuse(Errno::EBUSY))
}

/// An answer given before any change, after `begin_mutation`: through the reply queue whether
/// or not a resend joined it meanwhile (see `answer_begun`).
fn answer_queued(
    core: &Core,
    session: &Session,
    xid: u64,
    opcode: u8,
    result: Result<Body, Errno>,
) -> Answer {
    let _ = session.abandon(xid);
    Answer::at_commit(
        core.replies.last_committed(),
        Response::new(xid, opcode, 0, result),
    )
}

/// A client's request as the namespace runs it, now.
fn caller<'a>(core: &Core, session: &Session, cred: &'a mds_proto::Cred) -> Caller<'a> {
    Caller {
        client: session.client(),
        cred,
        last_committed: core.replies.last_committed(),
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    }
}

/// The answer to a remote directory's change of its entry here (`changed`: MKDIR_REMOTE's
/// entry made, or RMDIR's removed), with its resend record, after its commit: never early,
/// since no replay could redo the other shard's half. Through the reply queue either way, so
/// that a resend that joined it meanwhile is answered on the session's connection of now.
async fn answer_entry_change(
    core: &Core,
    session: &Arc<Session>,
    xid: u64,
    opcode: u8,
    changed: Exec,
    crash: CrashPoint,
) -> Answer {
    match changed {
        Exec::Now { result, .. } => answer_queued(core, session, xid, opcode, result),
        Exec::Mutation {
            transno,
            record,
            body,
            built_on,
        } => {
            let (_, encoded) = journal(core, session, record, xid, &body, false);
            session.remember(xid, opcode, transno, body.clone(), 0);
            if crash::armed(crash) && core.durable(transno).await {
                crash::now(crash);
            }
            let response = Response {
                encoded: Some(encoded),
                ..Response::new(xid, opcode, transno, Ok(body))
            };
            Answer::at_commit(transno.max(built_on), response)
        }
    }
}

/// RESOLVE_REMOTE, on the parent's shard.
pub(super) fn resolve_remote(core: &Core, session: &Session, request: &Request) -> Option<Answer> {
    let Op::ResolveRemote { parent, name, .. } = &request.op else {
        return None;
    };
    let view = core.shard_view.as_ref()?;
    let (xid, opcode) = (request.xid, request.op.opcode());
    session.note_replied(xid);
    if view.peers.is_under_way(*parent, name) {
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
        atime: mds_proto::Atime::default(),
    };
    let Exec::Now { result, wait } = core.namespace.execute(request.op.clone(), &caller) else {
        unreachable!("RESOLVE_REMOTE changes nothing");
    };
    // What was found is answered once it is durable, with whatever it built on: the entry,
    // or its removal (a remote RMDIR's, whose child's shard deletes the directory on this
    // answer: a crash must not bring the entry back after that).
    let until = core.namespace.last_transno().max(wait);
    Some(Answer::at_commit(
        until.max(core.replies.last_committed()),
        Response::new(xid, opcode, 0, result),
    ))
}

/// The test hooks after MAKE_PENDING_DIR or PREPARE_RMDIR (`opcode`) executed (`transno`),
/// on the child's shard: killed once it is durable, its reply never sent.
pub(super) async fn crash_after_child_step(core: &Core, opcode: u8, transno: u64) {
    let point = if opcode == mds_proto::opcode::MAKE_PENDING_DIR {
        CrashPoint::PendingDirCommitted
    } else {
        CrashPoint::RmdirPrepared
    };
    if crash::armed(point) && core.durable(transno).await {
        crash::now(point);
    }
}
