//! The mds metadata server and its client library.
//!
//! `namespace` holds the file-system rules and the in-memory state; `committer` turns journal
//! records into group commits; `partition` runs one core's connections and its reply drain;
//! `server` wires them together; `client` is the library every tool talks through; `fsck`
//! checks an offline store.

pub mod client;
pub mod committer;
pub mod config;
pub mod fsck;
pub mod metrics;
pub mod namespace;
pub mod partition;
pub mod protocol;
pub mod server;
pub mod testing;
