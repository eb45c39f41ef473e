//! Builds a large store fast, for the restart and fsck measurements in docs/BENCHMARKS.md: it
//! commits creates straight through `Journal::commit`, as the server journals them for
//! loadgen threads that each create in their own directory (`/loadgen/t<N>`), with no server
//! and no network in the way.
//!
//! Each create journals what the server's does: the new file's inode, its entry, the parent
//! directory's new image and a resend record for its client (one client per directory). The
//! resend records' reply bytes are opaque filler of a create reply's size, not a protocol
//! encoding, so the last write drops every client's records (as the end of their sessions
//! would): the server and fsck decode the replies they find.
//!
//! ```sh
//! cargo build --release --workspace --examples
//! $CARGO_TARGET_DIR/release/examples/build_store --data DIR --inodes 10000000
//! ```
//!
//! Options: `--dirs N` (directories, one client each; default 64, loadgen's 64 threads),
//! `--batch N` (creates per commit; default 4096), `--progress N` (a line every N creates).
//! It prints, as it goes, the creates per second and the write-ahead log on disk (the `*.log`
//! files: what a crash would replay, plus files RocksDB has not deleted yet).

use std::path::{Path, PathBuf};
use std::time::Instant;

use journal::{
    Dentry, FileKind, Inode, Journal, JournalOp, JournalOptions, ROOT_INO, ResendRecord, TxRecord,
};

/// A create reply's size on the wire (an `Attr` body): the resend record's opaque filler.
const REPLY_BYTES: usize = 35;

struct Args {
    data: PathBuf,
    inodes: u64,
    dirs: u64,
    batch: u64,
    progress: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        data: PathBuf::new(),
        inodes: 1_000_000,
        dirs: 64,
        batch: 4096,
        progress: 1_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .replace('_', "")
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--data" => args.data = PathBuf::from(&value),
            "--inodes" => args.inodes = number()?,
            "--dirs" => args.dirs = number()?.max(1),
            "--batch" => args.batch = number()?.max(1),
            "--progress" => args.progress = number()?.max(1),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.data.as_os_str().is_empty() {
        return Err("--data DIR is required".into());
    }
    Ok(args)
}

fn directory(ino: u64, parent: u64, subdirs: u32, entries: u64, transno: u64) -> Inode {
    Inode {
        ino,
        kind: FileKind::Directory,
        mode: 0o755,
        uid: 1000,
        gid: 1000,
        nlink: 2 + subdirs,
        size: 0,
        ctime_ns: journal::now_ns(),
        mtime_ns: journal::now_ns(),
        generation: transno,
        parent,
        entries,
        transno,
        atime_ns: 0,
        rdev: 0,
        target: Vec::new(),
        data_blocks: 0,
    }
}

fn file(ino: u64, transno: u64, now: i64) -> Inode {
    Inode {
        ino,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1000,
        gid: 1000,
        nlink: 1,
        size: 0,
        ctime_ns: now,
        mtime_ns: now,
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

/// The write-ahead log files in the store and their total size.
fn wal_on_disk(dir: &Path) -> (usize, u64) {
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            files += 1;
            bytes += entry.metadata().map_or(0, |m| m.len());
        }
    }
    (files, bytes)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("build_store: {e}");
            std::process::exit(2);
        }
    };
    let (journal, recovered) =
        Journal::open(&args.data, JournalOptions::default()).expect("opening the store");
    assert!(
        recovered.created,
        "build_store writes a new store: {} already holds one",
        args.data.display()
    );
    let started = Instant::now();

    // /loadgen (inode 2) and its directories t0..t<dirs> (inodes 3..), one transno each.
    let top = ROOT_INO + 1;
    let dir_ino = |t: u64| top + 1 + t;
    let mut transno = 0;
    let mut records = Vec::new();
    transno += 1;
    records.push(TxRecord {
        transno,
        ops: vec![
            JournalOp::PutInode(directory(top, ROOT_INO, 0, 0, transno)),
            JournalOp::PutDentry {
                parent: ROOT_INO,
                name: "loadgen".into(),
                entry: Dentry {
                    ino: top,
                    kind: FileKind::Directory,
                },
            },
            JournalOp::PutInode(directory(ROOT_INO, ROOT_INO, 1, 1, transno)),
        ],
    });
    let mut dirs: Vec<Inode> = Vec::new();
    for t in 0..args.dirs {
        transno += 1;
        let dir = directory(dir_ino(t), top, 0, 0, transno);
        records.push(TxRecord {
            transno,
            ops: vec![
                JournalOp::PutInode(dir.clone()),
                JournalOp::PutDentry {
                    parent: top,
                    name: format!("t{t}").into(),
                    entry: Dentry {
                        ino: dir.ino,
                        kind: FileKind::Directory,
                    },
                },
                JournalOp::PutInode(directory(top, ROOT_INO, t as u32 + 1, t + 1, transno)),
            ],
        });
        dirs.push(dir);
    }
    journal
        .commit(&records)
        .expect("committing the directories");

    // Creates, `batch` per commit, round-robin over the directories: each commit carries
    // every client's creates, as one group commit under loadgen does.
    let tag = format!("{:x}", journal::now_ns() as u64 >> 20);
    let mut next_ino = dir_ino(args.dirs);
    let mut xids = vec![0u64; args.dirs as usize];
    // Each client's watermark: its xids of the batch before last have their replies.
    let mut acked = vec![0u64; args.dirs as usize];
    let mut previous = vec![0u64; args.dirs as usize];
    let files = args.inodes.saturating_sub(next_ino - 1);
    let mut created = 0u64;
    let mut last_progress = 0u64;
    let mut largest_wal = (0usize, 0u64);
    while created < files {
        let n = args.batch.min(files - created);
        let now = journal::now_ns();
        records.clear();
        for k in created..created + n {
            let t = (k % args.dirs) as usize;
            transno += 1;
            xids[t] += 1;
            let ino = next_ino;
            next_ino += 1;
            let parent = &mut dirs[t];
            parent.entries += 1;
            parent.mtime_ns = now;
            parent.transno = transno;
            records.push(TxRecord {
                transno,
                ops: vec![
                    JournalOp::PutInode(file(ino, transno, now)),
                    JournalOp::PutDentry {
                        parent: parent.ino,
                        name: format!("f.{tag}.{t}.0.{}", k / args.dirs).into(),
                        entry: Dentry {
                            ino,
                            kind: FileKind::File,
                        },
                    },
                    JournalOp::PutInode(parent.clone()),
                    JournalOp::PutResend {
                        client: t as u64 + 1,
                        acked_xid: acked[t],
                        record: ResendRecord {
                            xid: xids[t],
                            transno,
                            reply: vec![0x5a; REPLY_BYTES].into(),
                        },
                    },
                ],
            });
        }
        journal.commit(&records).expect("committing creates");
        acked.copy_from_slice(&previous);
        previous.copy_from_slice(&xids);
        created += n;
        let wal = wal_on_disk(&args.data);
        if wal.1 > largest_wal.1 {
            largest_wal = wal;
        }
        if created - last_progress >= args.progress || created == files {
            last_progress = created;
            let secs = started.elapsed().as_secs_f64();
            println!(
                "{created} creates in {secs:.1} s ({:.0}/s); WAL now {} files {:.1} MiB, \
                 largest so far {:.1} MiB",
                created as f64 / secs,
                wal.0,
                mib(wal.1),
                mib(largest_wal.1),
            );
        }
    }
    let drops: Vec<JournalOp> = (1..=args.dirs)
        .map(|client| JournalOp::DropResend { client })
        .collect();
    journal
        .write_client_changes(&drops)
        .expect("dropping the resend records");
    for (family, keys, sst, mem) in journal.stats().families {
        println!(
            "  {family}: ~{keys} keys, {:.1} MiB in tables, {:.1} MiB in memtables",
            mib(sst),
            mib(mem)
        );
    }
    let wal = wal_on_disk(&args.data);
    println!(
        "built {} inodes ({} files in {} directories) in {:.1} s; last_committed {}; WAL at \
         close {} files {:.1} MiB, largest while building {:.1} MiB",
        next_ino - 1,
        files,
        args.dirs,
        started.elapsed().as_secs_f64(),
        journal.last_committed(),
        wal.0,
        mib(wal.1),
        mib(largest_wal.1),
    );
}
