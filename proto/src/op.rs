//! Requests: the operation table (opcode, variant, metric name in one place), credentials, and
//! the replay and trim fields every request carries.

use serde::{Deserialize, Serialize};

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
    /// Must come first on a connection; `client` identifies the client across reconnects.
    0 CONNECT "connect" Connect { version: u32, client: u64 };
    1 PING "ping" Ping;
    /// Owner from the request's credentials.
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
    10 RENAME "rename" Rename { src_parent: u64, src_name: String, dst_parent: u64, dst_name: String };
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
}

impl Op {
    /// Whether the operation changes the namespace (and so takes a transno when it succeeds).
    pub fn is_mutation(&self) -> bool {
        matches!(
            self,
            Op::Mkdir { .. }
                | Op::Create { .. }
                | Op::Setattr { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Rename { .. }
        )
    }
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
