//! The store's own tests: what a commit writes, byte for byte; resend slots; schema
//! versions and upgrades; and how the write-ahead log and the block cache behave under load.

use super::*;
use crate::options::Tuning;
use crate::schema::{
    CF_CLIENTS, CF_DATA, CF_DENTRIES, CF_EDITS, CF_INODES, CF_ORPHANS, CF_XATTRS, Dentry,
    ENCODING_CHANGED, FileKind, Inode, InodeV2, JournalOp, META_DENTRIES_TO_REKEY,
    META_INO_CEILING, META_REPLAY_KEY, META_SCHEMA_VERSION, META_TRANSNO_CEILING, PendingDir,
    ROOT_INO, ResendRecord, SCHEMA_VERSION, TxRecord, decode, dentry_key, encode, hex, ino_key,
    is_child_keyed,
};
use images::last_images;
use rocksdb::IteratorMode;
use std::path::Path;

/// The store itself, to change its families (no checkpointer holds it in these tests).
fn db_mut(j: &mut Journal) -> &mut DB {
    Arc::get_mut(&mut j.db).expect("no other holder of the store")
}

/// Every key and value in the store, family by family, as hex; the replay key, drawn at
/// random, by its length.
pub(super) fn raw_contents(j: &Journal) -> Vec<String> {
    let mut out = Vec::new();
    for name in ALL_CFS {
        for item in j.db.iterator_cf(j.cf(name), IteratorMode::Start) {
            let (key, value) = item.unwrap();
            let value = if name == CF_META && &*key == META_REPLAY_KEY {
                format!("({} random bytes)", value.len())
            } else {
                hex(&value)
            };
            out.push(format!("{name} {} = {value}", hex(&key)));
        }
    }
    out
}

/// What two committed transactions leave on disk, byte for byte: the key layouts, the
/// record encodings and the `meta` values together. Transactions themselves are never
/// stored whole; this is what a `TxRecord` and each kind of `JournalOp` become.
#[test]
fn what_a_commit_writes_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let inode = |ino, kind, nlink, parent, entries, transno| Inode {
        ino,
        kind,
        mode: 0o755,
        uid: 1000,
        gid: 100,
        nlink,
        size: 0,
        ctime_ns: 1_000,
        mtime_ns: 2_000,
        generation: ino,
        parent,
        entries,
        transno,
        atime_ns: 0,
        rdev: 0,
        target: Vec::new(),
        data_blocks: 0,
    };
    let resend = |xid| JournalOp::PutResend {
        client: 7,
        acked_xid: xid - 1,
        record: ResendRecord {
            xid,
            transno: xid,
            reply: vec![0xee].into(),
        },
    };
    // mkdir /d (inode 2), then create /d/f (inode 3) and unlink /g (inode 4, made and
    // removed in one batch, so only its absence shows), with resend records for xids 1
    // and 2 of client 7; the request of xid 2 says the client has the reply of xid 1.
    // Inodes 2 and 3 are created by these transactions (their generation is the transno of
    // the record that puts their first entry): their images go into those entries.
    let new = |generation, inode| Inode {
        generation,
        ..inode
    };
    let records = [
        TxRecord {
            transno: 1,
            ops: vec![
                JournalOp::PutInode(new(1, inode(2, FileKind::Directory, 2, ROOT_INO, 0, 1))),
                JournalOp::PutDentry {
                    parent: ROOT_INO,
                    name: "d".into(),
                    entry: Dentry {
                        ino: 2,
                        kind: FileKind::Directory,
                    },
                },
                JournalOp::PutInode(inode(ROOT_INO, FileKind::Directory, 3, ROOT_INO, 1, 1)),
                JournalOp::PutInode(inode(4, FileKind::File, 1, 0, 0, 1)),
                JournalOp::PutDentry {
                    parent: ROOT_INO,
                    name: "g".into(),
                    entry: Dentry {
                        ino: 4,
                        kind: FileKind::File,
                    },
                },
                resend(1),
            ],
        },
        TxRecord {
            transno: 2,
            ops: vec![
                JournalOp::PutInode(new(2, inode(3, FileKind::File, 1, 0, 0, 2))),
                JournalOp::PutDentry {
                    parent: 2,
                    name: "f".into(),
                    entry: Dentry {
                        ino: 3,
                        kind: FileKind::File,
                    },
                },
                JournalOp::PutInode(new(1, inode(2, FileKind::Directory, 2, ROOT_INO, 1, 2))),
                JournalOp::DeleteDentry {
                    parent: ROOT_INO,
                    name: "g".into(),
                    child: 4,
                },
                JournalOp::DeleteInode(4),
                JournalOp::PutXattr {
                    ino: 3,
                    name: "user.k".into(),
                    value: vec![0xab],
                },
                JournalOp::PutData {
                    ino: 3,
                    block: 1,
                    bytes: vec![1, 2],
                },
                JournalOp::PutOrphan {
                    ino: 3,
                    owners: vec![7],
                },
                JournalOp::PutLayout {
                    ino: 3,
                    placed: vec![mds_proto::Placed {
                        slice: 9,
                        slice_size: 300,
                        slice_off: 1,
                        file_off: 2,
                        len: 3,
                    }],
                },
                JournalOp::LayoutGone {
                    ino: 5,
                    since: 1000,
                },
                JournalOp::PutGarbage {
                    slice: 8,
                    size: 200,
                    since: 1001,
                },
                JournalOp::NextSlice(16),
                resend(2),
            ],
        },
    ];
    j.commit(&records).unwrap();
    let golden = [
        // key: ino, u64 BE. value: postcard Inode.
        // The last four bytes: atime_ns 0, rdev 0, no target, no data counted.
        "inodes 0000000000000001 = 0100ed03e807640300d00fa01f0101010100000000",
        // key: child u64 BE ++ parent u64 BE ++ name's UTF-8 ("d", "f"). value: postcard
        // Dentry, then (an inode these records created) the inode's last image of the
        // commit, as `inodes` would hold it: /d's second (1 entry, transno 2), /f's.
        "dentries 0000000000000002000000000000000164 = 02000200ed03e807640200d00fa01f0101010200000000",
        "dentries 0000000000000003000000000000000266 = 03010301ed03e807640100d00fa01f0200000200000000",
        // key: client u64 BE ++ slot u32 BE. value: postcard ResendSlot: watermark 1, then
        // the records above it (xid 2, transno 2, reply ee); xid 1's was never written.
        "clients 000000000000000700000000 = 0101020201ee",
        // "ino_ceiling" (a lease of 2^20 above the highest inode number in use),
        // "last_committed", "next_ino" (one past the highest inode put), "replay_key" (32
        // random bytes), "schema_version", "transno_ceiling" (a lease of 2^17 above the last
        // transno committed): u64, u64, u64, raw, u32 and u64, little-endian.
        // "garbage/" ++ slice u64 BE: postcard (size, since).
        "meta 676172626167652f0000000000000008 = c801e907",
        "meta 696e6f5f6365696c696e67 = 0500100000000000",
        "meta 6c6173745f636f6d6d6974746564 = 0200000000000000",
        // "layout/" ++ ino u64 BE: postcard Vec<Placed> (slice, slice_size, slice_off,
        // file_off, len); "layout_gone/" ++ ino: postcard since.
        "meta 6c61796f75742f0000000000000003 = 0109ac02010203",
        "meta 6c61796f75745f676f6e652f0000000000000005 = e807",
        "meta 6e6578745f696e6f = 0500000000000000",
        // "next_slice": u64 LE.
        "meta 6e6578745f736c696365 = 1000000000000000",
        "meta 7265706c61795f6b6579 = (32 random bytes)",
        "meta 736368656d615f76657273696f6e = 09000000",
        "meta 7472616e736e6f5f6365696c696e67 = 0200020000000000",
        // key: ino u64 BE ++ name's bytes ("user.k"). value: the bytes as given.
        "xattrs 0000000000000003757365722e6b = ab",
        // key: ino u64 BE ++ block u32 BE. value: the block's bytes.
        "data 000000000000000300000001 = 0102",
        // key: ino u64 BE. value: postcard Vec<u64> of the clients that held it open.
        "orphans 0000000000000003 = 0107",
    ];
    assert_eq!(raw_contents(&j), golden, "{ENCODING_CHANGED}");
}

/// A directory imaged by every create of a batch is written once, with its last image;
/// an inode put and deleted in one batch only as its deletion, one deleted and put again
/// only as its last image.
#[test]
fn a_batch_writes_each_inode_once_with_its_last_state() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let image = |ino, kind, entries, transno| {
        JournalOp::PutInode(Inode {
            ino,
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: entries,
            ctime_ns: transno as i64,
            mtime_ns: transno as i64,
            generation: ino,
            parent: ROOT_INO,
            entries,
            transno,
            atime_ns: 0,
            rdev: 0,
            target: Vec::new(),
            data_blocks: 0,
        })
    };
    let memtable_entries = |j: &Journal| {
        j.db.property_int_value_cf(j.cf(CF_INODES), "rocksdb.num-entries-active-mem-table")
            .unwrap()
            .unwrap()
    };
    let before = memtable_entries(&j);
    // Ten creates in directory 2: each puts its file (10..20) and re-images the directory.
    // File 19, the highest, is then unlinked; file 11 unlinked and its inode number put
    // again (a store never reuses one, but the batch must not care).
    let mut records: Vec<TxRecord> = (1..=10u64)
        .map(|t| TxRecord {
            transno: t,
            ops: vec![
                image(9 + t, FileKind::File, 0, t),
                image(2, FileKind::Directory, t, t),
            ],
        })
        .collect();
    records.push(TxRecord {
        transno: 11,
        ops: vec![JournalOp::DeleteInode(19), JournalOp::DeleteInode(11)],
    });
    records.push(TxRecord {
        transno: 12,
        ops: vec![image(11, FileKind::File, 0, 12)],
    });
    let (last, _) = last_images(&records);
    let order: Vec<u64> = last.iter().map(|(ino, _)| *ino).collect();
    assert_eq!(
        order,
        [2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
        "once each, in key order"
    );
    j.commit(&records).unwrap();
    // Directory 2 once, files 10..=18 once each, file 19's deletion.
    assert_eq!(memtable_entries(&j) - before, 1 + 9 + 1);
    assert_eq!(j.inode(2).unwrap().unwrap().entries, 10, "the last image");
    assert_eq!(j.inode(19).unwrap(), None);
    assert_eq!(j.inode(11).unwrap().unwrap().transno, 12);
    assert_eq!(j.inode(18).unwrap().unwrap().transno, 9);
    // next_ino still counts every inode put, written or not: 19's put was not written.
    drop(j);
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.next_ino, 20);
}

pub(super) fn put_resend(client: u64, acked_xid: u64, xid: u64) -> JournalOp {
    JournalOp::PutResend {
        client,
        acked_xid,
        record: ResendRecord {
            xid,
            transno: 0,
            reply: vec![xid as u8].into(),
        },
    }
}

/// Commits one transaction per op list, each with the next transno.
pub(super) fn commit_each(j: &Journal, ops: Vec<Vec<JournalOp>>) {
    for ops in ops {
        let transno = j.last_committed() + 1;
        j.commit(&[TxRecord { transno, ops }]).unwrap();
    }
}

/// Each recovered client's number, acknowledged xid and its records' xids.
pub(super) fn resend_xids(recovered: &Recovered) -> Vec<(u64, u64, Vec<u64>)> {
    recovered
        .resend
        .iter()
        .map(|c| {
            (
                c.client,
                c.acked_xid,
                c.records.iter().map(|r| r.xid).collect(),
            )
        })
        .collect()
}

pub(super) fn clients_keys(j: &Journal) -> Vec<String> {
    raw_contents(j)
        .into_iter()
        .filter_map(|l| l.strip_prefix("clients ").map(|k| k[..24].to_owned()))
        .collect()
}

/// At one request in flight a client gets a record in nearly every commit, each rewriting
/// its slot: the `clients` memtable overwrites the slot's entry where it is rather than
/// adding one a commit (which a flush then had to sort: 2,400 instructions a create at
/// 64 x 1, docs/BENCHMARKS.md). A record that outgrows the entry it replaces is added
/// instead; either way the last one written is what a restart reads.
#[test]
fn a_slot_rewritten_by_every_commit_keeps_one_memtable_entry() {
    let dir = tempfile::tempdir().unwrap();
    let entries = |j: &Journal| {
        j.db.property_int_value_cf(j.cf(CF_CLIENTS), "rocksdb.num-entries-active-mem-table")
            .unwrap()
            .unwrap()
    };
    let commits = 1000u64;
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        // Each commit acks the previous reply, so slot 0 is the only one in use.
        commit_each(
            &j,
            (1..=commits)
                .map(|xid| vec![put_resend(7, xid - 1, xid), put_resend(9, xid - 1, xid)])
                .collect(),
        );
        assert_eq!(
            clients_keys(&j),
            ["000000000000000700000000", "000000000000000900000000"]
        );
        // Two clients' slots; an xid or ack past 127 takes one more byte, and only that
        // grown record is added rather than written over.
        let held = entries(&j);
        assert!(
            held <= 6,
            "{held} memtable entries for 2 slots over {commits} commits"
        );
    }
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let last = resend_xids(&recovered);
    assert_eq!(
        last,
        [
            (7, commits - 1, vec![commits]),
            (9, commits - 1, vec![commits])
        ]
    );
}

#[test]
fn resend_slots_are_overwritten_in_place_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(
            &j,
            vec![
                vec![put_resend(7, 0, 1)],
                vec![put_resend(7, 0, 2), put_resend(9, 0, 1)],
                // Client 7 has the replies of 1 and 2 now: slot 0 is free again.
                vec![put_resend(7, 2, 3)],
                vec![put_resend(7, 2, 4)],
            ],
        );
        let keys = clients_keys(&j);
        assert_eq!(
            keys,
            [
                "000000000000000700000000",
                "000000000000000700000001",
                "000000000000000900000000"
            ],
            "two slots for client 7 however many commits"
        );
    }
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let xids = resend_xids(&recovered);
    assert_eq!(xids, [(7, 2, vec![3, 4]), (9, 0, vec![1])]);
    // The slot state survived too: after the client acks 3, the slot of 3 is reused.
    commit_each(&j, vec![vec![put_resend(7, 3, 5)]]);
    assert_eq!(clients_keys(&j).len(), 3);
    // A session's end deletes its slots, and a record put after the drop in the same
    // batch (a new session of the same identity) is kept.
    commit_each(
        &j,
        vec![vec![
            put_resend(9, 0, 2),
            JournalOp::DropResend { client: 9 },
            JournalOp::DropResend { client: 7 },
            put_resend(7, 5, 6),
        ]],
    );
    assert_eq!(clients_keys(&j), ["000000000000000700000000"]);
    j.write_client_changes(&[JournalOp::DropResend { client: 7 }])
        .unwrap();
    assert!(clients_keys(&j).is_empty());
}

#[test]
fn records_the_client_already_has_replies_for_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    // In one batch: xid 1, then a request saying the client has the reply of 1 and 2.
    let records = [
        TxRecord {
            transno: 1,
            ops: vec![put_resend(7, 0, 1)],
        },
        TxRecord {
            transno: 2,
            ops: vec![put_resend(7, 2, 2)],
        },
    ];
    j.commit(&records).unwrap();
    assert!(clients_keys(&j).is_empty());
}

/// Puts every entry of the store under its key of versions before 5 (parent ++ name), and
/// every inode under its own key: before version 6 no entry carried an image.
fn parent_keyed(j: &Journal) {
    images_apart(j);
    let entries: Vec<_> =
        j.db.iterator_cf(j.cf(CF_DENTRIES), IteratorMode::Start)
            .map(|item| item.unwrap())
            .collect();
    for (key, value) in entries {
        let (_, parent, name) = crate::schema::decode_dentry_key(&key).unwrap();
        j.db.delete_cf(j.cf(CF_DENTRIES), &key).unwrap();
        j.db.put_cf(
            j.cf(CF_DENTRIES),
            crate::schema::named_key(parent, &name),
            value,
        )
        .unwrap();
    }
}

/// Moves every image an entry carries under its inode's own key, as version 5 kept them.
fn images_apart(j: &Journal) {
    let mut inodes = Vec::new();
    j.scan_inodes(|inode| {
        inodes.push(inode);
        Ok(())
    })
    .unwrap();
    for inode in inodes {
        j.db.put_cf(j.cf(CF_INODES), ino_key(inode.ino), encode(&inode))
            .unwrap();
    }
    let entries: Vec<_> =
        j.db.iterator_cf(j.cf(CF_DENTRIES), IteratorMode::Start)
            .map(|item| item.unwrap())
            .collect();
    for (key, value) in entries {
        let entry: Dentry = crate::schema::decode("dentry", &value).unwrap();
        j.db.put_cf(j.cf(CF_DENTRIES), &key, encode(&entry))
            .unwrap();
    }
}

/// Every entry's (parent, name, child), sorted, as a scan of `j` reads them.
pub(super) fn entries(j: &Journal) -> Vec<(u64, String, u64)> {
    let mut seen = Vec::new();
    j.scan_dentries(|parent, name, e| {
        seen.push((parent, name, e.ino));
        Ok(())
    })
    .unwrap();
    seen.sort();
    seen
}

/// Makes the store at `dir` look as a build of schema `version` (1 to 4) left it: every
/// entry under its parent's key; for 1 to 3 no `data` or `orphans` family; for 1 and 2 every
/// inode in their layout and no `xattrs` family either; and the version recorded.
fn downgrade(dir: &Path, version: u32) {
    let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
    parent_keyed(&j);
    // Every version before 6 came before the edit log.
    db_mut(&mut j).drop_cf(CF_EDITS).unwrap();
    if version == 4 {
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, version.to_le_bytes())
            .unwrap();
        return;
    }
    db_mut(&mut j).drop_cf(CF_DATA).unwrap();
    db_mut(&mut j).drop_cf(CF_ORPHANS).unwrap();
    if version == 3 {
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, version.to_le_bytes())
            .unwrap();
        return;
    }
    db_mut(&mut j).drop_cf(CF_XATTRS).unwrap();
    let mut old = Vec::new();
    j.scan_inodes(|inode| {
        old.push(InodeV2 {
            ino: inode.ino,
            kind: inode.kind,
            mode: inode.mode,
            uid: inode.uid,
            gid: inode.gid,
            nlink: inode.nlink,
            size: inode.size,
            ctime_ns: inode.ctime_ns,
            mtime_ns: inode.mtime_ns,
            generation: inode.generation,
            parent: inode.parent,
            entries: inode.entries,
            transno: inode.transno,
        });
        Ok(())
    })
    .unwrap();
    for inode in old {
        j.db.put_cf(j.cf(CF_INODES), ino_key(inode.ino), encode(&inode))
            .unwrap();
    }
    j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, version.to_le_bytes())
        .unwrap();
}

/// A store of versions 1 or 2: read as it is by a read-only open (fsck), and upgraded by the
/// first writable one, every inode at once, its atime taken from its mtime; the version says
/// so after, and the next open has nothing to upgrade.
#[test]
fn a_store_of_version_2_is_read_as_it_is_and_upgraded_by_the_first_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let mut file = Inode::root(5);
        file.ino = 2;
        file.kind = FileKind::File;
        file.mtime_ns = 77;
        file.transno = 1;
        j.commit(&[TxRecord {
            transno: 1,
            ops: vec![
                JournalOp::PutInode(file),
                JournalOp::BindSession {
                    client: 7,
                    secret: [9; SECRET_LEN],
                },
                put_resend(7, 0, 1),
            ],
        }])
        .unwrap();
    }
    downgrade(dir.path(), 2);
    let read = |j: &Journal| {
        let mut seen = Vec::new();
        j.scan_inodes(|i| {
            seen.push((
                i.ino,
                i.kind,
                i.mtime_ns,
                i.atime_ns,
                i.rdev,
                i.target.len(),
            ));
            Ok(())
        })
        .unwrap();
        seen
    };
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(
        recovered.upgraded_from, None,
        "a read-only open changes nothing"
    );
    let before = read(&ro);
    assert_eq!(before[1], (2, FileKind::File, 77, 77, 0, 0));
    assert_eq!(ro.inode(2).unwrap().unwrap().atime_ns, 77);
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(2));
    assert_eq!(read(&j), before, "the same inodes, in the new layout");
    // No client of the old protocol can reach this build: its sessions went.
    assert!(recovered.resend.is_empty() && recovered.sessions.is_empty());
    assert!(clients_keys(&j).is_empty());
    assert!(j.db.cf_handle(CF_XATTRS).is_some(), "added once current");
    assert!(j.db.cf_handle(CF_DATA).is_some() && j.db.cf_handle(CF_ORPHANS).is_some());
    upgraded_for_good(j, dir.path());
}

/// The end of an upgrade: the store records this build's version, and the next open finds
/// nothing left to upgrade.
fn upgraded_for_good(j: Journal, dir: &Path) {
    let v = j.db.get_cf(j.cf(CF_META), META_SCHEMA_VERSION).unwrap();
    assert_eq!(v.unwrap(), SCHEMA_VERSION.to_le_bytes());
    drop(j);
    let (_, recovered) = Journal::open(dir, JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, None);
}

/// A store of version 3 (before file data): its inodes are read as they are, and the first
/// writable open adds the two families and records the version; its old sessions go.
#[test]
fn a_store_of_version_3_gets_the_data_and_orphan_families() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let mut file = Inode::root(5);
        file.ino = 2;
        file.kind = FileKind::File;
        j.commit(&[TxRecord {
            transno: 1,
            ops: vec![JournalOp::PutInode(file), put_resend(7, 0, 1)],
        }])
        .unwrap();
    }
    downgrade(dir.path(), 3);
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, 3);
    let mut buf = Vec::new();
    assert!(
        !ro.read_block(2, 0, &mut buf).unwrap(),
        "no family: nothing stored"
    );
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(3));
    assert_eq!(j.inode(2).unwrap().unwrap().kind, FileKind::File);
    assert!(
        recovered.resend.is_empty(),
        "no protocol-4 client can resend"
    );
    assert!(j.db.cf_handle(CF_DATA).is_some() && j.db.cf_handle(CF_ORPHANS).is_some());
    upgraded_for_good(j, dir.path());
}

/// A store of version 4 (entries keyed by parent and name): read as it is by a read-only
/// open; the first writable open moves every entry under its child's key, several batches
/// of them, and keeps its sessions, resend records and known clients. An upgrade cut short
/// while it moved them is read with the two layouts mixed, and finished by the next open.
#[test]
fn a_store_of_version_4_has_its_entries_moved_under_their_children() {
    let dir = tempfile::tempdir().unwrap();
    let dentry = |parent, name: &str, ino, kind| JournalOp::PutDentry {
        parent,
        name: name.into(),
        entry: Dentry { ino, kind },
    };
    let wanted = {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let mut ops = vec![
            dentry(ROOT_INO, "d", 2, FileKind::Directory),
            JournalOp::BindSession {
                client: 7,
                secret: [9; SECRET_LEN],
            },
            put_resend(7, 0, 1),
        ];
        // Names in the opposite order to their children's numbers, and in two directories.
        ops.extend((3..14).map(|ino| dentry(2, &format!("f{:02}", 20 - ino), ino, FileKind::File)));
        ops.extend((14..17).map(|ino| dentry(ROOT_INO, &format!("g{ino}"), ino, FileKind::File)));
        j.commit(&[TxRecord { transno: 1, ops }]).unwrap();
        j.write_client_changes(&[JournalOp::KnowClient { client: 5 }])
            .unwrap();
        entries(&j)
    };
    assert_eq!(wanted.len(), 15);
    downgrade(dir.path(), 4);
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, 4);
    assert_eq!(entries(&ro), wanted, "read in the old layout");
    drop(ro);
    let all_child_keyed = |j: &Journal| {
        for item in j.db.iterator_cf(j.cf(CF_DENTRIES), IteratorMode::Start) {
            let (key, value) = item.unwrap();
            let entry: Dentry = decode("dentry", &value).unwrap();
            assert!(is_child_keyed(&key, &entry), "{}", hex(&key));
        }
        let marker = j.db.get_cf(j.cf(CF_META), META_DENTRIES_TO_REKEY).unwrap();
        assert!(marker.is_none(), "the move is over");
    };
    {
        let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert_eq!(recovered.upgraded_from, Some(4));
        assert_eq!(entries(&j), wanted);
        all_child_keyed(&j);
        assert_eq!(
            recovered.known_clients,
            [5],
            "version 4's clients replay here"
        );
        assert_eq!(recovered.sessions.len(), 1);
        // Its resend record holds a reply of an older protocol, which no client of it can
        // resend for here: dropped by the upgrade (to 9, past 5).
        assert!(recovered.resend.is_empty());
        assert_eq!(recovered.resend_dropped, 1);
    }
    // An upgrade cut short while it moved the entries: the version already 5 (no build of
    // the old one opens it), the marker set, two entries moved and the rest not.
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        parent_keyed(&j);
        for (parent, name, ino) in [(2, "f10", 10), (ROOT_INO, "g15", 15)] {
            let old = crate::schema::named_key(parent, name);
            let value = j.db.get_cf(j.cf(CF_DENTRIES), &old).unwrap().unwrap();
            j.db.delete_cf(j.cf(CF_DENTRIES), &old).unwrap();
            j.db.put_cf(j.cf(CF_DENTRIES), dentry_key(ino, parent, name), value)
                .unwrap();
        }
        j.db.put_cf(j.cf(CF_META), META_DENTRIES_TO_REKEY, [])
            .unwrap();
    }
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, SCHEMA_VERSION);
    assert_eq!(entries(&ro), wanted, "both layouts, each read as it is");
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, None);
    assert_eq!(entries(&j), wanted);
    all_child_keyed(&j);
    drop(j);
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(entries(&j), wanted);
}

/// A file's data blocks are read back as written; a delete of a few blocks removes those,
/// one of many removes the whole range (one range delete), and other files keep theirs.
#[test]
fn data_blocks_are_written_read_and_deleted_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let put = |ino, block| JournalOp::PutData {
        ino,
        block,
        bytes: vec![block as u8; 3],
    };
    let mut ops: Vec<_> = (0..40).map(|b| put(5, b)).collect();
    ops.push(put(4, 7));
    ops.push(put(6, 0));
    j.commit(&[TxRecord { transno: 1, ops }]).unwrap();
    let mut buf = Vec::new();
    assert!(j.read_block(5, 39, &mut buf).unwrap());
    assert_eq!(buf, [39, 39, 39]);
    assert!(!j.read_block(5, 40, &mut buf).unwrap() && buf.is_empty());
    let blocks = |j: &Journal| {
        let mut seen = Vec::new();
        j.scan_data(|ino, block, _| {
            seen.push((ino, block));
            Ok(())
        })
        .unwrap();
        seen
    };
    j.commit(&[TxRecord {
        transno: 2,
        ops: vec![JournalOp::DeleteData {
            ino: 5,
            from: 30,
            to: 40,
        }],
    }])
    .unwrap();
    assert_eq!(blocks(&j).len(), 32, "ten point deletes");
    j.commit(&[TxRecord {
        transno: 3,
        ops: vec![
            JournalOp::DeleteData {
                ino: 5,
                from: 1,
                to: u32::MAX,
            },
            put(5, 2),
        ],
    }])
    .unwrap();
    assert_eq!(
        blocks(&j),
        [(4, 7), (5, 0), (5, 2), (6, 0)],
        "a range, then a block written after it in the same batch"
    );
}

/// A store of an older schema with known clients was not stopped cleanly: they may replay
/// into it, which only the old build can take. Refused, and left as it was.
#[test]
fn an_old_store_that_was_not_stopped_cleanly_is_not_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        j.write_client_changes(&[JournalOp::KnowClient { client: 5 }])
            .unwrap();
    }
    downgrade(dir.path(), 2);
    let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UpgradeWithKnownClients {
                found: 2,
                clients: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("SIGTERM"), "{err}");
    let (_, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.known_clients, [5], "nothing written");
    assert_eq!(recovered.schema_version, 2);
    let families = DB::list_cf(&rocksdb::Options::default(), dir.path()).unwrap();
    assert!(
        !families.iter().any(|f| f == CF_XATTRS),
        "no family the old build does not know: {families:?}"
    );
}

/// Extended attributes: one key per attribute, put and deleted by the ops of a commit, read
/// back one by one and by a scan grouped by inode.
#[test]
fn extended_attributes_are_kept_one_key_each() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let put = |ino, name: &str, value: &[u8]| JournalOp::PutXattr {
        ino,
        name: name.into(),
        value: value.to_vec(),
    };
    j.commit(&[TxRecord {
        transno: 1,
        ops: vec![
            put(1, "user.b", b"2"),
            put(1, "user.a", b"1"),
            put(3, "trusted.x", &[0, 255]),
        ],
    }])
    .unwrap();
    j.commit(&[TxRecord {
        transno: 2,
        ops: vec![
            JournalOp::DeleteXattr {
                ino: 1,
                name: "user.b".into(),
            },
            put(1, "user.a", b"one"),
        ],
    }])
    .unwrap();
    let mut all = Vec::new();
    j.scan_xattrs(|ino, name, value| {
        all.push((ino, name, value));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        all,
        [
            (1, "user.a".to_owned(), b"one".to_vec()),
            (3, "trusted.x".to_owned(), vec![0, 255]),
        ]
    );
    assert_eq!(j.xattr(1, "user.b").unwrap(), None);
    assert_eq!(j.xattr(3, "trusted.x").unwrap(), Some(vec![0, 255]));
}

#[test]
fn a_store_of_the_version_before_resend_records_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    downgrade(dir.path(), 1);
    assert!(Journal::open_read_only(dir.path()).is_ok(), "fsck reads it");
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let v = j.db.get_cf(j.cf(CF_META), META_SCHEMA_VERSION).unwrap();
        assert_eq!(v.unwrap(), SCHEMA_VERSION.to_le_bytes());
    }
    // Version 1 with something in `clients` is not what version 1 wrote: refused.
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(&j, vec![vec![put_resend(7, 0, 1)]]);
    }
    downgrade(dir.path(), 1);
    let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::SchemaVersion { found: 1, .. }),
        "{err}"
    );
}

#[test]
fn a_store_of_another_schema_version_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 99u32.to_le_bytes())
            .unwrap();
    }
    let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SchemaVersion {
                found: 99,
                expected: SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("schema version 99"));
}

#[test]
fn a_store_with_an_unknown_column_family_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        db_mut(&mut j)
            .create_cf("from_the_future", &rocksdb::Options::default())
            .unwrap();
    }
    let err = Journal::open(dir.path(), JournalOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownFamilies { families, .. } if families == "from_the_future"),
        "{err}"
    );
    assert!(err.to_string().contains("docs/schema.md"), "{err}");
    // Read-only opens may leave a family out: fsck still gets to the store's contents.
    assert!(Journal::open_read_only(dir.path()).is_ok());
}

/// One commit of `creates` creates in the root, each with its resend record, as the server
/// journals them: like every commit, it writes `meta` and `clients` too. Returns the
/// bytes written.
pub(super) fn commit_creates(j: &Journal, creates: u64) -> usize {
    let first = j.last_committed() + 1;
    let records: Vec<TxRecord> = (first..first + creates)
        .map(|transno| {
            let ino = transno + 1;
            TxRecord {
                transno,
                ops: vec![
                    JournalOp::PutInode(Inode {
                        ino,
                        kind: FileKind::File,
                        mode: 0o644,
                        uid: 1000,
                        gid: 1000,
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
                    }),
                    JournalOp::PutDentry {
                        parent: ROOT_INO,
                        name: format!("f.{ino:016}").into(),
                        entry: Dentry {
                            ino,
                            kind: FileKind::File,
                        },
                    },
                    JournalOp::PutResend {
                        client: 7,
                        acked_xid: first - 1,
                        record: ResendRecord {
                            xid: transno,
                            transno,
                            reply: vec![0x5a; 35].into(),
                        },
                    },
                ],
            }
        })
        .collect();
    j.commit(&records).unwrap().bytes
}

/// Waits until RocksDB has no flush queued or running: they run on its background thread,
/// so wait for them to be done rather than for some time.
pub(super) fn wait_for_flushes(j: &Journal) {
    let int = |value: std::result::Result<Option<u64>, rocksdb::Error>| value.unwrap();
    for _ in 0..6000 {
        let pending = ALL_CFS.iter().any(|name| {
            int(j
                .db
                .property_int_value_cf(j.cf(name), "rocksdb.mem-table-flush-pending"))
                != Some(0)
        });
        let running = int(j.db.property_int_value("rocksdb.num-running-flushes")) != Some(0);
        if !pending && !running {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("RocksDB's flushes were still not done after a minute");
}

/// Bytes of write-ahead log a crash now would leave to replay: the `*.log` files RocksDB
/// still needs (numbered from `rocksdb.min-log-number-to-keep` on), once the flushes
/// asked for are done. Files it no longer needs but has not deleted yet do not count.
fn live_wal_bytes(j: &Journal) -> u64 {
    wait_for_flushes(j);
    let oldest_needed =
        j.db.property_int_value("rocksdb.min-log-number-to-keep")
            .unwrap()
            .unwrap();
    std::fs::read_dir(j.path())
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let number: u64 = name.strip_suffix(".log")?.parse().ok()?;
            (number >= oldest_needed).then(|| entry.metadata().unwrap().len())
        })
        .sum()
}

/// `meta` and `clients` have data in every WAL file, since every commit writes them; with
/// no limit they keep every WAL file alive (here, everything written), and with one, what
/// a crash would replay stays near the limit however much is committed. Flushes forced
/// by the limit lose nothing.
#[test]
fn the_wal_a_crash_would_replay_stays_near_its_limit() {
    let limit: u64 = 1 << 20;
    // Write buffers far larger than what the test writes: only the limit forces flushes.
    let limited = Tuning {
        max_total_wal_size: limit,
        namespace_write_buffer: 32 << 20,
        per_commit_write_buffer: 16 << 20,
    };
    // 0 is RocksDB's default: four times the write buffers of all families, here 1 GiB.
    let unlimited = Tuning {
        max_total_wal_size: 0,
        ..limited
    };
    let (commits, creates) = (400, 200);
    let mut most_live = Vec::new();
    for tuning in [limited, unlimited] {
        let dir = tempfile::tempdir().unwrap();
        let (j, _) = Journal::open_tuned(dir.path(), JournalOptions::default(), &tuning).unwrap();
        let mut written = 0;
        let mut most = 0;
        for i in 0..commits {
            written += commit_creates(&j, creates);
            if i % 20 == 19 {
                most = most.max(live_wal_bytes(&j));
            }
        }
        assert!(
            written as u64 >= 8 * limit,
            "the test writes {written} bytes"
        );
        most_live.push(most);
        drop(j);
        let (j, recovered) =
            Journal::open_tuned(dir.path(), JournalOptions::default(), &tuning).unwrap();
        assert_eq!(recovered.last_committed, commits * creates);
        let mut inodes = 0;
        j.scan_inodes(|_| {
            inodes += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            inodes,
            1 + commits * creates,
            "every committed inode is back"
        );
    }
    let [with_limit, without] = most_live[..] else {
        unreachable!()
    };
    assert!(
        with_limit <= 2 * limit,
        "live WAL reached {with_limit} bytes with a limit of {limit}"
    );
    assert!(
        without >= 4 * with_limit,
        "without the limit the live WAL reached only {without} bytes: the test no longer \
         shows the per-commit families pinning it"
    );
}

/// What a clean stop does before closing: afterwards a crash, or the next open, has no
/// WAL to replay, and nothing committed is lost.
#[test]
fn a_flushed_journal_leaves_no_wal_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        for _ in 0..10 {
            commit_creates(&j, 100);
        }
        assert!(live_wal_bytes(&j) > 0);
        j.flush().unwrap();
        assert_eq!(live_wal_bytes(&j), 0);
    }
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.last_committed, 1000);
    assert!(j.inode(1001).unwrap().is_some());
}

/// Start-up and fsck read every block once: they must not fill the block cache (a
/// point read does, which shows the property would have seen it).
#[test]
fn full_scans_leave_the_block_cache_alone() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        for _ in 0..10 {
            commit_creates(&j, 100);
        }
        for name in ALL_CFS {
            j.db.flush_cf(j.cf(name)).unwrap();
        }
    }
    // Everything is in table files now, which only the cache would keep in memory.
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    // Asked of a family of ours: the cache is theirs (`default` has RocksDB's own).
    let cached = || {
        j.db.property_int_value_cf(j.cf(CF_INODES), "rocksdb.block-cache-usage")
            .unwrap()
            .unwrap()
    };
    let before = cached();
    let mut found = 0;
    j.scan_inodes(|_| {
        found += 1;
        Ok(())
    })
    .unwrap();
    j.scan_dentries(|_, _, _| {
        found += 1;
        Ok(())
    })
    .unwrap();
    j.scan_resend(|_, _, _| {
        found += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(
        found,
        1001 + 1000 + 1,
        "root, 1000 files and their entries, one slot"
    );
    assert_eq!(cached(), before, "a full scan filled the block cache");
    j.inode(500).unwrap().unwrap();
    assert!(cached() > before, "a point read caches its block");
}

#[test]
fn forgetting_known_clients_keeps_their_resend_records() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert_eq!(j.forget_known_clients().unwrap(), 0, "none known yet");
        commit_each(
            &j,
            vec![vec![
                JournalOp::KnowClient { client: 7 },
                JournalOp::KnowClient { client: 1 << 40 },
                put_resend(7, 0, 1),
            ]],
        );
        assert_eq!(j.known_clients().unwrap(), [7, 1 << 40]);
        assert_eq!(j.forget_known_clients().unwrap(), 2);
        assert_eq!(j.known_clients().unwrap(), Vec::<u64>::new());
    }
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.known_clients, Vec::<u64>::new());
    assert_eq!(recovered.resend.len(), 1, "resend records stay");
    assert_eq!(recovered.resend[0].client, 7);
}

/// The ceilings: every commit makes room a lease above what it commits (transnos) and
/// above the server's inode counter (inode numbers); they never go down, survive a reopen,
/// and a clean stop can settle them to exactly what was handed out.
#[test]
fn commits_raise_the_ceilings_a_lease_ahead_and_they_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let leases = Leases {
        transnos: 100,
        inos: 1000,
    };
    let options = || JournalOptions {
        leases,
        ..JournalOptions::default()
    };
    {
        let (j, recovered) = Journal::open(dir.path(), options()).unwrap();
        assert_eq!(
            recovered.ceilings,
            Ceilings {
                transno: 0,
                ino: ROOT_INO + 1
            },
            "a new store: nothing handed out"
        );
        commit_each(&j, vec![vec![], vec![]]);
        assert_eq!(
            j.ceilings(),
            Ceilings {
                transno: 102,
                ino: 1002
            }
        );
        // Creates that failed burned inode numbers: the counter, not the puts, sets it.
        j.note_inode_counter(5000);
        assert_eq!(
            j.raise_ceilings().unwrap(),
            Ceilings {
                transno: 102,
                ino: 6000
            }
        );
        // A later commit with less does not lower them.
        commit_each(&j, vec![vec![]]);
        assert_eq!(
            j.ceilings(),
            Ceilings {
                transno: 103,
                ino: 6000
            }
        );
    }
    let (j, recovered) = Journal::open(dir.path(), options()).unwrap();
    assert_eq!(
        recovered.ceilings,
        Ceilings {
            transno: 103,
            ino: 6000
        }
    );
    // A clean stop with everything durable: exactly what was handed out.
    j.settle_ceilings(3, 4000).unwrap();
    drop(j);
    let (_, recovered) = Journal::open(dir.path(), options()).unwrap();
    assert_eq!(
        recovered.ceilings,
        Ceilings {
            transno: 3,
            ino: 4000
        }
    );
}

/// A store written by a build before ceilings and tickets: its ceilings are taken a lease
/// above what is durable, and a writable open draws its replay key, which then stays.
#[test]
fn a_store_without_ceilings_or_replay_key_gets_them_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let key = {
        let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(&j, vec![vec![], vec![]]);
        let meta = j.cf(CF_META);
        for k in [META_TRANSNO_CEILING, META_INO_CEILING, META_REPLAY_KEY] {
            j.db.delete_cf(meta, k).unwrap();
        }
        recovered.replay_key
    };
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let leases = Leases::default();
    assert_eq!(
        recovered.ceilings,
        Ceilings {
            transno: 2 + leases.transnos,
            ino: ROOT_INO + 1 + leases.inos
        }
    );
    assert_ne!(recovered.replay_key, key, "a new one, drawn at this open");
    assert_ne!(recovered.replay_key, [0; SECRET_LEN]);
    drop(j);
    let (_, again) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(again.replay_key, recovered.replay_key, "kept from then on");
}

/// A session's secret is kept while the journal keeps anything of its client (resend
/// records, or the client known), returned at open, and deleted with its records; a binding
/// left over with neither is deleted by the next writable open.
#[test]
fn session_bindings_live_as_long_as_their_clients_records() {
    let dir = tempfile::tempdir().unwrap();
    let bind = |client, byte| JournalOp::BindSession {
        client,
        secret: [byte; SECRET_LEN],
    };
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(
            &j,
            vec![vec![
                bind(7, 1),
                put_resend(7, 0, 1),
                bind(8, 2),
                JournalOp::KnowClient { client: 8 },
                bind(9, 3),
                put_resend(9, 0, 1),
            ]],
        );
        // 9's session ends: its records and its binding go together.
        j.write_client_changes(&[JournalOp::DropResend { client: 9 }])
            .unwrap();
        // A binding nobody else keeps (as a crash between a binding and its first record
        // leaves one): deleted at the next open.
        j.write_client_changes(&[bind(10, 4)]).unwrap();
    }
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(
        recovered.sessions,
        [(7, [1; SECRET_LEN]), (8, [2; SECRET_LEN])]
    );
    let (j, _) = Journal::open_read_only(dir.path()).unwrap();
    let sessions = raw_contents(&j)
        .into_iter()
        .filter(|l| l.starts_with("meta 73657373696f6e2f"))
        .count();
    assert_eq!(sessions, 2, "10's binding was deleted");
}

pub(super) fn claim(cluster: &str, shard: u16, epoch: u64) -> JournalOptions {
    JournalOptions {
        shard: Some(ShardIdentity {
            cluster: cluster.into(),
            shard,
            epoch,
        }),
        ..JournalOptions::default()
    }
}

/// A shard's store: its inode numbers start in its range, only shard 0 has the root, each
/// new owner's epoch is written at open, an older claim is fenced off before anything is
/// written, and the store is never opened outside its cluster again.
#[test]
fn a_shards_store_keeps_its_identity_and_fences_older_claims() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, recovered) = Journal::open(dir.path(), claim("c", 3, 10)).unwrap();
        assert!(recovered.created);
        assert_eq!(recovered.next_ino, 3 << 48 | 2);
        assert_eq!(recovered.ino_limit, 4 << 48);
        assert_eq!(recovered.shard.as_ref().unwrap().epoch, 10);
        assert!(
            j.inode(ROOT_INO).unwrap().is_none(),
            "the root is shard 0's"
        );
    }
    // A newer owner writes its epoch.
    let (_, recovered) = Journal::open(dir.path(), claim("c", 3, 12)).unwrap();
    assert_eq!(recovered.shard.unwrap().epoch, 12);
    let before = {
        let (j, _) = Journal::open_read_only(dir.path()).unwrap();
        raw_contents(&j)
    };
    // Refused, and nothing written: an older claim, another shard, another cluster, no claim.
    for (options, what) in [
        (claim("c", 3, 11), "epoch 12"),
        (claim("c", 2, 20), "shard 3 of cluster \"c\""),
        (claim("d", 3, 20), "cluster \"c\""),
        (JournalOptions::default(), "--etcd"),
    ] {
        let e = Journal::open(dir.path(), options).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
    let (j, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(raw_contents(&j), before);
    assert_eq!(recovered.shard.unwrap().epoch, 12, "fsck reads it as it is");
    drop(j);
    // The check a claimant makes before it waits for the store, while its owner holds it.
    let (_owner, _) = Journal::open(dir.path(), claim("c", 3, 12)).unwrap();
    let stale = claim("c", 3, 11).shard.unwrap();
    assert!(matches!(
        Journal::check_claim(dir.path(), &stale),
        Err(Error::Fenced { .. })
    ));
    Journal::check_claim(dir.path(), &claim("c", 3, 13).shard.unwrap()).unwrap();
    Journal::check_claim(&dir.path().join("none"), &stale).unwrap();
}

/// A store made outside a cluster is shard 0 as it is: adopted by a shard-0 claim (root and
/// inode numbers unchanged), refused to any other shard.
#[test]
fn a_standalone_store_becomes_shard_0_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let next = {
        let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        assert_eq!(recovered.shard, None);
        assert_eq!(recovered.ino_limit, 1 << 48);
        assert!(j.inode(ROOT_INO).unwrap().is_some());
        recovered.next_ino
    };
    let e = Journal::open(dir.path(), claim("c", 1, 5)).unwrap_err();
    assert!(e.to_string().contains("only be shard 0"), "{e}");
    let (j, recovered) = Journal::open(dir.path(), claim("c", 0, 5)).unwrap();
    assert!(!recovered.created);
    assert_eq!(recovered.next_ino, next);
    assert!(j.inode(ROOT_INO).unwrap().is_some());
    assert_eq!(recovered.shard.unwrap().shard, 0);
}

/// A pending directory keeps its encoding of before remote RMDIR, byte for byte; one being
/// removed adds one byte after it. Both read back after a restart, and go with their delete.
#[test]
fn pending_directories_and_those_being_removed_are_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    let parent = 1 << crate::SHARD_SHIFT | 1;
    let made = PendingDir {
        ino: 5,
        parent,
        name: "d".into(),
        removing: false,
    };
    let going = PendingDir {
        ino: 6,
        parent,
        name: "e".into(),
        removing: true,
    };
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(
            &j,
            vec![vec![
                JournalOp::PutPendingDir(made.clone()),
                JournalOp::PutPendingDir(going.clone()),
            ]],
        );
        let pending: Vec<String> = raw_contents(&j)
            .into_iter()
            .filter(|l| l.starts_with("meta 70656e64696e675f6469722f"))
            .collect();
        assert_eq!(
            pending,
            [
                "meta 70656e64696e675f6469722f0000000000000005 = 818080808080400164",
                "meta 70656e64696e675f6469722f0000000000000006 = 81808080808040016501",
            ],
            "{ENCODING_CHANGED}"
        );
    }
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(j.pending_dirs().unwrap(), [made, going.clone()]);
    commit_each(&j, vec![vec![JournalOp::DeletePendingDir(5)]]);
    assert_eq!(j.pending_dirs().unwrap(), [going]);
}

/// File 5, created by transno 1, as of transno `transno` with permission bits `mode`.
fn file_5(mode: u32, transno: u64) -> Inode {
    Inode {
        ino: 5,
        kind: FileKind::File,
        mode,
        uid: 0,
        gid: 0,
        nlink: 1,
        size: 0,
        ctime_ns: 1,
        mtime_ns: 1,
        generation: 1,
        parent: 0,
        entries: 0,
        transno,
        atime_ns: 1,
        rdev: 0,
        target: Vec::new(),
        data_blocks: 0,
    }
}

fn put_entry(parent: u64, name: &str, ino: u64) -> JournalOp {
    JournalOp::PutDentry {
        parent,
        name: name.into(),
        entry: Dentry {
            ino,
            kind: FileKind::File,
        },
    }
}

/// Transno 1: creates file 5 as /f.
fn create_f(j: &Journal) {
    j.commit(&[TxRecord {
        transno: 1,
        ops: vec![
            JournalOp::PutInode(file_5(0o600, 1)),
            put_entry(ROOT_INO, "f", 5),
        ],
    }])
    .unwrap();
}

/// Every image a scan gives of inode `ino`.
fn scanned(j: &Journal, ino: u64) -> Vec<Inode> {
    let mut seen = Vec::new();
    j.scan_inodes(|inode| {
        if inode.ino == ino {
            seen.push(inode);
        }
        Ok(())
    })
    .unwrap();
    seen
}

/// A new inode's image is kept in the entry it was created with (one key a create): a
/// point read, a scan, a restart and a read-only open all find it there, until a later
/// change writes the inode's own key, which is then the one read, and read once.
#[test]
fn a_new_inodes_image_is_in_its_entry_until_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        create_f(&j);
        assert!(j.db.get_cf(j.cf(CF_INODES), ino_key(5)).unwrap().is_none());
        assert_eq!(j.inode(5).unwrap(), Some(file_5(0o600, 1)));
        assert_eq!(j.inode(6).unwrap(), None);
    }
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(scanned(&j, 5), [file_5(0o600, 1)]);
    j.commit(&[TxRecord {
        transno: 2,
        ops: vec![JournalOp::PutInode(file_5(0o644, 2))],
    }])
    .unwrap();
    assert_eq!(j.inode(5).unwrap(), Some(file_5(0o644, 2)));
    assert_eq!(scanned(&j, 5), [file_5(0o644, 2)]);
    drop(j);
    let (ro, _) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(scanned(&ro, 5), [file_5(0o644, 2)]);
    assert_eq!(entries(&ro), [(ROOT_INO, "f".to_string(), 5)]);
}

/// An entry that its own commit creates and then changes (renamed, or removed with its
/// inode) is written as it came, and a surviving inode's image goes under its own key:
/// nothing it carried is deleted with it.
#[test]
fn a_new_entry_changed_in_its_own_commit_carries_no_image() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let file_6 = Inode {
        ino: 6,
        generation: 3,
        ..file_5(0o600, 3)
    };
    j.commit(&[
        TxRecord {
            transno: 1,
            ops: vec![
                JournalOp::PutInode(file_5(0o600, 1)),
                put_entry(ROOT_INO, "f", 5),
            ],
        },
        TxRecord {
            transno: 2,
            ops: vec![
                JournalOp::DeleteDentry {
                    parent: ROOT_INO,
                    name: "f".into(),
                    child: 5,
                },
                put_entry(ROOT_INO, "g", 5),
                JournalOp::PutInode(file_5(0o600, 2)),
            ],
        },
        TxRecord {
            transno: 3,
            ops: vec![JournalOp::PutInode(file_6), put_entry(ROOT_INO, "h", 6)],
        },
        TxRecord {
            transno: 4,
            ops: vec![
                JournalOp::DeleteDentry {
                    parent: ROOT_INO,
                    name: "h".into(),
                    child: 6,
                },
                JournalOp::DeleteInode(6),
            ],
        },
    ])
    .unwrap();
    assert!(j.db.get_cf(j.cf(CF_INODES), ino_key(5)).unwrap().is_some());
    let g =
        j.db.get_cf(j.cf(CF_DENTRIES), dentry_key(5, ROOT_INO, "g"))
            .unwrap()
            .unwrap();
    assert_eq!(crate::schema::embedded_image(&g).unwrap(), None);
    drop(j);
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(scanned(&j, 5), [file_5(0o600, 2)]);
    assert!(scanned(&j, 6).is_empty() && j.inode(6).unwrap().is_none());
    assert_eq!(entries(&j), [(ROOT_INO, "g".to_string(), 5)]);
}

/// A store of version 5 (every inode under its own key): read as it is by a read-only open,
/// and marked the current version by the first writable one, which changes nothing else.
#[test]
fn a_store_of_version_5_is_read_as_it_is_and_marked_6_by_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        create_f(&j);
        images_apart(&j);
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 5u32.to_le_bytes())
            .unwrap();
    }
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, 5);
    assert_eq!(scanned(&ro, 5), [file_5(0o600, 1)]);
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(5));
    assert_eq!(scanned(&j, 5), [file_5(0o600, 1)]);
    assert_eq!(entries(&j), [(ROOT_INO, "f".to_string(), 5)]);
    upgraded_for_good(j, dir.path());
}

/// A store of version 6 (its edits, if any, hold no resend slots): read as it is by a
/// read-only open, and marked version 7 by the first writable one, which changes nothing else.
#[test]
fn a_store_of_version_6_is_read_as_it_is_and_marked_7_by_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        create_f(&j);
        commit_each(&j, vec![vec![put_resend(7, 0, 1)]]);
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 6u32.to_le_bytes())
            .unwrap();
    }
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, 6);
    assert_eq!(resend_xids(&recovered), [(7, 0, vec![1])]);
    assert_eq!(entries(&ro), [(ROOT_INO, "f".to_string(), 5)]);
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(6));
    // The record's reply is of an older protocol: the upgrade (to 9) drops it.
    assert_eq!(resend_xids(&recovered), []);
    assert_eq!(recovered.resend_dropped, 1);
    assert_eq!(entries(&j), [(ROOT_INO, "f".to_string(), 5)]);
    upgraded_for_good(j, dir.path());
}

/// A store a build of `version` left while it moved the entries under their children's keys
/// (an upgrade from 4 cut short; a build of 5 or 6 records its version first): a read-only
/// open reads it as that version with both layouts; the first writable open finishes the
/// move, then records the current version.
fn cut_short_in_its_move_is_finished_then_marked_current(version: u32) {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        create_f(&j);
        parent_keyed(&j);
        j.db.put_cf(j.cf(CF_META), META_DENTRIES_TO_REKEY, [])
            .unwrap();
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, version.to_le_bytes())
            .unwrap();
    }
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, version);
    assert_eq!(entries(&ro), [(ROOT_INO, "f".to_string(), 5)]);
    assert_eq!(scanned(&ro, 5), [file_5(0o600, 1)]);
    drop(ro);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(version));
    assert!(
        j.db.get_cf(j.cf(CF_META), META_DENTRIES_TO_REKEY)
            .unwrap()
            .is_none()
    );
    assert!(
        j.db.get_cf(j.cf(CF_DENTRIES), dentry_key(5, ROOT_INO, "f"))
            .unwrap()
            .is_some()
    );
    assert_eq!(entries(&j), [(ROOT_INO, "f".to_string(), 5)]);
    upgraded_for_good(j, dir.path());
}

#[test]
fn a_version_5_store_cut_short_in_its_move_is_finished_then_marked_6() {
    cut_short_in_its_move_is_finished_then_marked_current(5);
}

#[test]
fn a_version_6_store_cut_short_in_its_move_is_finished_then_marked_7() {
    cut_short_in_its_move_is_finished_then_marked_current(6);
}

/// fs_mark's pattern through the journal: small commits of one to three records, each a
/// create (the file's image and entry, its directory's new image) or a write of a file made
/// earlier (its image and a data block), with resend records. Every entry is there before a
/// reopen and after it, which replays the write-ahead log into the hinted skiplists of
/// `inodes` and `dentries` and flushes them (options.rs): a node a hint linked wrongly would
/// be missing from the scan.
#[test]
fn entries_of_small_commits_are_all_back_after_a_replay() {
    const FILES: u64 = 3000;
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let image = |ino: u64, kind: FileKind, transno: u64, size: u64| Inode {
        ino,
        kind,
        size,
        ..file_5(0o644, transno)
    };
    let (mut transno, mut ino, mut xid) = (0, ROOT_INO, 0);
    let (mut dirs, mut unwritten, mut made) = (Vec::new(), Vec::new(), Vec::new());
    let mut batch = Vec::new();
    for d in 0..4 {
        transno += 1;
        ino += 1;
        dirs.push(ino);
        batch.push(TxRecord {
            transno,
            ops: vec![
                JournalOp::PutInode(image(ino, FileKind::Directory, transno, 0)),
                JournalOp::PutDentry {
                    parent: ROOT_INO,
                    name: format!("d{d}").into(),
                    entry: Dentry {
                        ino,
                        kind: FileKind::Directory,
                    },
                },
            ],
        });
    }
    j.commit(&batch).unwrap();
    while (made.len() as u64) < FILES || !unwritten.is_empty() {
        let mut batch = Vec::new();
        for _ in 0..=next() % 3 {
            transno += 1;
            xid += 1;
            let resend = JournalOp::PutResend {
                client: 7,
                acked_xid: xid - 1,
                record: ResendRecord {
                    xid,
                    transno,
                    reply: vec![0x5a; 60].into(),
                },
            };
            let write = !unwritten.is_empty() && (made.len() as u64 >= FILES || next() % 2 == 0);
            let ops = if write {
                let file = unwritten.swap_remove((next() % unwritten.len() as u64) as usize);
                vec![
                    JournalOp::PutInode(image(file, FileKind::File, transno, 4096)),
                    JournalOp::PutData {
                        ino: file,
                        block: 0,
                        bytes: vec![0; 4096],
                    },
                    resend,
                ]
            } else {
                ino += 1;
                made.push(ino);
                unwritten.push(ino);
                let parent = dirs[(next() % dirs.len() as u64) as usize];
                vec![
                    JournalOp::PutInode(image(ino, FileKind::File, transno, 0)),
                    JournalOp::PutDentry {
                        parent,
                        name: format!("{:08x}~~~~{ino:020}", next() as u32).into(),
                        entry: Dentry {
                            ino,
                            kind: FileKind::File,
                        },
                    },
                    JournalOp::PutInode(image(parent, FileKind::Directory, transno, 0)),
                    resend,
                ]
            };
            batch.push(TxRecord { transno, ops });
        }
        j.commit(&batch).unwrap();
    }
    let missing = |j: &Journal| {
        let mut named = std::collections::HashSet::new();
        j.scan_dentries(|_, _, entry| {
            named.insert(entry.ino);
            Ok(())
        })
        .unwrap();
        made.iter().filter(|i| !named.contains(i)).count()
    };
    assert_eq!(missing(&j), 0, "before the reopen");
    drop(j);
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(missing(&j), 0, "after the replay");
}

/// A store of version 8, whose inodes did not count their data: a read-only open reads them
/// with counts of 0 and says they are not counted; the first writable open counts every
/// file's stored blocks (holes left out) and its layout's cover, records version 9, and an
/// upgrade cut short while it counted is counted again by the next open.
/// Resend records written before version 9 hold replies of protocol 10 or older (an `Attr`
/// without `blocks`), which this build cannot decode and no client of its protocol can
/// resend for: the upgrade drops them, with the edits' (written out first), and says how
/// many; the next open finds none and drops nothing. Found by a real upgrade: a build of
/// version 9 refused to start on a version-8 store a server had filled
/// (`bench/upgrade-restart.sh`, docs/BENCHMARKS.md).
#[test]
fn an_upgrade_from_version_8_drops_the_resend_records_of_the_older_protocol() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        commit_each(
            &j,
            vec![
                vec![put_resend(7, 0, 1)],
                vec![put_resend(7, 0, 2)],
                vec![put_resend(8, 0, 1)],
            ],
        );
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 8u32.to_le_bytes())
            .unwrap();
    }
    let (_, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(
        recovered.resend.len(),
        2,
        "a read-only open reads them as they are"
    );
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(8));
    assert!(recovered.resend.is_empty());
    assert!(
        recovered.resend_dropped >= 2,
        "{}",
        recovered.resend_dropped
    );
    let mut left = 0;
    j.scan_resend(|_, _, _| {
        left += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(left, 0);
    // New records after the upgrade are kept across the next open.
    commit_each(&j, vec![vec![put_resend(9, 0, 1)]]);
    drop(j);
    let (_, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(
        (recovered.upgraded_from, recovered.resend_dropped),
        (None, 0)
    );
    assert_eq!(recovered.resend.len(), 1);
}

#[test]
fn a_store_of_version_8_has_its_files_data_counted() {
    let dir = tempfile::tempdir().unwrap();
    let on_server = Inode {
        size: 3 * 4096,
        ..file_5(0o600, 1)
    };
    let in_objects = Inode {
        ino: 6,
        size: 1 << 30,
        entries: 1,
        ..file_5(0o600, 1)
    };
    let piece = |file_off, len| mds_proto::Placed {
        slice: 9,
        slice_size: 1 << 20,
        slice_off: 0,
        file_off,
        len,
    };
    // What version 8 wrote: the same images without the count, 0 here, last.
    let as_version_8 = |j: &Journal| {
        for inode in [&on_server, &in_objects] {
            let bytes = encode(inode);
            assert_eq!(bytes.last(), Some(&0));
            j.db.put_cf(
                j.cf(CF_INODES),
                ino_key(inode.ino),
                &bytes[..bytes.len() - 1],
            )
            .unwrap();
        }
    };
    {
        let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let data = |block| JournalOp::PutData {
            ino: 5,
            block,
            bytes: vec![1; 4096],
        };
        commit_each(
            &j,
            vec![vec![
                JournalOp::PutInode(on_server.clone()),
                JournalOp::PutInode(in_objects.clone()),
                data(0),
                data(2),
                JournalOp::PutLayout {
                    ino: 6,
                    placed: vec![piece(0, 8192), piece(4096, 4096), piece(1 << 29, 100)],
                },
            ]],
        );
        as_version_8(&j);
        j.db.put_cf(j.cf(CF_META), META_SCHEMA_VERSION, 8u32.to_le_bytes())
            .unwrap();
    }
    let (ro, recovered) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(recovered.schema_version, 8);
    assert_eq!(ro.inode(5).unwrap().unwrap(), on_server, "read as it is");
    assert!(!ro.data_counted().unwrap());
    drop(ro);
    let counted = |j: &Journal| [5, 6].map(|ino| j.inode(ino).unwrap().unwrap().data_blocks);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.upgraded_from, Some(8));
    assert_eq!(
        counted(&j),
        [2, 3],
        "blocks 0 and 2; 8 KiB and 100 bytes of the layout"
    );
    assert!(j.data_counted().unwrap());
    // Cut short after the version was recorded: the mark is still there.
    as_version_8(&j);
    j.db.put_cf(j.cf(CF_META), crate::schema::META_DATA_TO_COUNT, [])
        .unwrap();
    drop(j);
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(counted(&j), [2, 3]);
    assert_eq!(
        j.inode(5).unwrap().unwrap(),
        Inode {
            data_blocks: 2,
            ..on_server
        }
    );
    upgraded_for_good(j, dir.path());
}
