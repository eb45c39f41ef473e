//! Authentication at CONNECT and TLS on the client port, against the real `mds` binary (each
//! server its own process, so `mds_auth_failures_total` counts that server's refusals alone):
//! a client without the key, with a wrong key, or replaying a proof captured from another
//! connection is refused with EAUTH, closed, counted by reason and logged with its address;
//! with the key it works, also after a `ResilientConn` reconnects to a restarted server; a key
//! file others may read stops the server at start; a server on a non-loopback address without
//! a key warns; over TLS a client with the CA works, a plain-TCP client fails cleanly, and
//! authentication works through it.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::Server;
use mds_client::auth::AuthKey;
use mds_client::proto::{
    Body, Cred, Errno, NONCE_LEN, Op, PROTOCOL_VERSION, Reply, Request, decode, encode_frame,
};
use mds_client::resilient::{Outages, ResilientConn};
use mds_client::tls::TlsClient;
use mds_client::{Client, ClientError, ConnectOptions, ROOT, Session};

/// Writes a key file of `byte`s with `mode`; returns its path.
fn key_file(dir: &Path, name: &str, byte: u8, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, [byte; 32]).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn with_key(path: &Path) -> ConnectOptions {
    ConnectOptions {
        auth_key: Some(Arc::new(AuthKey::from_file(path).unwrap())),
        tls: None,
    }
}

async fn connect(server: &Server, options: &ConnectOptions) -> mds_client::Result<Client> {
    let addr = server.addr.to_string();
    let connecting = Client::connect_with(&addr, Arc::new(Session::new()), options);
    tokio::time::timeout(Duration::from_secs(20), connecting)
        .await
        .expect("a refusal comes at once, not after a hang")
}

fn failures(server: &Server, reason: &str) -> f64 {
    let series = format!("mds_auth_failures_total{{reason=\"{reason}\"}}");
    mds_testkit::scrape_metric(server.metrics, &series)
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// Waits (bounded) until `reason` has counted `want` refusals: a client that drops its
/// connection is counted when the server sees it go.
fn wait_failures(server: &Server, reason: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while failures(server, reason) != want {
        assert!(
            Instant::now() < deadline,
            "{reason}: {} refusals counted, want {want}",
            failures(server, reason)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A connection speaking the wire protocol by hand, to see and send the handshake's bytes.
struct Raw {
    stream: std::net::TcpStream,
    xid: u64,
}

impl Raw {
    fn open(server: &Server) -> Raw {
        let stream = std::net::TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Raw { stream, xid: 0 }
    }

    fn call(&mut self, op: Op) -> Reply {
        self.xid += 1;
        let mut buf = BytesMut::new();
        let request = Request {
            xid: self.xid,
            op,
            acked_xid: 0,
            cred: Cred::default(),
            replay: None,
        };
        encode_frame(&request, &mut buf);
        self.stream.write_all(&buf).unwrap();
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).unwrap();
        let mut payload = vec![0; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut payload).unwrap();
        decode(&payload).unwrap()
    }

    fn challenge(&mut self, client: u64) -> [u8; NONCE_LEN] {
        let version = PROTOCOL_VERSION;
        match self
            .call(Op::Connect {
                version,
                client,
                atime: mds_proto::Atime::default(),
                ack: mds_proto::AckAsked::default(),
            })
            .result
        {
            Ok(Body::Challenge { nonce, .. }) => nonce,
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    /// The server closed the connection: end of stream, nothing more.
    fn closed(mut self) -> bool {
        let mut rest = Vec::new();
        matches!(self.stream.read_to_end(&mut rest), Ok(0))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_by_reason_and_the_key_works_across_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key", 1, 0o600);
    let wrong = key_file(dir.path(), "wrong", 2, 0o600);
    let data = dir.path().join("data");
    let server = common::start(&data, &["--auth-key", key.to_str().unwrap()]);
    for reason in ["missing", "wrong", "replayed"] {
        assert_eq!(failures(&server, reason), 0.0, "{reason}");
    }

    // No key: told so, in words; the server counts the challenge that got no proof.
    let err = connect(&server, &ConnectOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::AuthRequired), "{err}");
    wait_failures(&server, "missing", 1.0);

    // Another key: EAUTH, and the connection is closed.
    let err = connect(&server, &with_key(&wrong)).await.unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EAUTH), "{err}");
    wait_failures(&server, "wrong", 1.0);

    // A captured handshake played again: the proof one connection sent for its nonce, sent
    // on a new connection, which was challenged with another nonce.
    let the_key = AuthKey::from_file(&key).unwrap();
    let client = 0x5eed;
    let mut first = Raw::open(&server);
    let nonce = first.challenge(client);
    let proof = the_key.proof(&nonce, client, PROTOCOL_VERSION);
    let accepted = first.call(Op::Authenticate {
        proof: Some(proof),
        session: None,
    });
    assert!(
        matches!(accepted.result, Ok(Body::Connected { .. })),
        "{accepted:?}"
    );
    assert!(matches!(first.call(Op::Ping).result, Ok(Body::Pong)));
    let mut replay = Raw::open(&server);
    let other_nonce = replay.challenge(client);
    assert_ne!(other_nonce, nonce, "every connection gets a fresh nonce");
    let refused = replay.call(Op::Authenticate {
        proof: Some(proof),
        session: None,
    });
    assert_eq!(refused.result, Err(Errno::EAUTH));
    assert!(replay.closed(), "a refused connection is closed");
    wait_failures(&server, "replayed", 1.0);

    // Anything but the proof after a challenge: EAUTH, closed, counted as missing.
    let mut skipper = Raw::open(&server);
    skipper.challenge(0xbee);
    assert_eq!(skipper.call(Op::Statfs).result, Err(Errno::EAUTH));
    assert!(skipper.closed());
    wait_failures(&server, "missing", 2.0);
    assert_eq!(failures(&server, "wrong"), 1.0);

    // Each refusal was logged at warn with the peer's address and its reason.
    let log = server.log_text();
    for reason in ["missing", "wrong", "replayed"] {
        assert!(
            log.lines().any(|l| l.contains("WARN")
                && l.contains("authentication failed")
                && l.contains("peer=127.0.0.1:")
                && l.contains(&format!("reason=\"{reason}\""))),
            "no warning for {reason}: {log}"
        );
    }
    assert!(
        !log.contains("NO AUTHENTICATION"),
        "a loopback server does not warn"
    );

    // With the key: files are made and read back, by the library and by a resilient
    // connection, which must prove the key again on its reconnect to a restarted server.
    let c = connect(&server, &with_key(&key)).await.unwrap();
    let made = c.create(ROOT, "with-key", 0o644).await.unwrap();
    assert_eq!(c.lookup(ROOT, "with-key").await.unwrap().ino, made.ino);
    let addr = server.addr.to_string();
    let resilient = ResilientConn::connect_with(
        &addr,
        with_key(&key),
        Arc::new(Session::new()),
        Duration::from_secs(30),
        Outages::new(),
    )
    .await
    .unwrap();
    let mkdir = |name: &str| Op::Mkdir {
        parent: ROOT,
        name: name.into(),
        mode: 0o755,
    };
    assert!(
        resilient
            .call(mkdir("before"))
            .await
            .unwrap()
            .reply
            .result
            .is_ok()
    );
    drop(c);
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let server = common::start(
        &data,
        &["--auth-key", key.to_str().unwrap(), "--listen", &addr],
    );
    let after = resilient.call(mkdir("after")).await.unwrap();
    assert!(after.reply.result.is_ok(), "{:?}", after.reply);
    let ok = "mds_requests_total{op=\"authenticate\",result=\"ok\"}";
    assert_eq!(mds_testkit::scrape_metric(server.metrics, ok), Some(1.0));
    let c = connect(&server, &with_key(&key)).await.unwrap();
    for name in ["with-key", "before", "after"] {
        c.lookup(ROOT, name).await.unwrap();
    }
}

#[tokio::test]
async fn a_server_without_a_key_takes_clients_with_and_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key", 1, 0o600);
    let server = common::InProcess::on(&dir.path().join("data"));
    let addr = server.addr.to_string();
    for options in [ConnectOptions::default(), with_key(&key)] {
        let c = Client::connect_with(&addr, Arc::new(Session::new()), &options)
            .await
            .unwrap();
        c.ping().await.unwrap();
    }
    server.stop().unwrap();
}

#[test]
fn a_key_file_others_may_read_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key", 1, 0o640);
    let out = std::process::Command::new(common::MDS)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--auth-key")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(key.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("0640"), "{stderr}");
    assert!(
        !dir.path().join("data").exists(),
        "refused before the store was touched"
    );
}

/// Tests listen on loopback only, so the warning itself is unit-tested beside
/// `server::exposure_warning`; here, that a loopback server without a key starts quietly (the
/// warning would be logged before "listening on", which `start` waits for).
#[test]
fn no_key_on_loopback_starts_without_the_exposure_warning() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("a"), &[]);
    assert!(server.log_text().contains("listening on"));
    assert!(!server.log_text().contains("NO AUTHENTICATION"));
}

/// A self-signed certificate for localhost and 127.0.0.1: (cert.pem, key.pem).
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

fn tls(ca: &Path, auth_key: Option<&Path>) -> ConnectOptions {
    ConnectOptions {
        auth_key: auth_key.map(|k| Arc::new(AuthKey::from_file(k).unwrap())),
        tls: Some(Arc::new(TlsClient::from_ca_file(ca, None).unwrap())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_ca_works_plain_tcp_fails_cleanly_and_the_key_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, private) = certificate(dir.path(), "server");
    let (stranger, _) = certificate(dir.path(), "stranger");
    let key = key_file(dir.path(), "key", 1, 0o600);
    let wrong = key_file(dir.path(), "wrong", 2, 0o600);
    let server = common::start(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            private.to_str().unwrap(),
            "--auth-key",
            key.to_str().unwrap(),
        ],
    );
    let tls_errors = "mds_protocol_errors_total{kind=\"tls\"}";

    let c = connect(&server, &tls(&cert, Some(&key))).await.unwrap();
    let dir_attr = c.mkdir(ROOT, "over-tls", 0o755).await.unwrap();
    for i in 0..100 {
        c.create(dir_attr.ino, &format!("f{i}"), 0o644)
            .await
            .unwrap();
    }
    let names = c.readdir_all(dir_attr.ino).await.unwrap();
    assert_eq!(names.len(), 100);
    assert_eq!(
        c.resolve("/over-tls/f42").await.unwrap().kind,
        names[0].kind
    );

    // Plain TCP on the TLS port: an error, not a hang; the server counts a failed TLS
    // handshake.
    let plain = connect(&server, &with_key(&key)).await.unwrap_err();
    assert!(
        matches!(plain, ClientError::Disconnected | ClientError::Io(_)),
        "{plain}"
    );
    // A certificate the client does not trust: refused by the client.
    let untrusted = connect(&server, &tls(&stranger, Some(&key)))
        .await
        .unwrap_err();
    assert!(matches!(untrusted, ClientError::Io(_)), "{untrusted}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while mds_testkit::scrape_metric(server.metrics, tls_errors) != Some(2.0) {
        assert!(
            Instant::now() < deadline,
            "TLS handshake failures not counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Authentication through TLS: no key and a wrong key are refused as on plain TCP.
    let err = connect(&server, &tls(&cert, None)).await.unwrap_err();
    assert!(matches!(err, ClientError::AuthRequired), "{err}");
    let err = connect(&server, &tls(&cert, Some(&wrong)))
        .await
        .unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EAUTH), "{err}");
    wait_failures(&server, "wrong", 1.0);
    wait_failures(&server, "missing", 1.0);
    assert!(server.log_text().contains("TLS handshake failed"));
}
