//! The `/metrics` HTTP responder: a minimal HTTP/1.1 server on a listener of the server's own
//! that answers `GET /metrics` with the recorder's rendering, the request latencies
//! ([`super::latency`]) and the scrape-time figures ([`super::scrape`]), and `GET /health`
//! for load balancers and systemd-style checks (200 while the server accepts mutations, 503
//! once the journal failed), both also to `HEAD`; and it keeps the recorder's histograms
//! trimmed. It only reads: nothing here changes the server.
//!
//! It is bounded like the client port, since its descriptors are the process's (RocksDB's
//! among them): at most [`MAX_CONNECTIONS`] open at once (the next is answered 503 and
//! closed), and each must send its request head within [`REQUEST_DEADLINE`] and take its
//! answer within as long again, or it is closed unanswered.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::debug;

use super::scrape::ScrapeExtras;

/// Whether the server is healthy: `Err` says why not (the journal failed: read-only).
pub type Health = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Connections the endpoint serves at once: a scraper or two, a health check, a person.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send its request head, and again to take its answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` (Prometheus text format) on `listener` until the task is dropped:
/// the exporter's rendering, the request latencies and `extras`. A listener of our own, rather than the exporter's,
/// so the server can bind port 0 and log the address it got.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    extras: ScrapeExtras,
    health: Health,
) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        // Without upkeep, histogram samples pile up in the recorder (docs/architecture.md, "Metrics endpoint").
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let refused = metrics::counter!(super::METRICS_REFUSED);
    refused.increment(0);
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused.increment(1);
            debug!(%peer, "metrics endpoint: {MAX_CONNECTIONS} connections open; refusing");
            tokio::spawn(async move {
                let busy = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(busy)).await;
            });
            continue;
        };
        let handle = handle.clone();
        let extras = extras.clone();
        let health = health.clone();
        let refused = refused.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let Ok(Some(head)) =
                tokio::time::timeout(REQUEST_DEADLINE, read_head(&mut stream)).await
            else {
                refused.increment(1);
                debug!(%peer, "metrics endpoint: no complete request in time; closing");
                return;
            };
            let (status, ctype, body, method) = answer(&head, &handle, &extras, &health);
            debug!(%peer, status, "metrics request");
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let write = async {
                stream.write_all(reply.as_bytes()).await?;
                if method != "HEAD" {
                    stream.write_all(body.as_bytes()).await?;
                }
                stream.shutdown().await
            };
            let _ = tokio::time::timeout(REQUEST_DEADLINE, write).await;
        });
    }
}

/// Reads until the end of the request head (bodies are not expected), 4 KiB at most; `None`
/// if the connection closed or failed first.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let mut read = 0;
    while read < buf.len() {
        match stream.read(&mut buf[read..]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => read += n,
        }
        if buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&buf[..read]).into_owned())
}

/// The status, content type, body and method of the answer to the request `head`.
fn answer(
    head: &str,
    handle: &PrometheusHandle,
    extras: &ScrapeExtras,
    health: &Health,
) -> (&'static str, &'static str, String, String) {
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("");
    let readable = method == "GET" || method == "HEAD";
    let (status, ctype, body) = if readable && (path == "/metrics" || path.starts_with("/metrics?"))
    {
        let mut text = handle.render();
        super::write_request_durations(&mut text);
        extras(&mut text);
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
    } else if readable && path == "/health" {
        match health() {
            Ok(()) => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("{why}\n"),
            ),
        }
    } else if readable && path == "/" {
        (
            "200 OK",
            "text/plain; charset=utf-8",
            "mds: metrics at /metrics, health at /health\n".to_owned(),
        )
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".to_owned(),
        )
    };
    (status, ctype, body, method)
}
