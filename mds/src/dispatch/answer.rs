//! What dispatch decided for one request ([`Answer`]): a reply now, one that waits for a
//! commit, a request joined to another, or the connection closed — and why.

use mds_proto::Errno;

use crate::queue::Response;

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
    /// When a queued SETLK of `ino` is granted (with the inode's attributes then), or
    /// refused (its error; given up: EINTR). The wait holds nothing of its connection: later
    /// requests go on meanwhile.
    Locked {
        xid: u64,
        ino: u64,
        /// The wait's id in the lock table, to bind it to the connection that delivers it.
        wait: u64,
        granted: Granted,
    },
    /// Never from here: a copy of the request in flight answers it.
    Joined,
    /// An EPROTO refusal now, and the connection closes.
    Close { response: Response, why: Closing },
}

/// What a queued SETLK's answer waits for: its grant, or its refusal.
#[derive(Debug)]
pub struct Granted(pub tokio::sync::oneshot::Receiver<Result<(), Errno>>);

/// Two waits are the same only if they are one: a wait has no value to compare.
impl PartialEq for Granted {
    fn eq(&self, other: &Granted) -> bool {
        std::ptr::eq(self, other)
    }
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
    pub(super) fn now(response: Response) -> Answer {
        Answer {
            deliver: Deliver::Now(response),
            notice: None,
        }
    }

    /// Once `until` — the request's own change, or what it built on — is durable.
    pub(super) fn at_commit(until: u64, response: Response) -> Answer {
        Answer::held(until, response, false)
    }

    /// Once `until` is durable: a read or an error held back by commit-on-share, because it
    /// saw another client's change not durable yet.
    pub(super) fn held_by_sharing(until: u64, response: Response) -> Answer {
        Answer::held(until, response, true)
    }

    fn held(until: u64, response: Response, cos: bool) -> Answer {
        Answer {
            deliver: Deliver::AtCommit {
                until,
                response,
                cos,
            },
            notice: None,
        }
    }

    pub(super) fn joined() -> Answer {
        Answer {
            deliver: Deliver::Joined,
            notice: None,
        }
    }

    pub(super) fn close(xid: u64, op: u8, why: Closing) -> Answer {
        Answer {
            deliver: Deliver::Close {
                response: Response::new(xid, op, 0, Err(Errno::EPROTO)),
                why,
            },
            notice: None,
        }
    }
}
