//! Journal op lists the committer hands back, emptied, once their commit is written, for the
//! partitions to fill again ([`OpLists`]).
//!
//! Every mutation's record carries its ops in a `Vec` that a partition allocates and the
//! committer drops: glibc frees it on another thread than the one that made it, and the next
//! allocation on the partition then misses its thread's cache — ~330 instructions of a
//! create's in `malloc` and `free` (callgrind at 64 x 16). A list that comes back keeps its
//! buffer, so under load the same few thousand buffers go round; a list that does not fit
//! the spares (or is too large to keep) is freed as before, and a partition that finds none
//! allocates one. Counted, taking and giving back cost most of what the allocator did: −57
//! instructions a create, but −5 D1 and −4 LL misses (docs/benchmarks/create-path.md, "Latencies counted per partition, names inline, op lists reused").

use journal::{JournalOp, TxRecord};
use parking_lot::Mutex;

/// Journal ops dispatch adds to a mutation's record: its resend record. Reserved when
/// the record is built, so adding it never reallocates the ops.
pub(super) const RESEND_OPS: usize = 1;

/// Spare lists kept at most: more than the mutations in flight at 64 x 16 (1,024), so a
/// commit's worth comes back without overflowing. Each holds at most [`KEEP_UP_TO`] ops
/// (128 bytes each): at most 4 MiB kept.
const SPARES: usize = 4096;

/// Lists that grew past this many ops (a rename's, a large batch of xattrs) are freed rather
/// than kept: a spare is sized for the common mutation, a create's four.
const KEEP_UP_TO: usize = 8;

/// The spares, shared by the partitions (which take one at a time) and the committer (which
/// gives a commit's back at once). A plain lock: a take holds it for a pop, a give-back for
/// one append per record (the ops were dropped before), once a commit. (A bounded
/// crossbeam channel, one send and one receive a list, cost more than the allocation it
/// saved: 228 instructions a receive, counted.)
#[derive(Default)]
pub(crate) struct OpLists {
    spares: Mutex<Vec<Vec<JournalOp>>>,
}

impl OpLists {
    /// An empty list with room for `n` ops: a spare if there is one.
    pub(crate) fn take(&self, n: usize) -> Vec<JournalOp> {
        let spare = self.spares.lock().pop();
        match spare {
            Some(mut spare) => {
                spare.reserve(n);
                spare
            }
            None => Vec::with_capacity(n),
        }
    }

    /// Keeps the op lists of `records` for later [`take`](Self::take)s, emptied (their ops
    /// are dropped here, before the lock); frees those past the spares' room and those larger
    /// than a spare need be.
    pub(crate) fn give_back(&self, mut records: Vec<TxRecord>) {
        for record in &mut records {
            record.ops.clear();
        }
        let mut kept = records
            .into_iter()
            .map(|record| record.ops)
            .filter(|ops| ops.capacity() != 0 && ops.capacity() <= KEEP_UP_TO);
        let mut spares = self.spares.lock();
        let room = SPARES.saturating_sub(spares.len());
        spares.extend(kept.by_ref().take(room));
        drop(spares);
        // What did not fit is freed here, outside the lock.
        drop(kept);
    }

    /// Spare lists kept now.
    #[cfg(test)]
    fn spares(&self) -> usize {
        self.spares.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ops: Vec<JournalOp>) -> TxRecord {
        TxRecord { transno: 1, ops }
    }

    #[test]
    fn a_list_given_back_is_taken_again_empty_with_its_buffer() {
        let lists = OpLists::default();
        let mut ops = lists.take(4);
        ops.push(JournalOp::DeleteInode(7));
        let buffer = ops.as_ptr();
        lists.give_back(vec![record(ops)]);
        assert_eq!(lists.spares(), 1);
        let again = lists.take(4);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), buffer, "the same buffer, not a new one");
        assert!(again.capacity() >= 4);
        assert_eq!(lists.spares(), 0);
    }

    #[test]
    fn a_spare_too_small_grows_to_what_is_asked() {
        let lists = OpLists::default();
        lists.give_back(vec![record(Vec::with_capacity(2))]);
        assert!(lists.take(6).capacity() >= 6);
    }

    #[test]
    fn large_lists_and_lists_past_the_spares_are_freed() {
        let lists = OpLists::default();
        lists.give_back(vec![
            record(Vec::with_capacity(KEEP_UP_TO + 1)),
            record(Vec::new()),
        ]);
        assert_eq!(lists.spares(), 0);
        lists.give_back(
            (0..SPARES - 10)
                .map(|_| record(Vec::with_capacity(4)))
                .collect(),
        );
        lists.give_back((0..20).map(|_| record(Vec::with_capacity(4))).collect());
        assert_eq!(lists.spares(), SPARES);
        // With none left a list is made.
        let lists = OpLists::default();
        assert!(lists.take(3).capacity() >= 3);
    }
}
