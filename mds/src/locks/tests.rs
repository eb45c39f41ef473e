//! The lock table against Linux's rules: splits, merges, conflicts, waits granted in order,
//! deadlocks refused, and a byte-by-byte model of any sequence of requests.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const INO: u64 = 7;

fn who(owner: u64) -> Owner {
    Owner {
        client: owner,
        owner,
    }
}

fn lock(start: u64, end: u64, kind: LockKind) -> FileLock {
    FileLock {
        start,
        end,
        kind,
        pid: 100,
    }
}

fn set(locks: &Locks, owner: u64, l: FileLock) -> Result<(), Errno> {
    match locks.set(INO, who(owner), l, false, 1)? {
        Set::Done => Ok(()),
        Set::Waiting { .. } => panic!("a request that may not wait was queued"),
    }
}

fn wait(locks: &Locks, owner: u64, l: FileLock, conn: u64) -> oneshot::Receiver<Result<(), Errno>> {
    match locks.set(INO, who(owner), l, true, conn).unwrap() {
        Set::Waiting { granted, .. } => granted,
        Set::Done => panic!("granted at once"),
    }
}

/// `owner`'s locks on INO, sorted: (start, end, write).
fn held(locks: &Locks, owner: u64) -> Vec<(u64, u64, bool)> {
    let table = locks.table.lock();
    let mut v: Vec<_> = table.inodes.get(&INO).map_or_else(Vec::new, |i| {
        i.held
            .iter()
            .filter(|h| h.owner == who(owner))
            .map(|h| (h.start, h.end, h.write))
            .collect()
    });
    v.sort_unstable();
    v
}

#[test]
fn an_unlock_in_the_middle_splits_a_lock_and_touching_locks_of_a_kind_merge() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 99, LockKind::Write)).unwrap();
    set(&locks, 1, lock(40, 59, LockKind::Unlock)).unwrap();
    assert_eq!(held(&locks, 1), [(0, 39, true), (60, 99, true)]);
    set(&locks, 1, lock(40, 59, LockKind::Write)).unwrap();
    assert_eq!(held(&locks, 1), [(0, 99, true)]);
    // Another kind inside: three pieces; the same kind again over all of it: one.
    set(&locks, 1, lock(20, 29, LockKind::Read)).unwrap();
    assert_eq!(
        held(&locks, 1),
        [(0, 19, true), (20, 29, false), (30, 99, true)]
    );
    set(&locks, 1, lock(0, u64::MAX, LockKind::Read)).unwrap();
    assert_eq!(held(&locks, 1), [(0, u64::MAX, false)]);
    set(&locks, 1, lock(0, u64::MAX, LockKind::Unlock)).unwrap();
    assert_eq!(held(&locks, 1), []);
    assert_eq!(locks.counts(), Counts::default());
    assert!(
        locks.table.lock().inodes.is_empty(),
        "an inode without locks is dropped"
    );
}

#[test]
fn owners_conflict_where_they_overlap_and_either_is_exclusive() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 9, LockKind::Read)).unwrap();
    set(&locks, 2, lock(5, 14, LockKind::Read)).unwrap();
    assert_eq!(
        set(&locks, 3, lock(9, 9, LockKind::Write)),
        Err(Errno::EAGAIN)
    );
    set(&locks, 3, lock(15, 20, LockKind::Write)).unwrap();
    let asked = lock(12, 30, LockKind::Read);
    let got = locks.get(INO, who(1), asked);
    assert_eq!((got.start, got.end, got.kind), (15, 20, LockKind::Write));
    assert_eq!(got.pid, 0, "a pid is told only to its own client");
    assert_eq!(locks.get(INO, who(3), asked).kind, LockKind::Unlock);
    assert_eq!(
        locks
            .get(
                INO,
                Owner {
                    client: 3,
                    owner: 9
                },
                asked
            )
            .kind,
        LockKind::Write,
        "another owner of the same client conflicts too"
    );
    assert_eq!(
        locks
            .get(
                INO,
                Owner {
                    client: 3,
                    owner: 9
                },
                asked
            )
            .pid,
        100,
        "and is told the pid"
    );
    assert_eq!(
        locks
            .set(INO, who(1), lock(5, 4, LockKind::Read), false, 1)
            .err(),
        Some(Errno::EINVAL)
    );
}

#[test]
fn waiters_are_granted_in_order_each_once_nothing_held_conflicts() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 0, LockKind::Read)).unwrap();
    let mut writer = wait(&locks, 2, lock(0, 0, LockKind::Write), 2);
    // Granted at once: it conflicts with nothing held (Linux grants it too).
    set(&locks, 3, lock(0, 0, LockKind::Read)).unwrap();
    set(&locks, 3, lock(0, 0, LockKind::Unlock)).unwrap();
    let mut reader = {
        set(&locks, 1, lock(0, 0, LockKind::Write)).unwrap(); // upgrade: still one lock
        wait(&locks, 4, lock(0, 0, LockKind::Read), 4)
    };
    assert_eq!(
        locks.counts(),
        Counts {
            held: 1,
            waiting: 2
        }
    );
    set(&locks, 1, lock(0, 0, LockKind::Unlock)).unwrap();
    assert_eq!(writer.try_recv(), Ok(Ok(())));
    assert!(
        reader.try_recv().is_err(),
        "the reader waits behind the writer"
    );
    set(&locks, 2, lock(0, 0, LockKind::Unlock)).unwrap();
    assert_eq!(reader.try_recv(), Ok(Ok(())));
    assert_eq!(held(&locks, 4), [(0, 0, false)]);
    assert_eq!(
        locks.counts(),
        Counts {
            held: 1,
            waiting: 0
        }
    );
}

#[test]
fn a_wait_that_closes_a_cycle_is_refused_with_edeadlk() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 0, LockKind::Write)).unwrap();
    set(&locks, 2, lock(1, 1, LockKind::Write)).unwrap();
    set(&locks, 3, lock(2, 2, LockKind::Write)).unwrap();
    let _one = wait(&locks, 1, lock(1, 1, LockKind::Write), 1); // 1 waits for 2
    let _two = wait(&locks, 2, lock(2, 2, LockKind::Write), 2); // 2 waits for 3
    // 3 waiting for 1 would close 3 → 1 → 2 → 3.
    assert_eq!(
        locks
            .set(INO, who(3), lock(0, 0, LockKind::Write), true, 3)
            .err(),
        Some(Errno::EDEADLK)
    );
    // Across inodes too.
    let other = Owner {
        client: 3,
        owner: 3,
    };
    locks
        .set(INO + 1, other, lock(0, 0, LockKind::Write), false, 3)
        .unwrap();
    let Set::Waiting { .. } = locks
        .set(INO + 1, who(1), lock(0, 0, LockKind::Read), true, 5)
        .unwrap()
    else {
        panic!("1 waits for 3 on another inode");
    };
    assert_eq!(
        locks
            .set(INO, who(3), lock(1, 1, LockKind::Read), true, 3)
            .err(),
        Some(Errno::EDEADLK),
        "3 → 2 → 3"
    );
}

#[test]
fn a_waits_connection_ending_and_a_clients_session_ending_let_others_through() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 9, LockKind::Write)).unwrap();
    let mut gone = wait(&locks, 2, lock(0, 9, LockKind::Write), 20);
    let mut next = wait(&locks, 3, lock(0, 9, LockKind::Read), 30);
    locks.cancel_conn(20);
    assert!(gone.try_recv().is_err(), "dropped unanswered");
    assert!(locks.holds_any(1) && !locks.holds_any(2));
    let own = locks.set(INO, who(1), lock(0, 0, LockKind::Write), true, 10);
    assert!(
        matches!(own, Ok(Set::Done)),
        "an owner never waits for itself"
    );
    let mut of_1 = match locks
        .set(
            INO,
            Owner {
                client: 1,
                owner: 99,
            },
            lock(5, 5, LockKind::Read),
            true,
            10,
        )
        .unwrap()
    {
        Set::Waiting { granted, .. } => granted,
        Set::Done => panic!("another owner of client 1 conflicts"),
    };
    locks.release_client(1);
    assert_eq!(of_1.try_recv(), Ok(Err(Errno::EINTR)));
    assert_eq!(next.try_recv(), Ok(Ok(())));
    assert!(!locks.holds_any(1));
    assert_eq!(
        locks.counts(),
        Counts {
            held: 1,
            waiting: 0
        }
    );
}

/// One request of the model test: owner, range within 0..16, kind.
fn request() -> impl Strategy<Value = (u64, u64, u64, LockKind)> {
    (
        1..4u64,
        0..16u64,
        0..6u64,
        prop_oneof![
            Just(LockKind::Read),
            Just(LockKind::Write),
            Just(LockKind::Unlock)
        ],
    )
        .prop_map(|(o, s, len, k)| (o, s, (s + len).min(15), k))
}

proptest! {
    /// Any sequence of SETLKs against a model that keeps each byte's lock per owner: the same
    /// answers, the same bytes held, and each owner's locks disjoint, with no two touching
    /// locks of one kind left unmerged.
    #[test]
    fn the_table_agrees_with_a_byte_model(requests in proptest::collection::vec(request(), 1..40)) {
        let locks = Locks::default();
        let mut model: BTreeMap<(u64, u64), bool> = BTreeMap::new(); // (owner, byte) -> write
        for (owner, start, end, kind) in requests {
            let write = kind == LockKind::Write;
            let conflict = kind != LockKind::Unlock && (start..=end).any(|b| {
                model.iter().any(|(&(o, byte), &w)| o != owner && byte == b && (w || write))
            });
            let got = set(&locks, owner, lock(start, end, kind));
            prop_assert_eq!(got.is_err(), conflict);
            if !conflict {
                for b in start..=end {
                    match kind {
                        LockKind::Unlock => { model.remove(&(owner, b)); }
                        _ => { model.insert((owner, b), write); }
                    }
                }
            }
            for o in 1..4 {
                let runs = held(&locks, o);
                let mut bytes = BTreeMap::new();
                for &(s, e, w) in &runs {
                    for b in s..=e {
                        prop_assert!(bytes.insert(b, w).is_none(), "overlap in {:?}", runs);
                    }
                }
                let want: BTreeMap<u64, bool> =
                    model.iter().filter(|((mo, _), _)| *mo == o).map(|(&(_, b), &w)| (b, w)).collect();
                prop_assert_eq!(&bytes, &want);
                for pair in runs.windows(2) {
                    prop_assert!(!(pair[0].1 + 1 == pair[1].0 && pair[0].2 == pair[1].2), "unmerged {:?}", runs);
                }
            }
            let total: usize = (1..4).map(|o| held(&locks, o).len()).sum();
            prop_assert_eq!(locks.counts().held, total);
        }
    }
}

/// Two readers, a writer waiting for both, then one reader upgrading: when the other reader
/// leaves, the upgrade is granted (only held locks block it, as on Linux), and the writer
/// after it. Held back by the waiting writer too, the upgrade would wait for ever: the
/// writer waits for its read lock.
#[test]
fn an_upgrade_behind_a_waiting_writer_is_granted_when_the_other_reader_goes() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 0, LockKind::Read)).unwrap();
    set(&locks, 3, lock(0, 0, LockKind::Read)).unwrap();
    let mut writer = wait(&locks, 2, lock(0, 0, LockKind::Write), 2);
    let mut upgrade = wait(&locks, 1, lock(0, 0, LockKind::Write), 1);
    set(&locks, 3, lock(0, 0, LockKind::Unlock)).unwrap();
    assert_eq!(upgrade.try_recv(), Ok(Ok(())));
    assert!(
        writer.try_recv().is_err(),
        "the writer waits for the upgraded lock"
    );
    set(&locks, 1, lock(0, 0, LockKind::Unlock)).unwrap();
    assert_eq!(writer.try_recv(), Ok(Ok(())));
}

/// A wait is bound to the connection that delivers its answer; that connection's end gives
/// it up, another's does not.
#[test]
fn a_wait_ends_with_the_connection_it_is_bound_to() {
    let locks = Locks::default();
    set(&locks, 1, lock(0, 0, LockKind::Write)).unwrap();
    let Set::Waiting { id, mut granted } = locks
        .set(INO, who(2), lock(0, 0, LockKind::Write), true, 0)
        .unwrap()
    else {
        panic!("queued");
    };
    locks.bind_conn(INO, id, 5);
    locks.cancel_conn(4);
    assert_eq!(locks.counts().waiting, 1);
    locks.cancel_conn(5);
    assert_eq!(locks.counts().waiting, 0);
    assert!(granted.try_recv().is_err(), "given up, unanswered");
}

/// Past its share a client's SETLK is ENOLCK, and another client's still goes; past the
/// table's cap everyone's is. An unlock always goes.
#[test]
fn a_client_past_its_share_is_refused_enolck_and_others_go_on() {
    let locks = Locks::with_caps(6, 4);
    let take = |client: u64, ino: u64| {
        let owner = Owner { client, owner: 1 };
        locks.set(ino, owner, lock(0, 0, LockKind::Write), false, 1)
    };
    for ino in 0..4 {
        take(1, ino).unwrap();
    }
    assert_eq!(take(1, 4).err(), Some(Errno::ENOLCK));
    take(2, 4).unwrap();
    take(2, 5).unwrap();
    assert_eq!(take(3, 6).err(), Some(Errno::ENOLCK), "the table is full");
    let owner = Owner {
        client: 1,
        owner: 1,
    };
    locks
        .set(0, owner, lock(0, 0, LockKind::Unlock), false, 1)
        .unwrap();
    take(3, 6).unwrap();
}
