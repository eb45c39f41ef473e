//! What the request path knows of the cluster: the shard this server serves, which server
//! serves each shard — the view SHARD_MAP answers and SHARD_MAP_WAIT long-polls, kept up to
//! date from etcd by the cluster's supervisor (`cluster.rs`) — and the other shards' servers
//! as this one asks them ([`Peers`]).

use std::collections::BTreeMap;
use std::time::Duration;

use mds_cluster::{Owner, Ownership};
use mds_proto::{Errno, Op, ShardLocation, ShardMap};

use super::peers::Peers;
use crate::metrics::SHARD_MAP_WAITS;

/// What the request path knows of the cluster: the shard this server serves, which server
/// serves each shard (from the owner keys' watch), and how to ask the others ([`Peers`]). Read by every request (one
/// comparison of the shard bits); written at each change of owners.
#[derive(Debug, Default)]
pub struct ShardView {
    /// Set once the claim is won, before any request is served.
    shard: std::sync::OnceLock<u16>,
    map: parking_lot::RwLock<Vec<ShardLocation>>,
    servers: parking_lot::RwLock<Vec<String>>,
    /// What this server asks the other shards (remote directories).
    pub peers: Peers,
    /// The etcd revision of what `map` and `servers` say, published: a SHARD_MAP_WAIT waits
    /// for it to pass its client's. `map` and `servers` change under its write lock, so a
    /// reader holding it sees the three agree.
    revision: tokio::sync::watch::Sender<u64>,
}

/// The longest a SHARD_MAP_WAIT is held, whatever its client asks: a client learns that its
/// server is still there at least this often, and a connection nobody reads any more (its
/// client went while it waited, which the server does not see until it answers) is let go.
pub const MAX_MAP_WAIT: Duration = Duration::from_secs(60);

impl ShardView {
    /// The shard this server serves from now on.
    pub fn serve(&self, shard: u16) {
        let _ = self.shard.set(shard);
    }

    /// Why this shard does not serve `op`, if it does not: EREMOTE when the inode that routes
    /// it is another shard's (the client reads the map and goes there), EXDEV when the second
    /// inode a RENAME or LINK names is (this version does neither across shards).
    pub fn refuse(&self, op: &Op) -> Option<Errno> {
        let &shard = self.shard.get()?;
        let mine = |ino: u64| mds_proto::shard_of(ino) == shard;
        if let Op::MakePendingDir { shard: asked, .. } = op {
            return (*asked != shard).then_some(Errno::EREMOTE);
        }
        match (op.routing_ino(), op.second_ino()) {
            (Some(ino), _) if !mine(ino) => Some(Errno::EREMOTE),
            (_, Some(ino)) if !mine(ino) => Some(Errno::EXDEV),
            _ => None,
        }
    }

    /// The shard this server serves, once it does.
    pub fn shard(&self) -> Option<u16> {
        self.shard.get().copied()
    }

    /// SHARD_MAP's answer.
    pub fn shard_map(&self) -> ShardMap {
        self.shard_map_at().1
    }

    /// The etcd revision of this server's view, and the map it says.
    fn shard_map_at(&self) -> (u64, ShardMap) {
        let revision = self.revision.borrow();
        let map = ShardMap {
            shard: self.shard.get().copied(),
            shards: self.map.read().clone(),
            servers: self.servers.read().clone(),
        };
        (*revision, map)
    }

    /// SHARD_MAP_WAIT's answer: the map once this server's view is newer than revision
    /// `after`, or once `wait` (at most [`MAX_MAP_WAIT`]) has passed, or at once when the
    /// server is stopping (`stop`) — with the revision it reflects. It holds no lock while it
    /// waits; the owners' watch wakes it (`update`).
    pub async fn shard_map_after(
        &self,
        after: u64,
        wait: Duration,
        stop: &tokio_util::sync::CancellationToken,
    ) -> (u64, ShardMap) {
        let mut newer = self.revision.subscribe();
        if *newer.borrow() <= after && !wait.is_zero() {
            let _held = HeldWait::count();
            tokio::select! {
                _ = newer.wait_for(|&revision| revision > after) => {}
                () = tokio::time::sleep(wait.min(MAX_MAP_WAIT)) => {}
                () = stop.cancelled() => {}
            }
        }
        self.shard_map_at()
    }

    /// Takes what etcd said at `revision` (its owners, and its members read just after),
    /// unless something newer was taken already: the claim's own read and the watch run
    /// side by side, and an older read applied last would hide a server until the next
    /// change. A newer revision wakes the SHARD_MAP_WAITs held.
    pub(crate) fn update(
        &self,
        owners: &BTreeMap<u16, Ownership>,
        members: Option<&[Owner]>,
        revision: i64,
    ) {
        let revision = revision.unsigned_abs();
        self.revision.send_if_modified(|seen| {
            if revision < *seen {
                return false;
            }
            self.set(owners);
            if let Some(members) = members {
                *self.servers.write() = members.iter().map(|m| m.address.to_string()).collect();
            }
            let newer = revision > *seen;
            *seen = revision;
            newer
        });
    }

    fn set(&self, owners: &BTreeMap<u16, Ownership>) {
        *self.map.write() = owners
            .iter()
            .map(|(&shard, o)| ShardLocation {
                shard,
                address: o.owner.address.to_string(),
                epoch: o.epoch,
            })
            .collect();
    }
}

/// One SHARD_MAP_WAIT held, in `mds_shard_map_waits` until dropped (however its wait ends).
struct HeldWait(metrics::Gauge);

impl HeldWait {
    fn count() -> HeldWait {
        let waits = metrics::gauge!(SHARD_MAP_WAITS);
        waits.increment(1.0);
        HeldWait(waits)
    }
}

impl Drop for HeldWait {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mds_cluster::{Owner, Ownership};

    use super::*;

    fn owners(address: &str, epoch: u64) -> BTreeMap<u16, Ownership> {
        let owner = Owner {
            address: address.parse().unwrap(),
            metrics: "127.0.0.1:9".parse().unwrap(),
            node: "test".into(),
        };
        BTreeMap::from([(0, Ownership { owner, epoch })])
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_wait_is_answered_at_once_for_an_older_revision_and_woken_by_a_newer_one() {
        let view = Arc::new(ShardView::default());
        view.serve(0);
        view.update(&owners("127.0.0.1:1", 5), None, 5);
        let stop = tokio_util::sync::CancellationToken::new();
        runtime().block_on(async {
            // Older than the view: at once, whatever the wait asked.
            let (revision, map) = view.shard_map_after(4, MAX_MAP_WAIT, &stop).await;
            assert_eq!((revision, map.shards[0].epoch), (5, 5));
            // As new as the view: held until a newer revision comes, and only that wakes it
            // (the same revision read again does not).
            let held = tokio::spawn({
                let (view, stop) = (view.clone(), stop.clone());
                async move { view.shard_map_after(5, MAX_MAP_WAIT, &stop).await }
            });
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            view.update(&owners("127.0.0.1:1", 5), None, 5);
            view.update(&owners("127.0.0.1:9", 3), None, 4); // older: not taken
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(!held.is_finished(), "nothing newer than 5 came");
            view.update(&owners("127.0.0.1:2", 7), None, 7);
            let (revision, map) = held.await.unwrap();
            assert_eq!(revision, 7);
            assert_eq!(map.shards[0].address, "127.0.0.1:2");
            assert_eq!(map.shard, Some(0));
        });
    }

    #[test]
    fn a_wait_ends_with_its_time_or_the_servers_stop_and_answers_the_map_as_it_is() {
        let view = ShardView::default();
        view.update(&owners("127.0.0.1:1", 5), None, 5);
        let stop = tokio_util::sync::CancellationToken::new();
        runtime().block_on(async {
            let short = Duration::from_millis(20);
            assert_eq!(view.shard_map_after(5, short, &stop).await.0, 5);
            stop.cancel();
            let stopping = view.shard_map_after(5, MAX_MAP_WAIT, &stop);
            let answered = tokio::time::timeout(Duration::from_secs(10), stopping).await;
            assert_eq!(answered.expect("answered once stopping").0, 5);
        });
    }
}
