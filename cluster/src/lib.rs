//! The mds cluster's agreement, kept in etcd and nowhere else: the cluster's configuration
//! (written once), which server owns each shard (an owner key bound to that server's lease,
//! whose create revision is the shard's epoch), and the watch that tells a standby a shard
//! lost its owner. Only the server uses this crate, and only around its data path: claiming
//! before it serves, renewing its lease beside it, releasing it after. No request ever waits
//! for etcd (one client's sequential puts take ~2 ms each here, SCALE.md).
//!
//! Keys, under `/mds/<cluster>/`: `config` (JSON [`ClusterConfig`]), `shards/<n>/owner`
//! (JSON [`Owner`], bound to the owner's lease), `nodes/<address>` (JSON [`Owner`], every
//! server of the cluster, owner or standby, bound to its lease: where a client whose server
//! went away asks who serves its shard now), `peer-secret` (the secret the servers prove to
//! each other, hex; written by the first server that finds none).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};

/// What can go wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("etcd at {endpoints}: {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: Box<etcd_client::Error>,
    },
    #[error("cluster {cluster:?} has no configuration in etcd: run `mds cluster init` first")]
    NotInitialized { cluster: String },
    #[error(
        "cluster {cluster:?} is already initialized ({existing}); its configuration is written \
         once"
    )]
    AlreadyInitialized { cluster: String, existing: String },
    #[error("shard {shard} of cluster {cluster:?} is owned by {owner}; refusing a second claim")]
    Claimed {
        cluster: String,
        shard: u16,
        owner: String,
    },
    #[error("shard {shard} is not in cluster {cluster:?}, which has shards 0 to {last}")]
    NoSuchShard {
        cluster: String,
        shard: u16,
        last: u16,
    },
    #[error("etcd holds a value at {key} that does not decode: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("invalid cluster configuration: {0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The cluster's configuration, written once by `mds cluster init`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Shards 0 to `shards - 1`.
    pub shards: u16,
    /// Shard N's store is `<data_root>/shard-N`: a standby takes a shard over by opening it
    /// there (on one host, or on storage every server of the cluster mounts).
    pub data_root: PathBuf,
    /// Seconds an owner's lease lives without renewal; renewed every third of it.
    pub lease_ttl_secs: u32,
    /// Whether the stores are on storage several hosts mount. Then an owner commits nothing
    /// and stops serving once its lease may have run out (the TTL less a margin from its last
    /// renewal's request), and a claimant waits the TTL and margin again before it opens the
    /// store: another host's standby may have claimed the shard, and nothing but the owners'
    /// own clocks keeps the two apart (a lease alone is not mutual exclusion, etcd PR #11490). On
    /// one host (false) RocksDB's lock on the store already keeps a second server out, so an
    /// owner serves on while etcd is away — no one can claim its shard meanwhile — and stops
    /// only when etcd, back, says the lease expired.
    #[serde(default)]
    pub shared_storage: bool,
}

impl ClusterConfig {
    /// The least lease TTL: a slow fdatasync on etcd's leader can let shorter leases all
    /// expire at once (etcd #15247).
    pub const MIN_TTL_SECS: u32 = 3;

    pub fn validate(&self) -> Result<()> {
        if self.shards == 0 {
            return Err(Error::Invalid("a cluster has at least one shard".into()));
        }
        if u32::from(self.shards) > mds_proto::MAX_SHARDS {
            return Err(Error::Invalid(format!(
                "at most {} shards",
                mds_proto::MAX_SHARDS
            )));
        }
        if self.lease_ttl_secs < Self::MIN_TTL_SECS || self.lease_ttl_secs > 600 {
            return Err(Error::Invalid(format!(
                "the lease TTL must be {} to 600 seconds, got {}",
                Self::MIN_TTL_SECS,
                self.lease_ttl_secs
            )));
        }
        if !self.data_root.is_absolute() {
            return Err(Error::Invalid(format!(
                "the data root must be an absolute path (every server opens stores under \
                 it), got {}",
                self.data_root.display()
            )));
        }
        Ok(())
    }

    /// Where shard `shard`'s store lives.
    pub fn store(&self, shard: u16) -> PathBuf {
        self.data_root.join(format!("shard-{shard}"))
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_ttl_secs))
    }
}

/// Who owns a shard: what its owner key says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The address clients reach it on.
    pub address: SocketAddr,
    /// Its Prometheus endpoint.
    pub metrics: SocketAddr,
    /// Host and process, for people.
    pub node: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.address, self.node)
    }
}

/// A shard's owner as etcd has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    pub owner: Owner,
    /// The owner key's create revision: the owner's epoch.
    pub epoch: u64,
}

/// A lease granted by etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    /// The TTL etcd granted (it may round a short one up).
    pub ttl: Duration,
    /// When it was asked for: its TTL runs from no earlier than this.
    pub granted: Instant,
}

/// How long before its lease may have run out at etcd an owner on shared storage gives it up:
/// the TTL runs at etcd from no earlier than the owner's request, so `sent + TTL - margin` is
/// a moment the lease surely still held, on the owner's own monotonic clock. The margin covers
/// what runs between a check of that moment and the write it allows (a commit's write and
/// sync, a scheduling delay), and a standby on shared storage waits the TTL and this margin
/// again after its claim before it opens the store.
pub fn renewal_margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(500))
}

/// One renewal of a lease, for the server's metrics and its commit deadline.
#[derive(Clone, Copy, Debug)]
pub struct Renewal {
    /// When the keep-alive request that etcd answered was sent: the renewed TTL runs from no
    /// earlier than this, however late the answer came.
    pub sent: Instant,
    /// From the keep-alive request to etcd's answer.
    pub latency: Duration,
    /// The TTL etcd says the lease has from now.
    pub ttl: Duration,
}

/// A connection to one cluster's keys in etcd.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    name: String,
    endpoints: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// Endpoints as `--etcd` takes them: comma-separated, `http://` assumed.
fn endpoint_list(endpoints: &str) -> Vec<String> {
    endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            if e.contains("://") {
                e.to_owned()
            } else {
                format!("http://{e}")
            }
        })
        .collect()
}

impl Cluster {
    /// Connects to etcd at `endpoints` (comma-separated) for cluster `name`. Each call to
    /// etcd times out after `timeout`.
    pub async fn connect(endpoints: &str, name: &str, timeout: Duration) -> Result<Cluster> {
        let list = endpoint_list(endpoints);
        if list.is_empty() {
            return Err(Error::Invalid("--etcd names no endpoint".into()));
        }
        if name.is_empty() || name.contains('/') {
            return Err(Error::Invalid(format!(
                "a cluster name is a non-empty word without '/', got {name:?}"
            )));
        }
        // HTTP/2 pings: a half-open connection to etcd is found within seconds, not when TCP
        // gives up, so a watch or a renewal stream is opened again in time.
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let client = Client::connect(&list, Some(options))
            .await
            .map_err(|e| etcd_error(endpoints, e))?;
        Ok(Cluster {
            client,
            name: name.to_owned(),
            endpoints: endpoints.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn key(&self, rest: &str) -> String {
        format!("/mds/{}/{rest}", self.name)
    }

    fn owner_key(&self, shard: u16) -> String {
        self.key(&format!("shards/{shard}/owner"))
    }

    fn err(&self, e: etcd_client::Error) -> Error {
        etcd_error(&self.endpoints, e)
    }

    /// Writes the configuration, once: a create-only transaction, so of two `init`s exactly
    /// one wins and the other is told what is there.
    pub async fn init(&mut self, config: &ClusterConfig) -> Result<()> {
        config.validate()?;
        let key = self.key("config");
        let value = serde_json::to_string(config).expect("a configuration encodes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), value, None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.err(e))?;
        if response.succeeded() {
            return Ok(());
        }
        let existing = first_value(&response.op_responses()).unwrap_or_default();
        Err(Error::AlreadyInitialized {
            cluster: self.name.clone(),
            existing: String::from_utf8_lossy(&existing).into_owned(),
        })
    }

    /// The configuration `init` wrote.
    pub async fn config(&mut self) -> Result<ClusterConfig> {
        let key = self.key("config");
        let response = self
            .client
            .get(key.clone(), None)
            .await
            .map_err(|e| self.err(e))?;
        let Some(kv) = response.kvs().first() else {
            return Err(Error::NotInitialized {
                cluster: self.name.clone(),
            });
        };
        decode(&key, kv.value())
    }

    /// A lease of `ttl` (etcd may grant more).
    pub async fn grant(&mut self, ttl: Duration) -> Result<Lease> {
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1);
        let asked = Instant::now();
        let granted = self
            .client
            .lease_grant(secs, None)
            .await
            .map_err(|e| self.err(e))?;
        Ok(Lease {
            id: granted.id(),
            ttl: Duration::from_secs(granted.ttl().max(1).unsigned_abs()),
            granted: asked,
        })
    }

    /// Revokes a lease: every key bound to it goes at once (a planned handover).
    pub async fn revoke(&mut self, lease: Lease) -> Result<()> {
        self.client
            .lease_revoke(lease.id)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Claims shard `shard` for `owner`, its key bound to `lease`: a create-only transaction,
    /// so of any number of claimants exactly one wins. Returns the epoch (the revision that
    /// created the owner key); a shard someone owns is refused, naming the owner.
    pub async fn claim(&mut self, shard: u16, owner: &Owner, lease: Lease) -> Result<u64> {
        let key = self.owner_key(shard);
        let value = serde_json::to_string(owner).expect("an owner encodes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease.id)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.err(e))?;
        if response.succeeded() {
            let revision = response
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision);
            return Ok(revision.unsigned_abs());
        }
        let owner = match first_value(&response.op_responses()) {
            Some(bytes) => decode::<Owner>(&key, &bytes)?.to_string(),
            // Gone between the compare and the get: someone held it a moment ago.
            None => "another server".to_owned(),
        };
        Err(Error::Claimed {
            cluster: self.name.clone(),
            shard,
            owner,
        })
    }

    /// Registers a server of the cluster (owner or standby) for as long as `lease` lives.
    pub async fn register(&mut self, server: &Owner, lease: Lease) -> Result<()> {
        let key = self.key(&format!("nodes/{}", server.address));
        let value = serde_json::to_string(server).expect("an owner encodes");
        self.client
            .put(key, value, Some(PutOptions::new().with_lease(lease.id)))
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The cluster's peer secret (`peer-secret`): what its servers prove to each other, and
    /// no client has. The first server to ask writes `fresh`, in a create-only transaction,
    /// so that of any number of servers starting at once exactly one's is kept and every one
    /// reads it.
    pub async fn peer_secret(&mut self, fresh: &str) -> Result<String> {
        let key = self.key("peer-secret");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), fresh, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.err(e))?;
        if response.succeeded() {
            return Ok(fresh.to_owned());
        }
        let value = first_value(&response.op_responses()).unwrap_or_default();
        String::from_utf8(value).map_err(|e| Error::Corrupt {
            key,
            detail: e.to_string(),
        })
    }

    /// Replaces the cluster's peer secret with `fresh` (`mds cluster rotate-peer-secret`):
    /// each server takes it within its next look (`peer_secret`).
    pub async fn set_peer_secret(&mut self, fresh: &str) -> Result<()> {
        let key = self.key("peer-secret");
        self.client
            .put(key, fresh, None)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Every server of the cluster now (owners and standbys), by address.
    pub async fn members(&mut self) -> Result<Vec<Owner>> {
        let prefix = self.key("nodes/");
        let response = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.err(e))?;
        response
            .kvs()
            .iter()
            .map(|kv| decode(&String::from_utf8_lossy(kv.key()), kv.value()))
            .collect()
    }

    /// Every shard's owner now, and the revision they were read at (a watch from the next
    /// one misses nothing).
    pub async fn owners(&mut self) -> Result<(BTreeMap<u16, Ownership>, i64)> {
        let prefix = self.key("shards/");
        let response = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.err(e))?;
        let revision = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let mut owners = BTreeMap::new();
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let Some(shard) = shard_of_owner_key(&prefix, &key) else {
                continue;
            };
            owners.insert(
                shard,
                Ownership {
                    owner: decode(&key, kv.value())?,
                    epoch: kv.create_revision().unsigned_abs(),
                },
            );
        }
        Ok((owners, revision))
    }

    /// Waits for a change to any of the cluster's keys after `revision` (an owner, a
    /// member); returns the shards whose owner key was deleted (expired or released) and the
    /// revision seen. A standby calls it in a loop.
    pub async fn next_owner_change(&mut self, revision: i64) -> Result<(Vec<u16>, i64)> {
        let prefix = self.key("");
        let owners = self.key("shards/");
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut stream = self
            .client
            .watch(prefix.clone(), Some(options))
            .await
            .map_err(|e| self.err(e))?;
        loop {
            let Some(response) = stream.message().await.map_err(|e| self.err(e))? else {
                return Err(Error::Invalid("etcd closed the watch".into()));
            };
            let seen = response
                .header()
                .map_or(revision, etcd_client::ResponseHeader::revision);
            let events = response.events();
            if events.is_empty() {
                continue; // the watch's creation
            }
            let released = events
                .iter()
                .filter(|e| e.event_type() == EventType::Delete)
                .filter_map(|e| e.kv())
                .filter_map(|kv| shard_of_owner_key(&owners, &String::from_utf8_lossy(kv.key())))
                .collect();
            return Ok((released, seen));
        }
    }

    /// Keeps `lease` alive, renewing every third of its TTL, until the lease is lost; then
    /// returns why. Lost means etcd answered that it expired, or — with `silence_is_loss`
    /// (stores shared between hosts) — that no renewal succeeded for the TTL less a margin,
    /// before another server could have been given the shard. Each renewal is reported to
    /// `renewed`.
    pub async fn keep_alive(
        &mut self,
        lease: Lease,
        silence_is_loss: bool,
        mut renewed: impl FnMut(Renewal),
    ) -> String {
        let interval = lease.ttl / 3;
        // Give up before the lease can have run out at etcd: its clock started no later than
        // our last request.
        let margin = renewal_margin(lease.ttl);
        // The credit runs from the grant (or the last renewal a caller saw), never from when
        // this task happened to start.
        let mut last_ok = lease.granted;
        let mut keeper = None;
        let mut warned = false;
        loop {
            let mut give_up_at = last_ok + lease.ttl.saturating_sub(margin);
            if Instant::now() >= give_up_at {
                if silence_is_loss {
                    return format!(
                        "no renewal of lease {:x} succeeded for {:?} (TTL {:?}) and the stores \
                         are shared: another host may own the shard now",
                        lease.id,
                        last_ok.elapsed(),
                        lease.ttl
                    );
                }
                if !warned {
                    tracing::warn!(
                        since_renewal = ?last_ok.elapsed(),
                        "etcd unreachable: serving on (no one can claim the shard meanwhile); \
                         the lease is checked again when etcd answers"
                    );
                    warned = true;
                }
                give_up_at = Instant::now() + interval;
            }
            if keeper.is_none() {
                match tokio::time::timeout_at(
                    give_up_at.into(),
                    self.client.lease_keep_alive(lease.id),
                )
                .await
                {
                    Ok(Ok(pair)) => keeper = Some(pair),
                    // Opening the stream renews once, and says so when etcd has no such lease.
                    Ok(Err(e)) if is_expired(&e) => {
                        return format!("etcd says lease {:x} has expired", lease.id);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(cause = %e, "lease keep-alive stream failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    Err(_) => continue,
                }
            }
            let (sender, stream) = keeper.as_mut().expect("just set");
            let asked = Instant::now();
            let answer = tokio::time::timeout_at(give_up_at.into(), async {
                sender.keep_alive().await?;
                stream.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(response))) if response.ttl() > 0 => {
                    if warned {
                        tracing::info!("etcd answers again; the lease holds");
                        warned = false;
                    }
                    last_ok = asked;
                    renewed(Renewal {
                        sent: asked,
                        latency: asked.elapsed(),
                        ttl: Duration::from_secs(response.ttl().unsigned_abs()),
                    });
                    tokio::time::sleep_until((asked + interval).into()).await;
                }
                Ok(Ok(Some(_))) => {
                    return format!("etcd says lease {:x} has expired", lease.id);
                }
                Ok(Ok(None) | Err(_)) => {
                    // The stream broke (etcd restarted, a connection dropped): a new one.
                    keeper = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(_) => {} // timed out: the check at the top gives up
            }
        }
    }
}

/// etcd answered a renewal with TTL 0: it has no such lease (expired, or revoked).
fn is_expired(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::LeaseKeepAliveError(m) if m == "lease not found")
}

fn etcd_error(endpoints: &str, source: etcd_client::Error) -> Error {
    Error::Etcd {
        endpoints: endpoints.to_owned(),
        source: Box::new(source),
    }
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
        key: key.to_owned(),
        detail: e.to_string(),
    })
}

/// The value the `or_else` get of a create-only transaction found, if the key was there.
fn first_value(responses: &[TxnOpResponse]) -> Option<Vec<u8>> {
    responses.iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    })
}

/// `N` of `<prefix>N/owner`.
fn shard_of_owner_key(prefix: &str, key: &str) -> Option<u16> {
    key.strip_prefix(prefix)?
        .strip_suffix("/owner")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_owner_keys_parse() {
        assert_eq!(
            endpoint_list("127.0.0.1:2379, https://e:1,"),
            ["http://127.0.0.1:2379", "https://e:1"]
        );
        assert_eq!(
            shard_of_owner_key("/mds/c/shards/", "/mds/c/shards/12/owner"),
            Some(12)
        );
        assert_eq!(
            shard_of_owner_key("/mds/c/shards/", "/mds/c/shards/12/other"),
            None
        );
        assert_eq!(
            shard_of_owner_key("/mds/c/shards/", "/mds/c/shards/x/owner"),
            None
        );
    }

    #[test]
    fn configurations_are_checked() {
        let good = ClusterConfig {
            shards: 3,
            data_root: "/srv/mds".into(),
            lease_ttl_secs: 5,
            shared_storage: false,
        };
        good.validate().unwrap();
        assert_eq!(good.store(2), PathBuf::from("/srv/mds/shard-2"));
        for bad in [
            ClusterConfig {
                shards: 0,
                ..good.clone()
            },
            ClusterConfig {
                lease_ttl_secs: 1,
                ..good.clone()
            },
            ClusterConfig {
                data_root: "rel".into(),
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
