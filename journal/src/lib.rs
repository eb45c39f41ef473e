//! The journal of the mds metadata server: the one crate that talks to RocksDB.
//!
//! It owns the on-disk schema (column families, keys, record encodings, the schema version),
//! the group-commit write path (one synced `WriteBatch` per group of transactions, carrying
//! the new `last_committed`), and recovery at open. It knows nothing about sockets or about
//! namespace rules: the server hands it finished records and it makes them durable in
//! transno order, or fails stop.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod error;
mod options;
mod resend;
mod schema;
mod shard;
mod store;

pub use error::{Error, Fault, InjectedFailure, Result};
pub use options::no_perf_counters_on_this_thread;
pub use resend::ClientResend;
pub use schema::{
    DATA_BLOCK, Dentry, EntryName, FileKind, Inode, JournalOp, NAME_INLINE, PendingDir,
    REPLY_INLINE, ROOT_INO, ReplyBytes, ResendRecord, ResendSlot, SCHEMA_VERSION, SECRET_LEN,
    TxRecord, layout_data_blocks, now_ns,
};
// The inode-number layout is the protocol's, defined once there; named here too because the
// server reads a shard's range off the journal it opens (`Recovered::ino_limit`).
pub use mds_proto::{MAX_SHARDS, SHARD_SHIFT, first_ino, ino_limit, shard_of};
pub use shard::ShardIdentity;
pub use store::{
    Ceilings, Change, Checkpoints, CommitInfo, EditLog, Journal, JournalOptions, Leases, Recovered,
    StoreStats,
};
