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

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The recovery window's state, shared by every partition.
pub struct Recovery {
    /// While set, new requests wait and known clients may replay.
    open: AtomicBool,
    state: Mutex<State>,
    /// Woken on every change of `state` (a replay done, a client done, a skip, the end).
    changed: Notify,
    /// Journals an empty record for each transno in `from..=to` and moves the namespace past
    /// `to` (set by the server; a no-op until then).
    skip: Mutex<Option<Skipper>>,
}

/// What skipping transnos nobody will replay takes: see [`Recovery::on_skip`].
pub type Skipper = Box<dyn Fn(u64, u64) + Send + Sync>;

struct State {
    /// The next transno to replay: `last_committed + 1` at start.
    next: u64,
    /// Known clients that have not finished replaying.
    waiting_for: HashSet<u64>,
    /// The clients the journal knew at start.
    known: HashSet<u64>,
    /// Known clients that have connected since the start.
    returned: HashSet<u64>,
    /// Known clients the window closed on: told so when they come back.
    evicted: HashSet<u64>,
    /// Replays waiting for their turn or executing: transno → client. The window's close
    /// must not skip past them.
    parked: BTreeMap<u64, u64>,
    /// The window closed: no new replay is accepted; what is parked is finished by skipping.
    expired: bool,
}

/// Why a replay cannot be executed.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not in recovery, the window closed, or its transno was already committed, replayed or
    /// skipped: its client must treat the request as lost.
    TooLate,
}

impl Recovery {
    /// A recovery waiting for `known` clients, replaying from `last_committed + 1`; closed at
    /// once when nobody is known.
    pub fn new(known: Vec<u64>, last_committed: u64) -> Recovery {
        let open = !known.is_empty();
        Recovery {
            open: AtomicBool::new(open),
            state: Mutex::new(State {
                next: last_committed + 1,
                waiting_for: known.iter().copied().collect(),
                known: known.into_iter().collect(),
                returned: HashSet::new(),
                evicted: HashSet::new(),
                parked: BTreeMap::new(),
                expired: false,
            }),
            changed: Notify::new(),
            skip: Mutex::new(None),
        }
    }

    /// Sets how transnos nobody will replay are skipped.
    pub fn on_skip(&self, skip: Skipper) {
        *self.skip.lock() = Some(skip);
    }

    /// Skips up to the lowest waiting replay when nothing else can come below it: every known
    /// client still replaying has come back and waits with a replay above the gap. The gap is
    /// then a request executed before the crash whose reply its client never got: the client
    /// sends it again as a new request, after recovery, and nobody replays its transno.
    fn unstick(&self, state: &mut State) -> bool {
        let Some((&first, _)) = state.parked.first_key_value() else {
            return false;
        };
        let everyone_waits = state
            .waiting_for
            .iter()
            .all(|c| state.parked.values().any(|p| p == c));
        if first <= state.next || !everyone_waits {
            return false;
        }
        if let Some(skip) = self.skip.lock().as_ref() {
            skip(state.next, first - 1);
        }
        state.next = first;
        true
    }

    /// Whether new requests must still wait.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Whether `client` is a known client that has not finished replaying.
    pub fn expects(&self, client: u64) -> bool {
        self.is_open() && self.state.lock().waiting_for.contains(&client)
    }

    /// `client` connected. Returns whether the journal knew it at start (its session is a
    /// known client's again: it must be forgotten when it leaves with nothing unsafe).
    pub fn connected(&self, client: u64) -> bool {
        let mut state = self.state.lock();
        let known = state.known.contains(&client);
        if known {
            state.returned.insert(client);
        }
        known
    }

    /// Whether the window closed before `client` came back.
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
            self.close_if_finished(&mut state);
            self.unstick(&mut state);
            drop(state);
            self.changed.notify_waiters();
        }
    }

    fn close_if_finished(&self, state: &mut State) {
        if state.waiting_for.is_empty() && state.parked.is_empty() {
            self.open.store(false, Ordering::Release);
        }
    }

    /// Waits until recovery is over.
    pub async fn closed(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.is_open() {
                return;
            }
            notified.await;
        }
    }

    /// Waits for the turn of `client`'s replay of `transno`. Once the window has closed, only
    /// clients that came back before it may still replay.
    pub async fn turn(&self, transno: u64, client: u64) -> Result<(), Refusal> {
        let mut parked = false;
        let result = loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                let evicted = state.expired && !state.returned.contains(&client);
                if !self.is_open() || transno < state.next || (evicted && !parked) {
                    if parked {
                        state.parked.remove(&transno);
                    }
                    break Err(Refusal::TooLate);
                }
                if !parked {
                    state.parked.insert(transno, client);
                    parked = true;
                }
                if transno == state.next {
                    break Ok(());
                }
                if self.unstick(&mut state) {
                    drop(state);
                    self.changed.notify_waiters();
                    continue;
                }
            }
            notified.await;
        };
        if result.is_err() {
            self.changed.notify_waiters();
        }
        result
    }

    /// The replay of `transno` got its turn but was not executed (refused): let the others on.
    pub fn abandon(&self, transno: u64) {
        let mut state = self.state.lock();
        state.parked.remove(&transno);
        if state.expired {
            self.close_if_finished(&mut state);
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// The replay of `transno` (whose turn it was) has executed.
    pub fn replayed(&self, transno: u64) {
        let mut state = self.state.lock();
        state.parked.remove(&transno);
        state.next = state.next.max(transno + 1);
        if state.expired {
            self.close_if_finished(&mut state);
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// The window closed. Stops accepting replays, evicts the known clients that never came
    /// back (returned, for the caller to forget), and lets each replay still waiting run by
    /// skipping the transnos below it that nobody replayed: `skip(from, to)` must journal an
    /// empty record for each transno in `from..=to` and move the namespace past `to`.
    pub async fn expire(&self) -> Vec<u64> {
        let evicted: Vec<u64> = {
            let mut state = self.state.lock();
            state.expired = true;
            let waiting: Vec<u64> = state.waiting_for.drain().collect();
            let evicted: Vec<u64> = waiting
                .into_iter()
                .filter(|c| !state.returned.contains(c))
                .collect();
            state.evicted.extend(evicted.iter().copied());
            evicted
        };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let skipped = {
                let mut state = self.state.lock();
                match state.parked.first_key_value().map(|(&t, _)| t) {
                    None => {
                        self.open.store(false, Ordering::Release);
                        break;
                    }
                    Some(first) if first > state.next => {
                        if let Some(skip) = self.skip.lock().as_ref() {
                            skip(state.next, first - 1);
                        }
                        state.next = first;
                        true
                    }
                    Some(_) => false, // its turn: wait for it to execute
                }
            };
            if skipped {
                // Wake the replay whose turn it is now; look again without waiting (our own
                // wait would be woken by this very notification).
                self.changed.notify_waiters();
                continue;
            }
            notified.await;
        }
        self.changed.notify_waiters();
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn nobody_known_means_no_recovery() {
        let r = Recovery::new(vec![], 10);
        assert!(!r.is_open());
        rt().block_on(async {
            r.closed().await;
            assert_eq!(r.turn(11, 1).await, Err(Refusal::TooLate));
        });
    }

    #[test]
    fn replays_run_in_transno_order_whatever_order_they_arrive_in() {
        let rt = rt();
        let r = Arc::new(Recovery::new(vec![1, 2], 10));
        let order = Arc::new(Mutex::new(Vec::new()));
        // Each client replays in transno order on its own connection, one after the other.
        let client = |id: u64, transnos: Vec<u64>| {
            let (r, order) = (r.clone(), order.clone());
            rt.spawn(async move {
                for t in transnos {
                    r.turn(t, id).await.unwrap();
                    order.lock().push(t);
                    r.replayed(t);
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
        let r = Arc::new(Recovery::new(vec![1, 2], 10));
        let skipped = Arc::new(Mutex::new(Vec::new()));
        r.on_skip({
            let skipped = skipped.clone();
            Box::new(move |from, to| skipped.lock().push((from, to)))
        });
        assert!(r.connected(1) && r.connected(2));
        // 11 was client 1's, executed and never answered: client 1 will send it again after
        // recovery, not replay it. Client 1 replays 12, client 2 replays 13.
        let replays: Vec<_> = [(1u64, 12u64), (2, 13)]
            .into_iter()
            .map(|(client, t)| {
                let r = r.clone();
                rt.spawn(async move {
                    r.turn(t, client).await.unwrap();
                    r.replayed(t);
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
        let r = Arc::new(Recovery::new(vec![1, 2], 10));
        // Client 1 never comes back; client 2 waits with 13 (11 and 12 were client 1's).
        assert!(r.connected(2));
        assert!(!r.connected(3), "not known before the restart");
        let skipped = Arc::new(Mutex::new(Vec::new()));
        r.on_skip({
            let skipped = skipped.clone();
            Box::new(move |from, to| skipped.lock().push((from, to)))
        });
        let waiting = {
            let r = r.clone();
            rt.spawn(async move {
                r.turn(13, 2).await.unwrap();
                r.replayed(13);
            })
        };
        let evicted = rt.block_on(async {
            while r.state.lock().parked.is_empty() {
                tokio::task::yield_now().await;
            }
            assert!(
                r.is_open(),
                "client 1 may still fill the gap: no skip before the window"
            );
            r.expire().await
        });
        rt.block_on(waiting).unwrap();
        assert_eq!(evicted, vec![1], "client 2 came back: it stays known");
        assert!(r.evicted(1) && !r.evicted(2));
        assert_eq!(*skipped.lock(), vec![(11, 12)]);
        assert!(!r.is_open());
        assert_eq!(
            rt.block_on(r.turn(14, 2)),
            Err(Refusal::TooLate),
            "too late now"
        );
    }
}
