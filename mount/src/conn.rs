//! The mount's connection to one server (in a cluster, to one shard: `shards.rs` keeps one per
//! shard): the client library's reconnecting connection (`ResilientConn`: on a break it
//! reconnects as the same session, replays what was answered early, reopens the handles and
//! resends, and in a cluster follows its shard to a standby), with every request sent on
//! behalf of its caller's credentials. Three things a mount needs beyond it: a server that
//! stays away past the reconnect timeout makes the library give up on that connection for
//! good, so the next request tries a fresh one (as the same session, where the shard was last
//! served) and the mount comes back when the server does; a server that is full (EBUSY) is
//! asked again after a pause instead of failing a program's system call; and the library
//! notices a break only when it sends, so a mount nobody uses that has something at stake in
//! a restart of its server — changes to replay, handles to reopen — sends a PING now and then
//! ([`Conn::ping`], from `Mount::keep_connected`): a restarted server waits for the clients it
//! knew only as long as its recovery window.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fuser::Errno;
use mds_client::proto::{self, Cred, Op, OpenFlags, Reply};
use mds_client::resilient::{Answer, Gone, Outages, ResilientConn};
use mds_client::{ClientError, ConnectOptions, Handle, MapWatch, Session};
use tracing::{error, info, warn};

use crate::attr::Fallible;

/// How long the first connection may take: past it, `mdsmount` fails rather than mounting a
/// file system that cannot answer.
const FIRST_CONNECT: Duration = Duration::from_secs(10);

/// How long a fresh connection after a given-up one may take before the request that tried
/// it is answered EIO (the next request tries again).
const FRESH_CONNECT: Duration = Duration::from_secs(5);

/// How long a request is asked again while the server answers EBUSY.
const BUSY_FOR: Duration = Duration::from_secs(30);

pub struct Conn {
    /// TLS and the shared key, for every fresh connection.
    options: ConnectOptions,
    session: Arc<Session>,
    reconnect_timeout: Duration,
    outages: Arc<Outages>,
    /// The cluster's map as it changes, shared by the mount's connections; None outside a
    /// cluster.
    watch: Option<MapWatch>,
    /// The connection in use; replaced when the library gave up on it.
    current: parking_lot::RwLock<Arc<ResilientConn>>,
    /// Held while a fresh connection is tried, so that one request tries and the others
    /// wait for its outcome.
    replacing: tokio::sync::Mutex<()>,
    /// A [`Conn::ping`] is under way.
    pinging: AtomicBool,
}

/// What each CONNECT of the mount's sessions says of them: how reads move atimes (the
/// mount's `relatime`, `noatime`, `strictatime`) and when changes are answered (`-o ack`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionAsks {
    pub atime: proto::Atime,
    pub ack: proto::AckAsked,
}

impl Conn {
    /// Connects to `server` as a new session with this process's credentials; in a cluster,
    /// following the shard map through `watch` (None: the connection starts a watch of its
    /// own, which [`Conn::map_watch`] then lends to the mount's other connections).
    pub async fn connect(
        server: &str,
        options: ConnectOptions,
        reconnect_timeout: Duration,
        asks: SessionAsks,
        watch: Option<MapWatch>,
    ) -> anyhow::Result<Conn> {
        let session = Arc::new(Session::new().with_atime(asks.atime).with_ack(asks.ack));
        let outages = Outages::new();
        let first = open(
            server,
            &options,
            &session,
            reconnect_timeout,
            &outages,
            watch.as_ref(),
        );
        let conn = tokio::time::timeout(FIRST_CONNECT, first)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {FIRST_CONNECT:?}"))?
            .with_context(|| format!("connecting to {server}"))?;
        let watch = watch.or_else(|| conn.map_watch().cloned());
        Ok(Conn {
            options,
            session,
            reconnect_timeout,
            outages,
            watch,
            current: parking_lot::RwLock::new(Arc::new(conn)),
            replacing: tokio::sync::Mutex::new(()),
            pinging: AtomicBool::new(false),
        })
    }

    /// The cluster's shard map as it changes; None outside a cluster.
    pub fn map_watch(&self) -> Option<&MapWatch> {
        self.watch.as_ref()
    }

    /// The shard its server serves; None outside a cluster.
    pub fn shard(&self) -> Option<u16> {
        self.current.read().shard_map().shard
    }

    /// The session every connection of the mount speaks for.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Whether a restart of the server would cost this session something if it came back
    /// only after the server's recovery window: changes answered early and not known to be
    /// durable (a reconnect replays them; the window's end refuses them), or handles (a
    /// reconnect reopens them; a file unlinked while open is reclaimed when the window ends
    /// unless its holders came back).
    pub fn has_stake(&self) -> bool {
        self.session.unsafe_count() > 0 || self.session.open_handles() > 0
    }

    /// A PING on behalf of `cred`, unless one is under way: on a connection a restart of the
    /// server broke, the library reconnects, replays and reopens before it is answered.
    pub async fn ping(&self, cred: &Cred) {
        if self.pinging.swap(true, Ordering::AcqRel) {
            return;
        }
        // A failure is the server staying away, which `call` logs.
        let _ = self.call(cred, Op::Ping).await;
        self.pinging.store(false, Ordering::Release);
    }

    /// Sends `op` on behalf of `cred`: the server's whole reply (its transno and
    /// `last_committed` say what fsync must wait for), or EIO when the server cannot be
    /// reached.
    pub async fn call(&self, cred: &Cred, op: Op) -> Fallible<Reply> {
        self.busy_retried(|conn| {
            let op = op.clone();
            async move { conn.call_as(cred, op).await }
        })
        .await
    }

    /// Sends `op` (a READ, WRITE or SETATTR built by `handle`) through the open `handle`.
    pub async fn call_on(&self, cred: &Cred, handle: Handle, op: Op) -> Fallible<Reply> {
        self.busy_retried(|conn| {
            let op = op.clone();
            async move { conn.call_on_as(cred, handle, op).await }
        })
        .await
    }

    /// OPENs `ino` on behalf of `cred`; the handle is open if the reply is.
    pub async fn open(&self, cred: &Cred, ino: u64, flags: OpenFlags) -> Fallible<(Handle, Reply)> {
        let started = Instant::now();
        loop {
            let conn = self.live().await?;
            let (handle, answer) = conn.open_as(cred, ino, flags).await.map_err(gone)?;
            if !self.pause_if_busy(&answer, started).await {
                return Ok((handle, answer.reply));
            }
        }
    }

    /// RELEASEs `handle` (the session forgets it once answered).
    pub async fn release(&self, handle: Handle) -> Fallible<Reply> {
        self.busy_retried(|conn| async move { conn.release(handle).await })
            .await
    }

    /// Runs `send` on the live connection until its answer is not EBUSY or [`BUSY_FOR`] has
    /// passed; a request answered EBUSY did not execute, so asking again (with a new xid) is
    /// safe.
    async fn busy_retried<'a, F, Fut>(&'a self, send: F) -> Fallible<Reply>
    where
        F: Fn(Arc<ResilientConn>) -> Fut,
        Fut: Future<Output = Result<Answer, Gone>> + 'a,
    {
        let started = Instant::now();
        loop {
            let conn = self.live().await?;
            let answer = send(conn).await.map_err(gone)?;
            if !self.pause_if_busy(&answer, started).await {
                return Ok(answer.reply);
            }
        }
    }

    /// Whether `answer` is an EBUSY to ask again about (after a pause, taken here).
    async fn pause_if_busy(&self, answer: &Answer, started: Instant) -> bool {
        if answer.reply.result != Err(proto::Errno::EBUSY) || started.elapsed() > BUSY_FOR {
            return false;
        }
        let pause = Duration::from_millis(10)
            .saturating_mul(1 << started.elapsed().as_secs().min(6))
            .min(Duration::from_secs(1));
        tokio::time::sleep(pause).await;
        true
    }

    /// The connection to send on: the current one, or — when the library gave up on it —
    /// a fresh one as the same session (it replays and reopens as any reconnect does).
    async fn live(&self) -> Fallible<Arc<ResilientConn>> {
        let current = self.current.read().clone();
        if !current.is_dead() {
            return Ok(current);
        }
        let _replacing = self.replacing.lock().await;
        let current = self.current.read().clone();
        if !current.is_dead() {
            return Ok(current); // another request replaced it meanwhile
        }
        // Where the given-up connection last was: its shard may have moved to a standby.
        let server = current.server();
        let fresh = open(
            &server,
            &self.options,
            &self.session,
            self.reconnect_timeout,
            &self.outages,
            self.watch.as_ref(),
        );
        match tokio::time::timeout(FRESH_CONNECT, fresh).await {
            Ok(Ok(conn)) => {
                info!(%server, "connected again after giving up on the server");
                let conn = Arc::new(conn);
                *self.current.write() = conn.clone();
                Ok(conn)
            }
            Ok(Err(cause)) => {
                warn!(%server, %cause, "server still unreachable: EIO");
                Err(Errno::EIO)
            }
            Err(_) => {
                warn!(%server, "server still unreachable: EIO");
                Err(Errno::EIO)
            }
        }
    }
}

/// A reconnecting connection to `server` as `session`, following `watch` if given.
async fn open(
    server: &str,
    options: &ConnectOptions,
    session: &Arc<Session>,
    reconnect_timeout: Duration,
    outages: &Arc<Outages>,
    watch: Option<&MapWatch>,
) -> Result<ResilientConn, ClientError> {
    let (options, session, outages) = (options.clone(), session.clone(), outages.clone());
    match watch {
        Some(watch) => {
            ResilientConn::connect_following(
                server,
                options,
                session,
                reconnect_timeout,
                outages,
                watch,
            )
            .await
        }
        None => {
            ResilientConn::connect_with(server, options, session, reconnect_timeout, outages).await
        }
    }
}

/// A request the connection could not get answered: an I/O error to the program.
fn gone(why: Gone) -> Errno {
    error!(cause = %why, "request not answered: EIO");
    Errno::EIO
}
