//! The field's own suites, run on a real `mdsmount` mount of a real `mds`:
//!
//! - pjdfstest, the crates.io rewrite (0.2.2), with `tests/pjdfstest.toml`: its features, and the
//!   expected failures, one line of why each. Anything else failing fails the test, and so does
//!   a listed one passing (pjdfstest counts "PASSED UNEXPECTEDLY" as a failure): the list only
//!   shrinks. Three times: the mount's default (early replies), `-o ack=commit`, and
//!   `-o default_permissions`.
//! - fs_mark (Debian `fsmark`) with an fsync per file: its rate, then SIGKILL of the server
//!   mid-run and a restart on the same store and port; every fs_mark run that finished (each of
//!   its files fsynced) must have all its files with their size, the runs must go on without an
//!   error, and `mds fsck` must be clean after a clean stop. Then under `--ack early`, the server
//!   and the mount killed together: what fsync answered must be on the server even though no
//!   mount survives to replay it.
//! - `git clone` (over `file://`, git's own transport) of a repository of 1,200 files in three
//!   commits that the test builds: `git fsck --full --strict` clean, `git status` clean, and
//!   `diff -r` against a clone on the local disk empty, before and after a remount.
//!   Its pack is over 10 MiB: files past the server's inline cap, in the object store.
//! - Real work past the inline cap: `cp -a /usr/lib/python3.*` then `diff -r`; an autotools
//!   project of 40 units cloned with git, then `autoreconf -fi && ./configure && make -j2`,
//!   the program run and the built tree compared with the same done on the local disk; an SQLite database past 100 MiB written in
//!   transactions and checked (`PRAGMA integrity_check`, every row) through a fresh mount; a
//!   2 GiB file written and read back with its SHA-256.
//! - `tar x` of a tree with hard links, symlinks, fifos, a device, owners and mtimes, then
//!   `tar c` of it from the mount: the same archive byte for byte (both with `--sort=name`,
//!   nothing else normalised), before and after a remount.
//! - SIGKILL of the server mid-untar (`--ack early`): a tree untarred and fsynced before, and the
//!   one being untarred, are both there, byte for byte, after the restart, a clean stop and a
//!   fresh mount; tar itself sees no error.
//!
//! Needs root, /dev/fuse, and what `MDS_TEST_DEPS=1 scripts/install-deps.sh` installs (fuse3,
//! fsmark, git, autoconf, automake, pjdfstest); `MDS_SKIP_MOUNT_SUITES=1` skips them, saying so. Every external
//! command runs under `timeout -k`; every mount is unmounted when its test ends, failed or not
//! (`fusermount3 -u`, then `umount -l` and, while its daemon lives, the fusectl abort).

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mds_testkit::Server;

/// The pjdfstest release `tests/pjdfstest.toml` was written against (its test names).
const PJDFSTEST_VERSION: &str = "0.2.2";

// ---------------------------------------------------------------------------------------------
// Prerequisites

struct Env {
    mds: PathBuf,
    mdsmount: PathBuf,
}

/// What every test here needs, or `None` (after saying so) with `MDS_SKIP_MOUNT_SUITES=1`.
fn env() -> Option<Env> {
    if std::env::var_os("MDS_SKIP_MOUNT_SUITES").is_some_and(|v| v == "1") {
        eprintln!("MDS_SKIP_MOUNT_SUITES=1: the mount suites are skipped");
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the mount suites need root (FUSE mounts, pjdfstest's user switches, mknod); \
         run as root or set MDS_SKIP_MOUNT_SUITES=1"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing; set MDS_SKIP_MOUNT_SUITES=1 to skip the mount suites"
    );
    for tool in [
        "fusermount3",
        "fs_mark",
        "git",
        "tar",
        "diff",
        "timeout",
        "umount",
    ] {
        assert!(
            which(tool).is_some(),
            "{tool} not found: run MDS_TEST_DEPS=1 scripts/install-deps.sh"
        );
    }
    Some(Env {
        mds: mds_testkit::bin("mds"),
        mdsmount: PathBuf::from(env!("CARGO_BIN_EXE_mdsmount")),
    })
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// pjdfstest from PATH or cargo's bin directory, at the version the config was written for.
fn pjdfstest() -> PathBuf {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin/pjdfstest"));
    let bin = which("pjdfstest")
        .or(cargo_bin.filter(|p| p.is_file()))
        .expect("pjdfstest not found: run MDS_TEST_DEPS=1 scripts/install-deps.sh");
    let version = Command::new(&bin).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.split_whitespace().any(|w| w == PJDFSTEST_VERSION),
        "{} is {}, tests/pjdfstest.toml is for {PJDFSTEST_VERSION}: run scripts/install-deps.sh",
        bin.display(),
        version.trim()
    );
    bin
}

/// A directory on the local disk (not tmpfs, not the mount) for a test's stores and trees.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mds-suites-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A short path to mount on: fs_mark refuses directories of 40 bytes or more.
fn mount_point() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("mds")
        .tempdir_in("/tmp")
        .unwrap();
    let mnt = dir.path().join("m");
    (dir, mnt)
}

// ---------------------------------------------------------------------------------------------
// Commands, always bounded

/// `timeout -k 10 SECS PROGRAM`: the caller adds arguments.
fn bounded(secs: u64, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", &secs.to_string()])
        .arg(program)
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd`, panics with its output unless it exits 0; returns its stdout.
fn check(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        both(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn both(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// A mount

/// `mdsmount SERVER DIR -f -o allow_other[,OPTS]`, its log in a file. Dropping it unmounts
/// (`fusermount3 -u`, else `umount -l` and, while its daemon lives, the fusectl abort) and reaps
/// the daemon.
struct Mount {
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// The FUSE connection's number (the mount's minor device number), for the abort.
    conn: Option<u32>,
}

impl Mount {
    fn start(env: &Env, server: SocketAddr, dir: &Path, log: &Path) -> Mount {
        Mount::start_with(env, server, dir, log, "")
    }

    fn start_with(env: &Env, server: SocketAddr, dir: &Path, log: &Path, opts: &str) -> Mount {
        fs::create_dir_all(dir).unwrap();
        let opts = if opts.is_empty() {
            "allow_other".to_owned()
        } else {
            format!("allow_other,{opts}")
        };
        let file = fs::File::create(log).unwrap();
        let mut cmd = Command::new(&env.mdsmount);
        cmd.arg(server.to_string())
            .arg(dir)
            .args(["-f", "-o", &opts])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        // If the test process dies without unwinding, the daemon dies with it (its mount
        // point stays until a `umount -l`).
        mds_testkit::die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("starting mdsmount");
        let mut mount = Mount {
            dir: dir.to_owned(),
            log: log.to_owned(),
            child: Some(child),
            conn: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(conn) = fuse_connection(dir) {
                mount.conn = Some(conn);
                return mount;
            }
            if let Some(status) = mount.child.as_mut().unwrap().try_wait().unwrap() {
                mount.child = None;
                panic!(
                    "mdsmount exited {status} before mounting:\n{}",
                    mount.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not mounted within 30 s:\n{}",
                dir.display(),
                mount.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Unmounts, then waits for the daemon (30 s, then SIGKILL). Its exit status, if it had
    /// one of its own.
    fn unmount(&mut self) -> Option<ExitStatus> {
        if fuse_connection(&self.dir).is_some() {
            let ok = bounded(30, "fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .output()
                .is_ok_and(|o| o.status.success());
            if !ok {
                eprintln!("fusermount3 -u {} failed: lazy unmount", self.dir.display());
                let _ = bounded(30, "umount").arg("-l").arg(&self.dir).status();
                // A lazily unmounted connection lives on while a stuck daemon holds it: abort
                // it, but only while our daemon is alive. A connection's number is freed with
                // it and the next mount anywhere may take it, so aborting a number whose
                // daemon is gone can tear down another test's mount.
                let alive = self
                    .child
                    .as_mut()
                    .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                if let (true, Some(conn)) = (alive, self.conn) {
                    abort_connection(conn);
                }
            }
        }
        self.conn = None;
        let mut status = None;
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(30);
            status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break Some(s);
                }
                if Instant::now() > deadline {
                    eprintln!("mdsmount did not exit 30 s after the unmount: SIGKILL");
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
        }
        status
    }

    /// Unmounts and asserts the daemon exited 0.
    fn finish(mut self) {
        let status = self.unmount();
        assert!(
            status.is_some_and(|s| s.success()),
            "mdsmount exited {status:?} after its unmount:\n{}",
            self.log_tail()
        );
    }

    /// SIGKILL of the daemon, as a crash of the client machine: the kernel aborts the
    /// connection; the mount point is then detached.
    fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.unmount();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// The FUSE connection number of the mount at `dir`, if one is there (from mountinfo, which
/// never touches the mount: a stat of a hung one would hang).
fn fuse_connection(dir: &Path) -> Option<u32> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.as_os_str().as_bytes();
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields.iter().position(|f| *f == "-")?;
        let fstype = fields.get(sep + 1)?;
        (fields.get(4).map(|m| unescape(m)) == Some(want.to_vec()) && fstype.starts_with("fuse"))
            .then(|| fields[2].split(':').nth(1)?.parse().ok())
            .flatten()
    })
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = (b[i] == b'\\')
            .then(|| s.get(i + 1..i + 4))
            .flatten()
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if let Some(v) = code {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Writes to the fusectl `abort` of connection `conn` if it still exists (a hung mount whose
/// daemon is stuck): every request waiting on it fails, and the lazy unmount completes. Only for
/// a connection known to be alive: a dead one's number may already be another mount's.
fn abort_connection(conn: u32) {
    let base = Path::new("/sys/fs/fuse/connections");
    let mounted = fs::read_to_string("/proc/self/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(2) == Some("fusectl")));
    if !mounted {
        let _ = bounded(10, "mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(base)
            .status();
    }
    let abort = base.join(conn.to_string()).join("abort");
    if abort.exists() {
        let _ = fs::write(&abort, "1");
    }
}

// ---------------------------------------------------------------------------------------------
// pjdfstest

/// The teardown of a mount whose daemon already went away (here, unmounted by someone else)
/// must leave alone the mount that took its connection number since: once it aborted that
/// number, which tore down a remount of the git test in CI.
#[test]
fn a_mount_torn_down_after_its_daemon_left_spares_the_next_mount() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let server = Server::start(&env.mds, &tmp.path().join("data"), &[]);
    let (_a_dir, a_mnt) = mount_point();
    let mut first = Mount::start(&env, server.addr, &a_mnt, &tmp.path().join("a.log"));
    let first_conn = first.conn.expect("mounted");
    check(
        bounded(30, "fusermount3").arg("-u").arg(&a_mnt),
        "fusermount3 -u of the first mount",
    );
    let child = first.child.as_mut().unwrap();
    wait_until(
        Duration::from_secs(30),
        "the first mdsmount to exit",
        || child.try_wait().unwrap().is_some(),
    );
    let (_b_dir, b_mnt) = mount_point();
    let second = Mount::start(&env, server.addr, &b_mnt, &tmp.path().join("b.log"));
    // Connection numbers are the lowest free: the second mount takes the first one's unless a
    // test beside this one mounted in between (then this only checks the teardown is clean).
    eprintln!(
        "first mount's connection {first_conn}, second's {:?}",
        second.conn
    );
    drop(first);
    fs::write(b_mnt.join("still-here"), b"yes").expect("the second mount still serves");
    assert_eq!(fs::read(b_mnt.join("still-here")).unwrap(), b"yes");
    second.finish();
    assert!(server.stop().success());
}

#[test]
fn pjdfstest_fails_only_what_the_config_lists() {
    pjdfstest_on(&[], "");
}

/// The same with replies at commit (`-o ack=commit`): each change answered once durable. The
/// mount's default, above, asks for early replies: every reply before its commit, fsync
/// waiting for one.
#[test]
fn pjdfstest_fails_only_what_the_config_lists_with_replies_at_commit() {
    pjdfstest_on(&[], "ack=commit");
}

/// The same with the kernel checking permissions (`default_permissions`) before the server.
#[test]
fn pjdfstest_fails_only_what_the_config_lists_with_default_permissions() {
    pjdfstest_on(&[], "default_permissions");
}

fn pjdfstest_on(server_flags: &[&str], mount_opts: &str) {
    let Some(env) = env() else { return };
    let pjdfstest = pjdfstest();
    let tmp = scratch();
    let server = Server::start(&env.mds, &tmp.path().join("data"), server_flags);
    let (_short, mnt) = mount_point();
    let log = tmp.path().join("mount.log");
    let mount = Mount::start_with(&env, server.addr, &mnt, &log, mount_opts);
    // Another file system for the EXDEV cases: the local disk.
    let second = tmp.path().join("second");
    fs::create_dir(&second).unwrap();
    let config = mds_testkit::package_dir().join("tests/pjdfstest.toml");
    let started = Instant::now();
    let out = bounded(900, &pjdfstest)
        .arg("-c")
        .arg(&config)
        .arg("-p")
        .arg(&mnt)
        .arg("-s")
        .arg(&second)
        .env("NO_COLOR", "1")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary"))
        .unwrap_or("no summary")
        .to_owned();
    let setup = format!("server {server_flags:?}, mount -o {mount_opts:?}");
    eprintln!("pjdfstest on mdsmount ({setup}, {secs:.1} s): {summary}");
    let unexpected = pjdfstest_unexpected(&text);
    assert!(
        out.status.success() && unexpected.is_empty() && summary.contains(" 0 failed"),
        "pjdfstest on the mount ({setup}), {}: {summary}\n\n{}\n\nstderr:\n{}\n\nmount log:\n{}",
        out.status,
        unexpected.join("\n"),
        String::from_utf8_lossy(&out.stderr),
        mount.log_tail()
    );
    mount.finish();
    assert!(server.stop().success());
}

/// The cases that failed but are not listed, and the listed ones that passed, with the
/// lines pjdfstest printed after each (the assertion that failed).
fn pjdfstest_unexpected(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_end();
        if t.ends_with(" FAILED") || t.ends_with(" PASSED UNEXPECTEDLY") {
            let mut case = t.to_owned();
            while let Some(next) = lines.peek() {
                if !next.starts_with('\t') && !next.starts_with(' ') {
                    break;
                }
                // The backtrace adds nothing the assertion's message does not say.
                if next.starts_with("Backtrace") || next.trim_start().starts_with(char::is_numeric)
                {
                    lines.next();
                    continue;
                }
                if !next.trim().starts_with("at ") {
                    case.push('\n');
                    case.push_str(next);
                }
                lines.next();
            }
            out.push(case);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// fs_mark

/// One `fs_mark -k` run in its own directory: `threads` x `files` files of `size` bytes, each
/// fsynced before close (fs_mark's default, `-S 1`).
fn fs_mark(dir: &Path, cwd: &Path, files: usize, threads: usize, size: usize) -> Output {
    fs_mark_in(&[dir], cwd, files, threads, size)
}

/// fs_mark with `threads` processes in each of `dirs`.
fn fs_mark_in(dirs: &[&Path], cwd: &Path, files: usize, threads: usize, size: usize) -> Output {
    let mut command = bounded(300, "fs_mark");
    for dir in dirs {
        command.arg("-d").arg(dir);
    }
    command
        .args(["-n", &files.to_string(), "-t", &threads.to_string()])
        .args(["-s", &size.to_string(), "-S", "1", "-k", "-L", "1"])
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// fs_mark's Files/sec from its result line.
fn fs_mark_rate(stdout: &str) -> f64 {
    stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no result line in fs_mark's output:\n{stdout}"))
}

/// Runs fs_mark again and again, each run's processes in `root/NNNN/<process>`, until `stop`
/// or a run fails. One directory a process: fs_mark 3.3 seeds each process's random file names
/// with the microsecond it started at, so two processes that start in the same microsecond
/// (about 1 in 7,000 pairs on this machine, measured) make the same names — in one directory,
/// the second opens the first's files with O_TRUNC and rewrites them, and the run leaves half
/// its files without any error. That once failed this test as if the server had lost 50
/// acknowledged creates: reproduced on the local disk with fs_mark under a clock that pins
/// `tv_usec` (50 files, `Count 100`), and the lost run's inode numbers were exactly one
/// partition's run of 50 creates, with no room for the other 50.
struct FsMarkLoop {
    done: Arc<Mutex<Vec<PathBuf>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<String>>>,
}

const LOOP_FILES: usize = 50;
const LOOP_THREADS: usize = 2;
const LOOP_SIZE: usize = 4096;

impl FsMarkLoop {
    fn start(root: &Path, cwd: &Path) -> FsMarkLoop {
        fs::create_dir_all(root).unwrap();
        let done = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (root, cwd) = (root.to_owned(), cwd.to_owned());
        let thread = {
            let (done, stop) = (done.clone(), stop.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                    let run = root.join(format!("{i:04}"));
                    // fs_mark makes each of its directories, but not their parent.
                    if let Err(e) = fs::create_dir(&run) {
                        return Some(format!("{}: {e}", run.display()));
                    }
                    let dirs: Vec<PathBuf> =
                        (0..LOOP_THREADS).map(|p| run.join(p.to_string())).collect();
                    let each: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
                    let out = fs_mark_in(&each, &cwd, LOOP_FILES, 1, LOOP_SIZE);
                    if !out.status.success() {
                        return Some(format!("{}: {}\n{}", run.display(), out.status, both(&out)));
                    }
                    done.lock().unwrap().extend(dirs);
                }
                None
            })
        };
        FsMarkLoop {
            done,
            stop,
            thread: Some(thread),
        }
    }

    /// Runs finished.
    fn finished(&self) -> usize {
        self.done.lock().unwrap().len() / LOOP_THREADS
    }

    /// Stops after the run under way; the directories of the runs that finished, and the
    /// failure if one did.
    fn stop(mut self) -> (Vec<PathBuf>, Option<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let failure = self.thread.take().unwrap().join().unwrap();
        (self.done.lock().unwrap().clone(), failure)
    }
}

/// Every file of each finished fs_mark run's directories (one a process) is there, with its
/// size and that many bytes.
/// `mnt` is where `server` is mounted: a short listing is compared with the server's own
/// (asked directly, not through the mount), so a failure says which of the two lost what.
fn check_fs_mark_runs(
    runs: &[PathBuf],
    mnt: &Path,
    server: SocketAddr,
    mount: &Mount,
    evidence: &dyn Fn() -> String,
) {
    assert!(!runs.is_empty());
    // The mount compares what each server start reports durable with what the last one did:
    // a restart that lost acknowledged commits is named as such, before any count.
    let mount_log = fs::read_to_string(&mount.log).unwrap_or_default();
    assert!(
        !mount_log.contains("went back in time"),
        "the mount found the restarted server without commits it had reported:\n{}\n{}",
        mount.log_tail(),
        evidence()
    );
    // Every run's count, for a failure's message: whether a loss is one run's or more.
    let counts: Vec<String> = runs
        .iter()
        .map(|dir| {
            let n = fs::read_dir(dir).map_or(0, Iterator::count);
            format!("{}: {n}", dir.file_name().unwrap().to_string_lossy())
        })
        .collect();
    for dir in runs {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let len = fs::metadata(&path).unwrap().len();
            let bytes = fs::read(&path).unwrap().len();
            assert!(
                len == LOOP_SIZE as u64 && bytes == LOOP_SIZE,
                "{}: size {len}, {bytes} bytes read; fs_mark wrote {LOOP_SIZE} and fsynced them",
                path.display()
            );
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
        if names.len() != LOOP_FILES {
            let inside = Path::new("/").join(dir.strip_prefix(mnt).unwrap());
            let listed = Command::new(mds_testkit::bin("mdsctl"))
                .args(["--server", &server.to_string(), "ls", "-l"])
                .arg(&inside)
                .output()
                .unwrap();
            names.sort();
            panic!(
                "{}: {} files listed through the mount; fs_mark created and fsynced {}.\n\
                 Every finished run lists (through the mount): {}\n\
                 The mount listed:\n{}\nThe server lists {}:\n{}{}\nmount log:\n{}\n{}",
                dir.display(),
                names.len(),
                LOOP_FILES,
                counts.join(", "),
                names.join("\n"),
                inside.display(),
                String::from_utf8_lossy(&listed.stdout),
                String::from_utf8_lossy(&listed.stderr),
                mount.log_tail(),
                evidence()
            );
        }
    }
}

/// What a lost file's failure needs besides the listings: each server's log, what RocksDB's
/// own log says of its recovery (a write-ahead log cut short is logged there and nowhere
/// else), the store's files, and a copy of the store kept outside the test's scratch directory
/// (which goes with the test).
fn store_evidence(mds: &Path, data: &Path, servers: &[(&str, &Arc<Mutex<Vec<String>>>)]) -> String {
    use std::fmt::Write as _;
    /// RocksDB's lines about its recovery and its memtables.
    const RECOVERY: [&str; 8] = [
        "Recovering log",
        "Recovered to log",
        "dropping",
        "Corruption",
        "Point in time",
        "[WARN]",
        "[ERROR]",
        "New memtable",
    ];
    let mut out = String::new();
    for (name, log) in servers {
        let log = log.lock().unwrap();
        let tail = &log[log.len().saturating_sub(40)..];
        let _ = writeln!(
            out,
            "{name} server log (last 40 lines):\n{}",
            tail.join("\n")
        );
    }
    let mut logs: Vec<PathBuf> = fs::read_dir(data)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    logs.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("LOG"))
    });
    logs.sort();
    for log in &logs {
        let _ = writeln!(out, "RocksDB {}:", log.display());
        for line in fs::read_to_string(log).unwrap_or_default().lines() {
            if RECOVERY.iter().any(|w| line.contains(w)) {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let listed = Command::new("ls").arg("-l").arg(data).output();
    let _ = writeln!(
        out,
        "the store's files:\n{}",
        listed.map_or_else(|e| e.to_string(), |o| both(&o))
    );
    let kept = PathBuf::from(format!(
        "/var/tmp/mds-failed-store-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    ));
    let copied = Command::new("cp").arg("-a").arg(data).arg(&kept).status();
    match copied {
        Ok(s) if s.success() => {
            // What is in the store besides the entries: images or data blocks of inodes
            // whose entries are gone say those creates reached the store.
            let (code, text) = mds_testkit::fsck(mds, &kept);
            let text: Vec<&str> = text.lines().take(60).collect();
            let _ = writeln!(
                out,
                "the store is kept in {}; mds fsck of it exits {code}:\n{}",
                kept.display(),
                text.join("\n")
            );
        }
        other => {
            let _ = writeln!(out, "the store could not be kept: {other:?}");
        }
    }
    out
}

#[test]
fn fs_mark_with_fsync_survives_sigkill_of_the_server() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let data = tmp.path().join("data");
    let server = Server::start(&env.mds, &data, &[]);
    let addr = server.addr;
    let (_short, mnt) = mount_point();
    let mount = Mount::start(&env, server.addr, &mnt, &tmp.path().join("mount.log"));

    let out = fs_mark(&mnt.join("rate"), tmp.path(), 1000, 2, 4096);
    assert!(out.status.success(), "fs_mark: {}", both(&out));
    let rate = fs_mark_rate(&String::from_utf8_lossy(&out.stdout));
    eprintln!("fs_mark -n 1000 -t 2 -s 4096 (fsync per file) on mdsmount: {rate:.1} files/s");

    // SIGKILL mid-run, a restart on the same store and port: the mount reconnects and every
    // run goes on, the one the kill interrupted included.
    let runs = FsMarkLoop::start(&mnt.join("crash"), tmp.path());
    wait_until(Duration::from_secs(120), "3 fs_mark runs", || {
        runs.finished() >= 3
    });
    std::thread::sleep(Duration::from_millis(150));
    let before = runs.finished();
    let first_log = server.log.clone();
    server.kill();
    let restarted = std::panic::catch_unwind(|| {
        Server::start(&env.mds, &data, &["--listen", &addr.to_string()])
    });
    let server = restarted.unwrap_or_else(|_| {
        panic!(
            "the server did not start again on its store after the SIGKILL\n{}",
            store_evidence(&env.mds, &data, &[("first", &first_log)])
        )
    });
    wait_until(
        Duration::from_secs(180),
        "3 fs_mark runs after the restart",
        || runs.finished() >= before + 3,
    );
    let (done, failure) = runs.stop();
    assert!(
        failure.is_none(),
        "an fs_mark run failed across the restart: {}\nmount log:\n{}",
        failure.unwrap(),
        mount.log_tail()
    );
    eprintln!(
        "fs_mark: {before} runs finished before the SIGKILL, {} after",
        done.len() / LOOP_THREADS - before
    );
    check_fs_mark_runs(&done, &mnt, server.addr, &mount, &|| {
        // Requests the restarted server answered without executing them (from a resend
        // record, or by joining one under way) say whether a lost create was ever executed.
        let (_, _, metrics) = mds_testkit::http(server.metrics, "GET", "/metrics")
            .unwrap_or_else(|e| (0, String::new(), e.to_string()));
        let answered: Vec<&str> = metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                ["resent", "replayed", "reconnects", "op=\"create\""]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .collect();
        format!(
            "the restarted server's metrics:\n{}\n{}",
            answered.join("\n"),
            store_evidence(
                &env.mds,
                &data,
                &[("first", &first_log), ("restarted", &server.log)],
            )
        )
    });

    mount.finish();
    assert!(server.stop().success());
    let (code, text) = mds_testkit::fsck(&env.mds, &data);
    assert_eq!(code, 0, "mds fsck after a clean stop:\n{text}");
}

#[test]
fn fsync_under_early_replies_survives_the_server_and_the_mount_dying() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let data = tmp.path().join("data");
    let early = ["--ack", "early", "--recovery-window", "2s"];
    let server = Server::start(&env.mds, &data, &early);
    let (_short, mnt) = mount_point();
    let mount = Mount::start(&env, server.addr, &mnt, &tmp.path().join("mount.log"));

    // No mount survives to replay anything: what fsync answered must have been committed.
    let runs = FsMarkLoop::start(&mnt.join("crash"), tmp.path());
    wait_until(Duration::from_secs(120), "3 fs_mark runs", || {
        runs.finished() >= 3
    });
    std::thread::sleep(Duration::from_millis(150));
    let first_log = server.log.clone();
    server.kill();
    mount.kill();
    let (done, _failure) = runs.stop();
    eprintln!(
        "fs_mark under --ack early: {} runs finished before the SIGKILL",
        done.len() / LOOP_THREADS
    );

    let server = Server::start(&env.mds, &data, &early);
    let mount = Mount::start(&env, server.addr, &mnt, &tmp.path().join("mount2.log"));
    check_fs_mark_runs(&done, &mnt, server.addr, &mount, &|| {
        store_evidence(
            &env.mds,
            &data,
            &[("first", &first_log), ("restarted", &server.log)],
        )
    });
    mount.finish();
    assert!(server.stop().success());
    let (code, text) = mds_testkit::fsck(&env.mds, &data);
    assert_eq!(code, 0, "mds fsck after a clean stop:\n{text}");
}

// ---------------------------------------------------------------------------------------------
// Trees

/// xorshift64*: the same trees on every run, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `len` bytes of text lines, as source files are.
    fn text(&mut self, len: usize) -> Vec<u8> {
        const WORDS: [&str; 16] = [
            "commit",
            "inode",
            "journal",
            "reply",
            "fsync",
            "rename",
            "xattr",
            "mount",
            "lookup",
            "dentry",
            "server",
            "client",
            "batch",
            "durable",
            "namespace",
            "mds",
        ];
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            out.extend_from_slice(WORDS[self.below(16) as usize].as_bytes());
            out.push(if self.below(8) == 0 { b'\n' } else { b' ' });
        }
        out.truncate(len);
        out
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// `files` files in two levels of directories, text of 0 to 3 KiB with a few binary ones.
fn write_files(root: &Path, files: usize, rng: &mut Rng) -> Vec<PathBuf> {
    let mut paths = Vec::with_capacity(files);
    for i in 0..files {
        let dir = root.join(format!("d{:02}/s{}", i % 40, (i / 40) % 3));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("f{i:04}.txt"));
        let len = rng.below(3072) as usize;
        let body = if i % 97 == 0 {
            rng.bytes(len)
        } else {
            rng.text(len)
        };
        fs::write(&path, body).unwrap();
        paths.push(path);
    }
    paths
}

fn git(dir: &Path, home: &Path) -> Command {
    let mut cmd = bounded(300, "git");
    cmd.arg("-C")
        .arg(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "mds suites")
        .env("GIT_AUTHOR_EMAIL", "suites@mds.invalid")
        .env("GIT_COMMITTER_NAME", "mds suites")
        .env("GIT_COMMITTER_EMAIL", "suites@mds.invalid")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z");
    cmd
}

/// A repository of 1,200 files in three commits (add; edit, delete, add, rename; modes and
/// symlinks), and a bare copy of it to clone from.
fn build_repository(base: &Path) -> PathBuf {
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    let mut rng = Rng(0x6d64_7321);
    check(
        git(&src, base).args(["-c", "init.defaultBranch=main", "init", "-q"]),
        "git init",
    );
    let paths = write_files(&src, 1200, &mut rng);
    // 12 MiB that does not compress: the pack is over 10 MiB, so a clone writes files past
    // the server's inline cap (they go to the object store).
    fs::write(src.join("blob.bin"), rng.bytes(12 << 20)).unwrap();
    check(git(&src, base).args(["add", "-A"]), "git add");
    check(
        git(&src, base).args(["commit", "-q", "-m", "first"]),
        "git commit",
    );
    for (i, path) in paths.iter().enumerate() {
        match i % 12 {
            0 => fs::write(path, rng.text(500)).unwrap(),
            1 if i % 24 == 1 => fs::remove_file(path).unwrap(),
            _ => {}
        }
    }
    write_files(&src.join("new"), 60, &mut rng);
    for i in 0..20 {
        let from = format!("d{:02}/s0/f{:04}.txt", i, i + 40 * 3 * 2);
        if src.join(&from).exists() {
            check(
                git(&src, base).args(["mv", &from, &format!("d{i:02}/moved{i}.txt")]),
                "git mv",
            );
        }
    }
    check(git(&src, base).args(["add", "-A"]), "git add");
    check(
        git(&src, base).args(["commit", "-q", "-m", "second"]),
        "git commit",
    );
    for path in paths.iter().skip(5).step_by(50).filter(|p| p.exists()) {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    symlink("d00/s0/f0000.txt", src.join("link-to-file")).unwrap();
    symlink("d01", src.join("link-to-dir")).unwrap();
    check(git(&src, base).args(["add", "-A"]), "git add");
    check(
        git(&src, base).args(["commit", "-q", "-m", "third"]),
        "git commit",
    );
    let files = check(git(&src, base).args(["ls-files"]), "git ls-files");
    assert!(
        files.lines().count() >= 1000,
        "the repository has ≥ 1,000 files"
    );
    bare_clone(&src, &base.join("bare.git"), base)
}

/// A bare clone of the repository at `src`, at `bare`, to clone from.
fn bare_clone(src: &Path, bare: &Path, home: &Path) -> PathBuf {
    check(
        bounded(300, "git")
            .args(["clone", "-q", "--bare"])
            .arg(src)
            .arg(bare)
            .env("HOME", home),
        "git clone --bare",
    );
    bare.to_path_buf()
}

/// `git fsck`, `git status` and `diff -r` of the clone at `clone` against `local`.
fn check_clone(clone: &Path, local: &Path, home: &Path) {
    let fsck = git(clone, home)
        .args(["fsck", "--full", "--strict", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        fsck.status.success() && fsck.stdout.is_empty(),
        "git fsck on the mount: {}\n{}",
        fsck.status,
        both(&fsck)
    );
    let status = check(
        git(clone, home).args(["status", "--porcelain", "--ignored"]),
        "git status",
    );
    assert!(status.is_empty(), "git status on the mount:\n{status}");
    let count = check(
        git(clone, home).args(["rev-list", "--count", "HEAD"]),
        "rev-list",
    );
    assert_eq!(count.trim(), "3");
    let diff = bounded(300, "diff")
        .args(["-r", "--no-dereference", "--exclude=.git"])
        .arg(clone)
        .arg(local)
        .output()
        .unwrap();
    assert!(
        diff.status.success() && diff.stdout.is_empty(),
        "diff -r against the local clone: {}\n{}",
        diff.status,
        both(&diff)
    );
}

#[test]
fn git_clone_onto_the_mount_is_clean() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let base = tmp.path();
    let bare = build_repository(base);
    let url = format!("file://{}", bare.display());
    let local = base.join("local");
    check(
        bounded(300, "git")
            .args(["clone", "-q", &url])
            .arg(&local)
            .env("HOME", base),
        "git clone (local disk)",
    );

    let server = Server::start(&env.mds, &base.join("data"), &[]);
    let (_short, mnt) = mount_point();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount.log"));
    let clone = mnt.join("clone");
    let started = Instant::now();
    let out = bounded(300, "git")
        .args(["clone", "-q", &url])
        .arg(&clone)
        .env("HOME", base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git clone onto the mount: {}\n{}\nmount log:\n{}",
        out.status,
        both(&out),
        mount.log_tail()
    );
    eprintln!(
        "git clone of 1,200+ files onto mdsmount: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    check_clone(&clone, &local, base);
    let pack: u64 = fs::read_dir(clone.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(pack > 10 << 20, "the pack is over 10 MiB: {pack} bytes");

    // Again from a fresh mount: what the server has, not the kernel's page cache.
    mount.finish();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount2.log"));
    check_clone(&clone, &local, base);
    mount.finish();
    assert!(server.stop().success());
}

/// A tree with everything tar records: files (empty, text, binary), modes with
/// set-ID and sticky bits, owners other than root, hard links, symlinks, fifos, a character
/// device, empty directories, and mtimes of its own (set last, deepest first).
fn build_tar_tree(root: &Path, files: usize, seed: u64) {
    let mut rng = Rng(seed);
    let paths = write_files(root, files, &mut rng);
    for (i, path) in paths.iter().enumerate() {
        let mode = [0o644, 0o600, 0o755, 0o444, 0o4755, 0o2750, 0o640][i % 7];
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        if i % 5 == 0 {
            std::os::unix::fs::lchown(path, Some(1000 + (i % 3) as u32), Some(2000)).unwrap();
        }
        if i % 31 == 0 {
            fs::hard_link(path, path.with_extension("hard")).unwrap();
        }
        if i % 29 == 0 {
            symlink(path.file_name().unwrap(), path.with_extension("sym")).unwrap();
        }
    }
    let special = root.join("special");
    fs::create_dir_all(special.join("empty/deeper")).unwrap();
    for (name, mode, dev) in [
        ("fifo", libc::S_IFIFO | 0o640, 0),
        ("null", libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
    ] {
        let c = std::ffi::CString::new(special.join(name).as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path, as root.
        assert_eq!(
            unsafe { libc::mknod(c.as_ptr(), mode, dev) },
            0,
            "mknod {name}"
        );
    }
    fs::write(special.join("empty-file"), b"").unwrap();
    symlink("../d00/s0/f0000.txt", special.join("up")).unwrap();
    symlink("/nowhere/at/all", special.join("dangling")).unwrap();
    let sticky = root.join("sticky");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    // mtimes: everything below `root`, deepest first, so a directory's is set after its
    // entries (as tar x does), and symlinks' own.
    let mut all = Vec::new();
    walk(root, &mut all);
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, p) in all
        .iter()
        .chain(std::iter::once(&root.to_owned()))
        .enumerate()
    {
        let secs = 1_600_000_000 + (i as i64) * 3_607;
        let times = [
            libc::timespec {
                tv_sec: secs,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: secs,
                tv_nsec: 0,
            },
        ];
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path and two timespecs.
        let r = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        assert_eq!(r, 0, "utimensat {}", p.display());
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            walk(&path, out);
        }
        out.push(path);
    }
}

/// `tar cf ARCHIVE --sort=name --numeric-owner -C PARENT NAME`: members in name order (a
/// directory's own order differs between file systems), nothing else normalised.
fn tar_c(parent: &Path, name: &str, archive: &Path) {
    check(
        bounded(300, "tar")
            .arg("cf")
            .arg(archive)
            .args(["--sort=name", "--numeric-owner", "-C"])
            .arg(parent)
            .arg(name),
        "tar c",
    );
}

/// `tar tvf` of both archives where they differ, then the first differing byte.
fn same_archive(a: &Path, b: &Path) -> Result<(), String> {
    let (x, y) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    if x == y {
        return Ok(());
    }
    let list = |p: &Path| {
        check(
            bounded(60, "tar")
                .args(["tvf"])
                .arg(p)
                .args(["--numeric-owner", "--full-time"]),
            "tar tvf",
        )
    };
    let (lx, ly) = (list(a), list(b));
    let mut report: Vec<String> = lx
        .lines()
        .zip(ly.lines())
        .filter(|(p, q)| p != q)
        .take(30)
        .map(|(p, q)| format!("- {p}\n+ {q}"))
        .collect();
    let first = x
        .iter()
        .zip(&y)
        .position(|(p, q)| p != q)
        .unwrap_or(x.len().min(y.len()));
    report.push(format!(
        "{} and {}: {} and {} bytes, first difference at byte {first}; {} and {} members",
        a.display(),
        b.display(),
        x.len(),
        y.len(),
        lx.lines().count(),
        ly.lines().count()
    ));
    Err(report.join("\n"))
}

fn tar_x(archive: &Path, into: &Path) -> Command {
    let mut cmd = bounded(600, "tar");
    cmd.arg("xf").arg(archive).arg("-C").arg(into);
    cmd
}

#[test]
fn tar_x_then_tar_c_round_trips_byte_for_byte() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let base = tmp.path();
    let local = base.join("local");
    build_tar_tree(&local.join("tree"), 600, 0x7461_7221);
    let a = base.join("a.tar");
    tar_c(&local, "tree", &a);

    let server = Server::start(&env.mds, &base.join("data"), &[]);
    let (_short, mnt) = mount_point();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount.log"));
    let out = tar_x(&a, &mnt).output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "tar x onto the mount: {}\n{}\nmount log:\n{}",
        out.status,
        both(&out),
        mount.log_tail()
    );
    let b = base.join("b.tar");
    tar_c(&mnt, "tree", &b);
    if let Err(e) = same_archive(&a, &b) {
        panic!("tar c from the mount differs from the archive untarred:\n{e}");
    }
    // From a fresh mount: what the server holds.
    mount.finish();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount2.log"));
    let c = base.join("c.tar");
    tar_c(&mnt, "tree", &c);
    if let Err(e) = same_archive(&a, &c) {
        panic!("tar c from a fresh mount differs from the archive untarred:\n{e}");
    }
    mount.finish();
    assert!(server.stop().success());
}

#[test]
fn sigkill_of_the_server_mid_untar_loses_nothing() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let base = tmp.path();
    let local = base.join("local");
    build_tar_tree(&local.join("first"), 300, 0x0001);
    build_tar_tree(&local.join("second"), 3000, 0x0002);
    let (a1, a2) = (base.join("first.tar"), base.join("second.tar"));
    tar_c(&local, "first", &a1);
    tar_c(&local, "second", &a2);

    let data = base.join("data");
    let early = ["--ack", "early"];
    let server = Server::start(&env.mds, &data, &early);
    let addr = server.addr;
    let (_short, mnt) = mount_point();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount.log"));
    check(&mut tar_x(&a1, &mnt), "tar x of the first tree");
    // fsync of the mount's root: everything so far is durable (coreutils' sync of a directory
    // is an fsync of it; sync -f, syncfs, would never reach a FUSE server).
    check(
        bounded(60, "sync").arg(&mnt),
        "sync (fsync) of the mount's root",
    );

    // The second tree, its members counted as tar names them; SIGKILL a third of the way in.
    let mut tar = tar_x(&a2, &mnt)
        .arg("-v")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let members = Arc::new(Mutex::new(0usize));
    let counter = {
        let (members, stdout) = (members.clone(), tar.stdout.take().unwrap());
        std::thread::spawn(move || {
            for _ in BufReader::new(stdout).lines() {
                *members.lock().unwrap() += 1;
            }
        })
    };
    wait_until(Duration::from_secs(300), "1,000 members untarred", || {
        *members.lock().unwrap() >= 1000
    });
    server.kill();
    let at_kill = *members.lock().unwrap();
    let server = Server::start(
        &env.mds,
        &data,
        &["--listen", &addr.to_string(), "--ack", "early"],
    );
    let status = tar.wait().unwrap();
    counter.join().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut tar.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        status.success() && stderr.is_empty(),
        "tar x across the SIGKILL (at member {at_kill}): {status}\n{stderr}\nmount log:\n{}",
        mount.log_tail()
    );
    eprintln!("tar x: SIGKILL of the server at member {at_kill}; tar finished cleanly");

    mount.finish();
    assert!(server.stop().success());
    let (code, text) = mds_testkit::fsck(&env.mds, &data);
    assert_eq!(code, 0, "mds fsck after a clean stop:\n{text}");

    let server = Server::start(&env.mds, &data, &early);
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount2.log"));
    for (name, archive) in [("first", &a1), ("second", &a2)] {
        let back = base.join(format!("{name}-back.tar"));
        tar_c(&mnt, name, &back);
        if let Err(e) = same_archive(archive, &back) {
            panic!("the {name} tree after the SIGKILL and a restart:\n{e}");
        }
    }
    mount.finish();
    assert!(server.stop().success());
}

// ---------------------------------------------------------------------------------------------
// Real work past the inline cap: the object store

/// A server and a mount of it with the default settings (`--inline-data-max 1MiB`, the object
/// store in the store's `objects/`), for one test's work in `base`.
fn default_mount(env: &Env, base: &Path) -> (Server, Mount, PathBuf, tempfile::TempDir) {
    let server = Server::start(&env.mds, &base.join("data"), &[]);
    let (short, mnt) = mount_point();
    let mount = Mount::start(env, server.addr, &mnt, &base.join("mount.log"));
    (server, mount, mnt, short)
}

/// The server stopped and its store checked: fsck clean.
fn stop_and_fsck(server: Server, base: &Path) {
    assert!(server.stop().success());
    let (code, report) = mds_testkit::fsck(&mds_testkit::bin("mds"), &base.join("data"));
    assert_eq!(code, 0, "fsck: {report}");
}

#[test]
fn cp_a_of_python_onto_the_mount_is_the_same_tree() {
    let Some(env) = env() else { return };
    let source = fs::read_dir("/usr/lib")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3.") && p.is_dir())
        })
        .max()
        .expect("a /usr/lib/python3.* (python3 is installed by install-deps.sh)");
    let tmp = scratch();
    let base = tmp.path();
    let (server, mount, mnt, _short) = default_mount(&env, base);
    let started = Instant::now();
    check(
        bounded(600, "cp")
            .arg("-a")
            .arg(&source)
            .arg(mnt.join("py")),
        "cp -a onto the mount",
    );
    let on_mount = started.elapsed().as_secs_f64();
    let started = Instant::now();
    check(
        bounded(600, "cp")
            .arg("-a")
            .arg(&source)
            .arg(base.join("py")),
        "cp -a on the local disk",
    );
    let local = started.elapsed().as_secs_f64();
    eprintln!(
        "cp -a {} ({}): {on_mount:.1} s onto mdsmount, {local:.1} s on the local disk",
        source.display(),
        check(bounded(60, "du").args(["-sh"]).arg(&source), "du").trim()
    );
    check(
        bounded(600, "diff")
            .args(["-r", "--no-dereference"])
            .arg(&source)
            .arg(mnt.join("py")),
        "diff -r against the source",
    );
    // What the server and the object store hold, not the kernel's page cache.
    mount.finish();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount2.log"));
    check(
        bounded(600, "diff")
            .args(["-r", "--no-dereference"])
            .arg(&source)
            .arg(mnt.join("py")),
        "diff -r through a fresh mount",
    );
    mount.finish();
    stop_and_fsck(server, base);
}

/// An autotools project in a git repository, as one is kept upstream (configure.ac and
/// Makefile.am, no generated files): 40 units in a library and a main that sums what each
/// returns; a static table makes each object a few hundred KiB, so the archive make builds is
/// past the inline cap. Returns the bare repository.
fn autotools_repository(base: &Path) -> PathBuf {
    let src = base.join("units-src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..40 {
        fs::write(
            src.join(format!("u{i}.c")),
            format!(
                "static const int table[65536] = {{ [65535] = {i} }};\n\
                 int unit{i}(void) {{ return table[65535] + {i}; }}\n"
            ),
        )
        .unwrap();
    }
    let (mut decls, mut calls) = (String::new(), String::new());
    for i in 0..40 {
        writeln!(decls, "int unit{i}(void);").unwrap();
        writeln!(calls, "    sum += unit{i}();").unwrap();
    }
    let main = format!(
        "#include \"config.h\"\n#include <stdio.h>\n{decls}int main(void) {{\n    \
         long sum = 0;\n{calls}    printf(\"%s %ld\\n\", PACKAGE_STRING, sum);\n    \
         return 0;\n}}\n"
    );
    fs::write(src.join("main.c"), main).unwrap();
    fs::write(
        src.join("configure.ac"),
        "AC_INIT([units], [1.0])\n\
         AM_INIT_AUTOMAKE([foreign -Wall -Werror subdir-objects])\n\
         AC_PROG_CC\n\
         AM_PROG_AR\n\
         AC_PROG_RANLIB\n\
         AC_CHECK_HEADERS([stdio.h unistd.h fcntl.h])\n\
         AC_CHECK_FUNCS([fsync ftruncate])\n\
         AC_CONFIG_HEADERS([config.h])\n\
         AC_CONFIG_FILES([Makefile])\n\
         AC_OUTPUT\n",
    )
    .unwrap();
    let units: Vec<String> = (0..40).map(|i| format!("u{i}.c")).collect();
    fs::write(
        src.join("Makefile.am"),
        format!(
            "noinst_LIBRARIES = libunits.a\nlibunits_a_SOURCES = {}\n\
             bin_PROGRAMS = prog\nprog_SOURCES = main.c\nprog_LDADD = libunits.a\n",
            units.join(" ")
        ),
    )
    .unwrap();
    check(
        git(&src, base).args(["-c", "init.defaultBranch=main", "init", "-q"]),
        "git init",
    );
    check(git(&src, base).args(["add", "-A"]), "git add");
    check(
        git(&src, base).args(["commit", "-q", "-m", "units"]),
        "git commit",
    );
    bare_clone(&src, &base.join("units.git"), base)
}

/// A clone of `bare` at `dir`, then `autoreconf -fi`, `./configure`, `make -j2` in it; the
/// built program's output.
fn clone_configure_make(bare: &Path, dir: &Path, home: &Path, what: &str) -> String {
    check(
        bounded(300, "git")
            .args(["clone", "-q"])
            .arg(bare)
            .arg(dir)
            .env("HOME", home),
        &format!("git clone {what}"),
    );
    check(
        bounded(600, "autoreconf").arg("-fi").current_dir(dir),
        &format!("autoreconf {what}"),
    );
    check(
        bounded(600, dir.join("configure")).current_dir(dir),
        &format!("./configure {what}"),
    );
    check(
        bounded(600, "make").args(["-s", "-j2"]).current_dir(dir),
        &format!("make {what}"),
    );
    check(
        &mut bounded(60, dir.join("prog")),
        &format!("the program built {what}"),
    )
}

#[test]
fn a_c_project_cloned_onto_the_mount_configures_builds_and_runs() {
    let Some(env) = env() else { return };
    for tool in ["autoreconf", "automake", "make", "cc"] {
        assert!(
            which(tool).is_some(),
            "{tool} not found: run MDS_TEST_DEPS=1 scripts/install-deps.sh"
        );
    }
    let tmp = scratch();
    let base = tmp.path();
    let bare = autotools_repository(base);
    let local = clone_configure_make(&bare, &base.join("units-local"), base, "on the local disk");
    let (server, mount, mnt, _short) = default_mount(&env, base);
    let on_mount = clone_configure_make(&bare, &mnt.join("units"), base, "on the mount");
    let sum: i64 = (0..40).map(|i| 2 * i).sum();
    assert_eq!(local.trim(), format!("units 1.0 {sum}"));
    assert_eq!(
        on_mount, local,
        "the program built on the mount against the local one"
    );
    assert!(fs::metadata(mnt.join("units/libunits.a")).unwrap().len() > 1 << 20);
    // The tree configure and make left: the same files, byte for byte, apart from what
    // records where it was built or when (configure's log and status, automake's cache).
    let diff = bounded(300, "diff")
        .args([
            "-r",
            "--no-dereference",
            "--exclude=.git",
            "--exclude=autom4te.cache",
            "--exclude=config.log",
            "--exclude=config.status",
            "--exclude=Makefile",
            "--exclude=*.o",
            "--exclude=*.a",
            "--exclude=prog",
            "--exclude=.deps",
        ])
        .arg(mnt.join("units"))
        .arg(base.join("units-local"))
        .output()
        .unwrap();
    assert!(
        diff.status.success() && diff.stdout.is_empty(),
        "diff -r of the built trees: {}\n{}",
        diff.status,
        both(&diff)
    );
    mount.finish();
    stop_and_fsck(server, base);
}

#[test]
fn sqlite_past_100_mib_and_a_2_gib_file_come_back_whole() {
    let Some(env) = env() else { return };
    let tmp = scratch();
    let base = tmp.path();
    let (server, mount, mnt, _short) = default_mount(&env, base);
    // SQLite: 120 transactions of 10 rows of 100 KiB (~117 MiB), each committed (its journal
    // and the database fsynced), then read back through a fresh mount.
    let write = r#"
import os, sqlite3, sys, hashlib
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB, digest TEXT)")
db.commit()
for tx in range(120):
    rows = []
    for r in range(10):
        i = tx * 10 + r
        body = hashlib.shake_256(str(i).encode()).digest(100 * 1024)
        rows.append((i, body, hashlib.sha256(body).hexdigest()))
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    db.commit()
db.close()
print(os.path.getsize(sys.argv[1]))
"#;
    let read = r#"
import sqlite3, sys, hashlib
db = sqlite3.connect(sys.argv[1])
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
n = 0
for i, body, digest in db.execute("SELECT id, body, digest FROM t ORDER BY id"):
    assert i == n and hashlib.sha256(body).hexdigest() == digest, i
    n += 1
assert n == 1200, n
print(n)
"#;
    let db = mnt.join("big.sqlite");
    let size: u64 = check(
        bounded(600, "python3").args(["-c", write]).arg(&db),
        "SQLite writes on the mount",
    )
    .trim()
    .parse()
    .unwrap();
    assert!(size > 100 << 20, "the database is past 100 MiB: {size}");
    // 2 GiB of a seeded pattern written with dd's block size, hashed as it goes.
    let big = mnt.join("two-gib");
    let hash = r#"
import hashlib, sys
path, mode = sys.argv[1], sys.argv[2]
h = hashlib.sha256()
block = hashlib.shake_256(b"mds").digest(1 << 20)
if mode == "write":
    with open(path, "wb") as f:
        for i in range(2048):
            b = bytes([i % 251]) + block[1:]
            f.write(b)
            h.update(b)
        f.flush()
        import os
        os.fsync(f.fileno())
else:
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
print(h.hexdigest())
"#;
    let started = Instant::now();
    let written = check(
        bounded(900, "python3")
            .args(["-c", hash])
            .arg(&big)
            .arg("write"),
        "writing 2 GiB on the mount",
    );
    eprintln!(
        "2 GiB written through mdsmount: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(fs::metadata(&big).unwrap().len(), 2 << 30);
    mount.finish();
    let mount = Mount::start(&env, server.addr, &mnt, &base.join("mount2.log"));
    check(
        bounded(600, "python3").args(["-c", read]).arg(&db),
        "SQLite reads through a fresh mount",
    );
    let started = Instant::now();
    let back = check(
        bounded(900, "python3")
            .args(["-c", hash])
            .arg(&big)
            .arg("read"),
        "reading 2 GiB through a fresh mount",
    );
    eprintln!(
        "2 GiB read through mdsmount: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(written, back, "the 2 GiB file's SHA-256");
    mount.finish();
    stop_and_fsck(server, base);
}
