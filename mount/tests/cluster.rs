//! The mount over a cluster of two shards (a real etcd, Debian's `etcd-server`; two
//! `mds serve --etcd --shard N` and a standby, each a process on a free 127.0.0.1 port):
//! given the address of shard 1's server, which does not hold the root, the mount serves the
//! whole namespace — every request on its inode's shard — and a directory made on shard 1
//! (`mdsctl mkdir --shard 1`) is entered, filled, read, fsynced and removed like any other;
//! what this version does not move across shards is EXDEV, which `mv` answers by copying; and
//! when shard 1's owner is SIGKILLed, the mount's connection to that shard follows it to the
//! standby, with what was fsynced there. File locks live on their file's shard, and a second
//! mount meets them there. Needs root (or `fusermount3`), /dev/fuse and etcd.

mod common;

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mounted, c_path, pattern};
use mds_testkit::{Etcd, Server, bin};

const SHARD_SHIFT: u32 = 48;

fn mds(args: &[&str]) {
    let out = Command::new(bin("mds")).args(args).output().unwrap();
    assert!(out.status.success(), "mds {args:?}: {out:?}");
}

/// `mdsctl --server ADDR ARGS…`: whether it succeeded, and its output.
fn mdsctl(server: &Server, args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["-k", "2", "30"])
        .arg(bin("mdsctl"))
        .args(["--server", &server.addr.to_string()])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Shard `shard`'s server (`None`: a standby), `--ack` as given.
fn start(etcd: &Etcd, root: &Path, shard: Option<u16>, ack: &str) -> Server {
    let text = shard.map(|s| s.to_string());
    let mut args = vec!["--etcd", &etcd.endpoint, "--ack", ack];
    match &text {
        Some(s) => args.extend(["--shard", s]),
        None => args.push("--standby"),
    }
    let data = root.join(format!("shard-{}", shard.unwrap_or(0)));
    Server::start_with(&bin("mds"), &args, &data)
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn shard_of(path: &Path) -> u64 {
    fs::metadata(path).unwrap().ino() >> SHARD_SHIFT
}

#[test]
fn a_mount_given_any_shard_serves_the_whole_namespace_and_follows_a_shard_to_its_standby() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let stores = root.path().to_str().unwrap();
    mds(&[
        "cluster",
        "init",
        "--etcd",
        &etcd.endpoint,
        "--shards",
        "2",
        "--lease-ttl",
        "3",
        "--data-root",
        stores,
    ]);
    let zero = start(&etcd, root.path(), Some(0), "early");
    let one = start(&etcd, root.path(), Some(1), "early");
    for s in [&zero, &one] {
        assert!(
            s.wait_for_log("mds serving", Duration::from_secs(30)),
            "{}",
            s.log_text()
        );
    }
    // Shard 1's server must know shard 0's before it can point the mount at the root.
    wait_until(Duration::from_secs(30), "shard 1 sees shard 0", || {
        mdsctl(&one, &["stat", "/"]).0
    });
    let (made, out) = mdsctl(&zero, &["mkdir", "--shard", "1", "/far"]);
    assert!(made, "{out}");

    let m = Mounted::address(&one.addr.to_string(), &[]);
    assert_eq!(shard_of(&m.at), 0, "the root is shard 0's");
    assert_eq!(
        shard_of(&m.path("far")),
        1,
        "its directory lives on shard 1"
    );
    fs::create_dir(m.path("near")).unwrap();
    assert_eq!(
        shard_of(&m.path("near")),
        0,
        "a mkdir stays on its parent's shard"
    );

    // Inside the remote directory everything is shard 1's.
    let data = pattern(100_000, 3);
    fs::write(m.path("far/file"), &data).unwrap();
    fs::create_dir(m.path("far/sub")).unwrap();
    fs::write(m.path("far/sub/small"), b"small").unwrap();
    for p in ["far/file", "far/sub", "far/sub/small"] {
        assert_eq!(shard_of(&m.path(p)), 1, "{p}");
    }
    assert_eq!(fs::read(m.path("far/file")).unwrap(), data);
    let mut names: Vec<_> = fs::read_dir(m.path("far"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["file", "sub"]);
    let mut top: Vec<_> = fs::read_dir(&m.at)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, ["far", "near"]);
    assert_eq!(
        fs::metadata(m.path("far")).unwrap().nlink(),
        3,
        "., its entry and sub's .."
    );

    // Inside one shard a rename is a rename; across shards it is EXDEV, and mv copies.
    fs::rename(m.path("far/sub/small"), m.path("far/small")).unwrap();
    let across = fs::rename(m.path("far/small"), m.path("near/small")).unwrap_err();
    assert_eq!(across.raw_os_error(), Some(libc::EXDEV));
    let link = fs::hard_link(m.path("far/small"), m.path("near/link")).unwrap_err();
    assert_eq!(link.raw_os_error(), Some(libc::EXDEV));
    let mv = Command::new("timeout")
        .args(["-k", "2", "30", "mv"])
        .arg(m.path("far/small"))
        .arg(m.path("near/small"))
        .status()
        .unwrap();
    assert!(mv.success());
    assert_eq!(fs::read(m.path("near/small")).unwrap(), b"small");
    assert_eq!(shard_of(&m.path("near/small")), 0, "copied onto shard 0");
    assert!(!m.path("far/small").exists());

    // Past the inline cap (1 MiB), on either shard: in the cluster's one object store, in
    // its data root beside the shards' stores.
    let big = pattern(3 << 20, 7);
    fs::write(m.path("far/big"), &big).unwrap();
    fs::write(m.path("near/big"), &big).unwrap();
    assert!(root.path().join("objects/slices").is_dir());
    assert_eq!(fs::read(m.path("near/big")).unwrap(), big);

    // df is the whole namespace's: the inodes and the data of both shards (each big file is
    // 3 MiB, one on each), as their servers count them.
    let status = |s: &Server, key: &str| -> u64 {
        let (ok, out) = mdsctl(s, &["status"]);
        assert!(ok, "{out}");
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // `mdsctl status` shows the figures of the server it is given, each shard's own (shard 1
    // holds the 100,000-byte file, shard 0 a 5-byte one).
    assert_ne!(
        status(&zero, "data_bytes"),
        status(&one, "data_bytes"),
        "each server's own figures"
    );
    let inodes = status(&zero, "inodes") + status(&one, "inodes");
    let data = status(&zero, "data_bytes") + status(&one, "data_bytes");
    assert!(data >= 2 * (3 << 20), "{data}");
    // SAFETY: a NUL-terminated path and a statvfs the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::statvfs(c_path(&m.at).as_ptr(), &raw mut st) },
        0
    );
    assert_eq!(
        st.f_files - st.f_ffree,
        inodes,
        "df's inodes are both shards'"
    );
    let used = (st.f_blocks - st.f_bfree) * st.f_frsize;
    assert_eq!(
        used,
        data.div_ceil(st.f_frsize) * st.f_frsize,
        "df's used is both shards' data"
    );

    // Locks live on their file's shard: a second mount, given shard 0's server, meets the
    // first's flock of a file of shard 1 and its fcntl lock of one of shard 0, each held by
    // the server of its shard alone.
    {
        let other = Mounted::address(&zero.addr.to_string(), &[]);
        let open = |p: &Path| {
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .unwrap()
        };
        let (far, near) = (open(&m.path("far/file")), open(&m.path("near/big")));
        // SAFETY: descriptors of open files; a flock struct the call reads.
        assert_eq!(unsafe { libc::flock(far.as_raw_fd(), libc::LOCK_EX) }, 0);
        let mut whole: libc::flock = unsafe { std::mem::zeroed() };
        whole.l_type = libc::F_WRLCK as i16;
        assert_eq!(
            unsafe { libc::fcntl(near.as_raw_fd(), libc::F_SETLK, &raw const whole) },
            0
        );
        let (far2, near2) = (open(&other.path("far/file")), open(&other.path("near/big")));
        assert_eq!(
            unsafe { libc::flock(far2.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) },
            -1
        );
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EWOULDBLOCK)
        );
        whole.l_type = libc::F_RDLCK as i16;
        assert_eq!(
            unsafe { libc::fcntl(near2.as_raw_fd(), libc::F_OFD_SETLK, &raw const whole) },
            -1
        );
        for (s, held) in [(&zero, 1.0), (&one, 1.0)] {
            assert_eq!(
                mds_testkit::scrape_metric(s.metrics, "mds_file_locks_held"),
                Some(held)
            );
        }
        drop((far, near, far2, near2));
        assert!(other.unmount().success());
    }

    // Answered early on shard 1, made durable by fsync there, then shard 1's owner dies: the
    // mount's connection to shard 1 follows it to the standby.
    let standby = start(&etcd, root.path(), None, "early");
    let mut synced = fs::File::create(m.path("far/synced")).unwrap();
    synced.write_all(b"durable").unwrap();
    synced.sync_all().unwrap();
    drop(synced);
    assert!(
        standby.wait_for_log("standby: waiting", Duration::from_secs(30)),
        "{}",
        standby.log_text()
    );
    one.kill();
    assert_eq!(fs::read(m.path("far/synced")).unwrap(), b"durable");
    fs::write(m.path("far/after"), b"after the takeover").unwrap();
    assert_eq!(
        fs::read(m.path("far/after")).unwrap(),
        b"after the takeover"
    );
    assert!(
        standby.log_text().contains("claimed shard 1"),
        "the standby serves shard 1: {}",
        standby.log_text()
    );
    assert_eq!(
        fs::read(m.path("far/big")).unwrap(),
        big,
        "its layout moved with the shard"
    );

    // A remote directory is removed through its parent's shard.
    fs::remove_file(m.path("near/big")).unwrap();
    for f in ["far/file", "far/synced", "far/after", "far/big"] {
        fs::remove_file(m.path(f)).unwrap();
    }
    fs::remove_dir(m.path("far/sub")).unwrap();
    fs::remove_dir(m.path("far")).unwrap();
    assert!(!m.path("far").exists());
    assert!(m.unmount().success());
    let (listed, out) = mdsctl(&zero, &["ls", "/"]);
    assert!(listed, "{out}");
    assert!(!out.contains("far"), "{out}");
}
