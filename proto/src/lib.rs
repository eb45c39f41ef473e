//! The mds wire protocol, version 8: request and reply types, error codes, frame encoding and
//! name rules. No I/O: the server, the client library, the load tool and the fuzz targets all
//! speak through these types, and none of them needs anything else of the others.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of a postcard-encoded
//! [`Request`] (client to server) or [`Reply`] (server to client). `docs/protocol.md`
//! describes the bytes for implementers in other languages; the tables in [`op`] and
//! [`errno`] *are* the numbering and must never be reordered (add at the end, bump the
//! version for anything else).

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod errno;
mod frame;
mod names;
mod op;
mod postcard_writer;
mod reader;
mod reply;
mod shard;
mod values;

pub use errno::Errno;
pub use frame::{
    DecodeError, FrameTooLong, Handshake, READ_CHUNK, codec, decode, decode_version_refusal,
    encode, encode_frame, encode_reply_frame, encode_version_refusal, make_read_room,
    peek_handshake, split_frame,
};
pub use names::{check_name, name_order, name_order_key};
pub use op::{
    AckAsked, Atime, Cred, FileLock, LockKind, MAX_GROUPS, MAX_PLACED, MAX_SLICE_IDS,
    MODE_HAS_UMASK, Op, OpenFlags, RenameHow, Replay, Request, RequestRef, SetAttr, SetTime,
    XattrSet, mode_with_umask, opcode, umask_of,
};
pub use postcard_writer::{PostcardWriter, encode_body_with, encode_request_frame};
pub use reader::{decode_reply, decode_request};
pub use reply::{Attr, Body, DirEntry, FileLayout, Reply, ShardLocation, ShardMap, StatFs};
pub use shard::{MAX_SHARDS, SHARD_SHIFT, first_ino, ino_limit, shard_of};
pub use values::{Data, Kind, Placed, Target, XattrValue};

/// Version carried in CONNECT; a server refuses any other with EPROTO.
pub const PROTOCOL_VERSION: u32 = 13;
/// Largest frame payload either side accepts, in bytes: an extended attribute's largest
/// value ([`MAX_XATTR_VALUE`]) and 4 KiB for the rest of its request.
pub const MAX_FRAME: usize = MAX_XATTR_VALUE + 4096;
/// Longest symbolic link target, in bytes: Linux's `PATH_MAX` less its NUL.
pub const MAX_SYMLINK: usize = 4095;
/// Largest extended attribute value, in bytes (Linux's `XATTR_SIZE_MAX`): E2BIG beyond.
pub const MAX_XATTR_VALUE: usize = 65536;
/// Longest extended attribute name, in bytes, prefix included (Linux's `XATTR_NAME_MAX`):
/// ERANGE beyond.
pub const MAX_XATTR_NAME: usize = 255;
/// Most bytes one READ or WRITE carries (a FUSE mount's `max_write` and `max_read`).
pub const MAX_IO: usize = 65536;
/// Most links a non-directory may have (ext4's `EXT4_LINK_MAX`): EMLINK beyond.
pub const MAX_LINKS: u32 = 65000;

/// Bytes of the nonce in a [`Body::Challenge`].
pub const NONCE_LEN: usize = 32;
/// Bytes of the proof in an [`Op::Authenticate`] (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;
/// What every proof begins with, so a tag made under the shared key for anything else can
/// never pass for one.
pub const AUTH_CONTEXT: &[u8] = b"mds-connect-v1";
/// What every session proof begins with (`Authenticate::session`), so that no tag made under
/// a session secret for anything else passes for one.
pub const SESSION_CONTEXT: &[u8] = b"mds-session-v1";
/// What every peer proof begins with (`Authenticate::proof` after a PEER_CONNECT), so that no
/// tag made under the cluster's peer secret for anything else passes for one, and a proof of
/// the shared key (made under [`AUTH_CONTEXT`]) never passes for a peer's.
pub const PEER_CONTEXT: &[u8] = b"mds-peer-v1";
/// Bytes of the cluster's peer secret.
pub const PEER_SECRET_LEN: usize = 32;
/// Bytes of the session secret a server issues at a session's first CONNECT.
pub const SESSION_SECRET_LEN: usize = 32;
/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;
/// Longest name, in bytes.
pub const MAX_NAME: usize = 255;
/// Most entries one READDIR reply carries, whatever the client asks for.
pub const MAX_READDIR: u32 = 1024;

#[cfg(test)]
mod tests {
    #[test]
    fn a_creation_mode_carries_the_umask_beside_the_mode() {
        let mode = mode_with_umask(0o10_4644, 0o027);
        assert_eq!(umask_of(mode), Some(0o027));
        assert_eq!(mode & 0o17_7777, 0o10_4644);
        assert_eq!(umask_of(mode_with_umask(mode, 0o077)), Some(0o077));
        assert_eq!(umask_of(0o644), None);
        assert_eq!(mode & MODE_HAS_UMASK, MODE_HAS_UMASK);
    }

    use super::*;
    use bytes::BytesMut;

    fn request(xid: u64, op: Op) -> Request {
        Request {
            xid,
            op,
            acked_xid: xid.saturating_sub(1),
            cred: Cred {
                uid: 1000,
                gid: 100,
                groups: vec![4, 27],
            },
            replay: None,
        }
    }

    /// One of each operation, in opcode order.
    fn one_of_each() -> Vec<Op> {
        let name = || "n".to_owned();
        vec![
            Op::Connect {
                version: PROTOCOL_VERSION,
                client: 9,
                atime: crate::Atime::default(),
                ack: crate::AckAsked::default(),
            },
            Op::Ping,
            Op::Mkdir {
                parent: 1,
                name: name(),
                mode: 0o755,
            },
            Op::Create {
                parent: 1,
                name: name(),
                mode: 0o644,
            },
            Op::Lookup {
                parent: 1,
                name: name(),
            },
            Op::Getattr { ino: 1 },
            Op::Setattr {
                ino: 1,
                attr: SetAttr::default(),
            },
            Op::Readdir {
                ino: 1,
                cursor: None,
                limit: 10,
            },
            Op::Unlink {
                parent: 1,
                name: name(),
            },
            Op::Rmdir {
                parent: 1,
                name: name(),
            },
            Op::Rename {
                src_parent: 1,
                src_name: name(),
                dst_parent: 1,
                dst_name: name(),
                how: RenameHow::Exchange,
            },
            Op::Statfs,
            Op::Sync,
            Op::Authenticate {
                proof: Some([7; PROOF_LEN]),
                session: None,
            },
            Op::Link {
                ino: 2,
                parent: 1,
                name: name(),
            },
            Op::Symlink {
                parent: 1,
                name: name(),
                target: Target(b"../t".to_vec()),
            },
            Op::Readlink { ino: 3 },
            Op::Mknod {
                parent: 1,
                name: name(),
                kind: Kind::CharDevice,
                mode: 0o600,
                rdev: 0x0103,
            },
            Op::Setxattr {
                ino: 2,
                name: "user.x".into(),
                value: XattrValue(vec![0, 1, 2]),
                how: XattrSet::Create,
            },
            Op::Getxattr {
                ino: 2,
                name: "user.x".into(),
            },
            Op::Listxattr { ino: 2 },
            Op::Removexattr {
                ino: 2,
                name: "user.x".into(),
            },
            Op::Open {
                ino: 2,
                handle: 7,
                flags: OpenFlags {
                    write: true,
                    truncate: true,
                    ..OpenFlags::default()
                },
                reopen: false,
            },
            Op::Release { handle: 7 },
            Op::Read {
                ino: 2,
                handle: 7,
                offset: 4096,
                len: 100,
            },
            Op::Write {
                ino: 2,
                handle: 7,
                offset: 1,
                data: Data(vec![1, 2, 3]),
            },
            Op::ShardMap,
            Op::MkdirRemote {
                parent: 1,
                name: name(),
                mode: 0o755,
                shard: 1,
            },
            Op::MakePendingDir {
                shard: 1,
                parent: 1,
                name: name(),
                mode: 0o755,
                uid: 0,
                gid: 0,
            },
            Op::ResolveRemote {
                parent: 1,
                name: name(),
                ino: 1 << SHARD_SHIFT | 2,
            },
            Op::PrepareRmdir {
                ino: 2,
                parent: 1 << SHARD_SHIFT | 1,
                name: name(),
                owner: Some(1000),
            },
            Op::ShardMapWait {
                after: 41,
                wait_ms: 30_000,
            },
            Op::PeerConnect {
                version: PROTOCOL_VERSION,
                client: 9,
            },
            Op::Access { ino: 2, mask: 4 },
            Op::AllocSlices { count: 64 },
            Op::WriteSlices {
                ino: 2,
                handle: 8,
                size: 10,
                placed: vec![Placed {
                    slice: 5,
                    slice_size: 10,
                    slice_off: 0,
                    file_off: 0,
                    len: 10,
                }],
            },
            Op::Layout { ino: 2, handle: 8 },
            Op::CompactLayout {
                ino: 2,
                handle: 8,
                version: 77,
                placed: vec![Placed {
                    slice: 6,
                    slice_size: 10,
                    slice_off: 0,
                    file_off: 0,
                    len: 10,
                }],
            },
            Op::Getlk {
                ino: 2,
                handle: 8,
                owner: u64::MAX,
                lock: FileLock {
                    start: 0,
                    end: i64::MAX as u64,
                    kind: LockKind::Write,
                    pid: 4242,
                },
            },
            Op::Setlk {
                ino: 2,
                handle: 0,
                owner: 1 << 40,
                lock: FileLock {
                    start: 10,
                    end: 19,
                    kind: LockKind::Unlock,
                    pid: 1,
                },
                wait: true,
            },
        ]
    }

    /// What a client encodes with its op and credentials borrowed is, byte for byte, the
    /// `Request` a server decodes: for every op, with and without groups and a replay.
    #[test]
    fn a_borrowed_request_encodes_as_the_request() {
        let creds = [
            Cred::default(),
            Cred {
                uid: 1000,
                gid: 100,
                groups: vec![4, 27, 1001],
            },
        ];
        let replays = [
            None,
            Some(Replay {
                xid: 9,
                transno: 12,
                ino: 40,
                ticket: 0xdead_beef,
            }),
        ];
        for op in one_of_each() {
            for cred in &creds {
                for replay in replays {
                    let owned = Request {
                        xid: 77,
                        op: op.clone(),
                        acked_xid: 70,
                        cred: cred.clone(),
                        replay,
                    };
                    let borrowed = RequestRef {
                        xid: 77,
                        op: &op,
                        acked_xid: 70,
                        cred,
                        replay,
                    };
                    let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
                    encode_frame(&owned, &mut a);
                    encode_frame(&borrowed, &mut b);
                    assert_eq!(a, b, "{op:?}");
                    assert_eq!(decode::<Request>(&a[4..]).unwrap(), owned);
                }
            }
        }
    }

    #[test]
    fn requests_go_to_the_shard_of_the_inode_they_name() {
        assert_eq!(shard_of(ROOT_INO), 0);
        assert_eq!(shard_of(3 << SHARD_SHIFT | 2), 3);
        // one_of_each() names directory 1 for names, and inodes 1 to 3 otherwise.
        let routed: Vec<(&str, Option<u64>)> = one_of_each()
            .iter()
            .map(|op| (op.name(), op.routing_ino()))
            .collect();
        let by_parent = Some(1);
        assert_eq!(
            routed,
            [
                ("connect", None),
                ("ping", None),
                ("mkdir", by_parent),
                ("create", by_parent),
                ("lookup", by_parent),
                ("getattr", Some(1)),
                ("setattr", Some(1)),
                ("readdir", Some(1)),
                ("unlink", by_parent),
                ("rmdir", by_parent),
                ("rename", by_parent),
                ("statfs", None),
                ("sync", None),
                ("authenticate", None),
                ("link", by_parent),
                ("symlink", by_parent),
                ("readlink", Some(3)),
                ("mknod", by_parent),
                ("setxattr", Some(2)),
                ("getxattr", Some(2)),
                ("listxattr", Some(2)),
                ("removexattr", Some(2)),
                ("open", Some(2)),
                ("release", None),
                ("read", Some(2)),
                ("write", Some(2)),
                ("shard_map", None),
                ("mkdir_remote", by_parent),
                ("make_pending_dir", None),
                ("resolve_remote", by_parent),
                ("prepare_rmdir", Some(2)),
                ("shard_map_wait", None),
                ("peer_connect", None),
                ("access", Some(2)),
                ("alloc_slices", None),
                ("write_slices", Some(2)),
                ("layout", Some(2)),
                ("compact_layout", Some(2)),
                ("getlk", Some(2)),
                ("setlk", Some(2)),
            ]
        );
        let rename = Op::Rename {
            src_parent: 1,
            src_name: "a".into(),
            dst_parent: 1 << SHARD_SHIFT | 5,
            dst_name: "b".into(),
            how: RenameHow::Replace,
        };
        assert_eq!(rename.second_ino(), Some(1 << SHARD_SHIFT | 5));
        assert_eq!(Op::Getattr { ino: 9 }.second_ino(), None);
    }

    #[test]
    fn the_operation_table_numbers_opcodes_as_the_wire_does() {
        let ops = one_of_each();
        assert_eq!(ops.len(), Op::NAMES.len());
        for (position, op) in ops.iter().enumerate() {
            assert_eq!(op.opcode() as usize, position, "{op:?}");
            assert_eq!(postcard::to_stdvec(op).unwrap()[0], op.opcode(), "{op:?}");
            assert_eq!(Op::NAMES[position], op.name());
        }
        let mutations: Vec<_> = ops
            .iter()
            .filter(|o| o.is_mutation())
            .map(Op::name)
            .collect();
        assert_eq!(
            mutations,
            [
                "mkdir",
                "create",
                "setattr",
                "unlink",
                "rmdir",
                "rename",
                "link",
                "symlink",
                "mknod",
                "setxattr",
                "removexattr",
                "open",
                "release",
                "write",
                "mkdir_remote",
                "make_pending_dir",
                "prepare_rmdir",
                "alloc_slices",
                "write_slices",
                "compact_layout"
            ]
        );
        let plain_open = Op::Open {
            ino: 2,
            handle: 8,
            flags: OpenFlags::default(),
            reopen: false,
        };
        assert!(
            !plain_open.is_mutation(),
            "only an OPEN that truncates changes anything"
        );
    }

    #[test]
    fn errno_wire_codes_follow_the_documented_table() {
        let names: Vec<_> = Errno::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(
            names,
            [
                "ENOENT",
                "EEXIST",
                "ENOTDIR",
                "EISDIR",
                "ENOTEMPTY",
                "EINVAL",
                "ENAMETOOLONG",
                "EPROTO",
                "EIO",
                "ENOSPC",
                "ESTALE",
                "EBUSY",
                "EACCES",
                "EPERM",
                "EAUTH",
                "EMLINK",
                "ENODATA",
                "ERANGE",
                "E2BIG",
                "EOPNOTSUPP",
                "EBADF",
                "EFBIG",
                "ELOOP",
                "EREMOTE",
                "EXDEV",
                "EMFILE",
                "ENFILE",
                "EMEDIUMTYPE",
                "EAGAIN",
                "EDEADLK",
                "ENOLCK",
                "EINTR"
            ]
        );
        for (code, errno) in Errno::ALL.iter().enumerate() {
            assert_eq!(postcard::to_stdvec(errno).unwrap(), vec![code as u8]);
        }
    }

    #[test]
    fn frames_round_trip_and_carry_their_length() {
        let mut buf = BytesMut::new();
        let ops = one_of_each();
        for (xid, op) in ops.iter().enumerate() {
            encode_frame(&request(xid as u64, op.clone()), &mut buf);
        }
        let mut rest = &buf[..];
        for (xid, op) in ops.into_iter().enumerate() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            assert_eq!(
                decode::<Request>(&rest[4..4 + len]).unwrap(),
                request(xid as u64, op)
            );
            rest = &rest[4 + len..];
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn unknown_opcodes_truncation_and_trailing_bytes_are_refused() {
        assert!(
            decode::<Request>(&[1, 99]).is_err(),
            "opcode 99 does not exist"
        );
        let mut buf = BytesMut::new();
        encode_frame(&request(1, Op::Ping), &mut buf);
        let payload = &buf[4..];
        assert!(decode::<Request>(&payload[..payload.len() - 1]).is_err());
        let mut long = payload.to_vec();
        long.push(0);
        assert!(matches!(
            decode::<Request>(&long),
            Err(DecodeError::Trailing(1))
        ));
    }

    #[test]
    fn the_example_in_docs_protocol_md_is_byte_exact() {
        let mut buf = BytesMut::new();
        let req = Request {
            xid: 7,
            op: Op::Create {
                parent: 1,
                name: "a".into(),
                mode: 0o644,
            },
            acked_xid: 6,
            cred: Cred {
                uid: 1000,
                gid: 100,
                groups: vec![],
            },
            replay: None,
        };
        encode_frame(&req, &mut buf);
        assert_eq!(
            &buf[..],
            &[
                0, 0, 0, 13, 7, 3, 1, 1, b'a', 0xa4, 0x03, 6, 0xe8, 0x07, 100, 0, 0
            ]
        );
        let refusal = Reply::new(1, 0, 5, Err(Errno::EPROTO));
        buf.clear();
        encode_frame(&refusal, &mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 6, 1, 0, 5, 1, 7, 0]);
        let early = Reply {
            ticket: 0x1234,
            ..Reply::new(9, 12, 11, Ok(Body::Done))
        };
        buf.clear();
        encode_frame(&early, &mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 7, 9, 12, 11, 0, 4, 0xb4, 0x24]);
    }

    #[test]
    fn the_shard_map_wait_example_in_docs_protocol_md_is_byte_exact() {
        let mut buf = BytesMut::new();
        let wait = Request {
            xid: 3,
            op: Op::ShardMapWait {
                after: 41,
                wait_ms: 30_000,
            },
            acked_xid: 2,
            cred: Cred::default(),
            replay: None,
        };
        encode_frame(&wait, &mut buf);
        assert_eq!(
            &buf[..],
            &[0, 0, 0, 11, 3, 31, 41, 0xb0, 0xea, 0x01, 2, 0, 0, 0, 0]
        );
        let address = || "h:1".to_owned();
        let answer = Reply::new(
            3,
            0,
            5,
            Ok(Body::ShardMapAt {
                revision: 42,
                map: ShardMap {
                    shard: Some(1),
                    shards: vec![ShardLocation {
                        shard: 0,
                        address: address(),
                        epoch: 7,
                    }],
                    servers: vec![address()],
                },
            }),
        );
        buf.clear();
        encode_frame(&answer, &mut buf);
        assert_eq!(
            &buf[..],
            &[
                0, 0, 0, 21, 3, 0, 5, 0, 14, 42, 1, 1, 1, 0, 3, b'h', b':', b'1', 7, 1, 3, b'h',
                b':', b'1', 0
            ]
        );
    }

    /// A client of version 1 or 2 reads the refusal of its CONNECT in the layout those
    /// versions share: four fields, no ticket.
    #[test]
    fn the_version_refusal_keeps_the_layout_of_versions_1_and_2() {
        let mut buf = BytesMut::new();
        encode_version_refusal(3, 5, Errno::EPROTO, &mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 5, 3, 0, 5, 1, 7]);
        assert_eq!(decode_version_refusal(&buf[4..]), Some((3, Errno::EPROTO)));
        assert!(
            decode::<Reply>(&buf[4..]).is_err(),
            "not a version-3 reply: the client must try the old layout"
        );
        let mut ok = BytesMut::new();
        encode_frame(&Reply::new(3, 0, 5, Ok(Body::Pong)), &mut ok);
        assert_eq!(decode_version_refusal(&ok[4..]), None);
    }

    #[test]
    fn every_version_shares_the_handshake_prefix() {
        // A v1 CONNECT: xid 1, opcode 0, version 1, client 0x2a.
        let v1 = [1u8, 0, 1, 0x2a];
        assert_eq!(
            peek_handshake(&v1),
            Some(Handshake {
                xid: 1,
                opcode: 0,
                version: 1
            })
        );
        assert!(decode::<Request>(&v1).is_err(), "v1 does not decode as v3");
        let mut buf = BytesMut::new();
        encode_frame(
            &request(
                3,
                Op::Connect {
                    version: PROTOCOL_VERSION,
                    client: 77,
                    atime: crate::Atime::default(),
                    ack: crate::AckAsked::default(),
                },
            ),
            &mut buf,
        );
        assert_eq!(
            peek_handshake(&buf[4..]),
            Some(Handshake {
                xid: 3,
                opcode: 0,
                version: PROTOCOL_VERSION
            })
        );
        assert_eq!(peek_handshake(&[0xff]), None);
    }

    #[test]
    fn the_authentication_messages_carry_their_32_bytes_raw() {
        let mut buf = BytesMut::new();
        let authenticate = request(
            2,
            Op::Authenticate {
                proof: Some([0xab; PROOF_LEN]),
                session: Some([0xcd; PROOF_LEN]),
            },
        );
        encode_frame(&authenticate, &mut buf);
        // xid, opcode 13, each proof as `01` and its 32 bytes with no length before them,
        // acked_xid, cred (uid 1000 takes two bytes, gid one, two groups), replay.
        assert_eq!(
            buf.len(),
            4 + 1 + 1 + 2 * (1 + PROOF_LEN) + 1 + 2 + 1 + 3 + 1
        );
        assert_eq!(&buf[4..7], &[2, 13, 1]);
        assert_eq!(&buf[7..7 + PROOF_LEN], &[0xab; PROOF_LEN]);
        assert_eq!(buf[7 + PROOF_LEN], 1);
        assert_eq!(&buf[8 + PROOF_LEN..8 + 2 * PROOF_LEN], &[0xcd; PROOF_LEN]);
        assert_eq!(decode::<Request>(&buf[4..]).unwrap(), authenticate);

        let challenge = Reply::new(
            1,
            0,
            0,
            Ok(Body::Challenge {
                nonce: [0x5a; NONCE_LEN],
                key: true,
                session: false,
            }),
        );
        buf.clear();
        encode_frame(&challenge, &mut buf);
        assert_eq!(&buf[4..9], &[1, 0, 0, 0, 7]);
        // The nonce, the two flags, the ticket.
        assert_eq!(buf.len(), 4 + 5 + NONCE_LEN + 2 + 1);
        assert_eq!(&buf[9 + NONCE_LEN..], &[1, 0, 0]);
        assert_eq!(decode::<Reply>(&buf[4..]).unwrap(), challenge);
    }

    #[test]
    fn kinds_map_to_the_file_type_bits_of_st_mode_and_back() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_mode_bits(kind.mode_bits() | 0o755), Some(kind));
        }
        assert_eq!(Kind::from_mode_bits(0o644), None);
        assert_eq!(Kind::from_mode_bits(0o170_000), None);
        let wire: Vec<u8> = Kind::ALL
            .iter()
            .map(|k| postcard::to_stdvec(k).unwrap()[0])
            .collect();
        assert_eq!(wire, [0, 1, 2, 3, 4, 5, 6], "appended only: the wire index");
    }

    /// Byte strings travel as a length and the bytes, as postcard writes a `Vec<u8>`.
    #[test]
    fn targets_and_values_are_length_and_bytes() {
        let t = Target(vec![0xff, b'/', 0]);
        assert_eq!(postcard::to_stdvec(&t).unwrap(), [3, 0xff, b'/', 0]);
        assert_eq!(
            postcard::to_stdvec(&XattrValue(vec![9; 200])).unwrap()[..2],
            [0xc8, 0x01]
        );
        assert_eq!(
            postcard::from_bytes::<Target>(&[3, 0xff, b'/', 0]).unwrap(),
            t
        );
    }

    #[test]
    fn names_are_checked_like_posix() {
        for bad in ["", ".", "..", "a/b", "nul\0"] {
            assert_eq!(check_name(bad), Err(Errno::EINVAL), "{bad:?}");
        }
        assert_eq!(check_name(&"x".repeat(256)), Err(Errno::ENAMETOOLONG));
        assert!(check_name(&"x".repeat(255)).is_ok());
        assert!(check_name("...").is_ok());
    }
}
