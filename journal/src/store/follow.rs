//! Following a store another process owns, for a warm standby: a RocksDB secondary instance
//! opened on the owner's store (`Journal::open_follower`) reads what is committed, and
//! [`Journal::follow`] reads each write batch the owner committed since the last look, from
//! the owner's write-ahead log (RocksDB's `GetUpdatesSince`), as the [`Change`]s a namespace
//! held in memory needs: inodes, entries, extended attributes, orphans and `last_committed`.
//! Everything else a batch writes (resend slots, sessions, file data, the ceilings) the
//! standby reads at its takeover from the store it opens then, as any start does.
//!
//! This is HDFS's standby NameNode tailing the edit log, with RocksDB's log as the edits: the
//! owner writes nothing more for it. What a follower cannot read it says, and its caller
//! loads the namespace again rather than guess: a batch whose log file is gone already (the
//! owner flushed and deleted it before the follower looked: [`Error::FollowGap`]; a
//! cluster's store archives retired log files for a minute, `Journal::open`), or one
//! with a range deletion, which RocksDB's C API stops iterating at ([`Error::FollowPartial`];
//! only a truncate of a file's data more than `POINT_DELETES_MAX` blocks long writes one).

use std::path::Path;

use rocksdb::{DB, WriteBatchIteratorCf};

use super::{Journal, JournalOptions, Recovered};
use crate::error::{Error, Result};
use crate::options::{Tuning, block_cache, cf_descriptors, db_options};
use crate::schema::{
    ALL_CFS, CF_DENTRIES, CF_EDITS, CF_INODES, CF_META, CF_ORPHANS, CF_XATTRS, Dentry, Inode,
    META_EDIT_LOG, META_LAST_COMMITTED, SCHEMA_VERSION, decode, decode_dentry, decode_dentry_key,
    decode_meta_u64, decode_named_key, decode_u64_key, embedded_image,
};

/// One change a committed batch made to what a namespace holds in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Inode(Inode),
    InodeGone(u64),
    Dentry {
        parent: u64,
        name: String,
        entry: Dentry,
    },
    DentryGone {
        parent: u64,
        name: String,
    },
    Xattr {
        ino: u64,
        name: String,
        value: Vec<u8>,
    },
    XattrGone {
        ino: u64,
        name: String,
    },
    /// A file with no name left, held by these clients' handles.
    Orphan {
        ino: u64,
        owners: Vec<u64>,
    },
    OrphanGone(u64),
    /// Every transno up to this one is durable: the batch's commit.
    LastCommitted(u64),
}

/// The families a follower reads, by the numbers RocksDB gives them in its log.
#[derive(Clone, Copy, Debug)]
struct FamilyIds {
    edits: u32,
    inodes: u32,
    dentries: u32,
    meta: u32,
    xattrs: u32,
    orphans: u32,
}

impl Journal {
    /// Opens the store at `primary`, which another process owns and writes, as a RocksDB
    /// secondary instance keeping its own files in `own` (created if needed): it reads the
    /// store as the owner had committed it, and [`Journal::follow`] brings it up to date. A
    /// store of another schema version than this build's is refused (its owner upgrades it
    /// at its own open; follow it after that).
    pub fn open_follower(primary: &Path, own: &Path) -> Result<(Journal, Recovered)> {
        if !primary.join("CURRENT").is_file() {
            return Err(Error::NoStore {
                path: primary.display().to_string(),
            });
        }
        std::fs::create_dir_all(own).map_err(|e| Error::Corrupt {
            what: "follower directory",
            detail: format!("{}: {e}", own.display()),
        })?;
        let tuning = Tuning::default();
        let mut opts = db_options(&tuning);
        opts.create_if_missing(false);
        // A secondary keeps every table file it knows open: the owner may delete them.
        opts.set_max_open_files(-1);
        let cache = block_cache();
        let present = DB::list_cf(&opts, primary)?;
        // A store of this schema has every family; one without all of them is a new store
        // its owner is still creating (its families come one by one), and a journal opened
        // on part of them would find a family missing at its first read.
        if let Some(missing) = ALL_CFS.iter().find(|cf| !present.iter().any(|p| p == *cf)) {
            return Err(Error::StoreIncomplete {
                path: primary.display().to_string(),
                missing,
            });
        }
        let families = cf_descriptors(&cache, &tuning)
            .into_iter()
            .filter(|d| present.iter().any(|p| p == d.name()));
        let db = DB::open_cf_descriptors_as_secondary(&opts, primary, own, families)?;
        let (journal, recovered) =
            Self::finish_open(db, opts, primary, JournalOptions::default(), false)?;
        journal.refuse_edit_log()?;
        if recovered.schema_version != SCHEMA_VERSION || journal.family_ids().is_none() {
            return Err(Error::SchemaVersion {
                path: primary.display().to_string(),
                found: recovered.schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        Ok((journal, recovered))
    }

    /// The sequence number of the last write the store (a follower: as last caught up) holds.
    /// A follower that has read its store up to here reads on from the next one.
    pub fn sequence(&self) -> u64 {
        self.db.latest_sequence_number()
    }

    /// A follower: catches up with what the owner has written since the last call, then calls
    /// `f` with the changes of each batch after sequence `*seq`, one call per batch, in
    /// commit order, and moves `*seq` past each batch `f` had. A batch is given whole or not
    /// at all. Returns the batches read. Within a batch the changes come as RocksDB has them:
    /// the commit writes entries, attributes and orphans in the order of its records, then
    /// each inode's last image (`Journal::commit`), so an entry may come before the image of
    /// the directory it is in. After [`Error::FollowGap`] or [`Error::FollowPartial`], what was
    /// built from the batches cannot be brought up to date from the log any more and must be
    /// loaded again.
    pub fn follow(&self, seq: &mut u64, mut f: impl FnMut(Vec<Change>)) -> Result<u64> {
        self.db.try_catch_up_with_primary()?;
        self.refuse_edit_log()?;
        if self.db.latest_sequence_number() <= *seq {
            return Ok(0);
        }
        let ids = self.family_ids().expect("checked at open");
        let mut batches = 0;
        // The crate's iterator starts after the batch that holds the sequence it is given.
        for item in self.db.get_updates_since(*seq)? {
            let (first, batch) = item?;
            let count = batch.len() as u64;
            let last = first + count.max(1) - 1;
            if last <= *seq {
                continue; // read already
            }
            if first > *seq + 1 {
                return Err(Error::FollowGap {
                    wanted: *seq + 1,
                    found: first,
                });
            }
            let mut reader = BatchReader {
                ids,
                path: self.path.display().to_string(),
                changes: Vec::with_capacity(batch.len()),
                seen: 0,
                error: None,
            };
            batch.iterate_cf(&mut reader);
            if let Some(e) = reader.error {
                return Err(e);
            }
            if (reader.seen as u64) < count {
                return Err(Error::FollowPartial { sequence: first });
            }
            f(reader.changes);
            *seq = last;
            batches += 1;
        }
        // The log ends before what the store holds: the batches between are in a log file
        // that is gone, and no later batch came to show the gap.
        let latest = self.db.latest_sequence_number();
        if *seq < latest {
            return Err(Error::FollowGap {
                wanted: *seq + 1,
                found: latest + 1,
            });
        }
        Ok(batches)
    }

    /// A store whose owner writes an edit log cannot be followed (`Error::FollowEditLog`).
    fn refuse_edit_log(&self) -> Result<()> {
        if self.db.get_cf(self.cf(CF_META), META_EDIT_LOG)?.is_some() {
            return Err(Error::FollowEditLog {
                path: self.path.display().to_string(),
            });
        }
        Ok(())
    }

    /// The numbers RocksDB gave the families a follower reads (None if one is missing).
    fn family_ids(&self) -> Option<FamilyIds> {
        let id = |name| super::raw_batch::family_id(&self.db, name);
        Some(FamilyIds {
            edits: id(CF_EDITS)?,
            inodes: id(CF_INODES)?,
            dentries: id(CF_DENTRIES)?,
            meta: id(CF_META)?,
            xattrs: id(CF_XATTRS)?,
            orphans: id(CF_ORPHANS)?,
        })
    }
}

/// Turns one batch's puts and deletes into [`Change`]s, counting every entry it is given.
struct BatchReader {
    ids: FamilyIds,
    /// The owner's store, for errors.
    path: String,
    changes: Vec<Change>,
    seen: usize,
    /// The first entry that did not decode: the batch is not applied past it.
    error: Option<Error>,
}

impl BatchReader {
    fn put(&mut self, cf: u32, key: &[u8], value: &[u8]) -> Result<Option<Change>> {
        let ids = self.ids;
        if cf == ids.edits {
            return Err(Error::FollowEditLog {
                path: self.path.clone(),
            });
        }
        Ok(Some(if cf == ids.inodes {
            let inode: Inode = crate::schema::decode_inode("inode", value)?;
            if decode_u64_key("inode key", key)? != inode.ino {
                return Err(Error::Corrupt {
                    what: "inode",
                    detail: format!("a key {} holds inode {}", hex(key), inode.ino),
                });
            }
            Change::Inode(inode)
        } else if cf == ids.dentries {
            let (parent, name, entry) = decode_dentry(key, value, false)?;
            // A new inode whose image is in its entry: the inode before the entry naming it.
            if let Some(image) = embedded_image(value)? {
                self.changes.push(Change::Inode(image));
            }
            Change::Dentry {
                parent,
                name,
                entry,
            }
        } else if cf == ids.xattrs {
            let (ino, name) = decode_named_key("extended attribute key", key)?;
            Change::Xattr {
                ino,
                name,
                value: value.to_vec(),
            }
        } else if cf == ids.orphans {
            Change::Orphan {
                ino: decode_u64_key("orphan key", key)?,
                owners: decode("orphan", value)?,
            }
        } else if cf == ids.meta && key == META_LAST_COMMITTED {
            Change::LastCommitted(decode_meta_u64("last_committed", value)?)
        } else {
            return Ok(None);
        }))
    }

    fn delete(&mut self, cf: u32, key: &[u8]) -> Result<Option<Change>> {
        let ids = self.ids;
        Ok(Some(if cf == ids.inodes {
            Change::InodeGone(decode_u64_key("inode key", key)?)
        } else if cf == ids.dentries {
            let (_child, parent, name) = decode_dentry_key(key)?;
            Change::DentryGone { parent, name }
        } else if cf == ids.xattrs {
            let (ino, name) = decode_named_key("extended attribute key", key)?;
            Change::XattrGone { ino, name }
        } else if cf == ids.orphans {
            Change::OrphanGone(decode_u64_key("orphan key", key)?)
        } else {
            return Ok(None);
        }))
    }

    fn deliver(&mut self, change: Result<Option<Change>>) {
        self.seen += 1;
        if self.error.is_some() {
            return;
        }
        match change {
            Ok(Some(change)) => self.changes.push(change),
            Ok(None) => {}
            Err(e) => self.error = Some(e),
        }
    }
}

impl WriteBatchIteratorCf for BatchReader {
    fn put_cf(&mut self, cf: u32, key: &[u8], value: &[u8]) {
        let change = self.put(cf, key, value);
        self.deliver(change);
    }

    fn delete_cf(&mut self, cf: u32, key: &[u8]) {
        let change = self.delete(cf, key);
        self.deliver(change);
    }

    fn merge_cf(&mut self, _: u32, _: &[u8], _: &[u8]) {
        // The journal writes no merges; counted, so that a batch with one is read whole.
        self.seen += 1;
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests;
