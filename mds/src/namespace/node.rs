//! The namespace's in-memory state of one inode and one directory entry, and the only two
//! places it meets the journal's on-disk records (`journal::Inode`, `journal::Dentry`):
//! loading (`from_record`: disk → memory, at start-up) and journaling (`image`/`record`:
//! memory → the record a mutation hands the committer).
//!
//! The in-memory types are deliberately not the record types, and derive no `Serialize`:
//! state that exists only while the server runs (commit-on-share stamps, session data) will
//! be added here, and must never change — or leak into — the disk encoding, which
//! `docs/schema.md` describes and `SCHEMA_VERSION` guards. The conversions destructure both
//! sides field by field, so a field added to either one does not compile until someone
//! decides whether it is persisted.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

/// Names up to this many bytes are kept inside their directory's B-tree nodes.
pub(crate) const INLINE_NAME: usize = 32;

/// A name as its directory keeps it: up to [`INLINE_NAME`] bytes inside the B-tree node
/// itself, longer ones on the heap. With `String` keys every name was behind a pointer, and a
/// create's search of a large directory missed the cache on most of the names it compared with
/// (memcmp in the partitions was 9.7% of the server's samples at 64 x 16, 73% of it on the
/// first load of the stored name: docs/benchmarks/in-memory.md). Ordered by bytes, as `str` is; a
/// directory orders its names by a word of each first (`dir.rs`). Looked up by
/// `name.as_bytes()`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DirName(SmallVec<[u8; INLINE_NAME]>);

impl DirName {
    pub(crate) fn new(name: &str) -> DirName {
        DirName(SmallVec::from_slice(name.as_bytes()))
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("made from a str")
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for DirName {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for DirName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

pub(crate) use super::dir::Entries;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FileKind {
    Directory,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    pub(crate) fn from_record(kind: journal::FileKind) -> FileKind {
        match kind {
            journal::FileKind::Directory => FileKind::Directory,
            journal::FileKind::File => FileKind::File,
            journal::FileKind::Symlink => FileKind::Symlink,
            journal::FileKind::Fifo => FileKind::Fifo,
            journal::FileKind::Socket => FileKind::Socket,
            journal::FileKind::CharDevice => FileKind::CharDevice,
            journal::FileKind::BlockDevice => FileKind::BlockDevice,
        }
    }

    pub(crate) fn record(self) -> journal::FileKind {
        match self {
            FileKind::Directory => journal::FileKind::Directory,
            FileKind::File => journal::FileKind::File,
            FileKind::Symlink => journal::FileKind::Symlink,
            FileKind::Fifo => journal::FileKind::Fifo,
            FileKind::Socket => journal::FileKind::Socket,
            FileKind::CharDevice => journal::FileKind::CharDevice,
            FileKind::BlockDevice => journal::FileKind::BlockDevice,
        }
    }

    pub(crate) fn from_wire(kind: mds_proto::Kind) -> FileKind {
        use mds_proto::Kind;
        match kind {
            Kind::Directory => FileKind::Directory,
            Kind::File => FileKind::File,
            Kind::Symlink => FileKind::Symlink,
            Kind::Fifo => FileKind::Fifo,
            Kind::Socket => FileKind::Socket,
            Kind::CharDevice => FileKind::CharDevice,
            Kind::BlockDevice => FileKind::BlockDevice,
        }
    }

    pub(crate) fn wire(self) -> mds_proto::Kind {
        use mds_proto::Kind;
        match self {
            FileKind::Directory => Kind::Directory,
            FileKind::File => Kind::File,
            FileKind::Symlink => Kind::Symlink,
            FileKind::Fifo => Kind::Fifo,
            FileKind::Socket => Kind::Socket,
            FileKind::CharDevice => Kind::CharDevice,
            FileKind::BlockDevice => Kind::BlockDevice,
        }
    }

    pub(crate) fn is_dir(self) -> bool {
        self == FileKind::Directory
    }

    /// A character or block device: the kinds that carry a device number.
    pub(crate) fn is_device(self) -> bool {
        matches!(self, FileKind::CharDevice | FileKind::BlockDevice)
    }
}

/// One inode's attributes as the server keeps them. Today every field is persisted (see
/// `journal::Inode` for what each means); in-memory-only fields go below the persisted ones
/// and are left out of [`InodeAttr::image`]. A symlink's target is here, shared (`Arc`), so
/// that every image of the inode carries it whoever makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InodeAttr {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits (no file-type bits; `kind` says that).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Directories: 2 + subdirectories. Files: the number of entries naming it.
    pub nlink: u32,
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub ctime_ns: i64,
    pub mtime_ns: i64,
    /// The transno that created this inode.
    pub generation: u64,
    /// Directories: the parent directory (the root is its own parent). Files: 0.
    pub parent: u64,
    /// Directories: how many entries they hold. Regular files: 1 when their data is in the
    /// object store (a layout), 0 when it is on the server ([`InodeAttr::in_objects`]).
    pub entries: u64,
    /// The transno of the last mutation that changed this inode.
    pub transno: u64,
    pub atime_ns: i64,
    /// Devices: the device number.
    pub rdev: u64,
    /// Symbolic links: the target.
    pub target: Option<Arc<[u8]>>,
    /// Regular files: the data they hold, in `journal::DATA_BLOCK`s (stored blocks, or what
    /// the layout covers), what `st_blocks` counts; at most `u32::MAX` (16 TiB), where it
    /// stays. In the padding after `kind`: the node keeps its size.
    pub data_blocks: u32,
}

impl InodeAttr {
    /// A regular file whose data is in the object store (`ops/objects.rs`).
    pub(crate) fn in_objects(&self) -> bool {
        self.kind == FileKind::File && self.entries == 1
    }

    /// The regular file's data moves to the object store, for good.
    pub(crate) fn set_in_objects(&mut self) {
        debug_assert_eq!(self.kind, FileKind::File);
        self.entries = 1;
    }

    /// Loading: the in-memory attributes of an inode read from the journal.
    pub(crate) fn from_record(record: journal::Inode) -> InodeAttr {
        let journal::Inode {
            ino,
            kind,
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
            atime_ns,
            rdev,
            target,
            data_blocks,
        } = record;
        InodeAttr {
            ino,
            kind: FileKind::from_record(kind),
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
            atime_ns,
            rdev,
            target: (!target.is_empty()).then(|| target.into()),
            data_blocks: u32::try_from(data_blocks).unwrap_or(u32::MAX),
        }
    }

    /// Journaling: the full image of this inode as the journal stores it. A plain copy of
    /// the persisted fields, no allocation but a symlink's target.
    pub(crate) fn image(&self) -> journal::Inode {
        let InodeAttr {
            ino,
            kind,
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
            atime_ns,
            rdev,
            ref target,
            data_blocks,
        } = *self;
        journal::Inode {
            ino,
            kind: kind.record(),
            mode,
            uid,
            gid,
            nlink,
            size,
            ctime_ns,
            mtime_ns,
            generation,
            parent,
            entries,
            transno,
            atime_ns,
            rdev,
            target: target.as_deref().map(<[u8]>::to_vec).unwrap_or_default(),
            data_blocks: data_blocks.into(),
        }
    }
}

/// Commit-on-share: who last changed an object, and whether that change is durable yet. In
/// memory only — a stamp is meaningful against the running server's `last_committed`, and a
/// store loaded at start-up is all committed, so loaded objects start with the empty stamp.
///
/// A stamp counts as a lock while its transno is above `last_committed`: it needs no release
/// work at commit, and the drain never touches the namespace. Besides the last writer it keeps
/// the highest transno written by any *other* client before it, so a client cannot slip past
/// another client's earlier uncommitted change by having written the object since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The client that changed the object last (0: nobody since start-up).
    client: u64,
    /// Its transno.
    transno: u64,
    /// The highest transno of a change by a client other than `client`.
    other: u64,
}

impl Stamp {
    /// The transno `client` must see durable before it may observe or build on this object,
    /// given `last_committed`; 0 if it may now. A client's own changes never hold it back.
    pub(crate) fn holds(&self, client: u64, last_committed: u64) -> u64 {
        let mine = self.client == client;
        let last = if !mine && self.transno > last_committed {
            self.transno
        } else {
            0
        };
        let other = if self.other > last_committed {
            self.other
        } else {
            0
        };
        last.max(other)
    }

    /// Whether a change it records may not be durable yet, given `last_committed`: while it
    /// is, the stamp may hold some client back and must be kept.
    pub(crate) fn uncommitted(&self, last_committed: u64) -> bool {
        self.transno > last_committed || self.other > last_committed
    }

    /// `client` changed the object in `transno`.
    pub(crate) fn write(&mut self, client: u64, transno: u64) {
        if self.client != client {
            self.other = self.other.max(self.transno);
            self.client = client;
        }
        self.transno = transno;
    }
}

/// One directory entry as the server keeps it: the child it names, that child's kind, and
/// the entry's commit-on-share stamp (in memory only).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub ino: u64,
    pub kind: FileKind,
    pub stamp: Stamp,
}

impl Entry {
    /// Whether both name the same child (stamps aside): what a second lock round checks.
    pub(crate) fn same_child(&self, other: &Entry) -> bool {
        self.ino == other.ino && self.kind == other.kind
    }
}

impl Entry {
    /// Loading: the in-memory entry for a dentry read from the journal.
    pub(crate) fn from_record(record: journal::Dentry) -> Entry {
        let journal::Dentry { ino, kind } = record;
        Entry {
            ino,
            kind: FileKind::from_record(kind),
            stamp: Stamp::default(),
        }
    }

    /// Journaling: the dentry value the journal stores for this entry.
    pub(crate) fn record(self) -> journal::Dentry {
        let Entry { ino, kind, .. } = self;
        journal::Dentry {
            ino,
            kind: kind.record(),
        }
    }
}

/// An inode and, for a directory, its entries (in directory order, so READDIR pages by name).
///
/// Every inode is a bucket of the inode table, moved whenever its stripe's map doubles and
/// faulted in fresh as the table grows (most of the server's page faults under creates), so
/// what only directories need is boxed apart ([`DirState`]): 176 bytes a node instead of 224.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub attr: InodeAttr,
    /// Commit-on-share: changes to the inode itself (created, SETATTR, renamed, a link
    /// removed).
    pub stamp: Stamp,
    /// Directories: their entries and what commit-on-share keeps of them; `None` for every
    /// other kind.
    pub dir: Option<Box<DirState>>,
    /// Extended attributes, by name; `None` for the many inodes that have none. Their
    /// changes are the inode's: they write `stamp`.
    #[allow(clippy::box_collection)]
    pub xattrs: Option<Box<Xattrs>>,
    /// Regular files (and directories opened to read): which clients hold handles on it,
    /// with how many each; `None` while nobody does. A file whose last name goes while this
    /// is set stays, an orphan (`nlink` 0), until the last handle is released.
    pub opens: Option<Box<Opens>>,
    /// Regular files: data written by changes that may not be durable yet (`ops/data.rs`).
    pub data: Option<Box<PendingData>>,
}

/// What a directory holds beyond its attributes.
#[derive(Clone, Debug)]
pub(crate) struct DirState {
    pub entries: Entries,
    /// Commit-on-share: changes to the set of entries (and so to the directory's size, nlink
    /// and mtime). Kept apart from the node's `stamp` so that creates of different names by
    /// different clients do not conflict with each other, while GETATTR and READDIR of the
    /// directory do conflict with them.
    pub content: Stamp,
    /// Commit-on-share: names removed by changes that may not be durable yet, with the stamp
    /// their entry had; a LOOKUP answering ENOENT, or a CREATE of the name, builds on the
    /// removal. Purged of durable removals as it grows.
    pub removed: BTreeMap<String, Stamp>,
}

impl DirState {
    fn new(entries: Entries) -> DirState {
        DirState {
            entries,
            content: Stamp::default(),
            removed: BTreeMap::new(),
        }
    }
}

/// The clients holding handles on one inode: (client, handles), a few at most in practice.
pub(crate) type Opens = SmallVec<[(u64, u32); 2]>;

/// A file's data that the store may not hold yet: what a reader must see instead of the
/// store's copy until the change that wrote it is durable, then dropped (the committer trims
/// it after each commit), so the server's memory holds only uncommitted data.
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingData {
    /// Blocks written, whole, with the transno that wrote each last.
    pub blocks: BTreeMap<u32, (Arc<[u8]>, u64)>,
    /// A truncate not durable yet, (first block cut, its transno): a block from there on
    /// that is not in `blocks` reads as a hole, whatever the store still holds.
    pub cut: Option<(u32, u64)>,
    /// A file in objects: the layout a change not durable yet wrote, with its transno
    /// (`ops/objects.rs`).
    pub layout: Option<(Arc<Vec<mds_proto::Placed>>, u64)>,
}

impl PendingData {
    /// Bytes of data it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.blocks.values().map(|(b, _)| b.len()).sum()
    }

    /// Drops what `last_committed` made durable; returns the bytes dropped. A durable block
    /// that an uncommitted truncate covers stays: the truncate hides the store's copy, and
    /// until it is durable readers must find the block here.
    pub(crate) fn trim(&mut self, last_committed: u64) -> usize {
        if self.cut.is_some_and(|(_, t)| t <= last_committed) {
            self.cut = None;
        }
        if self
            .layout
            .as_ref()
            .is_some_and(|(_, t)| *t <= last_committed)
        {
            self.layout = None;
        }
        let cut_from = self.cut.map(|(from, _)| from);
        let mut dropped = 0;
        self.blocks.retain(|&block, (bytes, transno)| {
            let keep = *transno > last_committed || cut_from.is_some_and(|f| block >= f);
            if !keep {
                dropped += bytes.len();
            }
            keep
        });
        dropped
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.cut.is_none() && self.layout.is_none()
    }
}

/// One inode's extended attributes, by name, with the bytes they are charged in all (names,
/// values and a fixed overhead each: `ops/xattr.rs`), which `MAX_XATTR_BYTES` bounds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Xattrs {
    pub by_name: BTreeMap<Box<str>, AttrValue>,
    pub bytes: usize,
}

/// The attribute holding an inode's access ACL.
pub(crate) const ACCESS_ACL: &str = "system.posix_acl_access";
/// The attribute holding a directory's default ACL.
pub(crate) const DEFAULT_ACL: &str = "system.posix_acl_default";

/// The values kept in memory at most this long: ACLs, security labels, capabilities and
/// most user attributes. A longer one is read from the store, so the server's memory does
/// not grow with the attribute bytes it keeps (1,500 values of 64 KiB once held 100 MiB).
pub(crate) const INLINE_XATTR_MAX: usize = 256;

/// What an attribute costs beyond its name and value: about what keeping it does (its map
/// entry, two boxed slices), and more than its name's length prefix in a LISTXATTR reply.
pub(crate) const XATTR_OVERHEAD: usize = 16;

/// The bytes an attribute of `name` and `value` is charged.
pub(crate) fn xattr_charge(name: &str, value: &[u8]) -> usize {
    name.len() + value.len() + XATTR_OVERHEAD
}

// Every ACL a permission check asks for is in memory (`acl::MAX_ACL_ENTRIES`).
const _: () = assert!(super::acl::MAX_ACL_BYTES <= INLINE_XATTR_MAX);

/// One attribute's value: itself when short, else its length, with the value in memory only
/// until the commit that writes it is durable (readers find it in the store then), as file
/// data is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AttrValue {
    Inline(Box<[u8]>),
    Stored {
        len: usize,
        /// The value and the transno that wrote it, until that transno is durable.
        pending: Option<(Box<[u8]>, u64)>,
    },
}

impl AttrValue {
    /// A value as written by `transno`: kept until its commit when long.
    pub(crate) fn written(value: Vec<u8>, transno: u64) -> AttrValue {
        if value.len() <= INLINE_XATTR_MAX {
            AttrValue::Inline(value.into())
        } else {
            AttrValue::Stored {
                len: value.len(),
                pending: Some((value.into(), transno)),
            }
        }
    }

    /// A value the store holds (loaded at start, or followed by a standby).
    pub(crate) fn committed(value: Vec<u8>) -> AttrValue {
        if value.len() <= INLINE_XATTR_MAX {
            AttrValue::Inline(value.into())
        } else {
            AttrValue::Stored {
                len: value.len(),
                pending: None,
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            AttrValue::Inline(v) => v.len(),
            AttrValue::Stored { len, .. } => *len,
        }
    }

    /// The bytes held in memory until a commit: what counts against the pending-data cap.
    pub(crate) fn pending_bytes(&self) -> usize {
        match self {
            AttrValue::Stored {
                pending: Some((v, _)),
                ..
            } => v.len(),
            _ => 0,
        }
    }

    /// The value, if memory holds it (`None`: read it from the store).
    pub(crate) fn in_memory(&self) -> Option<&[u8]> {
        match self {
            AttrValue::Inline(v)
            | AttrValue::Stored {
                pending: Some((v, _)),
                ..
            } => Some(v),
            AttrValue::Stored { pending: None, .. } => None,
        }
    }
}

impl Xattrs {
    /// Drops the values written at or before `last_committed` from memory; returns the bytes
    /// dropped.
    pub(crate) fn trim(&mut self, last_committed: u64) -> usize {
        let mut dropped = 0;
        for value in self.by_name.values_mut() {
            if let AttrValue::Stored { pending, .. } = value
                && pending.as_ref().is_some_and(|&(_, t)| t <= last_committed)
            {
                dropped += pending.take().map_or(0, |(v, _)| v.len());
            }
        }
        dropped
    }

    /// The bytes of values held in memory until their commit.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.by_name.values().map(AttrValue::pending_bytes).sum()
    }
}

impl Node {
    /// A node as loaded or created: no commit-on-share history. `entries` is `Some` for a
    /// directory.
    pub(crate) fn new(attr: InodeAttr, entries: Option<Entries>) -> Node {
        Node {
            attr,
            stamp: Stamp::default(),
            dir: entries.map(|entries| Box::new(DirState::new(entries))),
            xattrs: None,
            opens: None,
            data: None,
        }
    }

    /// The entries of the inode's access ACL (`system.posix_acl_access`), if it has one:
    /// every permission check asks. An ACL is never longer than [`INLINE_XATTR_MAX`], so
    /// memory always holds it.
    #[inline]
    pub(crate) fn access_acl(&self) -> Option<&[u8]> {
        // Most inodes have no attributes: one test, inline, on every permission check.
        self.xattrs.as_ref()?;
        self.acl(ACCESS_ACL)
    }

    /// The entries of a directory's default ACL (`system.posix_acl_default`), if it has one:
    /// what its new entries inherit.
    #[inline]
    pub(crate) fn default_acl(&self) -> Option<&[u8]> {
        self.xattrs.as_ref()?;
        self.acl(DEFAULT_ACL)
    }

    #[inline(never)]
    fn acl(&self, name: &str) -> Option<&[u8]> {
        let value = self.xattrs.as_ref()?.by_name.get(name)?;
        value.in_memory().map(super::acl::of_value)
    }

    /// A directory's entries; `None` for every other kind.
    pub(crate) fn entries(&self) -> Option<&Entries> {
        self.dir.as_ref().map(|d| &d.entries)
    }

    /// As [`Node::entries`], to change them.
    pub(crate) fn entries_mut(&mut self) -> Option<&mut Entries> {
        self.dir.as_mut().map(|d| &mut d.entries)
    }

    /// A directory's state; the caller has checked that this is one.
    pub(crate) fn dir_mut(&mut self) -> &mut DirState {
        self.dir.as_mut().expect("checked to be a directory")
    }

    /// Handles open on this inode, all clients'.
    pub(crate) fn open_count(&self) -> u32 {
        self.opens
            .as_ref()
            .map_or(0, |o| o.iter().map(|(_, n)| n).sum())
    }

    /// A file kept only by its open handles: its last name is gone.
    pub(crate) fn is_orphan(&self) -> bool {
        !self.attr.kind.is_dir() && self.attr.nlink == 0
    }

    /// One more handle of `client`.
    pub(crate) fn add_open(&mut self, client: u64) {
        let opens = self.opens.get_or_insert_with(Default::default);
        match opens.iter_mut().find(|(c, _)| *c == client) {
            Some((_, n)) => *n += 1,
            None => opens.push((client, 1)),
        }
    }

    /// One handle of `client` fewer.
    pub(crate) fn drop_open(&mut self, client: u64) {
        let Some(opens) = self.opens.as_mut() else {
            return;
        };
        if let Some(i) = opens.iter().position(|(c, _)| *c == client) {
            opens[i].1 -= 1;
            if opens[i].1 == 0 {
                opens.swap_remove(i);
            }
        }
        if opens.is_empty() {
            self.opens = None;
        }
    }

    /// The clients holding handles on it, in order.
    pub(crate) fn open_by(&self) -> Vec<u64> {
        let mut owners: Vec<u64> = self
            .opens
            .iter()
            .flat_map(|o| o.iter().map(|(c, _)| *c))
            .collect();
        owners.sort_unstable();
        owners
    }

    /// The entry named `name`, if this is a directory that has one.
    pub(crate) fn entry(&self, name: &str) -> Option<Entry> {
        self.entries()?.get(name.as_bytes()).copied()
    }

    /// The stamp of a name of this directory that has no entry: its removal's, if recent.
    pub(crate) fn removed_stamp(&self, name: &str) -> Stamp {
        self.dir
            .as_ref()
            .and_then(|d| d.removed.get(name))
            .copied()
            .unwrap_or_default()
    }

    /// Takes a removed name's stamp (the name is being created again).
    pub(crate) fn take_removed(&mut self, name: &str) -> Stamp {
        self.dir
            .as_mut()
            .and_then(|d| d.removed.remove(name))
            .unwrap_or_default()
    }

    /// Remembers that `name` was removed from this directory with `stamp`, dropping removals
    /// that are durable by now once the list has grown (they can hold nobody back any more).
    pub(crate) fn note_removed(&mut self, name: String, stamp: Stamp, last_committed: u64) {
        let removed = &mut self.dir_mut().removed;
        if removed.len() >= 64 {
            removed.retain(|_, s| s.uncommitted(last_committed));
        }
        removed.insert(name, stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_the_trip_through_memory_unchanged() {
        let inode = journal::Inode {
            ino: 300,
            kind: journal::FileKind::File,
            mode: 0o640,
            uid: 1000,
            gid: 100,
            nlink: 3,
            size: 70_000,
            ctime_ns: 1_700_000_000_123_456_789,
            mtime_ns: 1_700_000_000_000_000_001,
            generation: 42,
            parent: 0,
            entries: 5,
            transno: 43,
            atime_ns: 9,
            rdev: 0,
            target: vec![],
            data_blocks: 17,
        };
        assert_eq!(InodeAttr::from_record(inode.clone()).image(), inode);
        let symlink = journal::Inode {
            kind: journal::FileKind::Symlink,
            target: b"../x".to_vec(),
            size: 4,
            ..inode.clone()
        };
        assert_eq!(InodeAttr::from_record(symlink.clone()).image(), symlink);
        let device = journal::Inode {
            kind: journal::FileKind::CharDevice,
            rdev: 0x0103,
            ..inode
        };
        assert_eq!(InodeAttr::from_record(device.clone()).image(), device);
        let root = journal::Inode::root(7);
        assert_eq!(InodeAttr::from_record(root.clone()).image(), root);
        for kind in [
            journal::FileKind::Directory,
            journal::FileKind::File,
            journal::FileKind::Symlink,
            journal::FileKind::Fifo,
            journal::FileKind::Socket,
            journal::FileKind::CharDevice,
            journal::FileKind::BlockDevice,
        ] {
            let dentry = journal::Dentry { ino: 9, kind };
            assert_eq!(Entry::from_record(dentry).record(), dentry);
        }
    }

    /// Every inode is a bucket of the inode table, moved when its stripe doubles: what only
    /// some inodes need stays boxed, and a field that makes every node bigger is a choice.
    #[test]
    fn a_node_stays_within_176_bytes() {
        assert!(
            std::mem::size_of::<Node>() <= 176,
            "Node is {} bytes",
            std::mem::size_of::<Node>()
        );
    }

    #[test]
    fn a_stamp_holds_other_clients_until_its_changes_are_durable() {
        let (a, b, c) = (1, 2, 3);
        let mut s = Stamp::default();
        assert_eq!(s.holds(a, 0), 0, "loaded: committed");
        s.write(a, 10);
        assert_eq!(s.holds(a, 0), 0, "a client passes its own changes");
        assert_eq!(s.holds(b, 9), 10);
        assert_eq!(s.holds(b, 10), 0, "durable: nobody waits");
        s.write(b, 11);
        assert_eq!(
            s.holds(b, 9),
            10,
            "b wrote since, but a's change is still not durable"
        );
        assert_eq!(s.holds(a, 9), 11);
        s.write(b, 12);
        assert_eq!(s.holds(b, 10), 0);
        assert_eq!(s.holds(c, 11), 12);
        s.write(c, 13);
        assert_eq!(
            s.holds(c, 11),
            12,
            "b's 12 is remembered as another client's"
        );
    }
}
