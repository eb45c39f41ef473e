//! Sessions: the server's memory of each client identity, shared by every partition.
//!
//! A session outlives its connections. It knows the client's current connection (a second
//! CONNECT with the same identity replaces the older one, which is closed), the requests still
//! waiting for their commit (a resend of one of them joins it instead of executing again, and
//! its reply goes to whatever connection the client has when it is released), how each
//! executed mutation was answered until the client's trim watermark (`acked_xid`) says it has
//! the reply (a resend of one is answered from that record, never executed twice; the journal
//! keeps the same records, so this holds across a restart too), and the highest xid answered.
//! Any partition's drain may release a session's reply, so a session is `Sync`: its own small
//! lock, never a table-wide one on the reply path.
//!
//! A session with no connection, nothing pending and no record is forgotten at once:
//! identities are random and a load run makes thousands of them. One that still holds records
//! waits for its client to come back and resend, up to `--session-expiry`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use journal::ClientResend;
use mds_client::auth::SessionSecret;
use mds_proto::{self as protocol, Body};
use parking_lot::Mutex;

use crate::output::{ConnOutput, InFlight};

/// Shards of the session table; a power of two. CONNECT and the last release of an idle
/// session are the only users, so a few shards are plenty.
const SHARDS: usize = 64;

/// One shard of the session table.
type Shard = Mutex<HashMap<u64, Arc<Session>>>;

/// Every live session, by client identity.
pub struct Sessions {
    shards: Box<[CachePadded<Shard>]>,
    /// Most resend records one session keeps (executed mutations whose replies its client
    /// has not acknowledged): past it, new mutations are refused with EBUSY until the client
    /// advances its watermark, so one client cannot grow the server's memory or the
    /// committer's work without bound.
    max_records: usize,
}

/// One client's session.
pub struct Session {
    client: u64,
    /// `State::bound`, readable without the lock: set once, and then every mutation's
    /// `bind_once` is one load.
    bound: std::sync::atomic::AtomicBool,
    /// Most resend records it keeps (`Sessions::max_records`).
    max_records: usize,
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
    /// While `known`: the transno whose commit carries the client's KnowClient (its first
    /// early mutation since it became known). Until that is durable the journal does not
    /// know the client yet, and no reply may leave before its commit.
    known_at: u64,
    /// How executed mutations were answered, above the client's watermark.
    answered: AnsweredLog,
    /// The journal holds resend records of this client: forgetting the session drops them.
    journaled: bool,
    /// The secret whoever attaches to this session must prove; `None` for a session restored
    /// from a store that kept none (written by a build before bindings), which the next
    /// attach binds.
    secret: Option<SessionSecret>,
    /// The journal has the secret (`BindSession`), so a restart restores it with the session.
    bound: bool,
    /// When the client's last connection closed; `None` while it has one.
    away_since: Option<Instant>,
}

/// Answers by xid. A client's mutations mostly execute in xid order, so an answer is appended
/// to a deque and the watermark trims from its front: no allocation per request once the
/// deque has grown to the client's window, unlike a tree map's nodes. Answers that come out
/// of order (requests of one client on two connections) go to a tree beside it instead of
/// into the middle of the deque, which would cost a shift of everything after them: every
/// operation stays O(log n) whatever order a client's xids arrive in.
#[derive(Debug, Default)]
struct AnsweredLog {
    /// Ascending xids, each above every xid before it.
    in_order: VecDeque<(u64, Answered)>,
    /// Answers whose xid was below the deque's last when they came.
    stragglers: BTreeMap<u64, Answered>,
}

impl AnsweredLog {
    fn insert(&mut self, xid: u64, answered: Answered) {
        match self.in_order.back() {
            Some(&(last, _)) if last >= xid => {
                if let Ok(at) = self.in_order.binary_search_by_key(&xid, |(x, _)| *x) {
                    self.in_order[at].1 = answered;
                } else {
                    self.stragglers.insert(xid, answered);
                }
            }
            _ => self.in_order.push_back((xid, answered)),
        }
    }

    fn get(&self, xid: u64) -> Option<&Answered> {
        match self.in_order.binary_search_by_key(&xid, |(x, _)| *x) {
            Ok(at) => Some(&self.in_order[at].1),
            Err(_) => self.stragglers.get(&xid),
        }
    }

    fn remove(&mut self, xid: u64) {
        if self.stragglers.remove(&xid).is_some() {
            return;
        }
        if let Ok(at) = self.in_order.binary_search_by_key(&xid, |(x, _)| *x) {
            self.in_order.remove(at);
        }
    }

    /// Drops the answers at or below the client's watermark: it has those replies.
    fn trim(&mut self, acked_xid: u64) {
        while self.in_order.front().is_some_and(|(x, _)| *x <= acked_xid) {
            self.in_order.pop_front();
        }
        if self
            .stragglers
            .first_key_value()
            .is_some_and(|(&x, _)| x <= acked_xid)
        {
            self.stragglers = self.stragglers.split_off(&(acked_xid + 1));
        }
    }

    fn len(&self) -> usize {
        self.in_order.len() + self.stragglers.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a mutation was answered: what a resend of it is answered with.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    pub transno: u64,
    pub body: Body,
    /// The replay ticket its early reply carried (0: none, or a record restored after a
    /// restart, whose transno is durable and needs no replay).
    pub ticket: u64,
}

/// What to do with a mutation, from the session's records.
#[derive(Debug, PartialEq)]
pub enum Begin {
    /// Execute it.
    New,
    /// A resend of a request still waiting for its commit: its reply answers both.
    Joined,
    /// A resend of a request already executed and answered: answer it the same way again.
    Answered(Answered),
    /// The session keeps as many resend records as it may: refuse it (EBUSY) until the
    /// client's watermark lets some go.
    Full,
}

/// What CONNECT did to a session.
pub struct Attached {
    pub session: Arc<Session>,
    /// The connection this one replaced; the caller closes it.
    pub replaced: Option<Arc<ConnOutput>>,
    /// The secret of a session this attach started (or bound): the client is told it.
    pub issued: Option<SessionSecret>,
}

/// Why a connection may not attach to a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachRefused {
    /// The server keeps a session for this identity and the connection did not prove its
    /// secret.
    Unproved,
}

/// Most resend records a session keeps by default: twice the most mutations one connection
/// may have waiting for their commit (`Limits::max_inflight_per_conn`).
pub const DEFAULT_MAX_RECORDS: usize = 8192;

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(DEFAULT_MAX_RECORDS)
    }
}

impl Sessions {
    pub fn new(max_records: usize) -> Sessions {
        Sessions {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(HashMap::new())))
                .collect(),
            max_records,
        }
    }

    fn shard(&self, client: u64) -> &Shard {
        // Identities are random: their low bits spread as well as any hash would.
        &self.shards[(client as usize) & (SHARDS - 1)]
    }

    /// `client`'s session, if the server keeps one.
    pub fn get(&self, client: u64) -> Option<Arc<Session>> {
        self.shard(client).lock().get(&client).cloned()
    }

    /// Whether a connection that would attach to `client`'s session must prove its secret:
    /// the server keeps a bound session for that identity.
    pub fn requires_proof(&self, client: u64) -> bool {
        self.shard(client)
            .lock()
            .get(&client)
            .is_some_and(|s| s.state.lock().secret.is_some())
    }

    /// Makes `conn` the connection of `client`'s session, creating the session (with a fresh
    /// secret) if there is none. An existing session's secret must pass `proved`, checked
    /// under the shard's lock, so that nobody can attach between the check and the attach.
    pub fn attach(
        &self,
        client: u64,
        conn: Arc<ConnOutput>,
        proved: impl FnOnce(&SessionSecret) -> bool,
    ) -> Result<Attached, AttachRefused> {
        let mut shard = self.shard(client).lock();
        let session = shard
            .entry(client)
            .or_insert_with(|| Session::new(client, None, self.max_records))
            .clone();
        let mut state = session.state.lock();
        let issued = match &state.secret {
            Some(secret) if proved(secret) => None,
            Some(_) => return Err(AttachRefused::Unproved),
            None => {
                // A new session, or one restored without a binding: bind it to this client.
                let secret = SessionSecret::random();
                state.secret = Some(secret);
                Some(secret)
            }
        };
        drop(shard);
        state.away_since = None;
        let replaced = state.conn.replace(conn);
        drop(state);
        Ok(Attached {
            session,
            replaced,
            issued,
        })
    }

    /// Sessions of clients whose resend records the journal kept across a restart, and of
    /// the clients it knows or keeps a session secret for: away until they reconnect (proving
    /// the secret the journal kept), or expire.
    pub fn restore(
        &self,
        clients: Vec<ClientResend>,
        bindings: Vec<(u64, [u8; journal::SECRET_LEN])>,
        known: &[u64],
    ) -> crate::error::Result<usize> {
        let mut secrets: HashMap<u64, SessionSecret> = bindings
            .into_iter()
            .map(|(client, secret)| (client, SessionSecret::from_bytes(secret)))
            .collect();
        let mut records = 0;
        let bound: Vec<u64> = secrets.keys().copied().collect();
        let mut restored = |client: u64| {
            let session = Session::new(client, secrets.remove(&client), self.max_records);
            {
                let mut state = session.state.lock();
                state.bound = state.secret.is_some();
                session.bound.store(state.bound, Ordering::Release);
                // Forgetting it drops what the journal keeps of it, the binding included.
                state.journaled = true;
            }
            session
        };
        for found in clients {
            let session = restored(found.client);
            session.note_acked(found.acked_xid);
            {
                let mut state = session.state.lock();
                for record in found.records {
                    let body = protocol::decode(&record.reply).map_err(|e| {
                        crate::error::Error::UnreadableRecord(format!(
                            "resend record of client {:016x} xid {}: {e}",
                            found.client, record.xid
                        ))
                    })?;
                    let answered = Answered {
                        transno: record.transno,
                        body,
                        ticket: 0,
                    };
                    state.answered.insert(record.xid, answered);
                    records += 1;
                }
            }
            self.shard(found.client)
                .lock()
                .insert(found.client, session);
        }
        // Known clients (replays) and bound ones with no record left: their identity stays
        // theirs while the journal keeps anything of them.
        for client in known.iter().copied().chain(bound) {
            let mut shard = self.shard(client).lock();
            shard.entry(client).or_insert_with(|| restored(client));
        }
        Ok(records)
    }

    /// Forgets sessions whose client has been away longer than `expiry` with nothing
    /// pending: their records are of no use to a client that gave up. Calls `drop_records`
    /// for each the journal holds records of, under its shard's lock (see `forget_if_idle`),
    /// and returns how many were forgotten in all.
    pub fn expire(&self, expiry: Duration, mut drop_records: impl FnMut(u64)) -> usize {
        let now = Instant::now();
        let mut forgotten = 0;
        for shard in &self.shards {
            shard.lock().retain(|&client, session| {
                let state = session.state.lock();
                let expired = state.conn.is_none()
                    && state.pending.is_empty()
                    && !state.known
                    && state
                        .away_since
                        .is_some_and(|t| now.saturating_duration_since(t) >= expiry);
                if expired {
                    forgotten += 1;
                    if state.journaled {
                        drop_records(client);
                    }
                }
                !expired
            });
        }
        forgotten
    }

    /// `conn` is closing: if it is still its session's connection, the client is away now
    /// (returned `true`); the caller then forgets the session if it is idle.
    pub fn detach(&self, session: &Session, conn: &ConnOutput) -> bool {
        let mut state = session.state.lock();
        let current = state.conn.as_ref().is_some_and(|c| c.id() == conn.id());
        if current {
            state.conn = None;
            state.away_since = Some(Instant::now());
        }
        current
    }

    /// Drops `client`'s session if it has no connection, nothing pending and no record.
    /// If the journal holds resend records of it, calls `drop_records` (the caller has the
    /// committer drop them) and returns `true`. Takes the shard lock before the session's
    /// (the order `attach` uses), so it never waits in a cycle.
    ///
    /// `drop_records` runs under the shard lock: a client that reconnects meanwhile makes a
    /// new session only after it, so the committer sees the drop before any record of the
    /// new session, never after (it would drop those too).
    pub fn forget_if_idle(&self, client: u64, drop_records: impl FnOnce()) -> bool {
        let mut shard = self.shard(client).lock();
        if shard.get(&client).is_some_and(|s| s.is_idle()) {
            let session = shard.remove(&client).expect("just seen");
            if session.state.lock().journaled {
                drop_records();
                return true;
            }
        }
        false
    }

    /// Most resend records a session keeps.
    pub fn max_records(&self) -> usize {
        self.max_records
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

/// What [`Session::know`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Know {
    /// The journal did not know the client: this mutation's commit carries its KnowClient.
    pub first: bool,
    /// The transno whose commit carries the client's KnowClient.
    pub known_at: u64,
}

impl Session {
    fn new(client: u64, secret: Option<SessionSecret>, max_records: usize) -> Arc<Session> {
        Arc::new(Session {
            client,
            bound: std::sync::atomic::AtomicBool::new(false),
            max_records,
            state: Mutex::new(State {
                conn: None,
                pending: HashSet::new(),
                known: false,
                highest_unsafe: 0,
                known_at: 0,
                answered: AnsweredLog::default(),
                journaled: false,
                secret,
                bound: false,
                away_since: Some(Instant::now()),
            }),
            acked_xid: AtomicU64::new(0),
            replied_xid: AtomicU64::new(0),
        })
    }

    pub fn client(&self) -> u64 {
        self.client
    }

    /// Marks `xid` as waiting for its reply, unless it is a resend: of a request that has not
    /// been answered yet (it must not execute again; its reply comes when the original is
    /// released), or of one executed and answered already (answer it from its record).
    /// Records at or below the client's watermark go first: it has their replies.
    pub fn begin(&self, xid: u64) -> Begin {
        self.begin_capped(xid, true)
    }

    /// [`Session::begin`] for a replay: not held to the cap on records, which a client's
    /// replays all sent at once may pass (they are bounded by what the crashed start could
    /// leave uncommitted, and refusing one would lose a change its client was told of).
    pub fn begin_replay(&self, xid: u64) -> Begin {
        self.begin_capped(xid, false)
    }

    fn begin_capped(&self, xid: u64, capped: bool) -> Begin {
        let acked = self.acked_xid();
        let mut state = self.state.lock();
        state.answered.trim(acked);
        if state.pending.contains(&xid) {
            return Begin::Joined;
        }
        if let Some(answered) = state.answered.get(xid) {
            return Begin::Answered(answered.clone());
        }
        // Pending requests may each leave a record when they execute: counted too.
        if capped && state.answered.len() + state.pending.len() >= self.max_records {
            return Begin::Full;
        }
        state.pending.insert(xid);
        Begin::New
    }

    /// The first time the session's journal record is about to be written: calls `bind`
    /// (the caller's BindSession to the committer) with its secret, under the session's lock,
    /// so it reaches the committer before any record of the session sent after it.
    pub fn bind_once(&self, bind: impl FnOnce(&SessionSecret)) {
        if self.bound.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state.lock();
        if !state.bound {
            state.bound = true;
            if let Some(secret) = &state.secret {
                bind(secret);
            }
        }
        self.bound.store(true, Ordering::Release);
    }

    /// `xid` executed as `transno` and is answered with `body` (and `ticket`): kept until the
    /// client's watermark passes it. The caller journals the same record with the mutation.
    pub fn remember(&self, xid: u64, transno: u64, body: Body, ticket: u64) {
        let mut state = self.state.lock();
        state.answered.insert(
            xid,
            Answered {
                transno,
                body,
                ticket,
            },
        );
        state.journaled = true;
    }

    /// Executed mutations whose replies the client may not have yet.
    pub fn remembered(&self) -> usize {
        self.state.lock().answered.len()
    }

    /// `xid` was answered at once (an error, a read, nothing to wait for) after `begin`.
    pub fn abandon(&self, xid: u64) {
        self.state.lock().pending.remove(&xid);
        self.note_replied(xid);
    }

    /// `xid`'s reply is released: returns where to send it — the client's connection now,
    /// wherever the request came in, counted in flight there until the caller drops the guard
    /// after appending — and whether the session became idle. `durable` false: its commit
    /// failed, so its record goes too — a resend must not be told it succeeded.
    ///
    /// The guard is taken under the lock that takes `xid` out of `pending`: a closing reader
    /// there (whose `owes_replies_to` looks at `pending`) sees one or the other throughout.
    pub fn release(&self, xid: u64, durable: bool) -> (Option<InFlight>, bool) {
        let (to, idle) = {
            let mut state = self.state.lock();
            state.pending.remove(&xid);
            if !durable {
                state.answered.remove(xid);
            }
            (state.conn.as_ref().map(|c| c.start(0)), state.is_idle())
        };
        self.note_replied(xid);
        (to, idle)
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

    /// The client is told `transno` before its commit. Returns whether the journal did not
    /// know the client yet (then the caller journals it before this mutation's record, and
    /// holds this reply until its commit), and the transno whose commit makes the client
    /// known: no early reply may leave before that is durable.
    ///
    /// When it is the first, `announce` (the caller's KnowClient to the committer) runs under
    /// the session's lock, as `settle`'s `forget` does: the committer then sees the two in
    /// the order the session changed, and a forget never overtakes a later know.
    pub fn know(&self, transno: u64, announce: impl FnOnce()) -> Know {
        let mut state = self.state.lock();
        state.highest_unsafe = state.highest_unsafe.max(transno);
        let first = !std::mem::replace(&mut state.known, true);
        if first {
            state.known_at = transno;
            announce();
        }
        Know {
            first,
            known_at: state.known_at,
        }
    }

    /// Everything up to `durable` is durable. Returns `true` if the client has gone away and
    /// holds nothing the journal must remember it for (the caller has it forgotten). A
    /// connected client stays known, as Lustre keeps a connected client in its last_rcvd
    /// file: forgetting it between bursts would make the first reply of each burst wait for a
    /// commit. Under the session's lock, so a reply told early meanwhile keeps it known.
    ///
    /// When it settles, `forget` (the caller's ForgetClient to the committer, not before the
    /// commit of the transno it is given) runs under the same lock: see `know`.
    pub fn settle(&self, durable: u64, forget: impl FnOnce(u64)) -> bool {
        let mut state = self.state.lock();
        if state.known && state.conn.is_none() && state.highest_unsafe <= durable {
            state.known = false;
            forget(state.highest_unsafe);
            return true;
        }
        false
    }

    /// The window closed before the client finished replaying: the journal forgets it
    /// (`forget`, the caller's ForgetClient, sent under the session's lock as `settle`'s is),
    /// and its next early mutation makes it known again.
    pub fn evicted(&self, forget: impl FnOnce()) {
        let mut state = self.state.lock();
        state.known = false;
        forget();
    }

    /// Whether the journal knows the client.
    pub fn is_known(&self) -> bool {
        self.state.lock().known
    }

    /// The client's connection now, if it has one.
    pub fn connection(&self) -> Option<Arc<ConnOutput>> {
        self.state.lock().conn.clone()
    }

    /// Whether requests of this client wait for replies that will leave through `conn`,
    /// its connection now: a resend joined to its original, made on an older connection,
    /// is answered here, though only the older one counts it in flight.
    pub fn owes_replies_to(&self, conn: &ConnOutput) -> bool {
        let state = self.state.lock();
        !state.pending.is_empty() && state.conn.as_ref().is_some_and(|c| c.id() == conn.id())
    }

    /// Requests waiting for their reply.
    pub fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    fn is_idle(&self) -> bool {
        self.state.lock().is_idle()
    }
}

impl State {
    /// No connection, nothing pending, nothing told early, no record: the session may go.
    /// One told early stays until settled, and one with records until its client returns or
    /// it expires, so a client that comes back meanwhile finds it again.
    fn is_idle(&self) -> bool {
        self.conn.is_none() && self.pending.is_empty() && !self.known && self.answered.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attaches `conn` as `client`, proving whatever secret the session has.
    fn attach(sessions: &Sessions, client: u64, conn: Arc<ConnOutput>) -> Attached {
        sessions.attach(client, conn, |_| true).unwrap()
    }

    /// `Sessions::expire`, with the clients whose records it drops.
    fn expire(sessions: &Sessions, expiry: Duration) -> (Vec<u64>, usize) {
        let mut dropped = Vec::new();
        let forgotten = sessions.expire(expiry, |client| dropped.push(client));
        (dropped, forgotten)
    }

    #[test]
    fn a_second_connect_replaces_the_first_and_a_resend_joins_its_original() {
        let sessions = Sessions::default();
        let first = Arc::new(ConnOutput::new(1 << 10));
        let second = Arc::new(ConnOutput::new(1 << 10));
        let a = attach(&sessions, 42, first.clone());
        assert!(a.replaced.is_none());
        assert_eq!(a.session.begin(7), Begin::New, "first time: execute");
        assert_eq!(
            a.session.begin(7),
            Begin::Joined,
            "resend while pending: join, do not execute"
        );

        let b = attach(&sessions, 42, second.clone());
        assert!(
            Arc::ptr_eq(&a.session, &b.session),
            "same identity, same session"
        );
        assert_eq!(b.replaced.map(|c| c.id()), Some(first.id()));
        // The old connection closing does not take the client's new one away.
        assert!(!sessions.detach(&a.session, &first));
        let (to, idle) = b.session.release(7, true);
        assert_eq!(
            to.map(|g| g.conn().id()),
            Some(second.id()),
            "reply follows the client"
        );
        assert!(!idle);
        assert_eq!(b.session.replied_xid(), 7);
        assert_eq!(b.session.begin(7), Begin::New, "nothing recorded: execute");
        b.session.abandon(7);
    }

    #[test]
    fn a_resend_of_an_answered_mutation_is_answered_from_its_record_until_acked() {
        let sessions = Sessions::default();
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = attach(&sessions, 42, conn.clone()).session;
        assert_eq!(s.begin(3), Begin::New);
        s.remember(3, 30, Body::Done, 0);
        assert_eq!(s.begin(4), Begin::New);
        s.remember(4, 31, Body::Pong, 0);
        s.release(3, true);
        s.release(4, true);
        let again = Answered {
            transno: 30,
            body: Body::Done,
            ticket: 0,
        };
        assert_eq!(s.begin(3), Begin::Answered(again));
        // Away with records: kept for the client's return, not forgotten at once.
        assert!(sessions.detach(&s, &conn));
        assert!(!sessions.forget_if_idle(42, || {}));
        assert_eq!(sessions.len(), 1);
        let back = attach(&sessions, 42, conn.clone()).session;
        assert!(Arc::ptr_eq(&s, &back));
        // The client has the reply of 3 now: its record goes; 4's stays.
        back.note_acked(3);
        assert_eq!(back.begin(9), Begin::New);
        back.abandon(9);
        assert_eq!(back.remembered(), 1);
        assert!(matches!(back.begin(4), Begin::Answered(a) if a.transno == 31));
        back.note_acked(9);
        assert_eq!(back.begin(10), Begin::New);
        back.abandon(10);
        assert_eq!(back.remembered(), 0);
        assert!(sessions.detach(&back, &conn));
        assert!(
            sessions.forget_if_idle(42, || {}),
            "forgotten; its journal records must be dropped"
        );
        assert!(sessions.is_empty());
    }

    impl AnsweredLog {
        /// Every xid held, in order.
        fn xids(&self) -> Vec<u64> {
            let mut all: Vec<u64> = self
                .in_order
                .iter()
                .map(|(x, _)| *x)
                .chain(self.stragglers.keys().copied())
                .collect();
            all.sort_unstable();
            all
        }
    }

    #[test]
    fn the_answer_log_finds_every_answer_and_trims_below_the_watermark() {
        let answer = |transno| Answered {
            transno,
            body: Body::Done,
            ticket: 0,
        };
        let mut log = AnsweredLog::default();
        for xid in [3, 5, 4, 9, 1] {
            log.insert(xid, answer(xid * 10));
        }
        assert_eq!(log.xids(), [1, 3, 4, 5, 9]);
        assert_eq!(log.get(4).map(|a| a.transno), Some(40));
        assert_eq!(log.get(1).map(|a| a.transno), Some(10));
        assert!(log.get(2).is_none());
        log.insert(4, answer(44));
        assert_eq!(log.get(4).map(|a| a.transno), Some(44), "replaced");
        assert_eq!(log.len(), 5);
        log.remove(5);
        log.remove(1);
        log.trim(3);
        assert_eq!(log.xids(), [4, 9]);
        log.trim(100);
        assert!(log.is_empty());
    }

    /// Out-of-order xids (a client's requests on two connections) go beside the in-order
    /// deque, not into its middle: inserting them costs no shift of what comes after
    /// (regression: each one moved the whole tail, O(n) per mutation).
    #[test]
    fn out_of_order_answers_do_not_shift_the_in_order_ones() {
        let mut log = AnsweredLog::default();
        let answer = Answered {
            transno: 1,
            body: Body::Done,
            ticket: 0,
        };
        for xid in (0..10_000u64).map(|x| x * 2 + 1000) {
            log.insert(xid, answer.clone());
        }
        // Every even xid below the last, late.
        for xid in (0..10_000u64).map(|x| x * 2 + 999) {
            log.insert(xid, answer.clone());
        }
        assert_eq!(log.in_order.len(), 10_000, "the deque was not touched");
        assert_eq!(log.stragglers.len(), 10_000);
        assert!(log.get(999).is_some() && log.get(1000).is_some());
        log.trim(1999);
        assert_eq!(
            log.len(),
            20_000 - 1001,
            "500 in order and 501 late at or below 1999"
        );
    }

    #[test]
    fn a_session_keeps_at_most_its_cap_of_records_and_pending_requests() {
        let sessions = Sessions::new(3);
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = attach(&sessions, 9, conn.clone()).session;
        for xid in 1..=2 {
            assert_eq!(s.begin(xid), Begin::New);
            s.remember(xid, xid, Body::Done, 0);
            s.release(xid, true);
        }
        assert_eq!(
            s.begin(3),
            Begin::New,
            "two records, one pending: at the cap"
        );
        assert_eq!(s.begin(4), Begin::Full);
        assert!(
            matches!(s.begin(1), Begin::Answered(_)),
            "resends still answered"
        );
        s.note_acked(2);
        assert_eq!(s.begin(4), Begin::New, "the watermark let two go");
    }

    /// A session started by one connection is bound to it: another attach with its identity
    /// must prove the secret issued then; a session restored without a secret (a store of a
    /// build before bindings) is bound by the next attach.
    #[test]
    fn a_session_is_bound_to_the_secret_its_first_connect_was_issued() {
        let sessions = Sessions::default();
        let conn = Arc::new(ConnOutput::new(4));
        let first = sessions.attach(5, conn.clone(), |_| false).unwrap();
        let secret = first.issued.expect("a new session is issued a secret");
        assert!(sessions.requires_proof(5));
        assert!(!sessions.requires_proof(6));
        assert_eq!(
            sessions.attach(5, conn.clone(), |_| false).err(),
            Some(AttachRefused::Unproved)
        );
        let again = sessions.attach(5, conn.clone(), |s| *s == secret).unwrap();
        assert!(again.issued.is_none());
        // Restored with its binding: the same secret guards it.
        let restored = Sessions::default();
        restored
            .restore(vec![], vec![(5, *secret.bytes())], &[7])
            .unwrap();
        assert!(restored.requires_proof(5));
        assert!(restored.attach(5, conn.clone(), |s| *s == secret).is_ok());
        // Known without a binding: the next attach binds it.
        assert!(!restored.requires_proof(7));
        let bound = restored.attach(7, conn, |_| false).unwrap();
        assert!(bound.issued.is_some());
    }

    #[test]
    fn a_mutation_whose_commit_failed_keeps_no_record() {
        let sessions = Sessions::default();
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = attach(&sessions, 43, conn.clone()).session;
        assert_eq!(s.begin(1), Begin::New);
        s.remember(1, 10, Body::Done, 0);
        s.release(1, false);
        assert_eq!(s.remembered(), 0);
        assert_eq!(s.begin(1), Begin::New, "a resend is not told it succeeded");
    }

    #[test]
    fn an_away_session_with_records_expires_and_restored_ones_count_as_away() {
        let sessions = Sessions::default();
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = attach(&sessions, 5, conn.clone()).session;
        assert_eq!(s.begin(1), Begin::New);
        s.remember(1, 10, Body::Done, 0);
        s.release(1, true);
        assert_eq!(expire(&sessions, Duration::ZERO), (vec![], 0), "connected");
        assert!(sessions.detach(&s, &conn));
        assert_eq!(expire(&sessions, Duration::from_secs(3600)), (vec![], 0));
        assert_eq!(expire(&sessions, Duration::ZERO), (vec![5], 1));
        assert!(sessions.is_empty());

        let reply = protocol::encode(&Body::Done);
        let restored = sessions
            .restore(
                vec![ClientResend {
                    client: 6,
                    acked_xid: 1,
                    records: vec![journal::ResendRecord {
                        xid: 2,
                        transno: 20,
                        reply,
                    }],
                }],
                vec![],
                &[],
            )
            .unwrap();
        assert_eq!(restored, 1);
        let s = attach(&sessions, 6, conn.clone()).session;
        assert_eq!(s.acked_xid(), 1);
        assert!(matches!(s.begin(2), Begin::Answered(a) if a.transno == 20));
        let bad = ClientResend {
            client: 7,
            acked_xid: 0,
            records: vec![journal::ResendRecord {
                xid: 1,
                transno: 1,
                reply: vec![0xff, 0xff],
            }],
        };
        assert!(
            sessions
                .restore(vec![bad], vec![], &[])
                .unwrap_err()
                .to_string()
                .contains("xid 1")
        );
    }

    #[test]
    fn a_session_is_forgotten_once_it_has_no_connection_and_nothing_pending() {
        let sessions = Sessions::default();
        let conn = Arc::new(ConnOutput::new(1 << 10));
        let s = attach(&sessions, 5, conn.clone()).session;
        assert_eq!(s.begin(1), Begin::New);
        sessions.detach(&s, &conn);
        assert!(!sessions.forget_if_idle(5, || {}));
        assert_eq!(sessions.len(), 1, "a reply is still pending");
        let (to, idle) = s.release(1, true);
        assert!(to.is_none() && idle, "nobody to send it to");
        assert!(
            !sessions.forget_if_idle(s.client(), || {}),
            "never journaled"
        );
        assert!(sessions.is_empty());
        s.note_acked(9);
        s.note_acked(3);
        assert_eq!(s.acked_xid(), 9, "the watermark never goes down");
    }

    #[test]
    fn a_reply_released_to_a_newer_connection_is_counted_in_flight_there() {
        let sessions = Sessions::default();
        let (old, new) = (
            Arc::new(ConnOutput::new(1 << 10)),
            Arc::new(ConnOutput::new(1 << 10)),
        );
        let s = attach(&sessions, 11, old.clone()).session;
        assert_eq!(s.begin(1), Begin::New);
        assert_eq!(s.begin(2), Begin::New);
        attach(&sessions, 11, new.clone());
        assert_eq!(s.begin(1), Begin::Joined);
        assert!(s.owes_replies_to(&new) && !s.owes_replies_to(&old));
        // Released: no longer owed, but counted on the connection it will leave through
        // until the drain has appended it and dropped the guard.
        let (to, _) = s.release(1, true);
        assert_eq!(to.as_ref().map(|g| g.conn().id()), Some(new.id()));
        assert_eq!(new.inflight(), 1);
        assert!(s.owes_replies_to(&new), "2 is still pending");
        drop(to);
        assert_eq!(new.inflight(), 0, "appended: no longer in flight");
        let (to, _) = s.release(2, true);
        assert_eq!(to.map(|g| g.conn().id()), Some(new.id()));
        assert_eq!(new.inflight(), 0);
        assert!(!s.owes_replies_to(&new));
    }

    /// The committer applies known-client changes in the order it gets them: a forget sent
    /// after the session's lock was let go could arrive after the know of a client that came
    /// straight back, and leave a client the session thinks known forgotten by the journal
    /// (its early replies then unprotected by a crash). The forget is sent under the lock.
    #[test]
    fn a_forget_reaches_the_committer_before_the_know_of_a_client_that_came_back() {
        let sessions = Arc::new(Sessions::default());
        let conn = Arc::new(ConnOutput::new(4));
        let s = attach(&sessions, 8, conn.clone()).session;
        let committer = Arc::new(Mutex::new(Vec::new()));
        assert!(s.know(5, || committer.lock().push("know")).first);
        assert!(sessions.detach(&s, &conn));
        let mut back = None;
        let settled = s.settle(5, |after| {
            assert_eq!(after, 5);
            // The client reconnects and is told something early while this forget is on
            // its way to the committer.
            let (sessions, theirs) = (sessions.clone(), committer.clone());
            let (started_tx, started) = std::sync::mpsc::channel();
            back = Some(std::thread::spawn(move || {
                started_tx.send(()).unwrap();
                let s = attach(&sessions, 8, Arc::new(ConnOutput::new(4))).session;
                s.know(6, || theirs.lock().push("know")).first
            }));
            // Give it every chance to overtake: it runs, and has time to reach the lock.
            started.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            committer.lock().push("forget");
        });
        assert!(settled);
        assert!(back.unwrap().join().unwrap(), "known again");
        assert_eq!(*committer.lock(), ["know", "forget", "know"]);
        assert!(s.is_known());
    }
}
