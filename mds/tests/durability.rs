//! Crash and restart: a server killed with SIGKILL while clients create loses no acknowledged
//! create, restarts on the same data, and leaves a store `mds fsck` finds clean; a SIGTERM
//! stops it cleanly after answering what was pending, leaving no write-ahead log to replay;
//! transnos keep increasing across restarts.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::fsck;
use mds_client::{Client, ROOT, Session};
use mds_proto::{Body, Op};

/// With the edit log (the default), checkpointing every ~64 KB: the kill leaves images
/// checkpoints wrote, edits the checkpointer held, and perhaps a checkpoint cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_creates_loses_no_acknowledged_create() {
    sigkill_during_creates(&["--inject-checkpoint-bytes", "64k"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_creates_without_the_edit_log_loses_no_acknowledged_create() {
    sigkill_during_creates(&["--edit-log", "off"]).await;
}

async fn sigkill_during_creates(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), args);
    let setup = server.client().await;
    let clients = 8;
    let mut dirs = Vec::new();
    for i in 0..clients {
        dirs.push(
            setup
                .mkdir(ROOT, &format!("c{i}"), 0o755)
                .await
                .unwrap()
                .ino,
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for (i, &d) in dirs.iter().enumerate() {
        let client = server.client().await;
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            // Acknowledged names; a create that got no reply may or may not have happened.
            let mut acked = Vec::new();
            let mut n = 0u64;
            // Bounded: the kill comes long before this many.
            while !stop.load(Ordering::Relaxed) && n < 200_000 {
                let name = format!("f{n}");
                n += 1;
                match client.create(d, &name, 0o644).await {
                    Ok(attr) => acked.push((name, attr.ino)),
                    Err(_) => break, // the server is gone
                }
            }
            (i, acked)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in workers {
        acked.push(w.await.unwrap());
    }
    let total: usize = acked.iter().map(|(_, a)| a.len()).sum();
    assert!(total > 100, "the workload did not run ({total} creates)");

    let (code, out) = fsck(dir.path());
    assert_eq!(code, 0, "fsck after SIGKILL:\n{out}");

    let server = common::start(dir.path(), args);
    let c = server.client().await;
    for (i, names) in &acked {
        let d = c.lookup(ROOT, &format!("c{i}")).await.unwrap().ino;
        let listed: std::collections::HashMap<String, u64> = c
            .readdir_all(d)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.ino))
            .collect();
        for (name, ino) in names {
            assert_eq!(
                listed.get(name),
                Some(ino),
                "acknowledged create c{i}/{name} lost"
            );
        }
    }
    // The restarted server goes on with new transnos and inode numbers.
    let stat = c.statfs().await.unwrap();
    let reply = c
        .call_reply(Op::Create {
            parent: ROOT,
            name: "after".into(),
            mode: 0o644,
        })
        .await
        .unwrap();
    assert_eq!(reply.transno, stat.last_committed + 1);
    let Ok(Body::Attr(attr)) = reply.result else {
        panic!("{reply:?}")
    };
    let max_ino = acked
        .iter()
        .flat_map(|(_, a)| a.iter().map(|(_, ino)| *ino))
        .max()
        .unwrap();
    assert!(attr.ino > max_ino, "inode numbers are never reused");
    assert!(server.stop().success());
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// A server back on an older copy of its store (a backup restored, or a store that lost
/// commits) lacks what its last start reported durable: the returning client finds it,
/// once, with both figures, and a start that kept everything is no such finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_client_finds_a_server_that_went_back_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let (data, copy) = (dir.path().join("data"), dir.path().join("copy"));
    let session = Arc::new(Session::new());
    let server = common::start(&data, &[]);
    let addr = server.addr.to_string();
    let c = Client::connect_session(&addr, session.clone())
        .await
        .unwrap();
    c.mkdir(ROOT, "kept", 0o755).await.unwrap();
    drop(c);
    assert!(server.stop().success());
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());

    let server = common::start(&data, &["--listen", &addr]);
    let c = Client::connect_session(&addr, session.clone())
        .await
        .unwrap();
    for i in 0..20 {
        c.create(ROOT, &format!("f{i}"), 0o644).await.unwrap();
    }
    let reported = session.last_committed();
    drop(c);
    assert!(server.stop().success());
    assert_eq!(session.rollbacks(), 0, "a restart that kept everything");

    // Back on the copy: the 20 creates are gone.
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::rename(&copy, &data).unwrap();
    let server = common::start(&data, &["--listen", &addr]);
    let c = Client::connect_session(&addr, session.clone())
        .await
        .unwrap();
    assert_eq!(session.rollbacks(), 1);
    let found = session.take_rollbacks();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].reported, reported);
    assert!(
        found[0].now < reported && found[0].now == c.statfs().await.unwrap().last_committed,
        "{found:?}"
    );
    assert_eq!(c.readdir_all(ROOT).await.unwrap().len(), 1, "only `kept`");
    drop(c);
    assert!(server.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_pending_requests_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    // A long commit interval: replies are pending when SIGTERM arrives.
    let server = common::start(dir.path(), &["--commit-interval", "60s"]);
    let c = server.client().await;
    let mut calls = Vec::new();
    for i in 0..20 {
        let c = c.clone();
        calls.push(tokio::spawn(async move {
            c.create(ROOT, &format!("f{i}"), 0o644).await
        }));
    }
    // Wait until all 20 executed (they are pending, not committed).
    for _ in 0..200 {
        if c.statfs().await.unwrap().last_transno == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        c.statfs().await.unwrap().last_committed,
        0,
        "the interval holds the commit"
    );
    let started = std::time::Instant::now();
    let log = server.log.clone();
    let status = tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    assert!(
        status.success(),
        "exit status {status:?}: {:?}",
        log.lock().unwrap()
    );
    // Waiting for the 60 s interval would take a minute; any sane shutdown takes far less.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "shutdown waited for the commit interval"
    );
    for call in calls {
        call.await
            .unwrap()
            .expect("a pending create is answered at shutdown");
    }
    // The stop flushed the memtables: the next start replays no batch of the write-ahead
    // log. (Its files' lengths say nothing: with the edit log, log files no family needs are
    // kept to be written over, old bytes and all.) RocksDB's own log of that start says how
    // far it recovered each log file; the largest sequence number is "nothing found".
    let server = common::start(dir.path(), &[]);
    let rocksdb_log = std::fs::read_to_string(dir.path().join("LOG")).unwrap();
    let recovered: Vec<&str> = rocksdb_log
        .lines()
        .filter(|line| line.contains("Recovered to log #"))
        .collect();
    assert!(
        !recovered.is_empty()
            && recovered
                .iter()
                .all(|line| line.ends_with("next seq #72057594037927935")),
        "the start after a clean stop replayed the log: {recovered:?}"
    );
    let c = server.client().await;
    assert_eq!(c.readdir_all(ROOT).await.unwrap().len(), 20);
    assert_eq!(c.statfs().await.unwrap().last_committed, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_interval_groups_and_sync_forces_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &["--commit-interval", "30s"]);
    let writer = server.client().await;
    let other = server.client().await;
    let pending = {
        let writer = writer.clone();
        tokio::spawn(async move { writer.create(ROOT, "f", 0o644).await })
    };
    for _ in 0..200 {
        if other.statfs().await.unwrap().last_transno == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!pending.is_finished(), "reply before its commit");
    // SYNC from another client forces the commit now, not in 30 s.
    tokio::time::timeout(Duration::from_secs(10), other.sync())
        .await
        .unwrap()
        .unwrap();
    let attr = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(other.lookup(ROOT, "f").await.unwrap().ino, attr.ino);
    assert_eq!(other.statfs().await.unwrap().last_committed, 1);
}
