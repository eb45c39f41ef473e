//! The state every request of the mount shares: the connections (one per shard in a
//! cluster), the callers' groups, what fsync must wait for, the files and directories open, and the cache timeouts the kernel is
//! given. Operations are `async` methods of [`Mount`], one module per family (`namespace`,
//! `files`, `dirs`, `locks`), above this one; what an open file or directory keeps is in `open`,
//! below it. `fs` hands each FUSE request to one of the operations on the runtime.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use mds_client::proto::{Body, Cred, Op};
use parking_lot::Mutex;
use tracing::warn;

use crate::attr::{Fallible, errno};
use crate::conn::Conn;
use crate::creds::{Caller, Groups};
use crate::durability::{Durability, touched_by};
use crate::objects::Objects;
use crate::open::{OpenDir, OpenFile, RecentDirs};
use crate::shards::Shards;

/// How often [`Mount::keep_connected`] looks at the connections: well within a server's
/// recovery window (30 s by default), reconnect and replays included.
const KEEP_EVERY: Duration = Duration::from_secs(1);

/// How long the kernel may keep what it was told.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// An inode's attributes (`attr_timeout`).
    pub attr: Duration,
    /// A name's inode (`entry_timeout`).
    pub entry: Duration,
}

pub struct Mount {
    pub shards: Shards,
    /// The mount's own credentials (the process's), for SYNC and STATFS.
    own: Cred,
    pub groups: Groups,
    pub timeouts: Timeouts,
    /// The kernel checks permissions itself (`default_permissions`): ACCESS and OPENDIR are
    /// not asked of the server.
    pub kernel_checks: bool,
    /// Open files by FUSE file handle (the server's handle number).
    pub files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    /// Open directories by FUSE file handle (numbered apart from files).
    pub dirs: Mutex<HashMap<u64, Arc<OpenDir>>>,
    pub next_dir: AtomicU64,
    /// The attributes of the directories the kernel was last told of, for OPENDIR.
    pub recent_dirs: RecentDirs,
    /// Tells the kernel what it keeps is stale; set once the session exists.
    notifier: std::sync::OnceLock<fuser::Notifier>,
    /// The object store file data past the server's inline cap is in (`data.rs`); None when
    /// the server names none or it cannot be opened here.
    pub objects: Option<Objects>,
    /// (inode, lock owner, file handle) this mount has taken a lock for on the server, not
    /// yet released at a close: whose FLUSH or RELEASE must release them (`locks`).
    pub locked: Mutex<std::collections::HashSet<(u64, u64, u64)>>,
    /// Each locked inode's (ctime, mtime, size) when this mount was last granted a lock of it:
    /// a lock that finds them unmoved keeps the kernel's cached pages (`locks`).
    pub lock_seen: Mutex<HashMap<u64, (i64, i64, u64)>>,
}

impl Mount {
    pub fn new(
        shards: Shards,
        timeouts: Timeouts,
        kernel_checks: bool,
        objects: Option<Objects>,
    ) -> Mount {
        let own = shards.any().session().cred().clone();
        Mount {
            shards,
            own,
            groups: Groups::default(),
            timeouts,
            kernel_checks,
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            recent_dirs: RecentDirs::default(),
            notifier: std::sync::OnceLock::new(),
            objects,
            locked: Mutex::default(),
            lock_seen: Mutex::default(),
        }
    }

    /// The session's notifier, through which [`Mount::forget_attributes`] reaches the kernel.
    pub fn set_notifier(&self, notifier: fuser::Notifier) {
        self.notifier.set(notifier).ok();
    }

    /// Has the kernel drop its attributes of `ino` (its pages stay), so that the next stat,
    /// permission check or exec asks the server again: for a change the server made that no
    /// reply of the kernel's request shows it, as a WRITE that cleared set-ID bits.
    pub fn forget_attributes(&self, ino: u64) {
        if let Some(notifier) = self.notifier.get()
            // A negative offset: the attributes alone, not the page cache.
            && let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), -1, 0)
        {
            tracing::debug!(ino, cause = %e, "the kernel did not take an invalidation");
        }
    }

    /// Has the kernel forget what it keeps of `ino` — its attributes and its cached pages —
    /// and this mount the layout it kept of the file in objects: what a lock just granted
    /// may have let another mount change (NFS's rule for data under locks).
    pub fn forget_cached_data(&self, ino: u64) {
        self.forget_layout(ino);
        if let Some(notifier) = self.notifier.get()
            // From offset 0 to the end: every page, and the attributes.
            && let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), 0, 0)
        {
            tracing::debug!(ino, cause = %e, "the kernel did not take an invalidation");
        }
    }

    /// For the mount's life: every [`KEEP_EVERY`], a PING on each connection whose session
    /// has something at stake in a restart of its server (`Conn::has_stake`). The client
    /// library notices a restart only when it sends, and a restarted server waits for the
    /// clients it knew only as long as its recovery window: a mount nobody used in that time
    /// lost what it had answered early, though it was up all along (issue 55).
    pub async fn keep_connected(self: Arc<Mount>) {
        let mut tick = tokio::time::interval(KEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for (_, conn) in self.shards.open() {
                if conn.has_stake() {
                    let cred = self.own.clone();
                    tokio::spawn(async move { conn.ping(&cred).await });
                }
            }
        }
    }

    /// The credentials `caller`'s requests carry.
    pub fn cred(&self, caller: Caller) -> Cred {
        self.groups.cred(caller)
    }

    /// The mount's own credentials (for SYNC and STATFS, which check none).
    pub fn own_cred(&self) -> &Cred {
        &self.own
    }

    /// What fsync waits for.
    pub fn durability(&self) -> &Durability {
        &self.shards.durability
    }

    /// The connection to the shard of `ino`.
    pub async fn conn_of(&self, ino: u64) -> Fallible<(u16, Arc<Conn>)> {
        let shard = self.shards.of(ino);
        Ok((shard, self.shards.conn(shard).await?))
    }

    /// Sends `op` on behalf of `cred` and returns its answer's body. What it changes is noted
    /// for fsync: the inodes the request names (`durability::touched_by`), the inode it
    /// created, and `also` (what the request cannot name: a rename's moved and replaced
    /// inodes).
    pub async fn call(&self, cred: &Cred, op: Op, also: &[u64]) -> Fallible<Body> {
        let creates = op.creates_inode();
        let mut inodes = touched_by(&op, 0);
        inodes.extend_from_slice(also);
        let shard = self.shards.of_op(&op);
        let reply = self.shards.conn(shard).await?.call(cred, op).await?;
        if creates && let Ok(Body::Attr(attr)) = &reply.result {
            inodes.push(attr.ino);
        }
        self.durability().note(shard, &reply, &inodes);
        reply.result.map_err(errno)
    }

    /// Sends SYNC to every shard the mount talks to: returns once everything they executed so
    /// far is durable.
    pub async fn sync(&self) -> Fallible<()> {
        let shards: Vec<u16> = self.shards.open().into_iter().map(|(s, _)| s).collect();
        self.sync_shards(&shards).await
    }

    /// SYNC on each of `shards`, together.
    async fn sync_shards(&self, shards: &[u16]) -> Fallible<()> {
        let cred = self.own_cred();
        let syncs = shards.iter().map(|&shard| async move {
            let reply = self.shards.conn(shard).await?.call(cred, Op::Sync).await?;
            reply.result.map(drop).map_err(|e| {
                warn!(shard, errno = e.name(), "SYNC failed");
                errno(e)
            })
        });
        futures::future::try_join_all(syncs).await.map(drop)
    }

    /// fsync, fdatasync and fsync of a directory on `ino`, for an open file or directory that
    /// was last told of the loss `told` (updated when it is told of a newer one): EIO for a
    /// loss that touched `ino` since; at once when `last_committed` covers every early reply
    /// that touched it; otherwise after a SYNC. Never ENOSYS: the kernel would stop sending
    /// fsync at all.
    pub async fn fsync(&self, ino: u64, told: &AtomicU64) -> Fallible<()> {
        use std::sync::atomic::Ordering;
        let check = || match self
            .durability()
            .lost_since(ino, told.load(Ordering::Relaxed))
        {
            Some(loss) => {
                told.fetch_max(loss, Ordering::Relaxed);
                Err(fuser::Errno::EIO)
            }
            None => Ok(()),
        };
        check()?;
        let pending = self.durability().pending(ino);
        if !pending.is_empty() {
            self.sync_shards(&pending).await?;
        }
        // A restart during the SYNC may have refused the very change it waited for.
        check()
    }
}
