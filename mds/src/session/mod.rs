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
//!
//! The table holds at most `--max-sessions` (`Sessions::capped`): each session's records are
//! capped, but without a cap on sessions a client making up identities grew records ×
//! identities without bound. Past it, the CONNECT of a new identity is refused (EBUSY: the
//! server is full), while every identity the server keeps may still attach. Refused, not made
//! room for: forgetting a session early would forget the records that keep its client's
//! resends from executing twice.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Most sessions kept: past it, a CONNECT that would start one is refused.
    most: usize,
    /// Sessions kept now: counted apart from the shards, so that a CONNECT checks the cap
    /// with one atomic rather than every shard's lock.
    count: AtomicUsize,
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
    /// How its reads move atimes (`mds_proto::Atime`, as a number), as its last CONNECT
    /// said.
    atime: std::sync::atomic::AtomicU8,
    /// Its changes are answered before their commit (`is_early`).
    early: std::sync::atomic::AtomicBool,
}

struct State {
    /// Where replies go; `None` while the client is away.
    conn: Option<Arc<ConnOutput>>,
    /// Requests executed (or waiting to) whose reply has not been released yet ([`Pending`]:
    /// its operation, and whether a resend of it joined it meanwhile). By xid, which the
    /// client picks: foldhash, randomly seeded per map, rather than SipHash (three lookups
    /// per request, ~130 instructions a create, counted). A client that could make its xids
    /// collide would slow only this map, which `max_records` bounds.
    pending: HashMap<u64, Pending, foldhash::fast::RandomState>,
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

/// A request executed (or waiting to) whose reply has not been released yet.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The request's operation: a resend carries the same one.
    opcode: u8,
    /// A resend of it (on a newer connection) joined it meanwhile.
    joined: bool,
}

/// How a mutation was answered: what a resend of it is answered with.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    pub transno: u64,
    pub body: Body,
    /// The replay ticket its early reply carried (0: none, or a record restored after a
    /// restart, whose transno is durable and needs no replay).
    pub ticket: u64,
    /// The request's operation, which a resend must carry too; `None` for a record restored
    /// from the store, which keeps only the reply.
    pub opcode: Option<u8>,
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
    /// The xid of a request still waiting, or answered, for another operation: not a resend
    /// but a client that used one xid twice. Neither joined nor answered from the record
    /// (that would tell it the other request's outcome); its connection closes.
    Reused,
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
    /// The identity is new and the server keeps as many sessions as it may.
    Full,
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
            most: usize::MAX,
            count: AtomicUsize::new(0),
        }
    }

    /// The same table, keeping at most `max_sessions` sessions (`--max-sessions`) that
    /// CONNECTs start; those restored from the store are kept whatever their number.
    pub fn capped(self, max_sessions: usize) -> Sessions {
        Sessions {
            most: max_sessions,
            ..self
        }
    }

    /// Counts a session about to be added by a CONNECT; `false` (nothing counted) at the cap.
    fn count_new(&self) -> bool {
        if self.count.fetch_add(1, Ordering::Relaxed) >= self.most {
            self.count.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
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
        let session = match shard.get(&client) {
            Some(session) => session.clone(),
            None if self.count_new() => shard
                .entry(client)
                .or_insert_with(|| Session::new(client, None, self.max_records))
                .clone(),
            None => return Err(AttachRefused::Full),
        };
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
                        opcode: None,
                    };
                    state.answered.insert(record.xid, answered);
                    records += 1;
                }
            }
            if self
                .shard(found.client)
                .lock()
                .insert(found.client, session)
                .is_none()
            {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Known clients (replays) and bound ones with no record left: their identity stays
        // theirs while the journal keeps anything of them.
        for client in known.iter().copied().chain(bound) {
            let mut shard = self.shard(client).lock();
            shard.entry(client).or_insert_with(|| {
                self.count.fetch_add(1, Ordering::Relaxed);
                restored(client)
            });
        }
        Ok(records)
    }

    /// Forgets sessions whose client has been away longer than `expiry` with nothing
    /// pending: their records and open handles are of no use to a client that gave up.
    /// Calls `ended(client, journaled)` for each, under its shard's lock (see
    /// `forget_if_idle`) — `journaled`: the journal holds records of it to drop — and
    /// returns how many were forgotten in all.
    pub fn expire(&self, expiry: Duration, mut ended: impl FnMut(u64, bool)) -> usize {
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
                    ended(client, state.journaled);
                }
                !expired
            });
        }
        self.count.fetch_sub(forgotten, Ordering::Relaxed);
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
            self.count.fetch_sub(1, Ordering::Relaxed);
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
        self.count.load(Ordering::Relaxed)
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
                pending: HashMap::default(),
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
            atime: std::sync::atomic::AtomicU8::new(0),
            early: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn client(&self) -> u64 {
        self.client
    }

    /// How the session's reads move atimes, as its last CONNECT said.
    pub fn atime(&self) -> mds_proto::Atime {
        match self.atime.load(Ordering::Relaxed) {
            1 => mds_proto::Atime::Noatime,
            2 => mds_proto::Atime::Strictatime,
            _ => mds_proto::Atime::Relatime,
        }
    }

    /// Whether the session's changes are answered at once (early), as its last CONNECT
    /// settled: the session asked, or the server's `--ack` said.
    pub fn is_early(&self) -> bool {
        self.early.load(Ordering::Relaxed)
    }

    pub fn set_early(&self, early: bool) {
        self.early.store(early, Ordering::Relaxed);
    }

    pub fn set_atime(&self, atime: mds_proto::Atime) {
        let n = match atime {
            mds_proto::Atime::Relatime => 0,
            mds_proto::Atime::Noatime => 1,
            mds_proto::Atime::Strictatime => 2,
        };
        self.atime.store(n, Ordering::Relaxed);
    }

    /// Marks `xid` as waiting for its reply, unless it is a resend: of a request that has not
    /// been answered yet (it must not execute again; its reply comes when the original is
    /// released), or of one executed and answered already (answer it from its record).
    /// Records at or below the client's watermark go first: it has their replies.
    pub fn begin(&self, xid: u64, opcode: u8) -> Begin {
        self.begin_capped(xid, opcode, true)
    }

    /// [`Session::begin`] for a replay: not held to the cap on records, which a client's
    /// replays all sent at once may pass (they are bounded by what the crashed start could
    /// leave uncommitted, and refusing one would lose a change its client was told of).
    pub fn begin_replay(&self, xid: u64, opcode: u8) -> Begin {
        self.begin_capped(xid, opcode, false)
    }

    fn begin_capped(&self, xid: u64, opcode: u8, capped: bool) -> Begin {
        let acked = self.acked_xid();
        let mut state = self.state.lock();
        state.answered.trim(acked);
        if let Some(pending) = state.pending.get_mut(&xid) {
            if pending.opcode != opcode {
                return Begin::Reused;
            }
            pending.joined = true;
            return Begin::Joined;
        }
        if let Some(answered) = state.answered.get(xid) {
            if answered.opcode.is_some_and(|op| op != opcode) {
                return Begin::Reused;
            }
            return Begin::Answered(answered.clone());
        }
        // Pending requests may each leave a record when they execute: counted too.
        if capped && state.answered.len() + state.pending.len() >= self.max_records {
            return Begin::Full;
        }
        state.pending.insert(
            xid,
            Pending {
                opcode,
                joined: false,
            },
        );
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

    /// `xid` (of operation `opcode`) executed as `transno` and is answered with `body` (and
    /// `ticket`): kept until the client's watermark passes it. The caller journals the same
    /// record with the mutation.
    pub fn remember(&self, xid: u64, opcode: u8, transno: u64, body: Body, ticket: u64) {
        let mut state = self.state.lock();
        state.answered.insert(
            xid,
            Answered {
                transno,
                body,
                ticket,
                opcode: Some(opcode),
            },
        );
        state.journaled = true;
    }

    /// Executed mutations whose replies the client may not have yet.
    pub fn remembered(&self) -> usize {
        self.state.lock().answered.len()
    }

    /// `xid` is answered at once (an error, a read, nothing to wait for) after `begin`.
    /// Returns whether a resend of it joined it meanwhile: that copy waits on the session's
    /// connection of now, which the answer must reach (through the reply queue, whose release
    /// sends there) rather than the connection the request came in on, perhaps cut.
    #[must_use = "a joined resend is answered only through the reply queue"]
    pub fn abandon(&self, xid: u64) -> bool {
        let joined = self
            .state
            .lock()
            .pending
            .remove(&xid)
            .is_some_and(|p| p.joined);
        self.note_replied(xid);
        joined
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
mod tests;
