//! What the mount keeps of each file and directory the kernel has open — a file's server
//! handle, a directory's listing so far and its attributes at OPENDIR — and the attributes of
//! the directories the kernel was last told of, from which OPENDIR takes its own. These are
//! the tables [`crate::mount::Mount`] holds; the operations that fill and read them are in
//! `files` and `dirs`, above it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64};

use mds_client::Handle;
use mds_client::proto::{Attr, Kind};

/// A file open on the mount.
pub struct OpenFile {
    pub handle: Handle,
    /// The last loss (see `durability`) this file was told of, or the count when it opened:
    /// a loss is reported once to each file open before it.
    pub told: AtomicU64,
    /// The file's permission bits as the last reply through this file showed them: a WRITE
    /// whose reply shows others (its set-ID bits cleared) has the kernel forget what it keeps.
    pub mode: AtomicU32,
}

/// The inode number "..", whose inode the server does not say, is listed with (libfuse's
/// `FUSE_UNKNOWN_INO`; the kernel does not use it).
pub const UNKNOWN_INO: u64 = 0xffff_ffff;

/// One entry of a listing.
pub struct Entry {
    pub name: String,
    pub ino: u64,
    pub kind: Kind,
    /// For READDIRPLUS, once fetched; `None` after a GETATTR that found it gone.
    pub attr: Option<Attr>,
    /// Its attributes were asked for.
    pub fetched: bool,
}

/// Most directories whose attributes [`RecentDirs`] keeps; past it, it starts over.
const RECENT_DIRS: usize = 4096;

/// The attributes of the directories the kernel was last told of (LOOKUP, GETATTR, SETATTR,
/// MKDIR answers): where OPENDIR takes an open directory's attributes from without asking
/// the server, under `default_permissions` where it asks nothing else (the kernel looks a
/// path up before it opens it). Bounded: a directory not found here is asked for.
#[derive(Default)]
pub struct RecentDirs(parking_lot::Mutex<HashMap<u64, Attr>>);

impl RecentDirs {
    /// Keeps `attr` if it is a directory's.
    pub fn note(&self, attr: &Attr) {
        if attr.kind != Kind::Directory {
            return;
        }
        let mut recent = self.0.lock();
        if recent.len() >= RECENT_DIRS && !recent.contains_key(&attr.ino) {
            recent.clear();
        }
        recent.insert(attr.ino, attr.clone());
    }

    /// The attributes kept of `ino`, if it is a directory the kernel was told of lately.
    pub fn get(&self, ino: u64) -> Option<Attr> {
        self.0.lock().get(&ino).cloned()
    }
}

/// An open directory: its listing, and its attributes as they were when it was opened.
pub struct OpenDir {
    pub ino: u64,
    pub opened: Attr,
    pub stream: tokio::sync::Mutex<DirStream>,
}

impl OpenDir {
    /// `ino` opened with attributes `opened`, its listing not started; `told` is the count of
    /// losses so far (see `durability`).
    pub fn new(ino: u64, opened: Attr, told: u64) -> OpenDir {
        OpenDir {
            ino,
            opened,
            stream: tokio::sync::Mutex::new(DirStream::new(ino, told)),
        }
    }
}

/// An open directory's listing so far, "." and ".." first: the entry at index `i` has offset
/// `i + 1`.
pub struct DirStream {
    pub ino: u64,
    pub entries: Vec<Entry>,
    /// The cursor of the next page, once one was fetched.
    pub next: Option<String>,
    /// Pages fetched since the listing (re)started.
    pub pages: usize,
    pub done: bool,
    /// The last loss this directory was told of (see `durability`).
    pub told: AtomicU64,
}

impl DirStream {
    fn new(ino: u64, told: u64) -> DirStream {
        let mut stream = DirStream {
            ino,
            entries: Vec::new(),
            next: None,
            pages: 0,
            done: false,
            told: AtomicU64::new(told),
        };
        stream.restart();
        stream
    }

    /// Starts the listing over (`rewinddir`): "." and ".." alone, no page fetched.
    pub fn restart(&mut self) {
        let dot = |name: &str, ino| Entry {
            name: name.to_owned(),
            ino,
            kind: Kind::Directory,
            attr: None,
            fetched: true,
        };
        self.entries = vec![dot(".", self.ino), dot("..", UNKNOWN_INO)];
        self.next = None;
        self.pages = 0;
        self.done = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64, kind: Kind) -> Attr {
        Attr {
            ino,
            kind,
            mode: 0o750,
            uid: 1,
            gid: 2,
            nlink: 2,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            rdev: 0,
            generation: 0,
            blocks: 0,
        }
    }

    #[test]
    fn recent_dirs_keep_directories_only_the_newest_and_stay_bounded() {
        let recent = RecentDirs::default();
        recent.note(&attr(7, Kind::File));
        assert_eq!(recent.get(7), None, "a file's attributes are not kept");
        recent.note(&attr(8, Kind::Directory));
        recent.note(&Attr {
            mode: 0o700,
            ..attr(8, Kind::Directory)
        });
        assert_eq!(recent.get(8).map(|a| a.mode), Some(0o700), "the newest");
        for ino in 100..100 + RECENT_DIRS as u64 {
            recent.note(&attr(ino, Kind::Directory));
        }
        assert!(recent.0.lock().len() <= RECENT_DIRS);
        let newest = 99 + RECENT_DIRS as u64;
        assert!(recent.get(newest).is_some(), "the last one noted is kept");
    }
}
