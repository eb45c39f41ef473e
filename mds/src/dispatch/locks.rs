//! GETLK and SETLK: who may lock what (an open handle of the inode, or read permission), and
//! the answer — now, or when a queued SETLK is granted ([`Deliver::Locked`]). The rules of
//! the locks themselves are the table's (`locks.rs`).

use std::sync::Arc;

use mds_proto::{Body, Cred, Errno, FileLock, LockKind, Op, Request};

use super::{Answer, Core, Deliver, Granted};
use crate::locks::{Owner, Set};
use crate::metrics::FILE_LOCK_REQUESTS;
use crate::queue::Response;
use crate::session::Session;

/// GETLK or SETLK of `session`'s client: answered now, or when its queued lock is granted.
pub(super) fn answer(core: &Core, session: &Arc<Session>, request: Request) -> Answer {
    let (xid, opcode) = (request.xid, request.op.opcode());
    match request.op {
        Op::Getlk {
            ino,
            handle,
            owner,
            lock,
        } => {
            let result = get(core, session, &request.cred, (ino, handle, owner), lock);
            session.note_replied(xid);
            Answer::now(Response::new(xid, opcode, 0, result))
        }
        Op::Setlk {
            ino,
            handle,
            owner,
            lock,
            wait,
        } => {
            let asked = Asked {
                ino,
                handle,
                owner,
                lock,
                wait,
            };
            set(core, session, &request.cred, asked, (xid, opcode))
        }
        _ => unreachable!("dispatch hands over GETLK and SETLK alone"),
    }
}

/// A SETLK as asked.
struct Asked {
    ino: u64,
    handle: u64,
    owner: u64,
    lock: FileLock,
    wait: bool,
}

/// GETLK of `(ino, handle, owner)`: the lock that would keep the owner from `lock`.
fn get(
    core: &Core,
    session: &Session,
    cred: &Cred,
    (ino, handle, owner): (u64, u64, u64),
    lock: FileLock,
) -> Result<Body, Errno> {
    if lock.kind == LockKind::Unlock || lock.start > lock.end {
        return Err(Errno::EINVAL);
    }
    core.namespace
        .may_lock(session.client(), cred, ino, handle)?;
    let owner = Owner {
        client: session.client(),
        owner,
    };
    Ok(Body::Lock(core.locks.get(ino, owner, lock)))
}

/// SETLK: done now, refused now, or queued until granted.
fn set(
    core: &Core,
    session: &Arc<Session>,
    cred: &Cred,
    asked: Asked,
    (xid, opcode): (u64, u8),
) -> Answer {
    let now = |result: Result<Body, Errno>, counted: &'static str| {
        metrics::counter!(FILE_LOCK_REQUESTS, "result" => counted).increment(1);
        session.note_replied(xid);
        Answer::now(Response::new(xid, opcode, 0, result))
    };
    if let Err(e) = core
        .namespace
        .may_lock(session.client(), cred, asked.ino, asked.handle)
    {
        return now(Err(e), "refused");
    }
    let owner = Owner {
        client: session.client(),
        owner: asked.owner,
    };
    // A wait is bound to its connection when the connection delivers the answer
    // (`Locked`'s `wait`): the session's may be a newer one by now.
    match core.locks.set(asked.ino, owner, asked.lock, asked.wait, 0) {
        // A lock taken is answered with the inode's attributes as the grant finds them
        // (after the last holder's changes), an unlock with Done.
        Ok(Set::Done) if asked.lock.kind == LockKind::Unlock => now(Ok(Body::Done), "granted"),
        Ok(Set::Done) => now(Ok(granted_attr(core, asked.ino)), "granted"),
        Ok(Set::Waiting { id, granted }) => {
            metrics::counter!(FILE_LOCK_REQUESTS, "result" => "queued").increment(1);
            Answer {
                deliver: Deliver::Locked {
                    xid,
                    ino: asked.ino,
                    wait: id,
                    granted: Granted(granted),
                },
                notice: None,
            }
        }
        Err(Errno::EAGAIN) => now(Err(Errno::EAGAIN), "conflict"),
        Err(Errno::EDEADLK) => now(Err(Errno::EDEADLK), "deadlock"),
        Err(e) => now(Err(e), "refused"),
    }
}

/// What a granted lock is answered with: the inode's attributes now, or Done if it went
/// meanwhile (the lock is held all the same; a client without attributes to compare drops
/// what it cached).
pub fn granted_attr(core: &Core, ino: u64) -> Body {
    core.namespace.lock_attr(ino).map_or(Body::Done, Body::Attr)
}
