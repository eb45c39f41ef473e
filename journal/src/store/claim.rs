//! Whether a writable open's claim may take a store: the one rule of cluster ownership the
//! journal enforces itself.
//!
//! A store serves one shard of a cluster when its server claimed that shard in etcd: the claim
//! gives the shard number and an epoch (the revision at which the owner key was created), and
//! the open writes them into the store, synced, before anyone is served. A later open must
//! claim the same cluster and shard, with an epoch at least the stored one: a claimant whose
//! claim is older than the store's last owner is fenced off (it lost its lease while it was
//! away and someone else served the store since). A store made outside a cluster is shard 0
//! as it is, and may be adopted as shard 0; a store of a cluster is never opened for writing
//! outside one, which would bypass the lease.

use crate::error::{Error, Result};
use crate::shard::ShardIdentity;

/// What a writable open with `claim` (None: outside any cluster) makes of a store that says
/// it is `stored` (None: made outside a cluster, or new): the identity to write, if any, or
/// why the open is refused.
pub(super) fn admit(
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
