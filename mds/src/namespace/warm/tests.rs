//! A warm namespace against a cold load: thousands of random mutations (four threads'
//! creates, mkdirs, renames, links, symlinks, attributes and removals) committed to a store in
//! batches of many sizes, followed by a follower that also lives through the owner's
//! flushes; what it holds, and what it gives a takeover, must be what a load of the store
//! reads.

use std::sync::Arc;

use journal::{Journal, JournalOptions, TxRecord};

use super::super::tests::{concurrent_walk, empty, snapshot};
use super::*;

/// Every record of a random walk, in transno order.
fn walk() -> Vec<TxRecord> {
    let mut records = concurrent_walk(&Arc::new(empty()));
    records.sort_by_key(|r| r.transno);
    records
}

#[test]
fn a_warm_namespace_holds_what_a_load_reads_and_a_takeover_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, own) = (dir.path().join("store"), dir.path().join("follower"));
    let records = walk();
    let (owner, _) = Journal::open(&store, JournalOptions::default()).unwrap();
    let (first, rest) = records.split_at(100);
    owner.commit(first).unwrap();

    let (follower, recovered) = Journal::open_follower(&store, &own).unwrap();
    let mut warm = WarmNamespace::load(&follower, &recovered).unwrap();
    let mut seq = follower.sequence();
    // Batches of 1 to 64 records, as the committer groups them; the follower looks every
    // third batch, and the owner flushes right after some looks (deleting the log read).
    let mut at = 0;
    for (n, size) in [1usize, 7, 64, 2, 33, 1, 1, 50, 5, 64]
        .into_iter()
        .cycle()
        .enumerate()
    {
        if at == rest.len() {
            break;
        }
        let end = (at + size).min(rest.len());
        owner.commit(&rest[at..end]).unwrap();
        at = end;
        if n % 3 == 2 {
            follower
                .follow(&mut seq, |batch| warm.apply(batch))
                .unwrap();
            if n % 9 == 8 {
                owner.flush().unwrap();
            }
        }
    }
    follower
        .follow(&mut seq, |batch| warm.apply(batch))
        .unwrap();
    assert_eq!(warm.broken(), None);
    assert_eq!(warm.last_committed(), records.last().unwrap().transno);

    let (reader, read) = Journal::open_read_only(&store).unwrap();
    let cold = Namespace::load(&reader, &read).unwrap();
    assert_eq!(
        snapshot(&warm.ns),
        snapshot(&cold),
        "warm and loaded differ"
    );
    assert_eq!(warm.ns.counts(), cold.counts());
    drop((reader, follower, owner));

    // The takeover: the store opened for writing, the warm inodes kept.
    let (journal, recovered) = Journal::open(&store, JournalOptions::default()).unwrap();
    let before = snapshot(&warm.ns);
    let counts = warm.ns.counts();
    let ns = warm.take_over(&journal, &recovered).unwrap();
    assert_eq!(snapshot(&ns), before);
    assert_eq!(ns.counts(), counts);
    assert_eq!(ns.last_transno(), recovered.last_committed);
    assert!(ns.inode_counter() >= recovered.next_ino.max(recovered.ceilings.ino));
}

#[test]
fn a_warm_namespace_behind_the_store_or_broken_is_not_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let (store, own) = (dir.path().join("store"), dir.path().join("follower"));
    let records = walk();
    let (owner, _) = Journal::open(&store, JournalOptions::default()).unwrap();
    owner.commit(&records[..50]).unwrap();
    let (follower, recovered) = Journal::open_follower(&store, &own).unwrap();
    let warm = WarmNamespace::load(&follower, &recovered).unwrap();
    // Committed after the follower's last look.
    owner.commit(&records[50..60]).unwrap();
    drop((follower, owner));
    let (journal, recovered) = Journal::open(&store, JournalOptions::default()).unwrap();
    let refused = warm.take_over(&journal, &recovered).err().unwrap();
    assert!(refused.contains("holds commit 50"), "{refused}");

    // An entry in a directory it does not hold.
    let (follower, recovered) = Journal::open_follower(&store, &dir.path().join("f2")).unwrap();
    let mut warm = WarmNamespace::load(&follower, &recovered).unwrap();
    warm.apply(vec![Change::Dentry {
        parent: 999_999,
        name: "x".into(),
        entry: journal::Dentry {
            ino: 2,
            kind: journal::FileKind::File,
        },
    }]);
    assert!(warm.broken().unwrap().contains("999999"));
    let refused = warm.take_over(&journal, &recovered).err().unwrap();
    assert!(refused.contains("999999"), "{refused}");
}
