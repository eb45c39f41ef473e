//! A connection that survives the server going away: on a broken connection it reconnects
//! with backoff, as the same client (the same [`Session`]: identity and xids carry over), for
//! up to a timeout, and resends the request with its original xid. Many lanes share one
//! connection; the first to notice a break reconnects, the others wait for it, and when it
//! gives up the connection is dead for all of them at once (one timeout per connection, not
//! one per lane). [`Outages`] keeps, for a group of connections, how often they reconnected
//! and how long they were down, so a load tool can report that time apart from its rate.
//! Open files go through it too ([`ResilientConn::open`], [`ResilientConn::call_on`],
//! [`ResilientConn::release`]): their handles are kept in the session, so a reconnect to a
//! restarted server reopens them before anything is resent. Each call has a variant that sends
//! on behalf of other credentials than the session's (`call_as`, `open_as`, `call_on_as`: a
//! mount's callers), which its resends keep. A connection to one shard of a cluster follows
//! its shard: it follows the cluster's shard map ([`MapWatch`]: one of its own, or one a group
//! of connections shares, [`ResilientConn::connect_following`]), and when the map says its
//! shard moved to another server it reconnects there before sending anything more; when its
//! server stays away, it asks the cluster's other servers who serves the shard now. Either
//! way it reconnects as the same session — a standby that took the shard over opened the
//! same store, so it knows the session, its resend records and its replays, exactly as the
//! same server after a restart would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mds_proto::{Body, Cred, Errno, Op, OpenFlags, Reply, ShardMap};
use tokio::sync::Mutex;

use crate::{Client, ClientError, ConnectOptions, Handle, MapWatch, Session};

/// Why a request could not be answered at all.
#[derive(Debug)]
pub enum Gone {
    /// The server stayed away past the reconnect timeout.
    Timeout(Duration),
    /// Something other than a broken connection (a protocol error).
    Other(ClientError),
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Timeout(d) => write!(f, "server unreachable for {d:?}"),
            Gone::Other(e) => write!(f, "{e}"),
        }
    }
}

/// The answer to one request.
pub struct Answer {
    pub reply: Reply,
    /// The request was resent after a reconnect (it may have executed before the break).
    pub resent: bool,
}

/// What a group of connections (one load run's) went through: reconnects, and time down —
/// summed over the connections, and the time when every one of them was down at once (when
/// no request could be answered at all, which a rate should not be divided by).
#[derive(Debug, Default)]
pub struct Outages {
    reconnects: AtomicU64,
    state: parking_lot::Mutex<OutageState>,
}

#[derive(Debug, Default)]
struct OutageState {
    /// Connections in the group, and how many are down now (given-up ones stay down).
    conns: usize,
    down: usize,
    /// Finished down intervals, summed over the connections.
    summed: Duration,
    /// Start of each connection's current down interval, for the running sum.
    down_since: Vec<Instant>,
    /// Finished all-down intervals, and the start of the current one.
    all_down: Duration,
    all_down_since: Option<Instant>,
}

/// Time down, as of some instant (intervals still open count up to it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Downtime {
    /// Each connection's time down, summed.
    pub summed: Duration,
    /// Time when every connection was down at once.
    pub all_down: Duration,
}

impl Outages {
    pub fn new() -> Arc<Outages> {
        Arc::new(Outages::default())
    }

    /// Successful reconnects so far.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// Time down up to `now`, counting the intervals still open.
    pub fn downtime(&self, now: Instant) -> Downtime {
        let s = self.state.lock();
        let open: Duration = s
            .down_since
            .iter()
            .map(|t| now.saturating_duration_since(*t))
            .sum();
        Downtime {
            summed: s.summed + open,
            all_down: s.all_down
                + s.all_down_since
                    .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
        }
    }

    fn join(&self) {
        self.state.lock().conns += 1;
    }

    fn went_down(&self, at: Instant) {
        let mut s = self.state.lock();
        s.down += 1;
        s.down_since.push(at);
        if s.down == s.conns && s.all_down_since.is_none() {
            s.all_down_since = Some(at);
        }
    }

    /// The connection that went down at `since` is back (`up`) or given up on (`!up`: it
    /// stays down for the all-down time, but its own interval ends) at `now`.
    fn ended(&self, since: Instant, up: bool, now: Instant) {
        let mut s = self.state.lock();
        if let Some(i) = s.down_since.iter().position(|t| *t == since) {
            s.down_since.swap_remove(i);
        }
        s.summed += now.saturating_duration_since(since);
        if up {
            s.down -= 1;
            if let Some(t) = s.all_down_since.take() {
                s.all_down += now.saturating_duration_since(t);
            }
        }
    }
}

/// Marks a reconnect under way for as long as it lives, whichever way the reconnect ends.
struct UnderWay<'a>(&'a AtomicBool);

impl<'a> UnderWay<'a> {
    fn set(flag: &'a AtomicBool) -> UnderWay<'a> {
        flag.store(true, Ordering::Release);
        UnderWay(flag)
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

pub struct ResilientConn {
    /// The address it connects to: the one given, or the server its shard moved to.
    server: parking_lot::Mutex<String>,
    /// Its shard (from its server's own map), and the shards' owners and the cluster's
    /// servers as the last map said (no shard: a server outside a cluster, which is never
    /// looked for elsewhere).
    located: parking_lot::Mutex<ShardMap>,
    /// The cluster's map as it changes; None outside a cluster.
    watch: Option<MapWatch>,
    /// How many of the watch's maps it has taken in: a call outside a cluster, or with
    /// nothing new, pays one atomic load (or none), no lock, no clock.
    seen: AtomicU64,
    /// TLS and the shared key, used again on every reconnect: each new connection gets a
    /// new challenge and answers it afresh.
    options: ConnectOptions,
    session: Arc<Session>,
    /// (generation, client): the generation tells a lane whether someone already replaced the
    /// client it saw fail. A plain lock, held for a clone: every request reads it.
    current: parking_lot::Mutex<(u64, Client)>,
    /// Held by the one reconnect under way; the others wait on it.
    reconnecting: Mutex<()>,
    /// Set while a reconnect holds `reconnecting`: a request then waits for the new client
    /// instead of going to the one that failed. Read by every request, one atomic load.
    reconnect_under_way: AtomicBool,
    reconnect_timeout: Duration,
    /// Set when a reconnect gave up: every lane then fails at once instead of waiting out a
    /// timeout of its own (with `--depth 16` that was 16 timeouts in a row).
    dead: AtomicBool,
    outages: Arc<Outages>,
}

impl ResilientConn {
    /// Connects as `session`'s client; the connection joins `outages`' group.
    pub async fn connect(
        server: &str,
        session: Arc<Session>,
        reconnect_timeout: Duration,
        outages: Arc<Outages>,
    ) -> Result<ResilientConn, ClientError> {
        let options = ConnectOptions::default();
        ResilientConn::connect_with(server, options, session, reconnect_timeout, outages).await
    }

    /// As [`ResilientConn::connect`], with TLS and the shared key as `options` say.
    pub async fn connect_with(
        server: &str,
        options: ConnectOptions,
        session: Arc<Session>,
        reconnect_timeout: Duration,
        outages: Arc<Outages>,
    ) -> Result<ResilientConn, ClientError> {
        ResilientConn::start(server, options, session, reconnect_timeout, outages, None).await
    }

    /// As [`ResilientConn::connect_with`], following the cluster's map through `watch` rather
    /// than a watch of its own: many connections of one process (a load run's) then cost the
    /// servers one watcher's connection and session in all, not one each.
    pub async fn connect_following(
        server: &str,
        options: ConnectOptions,
        session: Arc<Session>,
        reconnect_timeout: Duration,
        outages: Arc<Outages>,
        watch: &MapWatch,
    ) -> Result<ResilientConn, ClientError> {
        let watch = Some(watch.clone());
        ResilientConn::start(server, options, session, reconnect_timeout, outages, watch).await
    }

    /// Connects; in a cluster, follows its map through `watch`, or a watch started here.
    async fn start(
        server: &str,
        options: ConnectOptions,
        session: Arc<Session>,
        reconnect_timeout: Duration,
        outages: Arc<Outages>,
        watch: Option<MapWatch>,
    ) -> Result<ResilientConn, ClientError> {
        let client = Client::connect_with(server, session.clone(), &options).await?;
        let located = client.shard_map().await.unwrap_or_default();
        let watch = located
            .shard
            .is_some()
            .then(|| watch.unwrap_or_else(|| MapWatch::start(server, &options)));
        outages.join();
        Ok(ResilientConn {
            server: parking_lot::Mutex::new(server.to_owned()),
            located: parking_lot::Mutex::new(located),
            watch,
            seen: AtomicU64::new(0),
            options,
            session,
            current: parking_lot::Mutex::new((0, client)),
            reconnecting: Mutex::new(()),
            reconnect_under_way: AtomicBool::new(false),
            reconnect_timeout,
            dead: AtomicBool::new(false),
            outages,
        })
    }

    /// Sends `op`; on a broken connection reconnects and resends it with the same xid.
    pub async fn call(&self, op: Op) -> Result<Answer, Gone> {
        self.call_at(None, &op).await.map(|(answer, _)| answer)
    }

    /// As [`ResilientConn::call`], with `op` borrowed: the caller keeps it (a load generator
    /// reuses its name's buffer for the next request).
    pub async fn call_ref(&self, op: &Op) -> Result<Answer, Gone> {
        self.call_at(None, op).await.map(|(answer, _)| answer)
    }

    /// As [`ResilientConn::call`], on behalf of `cred` rather than the session's credentials
    /// (its resends carry them too).
    pub async fn call_as(&self, cred: &Cred, op: Op) -> Result<Answer, Gone> {
        self.call_at(Some(cred), &op)
            .await
            .map(|(answer, _)| answer)
    }

    /// As [`ResilientConn::call_as`] (`None`: the session's credentials), with the server
    /// start that answered.
    async fn call_at(&self, cred: Option<&Cred>, op: &Op) -> Result<(Answer, u64), Gone> {
        let cred = cred.unwrap_or(self.session.cred());
        let (xid, _) = self.session.begin_for(op);
        let mut resent = false;
        loop {
            if self.dead.load(Ordering::Acquire) {
                return Err(Gone::Timeout(self.reconnect_timeout));
            }
            if self.reconnect_under_way.load(Ordering::Acquire) {
                drop(self.reconnecting.lock().await);
            }
            let (generation, client) = {
                let current = self.current.lock();
                (current.0, current.1.clone())
            };
            if self.shard_moved() {
                // The map says another server serves this shard now (a standby took it
                // over, or its owner handed it over): go there before sending, rather than
                // learn it from a send that fails. Nothing was sent: not a resend.
                self.reconnect(generation).await?;
                continue;
            }
            match client.send_with_cred(xid, cred, op).await {
                Ok(reply) => return Ok((Answer { reply, resent }, client.server_boot())),
                Err(ClientError::Disconnected | ClientError::Io(_)) => {
                    self.reconnect(generation).await?;
                    resent = true;
                }
                Err(e) => return Err(Gone::Other(e)),
            }
        }
    }

    /// OPENs `ino` under a handle number the session chooses; the handle is kept in the
    /// session once the server opened it, so that a reconnect to a restarted server reopens
    /// it. The handle comes back whatever the answer: it is open only if the reply is.
    pub async fn open(&self, ino: u64, flags: OpenFlags) -> Result<(Handle, Answer), Gone> {
        self.open_with(None, ino, flags).await
    }

    /// As [`ResilientConn::open`], checked against `cred` rather than the session's
    /// credentials.
    pub async fn open_as(
        &self,
        cred: &Cred,
        ino: u64,
        flags: OpenFlags,
    ) -> Result<(Handle, Answer), Gone> {
        self.open_with(Some(cred), ino, flags).await
    }

    async fn open_with(
        &self,
        cred: Option<&Cred>,
        ino: u64,
        flags: OpenFlags,
    ) -> Result<(Handle, Answer), Gone> {
        let handle = self.session.new_handle(ino, flags);
        let (answer, server_boot) = self.call_at(cred, &handle.open_op()).await?;
        if matches!(answer.reply.result, Ok(Body::Attr(_))) {
            self.session.handle_opened(handle, server_boot);
        }
        Ok((handle, answer))
    }

    /// Sends `op` (a READ, WRITE or SETATTR through `handle`: [`Handle`] builds them), unless
    /// the handle's reopen after a restart was refused: then it is answered here, with that
    /// refusal's errno.
    pub async fn call_on(&self, handle: Handle, op: Op) -> Result<Answer, Gone> {
        match self.session.handle_error(handle) {
            Some(errno) => Ok(self.answered_here(Err(errno))),
            None => self.call(op).await,
        }
    }

    /// As [`ResilientConn::call_on`], on behalf of `cred`.
    pub async fn call_on_as(&self, cred: &Cred, handle: Handle, op: Op) -> Result<Answer, Gone> {
        match self.session.handle_error(handle) {
            Some(errno) => Ok(self.answered_here(Err(errno))),
            None => self.call_as(cred, op).await,
        }
    }

    /// RELEASEs `handle`, and the session forgets it once answered; a dead handle is
    /// forgotten without asking (answered Done here).
    pub async fn release(&self, handle: Handle) -> Result<Answer, Gone> {
        if self.session.handle_error(handle).is_some() {
            self.session.handle_released(handle);
            return Ok(self.answered_here(Ok(Body::Done)));
        }
        let answer = self.call(handle.release_op()).await?;
        self.session.handle_released(handle);
        Ok(answer)
    }

    /// An answer made here, for a request the server need not see.
    fn answered_here(&self, result: Result<Body, Errno>) -> Answer {
        let last_committed = self.session.last_committed();
        Answer {
            reply: Reply::new(0, 0, last_committed, result),
            resent: false,
        }
    }

    /// The session (the client identity) this connection speaks for.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    async fn reconnect(&self, failed: u64) -> Result<(), Gone> {
        let _reconnecting = self.reconnecting.lock().await;
        let _under_way = UnderWay::set(&self.reconnect_under_way);
        // Checked under the lock: the lane that gave up set it before letting go.
        if self.dead.load(Ordering::Acquire) {
            return Err(Gone::Timeout(self.reconnect_timeout));
        }
        if self.current.lock().0 != failed {
            return Ok(()); // another lane already reconnected
        }
        let started = Instant::now();
        self.outages.went_down(started);
        tracing::warn!(server = %self.server.lock(), "the server went away: reconnecting");
        let mut backoff = Duration::from_millis(20);
        loop {
            if self.shard_moved() {
                continue; // the watch learned the new owner meanwhile: try it first
            }
            let session = self.session.clone();
            let server = self.server.lock().clone();
            // In a cluster, the address must still serve this connection's shard before the
            // session goes there: its replays and reopens are that shard's alone (a process
            // restarted on the address may serve another shard, or none yet).
            let shard = self.located.lock().shard;
            if let Some(shard) = shard
                && self.serves(&server, shard).await != Some(true)
            {
                if started.elapsed() >= self.reconnect_timeout {
                    self.dead.store(true, Ordering::Release);
                    self.outages.ended(started, false, Instant::now());
                    return Err(Gone::Timeout(self.reconnect_timeout));
                }
                if let Some(moved) = self.relocate(&server).await {
                    *self.server.lock() = moved;
                    continue;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
            // Bounded by what is left of the reconnect timeout: a server that accepts but
            // never answers CONNECT must not hold every lane past it.
            let left = self.reconnect_timeout.saturating_sub(started.elapsed());
            let connected =
                tokio::time::timeout(left, Client::connect_with(&server, session, &self.options))
                    .await
                    .unwrap_or(Err(ClientError::Disconnected));
            match connected {
                Ok(client) => {
                    if let Ok(map) = client.shard_map().await {
                        *self.located.lock() = map;
                    }
                    *self.current.lock() = (failed + 1, client);
                    self.outages.reconnects.fetch_add(1, Ordering::Relaxed);
                    self.outages.ended(started, true, Instant::now());
                    tracing::info!(%server, after = ?started.elapsed(), "reconnected");
                    return Ok(());
                }
                // A refused key will not become right by retrying: give up at once.
                Err(e @ (ClientError::AuthRequired | ClientError::Errno(Errno::EAUTH))) => {
                    self.dead.store(true, Ordering::Release);
                    self.outages.ended(started, false, Instant::now());
                    return Err(Gone::Other(e));
                }
                Err(_) if started.elapsed() < self.reconnect_timeout => {
                    if let Some(moved) = self.relocate(&server).await {
                        *self.server.lock() = moved;
                        continue;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(_) => {
                    self.dead.store(true, Ordering::Release);
                    self.outages.ended(started, false, Instant::now());
                    tracing::error!(%server, timeout = ?self.reconnect_timeout, "gave up reconnecting");
                    return Err(Gone::Timeout(self.reconnect_timeout));
                }
            }
        }
    }

    /// Whether `server` says it serves `shard` (asked with a session of its own, for two
    /// seconds at most); None if it does not answer.
    async fn serves(&self, server: &str, shard: u16) -> Option<bool> {
        let ask = async {
            let client =
                Client::connect_with(server, Arc::new(Session::new()), &self.options).await?;
            client.shard_map().await
        };
        match tokio::time::timeout(Duration::from_secs(2), ask).await {
            Ok(Ok(map)) => Some(map.shard == Some(shard)),
            _ => None,
        }
    }

    /// Where this connection's shard is served now, if another of the cluster's servers says
    /// it moved from `gone` (a standby took it over). Each is asked with a session of its own
    /// (a read, which leaves nothing behind but a session that expires), and for a second at
    /// most: a standby that has not taken anything over yet does not answer.
    async fn relocate(&self, gone: &str) -> Option<String> {
        let (shard, servers) = {
            let located = &self.located.lock();
            (located.shard?, located.servers.clone())
        };
        for server in servers.iter().filter(|s| s.as_str() != gone) {
            let ask = async {
                let client =
                    Client::connect_with(server, Arc::new(Session::new()), &self.options).await?;
                client.shard_map().await
            };
            let Ok(Ok(map)) = tokio::time::timeout(Duration::from_secs(1), ask).await else {
                continue;
            };
            // A server that knows no owner of the shard now (its lease just expired) may be
            // behind another that does: ask them all.
            let Some(at) = map.shards.iter().find(|s| s.shard == shard) else {
                continue;
            };
            let at = at.address.clone();
            self.located.lock().servers = map.servers;
            if at != gone {
                return Some(at);
            }
        }
        None
    }

    /// Takes in the watch's map if it published one since the last look, and says whether
    /// it names another owner for this connection's shard than the server it talks to —
    /// which is then the one it reconnects to.
    fn shard_moved(&self) -> bool {
        let Some(watch) = &self.watch else {
            return false;
        };
        let published = watch.published();
        // A load first: the swap, a write every call would make to a line every lane of this
        // connection reads, is only for a map not taken in yet.
        if self.seen.load(Ordering::Acquire) == published
            || self.seen.swap(published, Ordering::AcqRel) == published
        {
            return false;
        }
        let watched = watch.latest();
        let mut located = self.located.lock();
        located.shards.clone_from(&watched.map.shards);
        located.servers.clone_from(&watched.map.servers);
        let owner = located.shard.and_then(|shard| watched.owner_of(shard));
        let Some(owner) = owner else {
            return false; // no owner right now (a standby is taking over): nowhere to go yet
        };
        let mut server = self.server.lock();
        if *server == owner {
            return false;
        }
        owner.clone_into(&mut server);
        true
    }

    /// The shard map as this connection knows it: its own shard, and the owners and
    /// servers of the last map it read or was sent.
    pub fn shard_map(&self) -> ShardMap {
        self.located.lock().clone()
    }

    /// The server it talks to (or will, at its next reconnect): the one it was given, or the
    /// server its shard moved to — where a connection made after this one gave up should go.
    pub fn server(&self) -> String {
        self.server.lock().clone()
    }

    /// The watch of the cluster's map it follows; None outside a cluster.
    pub fn map_watch(&self) -> Option<&MapWatch> {
        self.watch.as_ref()
    }

    /// Whether a reconnect gave up: every call fails at once from then on.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outages_sum_per_connection_and_count_all_down_apart() {
        let o = Outages::new();
        o.join();
        o.join();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ms = Duration::from_millis;
        // a down at 0, b at 1: both down from 1; open intervals count up to the asking time.
        o.went_down(at(0));
        o.went_down(at(1));
        let d = o.downtime(at(3));
        assert_eq!((d.summed, d.all_down), (ms(3 + 2), ms(2)));
        // b back at 4: the all-down time stops growing; a's keeps running.
        o.ended(at(1), true, at(4));
        let d = o.downtime(at(10));
        assert_eq!((d.summed, d.all_down), (ms(3 + 10), ms(3)));
        // a given up at 12: its own interval ends, but it stays down...
        o.ended(at(0), false, at(12));
        let d = o.downtime(at(20));
        assert_eq!((d.summed, d.all_down), (ms(3 + 12), ms(3)));
        // ...so b going down again at 20 makes every connection down.
        o.went_down(at(20));
        let d = o.downtime(at(27));
        assert_eq!((d.summed, d.all_down), (ms(15 + 7), ms(3 + 7)));
        assert_eq!(o.reconnects(), 0);
    }
}
