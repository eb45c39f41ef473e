//! Fail-stop: when the journal's write or sync fails, no reply that needed it is sent as
//! success — those clients get EIO — and the server refuses mutations from then on while
//! reads go on; it exits non-zero, and a restart finds exactly what was acknowledged.

mod common;

use std::net::SocketAddr;

use common::fsck;
use mds_client::{ClientError, ROOT};
use mds_proto::Errno;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_answers_eio_and_turns_the_server_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &["--inject-journal-failure-after", "5"]);
    let c = server.client().await;
    let (status, body) = http(server.metrics, "GET", "/health");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let mut acked = Vec::new();
    let mut failed = None;
    for i in 0..20 {
        match c.create(ROOT, &format!("f{i}"), 0o644).await {
            Ok(_) => acked.push(format!("f{i}")),
            Err(ClientError::Errno(e)) => {
                failed = Some(e);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(acked.len(), 5, "five commits succeed, one create each");
    assert_eq!(failed, Some(Errno::EIO));
    // Mutations are refused from now on; reads still work.
    assert_eq!(
        c.mkdir(ROOT, "later", 0o755).await.unwrap_err().errno(),
        Some(Errno::EIO)
    );
    assert!(c.statfs().await.unwrap().read_only);
    // Reads go on, but none shows what was answered EIO: not the failed create's entry, not
    // the root's attributes it changed. What was acknowledged reads as before.
    let first = c.lookup(ROOT, &acked[0]).await.unwrap();
    c.getattr(first.ino).await.unwrap();
    let failed_name = format!("f{}", acked.len());
    assert_eq!(
        c.lookup(ROOT, &failed_name).await.unwrap_err().errno(),
        Some(Errno::EIO)
    );
    assert_eq!(c.getattr(ROOT).await.unwrap_err().errno(), Some(Errno::EIO));
    let (status, body) = http(server.metrics, "GET", "/health");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let (_, metrics) = http(server.metrics, "GET", "/metrics");
    assert!(metrics.contains("\nmds_read_only 1\n"), "{metrics}");
    // HEAD answers like GET without the body.
    let (status, body) = http(server.metrics, "HEAD", "/metrics");
    assert_eq!((status, body.as_str()), (200, ""));
    let log = server.log.clone();
    let status = tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    assert!(
        !status.success(),
        "a server whose journal failed exits non-zero"
    );
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("journal commit failed"))
    );

    let (code, out) = fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    let names = common::names(&c, ROOT).await;
    let mut expected = acked.clone();
    expected.sort();
    assert_eq!(names, expected);
}

/// One HTTP/1.0 request: (status, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let (status, head, body) = mds_testkit::http(addr, method, path).unwrap();
    assert!(head.contains("Content-Length: "), "{head}");
    (status, body)
}

/// A full disk: the client whose commit failed and every later mutation get ENOSPC, not EIO;
/// the server is read-only and says so; a restart finds exactly what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_enospc_and_turns_the_server_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(
        dir.path(),
        &[
            "--inject-journal-failure-after",
            "3",
            "--inject-journal-failure",
            "nospace",
        ],
    );
    let c = server.client().await;
    let mut acked = Vec::new();
    let failed = loop {
        let name = format!("f{}", acked.len());
        match c.create(ROOT, &name, 0o644).await {
            Ok(_) => acked.push(name),
            Err(e) => break e.errno(),
        }
    };
    assert_eq!(acked.len(), 3);
    assert_eq!(failed, Some(Errno::ENOSPC));
    assert_eq!(
        c.mkdir(ROOT, "later", 0o755).await.unwrap_err().errno(),
        Some(Errno::ENOSPC)
    );
    assert!(c.statfs().await.unwrap().read_only);
    let (_, metrics) = http(server.metrics, "GET", "/metrics");
    assert!(metrics.contains("\nmds_read_only 1\n"), "{metrics}");
    let log = server.log.clone();
    let status = tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    assert!(!status.success());
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("journal commit failed") && l.contains("no space left")),
        "{:?}",
        log.lock().unwrap()
    );
    let server = common::start(dir.path(), &[]);
    let c = server.client().await;
    assert_eq!(common::names(&c, ROOT).await, acked);
}
