//! A cluster in a test: `mds cluster init` against the test's etcd, and its servers (one per
//! shard, or standbys) as processes.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mds_client::Client;
use mds_testkit::{Etcd, Server};

use super::MDS;

pub const TTL: &str = "3";

pub fn mds(args: &[&str]) -> (i32, String) {
    let out = Command::new(MDS).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

pub fn init(etcd: &Etcd, root: &Path, shards: &str, extra: &[&str]) {
    let mut args = vec![
        "cluster",
        "init",
        "--etcd",
        &etcd.endpoint,
        "--shards",
        shards,
        "--lease-ttl",
        TTL,
        "--data-root",
        root.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out) = mds(&args);
    assert_eq!(code, 0, "{out}");
}

/// A shard's server (`--shard N`) or a standby (`None`).
pub fn start(etcd: &Etcd, root: &Path, shard: Option<u16>, extra: &[&str]) -> Server {
    let shard_text = shard.map(|s| s.to_string());
    let mut args = vec!["--etcd", &etcd.endpoint];
    match &shard_text {
        Some(s) => args.extend(["--shard", s]),
        None => args.push("--standby"),
    }
    args.extend_from_slice(extra);
    let data = root.join(format!("shard-{}", shard.unwrap_or(0)));
    Server::start_with(Path::new(MDS), &args, &data)
}

pub fn wait_exit(server: &mut Server, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = server.exited() {
            return Some(status.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Waits until `server` serves (its "listening on" after the claim), and connects.
pub async fn serving(server: &Server) -> Client {
    assert!(
        server.wait_for_log("mds serving", Duration::from_secs(30)),
        "{}",
        server.log_text()
    );
    server.client().await
}

/// `mdsctl --server ADDR ARGS…`, which must succeed: its stdout.
pub fn mdsctl(server: std::net::SocketAddr, args: &[&str]) -> String {
    let out = Command::new(mds_testkit::bin("mdsctl"))
        .args(["--server", &server.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "mdsctl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
