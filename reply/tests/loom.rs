//! Model checks of the hand-over between the committer (publish) and a partition (push,
//! drain): no reply waits for a wake that never comes, and each reply leaves exactly once.
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
