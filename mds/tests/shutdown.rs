//! Shutdown always ends. Regression: a client sent 400 READDIRs of a 4,000-entry directory
//! and stopped reading; SIGTERM, then a second SIGTERM, left the server running for as long
//! as that client stayed connected, its writer blocked on a full socket. Now writers get a
//! grace period (`--shutdown-grace`) and are then cut, and a second signal cuts them at once;
//! what was pending is committed either way.

mod common;

use std::io::Write;
use std::net::TcpStream;

use bytes::BytesMut;
use mds_client::ROOT;
use mds_proto::{Cred, Op, PROTOCOL_VERSION, Request, encode_frame};

fn request(xid: u64, op: Op) -> Request {
    Request {
        xid,
        op,
        acked_xid: 0,
        cred: Cred::default(),
        replay: None,
    }
}

/// Lets a connection buffer 16 MiB of unwritten replies before its requests wait (the default
/// is 1 MiB, which the kernel's send buffer swallows whole): only then does a client that does
/// not read leave a writer blocked for shutdown to deal with.
const STALL: &str = "--output-high-water=16777216";

/// Fills a directory with 4,000 long names, then opens a connection that asks for ~15 MB of
/// READDIR pages (under the 16 MiB high-water mark of `STALL`, far over what a 64 KiB receive
/// buffer and the server's send buffer hold) and never reads. Returns that connection, to keep
/// it open, once the server has answered every request on it.
fn stalled_reader(server: &common::Server) -> TcpStream {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = rt.block_on(async {
        let client = server.client().await;
        let dir = client.mkdir(ROOT, "big", 0o755).await.unwrap().ino;
        let mut creates = tokio::task::JoinSet::new();
        for i in 0..4000 {
            let client = client.clone();
            creates.spawn(async move {
                let name = format!("{i:05}-a-name-long-enough-to-fill-pages");
                client.create(dir, &name, 0o644).await.unwrap();
            });
        }
        while let Some(done) = creates.join_next().await {
            done.unwrap();
        }
        dir
    });
    // A small receive buffer, set before connecting: it turns off the kernel's autotuning
    // (tcp_rmem may let a buffer grow to 32 MiB here, enough to swallow every reply).
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    let mut out = BytesMut::new();
    encode_frame(
        &request(
            1,
            Op::Connect {
                version: PROTOCOL_VERSION,
                client: 0x5eed,
                atime: mds_proto::Atime::default(),
                ack: mds_proto::AckAsked::default(),
            },
        ),
        &mut out,
    );
    for xid in 2..2 + READDIRS {
        let op = Op::Readdir {
            ino: dir,
            cursor: None,
            limit: 1024,
        };
        encode_frame(&request(xid, op), &mut out);
    }
    s.write_all(&out).unwrap();
    // Until the server has answered every READDIR (their replies queued behind the full
    // socket), a SIGTERM would find nothing owed to this client: shutdown stops reading, and
    // would end without a writer to wait for.
    let answered = "mds_requests_total{op=\"readdir\",result=\"ok\"}";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while mds_testkit::scrape_metric(server.metrics, answered) != Some(READDIRS as f64) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not answer {READDIRS} READDIRs: {}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    s
}

/// READDIRs the stalled reader sends (~15 MB of replies).
const READDIRS: u64 = 480;

#[test]
fn sigterm_ends_within_the_grace_period_while_a_client_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &["--shutdown-grace", "1s", STALL]);
    let _stalled = stalled_reader(&server);
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_second_sigterm_does_not_wait_for_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    // A grace period far longer than the test may take: only the second signal can end it.
    let server = common::start(dir.path(), &["--shutdown-grace", "1h", STALL]);
    let _stalled = stalled_reader(&server);
    server.signal(libc::SIGTERM);
    // Signals of one kind do not queue: send the second once the first has been taken.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !server.log_text().contains("shutting down") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    server.signal(libc::SIGTERM);
    let log_before_exit = server.log.clone();
    let status = server.wait();
    assert!(status.success(), "{status:?}");
    let log = log_before_exit.lock().unwrap().join("\n");
    assert!(log.contains("asked again"), "{log}");
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}
