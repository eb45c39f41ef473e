//! What one CREATE costs the namespace, with nothing else around it: `Namespace::execute` of
//! creates into directories that grow as loadgen's do (names with loadgen's shape: a long
//! prefix shared by every name of a lane, then a counter), its record returned rather than
//! sent. The partition, the session, the reply queue and the committer are not here; this is
//! the part of the server's CPU per create that grows with directory size (the name search)
//! and with the inode table (its hash map). What it cannot show is the cache: its names are
//! allocated one after another into one directory, where the server's arrive interleaved with
//! everything else it allocates, for 64 directories at once. So a change to how names are
//! stored is measured in the server (`bench/before-after.sh`, server CPU per create): keeping
//! names inline in the directory's nodes read +17% here at 10k entries and saved 8.6% of the
//! server's CPU per create at 64 x 16.
//!
//! Run: `cargo bench --release -p mds --bench create_path`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use journal::{Journal, JournalOptions, ROOT_INO};
use mds::namespace::{Caller, Exec, Namespace};
use mds_proto::{Body, Cred, Op};

/// Entries in each directory before every sample's timed creates (what a loadgen lane's
/// directory holds after a few seconds at 64 x 16, and a large one); each sample's creates are
/// unlinked again, untimed, so the size stays put. The name clones are timed: the server also
/// owns each name it is given.
const SIZES: [usize; 2] = [10_000, 200_000];

fn create(ns: &Namespace, cred: &Cred, parent: u64, name: String) -> Exec {
    let caller = Caller {
        client: 1,
        cred,
        last_committed: 0,
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    ns.execute(
        Op::Create {
            parent,
            name,
            mode: 0o644,
        },
        &caller,
    )
}

fn creates(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (journal, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let ns = Namespace::load(&journal, &recovered).unwrap();
    let cred = Cred {
        uid: 1000,
        gid: 100,
        ..Cred::default()
    };
    let mut group = c.benchmark_group("namespace_create");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    for (d, size) in SIZES.into_iter().enumerate() {
        let Exec::Mutation {
            body: Body::Attr(attr),
            ..
        } = ns.execute(
            Op::Mkdir {
                parent: ROOT_INO,
                name: format!("t{d}"),
                mode: 0o777,
            },
            &Caller {
                client: 1,
                cred: &cred,
                last_committed: 0,
                reuse_ino: None,
                replay: false,
                atime: mds_proto::Atime::default(),
            },
        )
        else {
            panic!("mkdir failed");
        };
        // loadgen's names: "f.<lane prefix>-<counter>".
        let prefix = format!("f.ab26e64c9d{d:02}-7-");
        for i in 0..size {
            create(&ns, &cred, attr.ino, format!("{prefix}{i}"));
        }
        let next = size;
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter_custom(|iters| {
                let names: Vec<String> = (0..iters)
                    .map(|i| format!("{prefix}{}", next + i as usize))
                    .collect();
                let started = Instant::now();
                for name in &names {
                    black_box(create(&ns, &cred, attr.ino, name.clone()));
                }
                let spent = started.elapsed();
                // Back to `size` entries, untimed, so every sample measures the same size.
                // Without commit-on-share, so removals leave no tombstones behind.
                let caller = Caller {
                    client: 1,
                    cred: &cred,
                    last_committed: u64::MAX,
                    reuse_ino: None,
                    replay: false,
                    atime: mds_proto::Atime::default(),
                };
                for name in names {
                    ns.execute(
                        Op::Unlink {
                            parent: attr.ino,
                            name,
                        },
                        &caller,
                    );
                }
                spent
            });
        });
    }
    group.finish();
}

criterion_group!(benches, creates);
criterion_main!(benches);
