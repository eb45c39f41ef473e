//! Namespace unit tests: the transaction rules. Records replayed in transno order must rebuild
//! exactly the live namespace, however the threads interleaved — that is what "transno order
//! is a valid serial order" and "same-key updates apply in transno order" mean. The live
//! namespace is compared through its journal images (what it would persist), and, after a
//! real commit and reload, through its in-memory state (what loading rebuilds).

use std::collections::BTreeMap;
use std::sync::Arc;

use journal::{Dentry, Inode, JournalOp, JournalOptions, ROOT_INO, TxRecord};

use super::*;
use mds_proto::{Cred, Errno, Op};

pub(super) fn empty() -> Namespace {
    let ns = Namespace {
        table: Table::new(),
        next_ino: AtomicU64::new(ROOT_INO + 1),
        run_owner: super::ino_run::new_owner(),
        run_epoch: AtomicU64::new(0),
        ino_limit: journal::ino_limit(0),
        ino_floor: journal::first_ino(0),
        last_transno: CachePadded::new(AtomicU64::new(0)),
        ceilings: CeilingsNow::new(
            Ceilings {
                transno: u64::MAX - 1,
                ino: u64::MAX - 1,
            },
            ROOT_INO + 1,
        ),
        rename_lock: Mutex::new(()),
        directories: AtomicU64::new(1),
        files: AtomicU64::new(0),
        others: AtomicU64::new(0),
        xattr_bytes: AtomicU64::new(0),
        file_bytes: AtomicU64::new(0),
        handles: super::handles::Handles::default(),
        orphans: AtomicU64::new(0),
        loaded_orphans: Mutex::new(Vec::new()),
        store: None,
        // Off, as `--inline-data-max 0`: sizes are only numbers (the model sets any).
        inline_data_max: 0,
        object_store: false,
        next_slice: Mutex::new(None),
        pending_data_bytes: AtomicU64::new(0),
        data_blocks: AtomicU64::new(0),
        pending_data: Mutex::new(std::collections::VecDeque::new()),
        read_only: AtomicBool::new(false),
        no_space: AtomicBool::new(false),
        pending_dirs: Mutex::new(BTreeMap::new()),
        removing_dirs: std::sync::atomic::AtomicUsize::new(0),
        root_squash: false,
        op_lists: super::op_lists::OpLists::default(),
    };
    ns.table.insert_unlocked(Node::new(
        InodeAttr::from_record(Inode::root(0)),
        Some(super::Entries::new()),
    ));
    ns
}

pub(super) type Inodes = BTreeMap<u64, Inode>;
pub(super) type Entries = BTreeMap<(u64, String), Dentry>;
pub(super) type XattrImages = BTreeMap<(u64, String), Vec<u8>>;
/// The namespace as the journal stores it.
pub(super) type Image = (Inodes, Entries, XattrImages);

/// The live namespace as the journal would store it: every inode's image, every entry's
/// record, every extended attribute. An atime a read moved is in memory only (relatime) until
/// the inode's next journaled change: a test that reads compares images without atimes
/// ([`without_atimes`]).
pub(super) fn snapshot(ns: &Namespace) -> Image {
    let (mut inodes, mut entries, mut xattrs) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    ns.table.for_each(|node| {
        let ino = node.attr.ino;
        inodes.insert(ino, node.attr.image());
        for (name, d) in node
            .entries()
            .into_iter()
            .flat_map(super::dir::Entries::iter)
        {
            entries.insert((ino, name.as_str().to_owned()), d.record());
        }
        for (name, value) in node.xattrs.iter().flat_map(|x| x.by_name.iter()) {
            let value = value.in_memory().map_or_else(
                || {
                    ns.stored_xattr(ino, name)
                        .expect("a long value is in the store")
                },
                <[u8]>::to_vec,
            );
            xattrs.insert((ino, name.to_string()), value);
        }
    });
    (inodes, entries, xattrs)
}

/// The live namespace's in-memory state, entries as the journal would store them (their
/// commit-on-share stamps are in memory only and differ between a run and a reload).
fn memory(ns: &Namespace) -> (BTreeMap<u64, InodeAttr>, Entries) {
    let (mut inodes, mut entries) = (BTreeMap::new(), BTreeMap::new());
    ns.table.for_each(|node| {
        inodes.insert(node.attr.ino, node.attr.clone());
        for (name, d) in node
            .entries()
            .into_iter()
            .flat_map(super::dir::Entries::iter)
        {
            entries.insert((node.attr.ino, name.as_str().to_owned()), d.record());
        }
    });
    (inodes, entries)
}

/// `image` with every atime 0: what replayed records and the live namespace must agree on
/// when reads have moved atimes in memory alone.
pub(super) fn without_atimes(mut image: Image) -> Image {
    for inode in image.0.values_mut() {
        inode.atime_ns = 0;
    }
    image
}

pub(super) fn replay(initial: Image, mut records: Vec<TxRecord>) -> Image {
    records.sort_by_key(|r| r.transno);
    let (mut inodes, mut entries, mut xattrs) = initial;
    for r in records {
        for op in r.ops {
            match op {
                JournalOp::PutInode(i) => {
                    inodes.insert(i.ino, i);
                }
                JournalOp::DeleteInode(ino) => {
                    inodes.remove(&ino);
                }
                // The store keys an entry by its child: a put over another child's entry
                // would leave that one's key behind, so each must have been deleted first,
                // by the child it named.
                JournalOp::PutDentry {
                    parent,
                    name,
                    entry,
                } => {
                    let before = entries.insert((parent, name.to_string()), entry);
                    assert!(
                        before.is_none_or(|b| b.ino == entry.ino),
                        "{parent}/{name:?} put over another child's entry ({before:?}) not deleted"
                    );
                }
                JournalOp::DeleteDentry {
                    parent,
                    name,
                    child,
                } => {
                    let gone = entries.remove(&(parent, name.to_string()));
                    assert_eq!(
                        gone.map(|e| e.ino),
                        Some(child),
                        "{parent}/{name:?} deleted as child {child}'s"
                    );
                }
                JournalOp::PutXattr { ino, name, value } => {
                    xattrs.insert((ino, name), value);
                }
                JournalOp::DeleteXattr { ino, name } => {
                    xattrs.remove(&(ino, name));
                }
                // File data and orphan records are not part of the image compared here
                // (`open_tests.rs` tests them against a real store).
                JournalOp::PutData { .. }
                | JournalOp::DeleteData { .. }
                | JournalOp::PutOrphan { .. }
                | JournalOp::DeleteOrphan(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    (inodes, entries, xattrs)
}

impl Namespace {
    /// The inode `name` in `parent` names, if any: for walks that pick an inode by name.
    fn lookup_ino(&self, parent: u64, name: &str) -> Option<u64> {
        self.table
            .lock(&[parent])
            .get(parent)?
            .entry(name)
            .map(|e| e.ino)
    }
}

fn run(ns: &Namespace, op: Op, records: &mut Vec<TxRecord>) -> Result<Body, Errno> {
    let caller = Caller {
        client: 1,
        cred: &Cred::default(),
        last_committed: 0,
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    match ns.execute(op, &caller) {
        Exec::Now { result, .. } => result,
        Exec::Mutation {
            record,
            body,
            transno,
            ..
        } => {
            assert_eq!(record.transno, transno);
            records.push(record);
            Ok(body)
        }
    }
}

/// A replayed create names the inode number it was given before the crash; one that names a
/// live inode (the root, its own parent, any other) is refused and changes nothing, and so is
/// one whose number leaves no room above it.
#[test]
fn a_replayed_create_may_not_take_a_live_inode_number() {
    let ns = empty();
    let mut records = Vec::new();
    let dir = ino_of(run(
        &ns,
        Op::Mkdir {
            parent: ROOT_INO,
            name: "d".into(),
            mode: 0o755,
        },
        &mut records,
    ));
    let file = ino_of(run(
        &ns,
        Op::Create {
            parent: dir,
            name: "f".into(),
            mode: 0o644,
        },
        &mut records,
    ));
    let before = snapshot(&ns);
    let replay_create = |ino: u64, name: &str| {
        let caller = Caller {
            client: 1,
            cred: &Cred::default(),
            last_committed: 0,
            reuse_ino: Some(ino),
            replay: false,
            atime: mds_proto::Atime::default(),
        };
        match ns.execute(
            Op::Create {
                parent: dir,
                name: name.into(),
                mode: 0o644,
            },
            &caller,
        ) {
            Exec::Now { result, .. } => result.map(|_| ()),
            Exec::Mutation { .. } => Ok(()),
        }
    };
    for (ino, name) in [(ROOT_INO, "a"), (dir, "b"), (file, "c"), (u64::MAX, "d")] {
        assert_eq!(replay_create(ino, name), Err(Errno::EINVAL), "ino {ino}");
    }
    assert_eq!(snapshot(&ns), before, "a refused replay changed nothing");
    // A number no live inode has is taken back, and later creates go above it (past the
    // run of numbers this thread had taken, which may hold it).
    assert_eq!(replay_create(file + 10, "e"), Ok(()));
    let next = ino_of(run(
        &ns,
        Op::Create {
            parent: dir,
            name: "g".into(),
            mode: 0o644,
        },
        &mut records,
    ));
    assert!(next > file + 10, "{next}");
}

fn ino_of(body: Result<Body, Errno>) -> u64 {
    match body {
        Ok(Body::Attr(a)) => a.ino,
        other => panic!("{other:?}"),
    }
}

/// Three directories under the root, then four threads mutating them at random with few
/// names, so they collide. Returns every record, in no particular order.
pub(super) fn concurrent_walk(ns: &Arc<Namespace>) -> Vec<TxRecord> {
    let mut records = Vec::new();
    let dirs: Vec<u64> = (0..3)
        .map(|i| {
            ino_of(run(
                ns,
                Op::Mkdir {
                    parent: ROOT_INO,
                    name: format!("d{i}"),
                    mode: 0o755,
                },
                &mut records,
            ))
        })
        .collect();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ns = ns.clone();
            let dirs = dirs.clone();
            std::thread::spawn(move || {
                let mut records = Vec::new();
                // A small deterministic pseudo-random walk over few names, so threads collide.
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                for _ in 0..3000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let d = dirs[(x % 3) as usize];
                    let d2 = dirs[((x >> 8) % 3) as usize];
                    let name = format!("n{}", (x >> 16) % 6);
                    let name2 = format!("n{}", (x >> 24) % 6);
                    let op = match (x >> 32) % 14 {
                        0 | 1 => Op::Create {
                            parent: d,
                            name,
                            mode: 0o644,
                        },
                        2 => Op::Mkdir {
                            parent: d,
                            name,
                            mode: 0o755,
                        },
                        3 => Op::Unlink { parent: d, name },
                        4 => Op::Rmdir { parent: d, name },
                        5 => Op::Rename {
                            src_parent: d,
                            src_name: name,
                            dst_parent: d2,
                            dst_name: name2,
                            how: mds_proto::RenameHow::Replace,
                        },
                        6 => Op::Setattr {
                            ino: d,
                            attr: mds_proto::SetAttr {
                                mode: Some((x & 0o777) as u32),
                                ..Default::default()
                            },
                        },
                        7 => Op::Symlink {
                            parent: d,
                            name,
                            target: mds_proto::Target(name2.into_bytes()),
                        },
                        8 => Op::Mknod {
                            parent: d,
                            name,
                            kind: mds_proto::Kind::Fifo,
                            mode: 0o644,
                            rdev: 0,
                        },
                        9 => match ns.lookup_ino(d, &name) {
                            Some(ino) => Op::Link {
                                ino,
                                parent: d2,
                                name: name2,
                            },
                            None => continue,
                        },
                        10 => Op::Rename {
                            src_parent: d,
                            src_name: name,
                            dst_parent: d2,
                            dst_name: name2,
                            how: if x & 1 == 0 {
                                mds_proto::RenameHow::Exchange
                            } else {
                                mds_proto::RenameHow::NoReplace
                            },
                        },
                        11 | 12 => match ns.lookup_ino(d, &name) {
                            Some(ino) => Op::Setxattr {
                                ino,
                                name: format!("user.{}", x % 3),
                                value: mds_proto::XattrValue(vec![0; (x % 40) as usize]),
                                how: mds_proto::XattrSet::Either,
                            },
                            None => continue,
                        },
                        _ => match ns.lookup_ino(d, &name) {
                            Some(ino) => Op::Removexattr {
                                ino,
                                name: format!("user.{}", x % 3),
                            },
                            None => continue,
                        },
                    };
                    let _ = run(&ns, op, &mut records);
                }
                records
            })
        })
        .collect();
    for t in threads {
        records.extend(t.join().unwrap());
    }
    records
}

#[test]
fn concurrent_mutations_replay_in_transno_order_to_the_live_state() {
    let ns = Arc::new(empty());
    let initial = snapshot(&ns);
    let records = concurrent_walk(&ns);
    let mut transnos: Vec<u64> = records.iter().map(|r| r.transno).collect();
    transnos.sort_unstable();
    assert_eq!(
        transnos,
        (1..=ns.last_transno()).collect::<Vec<_>>(),
        "dense, no duplicates"
    );
    assert!(
        records.len() > 1000,
        "the walk should mutate a lot ({})",
        records.len()
    );
    let live = snapshot(&ns);
    let replayed = replay(initial, records.clone());
    assert_eq!(replayed.1, live.1, "entries differ after replay");
    assert_eq!(replayed.0, live.0, "inodes differ after replay");
    assert_eq!(
        replayed.2, live.2,
        "extended attributes differ after replay"
    );
    // What the walk did, not what it left (a later unlink may take any of it away).
    let images = || {
        records
            .iter()
            .flat_map(|r| &r.ops)
            .filter_map(|op| match op {
                JournalOp::PutInode(i) => Some(i),
                _ => None,
            })
    };
    let did = (
        images().any(|i| i.kind == journal::FileKind::Symlink),
        images().any(|i| i.kind != journal::FileKind::Directory && i.nlink > 1),
        records
            .iter()
            .flat_map(|r| &r.ops)
            .any(|op| matches!(op, JournalOp::PutXattr { .. })),
    );
    assert_eq!(
        did,
        (true, true, true),
        "the walk should make symlinks, hard links and attributes"
    );
    // And the live state is self-consistent: counts match entries, a non-directory's links
    // the names it has, a directory's parent the entry naming it; attributes belong to live
    // inodes; the namespace's counts are the kinds it holds.
    for (ino, inode) in &live.0 {
        let names: Vec<u64> = live
            .1
            .iter()
            .filter(|(_, d)| d.ino == *ino)
            .map(|((p, _), _)| *p)
            .collect();
        if inode.kind == journal::FileKind::Directory {
            let n = live.1.keys().filter(|(p, _)| p == ino).count() as u64;
            assert_eq!(inode.entries, n, "inode {ino}");
            let subdirs = live
                .1
                .iter()
                .filter(|((p, _), d)| p == ino && d.kind == journal::FileKind::Directory)
                .count() as u32;
            assert_eq!(inode.nlink, 2 + subdirs, "inode {ino}");
            if *ino != ROOT_INO {
                assert_eq!(names, [inode.parent], "directory {ino} and its parent");
            }
        } else {
            assert_eq!(inode.nlink as usize, names.len(), "inode {ino}'s links");
        }
    }
    assert!(live.2.keys().all(|(ino, _)| live.0.contains_key(ino)));
    let kinds = |k: journal::FileKind| live.0.values().filter(|i| i.kind == k).count() as u64;
    let counts = ns.counts();
    assert_eq!(
        (counts.directories, counts.files, counts.inodes()),
        (
            kinds(journal::FileKind::Directory),
            kinds(journal::FileKind::File),
            live.0.len() as u64
        )
    );
}

#[test]
fn failed_operations_take_no_transno_and_read_only_refuses_mutations() {
    let ns = empty();
    let mut records = Vec::new();
    run(
        &ns,
        Op::Create {
            parent: ROOT_INO,
            name: "a".into(),
            mode: 0o644,
        },
        &mut records,
    )
    .unwrap();
    let err = run(
        &ns,
        Op::Create {
            parent: ROOT_INO,
            name: "a".into(),
            mode: 0o644,
        },
        &mut records,
    );
    assert_eq!(err, Err(Errno::EEXIST));
    assert_eq!(ns.last_transno(), 1);
    ns.set_read_only(false);
    let err = run(
        &ns,
        Op::Mkdir {
            parent: ROOT_INO,
            name: "b".into(),
            mode: 0o755,
        },
        &mut records,
    );
    assert_eq!(err, Err(Errno::EIO));
    assert!(
        run(
            &ns,
            Op::Lookup {
                parent: ROOT_INO,
                name: "a".into()
            },
            &mut records
        )
        .is_ok()
    );
    assert_eq!(ns.last_transno(), 1);
    assert_eq!(records.len(), 1);
}

#[test]
fn loading_the_committed_records_rebuilds_the_live_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let ns = Arc::new(Namespace::load(&journal, &recovered).unwrap());
    let mut records = concurrent_walk(&ns);
    records.sort_by_key(|r| r.transno);
    for batch in records.chunks(500) {
        journal.commit(batch).unwrap();
    }
    drop(journal);
    let (journal, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.last_committed, ns.last_transno());
    let loaded = Namespace::load(&journal, &recovered).unwrap();
    let (live, reloaded) = (memory(&ns), memory(&loaded));
    assert_eq!(reloaded.1, live.1, "entries differ after commit and load");
    assert_eq!(reloaded.0, live.0, "inodes differ after commit and load");
    assert_eq!(snapshot(&loaded).2, snapshot(&ns).2, "extended attributes");
    assert_eq!(loaded.counts(), ns.counts());
    assert_eq!(loaded.last_transno(), ns.last_transno());
}

/// Neither counter passes its ceiling, whatever a client does: a create at the inode
/// ceiling, or a mutation at the transno ceiling, is refused EBUSY with nothing changed, and
/// raising the ceiling lets the next one through (regression: `fetch_add` with no check
/// wrapped the inode counter to 0 and 1, and the next creates replaced the root).
#[test]
fn the_counters_stop_at_their_ceilings_and_never_wrap() {
    let ns = empty();
    let mut records = Vec::new();
    let first = ino_of(run(
        &ns,
        Op::Create {
            parent: ROOT_INO,
            name: "a".into(),
            mode: 0o644,
        },
        &mut records,
    ));
    ns.ceilings.ino.store(first + 3, Ordering::SeqCst);
    ns.ceilings
        .transno
        .store(ns.last_transno() + 1, Ordering::SeqCst);
    let create = |name: &str, records: &mut Vec<TxRecord>| {
        run(
            &ns,
            Op::Create {
                parent: ROOT_INO,
                name: name.into(),
                mode: 0o644,
            },
            records,
        )
    };
    assert!(
        create("b", &mut records).is_ok(),
        "the last transno below the ceiling"
    );
    let before = snapshot(&ns);
    assert_eq!(
        create("c", &mut records),
        Err(Errno::EBUSY),
        "transno ceiling"
    );
    assert_eq!(snapshot(&ns), before, "nothing changed");
    ns.publish_ceilings(Ceilings {
        transno: u64::MAX - 1,
        ino: first + 3,
    });
    // "c" took (and burned) the last inode number below the ceiling before its transno
    // was refused. The counter is past it: this thread took its run of numbers before the
    // ceiling was lowered (which the journal never does), and only the ceiling stops it.
    assert!(ns.inode_counter() >= first + 3);
    assert_eq!(
        create("d", &mut records),
        Err(Errno::EBUSY),
        "inode ceiling"
    );
    assert!(ns.take_ceiling_request(), "asks for a higher one");
    assert!(!ns.take_ceiling_request(), "once per shortage");
    assert_eq!(snapshot(&ns), before);
    ns.publish_ceilings(Ceilings {
        transno: u64::MAX - 1,
        ino: u64::MAX - 1,
    });
    assert!(create("d", &mut records).is_ok());
    // At the end of the shard's range: the last number is taken, then ENOSPC, which no
    // ceiling raises (the next shard's numbers begin there).
    let limit = journal::ino_limit(0);
    ns.next_ino.store(limit - 1, Ordering::SeqCst);
    // Drops this thread's run of numbers, as a replay does, so the next create takes the
    // counter's.
    ns.run_epoch.fetch_add(1, Ordering::SeqCst);
    assert_eq!(ino_of(create("e", &mut records)), limit - 1);
    let before = snapshot(&ns);
    assert_eq!(create("f", &mut records), Err(Errno::ENOSPC));
    assert!(!ns.take_ceiling_request(), "no higher ceiling helps");
    assert_eq!(snapshot(&ns), before);
    // At the very end of the numbers: refused, never wrapped onto the root.
    ns.next_ino.store(u64::MAX - 1, Ordering::SeqCst);
    ns.run_epoch.fetch_add(1, Ordering::SeqCst);
    assert_eq!(create("g", &mut records), Err(Errno::ENOSPC));
    assert_eq!(ns.inode_counter(), u64::MAX - 1);
    let l = ns.table.lock(&[ROOT_INO]);
    assert_eq!(l.get(ROOT_INO).unwrap().attr.kind, FileKind::Directory);
}

/// LINK stops at `MAX_LINKS` with EMLINK and changes nothing; the links it made all count.
#[test]
fn links_stop_at_the_maximum() {
    let ns = empty();
    let mut records = Vec::new();
    let f = ino_of(run(
        &ns,
        Op::Create {
            parent: ROOT_INO,
            name: "f".into(),
            mode: 0o644,
        },
        &mut records,
    ));
    let link = |name: String, records: &mut Vec<TxRecord>| {
        run(
            &ns,
            Op::Link {
                ino: f,
                parent: ROOT_INO,
                name,
            },
            records,
        )
    };
    for i in 1..mds_proto::MAX_LINKS {
        link(format!("l{i}"), &mut records).unwrap();
    }
    let before = snapshot(&ns);
    assert_eq!(before.0[&f].nlink, mds_proto::MAX_LINKS);
    assert_eq!(link("one-more".into(), &mut records), Err(Errno::EMLINK));
    assert_eq!(snapshot(&ns), before);
}

/// A directory of this shard whose entry is another shard's, being removed (PREPARE_RMDIR):
/// refused while it holds anything or is another's than the sticky rule asks; once marked,
/// no operation puts an entry in it until the scrub settles it; the scrub's word on an older
/// mark changes nothing; and a restart brings the mark back from the store.
#[test]
fn a_directory_being_removed_takes_no_new_entry_until_it_is_settled() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let ns = Namespace::load(&journal, &recovered).unwrap();
    let mut records = Vec::new();
    let parent = 1 << journal::SHARD_SHIFT | 1;
    let made = Op::MakePendingDir {
        shard: 0,
        parent,
        name: "d".into(),
        mode: 0o755,
        uid: 1000,
        gid: 100,
    };
    let d = ino_of(run(&ns, made, &mut records));
    let prepare = |owner| Op::PrepareRmdir {
        ino: d,
        parent,
        name: "d".into(),
        owner,
    };
    let create = |name: &str| Op::Create {
        parent: d,
        name: name.into(),
        mode: 0o644,
    };
    run(&ns, create("f"), &mut records).unwrap();
    assert_eq!(run(&ns, prepare(None), &mut records), Err(Errno::ENOTEMPTY));
    let unlink = |name: &str| Op::Unlink {
        parent: d,
        name: name.into(),
    };
    run(&ns, unlink("f"), &mut records).unwrap();
    assert_eq!(
        run(&ns, prepare(Some(1001)), &mut records),
        Err(Errno::EPERM)
    );
    assert_eq!(run(&ns, prepare(Some(1000)), &mut records), Ok(Body::Done));
    let x = ino_of(run(
        &ns,
        Op::Create {
            parent: ROOT_INO,
            name: "x".into(),
            mode: 0o644,
        },
        &mut records,
    ));
    let refused = |ns: &Namespace, records: &mut Vec<TxRecord>| {
        let puts = [
            create("g"),
            Op::Mkdir {
                parent: d,
                name: "sub".into(),
                mode: 0o755,
            },
            Op::Link {
                ino: x,
                parent: d,
                name: "l".into(),
            },
            Op::Rename {
                src_parent: ROOT_INO,
                src_name: "x".into(),
                dst_parent: d,
                dst_name: "x".into(),
                how: mds_proto::RenameHow::Replace,
            },
        ];
        for op in puts {
            assert_eq!(run(ns, op.clone(), records), Err(Errno::ENOENT), "{op:?}");
        }
    };
    refused(&ns, &mut records);
    // Marked again (a resent RMDIR): the scrub's answer about the first mark is dropped.
    let first = ns.pending_dirs();
    assert!(matches!(&first[..], [(p, _)] if p.ino == d && p.removing));
    assert_eq!(run(&ns, prepare(None), &mut records), Ok(Body::Done));
    assert!(ns.confirm_pending(d, first[0].1).is_none());
    assert_eq!(ns.drop_pending(d, first[0].1), Ok(None));
    refused(&ns, &mut records);

    // After a restart: still being removed, from the store.
    journal.commit(&records).unwrap();
    drop((ns, journal));
    let (journal, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let ns = Namespace::load(&journal, &recovered).unwrap();
    let mut records = Vec::new();
    refused(&ns, &mut records);
    // Its entry found (the RMDIR did not happen): it takes entries again.
    let pending = ns.pending_dirs();
    let [(loaded, mark)] = &pending[..] else {
        panic!("{pending:?}")
    };
    assert!(loaded.removing);
    assert!(ns.confirm_pending(d, *mark).is_some());
    assert!(ns.pending_dirs().is_empty());
    run(&ns, create("g"), &mut records).unwrap();
    run(&ns, unlink("g"), &mut records).unwrap();
    // Removed for good: marked, and its entry found gone.
    assert_eq!(run(&ns, prepare(None), &mut records), Ok(Body::Done));
    let mark = ns.pending_dirs()[0].1;
    assert!(ns.drop_pending(d, mark).unwrap().is_some());
    assert_eq!(
        run(&ns, Op::Getattr { ino: d }, &mut records),
        Err(Errno::ESTALE)
    );
    assert_eq!(ns.removing_dirs.load(Ordering::Relaxed), 0);
}

/// A thread's files take consecutive numbers of its run, and each directory the first number
/// of a block of its own (`ino_run`): the table stripes by block, so creates in directories
/// made one after another lock different stripes, and two threads creating at once never
/// share a block.
#[test]
fn files_take_a_threads_run_and_each_directory_a_block_of_its_own() {
    let run_len = 1u64 << super::ino_run::RUN_BITS;
    let ns = empty();
    let mut records = Vec::new();
    let mut make = |op: Op| ino_of(run(&ns, op, &mut records));
    let file = |name: &str| Op::Create {
        parent: ROOT_INO,
        name: name.into(),
        mode: 0o644,
    };
    let dir = |name: &str| Op::Mkdir {
        parent: ROOT_INO,
        name: name.into(),
        mode: 0o755,
    };
    let f1 = make(file("f1"));
    let dirs = [make(dir("d1")), make(dir("d2")), make(dir("d3"))];
    let f2 = make(file("f2"));
    assert_eq!(f2, f1 + 1, "files go on with their run");
    for d in dirs {
        assert_eq!(d % run_len, 0, "{d} begins a block");
        assert_ne!(
            d / run_len,
            f1 / run_len,
            "{d} shares no block with the files"
        );
    }
    let blocks: std::collections::HashSet<u64> = dirs.iter().map(|d| d / run_len).collect();
    assert_eq!(blocks.len(), 3, "{dirs:?}");
    // Two threads creating at once: every block's numbers went to one of them.
    let ns = &ns;
    let numbers = |prefix: &'static str| {
        move || {
            let mut records = Vec::new();
            (0..200)
                .map(|i| ino_of(run(ns, file(&format!("{prefix}{i}")), &mut records)))
                .collect::<Vec<u64>>()
        }
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(numbers("a"));
        let b = s.spawn(numbers("b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let blocks_of =
        |v: &[u64]| -> std::collections::HashSet<u64> { v.iter().map(|i| i / run_len).collect() };
    assert!(blocks_of(&a).is_disjoint(&blocks_of(&b)));
}

/// RESOLVE_REMOTE answers by the whole (parent, name, inode) triple, and a directory its
/// parent names under another name than the one asked about is still named: Done, so that
/// the child's scrub never deletes a directory an entry still names because a step gave it
/// the wrong name (on 8d645ab: ENOENT, and the scrub deleted it; the entry then named
/// nothing, and RMDIR of it answered ESTALE for ever).
#[test]
fn resolve_remote_finds_a_directory_its_parent_names_under_another_name() {
    let ns = empty();
    let mut records = Vec::new();
    let child = 1 << journal::SHARD_SHIFT | 7;
    let root = Cred::default();
    let caller = Caller {
        client: 1,
        cred: &root,
        last_committed: 0,
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    let attr = mds_proto::Attr {
        ino: child,
        kind: mds_proto::Kind::Directory,
        mode: 0o755,
        uid: 0,
        gid: 0,
        nlink: 2,
        size: 0,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        rdev: 0,
        generation: 1,
        blocks: 0,
    };
    match ns.link_remote_dir(&caller, ROOT_INO, "real".into(), attr) {
        Exec::Mutation { record, .. } => records.push(record),
        Exec::Now { result, .. } => panic!("{result:?}"),
    }
    let resolve = |name: &str, ino| Op::ResolveRemote {
        parent: ROOT_INO,
        name: name.into(),
        ino,
    };
    assert_eq!(
        run(&ns, resolve("real", child), &mut records),
        Ok(Body::Done)
    );
    assert_eq!(
        run(&ns, resolve("bogus", child), &mut records),
        Ok(Body::Done)
    );
    // Nothing names another directory: gone, whichever name is asked about.
    let other = child + 1;
    assert_eq!(
        run(&ns, resolve("real", other), &mut records),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        run(&ns, resolve("bogus", other), &mut records),
        Err(Errno::ENOENT)
    );
}
