//! The two reply paths as a client meets them: the per-CPU path's partner draining, tested by
//! stalling one partition's drain on purpose, and the global baseline (`--reply-path global`)
//! answering every client with its lock wait reported. (Every other reply test runs on both
//! paths: scripts/test.sh runs them again with `MDS_TEST_REPLY_PATH=global`.)

mod common;

use std::time::Duration;

use common::{InProcess, sample, scrape};
use mds::queue::ReplyPath;
use mds_client::{Client, ROOT};

/// Clients until one lands on `partition` (SO_REUSEPORT spreads connections by their port).
async fn client_on(server: &InProcess, partition: u32) -> Client {
    for _ in 0..200 {
        let client = server.client().await;
        if client.partition() == partition {
            return client;
        }
    }
    panic!("no connection landed on partition {partition} in 200 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partner_drains_for_a_partition_whose_drain_does_not_begin() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.reply_path = ReplyPath::PerCpu;
    // Partition 0's drain waits far longer than its partner's bound after every wake.
    config.keys.testing.drain_stall = Some(Duration::from_secs(3));
    config.keys.partner_drain_after = Duration::from_millis(2);
    let server = InProcess::start(config);
    let stalled = client_on(&server, 0).await;
    let dir_ino = stalled.mkdir(ROOT, "stalled", 0o755).await.unwrap().ino;
    // Each create's commit wakes partition 0, whose drain then sleeps; its partner releases
    // the reply, which leaves through partition 0's own writer (its runtime is not blocked,
    // only its drain). Fifty creates in a row finish long before the stall would let one.
    let started = std::time::Instant::now();
    for i in 0..50 {
        stalled
            .create(dir_ino, &format!("f{i}"), 0o644)
            .await
            .unwrap();
    }
    let elapsed = started.elapsed();
    let text = scrape(server.metrics);
    let partner = sample(&text, r#"mds_partner_drains_total{partition="0"}"#).unwrap();
    assert!(
        partner >= 50.0,
        "every create after the mkdir was released by the partner: {partner} partner drains \
         in {elapsed:?}"
    );
    // The stalled partition still drains (late) and finds its queue empty: nothing twice.
    assert_eq!(stalled.readdir_all(dir_ino).await.unwrap().len(), 50);
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_partner_draining_off_a_stalled_partition_answers_only_after_its_stall() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.reply_path = ReplyPath::PerCpu;
    config.keys.testing.drain_stall = Some(Duration::from_millis(300));
    config.keys.partner_drain_after = Duration::ZERO;
    let server = InProcess::start(config);
    let stalled = client_on(&server, 0).await;
    let started = std::time::Instant::now();
    for i in 0..3 {
        stalled
            .create(ROOT, &format!("late{i}"), 0o644)
            .await
            .unwrap();
    }
    // A lower bound, which no scheduler noise can break: each reply waited out the stall,
    // nobody drained for the stalled partition. (The partner-drain counter is not compared:
    // in-process servers of one test binary share the metrics recorder.)
    assert!(started.elapsed() >= Duration::from_millis(900));
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_path_answers_every_client_and_reports_its_lock_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.reply_path = ReplyPath::Global;
    config.keys.service_threads = 4;
    let server = InProcess::start(config);
    let clients: Vec<Client> = futures::future::join_all((0..8).map(|_| server.client())).await;
    let dirs: Vec<u64> =
        futures::future::join_all(clients.iter().enumerate().map(|(i, c)| async move {
            c.mkdir(ROOT, &format!("d{i}"), 0o755).await.unwrap().ino
        }))
        .await;
    futures::future::join_all(clients.iter().zip(&dirs).map(|(c, &d)| async move {
        for i in 0..100 {
            c.create(d, &format!("f{i}"), 0o644).await.unwrap();
        }
        assert_eq!(c.readdir_all(d).await.unwrap().len(), 100);
    }))
    .await;
    let statfs = clients[0].statfs().await.unwrap();
    assert_eq!(statfs.files, 800);
    let text = scrape(server.metrics);
    let waits = sample(&text, "mds_service_lock_wait_seconds_count").unwrap();
    assert!(
        waits >= 808.0,
        "every reply is pushed and taken under the service lock: {waits}"
    );
    assert!(
        text.contains(r#"mds_service_lock_wait_seconds_bucket{le="0.0000001"}"#),
        "the lock wait has its own fine buckets"
    );
    server.stop().unwrap();
}
