//! File locks through the server, so that two mounts of one namespace see each other's
//! locks: GETLK and SETLK as the kernel hands over fcntl's POSIX record locks, OFD locks and
//! flock(2) (the mount asks for FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS), and their release at
//! a close — the kernel leaves that to the file system: POSIX locks go at each close of the
//! file by their owner (FLUSH names it), flock's and OFD locks at the last close of the open
//! file (RELEASE). The mount remembers which (inode, owner, open file) it locked for, so a
//! close that holds none costs no request.
//!
//! Data under a lock is coherent between mounts as NFS makes it: an unlock sends what was
//! written first (the file's buffered object data), and a lock granted on a file that changed
//! since this mount's last lock of it (the attributes SETLK answers with say so) has the kernel
//! drop the file's cached pages and attributes, so what is read under it comes from the
//! server. Dropping them at every lock halved the rate of lock and unlock round trips.

use mds_client::proto::{Body, FileLock, LockKind, Op};
use tracing::warn;

use crate::attr::Fallible;
use crate::creds::Caller;
use crate::mount::Mount;

/// The lock the kernel asks about (its type `F_RDLCK`, `F_WRLCK` or `F_UNLCK`) as the
/// server's; None for another type.
pub fn lock_of(start: u64, end: u64, typ: i32, pid: u32) -> Option<FileLock> {
    let kind = match typ {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return None,
    };
    Some(FileLock {
        start,
        end,
        kind,
        pid,
    })
}

/// The server's lock type as the kernel's.
pub fn typ_of(kind: LockKind) -> i32 {
    match kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    }
}

/// Most inodes whose attributes at their last lock [`Mount::lock_seen`] keeps; past it, it
/// starts over (a lock then drops the file's cached pages once more).
const LOCK_SEEN_MAX: usize = 4096;

/// The kernel's `OFFSET_MAX`: a lock's end "to the end of the file".
const OFFSET_MAX: u64 = i64::MAX as u64;

/// All of a file, as the server reads any end past the last byte.
const WHOLE_FILE: (u64, u64) = (0, u64::MAX);

impl Mount {
    /// The server's handle number of `fh` if it is an open file of `ino`; 0 for a directory
    /// (the server keeps no handles of directories, and checks read permission instead).
    fn lock_handle(&self, ino: u64, fh: u64) -> u64 {
        self.files
            .lock()
            .get(&fh)
            .filter(|f| f.handle.ino() == ino)
            .map_or(0, |f| f.handle.id())
    }

    /// GETLK: the lock that would keep `owner` from `lock`, or `lock` with kind `Unlock`.
    pub async fn getlk(
        &self,
        caller: Caller,
        (ino, fh, owner): (u64, u64, u64),
        lock: FileLock,
    ) -> Fallible<FileLock> {
        let cred = self.cred(caller);
        let handle = self.lock_handle(ino, fh);
        let op = Op::Getlk {
            ino,
            handle,
            owner,
            lock,
        };
        match self.call(&cred, op, &[]).await? {
            // The kernel takes no end past its OFFSET_MAX (EIO).
            Body::Lock(found) => Ok(FileLock {
                end: found.end.min(OFFSET_MAX),
                ..found
            }),
            other => {
                warn!(ino, ?other, "GETLK answered with something else");
                Err(fuser::Errno::EIO)
            }
        }
    }

    /// SETLK (`wait`: SETLKW): takes, changes or releases `owner`'s lock on `ino`.
    pub async fn setlk(
        &self,
        caller: Caller,
        (ino, fh, owner): (u64, u64, u64),
        lock: FileLock,
        wait: bool,
    ) -> Fallible<()> {
        let cred = self.cred(caller);
        let handle = self.lock_handle(ino, fh);
        if lock.kind == LockKind::Unlock {
            // What was written under the lock reaches the server before another may take it.
            // An unlock is sent all the same if that fails: a close or fsync reports the loss.
            if let Err(e) = self.flush_objects(ino).await {
                warn!(ino, errno = ?e, "flushing before an unlock failed");
            }
        } else {
            // Before it is asked: a close that races the answer must not skip the release.
            self.locked.lock().insert((ino, owner, fh));
        }
        let op = Op::Setlk {
            ino,
            handle,
            owner,
            lock,
            wait,
        };
        let answer = self.call(&cred, op, &[]).await?;
        if lock.kind != LockKind::Unlock {
            // Again: a close by the same owner may have released (and forgotten) its locks
            // while this one was on its way, and this one is held now.
            self.locked.lock().insert((ino, owner, fh));
            self.lock_granted(ino, &answer);
        }
        Ok(())
    }

    /// A lock of `ino` granted, with the server's `answer` (the inode's attributes then):
    /// whoever held it before may have changed the file through another mount, so unless the
    /// file is as it was at this mount's last lock of it (ctime, mtime and size unmoved), what
    /// the kernel and the mount keep of it goes, and reads under the lock ask the server.
    fn lock_granted(&self, ino: u64, answer: &Body) {
        let now = match answer {
            Body::Attr(a) => Some((a.ctime_ns, a.mtime_ns, a.size)),
            _ => None,
        };
        let unchanged = {
            let mut seen = self.lock_seen.lock();
            if seen.len() >= LOCK_SEEN_MAX {
                seen.clear();
            }
            if let Some(now) = now {
                seen.insert(ino, now) == Some(now)
            } else {
                // No attributes to compare: nothing is known to be unchanged.
                seen.remove(&ino);
                false
            }
        };
        if !unchanged {
            self.forget_cached_data(ino);
        }
    }

    /// Whether a close by `owner` of `ino` has locks to release on the server.
    pub fn holds_locks(&self, ino: u64, owner: u64) -> bool {
        self.locked
            .lock()
            .iter()
            .any(|&(i, o, _)| i == ino && o == owner)
    }

    /// FLUSH (each close of the file by `owner`, a process): every lock it holds on `ino`
    /// released, as POSIX has it for any close of the file by the lock's process.
    pub async fn unlock_owner(&self, ino: u64, fh: u64, owner: u64) {
        let had = {
            let mut locked = self.locked.lock();
            let before = locked.len();
            locked.retain(|&(i, o, _)| !(i == ino && o == owner));
            locked.len() != before
        };
        if had {
            self.unlock_all(ino, fh, owner).await;
        }
    }

    /// RELEASE (the last close of an open file): the locks taken through it go — flock's and
    /// OFD locks, whose owner is the open file, and POSIX locks of owners whose FLUSH the
    /// kernel did not send (a process that never closed it: all its closes came first).
    pub async fn unlock_released(&self, ino: u64, fh: u64) {
        let owners: Vec<u64> = {
            let mut locked = self.locked.lock();
            let owners = locked
                .iter()
                .filter(|&&(i, _, f)| i == ino && f == fh)
                .map(|&(_, o, _)| o)
                .collect();
            locked.retain(|&(i, _, f)| !(i == ino && f == fh));
            owners
        };
        for owner in owners {
            self.unlock_all(ino, fh, owner).await;
        }
    }

    /// Every lock `owner` holds on `ino` released on the server. A failure is logged (the
    /// lock goes with the session at the latest).
    async fn unlock_all(&self, ino: u64, fh: u64, owner: u64) {
        if let Err(e) = self.flush_objects(ino).await {
            warn!(ino, errno = ?e, "flushing before a close's unlock failed");
        }
        let lock = FileLock {
            start: WHOLE_FILE.0,
            end: WHOLE_FILE.1,
            kind: LockKind::Unlock,
            pid: 0,
        };
        let cred = self.own_cred().clone();
        let handle = self.lock_handle(ino, fh);
        let op = Op::Setlk {
            ino,
            handle,
            owner,
            lock,
            wait: false,
        };
        if let Err(e) = self.call(&cred, op, &[]).await {
            warn!(ino, owner, errno = ?e, "releasing a closed file's locks failed");
        }
    }
}
