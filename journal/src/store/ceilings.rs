//! The ceilings: how far past what is durable the server may hand out transnos and inode
//! numbers ([`Ceilings`]). Each is on disk before the server may use it, so after a crash
//! they bound every transno and inode number any client may have been told of. Read at open,
//! raised by every commit (in its batch) or alone, and settled to what was used at a clean
//! stop.

use std::sync::atomic::Ordering;

use super::raw_batch::RawBatch;
use super::{Ceilings, Journal, synced};
use crate::error::{Error, Result};
use crate::schema::{CF_META, META_INO_CEILING, META_TRANSNO_CEILING, decode_meta_u64};

impl Journal {
    /// The ceilings at open. A store written by a build without them (or last by one) has
    /// them missing or behind: then they are taken a lease above what is durable, which
    /// bounds what such a build could hand out by its own limit on uncommitted work.
    pub(super) fn stored_ceilings(&self, last_committed: u64, next_ino: u64) -> Result<Ceilings> {
        let meta = self.cf(CF_META);
        let read = |key: &[u8], what| -> Result<Option<u64>> {
            self.db
                .get_cf(meta, key)?
                .map(|v| decode_meta_u64(what, &v))
                .transpose()
        };
        let leases = self.options.leases;
        let transno = match read(META_TRANSNO_CEILING, "transno_ceiling")? {
            Some(c) => c.max(last_committed),
            None => last_committed.saturating_add(leases.transnos),
        };
        let ino = match read(META_INO_CEILING, "ino_ceiling")? {
            Some(c) => c.max(next_ino),
            None => next_ino.saturating_add(leases.inos),
        };
        Ok(Ceilings { transno, ino })
    }

    /// The ceilings durable now.
    pub fn ceilings(&self) -> Ceilings {
        Ceilings {
            transno: self.transno_ceiling.load(Ordering::Acquire),
            ino: self.ino_ceiling.load(Ordering::Acquire),
        }
    }

    /// The server's inode counter (the next number it would hand out, burned ones
    /// included): the next write keeps the ino ceiling a lease above it.
    pub fn note_inode_counter(&self, counter: u64) {
        self.inode_counter.fetch_max(counter, Ordering::AcqRel);
    }

    /// The ceilings a write made now should leave, never below the durable ones.
    pub(super) fn wanted_ceilings(&self, last_transno: u64, next_ino: u64) -> Ceilings {
        let leases = self.options.leases;
        let durable = self.ceilings();
        let counter = self.inode_counter.load(Ordering::Acquire).max(next_ino);
        Ceilings {
            // Never u64::MAX: one past the ceiling must still be a number.
            transno: durable
                .transno
                .max(last_transno.saturating_add(leases.transnos))
                .min(u64::MAX - 1),
            ino: durable
                .ino
                .max(counter.saturating_add(leases.inos))
                .min(u64::MAX - 1),
        }
    }

    /// Puts `ceilings` into `batch`: durable with it.
    pub(super) fn put_ceilings(&self, batch: &mut RawBatch, ceilings: Ceilings) {
        let meta = self.families.meta;
        batch.put(meta, META_TRANSNO_CEILING, ceilings.transno.to_le_bytes());
        batch.put(meta, META_INO_CEILING, ceilings.ino.to_le_bytes());
    }

    /// Makes `ceilings`, durable now, the ones the server may hand out up to.
    pub(super) fn publish_ceilings(&self, ceilings: Ceilings) {
        self.transno_ceiling
            .fetch_max(ceilings.transno, Ordering::AcqRel);
        self.ino_ceiling.fetch_max(ceilings.ino, Ordering::AcqRel);
    }

    /// Raises the ceilings alone, synced, when no commit is there to carry them (creates that
    /// fail burn inode numbers without committing anything). Returns the new ones.
    pub fn raise_ceilings(&self) -> Result<Ceilings> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        let ceilings =
            self.wanted_ceilings(self.last_committed(), self.next_ino.load(Ordering::Relaxed));
        let mut batch = RawBatch::with_capacity(64);
        self.put_ceilings(&mut batch, ceilings);
        if let Err(e) = self.db.write_opt(batch.into_write_batch(), &synced()) {
            self.failed.store(true, Ordering::Release);
            return Err(e.into());
        }
        self.publish_ceilings(ceilings);
        Ok(ceilings)
    }

    /// Writes ceilings that cover exactly what was handed out, `last_transno` and inode
    /// numbers below `inode_counter`: for a clean stop once everything is durable, so that
    /// the next start wastes no inode numbers skipping a lease nobody used.
    pub fn settle_ceilings(&self, last_transno: u64, inode_counter: u64) -> Result<()> {
        if self.is_failed() {
            return Err(Error::Failed);
        }
        let ceilings = Ceilings {
            transno: last_transno.max(self.last_committed()),
            ino: inode_counter.max(self.next_ino.load(Ordering::Relaxed)),
        };
        let mut batch = RawBatch::with_capacity(64);
        self.put_ceilings(&mut batch, ceilings);
        self.db.write_opt(batch.into_write_batch(), &synced())?;
        self.transno_ceiling
            .store(ceilings.transno, Ordering::Release);
        self.ino_ceiling.store(ceilings.ino, Ordering::Release);
        Ok(())
    }
}
