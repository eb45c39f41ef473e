//! The mds client library, shared by `mdsctl`, `loadgen` and the tests: a pipelined
//! connection with replies matched by xid ([`Client`]), open files ([`Handle`]: numbered by
//! the [`Session`], reopened after a server restart), a connection that survives the server
//! going away by reconnecting as the same client and resending ([`resilient`]), the shared key
//! of the CONNECT challenge ([`auth`]) and TLS ([`tls`]), requests across a cluster's shards
//! from any one server's address ([`Router`]), a cluster's shard map followed as it changes
//! ([`MapWatch`], which both of those read), and the human units every command line takes
//! ([`units`]). It speaks the protocol of `mds-proto` and
//! depends on nothing of the server's: building it needs no C++ toolchain.

pub mod auth;
mod client;
mod connection;
mod error;
mod handles;
mod ops;
mod paths;
mod reply_slots;
pub mod resilient;
mod router;
mod session;
pub mod tls;
pub mod units;
pub mod watch;

pub use client::{Client, ConnectOptions, ROOT};
pub use error::{ClientError, Result};
pub use handles::Handle;
pub use mds_proto as proto;
pub use paths::components;
pub use router::Router;
pub use session::{Replays, Rollback, Session, Unsafe, process_cred};
pub use watch::{MapWatch, Watched};
