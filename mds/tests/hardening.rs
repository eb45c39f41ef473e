//! Bounds that hold whoever the client is, and identities nobody can take. Regressions guarded
//! (found by a review of 5db4ed8): READDIR pages held for another client's commit were not
//! counted against their connection's output bound (~130 MiB per connection that does not
//! read); a connection slot was taken at accept, before CONNECT, so silent connections could
//! refuse real clients and park 64 KiB frames; the metrics endpoint had no deadline and no
//! cap; a client that never advanced its watermark grew its resend records without bound;
//! anyone with the shared key could CONNECT as another client's identity and take over its
//! session.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::raw::{Raw, request};
use mds_client::{Client, ROOT, Session};
use mds_proto::{Body, Cred, Errno, Op, PROTOCOL_VERSION};

fn metric(server: &common::InProcess, series: &str) -> f64 {
    common::sample(&common::scrape(server.metrics), series).unwrap_or(0.0)
}

/// Waits (bounded) until `check` holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client that asks for READDIR pages built on another client's uncommitted creates and
/// never reads them: the pages wait for that client's commits in the reply engine, and count
/// against the connection's output bound while they do. The reader stops executing its
/// requests once the owed bytes pass the bound, held ones included, rather than build every
/// page (before the fix, one read's worth of READDIRs — thousands, ~37 KiB each — built
/// theirs while the commits they waited for came one at a time).
#[test]
fn pages_held_for_another_clients_commit_count_against_the_output_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.partitions = 1;
    // One mutation per commit: A's creates take seconds to become durable, and what B
    // reads of them waits that long.
    config.keys.max_batch = 1;
    let server = common::InProcess::start(config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = rt.block_on(server.client());
    let d = rt.block_on(async {
        let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().ino;
        let names = (0..1000).map(|i| format!("file-with-a-longish-name-{i:05}"));
        let creates: Vec<_> = names
            .map(|name| {
                let a = a.clone();
                tokio::spawn(async move { a.create(d, &name, 0o644).await })
            })
            .collect();
        for c in creates {
            c.await.unwrap().unwrap();
        }
        d
    });
    // A thousand more, not waited for: executed at once, durable one commit at a time.
    let more: Vec<_> = (0..1000)
        .map(|i| {
            let a = a.clone();
            rt.spawn(async move { a.create(d, &format!("more-{i:05}"), 0o644).await })
        })
        .collect();
    rt.block_on(async {
        let c = server.client().await;
        while c.statfs().await.unwrap().files < 2000 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    // B asks for 4096 pages of d, all in one write, and reads nothing; its receive buffer
    // is small, so the kernel takes little of what it owes.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut b = Raw::on(socket.into());
    assert!(matches!(
        b.handshake(&Session::new(), None).result,
        Ok(Body::Connected { .. })
    ));
    let mut asks = bytes::BytesMut::new();
    for xid in 0..4096 {
        let readdir = Op::Readdir {
            ino: d,
            cursor: None,
            limit: 1024,
        };
        mds_proto::encode_frame(&request(100 + xid, readdir, None), &mut asks);
    }
    std::io::Write::write_all(&mut b.stream, &asks).unwrap();
    // Every executed READDIR built on A's uncommitted creates counted one conflict: wait
    // until they stop coming.
    let conflicts = "mds_cos_conflicts_total{op=\"readdir\"}";
    let mut last = -1.0;
    eventually("B's requests stop being executed", || {
        std::thread::sleep(Duration::from_millis(500));
        let now = metric(&server, conflicts);
        let settled = now == last && now > 0.0;
        last = now;
        settled
    });
    // A page is ~37 KiB: 1 MiB of them owed, plus what the kernel's socket buffers took.
    assert!(
        last < 500.0,
        "{last} pages built for a client that reads nothing (of 4096 asked)"
    );
    assert!(metric(&server, "mds_reads_paused_total{reason=\"output\"}") >= 1.0);
    drop(b);
    rt.block_on(async {
        for c in more {
            c.await.unwrap().unwrap();
        }
        // The server serves on.
        assert_eq!(a.readdir_all(d).await.unwrap().len(), 2000);
    });
    drop(a);
    server.stop().unwrap();
}

/// A TCP connection from `source` (any port) to `addr` that sends nothing.
fn silent_from(source: &str, addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Whether the server answered this connection EBUSY (xid 0) and closed it.
fn refused_busy(stream: TcpStream) -> bool {
    let mut raw = Raw::on(stream);
    matches!(raw.recv(), Some(r) if r.xid == 0 && r.result == Err(Errno::EBUSY)) && raw.closed()
}

/// Connections that have not completed their handshake are bounded apart from those that
/// have: per partition and per address. A flood of silent connections never takes a slot an
/// authenticated client holds or needs, cannot come from one address beyond its cap, and
/// cannot park a large frame before CONNECT.
#[test]
fn unauthenticated_connections_are_bounded_apart_from_clients() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.partitions = 1;
    config.limits.max_connections = 3;
    config.limits.max_unauthenticated = 6;
    config.limits.max_unauthenticated_per_address = 4;
    let server = common::InProcess::start(config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let clients: Vec<Client> = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..2 {
            v.push(server.client().await);
        }
        v
    });
    // Ten silent connections from 127.0.0.1: four are in their handshake, six refused.
    let silent: Vec<TcpStream> = (0..10)
        .map(|_| silent_from("127.0.0.1", server.addr))
        .collect();
    eventually("the four are admitted", || {
        metric(&server, "mds_unauthenticated_connections") == 4.0
    });
    let mut kept = Vec::new();
    let mut refused = 0;
    for stream in silent {
        let probe = stream.try_clone().unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        match probe.peek(&mut byte) {
            Ok(_) => refused += usize::from(refused_busy(stream)),
            Err(_) => kept.push(stream), // nothing to read: waiting in its handshake
        }
    }
    assert_eq!((kept.len(), refused), (4, 6));
    assert_eq!(
        metric(
            &server,
            "mds_unauthenticated_refused_total{reason=\"address\"}"
        ),
        6.0
    );
    // Another address still gets in, and so does a client: two more handshake slots.
    let other = silent_from("127.0.0.2", server.addr);
    let mut raw = Raw::on(silent_from("127.0.0.3", server.addr));
    let connected = raw.handshake(&Session::new(), None);
    assert!(
        matches!(connected.result, Ok(Body::Connected { .. })),
        "{connected:?}"
    );
    // The clients connected before the flood never noticed it.
    rt.block_on(async {
        for c in &clients {
            c.ping().await.unwrap();
            c.create(ROOT, &format!("f{}", c.session().id()), 0o644)
                .await
                .unwrap();
        }
    });
    // The partition's handshake slots are full now (4 + 1 + the 127.0.0.3 one released):
    // one more from a fresh address fits, and the next takes the place of the oldest still
    // in its handshake, which is told EBUSY (`partition/admission.rs`).
    let fits = silent_from("127.0.0.4", server.addr);
    eventually("admitted", || {
        metric(&server, "mds_unauthenticated_connections") == 6.0
    });
    let newest = silent_from("127.0.0.5", server.addr);
    assert!(refused_busy(kept.remove(0)));
    newest
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(
        newest.peek(&mut [0u8; 1]).is_err(),
        "waiting in its handshake"
    );
    assert_eq!(
        metric(
            &server,
            "mds_unauthenticated_refused_total{reason=\"partition\"}"
        ),
        1.0
    );
    assert_eq!(metric(&server, "mds_unauthenticated_connections"), 6.0);
    // Three connection slots, three clients: a fourth completes its handshake and is told
    // the server is full.
    drop(fits);
    eventually("a handshake slot frees", || {
        metric(&server, "mds_unauthenticated_connections") == 5.0
    });
    let mut fourth = Raw::on(silent_from("127.0.0.6", server.addr));
    let full = fourth.handshake(&Session::new(), None);
    assert_eq!((full.xid, full.result), (0, Err(Errno::EBUSY)));
    assert_eq!(metric(&server, "mds_connections_refused_total"), 1.0);
    drop((kept, other, raw, newest));
    // Before its handshake a connection may not send a frame longer than one: a 60,000-byte
    // length is refused at once, its body never awaited.
    let mut big = Raw::on(silent_from("127.0.0.7", server.addr));
    std::io::Write::write_all(&mut big.stream, &60_000u32.to_be_bytes()).unwrap();
    let refusal = big.recv().expect("refused, not left waiting");
    assert_eq!((refusal.xid, refusal.result), (0, Err(Errno::EPROTO)));
    assert!(big.closed());
    drop(clients);
    server.stop().unwrap();
}

/// The metrics endpoint serves at most 64 connections at once and closes one that sends no
/// request in time, so idle connections cannot take the process's descriptors.
#[test]
fn the_metrics_endpoint_bounds_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::InProcess::on(dir.path());
    let idle: Vec<TcpStream> = (0..mds::metrics::METRICS_MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(server.metrics).unwrap())
        .collect();
    // The next one is answered 503 at once.
    let mut over = TcpStream::connect(server.metrics).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut over, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    // The idle ones are closed once their deadline passes; then scrapes are served again.
    let started = Instant::now();
    let mut first = idle.into_iter().next().unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        std::io::Read::read_to_end(&mut first, &mut rest).unwrap(),
        0
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "not before its deadline"
    );
    eventually("scrapes are served again", || {
        mds_testkit::http(server.metrics, "GET", "/metrics")
            .is_ok_and(|(status, _, _)| status == 200)
    });
    assert!(metric(&server, "mds_metrics_connections_refused_total") >= 1.0);
    server.stop().unwrap();
}

/// A client whose watermark never moves keeps at most `max_resend_records` records: its
/// next mutation is refused EBUSY, counted, until it acknowledges replies.
#[test]
fn a_client_that_never_acknowledges_is_refused_past_its_record_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.max_resend_records = 32;
    let server = common::InProcess::start(config);
    let session = Session::new();
    let (mut raw, connected) = Raw::connect(server.addr, &session, None);
    assert!(matches!(connected.result, Ok(Body::Connected { .. })));
    let create = |xid: u64, acked_xid: u64| {
        let mut r = request(
            xid,
            Op::Create {
                parent: ROOT,
                name: format!("r{xid}"),
                mode: 0o644,
            },
            None,
        );
        r.acked_xid = acked_xid;
        r
    };
    for xid in 10..42 {
        assert!(raw.call(&create(xid, 0)).result.is_ok(), "xid {xid}");
    }
    assert_eq!(raw.call(&create(42, 0)).result, Err(Errno::EBUSY));
    assert_eq!(raw.call(&create(43, 0)).result, Err(Errno::EBUSY));
    assert_eq!(metric(&server, "mds_resend_full_total"), 2.0);
    // The client acknowledges what it has: room again.
    assert!(raw.call(&create(44, 43)).result.is_ok());
    drop(raw);
    server.stop().unwrap();
}

/// An impostor names `client`'s identity with a secret of its own: returns the answer to its
/// AUTHENTICATE and whether the server closed the connection after it.
fn take_over(addr: SocketAddr, client: u64) -> (mds_proto::Reply, bool) {
    let mut raw = Raw::open(addr);
    let connect = Op::Connect {
        version: PROTOCOL_VERSION,
        client,
        atime: mds_proto::Atime::default(),
        ack: mds_proto::AckAsked::default(),
    };
    let challenge = raw.call(&request(1, connect, None));
    let Ok(Body::Challenge {
        session: true,
        nonce,
        ..
    }) = challenge.result
    else {
        panic!("a reconnect of a kept session is challenged: {challenge:?}")
    };
    let wrong = mds_client::auth::SessionSecret::random().proof(&nonce, client);
    let answer = raw.call(&request(
        2,
        Op::Authenticate {
            proof: None,
            session: Some(wrong),
        },
        None,
    ));
    (answer, raw.closed())
}

/// Whoever names another client's identity must prove that session's secret, issued at its
/// first CONNECT: without it the CONNECT is refused (EAUTH), and the session, its
/// connection and its replies stay the real client's. After a restart, the journal's copy of
/// the secret guards the session it restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_identity_cannot_be_taken_without_its_session_secret() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let session = std::sync::Arc::new(Session::new());
    let real = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    assert!(session.secret().is_some(), "issued at the first CONNECT");
    real.create(ROOT, "mine", 0o644).await.unwrap();
    let (addr, id) = (server.addr, session.id());
    let (answer, closed) = tokio::task::spawn_blocking(move || take_over(addr, id))
        .await
        .unwrap();
    assert_eq!(answer.result, Err(Errno::EAUTH));
    assert!(closed);
    // The real client's connection was not replaced.
    real.ping().await.unwrap();
    let auth = common::sample(
        &common::scrape(server.metrics),
        "mds_auth_failures_total{reason=\"session\"}",
    );
    assert_eq!(auth, Some(1.0));
    drop(real);
    // Killed with the session's resend record in the journal: the session comes back at the
    // next start, guarded by the same secret.
    server.kill();
    let server = common::start(dir.path(), &[]);
    let (addr, id) = (server.addr, session.id());
    let (answer, closed) = tokio::task::spawn_blocking(move || take_over(addr, id))
        .await
        .unwrap();
    assert_eq!(answer.result, Err(Errno::EAUTH));
    assert!(closed);
    let back = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    back.ping().await.unwrap();
    assert_eq!(common::names(&back, ROOT).await, ["mine"]);
    drop(back);
    assert!(server.stop().success());
}

/// A TCP socket created as user `uid` (the kernel's owner of a socket is its creator's
/// file-system uid, per thread), from `port` (0: any) on 127.0.0.1, connected to `addr`.
fn socket_owned_by(uid: u32, port: u16, addr: SocketAddr) -> TcpStream {
    let made = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setfsuid changes only this thread's file-system uid, and it is set back
            // before the thread ends.
            unsafe { libc::setfsuid(uid) };
            let socket =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            // SAFETY: as above.
            unsafe { libc::setfsuid(0) };
            socket
        })
        .join()
        .unwrap()
    });
    let from: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    made.set_reuse_address(true).unwrap();
    made.bind(&from.into()).unwrap();
    made.connect(&addr.into()).unwrap();
    made.into()
}

/// `--cred-check owner`: an unprivileged connection carries only its owner's credentials;
/// one from a privileged port (or one root holds) carries anyone's, as NFS's `secure`.
#[test]
fn cred_check_owner_holds_a_connection_to_its_owners_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.cred_check = mds::config::CredCheck::Owner;
    let server = common::InProcess::start(config);
    let nobody = 65534;
    let getattr_as = |raw: &mut Raw, xid: u64, uid: u32, gid: u32| {
        let mut r = request(xid, Op::Getattr { ino: ROOT }, None);
        r.cred = Cred {
            uid,
            gid,
            groups: vec![],
        };
        raw.call(&r).result
    };
    let mut theirs = Raw::on(socket_owned_by(nobody, 0, server.addr));
    assert!(matches!(
        theirs.handshake(&Session::new(), None).result,
        Ok(Body::Connected { .. })
    ));
    assert!(
        getattr_as(&mut theirs, 10, nobody, nobody).is_ok(),
        "its owner's"
    );
    assert_eq!(
        getattr_as(&mut theirs, 11, 0, 0),
        Err(Errno::EPERM),
        "root's"
    );
    assert_eq!(
        getattr_as(&mut theirs, 12, nobody, 0),
        Err(Errno::EPERM),
        "a group not its own"
    );
    // The same owner from a privileged port: a mount serving many users.
    let mut privileged = Raw::on(socket_owned_by(nobody, 812, server.addr));
    assert!(matches!(
        privileged.handshake(&Session::new(), None).result,
        Ok(Body::Connected { .. })
    ));
    assert!(getattr_as(&mut privileged, 10, 0, 0).is_ok());
    // Root's own connection (this test runs as root).
    let mut roots = Raw::open(server.addr);
    roots.handshake(&Session::new(), None);
    assert!(getattr_as(&mut roots, 10, 1000, 1000).is_ok());
    assert_eq!(metric(&server, "mds_credentials_refused_total"), 2.0);
    drop((theirs, privileged, roots));
    server.stop().unwrap();
}

/// With the binary's default flags, a local user cannot speak for root (issue 53, finding
/// 3): a connection the kernel says uid 65534 holds that claims uid 0 is refused EPERM, so it
/// can make neither a root-owned set-user-ID program nor a device node, while its own
/// credentials are served; root's own connection — a mount, which carries its callers'
/// credentials — still carries anyone's. Until the default became `--cred-check owner`, both
/// the program and the device were made.
#[test]
fn by_default_a_local_user_cannot_claim_to_be_root() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let nobody = 65534;
    let as_user = |xid: u64, op: Op, uid: u32| {
        let mut r = request(xid, op, None);
        r.cred = Cred {
            uid,
            gid: uid,
            groups: vec![],
        };
        r
    };
    let mut theirs = Raw::on(socket_owned_by(nobody, 0, server.addr));
    assert!(matches!(
        theirs.handshake(&Session::new(), None).result,
        Ok(Body::Connected { .. })
    ));
    let setuid_program = Op::Create {
        parent: ROOT,
        name: "id".into(),
        mode: 0o4755,
    };
    let device = Op::Mknod {
        parent: ROOT,
        name: "mem".into(),
        kind: mds_proto::Kind::CharDevice,
        mode: 0o666,
        rdev: (1 << 8) | 1,
    };
    for (xid, op) in [(10, setuid_program.clone()), (11, device)] {
        assert_eq!(
            theirs.call(&as_user(xid, op.clone(), 0)).result,
            Err(Errno::EPERM),
            "{op:?} claiming uid 0"
        );
    }
    let own = theirs.call(&as_user(12, common::create(ROOT, "mine"), nobody));
    assert!(
        own.result.is_ok(),
        "its owner's credentials: {:?}",
        own.result
    );
    let mut roots = Raw::open(server.addr);
    roots.handshake(&Session::new(), None);
    let carried = roots.call(&as_user(10, common::create(ROOT, "for-alice"), 1000));
    assert!(
        carried.result.is_ok(),
        "root's connection: {:?}",
        carried.result
    );
    drop((theirs, roots));
    assert!(server.stop().success());
}

/// Creates that fail burn inode numbers without committing anything: when they run the
/// counter past half the room the ceiling leaves, the ceiling is raised on its own (a write
/// of its own, with no commit to carry it), so creates go on being served — a create that
/// reaches the ceiling before the raise is durable is refused EBUSY, never given a number
/// past it — and the next one that succeeds takes a number above all those burned.
#[test]
fn failed_creates_that_burn_inode_numbers_raise_the_ceiling_on_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.ino_lease = 64;
    let server = common::InProcess::start(config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = server.client().await;
        c.create(ROOT, "taken", 0o644).await.unwrap();
        // Each EEXIST burns a number: ten leases' worth, nothing committed between.
        let (mut burned, mut busy) = (0, 0);
        while burned < 640 {
            match c.create(ROOT, "taken", 0o644).await.unwrap_err().errno() {
                Some(Errno::EEXIST) => burned += 1,
                Some(Errno::EBUSY) => busy += 1, // the raise is on its way
                other => panic!("{other:?}"),
            }
            assert!(busy < 10_000, "the ceiling is never raised");
        }
        let made = loop {
            match c.create(ROOT, "next", 0o644).await {
                Ok(made) => break made,
                Err(e) if e.errno() == Some(Errno::EBUSY) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(made.ino > 640, "above every burned number: {}", made.ino);
    });
    server.stop().unwrap();
}
