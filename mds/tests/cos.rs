//! Commit-on-share: no client is told something a crash can take back. Regression (found by
//! hand): with a commit interval of a few seconds, client A created `/s/f` (its reply rightly
//! waited for the commit) and client B's `stat /s/f` was answered at once with the inode
//! number; a SIGKILL before the commit made the file never have existed, and its inode number
//! went to another file after the restart. Now B's answer waits for A's commit, which B's
//! request asks for at once, while A's own requests and creates of other names in the same
//! directory pass freely. The commit interval here is a minute, so only a forced commit can
//! end any wait in time.

mod common;

use std::time::Duration;

use common::{InProcess, create};
use mds_client::{Client, ROOT};
use mds_proto::{Body, Errno, Op, Reply, SetAttr, StatFs};
use tokio::task::JoinHandle;

fn server(dir: &std::path::Path, cos: bool) -> InProcess {
    let mut config = common::config(dir);
    config.keys.commit_interval = Duration::from_secs(60);
    config.keys.cos = if cos {
        mds::config::Cos::On
    } else {
        mds::config::Cos::Off
    };
    InProcess::start(config)
}

/// Sends `op` as `client` without waiting for its reply, and returns once the server has
/// executed it: its transno, and the reply to come.
async fn uncommitted(
    client: &Client,
    observer: &Client,
    op: Op,
) -> (u64, JoinHandle<mds_client::Result<Reply>>) {
    let before = observer.statfs().await.unwrap().last_transno;
    let reply = tokio::spawn({
        let client = client.clone();
        async move { client.call_reply(op).await }
    });
    loop {
        let now = observer.statfs().await.unwrap();
        if now.last_transno > before {
            assert!(
                now.last_committed < now.last_transno,
                "nothing commits by itself here"
            );
            return (now.last_transno, reply);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn lookup(parent: u64, name: &str) -> Op {
    Op::Lookup {
        parent,
        name: name.into(),
    }
}

async fn statfs(observer: &Client) -> StatFs {
    observer.statfs().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_waits_for_what_it_would_see_or_build_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), true);
    let (a, b, observer) = (
        server.client().await,
        server.client().await,
        server.client().await,
    );
    // One connection answers in order: the SYNC after the MKDIR commits it.
    let (d, synced) = tokio::join!(a.mkdir(ROOT, "s", 0o755), a.sync());
    synced.unwrap();
    let d = d.unwrap().ino;

    // Each case: A changes something (its reply waits for the commit), B asks about it.
    let f1 = uncommitted(&a, &observer, create(d, "f1")).await;
    let cases: Vec<(&str, Op, Op, Result<(), Errno>)> = vec![
        (
            "LOOKUP of a new entry",
            create(d, "f0"),
            lookup(d, "f0"),
            Ok(()),
        ),
        (
            "GETATTR of the directory",
            create(d, "f2"),
            Op::Getattr { ino: d },
            Ok(()),
        ),
        (
            "READDIR of the directory",
            create(d, "f3"),
            Op::Readdir {
                ino: d,
                cursor: None,
                limit: 100,
            },
            Ok(()),
        ),
        (
            "CREATE of the same name",
            create(d, "f4"),
            create(d, "f4"),
            Err(Errno::EEXIST),
        ),
        (
            "LOOKUP of a removed name",
            Op::Unlink {
                parent: d,
                name: "f0".into(),
            },
            lookup(d, "f0"),
            Err(Errno::ENOENT),
        ),
        (
            "LOOKUP of a renamed entry",
            Op::Rename {
                src_parent: d,
                src_name: "f2".into(),
                dst_parent: d,
                dst_name: "g2".into(),
                how: mds_proto::RenameHow::Replace,
            },
            lookup(d, "g2"),
            Ok(()),
        ),
    ];
    // f1 first: the very first case of the list, by hand.
    let before = statfs(&observer).await;
    let reply = b.call_reply(lookup(d, "f1")).await.unwrap();
    assert!(
        reply.last_committed >= f1.0,
        "B saw f1 before its commit: {reply:?}"
    );
    assert!(matches!(
        f1.1.await.unwrap().unwrap().result,
        Ok(Body::Attr(_))
    ));
    assert_eq!(
        statfs(&observer).await.cos_conflicts,
        before.cos_conflicts + 1
    );

    for (what, change, question, expect) in cases {
        let (transno, pending) = uncommitted(&a, &observer, change).await;
        let before = statfs(&observer).await;
        let reply = b.call_reply(question).await.unwrap();
        assert!(
            reply.last_committed >= transno,
            "{what}: answered before the change it saw was durable: {reply:?}"
        );
        assert_eq!(
            reply.result.as_ref().map(|_| ()).map_err(|e| *e),
            expect,
            "{what}"
        );
        let own = pending.await.unwrap().unwrap();
        assert!(own.result.is_ok(), "{what}: {own:?}");
        assert_eq!(
            statfs(&observer).await.cos_conflicts,
            before.cos_conflicts + 1,
            "{what}: counted once"
        );
    }

    // SETATTR of an inode another client changed: it builds on it, so its commit starts now.
    let f = a.lookup(d, "f1").await.unwrap().ino;
    let set = |mode| Op::Setattr {
        ino: f,
        attr: SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        },
    };
    let (transno, pending) = uncommitted(&a, &observer, set(0o600)).await;
    let reply = b.call_reply(set(0o640)).await.unwrap();
    assert!(reply.transno > transno && reply.last_committed >= reply.transno);
    pending.await.unwrap().unwrap();
    drop((a, b, observer));
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_passes_its_own_changes_and_different_names_do_not_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), true);
    let (a, b, observer) = (
        server.client().await,
        server.client().await,
        server.client().await,
    );
    let (d, synced) = tokio::join!(a.mkdir(ROOT, "shared", 0o755), a.sync());
    synced.unwrap();
    let d = d.unwrap().ino;
    let before = statfs(&observer).await;

    // A sees its own uncommitted create at once.
    let (transno, mine) = uncommitted(&a, &observer, create(d, "a1")).await;
    let reply = a.call_reply(lookup(d, "a1")).await.unwrap();
    assert!(reply.result.is_ok());
    assert!(
        reply.last_committed < transno,
        "its own change held it back: {reply:?}"
    );

    // B creates another name in the same directory: no conflict, no commit asked for.
    let (_, theirs) = uncommitted(&b, &observer, create(d, "b1")).await;
    let after = statfs(&observer).await;
    assert_eq!(after.cos_conflicts, before.cos_conflicts);
    assert_eq!(after.commits, before.commits, "nothing forced a commit");
    assert!(after.last_committed < after.last_transno);

    observer.sync().await.unwrap();
    assert!(mine.await.unwrap().unwrap().result.is_ok());
    assert!(theirs.await.unwrap().unwrap().result.is_ok());
    drop((a, b, observer));
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cos_off_other_clients_see_uncommitted_state_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), false);
    let (a, b, observer) = (
        server.client().await,
        server.client().await,
        server.client().await,
    );
    let (transno, pending) = uncommitted(&a, &observer, create(ROOT, "visible")).await;
    let reply = b.call_reply(lookup(ROOT, "visible")).await.unwrap();
    assert!(reply.result.is_ok());
    assert!(
        reply.last_committed < transno,
        "--cos off waits for nothing: {reply:?}"
    );
    assert_eq!(statfs(&observer).await.cos_conflicts, 0);
    observer.sync().await.unwrap();
    pending.await.unwrap().unwrap();
    drop((a, b, observer));
    server.stop().unwrap();
}

/// The hole itself, end to end with a crash: what B was told about A's uncommitted create is
/// still true after SIGKILL and a restart (with `--cos off` it would not be: see early.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_b_was_told_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &["--commit-interval", "60s"]);
    let (a, b, observer) = (
        server.client().await,
        server.client().await,
        server.client().await,
    );
    let (_, pending) = uncommitted(&a, &observer, create(ROOT, "f")).await;
    let told = b.lookup(ROOT, "f").await.unwrap();
    drop(pending);
    drop((a, b, observer));
    server.kill();
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    assert_eq!(c.lookup(ROOT, "f").await.unwrap(), told);
    drop(c);
    assert!(server.stop().success());
}
