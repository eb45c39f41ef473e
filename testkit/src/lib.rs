//! Test support shared by the integration tests of every crate (a dev-dependency only): starts the real `mds` binary
//! on 127.0.0.1 with OS-picked ports (or a given one), reads the addresses it logs, and stops
//! or kills it; the process is killed when the handle drops. Not used by the server itself.
//! `MDS_TEST_REPLY_PATH` (e.g. `global`) starts every server on that reply path. [`garage`]
//! starts a Garage cluster, the S3-compatible object store the object-store tests run against.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mds_client::Client;

pub mod garage;

pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    pub data: PathBuf,
    /// Everything the server logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `bin serve` on `data` with 2 partitions and `extra` flags; listens on an
    /// OS-picked port unless `extra` has `--listen`.
    pub fn start(bin: &Path, data: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--data", data.to_str().expect("a UTF-8 test path")];
        args.extend_from_slice(extra);
        Server::start_with(bin, &args, data)
    }

    /// Starts `bin serve` with `extra` flags and no `--data` (a cluster's server opens the
    /// store its claim names); `data` is where the test expects that store. Returns once the
    /// server logged both its addresses: a cluster's server does so once they are bound,
    /// before its claim (wait for "mds serving" to know it serves).
    pub fn start_with(bin: &Path, extra: &[&str], data: &Path) -> Server {
        Server::start_with_env(bin, extra, data, &[])
    }

    /// [`Server::start`] with `env` set in the server's environment (an object store's
    /// credentials).
    pub fn start_env(bin: &Path, data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["--data", data.to_str().expect("a UTF-8 test path")];
        args.extend_from_slice(extra);
        Server::start_with_env(bin, &args, data, env)
    }

    fn start_with_env(bin: &Path, extra: &[&str], data: &Path, env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(bin);
        cmd.envs(env.iter().copied());
        cmd.arg("serve");
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(["--metrics-listen", "127.0.0.1:0"]);
        if !extra.contains(&"--partitions") {
            cmd.args(["--partitions", "2"]);
        }
        // The reply tests run once per reply path: scripts/test.sh runs them again with
        // MDS_TEST_REPLY_PATH=global.
        if let Ok(path) = std::env::var("MDS_TEST_REPLY_PATH")
            && !path.is_empty()
            && !extra.contains(&"--reply-path")
        {
            cmd.args(["--reply-path", &path]);
        }
        cmd.args(extra)
            .env("MDS_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting mds");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    // Logged before it is handed on: whoever waited for a line finds it, and
                    // everything before it, in `log_text`.
                    log.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut addr, mut metrics) = (None, None);
        while addr.is_none() || metrics.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("mds did not start: {:?}", log.lock().unwrap()));
            let first_word = |rest: &str| rest.split_whitespace().next().unwrap_or("").parse().ok();
            if let Some(rest) = line.split("metrics endpoint on ").nth(1) {
                metrics = first_word(rest);
            } else if let Some(rest) = line.split("listening on ").nth(1) {
                addr = first_word(rest);
            }
        }
        Server {
            child: Some(child),
            addr: addr.unwrap(),
            metrics: metrics.unwrap(),
            data: data.to_owned(),
            log,
        }
    }

    /// A connected client with a fresh identity.
    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await.expect("connecting")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGTERM, then waits for the exit (60 s at most).
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        wait_timeout(&mut child, Duration::from_secs(60))
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) without waiting for anything.
    pub fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("running");
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, signal) };
    }

    /// Waits for the exit (60 s at most), after [`Server::signal`].
    pub fn wait(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        wait_timeout(&mut child, Duration::from_secs(60))
    }

    /// SIGKILL: the server gets no chance to do anything.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to `limit`) until the server has logged a line containing `text`; returns
    /// whether it did.
    pub fn wait_for_log(&self, text: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.log.lock().unwrap().iter().any(|l| l.contains(text)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The exit status, if the server has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_timeout(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mds did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A binary of this workspace (`mds`, `mdsctl`, `loadgen`), found beside the running test:
/// test executables live in `target/<profile>/deps/`, binaries in `target/<profile>/`, and
/// `cargo test --workspace` builds every binary before it runs any test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable lives in target/<profile>/deps");
    let bin = profile_dir.join(name);
    assert!(
        bin.exists(),
        "{} missing: run the tests with --workspace so every binary is built",
        bin.display()
    );
    bin
}

/// The directory of the package whose test is running, as cargo tells the running test.
/// Not `env!("CARGO_MANIFEST_DIR")` in the test: a test binary that another checkout sharing
/// the target directory built is fresh to cargo (the same sources), and carries that
/// checkout's path, which may be gone.
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .expect("CARGO_MANIFEST_DIR: run the tests through cargo test")
}

/// What `package` depends on through the `edges` kinds (`normal`, `normal,build`), as
/// `cargo tree --offline --prefix none` lists it: the text, and the crate each line names.
/// Run with the cargo running the test, read when it runs: the one named at build time may be
/// gone (a target directory shared by two checkouts keeps binaries another checkout built).
pub fn dependency_tree(package: &str, edges: &str) -> (String, Vec<String>) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            package,
            "-e",
            edges,
            "--prefix",
            "none",
        ])
        .current_dir(package_dir())
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout).into_owned();
    let crates = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    (tree, crates)
}

/// `bin fsck --data DIR`: (exit code, stdout and stderr).
pub fn fsck(bin: &Path, data: &Path) -> (i32, String) {
    let out = Command::new(bin)
        .args(["fsck", "--data"])
        .arg(data)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// One plain HTTP/1.0 request to the metrics endpoint (no chunking; the server closes):
/// (status, headers, body). Blocking: call it from `spawn_blocking` in async tests.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_owned(), body.to_owned()))
}

/// The value of one series in a `/metrics` text, by its name and labels exactly as written
/// (`mds_sessions`, `mds_requests_total{op="create",result="ok"}`); `None` if absent.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Scrapes `addr`'s `/metrics` and reads one series (see [`metric_value`]). Blocking.
pub fn scrape_metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let (_, _, body) = http(addr, "GET", "/metrics").ok()?;
    metric_value(&body, series)
}

/// Makes the child `cmd` starts die (SIGKILL) when the thread that starts it ends, so a test
/// process that dies without unwinding leaves no daemon behind — for a FUSE daemon, the kernel
/// then aborts its connection and nothing hangs on the mount.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl(2) in the child between fork and exec is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// A one-member etcd (Debian's `etcd-server`) on two free loopback ports, its data on tmpfs
/// (`/dev/shm`: a slow fdatasync there could let every lease expire, etcd #15247). Killed and
/// its data removed when dropped, and killed when the thread that started it ends: start it
/// on the test's own thread.
pub struct Etcd {
    child: Child,
    /// `127.0.0.1:PORT`, as `--etcd` takes it.
    pub endpoint: String,
    dir: PathBuf,
    peer: u16,
}

impl Etcd {
    /// Starts etcd, waiting (60 s at most) until it serves clients. Panics, saying what to
    /// install, if there is no `etcd` binary.
    ///
    /// Its two ports are free a moment before etcd binds them, not reserved: something else
    /// may take one meanwhile, and etcd then exits at once. That start is tried again on
    /// other ports (three tries in all); any other failure panics with what etcd said.
    pub fn start() -> Etcd {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/mds-test-etcd-{}-{n}", std::process::id()));
        for attempt in 1..=3 {
            let _ = std::fs::remove_dir_all(&dir);
            let (client, peer) = two_free_ports();
            match Etcd::try_spawn(&dir, client, peer) {
                Ok(child) => {
                    return Etcd {
                        child,
                        endpoint: format!("127.0.0.1:{client}"),
                        dir,
                        peer,
                    };
                }
                Err(EtcdFailed::Exited(said))
                    if attempt < 3 && said.contains("address already in use") => {}
                Err(failed) => panic!("{failed}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Kills etcd (SIGKILL) and starts it again on the same data and ports after `away`.
    pub fn restart_after(&mut self, away: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(away);
        let client = self.endpoint.rsplit(':').next().unwrap().parse().unwrap();
        self.child =
            Etcd::try_spawn(&self.dir, client, self.peer).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts etcd and waits (60 s at most) until it serves clients.
    fn try_spawn(dir: &Path, client: u16, peer: u16) -> Result<Child, EtcdFailed> {
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("test={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .expect("starting etcd: install Debian's etcd-server (scripts/install-deps.sh)");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("ready to serve client requests") => return Ok(child),
                Ok(line) => said.push(line),
                Err(timeout_or_gone) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let said = said[said.len().saturating_sub(20)..].join("\n");
                    return Err(match timeout_or_gone {
                        std::sync::mpsc::RecvTimeoutError::Timeout => EtcdFailed::Slow(said),
                        std::sync::mpsc::RecvTimeoutError::Disconnected => EtcdFailed::Exited(said),
                    });
                }
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to etcd (SIGSTOP/SIGCONT make an unreachable etcd).
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid(), signal) };
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Why etcd did not start, with the last lines it wrote.
#[derive(Debug)]
enum EtcdFailed {
    Slow(String),
    Exited(String),
}

impl std::fmt::Display for EtcdFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdFailed::Slow(said) => write!(f, "etcd did not start within 60 s; it said:\n{said}"),
            EtcdFailed::Exited(said) => write!(f, "etcd exited before it served; it said:\n{said}"),
        }
    }
}

/// Two different loopback ports, each free a moment ago (both held while the second is
/// picked, so they differ).
fn two_free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().expect("a bound port").port();
    (port(&a), port(&b))
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a free port")
        .port()
}
