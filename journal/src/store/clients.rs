//! What the journal keeps of its clients apart from their transactions: which clients it
//! knows (those that may hold replies sent before their commit), their sessions' bindings,
//! and their resend slots dropped when a session ends. Written with a commit when one is
//! there to carry them, else on their own ([`Journal::write_client_changes`]); the bindings
//! are read back, and the stale ones deleted, at open. The object collector's forgets of
//! what it deleted from the object store ride the same way.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use rocksdb::WriteBatch;

use super::edits::EditKey;
use super::raw_batch::RawBatch;
use super::{Journal, synced};
use crate::error::{Error, Result};
use crate::resend::ClientSlots;
use crate::schema::{
    CF_META, JournalOp, META_CLIENT_PREFIX, META_SESSION_PREFIX, SECRET_LEN, client_key,
    decode_u64_key, garbage_key, gone_key, layout_key, resend_key, session_key,
};

impl Journal {
    /// Writes client changes alone (`KnowClient`, `ForgetClient`, `DropResend`, `BindSession`),
    /// and the object collector's (`DeleteLayout`, `DeleteGarbage`), synced, when
    /// no transaction is there to carry them: they advance no transno. Other ops are refused.
    pub fn write_client_changes(&self, ops: &[JournalOp]) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        let meta = self.families.meta;
        // Slot deletes apart from the rest: with the edit log they are an edit, as a
        // commit's slot changes are, so that they are applied after those (a delete written
        // straight to `clients` would be undone when a checkpoint applies an earlier put).
        let mut resend = self.changes_batch(64 * ops.len());
        let mut rest = RawBatch::with_capacity(64 * ops.len());
        let mut slots = self.resend_slots.lock().expect("not poisoned");
        for op in ops {
            match op {
                JournalOp::KnowClient { client } => rest.put(meta, client_key(*client), []),
                JournalOp::ForgetClient { client } => rest.delete(meta, client_key(*client)),
                JournalOp::DropResend { client } => {
                    self.drop_resend(&mut resend, &mut rest, &mut slots, *client);
                }
                JournalOp::BindSession { client, secret } => {
                    rest.put(meta, session_key(*client), secret);
                }
                // The collector's: slices gone from the object store.
                JournalOp::DeleteLayout(ino) => {
                    rest.delete(meta, layout_key(*ino));
                    rest.delete(meta, gone_key(*ino));
                }
                JournalOp::DeleteGarbage(slice) => rest.delete(meta, garbage_key(*slice)),
                other => {
                    return Err(Error::Corrupt {
                        what: "client change",
                        detail: format!("not a client change: {other:?}"),
                    });
                }
            }
        }
        drop(slots);
        let (mut batch, edit) = self.as_edit(resend, || {
            let seq = self.client_edits.fetch_add(1, Ordering::Relaxed);
            EditKey::client(self.last_committed(), seq)
        });
        batch.append(&rest);
        if batch.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.db.write_opt(batch.write_batch(), &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        self.hand_over(batch, edit);
        Ok(())
    }

    /// Deletes every slot `client` has, one point delete each (into `slots_batch`, with the
    /// commit's other resend slot changes), and forgets them, with the binding of its
    /// session (into `meta_batch`): the session ended.
    pub(super) fn drop_resend(
        &self,
        slots_batch: &mut RawBatch,
        meta_batch: &mut RawBatch,
        slots: &mut HashMap<u64, ClientSlots>,
        client: u64,
    ) {
        if let Some(known) = slots.remove(&client) {
            for slot in 0..known.written {
                slots_batch.delete(self.families.clients, resend_key(client, slot));
            }
        }
        meta_batch.delete(self.families.meta, session_key(client));
    }

    /// The clients the journal knows: those that may hold replies sent before their commit.
    pub fn known_clients(&self) -> Result<Vec<u64>> {
        let mut known = Vec::new();
        for item in self
            .db
            .prefix_iterator_cf(self.cf(CF_META), META_CLIENT_PREFIX)
        {
            let (key, _) = item?;
            let Some(id) = key.strip_prefix(META_CLIENT_PREFIX) else {
                break; // past the prefix
            };
            known.push(decode_u64_key("known client key", id)?);
        }
        Ok(known)
    }

    /// Forgets every known client, synced, and returns how many there were: for a clean stop
    /// once every transno handed out is durable, when no client can hold a reply that is not
    /// (the next start then opens no recovery window). Resend records stay.
    pub fn forget_known_clients(&self) -> Result<usize> {
        let forget: Vec<JournalOp> = self
            .known_clients()?
            .into_iter()
            .map(|client| JournalOp::ForgetClient { client })
            .collect();
        if !forget.is_empty() {
            self.write_client_changes(&forget)?;
        }
        Ok(forget.len())
    }

    /// The session bindings at open. A binding whose client has neither resend records nor
    /// a known-client key any more (its records were dropped by a build that did not know
    /// bindings, or a crash came between) is deleted by a writable open.
    pub(super) fn sessions(
        &self,
        writable: bool,
        known: &[u64],
        slots: &HashMap<u64, ClientSlots>,
    ) -> Result<Vec<(u64, [u8; SECRET_LEN])>> {
        let meta = self.cf(CF_META);
        let mut kept = Vec::new();
        let mut stale = WriteBatch::default();
        for item in self.db.prefix_iterator_cf(meta, META_SESSION_PREFIX) {
            let (key, value) = item?;
            let Some(id) = key.strip_prefix(META_SESSION_PREFIX) else {
                break; // past the prefix
            };
            let client = decode_u64_key("session key", id)?;
            let secret: [u8; SECRET_LEN] =
                value.as_ref().try_into().map_err(|_| Error::Corrupt {
                    what: "session secret",
                    detail: format!("{} bytes", value.len()),
                })?;
            if slots.contains_key(&client) || known.contains(&client) {
                kept.push((client, secret));
            } else {
                stale.delete_cf(meta, &key);
            }
        }
        if writable && !stale.is_empty() {
            self.db.write_opt(stale, &synced())?;
        }
        Ok(kept)
    }
}
