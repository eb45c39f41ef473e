//! File data past the server's inline cap, through the mount: kept in the object store (the
//! local-directory default, `objects/` inside the server's store), read back through the
//! mount that wrote it and through another; overwrites, appends, truncates and sparse files
//! of 2 GiB; fsynced files surviving a SIGKILL of the server, then of the mount, mid-copy; the
//! collector leaving only what a layout names once the grace has passed (`mds fsck` counts
//! it); and Garage, three nodes, as the object store, losing one during a copy.

mod common;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Mounted, free_listen, pattern, server};

/// The server's cap on data kept inline: small, so that a few MiB are many slices' worth.
const CAP: &str = "64k";

/// The slices' objects in the store of the server whose data directory is `data`.
fn objects_in(data: &Path) -> usize {
    fn count(dir: &Path) -> usize {
        fs::read_dir(dir).map_or(0, |entries| {
            entries
                .map(|e| e.unwrap().path())
                .map(|p| if p.is_dir() { count(&p) } else { 1 })
                .sum()
        })
    }
    count(&data.join("objects/slices"))
}

/// Waits (at most 30 s) until `check` holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `mds fsck`'s report of a stopped server's store: clean, with no unnamed slice.
fn assert_clean_and_collected(data: &Path) {
    let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), data);
    assert_eq!(code, 0, "fsck: {report}");
    assert!(
        !report.contains("unnamed slices in the store:")
            || report.contains("unnamed slices in the store: 0"),
        "an object nothing names outlived the grace: {report}"
    );
}

#[test]
fn files_past_the_inline_cap_live_in_the_object_store_and_read_back_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(
        dir.path(),
        &["--inline-data-max", CAP, "--object-grace", "1s"],
    );
    let data = srv.data.clone();
    let a = Mounted::new(&srv, &[]);
    let b = Mounted::new(&srv, &[]);

    // A small file stays on the server.
    fs::write(a.path("small"), pattern(1000, 1)).unwrap();
    assert_eq!(objects_in(&data), 0, "a file under the cap is inline");

    // 20 MiB: more than one flush of the mount's buffer, in objects.
    let mut model = pattern(20 << 20, 2);
    fs::write(a.path("big"), &model).unwrap();
    assert!(objects_in(&data) > 0);
    assert_eq!(
        fs::read(a.path("big")).unwrap(),
        model,
        "through the writer"
    );
    assert_eq!(
        fs::read(b.path("big")).unwrap(),
        model,
        "through another mount"
    );

    // Overwrite in the middle, append, cut: the same on both mounts after the close.
    {
        let f = OpenOptions::new().write(true).open(a.path("big")).unwrap();
        f.write_all_at(&vec![7; 100_000], 5_000_000).unwrap();
        model[5_000_000..5_100_000].fill(7);
    }
    {
        let mut f = OpenOptions::new().append(true).open(a.path("big")).unwrap();
        std::io::Write::write_all(&mut f, b"the end").unwrap();
        model.extend_from_slice(b"the end");
    }
    assert_eq!(fs::read(b.path("big")).unwrap(), model);
    OpenOptions::new()
        .write(true)
        .open(a.path("big"))
        .unwrap()
        .set_len(12_345_678)
        .unwrap();
    model.truncate(12_345_678);
    assert_eq!(fs::read(a.path("big")).unwrap(), model);
    assert_eq!(fs::read(b.path("big")).unwrap(), model);

    // A file on the server that grows past the cap moves, its first bytes with it.
    fs::write(a.path("grows"), pattern(60_000, 3)).unwrap();
    {
        let mut f = OpenOptions::new()
            .append(true)
            .open(a.path("grows"))
            .unwrap();
        std::io::Write::write_all(&mut f, &pattern(30_000, 4)).unwrap();
    }
    let mut grown = pattern(60_000, 3);
    grown.extend_from_slice(&pattern(30_000, 4));
    assert_eq!(fs::read(b.path("grows")).unwrap(), grown);
    // So does one cut longer than the cap.
    fs::write(a.path("cut"), b"abc").unwrap();
    OpenOptions::new()
        .write(true)
        .open(a.path("cut"))
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let cut = fs::read(b.path("cut")).unwrap();
    assert_eq!((cut.len(), &cut[..3]), (1 << 20, &b"abc"[..]));
    assert!(cut[3..].iter().all(|&x| x == 0));

    // Sparse: 2 GiB of holes and three bytes in the middle, none of it read back from a
    // store that holds only those bytes.
    let sparse = File::create(a.path("sparse")).unwrap();
    sparse.set_len(2 << 30).unwrap();
    sparse.write_all_at(b"mid", 1 << 30).unwrap();
    drop(sparse);
    let meta = fs::metadata(b.path("sparse")).unwrap();
    assert_eq!(meta.size(), 2 << 30);
    let back = File::open(b.path("sparse")).unwrap();
    let mut buf = vec![1u8; 8192];
    back.read_exact_at(&mut buf, (1 << 30) - 4096).unwrap();
    assert!(buf[..4096].iter().all(|&x| x == 0));
    assert_eq!(&buf[4096..4099], b"mid");
    back.read_exact_at(&mut buf, (2 << 30) - 8192).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
    // SEEK_DATA and SEEK_HOLE from the layout: the three bytes are the only data.
    let seek = |offset: i64, whence: i32| {
        // SAFETY: a descriptor this test holds open.
        let at = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&back), offset, whence) };
        if at < 0 { Err(common::errno()) } else { Ok(at) }
    };
    assert_eq!(seek(0, libc::SEEK_DATA), Ok(1 << 30));
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(0));
    assert_eq!(seek(1 << 30, libc::SEEK_HOLE), Ok((1 << 30) + 3));
    assert_eq!(seek((1 << 30) + 3, libc::SEEK_DATA), Err(libc::ENXIO));
    assert_eq!(
        seek(2 << 30, libc::SEEK_HOLE),
        Err(libc::ENXIO),
        "at the end"
    );
    drop(back);
    // st_blocks counts data, not holes (`du` and `cp --sparse` go by it): the three bytes
    // are one 4 KiB block, as is the small file on the server and the one cut longer.
    assert_eq!(meta.blocks(), 8);
    assert_eq!(fs::metadata(b.path("small")).unwrap().blocks(), 8);
    assert_eq!(fs::metadata(b.path("cut")).unwrap().blocks(), 8);
    let big_blocks = 12_345_678u64.div_ceil(4096);
    assert_eq!(
        fs::metadata(b.path("big")).unwrap().blocks(),
        big_blocks * 8
    );
    // df: what is used is the files' data — 1 + the big file's + 90,000 bytes + 1 + 1 blocks.
    let used = {
        let path = std::ffi::CString::new(b.path("").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and a statvfs the call fills.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &raw mut st) }, 0);
        (st.f_blocks - st.f_bfree) * st.f_frsize
    };
    assert_eq!(
        used,
        (1 + big_blocks + 90_000u64.div_ceil(4096) + 1 + 1) * 4096
    );
    // A file on the server is data from end to end.
    let small = File::open(b.path("small")).unwrap();
    // SAFETY: as above.
    let hole = unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&small), 0, libc::SEEK_HOLE) };
    assert_eq!(hole, 1000);
    drop(small);

    assert_eq!(fs::read(b.path("small")).unwrap(), pattern(1000, 1));

    // fallocate: mode 0 grows the file (a hole), KEEP_SIZE leaves it, punching is refused.
    let pre = File::create(a.path("pre")).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&pre);
    // SAFETY: a descriptor this test holds open; plain integers otherwise.
    let rc = unsafe { libc::fallocate(fd, 0, 0, 5 << 20) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    assert_eq!(pre.metadata().unwrap().len(), 5 << 20);
    // SAFETY: as above.
    let rc = unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 8 << 20) };
    assert_eq!(rc, 0, "KEEP_SIZE: {}", std::io::Error::last_os_error());
    assert_eq!(pre.metadata().unwrap().len(), 5 << 20);
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: as above.
    let rc = unsafe { libc::fallocate(fd, punch, 0, 4096) };
    assert_eq!((rc, common::errno()), (-1, libc::EOPNOTSUPP));
    drop(pre);
    let zeros = fs::read(b.path("pre")).unwrap();
    assert!(zeros.len() == 5 << 20 && zeros.iter().all(|&x| x == 0));
    fs::remove_file(a.path("pre")).unwrap();

    // Deleted, then collected after the grace: nothing left in the store.
    for name in ["big", "grows", "cut", "sparse"] {
        fs::remove_file(a.path(name)).unwrap();
    }
    eventually("the collector deletes the deleted files' slices", || {
        objects_in(&data) == 0
    });
    assert!(a.unmount().success());
    assert!(b.unmount().success());
    assert!(srv.stop().success());
    assert_clean_and_collected(&data);
}

#[test]
fn fsynced_files_survive_a_sigkill_of_the_server_and_of_the_mount_mid_copy() {
    for ack in ["commit", "early"] {
        let dir = tempfile::tempdir().unwrap();
        let listen = free_listen();
        let flags = [
            "--listen",
            listen.as_str(),
            "--ack",
            ack,
            "--inline-data-max",
            CAP,
            "--object-grace",
            "2s",
            "--recovery-window",
            "20s",
        ];
        let first = server(dir.path(), &flags);
        let data = first.data.clone();
        let m = Mounted::new(&first, &["-o", "ack=server"]);
        let files: Vec<(String, Vec<u8>)> = (0..6u8)
            .map(|i| {
                (
                    format!("f{i}"),
                    pattern((5 << 19) + usize::from(i) * 4097, i),
                )
            })
            .collect();
        for (name, bytes) in &files {
            let mut f = File::create(m.path(name)).unwrap();
            std::io::Write::write_all(&mut f, bytes).unwrap();
            f.sync_all().unwrap();
        }
        // A copy under way, by another process, not fsynced: the server goes in the middle of
        // it. (Not through a descriptor of this process: the restart forks it, and the
        // child's copy of the descriptor would be closed at its exec — a FLUSH, which waits
        // for the very server being started.)
        let source = dir.path().join("source");
        fs::write(&source, pattern(24 << 20, 9)).unwrap();
        let mut copy = std::process::Command::new("timeout")
            .args(["-k", "5", "120", "dd", "bs=64k", "oflag=nocache"])
            .arg(format!("if={}", source.display()))
            .arg(format!("of={}", m.path("copy").display()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        eventually("the copy is under way", || {
            fs::metadata(m.path("copy")).is_ok_and(|meta| meta.size() > 0)
        });
        first.kill();
        let second = server(dir.path(), &flags);
        for (name, bytes) in &files {
            assert_eq!(
                &fs::read(m.path(name)).unwrap(),
                bytes,
                "{name}, --ack {ack}"
            );
        }
        // The copy goes on after the restart and ends whole.
        assert!(copy.wait().unwrap().success(), "--ack {ack}");
        assert_eq!(
            fs::read(m.path("copy")).unwrap(),
            pattern(24 << 20, 9),
            "--ack {ack}"
        );

        // The mount SIGKILLed mid-copy: what was fsynced is there through a new mount; what
        // it uploaded and never placed is the collector's (checked by fsck at the end).
        let mut doomed = std::process::Command::new("timeout")
            .args(["-k", "5", "120", "dd", "bs=64k"])
            .arg(format!("if={}", source.display()))
            .arg(format!("of={}", m.path("doomed").display()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        eventually("the second copy is under way", || {
            fs::metadata(m.path("doomed")).is_ok_and(|meta| meta.size() > 0)
        });
        let mut m = m;
        let mut daemon = m.child.take().unwrap();
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        let _ = doomed.wait();
        drop(m);
        let m = Mounted::new(&second, &[]);
        for (name, bytes) in &files {
            assert_eq!(
                &fs::read(m.path(name)).unwrap(),
                bytes,
                "{name} after the mount died"
            );
        }

        // An upload whose WRITE_SLICES never came (a mount killed between the two): an id
        // the server handed out (the mount asks for 256 at a time from 2), named by nothing.
        let store =
            mds_objects::Store::open(&mds_objects::Address::Local(data.join("objects"))).unwrap();
        let stray = 2 + 200;
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(store.put_slice(stray, &[bytes::Bytes::from(vec![1u8; 1000])]))
            .unwrap();
        let stray_object = data.join(format!("objects/slices/0/{stray:016x}.0"));
        assert!(stray_object.exists());
        eventually("the collector deletes a slice nothing names", || {
            !stray_object.exists()
        });
        assert!(m.unmount().success(), "--ack {ack}");
        assert!(second.stop().success());
        assert_clean_and_collected(&data);
    }
}

/// With Garage as the object store — three nodes, replication 3 — a copy through the mount
/// goes on while one node is SIGKILLed, and every file reads back whole through a fresh
/// mount; the collector deletes a deleted file's slices from Garage too.
#[test]
fn a_copy_onto_garage_survives_the_loss_of_one_node() {
    let mut garage = mds_testkit::garage::Garage::start(3);
    let address = format!(
        "s3://{}/mds?endpoint={}&region={}",
        garage.bucket(),
        garage.endpoint(0),
        garage.region()
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", garage.key_id().to_owned()),
        ("AWS_SECRET_ACCESS_KEY", garage.secret().to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--inline-data-max",
        CAP,
        "--object-store",
        address.as_str(),
        "--object-grace",
        "1s",
    ];
    let srv = mds_testkit::Server::start_env(
        &mds_testkit::bin("mds"),
        &dir.path().join("data"),
        &flags,
        &env,
    );
    let m = Mounted::with_env(&srv, &[], &env);
    let files: Vec<(String, Vec<u8>)> = (0..8u8)
        .map(|i| {
            (
                format!("f{i}"),
                pattern((3 << 20) + usize::from(i) * 1000, i),
            )
        })
        .collect();
    for (i, (name, bytes)) in files.iter().enumerate() {
        if i == 4 {
            // Halfway: a node goes; a quorum of two is left.
            garage.kill(2);
        }
        fs::write(m.path(name), bytes).unwrap();
    }
    assert!(m.unmount().success());
    let again = Mounted::with_env(&srv, &[], &env);
    for (name, bytes) in &files {
        assert_eq!(&fs::read(again.path(name)).unwrap(), bytes, "{name}");
    }
    assert!(
        !dir.path().join("data/objects").exists(),
        "nothing went to the local default"
    );
    // Deleted: the collector deletes their slices from Garage (listed with the key).
    let store = mds_objects::Store::open(
        &mds_objects::Address::parse(&address)
            .unwrap()
            .with_credentials(mds_objects::Credentials {
                key_id: garage.key_id().to_owned(),
                secret: garage.secret().to_owned(),
            }),
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stored = || runtime.block_on(store.list()).unwrap().blocks.len();
    assert!(stored() >= files.len(), "every file's slices are in Garage");
    for (name, _) in &files {
        fs::remove_file(again.path(name)).unwrap();
    }
    eventually(
        "the collector empties Garage of the deleted files' slices",
        || stored() == 0,
    );
    assert!(again.unmount().success());
    assert!(srv.stop().success());
    let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), &dir.path().join("data"));
    assert_eq!(code, 0, "fsck: {report}");
}

/// A file rewritten in small scattered pieces, each fsynced (a database's pages): the mount
/// that wrote it compacts its layout once it passes 1,024 pieces — the bytes the same through
/// the writer and through another mount, the compaction logged, the slices it replaced
/// deleted by the collector after the grace, `mds fsck` clean.
#[test]
fn a_file_rewritten_in_scattered_pieces_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(
        dir.path(),
        &["--inline-data-max", CAP, "--object-grace", "1s"],
    );
    let data = srv.data.clone();
    let a = Mounted::new(&srv, &[]);
    let size = 8 << 20;
    let mut model = pattern(size, 3);
    fs::write(a.path("db"), &model).unwrap();
    let f = OpenOptions::new().write(true).open(a.path("db")).unwrap();
    // 1,300 pages of 1 KiB at offsets no two of which meet, each fsynced: a piece each.
    for i in 0..1300usize {
        let at = (i * 6151) % (size / 1024 - 1) * 1024;
        let page = pattern(1024, (i % 251) as u8);
        f.write_all_at(&page, at as u64).unwrap();
        f.sync_all().unwrap();
        model[at..at + 1024].copy_from_slice(&page);
    }
    drop(f);
    let log = a.log_text();
    let compacted = log
        .lines()
        .find(|l| l.contains("layout compacted"))
        .unwrap_or_else(|| panic!("no compaction in the mount's log:\n{log}"));
    assert!(compacted.contains("pieces_after=1"), "{compacted}");
    assert_eq!(fs::read(a.path("db")).unwrap(), model, "through the writer");
    let b = Mounted::new(&srv, &[]);
    assert_eq!(
        fs::read(b.path("db")).unwrap(),
        model,
        "through another mount"
    );
    // What the compaction replaced goes after the grace: a few hundred pieces placed since,
    // not the 1,300.
    eventually("the replaced slices deleted", || objects_in(&data) < 600);
    drop((a, b));
    assert!(srv.stop().success());
    let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), &data);
    assert_eq!(code, 0, "fsck: {report}");
}

/// A file larger than one compaction rewrites (320 MiB of data, five 64 MiB windows) rewritten
/// in scattered fsynced pages: each compaction rewrites the four windows that save the most
/// pieces (256 MiB) and keeps the fifth's pieces, the next one gets to it — the layout stays
/// bounded, the bytes the same through the writer and another mount, fsck clean.
#[test]
fn a_file_past_what_one_compaction_rewrites_is_compacted_a_window_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(
        dir.path(),
        &["--inline-data-max", CAP, "--object-grace", "1s"],
    );
    let data = srv.data.clone();
    let a = Mounted::new(&srv, &[]);
    let size = 320 << 20;
    let mut model = pattern(size, 7);
    fs::write(a.path("big"), &model).unwrap();
    let f = OpenOptions::new().write(true).open(a.path("big")).unwrap();
    // Pages of 1 KiB spread over the whole file, no two meeting, each fsynced, until the
    // mount has compacted twice (it looks at the layout every 512 placements and compacts
    // past 1,024 pieces: after ~1,500 pages and ~2,000).
    let compactions = |log: &str| -> Vec<(usize, usize, u64)> {
        let field = |line: &str, name: &str| -> u64 {
            line.split(&format!("{name}="))
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        log.lines()
            .filter(|l| l.contains("layout compacted"))
            .map(|l| {
                let before = field(l, "pieces_before") as usize;
                (
                    before,
                    field(l, "pieces_after") as usize,
                    field(l, "bytes_rewritten"),
                )
            })
            .collect()
    };
    for i in 0..4000usize {
        let at = (i * 104_729) % (size / 1024 - 1) * 1024;
        let page = pattern(1024, (i % 251) as u8);
        f.write_all_at(&page, at as u64).unwrap();
        f.sync_all().unwrap();
        model[at..at + 1024].copy_from_slice(&page);
        if i % 64 == 0 && compactions(&a.log_text()).len() >= 2 {
            break;
        }
    }
    drop(f);
    let log = a.log_text();
    let done = compactions(&log);
    assert!(
        done.len() >= 2,
        "two compactions within 4,000 pages:\n{log}"
    );
    eprintln!("compactions (pieces before, after, bytes rewritten): {done:?}");
    for &(before, after, bytes) in &done {
        assert_eq!(bytes, 256 << 20, "four windows of 64 MiB rewritten");
        assert!(after * 2 < before, "{before} pieces to {after}");
    }
    assert!(
        fs::read(a.path("big")).unwrap() == model,
        "through the writer"
    );
    let b = Mounted::new(&srv, &[]);
    assert!(
        fs::read(b.path("big")).unwrap() == model,
        "through another mount"
    );
    drop((a, b));
    assert!(srv.stop().success());
    let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), &data);
    assert_eq!(code, 0, "fsck: {report}");
}

/// Sequential write (then fsync) and read of `size` bytes at `path` in 1 MiB pieces, the
/// kernel's caches dropped before each: (write MiB/s, read MiB/s). Dropped before the write
/// too: on this virtual machine a write into pages the guest has not used lately runs at a
/// quarter of the speed of one into pages just freed, whichever file system it is.
fn sequential(path: &Path, size: usize) -> (f64, f64) {
    use std::io::{Read, Write};
    let drop_caches = || {
        // SAFETY: sync(2) takes no argument and cannot fail.
        unsafe { libc::sync() };
        fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    };
    let piece = pattern(1 << 20, 5);
    let mib = (size >> 20) as f64;
    drop_caches();
    let started = Instant::now();
    let mut f = File::create(path).unwrap();
    for _ in 0..size >> 20 {
        f.write_all(&piece).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let write = mib / started.elapsed().as_secs_f64();
    drop_caches();
    let started = Instant::now();
    let mut f = File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        read += n;
    }
    assert_eq!(read, size);
    (write, mib / started.elapsed().as_secs_f64())
}

/// The middle of some figures.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The figures of `bench/data-path.sh` (run there; ignored by the test command): 1 GiB
/// written and read sequentially through the mount, against the same on the directory the
/// local object store is in, with the local-directory store and with a one-node Garage, side
/// by side: `DATA_PATH_ROUNDS` rounds (3), each running the three in a turned order, so that
/// what the machine does meanwhile falls on all of them. Prints the median of each (and the
/// range) and the median of each round's ratio to the directory.
#[test]
#[ignore = "a benchmark: bench/data-path.sh runs it"]
fn data_path_figures() {
    let env_or = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let size = env_or("DATA_PATH_MIB", 1024) << 20;
    let rounds = env_or("DATA_PATH_ROUNDS", 3).max(1);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let srv = server(dir.path(), &[]);
    let local = Mounted::new(&srv, &[]);
    let garage = mds_testkit::garage::Garage::start(1);
    let address = format!(
        "s3://{}?endpoint={}&region={}",
        garage.bucket(),
        garage.endpoint(0),
        garage.region()
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", garage.key_id()),
        ("AWS_SECRET_ACCESS_KEY", garage.secret()),
    ];
    let gdir = tempfile::tempdir_in("/var/tmp").unwrap();
    let gsrv = mds_testkit::Server::start_env(
        &mds_testkit::bin("mds"),
        &gdir.path().join("data"),
        &["--object-store", &address],
        &env,
    );
    let on_garage = Mounted::with_env(&gsrv, &[], &env);
    let targets = [
        ("backing directory", dir.path().join("direct")),
        ("mdsmount, local store", local.path("seq")),
        ("mdsmount, Garage (1 node)", on_garage.path("seq")),
    ];
    let mut writes = vec![Vec::new(); targets.len()];
    let mut reads = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let t = (round + k) % targets.len();
            let (w, r) = sequential(&targets[t].1, size);
            writes[t].push(w);
            reads[t].push(r);
            fs::remove_file(&targets[t].1).unwrap();
        }
    }
    let range = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
        format!("{lo:.0}–{hi:.0}")
    };
    // Each round's figure against the directory's in the same round: the machine's speed
    // swings several-fold within minutes, less within a round.
    let ratio =
        |v: &[Vec<f64>], t: usize| median(v[t].iter().zip(&v[0]).map(|(x, d)| x / d).collect());
    for (t, (name, _)) in targets.iter().enumerate() {
        let (w, r) = (median(writes[t].clone()), median(reads[t].clone()));
        println!(
            "{name}: write {w:.0} MiB/s ({}; {:.2}x), read {r:.0} MiB/s ({}; {:.2}x), median of {rounds}",
            range(&writes[t]),
            ratio(&writes, t),
            range(&reads[t]),
            ratio(&reads, t),
        );
    }
}
