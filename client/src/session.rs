//! The client's side of a session: its identity, its xids, which of them still wait for a
//! reply, and — with a server that answers before the commit (`--ack early`) — the requests
//! answered but not durable yet ("unsafe"), kept until `last_committed` covers them so they
//! can be replayed if the server restarts first, each with the credentials it was sent with,
//! and those a restart lost, kept until the caller asks which they were — and the files it
//! holds open (`handles.rs`), reopened after a restart. One [`Session`] outlives the
//! connections it is used on, so a client that reconnects keeps its identity, keeps counting
//! xids upward, keeps its unsafe requests and its open handles, and every request can tell the
//! server the watermark below which it has every reply (`acked_xid`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mds_proto::{AckAsked, Atime, Body, Cred, Errno, MAX_GROUPS, Op, OpenFlags, Reply};
use parking_lot::Mutex;

use crate::auth::{PeerKey, SessionSecret};
use crate::handles::{Handle, Handles};

/// A client identity and its xid bookkeeping; share it between the successive connections of
/// one client (`Arc<Session>`: a reconnect takes the place of the connection it lost). The
/// server keeps one connection per identity — a second CONNECT replaces the first, and must
/// prove the session secret the first was issued — so a pool of connections wants a session
/// each.
#[derive(Debug)]
pub struct Session {
    id: u64,
    /// The credentials a request carries unless its caller gives others (a mount sends each
    /// request with its caller's).
    cred: Cred,
    /// How the session's reads move atimes, said at every CONNECT.
    atime: Atime,
    /// When the session asks to be answered, said at every CONNECT.
    ack: AckAsked,
    xids: Mutex<Xids>,
    /// The server answers mutations before their commit: keep what it answered until safe.
    early: AtomicBool,
    /// The server start the session last talked to: a new one after a restart.
    server_boot: AtomicU64,
    /// The highest `last_committed` any reply or notice carried.
    last_committed: AtomicU64,
    /// Mutations sent and not answered yet (only with early replies), with the credentials
    /// they carry: what to keep if the answer is unsafe.
    sent: Mutex<HashMap<u64, (Op, Cred)>>,
    /// Answered but not durable yet, by transno: what a restart makes the client replay.
    unsafe_requests: Mutex<BTreeMap<u64, Unsafe>>,
    /// Replays sent and not answered (the connection broke first), by transno: whether the
    /// server executed them is unknown, so `last_committed` passing them says nothing. They
    /// are replayed again at the next connect, to the same server start or not: the server
    /// answers one it executed from its resend record, and refuses one it did not.
    unreplayed: Mutex<BTreeMap<u64, Unsafe>>,
    /// The secret the server issued this identity's session: proved at every reconnect.
    secret: Mutex<Option<SessionSecret>>,
    /// A server's session with another server of its cluster: connects with PEER_CONNECT
    /// and proves this secret instead of the shared key.
    peer: Option<Arc<PeerKey>>,
    /// Unsafe requests the server would not take back after a restart (the recovery window
    /// had closed, or the client was not known): their changes are lost.
    lost: AtomicU64,
    /// Those lost requests themselves, by transno, until [`Session::take_lost`]: a mount
    /// answers EIO for the inodes they touched.
    lost_requests: Mutex<Vec<(u64, Unsafe)>>,
    /// The files this identity holds open, and the counter their numbers come from.
    handles: Mutex<Handles>,
    /// Restarts after which the server reported a `last_committed` below one it had reported
    /// before: changes it had called durable are gone ([`Rollback`]).
    rollbacks: AtomicU64,
    /// Those restarts, until [`Session::take_rollbacks`].
    rollbacks_untaken: Mutex<Vec<Rollback>>,
}

/// A server start that came back with less than its last start had reported durable (Lustre's
/// client says the server "went back in time"): its store lost commits, or it is not the
/// store it was. Every change with a transno in `now + 1..=reported` had been answered as
/// durable, and none of them is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rollback {
    /// The highest `last_committed` the earlier start reported.
    pub reported: u64,
    /// The `last_committed` the new start came back with.
    pub now: u64,
}

/// A request answered before its commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsafe {
    pub xid: u64,
    pub op: Op,
    /// The credentials it was sent with, which its replay carries again: the owner of what it
    /// creates, and whose permissions it was checked against.
    pub cred: Cred,
    /// The inode it created (0 if none): a replay creates it with the same number.
    pub ino: u64,
    /// The reply's replay ticket, which the replay must carry.
    pub ticket: u64,
    /// The xid its replay was sent with, until that replay is answered; 0 if none is
    /// outstanding. A replay is a new request with an xid of its own, so a resend of one
    /// whose answer was cut off is answered from the replay's resend record, on this server
    /// start or, once committed, on the next.
    pub replayed_as: u64,
}

/// What a CONNECT reply leaves the client to replay.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replays {
    /// In transno order.
    pub requests: Vec<(u64, Unsafe)>,
    /// The same server start as before: these are replays whose answers were cut off, which
    /// the server answers from its records whether its recovery window is open or not.
    pub same_start: bool,
}

#[derive(Debug)]
struct Xids {
    /// The next xid to hand out; xids start at 1.
    next: u64,
    /// Handed out and not yet answered, oldest first: a resend after a reconnect reuses
    /// these. Xids are handed out in order, so each goes on the back and the oldest is the
    /// front; most replies come in order too, so finishing one is usually a pop at the front
    /// (a `BTreeSet` insert and remove were ~150 instructions a request, counted).
    outstanding: VecDeque<u64>,
}

impl Session {
    /// A new identity drawn from the operating system's random source, with the credentials
    /// of this process.
    pub fn new() -> Session {
        Session::with_cred(process_cred())
    }

    /// A new identity with the given credentials.
    pub fn with_cred(cred: Cred) -> Session {
        Session {
            id: random_identity(),
            cred,
            atime: Atime::default(),
            ack: AckAsked::default(),
            xids: Mutex::new(Xids {
                next: 1,
                outstanding: VecDeque::new(),
            }),
            early: AtomicBool::new(false),
            server_boot: AtomicU64::new(0),
            last_committed: AtomicU64::new(0),
            sent: Mutex::new(HashMap::new()),
            unsafe_requests: Mutex::new(BTreeMap::new()),
            unreplayed: Mutex::new(BTreeMap::new()),
            secret: Mutex::new(None),
            peer: None,
            lost: AtomicU64::new(0),
            lost_requests: Mutex::new(Vec::new()),
            handles: Mutex::new(Handles::new()),
            rollbacks: AtomicU64::new(0),
            rollbacks_untaken: Mutex::new(Vec::new()),
        }
    }

    /// A new identity for a server speaking to another server of its cluster: root's
    /// credentials, connecting with PEER_CONNECT and proving `key`, the cluster's peer
    /// secret.
    pub fn peer(key: Arc<PeerKey>) -> Session {
        Session {
            peer: Some(key),
            ..Session::with_cred(Cred::default())
        }
    }

    /// The same session with `atime` as how its reads move atimes (a mount's `noatime` or
    /// `strictatime`; relatime unless said).
    pub fn with_atime(self, atime: Atime) -> Session {
        Session { atime, ..self }
    }

    /// How the session's reads move atimes: what its CONNECT says.
    pub fn atime(&self) -> Atime {
        self.atime
    }

    /// The same session asking to be answered as `ack` says (the server's `--ack` unless
    /// said); the server's CONNECTED tells which it does ([`Session::is_early`]).
    pub fn with_ack(self, ack: AckAsked) -> Session {
        Session { ack, ..self }
    }

    /// When the session asks to be answered: what its CONNECT says.
    pub fn ack_asked(&self) -> AckAsked {
        self.ack
    }

    /// The cluster's peer secret, for a server's session with another server.
    pub fn peer_key(&self) -> Option<&PeerKey> {
        self.peer.as_deref()
    }

    /// The identity CONNECT carries.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    /// Hands out the next xid and marks it outstanding, returning it with the watermark the
    /// request should carry.
    pub fn begin(&self) -> (u64, u64) {
        let mut xids = self.xids.lock();
        let xid = xids.next;
        xids.next += 1;
        xids.outstanding.push_back(xid);
        let acked = xids.acked();
        (xid, acked)
    }

    /// [`Session::begin`] for `op`: a SETLK that may wait (F_SETLKW, a blocking flock) is
    /// not marked outstanding — it may be held for as long as another client keeps its
    /// lock, and an outstanding xid holds the session's watermark below it, so the server
    /// would keep every later resend record and refuse the session's mutations at its cap.
    /// It leaves no resend record to trim, and a resend of it after a reconnect only asks
    /// again.
    pub fn begin_for(&self, op: &Op) -> (u64, u64) {
        if !matches!(op, Op::Setlk { wait: true, .. }) {
            return self.begin();
        }
        let mut xids = self.xids.lock();
        // Taken before this xid is handed out: it has no reply yet.
        let acked = xids.acked();
        let xid = xids.next;
        xids.next += 1;
        (xid, acked)
    }

    /// The watermark for a request sent again with an xid it already has (a resend).
    pub fn acked_xid(&self) -> u64 {
        self.xids.lock().acked()
    }

    /// `xid` has its reply.
    pub fn finish(&self, xid: u64) {
        self.xids.lock().finish(xid);
    }

    /// Whether the server answers mutations before their commit.
    pub fn is_early(&self) -> bool {
        self.early.load(Ordering::Relaxed)
    }

    /// The server's CONNECT reply: whether it answers early, and which start it is. Returns
    /// what to replay: after a restart of the server the session talked to, the unsafe
    /// requests `last_committed` does not cover and the replays whose answers were cut off;
    /// to the same start, those replays alone. In transno order.
    /// An evicted client (it came back after the window closed) replays nothing: all it
    /// held unsafe is lost, even what `last_committed` now covers (those transnos were
    /// skipped).
    pub fn connected(
        &self,
        server_boot: u64,
        early: bool,
        evicted: bool,
        last_committed: u64,
    ) -> Replays {
        self.early.store(early, Ordering::Relaxed);
        let before = self.server_boot.swap(server_boot, Ordering::Relaxed);
        let restarted = before != 0 && before != server_boot;
        if evicted && restarted {
            let unsafe_requests = std::mem::take(&mut *self.unsafe_requests.lock());
            let unreplayed = std::mem::take(&mut *self.unreplayed.lock());
            for (transno, request) in unsafe_requests.into_iter().chain(unreplayed) {
                self.lose(transno, request);
            }
            self.sent.lock().clear();
        }
        let reported = self.last_committed.load(Ordering::Relaxed);
        if restarted && last_committed < reported {
            // Kept before counted, as losses are. The transnos above `last_committed` are
            // the new start's to hand out again: what it reports from now on is compared
            // with what it has, not with what the last start had.
            self.rollbacks_untaken.lock().push(Rollback {
                reported,
                now: last_committed,
            });
            self.rollbacks.fetch_add(1, Ordering::Release);
            self.last_committed.store(last_committed, Ordering::Relaxed);
        }
        self.committed(last_committed);
        let mut replay = std::mem::take(&mut *self.unreplayed.lock());
        if restarted {
            // What was in flight to the old start either executed and was lost with it, or
            // never arrived: the caller resends it; it is not a replay.
            self.sent.lock().clear();
            // A replay whose answer was cut off keeps its xid, to this start too: if it
            // executed and committed before the last start went, its resend record answers
            // it; if not, it executes now or is refused as too late. A new xid could tell
            // neither from a transno skipped when the window closed.
            replay.append(&mut self.unsafe_requests.lock());
        }
        Replays {
            requests: replay.into_iter().collect(),
            same_start: !restarted,
        }
    }

    /// The secret the server issued this identity, if it issued one.
    pub fn secret(&self) -> Option<SessionSecret> {
        *self.secret.lock()
    }

    /// The server issued a secret to this identity's new session (`Connected`): the proof of
    /// every reconnect from now on.
    pub fn set_secret(&self, secret: SessionSecret) {
        *self.secret.lock() = Some(secret);
    }

    /// A mutation is about to be sent with `cred` (early replies only): keep both until its
    /// answer says whether it is safe.
    pub fn sending(&self, xid: u64, op: &Op, cred: &Cred) {
        if self.is_early() && op.is_mutation() {
            self.sent.lock().insert(xid, (op.clone(), cred.clone()));
        }
    }

    /// A reply or notice arrived.
    pub fn answered(&self, reply: &Reply) {
        // Without early replies nothing is kept: no hash of the xid to learn that.
        let kept = {
            let mut sent = self.sent.lock();
            if sent.is_empty() {
                None
            } else {
                sent.remove(&reply.xid)
            }
        };
        if let Some((op, cred)) = kept
            && reply.result.is_ok()
            && reply.transno > reply.last_committed
        {
            let ino = match &reply.result {
                Ok(Body::Attr(attr)) if op.creates_inode() => attr.ino,
                _ => 0,
            };
            let kept = Unsafe {
                xid: reply.xid,
                op,
                cred,
                ino,
                ticket: reply.ticket,
                replayed_as: 0,
            };
            self.unsafe_requests.lock().insert(reply.transno, kept);
        }
        self.committed(reply.last_committed);
    }

    /// Keeps an unsafe request again (its replay was answered before its commit).
    pub fn keep_unsafe(&self, transno: u64, mut request: Unsafe) {
        request.replayed_as = 0;
        if transno > self.last_committed.load(Ordering::Relaxed) {
            self.unsafe_requests.lock().insert(transno, request);
        }
    }

    /// A replay got no answer (the connection broke first): replayed again at the next
    /// connect, and never taken for durable meanwhile.
    pub fn keep_unreplayed(&self, transno: u64, request: Unsafe) {
        self.unreplayed.lock().insert(transno, request);
    }

    /// Everything up to `last_committed` is durable: forget those unsafe requests.
    pub fn committed(&self, last_committed: u64) {
        let before = self
            .last_committed
            .fetch_max(last_committed, Ordering::Relaxed);
        if last_committed > before {
            let mut unsafe_requests = self.unsafe_requests.lock();
            if unsafe_requests
                .first_key_value()
                .is_some_and(|(&t, _)| t <= last_committed)
            {
                *unsafe_requests = unsafe_requests.split_off(&(last_committed + 1));
            }
        }
    }

    /// Requests answered before their commit and not known to be durable yet (replays whose
    /// answers were cut off among them).
    pub fn unsafe_count(&self) -> usize {
        self.unsafe_requests.lock().len() + self.unreplayed.lock().len()
    }

    /// The highest `last_committed` the server reported.
    pub fn last_committed(&self) -> u64 {
        self.last_committed.load(Ordering::Relaxed)
    }

    /// Counts the unsafe request of `transno` whose change a restart lost, and keeps it for
    /// [`Session::take_lost`].
    pub fn lose(&self, transno: u64, request: Unsafe) {
        // Kept before counted: a caller that sees the count move finds the request there.
        self.lost_requests.lock().push((transno, request));
        self.lost.fetch_add(1, Ordering::Release);
    }

    /// Unsafe requests whose changes a server restart lost (the server did not wait for this
    /// client, or its window closed first).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Acquire)
    }

    /// The lost requests (by transno, in the order they were lost) not taken yet: what a
    /// caller must report as lost, and for which inodes.
    pub fn take_lost(&self) -> Vec<(u64, Unsafe)> {
        std::mem::take(&mut *self.lost_requests.lock())
    }

    /// Server restarts that came back without commits an earlier start reported
    /// ([`Rollback`]).
    pub fn rollbacks(&self) -> u64 {
        self.rollbacks.load(Ordering::Acquire)
    }

    /// The rollbacks not taken yet, in the order they were found: what a caller must report.
    pub fn take_rollbacks(&self) -> Vec<Rollback> {
        std::mem::take(&mut *self.rollbacks_untaken.lock())
    }

    /// A handle for `ino` opened as `flags`, with a number no other handle of this identity
    /// has had; send its [`Handle::open_op`], and once that succeeds record it with
    /// [`Session::handle_opened`]. ([`crate::Client::open`] does both.)
    pub fn new_handle(&self, ino: u64, flags: OpenFlags) -> Handle {
        self.handles.lock().draw(ino, flags)
    }

    /// The server start `server_boot` ([`crate::Client::server_boot`]) opened `handle`: a
    /// connect to any other start reopens it.
    pub fn handle_opened(&self, handle: Handle, server_boot: u64) {
        self.handles.lock().opened(handle, server_boot);
    }

    /// `handle` was released (or is given up): nothing reopens it.
    pub fn handle_released(&self, handle: Handle) {
        self.handles.lock().forget(handle);
    }

    /// The errno a handle whose reopen was refused answers to every use; `None` while it
    /// is alive.
    pub fn handle_error(&self, handle: Handle) -> Option<Errno> {
        self.handles.lock().dead(handle)
    }

    /// Handles held open, dead ones (not released yet) among them.
    pub fn open_handles(&self) -> usize {
        self.handles.lock().len()
    }

    /// The live handles no open on `server_boot` backs: what a connect to it reopens.
    pub(crate) fn handles_to_reopen(&self, server_boot: u64) -> Vec<Handle> {
        self.handles.lock().to_reopen(server_boot)
    }

    pub(crate) fn handle_reopened(&self, handle: Handle, server_boot: u64) {
        self.handles.lock().reopened(handle, server_boot);
    }

    /// A reopen was refused with `errno`: the handle answers it from now on.
    pub(crate) fn handle_died(&self, handle: Handle, errno: Errno) {
        self.handles.lock().died(handle, errno);
    }
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Xids {
    /// Every xid at or below this has its reply: just below the oldest outstanding one, or
    /// everything handed out so far.
    fn acked(&self) -> u64 {
        self.outstanding
            .front()
            .map_or(self.next - 1, |&oldest| oldest - 1)
    }

    /// `xid` is no longer outstanding (nothing if it was not).
    fn finish(&mut self, xid: u64) {
        if self.outstanding.front() == Some(&xid) {
            self.outstanding.pop_front();
        } else if let Ok(at) = self.outstanding.binary_search(&xid) {
            self.outstanding.remove(at);
        }
    }
}

/// A random non-zero identity: two clients must never share one, and a restarted client must
/// not inherit the session of its previous run.
fn random_identity() -> u64 {
    loop {
        let id = getrandom::u64().expect("the operating system's random source");
        if id != 0 {
            return id;
        }
    }
}

/// The credentials of this process, as requests carry them.
pub fn process_cred() -> Cred {
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut groups = vec![0 as libc::gid_t; MAX_GROUPS];
    // SAFETY: the buffer holds MAX_GROUPS entries, as the count passed says; on error (more
    // groups than that) the call writes nothing and returns -1.
    let n = unsafe { libc::getgroups(MAX_GROUPS as libc::c_int, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(n).unwrap_or(0));
    Cred { uid, gid, groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_increase_and_the_watermark_stays_below_the_oldest_unanswered() {
        let s = Session::with_cred(Cred::default());
        assert_eq!(s.begin(), (1, 0));
        assert_eq!(s.begin(), (2, 0));
        assert_eq!(s.begin(), (3, 0));
        s.finish(2);
        assert_eq!(s.acked_xid(), 0, "1 still waits");
        s.finish(1);
        assert_eq!(s.acked_xid(), 2, "3 still waits");
        s.finish(3);
        assert_eq!(s.acked_xid(), 3);
        assert_eq!(s.begin(), (4, 3));
    }

    /// A lock request that may wait does not hold the watermark: the mutations after it are
    /// acknowledged while it waits.
    #[test]
    fn a_setlk_that_may_wait_does_not_hold_the_watermark() {
        let s = Session::with_cred(Cred::default());
        let lock = mds_proto::FileLock {
            start: 0,
            end: u64::MAX,
            kind: mds_proto::LockKind::Write,
            pid: 1,
        };
        let wait = |wait| Op::Setlk {
            ino: 2,
            handle: 1,
            owner: 9,
            lock,
            wait,
        };
        assert_eq!(s.begin_for(&wait(true)), (1, 0));
        assert_eq!(s.begin_for(&Op::Ping), (2, 1));
        s.finish(2);
        assert_eq!(s.acked_xid(), 2, "the waiting lock holds nothing back");
        assert_eq!(s.begin_for(&wait(false)), (3, 2));
        assert_eq!(
            s.acked_xid(),
            2,
            "one that cannot wait is outstanding as any"
        );
        s.finish(1);
        s.finish(3);
        assert_eq!(s.acked_xid(), 3);
    }

    proptest::proptest! {
        /// In any order of replies, finishing some twice or finishing xids never handed out,
        /// the watermark is just below the oldest unanswered xid (a set's answer).
        #[test]
        fn the_watermark_is_a_sets_in_any_order(
            steps in proptest::collection::vec((proptest::bool::ANY, 0u64..40), 0..200),
        ) {
            let s = Session::with_cred(Cred::default());
            let mut model = std::collections::BTreeSet::new();
            let mut next = 1;
            for (begin, pick) in steps {
                if begin {
                    let (xid, acked) = s.begin();
                    proptest::prop_assert_eq!(xid, next);
                    proptest::prop_assert_eq!(acked, model.first().map_or(next - 1, |&o| o - 1));
                    model.insert(xid);
                    next += 1;
                } else {
                    s.finish(pick);
                    model.remove(&pick);
                }
                proptest::prop_assert_eq!(
                    s.acked_xid(),
                    model.first().map_or(next - 1, |&o| o - 1)
                );
            }
        }
    }

    fn unsafe_create(xid: u64, name: &str) -> Unsafe {
        Unsafe {
            xid,
            op: Op::Create {
                parent: 1,
                name: name.into(),
                mode: 0o644,
            },
            cred: Cred {
                uid: 1000 + xid as u32,
                gid: 100,
                groups: vec![],
            },
            ino: xid + 100,
            ticket: xid ^ 0x55,
            replayed_as: 0,
        }
    }

    /// A start that comes back with a lower `last_committed` than the last start reported is
    /// a rollback, found once; the same start reporting a lower one again (it cannot) or a
    /// new start that kept everything is not.
    #[test]
    fn a_restart_without_reported_commits_is_a_rollback_found_once() {
        let s = Session::with_cred(Cred::default());
        s.connected(7, false, false, 3);
        s.committed(40);
        // The same start, an older figure (a notice overtaken by a reply): nothing.
        s.connected(7, false, false, 35);
        // A new start with everything: nothing.
        s.connected(8, false, false, 40);
        assert_eq!(s.rollbacks(), 0);
        // A new start without 31..=40.
        s.connected(9, true, false, 30);
        assert_eq!(s.rollbacks(), 1);
        assert_eq!(
            s.take_rollbacks(),
            vec![Rollback {
                reported: 40,
                now: 30
            }]
        );
        assert!(s.take_rollbacks().is_empty(), "taken once");
        // What this start reports from now on is judged against what it has: an unsafe
        // request at 35, a transno handed out again, is kept until 35 is committed here.
        assert_eq!(s.last_committed(), 30);
        s.keep_unsafe(35, unsafe_create(1, "a"));
        assert_eq!(s.unsafe_count(), 1);
        s.committed(35);
        assert_eq!(s.unsafe_count(), 0);
        assert_eq!(s.rollbacks(), 1);
    }

    /// A replay cut off before its answer is replayed at the next connect — to the same
    /// server start too, whose window may have closed (regression: it was put back among the
    /// unsafe requests, which only a new start replays, and a later `last_committed` past its
    /// transno then dropped it as durable, uncounted, whether the server had it or not).
    #[test]
    fn a_replay_cut_off_is_replayed_at_the_next_connect_even_to_the_same_start() {
        let s = Session::with_cred(Cred::default());
        assert!(s.connected(7, true, false, 0).requests.is_empty());
        s.keep_unsafe(10, unsafe_create(1, "a"));
        s.keep_unsafe(11, unsafe_create(2, "b"));
        // The server restarts: both are to be replayed.
        let first = s.connected(8, true, false, 9);
        assert_eq!(first.requests.len(), 2);
        assert!(!first.same_start);
        // 10's replay is answered; 11's is cut off by a broken connection.
        let mut replayed = first.requests.into_iter();
        let (t10, r10) = replayed.next().unwrap();
        s.keep_unsafe(t10, r10);
        let (t11, mut r11) = replayed.next().unwrap();
        let (replay_xid, _) = s.begin();
        r11.replayed_as = replay_xid;
        s.keep_unreplayed(t11, r11.clone());
        assert_eq!(s.unsafe_count(), 2);
        // Whatever `last_committed` says now, 11 is not taken for durable: the server may
        // never have had it (its transno skipped when the window closed).
        s.committed(20);
        assert_eq!(s.unsafe_count(), 1, "10 is durable; 11 is unknown");
        assert_eq!(s.lost(), 0);
        let again = s.connected(8, true, false, 20);
        assert!(again.same_start);
        assert_eq!(again.requests, vec![(11, r11.clone())]);
        assert_eq!(
            s.acked_xid(),
            replay_xid - 1,
            "its replay's xid is still outstanding"
        );
        // To a new start too it is replayed with the same xid: the replay's record, if it
        // committed, answers it there.
        s.keep_unreplayed(11, r11);
        let anew = s.connected(9, true, false, 20);
        let (t11, r11) = anew.requests.into_iter().next().unwrap();
        assert_eq!(r11.replayed_as, replay_xid);
        // Once sent again it is the replay's answer that decides.
        assert_eq!(s.unsafe_count(), 0);
        s.lose(t11, r11.clone());
        assert_eq!(s.lost(), 1);
        assert_eq!(s.take_lost(), vec![(11, r11)], "kept for the caller, once");
        assert!(s.take_lost().is_empty());
        assert_eq!(s.lost(), 1, "the count stays");
    }

    #[test]
    fn an_evicted_client_loses_its_unreplayed_requests_too() {
        let s = Session::with_cred(Cred::default());
        s.connected(7, true, false, 0);
        s.keep_unsafe(10, unsafe_create(1, "a"));
        s.keep_unreplayed(11, unsafe_create(2, "b"));
        let after = s.connected(8, true, true, 30);
        assert!(after.requests.is_empty());
        assert_eq!(s.lost(), 2);
        let lost: Vec<u64> = s.take_lost().into_iter().map(|(t, _)| t).collect();
        assert_eq!(lost, [10, 11], "both are kept, with their transnos");
        assert_eq!(s.unsafe_count(), 0);
    }

    /// The handle bookkeeping through the session's own methods: numbers from its counter,
    /// held once opened, reopened on another start, dead after a refused reopen.
    #[test]
    fn the_session_numbers_records_and_forgets_its_handles() {
        let s = Session::with_cred(Cred::default());
        let flags = OpenFlags {
            read: true,
            ..OpenFlags::default()
        };
        let a = s.new_handle(10, flags);
        let b = s.new_handle(11, flags);
        assert_eq!((a.id(), b.id(), a.ino(), a.flags()), (1, 2, 10, flags));
        assert_eq!(s.open_handles(), 0);
        s.handle_opened(a, 7);
        s.handle_opened(b, 7);
        assert_eq!(s.open_handles(), 2);
        assert!(s.handles_to_reopen(7).is_empty());
        assert_eq!(s.handles_to_reopen(8), [a, b]);
        s.handle_reopened(a, 8);
        s.handle_died(b, Errno::ESTALE);
        assert!(s.handles_to_reopen(8).is_empty());
        assert_eq!(
            (s.handle_error(a), s.handle_error(b)),
            (None, Some(Errno::ESTALE))
        );
        s.handle_released(b);
        assert_eq!(s.open_handles(), 1);
        assert_eq!(s.handle_error(b), None);
        assert_eq!(s.new_handle(12, flags).id(), 3);
    }

    #[test]
    fn identities_are_random_and_never_zero() {
        let a = Session::new();
        let b = Session::new();
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), 0);
    }

    #[test]
    fn the_process_credentials_are_read() {
        let cred = process_cred();
        // SAFETY: as above.
        assert_eq!(cred.uid, unsafe { libc::getuid() });
        assert!(cred.groups.len() <= MAX_GROUPS);
    }
}
