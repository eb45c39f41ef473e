//! Recovery by replay: after a restart, the clients the journal knew (they may hold replies
//! sent before their commit, `--ack early`) replay those requests, and the server re-executes
//! them in global transno order, reusing their transnos and inode numbers, so that what each
//! client was told is true again. New requests wait until every known client has finished
//! replaying, or the recovery window has closed.
//!
//! The order is kept without a thread of its own: each replayed request waits, on its own
//! partition, for its turn (`next`, the next transno to replay), executes, and moves `next`
//! on. A client replays in transno order on one connection and is done at its first request
//! that is not a replay. When the window closes first, the transnos of clients that did not
//! come back are skipped — each by an explicit empty journal record, so `last_committed`
//! stays contiguous — up to each replay still waiting, and those clients are evicted. Thanks
//! to commit-on-share, nobody built on what they lose.
//!
//! No client can poison this. A replay waits for a turn only if it comes from a client the
//! journal knew at start, carries the ticket the server issued with its early reply
//! (`ticket.rs`: it was given this transno and inode number for this xid), claims a transno
//! above what was durable at start and no higher than the ceiling the journal had recorded
//! (so nothing a client says makes recovery skip far ahead), an inode number below the inode
//! ceiling, and a transno and inode number nobody has claimed before. Each transno is claimed
//! once, under the state's lock. The turn is an owned [`Turn`]: whichever way the replay then
//! ends — executed, refused, answered from a record, failed — dropping it moves the turn on,
//! skipping the transno if it did not execute, so no path leaves every other client waiting
//! for the window.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mds_proto::{ROOT_INO, Replay};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::ticket::ReplayKey;

/// After the window closes, how long a known client that is still connected but has nothing
/// waiting may stay quiet before it is evicted too: one between two replays, or about to say
/// it is done, is never quiet that long; one that sits on its connection must not keep
/// everyone waiting.
pub const QUIET_AFTER_EXPIRY: Duration = Duration::from_secs(5);

/// The recovery window's state, shared by every partition.
pub struct Recovery {
    /// While set, new requests wait and known clients may replay.
    open: AtomicBool,
    state: Mutex<State>,
    /// Woken once, when the window closes.
    closed: Notify,
    /// Woken on every change the closing of an expired window waits for.
    progress: Notify,
    /// Journals an empty record for each transno in `from..=to` and moves the namespace past
    /// `to`.
    skip: Skipper,
    /// What the crashed start can have handed out.
    bounds: Bounds,
    /// Checks the tickets replays carry.
    key: ReplayKey,
}

/// What skipping transnos nobody will replay takes: see [`Recovery::new`].
pub type Skipper = Box<dyn Fn(u64, u64) + Send + Sync>;

/// What the journal recorded at start: the limits of every replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Every transno at or below this one was durable: none is replayed.
    pub last_committed: u64,
    /// No transno above this one was handed out before the restart.
    pub transno_ceiling: u64,
    /// No inode number at or above this one was handed out before the restart.
    pub ino_ceiling: u64,
}

/// A replay waiting for its turn (or executing): whose, and what wakes it.
struct Parked {
    client: u64,
    wake: Arc<Notify>,
}

struct State {
    /// The next transno to replay: `last_committed + 1` at start.
    next: u64,
    /// Known clients that have not finished replaying.
    waiting_for: HashSet<u64>,
    /// The clients the journal knew at start.
    known: HashSet<u64>,
    /// Connections of known clients open now.
    present: HashMap<u64, usize>,
    /// When each known client last claimed or finished a replay.
    active_at: HashMap<u64, Instant>,
    /// Known clients the window closed on: told so when they come back.
    evicted: HashSet<u64>,
    /// Replays waiting for their turn or executing, by transno. The window's close must not
    /// skip past them.
    parked: BTreeMap<u64, Parked>,
    /// How many of `parked` each client has.
    parked_by: HashMap<u64, usize>,
    /// Inode numbers replays have claimed: each is handed out again at most once.
    claimed_inos: HashSet<u64>,
    /// The window closed: clients that are gone (or quiet) are evicted, what is parked is
    /// finished by skipping.
    expired: bool,
}

impl State {
    /// Every known client still replaying waits with a replay: nothing can come below the
    /// lowest one.
    fn everyone_waits(&self) -> bool {
        self.waiting_for
            .iter()
            .all(|c| self.parked_by.contains_key(c))
    }

    fn unpark(&mut self, transno: u64) {
        if let Some(parked) = self.parked.remove(&transno)
            && let Some(n) = self.parked_by.get_mut(&parked.client)
        {
            *n -= 1;
            if *n == 0 {
                self.parked_by.remove(&parked.client);
            }
        }
    }

    /// Wakes the replay whose turn it is now, if it is parked.
    fn wake_next(&self) {
        if let Some(parked) = self.parked.get(&self.next) {
            parked.wake.notify_one();
        }
    }

    /// Evicts the waiting clients `evict` says to: they replay nothing more.
    fn evict(&mut self, evict: impl Fn(&State, u64) -> bool) -> Vec<u64> {
        let gone: Vec<u64> = self
            .waiting_for
            .iter()
            .copied()
            .filter(|&c| evict(self, c))
            .collect();
        for c in &gone {
            self.waiting_for.remove(c);
            self.evicted.insert(*c);
        }
        gone
    }
}

/// Why a replay cannot be executed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not in recovery, the window closed, or its transno was already committed, replayed,
    /// skipped or claimed by another copy of it: if it did not execute in this start, its
    /// client must treat it as lost.
    TooLate,
    /// Not something this server can have answered early: a client the journal did not know,
    /// a ticket that does not prove it, a transno or inode number past the ceilings. The
    /// connection that sent it is closed.
    Forged(&'static str),
}

/// The turn of one replay: held while it executes; dropping it lets the next one on. A turn
/// whose replay did not execute ([`Turn::executed`] not called) skips its transno, by an empty
/// journal record, so that whatever refused it, nothing waits for it.
#[must_use = "dropping a turn skips its transno"]
pub struct Turn<'a> {
    recovery: &'a Recovery,
    transno: u64,
    executed: bool,
}

impl Turn<'_> {
    /// The transno whose turn it is: the one the replay must take.
    pub fn transno(&self) -> u64 {
        self.transno
    }

    /// The replay executed and took its transno.
    pub fn executed(mut self) {
        self.executed = true;
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.executed {
            self.recovery.skip(self.transno, self.transno);
        }
        self.recovery.finished(self.transno);
    }
}

impl Recovery {
    /// A recovery waiting for `known` clients, replaying from `bounds.last_committed + 1` with
    /// tickets made under `key`; closed at once when nobody is known. `skip(from, to)` must
    /// journal an empty record for each transno in `from..=to` and move the namespace past
    /// `to`: it is how transnos nobody will replay are skipped.
    pub fn new(known: Vec<u64>, bounds: Bounds, key: ReplayKey, skip: Skipper) -> Recovery {
        let open = !known.is_empty();
        Recovery {
            open: AtomicBool::new(open),
            state: Mutex::new(State {
                next: bounds.last_committed.saturating_add(1),
                waiting_for: known.iter().copied().collect(),
                known: known.into_iter().collect(),
                present: HashMap::new(),
                active_at: HashMap::new(),
                evicted: HashSet::new(),
                parked: BTreeMap::new(),
                parked_by: HashMap::new(),
                claimed_inos: HashSet::new(),
                expired: false,
            }),
            closed: Notify::new(),
            progress: Notify::new(),
            skip,
            bounds,
            key,
        }
    }

    /// Journals empty records for `from..=to` (within the ceiling: every caller skips below
    /// a parked replay, whose transno was checked against it).
    fn skip(&self, from: u64, to: u64) {
        let to = to.min(self.bounds.transno_ceiling);
        if from <= to {
            (self.skip)(from, to);
        }
    }

    /// Skips up to the lowest waiting replay when nothing else can come below it: every known
    /// client still replaying has come back and waits with a replay above the gap. The gap is
    /// then a request executed before the crash whose reply its client never got: the client
    /// sends it again as a new request, after recovery, and nobody replays its transno.
    fn unstick(&self, state: &mut State) {
        let Some((&first, _)) = state.parked.first_key_value() else {
            return;
        };
        if first > state.next && state.everyone_waits() {
            self.skip(state.next, first - 1);
            state.next = first;
            state.wake_next();
        }
    }

    /// Closes the window once nobody is waited for and nothing is parked.
    fn close_if_finished(&self, state: &mut State) {
        if self.is_open() && state.waiting_for.is_empty() && state.parked.is_empty() {
            self.open.store(false, Ordering::Release);
            self.closed.notify_waiters();
        }
    }

    /// Whether new requests must still wait.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Whether `client` is a known client that has not finished replaying.
    pub fn expects(&self, client: u64) -> bool {
        self.is_open() && self.state.lock().waiting_for.contains(&client)
    }

    /// A connection of `client` completed its handshake. Returns whether the journal knew it
    /// at start (its session is a known client's again: it must be forgotten when it leaves
    /// with nothing unsafe).
    pub fn connected(&self, client: u64) -> bool {
        let mut state = self.state.lock();
        let known = state.known.contains(&client);
        if known {
            *state.present.entry(client).or_default() += 1;
            state.active_at.insert(client, Instant::now());
        }
        known
    }

    /// A connection of `client` that [`Recovery::connected`] counted has closed.
    pub fn disconnected(&self, client: u64) {
        let mut state = self.state.lock();
        if let Some(n) = state.present.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                state.present.remove(&client);
            }
        }
        drop(state);
        self.progress.notify_waiters();
    }

    /// Whether the window closed before `client` finished replaying.
    pub fn evicted(&self, client: u64) -> bool {
        self.state.lock().evicted.contains(&client)
    }

    /// Known clients that have not finished replaying.
    pub fn waiting_for(&self) -> usize {
        self.state.lock().waiting_for.len()
    }

    /// `client` sent something other than a replay: it has replayed everything it had.
    pub fn client_done(&self, client: u64) {
        let mut state = self.state.lock();
        if state.waiting_for.remove(&client) {
            self.unstick(&mut state);
            self.close_if_finished(&mut state);
            drop(state);
            self.progress.notify_waiters();
        }
    }

    /// Waits until recovery is over.
    pub async fn closed(&self) {
        let closed = self.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.is_open() {
            closed.await;
        }
    }

    /// Whether `client` may replay `replay` at all, and claims its transno and inode number
    /// if so: returns what wakes it when its turn comes. Under the state's lock: two copies of
    /// one replay (or a replay and a forgery of it) cannot both claim.
    fn claim(
        &self,
        state: &mut State,
        client: u64,
        replay: Replay,
        op: &[u8],
    ) -> Result<Arc<Notify>, Refusal> {
        let Replay {
            xid,
            transno,
            ino,
            ticket,
        } = replay;
        if !self.is_open() || state.evicted.contains(&client) {
            return Err(Refusal::TooLate);
        }
        if !state.known.contains(&client) {
            return Err(Refusal::Forged("the journal did not know the client"));
        }
        if !self.key.verify(ticket, client, xid, transno, ino, op) {
            return Err(Refusal::Forged("its ticket does not prove it"));
        }
        // The ticket proves the server issued these numbers for this operation; a ticket
        // made with a key that leaked still claims nothing past what the journal recorded.
        if transno > self.bounds.transno_ceiling {
            return Err(Refusal::Forged("its transno is above the ceiling"));
        }
        if ino != 0 && (ino <= ROOT_INO || ino >= self.bounds.ino_ceiling) {
            return Err(Refusal::Forged("its inode number was never handed out"));
        }
        if transno <= self.bounds.last_committed
            || transno < state.next
            || state.parked.contains_key(&transno)
            || (ino != 0 && state.claimed_inos.contains(&ino))
        {
            return Err(Refusal::TooLate);
        }
        let wake = Arc::new(Notify::new());
        state.parked.insert(
            transno,
            Parked {
                client,
                wake: wake.clone(),
            },
        );
        *state.parked_by.entry(client).or_default() += 1;
        state.active_at.insert(client, Instant::now());
        if ino != 0 {
            state.claimed_inos.insert(ino);
        }
        Ok(wake)
    }

    /// Waits for the turn of `client`'s replay of `op` (its encoding, as the ticket covers
    /// it). Once the window has closed, only clients still replaying may go on.
    pub async fn turn(&self, client: u64, replay: Replay, op: &[u8]) -> Result<Turn<'_>, Refusal> {
        let transno = replay.transno;
        let wake = {
            let mut state = self.state.lock();
            let wake = self.claim(&mut state, client, replay, op)?;
            // It may fill the last gap, or be the one everyone waits for now.
            self.unstick(&mut state);
            wake
        };
        self.progress.notify_waiters();
        loop {
            {
                let mut state = self.state.lock();
                if transno < state.next {
                    // Skipped past (nothing skips a parked replay: a safeguard).
                    state.unpark(transno);
                    self.close_if_finished(&mut state);
                    return Err(Refusal::TooLate);
                }
                if transno == state.next {
                    return Ok(Turn {
                        recovery: self,
                        transno,
                        executed: false,
                    });
                }
            }
            // A wake before this await is kept as a permit: none is lost.
            wake.notified().await;
        }
    }

    /// The replay of `transno` (whose turn it was) is done, executed or skipped.
    fn finished(&self, transno: u64) {
        let mut state = self.state.lock();
        if let Some(parked) = state.parked.get(&transno) {
            let client = parked.client;
            state.active_at.insert(client, Instant::now());
        }
        state.unpark(transno);
        state.next = state.next.max(transno.saturating_add(1));
        state.wake_next();
        self.unstick(&mut state);
        self.close_if_finished(&mut state);
        drop(state);
        self.progress.notify_waiters();
    }

    /// The window closed. Evicts the known clients that had not finished replaying and are
    /// gone (or never came back) — their unsafe changes are lost, and they are told so when
    /// they return — and then, as long as the window stays open for the others: any that has
    /// stayed quiet for `quiet` with nothing waiting (connected, but sending nothing). It lets
    /// each replay still waiting run by skipping the transnos below it that nobody will
    /// replay. Returns every client it evicted, for the caller to forget.
    pub async fn expire(&self, quiet: Duration) -> Vec<u64> {
        let mut evicted = {
            let mut state = self.state.lock();
            state.expired = true;
            let gone = state.evict(|s, c| !s.present.contains_key(&c));
            self.unstick(&mut state);
            self.close_if_finished(&mut state);
            gone
        };
        loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let next_look = {
                let mut state = self.state.lock();
                if !self.is_open() {
                    break;
                }
                let now = Instant::now();
                let quiet_ones = state.evict(|s, c| {
                    !s.present.contains_key(&c)
                        || (!s.parked_by.contains_key(&c)
                            && s.active_at.get(&c).is_some_and(|&t| now - t >= quiet))
                });
                evicted.extend(quiet_ones);
                self.unstick(&mut state);
                self.close_if_finished(&mut state);
                if !self.is_open() {
                    break;
                }
                // When the quietest client still waited for would be evicted.
                let oldest = state
                    .waiting_for
                    .iter()
                    .filter(|c| !state.parked_by.contains_key(c))
                    .map(|c| state.active_at.get(c).copied().unwrap_or(now))
                    .min();
                oldest.map(|t| t + quiet)
            };
            match next_look {
                Some(at) => {
                    tokio::select! {
                        () = &mut progress => {}
                        () = tokio::time::sleep_until(at.into()) => {}
                    }
                }
                None => progress.await,
            }
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn key() -> ReplayKey {
        ReplayKey::new(&[5; journal::SECRET_LEN])
    }

    const BOUNDS: Bounds = Bounds {
        last_committed: 10,
        transno_ceiling: 1000,
        ino_ceiling: 5000,
    };

    /// The operation every test replay is: a create of "f" in the root.
    const OP: &[u8] = b"create f";

    /// The ranges a test recovery skipped, in order.
    type Skipped = Arc<Mutex<Vec<(u64, u64)>>>;

    /// A recovery waiting for `known`, and the ranges it skipped.
    fn recovery(known: Vec<u64>) -> (Arc<Recovery>, Skipped) {
        let skipped = Arc::new(Mutex::new(Vec::new()));
        let skip: Skipper = Box::new({
            let skipped = skipped.clone();
            move |from, to| skipped.lock().push((from, to))
        });
        (Arc::new(Recovery::new(known, BOUNDS, key(), skip)), skipped)
    }

    /// A replay of `transno` by `client`, whose original had xid `transno` (the tests need no
    /// other xids), creating nothing, with the ticket the server gave it.
    fn replay(client: u64, transno: u64) -> Replay {
        replay_ino(client, transno, 0)
    }

    fn replay_ino(client: u64, transno: u64, ino: u64) -> Replay {
        Replay {
            xid: transno,
            transno,
            ino,
            ticket: key().ticket(client, transno, transno, ino, OP),
        }
    }

    /// Runs `client`'s replay of `transno` to the end of its turn, executed.
    async fn replay_one(r: &Recovery, client: u64, transno: u64) -> Result<(), Refusal> {
        r.turn(client, replay(client, transno), OP)
            .await?
            .executed();
        Ok(())
    }

    #[test]
    fn nobody_known_means_no_recovery() {
        let (r, _) = recovery(vec![]);
        assert!(!r.is_open());
        rt().block_on(async {
            r.closed().await;
            assert_eq!(replay_one(&r, 1, 11).await, Err(Refusal::TooLate));
        });
    }

    #[test]
    fn replays_run_in_transno_order_whatever_order_they_arrive_in() {
        let rt = rt();
        let (r, _) = recovery(vec![1, 2]);
        let order = Arc::new(Mutex::new(Vec::new()));
        // Each client replays in transno order on its own connection, one after the other.
        let client = |id: u64, transnos: Vec<u64>| {
            let (r, order) = (r.clone(), order.clone());
            rt.spawn(async move {
                for t in transnos {
                    let turn = r.turn(id, replay(id, t), OP).await.unwrap();
                    order.lock().push(t);
                    turn.executed();
                }
            })
        };
        // Client 2 (12, 14) starts first and waits for client 1 (11, 13).
        let handles = vec![client(2, vec![12, 14]), client(1, vec![11, 13])];
        rt.block_on(async {
            for h in handles {
                h.await.unwrap();
            }
        });
        assert_eq!(*order.lock(), vec![11, 12, 13, 14]);
        assert!(r.is_open(), "clients have not said they are done");
        r.client_done(1);
        assert!(r.is_open());
        r.client_done(2);
        assert!(!r.is_open());
        rt.block_on(r.closed());
    }

    /// A request executed before the crash whose reply its client never got leaves a gap
    /// nobody replays: once every client still replaying waits above it, it is skipped at
    /// once, not after the window (regression: replays waited out the whole window).
    #[test]
    fn a_gap_nobody_can_fill_is_skipped_without_waiting_for_the_window() {
        let rt = rt();
        let (r, skipped) = recovery(vec![1, 2]);
        assert!(r.connected(1) && r.connected(2));
        // 11 was client 1's, executed and never answered: client 1 will send it again after
        // recovery, not replay it. Client 1 replays 12, client 2 replays 13.
        let replays: Vec<_> = [(1u64, 12u64), (2, 13)]
            .into_iter()
            .map(|(client, t)| {
                let r = r.clone();
                rt.spawn(async move {
                    replay_one(&r, client, t).await.unwrap();
                    r.client_done(client);
                })
            })
            .collect();
        rt.block_on(async {
            for h in replays {
                h.await.unwrap();
            }
            r.closed().await;
        });
        assert_eq!(*skipped.lock(), vec![(11, 11)]);
    }

    #[test]
    fn an_expired_window_skips_what_nobody_replayed_and_evicts_who_did_not_finish() {
        let rt = rt();
        let (r, skipped) = recovery(vec![1, 2]);
        // Client 1 never comes back; client 2 waits with 13 (11 and 12 were client 1's).
        assert!(r.connected(2));
        assert!(!r.connected(3), "not known before the restart");
        let waiting = {
            let r = r.clone();
            rt.spawn(async move { replay_one(&r, 2, 13).await.unwrap() })
        };
        let evicted = rt.block_on(async {
            while r.state.lock().parked.is_empty() {
                tokio::task::yield_now().await;
            }
            assert!(
                r.is_open(),
                "client 1 may still fill the gap: no skip before the window"
            );
            let expire = tokio::spawn({
                let r = r.clone();
                async move { r.expire(QUIET_AFTER_EXPIRY).await }
            });
            // Client 2 is done once its replay ran.
            while r.state.lock().next <= 13 {
                tokio::task::yield_now().await;
            }
            r.client_done(2);
            expire.await.unwrap()
        });
        rt.block_on(waiting).unwrap();
        assert_eq!(evicted, vec![1], "client 2 came back: it stays known");
        assert!(r.evicted(1) && !r.evicted(2));
        assert_eq!(*skipped.lock(), vec![(11, 12)]);
        assert!(!r.is_open());
        assert_eq!(
            rt.block_on(replay_one(&r, 2, 14)),
            Err(Refusal::TooLate),
            "too late now"
        );
    }

    /// At the window's close a known client that came back and is still connected — done
    /// replaying, its last word on its way — is not evicted: the window waits for it (it
    /// was, and then lost its changes and the journal forgot it while it still held unsafe
    /// replies). One that came back and left is evicted like one that never came; one that
    /// stays connected and quiet is evicted after `quiet`.
    #[test]
    fn the_close_evicts_who_left_or_stays_quiet_not_who_is_still_there() {
        let rt = rt();
        let (r, _) = recovery(vec![1, 2, 3]);
        assert!(r.connected(1) && r.connected(2) && r.connected(3));
        r.disconnected(2); // came back, then left
        rt.block_on(replay_one(&r, 1, 11)).unwrap();
        let expire = rt.spawn({
            let r = r.clone();
            async move { r.expire(Duration::from_millis(300)).await }
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(r.is_open(), "1 and 3 are still there");
        assert!(r.evicted(2) && !r.evicted(1) && !r.evicted(3));
        r.client_done(1);
        // 3 says nothing: evicted once quiet for 300 ms, and the window closes.
        let evicted = rt.block_on(expire).unwrap();
        assert_eq!(evicted, vec![2, 3]);
        assert!(!r.is_open() && !r.evicted(1));
    }

    /// What no honest client can send is refused before it waits for anything, so it can
    /// neither hold the window open nor make recovery skip another client's transnos: a
    /// client the journal did not know, a ticket that does not prove the replay (another
    /// client's, another xid's, another operation's), a transno above the ceiling (u64::MAX
    /// once had the skipper journal 2^64 empty records) or an inode number never handed out
    /// (2^64 - 2 once moved the inode counter to the end).
    #[test]
    fn forged_replays_are_refused_before_they_claim_anything() {
        let rt = rt();
        let (r, skipped) = recovery(vec![1, 2]);
        let forged = |client, xid, replay: Replay, op: &[u8]| {
            let replay = Replay { xid, ..replay };
            rt.block_on(async { r.turn(client, replay, op).await.map(drop) })
        };
        let is_forged = |result: Result<(), Refusal>| matches!(result, Err(Refusal::Forged(_)));
        assert!(is_forged(forged(3, 11, replay(3, 11), OP)), "not known");
        let mut wrong = replay(1, 11);
        wrong.ticket ^= 1;
        assert!(is_forged(forged(1, 11, wrong, OP)), "wrong ticket");
        assert!(
            is_forged(forged(1, 12, replay(1, 11), OP)),
            "another xid's ticket"
        );
        assert!(
            is_forged(forged(2, 11, replay(1, 11), OP)),
            "client 1's ticket"
        );
        assert!(
            is_forged(forged(1, 11, replay(1, 11), b"unlink b")),
            "another operation"
        );
        assert!(
            is_forged(forged(1, u64::MAX, replay(1, u64::MAX), OP)),
            "past the ceiling"
        );
        assert!(
            is_forged(forged(1, 1001, replay(1, 1001), OP)),
            "past the ceiling"
        );
        let huge_ino = replay_ino(1, 11, u64::MAX - 1);
        assert!(
            is_forged(forged(1, 11, huge_ino, OP)),
            "inode never handed out"
        );
        assert!(
            is_forged(forged(1, 11, replay_ino(1, 11, ROOT_INO), OP)),
            "the root"
        );
        assert!(
            is_forged(forged(1, 11, replay_ino(1, 11, 5000), OP)),
            "at the ino ceiling"
        );
        assert_eq!(
            forged(1, 10, replay(1, 10), OP),
            Err(Refusal::TooLate),
            "durable already"
        );
        assert!(r.state.lock().parked.is_empty(), "nothing claimed");
        assert!(skipped.lock().is_empty(), "nothing skipped");
        // The honest replays still run, in order.
        rt.block_on(async {
            replay_one(&r, 1, 11).await.unwrap();
            replay_one(&r, 2, 12).await.unwrap();
        });
        r.client_done(1);
        r.client_done(2);
        assert!(!r.is_open());
    }

    /// Two copies of one replay (its client resent it on another connection, or on two
    /// partitions at once): one claims the transno, the other is refused without waiting,
    /// so no transno is ever executed twice or skipped under a replay that took it
    /// (regression: both passed the turn check, and the loser's empty record could replace
    /// the winner's).
    #[test]
    fn each_transno_and_inode_number_is_claimed_once() {
        let rt = rt();
        let (r, _) = recovery(vec![1]);
        rt.block_on(async {
            let first = r.turn(1, replay_ino(1, 11, 100), OP).await.unwrap();
            assert_eq!(
                r.turn(1, replay_ino(1, 11, 100), OP).await.map(drop),
                Err(Refusal::TooLate),
                "a second copy while the first holds its turn"
            );
            first.executed();
            assert_eq!(
                replay_one(&r, 1, 11).await,
                Err(Refusal::TooLate),
                "replayed already"
            );
            // The same inode number under another transno (with a ticket for it: only a
            // leaked key makes one) is still refused.
            assert_eq!(
                r.turn(1, replay_ino(1, 12, 100), OP).await.map(drop),
                Err(Refusal::TooLate)
            );
        });
    }

    /// A replay that got its turn and was then refused or failed to execute drops its turn:
    /// its transno is skipped and the next replay goes on at once (regression: such a replay
    /// never moved the turn on, and every other client waited for the window to expire).
    #[test]
    fn a_turn_dropped_without_executing_skips_its_transno_and_lets_the_next_one_run() {
        let rt = rt();
        let (r, skipped) = recovery(vec![1, 2]);
        let second = {
            let r = r.clone();
            rt.spawn(async move { replay_one(&r, 2, 12).await })
        };
        rt.block_on(async {
            let turn = r.turn(1, replay(1, 11), OP).await.unwrap();
            drop(turn); // refused after its turn came, or failed to execute
            tokio::time::timeout(Duration::from_secs(10), second)
                .await
                .expect("the next replay runs without waiting for the window")
                .unwrap()
                .unwrap();
        });
        assert_eq!(*skipped.lock(), vec![(11, 11)]);
    }

    /// Everyone is done while nothing is left parked: the window closes then, not at its
    /// timer (regression: once the last replay finished after its client's last word, the
    /// window waited for the timer).
    #[test]
    fn the_window_closes_when_the_last_replay_finishes_after_everyone_is_done() {
        let rt = rt();
        let (r, _) = recovery(vec![1, 2]);
        rt.block_on(async {
            let turn = r.turn(1, replay(1, 11), OP).await.unwrap();
            r.client_done(1);
            r.client_done(2);
            assert!(r.is_open(), "a replay is still executing");
            turn.executed();
            tokio::time::timeout(Duration::from_secs(10), r.closed())
                .await
                .expect("closed without the timer");
        });
    }
}
