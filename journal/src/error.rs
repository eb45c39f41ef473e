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
    /// A read-only open found no store there (RocksDB's read-only open would otherwise create
    /// the directory for its info log: an offline tool must change nothing).
    #[error("no store at {path}")]
    NoStore { path: String },
    /// A record or key on disk does not decode: the store is damaged or foreign.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The caller broke the commit contract (records not contiguous from `last_committed`).
    #[error("commit out of order: expected transno {expected}, got {got}")]
    OutOfOrder { expected: u64, got: u64 },
    /// An earlier commit failed; the journal is stopped and accepts no more writes.
    #[error("journal stopped after an earlier write failure")]
    Failed,
    /// A failure injected for tests (`JournalOptions::fail_after_commits`).
    #[error("injected journal failure")]
    Injected,
}

/// Shorthand for journal results.
pub type Result<T> = std::result::Result<T, Error>;
