//! Exactly-once for mutations whose reply was lost: a resend of an executed request is
//! answered from its resend record — on a new connection, after SIGKILL and a restart, with
//! early replies too — never executed twice; the record goes once the client's watermark says
//! it has the reply, and with its session when the client stays away past `--session-expiry`.
//! And EIO means "outcome unknown": after a failed sync, the resend after a restart says what
//! became of the request.
//! The requests are written by hand on raw sockets, so the test decides exactly which replies
//! "were lost" and which watermark each request carries.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::InProcess;
use mds_client::ROOT;
use mds_proto::{
    self as protocol, Body, Cred, Errno, Op, PROTOCOL_VERSION, Reply, Request, encode_frame,
};

/// One connection of client `id`, speaking the protocol by hand.
struct Raw {
    stream: TcpStream,
    /// The server partition serving this connection.
    partition: u32,
}

/// The session secret the server issued each identity, proved when it reconnects as it. One
/// map for every test of this binary, which run at once against servers of their own: each
/// test has an identity of its own (two sharing one proved each other's secrets, EAUTH).
fn secrets() -> &'static std::sync::Mutex<std::collections::HashMap<u64, [u8; 32]>> {
    static SECRETS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<u64, [u8; 32]>>,
    > = std::sync::OnceLock::new();
    SECRETS.get_or_init(Default::default)
}

impl Raw {
    /// Connects and sends CONNECT as client `id` (xid 0 would mean a notice: CONNECTs here
    /// use xids from 1000 up, apart from the test's own), proving the session secret the
    /// server issued `id` when it asks for it, as the client library does.
    fn connect(addr: SocketAddr, id: u64) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut raw = Raw {
            stream,
            partition: 0,
        };
        let reply = raw.call(
            1000,
            0,
            Op::Connect {
                version: PROTOCOL_VERSION,
                client: id,
                atime: mds_proto::Atime::default(),
                ack: mds_proto::AckAsked::default(),
            },
        );
        let reply = match reply.result {
            Ok(Body::Challenge {
                nonce,
                session: true,
                ..
            }) => {
                let secret = secrets().lock().unwrap()[&id];
                let proof = mds_client::auth::SessionSecret::from_bytes(secret).proof(&nonce, id);
                raw.call(
                    1001,
                    0,
                    Op::Authenticate {
                        proof: None,
                        session: Some(proof),
                    },
                )
            }
            _ => reply,
        };
        match reply.result {
            Ok(Body::Connected {
                partition,
                session_secret,
                ..
            }) => {
                raw.partition = partition;
                if let Some(secret) = session_secret {
                    secrets().lock().unwrap().insert(id, secret);
                }
            }
            other => panic!("{other:?}"),
        }
        raw
    }

    /// Sends one request with watermark `acked_xid` and reads replies until its own (commit
    /// notices of early replies are skipped).
    fn call(&mut self, xid: u64, acked_xid: u64, op: Op) -> Reply {
        self.send(xid, acked_xid, op);
        self.reply_to(xid)
    }

    /// Sends one request with watermark `acked_xid`, reading nothing.
    fn send(&mut self, xid: u64, acked_xid: u64, op: Op) {
        let mut buf = BytesMut::new();
        let request = Request {
            xid,
            op,
            acked_xid,
            cred: Cred::default(),
            replay: None,
        };
        encode_frame(&request, &mut buf);
        self.stream.write_all(&buf).unwrap();
    }

    /// Reads replies until the one to `xid` (commit notices of early replies are skipped).
    fn reply_to(&mut self, xid: u64) -> Reply {
        loop {
            let mut len = [0u8; 4];
            self.stream.read_exact(&mut len).unwrap();
            let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
            self.stream.read_exact(&mut payload).unwrap();
            let reply: Reply = protocol::decode(&payload).unwrap();
            if reply.xid == xid {
                return reply;
            }
            assert_eq!(reply.result, Ok(Body::Notice), "{reply:?}");
        }
    }
}

fn create(name: &str) -> Op {
    Op::Create {
        parent: ROOT,
        name: name.into(),
        mode: 0o644,
    }
}

fn mkdir(name: &str) -> Op {
    Op::Mkdir {
        parent: ROOT,
        name: name.into(),
        mode: 0o755,
    }
}

fn statfs(raw: &mut Raw, xid: u64, acked_xid: u64) -> mds_proto::StatFs {
    match raw.call(xid, acked_xid, Op::Statfs).result {
        Ok(Body::StatFs(s)) => *s,
        other => panic!("{other:?}"),
    }
}

/// The reply a resend gets is the original's: same transno, same result.
fn same(original: &Reply, resent: &Reply) {
    assert_eq!(
        resent.transno, original.transno,
        "{resent:?} vs {original:?}"
    );
    assert_eq!(resent.result, original.result);
}

#[test]
fn a_resend_whose_reply_was_lost_is_answered_from_its_record_also_after_sigkill() {
    const ID: u64 = 0x5e5e_0001;
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    // The client sends a create and a mkdir and "loses" both replies with its connection:
    // its watermark stays 0 on everything it sends below.
    let mut first = Raw::connect(server.addr, ID);
    let created = first.call(2, 0, create("f"));
    let made = first.call(3, 0, mkdir("d"));
    assert!(matches!(created.result, Ok(Body::Attr(_))), "{created:?}");
    drop(first);

    let mut second = Raw::connect(server.addr, ID);
    same(&created, &second.call(2, 0, create("f")));
    same(&made, &second.call(3, 0, mkdir("d")));
    let before = statfs(&mut second, 4, 0);
    assert_eq!((before.files, before.directories), (1, 2), "{before:?}");
    assert_eq!(before.last_transno, made.transno, "executed once each");
    let answered = mds_testkit::scrape_metric(server.metrics, "mds_resent_answered_total");
    assert_eq!(answered, Some(2.0));
    drop(second);

    // The records are journaled with the mutations: a crash does not make a resend run again.
    server.kill();
    let server = common::start(dir.path(), &[]);
    assert!(
        server.log_text().contains("resend records restored"),
        "{}",
        server.log_text()
    );
    let mut third = Raw::connect(server.addr, ID);
    same(&created, &third.call(2, 0, create("f")));
    same(&made, &third.call(3, 0, mkdir("d")));
    let after = statfs(&mut third, 5, 0);
    assert_eq!(after.last_transno, before.last_transno);
    assert_eq!(after.files, 1);

    // Once the client says it has replies up to xid 5, their records go: the same xid sent
    // again is a new request (a client that does this breaks its own watermark's promise).
    statfs(&mut third, 6, 5);
    let again = third.call(2, 5, create("f"));
    assert_eq!(again.result, Err(Errno::EEXIST));
    // A mutation that failed changed nothing and has no record: resent, it runs again, and
    // may succeed now.
    assert_eq!(third.call(7, 5, create("f")).result, Err(Errno::EEXIST));
    let unlink = Op::Unlink {
        parent: ROOT,
        name: "f".into(),
    };
    assert_eq!(third.call(8, 5, unlink).result, Ok(Body::Done));
    assert!(matches!(
        third.call(7, 5, create("f")).result,
        Ok(Body::Attr(_))
    ));
    drop(third);
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// A client that sends another operation under the xid of a request the server holds a record
/// of is not resending it: it is not answered from that record (a MKDIR told a CREATE's
/// outcome would believe a directory exists), nothing executes, its connection closes and
/// the count says why; the real resend is still answered from the record.
#[test]
fn another_operation_under_a_recorded_xid_is_refused_not_answered_from_the_record() {
    const ID: u64 = 0x5e5e_0006;
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let mut first = Raw::connect(server.addr, ID);
    let created = first.call(2, 0, create("f"));
    assert!(matches!(created.result, Ok(Body::Attr(_))), "{created:?}");
    let reused = first.call(2, 0, mkdir("d"));
    assert_eq!(reused.result, Err(Errno::EPROTO));
    let mut byte = [0u8; 1];
    assert_eq!(
        first.stream.read(&mut byte).unwrap(),
        0,
        "the connection is closed"
    );
    assert_eq!(
        mds_testkit::scrape_metric(
            server.metrics,
            "mds_protocol_errors_total{kind=\"xid_reused\"}"
        ),
        Some(1.0)
    );
    let mut second = Raw::connect(server.addr, ID);
    same(&created, &second.call(2, 0, create("f")));
    let after = statfs(&mut second, 3, 0);
    assert_eq!(
        (after.files, after.directories, after.last_transno),
        (1, 1, created.transno),
        "the MKDIR did not execute"
    );
    drop(second);
    assert!(server.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_early_replies_a_resend_gets_the_same_unsafe_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.ack = mds::config::Ack::Early;
    // Nothing commits by itself during the test: the answers stay unsafe.
    config.keys.commit_interval = Duration::from_secs(30);
    let server = InProcess::start(config);
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        const ID: u64 = 0x5e5e_0002;
        let mut first = Raw::connect(addr, ID);
        // The client's first mutation waits for the commit that makes the client known.
        let known = first.call(2, 0, mkdir("warm"));
        let created = first.call(3, 2, create("g"));
        assert!(
            created.transno > created.last_committed,
            "answered before its commit: {created:?}"
        );
        drop(first);
        let mut second = Raw::connect(addr, ID);
        let resent = second.call(3, 2, create("g"));
        same(&created, &resent);
        let fs = statfs(&mut second, 4, 2);
        assert_eq!(fs.last_transno, created.transno, "not executed twice");
        assert!(known.transno < created.transno);
    })
    .await
    .unwrap();
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_away_past_its_expiry_is_forgotten_with_its_records() {
    const ID: u64 = 0x5e5e_0003;
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.session_expiry = Duration::from_millis(200);
    let server = InProcess::start(config);
    let (addr, metrics) = (server.addr, server.metrics);
    tokio::task::spawn_blocking(move || {
        let mut first = Raw::connect(addr, ID);
        assert!(first.call(2, 0, create("h")).result.is_ok());
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(20);
        while mds_testkit::scrape_metric(metrics, "mds_sessions_expired_total") < Some(1.0) {
            assert!(Instant::now() < deadline, "the session never expired");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Too late: the record is gone, and the resend is a new request.
        let mut back = Raw::connect(addr, ID);
        assert_eq!(back.call(2, 0, create("h")).result, Err(Errno::EEXIST));
    })
    .await
    .unwrap();
    server.stop().unwrap();
    // The journal dropped the client's slots too (point deletes, no range tombstone).
    let (journal, _) = journal::Journal::open_read_only(dir.path()).unwrap();
    let mut slots = Vec::new();
    journal
        .scan_resend(|client, slot, _| {
            slots.push((client, slot));
            Ok(())
        })
        .unwrap();
    assert!(
        slots.iter().all(|&(client, _)| client != ID),
        "slots of the expired client left: {slots:?}"
    );
}

/// A sync that fails leaves the commit's fate unknown: the client is told EIO. After the
/// restart the resend of that request resolves it — here the batch had reached the disk, so
/// the resend is answered from the record written with it, not executed again.
#[test]
fn after_a_failed_sync_the_resend_tells_the_outcome() {
    const ID: u64 = 0x5e5e_0004;
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--inject-journal-failure-after",
        "1",
        "--inject-journal-failure",
        "sync",
    ];
    let server = common::start(dir.path(), &flags);
    let mut raw = Raw::connect(server.addr, ID);
    assert!(raw.call(2, 0, create("durable")).result.is_ok());
    let unknown = raw.call(3, 2, create("unknown"));
    assert_eq!(unknown.result, Err(Errno::EIO), "{unknown:?}");
    drop(raw);
    assert!(!server.stop().success(), "a failed journal exits non-zero");

    let server = common::start(dir.path(), &[]);
    let mut raw = Raw::connect(server.addr, ID);
    let resolved = raw.call(3, 2, create("unknown"));
    assert!(
        matches!(resolved.result, Ok(Body::Attr(_))),
        "answered from its record: {resolved:?}"
    );
    assert!(resolved.transno > 0 && resolved.transno <= resolved.last_committed);
    assert_eq!(
        statfs(&mut raw, 4, 3).last_transno,
        resolved.transno,
        "not run again"
    );
    drop(raw);
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// A client reconnects while a mutation waits for its commit, lands on another partition and
/// resends it there: the resend joins the original, whose reply waits in the first
/// partition's queue and leaves through the new connection. A stop must answer it, and at
/// once, although the first partition has no connection left by then (no partner drains for
/// it here).
#[test]
fn a_resend_joined_on_another_partition_is_answered_at_shutdown() {
    const ID: u64 = 0x5e5e_0005;
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.partitions = 3;
    config.keys.partner_drain_after = Duration::ZERO;
    config.keys.commit_interval = Duration::from_secs(60);
    // Longer than the replies' read timeout: a reply stuck until the grace cut fails the read.
    config.keys.shutdown_grace = Duration::from_secs(120);
    let server = InProcess::start(config);
    let mut first = Raw::connect(server.addr, ID);
    first.send(2, 0, create("f"));
    let mut observer = Raw::connect(server.addr, ID + 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while statfs(&mut observer, 2, 0).last_transno < 1 {
        assert!(Instant::now() < deadline, "the create never executed");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(observer);
    // The kernel spreads connections over the partitions' listeners: try until one lands
    // elsewhere (each try replaces the one before).
    let mut second = (0..200)
        .map(|_| Raw::connect(server.addr, ID))
        .find(|r| r.partition != first.partition)
        .expect("a connection on another partition");
    second.send(2, 0, create("f"));
    server.request_stop();
    let reply = second.reply_to(2);
    assert!(matches!(reply.result, Ok(Body::Attr(_))), "{reply:?}");
    assert!(
        reply.last_committed >= reply.transno,
        "answered after its commit"
    );
    drop((first, second));
    server.join().unwrap();
}
