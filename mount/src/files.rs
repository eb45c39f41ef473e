//! Open files: OPEN and CREATE give the kernel the server's handle number as the FUSE file
//! handle (with the file's shard in its top bits, as in an inode number: each shard's session
//! numbers its handles apart); READ and WRITE go through it in pieces of at most `MAX_IO` (the mount asks the
//! kernel for writes of that size, so a WRITE is one request; a READ of a larger readahead is
//! several, in flight together); FLUSH and FSYNC report a change a server restart lost;
//! RELEASE closes the handle. A file written through a descriptor opened `O_SYNC` or `O_DSYNC`
//! is durable when write(2) returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;
use fuser::Errno;
use mds_client::Handle;
use mds_client::proto::{
    Attr, Body, Cred, Errno as ProtoErrno, MAX_IO, Op, OpenFlags, SHARD_SHIFT, SetAttr,
    mode_with_umask,
};
use tracing::warn;

use crate::attr::{Fallible, attr, errno};
use crate::creds::Caller;
use crate::mount::Mount;
use crate::open::OpenFile;

/// How many times CREATE is tried when its name keeps coming and going between CREATE and
/// LOOKUP (another client creating and removing it).
const CREATE_TRIES: usize = 4;

impl Mount {
    /// OPEN of `ino` with open(2)'s `flags` (the kernel sends `O_TRUNC` apart, as a SETATTR
    /// after it).
    pub async fn open(&self, caller: Caller, ino: u64, flags: i32) -> Fallible<(Handle, Attr)> {
        let cred = self.cred(caller);
        self.open_as(&cred, ino, open_flags(flags)).await
    }

    async fn open_as(&self, cred: &Cred, ino: u64, flags: OpenFlags) -> Fallible<(Handle, Attr)> {
        let (shard, conn) = self.conn_of(ino).await?;
        // O_TRUNC cuts what this mount keeps unflushed too (the kernel sends it apart, as a
        // SETATTR, but the flag is honoured either way).
        let _no_flush = if flags.truncate {
            self.resize_objects(ino, 0).await?
        } else {
            None
        };
        let (handle, reply) = conn.open(cred, ino, flags).await?;
        self.durability().note(shard, &reply, &[ino]);
        let opened = attr(reply.result.map_err(errno)?)?;
        self.opened_objects(ino, opened.size);
        let file = OpenFile {
            handle,
            told: AtomicU64::new(self.durability().losses()),
            mode: AtomicU32::new(opened.mode & 0o7777),
        };
        self.files.lock().insert(fh_of(handle), Arc::new(file));
        Ok((handle, opened))
    }

    /// CREATE, then OPEN. Without `O_EXCL` a name that exists is opened instead (open(2)'s
    /// `O_CREAT` alone), found by LOOKUP — and created after all if it went meanwhile.
    pub async fn create(
        &self,
        caller: Caller,
        parent: u64,
        name: String,
        (mode, umask): (u32, u32),
        flags: i32,
    ) -> Fallible<(Handle, Attr)> {
        let cred = self.cred(caller);
        let access = open_flags(flags);
        let mode = mode & 0o7777;
        let lent = owner_needs(&cred, access) & !(mode & !umask);
        for _ in 0..CREATE_TRIES {
            let op = Op::Create {
                parent,
                name: name.clone(),
                // The umask spares the bits lent: they are taken back below.
                mode: mode_with_umask(mode | lent, umask & !lent),
            };
            match self.call(&cred, op, &[]).await {
                Ok(body) => {
                    let created = attr(body)?;
                    // A new file is empty: nothing to cut.
                    let flags = OpenFlags {
                        truncate: false,
                        ..access
                    };
                    let opened = self.open_as(&cred, created.ino, flags).await?;
                    return self.take_back(&cred, opened, lent).await;
                }
                Err(e) if e.code() == libc::EEXIST && flags & libc::O_EXCL == 0 => {
                    match self.lookup_as(&cred, parent, name.clone()).await {
                        Ok(found) => return self.open_as(&cred, found.ino, access).await,
                        Err(e) if e.code() == libc::ENOENT => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(Errno::EIO)
    }

    /// open(2) with `O_CREAT` of a new file may open it for what its own mode denies (a file
    /// made 0444 and opened to write), as Linux skips the permission check for the file the
    /// call created; the server's OPEN checks the mode. So such a file is created with the
    /// owner's bits it needs (`lent`), opened, and then given them back.
    async fn take_back(
        &self,
        cred: &Cred,
        (handle, opened): (Handle, Attr),
        lent: u32,
    ) -> Fallible<(Handle, Attr)> {
        if lent == 0 {
            return Ok((handle, opened));
        }
        let set = Op::Setattr {
            ino: opened.ino,
            attr: SetAttr {
                mode: Some(opened.mode & 0o7777 & !lent),
                ..SetAttr::default()
            },
        };
        match self.call(cred, set, &[]).await.and_then(attr) {
            Ok(narrowed) => Ok((handle, narrowed)),
            Err(e) => {
                // create(2) fails, so the kernel will never RELEASE the handle: close it here.
                self.release(fh_of(handle)).await;
                Err(e)
            }
        }
    }

    /// READ of up to `size` bytes at `offset`: the pieces in flight together, joined up to the
    /// first short one (the end of the file).
    pub async fn read(&self, caller: Caller, fh: u64, offset: u64, size: u32) -> Fallible<Bytes> {
        let handle = self.file(fh)?.handle;
        let cred = self.cred(caller);
        if let Some(data) = self.read_objects(&cred, handle, offset, size).await? {
            return Ok(data);
        }
        match self.read_inline(&cred, handle, offset, size).await {
            Err(InlineRefused::InObjects) => {
                self.found_in_objects(handle.ino()).await?;
                let data = self.read_objects(&cred, handle, offset, size).await?;
                data.ok_or(Errno::EIO)
            }
            Err(InlineRefused::Errno(e)) => Err(e),
            Ok(data) => Ok(Bytes::from(data)),
        }
    }

    /// [`Mount::read`] on the FUSE thread, when the bytes are in hand
    /// ([`Mount::read_objects_kept`]); None: read them the way that may wait.
    pub fn read_at_once(&self, fh: u64, offset: u64, size: u32) -> Option<Fallible<Bytes>> {
        let file = match self.file(fh) {
            Ok(file) => file,
            Err(e) => return Some(Err(e)),
        };
        self.read_objects_kept(file.handle.ino(), offset, size)
            .map(Ok)
    }

    /// READ from the server, for a file whose data is there.
    async fn read_inline(
        &self,
        cred: &Cred,
        handle: Handle,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, InlineRefused> {
        let (_, conn) = self.conn_of(handle.ino()).await?;
        let pieces = (0..size.div_ceil(MAX_IO as u32)).map(|i| {
            let at = offset + u64::from(i) * MAX_IO as u64;
            let len = (size - i * MAX_IO as u32).min(MAX_IO as u32);
            let op = handle.read_op(at, len);
            let conn = &conn;
            async move {
                let reply = conn.call_on(cred, handle, op).await?;
                match reply.result {
                    Ok(Body::Data(data)) => Ok((data.0, len)),
                    Err(ProtoErrno::EMEDIUMTYPE) => Err(InlineRefused::InObjects),
                    Err(e) => Err(InlineRefused::Errno(errno(e))),
                    Ok(_) => Err(InlineRefused::Errno(Errno::EIO)),
                }
            }
        });
        let mut data = Vec::with_capacity(size as usize);
        for piece in futures::future::join_all(pieces).await {
            let (bytes, asked) = piece?;
            let short = bytes.len() < asked as usize;
            data.extend_from_slice(&bytes);
            if short {
                break;
            }
        }
        Ok(data)
    }

    /// WRITE of `data` at `offset`, or at the end of the file for a write(2) through a
    /// descriptor that is `O_APPEND` now (`flags`, the descriptor's), unless the kernel is
    /// writing back cached pages (`from_cache`); with `O_SYNC` or `O_DSYNC` durable before it
    /// returns.
    pub async fn write(
        self: &Arc<Self>,
        caller: Caller,
        fh: u64,
        (offset, data): (u64, &[u8]),
        flags: i32,
        from_cache: bool,
    ) -> Fallible<u32> {
        let file = self.file(fh)?;
        let cred = self.cred(caller);
        let ino = file.handle.ino();
        let at = write_offset(offset, flags, from_cache);
        let inline = self.writing_inline().await;
        if self.writes_to_objects(ino, at, data.len()) {
            drop(inline);
            self.write_objects(&cred, file.handle, at, data).await?;
        } else {
            let written = self.write_inline(&cred, &file, at, data).await;
            drop(inline);
            match written {
                Ok(()) => {}
                // Past the cap (EFBIG) or moved by another mount (EMEDIUMTYPE): in objects.
                // A piece of it may be on the server already: written again, the same bytes.
                Err(InlineRefused::InObjects) if self.objects.is_some() => {
                    self.write_objects(&cred, file.handle, at, data).await?;
                }
                Err(InlineRefused::InObjects) => return Err(Errno::EFBIG),
                Err(InlineRefused::Errno(e)) => return Err(e),
            }
        }
        if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            self.flush_objects(ino).await?;
            self.fsync(ino, &file.told).await?;
        }
        Ok(data.len() as u32)
    }

    /// [`Mount::write`] on the FUSE thread, for a write(2) into a file this mount keeps for
    /// the object store (`write_objects_now`): Some(Ok((written, Some(ino)))) when the file's
    /// writes were sealed and [`Mount::upload_behind`] of `ino` is to run. None when the write has to go the
    /// way that may wait — a file on the server, `O_SYNC`, uploads behind.
    pub fn write_at_once(
        &self,
        caller: Caller,
        fh: u64,
        (offset, data): (u64, &[u8]),
        flags: i32,
        from_cache: bool,
    ) -> Option<Fallible<(u32, Option<u64>)>> {
        if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            return None;
        }
        let file = match self.file(fh) {
            Ok(file) => file,
            Err(e) => return Some(Err(e)),
        };
        if !self.has_objects_file(file.handle.ino()) {
            return None;
        }
        let at = write_offset(offset, flags, from_cache);
        let cred = self.cred(caller);
        let sealed = self.write_objects_now(&cred, file.handle, at, data)?;
        let upload = |sealed: bool| sealed.then_some(file.handle.ino());
        Some(sealed.map(|sealed| (data.len() as u32, upload(sealed))))
    }

    /// WRITE to the server, for a file whose data is there: InObjects when the server says
    /// it belongs in objects (EFBIG past the cap, EMEDIUMTYPE moved there).
    async fn write_inline(
        &self,
        cred: &Cred,
        file: &OpenFile,
        mut at: u64,
        data: &[u8],
    ) -> Result<(), InlineRefused> {
        let ino = file.handle.ino();
        let (shard, conn) = self.conn_of(ino).await?;
        for piece in data.chunks(MAX_IO) {
            let op = file.handle.write_op(at, piece.to_vec());
            let reply = conn.call_on(cred, file.handle, op).await?;
            self.durability().note(shard, &reply, &[ino]);
            // A write by anyone but root clears set-ID bits on the server; the kernel, which
            // left that to the server (FUSE_HANDLE_KILLPRIV), would go on using the mode it
            // keeps — for exec too — until its attribute timeout. Told before write(2)
            // returns.
            match reply.result {
                Ok(Body::Attr(after))
                    if file.mode.swap(after.mode & 0o7777, Ordering::Relaxed)
                        != after.mode & 0o7777 =>
                {
                    self.forget_attributes(ino);
                }
                Ok(_) => {}
                Err(ProtoErrno::EFBIG | ProtoErrno::EMEDIUMTYPE) => {
                    return Err(InlineRefused::InObjects);
                }
                Err(e) => return Err(InlineRefused::Errno(errno(e))),
            }
            at = at.saturating_add(piece.len() as u64);
        }
        Ok(())
    }

    /// fallocate(2): mode 0 makes the file at least `end` bytes long (a hole: neither the
    /// server nor an object store reserves space, so a later write may still find the store
    /// full), `FALLOC_FL_KEEP_SIZE` changes nothing; the other modes (punching, zeroing,
    /// collapsing, inserting ranges) are EOPNOTSUPP.
    pub async fn fallocate(&self, caller: Caller, fh: u64, end: u64, mode: i32) -> Fallible<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let file = self.file(fh)?;
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Ok(());
        }
        let ino = file.handle.ino();
        let now = self.getattr(caller, ino).await?;
        if end <= self.size_seen(ino, now.size) {
            return Ok(());
        }
        let grow = crate::namespace::SetRequest {
            size: Some(end),
            fh: Some(fh),
            ..crate::namespace::SetRequest::default()
        };
        self.setattr(caller, ino, grow).await.map(drop)
    }

    /// FLUSH (each close(2)): writes to a file in objects are uploaded and placed; a change of
    /// this file that a server restart lost is reported here.
    pub async fn flush(&self, fh: u64) -> Fallible<()> {
        let file = self.file(fh)?;
        self.flush_objects(file.handle.ino()).await?;
        self.losses_untold(&file)
    }

    /// FLUSH of a file with no data on its way to the object store (every close(2) of a file
    /// on the server): nothing to wait for, so its answer is known at once and the FUSE thread
    /// gives it without a hand-off to the runtime. None if the flush has uploads to do.
    pub fn flush_at_once(&self, fh: u64) -> Option<Fallible<()>> {
        let file = match self.file(fh) {
            Ok(file) => file,
            Err(e) => return Some(Err(e)),
        };
        if self.has_objects_file(file.handle.ino()) {
            return None;
        }
        Some(self.losses_untold(&file))
    }

    /// EIO, once, if a change to the file was lost (a server restart took it back) since
    /// this descriptor was last told.
    fn losses_untold(&self, file: &OpenFile) -> Fallible<()> {
        match self
            .durability()
            .lost_since(file.handle.ino(), file.told.load(Ordering::Relaxed))
        {
            Some(loss) => {
                file.told.fetch_max(loss, Ordering::Relaxed);
                Err(Errno::EIO)
            }
            None => Ok(()),
        }
    }

    pub async fn fsync_file(&self, fh: u64) -> Fallible<()> {
        let file = self.file(fh)?;
        self.flush_objects(file.handle.ino()).await?;
        self.fsync(file.handle.ino(), &file.told).await
    }

    /// RELEASE: the last close of an open file. Its answer goes nowhere (close(2) has
    /// returned), so a failure is only logged.
    pub async fn release(&self, fh: u64) {
        let Some(ino) = self.files.lock().get(&fh).map(|f| f.handle.ino()) else {
            return;
        };
        // What close(2) did not flush (a write-back of mapped pages after it): while the
        // handle the writes went through is still open.
        if let Err(e) = self.flush_objects(ino).await {
            warn!(ino, handle = fh, error = ?e, "flush at RELEASE failed");
        }
        let Some(file) = self.files.lock().remove(&fh) else {
            return;
        };
        self.closed_objects(ino);
        let Ok((shard, conn)) = self.conn_of(ino).await else {
            return;
        };
        // Not answered at all is logged by the connection.
        if let Ok(reply) = conn.release(file.handle).await {
            self.durability().note(shard, &reply, &[ino]);
            if let Err(e) = reply.result {
                warn!(ino, handle = fh, error = %e, "RELEASE refused");
            }
        }
    }

    fn file(&self, fh: u64) -> Fallible<Arc<OpenFile>> {
        self.files.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }
}

/// Why a READ or WRITE to the server did not do it.
enum InlineRefused {
    /// The file's data is in (or must move to) the object store.
    InObjects,
    Errno(Errno),
}

impl From<Errno> for InlineRefused {
    fn from(e: Errno) -> InlineRefused {
        InlineRefused::Errno(e)
    }
}

/// The FUSE file handle of `handle`: its number with its file's shard above it. A session
/// numbers its handles from 1 upward, far below the shard's bits.
pub fn fh_of(handle: Handle) -> u64 {
    let shard_bits = handle.ino() >> SHARD_SHIFT << SHARD_SHIFT;
    debug_assert_eq!(handle.id() & shard_bits, 0);
    shard_bits | handle.id()
}

/// The kernel's `__FMODE_EXEC`, set in the flags of the OPEN that execve(2) makes (Linux's
/// `do_open_execat`); no open(2) flag has this bit.
const FMODE_EXEC: i32 = 0x20;

/// open(2)'s flags as OPEN takes them. Never `append`: the server would append every WRITE
/// through such a handle, and the kernel also writes back pages of shared writable maps
/// through it (FUSE_WRITE_CACHE, with any handle open to write) — those must land where they
/// were mapped. Each appending write(2) is sent to the end instead ([`write_offset`]), which
/// also follows `fcntl(F_SETFL)` turning `O_APPEND` on or off.
fn open_flags(flags: i32) -> OpenFlags {
    let access = flags & libc::O_ACCMODE;
    OpenFlags {
        read: access == libc::O_RDONLY || access == libc::O_RDWR,
        write: access == libc::O_WRONLY || access == libc::O_RDWR,
        truncate: flags & libc::O_TRUNC != 0,
        append: false,
        exec: flags & FMODE_EXEC != 0,
    }
}

/// Where a WRITE goes: `offset`, or `u64::MAX` — the server's "at the end of the file as it
/// is", which a replay after a restart appends again — for a write(2) through a descriptor
/// whose flags (`flags`) hold `O_APPEND`. The kernel's own offset for those is the size it
/// knows, which another client may have changed. A write-back of cached pages
/// (`from_cache`) carries no descriptor's flags and always goes where its pages are.
fn write_offset(offset: u64, flags: i32, from_cache: bool) -> u64 {
    if flags & libc::O_APPEND != 0 && !from_cache {
        u64::MAX
    } else {
        offset
    }
}

/// The owner's permission bits a new file needs for the OPEN that follows its CREATE
/// (root needs none: the server lets it open anything).
fn owner_needs(cred: &Cred, access: OpenFlags) -> u32 {
    if cred.uid == 0 {
        return 0;
    }
    (if access.read { 0o400 } else { 0 }) | (if access.write { 0o200 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_carry_access_and_truncate_but_never_append() {
        let f = open_flags(libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT);
        assert_eq!(
            (f.read, f.write, f.truncate, f.append),
            (false, true, true, false)
        );
        // Appending is each write's (`write_offset`), not the handle's.
        let f = open_flags(libc::O_RDWR | libc::O_APPEND);
        assert_eq!(
            (f.read, f.write, f.truncate, f.append),
            (true, true, false, false)
        );
        let f = open_flags(libc::O_RDONLY);
        assert_eq!((f.read, f.write, f.exec), (true, false, false));
        // execve's OPEN: read-only with __FMODE_EXEC, a bit no open(2) flag uses.
        let f = open_flags(libc::O_RDONLY | FMODE_EXEC);
        assert_eq!((f.read, f.write, f.exec), (true, false, true));
        let every_open_flag = libc::O_ACCMODE
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOCTTY
            | libc::O_TRUNC
            | libc::O_APPEND
            | libc::O_NONBLOCK
            | libc::O_DSYNC
            | libc::O_SYNC
            | libc::O_DIRECT
            | libc::O_DIRECTORY
            | libc::O_NOFOLLOW
            | libc::O_NOATIME
            | libc::O_CLOEXEC
            | libc::O_PATH
            | libc::O_TMPFILE
            | 0o100_000; // the kernel's O_LARGEFILE
        assert_eq!(every_open_flag & FMODE_EXEC, 0);
    }

    #[test]
    fn a_write_through_o_append_goes_to_the_end_but_a_write_back_where_its_pages_are() {
        let append = libc::O_RDWR | libc::O_APPEND;
        assert_eq!(write_offset(4096, append, false), u64::MAX, "write(2)");
        assert_eq!(write_offset(4096, libc::O_RDWR, false), 4096);
        // The pages of a map written back through a handle opened O_APPEND (issue 55).
        assert_eq!(write_offset(0, append, true), 0);
        assert_eq!(write_offset(8192, 0, true), 8192);
    }

    #[test]
    fn a_new_file_gets_the_owner_bits_its_open_needs_unless_root_creates_it() {
        let user = Cred {
            uid: 1000,
            gid: 100,
            groups: vec![],
        };
        let rw = open_flags(libc::O_RDWR);
        assert_eq!(owner_needs(&user, rw), 0o600);
        assert_eq!(owner_needs(&user, open_flags(libc::O_WRONLY)), 0o200);
        assert_eq!(owner_needs(&Cred::default(), rw), 0, "root");
    }
}
