//! Resend records in fixed slots: which slot of a client's a commit writes, and what a store
//! holds at open.
//!
//! Each commit writes **one** value per client with records in it (all of that client's
//! records of the batch, with its trim watermark) into a slot whose earlier records the
//! client has every reply of, or a new slot at the end when none is free. A slot is
//! overwritten in place, never range-deleted: range tombstones pile up in RocksDB and slow
//! every read and compaction over them. A client's slots are only point-deleted when its
//! session ends ([`JournalOp::DropResend`](crate::JournalOp::DropResend)). The number of
//! slots a client holds is the number of commits its watermark lags behind, which the
//! client's window of requests in flight bounds.
//!
//! Only the committer calls `commit`, so this state has a single user; it sits behind a
//! mutex because `Journal` is shared.

use std::collections::HashMap;

use crate::schema::{ResendRecord, ResendSlot};

/// The slots of one client, as the journal knows them.
#[derive(Debug, Default)]
pub(crate) struct ClientSlots {
    /// The highest watermark the client has sent: records at or below it are not needed.
    pub acked_xid: u64,
    /// Per slot, the highest xid stored in it; a slot is free when that is at or below the
    /// watermark (a slot is never empty once written).
    pub highest: Vec<u64>,
}

impl ClientSlots {
    /// Raises the watermark (it never goes down: requests of one client may reach the server
    /// out of order across its connections).
    pub fn ack(&mut self, acked_xid: u64) {
        self.acked_xid = self.acked_xid.max(acked_xid);
    }

    /// The slot to write records up to `highest_xid` into: the first one whose records the
    /// client has all replies of, or a new one.
    pub fn take(&mut self, highest_xid: u64) -> u32 {
        let slot = match self.highest.iter().position(|&h| h <= self.acked_xid) {
            Some(free) => free,
            None => {
                self.highest.push(0);
                self.highest.len() - 1
            }
        };
        self.highest[slot] = highest_xid;
        u32::try_from(slot).expect("a client's slots are bounded by its requests in flight")
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
        let slot = slot as usize;
        if known.highest.len() <= slot {
            known.highest.resize(slot + 1, 0);
        }
        known.highest[slot] = value.records.iter().map(|r| r.xid).max().unwrap_or(0);
        records.entry(client).or_default().extend(value.records);
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
            reply: vec![xid as u8],
        }
    }

    #[test]
    fn a_slot_is_reused_once_the_client_has_every_reply_in_it() {
        let mut c = ClientSlots::default();
        assert_eq!(c.take(4), 0);
        assert_eq!(c.take(8), 1, "xids 1..=4 not acked yet: a new slot");
        c.ack(4);
        assert_eq!(c.take(12), 0, "slot 0 held xids up to 4, all acked");
        c.ack(3); // late and lower: ignored
        assert_eq!(c.acked_xid, 4);
        assert_eq!(c.take(16), 2);
        c.ack(16);
        assert_eq!(c.take(20), 0);
        assert_eq!(c.take(24), 1);
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
        assert_eq!(state[&7].highest, vec![4, 0, 6]);
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
        assert_eq!(seven.take(7), 1);
    }
}
