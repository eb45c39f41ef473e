//! Replies: the header every server message carries and the bodies of each operation.

use serde::{Deserialize, Serialize};

use crate::Errno;
use crate::values::{Data, Kind, Target, XattrValue};

/// An inode's attributes as clients see them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// Files: the size set by SETATTR. Directories: the number of entries. Symbolic links:
    /// the target's length. Others: 0.
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Character and block devices: the device number; 0 for every other kind.
    pub rdev: u64,
    pub generation: u64,
    /// Regular files: the data they hold, in 512-byte units (`st_blocks`): blocks of 4 KiB
    /// stored on the server, or what the layout's pieces cover, rounded up to 4 KiB — holes
    /// not counted. 0 for every other kind.
    pub blocks: u64,
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
    /// Regular files.
    pub files: u64,
    /// Symbolic links, fifos, sockets and devices.
    pub others: u64,
    /// Bytes of extended attributes held in memory: names, values and 16 bytes each.
    pub xattr_bytes: u64,
    /// The sizes of every regular file added up (holes included): what the files' data
    /// kept on the server amounts to at most.
    pub file_bytes: u64,
    /// The data regular files hold, on the server and in the object store: what their
    /// `blocks` add up to, in bytes (holes not counted, unlike `file_bytes`).
    pub data_bytes: u64,
    /// Most bytes one file keeps on the server (`--inline-data-max`); a file that grows past
    /// it moves to the object store. 0: READ and WRITE are refused.
    pub inline_data_max: u64,
    /// The object store file data beyond the inline cap goes to, as a client opens it
    /// (`mds_objects::Address`, without credentials: a client brings its own); empty: none,
    /// and no file grows past the cap.
    pub object_store: String,
    /// Handles open, and files whose last name is gone while a handle keeps them.
    pub open_handles: u64,
    pub orphans: u64,
    /// The file system the store is on: its size, what is free, and what is free to the
    /// server (`statvfs`'s blocks, bfree and bavail times its fragment size); 0 if unknown.
    pub store_bytes: u64,
    pub store_bytes_free: u64,
    pub store_bytes_available: u64,
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
    /// Requests that built on another client's uncommitted change and waited for its commit
    /// (commit-on-share), since the server started.
    pub cos_conflicts: u64,
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
        /// Mutations are answered at once, before their commit (`--ack early`): the client
        /// keeps each unsafe request until `last_committed` covers it, to replay it after a
        /// restart.
        ack_early: bool,
        /// The server is in its recovery window: a client known before the restart replays
        /// its unsafe requests now, then sends anything else (which marks it done).
        recovering: bool,
        /// The client was known before a restart and did not come back within the recovery
        /// window: none of its unsafe requests were kept, even those `last_committed` now
        /// covers (their transnos were skipped).
        evicted: bool,
        /// Issued when this CONNECT started a new session for the identity: a reconnect with
        /// the same identity must prove it (`Authenticate::session`) while the server keeps
        /// the session, so that nobody else can take the session's replies, records or
        /// replays by naming its identity. `None` when the session was proved.
        session_secret: Option<[u8; crate::SESSION_SECRET_LEN]>,
    },
    /// 1
    Pong,
    /// 2: MKDIR, CREATE, LOOKUP, GETATTR, SETATTR, LINK, SYMLINK, MKNOD, OPEN, WRITE.
    Attr(Attr),
    /// 3: READDIR; `next` is the cursor of the following page, `None` at the end.
    Entries {
        entries: Vec<DirEntry>,
        next: Option<String>,
    },
    /// 4: UNLINK, RMDIR, RENAME, SYNC, SETXATTR, REMOVEXATTR, RELEASE.
    Done,
    /// 5 (boxed: the largest body by far, and rare; inline, every reply the server holds
    /// would be its size).
    StatFs(Box<StatFs>),
    /// 6: with xid 0, a message no request asked for: `last_committed` moved.
    Notice,
    /// 7: CONNECT's answer when something must be proved before the session is touched: the
    /// shared key (`key`, a server started with `--auth-key`) and the session secret of an
    /// identity the server keeps a session for (`session`). Prove them with an AUTHENTICATE
    /// over this nonce, drawn afresh for this connection and good for one answer on it.
    Challenge {
        nonce: [u8; crate::NONCE_LEN],
        key: bool,
        session: bool,
    },
    /// 8: READLINK's target.
    Target(Target),
    /// 9: GETXATTR's value.
    Xattr(XattrValue),
    /// 10: LISTXATTR's names, in byte order.
    XattrNames(Vec<String>),
    /// 11: READ's bytes.
    Data(Data),
    /// 12: SHARD_MAP's answer.
    ShardMap(ShardMap),
    /// 13: LOOKUP of an entry that names another shard's directory (MKDIR_REMOTE): its
    /// attributes are on the shard of `ino`, which a client asks next (GETATTR).
    Remote { ino: u64, kind: Kind },
    /// 14: SHARD_MAP_WAIT's answer: the map, and the etcd revision of the answering server's
    /// view it reflects (0 outside a cluster). A revision no newer than the one asked about
    /// means nothing changed within the wait.
    ShardMapAt { revision: u64, map: ShardMap },
    /// 15: ALLOC_SLICES' ids, `first..first + count`.
    Slices { first: u64, count: u32 },
    /// 16: LAYOUT's answer.
    Layout(FileLayout),
    /// 17: GETLK's answer: the conflicting lock, or kind `Unlock` if none conflicts.
    Lock(crate::FileLock),
}

/// Where a regular file's data is: on the server (`objects: false`, READ and WRITE it), or in
/// the object store as `placed` says ([`crate::Placed`], oldest first) up to `size`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLayout {
    pub size: u64,
    pub objects: bool,
    pub placed: Vec<crate::Placed>,
    /// Which state of the file this is (the transno of the inode's last change): what
    /// COMPACT_LAYOUT names to replace this layout and no later one.
    pub version: u64,
}

/// Which server serves each shard, as the answering server's watch of the cluster sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// The answering server's own shard; None outside a cluster (then `shards` is empty and
    /// that server serves everything).
    pub shard: Option<u16>,
    /// The cluster's shards that have an owner now, in shard order.
    pub shards: Vec<ShardLocation>,
    /// Every server of the cluster, owners and standbys (HOST:PORT): where a client whose
    /// server went away asks who serves its shard now.
    pub servers: Vec<String>,
}

/// One shard's server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLocation {
    pub shard: u16,
    /// HOST:PORT, as the server listens.
    pub address: String,
    /// Its owner's epoch: a higher one is a newer owner.
    pub epoch: u64,
}

/// A reply: the request's xid (0 for a connection-level error or a notice), the transno of the
/// mutation (0 for reads and errors), the server's `last_committed` when the reply was sent,
/// the result, and the replay ticket of an early reply. The first four fields are laid out as
/// in protocol versions 1 and 2, and the server refuses a client of another version with
/// those four alone ([`crate::encode_version_refusal`]), so such a client can read why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub xid: u64,
    pub transno: u64,
    pub last_committed: u64,
    pub result: Result<Body, Errno>,
    /// With `--ack early`, on a successful mutation's reply: a keyed hash the server makes of
    /// (client, xid, transno, inode number), which a replay of this request after a restart
    /// must carry ([`crate::Replay::ticket`]). 0 otherwise.
    pub ticket: u64,
}

impl Reply {
    /// A reply with no ticket.
    pub fn new(xid: u64, transno: u64, last_committed: u64, result: Result<Body, Errno>) -> Reply {
        Reply {
            xid,
            transno,
            last_committed,
            result,
            ticket: 0,
        }
    }
}
