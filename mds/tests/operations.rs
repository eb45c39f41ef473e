//! Every namespace operation and every error code, through the client library against the
//! real server; and the rule that a mutation's reply never precedes its commit.

mod common;

use std::sync::Arc;

use common::InProcess;
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Body, Cred, Errno, Kind, Op, SetAttr, SetTime};

fn errno<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Errno {
    match r {
        Err(ClientError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

async fn server() -> (tempfile::TempDir, InProcess, Client) {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let client = server.client().await;
    (dir, server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_mkdir_lookup_getattr_and_their_errors() {
    let (_dir, _server, c) = server().await;
    c.ping().await.unwrap();
    let root = c.getattr(ROOT).await.unwrap();
    assert_eq!((root.kind, root.nlink, root.size), (Kind::Directory, 2, 0));

    let d = c.mkdir(ROOT, "d", 0o750).await.unwrap();
    assert_eq!((d.kind, d.mode, d.nlink), (Kind::Directory, 0o750, 2));
    let f = c.create(d.ino, "f", 0o640).await.unwrap();
    assert_eq!((f.kind, f.mode, f.nlink, f.size), (Kind::File, 0o640, 1, 0));
    assert_ne!(d.ino, f.ino);
    assert!(f.generation > d.generation, "generations follow transnos");

    assert_eq!(
        c.lookup(ROOT, "d").await.unwrap(),
        c.getattr(d.ino).await.unwrap()
    );
    assert_eq!(c.lookup(d.ino, "f").await.unwrap().ino, f.ino);
    let root = c.getattr(ROOT).await.unwrap();
    assert_eq!(
        (root.nlink, root.size),
        (3, 1),
        "a subdirectory adds a link and an entry"
    );
    let d_now = c.getattr(d.ino).await.unwrap();
    assert_eq!((d_now.nlink, d_now.size), (2, 1));
    assert!(d_now.mtime_ns >= d.mtime_ns);

    assert_eq!(errno(c.lookup(ROOT, "missing").await), Errno::ENOENT);
    assert_eq!(errno(c.create(d.ino, "f", 0o644).await), Errno::EEXIST);
    assert_eq!(errno(c.mkdir(d.ino, "f", 0o755).await), Errno::EEXIST);
    assert_eq!(errno(c.create(f.ino, "x", 0o644).await), Errno::ENOTDIR);
    assert_eq!(errno(c.lookup(f.ino, "x").await), Errno::ENOTDIR);
    assert_eq!(errno(c.getattr(999_999).await), Errno::ESTALE);
    assert_eq!(errno(c.create(999_999, "x", 0o644).await), Errno::ESTALE);
    for bad in ["", ".", "..", "a/b", "nul\0byte"] {
        assert_eq!(
            errno(c.create(ROOT, bad, 0o644).await),
            Errno::EINVAL,
            "{bad:?}"
        );
        assert_eq!(
            errno(c.mkdir(ROOT, bad, 0o755).await),
            Errno::EINVAL,
            "{bad:?}"
        );
    }
    assert_eq!(
        errno(c.create(ROOT, &"n".repeat(256), 0o644).await),
        Errno::ENAMETOOLONG
    );
    c.create(ROOT, &"n".repeat(255), 0o644).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattr_changes_what_it_is_asked_and_ctime() {
    let (_dir, server, _) = server().await;
    // As root, whoever runs the test: only root may give a file to another owner.
    let root = Session::with_cred(Cred::default());
    let c = Client::connect_session(server.addr, Arc::new(root))
        .await
        .unwrap();
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    let set = SetAttr {
        mode: Some(0o600),
        uid: Some(42),
        gid: Some(43),
        size: Some(1 << 20),
        atime: Some(SetTime::At(2_000_000_007)),
        mtime: Some(SetTime::At(1_000_000_000)),
        handle: None,
    };
    let a = c.setattr(f.ino, set).await.unwrap();
    assert_eq!(
        (a.mode, a.uid, a.gid, a.size, a.mtime_ns, a.atime_ns),
        (0o600, 42, 43, 1 << 20, 1_000_000_000, 2_000_000_007)
    );
    assert!(a.ctime_ns >= f.ctime_ns);
    assert_eq!(c.getattr(f.ino).await.unwrap(), a);
    let only_mode = c
        .setattr(
            f.ino,
            SetAttr {
                mode: Some(0o7755),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (only_mode.mode, only_mode.uid, only_mode.size),
        (0o7755, 42, 1 << 20)
    );
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap();
    let set = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    assert_eq!(errno(c.setattr(d.ino, set.clone()).await), Errno::EISDIR);
    assert_eq!(errno(c.setattr(424_242, set).await), Errno::ESTALE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_pages_a_large_directory_completely() {
    let (_dir, _server, c) = server().await;
    let d = c.mkdir(ROOT, "big", 0o755).await.unwrap();
    let n = 2500;
    let mut pending = Vec::new();
    for i in 0..n {
        let c = c.clone();
        pending.push(tokio::spawn(async move {
            c.create(
                d.ino,
                &format!("file-{i:05}-{}", "x".repeat(i % 200)),
                0o644,
            )
            .await
        }));
    }
    for p in pending {
        p.await.unwrap().unwrap();
    }
    // Small pages.
    let mut names = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (page, next) = c.readdir(d.ino, cursor, 100).await.unwrap();
        assert!(page.len() <= 100);
        pages += 1;
        names.extend(page.into_iter().map(|e| e.name));
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert!(pages >= 25);
    assert_eq!(names.len(), n);
    // In the protocol's directory order, each name once. Most of these names share their
    // last eight bytes (`xxxxxxxx`), so they share one slot of the directory.
    assert!(
        names
            .windows(2)
            .all(|w| mds_proto::name_order(w[0].as_bytes(), w[1].as_bytes()).is_lt()),
        "in directory order, no duplicates"
    );
    // Big pages are cut to fit a frame, and still complete.
    let all = c.readdir_all(d.ino).await.unwrap();
    assert_eq!(all.len(), n);
    assert!(all.iter().all(|e| e.kind == Kind::File));
    assert_eq!(c.getattr(d.ino).await.unwrap().size, n as u64);
    // Empty directory, and READDIR of a file.
    let e = c.mkdir(ROOT, "empty", 0o755).await.unwrap();
    assert_eq!(c.readdir(e.ino, None, 10).await.unwrap(), (vec![], None));
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    assert_eq!(errno(c.readdir(f.ino, None, 10).await), Errno::ENOTDIR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlink_and_rmdir_follow_posix() {
    let (_dir, _server, c) = server().await;
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap();
    let f = c.create(d.ino, "f", 0o644).await.unwrap();
    c.mkdir(d.ino, "sub", 0o755).await.unwrap();
    assert_eq!(errno(c.unlink(ROOT, "d").await), Errno::EISDIR);
    assert_eq!(errno(c.rmdir(d.ino, "f").await), Errno::ENOTDIR);
    assert_eq!(errno(c.rmdir(ROOT, "d").await), Errno::ENOTEMPTY);
    assert_eq!(errno(c.unlink(d.ino, "nope").await), Errno::ENOENT);
    assert_eq!(errno(c.rmdir(d.ino, "nope").await), Errno::ENOENT);
    assert_eq!(errno(c.unlink(d.ino, "..").await), Errno::EINVAL);

    c.unlink(d.ino, "f").await.unwrap();
    assert_eq!(
        errno(c.getattr(f.ino).await),
        Errno::ESTALE,
        "last link gone: inode gone"
    );
    assert_eq!(errno(c.lookup(d.ino, "f").await), Errno::ENOENT);
    assert_eq!(c.getattr(d.ino).await.unwrap().nlink, 3);
    c.rmdir(d.ino, "sub").await.unwrap();
    let d_now = c.getattr(d.ino).await.unwrap();
    assert_eq!((d_now.nlink, d_now.size), (2, 0));
    c.rmdir(ROOT, "d").await.unwrap();
    let root = c.getattr(ROOT).await.unwrap();
    assert_eq!((root.nlink, root.size), (2, 0));
    assert_eq!(errno(c.rmdir(ROOT, "d").await), Errno::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_within_and_across_directories_with_posix_replacement() {
    let (_dir, _server, c) = server().await;
    let a = c.mkdir(ROOT, "a", 0o755).await.unwrap();
    let b = c.mkdir(ROOT, "b", 0o755).await.unwrap();
    let f = c.create(a.ino, "f", 0o644).await.unwrap();

    // Same directory.
    c.rename(a.ino, "f", a.ino, "g").await.unwrap();
    assert_eq!(errno(c.lookup(a.ino, "f").await), Errno::ENOENT);
    assert_eq!(c.lookup(a.ino, "g").await.unwrap().ino, f.ino);
    // Onto itself: nothing happens.
    c.rename(a.ino, "g", a.ino, "g").await.unwrap();
    // Across directories.
    c.rename(a.ino, "g", b.ino, "f").await.unwrap();
    assert_eq!(c.lookup(b.ino, "f").await.unwrap().ino, f.ino);
    assert_eq!(c.getattr(a.ino).await.unwrap().size, 0);
    assert_eq!(c.getattr(b.ino).await.unwrap().size, 1);
    // Replacing a file target: the old target is gone.
    let victim = c.create(a.ino, "victim", 0o644).await.unwrap();
    c.rename(b.ino, "f", a.ino, "victim").await.unwrap();
    assert_eq!(c.lookup(a.ino, "victim").await.unwrap().ino, f.ino);
    assert_eq!(errno(c.getattr(victim.ino).await), Errno::ESTALE);
    assert_eq!(c.getattr(a.ino).await.unwrap().size, 1);
    assert_eq!(c.getattr(b.ino).await.unwrap().size, 0);

    // Directories: moving updates link counts of both parents.
    let sub = c.mkdir(a.ino, "sub", 0o755).await.unwrap();
    assert_eq!(c.getattr(a.ino).await.unwrap().nlink, 3);
    c.rename(a.ino, "sub", b.ino, "sub").await.unwrap();
    assert_eq!(c.getattr(a.ino).await.unwrap().nlink, 2);
    assert_eq!(c.getattr(b.ino).await.unwrap().nlink, 3);
    // Replacing an empty directory works; a non-empty one does not.
    let empty = c.mkdir(a.ino, "empty", 0o755).await.unwrap();
    c.rename(b.ino, "sub", a.ino, "empty").await.unwrap();
    assert_eq!(errno(c.getattr(empty.ino).await), Errno::ESTALE);
    assert_eq!(c.lookup(a.ino, "empty").await.unwrap().ino, sub.ino);
    assert_eq!(c.getattr(a.ino).await.unwrap().nlink, 3);
    assert_eq!(c.getattr(b.ino).await.unwrap().nlink, 2);
    let full = c.mkdir(b.ino, "full", 0o755).await.unwrap();
    c.create(full.ino, "x", 0o644).await.unwrap();
    assert_eq!(
        errno(c.rename(a.ino, "empty", b.ino, "full").await),
        Errno::ENOTEMPTY
    );

    // Kind mismatches, missing source, own subtree.
    assert_eq!(
        errno(c.rename(a.ino, "victim", b.ino, "full").await),
        Errno::EISDIR
    );
    assert_eq!(
        errno(c.rename(b.ino, "full", a.ino, "victim").await),
        Errno::ENOTDIR
    );
    assert_eq!(
        errno(c.rename(a.ino, "nope", b.ino, "x").await),
        Errno::ENOENT
    );
    assert_eq!(
        errno(c.rename(ROOT, "b", full.ino, "b2").await),
        Errno::EINVAL
    );
    assert_eq!(errno(c.rename(ROOT, "b", b.ino, "b2").await), Errno::EINVAL);
    assert_eq!(
        errno(c.rename(a.ino, "victim", b.ino, "a/b").await),
        Errno::EINVAL
    );
    assert_eq!(
        errno(c.rename(a.ino, "victim", a.ino, &"v".repeat(300)).await),
        Errno::ENAMETOOLONG
    );
    // After all that the names are still where they should be.
    let names = common::names(&c, a.ino).await;
    assert_eq!(names, vec!["empty", "victim"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statfs_sync_and_replies_that_wait_for_their_commit() {
    let (_dir, _server, c) = server().await;
    let before = c.statfs().await.unwrap();
    assert_eq!((before.inodes, before.directories, before.files), (1, 1, 0));
    assert_eq!(before.partitions, 2);
    assert!(!before.read_only);
    let mut transnos = Vec::new();
    for i in 0..50 {
        let reply = c
            .call_reply(Op::Create {
                parent: ROOT,
                name: format!("f{i}"),
                mode: 0o644,
            })
            .await
            .unwrap();
        assert!(matches!(reply.result, Ok(Body::Attr(_))));
        assert!(reply.transno > 0);
        assert!(
            reply.transno <= reply.last_committed,
            "reply for transno {} sent before its commit (last_committed {})",
            reply.transno,
            reply.last_committed
        );
        transnos.push(reply.transno);
    }
    assert!(transnos.windows(2).all(|w| w[0] < w[1]));
    let read = c.call_reply(Op::Getattr { ino: ROOT }).await.unwrap();
    assert_eq!(read.transno, 0, "reads take no transno");
    let failed = c
        .call_reply(Op::Lookup {
            parent: ROOT,
            name: "nope".into(),
        })
        .await
        .unwrap();
    assert_eq!((failed.transno, failed.result), (0, Err(Errno::ENOENT)));
    c.sync().await.unwrap();
    let after = c.statfs().await.unwrap();
    assert_eq!((after.inodes, after.files), (51, 50));
    assert_eq!(after.last_committed, after.last_transno);
    assert!(after.last_committed >= *transnos.last().unwrap());
    assert!(after.commits >= 1 && after.committed_transactions >= 50);
}
