//! Executing one request once it is admitted: the session's records first (a resend joins
//! its original or is answered from its record), then the namespace, the journal record with
//! its resend record handed to the committer, commit-on-share, and the answer — early, or
//! after the commit. Shared by the local path (`mod.rs`) and the remote one (`remote.rs`).

use std::sync::Arc;

use mds_proto::{Body, Errno, Request};
use tracing::error;

use crate::committer::CommitMsg;
use crate::config::Cos;
use crate::metrics::PartitionMetrics;
use crate::namespace::{Caller, Exec};
use crate::queue::Response;
use crate::recovery::Turn;
use crate::session::{Answered, Begin, Session};
use crate::ticket::ReplayKey;

use super::answer::{Answer, Closing};
use super::core::Core;

/// Looks a mutation up in its session before it executes: `None` to execute it; otherwise how
/// it is answered — joined to a copy still waiting (its reply answers both), from its resend
/// record (it executed already; with the ticket its first answer carried), or refused because
/// the session keeps as many records as it may (not a `replay`, whose change its client was
/// told of).
pub(super) fn begin_mutation(
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
pub(super) fn sync(
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
    )
}

/// A namespace operation: a mutation is first looked up in its session (unless it is a
/// replay, which `admit` looked up), then executed; its record goes to the committer at once.
pub(super) fn execute(
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
        atime: session.atime(),
    };
    // The ticket binds the operation as its request encoded it; made only for what can be
    // answered early (before `execute` takes the operation).
    let mut buf = [0u8; 1024];
    let op_bytes = (session.is_early() && mutation && !replayed && !answered_at_commit(opcode))
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
pub(super) fn answer_unchanged(
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
        Answer::at_commit(wait.max(core.replies.last_committed()), response)
    } else if wait == 0 {
        session.note_replied(xid);
        Answer::now(response)
    } else {
        // Built on another client's uncommitted change: the answer waits for that change's
        // commit, which is asked for now.
        core.cos_conflict(metrics, opcode, Some(wait));
        Answer::held_by_sharing(wait, response)
    }
}

/// A request `begin` marked pending, answered on the spot: on the connection it came in on,
/// unless a resend of it joined it meanwhile (its client reconnected while it executed).
/// That copy waits on the session's connection of now, and the original's connection may be
/// cut: the answer goes through the reply queue, released at once (nothing to wait for) to
/// wherever the client is.
pub(super) fn answer_begun(core: &Core, session: &Session, response: Response) -> Answer {
    if session.abandon(response.xid) {
        Answer::at_commit(core.replies.last_committed(), response)
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
/// Nor is ALLOC_SLICES: a client names objects by the ids it got, and a replay could not
/// hand the same ids out again.
pub(super) fn answered_at_commit(opcode: u8) -> bool {
    use mds_proto::opcode::{ALLOC_SLICES, MAKE_PENDING_DIR, PREPARE_RMDIR};
    opcode == MAKE_PENDING_DIR || opcode == PREPARE_RMDIR || opcode == ALLOC_SLICES
}

pub(super) fn journal(
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
    let known = (early && session.is_early()).then(|| {
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
pub(super) struct Executed {
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
pub(super) fn answer_mutation(
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
        return Answer::at_commit(transno, response);
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
        Answer::at_commit(until, response)
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
            Answer::at_commit(until, response)
        } else {
            answer_begun(core, session, response)
        }
    };
    Answer {
        notice: Some(transno),
        ..answer
    }
}
