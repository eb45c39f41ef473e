//! The ceiling every server figure is compared to: RocksDB's synced, batched write rate for
//! the records of a create (new inode, directory entry, updated parent), at batch sizes 1, 16,
//! 64, 256, 1024 and 4096 (64 and 1024 are the ceilings `bench/journal-ceiling.sh` puts beside
//! mds at that many outstanding creates). Throughput is in creates per second.
//!
//! Run: `cargo bench --release -p journal --bench group_commit`; one size alone:
//! `... -- 'journal_synced_create_batch/64$'` (a regex).

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use journal::{Dentry, FileKind, Inode, Journal, JournalOp, JournalOptions, ROOT_INO, TxRecord};

fn inode(ino: u64, kind: FileKind, transno: u64) -> Inode {
    Inode {
        ino,
        kind,
        mode: 0o644,
        uid: 1000,
        gid: 1000,
        nlink: 1,
        size: 0,
        ctime_ns: 1_700_000_000_000_000_000,
        mtime_ns: 1_700_000_000_000_000_000,
        generation: transno,
        parent: 0,
        entries: 0,
        transno,
        atime_ns: 0,
        rdev: 0,
        target: Vec::new(),
        data_blocks: 0,
    }
}

/// The records one CREATE journals: the new inode, its entry, and the parent's new mtime.
fn create_record(transno: u64, ino: u64) -> TxRecord {
    let mut parent = inode(ROOT_INO, FileKind::Directory, transno);
    parent.entries = transno;
    TxRecord {
        transno,
        ops: vec![
            JournalOp::PutInode(inode(ino, FileKind::File, transno)),
            JournalOp::PutDentry {
                parent: ROOT_INO,
                name: format!("f.{ino}").into(),
                entry: Dentry {
                    ino,
                    kind: FileKind::File,
                },
            },
            JournalOp::PutInode(parent),
        ],
    }
}

fn synced_batches(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal_synced_create_batch");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    group.warm_up_time(Duration::from_secs(1));
    for batch in [1usize, 16, 64, 256, 1024, 4096] {
        let dir = tempfile::tempdir_in(bench_dir()).unwrap();
        let (journal, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let mut next = rec.last_committed + 1;
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let records: Vec<_> = (next..next + batch as u64)
                        .map(|t| create_record(t, t + 1))
                        .collect();
                    next += batch as u64;
                    let started = Instant::now();
                    journal.commit(&records).unwrap();
                    spent += started.elapsed();
                }
                spent
            });
        });
    }
    group.finish();
}

/// Benchmarks write to a real disk, not a tmpfs, or fsync would cost nothing.
fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("MDS_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into)
}

criterion_group!(benches, synced_batches);
criterion_main!(benches);
