//! Stores written by earlier builds — schema version 2 (protocol 3: the fixture
//! `fixtures/store-schema-2.tar.gz`, made by `fixtures/make-schema-2-store.sh` with commit
//! a0e1521's binaries) and schema version 3 (protocol 4: `fixtures/store-schema-3.tar.gz`, by
//! `make-schema-3-store.sh` with 528efd0's) and schema version 8 (protocol 10:
//! `fixtures/store-schema-8.tar.gz`, by `make-schema-8-store.sh` with a3354dd's, holding file
//! data and resend records) — are read as they are by `mds fsck`, upgraded in place by the
//! first `mds serve`, served with everything they held, and fsck clean after.

mod common;

use std::path::Path;
use std::process::Command;

use mds_client::ROOT;
use mds_proto::{Kind, XattrSet};

/// The fixture of schema `version` unpacked into `dir`: the store's directory.
fn unpack(dir: &Path, version: u32) -> std::path::PathBuf {
    let fixture =
        mds_testkit::package_dir().join(format!("tests/fixtures/store-schema-{version}.tar.gz"));
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&fixture)
        .arg("-C")
        .arg(dir)
        .status()
        .expect("running tar");
    assert!(status.success(), "unpacking {}", fixture.display());
    dir.join("store")
}

#[test]
fn a_store_written_by_the_previous_build_is_served_and_fscks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let store = unpack(dir.path(), 2);
    // Read-only, in the old layout, changing nothing.
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");

    let server = common::start(&store, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (g, f3) = rt.block_on(async {
        let c = server.client().await;
        let a = c.lookup(ROOT, "a").await.unwrap();
        let b = c.lookup(a.ino, "b").await.unwrap();
        assert_eq!(
            common::names(&c, b.ino).await,
            ["f3", "f4", "f5"],
            "the removed file stays removed"
        );
        assert!(c.lookup(ROOT, "empty").await.is_err());
        let g = c.lookup(a.ino, "g").await.unwrap();
        assert_eq!(
            (g.kind, g.mode, g.uid, g.gid, g.size, g.nlink),
            (Kind::File, 0o600, 7, 8, 4096, 1)
        );
        assert_eq!(
            g.atime_ns, g.mtime_ns,
            "an upgraded inode's atime is its mtime"
        );
        assert_eq!(g.rdev, 0);
        // The new operations work on the old inodes.
        c.link(g.ino, b.ino, "g2").await.unwrap();
        c.symlink(a.ino, "s", b"g").await.unwrap();
        c.setxattr(g.ino, "user.k", b"v", XattrSet::Either)
            .await
            .unwrap();
        let f3 = c.lookup(b.ino, "f3").await.unwrap();
        (g.ino, f3)
    });
    assert!(
        server
            .log_text()
            .contains("upgraded the store from schema version 2"),
        "{}",
        server.log_text()
    );
    assert!(server.stop().success());
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");

    // The next start finds a current store: nothing to upgrade, everything there.
    let server = common::start(&store, &[]);
    rt.block_on(async {
        let c = server.client().await;
        assert_eq!(c.getattr(g).await.unwrap().nlink, 2);
        assert_eq!(c.getxattr(g, "user.k").await.unwrap(), b"v");
        assert_eq!(c.getattr(f3.ino).await.unwrap(), f3);
    });
    assert!(!server.log_text().contains("upgraded the store"));
    assert!(server.stop().success());
}

/// Schema 3's kinds, links, times and attributes survive the upgrade to schema 4, which adds
/// file data and orphans: the old files take data, and the store fscks clean.
#[test]
fn a_store_of_schema_3_keeps_its_links_kinds_times_and_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let store = unpack(dir.path(), 3);
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");
    let server = common::start(&store, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = server.client().await;
        let a = c.lookup(ROOT, "a").await.unwrap();
        let b = c.lookup(a.ino, "b").await.unwrap();
        assert_eq!(common::names(&c, b.ino).await, ["hard", "soft"]);
        let f = c.lookup(a.ino, "f").await.unwrap();
        assert_eq!(
            (f.size, f.nlink, f.mtime_ns, f.atime_ns),
            (8192, 2, 1_000_000_000, 2_000_000_000)
        );
        assert_eq!(c.lookup(b.ino, "hard").await.unwrap().ino, f.ino);
        let soft = c.lookup(b.ino, "soft").await.unwrap();
        assert_eq!(c.readlink(soft.ino).await.unwrap(), b"../f");
        assert_eq!(c.lookup(a.ino, "p").await.unwrap().kind, Kind::Fifo);
        let tty = c.lookup(a.ino, "tty").await.unwrap();
        assert_eq!((tty.kind, tty.rdev), (Kind::CharDevice, (4 << 8) | 1));
        assert_eq!(c.getxattr(f.ino, "user.tag").await.unwrap(), b"blue");
        // The old file takes data: its size was only a number, its bytes are a hole.
        let rw = mds_proto::OpenFlags {
            read: true,
            write: true,
            ..mds_proto::OpenFlags::default()
        };
        let (h, _) = c.open(f.ino, rw).await.unwrap();
        assert_eq!(c.read(h, 8190, 10).await.unwrap(), [0, 0]);
        c.write(h, 0, b"now").await.unwrap();
        assert_eq!(c.read(h, 0, 3).await.unwrap(), b"now");
        c.release(h).await.unwrap();
    });
    assert!(
        server
            .log_text()
            .contains("upgraded the store from schema version 3"),
        "{}",
        server.log_text()
    );
    assert!(server.stop().success());
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");
}

/// Schema 8, made by the last build before schema 9 (protocol 10): its resend records hold
/// replies this build cannot decode (an `Attr` without `blocks`), which once kept the new
/// build from starting on it; the upgrade drops them, counts each file's data, and serves.
#[test]
fn a_store_of_schema_8_with_resend_records_is_upgraded_and_counts_its_files_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = unpack(dir.path(), 8);
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");

    let server = common::start(&store, &[]);
    let log = server.log_text();
    assert!(
        log.contains("upgraded the store from schema version 8"),
        "{log}"
    );
    assert!(
        log.contains("the upgrade dropped the resend records of the older protocol"),
        "{log}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = server.client().await;
        let a = c.lookup(ROOT, "a").await.unwrap();
        let b = c.lookup(a.ino, "b").await.unwrap();
        let ten = c.lookup(a.ino, "ten-k").await.unwrap();
        let small = c.lookup(b.ino, "small").await.unwrap();
        let sparse = c.lookup(a.ino, "sparse").await.unwrap();
        // st_blocks, in 512-byte units, as the upgrade counted the 4 KiB blocks stored.
        assert_eq!((ten.size, ten.blocks), (10_000, 24));
        assert_eq!((small.size, small.blocks), (5, 8));
        assert_eq!(
            (sparse.size, sparse.blocks),
            (1_000_000, 0),
            "a hole throughout"
        );
        let read = mds_proto::OpenFlags {
            read: true,
            ..mds_proto::OpenFlags::default()
        };
        let (h, _) = c.open(ten.ino, read).await.unwrap();
        assert_eq!(c.read_to_end(h).await.unwrap(), vec![b'x'; 10_000]);
        c.release(h).await.unwrap();
        // The new build's own resend records, answered as any.
        c.create(b.ino, "after", 0o644).await.unwrap();
    });
    assert!(server.stop().success());
    let (code, out) = common::fsck(&store);
    assert_eq!(code, 0, "{out}");
}
