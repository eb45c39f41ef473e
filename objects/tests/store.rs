//! Slices through `mds_objects::Store` against both kinds of store it opens: a local directory
//! (the embedded default) and a real S3 store (one Garage node, `mds_testkit::garage`). The
//! same checks on each: a slice of several blocks round-trips, ranges across its blocks read
//! back exactly, a read past what was stored and a read of a deleted slice are errors that
//! say so, a deletion may be repeated, and a listing finds each block by its slice id — and
//! only them.

use bytes::Bytes;
use mds_objects::{Address, BLOCK, Credentials, Error, Store, StoredBlock};
use mds_testkit::garage::Garage;

/// Bytes no two offsets of which repeat within a block, so a misplaced range shows.
fn pattern(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

async fn slices_round_trip(store: &Store) {
    let size = 2 * BLOCK as usize + 12_345;
    let data = pattern(size, 7);
    // In parts as a writer's buffers come, one across a block's end: stored as one run.
    let cuts = [0, 5, BLOCK as usize + 7, BLOCK as usize + 7, size];
    let parts: Vec<Bytes> = cuts.windows(2).map(|w| data.slice(w[0]..w[1])).collect();
    store.put_slice(0x4d2, &parts).await.unwrap();
    store.put_slice(0x4d3, &[pattern(100, 8)]).await.unwrap();

    let listing = store.list().await.unwrap();
    let blocks: Vec<(u64, u32, u64)> = listing
        .blocks
        .iter()
        .map(
            |&StoredBlock {
                 id, block, size, ..
             }| (id, block, size),
        )
        .collect();
    assert_eq!(
        blocks,
        [
            (0x4d2, 0, BLOCK),
            (0x4d2, 1, BLOCK),
            (0x4d2, 2, 12_345),
            (0x4d3, 0, 100)
        ]
    );
    assert_eq!(listing.foreign, 0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .cast_signed();
    assert!(
        listing
            .blocks
            .iter()
            .all(|b| (b.modified - now).abs() < 600)
    );

    let whole = store.read_slice(0x4d2, 0, size as u64).await.unwrap();
    assert!(whole == data, "the whole slice reads back");
    for (off, len) in [
        (0, 1),
        (BLOCK - 3, 10),                  // across the first boundary
        (BLOCK / 2, 3 * BLOCK / 2 + 100), // three blocks
        (size as u64 - 1, 1),             // the last byte
        (2 * BLOCK, 12_345),              // the short last block whole
        (17, 0),                          // nothing
    ] {
        let got = store.read_slice(0x4d2, off, len).await.unwrap();
        let (from, to) = (off as usize, (off + len) as usize);
        assert!(got == data.slice(from..to), "{len} bytes at {off}");
    }
    let past = store.read_slice(0x4d2, size as u64 - 10, 20).await;
    assert!(
        matches!(past, Err(Error::Short { stored, .. }) if stored == size as u64),
        "{past:?}"
    );
    let beyond = store.read_slice(0x4d2, 3 * BLOCK, 1).await;
    assert!(matches!(beyond, Err(Error::Missing { .. })), "{beyond:?}");

    store.delete_slice(0x4d2, size as u64).await.unwrap();
    store.delete_slice(0x4d2, size as u64).await.unwrap();
    let gone = store.read_slice(0x4d2, 0, 1).await;
    assert!(
        matches!(&gone, Err(Error::Missing { id: 0x4d2, .. })),
        "{gone:?}"
    );
    let left: Vec<u64> = store
        .list()
        .await
        .unwrap()
        .blocks
        .iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(left, [0x4d3]);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn slices_in_a_local_directory() {
    let dir = std::env::temp_dir().join(format!("mds-objects-{}", std::process::id()));
    let address = Address::parse(&format!("file://{}", dir.join("objects").display())).unwrap();
    let store = Store::open(&address).unwrap();
    runtime().block_on(async {
        slices_round_trip(&store).await;
        // Something else under the directory is counted, never taken for a slice.
        std::fs::write(dir.join("objects/slices/notes.txt"), b"x").unwrap();
        assert_eq!(store.list().await.unwrap().foreign, 1);
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slices_in_an_s3_store() {
    let garage = Garage::start(1);
    let address = Address::parse(&format!(
        "s3://{}/mds?endpoint={}&region={}",
        garage.bucket(),
        garage.endpoint(0),
        garage.region()
    ))
    .unwrap()
    .with_credentials(Credentials {
        key_id: garage.key_id().to_owned(),
        secret: garage.secret().to_owned(),
    });
    let store = Store::open(&address).unwrap();
    runtime().block_on(slices_round_trip(&store));

    // A wrong secret is refused by the store, and said so.
    let wrong = Store::open(&address.with_credentials(Credentials {
        key_id: garage.key_id().to_owned(),
        secret: "0".repeat(64),
    }))
    .unwrap();
    let refused = runtime().block_on(wrong.put_slice(9, &[Bytes::from_static(b"x")]));
    assert!(matches!(refused, Err(Error::Store(_))), "{refused:?}");
}
