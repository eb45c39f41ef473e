//! What a server knows of the cluster's other shards, below the request path that reads it
//! and above the namespace: the shard it serves and who serves the others ([`ShardView`],
//! `view.rs`), how it asks them ([`Peers`], `peers.rs`), and the scrub of its pending
//! directories over them (`scrub.rs`). The cluster's supervisor (`cluster.rs`: claim, lease,
//! watch) fills the view; nothing here talks to etcd.

mod peers;
pub mod scrub;
mod view;

pub use peers::{NameUnderWay, OtherShards, Peers};
pub use view::{MAX_MAP_WAIT, ShardView};

use std::sync::Arc;

/// The shard a server serves in a cluster, as the supervisor hands it to the server: the
/// claim's identity (which the store's open checks and fences with), the shard's store (the
/// cluster's configuration names it; `--data` is not used) and the view of the cluster the
/// request path reads.
#[derive(Debug)]
pub struct Shard {
    pub identity: journal::ShardIdentity,
    pub store: std::path::PathBuf,
    pub view: Arc<ShardView>,
}
