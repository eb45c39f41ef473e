//! Inode numbers handed out in runs: a thread that creates takes the numbers of one aligned
//! block of `1 << RUN_BITS` at a time from its namespace's counter, and hands them out one
//! after another. The inode table stripes by block (`table::stripe_of`), so one partition's
//! creates find the stripe's lock, its map's control bytes and the neighbouring slots still in
//! its core's cache. Two partitions never create in one block: numbers taken one at a time
//! from the shared counter interleave the partitions' creates, and a stripe per block then
//! made them wait on each other's locks (docs/benchmarks/in-memory.md, "Inode numbers in runs").

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// log2 of a run's length: the block of consecutive inode numbers one stripe holds.
pub(crate) const RUN_BITS: u32 = 6;

/// Names the namespace a thread's run belongs to: a process may hold several (tests, a
/// standby), and a run is good only in the one it came from. 0 is no namespace's.
static OWNERS: AtomicUsize = AtomicUsize::new(1);

/// A new namespace's name for its runs.
pub(crate) fn new_owner() -> usize {
    OWNERS.fetch_add(1, Ordering::Relaxed)
}

#[derive(Clone, Copy)]
struct Run {
    owner: usize,
    /// The namespace's epoch when the run was taken: a replay that takes a number back bumps
    /// it, and every run taken before is dropped (the number may be in one of them).
    epoch: u64,
    next: u64,
    end: u64,
}

thread_local! {
    static RUN: Cell<Run> = const {
        Cell::new(Run {
            owner: 0,
            epoch: 0,
            next: 0,
            end: 0,
        })
    };
}

/// One past the last number of the block `ino` is in (`u64::MAX` for the last block).
pub(crate) fn block_end(ino: u64) -> u64 {
    (ino | ((1 << RUN_BITS) - 1)).saturating_add(1)
}

/// The first number of the first block that begins at or after `ino` (`u64::MAX` past the
/// last).
pub(crate) fn block_start_from(ino: u64) -> u64 {
    if ino & ((1 << RUN_BITS) - 1) == 0 {
        ino
    } else {
        block_end(ino)
    }
}

/// The next number of this thread's run in namespace `owner` at `epoch`, if it has one left
/// below `ceiling`.
pub(crate) fn next(owner: usize, epoch: u64, ceiling: u64) -> Option<u64> {
    RUN.with(|run| {
        let r = run.get();
        let good = r.owner == owner && r.epoch == epoch;
        (good && r.next < r.end.min(ceiling)).then(|| {
            run.set(Run {
                next: r.next + 1,
                ..r
            });
            r.next
        })
    })
}

/// Makes `start..end` this thread's run in namespace `owner` at `epoch`, `start` itself
/// handed out by the caller.
pub(crate) fn keep(owner: usize, epoch: u64, start: u64, end: u64) {
    RUN.with(|run| {
        run.set(Run {
            owner,
            epoch,
            next: start + 1,
            end,
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_handed_out_in_order_and_only_in_its_own_namespace_and_epoch() {
        let (a, b) = (new_owner(), new_owner());
        let top = u64::MAX;
        assert_eq!(next(a, 0, top), None, "no run yet");
        keep(a, 0, 70, 73);
        assert_eq!(next(b, 0, top), None, "another namespace's run");
        assert_eq!(next(a, 1, top), None, "a run of an earlier epoch");
        assert_eq!(next(a, 0, 72), Some(71));
        assert_eq!(next(a, 0, 72), None, "at the ceiling");
        keep(a, 0, 70, 73);
        assert_eq!(
            [next(a, 0, top), next(a, 0, top), next(a, 0, top)],
            [Some(71), Some(72), None]
        );
        // A run kept in `b` replaces `a`'s on this thread; other threads have their own.
        keep(a, 0, 5, 8);
        keep(b, 0, 100, 102);
        assert_eq!(next(a, 0, top), None);
        std::thread::spawn(move || assert_eq!(next(b, 0, top), None))
            .join()
            .unwrap();
        assert_eq!(next(b, 0, top), Some(101));
    }

    #[test]
    fn blocks_are_aligned_and_the_last_one_ends_at_the_top() {
        assert_eq!(block_end(0), 64);
        assert_eq!(block_end(63), 64);
        assert_eq!(block_end(64), 128);
        assert_eq!(block_end(100), 128);
        assert_eq!(block_end(u64::MAX - 1), u64::MAX);
        assert_eq!(block_end(u64::MAX - 70), u64::MAX - 63);
        assert_eq!(block_start_from(0), 0);
        assert_eq!(block_start_from(1), 64);
        assert_eq!(block_start_from(64), 64);
        assert_eq!(block_start_from(65), 128);
        assert_eq!(block_start_from(u64::MAX - 1), u64::MAX);
    }
}
