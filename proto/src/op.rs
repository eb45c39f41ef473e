//! Requests: the operation table (opcode, variant, metric name in one place), credentials, and
//! the replay and trim fields every request carries.

use serde::{Deserialize, Serialize};

use crate::values::{Data, Kind, Placed, Target, XattrValue};

/// Most supplementary groups a request may carry (NFS's AUTH_SYS carries 16, Linux allows
/// 65536; 64 covers real users and keeps a request small).
pub const MAX_GROUPS: usize = 64;

/// A request. `op` comes second so that a CONNECT begins with (xid, opcode 0, version) in
/// every protocol version: see [`crate::peek_handshake`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client, strictly increasing per client identity, kept by a resend.
    pub xid: u64,
    pub op: Op,
    /// Every xid of this client at or below it has its reply at the client: what the server
    /// may forget. A contiguous watermark, not the highest xid answered.
    pub acked_xid: u64,
    /// Who is asking.
    pub cred: Cred,
    /// Set only when replaying, after a server restart, a request answered early.
    pub replay: Option<Replay>,
}

/// A [`Request`] to encode, its operation and credentials borrowed: the same bytes (serde
/// writes a reference as what it refers to; pinned by a test). A client sends one request
/// again after a reconnect, and encodes each without copying its name or groups first.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RequestRef<'a> {
    pub xid: u64,
    pub op: &'a Op,
    pub acked_xid: u64,
    pub cred: &'a Cred,
    pub replay: Option<Replay>,
}

/// The caller's identity, as NFS's AUTH_SYS and Lustre carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most [`MAX_GROUPS`].
    pub groups: Vec<u32>,
}

/// What a replayed request executed as the first time, as its early reply told it. A replay
/// is sent as a new request, with an xid of its own — its answer is news to the client, and
/// a resend of the replay (its answer cut off) is answered from the replay's own resend
/// record — carrying here the xid the original had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    /// The original request's xid.
    pub xid: u64,
    pub transno: u64,
    /// The inode number it created, 0 if none.
    pub ino: u64,
    /// The reply's [`crate::Reply::ticket`]: the server's proof that it gave this transno and
    /// inode number to this client's request with this xid. A replay without the right one
    /// is refused, so no client can replay with a transno it was not given.
    pub ticket: u64,
}

/// Declares [`Op`] from one table: opcode, its constant in [`opcode`], variant with its
/// fields, and the lowercase name used in logs and metric labels. The opcode must equal the variant's position (postcard
/// numbers variants by position); a test checks that for every operation.
macro_rules! operations {
    ($( $(#[$doc:meta])* $code:literal $konst:ident $name:literal $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })? ;)*) => {
        /// Each operation's opcode, by name: for code that must name one before (or without)
        /// decoding a request, such as the metrics of a handshake that did not decode.
        pub mod opcode {
            $( pub const $konst: u8 = $code; )*
        }

        /// Operations. The variant index is the opcode.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Op {
            $( $(#[$doc])* $variant $({ $($field: $ty),* })?, )*
        }

        impl Op {
            /// All operation names, in opcode order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// The opcode: the variant's index on the wire.
            pub fn opcode(&self) -> u8 {
                match self {
                    $( Op::$variant { .. } => $code, )*
                }
            }

            /// A short lowercase name for logs and metric labels.
            pub fn name(&self) -> &'static str {
                Self::NAMES[self.opcode() as usize]
            }
        }
    };
}

operations! {
    /// Must come first on a connection; `client` identifies the client across reconnects;
    /// `atime`, how its reads move atimes (a mount's `relatime`, `noatime`, `strictatime`),
    /// for every request of its session until it connects again.
    0 CONNECT "connect" Connect { version: u32, client: u64, atime: Atime, ack: AckAsked };
    1 PING "ping" Ping;
    /// Owner from the request's credentials. `mode` may carry the caller's umask
    /// ([`mode_with_umask`]), as CREATE's and MKNOD's may.
    2 MKDIR "mkdir" Mkdir { parent: u64, name: String, mode: u32 };
    /// Exclusive create of a regular file; owner from the request's credentials.
    3 CREATE "create" Create { parent: u64, name: String, mode: u32 };
    4 LOOKUP "lookup" Lookup { parent: u64, name: String };
    5 GETATTR "getattr" Getattr { ino: u64 };
    6 SETATTR "setattr" Setattr { ino: u64, attr: SetAttr };
    /// Entries after `cursor` (a name returned by the previous page), at most `limit`.
    7 READDIR "readdir" Readdir { ino: u64, cursor: Option<String>, limit: u32 };
    8 UNLINK "unlink" Unlink { parent: u64, name: String };
    9 RMDIR "rmdir" Rmdir { parent: u64, name: String };
    /// `how` is renameat2's flags: replace the target if there is one, never replace one, or
    /// exchange the two entries.
    10 RENAME "rename" Rename {
        src_parent: u64,
        src_name: String,
        dst_parent: u64,
        dst_name: String,
        how: RenameHow,
    };
    11 STATFS "statfs" Statfs;
    /// Replies once every mutation the server has executed so far is durable.
    12 SYNC "sync" Sync;
    /// The answer to a CONNECT's [`crate::Body::Challenge`], on the same connection and before
    /// anything else, with what the challenge asked for. `proof` is HMAC-SHA256 under the
    /// shared key of [`crate::AUTH_CONTEXT`], the challenge's nonce, the client identity and
    /// the protocol version (big-endian). `session` is HMAC-SHA256 under the session secret
    /// the server issued this identity (`Connected::session_secret`) of
    /// [`crate::SESSION_CONTEXT`], the nonce and the identity.
    13 AUTHENTICATE "authenticate" Authenticate {
        proof: Option<[u8; crate::PROOF_LEN]>,
        session: Option<[u8; crate::PROOF_LEN]>,
    };
    /// A new name `name` in directory `parent` for the existing non-directory `ino`.
    14 LINK "link" Link { ino: u64, parent: u64, name: String };
    /// A symbolic link to `target`, kept byte for byte as given (1 to [`crate::MAX_SYMLINK`]
    /// bytes); owner from the request's credentials.
    15 SYMLINK "symlink" Symlink { parent: u64, name: String, target: Target };
    16 READLINK "readlink" Readlink { ino: u64 };
    /// A fifo, a socket, a character or block device (`rdev`: the device number, as Linux's
    /// `makedev` encodes it), or a regular file; owner from the request's credentials.
    17 MKNOD "mknod" Mknod { parent: u64, name: String, kind: Kind, mode: u32, rdev: u64 };
    18 SETXATTR "setxattr" Setxattr { ino: u64, name: String, value: XattrValue, how: XattrSet };
    19 GETXATTR "getxattr" Getxattr { ino: u64, name: String };
    /// The names of the inode's extended attributes that the caller may see.
    20 LISTXATTR "listxattr" Listxattr { ino: u64 };
    21 REMOVEXATTR "removexattr" Removexattr { ino: u64, name: String };
    /// Opens the non-directory `ino` (a directory only to read) as `handle`: a number the
    /// client chooses, unique among its open handles, that READ, WRITE, SETATTR and RELEASE
    /// name. An open file outlives its last name until its last handle is released.
    /// `reopen`: after a server restart, the client takes back a handle it had (sent after
    /// its replays and before anything else, inside the recovery window; never truncates).
    22 OPEN "open" Open { ino: u64, handle: u64, flags: OpenFlags, reopen: bool };
    /// Closes `handle`; a handle that is not open answers Done, so a resend never fails.
    23 RELEASE "release" Release { handle: u64 };
    /// Up to `len` bytes (at most [`crate::MAX_IO`]) of the regular file `ino` from `offset`,
    /// through a handle opened to read; fewer at the end of the file, holes as zeros.
    24 READ "read" Read { ino: u64, handle: u64, offset: u64, len: u32 };
    /// `data` (at most [`crate::MAX_IO`] bytes) into the regular file `ino` at `offset`,
    /// through a handle opened to write. At the file's end if the handle was opened to
    /// append or `offset` is `u64::MAX` — which is what a client sends through an append
    /// handle, so that a replay after a restart (which runs without the handle) appends too.
    25 WRITE "write" Write { ino: u64, handle: u64, offset: u64, data: Data };
    /// Which server serves each shard of the cluster the answering server belongs to
    /// ([`crate::ShardMap`]); outside a cluster, no shards.
    26 SHARD_MAP "shard_map" ShardMap;
    /// A directory `name` in `parent` whose inode and contents live on `shard` (Lustre's
    /// `lfs mkdir -i`), sent to `parent`'s shard; owner from the request's credentials. That
    /// server has `shard` make the inode (MAKE_PENDING_DIR), then puts the entry, and answers
    /// after its own commit, never early. On `parent`'s own shard it is a MKDIR.
    27 MKDIR_REMOTE "mkdir_remote" MkdirRemote { parent: u64, name: String, mode: u32, shard: u16 };
    /// Between servers: `shard` makes a directory inode whose entry `name` is to live in
    /// `parent`, on the asking server's shard, owned by `uid` and `gid` with `mode` as
    /// given (the asker decided them), and keeps it pending until that entry is found
    /// (RESOLVE_REMOTE). Answered after its commit. A peer's alone ([`Op::is_server_only`]).
    28 MAKE_PENDING_DIR "make_pending_dir" MakePendingDir {
        shard: u16,
        parent: u64,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
    };
    /// Between servers: whether `name` in `parent` names the directory `ino` of another shard,
    /// durably: Done if it does (after its commit), ENOENT if it does not, EBUSY while a
    /// MKDIR_REMOTE of that name is under way. A peer's alone.
    29 RESOLVE_REMOTE "resolve_remote" ResolveRemote { parent: u64, name: String, ino: u64 };
    /// Between servers, RMDIR of a remote directory's first step: the directory `ino`, whose
    /// entry `name` lives in `parent` on the asking server's shard, is to be removed. If it
    /// is empty (and, where the asker's sticky rule says so, owned by `owner`), it is marked
    /// pending again — refusing new entries from then on — until RESOLVE_REMOTE finds whether
    /// the entry went: deleted then, kept if it is still there. Answered after its commit.
    /// A peer's alone.
    30 PREPARE_RMDIR "prepare_rmdir" PrepareRmdir { ino: u64, parent: u64, name: String, owner: Option<u32> };
    /// SHARD_MAP, long-polled: the map once the answering server's view of the cluster is
    /// newer than etcd revision `after` (the [`crate::Body::ShardMapAt`] a client last got; 0:
    /// none), or after `wait_ms` milliseconds (capped by the server) with the map as it is.
    /// Answered at once outside a cluster. It holds its connection meanwhile (a connection's
    /// requests run one at a time): a client sends it on a connection of its own.
    31 SHARD_MAP_WAIT "shard_map_wait" ShardMapWait { after: u64, wait_ms: u32 };
    /// Between servers: CONNECT for a server of the cluster connecting to another (to send
    /// what only servers send: [`Op::is_server_only`]). Always answered with a
    /// [`crate::Body::Challenge`], whose `proof` is HMAC-SHA256 under the cluster's peer
    /// secret of [`crate::PEER_CONTEXT`], the nonce, the identity and the version: a client's
    /// proof of the shared key never passes for it. Its fields are CONNECT's, in CONNECT's
    /// order, so a server reads its version from the same prefix.
    32 PEER_CONNECT "peer_connect" PeerConnect { version: u32, client: u64 };
    /// access(2): whether the caller may `mask` (a mask of `R_OK` 4, `W_OK` 2, `X_OK` 1) on
    /// `ino`, judged as the server judges its own checks — the inode's ACL included; root
    /// passes read and write, and execute on a directory or where any x bit is set. The
    /// inode's attributes if so, EACCES if not. What a mount without `default_permissions`
    /// asks for access(2) and OPENDIR, since only the server holds the ACLs.
    33 ACCESS "access" Access { ino: u64, mask: u32 };
    /// `count` (1 to [`MAX_SLICE_IDS`]) slice ids for the caller's uploads to the object
    /// store ([`crate::Body::Slices`]): never handed out before, by this server or another
    /// shard's. Answered after its commit, never early (a replay could not hand the same ids
    /// out again). A client names an object by one before it uploads it, and only then tells
    /// the server where it belongs (WRITE_SLICES).
    34 ALLOC_SLICES "alloc_slices" AllocSlices { count: u32 };
    /// Pieces of slices already in the object store become part of the regular file `ino`,
    /// after what its layout holds (newer wins), through `handle` opened to write (0: no
    /// handle; the caller needs write permission, as truncate(2)); the size becomes at least
    /// `size` and the end of every piece. A file whose data was on the server (inline) moves
    /// to the object store with it: the client uploaded those bytes as one of the pieces, and
    /// the server drops its own copy. At most [`MAX_PLACED`] pieces.
    35 WRITE_SLICES "write_slices" WriteSlices { ino: u64, handle: u64, size: u64, placed: Vec<Placed> };
    /// The regular file `ino`'s layout ([`crate::Body::Layout`]), through `handle` opened to
    /// read (0: read permission is checked). A file whose data is on the server says so
    /// (`objects: false`, no pieces): READ it.
    36 LAYOUT "layout" Layout { ino: u64, handle: u64 };
    /// The regular file `ino`'s layout replaced by `placed`: the same bytes in fewer pieces,
    /// which the caller read by the layout LAYOUT answered with `version` and uploaded as new
    /// slices — if that is still the file's layout (nothing changed the inode since: its
    /// `version`); ESTALE otherwise, and the caller leaves its upload to the collector. Size
    /// and times stay as they are; the slices no piece names any more go to the collector.
    /// Through `handle` opened to write (0: write permission is checked). Every piece within
    /// the size; at most [`MAX_PLACED`].
    37 COMPACT_LAYOUT "compact_layout" CompactLayout { ino: u64, handle: u64, version: u64, placed: Vec<Placed> };
    /// fcntl's F_GETLK: the first lock another owner holds on `ino` that would keep `owner`
    /// from taking `lock` ([`crate::Body::Lock`]; kind `Unlock` if none would). `owner` is the
    /// client's name for who locks (FUSE's lock owner); `handle` an open handle of `ino`, or 0
    /// for an inode the session holds no handle of (a directory): the caller needs read
    /// permission then.
    38 GETLK "getlk" Getlk { ino: u64, handle: u64, owner: u64, lock: FileLock };
    /// fcntl's F_SETLK (`wait`: F_SETLKW) and flock(2): `owner` takes `lock` on `ino` —
    /// POSIX record-lock rules: its own locks the range covers are replaced, split or merged;
    /// kind `Unlock` releases the range. A lock taken is answered with the inode's
    /// attributes as the grant finds them, an unlock with Done. Another owner's conflicting
    /// lock answers EAGAIN, or with `wait` the answer waits until the lock is granted
    /// (EDEADLK if the wait would close a cycle of waiting owners). Locks are the server's
    /// state, not journaled.
    39 SETLK "setlk" Setlk { ino: u64, handle: u64, owner: u64, lock: FileLock, wait: bool };
}

/// A byte-range lock: `start` to `end` inclusive (`u64::MAX` and `i64::MAX` both reach the end
/// of any file), shared or exclusive, and the pid its taker gave (GETLK tells it to a taker of
/// the same session, 0 to others: a pid means nothing on another machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLock {
    pub start: u64,
    pub end: u64,
    pub kind: LockKind,
    pub pid: u32,
}

/// fcntl's lock types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockKind {
    /// F_RDLCK: shared.
    Read,
    /// F_WRLCK: exclusive.
    Write,
    /// F_UNLCK: none (SETLK releases the range; GETLK says nothing conflicts).
    Unlock,
}

/// Most slice ids one ALLOC_SLICES hands out.
pub const MAX_SLICE_IDS: u32 = 4096;

/// Most pieces one WRITE_SLICES carries.
pub const MAX_PLACED: usize = 4096;

impl Op {
    /// The inode whose shard serves this request: the directory of a name (its entry lives
    /// with its parent), the inode itself otherwise, the source directory of a RENAME and the
    /// new name's directory of a LINK. None for what any server answers (PING, STATFS, SYNC,
    /// the handshake, SHARD_MAP, SHARD_MAP_WAIT, ALLOC_SLICES: each shard hands out ids
    /// of its own range), for RELEASE, which goes where its handle
    /// was opened, and for MAKE_PENDING_DIR, which names its shard.
    pub fn routing_ino(&self) -> Option<u64> {
        match self {
            Op::Mkdir { parent, .. }
            | Op::MkdirRemote { parent, .. }
            | Op::ResolveRemote { parent, .. }
            | Op::Create { parent, .. }
            | Op::Lookup { parent, .. }
            | Op::Unlink { parent, .. }
            | Op::Rmdir { parent, .. }
            | Op::Link { parent, .. }
            | Op::Symlink { parent, .. }
            | Op::Mknod { parent, .. } => Some(*parent),
            Op::Rename { src_parent, .. } => Some(*src_parent),
            Op::Getattr { ino }
            | Op::Setattr { ino, .. }
            | Op::Readdir { ino, .. }
            | Op::Readlink { ino }
            | Op::Setxattr { ino, .. }
            | Op::Getxattr { ino, .. }
            | Op::Listxattr { ino }
            | Op::Access { ino, .. }
            | Op::Removexattr { ino, .. }
            | Op::Open { ino, .. }
            | Op::Read { ino, .. }
            | Op::Write { ino, .. }
            | Op::WriteSlices { ino, .. }
            | Op::CompactLayout { ino, .. }
            | Op::Layout { ino, .. }
            | Op::Getlk { ino, .. }
            | Op::Setlk { ino, .. }
            | Op::PrepareRmdir { ino, .. } => Some(*ino),
            Op::Connect { .. }
            | Op::Ping
            | Op::Statfs
            | Op::Sync
            | Op::Authenticate { .. }
            | Op::Release { .. }
            | Op::ShardMap
            | Op::ShardMapWait { .. }
            | Op::AllocSlices { .. }
            | Op::PeerConnect { .. }
            | Op::MakePendingDir { .. } => None,
        }
    }

    /// The other inode a request names on a shard that must be the same as
    /// [`Op::routing_ino`]'s: a RENAME's target directory, a LINK's inode. On another shard
    /// the request is refused with EXDEV, as across file systems.
    pub fn second_ino(&self) -> Option<u64> {
        match self {
            Op::Rename { dst_parent, .. } => Some(*dst_parent),
            Op::Link { ino, .. } => Some(*ino),
            _ => None,
        }
    }
}

/// Set in the `mode` of MKDIR, CREATE or MKNOD when bits 16 to 24 carry the caller's umask.
pub const MODE_HAS_UMASK: u32 = 1 << 31;
const UMASK_SHIFT: u32 = 16;

/// A creation mode with the caller's `umask`, for the server to apply: the mode and umask as
/// open(2), mkdir(2) and mknod(2) were given them, since a directory's default ACL replaces
/// the umask (POSIX.1e; Linux's `posix_acl_create`), and only the server knows whether the
/// parent has one. A mode without it (every client but the mount) was masked by its sender.
pub fn mode_with_umask(mode: u32, umask: u32) -> u32 {
    (mode & !(MODE_HAS_UMASK | 0o777 << UMASK_SHIFT))
        | (umask & 0o777) << UMASK_SHIFT
        | MODE_HAS_UMASK
}

/// The umask a creation mode carries, if it carries one ([`mode_with_umask`]).
pub fn umask_of(mode: u32) -> Option<u32> {
    (mode & MODE_HAS_UMASK != 0).then_some(mode >> UMASK_SHIFT & 0o777)
}

impl Op {
    /// Whether only a server of the cluster may send it, on a connection that proved the
    /// cluster's peer secret (PEER_CONNECT): the steps of a remote directory's MKDIR and RMDIR
    /// on the other shard, and the scrub's question. A server refuses them on any other
    /// connection, whatever credentials they carry.
    pub fn is_server_only(&self) -> bool {
        matches!(
            self,
            Op::MakePendingDir { .. } | Op::ResolveRemote { .. } | Op::PrepareRmdir { .. }
        )
    }

    /// Whether the operation changes the namespace (and so takes a transno when it succeeds).
    pub fn is_mutation(&self) -> bool {
        matches!(
            self,
            Op::Mkdir { .. }
                | Op::MkdirRemote { .. }
                | Op::MakePendingDir { .. }
                | Op::PrepareRmdir { .. }
                | Op::Create { .. }
                | Op::Setattr { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Rename { .. }
                | Op::Link { .. }
                | Op::Symlink { .. }
                | Op::Mknod { .. }
                | Op::Setxattr { .. }
                | Op::Removexattr { .. }
                | Op::Release { .. }
                | Op::Write { .. }
                | Op::AllocSlices { .. }
                | Op::WriteSlices { .. }
                | Op::CompactLayout { .. }
        ) || matches!(self, Op::Open { flags, .. } if flags.truncate)
    }
}

impl Op {
    /// Whether a successful one makes a new inode (whose number an early reply tells and a
    /// replay must take again).
    pub fn creates_inode(&self) -> bool {
        matches!(
            self,
            Op::Mkdir { .. } | Op::Create { .. } | Op::Symlink { .. } | Op::Mknod { .. }
        )
    }
}

/// How a session's reads (READ, READDIR, READLINK, LAYOUT through a handle) move the atime of
/// what they read: a mount's `relatime` (Linux's default), `noatime`, `strictatime`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Atime {
    /// When the atime is not newer than the mtime or the ctime, or is a day old.
    #[default]
    Relatime,
    /// Never.
    Noatime,
    /// Every read.
    Strictatime,
}

/// When the server answers the session's changes, as its CONNECT asks: as the server's
/// `--ack` says, once durable, or at once with the transno — the client then keeps what is
/// not durable and replays it after a restart (NFS lets a client choose per WRITE with its
/// `stable_how`; here a session chooses for all it does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum AckAsked {
    /// As the server's `--ack` says.
    #[default]
    Server,
    /// Once the change's commit is durable.
    Commit,
    /// At once; durable with the next commit.
    Early,
}

/// RENAME's mode: `renameat2`'s `flags` (Linux's `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenameHow {
    /// `rename(2)`: a target that exists is replaced.
    #[default]
    Replace,
    /// EEXIST if the target exists.
    NoReplace,
    /// Both names must exist (ENOENT otherwise); they swap the inodes they name.
    Exchange,
}

/// SETXATTR's `flags`: `XATTR_CREATE` (EEXIST if it exists), `XATTR_REPLACE` (ENODATA if it
/// does not), or neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrSet {
    #[default]
    Either,
    Create,
    Replace,
}

/// How OPEN opens a file: `open(2)`'s access mode, `O_TRUNC` and `O_APPEND`, and whether
/// the kernel opens it to execute it. Five independent flags (one byte each on the wire).
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    /// Cut the file to 0 bytes (needs `write`): an OPEN that truncates is a mutation.
    pub truncate: bool,
    /// Every WRITE through the handle goes at the file's end, whatever its offset.
    pub append: bool,
    /// execve(2) opens the program (the kernel's `FMODE_EXEC`): execute permission is asked
    /// for instead of read, as Linux's `do_open_execat` asks, though the handle reads.
    pub exec: bool,
}

/// A time SETATTR sets: the server's clock when it executes (`utimensat`'s `UTIME_NOW`,
/// which the owner or anyone with write permission may ask for) or a given time (the owner's
/// or root's alone), in nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    At(i64),
}

/// Attributes SETATTR may change; `None` leaves one as it is. ctime is always set to now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Regular files only (EISDIR on a directory, EINVAL on anything else).
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// `ftruncate(2)`: the size is set through this handle, which must be open for writing
    /// (EBADF if it is not open, EINVAL if it is not writable), and no write permission is
    /// checked again.
    pub handle: Option<u64>,
}
