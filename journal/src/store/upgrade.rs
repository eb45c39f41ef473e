//! The store's schema version at open: a new store written at the current one, an older
//! store upgraded to it by a writable open (or an upgrade cut short finished), and the older
//! layouts a read-only open reads a store in as it is. docs/schema.md lists the versions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use mds_proto::first_ino;
use rocksdb::WriteBatch;

use super::{Journal, synced};
use crate::error::{Error, Result};
use crate::schema::{
    CF_CLIENTS, CF_DENTRIES, CF_INODES, CF_META, Dentry, FileKind, Inode, InodeV2,
    META_DATA_TO_COUNT, META_DENTRIES_TO_REKEY, META_INO_CEILING, META_LAST_COMMITTED,
    META_NEXT_INO, META_SCHEMA_VERSION, META_SESSION_PREFIX, META_SHARD, META_TRANSNO_CEILING,
    ROOT_INO, SCHEMA_VERSION, SCHEMA_VERSION_BEFORE_DATA, SCHEMA_VERSION_IMAGES_APART,
    SCHEMA_VERSION_INLINE_ONLY, SCHEMA_VERSION_PARENT_KEYED_DENTRIES, SCHEMA_VERSION_SLOTS_APART,
    SCHEMA_VERSION_UNCOUNTED_DATA, SCHEMA_VERSION_V2_INODES, SCHEMA_VERSION_WITHOUT_RESEND, decode,
    decode_named_key, dentry_key, encode, ino_key, is_child_keyed, layout_data_blocks, now_ns,
};
use crate::shard::ShardIdentity;

/// Entries an upgrade moves to their new keys per write batch (`Journal::rekey_dentries`):
/// a few MiB of batch, whatever the store's size.
/// (Four in tests, so that a few entries take several batches.)
const REKEY_BATCH: usize = if cfg!(test) { 4 } else { 65_536 };

/// What an open found of the store's schema, and made of it.
pub(super) struct SchemaAtOpen {
    /// This open created the store.
    pub(super) created: bool,
    /// The version this open upgraded the store from, if it did.
    pub(super) upgraded_from: Option<u32>,
    /// The version the store is read as: older than [`SCHEMA_VERSION`] only for a read-only
    /// open of a store no build of this version has opened for writing.
    pub(super) version: u32,
}

impl Journal {
    /// Reads the store's schema version and brings the store to this build's: a writable open
    /// writes a new store's first batch ([`Journal::initialize`]) or upgrades an older store
    /// ([`Journal::upgrade_from`]); a read-only open changes nothing. A store without a
    /// version, or of one this build does not read, is refused.
    pub(super) fn bring_schema_current(
        &mut self,
        path: &Path,
        writable: bool,
        shard: Option<&ShardIdentity>,
    ) -> Result<SchemaAtOpen> {
        let Some(v) = self.db.get_cf(self.cf(CF_META), META_SCHEMA_VERSION)? else {
            if !writable {
                return Err(Error::Corrupt {
                    what: "store",
                    detail: format!("{} has no schema version", path.display()),
                });
            }
            self.initialize(shard)?;
            return Ok(SchemaAtOpen {
                created: true,
                upgraded_from: None,
                version: SCHEMA_VERSION,
            });
        };
        let found = u32::from_le_bytes(v.as_slice().try_into().map_err(|_| Error::Corrupt {
            what: "schema version",
            detail: format!("{} bytes", v.len()),
        })?);
        let (upgraded_from, version) = self.upgrade_from(path, found, writable)?;
        Ok(SchemaAtOpen {
            created: false,
            upgraded_from,
            version,
        })
    }

    /// For a store of schema version `found`: a writable open upgrades it to the current one
    /// (or finishes an upgrade that stopped while it moved the entries); a read-only open
    /// notes the layouts it is to read the store in. Returns the version upgraded from, if
    /// any, and the version the store is read as.
    fn upgrade_from(
        &mut self,
        path: &Path,
        found: u32,
        writable: bool,
    ) -> Result<(Option<u32>, u32)> {
        let meta = self.cf(CF_META);
        let (mut upgraded_from, mut schema_version) = (None, SCHEMA_VERSION);
        // Version 1 never wrote resend records; versions 1 and 2 share the inode
        // layout that version 3 extended.
        let old_inodes = found == SCHEMA_VERSION_V2_INODES
            || (found == SCHEMA_VERSION_WITHOUT_RESEND && self.resend_family_is_empty()?);
        if old_inodes
            || found == SCHEMA_VERSION_BEFORE_DATA
            || found == SCHEMA_VERSION_PARENT_KEYED_DENTRIES
        {
            schema_version = found;
            if writable {
                self.upgrade(path, found, old_inodes)?;
                upgraded_from = Some(found);
            } else {
                self.v2_inodes = old_inodes;
                self.parent_keyed_dentries = true;
            }
        } else if found == SCHEMA_VERSION_IMAGES_APART
            || found == SCHEMA_VERSION_SLOTS_APART
            || found == SCHEMA_VERSION_INLINE_ONLY
            || found == SCHEMA_VERSION_UNCOUNTED_DATA
        {
            // Nothing stored changes but the version: from now on new inodes' images
            // may be in their entries (7: resend slots in the edits), which a build of
            // version 5 (6) would not read; from version 8 on, layouts of files in the
            // object store, which a build of version 7 would read as holes; from 9 on,
            // inodes that count their data, which a build of 8 would call corrupt — counted
            // once the open has written out the edits left (`Journal::count_file_data`).
            // An upgrade to 5 or 6 cut short while it moved the entries is finished first.
            let moving = self.db.get_cf(meta, META_DENTRIES_TO_REKEY)?.is_some();
            if writable {
                if moving {
                    self.finish_rekey()?;
                }
                let mut batch = WriteBatch::default();
                batch.put_cf(meta, META_SCHEMA_VERSION, SCHEMA_VERSION.to_le_bytes());
                batch.put_cf(meta, META_DATA_TO_COUNT, []);
                self.db.write_opt(batch, &synced())?;
                upgraded_from = Some(found);
            } else {
                schema_version = found;
                self.parent_keyed_dentries = moving;
            }
        } else if found == SCHEMA_VERSION && self.db.get_cf(meta, META_DENTRIES_TO_REKEY)?.is_some()
        {
            // An upgrade that stopped while it moved the entries.
            if writable {
                self.finish_rekey()?;
            } else {
                self.parent_keyed_dentries = true;
            }
        } else if found != SCHEMA_VERSION {
            return Err(Error::SchemaVersion {
                path: path.display().to_string(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        Ok((upgraded_from, schema_version))
    }

    /// Writes the schema version of a new store, its first inode number (its shard's), the
    /// shard's identity and, on shard 0, the root directory: one synced batch, so that a crash
    /// leaves no store numbered for a shard without saying which.
    fn initialize(&self, identity: Option<&ShardIdentity>) -> Result<()> {
        let shard = identity.map_or(0, |s| s.shard);
        let first = first_ino(shard);
        let mut batch = WriteBatch::default();
        let meta = self.cf(CF_META);
        batch.put_cf(meta, META_SCHEMA_VERSION, SCHEMA_VERSION.to_le_bytes());
        batch.put_cf(meta, META_LAST_COMMITTED, 0u64.to_le_bytes());
        batch.put_cf(meta, META_NEXT_INO, first.to_le_bytes());
        // Nothing handed out yet: the first commit raises them.
        batch.put_cf(meta, META_TRANSNO_CEILING, 0u64.to_le_bytes());
        batch.put_cf(meta, META_INO_CEILING, first.to_le_bytes());
        if let Some(identity) = identity {
            batch.put_cf(meta, META_SHARD, encode(identity));
        }
        if shard == 0 {
            let root = Inode::root(now_ns());
            batch.put_cf(self.cf(CF_INODES), ino_key(ROOT_INO), encode(&root));
        }
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    /// Upgrades a store of an older version: for versions 1 and 2 (`old_inodes`) every inode
    /// rewritten in the current layout, and the current version recorded with
    /// [`META_DENTRIES_TO_REKEY`], in one synced batch (version 3 differs otherwise only in
    /// the families the open adds) — a crash leaves the inodes either as they were or
    /// upgraded, never with the two layouts mixed (which one decoding could not tell apart).
    /// That batch holds the whole inode family once: a one-time cost at the first start of a
    /// new build. Then every entry is moved under its child's key ([`Journal::finish_rekey`]).
    /// The version goes first so that a build of the old one, which would misread an entry
    /// already moved, never opens a store part way through: it refuses version 5 by name.
    ///
    /// From versions before 4, sessions go: resend records hold replies encoded in the
    /// protocol of the build that wrote them, and no client of that protocol can reach this
    /// build (it refuses other versions at CONNECT), so none could ever resend. A store with
    /// known clients — it was not stopped cleanly, and clients may still replay early
    /// replies into it, which only the old build can take — is refused, before anything is
    /// written. Version 4 speaks this build's protocol: its sessions, resend records and
    /// known clients are kept, and its clients resend and replay into this build.
    fn upgrade(&self, path: &Path, found: u32, old_inodes: bool) -> Result<()> {
        let old_protocol = found < SCHEMA_VERSION_PARENT_KEYED_DENTRIES;
        let known = self.known_clients()?;
        if old_protocol && !known.is_empty() {
            return Err(Error::UpgradeWithKnownClients {
                path: path.display().to_string(),
                found,
                clients: known.len(),
            });
        }
        let (inodes, clients, meta) = (self.cf(CF_INODES), self.cf(CF_CLIENTS), self.cf(CF_META));
        let mut batch = WriteBatch::default();
        for item in self.scan(CF_INODES).take_while(|_| old_inodes) {
            let (key, value) = item?;
            let old: InodeV2 = decode("version 2 inode", &value)?;
            batch.put_cf(inodes, &key, encode(&Inode::from(old)));
        }
        for item in self.scan(CF_CLIENTS).take_while(|_| old_protocol) {
            batch.delete_cf(clients, item?.0);
        }
        for item in self
            .db
            .prefix_iterator_cf(meta, META_SESSION_PREFIX)
            .take_while(|_| old_protocol)
        {
            let (key, _) = item?;
            if !key.starts_with(META_SESSION_PREFIX) {
                break; // past the prefix
            }
            batch.delete_cf(meta, key);
        }
        batch.put_cf(meta, META_SCHEMA_VERSION, SCHEMA_VERSION.to_le_bytes());
        batch.put_cf(meta, META_DENTRIES_TO_REKEY, []);
        batch.put_cf(meta, META_DATA_TO_COUNT, []);
        self.db.write_opt(batch, &synced())?;
        self.finish_rekey()
    }

    /// Moves the entries an upgrade left in the old layout ([`Journal::rekey_dentries`]),
    /// then deletes [`META_DENTRIES_TO_REKEY`], synced: the batches before it in the log are
    /// durable with it.
    fn finish_rekey(&self) -> Result<()> {
        self.rekey_dentries()?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(CF_META), META_DENTRIES_TO_REKEY);
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    /// Moves every entry of the layout before version 5 (parent ++ name) under its child's
    /// key (child ++ parent ++ name), [`REKEY_BATCH`] entries to a write batch, each old key
    /// deleted and its new one put in the same batch; returns how many moved. The batches
    /// are not synced: the synced batch that ends the move follows them in the same log. A
    /// crash part way leaves both layouts in the family, which read unambiguously key by key
    /// ([`is_child_keyed`]), and [`META_DENTRIES_TO_REKEY`] set: the next open moves what is
    /// left. An old key is never a new one's bytes: that needs a name that begins with the
    /// eight bytes of the new key's parent, and names hold no NUL, while every inode number
    /// has a zero byte (its shard's number is below 256, or its number within the shard
    /// below 2^40).
    fn rekey_dentries(&self) -> Result<u64> {
        let dentries = self.cf(CF_DENTRIES);
        let mut moved = 0;
        let mut new_keys: Vec<(Vec<u8>, Box<[u8]>)> = Vec::with_capacity(REKEY_BATCH);
        let mut batch = WriteBatch::default();
        let write = |batch: &mut WriteBatch, new_keys: &mut Vec<(Vec<u8>, Box<[u8]>)>| {
            // In key order: the memtable's insert hint then holds across the batch.
            new_keys.sort_unstable();
            for (key, value) in new_keys.drain(..) {
                batch.put_cf(dentries, key, value);
            }
            self.db.write(std::mem::take(batch))
        };
        for item in self.scan(CF_DENTRIES) {
            let (key, value) = item?;
            let entry: Dentry = decode("dentry", &value)?;
            if is_child_keyed(&key, &entry) {
                continue;
            }
            let (parent, name) = decode_named_key("dentry key", &key)?;
            batch.delete_cf(dentries, &key);
            new_keys.push((dentry_key(entry.ino, parent, &name), value));
            moved += 1;
            if new_keys.len() == REKEY_BATCH {
                write(&mut batch, &mut new_keys)?;
            }
        }
        if !new_keys.is_empty() {
            write(&mut batch, &mut new_keys)?;
        }
        Ok(moved)
    }

    /// Finishes an upgrade to version 9 ([`META_DATA_TO_COUNT`] set): every regular file's
    /// data counted — its stored blocks, or what its layout covers for a file in objects —
    /// and the inodes of those holding any rewritten with the count, [`REKEY_BATCH`] to a
    /// batch, then the mark deleted, synced. Runs after the open wrote out the edits left, so
    /// no older image is written over the counted one later. Counting again over counts
    /// already written ends where counting once does: a crash part way is finished by the
    /// next open. Returns how many inodes it rewrote.
    pub(super) fn count_file_data(&self) -> Result<u64> {
        let meta = self.cf(CF_META);
        if self.db.get_cf(meta, META_DATA_TO_COUNT)?.is_none() {
            return Ok(0);
        }
        let mut blocks: BTreeMap<u64, u64> = BTreeMap::new();
        self.scan_data(|ino, _, _| {
            *blocks.entry(ino).or_default() += 1;
            Ok(())
        })?;
        let mut layouts: BTreeMap<u64, u64> = BTreeMap::new();
        self.scan_layouts(|ino, layout| {
            layouts.insert(ino, layout_data_blocks(&layout));
            Ok(())
        })?;
        let inodes = self.cf(CF_INODES);
        let (mut batch, mut rewritten) = (WriteBatch::default(), 0);
        let holding: BTreeSet<u64> = blocks.keys().chain(layouts.keys()).copied().collect();
        for ino in holding {
            let Some(mut inode) = self.inode(ino)? else {
                continue; // a deleted file's layout, left for the collector
            };
            if inode.kind != FileKind::File {
                continue;
            }
            let in_objects = inode.entries == 1;
            let count = if in_objects { &layouts } else { &blocks };
            let count = count.get(&ino).copied().unwrap_or(0);
            if inode.data_blocks == count {
                continue;
            }
            inode.data_blocks = count;
            batch.put_cf(inodes, ino_key(ino), encode(&inode));
            rewritten += 1;
            if batch.len() >= REKEY_BATCH {
                self.db.write(std::mem::take(&mut batch))?;
            }
        }
        batch.delete_cf(meta, META_DATA_TO_COUNT);
        self.db.write_opt(batch, &synced())?;
        Ok(rewritten)
    }

    /// Whether an upgrade to version 9 has its count of the files' data left to do
    /// ([`META_DATA_TO_COUNT`] set): the store was of an older version.
    pub(super) fn counting_pending(&self) -> Result<bool> {
        Ok(self
            .db
            .get_cf(self.cf(CF_META), META_DATA_TO_COUNT)?
            .is_some())
    }

    /// Deletes every resend slot, synced; how many there were.
    pub(super) fn drop_resend_records(&self) -> Result<usize> {
        let clients = self.cf(CF_CLIENTS);
        let mut batch = WriteBatch::default();
        for item in self.db.iterator_cf(clients, rocksdb::IteratorMode::Start) {
            let (key, _) = item?;
            batch.delete_cf(clients, &key);
        }
        let dropped = batch.len();
        if dropped > 0 {
            self.db.write_opt(batch, &synced())?;
        }
        Ok(dropped)
    }

    /// Whether every file's data is counted in its inode: false for a read-only open of a
    /// store from before version 9, or of one whose upgrade has not counted yet.
    pub fn data_counted(&self) -> Result<bool> {
        let meta = self.cf(CF_META);
        let current = self
            .db
            .get_cf(meta, META_SCHEMA_VERSION)?
            .is_some_and(|v| v == SCHEMA_VERSION.to_le_bytes());
        Ok(current && self.db.get_cf(meta, META_DATA_TO_COUNT)?.is_none())
    }

    /// Whether the resend family holds nothing: a store of version 1, which never wrote
    /// there, has the inode layout of version 2.
    fn resend_family_is_empty(&self) -> Result<bool> {
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_CLIENTS));
        iter.seek_to_first();
        iter.status()?;
        Ok(!iter.valid())
    }
}
