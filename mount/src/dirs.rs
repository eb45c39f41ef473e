//! Open directories. FUSE asks for a directory's entries from a numeric offset (the one the
//! filesystem gave the last entry it returned); the server pages by name (a cursor is the last
//! name of the page before). Each open directory keeps the entries returned so far, "." and
//! ".." first, and the entry at index `i` has offset `i + 1`: any offset the kernel comes back
//! with (a `seekdir` to a `telldir`) names the same entry again, and pages are fetched from the
//! server only as the listing goes past what it holds. An offset of 0 after the first page
//! starts over (`rewinddir`), so a listing sees what changed since. READDIRPLUS also gives
//! each entry's attributes: GETATTRs for the entries about to be returned, in flight together.
//! An open directory also keeps its attributes as they were at OPENDIR: a directory removed
//! (RMDIR, or replaced by a RENAME) while open still answers `fstat` until its last close, as
//! it does on a local disk — with no links — though the server no longer has it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fuser::Errno;
use mds_client::proto::{Attr, Body, Kind, MAX_READDIR, Op};
use tracing::warn;

use crate::attr::{Fallible, attr};
use crate::creds::Caller;
use crate::mount::Mount;
use crate::open::{DirStream, Entry, OpenDir, UNKNOWN_INO};

/// Dir handles are numbered from here up, apart from file handles (the server's numbers,
/// from 1), so a file's SETATTR never takes a directory's handle for its own.
const DIR_HANDLES: u64 = 1 << 63;

/// Attributes fetched at a time for READDIRPLUS: a page-sized reply holds about this many.
const PLUS_BATCH: usize = 32;

impl Mount {
    /// OPENDIR. Without `default_permissions` read permission is checked here, as open(2)
    /// checks it (READDIR would check it only at the first page).
    pub async fn opendir(&self, caller: Caller, ino: u64) -> Fallible<u64> {
        // The kernel checked the permission itself under `default_permissions`; either way
        // the attributes are kept for an fstat after the directory is gone.
        let opened = if !self.kernel_checks {
            self.accessible(caller, ino, libc::R_OK).await?
        } else if let Some(known) = self.recent_dirs.get(ino) {
            known
        } else {
            self.getattr(caller, ino).await?
        };
        if opened.kind != Kind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let fh = DIR_HANDLES | self.next_dir.fetch_add(1, Ordering::Relaxed);
        let dir = OpenDir::new(ino, opened, self.durability().losses());
        self.dirs.lock().insert(fh, Arc::new(dir));
        Ok(fh)
    }

    /// The attributes of `ino`, gone from the server, if this mount still has it open as a
    /// directory: as they were when opened, with no links left (what `fstat` of a removed
    /// directory answers on Linux).
    pub fn removed_but_open(&self, ino: u64) -> Option<Attr> {
        let dirs = self.dirs.lock();
        let open = dirs.values().find(|d| d.ino == ino)?;
        Some(Attr {
            nlink: 0,
            ..open.opened.clone()
        })
    }

    /// READDIR or READDIRPLUS (`plus`) from `offset`: hands `add` each entry with its offset
    /// until it says the reply is full or the directory ends.
    pub async fn readdir(
        &self,
        caller: Caller,
        fh: u64,
        offset: u64,
        plus: bool,
        mut add: impl FnMut(&Entry, u64) -> bool,
    ) -> Fallible<()> {
        let open = self.dirs.lock().get(&fh).cloned().ok_or(Errno::EBADF)?;
        let mut s = open.stream.lock().await;
        let cred = self.cred(caller);
        if offset == 0 && s.pages > 0 {
            s.restart();
        }
        let mut i = usize::try_from(offset).map_err(|_| Errno::EINVAL)?;
        let mut added = 0;
        loop {
            while i >= s.entries.len() && !s.done {
                match self.fetch_page(&cred, &mut s).await {
                    Ok(()) => {}
                    // What was added is returned; the error comes with the next call.
                    Err(_) if added > 0 => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            if i >= s.entries.len() {
                return Ok(());
            }
            if plus && !s.entries[i].fetched {
                match self.fetch_attrs(&cred, &mut s.entries[i..]).await {
                    Ok(()) => {}
                    // As a page's: what was added is returned, the entries whose attributes
                    // did not come are asked for again by the next call.
                    Err(_) if added > 0 => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            let entry = &s.entries[i];
            i += 1;
            if plus && entry.attr.is_none() && entry.ino != s.ino && entry.ino != UNKNOWN_INO {
                continue; // gone between READDIR and GETATTR
            }
            if add(entry, i as u64) {
                return Ok(());
            }
            added += 1;
        }
    }

    async fn fetch_page(&self, cred: &mds_client::proto::Cred, s: &mut DirStream) -> Fallible<()> {
        let op = Op::Readdir {
            ino: s.ino,
            cursor: s.next.clone(),
            limit: MAX_READDIR,
        };
        let Body::Entries { entries, next } = self.call(cred, op, &[]).await? else {
            return Err(Errno::EIO);
        };
        s.entries.extend(entries.into_iter().map(|e| Entry {
            name: e.name,
            ino: e.ino,
            kind: e.kind,
            attr: None,
            fetched: false,
        }));
        s.done = next.is_none();
        s.next = next;
        s.pages += 1;
        Ok(())
    }

    /// GETATTR for the first [`PLUS_BATCH`] of `entries` not asked yet, in flight together.
    /// An entry whose inode is gone (ENOENT, ESTALE: removed since the page was read) is
    /// left out of the listing; any other failure is returned, and the entries it hit stay
    /// unasked — a listing never drops a live entry because one GETATTR failed.
    async fn fetch_attrs(
        &self,
        cred: &mds_client::proto::Cred,
        entries: &mut [Entry],
    ) -> Fallible<()> {
        let batch: Vec<&mut Entry> = entries
            .iter_mut()
            .filter(|e| !e.fetched)
            .take(PLUS_BATCH)
            .collect();
        let asks = batch.iter().map(|e| {
            let op = Op::Getattr { ino: e.ino };
            async move { self.call(cred, op, &[]).await.and_then(attr) }
        });
        let attrs = futures::future::join_all(asks).await;
        let mut failed = Ok(());
        for (entry, got) in batch.into_iter().zip(attrs) {
            match got {
                Ok(a) => {
                    // READDIRPLUS makes the kernel's entries without a LOOKUP.
                    self.recent_dirs.note(&a);
                    entry.attr = Some(a);
                    entry.fetched = true;
                }
                Err(Errno::ENOENT | Errno::ESTALE) => {
                    entry.attr = None;
                    entry.fetched = true;
                }
                Err(e) => {
                    warn!(ino = entry.ino, name = %entry.name, errno = e.code(), "READDIRPLUS: GETATTR failed");
                    if failed.is_ok() {
                        failed = Err(e);
                    }
                }
            }
        }
        failed
    }

    pub async fn fsyncdir(&self, fh: u64) -> Fallible<()> {
        let open = self.dirs.lock().get(&fh).cloned().ok_or(Errno::EBADF)?;
        let s = open.stream.lock().await;
        self.fsync(s.ino, &s.told).await
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }
}
