//! The journal's one error type. A failed write or sync is fail-stop: after the first
//! failure every later commit answers `Failed`, so the server can never acknowledge a mutation
//! on an unknown disk state.

/// What can go wrong in the journal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// RocksDB itself failed (open, write, sync, read).
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// The store was written by a schema this build does not read.
    #[error("schema version {found} in {path}; this build reads version {expected}")]
    SchemaVersion {
        path: String,
        found: u32,
        expected: u32,
    },
    /// The store has column families this build does not know, so RocksDB refused to open it
    /// before its schema version could be read: most likely a newer schema's store.
    #[error(
        "{path} has column families this build does not know ({families}): probably a store \
         of a newer schema than version {expected}; see docs/schema.md"
    )]
    UnknownFamilies {
        path: String,
        families: String,
        expected: u32,
    },
    /// A store of an older schema that was not stopped cleanly: clients of the previous
    /// build may still replay early replies into it, which only that build can take.
    #[error(
        "{path} holds schema version {found}, and {clients} client(s) of the build that wrote \
         it may still replay early replies: start that build on it until they have come back \
         (or its recovery window closed), stop it with SIGTERM, then start this one to \
         upgrade the store"
    )]
    UpgradeWithKnownClients {
        path: String,
        found: u32,
        clients: usize,
    },
    /// A writable open outside any cluster of a store that is a cluster's shard: serving it
    /// would bypass the shard's lease.
    #[error(
        "{path} is {stored}: serve it with `mds serve --etcd URL --shard {}`, which claims \
         the shard first",
        stored.shard
    )]
    ClusterStore {
        path: String,
        stored: crate::ShardIdentity,
    },
    /// A claim of one shard on another shard's store (or a cluster's shard other than 0 on a
    /// store made outside a cluster).
    #[error("{path} cannot be opened as the claimed shard: {detail}")]
    WrongShard { path: String, detail: String },
    /// The claim is older than the store's last owner's: this server lost its lease while it
    /// was away, and another served the store since.
    #[error(
        "{path} was last served at epoch {stored}, newer than this server's claim (epoch \
         {claimed}): another owner took the shard over since the claim; refusing to serve it"
    )]
    Fenced {
        path: String,
        stored: u64,
        claimed: u64,
    },
    /// A read-only open found no store there (RocksDB's read-only open would otherwise create
    /// the directory for its info log: an offline tool must change nothing).
    #[error("no store at {path}")]
    NoStore { path: String },
    /// A follower found the store without one of its column families: its owner is still
    /// creating it (a new shard's first open). Nothing to follow yet; try again.
    #[error("the store at {path} has no column family {missing} yet (being created)")]
    StoreIncomplete { path: String, missing: &'static str },
    /// A record or key on disk does not decode: the store is damaged or foreign.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// A follower's next batch is no longer in the owner's write-ahead log (the owner
    /// flushed and deleted that log file before the follower read it): the log goes on at
    /// `found`, or ends before the store's last sequence (`found` is one past it).
    #[error("following: the log goes on at sequence {found}, not {wanted} (a log file is gone)")]
    FollowGap { wanted: u64, found: u64 },
    /// A follower could not read a batch whole (a range deletion, which RocksDB's C API does
    /// not iterate).
    #[error("following: the batch at sequence {sequence} cannot be read whole")]
    FollowPartial { sequence: u64 },
    /// The store's owner writes the namespace as an edit log with checkpoints
    /// (`JournalOptions::edit_log`), which a follower does not read: a checkpoint's images
    /// reach the store through no log record.
    #[error(
        "following: the owner of {path} writes an edit log, which a follower cannot read (a store a standby follows runs without it)"
    )]
    FollowEditLog { path: String },
    /// The checkpointer could not write the edit log's images out: the journal stops, as
    /// after a failed write. The edits are in the store; the next open writes them out.
    #[error("checkpoint of the edit log failed: {0}")]
    Checkpoint(String),
    /// The edit log was asked for a cluster's store, which a standby may follow.
    #[error("the edit log is not for a cluster's store (a standby follows it from the log)")]
    EditLogInCluster,
    /// The caller broke the commit contract (records not contiguous from `last_committed`).
    #[error("commit out of order: expected transno {expected}, got {got}")]
    OutOfOrder { expected: u64, got: u64 },
    /// A client has more resend slots than a slot number holds: the server's cap on a
    /// session's records failed.
    #[error("client {client:016x} has more resend slots than the journal can number")]
    TooManyResendSlots { client: u64 },
    /// The operating system's random source failed (drawing the replay key).
    #[error("random source: {0}")]
    Random(String),
    /// An earlier commit failed; the journal is stopped and accepts no more writes.
    #[error("journal stopped after an earlier write failure")]
    Failed,
    /// A failure injected for tests ([`crate::Journal::inject_failure`]).
    #[error("injected journal failure: {0}")]
    Injected(Fault),
}

/// A failure a test injects into the journal: the commit after `after_commits` successful
/// ones fails with `fault`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectedFailure {
    pub after_commits: u64,
    pub fault: Fault,
}

/// A storage fault a test can inject into a commit ([`InjectedFailure`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// The write fails: nothing of the batch reaches the disk.
    #[default]
    Write,
    /// The write succeeds but the sync fails: the batch is in the operating system's hands,
    /// and whether it is durable is unknown (here it survives a process crash, not a power
    /// loss) — the case that makes EIO mean "outcome unknown".
    Sync,
    /// The disk is full: nothing of the batch reaches the disk.
    NoSpace,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::Write => "write error",
            Fault::Sync => "sync error",
            Fault::NoSpace => "no space left on device",
        })
    }
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Fault, String> {
        match s {
            "write" => Ok(Fault::Write),
            "sync" => Ok(Fault::Sync),
            "nospace" => Ok(Fault::NoSpace),
            other => Err(format!("expected write, sync or nospace, got {other:?}")),
        }
    }
}

/// What RocksDB's status says of a full disk: the binding's C API hands over only the
/// status's text, whose code (`kind()`) and subcode are fixed strings from RocksDB's
/// `status.cc` — `IO error` and the `kNoSpace` subcode's `No space available` — followed by
/// the operating system's `strerror(ENOSPC)` where the error came from a system call.
const NO_SPACE: [&str; 2] = ["No space available", "No space left on device"];

impl Error {
    /// Whether the failure was a full disk (injected, or RocksDB's IO error of the `NoSpace`
    /// subcode): clients are told ENOSPC rather than EIO.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Injected(Fault::NoSpace) => true,
            Error::Rocks(e) => rocks_no_space(e.kind(), e.as_ref()),
            _ => false,
        }
    }
}

/// A RocksDB status of `kind` and text `status` is a full disk: an IO error whose subcode
/// (or errno) says so. Anything else of that text — a corruption naming a file called
/// "No space", say — is not.
fn rocks_no_space(kind: rocksdb::ErrorKind, status: &str) -> bool {
    kind == rocksdb::ErrorKind::IOError && NO_SPACE.iter().any(|m| status.contains(m))
}

/// Shorthand for journal results.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use rocksdb::ErrorKind;

    #[test]
    fn a_full_disk_is_an_io_error_of_the_no_space_subcode() {
        assert!(rocks_no_space(
            ErrorKind::IOError,
            "IO error: No space availableWhile appending to file: /d/000012.log: No space left on device"
        ));
        assert!(rocks_no_space(
            ErrorKind::IOError,
            "IO error: While open a file for appending: /d/LOG: No space left on device"
        ));
        assert!(!rocks_no_space(
            ErrorKind::IOError,
            "IO error: While fsync: /d/000012.log: Input/output error"
        ));
        assert!(!rocks_no_space(
            ErrorKind::Corruption,
            "Corruption: block checksum mismatch in /d/No space left on device.sst"
        ));
    }
}
