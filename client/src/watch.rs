//! Following a cluster's shard map as it changes, without etcd: a [`MapWatch`] keeps one
//! SHARD_MAP_WAIT outstanding on a connection of its own — a server answers a connection's
//! requests one at a time, and holds this one until its view of the owners changes — and
//! publishes each new map with the etcd revision it reflects. When its server goes away it
//! asks the cluster's other servers (the owners of the last map first); a server that does
//! not know SHARD_MAP_WAIT (an older build closes the connection with EPROTO) is asked
//! SHARD_MAP every [`POLL`] instead. [`crate::resilient::ResilientConn`] and
//! [`crate::Router`] read it to know a moved owner before a request to the old one fails.
//!
//! What one costs: a task, one connection and one session on one server (a session that
//! only reads, which the server forgets when the connection closes), and one round trip per
//! change of the map or per [`WAIT`] — nothing per request of the connections that read it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mds_proto::{Errno, ShardMap};
use tokio::sync::watch;

use crate::{Client, ClientError, ConnectOptions, Session};

/// How long each SHARD_MAP_WAIT asks to be held (a server holds one a minute at most).
pub const WAIT: Duration = Duration::from_secs(30);
/// How much later than [`WAIT`] an answer may come before its server is taken for gone
/// (stopped without closing its connections, or cut off).
const LATE: Duration = Duration::from_secs(10);
/// How long a connect and its handshake may take: a standby's port accepts connections but
/// answers nothing until it owns a shard.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a server without SHARD_MAP_WAIT is asked for the map instead.
pub const POLL: Duration = Duration::from_secs(10);

/// A shard map as a server's view of the cluster had it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// The etcd revision the map reflects; 0 before the first answer and outside a cluster.
    pub revision: u64,
    pub map: ShardMap,
}

impl Watched {
    /// The address of `shard`'s owner, if the map names one.
    pub fn owner_of(&self, shard: u16) -> Option<&str> {
        self.map
            .shards
            .iter()
            .find(|s| s.shard == shard)
            .map(|s| s.address.as_str())
    }
}

/// The shard map of a cluster, kept current by a watcher task. Clones share the one
/// watcher (one connection to one server); it stops when the last clone is dropped.
#[derive(Clone)]
pub struct MapWatch {
    latest: watch::Receiver<Watched>,
    /// Maps published so far: one atomic load tells a caller on its request path whether
    /// there is anything new to read.
    published: Arc<AtomicU64>,
    _watcher: Arc<Watcher>,
}

impl std::fmt::Debug for MapWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapWatch")
            .field("latest", &*self.latest.borrow())
            .finish_non_exhaustive()
    }
}

/// Stops the watcher task with the last [`MapWatch`].
struct Watcher(tokio::task::AbortHandle);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl MapWatch {
    /// Starts watching the map of the cluster `seed` (any of its servers) belongs to, on the
    /// current tokio runtime. Outside a cluster the watcher stops after its first answer: a
    /// lone server's map never changes.
    pub fn start(seed: &str, options: &ConnectOptions) -> MapWatch {
        let (tx, latest) = watch::channel(Watched::default());
        let published = Arc::new(AtomicU64::new(0));
        let watcher = tokio::spawn(follow(
            Publisher {
                tx,
                published: published.clone(),
            },
            seed.to_owned(),
            options.clone(),
        ));
        MapWatch {
            latest,
            published,
            _watcher: Arc::new(Watcher(watcher.abort_handle())),
        }
    }

    /// How many maps the watcher has published: it changes when a new one comes.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// The last map published.
    pub fn latest(&self) -> Watched {
        self.latest.borrow().clone()
    }

    /// Waits until the map satisfies `until`, and returns it; if the watcher stopped first
    /// (outside a cluster), the last map it published.
    pub async fn wait_for(&self, mut until: impl FnMut(&Watched) -> bool) -> Watched {
        let mut latest = self.latest.clone();
        let found = latest.wait_for(|w| until(w)).await.map(|w| (*w).clone());
        found.unwrap_or_else(|_| latest.borrow().clone())
    }
}

/// The watcher's side of the channel.
struct Publisher {
    tx: watch::Sender<Watched>,
    published: Arc<AtomicU64>,
}

impl Publisher {
    fn current(&self) -> Watched {
        self.tx.borrow().clone()
    }

    /// The map first, then the count: whoever sees the count move reads the new map.
    fn publish(&self, watched: Watched) {
        self.tx.send_replace(watched);
        self.published.fetch_add(1, Ordering::Release);
    }
}

/// How watching on one server ended.
enum Ended {
    /// The server is gone (or stopped answering): ask another.
    Gone,
    /// It does not know SHARD_MAP_WAIT: ask it SHARD_MAP from time to time instead.
    NoWait,
    /// A server outside a cluster: nothing will ever change.
    Alone,
}

/// The watcher: long-polls one server at a time, moving to another when it goes away, and
/// backing off while none answers (a whole cluster restarting, or a full server refusing
/// every connection).
async fn follow(publisher: Publisher, seed: String, options: ConnectOptions) {
    let mut last = seed.clone();
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut answered = false;
        for server in candidates(&last, &seed, &publisher.current().map) {
            let Some(client) = connect(&server, &options).await else {
                continue;
            };
            last.clone_from(&server);
            let (mut ended, polled) = long_poll(&client, &publisher).await;
            answered = polled;
            if let Ended::NoWait = ended {
                (ended, answered) = poll(&server, &options, &publisher).await;
            }
            if let Ended::Alone = ended {
                return;
            }
            break; // the map may have changed since the candidates were listed
        }
        if answered {
            backoff = Duration::from_millis(50);
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// Where to look for the map, in order: the server that answered last, the owners the map
/// names, the cluster's other servers (standbys answer only once they own a shard), and the
/// address the watch started from.
fn candidates(last: &str, seed: &str, map: &ShardMap) -> Vec<String> {
    let mut order: Vec<String> = vec![last.to_owned()];
    let owners = map.shards.iter().map(|s| s.address.clone());
    for server in owners
        .chain(map.servers.iter().cloned())
        .chain(std::iter::once(seed.to_owned()))
    {
        if !order.contains(&server) {
            order.push(server);
        }
    }
    order
}

/// A connection with a session of its own (it only reads: the server forgets it when the
/// connection closes), or None if the server does not answer in time.
async fn connect(server: &str, options: &ConnectOptions) -> Option<Client> {
    let connect = Client::connect_with(server, Arc::new(Session::new()), options);
    tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .ok()?
        .ok()
}

/// SHARD_MAP_WAIT after SHARD_MAP_WAIT on `client`, each asking for a map newer than the
/// last published, until the connection fails; and whether any was answered.
async fn long_poll(client: &Client, publisher: &Publisher) -> (Ended, bool) {
    let mut answered = false;
    loop {
        let after = publisher.current().revision;
        let asked = tokio::time::timeout(WAIT + LATE, client.shard_map_after(after, WAIT)).await;
        match asked {
            Ok(Ok((revision, map))) if map.shard.is_none() => {
                publisher.publish(Watched { revision, map });
                return (Ended::Alone, true);
            }
            // A server whose view is behind the last map answers with its older one when
            // the wait is over: kept out.
            Ok(Ok((revision, map))) => {
                answered = true;
                if revision > after {
                    publisher.publish(Watched { revision, map });
                }
            }
            Ok(Err(ClientError::Errno(Errno::EPROTO))) => return (Ended::NoWait, answered),
            Ok(Err(_)) | Err(_) => return (Ended::Gone, answered),
        }
    }
}

/// SHARD_MAP every [`POLL`] on a server that does not know SHARD_MAP_WAIT (it closed the
/// connection that asked), publishing the map when it differs — with the revision last
/// published, since this answer carries none — until the server goes away; and whether
/// it answered at all.
async fn poll(server: &str, options: &ConnectOptions, publisher: &Publisher) -> (Ended, bool) {
    let Some(client) = connect(server, options).await else {
        return (Ended::Gone, false);
    };
    let mut answered = false;
    loop {
        let asked = tokio::time::timeout(CONNECT_TIMEOUT, client.shard_map()).await;
        let Ok(Ok(map)) = asked else {
            return (Ended::Gone, answered);
        };
        answered = true;
        if map.shard.is_none() {
            return (Ended::Alone, true);
        }
        let current = publisher.current();
        if map != current.map {
            publisher.publish(Watched {
                revision: current.revision,
                map,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mds_proto::ShardLocation;

    #[test]
    fn candidates_are_the_last_server_then_owners_then_the_rest_once_each() {
        let at = |shard, address: &str| ShardLocation {
            shard,
            address: address.into(),
            epoch: 1,
        };
        let map = ShardMap {
            shard: Some(0),
            shards: vec![at(0, "a:1"), at(1, "b:1")],
            servers: vec!["a:1".into(), "b:1".into(), "standby:1".into()],
        };
        assert_eq!(
            candidates("b:1", "seed:1", &map),
            ["b:1", "a:1", "standby:1", "seed:1"]
        );
        assert_eq!(
            candidates("seed:1", "seed:1", &ShardMap::default()),
            ["seed:1"]
        );
        let watched = Watched { revision: 3, map };
        assert_eq!(watched.owner_of(1), Some("b:1"));
        assert_eq!(watched.owner_of(2), None);
    }
}
