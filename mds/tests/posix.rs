//! The rest of the POSIX namespace through the real server: hard links, symbolic links,
//! special files, times with nanoseconds, RENAME's flags and extended attributes — each one's
//! success and its error answers, what survives a clean restart and `mds fsck`, a SIGKILL
//! between answer and commit under `--ack early` (replayed, with the inode numbers the
//! clients were told) and under `--ack commit` (nothing answered is lost), a cut connection
//! (the resend is answered from its record, never executed twice), and commit-on-share (a
//! client reading another's uncommitted change waits for its commit).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::InProcess;
use common::raw::{Raw, request};
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{
    Attr, Body, Cred, Errno, Kind, MAX_SYMLINK, MAX_XATTR_VALUE, Op, RenameHow, SetAttr, SetTime,
    Target, XattrSet, XattrValue,
};

fn errno<T: std::fmt::Debug>(r: mds_client::Result<T>) -> Errno {
    match r {
        Err(ClientError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

async fn as_user(addr: std::net::SocketAddr, uid: u32, gid: u32) -> Client {
    let cred = Cred {
        uid,
        gid,
        groups: vec![],
    };
    Client::connect_session(addr, Arc::new(Session::with_cred(cred)))
        .await
        .unwrap()
}

/// A device number as Linux's `makedev` encodes it.
fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// LOOKUP of ".." is a directory's parent (the root's is the root): what a mount's kernel
/// asks to decode the file handle of a directory it no longer holds (NFS re-export); it
/// follows a rename, and is refused for a file and for a caller who may not search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_of_dotdot_is_the_parent_and_follows_a_rename() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap();
    let e = c.mkdir(d.ino, "e", 0o700).await.unwrap();
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    assert_eq!(c.lookup(e.ino, "..").await.unwrap().ino, d.ino);
    assert_eq!(
        c.lookup(d.ino, "..").await.unwrap(),
        c.getattr(ROOT).await.unwrap()
    );
    assert_eq!(c.lookup(ROOT, "..").await.unwrap().ino, ROOT);
    assert_eq!(errno(c.lookup(f.ino, "..").await), Errno::ENOTDIR);
    assert_eq!(errno(c.lookup(999_999, "..").await), Errno::ESTALE);
    assert_eq!(errno(c.lookup(ROOT, ".").await), Errno::EINVAL);
    c.rename(d.ino, "e", ROOT, "e").await.unwrap();
    assert_eq!(c.lookup(e.ino, "..").await.unwrap().ino, ROOT);
    let other = as_user(server.addr, 1000, 1000).await;
    assert_eq!(errno(other.lookup(e.ino, "..").await), Errno::EACCES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_links_count_their_names_and_the_inode_goes_with_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap();
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    let linked = c.link(f.ino, d.ino, "g").await.unwrap();
    assert_eq!((linked.ino, linked.nlink), (f.ino, 2));
    assert!(linked.ctime_ns >= f.ctime_ns);
    let d_after = c.getattr(d.ino).await.unwrap();
    assert_eq!(
        (d_after.size, d_after.nlink),
        (1, 2),
        "a link is no subdirectory"
    );
    assert_eq!(c.lookup(d.ino, "g").await.unwrap().ino, f.ino);
    // Refusals, in Linux's order.
    assert_eq!(errno(c.link(d.ino, ROOT, "dl").await), Errno::EPERM);
    assert_eq!(errno(c.link(f.ino, d.ino, "g").await), Errno::EEXIST);
    assert_eq!(errno(c.link(f.ino, f.ino, "x").await), Errno::ENOTDIR);
    assert_eq!(errno(c.link(f.ino, ROOT, "..").await), Errno::EINVAL);
    assert_eq!(errno(c.link(999_999, ROOT, "x").await), Errno::ESTALE);
    // protected_hardlinks: a user may not link another's file it cannot read and write.
    let bob = as_user(server.addr, 2000, 200).await;
    let open = bob.mkdir(ROOT, "bobs", 0o777).await.unwrap();
    assert_eq!(errno(bob.link(f.ino, open.ino, "mine").await), Errno::EPERM);
    // Unlinking one name keeps the inode for the other, with one link less.
    c.unlink(ROOT, "f").await.unwrap();
    let left = c.getattr(f.ino).await.unwrap();
    assert_eq!(left.nlink, 1);
    assert!(left.ctime_ns >= linked.ctime_ns);
    // Renaming over the last name removes the inode.
    let other = c.create(d.ino, "other", 0o644).await.unwrap();
    c.rename(d.ino, "other", d.ino, "g").await.unwrap();
    assert_eq!(errno(c.getattr(f.ino).await), Errno::ESTALE);
    assert_eq!(c.lookup(d.ino, "g").await.unwrap().ino, other.ino);
    drop((c, bob));
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_keep_their_target_byte_for_byte_and_special_files_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let target = b"../a b/\xff\x01c".to_vec();
    let s = c.symlink(ROOT, "s", &target).await.unwrap();
    assert_eq!(
        (s.kind, s.mode, s.size, s.nlink),
        (Kind::Symlink, 0o777, target.len() as u64, 1)
    );
    assert_eq!(c.readlink(s.ino).await.unwrap(), target);
    assert_eq!(errno(c.symlink(ROOT, "empty", b"").await), Errno::ENOENT);
    let longest = vec![b'x'; MAX_SYMLINK];
    let long = c.symlink(ROOT, "long", &longest).await.unwrap();
    assert_eq!(c.readlink(long.ino).await.unwrap(), longest);
    let too_long = vec![b'x'; MAX_SYMLINK + 1];
    assert_eq!(
        errno(c.symlink(ROOT, "l2", &too_long).await),
        Errno::ENAMETOOLONG
    );
    assert_eq!(errno(c.symlink(ROOT, "s", b"t").await), Errno::EEXIST);
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    assert_eq!(errno(c.readlink(f.ino).await), Errno::EINVAL);
    assert_eq!(errno(c.readlink(ROOT).await), Errno::EINVAL);
    // A symlink's size is its target's; truncating one is no truncation.
    let set = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(errno(c.setattr(s.ino, set).await), Errno::EINVAL);

    let fifo = c.mknod(ROOT, "p", Kind::Fifo, 0o640, 77).await.unwrap();
    assert_eq!((fifo.kind, fifo.mode, fifo.rdev), (Kind::Fifo, 0o640, 0));
    let sock = c.mknod(ROOT, "k", Kind::Socket, 0o600, 0).await.unwrap();
    assert_eq!(sock.kind, Kind::Socket);
    let null = makedev(1, 3);
    let chr = c
        .mknod(ROOT, "null", Kind::CharDevice, 0o666, null)
        .await
        .unwrap();
    assert_eq!((chr.kind, chr.rdev), (Kind::CharDevice, null));
    let sda = makedev(259, 65_537);
    let blk = c
        .mknod(ROOT, "blk", Kind::BlockDevice, 0o660, sda)
        .await
        .unwrap();
    assert_eq!((blk.kind, blk.rdev), (Kind::BlockDevice, sda));
    let reg = c.mknod(ROOT, "reg", Kind::File, 0o600, 0).await.unwrap();
    assert_eq!(reg.kind, Kind::File);
    assert_eq!(
        errno(c.mknod(ROOT, "dd", Kind::Directory, 0o755, 0).await),
        Errno::EPERM
    );
    assert_eq!(
        errno(c.mknod(ROOT, "ll", Kind::Symlink, 0o777, 0).await),
        Errno::EINVAL
    );
    // Devices are root's to make; fifos anyone's who may write the directory.
    let bob = as_user(server.addr, 2000, 200).await;
    assert_eq!(
        errno(bob.mknod(ROOT, "c2", Kind::CharDevice, 0o600, null).await),
        Errno::EPERM
    );
    assert_eq!(
        bob.mknod(ROOT, "p2", Kind::Fifo, 0o600, 0)
            .await
            .unwrap()
            .uid,
        2000
    );
    let kinds: Vec<(String, Kind)> = c
        .readdir_all(ROOT)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(kinds.contains(&("s".into(), Kind::Symlink)));
    assert!(kinds.contains(&("blk".into(), Kind::BlockDevice)));
    let status = c.statfs().await.unwrap();
    assert_eq!((status.files, status.others), (2, 7), "{status:?}");
    assert!(status.store_bytes > 0 && status.store_bytes_free > 0);

    // All of it survives a restart byte for byte, and fsck finds nothing.
    drop((c, bob));
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    assert_eq!(c.readlink(s.ino).await.unwrap(), target);
    assert_eq!(c.getattr(blk.ino).await.unwrap(), blk);
    assert_eq!(c.getattr(fifo.ino).await.unwrap().kind, Kind::Fifo);
    drop(c);
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_keep_nanoseconds_and_now_is_the_servers_clock() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    assert_eq!((f.atime_ns, f.mtime_ns), (f.ctime_ns, f.ctime_ns));
    let explicit = SetAttr {
        atime: Some(SetTime::At(1_234_567_890_123_456_789)),
        mtime: Some(SetTime::At(-1)),
        ..SetAttr::default()
    };
    let a = c.setattr(f.ino, explicit).await.unwrap();
    assert_eq!((a.atime_ns, a.mtime_ns), (1_234_567_890_123_456_789, -1));
    assert!(a.ctime_ns >= f.ctime_ns, "ctime is always now");
    let touch = SetAttr {
        atime: Some(SetTime::Now),
        mtime: Some(SetTime::Now),
        ..SetAttr::default()
    };
    let t = c.setattr(f.ino, touch.clone()).await.unwrap();
    assert_eq!((t.atime_ns, t.mtime_ns), (t.ctime_ns, t.ctime_ns));
    // Another user may set both to now on a file it may write, and nothing else.
    let bob = as_user(server.addr, 2000, 200).await;
    assert_eq!(
        errno(bob.setattr(f.ino, touch.clone()).await),
        Errno::EACCES
    );
    let mode = SetAttr {
        mode: Some(0o666),
        ..SetAttr::default()
    };
    c.setattr(f.ino, mode).await.unwrap();
    assert!(bob.setattr(f.ino, touch).await.is_ok());
    let only_mtime = SetAttr {
        mtime: Some(SetTime::Now),
        ..SetAttr::default()
    };
    assert_eq!(errno(bob.setattr(f.ino, only_mtime).await), Errno::EPERM);
    // A truncate changes the data: mtime and ctime move.
    let before = c.getattr(f.ino).await.unwrap();
    let truncate = SetAttr {
        size: Some(10),
        ..SetAttr::default()
    };
    let after = c.setattr(f.ino, truncate).await.unwrap();
    assert!(after.mtime_ns >= before.mtime_ns && after.mtime_ns == after.ctime_ns);
    // Persisted exactly.
    let exact = SetAttr {
        atime: Some(SetTime::At(5)),
        mtime: Some(SetTime::At(1_700_000_000_000_000_001)),
        ..SetAttr::default()
    };
    let want = c.setattr(f.ino, exact).await.unwrap();
    drop((c, bob));
    server.stop().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    assert_eq!(c.getattr(f.ino).await.unwrap(), want);
    drop(c);
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_can_refuse_to_replace_and_can_exchange() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let a = c.mkdir(ROOT, "a", 0o755).await.unwrap();
    let b = c.mkdir(ROOT, "b", 0o755).await.unwrap();
    let f = c.create(a.ino, "f", 0o644).await.unwrap();
    let sub = c.mkdir(b.ino, "sub", 0o755).await.unwrap();
    let g = c.create(ROOT, "g", 0o644).await.unwrap();
    let no_replace = RenameHow::NoReplace;
    assert_eq!(
        errno(c.rename_how(a.ino, "f", ROOT, "g", no_replace).await),
        Errno::EEXIST
    );
    assert_eq!(
        errno(c.rename_how(a.ino, "f", a.ino, "f", no_replace).await),
        Errno::EEXIST
    );
    c.rename_how(ROOT, "g", a.ino, "g", no_replace)
        .await
        .unwrap();
    assert_eq!(c.lookup(a.ino, "g").await.unwrap().ino, g.ino);
    let exchange = RenameHow::Exchange;
    assert_eq!(
        errno(c.rename_how(a.ino, "f", b.ino, "missing", exchange).await),
        Errno::ENOENT
    );
    // A file and a directory swap parents: the links of ".." go with the directory.
    c.rename_how(a.ino, "f", b.ino, "sub", exchange)
        .await
        .unwrap();
    assert_eq!(c.lookup(a.ino, "f").await.unwrap().ino, sub.ino);
    assert_eq!(c.lookup(b.ino, "sub").await.unwrap().ino, f.ino);
    assert_eq!(c.getattr(a.ino).await.unwrap().nlink, 3);
    assert_eq!(c.getattr(b.ino).await.unwrap().nlink, 2);
    // A directory may not be swapped into its own subtree.
    let inner = c.mkdir(sub.ino, "inner", 0o755).await.unwrap();
    assert_eq!(
        errno(c.rename_how(ROOT, "a", sub.ino, "inner", exchange).await),
        Errno::EINVAL
    );
    assert_eq!(
        errno(c.rename_how(sub.ino, "inner", ROOT, "a", exchange).await),
        Errno::EINVAL
    );
    assert_eq!(c.lookup(sub.ino, "inner").await.unwrap().ino, inner.ino);
    // Kinds, not file types: no directory replaces a symlink, and nothing but a directory
    // replaces a directory.
    let link = c.symlink(ROOT, "link", b"x").await.unwrap();
    c.mkdir(ROOT, "empty", 0o755).await.unwrap();
    assert_eq!(
        errno(c.rename(ROOT, "link", ROOT, "empty").await),
        Errno::EISDIR
    );
    assert_eq!(
        errno(c.rename(ROOT, "empty", ROOT, "link").await),
        Errno::ENOTDIR
    );
    c.mknod(ROOT, "fifo", Kind::Fifo, 0o644, 0).await.unwrap();
    assert_eq!(
        errno(c.rename(ROOT, "empty", ROOT, "fifo").await),
        Errno::ENOTDIR
    );
    c.rename(ROOT, "fifo", ROOT, "link").await.unwrap();
    assert_eq!(errno(c.getattr(link.ino).await), Errno::ESTALE, "replaced");
    // Between two names of one inode: nothing happens, as on Linux.
    let h = c.create(ROOT, "h1", 0o644).await.unwrap();
    c.link(h.ino, ROOT, "h2").await.unwrap();
    c.rename(ROOT, "h1", ROOT, "h2").await.unwrap();
    assert_eq!(c.lookup(ROOT, "h1").await.unwrap().ino, h.ino);
    assert_eq!(c.lookup(ROOT, "h2").await.unwrap().nlink, 2);
    // Two directories of one parent exchanged: the parent's links do not move.
    let before = c.getattr(ROOT).await.unwrap().nlink;
    c.rename_how(ROOT, "a", ROOT, "b", exchange).await.unwrap();
    assert_eq!(c.lookup(ROOT, "b").await.unwrap().ino, a.ino);
    assert_eq!(c.getattr(ROOT).await.unwrap().nlink, before);
    drop(c);
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let moved = c.lookup(a.ino, "f").await.unwrap();
    assert_eq!((moved.ino, moved.kind), (sub.ino, Kind::Directory));
    assert_eq!(c.lookup(ROOT, "a").await.unwrap().ino, b.ino);
    drop(c);
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_attributes_follow_linux_limits_flags_and_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    let f = c.create(ROOT, "f", 0o644).await.unwrap();
    let either = XattrSet::Either;
    c.setxattr(f.ino, "user.b", b"2", either).await.unwrap();
    c.setxattr(f.ino, "user.a", &[0, 255, 7], either)
        .await
        .unwrap();
    c.setxattr(f.ino, "trusted.t", b"root's", either)
        .await
        .unwrap();
    c.setxattr(f.ino, "security.selinux", b"ctx", either)
        .await
        .unwrap();
    assert_eq!(c.getxattr(f.ino, "user.a").await.unwrap(), [0, 255, 7]);
    assert_eq!(
        c.listxattr(f.ino).await.unwrap(),
        ["security.selinux", "trusted.t", "user.a", "user.b"]
    );
    assert!(c.getattr(f.ino).await.unwrap().ctime_ns >= f.ctime_ns);
    // Flags, missing names, and the size limits.
    assert_eq!(
        errno(c.setxattr(f.ino, "user.a", b"x", XattrSet::Create).await),
        Errno::EEXIST
    );
    assert_eq!(
        errno(c.setxattr(f.ino, "user.new", b"x", XattrSet::Replace).await),
        Errno::ENODATA
    );
    c.setxattr(f.ino, "user.a", b"replaced", XattrSet::Replace)
        .await
        .unwrap();
    assert_eq!(c.getxattr(f.ino, "user.a").await.unwrap(), b"replaced");
    assert_eq!(errno(c.getxattr(f.ino, "user.none").await), Errno::ENODATA);
    assert_eq!(
        errno(c.removexattr(f.ino, "user.none").await),
        Errno::ENODATA
    );
    assert_eq!(
        errno(c.setxattr(f.ino, "", b"x", either).await),
        Errno::ERANGE
    );
    let long_name = format!("user.{}", "n".repeat(251));
    assert_eq!(errno(c.getxattr(f.ino, &long_name).await), Errno::ERANGE);
    assert_eq!(
        errno(c.setxattr(f.ino, "user.", b"x", either).await),
        Errno::EINVAL
    );
    assert_eq!(
        errno(c.setxattr(f.ino, "bogus.x", b"x", either).await),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        errno(c.setxattr(f.ino, "system.x", b"x", either).await),
        Errno::EOPNOTSUPP
    );
    let too_big = vec![1u8; MAX_XATTR_VALUE + 1];
    assert_eq!(
        errno(c.setxattr(f.ino, "user.big", &too_big, either).await),
        Errno::E2BIG
    );
    let biggest = vec![2u8; MAX_XATTR_VALUE];
    c.setxattr(f.ino, "user.big", &biggest, either)
        .await
        .unwrap();
    assert_eq!(c.getxattr(f.ino, "user.big").await.unwrap(), biggest);
    // What one inode holds is bounded: past it, no room.
    let more = vec![3u8; 8192];
    assert_eq!(
        errno(c.setxattr(f.ino, "user.more", &more, either).await),
        Errno::ENOSPC
    );
    c.removexattr(f.ino, "user.big").await.unwrap();
    c.setxattr(f.ino, "user.more", &more, either).await.unwrap();
    // However short the names, an inode's list fits a reply: many one-byte attributes fill
    // the inode before they could fill a frame, and LISTXATTR still answers.
    let many = c.create(ROOT, "many", 0o644).await.unwrap().ino;
    let sets: Vec<_> = (0..4000)
        .map(|n| {
            let c = c.clone();
            tokio::spawn(async move {
                c.setxattr(many, &format!("user.{n:x}"), b"", XattrSet::Either)
                    .await
            })
        })
        .collect();
    let mut set = 0;
    for s in sets {
        match s.await.unwrap() {
            Ok(()) => set += 1,
            Err(e) => assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}"),
        }
    }
    assert!(
        (2000..4000).contains(&set),
        "{set} attributes before ENOSPC"
    );
    assert_eq!(c.listxattr(many).await.unwrap().len(), set);
    // An ACL the mode says all of (owner rw, group r, others r) sets the mode and is not
    // kept; one with a named user and a mask is kept as given (and its mask is the group
    // class of the mode: 0644 again).
    let entry = |tag: u16, perm: u16, id: u32| {
        [tag.to_le_bytes(), perm.to_le_bytes()]
            .concat()
            .into_iter()
            .chain(id.to_le_bytes())
    };
    let plain: Vec<u8> = 2u32
        .to_le_bytes()
        .into_iter()
        .chain(entry(0x01, 6, u32::MAX))
        .chain(entry(0x04, 4, u32::MAX))
        .chain(entry(0x20, 4, u32::MAX))
        .collect();
    c.setxattr(f.ino, "system.posix_acl_access", &plain, either)
        .await
        .unwrap();
    assert_eq!(
        errno(c.getxattr(f.ino, "system.posix_acl_access").await),
        Errno::ENODATA
    );
    assert_eq!(c.getattr(f.ino).await.unwrap().mode & 0o777, 0o644);
    let acl: Vec<u8> = 2u32
        .to_le_bytes()
        .into_iter()
        .chain(entry(0x01, 6, u32::MAX))
        .chain(entry(0x02, 6, 1000))
        .chain(entry(0x04, 4, u32::MAX))
        .chain(entry(0x10, 4, u32::MAX))
        .chain(entry(0x20, 4, u32::MAX))
        .collect();
    c.setxattr(f.ino, "system.posix_acl_access", &acl, either)
        .await
        .unwrap();
    assert_eq!(
        c.getxattr(f.ino, "system.posix_acl_access").await.unwrap(),
        acl
    );
    assert_eq!(c.getattr(f.ino).await.unwrap().mode & 0o777, 0o644);
    assert_eq!(
        errno(
            c.setxattr(f.ino, "system.posix_acl_access", b"junk", either)
                .await
        ),
        Errno::EOPNOTSUPP,
        "not version 2"
    );
    assert_eq!(
        errno(
            c.setxattr(f.ino, "system.posix_acl_access", &acl[..9], either)
                .await
        ),
        Errno::EINVAL,
        "a partial entry"
    );
    assert_eq!(
        errno(
            c.setxattr(f.ino, "system.posix_acl_access", &acl[..12], either)
                .await
        ),
        Errno::EINVAL,
        "an owner entry alone is no ACL"
    );
    assert_eq!(
        errno(
            c.setxattr(f.ino, "system.posix_acl_default", &acl, either)
                .await
        ),
        Errno::EACCES,
        "a default ACL is a directory's"
    );
    // Namespaces: trusted is root's; user follows the mode bits; security is root's to set.
    let bob = as_user(server.addr, 2000, 200).await;
    assert_eq!(
        errno(bob.getxattr(f.ino, "trusted.t").await),
        Errno::ENODATA
    );
    assert_eq!(
        errno(bob.setxattr(f.ino, "trusted.t", b"x", either).await),
        Errno::EPERM
    );
    assert_eq!(bob.getxattr(f.ino, "user.b").await.unwrap(), b"2");
    assert_eq!(
        errno(bob.setxattr(f.ino, "user.b", b"x", either).await),
        Errno::EACCES
    );
    assert_eq!(
        bob.getxattr(f.ino, "security.selinux").await.unwrap(),
        b"ctx"
    );
    assert_eq!(
        errno(bob.setxattr(f.ino, "security.selinux", b"x", either).await),
        Errno::EPERM
    );
    assert!(
        !bob.listxattr(f.ino)
            .await
            .unwrap()
            .contains(&"trusted.t".to_owned())
    );
    let s = c.symlink(ROOT, "s", b"f").await.unwrap();
    assert_eq!(
        errno(c.setxattr(s.ino, "user.x", b"x", either).await),
        Errno::EPERM
    );
    c.setxattr(s.ino, "trusted.x", b"on a link", either)
        .await
        .unwrap();
    let status = c.statfs().await.unwrap();
    assert!(status.xattr_bytes > 8192, "{status:?}");
    // Kept across a restart; an inode's attributes go with it.
    drop((c, bob));
    server.stop().unwrap();
    let server = InProcess::on(dir.path());
    let c = server.client().await;
    assert_eq!(c.getxattr(f.ino, "user.more").await.unwrap(), more);
    assert_eq!(c.getxattr(s.ino, "trusted.x").await.unwrap(), b"on a link");
    c.unlink(ROOT, "f").await.unwrap();
    c.unlink(ROOT, "many").await.unwrap();
    let status = c.statfs().await.unwrap();
    assert_eq!(
        status.xattr_bytes,
        ("trusted.x".len() + 9 + 16) as u64,
        "name, value and 16 bytes"
    );
    drop(c);
    server.stop().unwrap();
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// One of each new mutation, on a tree made first: (what, the operation). Each changes
/// something the check below can see.
fn each_new_mutation(d: u64, f: u64, x: u64) -> Vec<(&'static str, Op)> {
    vec![
        (
            "link",
            Op::Link {
                ino: f,
                parent: d,
                name: "hard".into(),
            },
        ),
        (
            "symlink",
            Op::Symlink {
                parent: d,
                name: "soft".into(),
                target: Target(b"../f".to_vec()),
            },
        ),
        (
            "mknod",
            Op::Mknod {
                parent: d,
                name: "fifo".into(),
                kind: Kind::Fifo,
                mode: 0o600,
                rdev: 0,
            },
        ),
        (
            "setxattr",
            Op::Setxattr {
                ino: f,
                name: "user.k".into(),
                value: XattrValue(b"v".to_vec()),
                how: XattrSet::Create,
            },
        ),
        (
            "removexattr",
            Op::Removexattr {
                ino: x,
                name: "user.gone".into(),
            },
        ),
        (
            "exchange",
            Op::Rename {
                src_parent: d,
                src_name: "x".into(),
                dst_parent: ROOT,
                dst_name: "f".into(),
                how: RenameHow::Exchange,
            },
        ),
        (
            "utimens",
            Op::Setattr {
                ino: x,
                attr: SetAttr {
                    atime: Some(SetTime::At(11)),
                    mtime: Some(SetTime::At(22)),
                    ..SetAttr::default()
                },
            },
        ),
    ]
}

/// The tree `each_new_mutation` works on: /d, /f, /d/x with attribute `user.gone`.
async fn tree(c: &Client) -> (u64, u64, u64) {
    let d = c.mkdir(ROOT, "d", 0o755).await.unwrap().ino;
    let f = c.create(ROOT, "f", 0o644).await.unwrap().ino;
    let x = c.create(d, "x", 0o644).await.unwrap().ino;
    c.setxattr(x, "user.gone", b"1", XattrSet::Either)
        .await
        .unwrap();
    (d, f, x)
}

/// What `each_new_mutation` left, as seen by `c`; `told` is the symlink's and fifo's
/// inode numbers as their replies said.
async fn check_mutations(c: &Client, (d, f, x): (u64, u64, u64), told: (u64, u64)) {
    let hard = c.lookup(d, "hard").await.unwrap();
    assert_eq!((hard.ino, hard.nlink), (f, 2));
    let soft = c.lookup(d, "soft").await.unwrap();
    assert_eq!(soft.ino, told.0);
    assert_eq!(c.readlink(soft.ino).await.unwrap(), b"../f");
    assert_eq!(c.lookup(d, "fifo").await.unwrap().ino, told.1);
    assert_eq!(c.getxattr(f, "user.k").await.unwrap(), b"v");
    assert_eq!(errno(c.getxattr(x, "user.gone").await), Errno::ENODATA);
    // Exchanged: /f is x now, /d/x is f.
    assert_eq!(c.lookup(ROOT, "f").await.unwrap().ino, x);
    assert_eq!(c.lookup(d, "x").await.unwrap().ino, f);
    let times = c.getattr(x).await.unwrap();
    assert_eq!((times.atime_ns, times.mtime_ns), (11, 22));
}

fn attr(reply: &mds_proto::Reply) -> &Attr {
    match &reply.result {
        Ok(Body::Attr(a)) => a,
        other => panic!("{other:?}"),
    }
}

/// Under `--ack early` each new mutation is answered before its commit; a SIGKILL then loses
/// the commits, and the client's replays after the restart bring every one back, the
/// symlink and fifo with the inode numbers they were given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_after_early_answers_is_healed_by_the_replays() {
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
    let t = tree(&c).await;
    c.sync().await.unwrap();
    let mut told = Vec::new();
    for (what, op) in each_new_mutation(t.0, t.1, t.2) {
        let reply = c.call_reply(op).await.unwrap();
        assert!(reply.result.is_ok(), "{what}: {reply:?}");
        assert!(
            reply.transno > reply.last_committed,
            "{what} was answered early"
        );
        if matches!(what, "symlink" | "mknod") {
            told.push(attr(&reply).ino);
        }
    }
    assert_eq!(session.unsafe_count(), 7);
    drop(c);
    server.kill();
    let server = common::start(dir.path(), &flags);
    let c = Client::connect_session(server.addr, session.clone())
        .await
        .unwrap();
    assert_eq!(session.lost(), 0);
    c.sync().await.unwrap();
    check_mutations(&c, t, (told[0], told[1])).await;
    drop(c);
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// Under `--ack commit` (the default) an answer means durable: a SIGKILL right after the
/// last answer loses none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_under_commit_acks_loses_nothing_answered() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    let t = tree(&c).await;
    let mut told = Vec::new();
    for (what, op) in each_new_mutation(t.0, t.1, t.2) {
        let reply = c.call_reply(op).await.unwrap();
        assert!(reply.result.is_ok(), "{what}: {reply:?}");
        assert!(
            reply.transno <= reply.last_committed,
            "{what} was answered durable"
        );
        if matches!(what, "symlink" | "mknod") {
            told.push(attr(&reply).ino);
        }
    }
    drop(c);
    server.kill();
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    check_mutations(&c, t, (told[0], told[1])).await;
    drop(c);
    assert!(server.stop().success());
    let (code, out) = common::fsck(dir.path());
    assert_eq!(code, 0, "{out}");
}

/// A mutation whose connection was cut before its reply came: the resend on a new connection
/// is answered from the resend record, the same answer, and not executed again (a second
/// LINK or SYMLINK of the name would say EEXIST, a second exchange would swap back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_a_cut_connection_is_answered_from_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let server = InProcess::on(dir.path());
    let setup = server.client().await;
    let t = tree(&setup).await;
    let session = Session::new();
    let (mut raw, connected) = Raw::connect(server.addr, &session, None);
    assert!(connected.result.is_ok(), "{connected:?}");
    let mut xid = 100;
    for (what, op) in each_new_mutation(t.0, t.1, t.2) {
        xid += 1;
        let sent = request(xid, op.clone(), None);
        let before = setup.statfs().await.unwrap().last_transno;
        raw.send(&sent);
        // Cut before reading the answer, once the server has executed it.
        drop(raw);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let executed = loop {
            let now = setup.statfs().await.unwrap().last_transno;
            if now > before {
                break now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what} never executed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let again;
        (raw, again) = Raw::connect(server.addr, &session, None);
        assert!(again.result.is_ok(), "{what}: {again:?}");
        let first = raw.call(&sent);
        assert_eq!(
            first.transno, executed,
            "{what}: answered with the first execution's transno, not executed again"
        );
        assert!(
            first.result.is_ok(),
            "{what}: the resend is answered as the first was: {first:?}"
        );
        // The same answer; `last_committed` is of the moment each left (the first may be the
        // original's own reply, released to this connection once the client moved here).
        let resent = raw.call(&sent);
        let answer = |r: &mds_proto::Reply| (r.xid, r.transno, r.result.clone(), r.ticket);
        assert_eq!(
            answer(&resent),
            answer(&first),
            "{what}: answered from the record again"
        );
    }
    let told = {
        let soft = setup.lookup(t.0, "soft").await.unwrap().ino;
        let fifo = setup.lookup(t.0, "fifo").await.unwrap().ino;
        (soft, fifo)
    };
    check_mutations(&setup, t, told).await;
    drop((raw, setup));
    server.stop().unwrap();
}

/// Commit-on-share: a client's read of what another client changed and has not committed yet
/// waits for that commit, for each new operation's kind of change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_clients_uncommitted_change_waits_for_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.ack = mds::config::Ack::Early;
    config.keys.commit_interval = Duration::from_secs(60);
    let server = InProcess::start(config);
    let (a, b) = (server.client().await, server.client().await);
    // Each client's first mutation waits for the commit that makes the journal know it.
    let t = tree(&a).await;
    b.create(ROOT, "b0", 0o644).await.unwrap();
    let ops = each_new_mutation(t.0, t.1, t.2);
    for (what, op) in ops {
        let done = a.call_reply(op).await.unwrap();
        assert!(
            done.transno > done.last_committed,
            "{what}: early, not committed"
        );
        // B reads what it changed: LOOKUP of the new name, GETXATTR, GETATTR.
        let read = match what {
            "link" => Op::Lookup {
                parent: t.0,
                name: "hard".into(),
            },
            "symlink" => Op::Lookup {
                parent: t.0,
                name: "soft".into(),
            },
            "mknod" => Op::Lookup {
                parent: t.0,
                name: "fifo".into(),
            },
            "setxattr" => Op::Getxattr {
                ino: t.1,
                name: "user.k".into(),
            },
            "removexattr" => Op::Getxattr {
                ino: t.2,
                name: "user.gone".into(),
            },
            "exchange" => Op::Lookup {
                parent: ROOT,
                name: "f".into(),
            },
            _ => Op::Getattr { ino: t.2 },
        };
        let seen = b.call_reply(read).await.unwrap();
        assert!(
            seen.last_committed >= done.transno,
            "{what}: B's read left before A's change was durable: {seen:?} vs {done:?}"
        );
    }
    let s = b.statfs().await.unwrap();
    assert!(s.cos_conflicts >= 7, "{s:?}");
    drop((a, b));
    server.stop().unwrap();
}
