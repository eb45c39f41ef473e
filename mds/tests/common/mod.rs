//! The integration tests' harnesses: an in-process server (`serve` on a thread of the test,
//! addresses known before it starts, stopped through [`Stop`]) for everything that needs no
//! separate process, and `mds_testkit::Server` with this package's binary for what does
//! (SIGKILL, SIGTERM, the process's exit status and logs), and a scrape of `/metrics`.
#![allow(dead_code)]

pub mod cluster;
pub mod raw;

use std::net::SocketAddr;
use std::path::Path;
use std::thread::JoinHandle;

use mds::config::{Config, ServerConfig};
use mds::queue::ReplyPath;
use mds::server::{Listeners, Stop};
use mds_client::Client;
use mds_proto::{Body, Op, Reply};
pub use mds_testkit::Server;

pub const MDS: &str = env!("CARGO_BIN_EXE_mds");

/// Starts the `mds` binary on `data` with 2 partitions and `extra` flags.
pub fn start(data: &Path, extra: &[&str]) -> Server {
    Server::start(Path::new(MDS), data, extra)
}

/// `mds fsck --data DIR`: (exit code, output).
pub fn fsck(data: &Path) -> (i32, String) {
    mds_testkit::fsck(Path::new(MDS), data)
}

/// The configuration in-process servers start from: `data`, 2 partitions, OS-picked ports,
/// and the reply path `MDS_TEST_REPLY_PATH` names (per-CPU by default), as the binary gets it
/// from `mds_testkit::Server`.
pub fn config(data: &Path) -> ServerConfig {
    let reply_path = std::env::var("MDS_TEST_REPLY_PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .map(|p| {
            <ReplyPath as clap::ValueEnum>::from_str(&p, false)
                .unwrap_or_else(|e| panic!("MDS_TEST_REPLY_PATH: {e}"))
        });
    let defaults = Config::default();
    Config {
        data: data.to_owned(),
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        partitions: 2,
        reply_path: reply_path.unwrap_or(defaults.reply_path),
        ..defaults
    }
    .resolve()
    .expect("a valid configuration")
}

/// A server running on a thread of the test process.
pub struct InProcess {
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    stop: Stop,
    thread: Option<JoinHandle<mds::error::Result<()>>>,
}

impl InProcess {
    /// Binds, then serves `config` on its own thread.
    pub fn start(config: ServerConfig) -> InProcess {
        let listeners = Listeners::bind(&config).expect("binding 127.0.0.1");
        let (addr, metrics) = (listeners.client_addr(), listeners.metrics_addr());
        let stop = Stop::new();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || mds::server::serve(config, listeners, stop)
        });
        InProcess {
            addr,
            metrics,
            stop,
            thread: Some(thread),
        }
    }

    /// Starts one on `data` with the defaults of [`config`].
    pub fn on(data: &Path) -> InProcess {
        InProcess::start(config(data))
    }

    /// A connected client with a fresh identity.
    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await.expect("connecting")
    }

    /// Asks it to stop, as one SIGTERM would, and waits for `serve` to return.
    pub fn stop(mut self) -> mds::error::Result<()> {
        self.stop.request();
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("serve does not panic")
    }

    /// Asks it to stop and returns the handle to wait on, so a test can act meanwhile.
    pub fn request_stop(&self) -> &Stop {
        self.stop.request();
        &self.stop
    }

    /// Waits for `serve` to return (after [`InProcess::request_stop`]).
    pub fn join(mut self) -> mds::error::Result<()> {
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("serve does not panic")
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.request();
            self.stop.request();
            let _ = thread.join();
        }
    }
}

/// The names in directory `ino`, in READDIR order.
pub async fn names(client: &Client, ino: u64) -> Vec<String> {
    client
        .readdir_all(ino)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

/// `GET /metrics` from a server's metrics address: the text exposition (blocking; a few ms).
pub fn scrape(metrics: SocketAddr) -> String {
    let (status, head, body) =
        mds_testkit::http(metrics, "GET", "/metrics").expect("reading /metrics");
    assert_eq!(status, 200, "{head}");
    body
}

/// The value of the series `name` without labels in `text` (a [`scrape`]), if it is there.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    mds_testkit::metric_value(text, name)
}

/// A CREATE of `name` in `parent`, mode 0644, as the raw operation.
pub fn create(parent: u64, name: &str) -> Op {
    Op::Create {
        parent,
        name: name.into(),
        mode: 0o644,
    }
}

/// The inode number of an Attr reply.
pub fn ino(reply: &Reply) -> u64 {
    match &reply.result {
        Ok(Body::Attr(a)) => a.ino,
        other => panic!("not an Attr: {other:?}"),
    }
}
