//! Open files and small files' data through the real server: OPEN, READ, WRITE, ftruncate
//! and RELEASE with their error answers; data written early and lost to a SIGKILL comes back
//! with the replays (and nothing answered under `--ack commit` is lost); a resent WRITE is
//! answered from its record, never appended twice; another client's read of uncommitted
//! data waits for its commit; an unlinked file stays while it is open — across a SIGKILL, for
//! the client that takes its handle back inside the recovery window — and goes when the last
//! handle does, or when the window ends without its client; `mds fsck` checks it all.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::InProcess;
use common::raw::{Raw, request};
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Body, Data, Errno, Op, OpenFlags, Reply, SetAttr};

const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    truncate: false,
    append: false,
    exec: false,
};

fn open(ino: u64, handle: u64, flags: OpenFlags) -> Op {
    Op::Open {
        ino,
        handle,
        flags,
        reopen: false,
    }
}

fn write(ino: u64, handle: u64, offset: u64, data: &[u8]) -> Op {
    Op::Write {
        ino,
        handle,
        offset,
        data: Data(data.to_vec()),
    }
}

fn read(ino: u64, handle: u64, offset: u64, len: u32) -> Op {
    Op::Read {
        ino,
        handle,
        offset,
        len,
    }
}

fn errno(r: mds_client::Result<Body>) -> Errno {
    match r {
        Err(ClientError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

fn bytes(body: Body) -> Vec<u8> {
    match body {
        Body::Data(d) => d.0,
        other => panic!("{other:?}"),
    }
}

fn size(body: &Body) -> u64 {
    match body {
        Body::Attr(a) => a.size,
        other => panic!("{other:?}"),
    }
}

/// 20 KiB of a pattern no block repeats.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_read_as_written_with_holes_truncates_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 256 << 10;
    let server = InProcess::start(config);
    let c = server.client().await;
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    let data = pattern(20 << 10);
    for (i, chunk) in data.chunks(6000).enumerate() {
        c.call(write(f, 1, (i * 6000) as u64, chunk)).await.unwrap();
    }
    assert_eq!(bytes(c.call(read(f, 1, 0, 64 << 10)).await.unwrap()), data);
    // A hole past the end, then a few bytes: zeros between.
    let grown = c.call(write(f, 1, 100_000, b"end")).await.unwrap();
    assert_eq!(size(&grown), 100_003);
    let gap = bytes(c.call(read(f, 1, 20 << 10, 4096)).await.unwrap());
    assert!(gap.iter().all(|&b| b == 0) && gap.len() == 4096);
    assert_eq!(
        bytes(c.call(read(f, 1, 99_999, 10)).await.unwrap()),
        b"\0end"
    );
    assert!(
        bytes(c.call(read(f, 1, 100_003, 10)).await.unwrap()).is_empty(),
        "EOF"
    );
    // ftruncate through the handle into a block, then grow: the cut bytes read as zeros.
    let cut = |size| Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(size),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    c.call(cut(5000)).await.unwrap();
    c.call(cut(9000)).await.unwrap();
    let back = bytes(c.call(read(f, 1, 0, 9000)).await.unwrap());
    assert_eq!(&back[..5000], &data[..5000]);
    assert!(back[5000..].iter().all(|&b| b == 0));
    // Bounds.
    assert_eq!(
        errno(c.call(write(f, 1, 256 << 10, b"x")).await),
        Errno::EFBIG
    );
    assert_eq!(errno(c.call(cut((256 << 10) + 1)).await), Errno::EFBIG);
    let too_big = vec![0u8; mds_proto::MAX_IO + 1];
    assert_eq!(errno(c.call(write(f, 1, 0, &too_big)).await), Errno::EINVAL);
    // Handles.
    assert_eq!(errno(c.call(write(f, 2, 0, b"x")).await), Errno::EBADF);
    let other = server.client().await;
    assert_eq!(
        errno(other.call(read(f, 1, 0, 1)).await),
        Errno::EBADF,
        "a handle is its client's"
    );
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap().ino;
    assert_eq!(errno(c.call(open(d, 3, RW)).await), Errno::EISDIR);
    // O_TRUNC.
    let trunc = OpenFlags {
        write: true,
        truncate: true,
        ..OpenFlags::default()
    };
    let cut_reply = c.call_reply(open(f, 4, trunc)).await.unwrap();
    assert!(cut_reply.transno > 0, "a truncating OPEN is a mutation");
    assert_eq!(size(cut_reply.result.as_ref().unwrap()), 0);
    let s = c.statfs().await.unwrap();
    assert_eq!((s.open_handles, s.orphans, s.file_bytes), (2, 0, 0));
    assert_eq!(s.inline_data_max, 256 << 10);
    for handle in [1, 4] {
        c.call(Op::Release { handle }).await.unwrap();
    }
    assert_eq!(c.statfs().await.unwrap().open_handles, 0);
    drop((c, other));
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_inline_data_off_read_and_write_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 0;
    let server = InProcess::start(config);
    let c = server.client().await;
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    assert_eq!(errno(c.call(write(f, 1, 0, b"x")).await), Errno::EOPNOTSUPP);
    assert_eq!(errno(c.call(read(f, 1, 0, 1)).await), Errno::EOPNOTSUPP);
    let set = SetAttr {
        size: Some(1 << 40),
        ..SetAttr::default()
    };
    assert_eq!(
        c.setattr(f, set).await.unwrap().size,
        1 << 40,
        "sizes are numbers"
    );
    drop(c);
    server.stop().unwrap();
}

/// Under `--ack early`, WRITEs, a ftruncate, a truncating OPEN, and an UNLINK of an open file
/// then its RELEASE, answered before their commit, are lost to a SIGKILL and come back with
/// the replays, which run without the handles the restart took; the data reads back as it
/// was answered, and the orphan is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_answered_early_comes_back_with_the_replays_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--ack",
        "early",
        "--commit-interval",
        "60s",
        "--recovery-window",
        "60s",
    ];
    let server = common::start(dir.path(), &flags);
    let session = Arc::new(Session::new());
    let c = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    let g = c.create(ROOT, "g", 0o644).await.unwrap().ino;
    let h = c.create(ROOT, "h", 0o644).await.unwrap().ino;
    let o = c.create(ROOT, "o", 0o644).await.unwrap().ino;
    c.call(open(h, 3, RW)).await.unwrap();
    c.call(write(h, 3, 0, b"cut me")).await.unwrap();
    c.call(Op::Release { handle: 3 }).await.unwrap();
    c.call(open(o, 4, RW)).await.unwrap();
    c.sync().await.unwrap();
    c.call(open(f, 1, RW)).await.unwrap();
    let append = OpenFlags {
        write: true,
        append: true,
        ..OpenFlags::default()
    };
    c.call(open(g, 2, append)).await.unwrap();
    let data = pattern(10_000);
    let early = |r: &Reply| r.transno > r.last_committed;
    for op in [
        write(f, 1, 0, &data),
        Op::Setattr {
            ino: f,
            attr: SetAttr {
                size: Some(7000),
                handle: Some(1),
                ..SetAttr::default()
            },
        },
        write(f, 1, 9000, b"tail"),
        // As the client library sends them through an append handle.
        write(g, 2, u64::MAX, b"one,"),
        write(g, 2, u64::MAX, b"two"),
        // O_TRUNC of a file with data.
        open(
            h,
            5,
            OpenFlags {
                write: true,
                truncate: true,
                ..OpenFlags::default()
            },
        ),
        // The last name of an open file, then its last handle: the orphan goes.
        Op::Unlink {
            parent: ROOT,
            name: "o".into(),
        },
        Op::Release { handle: 4 },
    ] {
        let reply = c.call_reply(op).await.unwrap();
        assert!(reply.result.is_ok() && early(&reply), "{reply:?}");
    }
    drop(c);
    server.kill();
    let server = common::start(dir.path(), &flags);
    let c = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    assert_eq!(session.lost(), 0);
    c.sync().await.unwrap();
    c.call(open(f, 11, RW)).await.unwrap();
    c.call(open(g, 12, RW)).await.unwrap();
    let back = bytes(c.call(read(f, 11, 0, 20_000)).await.unwrap());
    assert_eq!(back.len(), 9004);
    assert_eq!(&back[..7000], &data[..7000]);
    assert!(back[7000..9000].iter().all(|&b| b == 0));
    assert_eq!(&back[9000..], b"tail");
    assert_eq!(
        bytes(c.call(read(g, 12, 0, 100)).await.unwrap()),
        b"one,two",
        "appended in order, each once"
    );
    assert_eq!(c.getattr(h).await.unwrap().size, 0, "the O_TRUNC came back");
    assert!(
        matches!(c.getattr(o).await, Err(ClientError::Errno(Errno::ESTALE))),
        "the released orphan is gone"
    );
    let s = c.statfs().await.unwrap();
    assert_eq!((s.orphans, s.files), (0, 3), "{s:?}");
    drop(c);
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// Under `--ack commit` a WRITE answered is durable: a SIGKILL right after loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_under_commit_acks_loses_no_data_answered() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    let data = pattern(30_000);
    let reply = c.call_reply(write(f, 1, 0, &data)).await.unwrap();
    assert!(reply.transno <= reply.last_committed, "{reply:?}");
    drop(c);
    server.kill();
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    c.call(open(f, 1, RW)).await.unwrap();
    assert_eq!(bytes(c.call(read(f, 1, 0, 65_536)).await.unwrap()), data);
    drop(c);
    assert!(server.stop().success());
}

/// A WRITE through an append handle whose connection was cut before its answer: the resend is
/// answered from its record, with the first execution's transno, and the data is there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_write_is_answered_from_its_record_not_appended_twice() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let setup = server.client().await;
    let f = setup.create(ROOT, "f", 0o644).await.unwrap().ino;
    let session = Session::new();
    let (mut raw, connected) = Raw::connect(server.addr, &session, None);
    assert!(connected.result.is_ok(), "{connected:?}");
    let append = OpenFlags {
        read: true,
        write: true,
        append: true,
        ..OpenFlags::default()
    };
    assert!(
        raw.call(&request(1, open(f, 1, append), None))
            .result
            .is_ok()
    );
    let sent = request(2, write(f, 1, 0, b"once"), None);
    let before = setup.statfs().await.unwrap().last_transno;
    raw.send(&sent);
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(20);
    let executed = loop {
        let now = setup.statfs().await.unwrap().last_transno;
        if now > before {
            break now;
        }
        assert!(Instant::now() < deadline, "the write never executed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let (mut raw, again) = Raw::connect(server.addr, &session, None);
    assert!(again.result.is_ok(), "{again:?}");
    let first = raw.call(&sent);
    assert_eq!(first.transno, executed, "{first:?}");
    assert_eq!(raw.call(&sent), first, "answered from the record again");
    // The session kept its handle across the cut connection. (The original's own reply may
    // still come to this connection too: the answer is the one with this xid.)
    raw.send(&request(3, read(f, 1, 0, 100), None));
    let back = std::iter::from_fn(|| raw.recv())
        .find(|r| r.xid == 3)
        .expect("the read's answer");
    assert_eq!(back.result, Ok(Body::Data(Data(b"once".to_vec()))));
    drop((raw, setup));
    server.stop().unwrap();
}

/// Commit-on-share: B's read of what A wrote and has not committed waits for that commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_read_of_uncommitted_data_waits_for_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.ack = mds::config::Ack::Early;
    config.keys.commit_interval = Duration::from_secs(60);
    let server = InProcess::start(config);
    let (a, b) = (server.client().await, server.client().await);
    let f = a.create(ROOT, "f", 0o644).await.unwrap().ino;
    b.create(ROOT, "b0", 0o644).await.unwrap();
    a.call(open(f, 1, RW)).await.unwrap();
    b.call(open(f, 1, RW)).await.unwrap();
    let done = a.call_reply(write(f, 1, 0, b"fresh")).await.unwrap();
    assert!(done.transno > done.last_committed, "early: {done:?}");
    let seen = b.call_reply(read(f, 1, 0, 5)).await.unwrap();
    assert_eq!(seen.result, Ok(Body::Data(Data(b"fresh".to_vec()))));
    assert!(
        seen.last_committed >= done.transno,
        "B's read left before A's write was durable: {seen:?} vs {done:?}"
    );
    drop((a, b));
    server.stop().unwrap();
}

/// An unlinked file stays while a handle holds it: readable and writable through it, gone
/// with its last release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlinked_open_file_lives_until_its_last_release() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let (a, b) = (server.client().await, server.client().await);
    let f = a.create(ROOT, "f", 0o644).await.unwrap().ino;
    a.call(open(f, 1, RW)).await.unwrap();
    b.call(open(f, 5, RW)).await.unwrap();
    a.call(write(f, 1, 0, b"still here")).await.unwrap();
    a.unlink(ROOT, "f").await.unwrap();
    let s = a.statfs().await.unwrap();
    assert_eq!((s.orphans, s.open_handles, s.files), (1, 2, 1));
    assert_eq!(a.getattr(f).await.unwrap().nlink, 0);
    assert_eq!(
        bytes(b.call(read(f, 5, 0, 100)).await.unwrap()),
        b"still here"
    );
    a.call(Op::Release { handle: 1 }).await.unwrap();
    b.call(write(f, 5, 10, b"!")).await.unwrap();
    b.call(Op::Release { handle: 5 }).await.unwrap();
    let s = a.statfs().await.unwrap();
    assert_eq!(
        (s.orphans, s.open_handles, s.files, s.file_bytes),
        (0, 0, 0, 0)
    );
    assert!(matches!(
        a.getattr(f).await,
        Err(ClientError::Errno(Errno::ESTALE))
    ));
    drop((a, b));
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// Waits until the server's STATFS says `orphans` orphans.
async fn until_orphans(c: &Client, orphans: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.statfs().await.unwrap();
        if s.orphans == orphans {
            return;
        }
        assert!(Instant::now() < deadline, "orphans: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A SIGKILL while an unlinked file is open: after the restart the recovery window waits for
/// the client that held it; that client takes its handle back (a reopen, before anything
/// else) and reads its data; the other orphan, whose client never comes back, goes when the
/// window ends. fsck accounts for both on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_wait_for_their_clients_after_a_sigkill_and_go_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let setup = server.client().await;
    let kept = setup.create(ROOT, "kept", 0o644).await.unwrap().ino;
    let lost = setup.create(ROOT, "lost", 0o644).await.unwrap().ino;
    let (alice, bob) = (Session::new(), Session::new());
    let (mut a, _) = Raw::connect(server.addr, &alice, None);
    let (mut b, _) = Raw::connect(server.addr, &bob, None);
    assert!(a.call(&request(1, open(kept, 1, RW), None)).result.is_ok());
    assert!(
        a.call(&request(2, write(kept, 1, 0, b"alice's"), None))
            .result
            .is_ok()
    );
    assert!(b.call(&request(1, open(lost, 1, RW), None)).result.is_ok());
    setup.unlink(ROOT, "kept").await.unwrap();
    setup.unlink(ROOT, "lost").await.unwrap();
    assert_eq!(setup.statfs().await.unwrap().orphans, 2);
    drop((a, b, setup));
    server.kill();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "two orphans, accounted: {out}");
    assert!(out.contains("orphans: 2"), "{out}");
    let server = common::start(dir.path(), &["--recovery-window", "3s"]);
    let (mut a, connected) = Raw::connect(server.addr, &alice, None);
    assert!(
        matches!(
            connected.result,
            Ok(Body::Connected {
                recovering: true,
                ..
            })
        ),
        "the window waits for the orphans' clients: {connected:?}"
    );
    let reopen = Op::Open {
        ino: kept,
        handle: 1,
        flags: RW,
        reopen: true,
    };
    let taken = a.call(&request(3, reopen, None));
    assert!(taken.result.is_ok(), "{taken:?}");
    let back = a.call(&request(4, read(kept, 1, 0, 100), None));
    assert_eq!(back.result, Ok(Body::Data(Data(b"alice's".to_vec()))));
    // Bob never comes back: when the window ends, his orphan goes; Alice's stays.
    let c = server.client().await;
    until_orphans(&c, 1).await;
    let refused = c.getattr(lost).await;
    assert!(
        matches!(refused, Err(ClientError::Errno(Errno::ESTALE))),
        "{refused:?}"
    );
    assert!(
        a.call(&request(5, Op::Release { handle: 1 }, None))
            .result
            .is_ok()
    );
    until_orphans(&c, 0).await;
    assert_eq!(c.statfs().await.unwrap().files, 0);
    drop((a, c));
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

fn piece(slice: u64, slice_size: u64, file_off: u64, len: u64) -> mds_proto::Placed {
    mds_proto::Placed {
        slice,
        slice_size,
        slice_off: 0,
        file_off,
        len,
    }
}

/// Whether the first object of slice `id` is gone from the default store of the server whose
/// data directory is `dir`.
fn slice_gone(dir: &Path, id: u64) -> bool {
    !dir.join(format!("objects/slices/{:x}/{id:016x}.0", id >> 10))
        .exists()
}

/// Waits (at most 30 s) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn placed(body: Body) -> mds_proto::FileLayout {
    match body {
        Body::Layout(layout) => layout,
        other => panic!("{other:?}"),
    }
}

/// The data tier's requests through the real server, as a client sends them: slice ids that
/// are never handed out twice (across a restart too), WRITE_SLICES that moves a file to the
/// object store and is refused what it must refuse, LAYOUT, READ and WRITE of a file in
/// objects (EMEDIUMTYPE), a truncate that clips; and the collector deleting a deleted file's
/// slices, a cut-out one and an upload nothing names, never one a layout names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_layouts_and_the_collector_through_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 4096;
    config.keys.object_grace = Duration::from_secs(1);
    let server = InProcess::start(config.clone());
    let c = server.client().await;
    let ids = |body: Body| match body {
        Body::Slices { first, count } => first..first + u64::from(count),
        other => panic!("{other:?}"),
    };
    let first = ids(c.call(Op::AllocSlices { count: 8 }).await.unwrap());
    let second = ids(c.call(Op::AllocSlices { count: 8 }).await.unwrap());
    assert_eq!((first.end - first.start, second.start), (8, first.end));
    for count in [0, mds_proto::MAX_SLICE_IDS + 1] {
        assert_eq!(
            errno(c.call(Op::AllocSlices { count }).await),
            Errno::EINVAL
        );
    }

    // Objects the "mount" uploaded: three slices, one of which nothing will name.
    let store =
        mds_objects::Store::open(&mds_objects::Address::Local(dir.path().join("objects"))).unwrap();
    let (a, b, stray) = (first.start, first.start + 1, first.start + 2);
    for (id, len) in [(a, 10_000), (b, 3000), (stray, 100)] {
        store
            .put_slice(id, &[bytes::Bytes::from(vec![id as u8; len])])
            .await
            .unwrap();
    }

    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    c.call(write(f, 1, 0, b"inline")).await.unwrap();
    let ws = |handle, size, pieces| Op::WriteSlices {
        ino: f,
        handle,
        size,
        placed: pieces,
    };
    // Refused: a piece past its slice, an empty one, through a handle not open.
    let past = mds_proto::Placed {
        slice_off: 9_999,
        ..piece(a, 10_000, 0, 2)
    };
    assert_eq!(errno(c.call(ws(1, 0, vec![past])).await), Errno::EINVAL);
    assert_eq!(
        errno(c.call(ws(1, 0, vec![piece(a, 10_000, 0, 0)])).await),
        Errno::EINVAL
    );
    assert_eq!(
        errno(c.call(ws(9, 0, vec![piece(a, 10_000, 0, 10)])).await),
        Errno::EBADF
    );
    // The file moves to objects: its bytes on the server go, READ and WRITE are refused.
    let moved = c
        .call(ws(1, 0, vec![piece(a, 10_000, 0, 10_000)]))
        .await
        .unwrap();
    assert_eq!(size(&moved), 10_000);
    assert_eq!(errno(c.call(read(f, 1, 0, 10)).await), Errno::EMEDIUMTYPE);
    assert_eq!(
        errno(c.call(write(f, 1, 0, b"x")).await),
        Errno::EMEDIUMTYPE
    );
    // A newer piece inside a's bytes: both kept (a still holds bytes b does not cover).
    c.call(ws(1, 12_000, vec![piece(b, 3000, 100, 3000)]))
        .await
        .unwrap();
    let layout = placed(c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap());
    assert!(layout.objects);
    assert_eq!(layout.size, 12_000);
    assert_eq!(
        layout.placed,
        vec![piece(a, 10_000, 0, 10_000), piece(b, 3000, 100, 3000)]
    );
    // A truncate to 50 bytes clips a's piece and drops b's, whose slice goes to the
    // collector.
    let cut = Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(50),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    c.call(cut).await.unwrap();
    let layout = placed(c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap());
    assert_eq!(
        (layout.size, layout.placed),
        (50, vec![piece(a, 10_000, 0, 50)])
    );
    // After the grace: b (cut out) and the stray (named by nothing) are deleted, a is not.
    let gone = |id: u64| slice_gone(dir.path(), id);
    until("the collector deletes b and the stray", || {
        gone(b) && gone(stray)
    })
    .await;
    assert!(!gone(a), "a slice a layout names is never deleted");

    // Ids are never handed out again after a restart.
    c.call(Op::Release { handle: 1 }).await.unwrap();
    drop(c);
    server.stop().unwrap();
    let server = InProcess::start(config);
    let c = server.client().await;
    let third = ids(c.call(Op::AllocSlices { count: 1 }).await.unwrap());
    assert!(third.start >= second.end, "{third:?} after {second:?}");
    // The layout survived; the deleted file's slice goes after the grace.
    c.call(open(f, 2, RW)).await.unwrap();
    let layout = placed(c.call(Op::Layout { ino: f, handle: 2 }).await.unwrap());
    assert_eq!(layout.placed, vec![piece(a, 10_000, 0, 50)]);
    c.call(Op::Release { handle: 2 }).await.unwrap();
    c.unlink(ROOT, "f").await.unwrap();
    until("the collector deletes the deleted file's slice", || gone(a)).await;
    drop(c);
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// COMPACT_LAYOUT through the real server: refused for a layout some change followed (the
/// version LAYOUT gave is stale), for a piece past the size or a handle not open to write;
/// taken for the current one, with size and times as they were, and the slices it no longer
/// names deleted by the collector after the grace, the one it names kept; across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_layout_replaces_only_the_layout_it_was_read_from() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 4096;
    config.keys.object_grace = Duration::from_secs(1);
    let server = InProcess::start(config.clone());
    let c = server.client().await;
    let first = match c.call(Op::AllocSlices { count: 8 }).await.unwrap() {
        Body::Slices { first, .. } => first,
        other => panic!("{other:?}"),
    };
    let store =
        mds_objects::Store::open(&mds_objects::Address::Local(dir.path().join("objects"))).unwrap();
    let (a, b, whole) = (first, first + 1, first + 2);
    for (id, len) in [(a, 8000), (b, 2000), (whole, 8000)] {
        store
            .put_slice(id, &[bytes::Bytes::from(vec![id as u8; len])])
            .await
            .unwrap();
    }
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    c.call(open(f, 2, mds_proto::OpenFlags::default()))
        .await
        .unwrap();
    for pieces in [
        vec![piece(a, 8000, 0, 8000)],
        vec![piece(b, 2000, 3000, 2000)],
    ] {
        let op = Op::WriteSlices {
            ino: f,
            handle: 1,
            size: 8000,
            placed: pieces,
        };
        c.call(op).await.unwrap();
    }
    let layout = placed(c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap());
    let compact = |handle, version, pieces| Op::CompactLayout {
        ino: f,
        handle,
        version,
        placed: pieces,
    };
    let one = vec![piece(whole, 8000, 0, 8000)];
    assert_eq!(
        errno(
            c.call(compact(
                1,
                layout.version,
                vec![piece(whole, 8000, 0, 9000)]
            ))
            .await
        ),
        Errno::EINVAL,
        "a piece past its slice"
    );
    assert_eq!(
        errno(c.call(compact(2, layout.version, one.clone())).await),
        Errno::EBADF,
        "a handle open only to read"
    );
    // A change after the layout was read: the version is stale.
    let touch = Op::Setattr {
        ino: f,
        attr: SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    };
    c.call(touch).await.unwrap();
    assert_eq!(
        errno(c.call(compact(1, layout.version, one.clone())).await),
        Errno::ESTALE
    );
    let layout = placed(c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap());
    let before = match c.call(Op::Getattr { ino: f }).await.unwrap() {
        Body::Attr(attr) => attr,
        other => panic!("{other:?}"),
    };
    c.call(compact(1, layout.version, one.clone()))
        .await
        .unwrap();
    let after = match c.call(Op::Getattr { ino: f }).await.unwrap() {
        Body::Attr(attr) => attr,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (after.size, after.mtime_ns, after.ctime_ns),
        (before.size, before.mtime_ns, before.ctime_ns),
        "a compaction changes no size and no time"
    );
    let now = placed(c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap());
    assert_eq!(now.placed, one);
    assert!(now.version > layout.version);
    let gone = |id: u64| slice_gone(dir.path(), id);
    until("the collector deletes the compacted-away slices", || {
        gone(a) && gone(b)
    })
    .await;
    assert!(!gone(whole));
    c.call(Op::Release { handle: 1 }).await.unwrap();
    c.call(Op::Release { handle: 2 }).await.unwrap();
    drop(c);
    server.stop().unwrap();
    let server = InProcess::start(config);
    let c = server.client().await;
    let kept = placed(c.call(Op::Layout { ino: f, handle: 0 }).await.unwrap());
    assert_eq!(kept.placed, one, "the compacted layout survives a restart");
    drop(c);
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_object_store_files_stay_within_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 4096;
    config.keys.object_store = Some("none".into());
    let server = InProcess::start(config);
    let c = server.client().await;
    assert_eq!(
        errno(c.call(Op::AllocSlices { count: 1 }).await),
        Errno::EOPNOTSUPP
    );
    assert_eq!(c.statfs().await.unwrap().object_store, "");
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    assert_eq!(errno(c.call(write(f, 1, 4096, b"x")).await), Errno::EFBIG);
    let grow = Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(1 << 20),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    assert_eq!(errno(c.call(grow).await), Errno::EFBIG);
    drop(c);
    server.stop().unwrap();
}

/// A file in objects: its attributes count what its layout covers (`st_blocks`), and a
/// LAYOUT through a handle open to read — the read the server sees of such a file — moves the
/// atime as READ does (relatime); one without a handle (a client's own look, as compaction's)
/// leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_in_objects_counts_its_layout_and_its_reads_move_the_atime() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.inline_data_max = 4096;
    let server = InProcess::start(config);
    let c = server.client().await;
    let first = match c.call(Op::AllocSlices { count: 1 }).await.unwrap() {
        Body::Slices { first, .. } => first,
        other => panic!("{other:?}"),
    };
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    c.call(open(f, 1, RW)).await.unwrap();
    // 8000 bytes at 1 MiB of a 2 MiB file: two 4 KiB blocks of data, the rest holes.
    let op = Op::WriteSlices {
        ino: f,
        handle: 1,
        size: 2 << 20,
        placed: vec![piece(first, 8000, 1 << 20, 8000)],
    };
    let Body::Attr(attr) = c.call(op).await.unwrap() else {
        panic!("WRITE_SLICES answers the attributes");
    };
    assert_eq!((attr.size, attr.blocks), (2 << 20, 16));
    assert_eq!(c.statfs().await.unwrap().data_bytes, 8192);
    let long_ago = |c: &Client| {
        let op = Op::Setattr {
            ino: f,
            attr: SetAttr {
                atime: Some(mds_proto::SetTime::At(1_000_000_000)),
                ..SetAttr::default()
            },
        };
        let c = c.clone();
        async move { c.call(op).await.unwrap() }
    };
    let atime = |c: &Client| {
        let c = c.clone();
        async move { c.getattr(f).await.unwrap().atime_ns }
    };
    long_ago(&c).await;
    c.call(Op::Layout { ino: f, handle: 0 }).await.unwrap();
    assert_eq!(atime(&c).await, 1_000_000_000, "a look without a handle");
    c.call(Op::Layout { ino: f, handle: 1 }).await.unwrap();
    assert!(atime(&c).await > 1_000_000_000, "a read through a handle");
}

/// GETLK and SETLK through the real server, as a client sends them: who may lock (a handle of
/// its own on that inode, or read permission without one), what bad input is refused, what a
/// lock and an unlock are answered with, and two clients' locks meeting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_through_the_real_server_refuse_what_they_must() {
    use mds_proto::{Cred, FileLock, LockKind};
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::start(common::config(dir.path()));
    let a = server.client().await;
    let b = server.client().await;
    let f = a.create(ROOT, "f", 0o600).await.unwrap().ino;
    a.call(open(f, 1, RW)).await.unwrap();
    let whole = |kind| FileLock {
        start: 0,
        end: u64::MAX,
        kind,
        pid: 7,
    };
    let setlk = |handle, owner, lock: FileLock, wait| Op::Setlk {
        ino: f,
        handle,
        owner,
        lock,
        wait,
    };
    let getlk = |handle, owner, lock| Op::Getlk {
        ino: f,
        handle,
        owner,
        lock,
    };
    // A lock taken: the inode's attributes; an unlock: Done.
    let taken = a
        .call(setlk(1, 10, whole(LockKind::Write), false))
        .await
        .unwrap();
    assert!(
        matches!(taken, Body::Attr(ref at) if at.ino == f),
        "{taken:?}"
    );
    // Another client: a handle it does not hold is EBADF; without one it needs read
    // permission (mode 0600, another uid: EACCES).
    assert_eq!(
        errno(b.call(setlk(1, 20, whole(LockKind::Read), false)).await),
        Errno::EBADF
    );
    let other = Cred {
        uid: 4242,
        gid: 4242,
        groups: vec![],
    };
    assert_eq!(
        errno(
            b.call_as(&other, setlk(0, 20, whole(LockKind::Read), false))
                .await
        ),
        Errno::EACCES
    );
    // Root may read it: its lock meets a's.
    assert_eq!(
        errno(b.call(setlk(0, 20, whole(LockKind::Read), false)).await),
        Errno::EAGAIN
    );
    let found = b.call(getlk(0, 20, whole(LockKind::Read))).await.unwrap();
    assert_eq!(
        found,
        Body::Lock(FileLock {
            start: 0,
            end: u64::MAX,
            kind: LockKind::Write,
            pid: 0,
        }),
        "another client is told no pid"
    );
    // Bad input: GETLK of an unlock, a range that ends before it starts, an inode that is not.
    assert_eq!(
        errno(b.call(getlk(0, 20, whole(LockKind::Unlock))).await),
        Errno::EINVAL
    );
    let backwards = FileLock {
        start: 10,
        end: 9,
        ..whole(LockKind::Read)
    };
    assert_eq!(
        errno(a.call(setlk(1, 10, backwards, false)).await),
        Errno::EINVAL
    );
    assert_eq!(
        errno(
            a.call(Op::Setlk {
                ino: f + 1000,
                handle: 0,
                owner: 10,
                lock: whole(LockKind::Read),
                wait: false,
            })
            .await
        ),
        Errno::ESTALE
    );
    // Released, b takes it; the lock a had is gone from GETLK's view too.
    assert_eq!(
        a.call(setlk(1, 10, whole(LockKind::Unlock), false))
            .await
            .unwrap(),
        Body::Done
    );
    assert!(matches!(
        b.call(setlk(0, 20, whole(LockKind::Read), false)).await,
        Ok(Body::Attr(_))
    ));
    assert_eq!(
        a.call(getlk(1, 10, whole(LockKind::Read))).await.unwrap(),
        Body::Lock(whole(LockKind::Unlock)),
        "a shared lock does not keep another from a shared one"
    );
}
