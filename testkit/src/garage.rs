//! A real S3-compatible object store for tests: a Garage cluster (crates.io `garage`, a tool the
//! tests run and never link) of one or three nodes on 127.0.0.1, replication factor = nodes, each
//! node on OS-picked free ports with its metadata (SQLite) and data under its own temp directory.
//! [`Garage::start`] returns once every node is up, the layout is applied and every node reports
//! the cluster healthy, with a key allowed to read, write and own one bucket: what an S3 client
//! needs is in [`Garage::endpoint`], [`Garage::region`], [`Garage::key_id`], [`Garage::secret`]
//! and [`Garage::bucket`]. One node can be killed (SIGKILL) and started again on its data. Every
//! node is killed, and its directory removed, when the handle drops, failed test or not, and
//! when the thread that started it ends (start and restart it on the test's own thread).
//!
//! A missing `garage`, or another version than [`GARAGE_VERSION`], fails the test, saying to run
//! `MDS_TEST_DEPS=1 scripts/install-deps.sh`. A node that does not come up fails it with the
//! last lines that node logged.
//!
//! Quorum (Garage's `consistency_mode = "consistent"`, the default): with replication factor 3,
//! reads and writes each need 2 of the 3 copies, so one node down leaves the store available.
//! A read asks only as many nodes as its quorum needs, and the next one when one fails; but a
//! node sees a peer's death only when its next write to it fails (garage_net ends a connection
//! with its send loop, not at the peer's EOF), so right after a SIGKILL a read routed to the dead
//! node waits for that: up to the next ping, 15 s; 0 to 7 s seen here. A restarted node
//! is seen up by its peers only once they reconnect (every 30 s): [`Garage::restart`] has them
//! connect at once.

use std::fs::{self, File};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The Garage release these helpers were written against (`scripts/install-deps.sh` installs it).
pub const GARAGE_VERSION: &str = "2.5.0";

/// How long a node may take to answer, and the cluster to become healthy.
const UP_WITHIN: Duration = Duration::from_secs(60);

/// How long one `garage` command may take.
const COMMAND_WITHIN: Duration = Duration::from_secs(30);

/// A running Garage cluster; see the module's documentation.
pub struct Garage {
    bin: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
    rpc_secret: String,
    key_id: String,
    secret: String,
    bucket: String,
}

struct Node {
    child: Option<Child>,
    dir: PathBuf,
    rpc_port: u16,
    s3_port: u16,
    /// `<hex public key>@127.0.0.1:<rpc port>`, once the node has started once.
    id: String,
}

impl Node {
    fn config(&self) -> PathBuf {
        self.dir.join("garage.toml")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("garage.log")
    }
}

impl Garage {
    /// The S3 region every node answers for.
    pub const REGION: &'static str = "garage";

    /// Starts `nodes` nodes (1 or 3), replication factor `nodes`, and waits (60 s at most) until
    /// the cluster is healthy with a key and a bucket. Panics, with the failing node's log, if
    /// it does not get there.
    pub fn start(nodes: usize) -> Garage {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        assert!(
            nodes == 1 || nodes == 3,
            "a Garage cluster of 1 or 3 nodes, not {nodes}"
        );
        let bin = binary();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mds-test-garage-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut ports = free_ports(2 * nodes).into_iter();
        let nodes = (0..nodes)
            .map(|i| {
                let node_dir = dir.join(format!("node{i}"));
                fs::create_dir_all(&node_dir).expect("creating a Garage node's directory");
                Node {
                    child: None,
                    dir: node_dir,
                    rpc_port: ports.next().unwrap(),
                    s3_port: ports.next().unwrap(),
                    id: String::new(),
                }
            })
            .collect();
        let mut garage = Garage {
            bin,
            dir,
            nodes,
            rpc_secret: rpc_secret(n),
            key_id: String::new(),
            secret: String::new(),
            bucket: "mds-test".to_owned(),
        };
        garage.write_configs();
        for i in 0..garage.nodes.len() {
            garage.spawn(i);
        }
        for i in 0..garage.nodes.len() {
            garage.wait_answers(i);
            let id = garage.cli(i, &["node", "id", "--quiet"]);
            id.trim().clone_into(&mut garage.nodes[i].id);
        }
        // Each node's config names the others, so a node that restarts finds its peers even
        // if it never saved them; the running nodes are told once, here.
        garage.write_configs();
        for i in 1..garage.nodes.len() {
            let peer = garage.nodes[i].id.clone();
            garage.cli(0, &["node", "connect", &peer]);
        }
        let ids: Vec<String> = garage
            .nodes
            .iter()
            .map(|node| node.id.split('@').next().unwrap_or_default().to_owned())
            .collect();
        let mut assign = vec!["layout", "assign", "-z", "dc1", "-c", "1G"];
        assign.extend(ids.iter().map(String::as_str));
        garage.cli(0, &assign);
        garage.cli(0, &["layout", "apply", "--version", "1"]);
        garage.wait_healthy();

        let key = garage.json_api(0, "CreateKey", Some(r#"{"name": "mds-test"}"#));
        garage.key_id = json_str(&key, "accessKeyId");
        garage.secret = json_str(&key, "secretAccessKey");
        let bucket = garage.bucket.clone();
        garage.cli(0, &["bucket", "create", &bucket]);
        garage.cli(
            0,
            &[
                "bucket", "allow", "--read", "--write", "--owner", &bucket, "--key", "mds-test",
            ],
        );
        garage
    }

    /// How many nodes the cluster has (also its replication factor).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// `http://127.0.0.1:PORT`: the S3 API of `node` (any node serves every bucket; path-style
    /// requests only, Garage has no root domain here).
    pub fn endpoint(&self, node: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[node].s3_port)
    }

    pub fn region(&self) -> &str {
        Self::REGION
    }

    /// The access key id allowed on [`Garage::bucket`].
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The secret of [`Garage::key_id`].
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The one bucket, readable, writable and owned by [`Garage::key_id`].
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// SIGKILL `node` and wait for it to exit: it gets no chance to do anything.
    pub fn kill(&mut self, node: usize) {
        let mut child = self.nodes[node].child.take().expect("the node is running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts a killed `node` again on its data and ports, and waits (60 s at most) until it
    /// answers and, if every node is running, until every node reports the cluster healthy.
    pub fn restart(&mut self, node: usize) {
        assert!(self.nodes[node].child.is_none(), "node {node} is running");
        self.spawn(node);
        self.wait_answers(node);
        // The node connects to its peers at once, but a peer counts it up only over its own
        // connection to it, which it retries every 30 s: have each peer connect now.
        let id = self.nodes[node].id.clone();
        for other in 0..self.nodes.len() {
            if other != node && self.nodes[other].child.is_some() {
                self.cli(other, &["node", "connect", &id]);
            }
        }
        if self.nodes.iter().all(|n| n.child.is_some()) {
            self.wait_healthy();
        }
    }

    /// What `node` thinks of the cluster: `healthy` (every storage node connected),
    /// `degraded` (a write quorum for every partition) or `unavailable`.
    pub fn status(&self, node: usize) -> String {
        json_str(&self.json_api(node, "GetClusterHealth", None), "status")
    }

    /// Runs `garage -c <node's config> ARGS` against the running `node` (30 s at most) and
    /// returns its stdout; panics with its stderr and the node's log if it fails.
    pub fn cli(&self, node: usize, args: &[&str]) -> String {
        self.try_cli(node, args).unwrap_or_else(|said| {
            panic!(
                "garage {} failed on node {node}: {said}\n{}",
                args.join(" "),
                self.log_tail(node, 30)
            )
        })
    }

    /// The last `lines` lines `node` logged (all its runs), headed with its log's path.
    pub fn log_tail(&self, node: usize, lines: usize) -> String {
        let path = self.nodes[node].log();
        let text = fs::read_to_string(&path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        format!(
            "last lines of {}:\n{}",
            path.display(),
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }

    /// One config per node: everything on 127.0.0.1, SQLite metadata, no admin HTTP API (the
    /// CLI talks RPC), and the other nodes as bootstrap peers once their ids are known.
    fn write_configs(&self) {
        for (i, node) in self.nodes.iter().enumerate() {
            let peers: Vec<String> = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(j, other)| *j != i && !other.id.is_empty())
                .map(|(_, other)| format!("\"{}\"", other.id))
                .collect();
            let config = format!(
                r#"metadata_dir = "{dir}/meta"
data_dir = "{dir}/data"
db_engine = "sqlite"
replication_factor = {factor}
rpc_secret = "{secret}"
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
bootstrap_peers = [{peers}]

[s3_api]
api_bind_addr = "127.0.0.1:{s3}"
s3_region = "{region}"
"#,
                dir = node.dir.display(),
                factor = self.nodes.len(),
                secret = self.rpc_secret,
                rpc = node.rpc_port,
                s3 = node.s3_port,
                peers = peers.join(", "),
                region = Self::REGION,
            );
            fs::write(node.config(), config).expect("writing a Garage config");
        }
    }

    /// `garage server` for `node`, its stdout and stderr appended to its log.
    fn spawn(&mut self, node: usize) {
        let n = &self.nodes[node];
        let log = File::options()
            .create(true)
            .append(true)
            .open(n.log())
            .expect("opening a Garage node's log");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c")
            .arg(n.config())
            .arg("server")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle on the log"))
            .stderr(log);
        crate::die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("starting garage server");
        self.nodes[node].child = Some(child);
    }

    /// Waits until `node` answers on RPC (the CLI reaches it); panics with its log if it exits
    /// or does not answer in time.
    fn wait_answers(&mut self, node: usize) {
        let deadline = Instant::now() + UP_WITHIN;
        loop {
            let exited = self.nodes[node]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!(
                    "garage node {node} exited ({status}) before it answered\n{}",
                    self.log_tail(node, 30)
                );
            }
            match self.try_cli(node, &["json-api", "GetClusterHealth"]) {
                Ok(_) => return,
                Err(said) if Instant::now() > deadline => panic!(
                    "garage node {node} did not answer within {UP_WITHIN:?}: {said}\n{}",
                    self.log_tail(node, 30)
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Waits until every node reports the cluster healthy, with every node a storage node.
    fn wait_healthy(&self) {
        let deadline = Instant::now() + UP_WITHIN;
        for node in 0..self.nodes.len() {
            loop {
                let health = self.json_api(node, "GetClusterHealth", None);
                if json_str(&health, "status") == "healthy"
                    && health["storageNodes"].as_u64() == Some(self.nodes.len() as u64)
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the Garage cluster was not healthy within {UP_WITHIN:?}; node {node} says \
                     {health}\n{}",
                    self.log_tail(node, 30)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// `garage json-api ENDPOINT [PAYLOAD]` on `node`: the admin API over RPC, its answer
    /// parsed.
    fn json_api(&self, node: usize, endpoint: &str, payload: Option<&str>) -> serde_json::Value {
        let mut args = vec!["json-api", endpoint];
        args.extend(payload);
        let out = self.cli(node, &args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("garage json-api {endpoint} on node {node}: {e} in {out:?}"))
    }

    /// `garage -c <node's config> ARGS`: its stdout, or what it said if it failed.
    fn try_cli(&self, node: usize, args: &[&str]) -> Result<String, String> {
        let mut child = Command::new(&self.bin)
            .arg("-c")
            .arg(self.nodes[node].config())
            .args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running the garage CLI");
        // Read on threads: a full pipe would block the CLI before it exits.
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        let deadline = Instant::now() + COMMAND_WITHIN;
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for the garage CLI") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {COMMAND_WITHIN:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if status.success() {
            Ok(stdout)
        } else {
            Err(format!("{status}: {}", stderr.trim()))
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `garage` from PATH or cargo's bin directory, at [`GARAGE_VERSION`]; panics saying how to
/// install it otherwise.
pub fn binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("garage"))
            .find(|p| p.is_file())
    });
    let in_cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin/garage"))
        .filter(|p| p.is_file());
    let bin = on_path.or(in_cargo_bin).unwrap_or_else(|| {
        panic!(
            "garage not found (PATH, cargo's bin directory): run MDS_TEST_DEPS=1 \
             scripts/install-deps.sh (cargo install garage --locked --version {GARAGE_VERSION})"
        )
    });
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {} --version: {e}", bin.display()));
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        is_version(&version, GARAGE_VERSION),
        "{} is {}, the tests are written against garage {GARAGE_VERSION}: run MDS_TEST_DEPS=1 \
         scripts/install-deps.sh",
        bin.display(),
        version.trim()
    );
    bin
}

/// Whether `garage --version` (`garage cargo:2.5.0 [features: ...]`) names `version`.
fn is_version(said: &str, version: &str) -> bool {
    said.split(|c: char| c.is_whitespace() || c == ':')
        .any(|word| word.strip_prefix('v').unwrap_or(word) == version)
}

/// `count` different loopback ports, each free a moment ago (all held while the next is picked).
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}

/// 32 bytes in hex, different for each cluster: a node of another cluster (a test run that
/// left one behind) cannot join this one.
fn rpc_secret(n: u32) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{nanos:032x}{:024x}{n:08x}", std::process::id())
}

fn json_str(value: &serde_json::Value, field: &str) -> String {
    value[field]
        .as_str()
        .unwrap_or_else(|| panic!("no string {field} in {value}"))
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_garage_version_lines() {
        let said = "garage cargo:2.5.0 [features: bundled-libs, k2v, lmdb, metrics, sqlite]";
        assert!(is_version(said, "2.5.0"));
        assert!(is_version("garage v2.5.0", "2.5.0"));
        assert!(!is_version(said, "2.5"));
        assert!(!is_version("garage cargo:12.5.0", "2.5.0"));
    }

    #[test]
    fn rpc_secrets_are_32_bytes_of_hex() {
        let secret = rpc_secret(7);
        assert_eq!(secret.len(), 64, "{secret}");
        assert!(secret.chars().all(|c| c.is_ascii_hexdigit()), "{secret}");
        assert_ne!(secret, rpc_secret(8));
    }
}
