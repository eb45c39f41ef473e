//! The mds metadata server.
//!
//! `namespace` holds the file-system rules and the in-memory state; `committer` turns journal
//! records into group commits; `partition` runs one core's connections and its reply drain;
//! `session` remembers each client across its connections; `auth` checks the shared key at
//! CONNECT and `tls` loads the client port's certificate; `ticket` makes and checks the
//! replay tickets of early replies; `server` wires them together
//! (and runs in-process for tests); `fsck` checks an offline store. The wire protocol is the
//! `mds-proto` crate and the client library `mds-client`.

pub mod auth;
pub mod committer;
pub mod config;
pub mod fsck;
pub mod metrics;
pub mod namespace;
pub mod partition;
pub mod recovery;
pub mod server;
pub mod session;
pub mod ticket;
pub mod tls;
