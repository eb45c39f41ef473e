//! The real `mdsmount` binary on a real server, exercised as programs use a file system:
//! std::fs and libc on the mount point. Each test starts its own server on a free 127.0.0.1
//! port and its own mount on a temporary directory; every mount is unmounted when its guard
//! drops, also when the test fails (`fusermount3 -u`, then `umount -l`, then the process is
//! killed), and every other child is bounded by `timeout -k`. Run after
//! `cargo build --release -p mds -p mdsmount` (the binaries are found beside the test).
//! Needs root (or `fusermount3`) and /dev/fuse.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mounted, bounded, c_path, errno, free_listen, is_mounted, pattern, server, wait_for};

#[test]
fn data_goes_in_and_comes_back_through_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &[]);

    fs::create_dir(m.path("d")).unwrap();
    // Larger than one server WRITE (64 KiB) and than one kernel request.
    let big = pattern(300_000, 7);
    fs::write(m.path("d/big"), &big).unwrap();
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    assert_eq!(fs::metadata(m.path("d/big")).unwrap().len(), 300_000);
    // A read in the middle, across a 64 KiB boundary.
    let mut f = File::open(m.path("d/big")).unwrap();
    f.seek(SeekFrom::Start(65_000)).unwrap();
    let mut middle = vec![0; 2_000];
    f.read_exact(&mut middle).unwrap();
    assert_eq!(middle, big[65_000..67_000]);
    drop(f);

    // O_APPEND goes to the end, whatever the offset.
    fs::write(m.path("d/log"), b"one,").unwrap();
    let mut log = OpenOptions::new()
        .append(true)
        .open(m.path("d/log"))
        .unwrap();
    log.write_all(b"two,").unwrap();
    log.write_all(b"three").unwrap();
    drop(log);
    assert_eq!(fs::read(m.path("d/log")).unwrap(), b"one,two,three");

    // ftruncate through a descriptor opened to write, also when the mode forbids writing
    // now; then fsync.
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("d/big"))
        .unwrap();
    fs::set_permissions(m.path("d/big"), fs::Permissions::from_mode(0o444)).unwrap();
    f.set_len(10).unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big[..10]);

    // An unlinked file stays readable and writable through what holds it open.
    let mut held = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(m.path("d/gone"))
        .unwrap();
    held.write_all(b"still here").unwrap();
    fs::remove_file(m.path("d/gone")).unwrap();
    assert!(!m.path("d/gone").exists());
    held.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    held.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still here");
    assert_eq!(held.metadata().unwrap().nlink(), 0);
    drop(held);

    // O_TRUNC cuts; O_EXCL refuses a name that exists; a mode that denies the owner still
    // lets open(O_CREAT) of a new file write it, as on Linux.
    fs::write(m.path("d/log"), b"x").unwrap();
    assert_eq!(fs::read(m.path("d/log")).unwrap(), b"x");
    let exists = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.path("d/log"))
        .unwrap_err();
    assert_eq!(exists.kind(), std::io::ErrorKind::AlreadyExists);
    let mut ro = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(m.path("d/ro"))
        .unwrap();
    ro.write_all(b"ok").unwrap();
    drop(ro);
    let meta = fs::metadata(m.path("d/ro")).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.len()), (0o444, 2));

    // fsync of a directory and of the root; statfs.
    File::open(m.path("d")).unwrap().sync_all().unwrap();
    File::open(&m.at).unwrap().sync_all().unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a buffer of the right type.
    assert_eq!(
        unsafe { libc::statvfs(c_path(&m.at).as_ptr(), &raw mut st) },
        0
    );
    assert_eq!(st.f_bsize, 4096);
    assert!(st.f_blocks > 0 && st.f_files > 0 && st.f_namemax == 255);

    assert!(m.unmount().success());
}

/// Issue 55 (found by `tests/fsx.rs`): pages of a shared writable map go back through a
/// handle of the file open to write — that of a descriptor opened `O_APPEND`, too — and must
/// land where they were mapped, not at the end; and a descriptor whose `O_APPEND` fcntl(2)
/// turned off writes where pwrite(2) says. The same steps on the local disk are the answer.
/// On 1a4e689 the server appended both, because the mount opened its handles to append: the
/// map's page went to the end (8 KiB of `a` became 12 KiB, the write lost).
#[test]
fn a_map_of_a_file_opened_o_append_writes_back_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &[]);
    let local = tempfile::tempdir_in("/var/tmp").unwrap();

    let steps = |root: &Path| {
        let path = root.join("appended");
        fs::write(&path, vec![b'a'; 8192]).unwrap();
        let f = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        // SAFETY: a fresh shared map of 8 KiB of an open file of that size, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        // SAFETY: within the map; then msync and munmap of the whole of it.
        unsafe {
            std::ptr::copy_nonoverlapping(b"XYZW".as_ptr(), map.cast::<u8>().add(4096), 4);
            assert_eq!(libc::msync(map, 8192, libc::MS_SYNC), 0);
            assert_eq!(libc::munmap(map, 8192), 0);
        }
        // O_APPEND on, then off again.
        (&f).write_all(b"end").unwrap();
        // SAFETY: fcntl(F_SETFL) of a descriptor this test holds.
        assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, 0) }, 0);
        f.write_all_at(b"0", 0).unwrap();
        drop(f);
        fs::read(&path).unwrap()
    };
    let mut expect = vec![b'a'; 8192];
    expect[..1].copy_from_slice(b"0");
    expect[4096..4100].copy_from_slice(b"XYZW");
    expect.extend_from_slice(b"end");
    assert_eq!(steps(local.path()), expect, "the local kernel's answer");
    let on_mount = steps(&m.at);
    assert_eq!(
        (on_mount.len(), &on_mount[4096..4100], &on_mount[..1]),
        (expect.len(), &b"XYZW"[..], &b"0"[..]),
        "the mount's answer, as the local disk's"
    );
    assert_eq!(on_mount, expect);
    // And from the server, past the page cache of this mount.
    let other = Mounted::new(&server, &[]);
    assert_eq!(fs::read(other.path("appended")).unwrap(), expect);
    assert!(other.unmount().success());
    assert!(m.unmount().success());
}

/// Issue 53, finding 9: a directory removed while open — by RMDIR, or replaced by a RENAME —
/// still answers `fstat` through what holds it open until the last close, with no links
/// left, as on the local disk (the same steps run on both; on 8d645ab the mount said ESTALE).
#[test]
fn a_directory_removed_while_open_still_answers_fstat_until_its_last_close() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &[]);
    let local = tempfile::tempdir_in("/var/tmp").unwrap();

    // (mode, ino, nlink) of each held directory after its removal, on one file system.
    let removed_while_open = |root: &Path| {
        let make = |name: &str| {
            let path = root.join(name);
            fs::create_dir(&path).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o750)).unwrap();
            let held = File::open(&path).unwrap();
            (path, held)
        };
        let (replaced, held_replaced) = make("replaced");
        let (removed, held_removed) = make("removed");
        let inos = [
            held_replaced.metadata().unwrap().ino(),
            held_removed.metadata().unwrap().ino(),
        ];
        fs::create_dir(root.join("newer")).unwrap();
        fs::rename(root.join("newer"), &replaced).unwrap();
        fs::remove_dir(&removed).unwrap();
        let after: Vec<(bool, u32, u64, u64)> = [&held_replaced, &held_removed]
            .iter()
            .map(|held| {
                let meta = held
                    .metadata()
                    .unwrap_or_else(|e| panic!("fstat of a removed open directory: {e}"));
                (
                    meta.is_dir(),
                    meta.mode() & 0o7777,
                    meta.ino(),
                    meta.nlink(),
                )
            })
            .collect();
        assert_ne!(
            fs::metadata(&replaced).unwrap().ino(),
            inos[0],
            "the name is the newer directory's"
        );
        assert!(!removed.exists());
        (inos, after)
    };
    let expect = |inos: [u64; 2]| vec![(true, 0o750, inos[0], 0), (true, 0o750, inos[1], 0)];
    let (local_inos, on_disk) = removed_while_open(local.path());
    assert_eq!(on_disk, expect(local_inos), "the local kernel's answer");
    let (inos, on_mount) = removed_while_open(&m.at);
    assert_eq!(
        on_mount,
        expect(inos),
        "the mount's answer, as the local disk's"
    );
    assert!(m.unmount().success());

    // Under default_permissions OPENDIR asks the server nothing: the attributes come from
    // what the kernel was last told of the directory.
    let m = Mounted::new(&server, &["-o", "default_permissions"]);
    fs::create_dir(m.path("kernel-checks")).unwrap();
    let (inos, on_mount) = removed_while_open(&m.path("kernel-checks"));
    assert_eq!(on_mount, expect(inos), "under default_permissions");
    assert!(m.unmount().success());
}

#[test]
fn a_directory_of_two_thousand_entries_lists_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &[]);
    fs::create_dir(m.path("many")).unwrap();
    let mut names: Vec<String> = (0..2000)
        .map(|i| format!("entry-{i:05}-{}", "x".repeat(i % 40)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        if i % 10 == 0 {
            fs::create_dir(m.path("many").join(name)).unwrap();
        } else {
            File::create(m.path("many").join(name)).unwrap();
        }
    }
    for _ in 0..2 {
        let mut listed: Vec<String> = fs::read_dir(m.path("many"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        listed.sort();
        names.sort();
        assert_eq!(listed.len(), 2000);
        assert_eq!(listed, names);
    }
    // `ls -la` sees the dots, the kinds and the attributes (readdirplus).
    let out = Command::new("timeout")
        .args(["20", "ls", "-la"])
        .arg(m.path("many"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        2000 + 3,
        "total, ., .. and the entries"
    );
    assert_eq!(text.lines().filter(|l| l.starts_with('d')).count(), 200 + 2);
    assert_eq!(fs::metadata(m.path("many")).unwrap().nlink(), 2 + 200);
}

#[test]
fn names_links_special_files_attributes_and_xattrs() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &[]);
    fs::write(m.path("a"), b"A").unwrap();
    fs::write(m.path("b"), b"B").unwrap();

    // rename, and renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE.
    let renameat2 = |from: &str, to: &str, flags: u32| {
        let (from, to) = (c_path(&m.path(from)), c_path(&m.path(to)));
        // SAFETY: valid NUL-terminated paths; AT_FDCWD with absolute paths.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                flags,
            )
        };
        if rc == 0 { 0 } else { errno() }
    };
    assert_eq!(renameat2("a", "b", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(renameat2("a", "b", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("a")).unwrap(), b"B");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"A");
    assert_eq!(renameat2("a", "c", libc::RENAME_NOREPLACE), 0);
    fs::rename(m.path("c"), m.path("b")).unwrap();
    assert_eq!(fs::read(m.path("b")).unwrap(), b"B");
    assert!(!m.path("a").exists() && !m.path("c").exists());

    // Symbolic and hard links.
    std::os::unix::fs::symlink("b", m.path("sym")).unwrap();
    assert_eq!(fs::read_link(m.path("sym")).unwrap(), Path::new("b"));
    assert_eq!(
        fs::read(m.path("sym")).unwrap(),
        b"B",
        "followed by the kernel"
    );
    assert!(
        fs::symlink_metadata(m.path("sym"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fs::hard_link(m.path("b"), m.path("hard")).unwrap();
    assert_eq!(fs::metadata(m.path("b")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(m.path("b")).unwrap().ino(),
        fs::metadata(m.path("hard")).unwrap().ino()
    );
    fs::remove_file(m.path("hard")).unwrap();
    assert_eq!(fs::metadata(m.path("b")).unwrap().nlink(), 1);
    let dir_link = fs::hard_link(m.path("."), m.path("dirlink")).unwrap_err();
    assert_eq!(dir_link.raw_os_error(), Some(libc::EPERM));

    // A fifo, and a character device with its numbers.
    let fifo = c_path(&m.path("fifo"));
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let meta = fs::symlink_metadata(m.path("fifo")).unwrap();
    assert!(meta.file_type().is_fifo());
    assert_eq!(meta.mode() & 0o7777, 0o640 & !umask());
    let dev = c_path(&m.path("null2"));
    // SAFETY: a valid path; root may make devices.
    let rc = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod: errno {}", errno());
    let meta = fs::symlink_metadata(m.path("null2")).unwrap();
    assert!(meta.file_type().is_char_device());
    assert_eq!((libc::major(meta.rdev()), libc::minor(meta.rdev())), (1, 3));

    // chmod, chown, utimensat with explicit nanoseconds and with UTIME_NOW.
    fs::set_permissions(m.path("b"), fs::Permissions::from_mode(0o4750)).unwrap();
    std::os::unix::fs::chown(m.path("b"), Some(1234), Some(5678)).unwrap();
    let meta = fs::metadata(m.path("b")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    assert_eq!(meta.mode() & 0o7777, 0o750, "chown clears set-user-ID");
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123_456_789,
        },
        libc::timespec {
            tv_sec: 1_100_000_000,
            tv_nsec: 987_654_321,
        },
    ];
    let b = c_path(&m.path("b"));
    // SAFETY: a valid path and two timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, b.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let meta = fs::metadata(m.path("b")).unwrap();
    assert_eq!(
        (meta.atime(), meta.atime_nsec()),
        (1_000_000_000, 123_456_789)
    );
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_100_000_000, 987_654_321)
    );
    let now = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, b.as_ptr(), now.as_ptr(), 0) },
        0
    );
    let meta = fs::metadata(m.path("b")).unwrap();
    assert!(meta.atime() > 1_700_000_000, "atime now");
    assert_eq!(meta.mtime(), 1_100_000_000, "mtime left as it was");

    // Extended attributes: set, get (with the size probe), list, remove.
    let name = CString::new("user.colour").unwrap();
    // SAFETY: valid path, name and value buffers with their lengths.
    let rc = unsafe { libc::setxattr(b.as_ptr(), name.as_ptr(), b"blue".as_ptr().cast(), 4, 0) };
    assert_eq!(rc, 0, "setxattr: errno {}", errno());
    // SAFETY: a null buffer of size 0 asks for the size.
    let size = unsafe { libc::getxattr(b.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(size, 4);
    let mut value = [0u8; 16];
    // SAFETY: the buffer holds 16 bytes.
    let got = unsafe { libc::getxattr(b.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), 16) };
    assert_eq!(&value[..got as usize], b"blue");
    // SAFETY: a 2-byte buffer, too small: ERANGE.
    let short = unsafe { libc::getxattr(b.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), 2) };
    assert_eq!((short, errno()), (-1, libc::ERANGE));
    let mut list = [0u8; 256];
    // SAFETY: the buffer holds 256 bytes.
    let len = unsafe { libc::listxattr(b.as_ptr(), list.as_mut_ptr().cast(), 256) };
    assert_eq!(&list[..len as usize], b"user.colour\0");
    // SAFETY: valid path and name.
    assert_eq!(unsafe { libc::removexattr(b.as_ptr(), name.as_ptr()) }, 0);
    // SAFETY: as above.
    let none = unsafe { libc::getxattr(b.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!((none, errno()), (-1, libc::ENODATA));

    // Errors come back as Linux gives them.
    assert_eq!(
        fs::remove_dir(&m.at).unwrap_err().raw_os_error(),
        Some(libc::EBUSY),
        "the kernel's own answer for a mount point"
    );
    fs::create_dir(m.path("full")).unwrap();
    fs::write(m.path("full/x"), b"").unwrap();
    assert_eq!(
        fs::remove_dir(m.path("full")).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        fs::read(m.path("nothing")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
}

/// This process's umask (read back by setting it and restoring it).
fn umask() -> u32 {
    // SAFETY: umask cannot fail; the first call's answer is restored at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

#[test]
fn the_mount_survives_a_server_restart_while_a_file_is_open() {
    for ack in ["commit", "early"] {
        let dir = tempfile::tempdir().unwrap();
        let listen = free_listen();
        let flags = [
            "--listen",
            listen.as_str(),
            "--ack",
            ack,
            "--recovery-window",
            "20s",
        ];
        let first = server(dir.path(), &flags);
        let m = Mounted::new(&first, &["-o", "ack=server"]);
        fs::create_dir(m.path("d")).unwrap();
        let mut open = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(m.path("d/f"))
            .unwrap();
        open.write_all(b"before,").unwrap();
        fs::write(m.path("d/other"), pattern(70_000, 3)).unwrap();

        first.kill();
        let second = server(dir.path(), &flags);
        // The same descriptor keeps working: the mount reconnected, replayed what was
        // answered early, and reopened its handle.
        open.write_all(b"after").unwrap();
        open.seek(SeekFrom::Start(0)).unwrap();
        let mut back = String::new();
        open.read_to_string(&mut back).unwrap();
        assert_eq!(back, "before,after", "--ack {ack}");
        open.sync_all().unwrap();
        drop(open);
        assert_eq!(
            fs::read(m.path("d/other")).unwrap(),
            pattern(70_000, 3),
            "--ack {ack}"
        );
        fs::write(m.path("d/new"), b"new").unwrap();
        assert!(
            !m.log_text().contains("lost"),
            "nothing lost: {}",
            m.log_text()
        );
        assert!(m.unmount().success(), "--ack {ack}");
        let status = second.stop();
        assert!(status.success());
        let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), &dir.path().join("data"));
        assert_eq!(code, 0, "fsck after --ack {ack}: {report}");
    }
}

/// With `--ack early` and a slow commit, fsync must wait for the commit: after it returns,
/// the file survives a SIGKILL of the server and of the mount (so nothing is replayed).
#[test]
fn fsync_makes_an_early_answer_durable() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let flags = [
        "--listen",
        listen.as_str(),
        "--ack",
        "early",
        "--commit-interval",
        "3s",
        "--recovery-window",
        "1s",
    ];
    let first = server(dir.path(), &flags);
    let mut m = Mounted::new(&first, &[]);
    // The server's first answer to a client waits for a commit: get it out of the way.
    fs::create_dir(m.path("warm")).unwrap();
    let mut f = File::create(m.path("kept")).unwrap();
    f.write_all(b"durable").unwrap();
    f.sync_all().unwrap();
    // A second file, answered early and never fsynced: the kill below must lose it, or the
    // fsync above proves nothing (the 3 s commit interval has not passed).
    fs::write(m.path("not-synced"), b"x").unwrap();
    drop(f);
    // Neither gets a chance to do anything more: fsync of the file alone made it durable.
    let _ = m.child.as_mut().unwrap().kill();
    first.kill();
    drop(m);
    let second = server(dir.path(), &flags);
    let m = Mounted::new(&second, &[]);
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"durable");
    assert!(
        !m.path("not-synced").exists(),
        "a file never fsynced outlived the kill of its server and mount within the commit \
         interval: the test cannot tell fsync from the commit timer"
    );
}

/// Issue 55 (found by `tests/fsx.rs`): a change answered early and not yet committed when the
/// server is SIGKILLed is replayed by the mount after the restart although nothing uses the
/// mount until the server's recovery window has closed — the mount is up all along, so
/// nothing it answered may be lost. On 4112a8c the client library noticed the restart only
/// at the next request, after the window: the replay was refused and the file was gone.
#[test]
fn an_idle_mount_replays_what_was_answered_early_within_the_recovery_window() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let flags = [
        "--listen",
        listen.as_str(),
        "--ack",
        "early",
        "--commit-interval",
        "3s",
        "--recovery-window",
        "3s",
    ];
    let first = server(dir.path(), &flags);
    let m = Mounted::new(&first, &[]);
    // The server's first answer to a client waits for a commit: get it out of the way.
    fs::create_dir(m.path("warm")).unwrap();
    fs::write(m.path("answered-early"), b"kept by the mount").unwrap();
    // The close's RELEASE answered too (the kernel sends it after close(2) returns), so that
    // no request is left to notice the restart; well within the 3 s before the commit.
    std::thread::sleep(Duration::from_millis(500));
    first.kill();
    let second = server(dir.path(), &flags);
    // Nothing touches the mount until the window has closed.
    assert!(
        second.wait_for_log("recovery", Duration::from_secs(10)),
        "{}",
        second.log_text()
    );
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !second.log_text().contains("evicted"),
        "the server gave up on the mount:\n{}\nmount log:\n{}",
        second.log_text(),
        m.log_text()
    );
    assert_eq!(
        fs::read(m.path("answered-early")).unwrap(),
        b"kept by the mount"
    );
    // The mount says what happened: the connection lost, back, and what it replayed.
    let log = m.log_text();
    for line in [
        "the server went away",
        "reconnected",
        "replaying what was answered early",
    ] {
        assert!(log.contains(line), "no {line:?} in the mount's log:\n{log}");
    }
    assert!(m.unmount().success());
}

/// Issue 56: a server SIGKILLed and restarted under `--ack early` with one busy mount and one
/// idle one. The idle mount reconnects and replays at once (it pings while it holds changes
/// answered early), so the restarted server's recovery window closes as soon as both have
/// replayed, not after its 30 s: the busy mount's next operation is answered within 2 s of the
/// restart, and nothing either mount was answered is lost.
#[test]
fn a_busy_mount_beside_an_idle_one_is_answered_within_two_seconds_of_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let flags = [
        "--listen",
        listen.as_str(),
        "--ack",
        "early",
        // Nothing of what follows is committed by the timer before the kill.
        "--commit-interval",
        "600s",
        "--recovery-window",
        "30s",
    ];
    let first = server(dir.path(), &flags);
    let busy = Mounted::new(&first, &[]);
    let idle = Mounted::new(&first, &[]);
    // The first change of each client waits for its commit; the next are answered early.
    fs::create_dir(busy.path("busy")).unwrap();
    fs::create_dir(idle.path("idle")).unwrap();
    fs::write(idle.path("idle/answered-early"), b"idle").unwrap();
    for i in 0..20 {
        fs::write(busy.path(&format!("busy/{i}")), format!("busy {i}")).unwrap();
    }
    // The closes' RELEASEs answered too (the kernel sends them after close(2) returns).
    std::thread::sleep(Duration::from_millis(300));
    first.kill();
    let second = server(dir.path(), &flags);
    let restarted = Instant::now();
    fs::write(busy.path("busy/after"), b"after the restart").unwrap();
    let answered = restarted.elapsed();
    assert!(
        answered < Duration::from_secs(2),
        "the busy mount waited {answered:?}\nserver: {}\nidle mount: {}",
        second.log_text(),
        idle.log_text()
    );
    // The server answers the waiting requests when the last client has replayed, and logs
    // that from the task that watched the window: the line may come just after the answer.
    assert!(
        second.wait_for_log("every known client replayed", Duration::from_secs(10)),
        "{}",
        second.log_text()
    );
    for i in 0..20 {
        let got = fs::read_to_string(busy.path(&format!("busy/{i}"))).unwrap();
        assert_eq!(got, format!("busy {i}"));
    }
    assert_eq!(fs::read(idle.path("idle/answered-early")).unwrap(), b"idle");
    assert_eq!(
        fs::read(idle.path("busy/after")).unwrap(),
        b"after the restart"
    );
    for m in [&busy, &idle] {
        assert!(
            m.log_text().contains("replaying what was answered early"),
            "{}",
            m.log_text()
        );
    }
    assert!(busy.unmount().success());
    assert!(idle.unmount().success());
    assert!(second.stop().success());
}

#[test]
fn a_background_mount_returns_once_up_and_goes_with_fusermount() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let at = dir.path().join("mnt");
    fs::create_dir(&at).unwrap();
    let log = dir.path().join("mount.log");
    let out = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(mds_testkit::bin("mdsmount"))
        .arg(server.addr.to_string())
        .arg(&at)
        .args(["-o", "default_permissions,attr_timeout=0,entry_timeout=0"])
        .arg("--log-file")
        .arg(&log)
        .output()
        .unwrap();
    // Before any assertion: a background mount outlives `timeout` (its own process group).
    let guard = Unmount(&at);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Mounted when the command returns, not some time later.
    assert!(is_mounted(&at));
    fs::write(at.join("f"), b"x").unwrap();
    assert_eq!(fs::read(at.join("f")).unwrap(), b"x");
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fs::read_to_string(&log)
        .unwrap()
        .contains("everything answered is durable")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A server nobody answers on: the command fails, saying why, and nothing is mounted.
    let out = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(mds_testkit::bin("mdsmount"))
        .arg("127.0.0.1:1")
        .arg(&at)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(!is_mounted(&at));
    // A bad option is refused before anything happens.
    let out = Command::new("timeout")
        .args(["-k", "5", "30"])
        .arg(mds_testkit::bin("mdsmount"))
        .arg(server.addr.to_string())
        .arg(&at)
        .args(["-o", "ro,nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonsense"));
}

/// What an `/etc/fstab` line does: `mount -t fuse.mdsmount SERVER DIR -o …` runs Debian's
/// `mount.fuse3 SERVER DIR -o rw,… -t fuse.mdsmount`, which runs `mdsmount SERVER DIR -o …` in
/// the background form, and `mount -t fuse 'mdsmount#SERVER' DIR` does the same; `umount DIR`
/// then ends the mount. mount(8) gives its helper a fixed PATH (the package's /usr/bin is on
/// it), so the test runs `mount.fuse3` as mount(8) would, with the built binary on PATH.
/// The lines are docs/mount.md's, `nosuid,nodev` included, and the mount has both flags; a
/// line without them gets `dev,suid` from `mount.fuse3` (it appends both unless the line
/// negates them), which the mount honours and warns of.
#[test]
fn mount_t_fuse_mdsmount_mounts_as_an_fstab_line_would() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let at = dir.path().join("mnt");
    fs::create_dir(&at).unwrap();
    let bin_dir = mds_testkit::bin("mdsmount").parent().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (kind, device, line) in [
        ("fuse.mdsmount", server.addr.to_string(), "nosuid,nodev,"),
        ("fuse", format!("mdsmount#{}", server.addr), "nosuid,nodev,"),
        ("fuse.mdsmount", server.addr.to_string(), ""),
    ] {
        let log = dir.path().join(format!("{kind}-{}.log", line.len()));
        let opts = format!("{line}_netdev,entry_timeout=0,log_file={}", log.display());
        let out = Command::new("timeout")
            .args(["-k", "5", "60", "mount.fuse3", &device])
            .arg(&at)
            .args(["-o", &format!("rw,{opts}")])
            // mount(8) names the subtype of `fuse.mdsmount`; for `fuse` the device does.
            .args(
                kind.strip_prefix("fuse.")
                    .map(|_| ["-t", kind])
                    .into_iter()
                    .flatten(),
            )
            .env("PATH", &path)
            .output()
            .unwrap();
        let guard = Unmount(&at);
        assert!(
            out.status.success(),
            "mount.fuse3 -t {kind}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            is_mounted(&at),
            "mount.fuse3 -t {kind} returned before the mount was up"
        );
        let line_info = mountinfo(&at);
        assert!(
            line_info.contains(" - fuse.mdsmount ") && line_info.contains(&server.addr.to_string()),
            "{line_info}"
        );
        let logged = fs::read_to_string(&log).unwrap_or_default();
        if line.is_empty() {
            assert_eq!(mount_flags(&at), ["rw"], "mount.fuse3 added dev,suid");
            assert!(logged.contains("set-user-ID"), "{logged}");
        } else {
            assert_eq!(mount_flags(&at), ["rw", "nosuid", "nodev"], "{line_info}");
            assert!(!logged.contains("set-user-ID"), "{logged}");
            let name = format!("via-{kind}");
            fs::write(at.join(&name), kind.as_bytes()).unwrap();
            assert_eq!(fs::read(at.join(&name)).unwrap(), kind.as_bytes());
        }
        assert!(
            bounded("umount", &[], &at),
            "umount after mount.fuse3 -t {kind}"
        );
        assert!(!is_mounted(&at));
        drop(guard);
    }
    // Both files were made through the server, whichever line mounted it.
    let out = Command::new(mds_testkit::bin("mdsctl"))
        .args(["--server", &server.addr.to_string(), "ls", "/"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("via-fuse.mdsmount") && listing.contains("via-fuse\n"),
        "{listing}"
    );
}

/// `/proc/self/mountinfo`'s line for the mount at `at`.
fn mountinfo(at: &Path) -> String {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(at.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} is not mounted", at.display()))
        .to_owned()
}

/// The mount flags that decide what its files may do (`rw`/`ro`, `nosuid`, `nodev`), as the
/// kernel shows them for the mount at `at`.
fn mount_flags(at: &Path) -> Vec<String> {
    let line = mountinfo(at);
    let flags = line.split(' ').nth(5).unwrap();
    flags
        .split(',')
        .filter(|f| ["rw", "ro", "nosuid", "nodev"].contains(f))
        .map(str::to_owned)
        .collect()
}

/// Issue 53, finding 3: a mount run by hand is `nosuid,nodev`, so a set-user-ID program that
/// someone made through the server (as root, or as a uid the server believed) runs as its
/// caller, not as its owner; `-o suid,dev` asks for both, and the mount warns of them.
#[test]
fn the_mount_is_nosuid_nodev_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    // Nobody must reach the mount point through its temporary directory (mode 0700).
    let reachable = |m: &Mounted| {
        let parent = m.at.parent().unwrap();
        fs::set_permissions(parent, fs::Permissions::from_mode(0o755)).unwrap();
    };
    let m = Mounted::new(&server, &["-o", "allow_other"]);
    reachable(&m);
    assert_eq!(mount_flags(&m.at), ["rw", "nosuid", "nodev"]);
    // A root-owned copy of `id`, set-user-ID, run by nobody: it says nobody's uid.
    let id = m.path("id");
    fs::copy("/usr/bin/id", &id).unwrap();
    fs::set_permissions(&id, fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(fs::metadata(&id).unwrap().mode() & 0o7777, 0o4755);
    let run_as_nobody = |program: &Path| {
        let out = Command::new("timeout")
            .args([
                "20",
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .arg(program)
            .arg("-u")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(run_as_nobody(&id), "65534");
    assert!(!m.log_text().contains("set-user-ID"), "{}", m.log_text());
    drop(m);
    let m = Mounted::new(&server, &["-o", "allow_other,suid,dev"]);
    reachable(&m);
    assert_eq!(mount_flags(&m.at), ["rw"]);
    assert_eq!(
        run_as_nobody(&m.path("id")),
        "0",
        "asked for: it runs as its owner"
    );
    assert!(m.log_text().contains("set-user-ID"), "{}", m.log_text());
}

/// Issue 53, findings 8 and 9: a write by anyone but root clears the file's set-ID bits on
/// the server, and the mount has the kernel forget the mode it kept before write(2) returns.
/// On a `suid` mount with a long attribute timeout, a root-owned set-user-ID program that
/// another user appended to runs as that user at once; before, the kernel kept S_ISUID in its
/// cached mode until the timeout, and the program the user had just changed ran as root.
#[test]
fn a_write_by_another_user_clears_set_user_id_in_the_kernel_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(
        &server,
        &["-o", "allow_other,suid,attr_timeout=60,entry_timeout=60"],
    );
    let parent = m.at.parent().unwrap();
    fs::set_permissions(parent, fs::Permissions::from_mode(0o755)).unwrap();
    let id = m.path("id");
    fs::copy("/usr/bin/id", &id).unwrap();
    fs::set_permissions(&id, fs::Permissions::from_mode(0o4777)).unwrap();
    let as_user = |args: &[&str]| {
        let out = Command::new("timeout")
            .args([
                "20",
                "setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let program = id.to_str().unwrap();
    assert_eq!(as_user(&[program, "-u"]), "0", "set-user-ID root, honoured");
    // A byte past the end of the program changes nothing it runs.
    as_user(&["sh", "-c", "printf '\\n' >> \"$0\"", program]);
    assert_eq!(
        as_user(&[program, "-u"]),
        "1000",
        "written by a user: no longer set-user-ID"
    );
    assert_eq!(fs::metadata(&id).unwrap().mode() & 0o7777, 0o777);
}

/// Unmounts a background mount when dropped.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if is_mounted(self.0) && !bounded("fusermount3", &["-u"], self.0) {
            bounded("umount", &["-l"], self.0);
        }
    }
}

/// Each request goes with its caller's uid, gid and supplementary groups (read from
/// /proc/PID/status): without `default_permissions` the server's checks decide.
#[test]
fn callers_are_checked_with_their_own_credentials_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &["-o", "allow_other"]);
    let shared = m.path("shared");
    fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, Some(0), Some(4242)).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o770)).unwrap();
    let as_user = |groups: &str, args: &[&str]| {
        Command::new("timeout")
            .args(["20", "setpriv", "--reuid=1000", "--regid=1000"])
            .arg(groups)
            .args(args)
            .output()
            .unwrap()
    };
    let outsider = as_user(
        "--clear-groups",
        &["touch", shared.join("x").to_str().unwrap()],
    );
    assert!(!outsider.status.success());
    assert!(
        String::from_utf8_lossy(&outsider.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&outsider.stderr)
    );
    let member = as_user(
        "--groups=4242",
        &["touch", shared.join("y").to_str().unwrap()],
    );
    assert!(
        member.status.success(),
        "{}",
        String::from_utf8_lossy(&member.stderr)
    );
    let meta = fs::metadata(shared.join("y")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (1000, 1000),
        "owned by its creator"
    );
    // Root made the directory, the user made the file in it: each as itself.
    assert_eq!(fs::metadata(&shared).unwrap().uid(), 0);
}

/// SIGTERM: the mount asks for a last commit, unmounts and exits 0. A read-only mount
/// reads and refuses every change with EROFS.
#[test]
fn sigterm_commits_and_unmounts_and_ro_refuses_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &["--ack", "early"]);
    let mut m = Mounted::new(&server, &[]);
    fs::write(m.path("f"), b"kept").unwrap();
    let pid = m.child.as_ref().unwrap().id();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_for(m.child.as_mut().unwrap(), Duration::from_secs(40)).expect("exits");
    m.child = None;
    assert!(status.success(), "{status}: {}", m.log_text());
    assert!(!is_mounted(&m.at));
    assert!(
        m.log_text().contains("everything answered is durable"),
        "{}",
        m.log_text()
    );
    drop(m);

    let ro = Mounted::new(&server, &["-o", "ro"]);
    assert_eq!(fs::read(ro.path("f")).unwrap(), b"kept");
    let refused = fs::write(ro.path("g"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS));
    assert_eq!(
        fs::remove_file(ro.path("f")).unwrap_err().raw_os_error(),
        Some(libc::EROFS)
    );
}

/// A change the server answered early and then, restarted, refused to take back (the mount
/// came back after the recovery window closed: here the restarted server listens where the
/// mount cannot find it, as behind a partition, until its window has closed, and is then
/// restarted on its address) is lost: fsync and close of the files it touched answer EIO —
/// once per descriptor open before the loss — and the mount logs it.
#[test]
fn a_change_the_restarted_server_refused_is_reported_as_eio() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_listen();
    let flags = [
        "--listen",
        listen.as_str(),
        "--ack",
        "early",
        // Nothing commits f's changes but the kill's absence of one: a stall of seconds
        // between the create and the kill must not commit them (the warm mkdir's commit and
        // fsync's are asked for, and start at once).
        "--commit-interval",
        "600s",
        "--recovery-window",
        "1s",
    ];
    let first = server(dir.path(), &flags);
    let m = Mounted::new(&first, &["-o", "attr_timeout=0,entry_timeout=0"]);
    // The first change of a client waits for its commit; the next are answered early.
    fs::create_dir(m.path("warm")).unwrap();
    let mut a = File::create(m.path("f")).unwrap();
    a.write_all(b"early").unwrap();
    let b = File::open(m.path("f")).unwrap();
    // An idle mount comes back to a restarted server within a second (it pings while it has
    // something at stake), so the restart that closes its window without it is elsewhere.
    first.kill();
    let away = free_listen();
    let mut away_flags = flags;
    away_flags[1] = away.as_str();
    let second = server(dir.path(), &away_flags);
    // Until the window has closed on the absent client, not a fixed sleep: a server thread
    // held off the CPU would close it late.
    assert!(
        second.wait_for_log("recovery window closed", Duration::from_secs(60)),
        "{}",
        second.log_text()
    );
    assert!(
        second
            .log_text()
            .lines()
            .any(|l| l.contains("recovery window closed") && l.contains("evicted=1")),
        "the mount was absent when the window closed: {}",
        second.log_text()
    );
    // Its eviction of the mount's session is committed when it stops.
    assert!(second.stop().success());
    let second = server(dir.path(), &flags);
    let Err(lost) = a.sync_all() else {
        panic!(
            "fsync after the loss succeeded\nmount: {}\nserver: {}",
            m.log_text(),
            second.log_text()
        )
    };
    assert_eq!(lost.raw_os_error(), Some(libc::EIO), "fsync after the loss");
    a.sync_all()
        .unwrap_or_else(|e| panic!("told once per descriptor, then {e}"));
    drop(a);
    // SAFETY: closing a descriptor we own, once (into_raw_fd gave it up).
    let closed = unsafe { libc::close(std::os::fd::IntoRawFd::into_raw_fd(b)) };
    assert_eq!(
        (closed, errno()),
        (-1, libc::EIO),
        "close of a descriptor open before it"
    );
    assert_eq!(
        fs::metadata(m.path("f")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT),
        "the create itself was lost"
    );
    assert!(m.path("warm").is_dir(), "what was committed is there");
    assert!(
        m.log_text().contains("refused to take back"),
        "{}",
        m.log_text()
    );
    assert!(m.unmount().success());
    drop(second);
}

/// A server started with `--auth-key`: the mount with the key works; without it, or with a
/// key file others may read, mdsmount fails before mounting, saying why.
#[test]
fn a_mount_proves_the_shared_key_and_is_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    fs::write(&key, [7u8; 32]).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let server = server(dir.path(), &["--auth-key", key.to_str().unwrap()]);

    let m = Mounted::new(&server, &["--auth-key", key.to_str().unwrap()]);
    fs::write(m.path("keyed"), b"k").unwrap();
    assert_eq!(fs::read(m.path("keyed")).unwrap(), b"k");
    assert!(m.unmount().success());

    let at = dir.path().join("refused");
    fs::create_dir(&at).unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(mds_testkit::bin("mdsmount"))
        .arg(server.addr.to_string())
        .arg(&at)
        .arg("-f")
        .output()
        .unwrap();
    let _guard = Unmount(&at);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("key"), "says a key is needed: {stderr}");
    assert!(!is_mounted(&at));

    let open_key = dir.path().join("open-key");
    fs::write(&open_key, [7u8; 32]).unwrap();
    fs::set_permissions(&open_key, fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(mds_testkit::bin("mdsmount"))
        .arg(server.addr.to_string())
        .arg(&at)
        .args(["-f", "-o"])
        .arg(format!("auth_key={}", open_key.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {stderr}");
    assert!(stderr.contains("auth_key"), "{stderr}");
    assert!(!is_mounted(&at));
}

/// Runs `program` with `args`, bounded, and returns its stdout; panics with its stderr if it
/// fails.
fn run_ok(program: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["-k", "5", "60", program])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `script` run by `sh` as uid and gid 1000 with no other groups: its exit status and stderr.
fn as_user_1000(script: &str) -> (bool, String) {
    let out = Command::new("timeout")
        .args([
            "-k",
            "5",
            "20",
            "setpriv",
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every path under `dir` with its mode, owner and ACLs (`getfacl` of each, in name order, so
/// that two trees listed in different orders compare equal).
fn acls_of_tree(dir: &Path) -> String {
    run_ok(
        "sh",
        &[
            "-c",
            "cd \"$0\" && find . -print0 | sort -z | xargs -0 getfacl -p -n",
            dir.to_str().unwrap(),
        ],
    )
}

/// Issue 53, finding 6: POSIX ACLs through the mount, with and without `default_permissions`
/// (the kernel enforces them with FUSE_POSIX_ACL; the server does without): a named user's
/// `---` shuts that user out of a file its mode lets everyone read; an access ACL sets the
/// mode; a directory's default ACL is inherited in place of the umask; and `cp -a` of a tree
/// of mixed modes and ACLs keeps every mode and ACL. Before, the ACL was stored and shown by
/// `getfacl` and never enforced, and `cp -a` left every copied file 0600 (its ACL set after
/// the create never reached the mode).
#[test]
fn acls_are_enforced_kept_with_the_mode_inherited_and_copied_whole() {
    for options in ["allow_other", "allow_other,default_permissions"] {
        let (m, _server, _dir) = mount_for_other_users(options);

        let secret = m.path("secret");
        fs::write(&secret, "x").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
        let read_secret = format!("cat {}", secret.display());
        assert!(as_user_1000(&read_secret).0, "{options}: 0644 is readable");
        run_ok("setfacl", &["-m", "u:1000:---", secret.to_str().unwrap()]);
        let (read, stderr) = as_user_1000(&read_secret);
        assert!(!read, "{options}: u:1000:--- is enforced");
        assert!(stderr.contains("Permission denied"), "{options}: {stderr}");
        // The group class is the mask: `setfacl -m m::---` leaves mode 0604.
        run_ok("setfacl", &["-m", "m::---", secret.to_str().unwrap()]);
        assert_eq!(
            fs::metadata(&secret).unwrap().mode() & 0o777,
            0o604,
            "{options}"
        );

        let shared = m.path("shared");
        fs::create_dir(&shared).unwrap();
        run_ok(
            "setfacl",
            &[
                "-m",
                "u:1000:rwx,d:u:1000:rwx,d:g::rwx,d:o::---",
                shared.to_str().unwrap(),
            ],
        );
        let made = as_user_1000(&format!(
            "umask 077 && cd {} && touch notes && mkdir sub",
            shared.display()
        ));
        assert!(made.0, "{options}: {}", made.1);
        let notes = getfacl_lines(&shared.join("notes"));
        assert!(
            notes.iter().any(|l| l.starts_with("user:1000:rwx"))
                && notes.contains(&"mask::rw-".to_owned()),
            "{options}: {notes:?}"
        );
        assert_eq!(
            fs::metadata(shared.join("notes")).unwrap().mode() & 0o777,
            0o660,
            "{options}: the default ACL, not the umask"
        );
        let sub = getfacl_lines(&shared.join("sub"));
        assert!(
            sub.contains(&"default:user:1000:rwx".to_owned()),
            "{options}: {sub:?}"
        );
        drop(m);
    }

    // cp -a of a tree on the local disk: modes of every kind, an access ACL, a default ACL.
    let source = tempfile::tempdir().unwrap();
    let src = source.path().join("tree");
    fs::create_dir(&src).unwrap();
    for (name, mode) in [
        ("a", 0o644),
        ("b", 0o755),
        ("c", 0o600),
        ("d", 0o640),
        ("e", 0o4755),
    ] {
        fs::write(src.join(name), name).unwrap();
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    run_ok(
        "setfacl",
        &["-m", "u:1000:r,g:4242:rw", src.join("a").to_str().unwrap()],
    );
    for (name, mode) in [("open", 0o755), ("closed", 0o700), ("group", 0o2770)] {
        fs::create_dir(src.join(name)).unwrap();
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    run_ok(
        "setfacl",
        &["-d", "-m", "u:1000:rx", src.join("group").to_str().unwrap()],
    );
    fs::write(src.join("group/inside"), "i").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &["-o", "allow_other"]);
    run_ok("cp", &["-a", src.to_str().unwrap(), m.at.to_str().unwrap()]);
    assert_eq!(acls_of_tree(&m.path("tree")), acls_of_tree(&src));
}

/// `getfacl`'s lines for `path`, without its comment header.
fn getfacl_lines(path: &Path) -> Vec<String> {
    run_ok("getfacl", &["-p", "-n", path.to_str().unwrap()])
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Issue 53, finding 9: execve(2) through the mount asks the server for execute permission,
/// not read. A `--x` program, and one only the others' class may run, run for a user of that
/// class; before, the OPEN that execve makes asked for read and was refused EACCES.
#[test]
fn a_program_runs_by_its_execute_bits_alone() {
    for options in ["allow_other", "allow_other,default_permissions"] {
        let (m, _server, _dir) = mount_for_other_users(options);
        let program = m.path("true");
        fs::copy("/bin/true", &program).unwrap();
        for mode in [0o711, 0o701, 0o111] {
            fs::set_permissions(&program, fs::Permissions::from_mode(mode)).unwrap();
            let (ran, stderr) = as_user_1000(program.to_str().unwrap());
            assert!(ran, "{options}, mode {mode:o}: {stderr}");
        }
        // Execute for the owner's class only: the others may not.
        fs::set_permissions(&program, fs::Permissions::from_mode(0o744)).unwrap();
        let (ran, stderr) = as_user_1000(program.to_str().unwrap());
        assert!(
            !ran && stderr.contains("Permission denied"),
            "{options}: {stderr}"
        );
        drop(m);
    }
}

/// A fresh server and its mount with `-o options`, whose mount point other users can reach
/// (its parent made 0755), for the tests that run commands as uid 1000. In drop order: the
/// mount, then the server, then their directory.
fn mount_for_other_users(options: &str) -> (Mounted, mds_testkit::Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    let m = Mounted::new(&server, &["-o", options]);
    let parent = m.at.parent().unwrap();
    fs::set_permissions(parent, fs::Permissions::from_mode(0o755)).unwrap();
    (m, server, dir)
}

/// A file handle as name_to_handle_at(2) fills it: `struct file_handle` and room for its bytes.
#[repr(C)]
struct FileHandle {
    bytes: u32,
    kind: i32,
    data: [u8; 128],
}

/// The handle of `path` (following no link), as an NFS server takes one.
fn handle_of(path: &Path) -> FileHandle {
    let mut h = FileHandle {
        bytes: 128,
        kind: 0,
        data: [0; 128],
    };
    let mut mount_id = 0;
    let path = c_path(path);
    // SAFETY: a NUL-terminated path, a handle with room for `bytes`, an int to fill.
    let rc = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            path.as_ptr(),
            (&raw mut h).cast::<libc::file_handle>(),
            &raw mut mount_id,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "name_to_handle_at: {}",
        std::io::Error::last_os_error()
    );
    h
}

/// Issue 56 (an NFS re-export of the mount): handles of a file, of its hard link, of a
/// directory and of a file renamed since are opened again with open_by_handle_at(2) after the
/// kernel dropped its caches — it then asks the mount for each inode by its number (LOOKUP of
/// "." in it) and for a directory's parents up to the root (LOOKUP of ".."), which only an
/// export-capable mount answers (ESTALE before) — and reach the same inodes; the handle of a
/// file deleted since answers ESTALE.
#[test]
fn file_handles_open_again_after_the_kernel_forgot_their_inodes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), &[]);
    let m = Mounted::new(&srv, &[]);
    fs::create_dir_all(m.path("d/e")).unwrap();
    fs::write(m.path("d/e/f"), b"in e").unwrap();
    fs::hard_link(m.path("d/e/f"), m.path("link")).unwrap();
    fs::write(m.path("moved"), b"moved").unwrap();
    fs::write(m.path("gone"), b"gone").unwrap();
    let names = ["d/e/f", "link", "d/e", "moved", "gone"];
    let inos: Vec<u64> = names
        .iter()
        .map(|n| fs::metadata(m.path(n)).unwrap().ino())
        .collect();
    let mut handles: Vec<FileHandle> = names.iter().map(|n| handle_of(&m.path(n))).collect();
    fs::rename(m.path("moved"), m.path("d/moved-here")).unwrap();
    fs::remove_file(m.path("gone")).unwrap();
    let root = File::open(m.path("")).unwrap();
    for round in ["while cached", "after the caches were dropped"] {
        if round != "while cached" {
            // SAFETY: sync(2) takes nothing.
            unsafe { libc::sync() };
            fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
        }
        for (i, h) in handles.iter_mut().enumerate() {
            // SAFETY: the mount's root open, a handle name_to_handle_at filled.
            let fd = unsafe {
                libc::open_by_handle_at(
                    root.as_raw_fd(),
                    std::ptr::from_mut(h).cast::<libc::file_handle>(),
                    libc::O_RDONLY,
                )
            };
            if names[i] == "gone" {
                assert_eq!((fd, errno()), (-1, libc::ESTALE), "{round}");
                continue;
            }
            assert!(
                fd >= 0,
                "{} {round}: {}\n{}",
                names[i],
                std::io::Error::last_os_error(),
                m.log_text()
            );
            // SAFETY: a descriptor just opened, owned from here.
            let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            assert_eq!(
                file.metadata().unwrap().ino(),
                inos[i],
                "{} {round}",
                names[i]
            );
        }
    }
    assert_eq!(
        fs::read(m.path("d/moved-here")).unwrap(),
        b"moved",
        "the renamed file is where the rename put it"
    );
    drop(root);
    assert!(m.unmount().success());
}

/// Issue 55: the mount raises its device's readahead from the kernel's 128 KiB to 1 MiB
/// (sequential readers get 1 MiB READs, an eighth of the requests), `read_ahead_kb=N` sets
/// another, and `read_ahead_kb=0` leaves the kernel's.
#[test]
fn the_mount_sets_its_readahead_unless_told_to_leave_the_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), &[]);
    let read_ahead_kb = |m: &Mounted| {
        let dev = fs::metadata(m.path("")).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
        fs::read_to_string(knob)
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    let default = Mounted::new(&srv, &[]);
    let four = Mounted::new(&srv, &["-o", "read_ahead_kb=4096"]);
    let kernels = Mounted::new(&srv, &["-o", "read_ahead_kb=0"]);
    assert_eq!(read_ahead_kb(&default), 1024);
    assert_eq!(read_ahead_kb(&four), 4096);
    assert_eq!(
        read_ahead_kb(&kernels),
        128,
        "the kernel's own for a FUSE mount"
    );
    for m in [default, four, kernels] {
        assert!(m.unmount().success());
    }
}

/// Issue 56: the mount's `relatime` (the default), `noatime` and `strictatime` decide what the
/// server does with the atime of what is read through it (a READDIR here: the kernel keeps
/// no directory listing, so each one reaches the server). An atime older than the last change
/// moves under relatime and strictatime, not under noatime; one newer than the last change and
/// less than a day old moves only under strictatime.
#[test]
fn relatime_noatime_and_strictatime_decide_how_reads_move_atimes() {
    use std::time::SystemTime;
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path(), &[]);
    let rel = Mounted::new(&srv, &["-o", "attr_timeout=0,entry_timeout=0"]);
    let no = Mounted::new(&srv, &["-o", "noatime"]);
    let strict = Mounted::new(&srv, &["-o", "strictatime"]);
    fs::create_dir(rel.path("d")).unwrap();
    fs::write(rel.path("d/f"), b"x").unwrap();
    let set_atime = |at: SystemTime| {
        let d = File::open(rel.path("d")).unwrap();
        d.set_times(std::fs::FileTimes::new().set_accessed(at))
            .unwrap();
    };
    let atime = || {
        let m = fs::metadata(rel.path("d")).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let list = |m: &Mounted| fs::read_dir(m.path("d")).unwrap().count();
    let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    set_atime(long_ago);
    assert_eq!(list(&no), 1);
    assert_eq!(atime(), (1_000_000_000, 0), "noatime: never");
    list(&rel);
    assert!(atime().0 > 1_000_000_000, "relatime: older than the change");
    set_atime(long_ago);
    list(&strict);
    assert!(atime().0 > 1_000_000_000, "strictatime: always");
    // Newer than the last change (the utimensat's ctime) once the clock has passed it.
    let ahead = SystemTime::now() + Duration::from_secs(2);
    set_atime(ahead);
    std::thread::sleep(Duration::from_millis(2500));
    let set = atime();
    list(&rel);
    assert_eq!(
        atime(),
        set,
        "relatime: newer than the change, not a day old"
    );
    list(&no);
    assert_eq!(atime(), set);
    list(&strict);
    assert!(atime() > set, "strictatime: every read");
    for m in [rel, no, strict] {
        assert!(m.unmount().success());
    }
}
