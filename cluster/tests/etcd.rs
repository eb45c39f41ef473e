//! The cluster's keys against a real etcd (Debian's etcd-server, on tmpfs): of concurrent
//! inits and of concurrent claims exactly one wins; an owner key lives as long as its lease;
//! a watch sees it go; renewals are reported; a revoked lease ends its keep-alive.

use std::time::Duration;

use mds_cluster::{Cluster, ClusterConfig, Error, Owner};
use mds_testkit::Etcd;

fn config(shards: u16) -> ClusterConfig {
    ClusterConfig {
        shards,
        data_root: "/srv/mds".into(),
        lease_ttl_secs: 3,
        shared_storage: false,
    }
}

fn owner(n: u16) -> Owner {
    Owner {
        address: format!("127.0.0.1:{}", 7400 + n).parse().unwrap(),
        metrics: format!("127.0.0.1:{}", 9400 + n).parse().unwrap(),
        node: format!("test/{n}"),
    }
}

async fn connect(etcd: &Etcd, name: &str) -> Cluster {
    Cluster::connect(&etcd.endpoint, name, Duration::from_secs(5))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_concurrent_inits_and_claims_exactly_one_wins() {
    let etcd = Etcd::start();
    let mut c = connect(&etcd, "a").await;
    assert!(matches!(
        c.config().await,
        Err(Error::NotInitialized { .. })
    ));
    let inits: Vec<_> = (1..=4u16)
        .map(|n| {
            let mut c = c.clone();
            tokio::spawn(async move { c.init(&config(n)).await })
        })
        .collect();
    let mut won = Vec::new();
    for (n, init) in (1..=4u16).zip(inits) {
        match init.await.unwrap() {
            Ok(()) => won.push(n),
            Err(Error::AlreadyInitialized { existing, .. }) => {
                assert!(existing.contains("shards"), "{existing}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(c.config().await.unwrap().shards, won[0]);
    // Another cluster's name is another prefix.
    let mut other = connect(&etcd, "b").await;
    assert!(matches!(
        other.config().await,
        Err(Error::NotInitialized { .. })
    ));

    let claims: Vec<_> = (0..6u16)
        .map(|n| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let lease = c.grant(Duration::from_secs(3)).await.unwrap();
                c.claim(0, &owner(n), lease).await.map(|epoch| (n, epoch))
            })
        })
        .collect();
    let mut winners = Vec::new();
    for claim in claims {
        match claim.await.unwrap() {
            Ok(won) => winners.push(won),
            Err(Error::Claimed {
                shard: 0, owner, ..
            }) => assert!(owner.contains("127.0.0.1:")),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (n, epoch) = winners[0];
    let (owners, _) = c.owners().await.unwrap();
    assert_eq!(owners[&0].owner, owner(n));
    assert_eq!(
        owners[&0].epoch, epoch,
        "the epoch is the owner key's create revision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_key_lives_as_long_as_its_lease() {
    let etcd = Etcd::start();
    let mut c = connect(&etcd, "a").await;
    c.init(&config(2)).await.unwrap();
    let lease = c.grant(Duration::from_secs(3)).await.unwrap();
    assert!(lease.ttl >= Duration::from_secs(3));
    let first = c.claim(1, &owner(1), lease).await.unwrap();
    let (_, revision) = c.owners().await.unwrap();

    // Renewals are reported, and a revoked lease ends the keep-alive with why.
    let renewals = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let keeper = {
        let (mut c, renewals) = (c.clone(), renewals.clone());
        tokio::spawn(async move {
            c.keep_alive(lease, false, |r| {
                assert!(r.ttl > Duration::ZERO);
                renewals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .await
        })
    };
    // Renewed every second: the key outlives the TTL.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(renewals.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    assert!(c.owners().await.unwrap().0.contains_key(&1));

    let watch = {
        let mut c = c.clone();
        tokio::spawn(async move { c.next_owner_change(revision).await })
    };
    c.revoke(lease).await.unwrap();
    let (released, _) = tokio::time::timeout(Duration::from_secs(10), watch)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(released, vec![1]);
    assert!(!c.owners().await.unwrap().0.contains_key(&1));
    let why = tokio::time::timeout(Duration::from_secs(10), keeper)
        .await
        .unwrap()
        .unwrap();
    assert!(why.contains("expired"), "{why}");

    // A new claim gets a newer epoch.
    let lease = c.grant(Duration::from_secs(3)).await.unwrap();
    assert!(c.claim(1, &owner(2), lease).await.unwrap() > first);
}
