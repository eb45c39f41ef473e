//! A follower against its owner: what it builds from the changes it reads equals what a
//! fresh open of the store reads, across log files and flushes; and what it cannot read
//! whole it says.

use std::collections::BTreeMap;

use super::*;
use crate::schema::{FileKind, JournalOp, ROOT_INO, TxRecord};

/// What a follower keeps of a store: inodes, entries, extended attributes, orphans.
#[derive(Debug, Default, PartialEq, Eq)]
struct Image {
    inodes: BTreeMap<u64, Inode>,
    entries: BTreeMap<(u64, String), Dentry>,
    xattrs: BTreeMap<(u64, String), Vec<u8>>,
    orphans: BTreeMap<u64, Vec<u64>>,
    last_committed: u64,
}

impl Image {
    fn read(journal: &Journal, last_committed: u64) -> Image {
        let mut image = Image {
            last_committed,
            ..Image::default()
        };
        journal
            .scan_inodes(|i| {
                image.inodes.insert(i.ino, i);
                Ok(())
            })
            .unwrap();
        journal
            .scan_dentries(|p, n, d| {
                image.entries.insert((p, n), d);
                Ok(())
            })
            .unwrap();
        journal
            .scan_xattrs(|i, n, v| {
                image.xattrs.insert((i, n), v);
                Ok(())
            })
            .unwrap();
        journal
            .scan_orphans(|i, o| {
                image.orphans.insert(i, o);
                Ok(())
            })
            .unwrap();
        image
    }

    fn apply_all(&mut self, batch: Vec<Change>) {
        for change in batch {
            self.apply(change);
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Inode(i) => {
                self.inodes.insert(i.ino, i);
            }
            Change::InodeGone(ino) => {
                self.inodes.remove(&ino);
            }
            Change::Dentry {
                parent,
                name,
                entry,
            } => {
                self.entries.insert((parent, name), entry);
            }
            Change::DentryGone { parent, name } => {
                self.entries.remove(&(parent, name));
            }
            Change::Xattr { ino, name, value } => {
                self.xattrs.insert((ino, name), value);
            }
            Change::XattrGone { ino, name } => {
                self.xattrs.remove(&(ino, name));
            }
            Change::Orphan { ino, owners } => {
                self.orphans.insert(ino, owners);
            }
            Change::OrphanGone(ino) => {
                self.orphans.remove(&ino);
            }
            Change::LastCommitted(t) => self.last_committed = t,
        }
    }
}

fn file(ino: u64, nlink: u32, transno: u64) -> Inode {
    Inode {
        ino,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 1,
        nlink,
        size: 0,
        ctime_ns: 5,
        mtime_ns: 5,
        generation: transno,
        parent: 0,
        entries: 0,
        transno,
        atime_ns: 5,
        rdev: 0,
        target: Vec::new(),
        data_blocks: 0,
    }
}

fn entry(ino: u64) -> Dentry {
    Dentry {
        ino,
        kind: FileKind::File,
    }
}

/// Transno `t`: creates file `ino` named `f{ino}` in the root, with an attribute.
fn create(t: u64, ino: u64) -> TxRecord {
    TxRecord {
        transno: t,
        ops: vec![
            JournalOp::PutInode(file(ino, 1, t)),
            JournalOp::PutDentry {
                parent: ROOT_INO,
                name: format!("f{ino}").into(),
                entry: entry(ino),
            },
            JournalOp::PutXattr {
                ino,
                name: "user.a".into(),
                value: vec![ino as u8; 3],
            },
        ],
    }
}

/// Transno `t`: unlinks `f{ino}` while client 9 holds it open (an orphan).
fn unlink_open(t: u64, ino: u64) -> TxRecord {
    TxRecord {
        transno: t,
        ops: vec![
            JournalOp::DeleteDentry {
                parent: ROOT_INO,
                name: format!("f{ino}").into(),
                child: ino,
            },
            JournalOp::PutInode(file(ino, 0, t)),
            JournalOp::PutOrphan {
                ino,
                owners: vec![9],
            },
        ],
    }
}

/// Transno `t`: the orphan's last handle goes.
fn release(t: u64, ino: u64) -> TxRecord {
    TxRecord {
        transno: t,
        ops: vec![
            JournalOp::DeleteXattr {
                ino,
                name: "user.a".into(),
            },
            JournalOp::DeleteOrphan(ino),
            JournalOp::DeleteInode(ino),
        ],
    }
}

/// Opens `primary`'s follower and reads it up to now.
fn follower(primary: &Path, own: &Path) -> (Journal, Image, u64) {
    let (journal, recovered) = Journal::open_follower(primary, own).unwrap();
    let image = Image::read(&journal, recovered.last_committed);
    let seq = journal.sequence();
    (journal, image, seq)
}

/// A new store's owner (opened with `options`) and a follower opened on it before anything
/// is committed; and the store's path.
fn owner_and_follower(
    dir: &Path,
    options: JournalOptions,
) -> (Journal, Journal, Image, u64, std::path::PathBuf) {
    let (primary, own) = (dir.join("store"), dir.join("follower"));
    let (owner, _) = Journal::open(&primary, options).unwrap();
    let (follower, image, seq) = follower(&primary, &own);
    (owner, follower, image, seq, primary)
}

#[test]
fn a_follower_builds_what_a_fresh_open_reads_across_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, own) = (dir.path().join("store"), dir.path().join("follower"));
    let (owner, _) = Journal::open(&primary, JournalOptions::default()).unwrap();
    owner.commit(&[create(1, 10), create(2, 11)]).unwrap();
    let (follower, mut image, mut seq) = follower(&primary, &own);
    assert_eq!(image.inodes.len(), 3, "the root and two files: {image:?}");

    let mut t = 3;
    for round in 0..6u64 {
        let mut records = Vec::new();
        for _ in 0..5 {
            let ino = 100 + t;
            records.push(create(t, ino));
            t += 1;
        }
        records.push(unlink_open(t, 100 + t - 5));
        t += 1;
        owner.commit(&records).unwrap();
        owner.commit(&[release(t, 100 + t - 6)]).unwrap();
        t += 1;
        if round % 2 == 1 {
            // Each read before the owner's flush: the log files it deletes are read already.
            let read = follower
                .follow(&mut seq, |batch| image.apply_all(batch))
                .unwrap();
            assert!(read >= 2, "round {round}: {read} batches");
            owner.flush().unwrap();
        }
    }
    owner
        .commit(&[create(t, 500), unlink_open(t + 1, 500)])
        .unwrap();
    t += 2;
    follower
        .follow(&mut seq, |batch| image.apply_all(batch))
        .unwrap();
    assert_eq!(
        follower
            .follow(&mut seq, |batch| image.apply_all(batch))
            .unwrap(),
        0
    );
    drop(follower);
    drop(owner);
    let (fresh, recovered) = Journal::open_read_only(&primary).unwrap();
    assert_eq!(recovered.last_committed, t - 1);
    assert_eq!(image, Image::read(&fresh, recovered.last_committed));
    assert!(
        !image.orphans.is_empty(),
        "the last unlink's file is an orphan still"
    );
}

#[test]
fn a_follower_that_lost_a_log_file_says_so_and_never_skips_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (owner, follower, mut image, mut seq, _) =
        owner_and_follower(dir.path(), JournalOptions::default());
    owner.commit(&[create(1, 10)]).unwrap();
    // The owner flushes (and deletes the log holding transno 1) before the follower looks.
    owner.flush().unwrap();
    owner.commit(&[create(2, 11)]).unwrap();
    let before = seq;
    match follower.follow(&mut seq, |batch| image.apply_all(batch)) {
        // RocksDB kept the log file (still live, or deleted later): all of it was read.
        Ok(_) => assert!(image.inodes.contains_key(&10) && image.inodes.contains_key(&11)),
        Err(Error::FollowGap { wanted, .. }) if image.inodes.contains_key(&11) => {
            panic!("a gap at {wanted} reported after a later batch was applied")
        }
        Err(Error::FollowGap { wanted, found }) => {
            assert_eq!(wanted, before + 1);
            assert!(found > wanted);
            assert!(
                !image.inodes.contains_key(&11),
                "nothing after the gap applied"
            );
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_batch_with_a_range_deletion_is_not_read_in_part() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, own) = (dir.path().join("store"), dir.path().join("follower"));
    let (owner, _) = Journal::open(&primary, JournalOptions::default()).unwrap();
    owner.commit(&[create(1, 10)]).unwrap();
    let (follower, mut image, mut seq) = follower(&primary, &own);
    let mut truncate = TxRecord {
        transno: 2,
        ops: vec![JournalOp::DeleteData {
            ino: 10,
            from: 0,
            to: 1000,
        }],
    };
    truncate.ops.extend(create(2, 11).ops);
    owner.commit(&[truncate]).unwrap();
    let before = seq;
    match follower.follow(&mut seq, |batch| image.apply_all(batch)) {
        Err(Error::FollowPartial { sequence }) => assert_eq!(sequence, before + 1),
        other => panic!("a range deletion must stop the follower: {other:?}"),
    }
    assert_eq!(seq, before, "the batch is not counted as read");
    assert!(
        !image.inodes.contains_key(&11),
        "nothing of the batch was given"
    );
}

#[test]
fn a_store_of_another_schema_or_none_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = Journal::open_follower(&dir.path().join("none"), &dir.path().join("f"));
    assert!(matches!(missing, Err(Error::NoStore { .. })), "{missing:?}");
}

/// A store its owner is still creating (it has RocksDB's files, not yet every family) is not
/// followed yet: an error to try again on, never a journal that lacks a family.
#[test]
fn a_store_still_being_created_is_not_followed_yet() {
    let dir = tempfile::tempdir().unwrap();
    let primary = dir.path().join("store");
    drop(rocksdb::DB::open_default(&primary).unwrap());
    let early = Journal::open_follower(&primary, &dir.path().join("f"));
    assert!(
        matches!(early, Err(Error::StoreIncomplete { .. })),
        "{early:?}"
    );
    // Once its owner has opened it, it is followed.
    drop(Journal::open(&primary, JournalOptions::default()).unwrap());
    Journal::open_follower(&primary, &dir.path().join("f")).unwrap();
}

#[test]
fn a_clusters_store_keeps_the_log_a_flush_retires_for_its_follower() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        shard: Some(crate::ShardIdentity {
            cluster: "c".into(),
            shard: 0,
            epoch: 1,
        }),
        ..JournalOptions::default()
    };
    let (owner, follower, mut image, mut seq, primary) = owner_and_follower(dir.path(), options);
    owner.commit(&[create(1, 10), create(2, 11)]).unwrap();
    // The owner stops as a clean stop does: flushed, the log it wrote retired.
    owner.flush().unwrap();
    drop(owner);
    follower
        .follow(&mut seq, |batch| image.apply_all(batch))
        .unwrap();
    drop(follower);
    let (fresh, recovered) = Journal::open_read_only(&primary).unwrap();
    assert_eq!(image, Image::read(&fresh, recovered.last_committed));
    assert_eq!(image.last_committed, 2);
}

#[test]
fn a_follower_says_so_when_the_log_ends_before_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (owner, follower, mut image, mut seq, _) =
        owner_and_follower(dir.path(), JournalOptions::default());
    owner.commit(&[create(1, 10)]).unwrap();
    // Flushed and its log deleted, and nothing written after: no later batch shows the gap.
    owner.flush().unwrap();
    drop(owner);
    match follower.follow(&mut seq, |batch| image.apply_all(batch)) {
        Err(Error::FollowGap { .. }) => {}
        // RocksDB kept the log file after all: then all of it was read.
        Ok(_) => assert!(image.inodes.contains_key(&10), "a batch missed silently"),
        Err(e) => panic!("{e}"),
    }
}
