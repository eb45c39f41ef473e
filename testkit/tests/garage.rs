//! object_store's S3 client (the one issue 55 stores file data through) against a real Garage
//! (`mds_testkit::garage`): put, get, ranged gets across Garage's 1 MiB blocks, a multipart
//! upload of 20 MiB, list under a prefix, delete.
//!
//! Three nodes, replication factor 3: then one node SIGKILLed. Garage reads and writes with a
//! quorum of 2 of 3 (its default `consistency_mode`), so every object put before must read back
//! whole through either live node, and new puts (plain and multipart) must succeed — with the
//! client's retries off, so no failure hides behind a retry (the first request a live node sends
//! on to the dead one may wait some seconds: see `mds_testkit::garage`; the client's timeout is
//! 30 s). The node started again answers for
//! everything, the objects put while it was down included. Then two nodes down: no quorum, and
//! a put must fail. One node, replication factor 1: the same round trip, and the objects survive
//! a SIGKILL and restart.
//!
//! Fails (does not skip) when `garage` is not installed: `MDS_TEST_DEPS=1 scripts/install-deps.sh`.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mds_testkit::garage::Garage;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

const MIB: usize = 1024 * 1024;

/// A client for `garage`'s bucket through `node`'s S3 API: path-style over plain HTTP, no retry.
fn store(garage: &Garage, node: usize) -> AmazonS3 {
    // reqwest has rustls without a crypto provider (no aws-lc-rs): ring, as the server's own TLS.
    let _ = rustls::crypto::ring::default_provider().install_default();
    AmazonS3Builder::new()
        .with_endpoint(garage.endpoint(node))
        .with_region(garage.region())
        .with_bucket_name(garage.bucket())
        .with_access_key_id(garage.key_id())
        .with_secret_access_key(garage.secret())
        .with_virtual_hosted_style_request(false)
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        // Allowing plain HTTP is a client option: the builder's own `with_allow_http` is lost
        // when `with_client_options` replaces them all.
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_secs(30)),
        )
        .build()
        .expect("building the S3 client")
}

/// `len` bytes that do not compress (Garage compresses its blocks with zstd): xorshift64.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An object the test put, with what it holds.
struct Object {
    path: Path,
    bytes: Vec<u8>,
}

async fn put(s: &AmazonS3, path: &str, bytes: Vec<u8>) -> Object {
    let path = Path::from(path);
    s.put(&path, PutPayload::from(bytes.clone()))
        .await
        .unwrap_or_else(|e| panic!("put {path}: {e}"));
    Object { path, bytes }
}

/// A multipart upload of `parts` (S3 wants every part but the last at least 5 MiB).
async fn put_multipart(s: &AmazonS3, path: &str, parts: &[Vec<u8>]) -> Object {
    let path = Path::from(path);
    let mut upload = s
        .put_multipart(&path)
        .await
        .unwrap_or_else(|e| panic!("starting the multipart upload of {path}: {e}"));
    for (i, part) in parts.iter().enumerate() {
        upload
            .put_part(PutPayload::from(part.clone()))
            .await
            .unwrap_or_else(|e| panic!("part {i} of {path}: {e}"));
    }
    upload
        .complete()
        .await
        .unwrap_or_else(|e| panic!("completing the multipart upload of {path}: {e}"));
    Object {
        path,
        bytes: parts.concat(),
    }
}

/// Reads `object` whole and two ranges of it (one across a 1 MiB block boundary when it is
/// that long), and its size from HEAD.
async fn check(s: &AmazonS3, object: &Object) {
    let path = &object.path;
    let got = s
        .get(path)
        .await
        .unwrap_or_else(|e| panic!("get {path}: {e}"))
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert!(
        got[..] == object.bytes[..],
        "{path}: {} bytes read, {} put, or different bytes",
        got.len(),
        object.bytes.len()
    );
    let len = object.bytes.len() as u64;
    for range in [1..len.min(100), len / 2 - len / 4..len / 2 + len / 4 + 1] {
        let got = s
            .get_range(path, range.clone())
            .await
            .unwrap_or_else(|e| panic!("get {path} {range:?}: {e}"));
        let want = &object.bytes[range.start as usize..range.end as usize];
        assert!(got[..] == want[..], "{path} {range:?}: other bytes");
    }
    let meta = s
        .head(path)
        .await
        .unwrap_or_else(|e| panic!("head {path}: {e}"));
    assert_eq!(meta.size, len, "{path}: size from HEAD");
}

/// The paths and sizes under `prefix`, sorted.
async fn list(s: &AmazonS3, prefix: &str) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = s
        .list(Some(&Path::from(prefix)))
        .map_ok(|meta| (meta.location.to_string(), meta.size))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("list {prefix}: {e}"));
    found.sort();
    found
}

/// Every operation once: returns the objects left in the bucket.
async fn round_trip(s: &AmazonS3) -> Vec<Object> {
    let small = put(s, "files/small", data(1000, 1)).await;
    let blocks = put(s, "files/blocks", data(3 * MIB + 123, 2)).await;
    let big = put_multipart(
        s,
        "files/big",
        &[data(8 * MIB, 3), data(8 * MIB, 4), data(4 * MIB, 5)],
    )
    .await;
    let elsewhere = put(s, "other/one", data(10, 6)).await;
    for object in [&small, &blocks, &big, &elsewhere] {
        check(s, object).await;
    }
    assert_eq!(
        list(s, "files").await,
        vec![
            ("files/big".to_owned(), 20 * MIB as u64),
            ("files/blocks".to_owned(), 3 * MIB as u64 + 123),
            ("files/small".to_owned(), 1000),
        ],
    );
    s.delete(&elsewhere.path).await.expect("delete");
    match s.get(&elsewhere.path).await {
        Err(object_store::Error::NotFound { .. }) => {}
        other => panic!("get after delete: {other:?}"),
    }
    assert_eq!(list(s, "other").await, vec![]);
    vec![small, blocks, big]
}

#[test]
fn object_store_on_three_nodes_survives_one_killed() {
    let started = Instant::now();
    let mut garage = Garage::start(3);
    eprintln!("3 Garage nodes healthy in {:.1?}", started.elapsed());
    let rt = runtime();
    let (s0, s1) = (store(&garage, 0), store(&garage, 1));
    let phase = Instant::now();
    let mut objects = rt.block_on(round_trip(&s0));
    eprintln!("round trip in {:.1?}", phase.elapsed());

    garage.kill(2);
    let phase = Instant::now();
    rt.block_on(async {
        for object in &objects {
            check(&s0, object).await;
            check(&s1, object).await;
        }
        objects.push(put(&s1, "files/while-down", data(2 * MIB, 7)).await);
        objects.push(
            put_multipart(
                &s0,
                "files/big-while-down",
                &[data(6 * MIB, 8), data(MIB, 9)],
            )
            .await,
        );
        for object in &objects[3..] {
            check(&s0, object).await;
            check(&s1, object).await;
        }
        assert_eq!(list(&s1, "files").await.len(), 5);
    });
    eprintln!(
        "one node down: read all, 2 new puts, in {:.1?}",
        phase.elapsed()
    );
    // Garage counts node 2 down once its connection to it drops.
    let deadline = Instant::now() + Duration::from_secs(30);
    while garage.status(0) != "degraded" {
        assert!(
            Instant::now() < deadline,
            "node 0 still says {}",
            garage.status(0)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let phase = Instant::now();
    garage.restart(2);
    eprintln!("node 2 back, cluster healthy, in {:.1?}", phase.elapsed());
    let s2 = store(&garage, 2);
    rt.block_on(async {
        for object in &objects {
            check(&s2, object).await;
        }
    });

    // Two of three down: neither a read nor a write quorum.
    garage.kill(1);
    garage.kill(2);
    let phase = Instant::now();
    let refused = rt.block_on(s0.put(
        &Path::from("files/no-quorum"),
        PutPayload::from(data(10, 10)),
    ));
    assert!(refused.is_err(), "a put with 2 of 3 nodes down succeeded");
    eprintln!(
        "put with 2 of 3 down refused in {:.1?}: {}",
        phase.elapsed(),
        refused.unwrap_err()
    );
    eprintln!("whole test {:.1?}", started.elapsed());
}

#[test]
fn object_store_on_one_node() {
    let started = Instant::now();
    let mut garage = Garage::start(1);
    eprintln!("1 Garage node healthy in {:.1?}", started.elapsed());
    let rt = runtime();
    let objects = rt.block_on(round_trip(&store(&garage, 0)));
    garage.kill(0);
    garage.restart(0);
    rt.block_on(async {
        let s = store(&garage, 0);
        for object in &objects {
            check(&s, object).await;
        }
    });
    eprintln!("whole test {:.1?}", started.elapsed());
}
