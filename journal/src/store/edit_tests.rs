//! Tests of the edit log (`edits.rs`): what a commit writes with it, checkpoints in the
//! background, edits a crash leaves applied by the next open (twice over included), read
//! over the images by a read-only open and by the scans while the checkpointer holds them,
//! resend slots carried in the edits (and a session's end between commits after them), and
//! refused by a follower and in a cluster. The namespace's model test
//! (`mds/src/namespace/model_tests.rs`) checks random operation sequences through it.

use super::tests::{
    claim, clients_keys, commit_creates, commit_each, entries, put_resend, raw_contents,
    resend_xids, wait_for_flushes,
};
use super::*;
use crate::options::full_scan;
use crate::schema::{
    CF_DENTRIES, CF_EDITS, CF_INODES, Dentry, FileKind, JournalOp, ROOT_INO, TxRecord, hex,
};
use proptest::prelude::*;

fn edit_log(checkpoint_bytes: usize) -> JournalOptions {
    JournalOptions {
        edit_log: Some(EditLog { checkpoint_bytes }),
        ..JournalOptions::default()
    }
}

/// The raw keys of one family.
fn family_keys(j: &Journal, name: &str) -> usize {
    raw_contents(j)
        .iter()
        .filter(|line| line.starts_with(&format!("{name} ")))
        .count()
}

/// Every inode a scan reads, by number, with its transno.
fn inodes(j: &Journal) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    j.scan_inodes(|inode| {
        seen.push((inode.ino, inode.transno));
        Ok(())
    })
    .unwrap();
    seen
}

/// Inodes (number, transno) and entries (parent, name, child).
type Namespace = (Vec<(u64, u64)>, Vec<(u64, String, u64)>);

/// What a store holds, as every start-up reads it.
fn namespace(j: &Journal) -> Namespace {
    (inodes(j), entries(j))
}

#[test]
fn a_commit_writes_its_namespace_changes_as_one_edit() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    let (inodes_before, dentries_before) =
        (family_keys(&j, CF_INODES), family_keys(&j, CF_DENTRIES));
    commit_creates(&j, 100);
    commit_creates(&j, 50);
    assert_eq!(family_keys(&j, CF_EDITS), 2, "one edit a commit");
    assert_eq!(
        family_keys(&j, CF_INODES),
        inodes_before,
        "no image key yet"
    );
    assert_eq!(family_keys(&j, CF_DENTRIES), dentries_before);
    let edit_keys: Vec<String> = raw_contents(&j)
        .into_iter()
        .filter(|line| line.starts_with("edits "))
        .map(|line| line.split(' ').nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        edit_keys,
        [hex(&edits::edit_key(100)), hex(&edits::edit_key(150))],
        "keyed by the last transno"
    );
    // Read over the images while the checkpointer holds them.
    assert_eq!(entries(&j).len(), 150);
    assert_eq!(j.inode(120).unwrap().unwrap().transno, 119);
}

#[test]
fn checkpoints_write_the_images_and_delete_their_edits() {
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint every few commits.
    let (j, _) = Journal::open(dir.path(), edit_log(16 << 10)).unwrap();
    for _ in 0..40 {
        commit_creates(&j, 25);
    }
    let expected = namespace(&j);
    assert_eq!(expected.1.len(), 1000);
    j.flush().unwrap();
    assert_eq!(
        family_keys(&j, CF_EDITS),
        0,
        "every edit written out and deleted"
    );
    assert_eq!(
        family_keys(&j, CF_DENTRIES),
        1000,
        "one entry a create, its image in it"
    );
    assert_eq!(namespace(&j), expected);
    drop(j);
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.last_committed, 1000);
    assert_eq!(namespace(&j), expected);
}

#[test]
fn edits_a_crash_leaves_are_read_by_a_read_only_open_and_applied_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    commit_creates(&j, 300);
    // A file renamed, one unlinked, and the root re-imaged: changes to keys an earlier
    // edit wrote.
    let mut root = j.inode(ROOT_INO).unwrap().unwrap();
    root.transno = 301;
    root.entries = 299;
    let ops = vec![
        JournalOp::DeleteDentry {
            parent: ROOT_INO,
            name: format!("f.{:016}", 2).into(),
            child: 2,
        },
        JournalOp::DeleteInode(2),
        JournalOp::DeleteDentry {
            parent: ROOT_INO,
            name: format!("f.{:016}", 3).into(),
            child: 3,
        },
        JournalOp::PutDentry {
            parent: ROOT_INO,
            name: "renamed".into(),
            entry: Dentry {
                ino: 3,
                kind: FileKind::File,
            },
        },
        JournalOp::PutInode(root),
    ];
    j.commit(&[TxRecord { transno: 301, ops }]).unwrap();
    let expected = namespace(&j);
    assert!(
        expected
            .1
            .iter()
            .any(|(_, name, ino)| name == "renamed" && *ino == 3)
    );
    assert!(!expected.0.iter().any(|(ino, _)| *ino == 2));
    j.close_without_checkpoint();

    let (ro, _) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(family_keys(&ro, CF_EDITS), 2, "the edits are still there");
    assert_eq!(namespace(&ro), expected, "read over the images");
    assert_eq!(ro.inode(ROOT_INO).unwrap().unwrap().entries, 299);
    assert_eq!(ro.inode(2).unwrap(), None);
    drop(ro);

    // A writable open without the edit log writes them out before anything else.
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.last_committed, 301);
    assert_eq!(family_keys(&j, CF_EDITS), 0);
    assert_eq!(namespace(&j), expected);
}

#[test]
fn a_checkpoint_cut_short_before_its_edits_are_deleted_is_applied_again_to_the_same_end() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    commit_creates(&j, 200);
    j.close_without_checkpoint();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    let expected = namespace(&j);
    commit_creates(&j, 100);
    let more = namespace(&j);
    // The images written, the edits kept: as when a checkpoint stops between the two.
    let stored = edits::stored(&j.db, full_scan()).unwrap();
    let bytes: Vec<&[u8]> = stored.iter().map(|(_, e)| &**e).collect();
    edits::apply(&j.db, j.families, &j.checkpoint_dir(), &bytes).unwrap();
    assert_eq!(family_keys(&j, CF_EDITS), 1);
    assert_eq!(expected.1.len(), 200);
    j.close_without_checkpoint();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(namespace(&j), more);
    assert_eq!(family_keys(&j, CF_EDITS), 0);
}

#[test]
fn a_follower_refuses_a_store_whose_owner_writes_an_edit_log() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, own) = (dir.path().join("store"), dir.path().join("follower"));
    let (owner, _) = Journal::open(&primary, edit_log(usize::MAX)).unwrap();
    commit_creates(&owner, 10);
    let refused = Journal::open_follower(&primary, &own).unwrap_err();
    assert!(matches!(refused, Error::FollowEditLog { .. }), "{refused}");
    drop(owner);
    // Without it, the mark goes and the store can be followed.
    let (owner, _) = Journal::open(&primary, JournalOptions::default()).unwrap();
    let (follower, _) = Journal::open_follower(&primary, &own).unwrap();
    drop((owner, follower));
}

#[test]
fn a_follower_that_meets_an_edit_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (primary, own) = (dir.path().join("store"), dir.path().join("follower"));
    let (owner, _) = Journal::open(&primary, JournalOptions::default()).unwrap();
    commit_creates(&owner, 10);
    let (follower, _) = Journal::open_follower(&primary, &own).unwrap();
    let mut seq = follower.sequence();
    drop(owner);
    let (owner, _) = Journal::open(&primary, edit_log(usize::MAX)).unwrap();
    commit_creates(&owner, 10);
    let refused = follower.follow(&mut seq, |_| {}).unwrap_err();
    assert!(matches!(refused, Error::FollowEditLog { .. }), "{refused}");
}

#[test]
fn the_edit_log_is_refused_for_a_clusters_store() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        edit_log: Some(EditLog::default()),
        ..claim("c", 0, 1)
    };
    let refused = Journal::open(dir.path(), options).unwrap_err();
    assert!(matches!(refused, Error::EditLogInCluster), "{refused}");
    assert!(!dir.path().join("CURRENT").exists(), "nothing created");
}

proptest! {
    /// Bytes that are no edit give an error, never a panic or a wrong change.
    #[test]
    fn a_damaged_edit_is_refused_not_misread(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let families = Families {
            inodes: 1,
            dentries: 2,
            clients: 3,
            meta: 4,
            xattrs: 5,
            data: 6,
            orphans: 7,
            edits: 8,
        };
        let _ = edits::Gathered::default().add(families, &bytes);
    }
}

fn any_change() -> impl Strategy<Value = (bool, Vec<u8>, Option<Vec<u8>>)> {
    (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
    )
}

proptest! {
    /// An edit built as a commit builds it reads back as the changes it holds, family by
    /// family and in order, and cut anywhere it is refused.
    #[test]
    fn an_edit_reads_back_as_the_changes_it_was_built_from(
        changes in proptest::collection::vec(any_change(), 0..20),
        cut in any::<prop::sample::Index>(),
    ) {
        let families = Families {
            inodes: 1,
            dentries: 300,
            clients: 3,
            meta: 4,
            xattrs: 5,
            data: 6,
            orphans: 7,
            edits: 8,
        };
        let mut batch = RawBatch::with_capacity(0);
        let (mut inodes, mut dentries) = (Vec::new(), Vec::new());
        for (is_inode, key, value) in &changes {
            let family = if *is_inode { families.inodes } else { families.dentries };
            match value {
                Some(value) => batch.put(family, key, value),
                None => batch.delete(family, key),
            }
            let list = if *is_inode { &mut inodes } else { &mut dentries };
            list.push((key.as_slice(), value.as_deref()));
        }
        let bytes = batch.into_bytes();
        let mut gathered = edits::Gathered::default();
        gathered.add(families, &bytes).unwrap();
        prop_assert_eq!(&gathered.inodes, &inodes);
        prop_assert_eq!(&gathered.dentries, &dentries);
        if !changes.is_empty() {
            let short = &bytes[..12 + cut.index(bytes.len() - 12)];
            prop_assert!(edits::Gathered::default().add(families, short).is_err());
        }
    }
}

proptest! {
    /// The checkpointer's sort keeps each key's last change, in the order of the keys' bytes
    /// (it compares their first 8 bytes as a number first), whatever their lengths.
    #[test]
    fn the_last_change_of_each_key_comes_out_in_byte_order(
        changes in proptest::collection::vec(
            (
                proptest::collection::vec(0u8..3, 0..11),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..4)),
            ),
            0..60,
        ),
        interleaved in any::<bool>(),
    ) {
        let mut changes = changes;
        if interleaved {
            // Two increasing runs interleaved, as two partitions' creates write them (with
            // repeats): the one-pass merge takes these.
            let (mut a, mut b): (Vec<_>, Vec<_>) =
                changes.drain(..).enumerate().partition(|(i, _)| i % 2 == 0);
            a.sort_by(|x, y| x.1.0.cmp(&y.1.0));
            b.sort_by(|x, y| x.1.0.cmp(&y.1.0));
            let mut b = b.into_iter();
            for x in a {
                changes.push(x.1);
                changes.extend(b.next().map(|y| y.1));
            }
            changes.extend(b.map(|y| y.1));
        }
        let listed: Vec<(&[u8], Option<&[u8]>)> = changes
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let mut want = std::collections::BTreeMap::<&[u8], Option<&[u8]>>::default();
        for (k, v) in &listed {
            want.insert(k, *v);
        }
        let want: Vec<(&[u8], Option<&[u8]>)> = want.into_iter().collect();
        prop_assert_eq!(edits::last_changes(listed), want);
    }
}

#[test]
fn a_checkpoint_that_fails_stops_the_journal_and_the_next_open_writes_its_edits_out() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(16 << 10)).unwrap();
    commit_creates(&j, 25);
    // Where the checkpoint writes its files, a file: the next checkpoint cannot.
    std::fs::write(j.checkpoint_dir(), b"in the way").unwrap();
    let mut outcome = Ok(());
    for _ in 0..200 {
        let transno = j.last_committed() + 1;
        outcome = j
            .commit(&[TxRecord {
                transno,
                ops: vec![JournalOp::KnowClient { client: transno }],
            }])
            .map(drop);
        if outcome.is_err() {
            break;
        }
        commit_creates(&j, 25);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stopped = outcome.unwrap_err();
    assert!(matches!(stopped, Error::Checkpoint(_)), "{stopped}");
    assert!(
        stopped.to_string().contains("checkpoint"),
        "names the path: {stopped}"
    );
    assert!(j.is_failed());
    let transno = j.last_committed() + 1;
    let refused = j
        .commit(&[TxRecord {
            transno,
            ops: vec![JournalOp::KnowClient { client: 1 }],
        }])
        .unwrap_err();
    assert!(matches!(refused, Error::Failed), "fail-stop: {refused}");
    let expected = namespace(&j);
    let last = j.last_committed();
    drop(j);
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    let (j, recovered) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    assert_eq!(recovered.last_committed, last);
    assert_eq!(
        namespace(&j),
        expected,
        "every committed change, written out"
    );
}

/// The committer gathers edits below a checkpoint's worth without handing them over (the
/// checkpointer sleeps meanwhile); a clean close hands them over and writes them out.
#[test]
fn a_clean_close_writes_out_the_edits_gathered_below_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    for _ in 0..3 {
        commit_creates(&j, 10);
    }
    let expected = namespace(&j);
    assert_eq!(j.stats().checkpoints.unwrap().written, 0);
    drop(j);
    let (ro, _) = Journal::open_read_only(dir.path()).unwrap();
    assert_eq!(family_keys(&ro, CF_EDITS), 0, "written out at the close");
    assert_eq!(namespace(&ro), expected);
}

/// A checkpoint flushes the `edits` memtable once it has deleted the edits in it: the
/// memtable does not hold them until its write buffer fills (64 MiB), when a flush would
/// write the edits still live then into a table file.
#[test]
fn a_checkpoint_flushes_the_edits_it_deleted() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints of 16 KiB: a flush once the memtable holds 8 KiB, every few commits.
    let (j, _) = Journal::open(dir.path(), edit_log(16 << 10)).unwrap();
    for _ in 0..40 {
        commit_creates(&j, 25);
    }
    j.checkpointer.as_ref().unwrap().write_out().unwrap();
    wait_for_flushes(&j);
    let in_memtable =
        j.db.property_int_value_cf(j.cf(CF_EDITS), "rocksdb.num-entries-active-mem-table")
            .unwrap()
            .unwrap();
    // Without the flushes it holds all 40 edits and each checkpoint's deletion.
    assert!(
        in_memtable < 10,
        "{in_memtable} edits and deletions in the memtable"
    );
    assert_eq!(family_keys(&j, CF_EDITS), 0);
    assert_eq!(entries(&j).len(), 1000);
}

/// With the edit log, log files are written over once no family needs them; a crash after
/// many of them were loses nothing committed: the next open replays the reused files as far
/// as their own records go (RocksDB's point-in-time recovery), then writes the edits out.
#[test]
fn a_crash_after_log_files_were_reused_loses_no_commit() {
    let dir = tempfile::tempdir().unwrap();
    // Small sizes: the log limit forces flushes, every flush starts a new log file, and the
    // ones no family needs any more are kept to be written over.
    let tuning = crate::options::Tuning {
        max_total_wal_size: 256 << 10,
        namespace_write_buffer: 1 << 20,
        per_commit_write_buffer: 64 << 10,
    };
    let (j, _) = Journal::open_tuned(dir.path(), edit_log(64 << 10), &tuning).unwrap();
    for _ in 0..200 {
        commit_creates(&j, 25);
    }
    let expected = namespace(&j);
    assert_eq!(expected.1.len(), 5000);
    j.close_without_checkpoint();
    let log = std::fs::read_to_string(dir.path().join("LOG")).unwrap();
    assert!(
        log.contains("reusing log"),
        "no log file was written over: the test shows nothing"
    );
    let (j, recovered) = Journal::open(dir.path(), edit_log(64 << 10)).unwrap();
    assert_eq!(recovered.last_committed, 5000);
    assert_eq!(namespace(&j), expected);
}

/// A checkpoint deletes the edits it wrote out and no other: a session's end written after
/// the commit the checkpoint took last has that commit's transno in its key, and stays (else
/// a crash before the next checkpoint would bring the session's slots back).
#[test]
fn a_checkpoint_forgets_only_the_edits_it_wrote_out() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    commit_each(&j, vec![vec![put_resend(9, 0, 1)]]);
    j.write_client_changes(&[JournalOp::DropResend { client: 9 }])
        .unwrap();
    let stored = edits::stored(&j.db, full_scan()).unwrap();
    assert_eq!(stored.len(), 2);
    // A checkpoint that took the commit's edit before the session's end came.
    edits::apply(&j.db, j.families, &j.checkpoint_dir(), &[&*stored[0].1]).unwrap();
    edits::forget(&j.db, &stored[0].0).unwrap();
    let left: Vec<_> = edits::stored(&j.db, full_scan())
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(left, [stored[1].0], "the session's end is still there");
    j.close_without_checkpoint();
    let (_, recovered) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    assert!(
        resend_xids(&recovered).is_empty(),
        "the ended session's slot came back: {:?}",
        resend_xids(&recovered)
    );
}

#[test]
fn the_checkpointers_progress_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    commit_creates(&j, 100);
    let held = j.stats().checkpoints.unwrap();
    assert_eq!(held.written, 0);
    assert!(held.held_bytes > 100 * 50, "{held:?}");
    j.flush().unwrap();
    let written = j.stats().checkpoints.unwrap();
    assert_eq!((written.written, written.held_bytes), (1, 0));
    let (k, _) = Journal::open(
        tempfile::tempdir().unwrap().path(),
        JournalOptions::default(),
    )
    .unwrap();
    assert_eq!(k.stats().checkpoints, None, "no edit log, no checkpoints");
}

/// The resend slots a sequence of commits and client changes leaves, as a restart recovers
/// them: after a clean close, or (`crash`) with every edit left in the store, read by a
/// read-only open first.
fn resend_after(options: JournalOptions, crash: bool) -> Vec<Vec<(u64, u64, Vec<u64>)>> {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), options.clone()).unwrap();
    let mut seen = Vec::new();
    commit_each(
        &j,
        vec![
            vec![put_resend(7, 0, 1)],
            vec![put_resend(7, 0, 2), put_resend(9, 0, 1)],
            // Client 7 has the replies of 1 and 2 now: slot 0 is free again.
            vec![put_resend(7, 2, 3)],
            vec![put_resend(7, 2, 4), put_resend(11, 0, 1)],
        ],
    );
    // Client 9's session ends between commits: its slot, put by an edit not written out
    // yet, is deleted after it, and stays deleted once that edit is written out.
    j.write_client_changes(&[JournalOp::DropResend { client: 9 }])
        .unwrap();
    let reopen = |j: Journal| {
        if crash {
            j.close_without_checkpoint();
            let (_, recovered) = Journal::open_read_only(dir.path()).unwrap();
            let read_only = resend_xids(&recovered);
            let (j, recovered) = Journal::open(dir.path(), options.clone()).unwrap();
            assert_eq!(
                resend_xids(&recovered),
                read_only,
                "both opens read the same"
            );
            (j, read_only)
        } else {
            drop(j);
            let (j, recovered) = Journal::open(dir.path(), options.clone()).unwrap();
            (j, resend_xids(&recovered))
        }
    };
    let (j, first) = reopen(j);
    seen.push(first);
    // The slots survived with their state: after client 7 acks 3, the slot of 3 is reused;
    // a session's end in a commit deletes its slots, and a record put after it in the same
    // batch (a new session of the same identity) is kept.
    commit_each(
        &j,
        vec![
            vec![put_resend(7, 3, 5)],
            vec![
                put_resend(11, 0, 2),
                JournalOp::DropResend { client: 11 },
                JournalOp::DropResend { client: 7 },
                put_resend(7, 5, 6),
            ],
        ],
    );
    j.write_client_changes(&[
        JournalOp::KnowClient { client: 12 },
        JournalOp::DropResend { client: 7 },
    ])
    .unwrap();
    commit_each(&j, vec![vec![put_resend(12, 0, 1)]]);
    let (_, second) = reopen(j);
    seen.push(second);
    seen
}

#[test]
fn resend_slots_in_the_edits_are_recovered_as_the_images_alone_would_be() {
    let want = resend_after(JournalOptions::default(), false);
    assert_eq!(
        want,
        [
            vec![(7, 2, vec![3, 4]), (11, 0, vec![1])],
            vec![(12, 0, vec![1])]
        ]
    );
    assert_eq!(
        resend_after(edit_log(usize::MAX), false),
        want,
        "closed cleanly"
    );
    assert_eq!(
        resend_after(edit_log(usize::MAX), true),
        want,
        "after a crash"
    );
    assert_eq!(
        resend_after(edit_log(256), true),
        want,
        "checkpoints in between"
    );
}

#[test]
fn a_commit_carries_its_resend_slots_in_its_edit_and_a_checkpoint_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), edit_log(usize::MAX)).unwrap();
    commit_each(
        &j,
        vec![
            vec![put_resend(7, 0, 1)],
            vec![put_resend(7, 0, 2), put_resend(9, 0, 1)],
        ],
    );
    assert_eq!(family_keys(&j, CF_EDITS), 2, "one edit a commit");
    assert!(
        clients_keys(&j).is_empty(),
        "no slot key until a checkpoint"
    );
    j.write_client_changes(&[JournalOp::DropResend { client: 9 }])
        .unwrap();
    let edit_keys: Vec<String> = raw_contents(&j)
        .into_iter()
        .filter(|line| line.starts_with("edits "))
        .map(|line| line.split(' ').nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        edit_keys,
        [
            hex(&edits::edit_key(1)),
            hex(&edits::edit_key(2)),
            hex(EditKey::client(2, 0).as_bytes())
        ],
        "the session's end after the commit it followed"
    );
    // Changes with no slot in them write no edit.
    j.write_client_changes(&[JournalOp::KnowClient { client: 9 }])
        .unwrap();
    assert_eq!(family_keys(&j, CF_EDITS), 3);
    j.flush().unwrap();
    assert_eq!(family_keys(&j, CF_EDITS), 0);
    assert_eq!(
        clients_keys(&j),
        ["000000000000000700000000", "000000000000000700000001"],
        "client 9's slot written out deleted"
    );
}
