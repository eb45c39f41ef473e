//! Model checks of the hand-over between the committer (publish) and a partition (push,
//! drain): no reply waits for a wake that never comes, each reply leaves exactly once, and a
//! reply pushed out of transno order changes neither.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p reply --test loom`
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use reply::{Outcome, ReplyEngine, Waker};

fn engine_with_permits(partitions: usize) -> (Arc<ReplyEngine<u32>>, Vec<Arc<AtomicUsize>>) {
    let permits: Vec<_> = (0..partitions)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let wakers = permits
        .iter()
        .map(|p| {
            let p = p.clone();
            Box::new(move || {
                p.fetch_add(1, Ordering::SeqCst);
            }) as Waker
        })
        .collect();
    (Arc::new(ReplyEngine::new(wakers, 0)), permits)
}

#[test]
fn a_commit_published_while_its_reply_is_pushed_always_wakes_the_partition() {
    loom::model(|| {
        let (engine, permits) = engine_with_permits(1);
        let committer = {
            let engine = engine.clone();
            loom::thread::spawn(move || engine.publish(1))
        };
        engine.push(0, 1, 10);
        committer.join().unwrap();
        assert!(permits[0].load(Ordering::SeqCst) >= 1, "wake lost");
        let mut got = Vec::new();
        engine.drain(0, |v, o| got.push((v, o)));
        assert_eq!(got, vec![(10, Outcome::Committed { last_committed: 1 })]);
    });
}

#[test]
fn a_commit_published_during_a_drain_is_drained_after_it() {
    loom::model(|| {
        let (engine, permits) = engine_with_permits(1);
        engine.push(0, 1, 1);
        engine.push(0, 2, 2);
        engine.publish(1);
        assert_eq!(permits[0].load(Ordering::SeqCst), 1);
        let committer = {
            let engine = engine.clone();
            loom::thread::spawn(move || engine.publish(2))
        };
        // The partition serves the first wake while the second commit is published.
        let mut got = Vec::new();
        engine.drain(0, |v, _| got.push(v));
        committer.join().unwrap();
        if got.len() < 2 {
            assert_eq!(permits[0].load(Ordering::SeqCst), 2, "second wake lost");
            engine.drain(0, |v, _| got.push(v));
        }
        assert_eq!(got, vec![1, 2]);
    });
}

#[test]
fn owner_and_partner_drains_release_each_reply_once() {
    loom::model(|| {
        let (engine, _) = engine_with_permits(1);
        engine.push(0, 1, 1);
        engine.push(0, 2, 2);
        engine.publish(2);
        let partner = {
            let engine = engine.clone();
            loom::thread::spawn(move || {
                let mut got = Vec::new();
                engine.drain(0, |v, _| got.push(v));
                got
            })
        };
        let mut got = Vec::new();
        engine.drain(0, |v, _| got.push(v));
        got.extend(partner.join().unwrap());
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
    });
}

#[test]
fn a_failure_published_while_a_reply_is_pushed_fails_it() {
    loom::model(|| {
        let (engine, permits) = engine_with_permits(1);
        let committer = {
            let engine = engine.clone();
            loom::thread::spawn(move || engine.fail())
        };
        engine.push(0, 1, 7);
        committer.join().unwrap();
        assert!(permits[0].load(Ordering::SeqCst) >= 1, "wake lost");
        let mut got = Vec::new();
        engine.drain(0, |v, o| got.push((v, o)));
        assert_eq!(got, vec![(7, Outcome::Failed)]);
    });
}

/// Context switches loom may force in the four-thread models below, so that they stay
/// bounded: each one more multiplies the time (three to four took this file from 5 s to 35 s
/// on two cores). Three already catches a push that skips its fence or the head store of a new
/// front.
const PREEMPTIONS: usize = 4;

/// Replies queued (in this order) before the race, then published up to `committed_before`
/// (0: no publish), and what races: a pusher pushing `pushed` in order, the committer
/// publishing `commit`, a partner draining once for the owner, and the owner serving one wake
/// (it consumes its permit first, as `Notify::notified` does, so a wake that comes after its
/// drain started stays recorded). Checks that a wake was recorded for whatever `commit` covers
/// and is still queued, and that every reply leaves exactly once, in transno order within a
/// drain, as committed.
#[derive(Clone, Copy)]
struct Race {
    queued: &'static [u32],
    committed_before: u64,
    pushed: &'static [u32],
    commit: u64,
}

impl Race {
    fn check(self) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(PREEMPTIONS);
        builder.check(move || self.run());
    }

    fn run(self) {
        let (engine, permits) = engine_with_permits(1);
        for &t in self.queued {
            engine.push(0, t.into(), t);
        }
        if self.committed_before > 0 {
            engine.publish(self.committed_before);
        }
        let drain = |engine: &ReplyEngine<u32>| {
            let mut got = Vec::new();
            engine.drain(0, |v, o| got.push((v, o)));
            assert!(got.is_sorted_by_key(|&(v, _)| v), "out of order: {got:?}");
            got
        };
        let pusher = {
            let engine = engine.clone();
            let pushed = self.pushed;
            loom::thread::spawn(move || {
                for &t in pushed {
                    engine.push(0, t.into(), t);
                }
            })
        };
        let committer = {
            let engine = engine.clone();
            let commit = self.commit;
            loom::thread::spawn(move || engine.publish(commit))
        };
        let partner = {
            let engine = engine.clone();
            loom::thread::spawn(move || drain(&engine))
        };
        permits[0].swap(0, Ordering::SeqCst);
        let mut got = drain(&engine);
        pusher.join().unwrap();
        committer.join().unwrap();
        got.extend(partner.join().unwrap());
        // The owner drains again only if woken after its drain started: without that wake,
        // whatever `commit` covers and is still queued would wait forever.
        if permits[0].load(Ordering::SeqCst) > 0 {
            got.extend(drain(&engine));
        }
        let mut all: Vec<u32> = self.queued.iter().chain(self.pushed).copied().collect();
        all.sort_unstable();
        let covered: Vec<u32> = all
            .iter()
            .copied()
            .filter(|&t| u64::from(t) <= self.commit)
            .collect();
        got.sort_unstable_by_key(|&(v, _)| v);
        let released: Vec<u32> = got.iter().map(|&(v, _)| v).collect();
        assert_eq!(released, covered, "wake lost, or released twice");
        // The rest leaves with the next commit, so that each reply's fate is checked.
        engine.publish(u64::from(*all.last().unwrap()));
        got.extend(drain(&engine));
        got.sort_unstable_by_key(|&(v, _)| v);
        assert_eq!(got.iter().map(|&(v, _)| v).collect::<Vec<_>>(), all);
        for (v, outcome) in got {
            match outcome {
                Outcome::Committed { last_committed } => assert!(u64::from(v) <= last_committed),
                Outcome::Failed => panic!("{v} failed, but the journal did not"),
            }
        }
    }
}

#[test]
fn an_older_push_that_becomes_the_head_races_a_commit_and_two_drains() {
    // 1 goes in front of 3, and only it is covered: unless the push or the committer sees
    // the other, nobody wakes the partition for it.
    Race {
        queued: &[3],
        committed_before: 0,
        pushed: &[4, 1],
        commit: 2,
    }
    .check();
}

#[test]
fn an_older_push_into_the_middle_races_a_commit_and_two_drains() {
    // 2 goes between 1 and 4 while a drain may take 1 (already committed) and store 2 or 4
    // as the new head, and the commit of 2 is published.
    Race {
        queued: &[1, 4],
        committed_before: 1,
        pushed: &[2],
        commit: 2,
    }
    .check();
}

#[test]
fn a_failure_racing_an_older_push_fails_only_what_is_above_last_committed() {
    loom::model(|| {
        let (engine, permits) = engine_with_permits(1);
        engine.push(0, 3, 3);
        engine.publish(2);
        let committer = {
            let engine = engine.clone();
            loom::thread::spawn(move || engine.fail())
        };
        // Already committed when pushed: it must not fail, whichever drain sees it.
        engine.push(0, 1, 1);
        let mut got = Vec::new();
        engine.drain(0, |v, o| got.push((v, o)));
        committer.join().unwrap();
        assert!(permits[0].load(Ordering::SeqCst) >= 1, "wake lost");
        engine.drain(0, |v, o| got.push((v, o)));
        assert_eq!(
            got,
            vec![
                (1, Outcome::Committed { last_committed: 2 }),
                (3, Outcome::Failed)
            ]
        );
    });
}
