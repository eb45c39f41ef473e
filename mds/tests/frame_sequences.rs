//! A running server's request handling under arbitrary frame sequences (the stable-toolchain
//! counterpart of a fuzz target that needs the whole server, RocksDB included): each case
//! opens a connection and sends a random mix of well-formed requests over a small namespace
//! (small inode numbers and names, so they hit real objects), requests with random fields,
//! replays, second CONNECTs, and garbage frames, with or without CONNECT first. Whatever the
//! server answers, it must stay up, keep serving a healthy client, keep its namespace
//! consistent (`mds fsck` clean after the run) and never panic (a panic aborts the process).

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use mds_client::ROOT;
use mds_proto::{Cred, Op, PROTOCOL_VERSION, Replay, Request, SetAttr, encode_frame};
use proptest::prelude::*;

/// One frame of a case.
#[derive(Clone, Debug)]
enum Frame {
    Request(Request),
    /// Bytes that are a frame's payload but need not decode.
    Garbage(Vec<u8>),
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec!["a", "b", "c", "d", "", ".", "..", "a/b"])
            .prop_map(str::to_owned),
        proptest::string::string_regex("[a-z\u{e9}]{1,6}").unwrap(),
        Just("x".repeat(300)),
    ]
}

/// Inode numbers that exist in a small namespace, and some that do not.
fn ino() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..12, any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (ino(), name(), any::<u32>()).prop_map(|(parent, name, mode)| Op::Mkdir {
            parent,
            name,
            mode
        }),
        (ino(), name(), any::<u32>()).prop_map(|(parent, name, mode)| Op::Create {
            parent,
            name,
            mode
        }),
        (ino(), name()).prop_map(|(parent, name)| Op::Lookup { parent, name }),
        ino().prop_map(|ino| Op::Getattr { ino }),
        (
            ino(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            any::<Option<i64>>()
        )
            .prop_map(|(ino, mode, size, mtime_ns)| Op::Setattr {
                ino,
                attr: SetAttr {
                    mode,
                    uid: None,
                    gid: None,
                    size,
                    mtime_ns,
                },
            }),
        (ino(), proptest::option::of(name()), any::<u32>())
            .prop_map(|(ino, cursor, limit)| { Op::Readdir { ino, cursor, limit } }),
        (ino(), name()).prop_map(|(parent, name)| Op::Unlink { parent, name }),
        (ino(), name()).prop_map(|(parent, name)| Op::Rmdir { parent, name }),
        (ino(), name(), ino(), name()).prop_map(|(sp, sn, dp, dn)| Op::Rename {
            src_parent: sp,
            src_name: sn,
            dst_parent: dp,
            dst_name: dn,
        }),
        Just(Op::Statfs),
        Just(Op::Sync),
        Just(Op::Ping),
    ]
}

/// Mostly the namespace's operations; now and then a second CONNECT, which ends the
/// connection.
fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => op(),
        1 => any::<u64>().prop_map(|client| Op::Connect {
            version: PROTOCOL_VERSION,
            client
        }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        40 => (any::<u64>(), any_op(), any::<u64>(), proptest::option::of((any::<u64>(), any::<u64>())), proptest::collection::vec(any::<u32>(), 0..3))
            .prop_map(|(xid, op, acked_xid, replay, groups)| Frame::Request(Request {
                xid: xid % 64 + 1,
                op,
                acked_xid: acked_xid % 64,
                cred: Cred { uid: 1000, gid: 1000, groups },
                replay: replay.map(|(transno, ino)| Replay { transno, ino }),
            })),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Frame::Garbage),
    ]
}

/// A client identity no other case uses.
fn identity() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0xfa22_0000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Sends the case on a fresh connection and reads until the server closes it or goes quiet.
fn run_case(addr: std::net::SocketAddr, connect: bool, frames: &[Frame]) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = BytesMut::new();
    if connect {
        let hello = Request {
            xid: 1000,
            op: Op::Connect {
                version: PROTOCOL_VERSION,
                client: identity(),
            },
            acked_xid: 0,
            cred: Cred::default(),
            replay: None,
        };
        encode_frame(&hello, &mut buf);
    }
    for f in frames {
        match f {
            Frame::Request(r) => encode_frame(r, &mut buf),
            Frame::Garbage(bytes) => {
                buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
                buf.extend_from_slice(bytes);
            }
        }
    }
    // The server may close early (bad input): a failed write is one of the outcomes.
    let _ = s.write_all(&buf);
    let mut sink = [0u8; 64 << 10];
    while let Ok(n) = s.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
}

#[test]
fn arbitrary_frame_sequences_leave_the_server_serving_and_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    // Commits quick, so mutations of one case are durable before the next.
    config.commit_interval = Duration::ZERO;
    let server = common::InProcess::start(config);
    let addr = server.addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let healthy = rt.block_on(server.client());
    // Something for the cases' small inode numbers to hit.
    rt.block_on(async {
        let d = healthy.mkdir(ROOT, "a", 0o755).await.unwrap();
        healthy.create(d.ino, "b", 0o644).await.unwrap();
        healthy.mkdir(ROOT, "c", 0o755).await.unwrap();
    });
    let config = ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(connect in proptest::bool::weighted(0.9), frames in proptest::collection::vec(frame(), 1..40))| {
        run_case(addr, connect, &frames);
        // Still serving, and serving others.
        rt.block_on(async {
            healthy.ping().await.unwrap();
            healthy.getattr(ROOT).await.unwrap();
        });
    });
    drop(healthy);
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}
