//! The wire protocol: request and reply types, error codes, and frame encoding.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of a postcard-encoded
//! [`Request`] (client to server) or [`Reply`] (server to client). Frames larger than
//! [`MAX_FRAME`] are refused. The first request on a connection must be [`Op::Connect`] with
//! [`PROTOCOL_VERSION`]. `docs/protocol.md` describes the bytes for implementers in other
//! languages; the enum variant order below *is* the opcode numbering and must never change
//! (add at the end, bump the version for anything else).

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

/// Version carried in CONNECT; a server refuses any other with EPROTO.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame payload either side accepts, in bytes.
pub const MAX_FRAME: usize = 64 * 1024;
/// Longest name, in bytes.
pub const MAX_NAME: usize = 255;
/// Most entries one READDIR reply carries, whatever the client asks for.
pub const MAX_READDIR: u32 = 1024;

/// A request: a client-chosen id that its reply carries back, and the operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub xid: u64,
    pub op: Op,
}

/// Operations. The variant index is the opcode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// 0: must come first on a connection; `client` identifies the client across reconnects.
    Connect { version: u32, client: u64 },
    /// 1
    Ping,
    /// 2
    Mkdir {
        parent: u64,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// 3: exclusive create of a regular file.
    Create {
        parent: u64,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// 4
    Lookup { parent: u64, name: String },
    /// 5
    Getattr { ino: u64 },
    /// 6
    Setattr { ino: u64, attr: SetAttr },
    /// 7: entries after `cursor` (a name returned by the previous page), at most `limit`.
    Readdir {
        ino: u64,
        cursor: Option<String>,
        limit: u32,
    },
    /// 8
    Unlink { parent: u64, name: String },
    /// 9
    Rmdir { parent: u64, name: String },
    /// 10
    Rename {
        src_parent: u64,
        src_name: String,
        dst_parent: u64,
        dst_name: String,
    },
    /// 11
    Statfs,
    /// 12: replies once every mutation the server has executed so far is durable.
    Sync,
}

impl Op {
    /// A short lowercase name for logs and metric labels.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Connect { .. } => "connect",
            Op::Ping => "ping",
            Op::Mkdir { .. } => "mkdir",
            Op::Create { .. } => "create",
            Op::Lookup { .. } => "lookup",
            Op::Getattr { .. } => "getattr",
            Op::Setattr { .. } => "setattr",
            Op::Readdir { .. } => "readdir",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Statfs => "statfs",
            Op::Sync => "sync",
        }
    }

    /// The opcode: the variant's index on the wire.
    pub fn opcode(&self) -> u8 {
        match self {
            Op::Connect { .. } => 0,
            Op::Ping => 1,
            Op::Mkdir { .. } => 2,
            Op::Create { .. } => 3,
            Op::Lookup { .. } => 4,
            Op::Getattr { .. } => 5,
            Op::Setattr { .. } => 6,
            Op::Readdir { .. } => 7,
            Op::Unlink { .. } => 8,
            Op::Rmdir { .. } => 9,
            Op::Rename { .. } => 10,
            Op::Statfs => 11,
            Op::Sync => 12,
        }
    }

    /// All operation names, in opcode order.
    pub const NAMES: [&'static str; 13] = [
        "connect", "ping", "mkdir", "create", "lookup", "getattr", "setattr", "readdir", "unlink",
        "rmdir", "rename", "statfs", "sync",
    ];
}

/// Attributes SETATTR may change; `None` leaves one as it is. ctime is always set to now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Regular files only (EISDIR on a directory).
    pub size: Option<u64>,
    pub mtime_ns: Option<i64>,
}

/// Directory or regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Directory,
    File,
}

/// An inode's attributes as clients see them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// Files: the size set by SETATTR. Directories: the number of entries.
    pub size: u64,
    pub ctime_ns: i64,
    pub mtime_ns: i64,
    pub generation: u64,
}

/// One READDIR entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub ino: u64,
    pub kind: Kind,
}

/// Server-wide figures (STATFS), also what `mdsctl status` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFs {
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub last_committed: u64,
    /// The last transno handed out; minus `last_committed`, the commit lag.
    pub last_transno: u64,
    /// Group commits since the server started.
    pub commits: u64,
    /// Transactions those commits held.
    pub committed_transactions: u64,
    /// The most transactions one commit held since the server started.
    pub max_transactions_per_commit: u64,
    pub partitions: u32,
    /// Set after a journal failure: mutations are refused with EIO.
    pub read_only: bool,
}

/// Reply payloads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// 0
    Connected {
        version: u32,
        /// Changes at every server start, so a client can tell it restarted.
        server_boot: u64,
        partition: u32,
    },
    /// 1
    Pong,
    /// 2: MKDIR, CREATE, LOOKUP, GETATTR, SETATTR.
    Attr(Attr),
    /// 3: READDIR; `next` is the cursor of the following page, `None` at the end.
    Entries {
        entries: Vec<DirEntry>,
        next: Option<String>,
    },
    /// 4: UNLINK, RMDIR, RENAME, SYNC.
    Done,
    /// 5
    StatFs(StatFs),
}

/// Errors, POSIX-style. The variant index is the wire code; `docs/protocol.md` has the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Errno {
    ENOENT,
    EEXIST,
    ENOTDIR,
    EISDIR,
    ENOTEMPTY,
    EINVAL,
    ENAMETOOLONG,
    EPROTO,
    EIO,
    ENOSPC,
    ESTALE,
    EBUSY,
}

impl Errno {
    /// The POSIX name, as `mdsctl` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Errno::ENOENT => "ENOENT",
            Errno::EEXIST => "EEXIST",
            Errno::ENOTDIR => "ENOTDIR",
            Errno::EISDIR => "EISDIR",
            Errno::ENOTEMPTY => "ENOTEMPTY",
            Errno::EINVAL => "EINVAL",
            Errno::ENAMETOOLONG => "ENAMETOOLONG",
            Errno::EPROTO => "EPROTO",
            Errno::EIO => "EIO",
            Errno::ENOSPC => "ENOSPC",
            Errno::ESTALE => "ESTALE",
            Errno::EBUSY => "EBUSY",
        }
    }

    /// All codes, in wire order.
    pub const ALL: [Errno; 12] = [
        Errno::ENOENT,
        Errno::EEXIST,
        Errno::ENOTDIR,
        Errno::EISDIR,
        Errno::ENOTEMPTY,
        Errno::EINVAL,
        Errno::ENAMETOOLONG,
        Errno::EPROTO,
        Errno::EIO,
        Errno::ENOSPC,
        Errno::ESTALE,
        Errno::EBUSY,
    ];
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A reply: the request's xid, the transno of the mutation (0 for reads and errors), the
/// server's `last_committed` when the reply was sent, and the result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub xid: u64,
    pub transno: u64,
    pub last_committed: u64,
    pub result: Result<Body, Errno>,
}

/// Why a frame's payload was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed payload: {0}")]
    Malformed(#[from] postcard::Error),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Decodes one frame payload, refusing trailing garbage.
pub fn decode<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, DecodeError> {
    let (value, rest) = postcard::take_from_bytes(payload)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(DecodeError::Trailing(rest.len()))
    }
}

/// Appends one length-prefixed frame holding `value` to `buf`.
pub fn encode_frame<T: Serialize>(value: &T, buf: &mut BytesMut) {
    let start = buf.len();
    buf.put_u32(0);
    let taken = std::mem::take(buf);
    let mut filled = postcard::to_extend(value, taken).expect("encoding into memory cannot fail");
    let len = (filled.len() - start - 4) as u32;
    filled[start..start + 4].copy_from_slice(&len.to_be_bytes());
    *buf = filled;
}

/// The frame codec both sides use: 4-byte big-endian length, [`MAX_FRAME`] at most.
pub fn codec() -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// Checks a name as POSIX and the design want it: not empty, not `.` or `..`, no `/` or NUL,
/// at most [`MAX_NAME`] bytes.
pub fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        Err(Errno::EINVAL)
    } else if name.len() > MAX_NAME {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_carry_their_length() {
        let req = Request {
            xid: 42,
            op: Op::Create {
                parent: 1,
                name: "file".into(),
                mode: 0o644,
                uid: 1,
                gid: 2,
            },
        };
        let mut buf = BytesMut::new();
        encode_frame(&req, &mut buf);
        encode_frame(
            &Request {
                xid: 43,
                op: Op::Ping,
            },
            &mut buf,
        );
        let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(decode::<Request>(&buf[4..4 + len]).unwrap(), req);
        let rest = &buf[4 + len..];
        let len2 = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        assert_eq!(decode::<Request>(&rest[4..4 + len2]).unwrap().xid, 43);
    }

    #[test]
    fn unknown_opcodes_truncation_and_trailing_bytes_are_refused() {
        assert!(
            decode::<Request>(&[1, 99]).is_err(),
            "opcode 99 does not exist"
        );
        let mut buf = BytesMut::new();
        encode_frame(
            &Request {
                xid: 1,
                op: Op::Lookup {
                    parent: 1,
                    name: "abc".into(),
                },
            },
            &mut buf,
        );
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
        let op = Op::Create {
            parent: 1,
            name: "a".into(),
            mode: 0o644,
            uid: 0,
            gid: 0,
        };
        encode_frame(&Request { xid: 7, op }, &mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 9, 7, 3, 1, 1, b'a', 0xa4, 0x03, 0, 0]);
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

    #[test]
    fn errno_wire_codes_follow_the_documented_table() {
        for (code, errno) in Errno::ALL.iter().enumerate() {
            assert_eq!(postcard::to_stdvec(errno).unwrap(), vec![code as u8]);
        }
        assert_eq!(Op::NAMES.len(), 13);
        for op in [Op::Ping, Op::Statfs, Op::Sync, Op::Getattr { ino: 1 }] {
            assert_eq!(postcard::to_stdvec(&op).unwrap()[0], op.opcode());
            assert_eq!(Op::NAMES[op.opcode() as usize], op.name());
        }
    }
}
