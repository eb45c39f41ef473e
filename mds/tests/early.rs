//! Early replies and recovery by replay (`--ack early`, the Lustre and CephFS model): a
//! mutation's reply leaves at once with its transno, the client learns what is durable from
//! `last_committed` on replies and commit notices and keeps the rest, and after a crash the
//! clients the journal knew replay it, in global transno order, reusing transnos and inode
//! numbers, while new requests wait. A client that never comes back loses only its own
//! unsafe changes, skipped by empty journal records so `last_committed` stays contiguous.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{create, ino};

use mds_client::{Client, ROOT, Session};
use mds_proto::{Errno, Op};

/// Two clients A and B on `addr`, each with its first mutation (`/a0`, `/b0`) done: that one
/// is committed before its reply, since it makes the journal know the client; later ones
/// are answered early.
async fn two_known_clients(
    addr: std::net::SocketAddr,
) -> (Arc<Session>, Arc<Session>, Client, Client) {
    let (sa, sb) = (Arc::new(Session::new()), Arc::new(Session::new()));
    let a = Client::connect_session(addr, sa.clone()).await.unwrap();
    let b = Client::connect_session(addr, sb.clone()).await.unwrap();
    a.create(ROOT, "a0", 0o644).await.unwrap();
    b.create(ROOT, "b0", 0o644).await.unwrap();
    (sa, sb, a, b)
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The series `name` (no labels) on `server`'s `/metrics` now, if it is there yet.
async fn try_metric(server: &common::Server, name: &'static str) -> Option<f64> {
    let addr = server.metrics;
    tokio::task::spawn_blocking(move || common::sample(&common::scrape(addr), name))
        .await
        .unwrap()
}

/// The series `name` (no labels) on `server`'s `/metrics` now.
async fn metric(server: &common::Server, name: &'static str) -> f64 {
    try_metric(server, name)
        .await
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Waits (bounded) until `server`'s series `name` is there and passes `check`, and returns
/// its value. (A partition's series appear once its thread has registered them.)
async fn metric_until(
    server: &common::Server,
    name: &'static str,
    what: &str,
    check: impl Fn(f64) -> bool,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let value = try_metric(server, name).await;
        if let Some(value) = value.filter(|&v| check(v)) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "never: {what} ({name} is {value:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const RECOVERY_DURATION: &str = "mds_recovery_duration_seconds";

/// Early replies, no commit of its own accord during a test, and a recovery window longer
/// than any test waits: a known client that does not come back keeps it open.
const EARLY: [&str; 6] = [
    "--ack",
    "early",
    "--commit-interval",
    "60s",
    "--recovery-window",
    "60s",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_replies_leave_at_once_and_a_notice_makes_them_safe() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.ack = mds::config::Ack::Early;
    config.keys.commit_interval = Duration::from_secs(60);
    let server = common::InProcess::start(config);
    let (a, b, observer) = (
        server.client().await,
        server.client().await,
        server.client().await,
    );

    // A client's first mutation waits for the commit that makes the journal know the client
    // (so a crash cannot leave the server unaware of a client holding unsafe replies).
    let first = a.call_reply(create(ROOT, "e")).await.unwrap();
    assert!(first.transno <= first.last_committed, "{first:?}");
    // Then answered before its commit (a minute away): unsafe, and kept by the library.
    let reply = a.call_reply(create(ROOT, "f")).await.unwrap();
    assert!(reply.transno > reply.last_committed, "{reply:?}");
    assert_eq!(a.session().unsafe_count(), 1);

    // Another client building on it waits for its commit (commit-on-share, early mode too).
    let theirs = b.call_reply(create(ROOT, "f")).await.unwrap();
    assert_eq!(theirs.result, Err(Errno::EEXIST));
    assert!(theirs.last_committed >= reply.transno, "{theirs:?}");

    // That commit reached A as a notice: A sent nothing since, and holds nothing unsafe now.
    eventually("a commit notice reaches the client", || {
        a.session().unsafe_count() == 0
    })
    .await;
    assert!(a.session().last_committed() >= reply.transno);

    // SYNC still waits for everything executed so far.
    let later = a.call_reply(create(ROOT, "g")).await.unwrap();
    observer.sync().await.unwrap();
    assert!(observer.last_committed() >= later.transno);
    drop((a, b, observer));
    server.stop().unwrap();
}

/// A session asks at CONNECT when it wants to be answered (protocol 12, as a mount does): on
/// a server answering at commit (`--ack commit`, the default) one asking early replies gets
/// them, and one asking nothing is answered as the server says; on an `--ack early` server
/// one asking for commit replies gets them. What the server gave it, CONNECTED says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_is_answered_as_its_connect_asks_or_as_the_server_says() {
    use mds_proto::AckAsked;
    async fn session(addr: std::net::SocketAddr, ack: AckAsked) -> (Arc<Session>, Client) {
        let session = Arc::new(Session::new().with_ack(ack));
        let client = Client::connect_session(addr, session.clone())
            .await
            .unwrap();
        (session, client)
    }
    // Two creates: the first of a session answered early waits for the commit that makes
    // the journal know its client; the second says how the session is answered.
    async fn second_is_unsafe(client: &Client, name: &str) -> bool {
        client
            .create(ROOT, &format!("{name}-1"), 0o644)
            .await
            .unwrap();
        let reply = client
            .call_reply(create(ROOT, &format!("{name}-2")))
            .await
            .unwrap();
        reply.result.as_ref().unwrap();
        reply.transno > reply.last_committed
    }
    for (server_ack, asked, early) in [
        ("commit", AckAsked::Server, false),
        ("commit", AckAsked::Early, true),
        ("commit", AckAsked::Commit, false),
        ("early", AckAsked::Server, true),
        ("early", AckAsked::Commit, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        // Answered early, no commit of the server's own accord: the second reply is unsafe
        // until the SYNC. (Answered at commit, each create waits for one.)
        let mut args = vec!["--ack", server_ack, "--recovery-window", "60s"];
        if early {
            args.extend(["--commit-interval", "60s"]);
        }
        let server = common::start(dir.path(), &args);
        let (s, c) = session(server.addr, asked).await;
        let case = format!("--ack {server_ack}, the session asking {asked:?}");
        assert_eq!(s.is_early(), early, "CONNECTED says it: {case}");
        assert_eq!(second_is_unsafe(&c, "f").await, early, "{case}");
        c.sync().await.unwrap();
        assert_eq!(s.unsafe_count(), 0, "{case}");
        drop(c);
        assert!(server.stop().success(), "{case}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_what_was_answered_early_in_transno_order() {
    let dir = tempfile::tempdir().unwrap();
    let flags = EARLY;
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    // Then interleaved and unsafe: A, B, A — neither client's replays can run alone.
    let d = a.call_reply(Op::Mkdir {
        parent: ROOT,
        name: "d".into(),
        mode: 0o755,
    });
    let d = d.await.unwrap();
    let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
    let a1 = a.call_reply(create(ino(&d), "a1")).await.unwrap();
    assert!(d.transno < b1.transno && b1.transno < a1.transno);
    assert!(d.transno > d.last_committed, "unsafe: {d:?}");
    assert_eq!((sa.unsafe_count(), sb.unsafe_count()), (2, 1));
    drop((a, b));
    server.kill();

    let server = common::start(dir.path(), &flags);
    let log = server.log.clone();
    // A client nobody knew waits until recovery is over.
    let newcomer = tokio::spawn({
        let addr = server.addr;
        async move {
            let c = Client::connect(addr).await.unwrap();
            c.statfs().await.unwrap()
        }
    });
    // B comes back first: its replay waits for A's mkdir, which comes with A.
    let b = tokio::spawn({
        let (addr, sb) = (server.addr, sb.clone());
        async move { Client::connect_session(addr, sb).await.unwrap() }
    });
    let a = Client::connect_session(server.addr, sa.clone())
        .await
        .unwrap();
    let b = b.await.unwrap();
    let seen = newcomer.await.unwrap();
    assert_eq!(
        seen.last_transno, a1.transno,
        "replayed with their transnos first"
    );
    assert_eq!((sa.lost(), sb.lost()), (0, 0));
    // Same inode numbers as the clients were told before the crash.
    let c = server.client().await;
    let dir_now = c.lookup(ROOT, "d").await.unwrap();
    assert_eq!(dir_now.ino, ino(&d));
    assert_eq!(c.lookup(dir_now.ino, "a1").await.unwrap().ino, ino(&a1));
    assert_eq!(c.lookup(ROOT, "b1").await.unwrap().ino, ino(&b1));
    // New work takes new transnos and inode numbers above them.
    let next = a.call_reply(create(dir_now.ino, "a2")).await.unwrap();
    assert!(next.transno > a1.transno && ino(&next) > ino(&a1));
    c.sync().await.unwrap();
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("recovery done"))
    );
    drop((a, b, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_returns_is_skipped_when_the_window_closes() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--ack",
        "early",
        "--commit-interval",
        "60s",
        "--recovery-window",
        "1s",
    ];
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    let x = a.call_reply(create(ROOT, "x")).await.unwrap();
    let y = b.call_reply(create(ROOT, "y")).await.unwrap();
    let z = a.call_reply(create(ROOT, "z")).await.unwrap();
    assert!(x.transno < y.transno && y.transno < z.transno);
    drop((a, b));
    server.kill();

    // Only B comes back: its replay of y waits for x until the window closes, then x is
    // skipped; A is evicted, and z (above every replay) is simply never taken back.
    let server = common::start(dir.path(), &flags);
    let b = Client::connect_session(server.addr, sb.clone())
        .await
        .unwrap();
    assert_eq!(sb.lost(), 0);
    let c = server.client().await;
    let names: Vec<String> = c
        .readdir_all(ROOT)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["a0", "b0", "y"]);
    assert_eq!(c.lookup(ROOT, "y").await.unwrap().ino, ino(&y));
    c.sync().await.unwrap();
    let s = c.statfs().await.unwrap();
    assert_eq!(
        s.last_committed, s.last_transno,
        "contiguous through the skipped transno"
    );
    assert!(s.last_committed >= y.transno);
    assert!(
        server
            .log_text()
            .contains("skipping transnos nobody replayed")
    );

    // A comes back too late: what it was told early is lost, and it is told so.
    let a = Client::connect_session(server.addr, sa.clone())
        .await
        .unwrap();
    assert_eq!(sa.lost(), 2);
    drop((a, b, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// What another client observed of A's work, and what it built on it, after a crash in which
/// A never comes back: `(A's directory still there, B's replays lost)`.
async fn observed_then_crash(cos: &str) -> (bool, u64) {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--ack",
        "early",
        "--commit-interval",
        "60s",
        "--recovery-window",
        "1s",
        "--cos",
        cos,
    ];
    let server = common::start(dir.path(), &flags);
    let (_, sb, a, b) = two_known_clients(server.addr).await;
    // A makes a directory (answered early); B looks it up, stats it, lists it, and creates a
    // file in it (answered early too).
    let ad = a.call_reply(Op::Mkdir {
        parent: ROOT,
        name: "ad".into(),
        mode: 0o755,
    });
    let ad = ad.await.unwrap();
    assert!(ad.transno > ad.last_committed, "unsafe: {ad:?}");
    let seen = b.lookup(ROOT, "ad").await.unwrap();
    assert_eq!(seen.ino, ino(&ad));
    b.getattr(seen.ino).await.unwrap();
    b.readdir_all(seen.ino).await.unwrap();
    b.call_reply(create(seen.ino, "bf")).await.unwrap();
    drop((a, b));
    server.kill();

    let server = common::start(dir.path(), &flags);
    let b = Client::connect_session(server.addr, sb.clone())
        .await
        .unwrap();
    let c = server.client().await;
    let survived = c.lookup(ROOT, "ad").await.is_ok();
    if survived {
        assert!(
            c.lookup(ino(&ad), "bf").await.is_ok(),
            "B's replay is there"
        );
    }
    drop((b, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    (survived, sb.lost())
}

/// With commit-on-share, what B observed of A's work was made durable before B was told, so
/// it survives A never coming back, and B's replays never fail for want of A. Without it, the
/// same sequence loses A's directory and with it B's file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_another_client_observed_survives_its_author_never_returning() {
    assert_eq!(observed_then_crash("on").await, (true, 0));
    assert_eq!(observed_then_crash("off").await, (false, 1));
}

/// `mds_recovery_duration_seconds` is 0 until a recovery window has closed, then how long it
/// stayed open: here less than the window, since every known client came back and replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovery_duration_is_how_long_the_window_stayed_open() {
    let dir = tempfile::tempdir().unwrap();
    let window = 60.0;
    let flags = EARLY;
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    assert_eq!(metric(&server, RECOVERY_DURATION).await, 0.0, "no recovery");
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    assert!(a1.transno > a1.last_committed, "unsafe: {a1:?}");
    drop((a, b));
    server.kill();

    let server = common::start(dir.path(), &flags);
    // Neither known client is back: the window is open and has no duration yet.
    assert_eq!(metric(&server, "mds_recovery_open").await, 1.0);
    assert_eq!(metric(&server, RECOVERY_DURATION).await, 0.0, "still open");
    // Each connect returns once the window has closed, which takes both.
    let (a, b) = tokio::join!(
        Client::connect_session(server.addr, sa.clone()),
        Client::connect_session(server.addr, sb.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(metric(&server, "mds_replayed_requests_total").await, 1.0);
    // Set by the task that closes the window, which may run just after the replies left.
    let open_for = metric_until(&server, RECOVERY_DURATION, "the close is timed", |v| {
        v > 0.0
    })
    .await;
    assert!(open_for < window, "{open_for} s: every client came back");
    assert_eq!(metric(&server, "mds_recovery_open").await, 0.0);
    drop((a, b));
    assert!(server.stop().success());
}

/// The server is killed a second time while the recovery window after the first crash is
/// still open — one known client has replayed everything, the other has not come back yet —
/// and restarted: both clients come back and replay, and every create any client was
/// answered, early or not, is there exactly once, with the transno and inode number it was
/// told, and new work starts right above them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_crash_within_the_recovery_window_loses_nothing_answered() {
    let dir = tempfile::tempdir().unwrap();
    let flags = EARLY;
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    let a2 = a.call_reply(create(ROOT, "a2")).await.unwrap();
    let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
    assert!(a1.transno < a2.transno && a2.transno < b1.transno);
    assert!(a1.transno > a1.last_committed, "unsafe: {a1:?}");
    assert_eq!((sa.unsafe_count(), sb.unsafe_count()), (2, 1));
    drop((a, b));
    server.kill();

    // First restart: only A comes back. It replays a1 and a2 (below b1, so neither waits for
    // B) and says it is done; its connect then waits for the window, which waits for B.
    let server = common::start(dir.path(), &flags);
    let a_back = tokio::spawn({
        let (addr, sa) = (server.addr, sa.clone());
        async move { Client::connect_session(addr, sa).await }
    });
    // A's first request after its replays is sent only once every replay was answered.
    metric_until(
        &server,
        "mds_recovery_waiting_clients",
        "A has replayed",
        |v| v == 1.0,
    )
    .await;
    assert_eq!(metric(&server, "mds_replayed_requests_total").await, 2.0);
    assert_eq!(metric(&server, "mds_recovery_open").await, 1.0, "B is away");
    server.kill();
    assert!(
        a_back.await.unwrap().is_err(),
        "the crash cut A's connect short"
    );

    // Second restart: both come back.
    let server = common::start(dir.path(), &flags);
    let (a, b) = tokio::join!(
        Client::connect_session(server.addr, sa.clone()),
        Client::connect_session(server.addr, sb.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((sa.lost(), sb.lost()), (0, 0));
    let c = server.client().await;
    assert_eq!(
        common::names(&c, ROOT).await,
        vec!["a0", "a1", "a2", "b0", "b1"]
    );
    for (name, told) in [("a1", &a1), ("a2", &a2), ("b1", &b1)] {
        assert_eq!(c.lookup(ROOT, name).await.unwrap().ino, ino(told), "{name}");
    }
    let s = c.statfs().await.unwrap();
    assert_eq!(s.files, 5, "no stray inode: {s:?}");
    assert_eq!(
        s.last_transno, b1.transno,
        "replayed with their own transnos"
    );
    // New work takes the next transno and a new inode number.
    let next = a.call_reply(create(ROOT, "a3")).await.unwrap();
    assert_eq!(next.transno, b1.transno + 1);
    assert!(ino(&next) > ino(&b1));
    c.sync().await.unwrap();
    let s = c.statfs().await.unwrap();
    assert_eq!(s.last_committed, s.last_transno);
    assert!(server.wait_for_log("recovery done", Duration::from_secs(10)));
    drop((a, b, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// As above, but the second crash cuts A's replay while it waits for its turn (A's a2 comes
/// after B's b1, and B is away): a2 was answered before the first crash, so A must replay it
/// after the second. So must it a1, whose replay is answered only after its commit (A's first
/// mutation since the restart), if the crash comes before that commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_cut_by_a_second_crash_is_replayed_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let flags = EARLY;
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
    let a2 = a.call_reply(create(ROOT, "a2")).await.unwrap();
    assert!(a1.transno < b1.transno && b1.transno < a2.transno);
    assert_eq!((sa.unsafe_count(), sb.unsafe_count()), (2, 1));
    drop((a, b));
    server.kill();

    // First restart: only A comes back; a1 executes, a2 waits for b1, which waits for B.
    let server = common::start(dir.path(), &flags);
    let a_back = tokio::spawn({
        let (addr, sa) = (server.addr, sa.clone());
        async move { Client::connect_session(addr, sa).await }
    });
    metric_until(
        &server,
        "mds_replayed_requests_total",
        "A replays a1",
        |v| v == 1.0,
    )
    .await;
    server.kill();
    assert!(a_back.await.unwrap().is_err());

    let server = common::start(dir.path(), &flags);
    let (a, b) = tokio::join!(
        Client::connect_session(server.addr, sa.clone()),
        Client::connect_session(server.addr, sb.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let c = server.client().await;
    assert_eq!(
        common::names(&c, ROOT).await,
        vec!["a0", "a1", "a2", "b0", "b1"],
        "lost by A: {}",
        sa.lost()
    );
    for (name, told) in [("a1", &a1), ("a2", &a2), ("b1", &b1)] {
        assert_eq!(c.lookup(ROOT, name).await.unwrap().ino, ino(told), "{name}");
    }
    assert_eq!((sa.lost(), sb.lost()), (0, 0));
    drop((a, b, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// A new client's first two mutations sent together: the first makes the journal know the
/// client and is answered after its commit; the second executes before that commit is
/// durable, and must not be answered before it either — a crash in between would leave a
/// client holding an early reply that the server, not knowing the client, would not wait
/// for. So the second reply's `last_committed` covers the first's transno.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_early_reply_leaves_before_the_journal_knows_its_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &["--ack", "early"]);
    for round in 0..20 {
        let client = server.client().await;
        let (first, second) = tokio::join!(
            client.call_reply(create(ROOT, &format!("first{round}"))),
            client.call_reply(create(ROOT, &format!("second{round}"))),
        );
        let (first, second) = (first.unwrap(), second.unwrap());
        assert!(first.result.is_ok() && second.result.is_ok());
        assert!(
            first.last_committed >= first.transno,
            "the first is answered after its commit: {first:?}"
        );
        assert!(
            second.last_committed >= first.transno,
            "round {round}: the second left before the commit that makes its client known \
             ({} < {}): {second:?}",
            second.last_committed,
            first.transno
        );
        // Known from here on: a third is answered early, before its own commit is durable
        // or not, but never before the first's.
        let third = client
            .call_reply(create(ROOT, &format!("third{round}")))
            .await
            .unwrap();
        assert!(third.last_committed >= first.transno);
    }
    server.stop();
}

/// A clean stop commits everything, so no client holds an early reply that is not durable:
/// the next start must not open a recovery window and make every client wait for clients
/// that have nothing to replay — whether they were still connected at the stop or had left.
/// On both reply paths: on the per-CPU one the partitions' drains release the last commit
/// notices, which settle the clients; on the global one the service threads may stop before
/// those notices are released, and only the stop's own forget makes up for them (without it
/// this test failed one run in four there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_recovery_window_behind() {
    for path in ["per-cpu", "global"] {
        let dir = tempfile::tempdir().unwrap();
        let flags = [
            "--ack",
            "early",
            "--commit-interval",
            "60s",
            "--recovery-window",
            "60s",
            "--reply-path",
            path,
        ];
        let server = common::start(dir.path(), &flags);
        let (_sa, _sb, a, b) = two_known_clients(server.addr).await;
        let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
        assert!(a1.transno > a1.last_committed, "{path}: unsafe: {a1:?}");
        let b1 = b.call_reply(create(ROOT, "b1")).await.unwrap();
        assert!(b1.transno > b1.last_committed, "{path}: unsafe: {b1:?}");
        // B leaves before the stop, A is still connected when it comes.
        drop(b);
        assert!(server.stop().success());
        drop(a);

        let server = common::start(dir.path(), &flags);
        assert_eq!(metric(&server, "mds_recovery_open").await, 0.0, "{path}");
        let c = Client::connect(server.addr).await.unwrap();
        c.create(ROOT, "c", 0o644).await.unwrap();
        assert_eq!(common::names(&c, ROOT).await, ["a0", "a1", "b0", "b1", "c"]);
        drop(c);
        assert!(server.stop().success());
    }
}

/// The other side of the same rule: a clean stop while a recovery window is open keeps the
/// known clients, since those that have not replayed yet hold replies from before the crash.
/// Forgetting them would lose what they were told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_during_a_recovery_window_keeps_waiting_for_its_clients() {
    let dir = tempfile::tempdir().unwrap();
    let flags = EARLY;
    let server = common::start(dir.path(), &flags);
    let (sa, sb, a, b) = two_known_clients(server.addr).await;
    let a1 = a.call_reply(create(ROOT, "a1")).await.unwrap();
    assert!(a1.transno > a1.last_committed, "unsafe: {a1:?}");
    drop((a, b));
    server.kill();

    // Nobody comes back before this start is stopped cleanly.
    let server = common::start(dir.path(), &flags);
    assert_eq!(metric(&server, "mds_recovery_open").await, 1.0);
    assert!(server.stop().success());

    let server = common::start(dir.path(), &flags);
    assert_eq!(metric(&server, "mds_recovery_open").await, 1.0);
    let (a, b) = tokio::join!(
        Client::connect_session(server.addr, sa.clone()),
        Client::connect_session(server.addr, sb.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((sa.lost(), sb.lost()), (0, 0));
    assert_eq!(a.lookup(ROOT, "a1").await.unwrap().ino, ino(&a1));
    drop((a, b));
    assert!(server.stop().success());
}
