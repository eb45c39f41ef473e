//! Property tests of the wire decoders: any bytes give a value or an error, never a panic or a
//! read past the frame; every request and reply survives an encode/decode round trip; and a
//! frame stream cut at any point decodes the whole frames before the cut and nothing after.
//! (`fuzz/` runs the same decoders under libFuzzer for longer.)

use bytes::BytesMut;
use mds_proto::{
    self as protocol, Attr, Body, Cred, Data, DirEntry, Errno, Kind, Op, OpenFlags, RenameHow,
    Replay, Reply, Request, SetAttr, SetTime, Target, XattrSet, XattrValue,
};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

fn name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9._\\-\u{e9}\u{4e2d}]{0,40}").unwrap()
}

fn kind() -> impl Strategy<Value = Kind> {
    proptest::sample::select(Kind::ALL.to_vec())
}

fn time() -> impl Strategy<Value = Option<SetTime>> {
    proptest::option::of(prop_oneof![
        Just(SetTime::Now),
        any::<i64>().prop_map(SetTime::At)
    ])
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..300)
}

/// The operations protocol 5 added.
fn io_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), any::<[bool; 5]>()).prop_map(|(ino, handle, f)| Op::Open {
            ino,
            handle,
            flags: OpenFlags {
                read: f[0],
                write: f[1],
                truncate: f[2],
                append: f[3],
                exec: false,
            },
            reopen: f[4],
        }),
        any::<u64>().prop_map(|handle| Op::Release { handle }),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
            |(ino, handle, offset, len)| Op::Read {
                ino,
                handle,
                offset,
                len
            }
        ),
        (any::<u64>(), any::<u64>(), any::<u64>(), bytes()).prop_map(|(ino, handle, offset, d)| {
            Op::Write {
                ino,
                handle,
                offset,
                data: Data(d),
            }
        }),
    ]
}

/// The operations protocol 4 added.
fn new_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), name()).prop_map(|(ino, parent, name)| Op::Link {
            ino,
            parent,
            name
        }),
        (any::<u64>(), name(), bytes()).prop_map(|(parent, name, t)| Op::Symlink {
            parent,
            name,
            target: Target(t)
        }),
        any::<u64>().prop_map(|ino| Op::Readlink { ino }),
        (any::<u64>(), name(), kind(), any::<u32>(), any::<u64>()).prop_map(
            |(parent, name, kind, mode, rdev)| Op::Mknod {
                parent,
                name,
                kind,
                mode,
                rdev
            }
        ),
        (any::<u64>(), name(), bytes(), 0..3u8).prop_map(|(ino, name, v, how)| Op::Setxattr {
            ino,
            name,
            value: XattrValue(v),
            how: [XattrSet::Either, XattrSet::Create, XattrSet::Replace][how as usize],
        }),
        (any::<u64>(), name()).prop_map(|(ino, name)| Op::Getxattr { ino, name }),
        any::<u64>().prop_map(|ino| Op::Listxattr { ino }),
        (any::<u64>(), name()).prop_map(|(ino, name)| Op::Removexattr { ino, name }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        new_op(),
        io_op(),
        (any::<u32>(), any::<u64>()).prop_map(|(version, client)| Op::Connect {
            version,
            client,
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default()
        }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(version, client)| Op::PeerConnect { version, client }),
        Just(Op::Ping),
        (any::<u64>(), name(), any::<u32>()).prop_map(|(parent, name, mode)| Op::Mkdir {
            parent,
            name,
            mode
        }),
        (any::<u64>(), name(), any::<u32>()).prop_map(|(parent, name, mode)| Op::Create {
            parent,
            name,
            mode
        }),
        (any::<u64>(), name()).prop_map(|(parent, name)| Op::Lookup { parent, name }),
        any::<u64>().prop_map(|ino| Op::Getattr { ino }),
        (
            any::<u64>(),
            any::<Option<u32>>(),
            any::<Option<u64>>(),
            time(),
            time()
        )
            .prop_map(|(ino, mode, size, atime, mtime)| Op::Setattr {
                ino,
                attr: SetAttr {
                    mode,
                    uid: mode,
                    gid: None,
                    size,
                    atime,
                    mtime,
                    handle: size,
                },
            }),
        (any::<u64>(), proptest::option::of(name()), any::<u32>())
            .prop_map(|(ino, cursor, limit)| Op::Readdir { ino, cursor, limit }),
        (any::<u64>(), name()).prop_map(|(parent, name)| Op::Unlink { parent, name }),
        (any::<u64>(), name()).prop_map(|(parent, name)| Op::Rmdir { parent, name }),
        (any::<u64>(), name(), any::<u64>(), name(), 0..3u8).prop_map(|(a, b, c, d, how)| {
            Op::Rename {
                src_parent: a,
                src_name: b,
                dst_parent: c,
                dst_name: d,
                how: [
                    RenameHow::Replace,
                    RenameHow::NoReplace,
                    RenameHow::Exchange,
                ][how as usize],
            }
        }),
        Just(Op::Statfs),
        Just(Op::Sync),
    ]
}

fn request(xid: u64, op: Op) -> impl Strategy<Value = Request> {
    (
        any::<u64>(),
        any::<u32>(),
        proptest::collection::vec(any::<u32>(), 0..8),
        proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
    )
        .prop_map(move |(acked_xid, id, groups, replay)| Request {
            xid,
            op: op.clone(),
            acked_xid,
            cred: Cred {
                uid: id,
                gid: id ^ 1,
                groups,
            },
            replay: replay.map(|(transno, ino, ticket)| Replay {
                xid: transno ^ 7,
                transno,
                ino,
                ticket,
            }),
        })
}

fn body() -> impl Strategy<Value = Result<Body, Errno>> {
    let attr =
        (any::<u64>(), kind(), any::<u32>(), any::<i64>()).prop_map(|(ino, kind, mode, t)| Attr {
            ino,
            kind,
            mode,
            uid: mode,
            gid: 7,
            nlink: 2,
            size: ino,
            atime_ns: t ^ 5,
            mtime_ns: t.wrapping_neg(),
            ctime_ns: t,
            rdev: ino >> 3,
            generation: ino ^ 1,
            blocks: ino >> 9,
        });
    prop_oneof![
        bytes().prop_map(|t| Ok(Body::Target(Target(t)))),
        bytes().prop_map(|v| Ok(Body::Xattr(XattrValue(v)))),
        proptest::collection::vec(name(), 0..10).prop_map(|n| Ok(Body::XattrNames(n))),
        bytes().prop_map(|d| Ok(Body::Data(Data(d)))),
        attr.prop_map(|a| Ok(Body::Attr(a))),
        (
            proptest::collection::vec((name(), any::<u64>()), 0..20),
            proptest::option::of(name())
        )
            .prop_map(|(entries, next)| Ok(Body::Entries {
                entries: entries
                    .into_iter()
                    .map(|(name, ino)| DirEntry {
                        name,
                        ino,
                        kind: Kind::File
                    })
                    .collect(),
                next,
            })),
        Just(Ok(Body::Done)),
        Just(Ok(Body::Pong)),
        Just(Ok(Body::Notice)),
        proptest::sample::select(Errno::ALL.to_vec()).prop_map(Err),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = protocol::decode::<Request>(&bytes);
        let _ = protocol::decode::<Reply>(&bytes);
        let mut codec = protocol::codec();
        let mut buf = BytesMut::from(&bytes[..]);
        // Frames come out or an error does; the loop ends because each step consumes input.
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            let _ = protocol::decode::<Request>(&frame);
        }
    }

    #[test]
    fn requests_and_replies_round_trip(
        req in (any::<u64>(), op()).prop_flat_map(|(xid, op)| request(xid, op)),
        result in body(),
        lc in any::<u64>(),
        ticket in any::<u64>(),
    ) {
        prop_assert_eq!(postcard::to_stdvec(&req.op).unwrap()[0], req.op.opcode());
        let xid = req.xid;
        let mut buf = BytesMut::new();
        protocol::encode_frame(&req, &mut buf);
        let reply = Reply { xid, transno: lc / 2, last_committed: lc, result, ticket };
        protocol::encode_frame(&reply, &mut buf);
        let mut codec = protocol::codec();
        let f1 = codec.decode(&mut buf).unwrap().unwrap();
        let f2 = codec.decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(protocol::decode::<Request>(&f1).unwrap(), req);
        prop_assert_eq!(protocol::decode::<Reply>(&f2).unwrap(), reply);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_stream_cut_anywhere_yields_exactly_the_whole_frames(ops in proptest::collection::vec(op(), 1..10), cut in any::<prop::sample::Index>()) {
        let mut stream = BytesMut::new();
        let mut ends = Vec::new();
        for (xid, op) in ops.iter().enumerate() {
            let request = Request {
                xid: xid as u64,
                op: op.clone(),
                acked_xid: 0,
                cred: Cred::default(),
                replay: None,
            };
            protocol::encode_frame(&request, &mut stream);
            ends.push(stream.len());
        }
        let at = cut.index(stream.len() + 1);
        let mut buf = BytesMut::from(&stream[..at]);
        let mut codec = protocol::codec();
        let mut got = 0;
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            prop_assert_eq!(protocol::decode::<Request>(&frame).unwrap().xid, got as u64);
            got += 1;
        }
        prop_assert_eq!(got, ends.iter().filter(|&&e| e <= at).count());
    }
}
