//! The mds metadata server.
//!
//! One request's path: `partition` reads it off its connection (`partition/serve/mod.rs`) and
//! hands it to `dispatch`, which decides everything about it — the session's records, the
//! recovery window, the `namespace`'s execution, the journal record for the `committer`,
//! commit-on-share, early or commit-deferred — and says when its reply leaves; the connection
//! appends it to its `output`, or pushes it to the reply `queue`, whose drain
//! (`partition/drain.rs`) appends it after the commit. `session` remembers each client across
//! its connections; `recovery` orders replays after a restart; `auth` checks the shared key
//! at CONNECT and `tls` loads the client port's certificate; `ticket` makes and checks the
//! replay tickets of early replies; `config` is the configuration; `server` wires them
//! together (and runs in-process for tests); `cluster` claims and keeps a shard of a cluster
//! in etcd around it (`--etcd`); `fsck` checks an offline store; `error` is the
//! library's one error type; `metrics` serves
//! Prometheus. The wire protocol is the `mds-proto` crate and the client library `mds-client`.

pub mod auth;
pub mod cluster;
pub mod commit_wait;
pub mod committer;
pub mod config;
pub mod crash;
pub mod dispatch;
pub mod error;
pub mod fsck;
pub mod locks;
pub mod metrics;
pub mod namespace;
pub mod objects;
pub mod output;
pub mod partition;
pub mod queue;
pub mod recovery;
pub mod server;
pub mod session;
pub mod shard;
pub mod space;
pub mod standby;
pub mod ticket;
pub mod tls;
