//! Which connection a request goes on. Outside a cluster there is one: to the server the mount
//! was given. In a cluster — that server's SHARD_MAP names its shard — each request goes to the
//! shard of the inode that routes it (`Op::routing_ino`, as the client library's `Router`
//! routes), each shard over a [`Conn`] of its own with its own session (sessions, transnos,
//! resend records and replays are per shard), opened the first time a request needs that
//! shard, at the owner the cluster's shard map names. The map comes from one watch (the
//! client library's `MapWatch`, long-polling SHARD_MAP_WAIT) that the first connection starts
//! and every other follows, so a new owner is known before a request to the old one fails, and
//! a connection follows its shard to a standby by itself. So a mount given any one server's
//! address serves the whole cluster's namespace: a directory made on another shard (`mdsctl
//! mkdir --shard N`) is entered like any other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fuser::Errno;
use mds_client::ConnectOptions;
use mds_client::proto::{Op, ROOT_INO, shard_of};
use parking_lot::RwLock;
use tracing::{info, warn};

use crate::attr::Fallible;
use crate::conn::{Conn, SessionAsks};
use crate::durability::Durability;

/// How long a request waits for its shard to have a server it can reach (a shard whose owner
/// just died has none until a standby takes it over) before it is answered EIO.
const FIND_SHARD: Duration = Duration::from_secs(15);

pub struct Shards {
    options: ConnectOptions,
    reconnect_timeout: Duration,
    /// What each connection's CONNECT says of its session.
    asks: SessionAsks,
    /// Whether the server it was given is a shard of a cluster (a server never changes that).
    cluster: bool,
    /// One connection per shard spoken to (outside a cluster, the one server's, as shard 0).
    conns: RwLock<HashMap<u16, Arc<Conn>>>,
    /// Held while a connection to a shard is opened, so that one request opens it and the
    /// others wait for it.
    opening: tokio::sync::Mutex<()>,
    /// What fsync waits for, per shard: each new connection's session is added to it.
    pub durability: Durability,
}

impl Shards {
    /// Connects to `server` (any server of a cluster, or the one server outside one).
    pub async fn connect(
        server: &str,
        options: ConnectOptions,
        reconnect_timeout: Duration,
        asks: SessionAsks,
    ) -> anyhow::Result<Shards> {
        let first = Conn::connect(server, options.clone(), reconnect_timeout, asks, None).await?;
        let cluster = first.shard().is_some();
        let shard = first.shard().unwrap_or(0);
        let durability = Durability::new();
        durability.track(shard, first.session().clone());
        if cluster {
            info!(
                shard,
                "{server} serves shard {shard} of a cluster: requests go to their inode's shard"
            );
        }
        Ok(Shards {
            options,
            reconnect_timeout,
            asks,
            cluster,
            conns: RwLock::new(HashMap::from([(shard, Arc::new(first))])),
            opening: tokio::sync::Mutex::new(()),
            durability,
        })
    }

    /// The shard of `ino` (outside a cluster, 0: the one server).
    pub fn of(&self, ino: u64) -> u16 {
        if self.cluster { shard_of(ino) } else { 0 }
    }

    /// The shard of the inode `op` names (the root's for what names none: STATFS, SYNC).
    pub fn of_op(&self, op: &Op) -> u16 {
        self.of(op.routing_ino().unwrap_or(ROOT_INO))
    }

    /// The connections open now, with their shards.
    pub fn open(&self) -> Vec<(u16, Arc<Conn>)> {
        let conns = self.conns.read();
        conns.iter().map(|(&s, c)| (s, c.clone())).collect()
    }

    /// Every shard of the cluster: those its map names an owner for, and those the mount is
    /// connected to (a shard between owners is missing from the map for a moment); outside a
    /// cluster, the one server's 0.
    pub fn all(&self) -> Vec<u16> {
        let mut shards: Vec<u16> = self.open().into_iter().map(|(s, _)| s).collect();
        if let Some(watch) = self.any().map_watch() {
            shards.extend(watch.latest().map.shards.iter().map(|s| s.shard));
        }
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// Any open connection: every one speaks with the mount's own credentials.
    pub fn any(&self) -> Arc<Conn> {
        let conns = self.conns.read();
        conns
            .values()
            .next()
            .cloned()
            .expect("the first connection is never removed")
    }

    /// The connection to `shard`, opened now if the mount has none yet.
    pub async fn conn(&self, shard: u16) -> Fallible<Arc<Conn>> {
        if let Some(conn) = self.conns.read().get(&shard) {
            return Ok(conn.clone());
        }
        let _opening = self.opening.lock().await;
        if let Some(conn) = self.conns.read().get(&shard) {
            return Ok(conn.clone()); // another request opened it meanwhile
        }
        let conn = Arc::new(
            tokio::time::timeout(FIND_SHARD, self.open_shard(shard))
                .await
                .map_err(|_| {
                    warn!(
                        shard,
                        "no server of shard {shard} answered within {FIND_SHARD:?}: EIO"
                    );
                    Errno::EIO
                })??,
        );
        self.durability.track(shard, conn.session().clone());
        self.conns.write().insert(shard, conn.clone());
        Ok(conn)
    }

    /// A new connection to the owner of `shard` as the cluster's map names it: waits for the
    /// map to name one, and tries again after a pause while the one named cannot be reached or
    /// turns out to serve another shard (the watch takes in the next map meanwhile). Bounded
    /// by the caller.
    async fn open_shard(&self, shard: u16) -> Fallible<Conn> {
        // Outside a cluster every inode is shard 0's, whose connection is never closed.
        let watch = self.any().map_watch().cloned().ok_or(Errno::EIO)?;
        loop {
            let watched = watch.wait_for(|w| w.owner_of(shard).is_some()).await;
            let address = watched.owner_of(shard).unwrap_or_default().to_owned();
            let opened = Conn::connect(
                &address,
                self.options.clone(),
                self.reconnect_timeout,
                self.asks,
                Some(watch.clone()),
            )
            .await;
            match opened {
                Ok(conn) if conn.shard() == Some(shard) => {
                    info!(shard, %address, "connected to shard {shard}");
                    return Ok(conn);
                }
                Ok(conn) => {
                    warn!(shard, %address, serves = ?conn.shard(), "not the shard's server");
                }
                Err(cause) => warn!(shard, %address, %cause, "cannot connect to the shard"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
