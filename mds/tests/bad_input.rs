//! Bad input closes only the connection that sent it — with an EPROTO reply where one can be
//! framed — and is counted; other connections and the journal go on undisturbed. Good input
//! cut anywhere into segments is served whole.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use common::Server;
use mds_client::ROOT;
use mds_proto::{
    self as protocol, Body, Cred, Errno, MAX_GROUPS, Op, PROTOCOL_VERSION, Replay, Reply, Request,
    encode_frame,
};

fn raw(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn frame(req: &Request) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_frame(req, &mut buf);
    buf.to_vec()
}

fn req(xid: u64, op: Op) -> Request {
    Request {
        xid,
        op,
        acked_xid: 0,
        cred: Cred::default(),
        replay: None,
    }
}

/// A CONNECT with an identity no other connection of this test uses.
fn connect_frame() -> Vec<u8> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    frame(&req(
        1,
        Op::Connect {
            version: PROTOCOL_VERSION,
            client: 1000 + NEXT.fetch_add(1, Ordering::Relaxed),
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default(),
        },
    ))
}

/// Reads exactly one reply.
fn one_reply(s: &mut TcpStream) -> Reply {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut payload).unwrap();
    protocol::decode(&payload).unwrap()
}

/// Reads replies until the server closes the connection.
fn replies_until_close(s: &mut TcpStream) -> Vec<Reply> {
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes)
        .expect("the server closes the connection");
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let payload = &rest[4..4 + len];
        // A client of another version is refused in the layout every version reads.
        out.push(protocol::decode(payload).unwrap_or_else(|_| {
            let (xid, errno) = protocol::decode_version_refusal(payload).expect("a reply");
            Reply::new(xid, 0, 0, Err(errno))
        }));
        rest = &rest[4 + len..];
    }
    out
}

fn last_error(replies: &[Reply]) -> Option<Errno> {
    replies.last().and_then(|r| r.result.clone().err())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_their_connection_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let good = server.client().await;
    good.mkdir(ROOT, "before", 0o755).await.unwrap();

    // Oversized length prefix.
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    s.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    let replies = replies_until_close(&mut s);
    assert_eq!(last_error(&replies), Some(Errno::EPROTO), "{replies:?}");

    // Garbage payload (unknown opcode 200).
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    s.write_all(&[0, 0, 0, 3, 9, 200, 1]).unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );

    // Trailing bytes after a valid request.
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    let mut f = frame(&req(2, Op::Ping));
    f.push(0);
    let len = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&len.to_be_bytes());
    s.write_all(&f).unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );

    // A request before CONNECT, and a CONNECT with another protocol version.
    let mut s = raw(&server);
    s.write_all(&frame(&req(5, Op::Ping))).unwrap();
    let replies = replies_until_close(&mut s);
    assert_eq!(
        (replies.len(), last_error(&replies)),
        (1, Some(Errno::EPROTO))
    );
    assert_eq!(replies[0].xid, 5);
    let mut s = raw(&server);
    s.write_all(&frame(&req(
        1,
        Op::Connect {
            version: 999,
            client: 1,
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default(),
        },
    )))
    .unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );

    // A client of protocol version 1 (xid 3, opcode 0, version 1, identity 0x2a) is told
    // EPROTO in a reply it can decode, with its own xid, and closed.
    let mut s = raw(&server);
    s.write_all(&[0, 0, 0, 4, 3, 0, 1, 0x2a]).unwrap();
    let replies = replies_until_close(&mut s);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (replies[0].xid, &replies[0].result),
        (3, &Err(Errno::EPROTO))
    );

    // Identity 0, a second CONNECT on one connection, too many groups: refused and closed.
    let mut s = raw(&server);
    s.write_all(&frame(&req(
        1,
        Op::Connect {
            version: PROTOCOL_VERSION,
            client: 0,
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default(),
        },
    )))
    .unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    s.write_all(&connect_frame()).unwrap();
    let replies = replies_until_close(&mut s);
    assert!(matches!(replies[0].result, Ok(Body::Connected { .. })));
    assert_eq!(
        (replies.len(), last_error(&replies)),
        (2, Some(Errno::EPROTO))
    );
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    let mut crowded = req(2, Op::Ping);
    crowded.cred.groups = vec![7; MAX_GROUPS + 1];
    s.write_all(&frame(&crowded)).unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );

    // A replayed request when nothing was answered early: EINVAL, and the connection stays.
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    let mut replayed = req(
        2,
        Op::Create {
            parent: ROOT,
            name: "replayed".into(),
            mode: 0o644,
        },
    );
    replayed.replay = Some(Replay {
        xid: 1,
        transno: 1,
        ino: 99,
        ticket: 1,
    });
    s.write_all(&frame(&replayed)).unwrap();
    s.write_all(&frame(&req(3, Op::Ping))).unwrap();
    assert!(matches!(
        one_reply(&mut s).result,
        Ok(Body::Connected { .. })
    ));
    assert_eq!(one_reply(&mut s).result, Err(Errno::EINVAL));
    assert_eq!(one_reply(&mut s).result, Ok(Body::Pong));
    drop(s);

    // A truncated frame and a hang-up: nothing to answer, nothing disturbed.
    let mut s = raw(&server);
    s.write_all(&connect_frame()).unwrap();
    s.write_all(&[0, 0, 0, 50, 1, 2, 3]).unwrap();
    drop(s);

    // A valid request after junk on one connection still works on another, mutations too.
    good.mkdir(ROOT, "after", 0o755).await.unwrap();
    let names = common::names(&good, ROOT).await;
    assert_eq!(names, vec!["after", "before"]);
    let fresh = server.client().await;
    fresh.ping().await.unwrap();

    // Counted.
    let metrics = common_metrics(&server).await;
    for kind in ["oversized", "malformed", "handshake"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("mds_protocol_errors_total")
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .unwrap_or_else(|| panic!("no {kind} counter"));
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= 1.0, "{line}");
    }
    let log = server.log_text();
    assert!(log.contains("closing connection: oversized frame"), "{log}");
    assert!(
        log.contains(&format!(
            "client speaks protocol version 1; this server speaks {PROTOCOL_VERSION}"
        )),
        "{log}"
    );
    assert!(log.contains("closing connection: second CONNECT"), "{log}");
}

async fn common_metrics(server: &Server) -> String {
    let addr = server.metrics;
    tokio::task::spawn_blocking(move || mds_testkit::http(addr, "GET", "/metrics").unwrap().2)
        .await
        .unwrap()
}

/// Frames that arrive cut anywhere — a few bytes to a segment, the boundaries of frames and
/// of reads nowhere near each other — are each executed whole, in order, and a frame longer
/// than the server's read chunk too: the server reads frames where they lie in its buffer,
/// and this is that buffer's worst case.
#[test]
fn frames_cut_anywhere_are_served_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let value: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let mut stream = connect_frame();
    stream.extend(frame(&req(2, Op::Ping)));
    stream.extend(frame(&req(
        3,
        Op::Setxattr {
            ino: ROOT,
            name: "user.dribbled".into(),
            value: mds_proto::XattrValue(value.clone()),
            how: mds_proto::XattrSet::Either,
        },
    )));
    stream.extend(frame(&req(
        4,
        Op::Getxattr {
            ino: ROOT,
            name: "user.dribbled".into(),
        },
    )));
    stream.extend(frame(&req(5, Op::Ping)));
    let mut s = raw(&server);
    s.set_nodelay(true).unwrap();
    for (n, piece) in stream.chunks(7).enumerate() {
        // Pieces of 1 to 7 bytes, with a pause now and then so that reads end mid-frame.
        let cut = 1 + n % 7;
        s.write_all(&piece[..cut.min(piece.len())]).unwrap();
        s.write_all(&piece[cut.min(piece.len())..]).unwrap();
        if n % 500 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // A mutation's reply waits for its commit: replies come in any order.
    let mut replies: Vec<Reply> = (0..5).map(|_| one_reply(&mut s)).collect();
    replies.sort_by_key(|r| r.xid);
    let xids: Vec<u64> = replies.iter().map(|r| r.xid).collect();
    assert_eq!(xids, [1, 2, 3, 4, 5]);
    assert_eq!(replies[1].result, Ok(Body::Pong));
    assert_eq!(replies[2].result, Ok(Body::Done), "{:?}", replies[2].result);
    assert_eq!(
        replies[3].result,
        Ok(Body::Xattr(mds_proto::XattrValue(value)))
    );
    assert_eq!(replies[4].result, Ok(Body::Pong));
}
