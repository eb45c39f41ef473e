//! What one shard's server asks another's (remote directories, `namespace/ops/remote.rs`):
//! the connections to the other shards — one [`Router`] whose sessions are a peer's: each
//! connects with PEER_CONNECT and proves the cluster's peer secret (which no client has, read
//! from etcd), its requests carry root's credentials and run on the cluster thread's runtime,
//! not on a partition's — the names a MKDIR_REMOTE or a remote RMDIR is under way for (which
//! RESOLVE_REMOTE answers EBUSY for); the scrub over them is `scrub.rs`.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mds_client::auth::PeerKey;
use mds_client::{ClientError, ConnectOptions, Router};
use mds_proto::{Body, Errno, Op};
use tracing::warn;

/// How long one request to another shard may take before the operation that needs it fails
/// (EIO to its client; the pending directory it may have left is scrubbed).
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// How a server's requests reach the other shards' servers. [`Peers`] sends them through the
/// client library's router; the dispatch tests answer them from a table instead (TiKV's
/// `TestPdClient` is the model), so that every remote decision runs without etcd, sockets
/// or a store.
pub trait OtherShards: Send + Sync {
    /// `op`'s answer from the shard that serves it, as [`Peers::call`] gives it.
    fn call(&self, op: Op) -> Pin<Box<dyn Future<Output = Result<Body, Errno>> + Send + '_>>;
}

/// The request path's side of the other shards.
#[derive(Default)]
pub struct Peers {
    /// Where requests to other shards go instead of the router, when set
    /// ([`Peers::reach_through`]).
    other_shards: OnceLock<Arc<dyn OtherShards>>,
    /// Where peer requests run, and how they connect (this server's own address as the
    /// seed of the router: it answers SHARD_MAP like any other).
    runtime: OnceLock<tokio::runtime::Handle>,
    seed: OnceLock<String>,
    options: OnceLock<ConnectOptions>,
    /// The router, and the peer secret its sessions prove: made again after the secret
    /// changed (`mds cluster rotate-peer-secret`).
    router: tokio::sync::Mutex<Option<(Arc<PeerKey>, Arc<Router>)>>,
    /// The cluster's peer secret as this server last read it from etcd: what its own
    /// connections to the other shards prove, and what it asks of theirs (PEER_CONNECT).
    key: parking_lot::RwLock<Option<Arc<PeerKey>>>,
    /// (parent, name) of each MKDIR_REMOTE or remote RMDIR between its first look and its
    /// change to the entry.
    under_way: parking_lot::Mutex<HashSet<(u64, String)>>,
    /// The cluster's number of shards: a MKDIR_REMOTE to one past them is EINVAL.
    shards: OnceLock<u16>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("seed", &self.seed.get())
            .field("shards", &self.shards.get())
            .field("under_way", &self.under_way.lock().len())
            .finish_non_exhaustive()
    }
}

/// A MKDIR_REMOTE's or remote RMDIR's name, under way until dropped.
pub struct NameUnderWay<'a> {
    peers: &'a Peers,
    key: (u64, String),
}

impl Drop for NameUnderWay<'_> {
    fn drop(&mut self) {
        self.peers.under_way.lock().remove(&self.key);
    }
}

impl Peers {
    /// Set once the server serves its shard.
    pub fn start(
        &self,
        runtime: tokio::runtime::Handle,
        seed: String,
        options: ConnectOptions,
        shards: u16,
    ) {
        let _ = self.shards.set(shards);
        let _ = self.runtime.set(runtime);
        let _ = self.seed.set(seed);
        let _ = self.options.set(options);
    }

    /// The runtime peer requests and the scrub run on, once started.
    pub fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.runtime.get()
    }

    /// The cluster's peer secret as last read; None before the first read (outside a
    /// cluster, always): then no connection proves itself a peer.
    pub fn key(&self) -> Option<Arc<PeerKey>> {
        self.key.read().clone()
    }

    /// Takes the cluster's peer secret as read from etcd; whether it changed.
    pub fn set_key(&self, key: PeerKey) -> bool {
        let mut held = self.key.write();
        if held.as_deref() == Some(&key) {
            return false;
        }
        *held = Some(Arc::new(key));
        true
    }

    /// Whether the cluster has shard `shard` (false before the server serves one).
    pub fn has_shard(&self, shard: u16) -> bool {
        self.shards.get().is_some_and(|&n| shard < n)
    }

    /// Marks `(parent, name)` under way; None if another MKDIR_REMOTE or RMDIR of it is.
    pub fn begin(&self, parent: u64, name: &str) -> Option<NameUnderWay<'_>> {
        let key = (parent, name.to_owned());
        // The lock is let go before a guard is made: `then_some` would make (and drop) one
        // for a name already under way, whose drop takes the lock again — a deadlock of the
        // partition, and the other operation's name let go (issue 54's table found it).
        let inserted = self.under_way.lock().insert(key.clone());
        inserted.then(|| NameUnderWay { peers: self, key })
    }

    pub fn is_under_way(&self, parent: u64, name: &str) -> bool {
        self.under_way.lock().contains(&(parent, name.to_owned()))
    }

    /// Sends what [`Peers::call`] sends through `other_shards` instead of the router.
    pub fn reach_through(&self, other_shards: Arc<dyn OtherShards>) {
        let _ = self.other_shards.set(other_shards);
    }

    /// Sends `op` as root to the shard that serves it (`shard`'s, for MAKE_PENDING_DIR): its
    /// answer; EINVAL for a shard the cluster does not have; EIO when that shard cannot be
    /// reached within [`PEER_TIMEOUT`].
    pub async fn call(&self, op: Op) -> Result<Body, Errno> {
        if let Op::MakePendingDir { shard, .. } = &op
            && !self.has_shard(*shard)
        {
            return Err(Errno::EINVAL);
        }
        match self.other_shards.get() {
            Some(other_shards) => other_shards.call(op).await,
            None => self.call_through_router(op).await,
        }
    }

    /// [`Peers::call`] through the router, on the cluster thread's runtime.
    async fn call_through_router(&self, op: Op) -> Result<Body, Errno> {
        let Some(runtime) = self.runtime.get() else {
            return Err(Errno::EIO);
        };
        let Some(key) = self.key() else {
            warn!("cannot reach the cluster's other shards: no peer secret read from etcd yet");
            return Err(Errno::EIO);
        };
        let router = {
            let mut held = self.router.lock().await;
            match &*held {
                Some((proved, router)) if **proved == *key => router.clone(),
                _ => {
                    let seed = self.seed.get().cloned().unwrap_or_default();
                    let options = self.options.get().cloned().unwrap_or_default();
                    let proving = key.clone();
                    let connect = runtime
                        .spawn(async move { Router::connect_peer(&seed, &options, proving).await });
                    let router = match connect.await {
                        Ok(Ok(router)) => Arc::new(router),
                        Ok(Err(e)) => {
                            warn!(cause = %e, "cannot reach the cluster's other shards");
                            return Err(Errno::EIO);
                        }
                        Err(_) => return Err(Errno::EIO),
                    };
                    *held = Some((key, router.clone()));
                    router
                }
            }
        };
        let shard = match &op {
            Op::MakePendingDir { shard, .. } => Some(*shard),
            _ => None,
        };
        let asked = runtime.spawn(async move {
            let call = async {
                loop {
                    let answer = match shard {
                        Some(shard) => router.call_shard(shard, op.clone()).await,
                        None => router.call(op.clone()).await,
                    };
                    match answer {
                        // No owner yet (a standby is taking it over, or this server has not
                        // seen its claim): asked again until the timeout.
                        Err(e) if e.errno() == Some(Errno::EREMOTE) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        // The connection to that shard broke — its owner died, maybe long
                        // ago, and a standby serves it now — and the router dropped it; the
                        // next call reads the map and connects afresh. Sending the step again
                        // is safe even if the first one executed: a second pending directory
                        // is one no entry names, which the child's scrub deletes, and a
                        // second "being removed" mark supersedes the first.
                        Err(ClientError::Disconnected | ClientError::Io(_)) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        done => return done,
                    }
                }
            };
            tokio::time::timeout(PEER_TIMEOUT, call).await
        });
        match asked.await {
            Ok(Ok(Ok(body))) => Ok(body),
            Ok(Ok(Err(ClientError::Errno(e)))) => Err(e),
            Ok(Ok(Err(e))) => {
                warn!(cause = %e, "a request to another shard failed");
                Err(Errno::EIO)
            }
            Ok(Err(_)) => {
                warn!("another shard did not answer within {PEER_TIMEOUT:?}");
                Err(Errno::EIO)
            }
            Err(_) => Err(Errno::EIO),
        }
    }
}
