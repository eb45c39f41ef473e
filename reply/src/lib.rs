//! Pending replies: what a reply waits in until the commit it depends on is durable.
//!
//! Each reply has its own state behind its own lock ([`PendingReply`]); each partition has its
//! own queue ordered by transno; the committer only publishes `last_committed` and wakes each
//! partition that has something to release — one wake per partition per commit, never one per
//! reply, and never a service-wide lock. A partition's drain takes everything at or below
//! `last_committed` out of its queue in one step. The crate knows nothing about sockets or the
//! namespace: a reply's payload is whatever the server puts in it, and a wake is a callback.
//!
//! [`GlobalReplies`] is the design this replaces, kept as a baseline to measure against: one
//! service-wide locked list and a pool of service threads woken together at each commit.

// Nothing here needs `unsafe`; kept so. (What does — credentials from libc, socket
// options, signals — is in mds, the client library's credentials and the test kit.)
#![forbid(unsafe_code)]

mod engine;
mod global;
mod pending;
mod sync;

pub use engine::{Outcome, ReplyEngine, Waker};
pub use global::{GlobalReplies, LockWait};
pub use pending::PendingReply;
