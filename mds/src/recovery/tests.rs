//! Recovery tests: turns in transno order, claims, tickets, refusals, skips, eviction and
//! the window's close, with a recorder for what is skipped.

use super::*;
use mds_proto::ROOT_INO;

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
    ino_floor: journal::first_ino(0),
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

/// A hard end no test reaches.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
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
            async move { r.expire(QUIET_AFTER_EXPIRY, far()).await }
        });
        // Client 2 is done once its replay ran.
        while r.state.lock().next <= 13 {
            tokio::task::yield_now().await;
        }
        r.client_done(2);
        expire.await.unwrap()
    });
    rt.block_on(waiting).unwrap();
    assert_eq!(
        evicted,
        vec![(1, Eviction::Gone)],
        "client 2 came back: it stays known"
    );
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
        async move { r.expire(Duration::from_millis(300), far()).await }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(r.is_open(), "1 and 3 are still there");
    assert!(r.evicted(2) && !r.evicted(1) && !r.evicted(3));
    r.client_done(1);
    // 3 says nothing: evicted once quiet for 300 ms, and the window closes.
    let evicted = rt.block_on(expire).unwrap();
    assert_eq!(evicted, vec![(2, Eviction::Gone), (3, Eviction::Quiet)]);
    assert!(!r.is_open() && !r.evicted(1));
}

/// Being connected is not progress: a known client that reconnects as itself again and again
/// after the close and sends nothing is evicted once quiet, as one that sits on one
/// connection is (each handshake used to count as activity, and a reconnect every 2 s held
/// every other client's requests for as long as it went on). A handle taken back is progress.
#[test]
fn reconnecting_without_replaying_is_not_progress() {
    let rt = rt();
    let (r, _) = recovery(vec![1, 2]);
    assert!(r.connected(1) && r.connected(2));
    let quiet = Duration::from_millis(400);
    let expire = rt.spawn({
        let r = r.clone();
        async move { r.expire(quiet, far()).await }
    });
    let started = Instant::now();
    // Client 1 reconnects every 50 ms; client 2 takes a handle back every 100 ms for 600 ms.
    while !expire.is_finished() && started.elapsed() < Duration::from_secs(10) {
        // The new connection's handshake comes before the old one's close (it replaces it).
        assert!(r.connected(1));
        r.disconnected(1);
        if started.elapsed() < Duration::from_millis(600) {
            r.progressed(2);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        expire.is_finished(),
        "the window closed while the reconnects went on"
    );
    let evicted = rt.block_on(expire).unwrap();
    assert_eq!(evicted.len(), 2, "{evicted:?}");
    assert!(evicted.contains(&(1, Eviction::Quiet)) && evicted.contains(&(2, Eviction::Quiet)));
    assert!(!r.is_open());
}

/// From the hard end only replays are progress: a client that goes on taking handles back
/// (which resets the quiet clock) is evicted then, while one whose replay waits for its turn
/// is not — its replay runs once the transno nobody will replay below it is skipped.
#[test]
fn from_the_hard_end_only_replays_are_progress() {
    let rt = rt();
    let (r, skipped) = recovery(vec![1, 2, 3]);
    assert!(r.connected(1) && r.connected(2) && r.connected(3));
    // 3 waits with 12; 11 is 1's, and 1 never replays it.
    let waiting = {
        let r = r.clone();
        rt.spawn(async move { replay_one(&r, 3, 12).await })
    };
    let quiet = Duration::from_millis(300);
    let hard_end = Instant::now() + Duration::from_millis(600);
    let expire = rt.spawn({
        let r = r.clone();
        async move { r.expire(quiet, hard_end).await }
    });
    let started = Instant::now();
    while !waiting.is_finished() {
        r.progressed(2);
        std::thread::sleep(Duration::from_millis(20));
        assert!(started.elapsed() < Duration::from_secs(10), "no hard end");
    }
    assert_eq!(
        rt.block_on(waiting).unwrap(),
        Ok(()),
        "a parked replay runs"
    );
    assert!(
        Instant::now() >= hard_end,
        "2 kept the window open until the hard end"
    );
    r.client_done(3);
    let evicted = rt.block_on(expire).unwrap();
    assert_eq!(evicted, vec![(1, Eviction::Quiet), (2, Eviction::HardEnd)]);
    assert_eq!(*skipped.lock(), vec![(11, 11)]);
    assert!(!r.is_open() && !r.evicted(3));
    assert_eq!(rt.block_on(replay_one(&r, 2, 13)), Err(Refusal::TooLate));
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
