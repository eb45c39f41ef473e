//! Which connection a request goes on. Outside a cluster there is one: to the server the mount
//! was given. In a cluster — that server's SHARD_MAP names its shard — each request goes to the
//! shard of the inode that routes it (`Op::routing_ino`, as the client library's `Router`
//! routes), each shard over a [`Conn`] of its own with its own session (sessions, transnos,
//! resend records and replays are per shard), opened the first time a request needs that
//! shard, at the address the shard map gives; the map is read again when it names no server
//! for the shard, or names one that turns out to serve another. A connection then follows its
//! shard to a standby by itself. So a mount given any one server's address serves the whole
//! cluster's namespace: a directory made on another shard (`mdsctl mkdir --shard N`) is
//! entered like any other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::Errno;
use mds_client::ConnectOptions;
use mds_client::proto::{Op, ROOT_INO, ShardMap, shard_of};
use parking_lot::{Mutex, RwLock};
use tracing::{info, warn};

use crate::attr::Fallible;
use crate::conn::Conn;
use crate::durability::Durability;

/// How long a request waits for its shard to have a server it can reach (a shard whose owner
/// just died has none until a standby takes it over) before it is answered EIO.
const FIND_SHARD: Duration = Duration::from_secs(15);

pub struct Shards {
    options: ConnectOptions,
    reconnect_timeout: Duration,
    /// Whether the server it was given is a shard of a cluster (a server never changes that).
    cluster: bool,
    /// The shard map as last read.
    map: Mutex<ShardMap>,
    /// One connection per shard spoken to (outside a cluster, the one server's, as shard 0).
    conns: RwLock<HashMap<u16, Arc<Conn>>>,
    /// Held while a connection to a shard is opened, so that one request opens it and the
    /// others wait for it.
    opening: tokio::sync::Mutex<()>,
    /// What fsync waits for, per shard: each new connection's session is added to it.
    pub durability: Durability,
}

impl Shards {
    /// Connects to `server` (any server of a cluster, or the one server outside one) and
    /// reads its shard map.
    pub async fn connect(
        server: &str,
        options: ConnectOptions,
        reconnect_timeout: Duration,
    ) -> anyhow::Result<Shards> {
        let first = Conn::connect(server, options.clone(), reconnect_timeout).await?;
        let map = first
            .shard_map()
            .await
            .map_err(|e| anyhow::anyhow!("SHARD_MAP of {server}: errno {}", e.code()))?;
        let shard = map.shard.unwrap_or(0);
        let durability = Durability::new();
        durability.track(shard, first.session().clone());
        if let Some(shard) = map.shard {
            info!(
                shard,
                shards = map.shards.len(),
                "{server} serves shard {shard} of a cluster: requests go to their inode's shard"
            );
        }
        Ok(Shards {
            options,
            reconnect_timeout,
            cluster: map.shard.is_some(),
            map: Mutex::new(map),
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
        let conn = Arc::new(self.open_shard(shard).await?);
        self.durability.track(shard, conn.session().clone());
        self.conns.write().insert(shard, conn.clone());
        Ok(conn)
    }

    /// A new connection to the server of `shard`, as the shard map says, reading the map again
    /// while it names none or names one that serves another shard now; EIO after
    /// [`FIND_SHARD`].
    async fn open_shard(&self, shard: u16) -> Fallible<Conn> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            if let Some(address) = self.located(shard) {
                match Conn::connect(&address, self.options.clone(), self.reconnect_timeout).await {
                    Ok(conn) => match conn.shard_map().await {
                        Ok(map) if map.shard == Some(shard) => {
                            info!(shard, %address, "connected to shard {shard}");
                            return Ok(conn);
                        }
                        Ok(map) => {
                            warn!(shard, %address, serves = ?map.shard, "not the shard's server");
                        }
                        Err(e) => warn!(shard, %address, errno = e.code(), "SHARD_MAP failed"),
                    },
                    Err(cause) => warn!(shard, %address, %cause, "cannot connect to the shard"),
                }
            }
            if started.elapsed() >= FIND_SHARD {
                warn!(shard, "no server of shard {shard} answers: EIO");
                return Err(Errno::EIO);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            self.refresh().await;
        }
    }

    fn located(&self, shard: u16) -> Option<String> {
        let map = self.map.lock();
        map.shards
            .iter()
            .find(|s| s.shard == shard)
            .map(|s| s.address.clone())
    }

    /// Reads the shard map again from a shard the mount is connected to.
    async fn refresh(&self) {
        for (_, conn) in self.open() {
            if let Ok(map) = conn.shard_map().await {
                *self.map.lock() = map;
                return;
            }
        }
    }
}
