//! Bounds that keep one client, or a slow disk, from hurting everyone: a client that sends
//! requests and never reads its replies is paused (its requests are not executed past its
//! output high-water mark, even within one read) while others go on and the server's memory
//! stays bounded; the server's uncommitted work is capped without deadlock, and holds back
//! mutations only (reads go on while a writer waits at the cap); a full partition
//! refuses a connection with EBUSY; a connection that never sends CONNECT is closed.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::InProcess;
use mds_client::{Client, ClientError, ROOT};
use mds_proto::{Cred, Errno, MAX_READDIR, Op, PROTOCOL_VERSION, Request, encode_frame};

fn frame(xid: u64, op: Op) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let request = Request {
        xid,
        op,
        acked_xid: 0,
        cred: Cred::default(),
        replay: None,
    };
    encode_frame(&request, &mut buf);
    buf.to_vec()
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

async fn create_many(client: &Client, dir: u64, prefix: &str, n: usize) {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i:05}")).collect();
    for chunk in names.chunks(64) {
        let creates = chunk.iter().map(|name| client.create(dir, name, 0o644));
        for r in futures::future::join_all(creates).await {
            r.unwrap();
        }
    }
}

/// The server's memory while one client floods it with READDIRs of a big directory and never
/// reads: before the per-request check, 70 KB of such requests took it from 18 MB to 130 MB.
const RSS_GROWTH_BOUND: u64 = 64 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_is_paused_while_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let a = server.client().await;
    let big = a.mkdir(ROOT, "big", 0o755).await.unwrap();
    create_many(&a, big.ino, "entry-with-a-longish-name-", 3000).await;
    let before = rss(server.pid());

    // 4,000 READDIRs of 1,024 entries each, about 60 KB of reply per 30-byte request, from a
    // client that never reads.
    let addr = server.addr;
    let flood = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let connect = Op::Connect {
            version: PROTOCOL_VERSION,
            client: 0xf100d,
            atime: mds_proto::Atime::default(),
            ack: mds_proto::AckAsked::default(),
        };
        let mut bytes = frame(1, connect);
        for xid in 2..4002 {
            bytes.extend(frame(
                xid,
                Op::Readdir {
                    ino: big.ino,
                    cursor: None,
                    limit: MAX_READDIR,
                },
            ));
        }
        // Blocks once the server stops reading; the timeout ends it then.
        let _ = s.write_all(&bytes);
        s // kept open, unread, until the test is done
    });

    // Meanwhile another client is served: its creates all complete.
    let b = server.client().await;
    let other = b.mkdir(ROOT, "other", 0o755).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        create_many(&b, other.ino, "f", 1000),
    )
    .await
    .expect("the other client was starved");
    let slow = tokio::task::spawn_blocking(move || flood.join().unwrap())
        .await
        .unwrap();

    let after = rss(server.pid());
    assert!(
        after < before + RSS_GROWTH_BOUND,
        "server memory grew from {before} to {after} bytes"
    );
    let metrics = server.metrics;
    let paused = tokio::task::spawn_blocking(move || {
        mds_testkit::scrape_metric(metrics, "mds_reads_paused_total{reason=\"output\"}")
    })
    .await
    .unwrap();
    assert!(paused >= Some(1.0), "never paused: {paused:?}");
    drop(slow);
    assert_eq!(b.statfs().await.unwrap().files, 4000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_work_is_capped_without_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.max_uncommitted = 8;
    config.keys.commit_interval = Duration::from_millis(20);
    let server = InProcess::start(config);
    let clients: Vec<Client> = futures::future::join_all((0..4).map(|_| server.client())).await;
    let work = clients.iter().enumerate().map(|(i, c)| async move {
        let d = c.mkdir(ROOT, &format!("d{i}"), 0o755).await.unwrap();
        create_many(c, d.ino, "f", 100).await;
    });
    tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(work))
        .await
        .expect("capped work never finished");
    assert_eq!(clients[0].statfs().await.unwrap().files, 400);
    let metrics = server.metrics;
    let paused = tokio::task::spawn_blocking(move || {
        mds_testkit::scrape_metric(metrics, "mds_reads_paused_total{reason=\"uncommitted\"}")
    })
    .await
    .unwrap();
    assert!(paused >= Some(1.0), "the cap never applied: {paused:?}");
    drop(clients);
    server.stop().unwrap();
}

/// The uncommitted-work cap holds back mutations only: while a writer's creates wait at the
/// cap for a slow disk's commit, another connection's reads are answered at once. Before,
/// every connection paused at the cap, readers included, until the next commit (here 6 s
/// away; the bound below is half that, a liveness bound with seconds to spare, not a timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_while_a_writer_waits_at_the_uncommitted_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.max_uncommitted = 8;
    config.keys.testing.sync_latency = Some(Duration::from_secs(6));
    let server = InProcess::start(config);
    let writer = server.client().await;
    let reader = server.client().await;
    // Made and committed before the writer starts, so that the reads below touch nothing it
    // changes (they would rightly wait for its commit: commit-on-share).
    let (readme, d) = tokio::join!(
        reader.create(ROOT, "readme", 0o644),
        reader.mkdir(ROOT, "d", 0o777)
    );
    let (readme, d) = (readme.unwrap(), d.unwrap());
    let creates = tokio::spawn(async move {
        create_many(&writer, d.ino, "f", 64).await;
        writer
    });
    let metrics = server.metrics;
    let paused = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let paused = mds_testkit::scrape_metric(
                metrics,
                "mds_reads_paused_total{reason=\"uncommitted\"}",
            );
            if paused >= Some(1.0) || Instant::now() > deadline {
                return paused;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
    .await
    .unwrap();
    assert!(paused >= Some(1.0), "the writer never reached the cap");
    let reads = async {
        reader.getattr(ROOT).await.unwrap();
        reader.lookup(ROOT, "readme").await.unwrap();
        reader.getattr(readme.ino).await.unwrap();
        reader.statfs().await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(3), reads)
        .await
        .expect("a reader waited for the writer's commit");
    // The writer is not starved either: its creates all land.
    let writer = tokio::time::timeout(Duration::from_secs(120), creates)
        .await
        .expect("the capped writer never finished")
        .unwrap();
    assert_eq!(reader.readdir_all(d.ino).await.unwrap().len(), 64);
    drop((writer, reader));
    server.stop().unwrap();
}

/// Connects, retrying (bounded) while the server answers EBUSY.
async fn connect_when_free(addr: std::net::SocketAddr) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Client::connect(addr).await {
            Ok(c) => return c,
            Err(ClientError::Errno(Errno::EBUSY)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_with_ebusy_and_a_silent_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.keys.partitions = 1;
    config.limits.max_connections = 2;
    config.limits.connect_deadline = Duration::from_millis(300);
    let server = InProcess::start(config);
    // A connection that never says CONNECT is closed after the deadline (first, while the
    // partition has free slots: past its limit it would be refused instead).
    let addr = server.addr;
    let closed = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(0))
    })
    .await
    .unwrap();
    assert!(closed, "a silent connection was kept");
    // Slots free when a connection's task ends, a moment after the client sees it close.
    let first = connect_when_free(server.addr).await;
    let second = connect_when_free(server.addr).await;
    match Client::connect(server.addr).await {
        Err(e) => assert_eq!(e.errno(), Some(Errno::EBUSY), "{e}"),
        Ok(_) => panic!("a third connection was let in past the limit of two"),
    }
    // A slot frees when a client leaves.
    drop(second);
    let third = connect_when_free(server.addr).await;
    third.ping().await.unwrap();
    drop((first, third));

    let metrics = server.metrics;
    let (refused, timed_out) = tokio::task::spawn_blocking(move || {
        let (_, _, text) = mds_testkit::http(metrics, "GET", "/metrics").unwrap();
        (
            mds_testkit::metric_value(&text, "mds_connections_refused_total"),
            mds_testkit::metric_value(&text, "mds_connections_timed_out_total{reason=\"connect\"}"),
        )
    })
    .await
    .unwrap();
    assert!(refused >= Some(1.0), "{refused:?}");
    assert_eq!(timed_out, Some(1.0));
    server.stop().unwrap();
}
