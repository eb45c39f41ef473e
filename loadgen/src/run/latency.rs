//! The run's latency histograms: one set (a histogram per kind) per thread that records, not
//! per lane, merged when the run ends.
//!
//! Why per thread: at 64 × 16 a histogram per lane (1 µs to an hour at 3 significant figures,
//! ~180 KB each) made 1024 of them, ~180 MB touched at random, one cache line per request
//! and a page fault per first touch: hdrhistogram's record was 11% of loadgen's CPU and
//! zeroing new pages another 3%. A runtime has a few worker threads; their histograms stay in
//! cache, and each is locked only by its own thread (the lock is there for the merge).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::report;
use crate::workload::Kind;

/// Latency by kind, in µs.
pub(super) type PerKind = BTreeMap<Kind, Histogram<u64>>;

/// Tells one run's histograms from another's on a thread that outlives a run.
static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's histograms, and the run they belong to.
    static MINE: RefCell<Option<(u64, Arc<Mutex<PerKind>>)>> = const { RefCell::new(None) };
}

pub(super) struct Latencies {
    run: u64,
    /// Every thread's set, registered at its first record.
    shards: Mutex<Vec<Arc<Mutex<PerKind>>>>,
}

impl Latencies {
    pub(super) fn new() -> Latencies {
        Latencies {
            run: NEXT_RUN.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(Vec::new()),
        }
    }

    /// Records one request of `kind` that took `micros`, into the calling thread's set.
    pub(super) fn record(&self, kind: Kind, micros: u64) {
        MINE.with_borrow_mut(|mine| {
            if mine.as_ref().is_none_or(|(run, _)| *run != self.run) {
                let shard = Arc::new(Mutex::new(PerKind::new()));
                self.shards.lock().unwrap().push(shard.clone());
                *mine = Some((self.run, shard));
            }
            let (_, shard) = mine.as_ref().expect("set just above");
            let _ = shard
                .lock()
                .unwrap()
                .entry(kind)
                .or_insert_with(report::new_histogram)
                .record(micros);
        });
    }

    /// Every thread's histograms merged, by kind.
    pub(super) fn merged(&self) -> anyhow::Result<PerKind> {
        let mut all = PerKind::new();
        for shard in self.shards.lock().unwrap().iter() {
            for (kind, h) in shard.lock().unwrap().iter() {
                all.entry(*kind)
                    .or_insert_with(report::new_histogram)
                    .add(h)
                    .context("merging latency histograms")?;
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_threads_records_are_merged_by_kind_and_runs_stay_apart() {
        let run = Arc::new(Latencies::new());
        let other = Latencies::new();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let run = run.clone();
                std::thread::spawn(move || {
                    for i in 1..=100 {
                        run.record(Kind::Create, t * 1000 + i);
                    }
                    run.record(Kind::Stat, 7);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // This thread records for another run, then for the first: neither sees the other's.
        other.record(Kind::Create, 5);
        run.record(Kind::Stat, 9);
        let merged = run.merged().unwrap();
        assert_eq!(merged[&Kind::Create].len(), 400);
        let creates = &merged[&Kind::Create];
        assert_eq!(creates.max(), creates.highest_equivalent(3100));
        assert_eq!(merged[&Kind::Stat].len(), 5);
        assert_eq!(other.merged().unwrap()[&Kind::Create].len(), 1);
        assert_eq!(run.shards.lock().unwrap().len(), 5, "one set per thread");
    }
}
