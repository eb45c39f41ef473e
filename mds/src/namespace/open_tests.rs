//! Unit tests of open files and their data, on a real store: handles and what they check,
//! orphans made by the last unlink of an open file and reclaimed by its last release, by a
//! session's end or after a restart, and file data — written, read back from memory before its
//! commit and from the store after it, sparse, truncated, bounded — with the journal records
//! committed as the committer would and the store reloaded.

use std::sync::Arc;

use journal::{Journal, JournalOp, JournalOptions, ROOT_INO, TxRecord};
use mds_proto::{Body, Cred, Data, Errno, Op, OpenFlags, SetAttr};

use super::*;

const ALICE: u64 = 1;
const BOB: u64 = 2;

/// A namespace over a new store in `dir`, holding up to 64 KiB per file.
fn open_store(dir: &std::path::Path) -> (Namespace, Arc<Journal>) {
    let (journal, recovered) = Journal::open(dir, JournalOptions::default()).unwrap();
    let journal = Arc::new(journal);
    let ns = Namespace::load(&journal, &recovered)
        .unwrap()
        .with_data(journal.clone(), 64 << 10);
    (ns, journal)
}

/// Executes `op` for `client` as root, judged against `last_committed`; a mutation's record
/// is committed at once (and its data trimmed from memory) unless `hold` keeps it in
/// `held` for the caller to commit later.
struct Run<'a> {
    ns: &'a Namespace,
    journal: &'a Journal,
    held: Vec<TxRecord>,
    hold: bool,
}

impl<'a> Run<'a> {
    /// Committing every mutation at once.
    fn new(ns: &'a Namespace, journal: &'a Journal) -> Run<'a> {
        Run {
            ns,
            journal,
            held: Vec::new(),
            hold: false,
        }
    }

    fn exec(&mut self, client: u64, op: Op) -> (Result<Body, Errno>, u64) {
        let cred = Cred::default();
        let caller = Caller {
            client,
            cred: &cred,
            last_committed: self.journal.last_committed(),
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        };
        match self.ns.execute(op, &caller) {
            Exec::Now { result, wait } => (result, wait),
            Exec::Mutation { record, body, .. } => {
                self.held.push(record);
                if !self.hold {
                    self.commit();
                }
                (Ok(body), 0)
            }
        }
    }

    fn ok(&mut self, client: u64, op: Op) -> Body {
        let (result, _) = self.exec(client, op);
        result.unwrap()
    }

    fn commit(&mut self) {
        let records = std::mem::take(&mut self.held);
        for record in &records {
            self.journal.commit(std::slice::from_ref(record)).unwrap();
        }
        self.ns.data_committed(self.journal.last_committed());
    }

    fn create(&mut self, name: &str) -> u64 {
        match self.ok(
            ALICE,
            Op::Create {
                parent: ROOT_INO,
                name: name.into(),
                mode: 0o644,
            },
        ) {
            Body::Attr(a) => a.ino,
            other => panic!("{other:?}"),
        }
    }

    fn open(
        &mut self,
        client: u64,
        ino: u64,
        handle: u64,
        flags: OpenFlags,
    ) -> Result<Body, Errno> {
        self.exec(
            client,
            Op::Open {
                ino,
                handle,
                flags,
                reopen: false,
            },
        )
        .0
    }

    fn write(
        &mut self,
        client: u64,
        ino: u64,
        handle: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u64, Errno> {
        let (result, _) = self.exec(
            client,
            Op::Write {
                ino,
                handle,
                offset,
                data: Data(data.to_vec()),
            },
        );
        result.map(|b| match b {
            Body::Attr(a) => a.size,
            other => panic!("{other:?}"),
        })
    }

    fn read(
        &mut self,
        client: u64,
        ino: u64,
        handle: u64,
        offset: u64,
        len: u32,
    ) -> (Result<Vec<u8>, Errno>, u64) {
        let (result, wait) = self.exec(
            client,
            Op::Read {
                ino,
                handle,
                offset,
                len,
            },
        );
        let bytes = result.map(|b| match b {
            Body::Data(d) => d.0,
            other => panic!("{other:?}"),
        });
        (bytes, wait)
    }
}

const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    truncate: false,
    append: false,
    exec: false,
};

fn unlink(name: &str) -> Op {
    Op::Unlink {
        parent: ROOT_INO,
        name: name.into(),
    }
}

#[test]
fn data_written_reads_back_before_and_after_its_commit_and_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.open(ALICE, f, 1, RW).unwrap();
    r.hold = true;
    // Sparse: a hole before, a write across a block boundary.
    assert_eq!(r.write(ALICE, f, 1, 4090, b"0123456789"), Ok(4100));
    assert!(ns.pending_data_bytes() > 0, "uncommitted: in memory");
    let (bytes, _) = r.read(ALICE, f, 1, 4085, 100);
    let mut want = vec![0u8; 5];
    want.extend_from_slice(b"0123456789");
    assert_eq!(
        bytes.unwrap(),
        want,
        "fewer bytes at the end, holes as zeros"
    );
    r.commit();
    assert_eq!(ns.pending_data_bytes(), 0, "durable: read from the store");
    let (bytes, _) = r.read(ALICE, f, 1, 4085, 100);
    assert_eq!(bytes.unwrap(), want);
    // Overwrite part of a committed block: the rest comes from the store.
    assert_eq!(r.write(ALICE, f, 1, 4095, b"X"), Ok(4100));
    r.commit();
    let (bytes, _) = r.read(ALICE, f, 1, 0, 8192);
    let bytes = bytes.unwrap();
    assert_eq!(bytes.len(), 4100);
    assert!(bytes[..4090].iter().all(|&b| b == 0));
    assert_eq!(&bytes[4090..], b"01234X6789");
    assert_eq!(ns.counts().file_bytes, 4100);
    drop(r);
    drop(ns);
    drop(journal);
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    assert_eq!(ns.counts().file_bytes, 4100, "reloaded from the sizes");
    r.open(ALICE, f, 9, RW).unwrap();
    let (bytes, _) = r.read(ALICE, f, 9, 4090, 10);
    assert_eq!(bytes.unwrap(), b"01234X6789");
}

/// A long attribute value is in memory only until its commit, then read from the store; a
/// short one stays in memory. Memory does not grow with the attribute bytes kept (1,500
/// values of 64 KiB once held 100 MiB, loaded again at every start).
#[test]
fn long_attribute_values_are_read_from_the_store_once_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    let long: Vec<u8> = (0..mds_proto::MAX_XATTR_VALUE).map(|i| i as u8).collect();
    let set = |name: &str, value: &[u8]| Op::Setxattr {
        ino: f,
        name: name.into(),
        value: mds_proto::XattrValue(value.to_vec()),
        how: mds_proto::XattrSet::Either,
    };
    let get = |name: &str| Op::Getxattr {
        ino: f,
        name: name.into(),
    };
    let value_of = |body: Body| match body {
        Body::Xattr(v) => v.0,
        other => panic!("{other:?}"),
    };
    let held = |ns: &Namespace, name: &str| {
        let l = ns.table.lock(&[f]);
        l.get(f).unwrap().xattrs.as_ref().unwrap().by_name[name]
            .in_memory()
            .map(<[u8]>::len)
    };
    r.hold = true;
    r.ok(ALICE, set("user.long", &long));
    r.ok(ALICE, set("user.short", b"blue"));
    assert_eq!(
        ns.pending_data_bytes(),
        long.len() as u64,
        "uncommitted: in memory"
    );
    assert_eq!(value_of(r.ok(ALICE, get("user.long"))), long);
    r.commit();
    assert_eq!(ns.pending_data_bytes(), 0);
    assert_eq!(
        held(&ns, "user.long"),
        None,
        "durable: memory keeps its length only"
    );
    assert_eq!(held(&ns, "user.short"), Some(4));
    assert_eq!(
        value_of(r.ok(ALICE, get("user.long"))),
        long,
        "read from the store"
    );
    // Replaced before its commit, then removed: nothing stays counted.
    r.ok(ALICE, set("user.long", &long[1..]));
    r.ok(ALICE, set("user.long", &long[2..]));
    assert_eq!(
        ns.pending_data_bytes(),
        (long.len() - 2) as u64,
        "the replaced one dropped"
    );
    assert_eq!(value_of(r.ok(ALICE, get("user.long"))), &long[2..]);
    r.ok(
        ALICE,
        Op::Removexattr {
            ino: f,
            name: "user.long".into(),
        },
    );
    assert_eq!(ns.pending_data_bytes(), 0);
    r.ok(ALICE, set("user.again", &long));
    r.commit();
    drop(r);
    drop(ns);
    drop(journal);
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    assert_eq!(held(&ns, "user.again"), None, "loaded as its length");
    assert_eq!(value_of(r.ok(ALICE, get("user.again"))), long);
    assert_eq!(value_of(r.ok(ALICE, get("user.short"))), b"blue");
    assert_eq!(r.exec(ALICE, get("user.long")).0, Err(Errno::ENODATA));
    // The file's removal takes a value still in memory with it from the count.
    r.hold = true;
    r.ok(ALICE, set("user.again", &long[1..]));
    assert!(ns.pending_data_bytes() > 0);
    r.ok(ALICE, unlink("f"));
    assert_eq!(ns.pending_data_bytes(), 0);
    r.commit();
}

#[test]
fn a_truncate_hides_the_stores_blocks_until_it_is_durable_and_cuts_them_after() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.open(ALICE, f, 1, RW).unwrap();
    let full: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8 + 1).collect();
    assert_eq!(r.write(ALICE, f, 1, 0, &full), Ok(3 * 4096));
    r.hold = true;
    let cut = |size| Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(size),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    r.ok(ALICE, cut(100));
    // Uncommitted: the store still holds all three blocks; grown again, they read as holes.
    r.ok(ALICE, cut(3 * 4096));
    let (bytes, _) = r.read(ALICE, f, 1, 0, 3 * 4096);
    let bytes = bytes.unwrap();
    assert_eq!(&bytes[..100], &full[..100]);
    assert!(bytes[100..].iter().all(|&b| b == 0), "cut, then a hole");
    r.commit();
    let (again, _) = r.read(ALICE, f, 1, 0, 3 * 4096);
    assert_eq!(again.unwrap(), bytes, "the same once durable");
    let mut blocks = Vec::new();
    journal
        .scan_data(|ino, block, b| {
            blocks.push((ino, block, b.len()));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        blocks,
        [(f, 0, 100)],
        "blocks past the cut are gone from the store"
    );
    // Bounds: past --inline-data-max, a write or a size is EFBIG.
    r.hold = false;
    assert_eq!(r.write(ALICE, f, 1, 64 << 10, b"x"), Err(Errno::EFBIG));
    assert_eq!(r.exec(ALICE, cut((64 << 10) + 1)).0, Err(Errno::EFBIG));
    assert_eq!(r.write(ALICE, f, 1, (64 << 10) - 1, b"x"), Ok(64 << 10));
}

#[test]
fn handles_check_what_they_were_opened_for() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    let g = r.create("g");
    let read_only = OpenFlags {
        read: true,
        ..OpenFlags::default()
    };
    r.open(ALICE, f, 1, read_only).unwrap();
    assert_eq!(
        r.write(ALICE, f, 1, 0, b"x"),
        Err(Errno::EBADF),
        "not open to write"
    );
    assert_eq!(
        r.write(ALICE, f, 2, 0, b"x"),
        Err(Errno::EBADF),
        "not open at all"
    );
    assert_eq!(
        r.write(ALICE, g, 1, 0, b"x"),
        Err(Errno::EBADF),
        "open on another inode"
    );
    assert_eq!(
        r.write(BOB, f, 1, 0, b"x"),
        Err(Errno::EBADF),
        "another client's number"
    );
    let ftruncate = Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(0),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    assert_eq!(
        r.exec(ALICE, ftruncate).0,
        Err(Errno::EINVAL),
        "ftruncate read-only"
    );
    assert_eq!(
        r.open(ALICE, g, 1, RW),
        Err(Errno::EINVAL),
        "a number in use"
    );
    assert!(
        r.open(ALICE, f, 1, read_only).is_ok(),
        "the same open again"
    );
    let write_only = OpenFlags {
        write: true,
        append: true,
        ..OpenFlags::default()
    };
    r.open(ALICE, f, 3, write_only).unwrap();
    assert_eq!(
        r.read(ALICE, f, 3, 0, 1).0,
        Err(Errno::EBADF),
        "not open to read"
    );
    assert_eq!(r.write(ALICE, f, 3, 0, b"ab"), Ok(2));
    assert_eq!(
        r.write(ALICE, f, 3, 0, b"cd"),
        Ok(4),
        "appended, whatever the offset"
    );
    assert_eq!(r.read(ALICE, f, 1, 0, 10).0.unwrap(), b"abcd");
    let symlink = match r.ok(
        ALICE,
        Op::Symlink {
            parent: ROOT_INO,
            name: "l".into(),
            target: mds_proto::Target(b"f".to_vec()),
        },
    ) {
        Body::Attr(a) => a.ino,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.open(ALICE, symlink, 5, read_only), Err(Errno::ELOOP));
    assert_eq!(r.open(ALICE, ROOT_INO, 5, RW), Err(Errno::EISDIR));
    assert!(
        r.open(ALICE, ROOT_INO, 5, read_only).is_ok(),
        "a directory, to read"
    );
    assert_eq!(r.read(ALICE, ROOT_INO, 5, 0, 1).0, Err(Errno::EISDIR));
    // O_TRUNC cuts the file, as a mutation.
    let trunc = OpenFlags {
        write: true,
        truncate: true,
        ..OpenFlags::default()
    };
    match r.open(ALICE, f, 6, trunc).unwrap() {
        Body::Attr(a) => assert_eq!(a.size, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(ns.open_files(), (4, 0), "1, 3, 5 and 6");
    for handle in [1, 3, 5, 6, 99] {
        assert_eq!(r.ok(ALICE, Op::Release { handle }), Body::Done);
    }
    assert_eq!(ns.open_files(), (0, 0));
    assert!(!ns.holds_handles(ALICE));
}

#[test]
fn a_write_clears_set_id_bits_unless_root_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.ok(
        ALICE,
        Op::Setattr {
            ino: f,
            attr: SetAttr {
                mode: Some(0o6755),
                ..SetAttr::default()
            },
        },
    );
    r.open(ALICE, f, 1, RW).unwrap();
    r.write(ALICE, f, 1, 0, b"root").unwrap();
    let mode = |ns: &Namespace| ns.table.lock(&[f]).get(f).unwrap().attr.mode;
    assert_eq!(mode(&ns), 0o6755, "root keeps them (CAP_FSETID)");
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let caller = Caller {
        client: ALICE,
        cred: &user,
        last_committed: journal.last_committed(),
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    let exec = ns.execute(
        Op::Write {
            ino: f,
            handle: 1,
            offset: 0,
            data: Data(b"user".to_vec()),
        },
        &caller,
    );
    assert!(matches!(exec, Exec::Mutation { .. }), "{exec:?}");
    assert_eq!(
        mode(&ns),
        0o0755,
        "set-user-ID and set-group-ID (with group x) go"
    );
}

#[test]
fn another_clients_read_of_uncommitted_data_waits_for_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.open(ALICE, f, 1, RW).unwrap();
    r.open(BOB, f, 1, RW).unwrap();
    r.hold = true;
    r.write(ALICE, f, 1, 0, b"new").unwrap();
    let transno = r.held[0].transno;
    let (bytes, wait) = r.read(BOB, f, 1, 0, 3);
    assert_eq!(bytes.unwrap(), b"new");
    assert_eq!(wait, transno, "Bob's answer waits for Alice's write");
    let (_, wait) = r.read(ALICE, f, 1, 0, 3);
    assert_eq!(wait, 0, "Alice's own write holds her back from nothing");
    r.commit();
    assert_eq!(r.read(BOB, f, 1, 0, 3).1, 0);
}

#[test]
fn an_open_file_outlives_its_last_name_until_its_last_release() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.open(ALICE, f, 1, RW).unwrap();
    r.open(BOB, f, 7, RW).unwrap();
    r.write(ALICE, f, 1, 0, b"kept").unwrap();
    r.hold = true;
    r.ok(ALICE, unlink("f"));
    let orphan = r.held[0]
        .ops
        .iter()
        .find_map(|op| match op {
            JournalOp::PutOrphan { ino, owners } => Some((*ino, owners.clone())),
            _ => None,
        })
        .expect("journaled as an orphan");
    assert_eq!(orphan, (f, vec![ALICE, BOB]));
    r.commit();
    assert_eq!(ns.open_files(), (2, 1));
    assert_eq!(
        r.read(BOB, f, 7, 0, 10).0.unwrap(),
        b"kept",
        "still readable"
    );
    let link = Op::Link {
        ino: f,
        parent: ROOT_INO,
        name: "back".into(),
    };
    assert_eq!(
        r.exec(ALICE, link).0,
        Err(Errno::ENOENT),
        "no new name for it"
    );
    r.ok(ALICE, Op::Release { handle: 1 });
    assert!(r.held.is_empty(), "Bob still holds it: nothing to journal");
    r.ok(BOB, Op::Release { handle: 7 });
    let ops = &r.held[0].ops;
    assert!(ops.contains(&JournalOp::DeleteOrphan(f)), "{ops:?}");
    assert!(ops.contains(&JournalOp::DeleteInode(f)), "{ops:?}");
    assert!(
        ops.iter()
            .any(|op| matches!(op, JournalOp::DeleteData { ino, .. } if *ino == f)),
        "{ops:?}"
    );
    r.commit();
    assert_eq!(ns.open_files(), (0, 0));
    assert_eq!(ns.counts().files, 0);
    let mut left = 0;
    journal
        .scan_data(|_, _, _| {
            left += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(left, 0, "its data went with it");
}

#[test]
fn orphans_are_reclaimed_when_their_session_ends_or_after_a_restart_unless_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let (a, b, c) = (r.create("a"), r.create("b"), r.create("c"));
    r.open(ALICE, a, 1, RW).unwrap();
    r.open(ALICE, b, 2, RW).unwrap();
    r.open(BOB, c, 3, RW).unwrap();
    for name in ["a", "b", "c"] {
        r.ok(ALICE, unlink(name));
    }
    // Alice's session ends: both of hers go, each in a record of its own.
    let records = ns.release_all(ALICE, journal.last_committed());
    assert_eq!(records.len(), 2);
    for record in &records {
        journal.commit(std::slice::from_ref(record)).unwrap();
    }
    assert_eq!(ns.open_files(), (1, 1));
    drop(r);
    drop(ns);
    drop(journal);
    // A crash with Bob's orphan: it waits for Bob, who takes it back without a check.
    let (ns, journal) = open_store(dir.path());
    assert_eq!(ns.orphan_owners(), vec![BOB]);
    assert_eq!(ns.open_files(), (0, 1));
    let reopen = Op::Open {
        ino: c,
        handle: 3,
        flags: RW,
        reopen: true,
    };
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let caller = |client| Caller {
        client,
        cred: &user,
        last_committed: journal.last_committed(),
        reuse_ino: None,
        replay: false,
        atime: mds_proto::Atime::default(),
    };
    let refused = ns.execute(reopen.clone(), &caller(ALICE));
    assert!(
        matches!(
            refused,
            Exec::Now {
                result: Err(Errno::EACCES),
                ..
            }
        ),
        "not Alice's to take back: checked, and 0644 root's is not hers to write: {refused:?}"
    );
    let taken = ns.execute(reopen, &caller(BOB));
    assert!(
        matches!(taken, Exec::Now { result: Ok(_), .. }),
        "{taken:?}"
    );
    assert!(
        ns.reclaim_orphans(journal.last_committed()).is_empty(),
        "taken back"
    );
    let released = ns.release_all(BOB, journal.last_committed());
    assert_eq!(released.len(), 1, "its last handle takes it");
    journal.commit(&released).unwrap();
    drop(ns);
    drop(journal);
    let (ns, _journal) = open_store(dir.path());
    assert_eq!(ns.open_files(), (0, 0));
    assert_eq!(ns.counts().files, 0);
}

#[test]
fn orphans_nobody_takes_back_go_when_recovery_ends() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (ns, journal) = open_store(dir.path());
        let mut r = Run::new(&ns, &journal);
        let f = r.create("f");
        r.open(ALICE, f, 1, RW).unwrap();
        r.write(ALICE, f, 1, 0, &[7; 9000]).unwrap();
        r.ok(ALICE, unlink("f"));
    }
    let (ns, journal) = open_store(dir.path());
    assert_eq!(ns.open_files(), (0, 1));
    let records = ns.reclaim_orphans(journal.last_committed());
    assert_eq!(records.len(), 1);
    journal.commit(&records).unwrap();
    drop(ns);
    drop(journal);
    let (ns, journal) = open_store(dir.path());
    assert_eq!(ns.open_files(), (0, 0));
    assert_eq!(ns.counts().files, 0);
    let mut left = 0;
    journal
        .scan_data(|_, _, _| {
            left += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(left, 0);
}

/// A file on the server counts the blocks holding data, holes left out — what `st_blocks`
/// shows: a block written twice counts once, a whole-block overwrite of a stored block, of
/// one held in memory, or of one an uncommitted truncate cut is told apart, a truncate takes
/// away what it cuts off, and the count survives a reload and adds up in STATFS.
#[test]
fn a_file_counts_the_blocks_that_hold_data_not_its_holes() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    let f = r.create("f");
    r.open(ALICE, f, 1, RW).unwrap();
    let blocks = |r: &mut Run<'_>| match r.ok(ALICE, Op::Getattr { ino: f }) {
        Body::Attr(a) => a.blocks / 8,
        other => panic!("{other:?}"),
    };
    let block = vec![7u8; 4096];
    // Block 10 alone: a 44 KiB file holding one block.
    assert_eq!(r.write(ALICE, f, 1, 10 * 4096, &block), Ok(11 * 4096));
    assert_eq!(blocks(&mut r), 1);
    // Part of block 3 (a hole until now), then all of block 10 again (stored: no more).
    r.write(ALICE, f, 1, 3 * 4096 + 5, b"abc").unwrap();
    r.write(ALICE, f, 1, 10 * 4096, &block).unwrap();
    assert_eq!(blocks(&mut r), 2);
    // Uncommitted: a whole block written twice before its commit counts once.
    r.hold = true;
    r.write(ALICE, f, 1, 5 * 4096, &block).unwrap();
    r.write(ALICE, f, 1, 5 * 4096, &block).unwrap();
    assert_eq!(blocks(&mut r), 3);
    let cut = |size| Op::Setattr {
        ino: f,
        attr: SetAttr {
            size: Some(size),
            handle: Some(1),
            ..SetAttr::default()
        },
    };
    // Cut to 4 blocks (blocks 5 in memory and 10 in the store go), grown again: block 10's
    // stored copy is a hole now, and writing it whole makes it data again.
    r.ok(ALICE, cut(4 * 4096));
    assert_eq!(blocks(&mut r), 1, "block 3 is left");
    r.ok(ALICE, cut(11 * 4096));
    r.write(ALICE, f, 1, 10 * 4096, &block).unwrap();
    assert_eq!(blocks(&mut r), 2);
    r.commit();
    assert_eq!(blocks(&mut r), 2, "the same once durable");
    // Cut into block 3: it keeps the bytes before the cut, and its count.
    r.ok(ALICE, cut(3 * 4096 + 6));
    r.commit();
    assert_eq!(blocks(&mut r), 1);
    assert_eq!(ns.counts().data_bytes, 4096);
    let g = r.create("g");
    r.open(ALICE, g, 2, RW).unwrap();
    r.write(ALICE, g, 2, 0, &vec![1u8; 3 * 4096 + 1]).unwrap();
    r.commit();
    assert_eq!(ns.counts().data_bytes, 5 * 4096);
    drop(r);
    drop(ns);
    drop(journal);
    let (ns, journal) = open_store(dir.path());
    let mut r = Run::new(&ns, &journal);
    assert_eq!(blocks(&mut r), 1, "reloaded");
    assert_eq!(ns.counts().data_bytes, 5 * 4096, "reloaded from the counts");
    r.ok(ALICE, unlink("g"));
    assert_eq!(
        ns.counts().data_bytes,
        4096,
        "a deleted file's data is gone"
    );
}
