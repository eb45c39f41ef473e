//! The journal's contract, on a real RocksDB in a temp dir: recovery at open, contiguous group
//! commit, transno order for same-key updates, resend records, and fail-stop on each injected
//! storage fault (write error, sync error, full disk).

use journal::{
    Dentry, Error, Fault, FileKind, InjectedFailure, Inode, Journal, JournalOp, JournalOptions,
    ROOT_INO, ResendRecord, TxRecord,
};

fn file(ino: u64, transno: u64) -> Inode {
    Inode {
        ino,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 1,
        nlink: 1,
        size: 0,
        ctime_ns: 1,
        mtime_ns: 1,
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

fn create(transno: u64, ino: u64, name: &str) -> TxRecord {
    TxRecord {
        transno,
        ops: vec![
            JournalOp::PutInode(file(ino, transno)),
            JournalOp::PutDentry {
                parent: ROOT_INO,
                name: name.into(),
                entry: Dentry {
                    ino,
                    kind: FileKind::File,
                },
            },
        ],
    }
}

/// The committed entry `name` of `parent`, found by a scan (the store keys entries by child).
fn entry(j: &Journal, parent: u64, name: &str) -> Option<Dentry> {
    let mut found = None;
    j.scan_dentries(|p, n, e| {
        if p == parent && n == name {
            assert!(found.replace(e).is_none(), "two entries {parent}/{name}");
        }
        Ok(())
    })
    .unwrap();
    found
}

#[test]
fn new_store_has_root_and_reopen_recovers_counters() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert!(rec.created);
        assert_eq!(rec.last_committed, 0);
        assert_eq!(rec.next_ino, ROOT_INO + 1);
        let root = j.inode(ROOT_INO).unwrap().unwrap();
        assert_eq!(root.kind, FileKind::Directory);
        let info = j.commit(&[create(1, 7, "a"), create(2, 9, "b")]).unwrap();
        assert_eq!(info.last_committed, 2);
        assert_eq!(info.transactions, 2);
    }
    let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert!(!rec.created);
    assert_eq!(rec.last_committed, 2);
    assert_eq!(rec.next_ino, 10, "inode numbers are never handed out twice");
    assert_eq!(entry(&j, ROOT_INO, "b").unwrap().ino, 9);
    assert_eq!(j.inode(7).unwrap().unwrap().transno, 1);
}

#[test]
fn commits_must_be_contiguous_from_last_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let err = j.commit(&[create(2, 5, "x")]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfOrder {
                expected: 1,
                got: 2
            }
        ),
        "{err}"
    );
    let err = j
        .commit(&[create(1, 5, "x"), create(3, 6, "y")])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfOrder {
                expected: 2,
                got: 3
            }
        ),
        "{err}"
    );
    assert_eq!(j.last_committed(), 0);
    assert!(
        entry(&j, ROOT_INO, "x").is_none(),
        "a rejected batch writes nothing"
    );
    j.commit(&[create(1, 5, "x")]).unwrap();
    assert!(!j.is_failed(), "a contract error is not a disk failure");
}

#[test]
fn later_transno_wins_for_the_same_key_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let mut chmod = file(5, 2);
    chmod.mode = 0o600;
    let delete = TxRecord {
        transno: 3,
        ops: vec![
            JournalOp::DeleteDentry {
                parent: ROOT_INO,
                name: "x".into(),
                child: 5,
            },
            JournalOp::DeleteInode(5),
        ],
    };
    let recreate = create(4, 5, "x");
    j.commit(&[
        create(1, 5, "x"),
        TxRecord {
            transno: 2,
            ops: vec![JournalOp::PutInode(chmod)],
        },
    ])
    .unwrap();
    assert_eq!(j.inode(5).unwrap().unwrap().mode, 0o600);
    j.commit(&[delete, recreate]).unwrap();
    // Transno 3 deleted inode 5 and transno 4 recreated it: the later one must win.
    assert_eq!(j.inode(5).unwrap().unwrap().transno, 4);
    assert!(entry(&j, ROOT_INO, "x").is_some());
}

/// A scan gives every entry once, in the order of the children's numbers (the key's first
/// part), whatever their names' order.
#[test]
fn scan_dentries_gives_every_entry_in_child_order() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let records: Vec<_> = (0..25u64)
        .map(|i| create(i + 1, 100 + i, &format!("f{:03}", 24 - i)))
        .collect();
    j.commit(&records).unwrap();
    let mut seen = Vec::new();
    j.scan_dentries(|parent, name, e| {
        seen.push((e.ino, parent, name));
        Ok(())
    })
    .unwrap();
    let wanted: Vec<_> = (0..25u64)
        .map(|i| (100 + i, ROOT_INO, format!("f{:03}", 24 - i)))
        .collect();
    assert_eq!(seen, wanted);
}

/// A name that moves to another child (a rename over a target) is two keys: the old
/// child's entry is deleted by its own op and the new one put, and a reopen finds only the
/// new one.
#[test]
fn an_entry_replaced_by_another_child_leaves_one_entry() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        j.commit(&[create(1, 5, "x")]).unwrap();
        let mut replace = create(2, 6, "x");
        replace.ops.insert(
            0,
            JournalOp::DeleteDentry {
                parent: ROOT_INO,
                name: "x".into(),
                child: 5,
            },
        );
        j.commit(&[replace]).unwrap();
    }
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(entry(&j, ROOT_INO, "x").map(|e| e.ino), Some(6));
    let mut count = 0;
    j.scan_dentries(|_, _, _| {
        count += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(count, 1);
}

#[test]
fn one_commit_writes_one_resend_slot_per_client_and_a_reopen_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let put = |client, acked_xid, xid| JournalOp::PutResend {
            client,
            acked_xid,
            record: ResendRecord {
                xid,
                transno: xid,
                reply: vec![xid as u8].into(),
            },
        };
        j.commit(&[TxRecord {
            transno: 1,
            ops: vec![put(7, 0, 1), put(7, 0, 2), put(7, 1, 3), put(8, 0, 1)],
        }])
        .unwrap();
        let mut slots = Vec::new();
        j.scan_resend(|c, slot, value| {
            let xids: Vec<u64> = value.records.iter().map(|r| r.xid).collect();
            slots.push((c, slot, value.acked_xid, xids));
            Ok(())
        })
        .unwrap();
        assert_eq!(slots, vec![(7, 0, 1, vec![2, 3]), (8, 0, 0, vec![1])]);
    }
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.resend.len(), 2);
    assert_eq!(recovered.resend[0].client, 7);
    assert_eq!(recovered.resend[0].records[1].reply.as_slice(), [3]);
}

/// RocksDB counts every key comparison of a commit on the committing thread unless told not
/// to, and the committer's thread tells it not to. On x86-64 Linux it is built without the
/// counters at all (`.cargo/config.toml`: `-DNPERF_CONTEXT`), so there it counts nothing on
/// any thread: this checks that the build flag took.
#[test]
fn a_thread_without_perf_counters_counts_nothing() {
    use rocksdb::perf::{PerfContext, PerfMetric};
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let j = std::sync::Arc::new(j);
    let comparisons = |quiet: bool, first: u64| {
        let j = j.clone();
        std::thread::spawn(move || {
            if quiet {
                journal::no_perf_counters_on_this_thread();
            }
            let mut perf = PerfContext::default();
            perf.reset();
            for transno in first..first + 50 {
                j.commit(&[create(transno, 100 + transno, &format!("n{transno}"))])
                    .unwrap();
            }
            perf.metric(PerfMetric::UserKeyComparisonCount)
        })
        .join()
        .unwrap()
    };
    let by_default = comparisons(false, 1);
    assert_eq!(comparisons(true, 51), 0);
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        assert_eq!(by_default, 0, "RocksDB was built with its perf counters");
    } else {
        assert!(by_default > 0, "RocksDB's default level counts");
    }
}

/// The benchmarks' emulated device: every synced write takes at least the latency asked for
/// (reported in the commit's write+sync time), and the commits are the same otherwise.
#[test]
fn an_emulated_sync_latency_slows_each_commit_and_changes_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let latency = std::time::Duration::from_millis(30);
    {
        let (mut j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        j.emulate_sync_latency(latency);
        for (transno, name) in [(1, "a"), (2, "b"), (3, "c")] {
            let started = std::time::Instant::now();
            let info = j.commit(&[create(transno, 4 + transno, name)]).unwrap();
            assert!(started.elapsed() >= latency);
            assert!(info.write_sync >= latency, "{:?}", info.write_sync);
            assert_eq!(info.last_committed, transno);
        }
    }
    let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(rec.last_committed, 3);
    for name in ["a", "b", "c"] {
        assert!(entry(&j, ROOT_INO, name).is_some(), "{name}");
    }
}

/// Each injected fault stops the journal, and a reopen finds what each leaves on disk: a
/// write error and a full disk leave nothing of the failed batch; a sync error leaves a
/// batch whose fate is unknown — here it reached the operating system and survives.
#[test]
fn a_failed_commit_stops_the_journal_and_a_reopen_finds_what_the_fault_left() {
    for (fault, survives) in [
        (Fault::Write, false),
        (Fault::NoSpace, false),
        (Fault::Sync, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
            j.inject_failure(InjectedFailure {
                after_commits: 1,
                fault,
            });
            j.commit(&[create(1, 5, "kept")]).unwrap();
            let err = j.commit(&[create(2, 6, "unknown")]).unwrap_err();
            assert!(matches!(err, Error::Injected(f) if f == fault), "{err}");
            assert_eq!(err.is_no_space(), fault == Fault::NoSpace, "{err}");
            assert!(j.is_failed());
            assert!(matches!(
                j.commit(&[create(2, 6, "unknown")]),
                Err(Error::Failed)
            ));
            assert_eq!(
                j.last_committed(),
                1,
                "{fault}: nothing past the failure is published"
            );
        }
        let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert!(entry(&j, ROOT_INO, "kept").is_some());
        assert_eq!(
            entry(&j, ROOT_INO, "unknown").is_some(),
            survives,
            "{fault}"
        );
        assert_eq!(rec.last_committed, if survives { 2 } else { 1 }, "{fault}");
    }
}

#[test]
fn read_only_open_refuses_a_missing_store_and_reads_a_real_one() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Journal::open_read_only(&dir.path().join("nothing")).is_err());
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        j.commit(&[create(1, 5, "a")]).unwrap();
    }
    let (j, rec) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(rec.last_committed, 1);
    let mut count = 0;
    j.scan_inodes(|_| {
        count += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(count, 2);
    let stats = j.stats();
    assert_eq!(
        stats.families.len(),
        8,
        "inodes, dentries, clients, meta, xattrs, data, orphans, edits"
    );
}
