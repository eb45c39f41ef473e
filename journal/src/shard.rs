//! Which shard of which cluster a store is, and the inode numbers that shard may hand out.
//!
//! A store serves one shard of a cluster when its server claimed that shard in etcd: the claim
//! gives the shard number and an epoch (the revision at which the owner key was created), and
//! the open writes them into the store, synced, before anyone is served. A later open must
//! claim the same cluster and shard, with an epoch at least the stored one: a claimant whose
//! claim is older than the store's last owner is fenced off (it lost its lease while it was
//! away and someone else served the store since). A store made outside a cluster is shard 0
//! as it is, and may be adopted as shard 0; a store of a cluster is never opened for writing
//! outside one, which would bypass the lease.
//!
//! Inode numbers carry their shard in their top 16 bits (`ino = shard << 48 | local`), so no
//! two shards can ever hand out the same one. Shard 0 holds the root (1).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::schema::ROOT_INO;

/// Bits of an inode number below its shard.
pub const SHARD_SHIFT: u32 = 48;

/// The most shards a cluster can have (16 bits of inode number name one).
pub const MAX_SHARDS: u32 = 1 << (64 - SHARD_SHIFT);

/// The shard an inode number belongs to.
pub const fn shard_of(ino: u64) -> u16 {
    (ino >> SHARD_SHIFT) as u16
}

/// The first inode number shard `shard` hands out: after the root on shard 0, and
/// `shard << 48 | 2` elsewhere (local numbers 0 and 1 are never used, so a local part reads
/// the same on every shard).
pub const fn first_ino(shard: u16) -> u64 {
    ((shard as u64) << SHARD_SHIFT) | (ROOT_INO + 1)
}

/// The inode numbers below this one are shard `shard`'s (with [`first_ino`] the first); the
/// last shard's end at `u64::MAX`, which is never handed out.
pub const fn ino_limit(shard: u16) -> u64 {
    match shard {
        u16::MAX => u64::MAX,
        _ => (shard as u64 + 1) << SHARD_SHIFT,
    }
}

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

/// What a writable open with `claim` (None: outside any cluster) makes of a store that says
/// it is `stored` (None: made outside a cluster, or new): the identity to write, if any, or
/// why the open is refused.
pub(crate) fn admit(
    path: &str,
    stored: Option<&ShardIdentity>,
    claim: Option<&ShardIdentity>,
) -> Result<Option<ShardIdentity>> {
    match (stored, claim) {
        (None, None) => Ok(None),
        (Some(stored), None) => Err(Error::ClusterStore {
            path: path.to_owned(),
            stored: stored.clone(),
        }),
        (None, Some(claim)) if claim.shard != 0 => Err(Error::WrongShard {
            path: path.to_owned(),
            detail: format!(
                "it holds a namespace made outside a cluster, which can only be shard 0, and \
                 shard {} was claimed",
                claim.shard
            ),
        }),
        (None, Some(claim)) => Ok(Some(claim.clone())),
        (Some(stored), Some(claim)) => {
            if stored.cluster != claim.cluster || stored.shard != claim.shard {
                return Err(Error::WrongShard {
                    path: path.to_owned(),
                    detail: format!("it is {stored}, and {claim} was claimed"),
                });
            }
            if stored.epoch > claim.epoch {
                return Err(Error::Fenced {
                    path: path.to_owned(),
                    stored: stored.epoch,
                    claimed: claim.epoch,
                });
            }
            Ok(Some(claim.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(cluster: &str, shard: u16, epoch: u64) -> ShardIdentity {
        ShardIdentity {
            cluster: cluster.into(),
            shard,
            epoch,
        }
    }

    #[test]
    fn inode_numbers_name_their_shard_and_never_overlap() {
        assert_eq!(first_ino(0), 2);
        assert_eq!(ino_limit(0), 1 << 48);
        assert_eq!(first_ino(3), 3 << 48 | 2);
        assert_eq!(shard_of(first_ino(3)), 3);
        assert_eq!(shard_of(ino_limit(3) - 1), 3);
        assert_eq!(shard_of(ROOT_INO), 0);
        assert_eq!(ino_limit(u16::MAX), u64::MAX);
        assert_eq!(shard_of(ino_limit(u16::MAX)), u16::MAX);
        for shard in [0u16, 1, 7, 1000] {
            assert!(ino_limit(shard) <= first_ino(shard + 1));
        }
    }

    #[test]
    fn a_claim_is_admitted_only_for_its_own_store_and_not_behind_a_newer_owner() {
        let p = "/s";
        assert_eq!(admit(p, None, None).unwrap(), None);
        // An existing standalone store becomes shard 0.
        assert_eq!(
            admit(p, None, Some(&id("c", 0, 5))).unwrap(),
            Some(id("c", 0, 5))
        );
        assert!(matches!(
            admit(p, None, Some(&id("c", 1, 5))),
            Err(Error::WrongShard { .. })
        ));
        // A cluster's store is never served outside it.
        assert!(matches!(
            admit(p, Some(&id("c", 0, 5)), None),
            Err(Error::ClusterStore { .. })
        ));
        assert!(matches!(
            admit(p, Some(&id("c", 0, 5)), Some(&id("c", 1, 9))),
            Err(Error::WrongShard { .. })
        ));
        assert!(matches!(
            admit(p, Some(&id("c", 0, 5)), Some(&id("d", 0, 9))),
            Err(Error::WrongShard { .. })
        ));
        // Fencing: an older claim than the store's last owner's is refused.
        let e = admit(p, Some(&id("c", 2, 9)), Some(&id("c", 2, 5))).unwrap_err();
        assert!(matches!(
            e,
            Error::Fenced {
                stored: 9,
                claimed: 5,
                ..
            }
        ));
        assert!(e.to_string().contains("epoch 9"), "{e}");
        assert_eq!(
            admit(p, Some(&id("c", 2, 9)), Some(&id("c", 2, 9))).unwrap(),
            Some(id("c", 2, 9))
        );
        assert_eq!(
            admit(p, Some(&id("c", 2, 9)), Some(&id("c", 2, 12))).unwrap(),
            Some(id("c", 2, 12))
        );
    }
}
