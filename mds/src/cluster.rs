//! A server's part in a cluster (`mds serve --etcd`): claim a shard — the one `--shard` names,
//! or as a standby the first that loses its owner — with a lease-bound owner key in etcd,
//! open that shard's store with the claim's epoch (which fences off any older owner), keep
//! the lease alive beside the data path, stop at once (fail-stop, as a crash) if etcd says
//! the lease is gone, and release it after a clean stop so a standby takes over at once; the
//! view of the owners that SHARD_MAP answers and SHARD_MAP_WAIT long-polls ([`ShardView`]).
//! And `mds cluster init` / `status`, which write and read the configuration.
//!
//! Everything here runs on one thread of its own ("mds-cluster"): no request waits for etcd.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use std::sync::Arc;

use mds_client::auth::PeerKey;
use mds_cluster::{Cluster, ClusterConfig, Lease, Owner, Ownership};
use tracing::{info, warn};

use crate::committer::lease::{OWNER_LEASE, fail_stop};
use crate::config::ServerConfig;
use crate::error::{Error, IoContext, Result};
use crate::metrics::{
    CLUSTER_SHARD_OWNED, LEASE_RENEWAL, LEASE_RENEWED_AT, LEASE_TTL, SHARD_EPOCH, SHARD_MAP_WAITS,
    SHARD_OWNED, unix_now,
};
use crate::server::{Listeners, Stop};
use crate::shard::{Shard, ShardView};
use crate::standby::Follower;

/// How long one call to etcd may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);

fn cluster_error(what: impl Into<String>) -> impl FnOnce(mds_cluster::Error) -> Error {
    let what = what.into();
    move |source| Error::Cluster { what, source }
}

/// `mds cluster init`: writes the configuration once, and the peer secret if there is none.
pub fn init(etcd: &str, name: &str, config: &ClusterConfig) -> Result<()> {
    runtime()?.block_on(async {
        let mut cluster = Cluster::connect(etcd, name, ETCD_TIMEOUT)
            .await
            .map_err(cluster_error("connecting to etcd"))?;
        cluster
            .init(config)
            .await
            .map_err(cluster_error(format!("initializing cluster {name:?}")))?;
        read_peer_secret(&mut cluster).await.map(drop)
    })
}

/// How often a server reads the cluster's peer secret again: how long after `mds cluster
/// rotate-peer-secret` every server proves and asks for the new one.
pub const PEER_SECRET_REFRESH: Duration = Duration::from_secs(10);

/// The cluster's peer secret, written first (a fresh random one) if etcd has none.
async fn read_peer_secret(cluster: &mut Cluster) -> Result<PeerKey> {
    let fresh = hex(PeerKey::random().bytes());
    let text = cluster
        .peer_secret(&fresh)
        .await
        .map_err(cluster_error("reading the cluster's peer secret"))?;
    from_hex(&text)
        .map(PeerKey::from_bytes)
        .ok_or_else(|| Error::Cluster {
            what: "reading the cluster's peer secret".into(),
            source: mds_cluster::Error::Corrupt {
                key: format!("/mds/{}/peer-secret", cluster.name()),
                detail: format!(
                    "not {} hex digits (mds cluster rotate-peer-secret writes a new one)",
                    2 * mds_proto::PEER_SECRET_LEN
                ),
            },
        })
}

/// `mds cluster rotate-peer-secret`: a fresh random peer secret in place of the old one.
pub fn rotate_peer_secret(etcd: &str, name: &str) -> Result<()> {
    runtime()?.block_on(async {
        let mut cluster = Cluster::connect(etcd, name, ETCD_TIMEOUT)
            .await
            .map_err(cluster_error("connecting to etcd"))?;
        cluster
            .config()
            .await
            .map_err(cluster_error("reading the cluster's configuration"))?;
        cluster
            .set_peer_secret(&hex(PeerKey::random().bytes()))
            .await
            .map_err(cluster_error("writing the cluster's peer secret"))
    })
}

/// Reads the peer secret again every [`PEER_SECRET_REFRESH`] for as long as the process
/// lives: a rotation reaches every server without a restart.
async fn refresh_peer_secret(mut cluster: Cluster, view: Arc<ShardView>) {
    loop {
        tokio::time::sleep(PEER_SECRET_REFRESH).await;
        match read_peer_secret(&mut cluster).await {
            Ok(key) => {
                if view.peers.set_key(key) {
                    info!("the cluster's peer secret changed; taking the new one");
                }
            }
            Err(e) => {
                warn!(cause = %e, "could not read the cluster's peer secret; keeping the last one");
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}

fn from_hex(text: &str) -> Option<[u8; mds_proto::PEER_SECRET_LEN]> {
    let text = text.trim().as_bytes();
    if text.len() != 2 * mds_proto::PEER_SECRET_LEN {
        return None;
    }
    let mut bytes = [0; mds_proto::PEER_SECRET_LEN];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(bytes)
}

/// `mds cluster status`: the configuration and every shard's owner, as text.
pub fn status(etcd: &str, name: &str) -> Result<String> {
    runtime()?.block_on(async {
        let mut cluster = Cluster::connect(etcd, name, ETCD_TIMEOUT)
            .await
            .map_err(cluster_error("connecting to etcd"))?;
        let config = cluster
            .config()
            .await
            .map_err(cluster_error("reading the configuration"))?;
        let (owners, _) = cluster
            .owners()
            .await
            .map_err(cluster_error("reading the shards' owners"))?;
        let mut out = format!(
            "cluster {name:?}: {} shards, stores under {}, lease TTL {} s{}\n",
            config.shards,
            config.data_root.display(),
            config.lease_ttl_secs,
            if config.shared_storage {
                ", shared storage"
            } else {
                ""
            }
        );
        for shard in 0..config.shards {
            let _ = match owners.get(&shard) {
                Some(o) => writeln!(
                    out,
                    "shard {shard}: {} epoch {} metrics {}",
                    o.owner, o.epoch, o.owner.metrics
                ),
                None => writeln!(out, "shard {shard}: no owner"),
            };
        }
        Ok(out)
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mds-cluster")
        .enable_all()
        .build()
        .doing(|| "building the cluster runtime".into())
}

/// Serves one shard of the cluster `config.keys.etcd` names until SIGTERM or SIGINT, then
/// releases it.
pub fn run(config: ServerConfig) -> Result<()> {
    let (listeners, stop) = crate::server::listen(&config)?;
    // Before the first gauge: the recorder serve() uses (installed once per process).
    crate::metrics::install()?;
    let etcd = config.keys.etcd.clone().expect("run only with --etcd");
    let name = config.keys.cluster.clone();
    let rt = runtime()?;
    let mut cluster = rt
        .block_on(Cluster::connect(&etcd, &name, ETCD_TIMEOUT))
        .map_err(cluster_error("connecting to etcd"))?;
    let cluster_config = rt
        .block_on(cluster.config())
        .map_err(cluster_error("reading the cluster's configuration"))?;
    cluster_config
        .validate()
        .map_err(cluster_error("the cluster's configuration in etcd"))?;
    let lease = rt
        .block_on(cluster.grant(cluster_config.ttl()))
        .map_err(cluster_error("asking etcd for a lease"))?;
    metrics::gauge!(LEASE_TTL).set(lease.ttl.as_secs_f64());
    metrics::gauge!(LEASE_RENEWED_AT).set(unix_now());
    // The lease lives from its grant to the process's end (or its release): renewed from now
    // on, through the wait, the claim, the checks and the store's open — whatever they take.
    // (The test hook's pause stands for a process stopped right after its claim: nothing
    // renews until it ends.)
    let paused = config.keys.testing.pause_after_claim.is_some() && config.keys.shard.is_some();
    let keep = || keep_lease(cluster.clone(), lease, cluster_config.shared_storage);
    let keeper = (!paused).then(|| rt.spawn(keep()));
    let served = serve_a_shard(
        config,
        listeners,
        &stop,
        &rt,
        &mut cluster.clone(),
        &cluster_config,
        lease,
    );
    // Closed (or never opened): a standby may open the store the moment the owner key goes.
    // The revoke ends the lease, which the keeper must not take for a loss.
    if let Some(keeper) = keeper {
        keeper.abort();
    }
    let revoked =
        rt.block_on(async { tokio::time::timeout(ETCD_TIMEOUT, cluster.revoke(lease)).await });
    match revoked {
        Ok(Ok(())) => info!("released the lease (and the shard, if it owned one)"),
        Ok(Err(e)) => warn!(cause = %e, "could not release the lease; it expires by itself"),
        Err(_) => warn!("etcd did not answer the release; the lease expires by itself"),
    }
    served
}

/// Claims a shard (`--shard`, or as a standby the first without owner), opens its store with
/// the claim's epoch and serves it until `stop`.
fn serve_a_shard(
    config: ServerConfig,
    listeners: Listeners,
    stop: &Stop,
    rt: &tokio::runtime::Runtime,
    cluster: &mut Cluster,
    cluster_config: &ClusterConfig,
    lease: Lease,
) -> Result<()> {
    let name = config.keys.cluster.clone();
    let owner = Owner {
        address: listeners.client_addr(),
        metrics: listeners.metrics_addr(),
        node: format!("{}/{}", hostname(), std::process::id()),
    };
    // Owners and standbys alike: a client whose server went away asks these who serves now.
    rt.block_on(cluster.register(&owner, lease))
        .map_err(cluster_error("registering in the cluster"))?;
    let view = Arc::new(ShardView::default());
    // Before anything connects to this server or it to another: what its peers prove.
    let key = rt.block_on(read_peer_secret(cluster))?;
    view.peers.set_key(key);
    rt.spawn(refresh_peer_secret(cluster.clone(), view.clone()));
    rt.spawn(watch_owners(
        cluster.clone(),
        cluster_config.shards,
        view.clone(),
    ));
    // Both bound now; served once the server owns its shard (the "mds serving" line).
    info!(
        "cluster: listening on {} once it owns a shard",
        owner.address
    );
    info!(
        "cluster: metrics endpoint on {} once it owns a shard",
        owner.metrics
    );
    let mut follower = None;
    let (shard, epoch) = if let Some(shard) = config.keys.shard {
        check_shard(&name, cluster_config, shard)?;
        let epoch = rt
            .block_on(cluster.claim(shard, &owner, lease))
            .map_err(cluster_error(format!("claiming shard {shard}")))?;
        (shard, epoch)
    } else {
        // Scraped meanwhile (the process's figures and the cluster's), and unhealthy: it
        // serves nothing yet. The endpoint goes to the server once a shard is claimed.
        let standby_metrics = standby_endpoint(rt, &listeners)?;
        if let Some(shard) = config.keys.follow {
            check_shard(&name, cluster_config, shard)?;
            follower = Some(Follower::start(shard, cluster_config.store(shard))?);
        }
        let claimed = rt.block_on(wait_for_shard(
            cluster,
            cluster_config,
            &owner,
            lease,
            stop,
            config.keys.follow,
        ));
        standby_metrics.abort();
        match claimed? {
            Some(claim) => claim,
            None => return Ok(()), // stopped while waiting
        }
    };
    // Another shard than the one followed: that one is not needed any more.
    let follower = follower.filter(|f| f.shard() == shard);
    info!(
        shard,
        epoch,
        lease = format!("{:x}", lease.id),
        ttl = ?lease.ttl,
        "claimed shard {shard} of cluster {name:?} at epoch {epoch}"
    );
    if let Some(pause) = config.keys.testing.pause_after_claim {
        warn!(?pause, "test hook: pausing after the claim");
        std::thread::sleep(pause);
    }
    let label = shard.to_string();
    metrics::gauge!(SHARD_OWNED, "shard" => label.clone()).set(1.0);
    metrics::gauge!(SHARD_EPOCH, "shard" => label.clone()).set(epoch as f64);
    if config.keys.data != crate::config::Config::default().data {
        warn!(
            data = %config.keys.data.display(),
            store = %cluster_config.store(shard).display(),
            "--data is not used with --etcd: the cluster's configuration names the store"
        );
    }
    let store = cluster_config.store(shard);
    let identity = journal::ShardIdentity {
        cluster: name.clone(),
        shard,
        epoch,
    };
    // Fenced off before anything else, even while the store's current owner holds it.
    journal::Journal::check_claim(&store, &identity).map_err(|source| Error::Journal {
        what: format!("opening {}", store.display()),
        source,
    })?;
    if config.keys.testing.pause_after_claim.is_some() {
        // Renewal starts only now, as in a process that was stopped: a lease that ran out
        // meanwhile stops it here.
        rt.spawn(keep_lease(
            cluster.clone(),
            lease,
            cluster_config.shared_storage,
        ));
    }
    serve_in_view(rt, cluster, &view, &owner, cluster_config, shard);
    if cluster_config.shared_storage {
        wait_out_last_lease(cluster_config.ttl().max(lease.ttl), stop);
    }
    wait_for_store(&store, stop);
    // The last owner has let go of the store: the follower reads its last commits.
    let warm = follower.and_then(Follower::finish);
    let shard = Shard {
        identity,
        store,
        view,
    };
    let served = crate::server::serve_warm(config, listeners, stop.clone(), warm, Some(shard));
    metrics::gauge!(SHARD_OWNED, "shard" => label).set(0.0);
    served
}

/// The view from the moment this server owns `shard`: the shard it serves, the other shards
/// reachable through its peers, and itself in the map it answers.
fn serve_in_view(
    rt: &tokio::runtime::Runtime,
    cluster: &mut Cluster,
    view: &ShardView,
    owner: &Owner,
    cluster_config: &ClusterConfig,
    shard: u16,
) {
    view.serve(shard);
    metrics::gauge!(SHARD_MAP_WAITS).set(0.0);
    // The peer secret, not the shared key, proves this server to the others.
    view.peers.start(
        rt.handle().clone(),
        owner.address.to_string(),
        mds_client::ConnectOptions::default(),
        cluster_config.shards,
    );
    // The map this server answers includes itself from its first request on (the watch
    // follows within milliseconds, but a client may ask sooner).
    if let Ok((owners, revision)) = rt.block_on(cluster.owners()) {
        let members = rt.block_on(cluster.members()).ok();
        view.update(&owners, members.as_deref(), revision);
    }
}

/// A standby's metrics endpoint while it waits: the recorder's figures (the cluster's gauges,
/// its lease's renewals) and the process's, and `/health` 503 — it serves no namespace yet.
/// On a second descriptor of the listener, so that the server takes the first over when the
/// standby owns a shard.
fn standby_endpoint(
    rt: &tokio::runtime::Runtime,
    listeners: &Listeners,
) -> Result<tokio::task::JoinHandle<()>> {
    let doing = || "serving the standby's metrics endpoint".to_owned();
    let listener = listeners.metrics.try_clone().doing(doing)?;
    let prometheus = crate::metrics::install()?;
    let _runtime = rt.enter();
    let listener = tokio::net::TcpListener::from_std(listener).doing(doing)?;
    let extras: crate::metrics::ScrapeExtras = Arc::new(crate::metrics::write_process);
    let health: crate::metrics::Health =
        Arc::new(|| Err("standby: waiting for a shard without owner".into()));
    Ok(rt.spawn(crate::metrics::serve(listener, prometheus, extras, health)))
}

fn check_shard(name: &str, config: &ClusterConfig, shard: u16) -> Result<()> {
    if shard >= config.shards {
        return Err(Error::Cluster {
            what: format!("claiming shard {shard}"),
            source: mds_cluster::Error::NoSuchShard {
                cluster: name.to_owned(),
                shard,
                last: config.shards - 1,
            },
        });
    }
    Ok(())
}

/// A standby's wait: claims the first shard without an owner (at start, or when an owner key
/// goes). Returns (shard, epoch), or None if asked to stop first.
async fn wait_for_shard(
    cluster: &mut Cluster,
    config: &ClusterConfig,
    owner: &Owner,
    lease: Lease,
    stop: &Stop,
    first: Option<u16>,
) -> Result<Option<(u16, u64)>> {
    info!(
        shards = config.shards,
        "standby: waiting for a shard without owner"
    );
    loop {
        let (owners, revision) = match cluster.owners().await {
            Ok(found) => found,
            Err(e) => {
                warn!(cause = %e, "standby: cannot read the owners; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = stop.requested() => return Ok(None),
                }
            }
        };
        // A claim whose answer was lost shows up as an owner key of this very server's.
        if let Some((&shard, mine)) = owners.iter().find(|(_, o)| o.owner == *owner) {
            return Ok(Some((shard, mine.epoch)));
        }
        let mut failed = false;
        // The shard this standby follows first: it takes that one over warm.
        let order = first
            .into_iter()
            .chain((0..config.shards).filter(|s| Some(*s) != first));
        for shard in order.filter(|s| !owners.contains_key(s)) {
            match cluster.claim(shard, owner, lease).await {
                Ok(epoch) => return Ok(Some((shard, epoch))),
                Err(mds_cluster::Error::Claimed { .. }) => {} // another standby was first
                Err(e) => {
                    warn!(shard, cause = %e, "standby: claim failed; reading the owners again");
                    failed = true;
                }
            }
        }
        if failed {
            // Not the watch: the shard that could not be claimed has no owner still, and no
            // change may come to say so.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => continue,
                () = stop.requested() => return Ok(None),
            }
        }
        tokio::select! {
            changed = cluster.next_owner_change(revision) => {
                if let Err(e) = changed {
                    warn!(cause = %e, "standby: the watch on the owners failed; reading again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            () = stop.requested() => return Ok(None),
        }
    }
}

/// On shared storage, before the store is opened: the TTL and its margin again after the
/// claim. The last owner stopped committing at its last renewal's sending time plus the TTL
/// less the margin, before etcd let its lease expire; this wait gives a write of its that had
/// passed that check just before and was then held up (a stop, a slow disk) another TTL and
/// margin to land before this server reads the store. Every claim on shared storage waits so,
/// a handover after a SIGTERM too: the claimant cannot tell a released lease from an expired
/// one.
fn wait_out_last_lease(ttl: Duration, stop: &Stop) {
    let wait = ttl + mds_cluster::renewal_margin(ttl);
    info!(
        ?wait,
        "shared storage: waiting out the last owner's lease (its TTL and margin) before \
         opening the store"
    );
    let until = std::time::Instant::now() + wait;
    while std::time::Instant::now() < until && !stop.is_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A taken-over store may still be open in the process that owned it (same host, stopped
/// but not dead): RocksDB's lock keeps it out until that process is gone, which happens once
/// it learns its lease is gone. Waits for the lock rather than failing on it.
fn wait_for_store(store: &std::path::Path, stop: &Stop) {
    let lock = store.join("LOCK");
    let mut told = false;
    while let Some(pid) = crate::fsck::lock_holder(&lock) {
        if stop.is_requested() {
            return;
        }
        if !told {
            warn!(
                pid,
                store = %store.display(),
                "the shard's store is still open in its last owner; waiting for it to exit"
            );
            told = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Renews the lease for as long as the process lives; when it is lost, stops the process at
/// once, as a crash would: what was acknowledged is durable or in its clients' replay
/// queues, and the next owner recovers it. On shared storage each renewal also moves the
/// committer's deadline (`committer::lease`), from the moment the renewal was sent.
async fn keep_lease(mut cluster: Cluster, lease: Lease, shared_storage: bool) {
    let renewals = metrics::histogram!(LEASE_RENEWAL);
    let ttl = metrics::gauge!(LEASE_TTL);
    let renewed_at = metrics::gauge!(LEASE_RENEWED_AT);
    if shared_storage {
        OWNER_LEASE.bind(lease.granted, lease.ttl);
    }
    let lost = cluster
        .keep_alive(lease, shared_storage, |renewal| {
            if shared_storage {
                OWNER_LEASE.renewed(renewal.sent, renewal.ttl.min(lease.ttl));
            }
            renewals.record(renewal.latency.as_secs_f64());
            ttl.set(renewal.ttl.as_secs_f64());
            renewed_at.set(unix_now());
        })
        .await;
    fail_stop(&lost);
}

/// Every shard's owner as etcd has it: the shard map SHARD_MAP answers, and gauges (a shard
/// without one shows 0 on every server that watches: the alert's input).
async fn watch_owners(mut cluster: Cluster, shards: u16, view: Arc<ShardView>) {
    let mut last: BTreeMap<u16, Ownership> = BTreeMap::new();
    loop {
        let Ok((owners, revision)) = cluster.owners().await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        for shard in 0..shards {
            let has = owners.contains_key(&shard);
            metrics::gauge!(CLUSTER_SHARD_OWNED, "shard" => shard.to_string()).set(if has {
                1.0
            } else {
                0.0
            });
            if last.contains_key(&shard) && !has {
                warn!(shard, "shard {shard} has no owner");
            }
        }
        let members = cluster.members().await.ok();
        view.update(&owners, members.as_deref(), revision);
        last = owners;
        if cluster.next_owner_change(revision).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "localhost".into(), |h| h.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_secret_is_kept_in_etcd_as_hex_and_read_back_whole() {
        let key = PeerKey::random();
        let text = hex(key.bytes());
        assert_eq!(text.len(), 64);
        assert_eq!(from_hex(&text), Some(*key.bytes()));
        assert_eq!(
            from_hex(&format!("{text}\n")),
            Some(*key.bytes()),
            "etcdctl's newline"
        );
        assert_eq!(from_hex(&text[1..]), None);
        assert_eq!(from_hex(&text.replace(&text[..2], "zz")), None);
    }
}
