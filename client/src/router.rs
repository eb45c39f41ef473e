//! Requests across a cluster's shards, given any one server's address: the [`Router`] asks
//! that server for the shard map (SHARD_MAP), keeps one [`Client`] — one connection and one
//! session — per shard it talks to, and sends each request to the shard of the inode it names
//! ([`Op::routing_ino`]). A server that does not hold that inode answers EREMOTE before it
//! does anything, so the router then reads the map again (an owner may have moved) and sends
//! the request once more. A router given a [`MapWatch`] ([`Router::following`]) also takes
//! each new map the watch brings before its next request, dropping its connections to shards
//! whose owner changed: a request after a takeover goes to the new owner at once instead of
//! failing on the old one's connection. Paths resolve one LOOKUP at a time, each on its
//! directory's shard. Outside a cluster the map is empty and every request goes to the one
//! server.
//!
//! The client library stays free of etcd: only servers read it, and they answer SHARD_MAP.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mds_proto::{
    Attr, Body, Cred, DirEntry, Errno, Kind, Op, OpenFlags, RenameHow, SetAttr, ShardMap, StatFs,
    XattrSet, shard_of,
};

use crate::auth::PeerKey;
use crate::client::{Client, ConnectOptions};
use crate::error::{ClientError, Result};
use crate::handles::Handle;
use crate::session::Session;
use crate::watch::MapWatch;

/// Connections to the shards of one cluster (or to one server outside a cluster).
pub struct Router {
    options: ConnectOptions,
    /// The address the router was given: asked for the map again when no connection is left.
    seed: String,
    map: parking_lot::Mutex<ShardMap>,
    /// One connection per shard it has talked to (shard 0 outside a cluster).
    conns: tokio::sync::Mutex<HashMap<u16, Client>>,
    /// The credentials of every session it opens (None: the process's).
    cred: Option<Cred>,
    /// A server's router to the other shards of its cluster: every session it opens is a
    /// peer's ([`Session::peer`]), proving this secret.
    peer: Option<Arc<PeerKey>>,
    /// The cluster's map as it changes, if the router was given a watch.
    watch: Option<MapWatch>,
    /// How many of the watch's maps it has taken in.
    seen: AtomicU64,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("seed", &self.seed)
            .field("map", &*self.map.lock())
            .finish_non_exhaustive()
    }
}

/// A new session with `cred` (None: the process's), or a peer's proving `peer`.
fn new_session(cred: Option<&Cred>, peer: Option<&Arc<PeerKey>>) -> Arc<Session> {
    Arc::new(match peer {
        Some(key) => Session::peer(key.clone()),
        None => cred.cloned().map_or_else(Session::new, Session::with_cred),
    })
}

impl Router {
    /// Connects to `addr` (any server of the cluster) and reads the shard map from it.
    pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Router> {
        Router::connect_as(addr, options, None).await
    }

    /// As [`Router::connect`], every session speaking with `cred` (a server asking another
    /// shard for what a client asked it: root's).
    pub async fn connect_as(
        addr: &str,
        options: &ConnectOptions,
        cred: Option<Cred>,
    ) -> Result<Router> {
        Router::connect_sessions(addr, options, cred, None).await
    }

    /// As [`Router::connect`], for a server of a cluster asking the other shards what only
    /// servers ask (a remote directory's steps, the scrub's question): every session a
    /// peer's, connecting with PEER_CONNECT and proving `key`, the cluster's peer secret,
    /// with root's credentials.
    pub async fn connect_peer(
        addr: &str,
        options: &ConnectOptions,
        key: Arc<PeerKey>,
    ) -> Result<Router> {
        Router::connect_sessions(addr, options, None, Some(key)).await
    }

    async fn connect_sessions(
        addr: &str,
        options: &ConnectOptions,
        cred: Option<Cred>,
        peer: Option<Arc<PeerKey>>,
    ) -> Result<Router> {
        let first =
            Client::connect_with(addr, new_session(cred.as_ref(), peer.as_ref()), options).await?;
        let map = first.shard_map().await?;
        let mut conns = HashMap::new();
        conns.insert(map.shard.unwrap_or(0), first);
        Ok(Router {
            options: options.clone(),
            seed: addr.to_owned(),
            map: parking_lot::Mutex::new(map),
            conns: tokio::sync::Mutex::new(conns),
            cred,
            peer,
            watch: None,
            seen: AtomicU64::new(0),
        })
    }

    /// The router, taking each new map `watch` brings before its next request (a watch of
    /// the same cluster: `MapWatch::start` with any of its servers' addresses).
    pub fn following(mut self, watch: MapWatch) -> Router {
        self.watch = Some(watch);
        self
    }

    /// Takes in the watch's map if it published one since the last look: its owners and
    /// servers, and the connections to shards whose owner (address or epoch) changed are
    /// dropped — the next request to one connects to its new owner.
    async fn take_watched_map(&self) {
        let Some(watch) = &self.watch else {
            return;
        };
        let published = watch.published();
        if self.seen.swap(published, Ordering::AcqRel) == published {
            return;
        }
        let watched = watch.latest();
        let before = {
            let mut map = self.map.lock();
            map.servers.clone_from(&watched.map.servers);
            std::mem::replace(&mut map.shards, watched.map.shards.clone())
        };
        let at = |shards: &[mds_proto::ShardLocation], shard: u16| {
            shards.iter().find(|s| s.shard == shard).cloned()
        };
        self.conns
            .lock()
            .await
            .retain(|&shard, _| at(&before, shard) == at(&watched.map.shards, shard));
    }

    /// A new session for a connection, with the router's credentials.
    fn session(&self) -> Arc<Session> {
        new_session(self.cred.as_ref(), self.peer.as_ref())
    }

    /// The shard map as last read.
    pub fn map(&self) -> ShardMap {
        self.map.lock().clone()
    }

    fn in_cluster(&self) -> bool {
        self.map.lock().shard.is_some()
    }

    /// The connection to the shard that holds `ino` (connecting to it the first time).
    fn shard_for(&self, ino: u64) -> u16 {
        if self.in_cluster() { shard_of(ino) } else { 0 }
    }

    pub async fn for_ino(&self, ino: u64) -> Result<Client> {
        self.take_watched_map().await;
        let shard = self.shard_for(ino);
        if let Some(client) = self.conns.lock().await.get(&shard) {
            return Ok(client.clone());
        }
        let address = self.address_of(shard).await?;
        let client = match Client::connect_with(&address, self.session(), &self.options).await {
            Ok(client) => client,
            // The map may be old: the shard's owner went, a standby took it over elsewhere.
            Err(ClientError::Io(_) | ClientError::Disconnected) => {
                self.refresh().await?;
                let address = self.address_of(shard).await?;
                Client::connect_with(&address, self.session(), &self.options).await?
            }
            Err(e) => return Err(e),
        };
        Ok(self
            .conns
            .lock()
            .await
            .entry(shard)
            .or_insert(client)
            .clone())
    }

    /// The server of `shard`, reading the map again if it does not say.
    async fn address_of(&self, shard: u16) -> Result<String> {
        if let Some(address) = self.located(shard) {
            return Ok(address);
        }
        self.refresh().await?;
        self.located(shard)
            .ok_or(ClientError::Errno(Errno::EREMOTE))
    }

    fn located(&self, shard: u16) -> Option<String> {
        self.map
            .lock()
            .shards
            .iter()
            .find(|s| s.shard == shard)
            .map(|s| s.address.clone())
    }

    /// Reads the map again from a server it is connected to (or the seed), and forgets the
    /// connections whose shard moved to another address.
    pub async fn refresh(&self) -> Result<()> {
        let any = self.conns.lock().await.values().next().cloned();
        let map = match any {
            Some(client) => client.shard_map().await,
            None => Err(ClientError::Disconnected),
        };
        let map = if let Ok(map) = map {
            map
        } else {
            let seed = Client::connect_with(&self.seed, self.session(), &self.options).await?;
            seed.shard_map().await?
        };
        let before = std::mem::replace(&mut *self.map.lock(), map.clone());
        let mut conns = self.conns.lock().await;
        conns.retain(|shard, _| {
            let at = |m: &ShardMap| m.shards.iter().find(|s| s.shard == *shard).cloned();
            at(&before) == at(&map) || map.shard == Some(*shard)
        });
        Ok(())
    }

    /// Runs `call` on the connection of `ino`'s shard; after an EREMOTE (the map moved), once
    /// more on the shard the fresh map names.
    async fn on<T, F, Fut>(&self, ino: u64, call: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match call(self.for_ino(ino).await?).await {
            Err(e) if e.errno() == Some(Errno::EREMOTE) && !matches!(e, ClientError::Remote(_)) => {
                self.refresh().await?;
                self.conns.lock().await.remove(&self.shard_for(ino));
                call(self.for_ino(ino).await?).await
            }
            // The connection is gone (its server stopped or moved): the next request opens
            // another. This one is not sent again — it may have executed, and a new
            // connection is a new session, which could not tell.
            Err(e @ (ClientError::Disconnected | ClientError::Io(_))) => {
                self.conns.lock().await.remove(&self.shard_for(ino));
                Err(e)
            }
            done => done,
        }
    }

    /// Any request, to the shard of the inode it names (what names none goes to the first
    /// connection: PING, STATFS).
    pub async fn call(&self, op: Op) -> Result<Body> {
        let ino = op.routing_ino().unwrap_or(crate::ROOT);
        self.on(ino, |c| {
            let op = op.clone();
            async move { c.call(op).await }
        })
        .await
    }

    /// Any request, to `shard` (one that names its shard rather than an inode).
    pub async fn call_shard(&self, shard: u16, op: Op) -> Result<Body> {
        let ino = u64::from(shard) << mds_proto::SHARD_SHIFT;
        self.on(ino, |c| {
            let op = op.clone();
            async move { c.call(op).await }
        })
        .await
    }

    /// MKDIR_REMOTE: a directory whose inode and contents live on `shard`, its entry in
    /// `parent` (on `parent`'s shard, which makes both).
    pub async fn mkdir_on(&self, parent: u64, name: &str, mode: u32, shard: u16) -> Result<Attr> {
        self.on(parent, |c| async move {
            let op = Op::MkdirRemote {
                parent,
                name: name.into(),
                mode,
                shard,
            };
            match c.call(op).await? {
                Body::Attr(a) => Ok(a),
                other => Err(ClientError::Protocol(format!(
                    "MKDIR_REMOTE answered {other:?}"
                ))),
            }
        })
        .await
    }

    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        self.on(parent, |c| async move { c.mkdir(parent, name, mode).await })
            .await
    }

    pub async fn create(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        self.on(
            parent,
            |c| async move { c.create(parent, name, mode).await },
        )
        .await
    }

    /// LOOKUP on the parent's shard; for an entry naming another shard's directory, its
    /// attributes from that shard.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        match self
            .on(parent, |c| async move { c.lookup(parent, name).await })
            .await
        {
            Err(ClientError::Remote(ino)) => self.getattr(ino).await,
            done => done,
        }
    }

    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        self.on(ino, |c| async move { c.getattr(ino).await }).await
    }

    pub async fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr> {
        self.on(ino, |c| {
            let set = set.clone();
            async move { c.setattr(ino, set).await }
        })
        .await
    }

    pub async fn readdir_all(&self, ino: u64) -> Result<Vec<DirEntry>> {
        self.on(ino, |c| async move { c.readdir_all(ino).await })
            .await
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        self.on(parent, |c| async move { c.unlink(parent, name).await })
            .await
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        self.on(parent, |c| async move { c.rmdir(parent, name).await })
            .await
    }

    /// RENAME, on the source directory's shard; a target on another shard is EXDEV.
    pub async fn rename_how(
        &self,
        sp: u64,
        sn: &str,
        dp: u64,
        dn: &str,
        how: RenameHow,
    ) -> Result<()> {
        self.on(
            sp,
            |c| async move { c.rename_how(sp, sn, dp, dn, how).await },
        )
        .await
    }

    /// LINK, on the new name's directory's shard; an inode on another shard is EXDEV.
    pub async fn link(&self, ino: u64, parent: u64, name: &str) -> Result<Attr> {
        self.on(parent, |c| async move { c.link(ino, parent, name).await })
            .await
    }

    pub async fn symlink(&self, parent: u64, name: &str, target: &[u8]) -> Result<Attr> {
        self.on(
            parent,
            |c| async move { c.symlink(parent, name, target).await },
        )
        .await
    }

    pub async fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.on(ino, |c| async move { c.readlink(ino).await }).await
    }

    pub async fn mknod(
        &self,
        parent: u64,
        name: &str,
        kind: Kind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr> {
        self.on(parent, |c| async move {
            c.mknod(parent, name, kind, mode, rdev).await
        })
        .await
    }

    pub async fn setxattr(&self, ino: u64, name: &str, value: &[u8], how: XattrSet) -> Result<()> {
        self.on(
            ino,
            |c| async move { c.setxattr(ino, name, value, how).await },
        )
        .await
    }

    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        self.on(ino, |c| async move { c.getxattr(ino, name).await })
            .await
    }

    pub async fn listxattr(&self, ino: u64) -> Result<Vec<String>> {
        self.on(ino, |c| async move { c.listxattr(ino).await })
            .await
    }

    pub async fn removexattr(&self, ino: u64, name: &str) -> Result<()> {
        self.on(ino, |c| async move { c.removexattr(ino, name).await })
            .await
    }

    /// OPEN, on the file's shard; its handle then goes back there.
    pub async fn open(&self, ino: u64, flags: OpenFlags) -> Result<(Handle, Attr)> {
        self.on(ino, |c| async move { c.open(ino, flags).await })
            .await
    }

    pub async fn release(&self, handle: Handle) -> Result<()> {
        self.for_ino(handle.ino()).await?.release(handle).await
    }

    pub async fn write(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        self.for_ino(handle.ino())
            .await?
            .write(handle, offset, data)
            .await
    }

    pub async fn write_all(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        self.for_ino(handle.ino())
            .await?
            .write_all(handle, offset, data)
            .await
    }

    pub async fn read(&self, handle: Handle, offset: u64, len: u32) -> Result<Vec<u8>> {
        self.for_ino(handle.ino())
            .await?
            .read(handle, offset, len)
            .await
    }

    pub async fn read_to_end(&self, handle: Handle) -> Result<Vec<u8>> {
        self.for_ino(handle.ino()).await?.read_to_end(handle).await
    }

    /// STATFS of the root's shard (each shard counts its own namespace).
    pub async fn statfs(&self) -> Result<StatFs> {
        self.for_ino(crate::ROOT).await?.statfs().await
    }

    /// STATFS of `shard`'s server: its own figures, and its part of the namespace.
    pub async fn statfs_of(&self, shard: u16) -> Result<StatFs> {
        let ino = u64::from(shard) << mds_proto::SHARD_SHIFT;
        self.for_ino(ino).await?.statfs().await
    }

    /// SYNC on every shard this router has changed anything on.
    pub async fn sync(&self) -> Result<()> {
        let conns: Vec<Client> = self.conns.lock().await.values().cloned().collect();
        for client in conns {
            client.sync().await?;
        }
        Ok(())
    }

    /// The highest `last_committed` of the root's shard's connection.
    pub async fn last_committed(&self) -> u64 {
        match self.for_ino(crate::ROOT).await {
            Ok(client) => client.last_committed(),
            Err(_) => 0,
        }
    }

    /// Changes answered early and not committed yet, all shards.
    pub async fn unsafe_count(&self) -> usize {
        let conns = self.conns.lock().await;
        conns.values().map(|c| c.session().unsafe_count()).sum()
    }

    /// Resolves an absolute path from the root, each LOOKUP on its directory's shard.
    pub async fn resolve(&self, path: &str) -> Result<Attr> {
        crate::paths::resolve(self, path).await
    }

    /// Resolves all but the last component: (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(u64, &'p str)> {
        crate::paths::resolve_parent(self, path).await
    }
}

impl crate::paths::Lookups for Router {
    async fn getattr(&self, ino: u64) -> Result<Attr> {
        Router::getattr(self, ino).await
    }

    async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        Router::lookup(self, parent, name).await
    }
}
