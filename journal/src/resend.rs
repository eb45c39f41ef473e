//! Resend records in fixed slots: which slot of a client's a commit writes, and what a store
//! holds at open.
//!
//! Each commit writes **one** value per client with records in it (all of that client's
//! records of the batch, with its trim watermark) into a slot whose earlier records the
//! client has every reply of, or a new slot at the end when none is free. A slot is
//! overwritten in place, never range-deleted: range tombstones pile up in RocksDB and slow
//! every read and compaction over them. A client's slots are only point-deleted when its
//! session ends ([`JournalOp::DropResend`](crate::JournalOp::DropResend)). The number of
//! slots a client uses is at most the number of its records the journal keeps (each slot in
//! use holds at least one), which the server's cap on a session's records bounds.
//!
//! Only the committer calls `commit`, so this state has a single user; it sits behind a
//! mutex because `Journal` is shared.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::schema::{ResendRecord, ResendSlot};

/// Most slots one client may have on disk. A slot is in use only while it holds a record the
/// client may still resend, so the server's cap on a session's resend records (far below
/// this) bounds it; reaching it means that cap failed, and the commit fails rather than write
/// a slot number that does not fit its key.
pub(crate) const MAX_SLOTS_PER_CLIENT: u32 = 1 << 24;

/// The slots of one client, as the journal knows them. Finding a slot to write costs
/// O(log slots) however far the client's watermark lags: the committer's work per commit
/// must not grow with one client's backlog.
#[derive(Debug, Default)]
pub(crate) struct ClientSlots {
    /// The highest watermark the client has sent: records at or below it are not needed.
    pub acked_xid: u64,
    /// Slots holding records, by the highest xid in each: a slot is free to overwrite once
    /// the watermark reaches that xid.
    occupied: BinaryHeap<Reverse<(u64, u32)>>,
    /// Slots whose every record the client has the reply of.
    free: Vec<u32>,
    /// Slots ever written (numbered from 0): what dropping the client deletes.
    pub written: u32,
}

impl ClientSlots {
    /// Raises the watermark (it never goes down: requests of one client may reach the server
    /// out of order across its connections).
    pub fn ack(&mut self, acked_xid: u64) {
        self.acked_xid = self.acked_xid.max(acked_xid);
    }

    /// The slot to write records up to `highest_xid` into: one whose records the client has
    /// all replies of, or a new one; `None` past [`MAX_SLOTS_PER_CLIENT`].
    pub fn take(&mut self, highest_xid: u64) -> Option<u32> {
        while let Some(&Reverse((highest, slot))) = self.occupied.peek()
            && highest <= self.acked_xid
        {
            self.occupied.pop();
            self.free.push(slot);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.written < MAX_SLOTS_PER_CLIENT => {
                self.written += 1;
                self.written - 1
            }
            None => return None,
        };
        self.occupied.push(Reverse((highest_xid, slot)));
        Some(slot)
    }

    /// Slots holding a record the client may still resend.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.occupied
            .iter()
            .filter(|Reverse((h, _))| *h > self.acked_xid)
            .count()
    }

    /// A slot found at open, holding records up to `highest` (0: none).
    fn found(&mut self, slot: u32, highest: u64) {
        self.written = self.written.max(slot.saturating_add(1));
        self.occupied.push(Reverse((highest, slot)));
    }

    /// After every slot is found: the numbers below `written` that no slot used are free.
    fn finish_recovery(&mut self) {
        let mut used = vec![false; self.written as usize];
        for Reverse((_, slot)) in &self.occupied {
            used[*slot as usize] = true;
        }
        self.free = (0..self.written).filter(|&s| !used[s as usize]).collect();
        self.free.reverse();
    }
}

/// A client's resend records found at open: the ones above its watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientResend {
    pub client: u64,
    pub acked_xid: u64,
    /// In xid order.
    pub records: Vec<ResendRecord>,
}

/// Rebuilds the slot state and the live records from every slot in the store, in key order.
pub(crate) fn recover(
    slots: impl IntoIterator<Item = (u64, u32, ResendSlot)>,
) -> (HashMap<u64, ClientSlots>, Vec<ClientResend>) {
    let mut state: HashMap<u64, ClientSlots> = HashMap::new();
    let mut records: HashMap<u64, Vec<ResendRecord>> = HashMap::new();
    for (client, slot, value) in slots {
        let known = state.entry(client).or_default();
        known.ack(value.acked_xid);
        known.found(slot, value.records.iter().map(|r| r.xid).max().unwrap_or(0));
        records.entry(client).or_default().extend(value.records);
    }
    for known in state.values_mut() {
        known.finish_recovery();
    }
    let mut live: Vec<ClientResend> = records
        .into_iter()
        .map(|(client, mut records)| {
            let acked_xid = state[&client].acked_xid;
            records.retain(|r| r.xid > acked_xid);
            records.sort_by_key(|r| r.xid);
            ClientResend {
                client,
                acked_xid,
                records,
            }
        })
        .filter(|c| !c.records.is_empty())
        .collect();
    live.sort_by_key(|c| c.client);
    (state, live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(xid: u64) -> ResendRecord {
        ResendRecord {
            xid,
            transno: xid * 10,
            reply: vec![xid as u8].into(),
        }
    }

    #[test]
    fn a_slot_is_reused_once_the_client_has_every_reply_in_it() {
        let mut c = ClientSlots::default();
        assert_eq!(c.take(4), Some(0));
        assert_eq!(c.take(8), Some(1), "xids 1..=4 not acked yet: a new slot");
        c.ack(4);
        assert_eq!(c.take(12), Some(0), "slot 0 held xids up to 4, all acked");
        c.ack(3); // late and lower: ignored
        assert_eq!(c.acked_xid, 4);
        assert_eq!(c.take(16), Some(2));
        c.ack(16);
        let reused = [
            c.take(20).unwrap(),
            c.take(24).unwrap(),
            c.take(28).unwrap(),
        ];
        let mut sorted = reused;
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [0, 1, 2],
            "every slot freed by the watermark, none new"
        );
        assert_eq!(c.written, 3);
    }

    /// A client whose watermark never moves takes a slot per commit; the cost of finding the
    /// next slot must stay logarithmic in that backlog (regression: a linear scan of every
    /// slot, every commit), and a client past the slot bound is refused, not a panic.
    #[test]
    fn taking_a_slot_stays_cheap_however_far_the_watermark_lags() {
        let mut c = ClientSlots::default();
        for xid in 1..=100_000u64 {
            assert_eq!(c.take(xid), Some(xid as u32 - 1));
        }
        assert_eq!(c.in_use(), 100_000);
        c.ack(99_990);
        assert_eq!(c.in_use(), 10);
        assert!(c.take(200_000).unwrap() < 99_991);
        let mut full = ClientSlots {
            written: MAX_SLOTS_PER_CLIENT,
            ..Default::default()
        };
        assert_eq!(full.take(1), None);
    }

    #[test]
    fn recovery_keeps_only_records_above_the_highest_watermark() {
        let slots = vec![
            (
                7,
                0,
                ResendSlot {
                    acked_xid: 2,
                    records: vec![record(3), record(4)],
                },
            ),
            (
                7,
                2,
                ResendSlot {
                    acked_xid: 3,
                    records: vec![record(6), record(5)],
                },
            ),
            (
                9,
                0,
                ResendSlot {
                    acked_xid: 1,
                    records: vec![record(1)],
                },
            ),
        ];
        let (state, live) = recover(slots);
        assert_eq!(state[&7].acked_xid, 3);
        assert_eq!(state[&7].written, 3);
        assert_eq!(
            live,
            vec![ClientResend {
                client: 7,
                acked_xid: 3,
                records: vec![record(4), record(5), record(6)],
            }],
            "client 9's only record is acked; 7's xid 3 too"
        );
        // Slot 1 never written, so free; slot 0 frees once xid 4 is acked.
        let mut state = state;
        let seven = state.get_mut(&7).unwrap();
        assert_eq!(seven.take(7), Some(1));
        seven.ack(4);
        assert_eq!(seven.take(8), Some(0));
        assert_eq!(seven.take(9), Some(3), "slot 2 still holds xid 6");
    }
}
