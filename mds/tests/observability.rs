//! What users see in Prometheus and Grafana: `/metrics` from a server under load passes
//! `promtool check metrics` with no findings and has histograms, not summaries; and every
//! query of every dashboard panel returns series from a real Prometheus scraping a real mds
//! under load — one shard of a cluster and a standby following it (`--follow`), so that the
//! cluster row has series too. Needs
//! `promtool` and `prometheus` (Debian package `prometheus`) and `etcd` (`etcd-server`),
//! which `scripts/install-deps.sh` installs.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mds_client::{Client, ROOT};

/// A plain HTTP/1.0 GET (no chunking, the server closes): (status, body).
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    mds_testkit::http(addr, "GET", path).map(|(status, _, body)| (status, body))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Keeps a mixed workload running (creates, lookups, errors, syncs) until dropped.
struct Load {
    stop: Arc<AtomicBool>,
}

impl Load {
    async fn start(server: &common::Server) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        for t in 0..8u64 {
            let client: Client = server.client().await;
            let stop = stop.clone();
            tokio::spawn(async move {
                let dir = client
                    .mkdir(ROOT, &format!("load{t}"), 0o755)
                    .await
                    .unwrap()
                    .ino;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 1_000_000 {
                    let name = format!("f{n}");
                    let _ = client.create(dir, &name, 0o644).await;
                    let _ = client.lookup(dir, &name).await;
                    if n.is_multiple_of(50) {
                        let _ = client.create(dir, &name, 0o644).await; // EEXIST
                        let _ = client.sync().await;
                        let _ = client.readdir(dir, None, 100).await;
                    }
                    n += 1;
                }
            });
        }
        Load { stop }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_under_load_pass_promtool_and_are_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let load = Load::start(&server).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let addr = server.metrics;
    let (status, text) = tokio::task::spawn_blocking(move || http_get(addr, "/metrics"))
        .await
        .unwrap()
        .unwrap();
    drop(load);
    assert_eq!(status, 200);

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: run scripts/install-deps.sh (Debian package prometheus)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let findings =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool findings:\n{findings}"
    );

    assert!(
        !text.contains("quantile="),
        "a histogram was rendered as a summary"
    );
    for needed in [
        "mds_requests_total{op=\"create\",result=\"ok\"}",
        "mds_requests_total{op=\"create\",result=\"EEXIST\"}",
        "mds_request_duration_seconds_bucket{op=\"create\",le=\"0.001\"}",
        "mds_commit_transactions_bucket{le=\"100000\"}",
        "mds_commit_write_sync_duration_seconds_bucket",
        "mds_drain_duration_seconds_bucket{partition=\"1\"",
        "mds_partition_queue_depth{partition=\"0\"}",
        "mds_connections{partition=",
        "mds_forced_commits_total",
        "mds_session_reconnects_total ",
        "mds_sessions ",
        "mds_rocksdb_live_sst_bytes{cf=\"inodes\"}",
        "mds_rocksdb_stall_seconds_total",
        "mds_rocksdb_live_sst_bytes{cf=\"edits\"}",
        "mds_journal_checkpoints_total ",
        "mds_journal_checkpoint_seconds_total ",
        "mds_journal_edit_bytes ",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_max_fds",
        "mds_read_only 0",
        "mds_build_info{version=",
        "mds_inodes{kind=\"file\"}",
        "mds_last_commit_timestamp_seconds ",
        "mds_recovery_duration_seconds 0",
        "mds_recovery_evicted_clients_total{reason=\"hard_end\"} 0",
        "process_start_time_seconds",
    ] {
        assert!(text.contains(needed), "no {needed} in /metrics");
    }
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix}"))
    };
    assert!(value("mds_commits_total ") > 0.0);
    assert!(value("mds_requests_total{op=\"create\",result=\"EEXIST\"}") > 0.0);
    assert!(
        value("mds_forced_commits_total ") > 0.0,
        "SYNC forces commits"
    );
    assert!(
        value("mds_sessions ") >= 8.0,
        "the load's 8 clients are connected"
    );
}

struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(targets: &[SocketAddr]) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let targets = targets
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: mds\n    static_configs:\n      - targets: [{targets}]\n"
        ),
    )
    .unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus not found: run scripts/install-deps.sh (Debian package prometheus)");
    let prometheus = Prometheus {
        child,
        addr,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
        assert!(Instant::now() < deadline, "prometheus did not become ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    prometheus
}

fn query(prom: SocketAddr, expr: &str) -> serde_json::Value {
    let (status, body) =
        http_get(prom, &format!("/api/v1/query?query={}", url_encode(expr))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    assert_eq!(status, 200, "query {expr} failed: {body}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_series_from_a_real_prometheus() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../dashboards/mds.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let etcd = mds_testkit::Etcd::start();
    let init = std::process::Command::new(common::MDS)
        .args(["cluster", "init", "--etcd", &etcd.endpoint, "--shards", "1"])
        .args(["--lease-ttl", "3", "--data-root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let server = common::Server::start_with(
        std::path::Path::new(common::MDS),
        &["--etcd", &etcd.endpoint, "--shard", "0"],
        &dir.path().join("shard-0"),
    );
    // A standby following the shard: the standby panels' series.
    let standby = common::Server::start_with(
        std::path::Path::new(common::MDS),
        &["--etcd", &etcd.endpoint, "--standby", "--follow", "0"],
        &dir.path().join("standby"),
    );
    assert!(
        standby.wait_for_log("shard 0 loaded; following", Duration::from_secs(30)),
        "{}",
        standby.log_text()
    );
    // A server outside the cluster: the edit log's panels' series (a shard runs without).
    let standalone_dir = tempfile::tempdir().unwrap();
    let standalone = common::start(standalone_dir.path(), &[]);
    let target = server.metrics;
    let targets = [target, standby.metrics, standalone.metrics];
    let prom = tokio::task::spawn_blocking(move || start_prometheus(&targets))
        .await
        .unwrap();
    let load = Load::start(&server).await;

    // Wait until Prometheus holds several scrapes of a loaded server.
    let addr = prom.addr;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = tokio::task::spawn_blocking(move || {
            query(addr, "count_over_time(mds_commits_total[1m])")
        })
        .await
        .unwrap();
        let scrapes = v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        if scrapes >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus did not scrape mds: {v}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push((
                panel["title"].as_str().unwrap().to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    assert!(exprs.len() >= 20, "the dashboard lost panels");
    let empty = tokio::task::spawn_blocking(move || {
        let mut empty = Vec::new();
        for (title, expr) in exprs {
            let concrete = expr
                .replace("$instance", ".+")
                .replace("$__rate_interval", "20s");
            let v = query(addr, &concrete);
            let series = v["data"]["result"].as_array().map_or(0, std::vec::Vec::len);
            if v["status"] != "success" || series == 0 {
                empty.push(format!("{title}: {expr} -> {v}"));
            }
        }
        // The $instance variable's own query.
        let (_, body) = http_get(
            addr,
            "/api/v1/label/instance/values?match[]=mds_commits_total",
        )
        .unwrap();
        if !body.contains(&target.to_string()) {
            empty.push(format!("$instance: {body}"));
        }
        empty
    })
    .await
    .unwrap();
    drop(load);
    assert!(
        empty.is_empty(),
        "queries with no series:\n{}",
        empty.join("\n")
    );
}

/// The alert and recording rules load, and each alert fires for the instance that should
/// trip it and for no other (`dashboards/rules.test.yml`, run by `promtool test rules`).
#[test]
fn alert_rules_fire_when_they_should_and_only_then() {
    let dashboards = mds_testkit::package_dir().join("../dashboards");
    for args in [
        ["check", "rules", "rules.yml"],
        ["test", "rules", "rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dashboards)
            .output()
            .expect("promtool not found: run scripts/install-deps.sh (Debian package prometheus)");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
