//! Recovery that no client can poison. Each test crashes a server holding early replies of
//! two known clients, lets a client send what an honest one never would while the recovery
//! window is open, and then checks that the honest clients lose nothing, that the window
//! closes, and that the store loads again and is fsck-clean after another restart.
//!
//! Regressions guarded (found by a review of 5db4ed8): a replayed CREATE naming inode
//! 2^64 - 2 moved the inode counter to its end, and later creates wrapped onto the root; a
//! replay of transno u64::MAX had the skipper queue ~2^64 empty records; any connected
//! client could replay any transno (another client's, whose own replay then failed); a
//! replay refused after its turn came, or one that met a copy of itself, never moved the
//! turn on, and every other client waited for good. And (a review of 8d645ab): a known
//! client that reconnected as itself every 2 s and sent nothing held every other client's
//! requests for as long as it went on, each handshake counting as activity.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{create, ino};

use common::raw::{Raw, request};
use mds_client::{Client, ROOT, Session};
use mds_proto::{Body, Cred, Errno, Op, OpenFlags, Replay, Reply};

/// Early replies, no commit of its own accord, and a recovery window longer than any test
/// waits unless it sets its own.
fn early(window: &'static str) -> [&'static str; 6] {
    [
        "--ack",
        "early",
        "--commit-interval",
        "60s",
        "--recovery-window",
        window,
    ]
}

/// Two known clients with one early (unsafe) create each, `a1` then `b1`, and the server
/// killed before either is durable.
struct Crashed {
    sa: Arc<Session>,
    sb: Arc<Session>,
    a1: Reply,
    b1: Reply,
}

async fn crash_with_two_unsafe_creates(server: common::Server) -> Crashed {
    let (sa, sb) = (Arc::new(Session::new()), Arc::new(Session::new()));
    let a = Client::connect_session(server.addr, sa.clone())
        .await
        .unwrap();
    let b = Client::connect_session(server.addr, sb.clone())
        .await
        .unwrap();
    // Each client's first mutation makes it known; it is answered after its commit.
    a.create(ROOT, "a0", 0o644).await.unwrap();
    b.create(ROOT, "b0", 0o644).await.unwrap();
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
    assert!(a1.transno > a1.last_committed, "unsafe: {a1:?}");
    assert!(b1.transno > b1.last_committed, "unsafe: {b1:?}");
    assert!(
        a1.ticket != 0 && b1.ticket != 0,
        "early replies carry tickets"
    );
    drop((a, b));
    server.kill();
    Crashed { sa, sb, a1, b1 }
}

/// Sends `replay` of a create as `session` on a connection of its own (proving the session's
/// secret), as a new request, and returns the answer and whether the server closed the
/// connection after it.
fn replay_as(addr: std::net::SocketAddr, session: &Session, replay: Replay) -> (Reply, bool) {
    replay_op_as(addr, session, replay, create(ROOT, "forged"))
}

/// As [`replay_as`], replaying `op`.
fn replay_op_as(
    addr: std::net::SocketAddr,
    session: &Session,
    replay: Replay,
    op: Op,
) -> (Reply, bool) {
    let (mut raw, connected) = Raw::connect(addr, session, None);
    assert!(
        matches!(connected.result, Ok(Body::Connected { .. })),
        "{connected:?}"
    );
    let (xid, _) = session.begin();
    let reply = raw.call(&request(xid, op, Some(replay)));
    let closed = raw.closed();
    (reply, closed)
}

/// After the honest clients are back: every create anyone was answered is there with the
/// inode number it was told, nothing else is, and the store survives a clean stop and
/// another start, fsck-clean.
async fn check_and_restart(server: common::Server, crashed: &Crashed, flags: &[&str]) {
    let c = server.client().await;
    assert_eq!(common::names(&c, ROOT).await, ["a0", "a1", "b0", "b1"]);
    assert_eq!(c.lookup(ROOT, "a1").await.unwrap().ino, ino(&crashed.a1));
    assert_eq!(c.lookup(ROOT, "b1").await.unwrap().ino, ino(&crashed.b1));
    // New work takes new numbers, above everything handed out before the crash.
    let next = c.create(ROOT, "after", 0o644).await.unwrap();
    assert!(next.ino > ino(&crashed.a1).max(ino(&crashed.b1)));
    c.sync().await.unwrap();
    let root = c.getattr(ROOT).await.unwrap();
    assert_eq!(root.ino, ROOT);
    drop(c);
    let dir = server.data.clone();
    assert!(server.stop().success());
    let (code, out) = common::fsck(&dir);
    assert_eq!(code, 0, "{out}");
    let server = common::start(&dir, flags);
    let c = server.client().await;
    assert_eq!(
        common::names(&c, ROOT).await,
        ["a0", "a1", "after", "b0", "b1"]
    );
    drop(c);
    assert!(server.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replays_are_refused_and_every_answered_create_survives() {
    let dir = tempfile::tempdir().unwrap();
    let flags = early("60s");
    let crashed = crash_with_two_unsafe_creates(common::start(dir.path(), &flags)).await;
    let server = common::start(dir.path(), &flags);
    let (a1, b1) = (&crashed.a1, &crashed.b1);
    let huge = u64::MAX - 1;
    // B is a known client that proves its own session: what it may not replay.
    let forgeries = [
        (
            "A's transno with B's ticket",
            Replay {
                xid: b1.xid,
                transno: a1.transno,
                ino: ino(a1),
                ticket: b1.ticket,
            },
        ),
        (
            "A's reply, ticket and all, replayed by B",
            Replay {
                xid: a1.xid,
                transno: a1.transno,
                ino: ino(a1),
                ticket: a1.ticket,
            },
        ),
        (
            "B's own transno naming inode 2^64 - 2",
            Replay {
                xid: b1.xid,
                transno: b1.transno,
                ino: huge,
                ticket: b1.ticket,
            },
        ),
        (
            "transno u64::MAX",
            Replay {
                xid: b1.xid,
                transno: u64::MAX,
                ino: 0,
                ticket: 1,
            },
        ),
    ];
    for (what, replay) in forgeries {
        let (reply, closed) = replay_as(server.addr, &crashed.sb, replay);
        assert_eq!(reply.result, Err(Errno::EPROTO), "{what}");
        assert!(closed, "{what}: its connection is closed");
    }
    // B's own numbers and ticket, as another operation than the one it was told of: an
    // UNLINK of A's committed file, ahead of A's replays.
    let b1_itself = Replay {
        xid: b1.xid,
        transno: b1.transno,
        ino: ino(b1),
        ticket: b1.ticket,
    };
    let unlink = Op::Unlink {
        parent: ROOT,
        name: "a0".into(),
    };
    let (reply, closed) = replay_op_as(server.addr, &crashed.sb, b1_itself, unlink);
    assert_eq!(reply.result, Err(Errno::EPROTO), "another operation");
    assert!(closed);
    // A client the journal never knew, whatever it claims.
    let stranger = Session::new();
    let (reply, closed) = replay_as(
        server.addr,
        &stranger,
        Replay {
            xid: a1.xid,
            transno: a1.transno,
            ino: ino(a1),
            ticket: a1.ticket,
        },
    );
    assert_eq!(reply.result, Err(Errno::EPROTO));
    assert!(closed);
    assert!(
        server.log_text().contains("forged replay"),
        "logged as what it is"
    );

    // The honest clients come back and replay: nothing of theirs was taken.
    let (a, b) = tokio::join!(
        Client::connect_session(server.addr, crashed.sa.clone()),
        Client::connect_session(server.addr, crashed.sb.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((crashed.sa.lost(), crashed.sb.lost()), (0, 0));
    let metrics = common::scrape(server.metrics);
    assert_eq!(
        common::sample(
            &metrics,
            "mds_protocol_errors_total{kind=\"forged_replay\"}"
        ),
        Some(6.0)
    );
    assert_eq!(
        common::sample(&metrics, "mds_skipped_transnos_total"),
        Some(0.0),
        "nothing was skipped on a forger's word"
    );
    drop((a, b));
    check_and_restart(server, &crashed, &flags).await;
}

/// A replay refused before its turn (65 supplementary groups) claims nothing: the window
/// closes when it must, every other client's replay runs, and the refused client loses only
/// its own change (regression: the refused replay stayed parked, and the window never closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replay_does_not_hold_the_window_open() {
    let dir = tempfile::tempdir().unwrap();
    let flags = early("2s");
    let crashed = crash_with_two_unsafe_creates(common::start(dir.path(), &flags)).await;
    let server = common::start(dir.path(), &flags);
    let a1 = &crashed.a1;
    let (mut raw, connected) = Raw::connect(server.addr, &crashed.sa, None);
    assert!(matches!(connected.result, Ok(Body::Connected { .. })));
    let mut bad = request(
        crashed.sa.begin().0,
        create(ROOT, "a1"),
        Some(Replay {
            xid: a1.xid,
            transno: a1.transno,
            ino: ino(a1),
            ticket: a1.ticket,
        }),
    );
    bad.cred = Cred {
        uid: 0,
        gid: 0,
        groups: (0..65).collect(),
    };
    assert_eq!(raw.call(&bad).result, Err(Errno::EPROTO));
    assert!(raw.closed());
    // B replays b1, which waits for a1's transno: the window's close skips it, and B is
    // answered. Bounded: before the fix this waited until the next restart.
    let b = tokio::time::timeout(
        Duration::from_secs(30),
        Client::connect_session(server.addr, crashed.sb.clone()),
    )
    .await
    .expect("the window closes")
    .unwrap();
    assert_eq!(crashed.sb.lost(), 0);
    let c = server.client().await;
    assert_eq!(common::names(&c, ROOT).await, ["a0", "b0", "b1"]);
    // A comes back: its a1 was skipped with the window, and it is told so.
    let a = Client::connect_session(server.addr, crashed.sa.clone())
        .await
        .unwrap();
    assert_eq!(crashed.sa.lost(), 1);
    drop((a, b, c));
    let dir = server.data.clone();
    assert!(server.stop().success());
    let (code, out) = common::fsck(&dir);
    assert_eq!(code, 0, "{out}");
}

/// A known client that reconnects as itself again and again and never replays cannot hold
/// the window open: it is evicted (quiet, or at the hard end, three windows after the
/// opening), and a new client's request is answered while the reconnects go on. The honest
/// client loses nothing; the store is fsck-clean after. (On 8d645ab this variant, a holder of
/// early replies, had its MKDIR answered too and failed only on the eviction's metric; the
/// orphan holder below is the one whose MKDIR waited.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_and_saying_nothing_does_not_hold_the_window_open() {
    let dir = tempfile::tempdir().unwrap();
    let flags = early("1s");
    let crashed = crash_with_two_unsafe_creates(common::start(dir.path(), &flags)).await;
    let server = common::start(dir.path(), &flags);
    let (stop, reconnects) = reconnect_every_200ms(server.addr, &crashed.sa);
    let b = Client::connect_session(server.addr, crashed.sb.clone())
        .await
        .unwrap();
    assert_eq!(crashed.sb.lost(), 0);
    let c = server.client().await;
    let made = tokio::time::timeout(Duration::from_secs(30), c.mkdir(ROOT, "d", 0o755)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = reconnects.join().unwrap();
    made.expect("answered while the reconnects went on")
        .unwrap();
    assert!(n >= 5, "the reconnects went on meanwhile ({n})");
    let metrics = common::scrape(server.metrics);
    let evicted = ["quiet", "hard_end"].map(|reason| {
        common::sample(
            &metrics,
            &format!("mds_recovery_evicted_clients_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    });
    assert_eq!(evicted.iter().sum::<f64>(), 1.0, "{evicted:?}");
    assert!(server.log_text().contains("evicted a known client"));
    assert_eq!(common::names(&c, ROOT).await, ["a0", "b0", "b1", "d"]);
    drop((b, c));
    // A comes back for real: its a1 went with its eviction, and it is told so.
    let a = Client::connect_session(server.addr, crashed.sa.clone())
        .await
        .unwrap();
    assert_eq!(crashed.sa.lost(), 1);
    drop(a);
    let dir = server.data.clone();
    assert!(server.stop().success());
    let (code, out) = common::fsck(&dir);
    assert_eq!(code, 0, "{out}");
}

/// Copies of one replay: one sent again once answered, and one resent on a newer connection
/// while the first waits for its turn. Each executes once; every copy is answered with its
/// transno — from the replay's record, or by the original's reply, which follows the client
/// to its newer connection (regression: a second copy was refused EINVAL, and its client
/// counted an executed change lost; one that joined the original was never answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_replay_execute_once_and_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let flags = early("60s");
    let server = common::start(dir.path(), &flags);
    let (sa, sb) = (Arc::new(Session::new()), Arc::new(Session::new()));
    let a = Client::connect_session(server.addr, sa.clone())
        .await
        .unwrap();
    let b = Client::connect_session(server.addr, sb.clone())
        .await
        .unwrap();
    a.create(ROOT, "a0", 0o644).await.unwrap();
    b.create(ROOT, "b0", 0o644).await.unwrap();
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
    let a2 = a.call_reply(create(ROOT, "a2")).await.unwrap();
    assert!(a1.transno < b1.transno && b1.transno < a2.transno);
    drop((a, b));
    server.kill();
    let server = common::start(dir.path(), &flags);
    // Each replay a new request of A's (its xid drawn now), carrying the original's numbers.
    let replay_of = |xid: u64, r: &Reply, name: &str| {
        request(
            xid,
            create(ROOT, name),
            Some(Replay {
                xid: r.xid,
                transno: r.transno,
                ino: ino(r),
                ticket: r.ticket,
            }),
        )
    };
    let (x1, x2) = (sa.begin().0, sa.begin().0);

    // a1, then a1 again once answered: executed once, answered the same twice.
    let (mut first, _) = Raw::connect(server.addr, &sa, None);
    let one = first.call(&replay_of(x1, &a1, "a1"));
    let two = first.call(&replay_of(x1, &a1, "a1"));
    for r in [&one, &two] {
        assert_eq!(r.xid, x1);
        assert!(r.result.is_ok(), "{r:?}");
        assert_eq!(r.transno, a1.transno);
    }
    // a2 waits for B's b1. Resent on a newer connection meanwhile, it joins the original.
    first.send(&replay_of(x2, &a2, "a2"));
    let (mut newer, connected) = Raw::connect(server.addr, &sa, None);
    assert!(matches!(connected.result, Ok(Body::Connected { .. })));
    newer.send(&replay_of(x2, &a2, "a2"));
    // B comes back (its connect returns once the window closes, which waits for A too);
    // once b1 is replayed, a2's turn comes and its one reply leaves on the newer connection.
    let b = tokio::spawn({
        let (addr, sb) = (server.addr, sb.clone());
        async move { Client::connect_session(addr, sb).await.unwrap() }
    });
    let joined =
        tokio::task::block_in_place(|| newer.reply()).expect("the joined copy is answered");
    assert_eq!(joined.xid, x2);
    assert!(joined.result.is_ok(), "{joined:?}");
    assert_eq!(joined.transno, a2.transno);
    // A has replayed everything: anything else says so, and the window closes.
    let ping = tokio::task::block_in_place(|| newer.call(&request(sa.begin().0, Op::Ping, None)));
    assert_eq!(ping.result, Ok(Body::Pong));
    let b = b.await.unwrap();
    assert_eq!(sb.lost(), 0);
    let c = server.client().await;
    assert_eq!(
        common::names(&c, ROOT).await,
        ["a0", "a1", "a2", "b0", "b1"]
    );
    let metrics = common::scrape(server.metrics);
    assert_eq!(
        common::sample(&metrics, "mds_replayed_requests_total"),
        Some(3.0),
        "a1, b1, a2: each executed once"
    );
    drop((b, c, first, newer));
    let dir = server.data.clone();
    assert!(server.stop().success());
    let (code, out) = common::fsck(&dir);
    assert_eq!(code, 0, "{out}");
}

/// Finding 1 as the review reproduced it, under the default `--ack commit`: a client that
/// held an unlinked file open when the server died is one the window waits for (it may take
/// its handle back); after the restart it reconnects as itself every 200 ms and takes nothing
/// back. A new client's MKDIR is answered all the same, and the orphan is reclaimed when its
/// holder is evicted. On 8d645ab each reconnect counted as progress and the MKDIR waited for
/// as long as the reconnects went on (here it failed its 30 s bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_holder_that_reconnects_and_takes_nothing_back_does_not_hold_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--recovery-window", "1s"];
    let server = common::start(dir.path(), &flags);
    let sa = Arc::new(Session::new());
    let a = Client::connect_session(server.addr, sa.clone())
        .await
        .unwrap();
    let f = a.create(ROOT, "f", 0o644).await.unwrap();
    let read = OpenFlags {
        read: true,
        ..OpenFlags::default()
    };
    let _held = a.open(f.ino, read).await.unwrap();
    a.unlink(ROOT, "f").await.unwrap();
    server.kill();
    drop(a);
    let server = common::start(dir.path(), &flags);
    let (stop, reconnects) = reconnect_every_200ms(server.addr, &sa);
    let c = server.client().await;
    let made = tokio::time::timeout(Duration::from_secs(30), c.mkdir(ROOT, "d", 0o755)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = reconnects.join().unwrap();
    made.expect("answered while the reconnects went on")
        .unwrap();
    assert!(n >= 2, "the reconnects went on meanwhile ({n})");
    assert_eq!(common::names(&c, ROOT).await, ["d"]);
    drop(c);
    let data = server.data.clone();
    assert!(server.stop().success());
    let (code, out) = common::fsck(&data);
    assert_eq!(code, 0, "{out}");
}

/// A client that reconnects as `session` every 200 ms, on a thread, and sends nothing else,
/// until the flag is set (60 s at most, whatever happens to the test); the thread answers how
/// many times it connected.
fn reconnect_every_200ms(
    addr: std::net::SocketAddr,
    session: &Arc<Session>,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u32>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reconnects = std::thread::spawn({
        let (session, stop) = (session.clone(), stop.clone());
        move || {
            let mut held = None;
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 300 {
                let (raw, _) = Raw::connect(addr, &session, None);
                held = Some(raw);
                n += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            drop(held);
            n
        }
    });
    (stop, reconnects)
}
