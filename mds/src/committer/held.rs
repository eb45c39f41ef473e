//! The records the committer has received and not committed yet, by transno: most arrive in
//! order, one past the one before (a partition sends its records in the order it numbered
//! them, and with one partition all of them come so), and those go to the back of a queue;
//! only one that arrives ahead of a missing predecessor (another partition's record overtook
//! it) goes to an ordered map. A commit takes the run contiguous from `last_committed + 1`
//! from both, merged.
//!
//! Held in the map alone, every record cost a B-tree insert and a removal, ~550 instructions
//! a create at 64 x 16 (counted, docs/benchmarks/create-path.md, "Records held in arrival order").

use std::collections::{BTreeMap, VecDeque};

use journal::TxRecord;

#[derive(Default)]
pub(super) struct Held {
    /// Records with consecutive transnos, in order.
    run: VecDeque<TxRecord>,
    /// The others, by transno: none of them is in `run`'s range.
    ahead: BTreeMap<u64, TxRecord>,
}

impl Held {
    /// Holds `record`; `Err` with its transno if one with that transno is held already.
    pub(super) fn insert(&mut self, record: TxRecord) -> Result<(), u64> {
        let transno = record.transno;
        if self.ahead.contains_key(&transno) || self.in_run(transno) {
            return Err(transno);
        }
        // A run may start anywhere: `ahead` holds none of its transnos (checked above, and
        // again for each record the run grows by).
        match self.run.back() {
            Some(last) if last.transno + 1 != transno => {
                self.ahead.insert(transno, record);
            }
            _ => self.run.push_back(record),
        }
        Ok(())
    }

    fn in_run(&self, transno: u64) -> bool {
        match (self.run.front(), self.run.back()) {
            (Some(first), Some(last)) => (first.transno..=last.transno).contains(&transno),
            _ => false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.run.len() + self.ahead.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.ahead.is_empty()
    }

    /// Whether the record with transno `next` is held.
    pub(super) fn has(&self, next: u64) -> bool {
        self.run.front().is_some_and(|r| r.transno == next)
            || self
                .ahead
                .first_key_value()
                .is_some_and(|(&t, _)| t == next)
    }

    /// Takes the records contiguous from `next`, `max` at most, in transno order.
    pub(super) fn take_from(&mut self, mut next: u64, max: usize) -> Vec<TxRecord> {
        let mut batch = Vec::with_capacity(self.len().min(max));
        while batch.len() < max {
            let record = if self.run.front().is_some_and(|r| r.transno == next) {
                self.run.pop_front()
            } else {
                match self.ahead.first_entry() {
                    Some(entry) if *entry.key() == next => Some(entry.remove()),
                    _ => None,
                }
            };
            let Some(record) = record else { break };
            batch.push(record);
            next += 1;
        }
        batch
    }

    pub(super) fn clear(&mut self) {
        self.run.clear();
        self.ahead.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(transno: u64) -> TxRecord {
        TxRecord {
            transno,
            ops: Vec::new(),
        }
    }

    #[test]
    fn records_in_order_stay_out_of_the_map() {
        let mut held = Held::default();
        for t in 1..=5 {
            held.insert(record(t)).unwrap();
        }
        assert_eq!((held.run.len(), held.ahead.len()), (5, 0));
        let batch = held.take_from(1, 3);
        assert_eq!(
            batch.iter().map(|r| r.transno).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(held.has(4) && !held.has(5));
        assert_eq!(held.insert(record(5)), Err(5));
    }

    #[test]
    fn a_record_overtaken_joins_the_run_in_order() {
        let mut held = Held::default();
        // 3 and 4 overtook 2 (another partition's).
        for t in [1, 3, 4] {
            held.insert(record(t)).unwrap();
        }
        assert_eq!(held.take_from(1, 10).len(), 1, "2 is missing: only 1");
        assert!(!held.has(2));
        held.insert(record(2)).unwrap();
        held.insert(record(5)).unwrap();
        let batch = held.take_from(2, 10);
        assert_eq!(
            batch.iter().map(|r| r.transno).collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
        assert!(held.is_empty());
    }

    proptest! {
        /// Against an ordered set of the same transnos: the same duplicates refused, the same
        /// lengths, the same runs taken, whatever the order of arrival and of the takes.
        #[test]
        fn held_is_an_ordered_map_of_records(
            arrivals in proptest::collection::vec((1u64..40, 0usize..4, any::<bool>()), 0..120),
        ) {
            let mut held = Held::default();
            let mut model = std::collections::BTreeSet::new();
            let mut next = 1;
            for (transno, max, take) in arrivals {
                if take {
                    let batch = held.take_from(next, max);
                    let mut expected = Vec::new();
                    while expected.len() < max && model.remove(&next) {
                        expected.push(next);
                        next += 1;
                    }
                    let got: Vec<u64> = batch.iter().map(|r| r.transno).collect();
                    prop_assert_eq!(got, expected);
                } else if transno >= next {
                    let fresh = model.insert(transno);
                    prop_assert_eq!(held.insert(record(transno)).is_ok(), fresh);
                }
                prop_assert_eq!(held.len(), model.len());
                prop_assert_eq!(held.is_empty(), model.is_empty());
                prop_assert_eq!(held.has(next), model.contains(&next));
            }
        }
    }
}
