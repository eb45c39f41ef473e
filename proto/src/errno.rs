//! Error codes, POSIX-style, declared once: the wire code is the position in the table and the
//! name is the identifier, as `mdsctl` prints it.

use serde::{Deserialize, Serialize};

macro_rules! errnos {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Errors, POSIX-style. The variant index is the wire code; `docs/protocol.md` has
        /// the table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        #[allow(clippy::upper_case_acronyms)]
        pub enum Errno {
            $( $(#[$doc])* $name, )*
        }

        impl Errno {
            /// All codes, in wire order.
            pub const ALL: &'static [Errno] = &[$(Errno::$name),*];

            /// The POSIX name.
            pub fn name(self) -> &'static str {
                match self {
                    $( Errno::$name => stringify!($name), )*
                }
            }
        }
    };
}

errnos! {
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
    /// A permission bit the caller needs is missing: search (x) on a directory it looks a
    /// name up in, write+search on a directory it changes, read on a directory it lists,
    /// write on a file it truncates.
    EACCES,
    /// Only the owner (or root) may: change the mode or times, change the group (to one
    /// the owner is a member of), remove or rename an entry of a sticky directory; only
    /// root may give an inode to another user.
    EPERM,
    /// Authentication failed (BSD's EAUTH): the server wants the shared key and the client
    /// proved none, or a proof that does not match this connection's challenge. The server
    /// closes the connection next.
    EAUTH,
    /// LINK past [`crate::MAX_LINKS`] links.
    EMLINK,
    /// An extended attribute the inode does not have (GETXATTR, REMOVEXATTR, SETXATTR's
    /// `Replace`).
    ENODATA,
    /// An extended attribute name that is empty or longer than [`crate::MAX_XATTR_NAME`].
    ERANGE,
    /// An extended attribute value longer than [`crate::MAX_XATTR_VALUE`].
    E2BIG,
    /// An extended attribute name in no namespace the server keeps (`user.`, `trusted.`,
    /// `security.`, `system.posix_acl_access`, `system.posix_acl_default`).
    EOPNOTSUPP,
    /// A handle that is not open, or not open for what READ or WRITE asks of it.
    EBADF,
    /// A WRITE or a size past `--inline-data-max`.
    EFBIG,
    /// OPEN of a symbolic link (the client follows links; the server opens none).
    ELOOP,
    /// The inode the request names lives on another shard of the cluster (Lustre answers a
    /// remote object so too): ask any server for the shard map (SHARD_MAP) and send the
    /// request to that shard's server.
    EREMOTE,
    /// A RENAME or LINK between two shards of a cluster, which this version does not do (as
    /// across file systems: `mv` copies instead).
    EXDEV,
    /// OPEN past the handles one session may hold open (`--max-open-per-session`), as a
    /// process past its `RLIMIT_NOFILE`: the client must release some first.
    EMFILE,
    /// OPEN past the handles the whole server may hold open (`--max-open-files`), as Linux
    /// past its `fs.file-max`.
    ENFILE,
    /// READ or WRITE of a file whose data is in the object store, not on the server: LAYOUT
    /// says where it is (Linux's name for a wrong medium; a mount never passes it on).
    EMEDIUMTYPE,
    /// SETLK of a lock another owner's conflicts with, not asked to wait.
    EAGAIN,
    /// SETLK asked to wait, where the wait would close a cycle of owners waiting for each
    /// other's locks.
    EDEADLK,
    /// SETLK past the locks and waits the server keeps in all, or keeps of one client
    /// (`locks::MAX_LOCKS`, `locks::MAX_LOCKS_PER_CLIENT`).
    ENOLCK,
    /// A SETLK wait given up: its client's session ended, or the server is stopping (a wait
    /// whose connection ended is not answered).
    EINTR,
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
