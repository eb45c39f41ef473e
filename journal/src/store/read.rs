//! Reads of committed state: single inodes, extended attributes and data blocks as the server
//! asks for them, and the scans of whole families a start-up, a standby's takeover and fsck
//! make. With the edit log, the edits not yet written out are read over the images
//! (`edits.rs`), in one snapshot of the two.

use rocksdb::{DB, IteratorMode};

use super::Journal;
use super::edits::{Overlaid, Overlay};
use crate::error::{Error, Result};
use crate::options::full_scan;
use crate::schema::{
    CF_CLIENTS, CF_DATA, CF_DENTRIES, CF_INODES, CF_META, CF_ORPHANS, CF_XATTRS, Dentry, Inode,
    InodeV2, META_GARBAGE_PREFIX, META_GONE_PREFIX, META_LAYOUT_PREFIX, META_NEXT_SLICE,
    META_PENDING_PREFIX, PendingDir, ResendSlot, data_key, data_key_end, decode, decode_dentry,
    decode_meta_u64, decode_named_key, decode_resend_key, decode_u64_key, ino_key, is_child_keyed,
    layout_key, xattr_key,
};
use mds_proto::Placed;

impl Journal {
    /// Reads one committed inode: under its own key, or (never changed since its creation)
    /// in the entry it was created with, which is keyed by its number first.
    /// Edits not yet written out are read over the images.
    pub fn inode(&self, ino: u64) -> Result<Option<Inode>> {
        let snapshot = self.snapshot();
        let read = || {
            let mut read = rocksdb::ReadOptions::default();
            if let Some(snapshot) = &snapshot {
                read.set_snapshot(snapshot);
            }
            read
        };
        let overlay = Overlay::read(&self.db, self.families, read())?;
        let own = match overlay.inodes.get(&ino_key(ino)[..]) {
            Some(change) => change.as_deref().map(<[u8]>::to_vec),
            None => self
                .db
                .get_cf_opt(self.cf(CF_INODES), ino_key(ino), &read())?,
        };
        if let Some(v) = own {
            return Ok(Some(self.decode_inode(&v)?));
        }
        if self.parent_keyed_dentries {
            return Ok(None);
        }
        let prefix = ino_key(ino);
        let images = self.db.iterator_cf_opt(
            self.cf(CF_DENTRIES),
            read(),
            IteratorMode::From(&prefix, rocksdb::Direction::Forward),
        );
        for item in Overlaid::new(images, &overlay.dentries, &prefix) {
            let (key, value) = item?;
            if !key.starts_with(&prefix) {
                break;
            }
            if let Some(image) = crate::schema::embedded_image(&value)? {
                return Ok(Some(image));
            }
        }
        Ok(None)
    }

    /// Decodes a stored inode in the layout this store holds.
    fn decode_inode(&self, bytes: &[u8]) -> Result<Inode> {
        if self.v2_inodes {
            Ok(decode::<InodeV2>("version 2 inode", bytes)?.into())
        } else {
            crate::schema::decode_inode("inode", bytes)
        }
    }

    /// Reads one committed extended attribute.
    pub fn xattr(&self, ino: u64, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(xattrs) = self.db.cf_handle(CF_XATTRS) else {
            return Ok(None); // a read-only open of a store from before them
        };
        Ok(self.db.get_cf(xattrs, xattr_key(ino, name))?)
    }

    /// Reads one committed block of a file's data into `into` (cleared first): `false` if
    /// the block is not stored (a hole, or past what was written).
    pub fn read_block(&self, ino: u64, block: u32, into: &mut Vec<u8>) -> Result<bool> {
        into.clear();
        let Some(data) = self.db.cf_handle(CF_DATA) else {
            return Ok(false); // a read-only open of a store from before file data
        };
        match self.db.get_pinned_cf(data, data_key(ino, block))? {
            Some(v) => {
                into.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Whether block `block` of `ino` is stored (committed), without copying it.
    pub fn has_block(&self, ino: u64, block: u32) -> Result<bool> {
        let Some(data) = self.db.cf_handle(CF_DATA) else {
            return Ok(false);
        };
        Ok(self.db.get_pinned_cf(data, data_key(ino, block))?.is_some())
    }

    /// The committed blocks of `ino` from `from` up to `to` that are stored, in order: keys
    /// only, one pass.
    pub fn stored_blocks(&self, ino: u64, from: u32, to: u32) -> Result<Vec<u32>> {
        let Some(data) = self.db.cf_handle(CF_DATA) else {
            return Ok(Vec::new());
        };
        let (start, end) = (data_key(ino, from), data_key_end(ino, to));
        let mut read = rocksdb::ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        let mut iter = self.db.raw_iterator_cf_opt(data, read);
        iter.seek(start);
        let mut stored = Vec::new();
        while let Some(key) = iter.key() {
            stored.push(decode_resend_key(key)?.1);
            iter.next();
        }
        iter.status()?;
        Ok(stored)
    }

    /// The committed layout of the file `ino`, if its data is in the object store.
    pub fn layout(&self, ino: u64) -> Result<Option<Vec<Placed>>> {
        match self.db.get_pinned_cf(self.cf(CF_META), layout_key(ino))? {
            Some(v) => decode("layout", &v).map(Some),
            None => Ok(None),
        }
    }

    /// The first slice id never handed out (None: none ever was).
    pub fn next_slice(&self) -> Result<Option<u64>> {
        match self.db.get_pinned_cf(self.cf(CF_META), META_NEXT_SLICE)? {
            Some(v) => decode_meta_u64("next slice id", &v).map(Some),
            None => Ok(None),
        }
    }

    /// Calls `f(ino, layout)` on every committed layout (deleted files' too, until the
    /// collector is done with them), in inode order.
    pub fn scan_layouts(&self, mut f: impl FnMut(u64, Vec<Placed>) -> Result<()>) -> Result<()> {
        self.scan_meta(META_LAYOUT_PREFIX, "layout key", |ino, value| {
            f(ino, decode("layout", value)?)
        })
    }

    /// Deleted files whose slices are still to delete: (inode, deleted at, in Unix seconds).
    pub fn gone_layouts(&self) -> Result<Vec<(u64, u64)>> {
        let mut gone = Vec::new();
        self.scan_meta(META_GONE_PREFIX, "gone layout key", |ino, value| {
            gone.push((ino, decode("gone layout", value)?));
            Ok(())
        })?;
        Ok(gone)
    }

    /// Slices no layout names: (slice id, size, since in Unix seconds).
    pub fn garbage(&self) -> Result<Vec<(u64, u64, u64)>> {
        let mut garbage = Vec::new();
        self.scan_meta(META_GARBAGE_PREFIX, "garbage key", |slice, value| {
            let (size, since): (u64, u64) = decode("garbage", value)?;
            garbage.push((slice, size, since));
            Ok(())
        })?;
        Ok(garbage)
    }

    /// `f(id, value)` for every `meta` key of `prefix` ++ id (u64 BE), in id order.
    fn scan_meta(
        &self,
        prefix: &[u8],
        what: &'static str,
        mut f: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for item in self.db.prefix_iterator_cf(self.cf(CF_META), prefix) {
            let (key, value) = item?;
            let Some(id) = key.strip_prefix(prefix) else {
                break; // past the prefix
            };
            f(decode_u64_key(what, id)?, &value)?;
        }
        Ok(())
    }

    /// The directories made for another shard's entries and not confirmed yet, in inode order.
    pub fn pending_dirs(&self) -> Result<Vec<PendingDir>> {
        let mut pending = Vec::new();
        for item in self
            .db
            .prefix_iterator_cf(self.cf(CF_META), META_PENDING_PREFIX)
        {
            let (key, value) = item?;
            let Some(id) = key.strip_prefix(META_PENDING_PREFIX) else {
                break; // past the prefix
            };
            let ino = decode_u64_key("pending directory key", id)?;
            let corrupt = |e: postcard::Error| Error::Corrupt {
                what: "pending directory",
                detail: format!("inode {ino}: {e}"),
            };
            let ((parent, name), rest): ((u64, String), _) =
                postcard::take_from_bytes(&value).map_err(corrupt)?;
            // Nothing more for a MKDIR_REMOTE's (the encoding before remote RMDIR).
            let removing =
                !rest.is_empty() && postcard::from_bytes::<bool>(rest).map_err(corrupt)?;
            pending.push(PendingDir {
                ino,
                parent,
                name,
                removing,
            });
        }
        Ok(pending)
    }

    /// Calls `f(ino, block, bytes)` on every committed data block, in inode then block order.
    pub fn scan_data(&self, mut f: impl FnMut(u64, u32, &[u8]) -> Result<()>) -> Result<()> {
        if self.db.cf_handle(CF_DATA).is_none() {
            return Ok(());
        }
        for item in self.scan(CF_DATA) {
            let (key, value) = item?;
            let (ino, block) = decode_resend_key(&key)?;
            f(ino, block, &value)?;
        }
        Ok(())
    }

    /// Calls `f(ino, owners)` on every orphan, in inode order.
    pub fn scan_orphans(&self, mut f: impl FnMut(u64, Vec<u64>) -> Result<()>) -> Result<()> {
        if self.db.cf_handle(CF_ORPHANS).is_none() {
            return Ok(());
        }
        for item in self.scan(CF_ORPHANS) {
            let (key, value) = item?;
            f(
                decode_u64_key("orphan key", &key)?,
                decode("orphan owners", &value)?,
            )?;
        }
        Ok(())
    }

    /// Calls `f` on every committed inode in inode-number order: those under their own key
    /// in `inodes`, and those whose only image is the one their entry was created with
    /// (`schema::embedded_image`). See [`Journal::scan_namespace`], which this is with the
    /// entries passed over.
    pub fn scan_inodes(&self, f: impl FnMut(Inode) -> Result<()>) -> Result<()> {
        self.scan_namespace(|_, _, _| Ok(()), f)
    }

    /// Calls `entry(parent, name, dentry)` on every committed directory entry (as
    /// [`Journal::scan_dentries`]) and `inode` on every committed inode, in inode-number
    /// order, reading each family once: what a start-up loads. An inode's image is under its
    /// own key in `inodes`, or (never changed since the commit that created it) in the value
    /// of the entry it was created with. Both families are in inode order (`dentries` is
    /// keyed by child first), so the two are merged as they are read; an inode with both has
    /// been changed since its creation, and its own key holds the newer image.
    pub fn scan_namespace(
        &self,
        mut entry: impl FnMut(u64, String, Dentry) -> Result<()>,
        mut inode: impl FnMut(Inode) -> Result<()>,
    ) -> Result<()> {
        let view = self.namespace_view()?;
        let mut own = view
            .scan(self, CF_INODES)
            .map(|item| {
                let (key, value) = item?;
                let image = self.decode_inode(&value)?;
                let ino = decode_u64_key("inode key", &key)?;
                if ino != image.ino {
                    return Err(Error::Corrupt {
                        what: "inode",
                        detail: format!("key {ino} holds inode {}", image.ino),
                    });
                }
                Ok(image)
            })
            .peekable();
        for item in view.scan(self, CF_DENTRIES) {
            let (key, value) = item?;
            let (parent, name, dentry) = self.decode_stored_dentry(&key, &value)?;
            // Entries of stores keyed by parent (before version 6) carry no image.
            let embedded = if self.parent_keyed_dentries {
                None
            } else {
                crate::schema::embedded_image(&value)?
            };
            if let Some(image) = embedded {
                if image.ino != dentry.ino {
                    return Err(Error::Corrupt {
                        what: "dentry",
                        detail: format!(
                            "the entry {parent}/{name:?} of inode {} carries inode {}'s image",
                            dentry.ino, image.ino
                        ),
                    });
                }
                let mut superseded = false;
                while let Some(next) =
                    own.next_if(|i| i.as_ref().map_or(true, |i| i.ino <= image.ino))
                {
                    let image_of_own = next?;
                    superseded |= image_of_own.ino == image.ino;
                    inode(image_of_own)?;
                }
                if !superseded {
                    inode(image)?;
                }
            }
            entry(parent, name, dentry)?;
        }
        for image in own {
            inode(image?)?;
        }
        Ok(())
    }

    /// Calls `f(parent, name, entry)` on every committed directory entry, in the order of
    /// the children's numbers (`dentries` is keyed by child: one directory's entries are not
    /// together, and come in no name order).
    pub fn scan_dentries(
        &self,
        mut f: impl FnMut(u64, String, Dentry) -> Result<()>,
    ) -> Result<()> {
        let view = self.namespace_view()?;
        for item in view.scan(self, CF_DENTRIES) {
            let (key, value) = item?;
            let (parent, name, entry) = self.decode_stored_dentry(&key, &value)?;
            f(parent, name, entry)?;
        }
        Ok(())
    }

    /// One stored entry as `(parent, name, entry)`, in whichever layout it is: a store whose
    /// upgrade to child keys was cut short holds both.
    fn decode_stored_dentry(&self, key: &[u8], value: &[u8]) -> Result<(u64, String, Dentry)> {
        let parent_keyed =
            self.parent_keyed_dentries && !is_child_keyed(key, &decode::<Dentry>("dentry", value)?);
        decode_dentry(key, value, parent_keyed)
    }

    /// Calls `f(ino, name, value)` on every committed extended attribute, grouped by inode
    /// and in name-byte order within one inode.
    pub fn scan_xattrs(&self, mut f: impl FnMut(u64, String, Vec<u8>) -> Result<()>) -> Result<()> {
        if self.db.cf_handle(CF_XATTRS).is_none() {
            return Ok(()); // a read-only open of a store from before them
        }
        for item in self.scan(CF_XATTRS) {
            let (key, value) = item?;
            let (ino, name) = decode_named_key("extended attribute key", &key)?;
            f(ino, name, value.into_vec())?;
        }
        Ok(())
    }

    /// Calls `f(client, slot, value)` on every resend slot, in client then slot order: those
    /// in `clients`, with the edits not yet written out read over them.
    pub fn scan_resend(&self, mut f: impl FnMut(u64, u32, ResendSlot) -> Result<()>) -> Result<()> {
        let view = self.namespace_view()?;
        for item in view.scan(self, CF_CLIENTS) {
            let (key, value) = item?;
            let (client, slot) = decode_resend_key(&key)?;
            f(client, slot, decode("resend slot", &value)?)?;
        }
        Ok(())
    }

    /// What the scans of `inodes` and `dentries` read: one snapshot of the store, and the
    /// edits in it not yet written out.
    fn namespace_view(&self) -> Result<NamespaceView<'_>> {
        let snapshot = self.snapshot();
        let mut read = full_scan();
        if let Some(snapshot) = &snapshot {
            read.set_snapshot(snapshot);
        }
        let overlay = Overlay::read(&self.db, self.families, read)?;
        Ok(NamespaceView { snapshot, overlay })
    }

    /// A snapshot for reads of the images and the edit log together, while a checkpointer
    /// may write the one and delete from the other; None when none runs (a read-only or
    /// secondary open, which RocksDB gives no snapshot, sees only what it opened or caught
    /// up to).
    fn snapshot(&self) -> Option<rocksdb::SnapshotWithThreadMode<'_, DB>> {
        self.checkpointer.as_ref().map(|_| self.db.snapshot())
    }

    /// An iterator over a whole family, from its first key, that leaves the block cache alone
    /// (`options::full_scan`).
    pub(super) fn scan(&self, family: &str) -> rocksdb::DBIteratorWithThreadMode<'_, DB> {
        self.db
            .iterator_cf_opt(self.cf(family), full_scan(), IteratorMode::Start)
    }
}

/// One snapshot of the store with the edit log's changes in it, for scans of the namespace
/// families ([`Journal::namespace_view`]).
struct NamespaceView<'a> {
    snapshot: Option<rocksdb::SnapshotWithThreadMode<'a, DB>>,
    overlay: Overlay,
}

impl NamespaceView<'_> {
    /// `inodes`, `dentries` or `clients` from its first key, with the edit log read over it.
    fn scan<'v>(
        &'v self,
        journal: &'v Journal,
        family: &str,
    ) -> Overlaid<'v, rocksdb::DBIteratorWithThreadMode<'v, DB>> {
        let mut read = full_scan();
        if let Some(snapshot) = &self.snapshot {
            read.set_snapshot(snapshot);
        }
        let changes = match family {
            CF_INODES => &self.overlay.inodes,
            CF_DENTRIES => &self.overlay.dentries,
            CF_CLIENTS => &self.overlay.clients,
            other => unreachable!("no edit changes {other}"),
        };
        let images = journal
            .db
            .iterator_cf_opt(journal.cf(family), read, IteratorMode::Start);
        Overlaid::new(images, changes, &[])
    }
}
