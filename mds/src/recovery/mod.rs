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
//! After the window closes, a known client still connected is waited for only while it makes
//! progress — a replay, or a handle it takes back — and from the window's hard end,
//! [`HARD_END_FACTOR`] windows after it opened, only while it replays: a client has finitely
//! many replays (each a transno of its own below the ceiling), but could take handles back
//! for ever. Being connected is not progress: a client that reconnects as itself and sends
//! nothing (or never comes back) must not keep everyone else waiting.
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

use mds_proto::Replay;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::ticket::ReplayKey;

/// After the window closes, how long a known client that is still connected but has nothing
/// waiting may stay quiet before it is evicted too: one between two replays, or about to say
/// it is done, is never quiet that long; one that sits on its connection must not keep
/// everyone waiting.
pub const QUIET_AFTER_EXPIRY: Duration = Duration::from_secs(5);

/// The window's hard end, in windows from its opening: every known client that has not
/// finished by then is evicted, whatever it is doing. Lustre's recovery has a hard limit too
/// (three times its soft one by default); a client replaying honestly at tens of thousands of
/// requests a second needs a fraction of one window.
pub const HARD_END_FACTOR: u32 = 3;

/// Why a known client was evicted from recovery: the `reason` of
/// `mds_recovery_evicted_clients_total` and of the log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// It did not come back by the window's close, or came back and went.
    Gone,
    /// It stayed connected after the close without making progress for the quiet time.
    Quiet,
    /// It had not finished by the window's hard end.
    HardEnd,
}

impl Eviction {
    pub const ALL: [Eviction; 3] = [Eviction::Gone, Eviction::Quiet, Eviction::HardEnd];

    /// The metric label and log word.
    pub fn reason(self) -> &'static str {
        match self {
            Eviction::Gone => "gone",
            Eviction::Quiet => "quiet",
            Eviction::HardEnd => "hard_end",
        }
    }
}

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
    /// Nor below this one: the shard's first ([`journal::first_ino`]; 2 on shard 0, after
    /// the root).
    pub ino_floor: u64,
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
    /// When each known client last made progress: claimed or finished a replay, or took a
    /// handle back. A connection is not progress (a reconnect loop must not look busy).
    active_at: HashMap<u64, Instant>,
    /// When each known client last claimed or finished a replay: past the hard end, the only
    /// progress that counts (a client has finitely many replays, but may take handles back
    /// for ever).
    replayed_at: HashMap<u64, Instant>,
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

    /// Evicts the waiting clients `evict` gives a reason for: they replay nothing more.
    fn evict(&mut self, evict: impl Fn(&State, u64) -> Option<Eviction>) -> Vec<(u64, Eviction)> {
        let gone: Vec<(u64, Eviction)> = self
            .waiting_for
            .iter()
            .filter_map(|&c| evict(self, c).map(|why| (c, why)))
            .collect();
        for (c, _) in &gone {
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
                replayed_at: HashMap::new(),
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
    /// with nothing unsafe). Not progress: see [`Recovery::progressed`].
    pub fn connected(&self, client: u64) -> bool {
        let mut state = self.state.lock();
        let known = state.known.contains(&client);
        if known {
            *state.present.entry(client).or_default() += 1;
        }
        known
    }

    /// `client` made progress outside a replay: it took back a handle the restart lost.
    pub fn progressed(&self, client: u64) {
        if !self.is_open() {
            return; // reopens after the window: nothing to note, and no lock to take
        }
        let mut state = self.state.lock();
        if state.waiting_for.contains(&client) {
            state.active_at.insert(client, Instant::now());
        }
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
        if ino != 0 && (ino < self.bounds.ino_floor || ino >= self.bounds.ino_ceiling) {
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
        let now = Instant::now();
        state.active_at.insert(client, now);
        state.replayed_at.insert(client, now);
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
            let (client, now) = (parked.client, Instant::now());
            state.active_at.insert(client, now);
            state.replayed_at.insert(client, now);
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
    /// made no progress for `quiet` with nothing waiting, and from `hard_end` on any that has
    /// not replayed for `quiet` with nothing waiting, whatever else it does. Quiet times run
    /// from the later of the client's last progress and this call. It lets each replay still
    /// waiting run by skipping the transnos below it that nobody will replay. Returns every
    /// client it evicted and why, for the caller to forget.
    pub async fn expire(&self, quiet: Duration, hard_end: Instant) -> Vec<(u64, Eviction)> {
        let expired_at = Instant::now();
        let mut evicted = {
            let mut state = self.state.lock();
            state.expired = true;
            let gone = state.evict(|s, c| (!s.present.contains_key(&c)).then_some(Eviction::Gone));
            self.unstick(&mut state);
            self.close_if_finished(&mut state);
            gone
        };
        // One that connected late gets `quiet` after the close to begin.
        let since = |at: &HashMap<u64, Instant>, c: &u64| {
            at.get(c).map_or(expired_at, |&t| t.max(expired_at))
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
                let past_hard_end = now >= hard_end;
                let late = state.evict(|s, c| {
                    if !s.present.contains_key(&c) {
                        Some(Eviction::Gone)
                    } else if s.parked_by.contains_key(&c) {
                        None // its replay runs when its turn comes: progress is under way
                    } else if now - since(&s.active_at, &c) >= quiet {
                        Some(Eviction::Quiet)
                    } else if past_hard_end && now - since(&s.replayed_at, &c) >= quiet {
                        Some(Eviction::HardEnd)
                    } else {
                        None
                    }
                });
                evicted.extend(late);
                self.unstick(&mut state);
                self.close_if_finished(&mut state);
                if !self.is_open() {
                    break;
                }
                // When the next client still waited for would be evicted, or the hard end.
                state
                    .waiting_for
                    .iter()
                    .filter(|c| !state.parked_by.contains_key(c))
                    .flat_map(|c| {
                        let replayed = past_hard_end.then(|| since(&state.replayed_at, c) + quiet);
                        std::iter::once(since(&state.active_at, c) + quiet).chain(replayed)
                    })
                    .chain((!past_hard_end).then_some(hard_end))
                    .min()
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
mod tests;
