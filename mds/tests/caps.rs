//! Caps on what clients make the server hold, each reached by counting rather than timing.
//! Regressions guarded (found by a review of 8d645ab, issue 53): OPEN was bounded by nothing —
//! a million OPENs of one directory on one connection were all kept, past the connection's
//! end; handshake slots were capped per address only, so silent connections from a few dozen
//! loopback addresses took every one and clients were refused EBUSY; sessions had no total
//! bound, so records × identities had none; and the output bound stopped counting the bytes
//! the writer had taken and not yet written, so a client that does not read held nearly
//! twice the bound.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::{Raw, request};
use mds_client::auth::AuthKey;
use mds_client::{ROOT, Session};
use mds_proto::{Body, Errno, Op, OpenFlags, Reply};

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

/// OPEN of `ino` to read under `handle`; `reopen`: the one that takes a handle back after a
/// restart.
fn open(xid: u64, ino: u64, handle: u64, reopen: bool) -> mds_proto::Request {
    let flags = OpenFlags {
        read: true,
        ..OpenFlags::default()
    };
    request(
        xid,
        Op::Open {
            ino,
            handle,
            flags,
            reopen,
        },
        None,
    )
}

/// Each session holds at most `--max-open-per-session` handles (EMFILE past it) and all of
/// them at most `--max-open-files` (ENFILE), counted in `mds_open_refused_total`; the same
/// OPEN again is the handle it opened, not another; a RELEASE makes room; and the reopens
/// after a restart are held to the caps of the new start.
#[test]
fn open_handles_are_capped_per_session_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.max_open_per_session = 100;
    config.keys.max_open_files = 150;
    let server = common::InProcess::start(config);
    let a_session = Session::new();
    let (mut a, connected) = Raw::connect(server.addr, &a_session, None);
    assert!(matches!(connected.result, Ok(Body::Connected { .. })));
    let mut xid = 100;
    let mut next = || {
        xid += 1;
        xid
    };
    for handle in 1..=100 {
        let reply = a.call(&open(next(), ROOT, handle, false));
        assert!(reply.result.is_ok(), "handle {handle}: {reply:?}");
    }
    assert_eq!(
        a.call(&open(next(), ROOT, 101, false)).result,
        Err(Errno::EMFILE)
    );
    // A handle it holds, opened again (a resend): the same handle, not a second one.
    assert!(a.call(&open(next(), ROOT, 7, false)).result.is_ok());
    let (mut b, _) = Raw::connect(server.addr, &Session::new(), None);
    for handle in 1..=50 {
        assert!(b.call(&open(next(), ROOT, handle, false)).result.is_ok());
    }
    assert_eq!(
        b.call(&open(next(), ROOT, 51, false)).result,
        Err(Errno::ENFILE)
    );
    assert_eq!(metric(&server, "mds_open_handles"), 150.0);
    assert_eq!(
        metric(&server, "mds_open_refused_total{reason=\"session\"}"),
        1.0
    );
    assert_eq!(
        metric(&server, "mds_open_refused_total{reason=\"server\"}"),
        1.0
    );
    assert_eq!(
        metric(&server, "mds_requests_total{op=\"open\",result=\"ENFILE\"}"),
        1.0
    );
    // A's handles outlive its connection (until its session expires): still no room.
    drop(a);
    assert_eq!(
        b.call(&open(next(), ROOT, 51, false)).result,
        Err(Errno::ENFILE)
    );
    // A comes back as itself and releases one: room for one more.
    let (mut a, _) = Raw::connect(server.addr, &a_session, None);
    let release = request(next(), Op::Release { handle: 7 }, None);
    assert_eq!(a.call(&release).result, Ok(Body::Done));
    assert!(b.call(&open(next(), ROOT, 51, false)).result.is_ok());
    drop((a, b));
    server.stop().unwrap();

    // After a restart with a lower cap, a client taking its handles back meets it too.
    let mut config = common::config(dir.path());
    config.keys.max_open_per_session = 10;
    let server = common::InProcess::start(config);
    let (mut a, _) = Raw::connect(server.addr, &a_session, None);
    for handle in 1..=10 {
        assert!(a.call(&open(next(), ROOT, handle, true)).result.is_ok());
    }
    assert_eq!(
        a.call(&open(next(), ROOT, 11, true)).result,
        Err(Errno::EMFILE)
    );
    drop(a);
    server.stop().unwrap();
}

/// The CONNECT of a new identity past `--max-sessions` is refused as a full server's is
/// (EBUSY under xid 0, then the close) and counted; identities the server keeps still
/// attach; a session that goes makes room.
#[test]
fn sessions_are_capped_and_only_new_identities_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.max_sessions = 3;
    let server = common::InProcess::start(config);
    let sessions: Vec<Session> = (0..3).map(|_| Session::new()).collect();
    let mut kept: Vec<Raw> = sessions
        .iter()
        .map(|s| {
            let (raw, reply) = Raw::connect(server.addr, s, None);
            assert!(matches!(reply.result, Ok(Body::Connected { .. })));
            raw
        })
        .collect();
    let (mut fourth, refused) = Raw::connect(server.addr, &Session::new(), None);
    assert_eq!((refused.xid, refused.result), (0, Err(Errno::EBUSY)));
    assert!(fourth.closed());
    assert_eq!(metric(&server, "mds_sessions_refused_total"), 1.0);
    assert_eq!(metric(&server, "mds_sessions"), 3.0);
    // A kept identity reconnects (proving its secret), replacing its connection.
    let (again, reply) = Raw::connect(server.addr, &sessions[1], None);
    assert!(
        matches!(reply.result, Ok(Body::Connected { .. })),
        "{reply:?}"
    );
    kept[1] = again;
    // One leaves with nothing kept: its session goes, and a new identity fits.
    drop(kept.remove(0));
    eventually("the idle session is forgotten", || {
        metric(&server, "mds_sessions") == 2.0
    });
    let (_fifth, reply) = Raw::connect(server.addr, &Session::new(), None);
    assert!(
        matches!(reply.result, Ok(Body::Connected { .. })),
        "{reply:?}"
    );
    drop(kept);
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

/// Whether the server has said anything on `stream` (its refusal) within 200 ms.
fn answered(stream: &TcpStream) -> bool {
    let probe = stream.try_clone().unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    probe.peek(&mut [0u8; 1]).is_ok()
}

/// Silent connections are capped per /24 as well as per address; a flood from many networks
/// fills the partition's handshake slots, and then each newcomer takes the place of the
/// oldest silent one: a client that sent its CONNECT is never the one closed while silent
/// ones remain, so it proves the shared key and is served however long the flood goes on.
#[test]
fn silent_connections_from_many_addresses_never_refuse_a_client_that_proves_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let key_bytes = vec![7u8; 32];
    let mut config = common::config(dir.path());
    config.keys.partitions = 1;
    config.auth_key = Some(Arc::new(AuthKey::from_bytes(key_bytes.clone()).unwrap()));
    config.limits.max_unauthenticated = 16;
    config.limits.max_unauthenticated_per_address = 4;
    config.limits.max_unauthenticated_per_prefix = 8;
    // Long enough that no connection here reaches it: only room closes one.
    config.limits.connect_deadline = Duration::from_secs(120);
    let server = common::InProcess::start(config);
    let key = AuthKey::from_bytes(key_bytes).unwrap();
    // Four addresses of 127.0.1.0/24, four connections each: the /24 holds eight.
    let one_network: Vec<TcpStream> = (1..=4)
        .flat_map(|host| (0..4).map(move |_| format!("127.0.1.{host}")))
        .map(|source| silent_from(&source, server.addr))
        .collect();
    eventually("eight are admitted", || {
        metric(&server, "mds_unauthenticated_connections") == 8.0
    });
    let (refused, admitted): (Vec<TcpStream>, Vec<TcpStream>) =
        one_network.into_iter().partition(answered);
    assert_eq!((refused.len(), admitted.len()), (8, 8));
    assert!(refused.into_iter().all(refused_busy));
    assert_eq!(
        metric(
            &server,
            "mds_unauthenticated_refused_total{reason=\"prefix\"}"
        ),
        8.0
    );
    // Eight more from another network fill the partition.
    let mut flood: Vec<TcpStream> = (1..=2)
        .flat_map(|host| (0..4).map(move |_| format!("127.0.2.{host}")))
        .map(|source| silent_from(&source, server.addr))
        .collect();
    eventually("the partition is full", || {
        metric(&server, "mds_unauthenticated_connections") == 16.0
    });
    // A client arrives and sends its CONNECT; the server challenges it for the key.
    let session = Session::new();
    let mut client = Raw::on(silent_from("127.0.9.1", server.addr));
    let connect = Op::Connect {
        version: mds_proto::PROTOCOL_VERSION,
        client: session.id(),
        atime: mds_proto::Atime::default(),
        ack: mds_proto::AckAsked::default(),
    };
    let challenge = client.call(&request(1, connect, None));
    let Ok(Body::Challenge {
        nonce, key: true, ..
    }) = challenge.result
    else {
        panic!("{challenge:?}");
    };
    // The flood goes on, from network after network: sixty-four more, four times the slots.
    for net in 3..=18 {
        for host in 1..=4 {
            flood.push(silent_from(&format!("127.0.{net}.{host}"), server.addr));
        }
    }
    eventually("the flood's newest hold every other slot", || {
        metric(
            &server,
            "mds_unauthenticated_refused_total{reason=\"partition\"}",
        ) == 65.0
    });
    assert_eq!(metric(&server, "mds_unauthenticated_connections"), 16.0);
    let proof = key.proof(&nonce, session.id(), mds_proto::PROTOCOL_VERSION);
    let connected = client.call(&request(
        2,
        Op::Authenticate {
            proof: Some(proof),
            session: None,
        },
        None,
    ));
    assert!(
        matches!(connected.result, Ok(Body::Connected { .. })),
        "{connected:?}"
    );
    assert!(client.call(&request(3, Op::Ping, None)).result.is_ok());
    // Those closed for room were the oldest, each told EBUSY: the eight admitted from the
    // first network, and the flood's first fifty-seven.
    let (closed, waiting) = flood.split_at(65 - 8);
    assert!(admitted.into_iter().all(refused_busy));
    assert!(closed.iter().all(|s| refused_busy(s.try_clone().unwrap())));
    assert!(
        waiting.iter().all(|s| !answered(s)),
        "the newest still wait"
    );
    drop(flood);
    server.stop().unwrap();
}

/// Bytes the kernel holds of a connection from `client` to `server`, both on this host: what
/// the server's socket has not sent (or not had acknowledged) and what the client's has
/// received and not read, from `/proc/net/tcp`.
fn kernel_bytes(server: SocketAddr, client: SocketAddr) -> usize {
    let hex = |a: SocketAddr| {
        let SocketAddr::V4(v4) = a else {
            panic!("IPv4")
        };
        let ip = u32::from_ne_bytes(v4.ip().octets());
        format!("{ip:08X}:{:04X}", a.port())
    };
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let queue = |local: SocketAddr, remote: SocketAddr| -> (usize, usize) {
        let (l, r) = (hex(local), hex(remote));
        let line = text
            .lines()
            .find(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 4 && f[1] == l && f[2] == r
            })
            .unwrap_or_else(|| panic!("no socket {l} -> {r}"));
        let queues = line.split_whitespace().nth(4).unwrap();
        let (tx, rx) = queues.split_once(':').unwrap();
        (
            usize::from_str_radix(tx, 16).unwrap(),
            usize::from_str_radix(rx, 16).unwrap(),
        )
    };
    let (server_tx, _) = queue(server, client);
    let (_, client_rx) = queue(client, server);
    server_tx + client_rx
}

/// A client that asks for READDIR pages and never reads them: the server holds at most its
/// output bound (1 MiB) plus one page for it, counting what its writer took from the buffer
/// and could not write as owed too. Held = the pages it built minus what the kernel took.
/// Before the fix the writer took a full buffer, the bound stopped counting it, and the
/// reader built another one beside it.
#[test]
fn a_client_that_never_reads_holds_at_most_the_output_bound_and_one_reply() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.partitions = 1;
    let bound = config.limits.output_high_water;
    let server = common::InProcess::start(config);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt.block_on(async {
        let c = server.client().await;
        let d = c.mkdir(ROOT, "d", 0o755).await.unwrap().ino;
        let creates: Vec<_> = (0..1000)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    c.create(d, &format!("file-with-a-longish-name-{i:05}"), 0o644)
                        .await
                })
            })
            .collect();
        for created in creates {
            created.await.unwrap().unwrap();
        }
        c.sync().await.unwrap();
        d
    });
    let readdir = |xid: u64| {
        request(
            xid,
            Op::Readdir {
                ino: d,
                cursor: None,
                limit: 1024,
            },
            None,
        )
    };
    // One page, read, for its size (xids of two varint bytes throughout).
    let (mut reader, _) = Raw::connect(server.addr, &Session::new(), None);
    let page: Reply = reader.call(&readdir(200));
    assert!(page.result.is_ok());
    let mut frame = bytes::BytesMut::new();
    mds_proto::encode_frame(&page, &mut frame);
    let page_bytes = frame.len();
    assert!(page_bytes > 10_000, "{page_bytes}");
    drop(reader);
    let executed = || metric(&server, "mds_requests_total{op=\"readdir\",result=\"ok\"}");
    let before = executed();
    // The client that does not read: a small receive buffer, and 400 pages asked at once.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut b = Raw::on(socket.into());
    assert!(matches!(
        b.handshake(&Session::new(), None).result,
        Ok(Body::Connected { .. })
    ));
    let mut asks = bytes::BytesMut::new();
    for xid in 300..700 {
        mds_proto::encode_frame(&readdir(xid), &mut asks);
    }
    std::io::Write::write_all(&mut b.stream, &asks).unwrap();
    // Wait until its requests stop being executed.
    let mut last = -1.0;
    eventually("the reader stops executing", || {
        std::thread::sleep(Duration::from_millis(500));
        let now = executed();
        let settled = now == last && now > before;
        last = now;
        settled
    });
    let built = (last - before) as usize * page_bytes;
    let in_kernel = kernel_bytes(server.addr, b.stream.local_addr().unwrap());
    let held = built.saturating_sub(in_kernel);
    assert!(
        held <= bound + page_bytes,
        "the server holds {held} bytes for a client that reads nothing (bound {bound}, a page \
         {page_bytes}; {built} built, {in_kernel} in the kernel)"
    );
    assert!(held > bound / 2, "it did fill its bound: {held}");
    drop(b);
    server.stop().unwrap();
}
