//! Which shard of which cluster a store is: the identity a cluster's server claims when it
//! opens the store of its shard (the shard number and the epoch etcd gave its claim), and
//! which the store keeps. How a claim is admitted against the stored identity is
//! `store/claim.rs`; the inode numbers a shard hands out are the protocol's
//! (`mds_proto::first_ino`, `mds_proto::ino_limit`).

use serde::{Deserialize, Serialize};

/// What a cluster's server claims when it opens the store of its shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIdentity {
    /// The cluster's name (its etcd prefix).
    pub cluster: String,
    pub shard: u16,
    /// The revision at which this owner's claim was made: newer claims have higher epochs.
    pub epoch: u64,
}

impl std::fmt::Display for ShardIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shard {} of cluster {:?} (epoch {})",
            self.shard, self.cluster, self.epoch
        )
    }
}
