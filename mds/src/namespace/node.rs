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

use std::collections::BTreeMap;

/// Directory or regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FileKind {
    Directory,
    File,
}

impl FileKind {
    pub(crate) fn from_record(kind: journal::FileKind) -> FileKind {
        match kind {
            journal::FileKind::Directory => FileKind::Directory,
            journal::FileKind::File => FileKind::File,
        }
    }

    pub(crate) fn record(self) -> journal::FileKind {
        match self {
            FileKind::Directory => journal::FileKind::Directory,
            FileKind::File => journal::FileKind::File,
        }
    }
}

/// One inode's attributes as the server keeps them. Today every field is persisted (see
/// `journal::Inode` for what each means); in-memory-only fields go below the persisted ones
/// and are left out of [`InodeAttr::image`].
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
    /// Directories: how many entries they hold.
    pub entries: u64,
    /// The transno of the last mutation that changed this inode.
    pub transno: u64,
}

impl InodeAttr {
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
        }
    }

    /// Journaling: the full image of this inode as the journal stores it. A plain copy of
    /// the persisted fields, no allocation: it costs what the `clone` it replaced did.
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
        }
    }
}

/// One directory entry as the server keeps it: the child it names and that child's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub ino: u64,
    pub kind: FileKind,
}

impl Entry {
    /// Loading: the in-memory entry for a dentry read from the journal.
    pub(crate) fn from_record(record: journal::Dentry) -> Entry {
        let journal::Dentry { ino, kind } = record;
        Entry {
            ino,
            kind: FileKind::from_record(kind),
        }
    }

    /// Journaling: the dentry value the journal stores for this entry.
    pub(crate) fn record(self) -> journal::Dentry {
        let Entry { ino, kind } = self;
        journal::Dentry {
            ino,
            kind: kind.record(),
        }
    }
}

/// An inode and, for a directory, its entries (sorted, so READDIR pages by name).
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub attr: InodeAttr,
    pub entries: Option<BTreeMap<String, Entry>>,
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
        };
        assert_eq!(InodeAttr::from_record(inode.clone()).image(), inode);
        let root = journal::Inode::root(7);
        assert_eq!(InodeAttr::from_record(root.clone()).image(), root);
        for kind in [journal::FileKind::Directory, journal::FileKind::File] {
            let dentry = journal::Dentry { ino: 9, kind };
            assert_eq!(Entry::from_record(dentry).record(), dentry);
        }
    }
}
