//! File locks across two mounts of one server (issue 57): OFD record locks answer as the
//! kernel's own on a local directory, flock serialises, a blocked wait wakes on the unlock, a
//! wait that would deadlock is refused, and locks go at close and with a session that ended.
//! Every blocked wait here is granted before the test goes on: a wait cannot be interrupted
//! (fuser answers the kernel's INTERRUPT with ENOSYS), only ended with its mount.

mod common;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Mounted, server};

fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

/// One fcntl lock request's outcome: Ok with GETLK's (type, start, len), or the errno.
type Outcome = Result<(i16, i64, i64), i32>;

fn flock_struct(typ: i32, start: i64, len: i64) -> libc::flock {
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = typ as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_start = start;
    l.l_len = len;
    l
}

/// F_OFD_SETLK (F_OFD_SETLKW if `wait`) or F_OFD_GETLK on `file`.
fn ofd(file: &File, cmd: i32, typ: i32, start: i64, len: i64) -> Outcome {
    let mut l = flock_struct(typ, start, len);
    let r = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &raw mut l) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(if cmd == libc::F_OFD_GETLK {
        (l.l_type, l.l_start, l.l_len)
    } else {
        (0, 0, 0)
    })
}

fn flock(file: &File, how: i32) -> Result<(), i32> {
    if unsafe { libc::flock(file.as_raw_fd(), how) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(())
}

/// Runs the same requests of two lock owners — `a` and `b`, each an open file — and returns
/// every outcome.
fn lock_script(a: &File, b: &File) -> Vec<Outcome> {
    use libc::{F_OFD_GETLK as GET, F_OFD_SETLK as SET, F_RDLCK as R, F_UNLCK as U, F_WRLCK as W};
    let steps: [(bool, i32, i32, i64, i64); 16] = [
        (true, SET, W, 0, 100),
        (true, SET, U, 40, 20),
        (false, GET, W, 0, 0),
        (false, GET, W, 40, 20),
        (false, SET, W, 40, 20),
        (false, SET, R, 30, 6),
        (true, SET, R, 60, 40),
        (false, GET, R, 60, 10),
        (false, GET, W, 60, 10),
        (false, SET, R, 70, 10),
        (true, SET, W, 75, 1),
        (false, SET, W, 100, 0),
        (true, GET, R, 200, 5),
        (true, SET, U, 0, 0),
        (false, GET, W, 0, 0),
        (true, SET, W, 0, 40),
    ];
    steps
        .iter()
        .map(|&(first, cmd, typ, start, len)| ofd(if first { a } else { b }, cmd, typ, start, len))
        .collect()
}

/// OFD locks taken through two mounts conflict, split and merge exactly as the kernel's own
/// do between two open files of a local directory.
#[test]
fn record_locks_through_two_mounts_answer_as_the_kernels_own_on_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let (one, two) = (Mounted::new(&s, &[]), Mounted::new(&s, &[]));
    let local = dir.path().join("local");
    std::fs::write(&local, b"x").unwrap();
    let want = lock_script(&open_rw(&local), &open_rw(&local));
    std::fs::write(one.path("f"), b"x").unwrap();
    let got = lock_script(&open_rw(&one.path("f")), &open_rw(&two.path("f")));
    assert_eq!(got, want, "mount (left) against the local kernel (right)");
    assert!(
        want.contains(&Err(libc::EAGAIN)),
        "the script meets conflicts: {want:?}"
    );
}

/// flock(2) from two mounts serialises; a blocked flock wakes when the holder unlocks, and a
/// close releases what the open file held.
#[test]
fn flock_from_two_mounts_serialises_and_a_blocked_one_wakes_on_the_unlock() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let (one, two) = (Mounted::new(&s, &[]), Mounted::new(&s, &[]));
    std::fs::write(one.path("f"), b"x").unwrap();
    let a = open_rw(&one.path("f"));
    flock(&a, libc::LOCK_EX).unwrap();
    let b = open_rw(&two.path("f"));
    assert_eq!(
        flock(&b, libc::LOCK_EX | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    assert_eq!(
        flock(&b, libc::LOCK_SH | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let done = done.clone();
        std::thread::spawn(move || {
            let r = flock(&b, libc::LOCK_EX);
            done.store(true, Ordering::SeqCst);
            (r, b)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // The wait holds nothing of its mount's connection: a create through it goes on.
    std::fs::write(two.path("meanwhile"), b"made").unwrap();
    assert!(
        !done.load(Ordering::SeqCst),
        "granted while the other mount held it"
    );
    assert_eq!(
        mds_testkit::scrape_metric(s.metrics, "mds_file_lock_waiting_requests"),
        Some(1.0)
    );
    flock(&a, libc::LOCK_UN).unwrap();
    let (r, b) = waiter.join().unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(
        flock(&a, libc::LOCK_SH | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    assert_eq!(
        mds_testkit::scrape_metric(s.metrics, "mds_file_locks_held"),
        Some(1.0)
    );
    // The last close of the holder's open file releases its flock.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    while flock(&a, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        assert!(
            Instant::now() < deadline,
            "the close did not release the flock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A wait that would close a cycle — each mount holding what the other waits for — is
/// refused with EDEADLK, and the first wait is granted once the refused side unlocks.
#[test]
fn a_wait_across_mounts_that_would_deadlock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let (one, two) = (Mounted::new(&s, &[]), Mounted::new(&s, &[]));
    std::fs::write(one.path("f"), b"x").unwrap();
    let a = open_rw(&one.path("f"));
    let b = open_rw(&two.path("f"));
    ofd(&a, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 1).unwrap();
    ofd(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 1, 1).unwrap();
    let waiter = std::thread::spawn(move || (ofd(&a, libc::F_OFD_SETLKW, libc::F_WRLCK, 1, 1), a));
    // Until the server holds the first wait, the second would simply wait too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while mds_testkit::scrape_metric(s.metrics, "mds_file_lock_waiting_requests") != Some(1.0) {
        assert!(Instant::now() < deadline, "the first wait never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ofd(&b, libc::F_OFD_SETLKW, libc::F_WRLCK, 0, 1),
        Err(libc::EDEADLK)
    );
    ofd(&b, libc::F_OFD_SETLK, libc::F_UNLCK, 1, 1).unwrap();
    let (r, _a) = waiter.join().unwrap();
    assert_eq!(r, Ok((0, 0, 0)));
}

/// POSIX locks go at any close of the file by their process; the locks of a mount that went
/// away go when its session ends, and a waiter on the other mount is granted then.
#[test]
fn posix_locks_go_at_close_and_a_gone_mounts_locks_with_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &["--session-expiry", "2s"]);
    let (one, two) = (Mounted::new(&s, &[]), Mounted::new(&s, &[]));
    std::fs::write(one.path("f"), b"x").unwrap();
    let a = open_rw(&one.path("f"));
    let mut l = flock_struct(libc::F_WRLCK, 0, 0);
    assert_eq!(
        unsafe { libc::fcntl(a.as_raw_fd(), libc::F_SETLK, &raw mut l) },
        0
    );
    let b = open_rw(&two.path("f"));
    assert_eq!(
        ofd(&b, libc::F_OFD_SETLK, libc::F_RDLCK, 10, 1),
        Err(libc::EAGAIN)
    );
    // Another descriptor of the same file, closed: POSIX drops the process's locks.
    drop(open_rw(&one.path("f")));
    ofd(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 0).unwrap();
    // Mount two dies with its lock held (SIGKILL, its file still open); its session ends
    // 2 s later, and the lock with it.
    let mut two = two;
    two.child.as_mut().unwrap().kill().unwrap();
    two.child.as_mut().unwrap().wait().unwrap();
    let waited = Instant::now();
    ofd(&a, libc::F_OFD_SETLKW, libc::F_WRLCK, 0, 0).unwrap();
    assert!(
        waited.elapsed() >= Duration::from_millis(500),
        "granted while the gone mount's session held it"
    );
    assert_eq!(
        mds_testkit::scrape_metric(s.metrics, "mds_sessions_expired_total"),
        Some(1.0),
        "granted by the session's end"
    );
    drop(b);
}

/// SQLite with a writer on each of two mounts, for `MDS_SQLITE_SECONDS` (10 by default; the
/// issue's figure is 60): every transaction either writer committed is there afterwards and
/// `PRAGMA integrity_check` is ok. SQLite takes fcntl locks to serialise its writers and reads
/// its pages again only when its change counter moved: a mount that kept a stale page under a
/// lock another mount had released would corrupt the database.
#[test]
fn sqlite_writers_on_two_mounts_keep_every_commit_and_an_intact_database() {
    const WRITER: &str = r#"
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
who, until = sys.argv[2], time.time() + float(sys.argv[3])
db.execute("CREATE TABLE IF NOT EXISTS t (who TEXT, seq INTEGER, pad BLOB, PRIMARY KEY (who, seq))")
seq = 0
while time.time() < until:
    db.execute("BEGIN IMMEDIATE")
    n = db.execute("SELECT count(*) FROM t").fetchone()[0]
    db.execute("INSERT INTO t VALUES (?, ?, randomblob(700))", (who, seq))
    db.execute("UPDATE t SET pad = randomblob(300) WHERE rowid = ?", (n // 2 + 1,))
    db.execute("COMMIT")
    print(seq, flush=True)
    seq += 1
"#;
    let seconds = std::env::var("MDS_SQLITE_SECONDS").unwrap_or_else(|_| "10".into());
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let (one, two) = (Mounted::new(&s, &[]), Mounted::new(&s, &[]));
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let limit = (seconds.parse::<u64>().unwrap() * 4 + 60).to_string();
    let writer = |m: &Mounted, who: &str, seconds: &str| {
        std::process::Command::new("timeout")
            .args(["-k", "5", &limit, "python3"])
            .arg(&script)
            .arg(m.path("db.sqlite"))
            .args([who, seconds])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The table first, from one side, so that both do not race to make the file.
    let first = writer(&one, "a", "0").wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let (a, b) = (writer(&one, "a2", &seconds), writer(&two, "b", &seconds));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for (name, out) in [("a2", &a), ("b", &b)] {
        assert!(
            out.status.success(),
            "writer {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let committed =
        |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).lines().count();
    let (na, nb) = (committed(&a), committed(&b));
    assert!(na > 0 && nb > 0, "both wrote: {na} and {nb} transactions");
    eprintln!("sqlite: {na} and {nb} transactions from the two mounts in {seconds} s");
    let check = std::process::Command::new("timeout")
        .args(["-k", "5", "120", "python3", "-c"])
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1])\n\
             print(db.execute('PRAGMA integrity_check').fetchone()[0])\n\
             for who in ('a2', 'b'):\n\
             \x20   print(db.execute('SELECT count(*), max(seq) FROM t WHERE who = ?', (who,)).fetchone())\n",
        )
        .arg(two.path("db.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ok", "integrity_check: {text}");
    assert_eq!(
        lines[1],
        format!("({na}, {})", na - 1),
        "every commit of a2: {text}"
    );
    assert_eq!(
        lines[2],
        format!("({nb}, {})", nb - 1),
        "every commit of b: {text}"
    );
}
