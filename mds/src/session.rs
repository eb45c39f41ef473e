//! Sessions: the server's memory of each client identity, shared by every partition.
//!
//! A session outlives its connections. It knows the client's current connection (a second
//! CONNECT with the same identity replaces the older one, which is closed), the requests still
//! waiting for their commit (a resend of one of them joins it instead of executing again, and
//! its reply goes to whatever connection the client has when it is released), the highest xid
//! answered, and the client's trim watermark (`acked_xid`). Any partition's drain may release
//! a session's reply, so a session is `Sync`: its own small lock, never a table-wide one on
//! the reply path.
//!
//! A session with no connection and nothing pending is forgotten: identities are random and a
//! load run makes thousands of them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::partition::ConnOutput;

/// Shards of the session table; a power of two. CONNECT and the last release of an idle
/// session are the only users, so a few shards are plenty.
const SHARDS: usize = 64;

/// One shard of the session table.
type Shard = Mutex<HashMap<u64, Arc<Session>>>;

/// Every live session, by client identity.
pub struct Sessions {
    shards: Box<[CachePadded<Shard>]>,
}

/// One client's session.
pub struct Session {
    client: u64,
    state: Mutex<State>,
    /// The client's watermark: every xid at or below it has its reply at the client.
    acked_xid: AtomicU64,
    /// The highest xid the server has answered (on any connection of this session).
    replied_xid: AtomicU64,
}

struct State {
    /// Where replies go; `None` while the client is away.
    conn: Option<Arc<ConnOutput>>,
    /// Requests executed (or waiting to) whose reply has not been released yet.
    pending: HashSet<u64>,
    /// The journal knows this client (`--ack early`): it may hold replies sent before their
    /// commit, and after a crash the server waits for it to replay them.
    known: bool,
    /// The highest transno answered to it before its commit: once that is durable the
    /// client holds nothing a restart would need, and the journal may forget it.
    highest_unsafe: u64,
}

/// What CONNECT did to a session.
pub struct Attached {
    pub session: Arc<Session>,
    /// The connection this one replaced; the caller closes it.
    pub replaced: Option<Arc<ConnOutput>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new()
    }
}

impl Sessions {
    pub fn new() -> Sessions {
        Sessions {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(HashMap::new())))
                .collect(),
        }
    }

    fn shard(&self, client: u64) -> &Shard {
        // Identities are random: their low bits spread as well as any hash would.
        &self.shards[(client as usize) & (SHARDS - 1)]
    }

    /// Makes `conn` the connection of `client`'s session, creating the session if needed.
    pub fn attach(&self, client: u64, conn: Arc<ConnOutput>) -> Attached {
        let session = self
            .shard(client)
            .lock()
            .entry(client)
            .or_insert_with(|| {
                Arc::new(Session {
                    client,
                    state: Mutex::new(State {
                        conn: None,
                        pending: HashSet::new(),
                        known: false,
                        highest_unsafe: 0,
                    }),
                    acked_xid: AtomicU64::new(0),
                    replied_xid: AtomicU64::new(0),
                })
            })
            .clone();
        let replaced = session.state.lock().conn.replace(conn);
        Attached { session, replaced }
    }

    /// `conn` is closing: if it is still its session's connection, the client is away now
    /// (returned `true`).
    pub fn detach(&self, session: &Session, conn: &ConnOutput) -> bool {
        let away = {
            let mut state = session.state.lock();
            let current = state.conn.as_ref().is_some_and(|c| c.id() == conn.id());
            if current {
                state.conn = None;
            }
            current
        };
        self.forget_if_idle(session.client);
        away
    }

    /// Drops `client`'s session if it has no connection and nothing pending. Takes the shard
    /// lock before the session's (the order `attach` uses), so it never waits in a cycle.
    pub fn forget_if_idle(&self, client: u64) {
        let mut shard = self.shard(client).lock();
        if shard.get(&client).is_some_and(|s| s.is_idle()) {
            shard.remove(&client);
        }
    }

    /// Sessions the server knows.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn client(&self) -> u64 {
        self.client
    }

    /// Marks `xid` as waiting for its reply. `false` if it already was: a resend of a request
    /// that has not been answered yet, which must not execute again — its reply comes when
    /// the original is released.
    pub fn begin(&self, xid: u64) -> bool {
        self.state.lock().pending.insert(xid)
    }

    /// `xid` was answered at once (an error, a read, nothing to wait for) after `begin`.
    pub fn abandon(&self, xid: u64) {
        self.state.lock().pending.remove(&xid);
        self.note_replied(xid);
    }

    /// `xid`'s reply is released: returns where to send it (the client's connection now,
    /// wherever the request came in) and whether the session became idle.
    pub fn release(&self, xid: u64) -> (Option<Arc<ConnOutput>>, bool) {
        let (conn, idle) = {
            let mut state = self.state.lock();
            state.pending.remove(&xid);
            (
                state.conn.clone(),
                state.conn.is_none() && state.pending.is_empty() && !state.known,
            )
        };
        self.note_replied(xid);
        (conn, idle)
    }

    /// The client's watermark from a request; it never goes down.
    pub fn note_acked(&self, acked_xid: u64) {
        self.acked_xid.fetch_max(acked_xid, Ordering::Relaxed);
    }

    pub fn note_replied(&self, xid: u64) {
        self.replied_xid.fetch_max(xid, Ordering::Relaxed);
    }

    pub fn acked_xid(&self) -> u64 {
        self.acked_xid.load(Ordering::Relaxed)
    }

    pub fn replied_xid(&self) -> u64 {
        self.replied_xid.load(Ordering::Relaxed)
    }

    /// The client is told `transno` before its commit. Returns `true` if the journal did not
    /// know the client yet: the caller journals it, and holds this reply until then.
    pub fn know(&self, transno: u64) -> bool {
        let mut state = self.state.lock();
        state.highest_unsafe = state.highest_unsafe.max(transno);
        !std::mem::replace(&mut state.known, true)
    }

    /// Everything up to `durable` is durable. Returns `true` if the client has gone away and
    /// holds nothing the journal must remember it for (the caller has it forgotten). A
    /// connected client stays known, as Lustre keeps a connected client in its last_rcvd
    /// file: forgetting it between bursts would make the first reply of each burst wait for a
    /// commit. Under the session's lock, so a reply told early meanwhile keeps it known.
    pub fn settle(&self, durable: u64) -> bool {
        let mut state = self.state.lock();
        if state.known && state.conn.is_none() && state.highest_unsafe <= durable {
            state.known = false;
            return true;
        }
        false
    }

    /// The highest transno told to the client before its commit.
    pub fn highest_unsafe(&self) -> u64 {
        self.state.lock().highest_unsafe
    }

    /// Whether the journal knows the client.
    pub fn is_known(&self) -> bool {
        self.state.lock().known
    }

    /// The client's connection now, if it has one.
    pub fn connection(&self) -> Option<Arc<ConnOutput>> {
        self.state.lock().conn.clone()
    }

    /// Requests waiting for their reply.
    pub fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// No connection, nothing pending, nothing told early: the session may go. One told
    /// early stays until settled, so a client that comes back meanwhile finds it again.
    fn is_idle(&self) -> bool {
        let state = self.state.lock();
        state.conn.is_none() && state.pending.is_empty() && !state.known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_connect_replaces_the_first_and_a_resend_joins_its_original() {
        let sessions = Sessions::new();
        let first = Arc::new(ConnOutput::new(1 << 10));
        let second = Arc::new(ConnOutput::new(1 << 10));
        let a = sessions.attach(42, first.clone());
        assert!(a.replaced.is_none());
        assert!(a.session.begin(7), "first time: execute");
        assert!(
            !a.session.begin(7),
            "resend while pending: join, do not execute"
        );

        let b = sessions.attach(42, second.clone());
        assert!(
            Arc::ptr_eq(&a.session, &b.session),
            "same identity, same session"
        );
        assert_eq!(b.replaced.map(|c| c.id()), Some(first.id()));
        // The old connection closing does not take the client's new one away.
        sessions.detach(&a.session, &first);
        let (to, idle) = b.session.release(7);
        assert_eq!(
            to.map(|c| c.id()),
            Some(second.id()),
            "reply follows the client"
        );
        assert!(!idle);
        assert_eq!(b.session.replied_xid(), 7);
        assert!(
            b.session.begin(7) && {
                b.session.abandon(7);
                true
            }
        );
    }

    #[test]
    fn a_session_is_forgotten_once_it_has_no_connection_and_nothing_pending() {
        let sessions = Sessions::new();
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = sessions.attach(5, conn.clone()).session;
        s.begin(1);
        sessions.detach(&s, &conn);
        assert_eq!(sessions.len(), 1, "a reply is still pending");
        let (to, idle) = s.release(1);
        assert!(to.is_none() && idle, "nobody to send it to");
        sessions.forget_if_idle(s.client());
        assert!(sessions.is_empty());
        s.note_acked(9);
        s.note_acked(3);
        assert_eq!(s.acked_xid(), 9, "the watermark never goes down");
    }
}
