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
use mds_proto::{
    Cred, Kind, Op, PROTOCOL_VERSION, RenameHow, Replay, Request, SetAttr, SetTime, Target,
    XattrSet, XattrValue, encode_frame,
};
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
            .prop_map(|(ino, mode, size, mtime)| Op::Setattr {
                ino,
                attr: SetAttr {
                    mode,
                    uid: None,
                    gid: None,
                    size,
                    atime: None,
                    mtime: mtime.map(SetTime::At),
                    handle: None,
                },
            }),
        (ino(), ino(), name()).prop_map(|(ino, parent, name)| Op::Link { ino, parent, name }),
        (ino(), name(), name()).prop_map(|(parent, name, t)| Op::Symlink {
            parent,
            name,
            target: Target(t.into_bytes()),
        }),
        ino().prop_map(|ino| Op::Readlink { ino }),
        (ino(), name(), 0..7usize, any::<u64>()).prop_map(|(parent, name, k, rdev)| {
            Op::Mknod {
                parent,
                name,
                kind: Kind::ALL[k],
                mode: 0o644,
                rdev,
            }
        }),
        (ino(), name(), any::<Vec<u8>>()).prop_map(|(ino, name, v)| Op::Setxattr {
            ino,
            name: format!("user.{name}"),
            value: XattrValue(v),
            how: XattrSet::Either,
        }),
        (ino(), name()).prop_map(|(ino, name)| Op::Getxattr {
            ino,
            name: format!("user.{name}")
        }),
        ino().prop_map(|ino| Op::Listxattr { ino }),
        (ino(), name()).prop_map(|(ino, name)| Op::Removexattr {
            ino,
            name: format!("user.{name}")
        }),
        (ino(), proptest::option::of(name()), any::<u32>())
            .prop_map(|(ino, cursor, limit)| { Op::Readdir { ino, cursor, limit } }),
        (ino(), name()).prop_map(|(parent, name)| Op::Unlink { parent, name }),
        (ino(), name()).prop_map(|(parent, name)| Op::Rmdir { parent, name }),
        (ino(), name(), ino(), name(), any::<bool>()).prop_map(|(sp, sn, dp, dn, x)| {
            Op::Rename {
                src_parent: sp,
                src_name: sn,
                dst_parent: dp,
                dst_name: dn,
                how: if x {
                    RenameHow::Exchange
                } else {
                    RenameHow::Replace
                },
            }
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
            client,
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default(),
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
                replay: replay.map(|(transno, ino)| Replay {
                    xid: xid % 64 + 1,
                    transno,
                    ino,
                    ticket: transno ^ ino,
                }),
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
                atime: mds_proto::Atime::default(),
                ack: mds_proto::AckAsked::default(),
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
    let mut sink = vec![0u8; 64 << 10];
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
    config.keys.commit_interval = Duration::ZERO;
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

/// Who sends a case's frames during the recovery window.
#[derive(Clone, Copy, Debug)]
enum Sender {
    /// Client B, a known client with its own session secret: it can harm only itself.
    KnownB,
    /// An identity nobody knew.
    Stranger,
    /// A's identity without A's secret: refused at CONNECT.
    ImpostorA,
}

/// A frame an attacker sends during the window: mostly replays, built from real replies'
/// numbers, nearby ones and arbitrary ones, with real or forged tickets.
#[derive(Clone, Debug)]
struct Attack {
    sender: Sender,
    /// Which real reply's numbers to start from (a1, a2, b1, b2).
    base: usize,
    transno: Choice,
    ino: Choice,
    ticket: Choice,
    xid: Choice,
    /// Not a replay: any request (it ends B's replaying, if B sends it).
    plain: Option<Op>,
}

/// A number: the real one, one nearby, or anything.
#[derive(Clone, Copy, Debug)]
enum Choice {
    Real,
    Near(i8),
    Any(u64),
}

impl Choice {
    fn pick(self, real: u64) -> u64 {
        match self {
            Choice::Real => real,
            Choice::Near(d) => real.wrapping_add_signed(i64::from(d)),
            Choice::Any(n) => n,
        }
    }
}

fn choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        3 => Just(Choice::Real),
        2 => any::<i8>().prop_map(|d| Choice::Near(d % 4)),
        1 => any::<u64>().prop_map(Choice::Any),
        1 => Just(Choice::Any(u64::MAX)),
        1 => Just(Choice::Any(u64::MAX - 1)),
    ]
}

fn attack() -> impl Strategy<Value = Attack> {
    (
        prop_oneof![
            3 => Just(Sender::KnownB),
            1 => Just(Sender::Stranger),
            1 => Just(Sender::ImpostorA)
        ],
        0usize..4,
        (choice(), choice(), choice(), choice()),
        proptest::option::weighted(0.15, op()),
    )
        .prop_map(
            |(sender, base, (transno, ino, ticket, xid), plain)| Attack {
                sender,
                base,
                transno,
                ino,
                ticket,
                xid,
                plain,
            },
        )
}

fn reply_ino(reply: &mds_proto::Reply) -> u64 {
    match &reply.result {
        Ok(mds_proto::Body::Attr(a)) => a.ino,
        other => panic!("not an Attr: {other:?}"),
    }
}

/// Recovery under arbitrary replays: two known clients hold early (unsafe) creates when the
/// server is killed; during the recovery window that follows, a known client, a stranger and
/// an impostor of the other client send replays made of real and forged numbers and tickets,
/// and other requests. Whatever they send, the client that sent nothing loses nothing it was
/// answered, every create of it is there with the inode number it was told, the window
/// closes, and the store restarts fsck-clean.
#[test]
fn arbitrary_replays_in_a_recovery_window_take_nothing_from_an_honest_client() {
    use common::raw::{Raw, request};
    use mds_client::{Client, Session};
    use std::sync::Arc;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let flags = [
        "--ack",
        "early",
        "--commit-interval",
        "60s",
        "--recovery-window",
        "3s",
    ];
    let config = ProptestConfig {
        cases: 6,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(attacks in proptest::collection::vec(attack(), 1..24))| {
        let dir = tempfile::tempdir().unwrap();
        let server = common::start(dir.path(), &flags);
        let (sa, sb) = (Arc::new(Session::new()), Arc::new(Session::new()));
        let told = rt.block_on(async {
            let a = Client::connect_session(server.addr, sa.clone()).await.unwrap();
            let b = Client::connect_session(server.addr, sb.clone()).await.unwrap();
            a.create(ROOT, "a0", 0o644).await.unwrap();
            b.create(ROOT, "b0", 0o644).await.unwrap();
            let mut told = Vec::new();
            for (c, name) in [(&a, "a1"), (&a, "a2"), (&b, "b1"), (&b, "b2")] {
                let op = Op::Create { parent: ROOT, name: name.into(), mode: 0o644 };
                told.push(c.call_reply(op).await.unwrap());
            }
            told
        });
        server.kill();
        let server = common::start(dir.path(), &flags);
        let stranger = Session::new();
        let mut conns: [Option<Raw>; 3] = [None, None, None];
        for a in &attacks {
            let slot = a.sender as usize;
            if conns[slot].is_none() {
                let mut raw = Raw::open(server.addr);
                raw.stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                let session: &Session = match a.sender {
                    Sender::KnownB => &sb,
                    Sender::Stranger => &stranger,
                    // A's identity, no secret: a session of its own whose id is A's.
                    Sender::ImpostorA => &Session::new(),
                };
                let connected = if let Sender::ImpostorA = a.sender {
                    let connect = Op::Connect { version: PROTOCOL_VERSION, client: sa.id(), atime: mds_proto::Atime::default(), ack: mds_proto::AckAsked::default() };
                    raw.send(&request(1, connect, None));
                    raw.reply()
                } else {
                    Some(raw.handshake(session, None))
                };
                if !matches!(connected.map(|r| r.result), Some(Ok(mds_proto::Body::Connected { .. }))) {
                    // Refused (or challenged, for the impostor): nothing more on it.
                    continue;
                }
                conns[slot] = Some(raw);
            }
            let raw = conns[slot].as_mut().unwrap();
            let base = &told[a.base];
            let frame = match &a.plain {
                Some(op) => request(a.xid.pick(base.xid) % 1000 + 5000, op.clone(), None),
                None => request(
                    9000 + a.xid.pick(base.xid) % 1000,
                    Op::Create { parent: ROOT, name: "forged".into(), mode: 0o644 },
                    Some(Replay {
                        xid: a.xid.pick(base.xid),
                        transno: a.transno.pick(base.transno),
                        ino: a.ino.pick(reply_ino(base)),
                        ticket: a.ticket.pick(base.ticket),
                    }),
                ),
            };
            raw.send(&frame);
            if raw.reply().is_none() {
                conns[slot] = None; // closed by the server (or a wait for its turn: left)
            }
        }
        drop(conns);
        // The honest clients come back; A sent nothing of its own.
        let (a, b) = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), async {
                tokio::join!(
                    Client::connect_session(server.addr, sa.clone()),
                    Client::connect_session(server.addr, sb.clone())
                )
            })
            .await
            .expect("the window closes")
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        prop_assert_eq!(sa.lost(), 0, "A lost what it was told");
        rt.block_on(async {
            for (name, reply) in [("a1", &told[0]), ("a2", &told[1])] {
                let found = a.lookup(ROOT, name).await.unwrap();
                assert_eq!(found.ino, reply_ino(reply), "{name}");
            }
            a.sync().await.unwrap();
        });
        drop((a, b));
        assert!(server.stop().success());
        let (code, out) = common::fsck(dir.path());
        prop_assert_eq!(code, 0, "{}", out);
        let server = common::start(dir.path(), &flags);
        rt.block_on(async {
            let c = Client::connect(server.addr).await.unwrap();
            c.getattr(ROOT).await.unwrap();
            c.lookup(ROOT, "a2").await.unwrap();
        });
        assert!(server.stop().success());
    });
}
