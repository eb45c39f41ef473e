//! `mds fsck` as a user runs it: a clean store passes, a store a running server holds is
//! refused, and each kind of damage is reported.

mod common;

use std::process::Command;

use common::{MDS, fsck};
use journal::{Dentry, FileKind, Inode, Journal, JournalOp, JournalOptions, ROOT_INO, TxRecord};
use mds_client::ROOT;

#[test]
fn fsck_passes_a_clean_store_and_reports_each_finding_of_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = common::start(dir.path(), &[]);
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let client = server.client().await;
            let a = client.mkdir(ROOT, "a", 0o755).await.unwrap();
            let b = client.mkdir(a.ino, "b", 0o755).await.unwrap();
            client.create(b.ino, "f", 0o644).await.unwrap();
        });
        assert!(server.stop().success());
    }
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 findings"), "{out}");
    {
        // A store a running server holds is refused, not half-read.
        let server = common::start(dir.path(), &[]);
        let (code, out) = fsck(dir.path());
        assert_eq!(code, 2, "{out}");
        assert!(
            out.contains(&format!(
                "in use by a running server (pid {})",
                server.pid()
            )),
            "{out}"
        );
    }

    // Damage it the way a broken writer would: an entry to nowhere, an orphan inode, and a
    // resend record whose reply is not a reply.
    {
        let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let t = rec.last_committed + 1;
        let mut orphan = j.inode(ROOT_INO).unwrap().unwrap();
        orphan.ino = rec.next_ino;
        orphan.kind = FileKind::File;
        orphan.nlink = 1;
        orphan.transno = t;
        j.commit(&[TxRecord {
            transno: t,
            ops: vec![
                JournalOp::PutDentry {
                    parent: ROOT_INO,
                    name: "dangling".into(),
                    entry: Dentry {
                        ino: 999_999,
                        kind: FileKind::File,
                    },
                },
                JournalOp::PutInode(orphan),
                JournalOp::PutResend {
                    client: 7,
                    acked_xid: 0,
                    record: journal::ResendRecord {
                        xid: 1,
                        transno: t,
                        reply: vec![0xff, 0xff].into(),
                    },
                },
            ],
        }])
        .unwrap();
    }
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("names inode 999999 which does not exist"),
        "{out}"
    );
    assert!(out.contains("orphan"), "{out}");
    assert!(out.contains("records 1 entries but has 2"), "{out}");
    assert!(
        out.contains("resend record of client 0000000000000007 xid 1: reply does not decode"),
        "{out}"
    );

    let missing = Command::new(MDS)
        .args(["fsck", "--data"])
        .arg(dir.path().join("no-such-store"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        !dir.path().join("no-such-store").exists(),
        "fsck never creates a directory"
    );
}

/// A store with damage committed straight through the journal, as a broken writer would.
fn damaged(records: impl FnOnce(&Journal, u64, u64) -> Vec<JournalOp>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let t = rec.last_committed + 1;
    let ops = records(&j, t, rec.next_ino);
    j.commit(&[TxRecord { transno: t, ops }]).unwrap();
    dir
}

/// A file's image `ino` written at transno `t`, made from the root's.
fn file_image(j: &Journal, ino: u64, t: u64) -> Inode {
    let mut f = j.inode(ROOT_INO).unwrap().unwrap();
    f.ino = ino;
    f.kind = FileKind::File;
    f.nlink = 1;
    f.parent = 0;
    f.entries = 0;
    f.transno = t;
    f
}

/// The root's entry `name` for file `ino`.
fn root_entry(name: &str, ino: u64) -> JournalOp {
    JournalOp::PutDentry {
        parent: ROOT_INO,
        name: name.into(),
        entry: Dentry {
            ino,
            kind: FileKind::File,
        },
    }
}

/// Regression: an entry naming a missing inode loaded fine, and a later UNLINK of it panicked
/// a partition while it held its transno, so every commit after it waited forever.
#[test]
fn a_store_whose_entry_names_a_missing_inode_is_refused_at_start() {
    let dir = damaged(|_, _, _| vec![root_entry("dangling", 999_999)]);
    let err = common::InProcess::on(dir.path()).join().unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("entry 1/\"dangling\" names inode 999999, which does not exist"),
        "{msg}"
    );
    assert!(msg.contains("mds fsck"), "{msg}");

    // An entry that says "file" for a directory is refused the same way.
    let dir = damaged(|j, t, next| {
        let mut sub = j.inode(ROOT_INO).unwrap().unwrap();
        sub.ino = next;
        sub.transno = t;
        vec![
            JournalOp::PutInode(sub),
            JournalOp::PutDentry {
                parent: ROOT_INO,
                name: "sub".into(),
                entry: Dentry {
                    ino: next,
                    kind: FileKind::File,
                },
            },
        ]
    });
    let err = common::InProcess::on(dir.path()).join().unwrap_err();
    assert!(
        format!("{err:#}").contains("is a Directory, not a File"),
        "{err:#}"
    );
}

/// Entries are keyed by the child they name: two children under one name are two keys, which
/// only a broken writer leaves. The server refuses such a store at start, and fsck finds the
/// directory holding more entries than it counts.
#[test]
fn a_store_with_two_entries_under_one_name_is_refused_at_start() {
    let dir = damaged(|j, t, next| {
        let mut root = j.inode(ROOT_INO).unwrap().unwrap();
        root.entries = 1;
        root.transno = t;
        vec![
            JournalOp::PutInode(file_image(j, next, t)),
            JournalOp::PutInode(file_image(j, next + 1, t)),
            JournalOp::PutInode(root),
            root_entry("twice", next),
            root_entry("twice", next + 1),
        ]
    });
    let err = common::InProcess::on(dir.path()).join().unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("two entries 1/\"twice\""), "{msg}");
    assert!(msg.contains("mds fsck"), "{msg}");
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("records 1 entries but has 2"), "{out}");
}

/// A directory whose image records more entries than the store holds under it has lost
/// some (the creates that made them were acknowledged): the server refuses to serve it
/// without them, naming the directory and both counts, and fsck finds the same.
#[test]
fn a_store_missing_entries_its_directory_records_is_refused_at_start() {
    let dir = damaged(|j, t, next| {
        let mut root = j.inode(ROOT_INO).unwrap().unwrap();
        // Three created, one entry left.
        root.entries = 3;
        root.transno = t;
        vec![
            JournalOp::PutInode(file_image(j, next, t)),
            JournalOp::PutInode(root),
            root_entry("kept", next),
        ]
    });
    let err = common::InProcess::on(dir.path()).join().unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("directory 1 records 3 entries and the store holds 1"),
        "{msg}"
    );
    assert!(msg.contains("mds fsck"), "{msg}");
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("records 3 entries but has 1"), "{out}");
}

#[test]
fn fsck_finds_directories_cut_off_from_the_root_and_cycles() {
    let dir = damaged(|j, t, next| {
        let root = j.inode(ROOT_INO).unwrap().unwrap();
        let dir = |ino: u64, parent: u64| {
            let mut d = root.clone();
            d.ino = ino;
            d.parent = parent;
            d.nlink = 3;
            d.entries = 1;
            d.transno = t;
            d
        };
        let (a, b) = (next, next + 1);
        let entry = |parent: u64, name: &str, ino: u64| JournalOp::PutDentry {
            parent,
            name: name.into(),
            entry: Dentry {
                ino,
                kind: FileKind::Directory,
            },
        };
        // a contains b and b contains a: each is named once, neither is reachable.
        vec![
            JournalOp::PutInode(dir(a, b)),
            JournalOp::PutInode(dir(b, a)),
            entry(a, "b", b),
            entry(b, "a", a),
        ]
    });
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("directory cycle: "), "{out}");
    assert!(out.contains("not reachable from the root"), "{out}");
    assert!(!out.contains("orphan ("), "each is named once: {out}");
}

/// Each file's count of the data it holds (`st_blocks`) is checked against what is there:
/// the blocks stored for a file on the server, what the layout covers for one in objects.
#[test]
fn fsck_finds_a_file_whose_data_count_is_not_what_it_holds() {
    let dir = damaged(|j, t, next| {
        let (right, wrong, in_objects) = (next, next + 1, next + 2);
        let block = |ino, block| JournalOp::PutData {
            ino,
            block,
            bytes: vec![1; 4096],
        };
        let on_server = |ino, data_blocks| {
            JournalOp::PutInode(Inode {
                size: 5 * 4096,
                data_blocks,
                ..file_image(j, ino, t)
            })
        };
        vec![
            on_server(right, 2),
            block(right, 0),
            block(right, 4),
            on_server(wrong, 5),
            block(wrong, 1),
            JournalOp::PutInode(Inode {
                size: 1 << 30,
                entries: 1,
                data_blocks: 0,
                ..file_image(j, in_objects, t)
            }),
            JournalOp::PutLayout {
                ino: in_objects,
                placed: vec![mds_proto::Placed {
                    slice: 1,
                    slice_size: 8192,
                    slice_off: 0,
                    file_off: 1 << 20,
                    len: 8192,
                }],
            },
            root_entry("right", right),
            root_entry("wrong", wrong),
            root_entry("objects", in_objects),
        ]
    });
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    let (right, wrong, in_objects) = {
        let (_, rec) = Journal::open_read_only(dir.path()).unwrap();
        let next = rec.next_ino - 3;
        (next, next + 1, next + 2)
    };
    assert!(
        out.contains(&format!("inode {wrong}: holds 1 data blocks, counts 5")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "layout of inode {in_objects}: covers 2 blocks, the inode counts 0"
        )),
        "{out}"
    );
    assert!(!out.contains(&format!("inode {right}:")), "{out}");
}
