//! A cluster's servers against a real etcd (Debian's etcd-server, on tmpfs, free loopback
//! ports): `mds cluster init` once, shards claimed by lease-bound owner keys, a second claim
//! refused naming the owner, a standby taking over a killed owner's shard (and at once after a
//! SIGTERM), a stale owner fenced off by the store's epoch, an owner serving on while etcd is
//! away, and one on shared storage stopping when it cannot renew, or when it resumes from a
//! SIGSTOP past its lease after a standby took over; a standby that follows its
//! shard's store (`--follow`) and takes it over warm, every commit in it. And the shard map: routed
//! requests, the map long-polled (SHARD_MAP_WAIT: held until the owners change, stalling no
//! other connection, ended by a SIGTERM), and the client library's watch of it, which tells a
//! `Router` and a `ResilientConn` of a new owner before any request to the old one fails.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{init, mds, serving, start, wait_exit};
use mds_client::ROOT;
use mds_testkit::{Etcd, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_claims_and_a_second_claim_is_refused() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    // The configuration is written once.
    let (code, out) = mds(&[
        "cluster",
        "init",
        "--etcd",
        &etcd.endpoint,
        "--shards",
        "5",
        "--data-root",
        "/elsewhere",
    ]);
    assert_eq!(code, 1);
    assert!(out.contains("already initialized"), "{out}");
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    let c0 = serving(&s0).await;
    serving(&s1).await;
    let d = c0.mkdir(ROOT, "d", 0o755).await.unwrap();
    assert_eq!(mds_journal_shard(d.ino), 0);

    // A second claimant of shard 0 is refused, naming the owner, and changes nothing.
    let (code, out) = mds(&[
        "serve",
        "--etcd",
        &etcd.endpoint,
        "--shard",
        "0",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("owned by"), "{out}");
    assert!(out.contains(&s0.addr.to_string()), "{out}");
    // A shard the cluster does not have, and the flags that do not go together.
    let (code, out) = mds(&[
        "serve",
        "--etcd",
        &etcd.endpoint,
        "--shard",
        "2",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1);
    assert!(out.contains("shards 0 to 1"), "{out}");
    let (code, out) = mds(&["serve", "--shard", "0"]);
    assert_eq!(code, 1);
    assert!(out.contains("need --etcd"), "{out}");
    let follow = [
        "serve",
        "--etcd",
        &etcd.endpoint,
        "--shard",
        "0",
        "--follow",
        "1",
    ];
    let (code, out) = mds(&follow);
    assert_eq!(code, 1);
    assert!(out.contains("--follow is for a standby"), "{out}");
    let (code, out) = mds(&[
        "serve",
        "--etcd",
        &etcd.endpoint,
        "--standby",
        "--follow",
        "5",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1);
    assert!(out.contains("shards 0 to 1"), "{out}");
    assert!(c0.lookup(ROOT, "d").await.is_ok(), "the owner serves on");

    let (code, status) = mds(&["cluster", "status", "--etcd", &etcd.endpoint]);
    assert_eq!(code, 0, "{status}");
    assert!(
        status.contains(&format!("shard 0: {}", s0.addr)),
        "{status}"
    );
    assert!(
        status.contains(&format!("shard 1: {}", s1.addr)),
        "{status}"
    );
    let scrape = |s: &Server, series: &str| mds_testkit::scrape_metric(s.metrics, series);
    assert_eq!(scrape(&s0, "mds_shard_owned{shard=\"0\"}"), Some(1.0));
    assert_eq!(
        scrape(&s1, "mds_cluster_shard_has_owner{shard=\"0\"}"),
        Some(1.0)
    );
    assert!(scrape(&s0, "mds_shard_epoch{shard=\"0\"}").unwrap() > 0.0);
    drop(c0);
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    for shard in 0..2 {
        let (code, out) = common::fsck(&root.path().join(format!("shard-{shard}")));
        assert_eq!(code, 0, "shard {shard}: {out}");
    }
}

fn mds_journal_shard(ino: u64) -> u16 {
    (ino >> 48) as u16
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_killed_owner_and_a_sigterm_hands_over_at_once() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &[]);
    let owner = start(&etcd, root.path(), Some(0), &[]);
    let client = serving(&owner).await;
    let mut made = Vec::new();
    for i in 0..50 {
        made.push(
            client
                .create(ROOT, &format!("f{i}"), 0o644)
                .await
                .unwrap()
                .ino,
        );
    }
    let standby = start(&etcd, root.path(), None, &[]);
    assert!(standby.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
    // Scraped while it waits (no MdsDown for a standby), and unhealthy: it serves nothing yet.
    let (status, _, body) = mds_testkit::http(standby.metrics, "GET", "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("mds_lease_ttl_seconds"), "{body}");
    assert!(body.contains("process_open_fds"), "{body}");
    assert_eq!(
        mds_testkit::http(standby.metrics, "GET", "/health")
            .unwrap()
            .0,
        503
    );
    drop(client);
    let killed = Instant::now();
    owner.kill();
    let client = serving(&standby).await;
    let took_over = killed.elapsed();
    for (i, ino) in made.iter().enumerate() {
        assert_eq!(
            client.lookup(ROOT, &format!("f{i}")).await.unwrap().ino,
            *ino
        );
    }
    client.create(ROOT, "after", 0o644).await.unwrap();
    // Its endpoint is the server's now: healthy, with the shard's figures.
    assert_eq!(
        mds_testkit::http(standby.metrics, "GET", "/health")
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        mds_testkit::scrape_metric(standby.metrics, "mds_shard_owned{shard=\"0\"}"),
        Some(1.0)
    );
    // A planned handover: SIGTERM releases the lease after the store is closed.
    let second = start(&etcd, root.path(), None, &[]);
    assert!(second.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
    drop(client);
    let asked = Instant::now();
    assert!(standby.stop().success());
    let client = serving(&second).await;
    let handed_over = asked.elapsed();
    assert!(client.lookup(ROOT, "after").await.is_ok());
    eprintln!("takeover after SIGKILL: {took_over:?}; handover after SIGTERM: {handed_over:?}");
    drop(client);
    assert!(second.stop().success());
    let (code, out) = common::fsck(&root.path().join("shard-0"));
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_fenced_off_by_the_stores_epoch() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &[]);
    // Claims, then stops (as a stopped process would) past its lease's TTL.
    let mut stale = start(
        &etcd,
        root.path(),
        Some(0),
        &["--inject-pause-after-claim", "15s"],
    );
    assert!(stale.wait_for_log("claimed shard 0", Duration::from_secs(20)));
    let standby = start(&etcd, root.path(), None, &[]);
    let client = serving(&standby).await;
    client
        .create(ROOT, "by-the-new-owner", 0o644)
        .await
        .unwrap();
    let code = wait_exit(&mut stale, Duration::from_secs(30)).expect("the stale owner exits");
    assert_ne!(code, 0);
    let log = stale.log_text();
    assert!(log.contains("newer than this server's claim"), "{log}");
    assert!(!log.contains("mds serving"), "{log}");
    assert!(client.lookup(ROOT, "by-the-new-owner").await.is_ok());
    drop(client);
    assert!(standby.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_serves_on_while_etcd_is_away() {
    let mut etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &[]);
    let mut owner = start(&etcd, root.path(), Some(0), &[]);
    let client = serving(&owner).await;
    let before = mds(&["cluster", "status", "--etcd", &etcd.endpoint]).1;
    let creating = tokio::spawn(async move {
        let mut n = 0u32;
        let until = Instant::now() + Duration::from_secs(14);
        while Instant::now() < until && n < 100_000 {
            client.create(ROOT, &format!("f{n}"), 0o644).await.unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| etcd.restart_after(Duration::from_secs(10)));
    let made = creating
        .await
        .expect("every create answered while etcd was away");
    assert!(made > 0);
    assert_eq!(owner.exited(), None, "{}", owner.log_text());
    // The lease held: the same owner at the same epoch.
    let after = mds(&["cluster", "status", "--etcd", &etcd.endpoint]).1;
    assert_eq!(after, before);
    assert!(owner.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_on_shared_storage_stops_when_it_cannot_renew() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &["--shared-storage"]);
    let mut owner = start(&etcd, root.path(), Some(0), &[]);
    serving(&owner).await;
    etcd.signal(libc::SIGSTOP);
    let code = wait_exit(&mut owner, Duration::from_secs(20));
    etcd.signal(libc::SIGCONT);
    assert_eq!(code, Some(75), "{}", owner.log_text());
    assert!(owner.log_text().contains("fail-stop"));
    let (code, out) = common::fsck(&root.path().join("shard-0"));
    assert_eq!(code, 0, "{out}");
}

/// Fencing beyond the open, on shared storage: an owner stopped (SIGSTOP) under load past its
/// lease, whose shard a standby takes over and serves, commits nothing once it is resumed
/// (SIGCONT) — its lease's deadline has passed, so the pending writes are refused and the
/// process stops (75, fail-stop) — and acknowledged nothing that the store does not hold.
/// Storage several hosts mount shares no lock between them: the test removes the stopped
/// owner's LOCK file, so that the standby opens the store while the owner still has it open,
/// as a standby on another host would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_stopped_past_its_lease_commits_nothing_after_the_takeover() {
    use std::sync::{Arc, Mutex};
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &["--shared-storage"]);
    let mut owner = start(&etcd, root.path(), Some(0), &[]);
    serving(&owner).await;
    let standby = start(&etcd, root.path(), None, &[]);
    assert!(standby.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
    // The load: clients of the owner, each with one create outstanding at a time, until the
    // owner stops answering (or a bound). Every create answered is remembered.
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut load = Vec::new();
    for t in 0..4 {
        let client = owner.client().await;
        let answered = answered.clone();
        load.push(tokio::spawn(async move {
            for i in 0..100_000 {
                let name = format!("t{t}-{i}");
                if client.create(ROOT, &name, 0o644).await.is_err() {
                    return;
                }
                answered.lock().unwrap().push(name);
            }
        }));
    }
    let loaded = async {
        while answered.lock().unwrap().len() < 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), loaded)
        .await
        .expect("the owner answers creates");
    owner.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let before_stop = answered.lock().unwrap().len();
    std::fs::remove_file(root.path().join("shard-0/LOCK")).unwrap();
    // The standby claims the shard once the lease expired, waits out the lease's TTL and
    // margin again (shared storage), opens the store and serves it.
    let client = serving(&standby).await;
    let took_over = stopped.elapsed();
    assert!(
        standby
            .log_text()
            .contains("waiting out the last owner's lease"),
        "{}",
        standby.log_text()
    );
    for i in 0..20 {
        client
            .create(ROOT, &format!("new-{i}"), 0o644)
            .await
            .unwrap();
    }
    owner.signal(libc::SIGCONT);
    let code = wait_exit(&mut owner, Duration::from_secs(20));
    let log = owner.log_text();
    assert_eq!(code, Some(75), "{log}");
    assert!(log.contains("fail-stop"), "{log}");
    for task in load {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("every load client hears its server went")
            .unwrap();
    }
    // Everything the old owner answered — before the stop, and after the resume if it had
    // committed it before the stop — is in the store the new owner serves.
    let answered = answered.lock().unwrap().clone();
    for name in &answered {
        assert!(
            client.lookup(ROOT, name).await.is_ok(),
            "{name} was answered by the old owner and is lost; its log:\n{log}"
        );
    }
    for i in 0..20 {
        client.lookup(ROOT, &format!("new-{i}")).await.unwrap();
    }
    eprintln!(
        "takeover after SIGSTOP: {took_over:?}; creates answered: {before_stop} before the \
         stop, {} in all; the old owner {}",
        answered.len(),
        if log.contains("stopped committing") {
            "refused a pending commit"
        } else {
            "stopped at its keep-alive's check"
        }
    );
    drop(client);
    assert!(standby.stop().success());
    let (code, out) = mds(&["fsck", "--cluster", root.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_their_shard_from_any_servers_address() {
    use mds_client::proto::{Errno, Op, RenameHow, SHARD_SHIFT};
    use mds_client::{ConnectOptions, Router};
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    let c0 = serving(&s0).await;
    let c1 = serving(&s1).await;

    // Each server knows the map; a server asked about another shard's inode says so before
    // it does anything.
    let map = Router::connect(&s1.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap()
        .map();
    assert_eq!(map.shard, Some(1));
    let located: Vec<(u16, String)> = map
        .shards
        .iter()
        .map(|s| (s.shard, s.address.clone()))
        .collect();
    assert_eq!(
        located,
        [(0, s0.addr.to_string()), (1, s1.addr.to_string())]
    );
    assert_eq!(
        c1.getattr(ROOT).await.unwrap_err().errno(),
        Some(Errno::EREMOTE)
    );
    assert_eq!(
        c1.mkdir(ROOT, "x", 0o755).await.unwrap_err().errno(),
        Some(Errno::EREMOTE)
    );
    // Across shards: EXDEV, as across file systems, with nothing changed.
    let d = c0.mkdir(ROOT, "d", 0o755).await.unwrap();
    let elsewhere = 1 << SHARD_SHIFT | 2;
    let renamed = c0
        .rename_how(ROOT, "d", elsewhere, "d", RenameHow::Replace)
        .await;
    assert_eq!(renamed.unwrap_err().errno(), Some(Errno::EXDEV));
    assert_eq!(
        c0.link(elsewhere, ROOT, "l").await.unwrap_err().errno(),
        Some(Errno::EXDEV)
    );
    assert_eq!(c0.lookup(ROOT, "d").await.unwrap().ino, d.ino);

    // The router, given shard 1's address, sends the root's requests to shard 0.
    let router = Router::connect(&s1.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    let made = router.mkdir(ROOT, "via-1", 0o755).await.unwrap();
    assert_eq!(made.ino >> SHARD_SHIFT, 0);
    assert_eq!(router.resolve("/via-1").await.unwrap().ino, made.ino);
    assert_eq!(c0.lookup(ROOT, "via-1").await.unwrap().ino, made.ino);
    match router.call(Op::Getattr { ino: ROOT }).await.unwrap() {
        mds_client::proto::Body::Attr(a) => assert_eq!(a.ino, ROOT),
        other => panic!("{other:?}"),
    }
    // So does mdsctl.
    let ctl = |args: &[&str]| common::cluster::mdsctl(s1.addr, args);
    ctl(&["mkdir", "/by-mdsctl"]);
    assert!(ctl(&["ls", "/"]).contains("by-mdsctl"));
    assert!(c0.lookup(ROOT, "by-mdsctl").await.is_ok());
    drop((c0, c1, router));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_a_cluster_the_map_is_empty_and_everything_goes_to_the_server() {
    use mds_client::{ConnectOptions, Router};
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let router = Router::connect(&server.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    let map = router.map();
    assert_eq!((map.shard, map.shards.len()), (None, 0));
    let d = router.mkdir(ROOT, "d", 0o755).await.unwrap();
    assert_eq!(router.resolve("/d").await.unwrap().ino, d.ino);
    // Nothing ever changes there: a long-poll is answered at once, whatever it asks.
    let client = server.client().await;
    let asked = client.shard_map_after(7, Duration::from_secs(60));
    let (revision, map) = tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("answered at once outside a cluster")
        .unwrap();
    assert_eq!((revision, map), (0, mds_client::proto::ShardMap::default()));
}

/// SHARD_MAP_WAIT: answered at once for an older revision; held while nothing changes,
/// without stalling the other connections of its server (one partition: the same thread);
/// answered with a newer revision when an owner goes, and then each change until the
/// standby owns the shard; and ended by a SIGTERM, which does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_polled_shard_map_is_held_until_the_owners_change() {
    use mds_client::proto::ShardMap;
    let owner_of = |map: &ShardMap, shard: u16| {
        map.shards
            .iter()
            .find(|s| s.shard == shard)
            .map(|s| s.address.clone())
    };
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &["--partitions", "1"]);
    let c0 = serving(&s0).await;
    let c1 = serving(&s1).await;
    let standby = start(&etcd, root.path(), None, &[]);
    assert!(standby.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
    let watcher = s1.client().await;
    let minute = Duration::from_secs(60);
    let at_once = Duration::from_secs(10);
    // Revision 0 is older than any view: answered at once, though a minute was asked for.
    // Asked until s1's view has every server (the standby's registration is a change too).
    let (revision, map) = loop {
        let asked = watcher.shard_map_after(0, minute);
        let (revision, map) = tokio::time::timeout(at_once, asked)
            .await
            .expect("answered at once")
            .unwrap();
        if map.servers.contains(&standby.addr.to_string()) && map.shards.len() == 2 {
            break (revision, map);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(revision > 0);
    assert_eq!(owner_of(&map, 0), Some(s0.addr.to_string()));
    let held = tokio::spawn({
        let watcher = watcher.clone();
        async move { watcher.shard_map_after(revision, minute).await }
    });
    // Meanwhile every other connection is served, on its server's one partition too.
    let other = s1.client().await;
    for i in 0..20 {
        other.ping().await.unwrap();
        assert_eq!(c1.shard_map().await.unwrap(), map);
        c0.mkdir(ROOT, &format!("d{i}"), 0o755).await.unwrap();
    }
    assert!(!held.is_finished(), "nothing changed: still held");
    // The owner of shard 0 goes: answered with a newer revision, then each change in turn
    // until the standby owns the shard.
    s0.kill();
    let answered = tokio::time::timeout(Duration::from_secs(20), held)
        .await
        .expect("answered once the owners changed")
        .unwrap()
        .unwrap();
    assert!(answered.0 > revision, "{answered:?}");
    let mut seen = vec![answered];
    while owner_of(&seen.last().unwrap().1, 0) != Some(standby.addr.to_string()) {
        assert!(seen.len() < 10, "{seen:?}");
        let asked = watcher.shard_map_after(seen.last().unwrap().0, minute);
        let next = tokio::time::timeout(Duration::from_secs(30), asked)
            .await
            .expect("answered when the standby claimed the shard")
            .unwrap();
        assert!(next.0 > seen.last().unwrap().0, "{next:?} after {seen:?}");
        seen.push(next);
    }
    // A SIGTERM ends a held wait (answered with the map as it is) instead of waiting out the
    // minute it asked for.
    let (revision, _) = seen.pop().unwrap();
    let held = tokio::spawn({
        let watcher = watcher.clone();
        async move { watcher.shard_map_after(revision, minute).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished());
    let asked = Instant::now();
    assert!(s1.stop().success());
    let stopped = asked.elapsed();
    let (answered, _) = held.await.unwrap().expect("answered before the close");
    assert_eq!(answered, revision);
    assert!(
        stopped < Duration::from_secs(30),
        "stopped after {stopped:?}"
    );
    drop((c0, c1, other, watcher));
    assert!(standby.stop().success());
}

/// The client library's watch: a `Router` given one, and a `ResilientConn` (which watches on
/// its own), learn that a standby took shard 0 over while nobody sends anything; the next
/// request goes straight to the standby — the router's does not fail on its connection to
/// the old owner, the connection's is not a resend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_and_a_resilient_conn_learn_a_new_owner_before_a_request_fails() {
    use std::sync::Arc;

    use mds_client::proto::{Body, Op};
    use mds_client::resilient::{Outages, ResilientConn};
    use mds_client::{ConnectOptions, MapWatch, Router, Session};
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    serving(&s0).await;
    serving(&s1).await;
    let standby = start(&etcd, root.path(), None, &[]);
    assert!(standby.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
    let options = ConnectOptions::default();
    let watch = MapWatch::start(&s1.addr.to_string(), &options);
    let router = Router::connect(&s1.addr.to_string(), &options)
        .await
        .unwrap()
        .following(watch.clone());
    // The router's connection to shard 0 is to its owner now.
    let d = router.mkdir(ROOT, "d", 0o755).await.unwrap();
    let conn = ResilientConn::connect(
        &s0.addr.to_string(),
        Arc::new(Session::new()),
        Duration::from_secs(30),
        Outages::new(),
    )
    .await
    .unwrap();
    let create = |name: &str| Op::Create {
        parent: ROOT,
        name: name.into(),
        mode: 0o644,
    };
    assert!(
        conn.call(create("before"))
            .await
            .unwrap()
            .reply
            .result
            .is_ok()
    );
    let own_watch = conn
        .map_watch()
        .expect("a connection in a cluster watches")
        .clone();
    // A planned handover: the owner stops, the standby claims shard 0.
    // Only what a watch has heard of can it turn to: one that knows no server but s0 has
    // nowhere to ask once s0 is gone (s0's own view learns of the others from etcd a few
    // milliseconds after it serves, and a SIGTERM may come sooner).
    let everyone = |w: &mds_client::Watched| w.map.servers.len() == 3;
    for watch in [&watch, &own_watch] {
        tokio::time::timeout(Duration::from_secs(30), watch.wait_for(everyone))
            .await
            .expect("the watch hears of all three servers");
    }
    assert!(s0.stop().success());
    let standby_addr = standby.addr.to_string();
    let to_standby = |w: &mds_client::Watched| w.owner_of(0) == Some(standby_addr.as_str());
    for (which, watch) in [("router's", &watch), ("connection's", &own_watch)] {
        if tokio::time::timeout(Duration::from_secs(30), watch.wait_for(to_standby))
            .await
            .is_err()
        {
            panic!(
                "the {which} watch did not learn the new owner {standby_addr}: it has {:?}",
                watch.latest()
            );
        }
    }
    assert_eq!(router.getattr(d.ino).await.unwrap().ino, d.ino);
    assert_eq!(router.lookup(ROOT, "d").await.unwrap().ino, d.ino);
    let after = conn.call(create("after")).await.unwrap();
    assert!(
        matches!(after.reply.result, Ok(Body::Attr(_))),
        "{:?}",
        after.reply.result
    );
    assert!(!after.resent, "sent once, to the new owner");
    assert_eq!(conn.server(), standby_addr);
    let map = router.map();
    assert_eq!(
        map.shards
            .iter()
            .find(|s| s.shard == 0)
            .map(|s| s.address.clone()),
        Some(standby_addr)
    );
    drop((router, conn, watch, own_watch));
    assert!(standby.stop().success());
    assert!(s1.stop().success());
}

/// A client of a shard follows it to the standby that takes it over: it asks the cluster's
/// other servers who serves its shard now and reconnects there as the same session, which the
/// standby knows from the store — so nothing acknowledged is lost, with early replies too
/// (replayed into the standby's recovery window), and nothing is done twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_its_shard_to_the_standby_in_both_ack_modes() {
    use std::sync::Arc;

    use mds_client::Session;
    use mds_client::proto::{Body, Op};
    use mds_client::resilient::{Outages, ResilientConn};
    for ack in ["commit", "early"] {
        let etcd = Etcd::start();
        let root = tempfile::tempdir().unwrap();
        init(&etcd, root.path(), "1", &[]);
        // Early replies with commits 2 s apart: the kill finds the creates after the first
        // (which waits for the commit that makes the client known) not durable yet.
        let interval = if ack == "early" { "2s" } else { "0" };
        let flags = [
            "--ack",
            ack,
            "--commit-interval",
            interval,
            "--recovery-window",
            "20s",
        ];
        let owner = start(&etcd, root.path(), Some(0), &flags);
        serving(&owner).await;
        let standby = start(&etcd, root.path(), None, &flags);
        assert!(standby.wait_for_log("waiting for a shard without owner", Duration::from_secs(20)));
        // The owner lists the standby among the cluster's servers once its watch saw it join.
        let listed = async {
            loop {
                let map = mds_client::Router::connect(
                    &owner.addr.to_string(),
                    &mds_client::ConnectOptions::default(),
                )
                .await
                .unwrap()
                .map();
                if map.servers.contains(&standby.addr.to_string()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), listed)
            .await
            .expect("the standby joins the map");
        let conn = ResilientConn::connect(
            &owner.addr.to_string(),
            Arc::new(Session::new()),
            Duration::from_secs(30),
            Outages::new(),
        )
        .await
        .unwrap();
        let create = |name: String| Op::Create {
            parent: ROOT,
            name,
            mode: 0o644,
        };
        let mut made = Vec::new();
        for i in 0..40 {
            let answer = conn.call(create(format!("f{i}"))).await.unwrap();
            match answer.reply.result {
                Ok(Body::Attr(a)) => made.push(a.ino),
                other => panic!("{ack}: {other:?}"),
            }
        }
        owner.kill();
        // The first request after the kill reconnects to the standby once it serves.
        let after = conn.call(create("after".into())).await.unwrap();
        assert!(
            after.reply.result.is_ok(),
            "{ack}: {:?}",
            after.reply.result
        );
        for (i, ino) in made.iter().enumerate() {
            let answer = conn
                .call(Op::Lookup {
                    parent: ROOT,
                    name: format!("f{i}"),
                })
                .await
                .unwrap();
            match answer.reply.result {
                Ok(Body::Attr(a)) => assert_eq!(a.ino, *ino, "{ack}: f{i}"),
                other => panic!("{ack}: f{i} after the failover: {other:?}"),
            }
        }
        assert!(standby.log_text().contains("claimed shard 0"));
        let replayed = mds_testkit::scrape_metric(standby.metrics, "mds_replayed_requests_total");
        if ack == "early" {
            assert!(
                replayed.unwrap_or(0.0) > 0.0,
                "the unsafe creates came back by replay"
            );
        }
        drop(conn);
        assert!(standby.stop().success());
        let (code, out) = common::fsck(&root.path().join("shard-0"));
        assert_eq!(code, 0, "{ack}: {out}");
    }
}

/// Waits until `standby` (following shard 0) holds the owner's last commit.
async fn caught_up(owner: &Server, standby: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let last = mds_testkit::scrape_metric(owner.metrics, "mds_last_committed_transno");
        let held = mds_testkit::scrape_metric(
            standby.metrics,
            "mds_standby_followed_transno{shard=\"0\"}",
        );
        if last.is_some() && last == held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby holds {held:?}, the owner committed {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_standby_takes_over_warm_with_every_commit() {
    use mds_proto::{OpenFlags, XattrSet};
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "1", &[]);
    let owner = start(&etcd, root.path(), Some(0), &[]);
    let client = serving(&owner).await;
    let dir = client.mkdir(ROOT, "before", 0o755).await.unwrap().ino;
    for i in 0..20 {
        client.create(dir, &format!("f{i}"), 0o644).await.unwrap();
    }
    let standby = start(&etcd, root.path(), None, &["--follow", "0"]);
    assert!(standby.wait_for_log("shard 0 loaded; following", Duration::from_secs(20)));
    // While it follows: entries, directories, links, renames, attributes, removals, data.
    let mut made = Vec::new();
    for d in 0..4 {
        let sub = client
            .mkdir(ROOT, &format!("d{d}"), 0o755)
            .await
            .unwrap()
            .ino;
        for i in 0..50 {
            let a = client.create(sub, &format!("f{i}"), 0o600).await.unwrap();
            made.push((sub, format!("f{i}"), a.ino));
        }
    }
    let (d0, _, f0) = made[0].clone();
    client
        .setxattr(f0, "user.k", b"v1", XattrSet::Either)
        .await
        .unwrap();
    client.link(f0, ROOT, "hard").await.unwrap();
    client.rename(d0, "f1", ROOT, "moved").await.unwrap();
    client.unlink(d0, "f2").await.unwrap();
    client.rmdir(ROOT, "before").await.unwrap_err(); // not empty
    for i in 0..20 {
        client.unlink(dir, &format!("f{i}")).await.unwrap();
    }
    client.rmdir(ROOT, "before").await.unwrap();
    caught_up(&owner, &standby).await;
    let scrape = |metric: &str| mds_testkit::scrape_metric(standby.metrics, metric);
    assert_eq!(
        scrape("mds_standby_follow_loads_total{shard=\"0\"}"),
        Some(1.0)
    );
    assert_eq!(scrape("mds_standby_following{shard=\"0\"}"), Some(1.0));
    let read_at = scrape("mds_standby_last_follow_timestamp_seconds{shard=\"0\"}").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 10.0..=now + 1.0).contains(&read_at),
        "{read_at} at {now}"
    );
    // A truncate of 20 blocks is one range deletion, which the follower cannot read: it
    // loads the shard again, and follows on.
    let data = client.create(ROOT, "data", 0o644).await.unwrap().ino;
    let flags = OpenFlags {
        write: true,
        read: true,
        ..OpenFlags::default()
    };
    let (handle, _) = client.open(data, flags).await.unwrap();
    client
        .write_all(handle, 0, &vec![7u8; 20 * 4096])
        .await
        .unwrap();
    client.ftruncate(handle, 100).await.unwrap();
    client.release(handle).await.unwrap();
    assert!(standby.wait_for_log("loading it again", Duration::from_secs(20)));
    caught_up(&owner, &standby).await;
    assert_eq!(
        mds_testkit::scrape_metric(
            standby.metrics,
            "mds_standby_follow_loads_total{shard=\"0\"}"
        ),
        Some(2.0)
    );
    // The last creates may come after the follower's last look: the takeover reads them.
    for i in 0..30 {
        client
            .create(ROOT, &format!("last{i}"), 0o644)
            .await
            .unwrap();
    }
    drop(client);
    owner.kill();
    let client = serving(&standby).await;
    assert!(
        standby.wait_for_log("namespace taken over warm", Duration::from_secs(5)),
        "{}",
        standby.log_text()
    );
    // It follows no more: MdsStandbyNotFollowing stays quiet because it owns the shard.
    assert_eq!(scrape("mds_standby_following{shard=\"0\"}"), Some(0.0));
    assert_eq!(scrape("mds_shard_owned{shard=\"0\"}"), Some(1.0));
    for (parent, name, ino) in &made[3..] {
        assert_eq!(
            client.lookup(*parent, name).await.unwrap().ino,
            *ino,
            "{name}"
        );
    }
    assert_eq!(client.lookup(ROOT, "hard").await.unwrap().nlink, 2);
    assert_eq!(client.lookup(ROOT, "moved").await.unwrap().ino, made[1].2);
    assert!(client.lookup(d0, "f2").await.is_err());
    assert!(client.lookup(ROOT, "before").await.is_err());
    assert_eq!(client.getxattr(f0, "user.k").await.unwrap(), b"v1");
    assert_eq!(client.getattr(data).await.unwrap().size, 100);
    for i in 0..30 {
        client.lookup(ROOT, &format!("last{i}")).await.unwrap();
    }
    assert_eq!(client.readdir_all(d0).await.unwrap().len(), 48);
    client.create(ROOT, "after", 0o644).await.unwrap();
    // A planned handover to another following standby: the owner flushes as it stops, and
    // the follower still reads its last commits (the cluster's store archives that log).
    let second = start(&etcd, root.path(), None, &["--follow", "0"]);
    assert!(second.wait_for_log("shard 0 loaded; following", Duration::from_secs(20)));
    for i in 0..30 {
        client
            .create(ROOT, &format!("handed{i}"), 0o644)
            .await
            .unwrap();
    }
    drop(client);
    assert!(standby.stop().success());
    let client = serving(&second).await;
    assert!(
        second.wait_for_log("namespace taken over warm", Duration::from_secs(5)),
        "{}",
        second.log_text()
    );
    for i in 0..30 {
        client.lookup(ROOT, &format!("handed{i}")).await.unwrap();
    }
    client.lookup(ROOT, "after").await.unwrap();
    drop(client);
    assert!(second.stop().success());
    let (code, out) = common::fsck(&root.path().join("shard-0"));
    assert_eq!(code, 0, "{out}");
}
