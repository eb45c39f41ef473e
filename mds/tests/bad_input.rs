//! Bad input closes only the connection that sent it — with an EPROTO reply where one can be
//! framed — and is counted; other connections and the journal go on undisturbed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use common::Server;
use mds::client::ROOT;
use mds::protocol::{self, Errno, Op, PROTOCOL_VERSION, Reply, Request, encode_frame};

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

fn connect_frame() -> Vec<u8> {
    frame(&Request {
        xid: 1,
        op: Op::Connect {
            version: PROTOCOL_VERSION,
            client: 77,
        },
    })
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
        out.push(protocol::decode(&rest[4..4 + len]).unwrap());
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
    let mut f = frame(&Request {
        xid: 2,
        op: Op::Ping,
    });
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
    s.write_all(&frame(&Request {
        xid: 5,
        op: Op::Ping,
    }))
    .unwrap();
    let replies = replies_until_close(&mut s);
    assert_eq!(
        (replies.len(), last_error(&replies)),
        (1, Some(Errno::EPROTO))
    );
    assert_eq!(replies[0].xid, 5);
    let mut s = raw(&server);
    s.write_all(&frame(&Request {
        xid: 1,
        op: Op::Connect {
            version: 999,
            client: 1,
        },
    }))
    .unwrap();
    assert_eq!(
        last_error(&replies_until_close(&mut s)),
        Some(Errno::EPROTO)
    );

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
    assert!(
        server
            .log_text()
            .contains("closing connection: oversized frame")
    );
}

async fn common_metrics(server: &Server) -> String {
    let addr = server.metrics;
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap()
}
