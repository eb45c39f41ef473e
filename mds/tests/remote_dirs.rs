//! Remote directories (MKDIR_REMOTE, and RMDIR of one) in a two-shard cluster against a real
//! etcd: the entry on the parent's shard, the inode and its contents on the child's; LOOKUP,
//! READDIR and paths across them through the router (and mdsctl); EXDEV for what this
//! version does not move across shards; the child's pending directory confirmed by its
//! scrub, and a removed one deleted by it, refusing new entries meanwhile; RMDIR's checks
//! split over the two shards (the sticky bit's owner is the child's to check). And a SIGKILL
//! at each step of both, on either side: after a standby takes the killed shard over, the
//! client's operation happened exactly once (a resend after the entry's commit is answered
//! from its record), the scrub leaves no pending directory behind, and `mds fsck --cluster`
//! is clean.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{init, serving, start};
use mds_client::proto::{Body, Cred, Errno, Op, RenameHow, SHARD_SHIFT, SetAttr, shard_of};
use mds_client::resilient::{Outages, ResilientConn};
use mds_client::{ClientError, ConnectOptions, ROOT, Router, Session};
use mds_testkit::{Etcd, Server};

fn scraped(server: &Server, series: &str) -> Option<f64> {
    mds_testkit::scrape_metric(server.metrics, series)
}

/// Waits until the scrub of the shard `server` serves has confirmed `confirmed` pending
/// directories and deleted `deleted`, and none is left.
fn wait_scrubbed(server: &Server, confirmed: f64, deleted: f64) {
    wait_outcomes(server, &[("confirmed", confirmed), ("deleted", deleted)]);
}

/// Waits until the scrub of the shard `server` serves counts each of `outcomes` (of
/// `mds_remote_dirs_scrubbed_total`) as given, and no directory is left pending.
fn wait_outcomes(server: &Server, outcomes: &[(&str, f64)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let count = |outcome: &str| {
        scraped(
            server,
            &format!("mds_remote_dirs_scrubbed_total{{outcome=\"{outcome}\"}}"),
        )
    };
    let counted = || -> Vec<_> { outcomes.iter().map(|(o, _)| (*o, count(o))).collect() };
    while Instant::now() < deadline {
        if outcomes.iter().all(|(o, n)| count(o) == Some(*n))
            && scraped(server, "mds_remote_dirs_pending") == Some(0.0)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{}: counted {:?}, not {outcomes:?}; {:?} pending:\n{}",
        server.addr,
        counted(),
        scraped(server, "mds_remote_dirs_pending"),
        server.log_text()
    );
}

/// `mds fsck --cluster ROOT`: (exit code, output).
fn fsck_cluster(root: &Path) -> (i32, String) {
    let out = Command::new(common::MDS)
        .args(["fsck", "--cluster", root.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn errno<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Option<Errno> {
    r.expect_err("an error").errno()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_directory_lives_on_its_shard_and_its_entry_on_its_parents() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    serving(&s0).await;
    serving(&s1).await;
    let router = Router::connect(&s0.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();

    // The directory is shard 1's; its entry, in the root, shard 0's.
    // At once: shard 0 may not have seen shard 1's claim yet, and waits for it.
    let r = router.mkdir_on(ROOT, "r", 0o750, 1).await.unwrap();
    assert_eq!(shard_of(r.ino), 1, "{r:?}");
    assert_eq!(r.mode & 0o7777, 0o750);
    let c0 = s0.client().await;
    match c0
        .call(Op::Lookup {
            parent: ROOT,
            name: "r".into(),
        })
        .await
    {
        Ok(Body::Remote { ino, .. }) => assert_eq!(ino, r.ino),
        other => panic!("LOOKUP of a remote entry on its parent's shard: {other:?}"),
    }
    assert_eq!(router.lookup(ROOT, "r").await.unwrap().ino, r.ino);
    assert_eq!(
        c0.getattr(ROOT).await.unwrap().nlink,
        3,
        "the root counts it"
    );
    let listed = router.readdir_all(ROOT).await.unwrap();
    assert!(
        listed.iter().any(|e| e.name == "r" && e.ino == r.ino),
        "{listed:?}"
    );
    // What goes in it is shard 1's, by path from any server.
    let f = router.create(r.ino, "f", 0o644).await.unwrap();
    assert_eq!(shard_of(f.ino), 1);
    let sub = router.mkdir(r.ino, "sub", 0o755).await.unwrap();
    assert_eq!(shard_of(sub.ino), 1);
    assert_eq!(router.resolve("/r/sub").await.unwrap().ino, sub.ino);
    assert_eq!(router.resolve("/r/f").await.unwrap().ino, f.ino);
    // A plain client of shard 0 is told where the entry points.
    assert!(matches!(
        c0.lookup(ROOT, "r").await,
        Err(ClientError::Remote(ino)) if ino == r.ino
    ));
    // ".." of a remote directory is its parent on the other shard (what a mount decoding a
    // file handle asks), of a directory in it the remote directory.
    let c1 = s1.client().await;
    assert!(matches!(
        c1.lookup(r.ino, "..").await,
        Err(ClientError::Remote(ino)) if ino == ROOT
    ));
    assert_eq!(c1.lookup(sub.ino, "..").await.unwrap().ino, r.ino);
    assert_eq!(router.lookup(r.ino, "..").await.unwrap().ino, ROOT);

    // A name that exists, and a shard the cluster does not have, are refused; the parent's
    // own shard is a plain MKDIR.
    assert_eq!(
        errno(router.mkdir_on(ROOT, "r", 0o755, 1).await),
        Some(Errno::EEXIST)
    );
    assert_eq!(
        errno(router.mkdir_on(ROOT, "nowhere", 0o755, 9).await),
        Some(Errno::EINVAL)
    );
    assert!(router.lookup(ROOT, "nowhere").await.is_err());
    let local = router.mkdir_on(ROOT, "local", 0o755, 0).await.unwrap();
    assert_eq!(shard_of(local.ino), 0);
    // Nested: a remote directory inside a remote directory, back on shard 0.
    let back = router.mkdir_on(r.ino, "back", 0o755, 0).await.unwrap();
    assert_eq!(shard_of(back.ino), 0);
    assert_eq!(router.resolve("/r/back").await.unwrap().ino, back.ino);

    // Not moved or unlinked across shards in this version; RMDIR checks it is empty.
    assert_eq!(errno(router.rmdir(ROOT, "r").await), Some(Errno::ENOTEMPTY));
    assert_eq!(errno(router.unlink(ROOT, "r").await), Some(Errno::EXDEV));
    assert_eq!(
        errno(
            router
                .rename_how(ROOT, "r", ROOT, "r2", RenameHow::Replace)
                .await
        ),
        Some(Errno::EXDEV)
    );
    assert_eq!(
        errno(
            router
                .rename_how(ROOT, "local", ROOT, "r", RenameHow::Replace)
                .await
        ),
        Some(Errno::EXDEV)
    );
    // Inside its shard, everything as before.
    router.unlink(r.ino, "f").await.unwrap();
    router.rmdir(r.ino, "sub").await.unwrap();

    // mdsctl, given shard 1's server.
    let ctl = |args: &[&str]| common::cluster::mdsctl(s1.addr, args);
    ctl(&["mkdir", "--shard", "1", "/by-mdsctl"]);
    ctl(&["mkdir", "/by-mdsctl/inside"]);
    assert!(ctl(&["ls", "/"]).contains("by-mdsctl"));
    assert!(ctl(&["ls", "/by-mdsctl"]).contains("inside"));
    let made = router.resolve("/by-mdsctl").await.unwrap();
    assert_eq!(made.ino >> SHARD_SHIFT, 1);

    // Each shard's scrub confirms its pending directories with the parent's shard.
    wait_scrubbed(&s1, 2.0, 0.0);
    wait_scrubbed(&s0, 1.0, 0.0);
    assert_eq!(
        scraped(
            &s1,
            "mds_requests_total{op=\"make_pending_dir\",result=\"ok\"}"
        ),
        Some(2.0)
    );
    drop((c0, router));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    let (code, out) = fsck_cluster(root.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("remote directories"), "{out}");
}

/// Where a crash hook kills which shard's server.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// Shard 1 (the child's), its pending directory durable, before it answers.
    ChildPendingCommitted,
    /// Shard 0 (the parent's), the child's answer in hand, before the entry.
    ParentBeforeEntry,
    /// Shard 0, the entry durable, before the client's reply.
    ParentEntryCommitted,
}

/// Shards 0 and 1 of the cluster under `root`, with `--inject-crash-at point` on shard
/// `victim`'s server, and a standby without the hook that takes the killed shard over; once
/// shard 0's server lists all three (a client asks them who took a shard over when its own
/// goes), as it does a few milliseconds after each one registers.
async fn hooked_pair(
    etcd: &Etcd,
    root: &Path,
    point: &str,
    victim: u16,
) -> (Option<Server>, Option<Server>, Server) {
    let hook = ["--inject-crash-at", point];
    let (e0, e1): (&[&str], &[&str]) = if victim == 0 {
        (&hook, &[])
    } else {
        (&[], &hook)
    };
    let s0 = start(etcd, root, Some(0), e0);
    let s1 = start(etcd, root, Some(1), e1);
    serving(&s0).await;
    serving(&s1).await;
    let standby = start(etcd, root, None, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = s0.client().await;
    while first.shard_map().await.unwrap().servers.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "shard 0 does not list every server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (Some(s0), Some(s1), standby)
}

async fn killed_at(kill: Kill) {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let (point, victim) = match kill {
        Kill::ChildPendingCommitted => ("pending-dir-committed", 1),
        Kill::ParentBeforeEntry => ("before-entry", 0),
        Kill::ParentEntryCommitted => ("entry-committed", 0),
    };
    let (mut s0, mut s1, standby) = hooked_pair(&etcd, root.path(), point, victim).await;
    // The client a program would be: one session on the parent's shard, following it to its
    // new server and resending there with the same xid.
    let session = Arc::new(Session::new());
    let conn = ResilientConn::connect(
        &s0.as_ref().unwrap().addr.to_string(),
        session.clone(),
        Duration::from_secs(60),
        Outages::new(),
    )
    .await
    .unwrap();
    let op = Op::MkdirRemote {
        parent: ROOT,
        name: "d".into(),
        mode: 0o755,
        shard: 1,
    };

    let answer = tokio::time::timeout(Duration::from_secs(90), conn.call(op.clone()))
        .await
        .expect("an answer")
        .unwrap_or_else(|e| panic!("{kill:?}: {e}\nstandby:\n{}", standby.log_text()));
    serving(&standby).await;
    let (s0, s1) = match victim {
        0 => (standby, s1.take().unwrap()),
        _ => (s0.take().unwrap(), standby),
    };
    let router = Router::connect(&s0.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    let made = match (&answer.reply.result, kill) {
        // The child's shard died before it answered: the parent's asked the standby that took
        // it over, which made a second pending directory, and named that one; the client's
        // own connection never broke.
        (Ok(Body::Attr(a)), Kill::ChildPendingCommitted) => {
            assert!(!answer.resent, "{kill:?}: answered on the first connection");
            a.clone()
        }
        // The parent's shard died: its new server executed the resend afresh (before the
        // entry) or answered it from its record (after).
        (Ok(Body::Attr(a)), Kill::ParentBeforeEntry | Kill::ParentEntryCommitted) => {
            assert!(
                answer.resent,
                "{kill:?}: the answer came from the restarted shard"
            );
            a.clone()
        }
        other => panic!("{kill:?}: {other:?}"),
    };
    assert_eq!(shard_of(made.ino), 1);
    // Exactly once: one entry, naming the directory the client was told of.
    assert_eq!(router.lookup(ROOT, "d").await.unwrap().ino, made.ino);
    let named: Vec<_> = router
        .readdir_all(ROOT)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.name == "d")
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    router.create(made.ino, "inside", 0o644).await.unwrap();
    // A second MKDIR_REMOTE of the name is EEXIST: the first is there, once.
    assert_eq!(
        errno(router.mkdir_on(ROOT, "d", 0o755, 1).await),
        Some(Errno::EEXIST)
    );
    // The child's shard keeps only the directory its entry names: a pending one the crash
    // left behind is deleted, the one the client got confirmed.
    let deleted = match kill {
        Kill::ParentEntryCommitted => 0.0,
        _ => 1.0,
    };
    wait_scrubbed(&s1, 1.0, deleted);
    drop((router, conn));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    let (code, out) = fsck_cluster(root.path());
    assert_eq!(code, 0, "{kill:?}:\n{out}");
    assert!(out.contains("1 here (0 pending)"), "{kill:?}:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_mkdir_killed_on_the_childs_shard_after_its_pending_directory() {
    killed_at(Kill::ChildPendingCommitted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_mkdir_killed_on_the_parents_shard_before_its_entry() {
    killed_at(Kill::ParentBeforeEntry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_mkdir_killed_on_the_parents_shard_after_its_entry_committed() {
    killed_at(Kill::ParentEntryCommitted).await;
}

fn cred(uid: u32) -> Cred {
    Cred {
        uid,
        gid: 100,
        groups: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_directory_is_removed_by_rmdir_on_its_parents_shard() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    serving(&s0).await;
    serving(&s1).await;
    let router = Router::connect(&s0.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    let d = router.mkdir_on(ROOT, "d", 0o755, 1).await.unwrap();
    router.create(d.ino, "f", 0o644).await.unwrap();
    // Its shard says it is not empty; nothing is marked, it takes entries as before.
    assert_eq!(errno(router.rmdir(ROOT, "d").await), Some(Errno::ENOTEMPTY));
    router.unlink(d.ino, "f").await.unwrap();
    router.create(d.ino, "g", 0o644).await.unwrap();
    router.unlink(d.ino, "g").await.unwrap();
    router.rmdir(ROOT, "d").await.unwrap();
    assert_eq!(errno(router.lookup(ROOT, "d").await), Some(Errno::ENOENT));
    assert!(
        !router
            .readdir_all(ROOT)
            .await
            .unwrap()
            .iter()
            .any(|e| e.name == "d")
    );
    assert_eq!(
        router.getattr(ROOT).await.unwrap().nlink,
        2,
        "the root no longer counts it"
    );
    // Until its shard's scrub deletes it, nothing new goes into it (ESTALE once deleted).
    let refused = errno(router.create(d.ino, "late", 0o644).await);
    assert!(
        matches!(refused, Some(Errno::ENOENT | Errno::ESTALE)),
        "{refused:?}"
    );

    // The sticky bit: in a sticky parent a user removes only its own directory, which its
    // shard checks (the parent's shard does not hold the owner). Search and write on the
    // parent are the parent's shard's to check.
    let t = router.mkdir(ROOT, "t", 0o777).await.unwrap();
    let sticky = SetAttr {
        mode: Some(0o1777),
        ..SetAttr::default()
    };
    router.setattr(t.ino, sticky).await.unwrap();
    let as_user = |uid| {
        let seed = s0.addr.to_string();
        async move {
            Router::connect_as(&seed, &ConnectOptions::default(), Some(cred(uid)))
                .await
                .unwrap()
        }
    };
    let (alice, bob) = (as_user(1000).await, as_user(1001).await);
    let hers = alice.mkdir_on(t.ino, "hers", 0o777, 1).await.unwrap();
    assert_eq!(hers.uid, 1000);
    assert_eq!(errno(bob.rmdir(t.ino, "hers").await), Some(Errno::EPERM));
    let closed = SetAttr {
        mode: Some(0o755),
        ..SetAttr::default()
    };
    router.setattr(t.ino, closed).await.unwrap();
    assert_eq!(errno(alice.rmdir(t.ino, "hers").await), Some(Errno::EACCES));
    let open = SetAttr {
        mode: Some(0o1777),
        ..SetAttr::default()
    };
    router.setattr(t.ino, open).await.unwrap();
    alice.rmdir(t.ino, "hers").await.unwrap();
    assert_eq!(
        errno(alice.lookup(t.ino, "hers").await),
        Some(Errno::ENOENT)
    );

    // Shard 1's scrub deletes both; the name can be made again, on either shard.
    wait_outcomes(&s1, &[("removed", 2.0), ("kept", 0.0)]);
    assert_eq!(errno(router.getattr(d.ino).await), Some(Errno::ESTALE));
    let again = router.mkdir_on(ROOT, "d", 0o755, 1).await.unwrap();
    assert_ne!(again.ino, d.ino);
    router.rmdir(ROOT, "d").await.unwrap();
    router.mkdir_on(ROOT, "d", 0o755, 0).await.unwrap();
    wait_outcomes(&s1, &[("removed", 3.0), ("kept", 0.0)]);
    drop((router, alice, bob));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    let (code, out) = fsck_cluster(root.path());
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("remote directories"), "none left:\n{out}");
}

/// Where a crash hook kills which shard's server in a remote RMDIR.
#[derive(Clone, Copy, Debug)]
enum KillRmdir {
    /// Shard 1 (the directory's), the directory durably being removed, before it answers.
    ChildPrepared,
    /// Shard 0 (the parent's), the child's answer in hand, before the entry goes.
    ParentBeforeRemoval,
    /// Shard 0, the entry's removal durable, before the client's reply.
    ParentRemovalCommitted,
}

async fn rmdir_killed_at(kill: KillRmdir) {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let (point, victim) = match kill {
        KillRmdir::ChildPrepared => ("rmdir-prepared", 1),
        KillRmdir::ParentBeforeRemoval => ("before-entry-removed", 0),
        KillRmdir::ParentRemovalCommitted => ("entry-removed-committed", 0),
    };
    let (mut s0, mut s1, standby) = hooked_pair(&etcd, root.path(), point, victim).await;
    let router = Router::connect(
        &s0.as_ref().unwrap().addr.to_string(),
        &ConnectOptions::default(),
    )
    .await
    .unwrap();
    let d = router.mkdir_on(ROOT, "d", 0o755, 1).await.unwrap();
    // Confirmed first, so that what the scrub does after the crash is the RMDIR's alone.
    wait_outcomes(s1.as_ref().unwrap(), &[("confirmed", 1.0)]);
    drop(router);

    let session = Arc::new(Session::new());
    let conn = ResilientConn::connect(
        &s0.as_ref().unwrap().addr.to_string(),
        session.clone(),
        Duration::from_secs(60),
        Outages::new(),
    )
    .await
    .unwrap();
    let op = Op::Rmdir {
        parent: ROOT,
        name: "d".into(),
    };
    let answer = tokio::time::timeout(Duration::from_secs(90), conn.call(op))
        .await
        .expect("an answer")
        .unwrap_or_else(|e| panic!("{kill:?}: {e}\nstandby:\n{}", standby.log_text()));
    serving(&standby).await;
    let (s0, s1) = match victim {
        0 => (standby, s1.take().unwrap()),
        _ => (s0.take().unwrap(), standby),
    };
    // Settled: shard 0's server sees shard 1's owner of now (its watch follows a takeover by
    // milliseconds), so that the router's first look at shard 1 goes there.
    let deadline = Instant::now() + Duration::from_secs(10);
    let c0 = s0.client().await;
    let at = s1.addr.to_string();
    while !c0
        .shard_map()
        .await
        .unwrap()
        .shards
        .iter()
        .any(|l| l.shard == 1 && l.address == at)
    {
        assert!(
            Instant::now() < deadline,
            "shard 0 does not see shard 1's owner"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(c0);
    let router = Router::connect(&s0.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    match (&answer.reply.result, kill) {
        // The directory's shard died before it answered: the parent's asked the standby that
        // took it over, which marked the directory again, then removed the entry; the
        // client's own connection never broke.
        (Ok(Body::Done), KillRmdir::ChildPrepared) => {
            assert!(!answer.resent, "{kill:?}: answered on the first connection");
        }
        // The parent's shard died: its new server executed the resend afresh (before the
        // removal: the directory's shard marks it again) or answered it from its record.
        (Ok(Body::Done), KillRmdir::ParentBeforeRemoval | KillRmdir::ParentRemovalCommitted) => {
            assert!(
                answer.resent,
                "{kill:?}: the answer came from the restarted shard"
            );
        }
        other => panic!("{kill:?}: {other:?}"),
    }
    // Exactly once: the entry is gone and the client was told so once, with Done (a second
    // execution would have answered ENOENT).
    assert_eq!(errno(router.lookup(ROOT, "d").await), Some(Errno::ENOENT));
    wait_outcomes(&s1, &[("removed", 1.0)]);
    assert_eq!(errno(router.getattr(d.ino).await), Some(Errno::ESTALE));
    drop((router, conn));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    let (code, out) = fsck_cluster(root.path());
    assert_eq!(code, 0, "{kill:?}:\n{out}");
    assert!(
        !out.contains("remote directories"),
        "{kill:?}: none left:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_rmdir_killed_on_the_directorys_shard_once_it_is_marked() {
    rmdir_killed_at(KillRmdir::ChildPrepared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_rmdir_killed_on_the_parents_shard_before_its_entry_goes() {
    rmdir_killed_at(KillRmdir::ParentBeforeRemoval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_rmdir_killed_on_the_parents_shard_after_its_removal_committed() {
    rmdir_killed_at(KillRmdir::ParentRemovalCommitted).await;
}

/// `loadgen --spread-shards`, given shard 1's server: the threads' directories are made on
/// their shards, round robin, and each thread's creates land on its own; the report gives
/// each shard's part and adds up both shards' commits. A second run finds the directories
/// where they should be; outside a cluster the flag is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_spreads_its_threads_over_the_shards() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let s0 = start(&etcd, root.path(), Some(0), &[]);
    let s1 = start(&etcd, root.path(), Some(1), &[]);
    serving(&s0).await;
    let c1 = serving(&s1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while c1.shard_map().await.unwrap().shards.len() < 2 {
        assert!(Instant::now() < deadline, "shard 1 does not see shard 0");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let loadgen = Path::new(common::MDS).with_file_name("loadgen");
    let out_dir = tempfile::tempdir().unwrap();
    let (json, acks) = (out_dir.path().join("r.json"), out_dir.path().join("acks"));
    let run = |server: &str| {
        Command::new(&loadgen)
            .args([
                "create",
                "--spread-shards",
                "--threads",
                "4",
                "--count",
                "400",
            ])
            .args(["--server", server, "--quiet", "--json"])
            .arg(&json)
            .arg("--ack-log")
            .arg(&acks)
            .output()
            .unwrap()
    };
    let out = run(&s1.addr.to_string());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\nshards: 0 "), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["ops"], 400);
    assert_eq!(report["parameters"]["spread_shards"], true);
    let part = |shard: &str, what: &str| report["shards"][shard][what].as_u64().unwrap();
    assert_eq!(part("0", "threads"), 2);
    assert_eq!(part("1", "threads"), 2);
    assert_eq!(part("0", "ops") + part("1", "ops"), 400);
    assert!(part("0", "ops") > 0 && part("1", "ops") > 0, "{report}");
    assert_eq!(report["shards"]["0"]["server"], s0.addr.to_string());
    // Both shards' commits: every create, at least.
    assert!(
        report["server"]["committed_transactions"].as_u64().unwrap() >= 400,
        "{report}"
    );

    let router = Router::connect(&s0.addr.to_string(), &ConnectOptions::default())
        .await
        .unwrap();
    for t in 0..4u16 {
        let dir = router.resolve(&format!("/loadgen/t{t}")).await.unwrap();
        assert_eq!(shard_of(dir.ino), t % 2, "thread {t}'s directory");
    }
    let acked = std::fs::read_to_string(&acks).unwrap();
    assert_eq!(acked.lines().count(), 400);
    for path in acked.lines() {
        let file = router.resolve(path).await.unwrap();
        let thread: u16 = path["/loadgen/t".len()..][..1].parse().unwrap();
        assert_eq!(shard_of(file.ino), thread % 2, "{path}");
    }
    // Again: the directories are found on their shards.
    let again = run(&s0.addr.to_string());
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // Outside a cluster: refused, saying why.
    let single = common::start(&root.path().join("single"), &[]);
    let out = Command::new(&loadgen)
        .args(["create", "--spread-shards", "--count", "10", "--quiet"])
        .args(["--server", &single.addr.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a server of a cluster"), "{err}");
    drop((router, c1));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    assert!(single.stop().success());
}

/// A cluster's server proves itself to the others with the cluster's peer secret (from etcd,
/// PEER_CONNECT), which no client has: a client holding the shared key and claiming uid 0
/// is refused each step only servers send, and the directory it aimed at survives the
/// scrub (on 8d645ab its PREPARE_RMDIR with a wrong name was taken, the scrub deleted the
/// directory, and its entry then named nothing); a client's proof of the shared key does not
/// pass for a peer's. Root squash leaves the servers' own steps alone: remote MKDIR and
/// RMDIR, and the scrub, work with `--root-squash` on (on 8d645ab, EPERM). Then `mds fsck
/// --cluster` is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_clusters_servers_send_their_steps_and_root_squash_spares_them() {
    use mds_client::auth::{AuthKey, PeerKey};
    use std::os::unix::fs::PermissionsExt;

    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    init(&etcd, root.path(), "2", &[]);
    let secrets = tempfile::tempdir().unwrap();
    let key_path = secrets.path().join("key");
    std::fs::write(&key_path, [0x5a; 32]).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = key_path.to_str().unwrap();
    let keyed = ConnectOptions {
        auth_key: Some(Arc::new(AuthKey::from_file(&key_path).unwrap())),
        tls: None,
    };
    let start_pair = |extra: &[&str]| {
        let mut flags = vec!["--auth-key", key];
        flags.extend_from_slice(extra);
        let s0 = start(&etcd, root.path(), Some(0), &flags);
        let s1 = start(&etcd, root.path(), Some(1), &flags);
        for s in [&s0, &s1] {
            assert!(
                s.wait_for_log("mds serving", Duration::from_secs(30)),
                "{}",
                s.log_text()
            );
        }
        (s0, s1)
    };
    let (s0, s1) = start_pair(&[]);
    let router = Router::connect_as(&s0.addr.to_string(), &keyed, Some(cred(0)))
        .await
        .unwrap();
    let d = router.mkdir_on(ROOT, "d", 0o777, 1).await.unwrap();
    // For the users of the second half, under root squash.
    let open = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    router.setattr(ROOT, open).await.unwrap();
    wait_outcomes(&s1, &[("confirmed", 1.0)]);

    // A client with the key, claiming root, on each shard.
    let as_root = |server: &Server| {
        let (addr, keyed) = (server.addr.to_string(), keyed.clone());
        async move {
            let session = Arc::new(Session::with_cred(cred(0)));
            mds_client::Client::connect_with(&addr, session, &keyed)
                .await
                .unwrap()
        }
    };
    let (c0, c1) = (as_root(&s0).await, as_root(&s1).await);
    let nowhere = 9 << SHARD_SHIFT | 1;
    let to_child = [
        Op::PrepareRmdir {
            ino: d.ino,
            parent: ROOT,
            name: "bogus".into(),
            owner: None,
        },
        Op::PrepareRmdir {
            ino: d.ino,
            parent: ROOT,
            name: "d".into(),
            owner: None,
        },
        Op::MakePendingDir {
            shard: 1,
            parent: ROOT,
            name: "planted".into(),
            mode: 0o777,
            uid: 0,
            gid: 0,
        },
        Op::MakePendingDir {
            shard: 1,
            parent: nowhere,
            name: "leak".into(),
            mode: 0o777,
            uid: 0,
            gid: 0,
        },
    ];
    for op in to_child {
        assert_eq!(
            errno(c1.call(op.clone()).await),
            Some(Errno::EPERM),
            "{op:?}"
        );
    }
    let asked = Op::ResolveRemote {
        parent: ROOT,
        name: "d".into(),
        ino: d.ino,
    };
    assert_eq!(errno(c0.call(asked).await), Some(Errno::EPERM));
    // The shared key's bytes as a peer secret: a proof under the client's context and key
    // is not a peer's, and the PEER_CONNECT is refused.
    let pretender = Arc::new(Session::peer(Arc::new(PeerKey::from_bytes([0x5a; 32]))));
    let refused = mds_client::Client::connect_with(&s1.addr.to_string(), pretender, &keyed).await;
    assert_eq!(errno(refused), Some(Errno::EAUTH));
    assert_eq!(
        scraped(&s1, "mds_auth_failures_total{reason=\"wrong\"}"),
        Some(1.0)
    );

    // Two scrub rounds later the directory is still there, pending nothing, and its entry
    // still names it.
    tokio::time::sleep(2 * Duration::from_secs(3)).await;
    wait_outcomes(
        &s1,
        &[("confirmed", 1.0), ("removed", 0.0), ("deleted", 0.0)],
    );
    assert_eq!(router.getattr(d.ino).await.unwrap().ino, d.ino);
    assert_eq!(router.lookup(ROOT, "d").await.unwrap().ino, d.ino);
    drop((c0, c1, router));
    assert!(s0.stop().success());
    assert!(s1.stop().success());

    // Root squash on: a user's remote MKDIR and RMDIR, and the scrub behind them, work.
    let (s0, s1) = start_pair(&["--root-squash"]);
    let user = Router::connect_as(&s0.addr.to_string(), &keyed, Some(cred(1000)))
        .await
        .unwrap();
    let u = user.mkdir_on(ROOT, "u", 0o755, 1).await.unwrap();
    assert_eq!((shard_of(u.ino), u.uid), (1, 1000));
    user.create(u.ino, "f", 0o644).await.unwrap();
    assert_eq!(errno(user.rmdir(ROOT, "u").await), Some(Errno::ENOTEMPTY));
    user.unlink(u.ino, "f").await.unwrap();
    wait_outcomes(&s1, &[("confirmed", 1.0)]);
    user.rmdir(ROOT, "u").await.unwrap();
    user.rmdir(ROOT, "d").await.unwrap();
    wait_outcomes(&s1, &[("confirmed", 1.0), ("removed", 2.0), ("kept", 0.0)]);
    assert_eq!(errno(user.getattr(d.ino).await), Some(Errno::ESTALE));
    // Squashed as before: a client's root is nobody.
    let squashed = Router::connect_as(&s0.addr.to_string(), &keyed, Some(cred(0)))
        .await
        .unwrap();
    let mine = squashed.mkdir_on(ROOT, "squashed", 0o755, 1).await.unwrap();
    assert_eq!(mine.uid, 65534);
    drop((user, squashed));
    assert!(s0.stop().success());
    assert!(s1.stop().success());
    let (code, out) = fsck_cluster(root.path());
    assert_eq!(code, 0, "{out}");
}
