//! The FUSE side: fuser calls these methods on its session thread, one request at a time;
//! each copies what it needs from the request, hands it with its reply object to a task on
//! the tokio runtime and returns at once, so the session thread goes back to reading
//! `/dev/fuse` while the server answers. Many processes thus keep many requests in flight on
//! the mount's pipelined connection (one per shard in a cluster), and each reply is sent from whichever worker the
//! server's answer reaches. `init` sets up the kernel side: readdirplus, parallel directory
//! operations, writes of up to 1 MiB, and suid/sgid cleared by the server.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents,
    PollFlags, PollNotifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen,
    ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use mds_client::proto::{Attr, MAX_IO};
use tokio::runtime::Handle as Runtime;
use tracing::debug;

use crate::attr::{self, Fallible, file_attr, file_type};
use crate::creds::Caller;
use crate::locks;
use crate::mount::Mount;
use crate::namespace::{STATFS_BLOCK, SetRequest};

/// The largest WRITE the kernel sends: 1 MiB (FUSE_MAX_PAGES' 256 pages). A write to the server
/// goes in pieces of `MAX_IO`; one to the object store is copied into the file's buffer in one
/// piece, and per FUSE request the mount's cost is fixed (~16 requests a MiB at 64 KiB).
const MAX_WRITE: u32 = 1 << 20;

/// Background requests (readahead, releases) the kernel keeps in flight: its default of 12
/// would leave a pipelined server idle.
const MAX_BACKGROUND: u16 = 64;

pub struct MdsFs {
    runtime: Runtime,
    mount: Arc<Mount>,
}

impl MdsFs {
    pub fn new(runtime: Runtime, mount: Arc<Mount>) -> MdsFs {
        MdsFs { runtime, mount }
    }

    /// Runs `work` with the mount on the runtime; the FUSE thread does not wait for it.
    fn spawn<F, Fut>(&self, work: F)
    where
        F: FnOnce(Arc<Mount>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(work(self.mount.clone()));
    }
}

fn entry(reply: ReplyEntry, mount: &Mount, answer: Fallible<Attr>) {
    match answer {
        Ok(mut a) => {
            mount.attr_seen(&mut a);
            mount.recent_dirs.note(&a);
            reply.entry_with_ttls(
                &mount.timeouts.attr,
                &mount.timeouts.entry,
                &file_attr(&a),
                Generation(a.generation),
            );
        }
        Err(e) => reply.error(e),
    }
}

fn attr_reply(reply: ReplyAttr, mount: &Mount, answer: Fallible<Attr>) {
    match answer {
        Ok(mut a) => {
            mount.attr_seen(&mut a);
            mount.recent_dirs.note(&a);
            reply.attr(&mount.timeouts.attr, &file_attr(&a));
        }
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, answer: Fallible<()>) {
    match answer {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// getxattr(2) and listxattr(2) with a buffer of `size`: 0 asks for the size alone, and a
/// value that does not fit is ERANGE.
fn xattr_reply(reply: ReplyXattr, size: u32, answer: Fallible<Vec<u8>>) {
    match answer {
        Ok(value) if size == 0 => reply.size(value.len() as u32),
        Ok(value) if value.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(value) => reply.data(&value),
        Err(e) => reply.error(e),
    }
}

/// A name the server can take, or the reply answered with why not.
macro_rules! name_or_reply {
    ($name:expr, $reply:expr) => {
        match attr::name($name) {
            Ok(name) => name,
            Err(e) => return $reply.error(e),
        }
    };
}

/// The attributes READDIRPLUS gives "." and "..": the kernel takes nothing from them.
fn dot_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: MAX_IO as u32,
        flags: 0,
    }
}

impl Filesystem for MdsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Not FUSE_HANDLE_KILLPRIV_V2 nor FUSE_CREATE_SUPP_GROUP (fuser 0.18 drops what they
        // add to requests), nor FUSE_WRITEBACK_CACHE (writes must reach the server before
        // write(2) returns, for other clients and for fsync), nor FUSE_ATOMIC_O_TRUNC: with it the kernel
        // lets OPEN truncate before it checks that the file is not a running program's text
        // (ETXTBSY), which then dies of SIGBUS (pjdfstest open::etxtbsy); without it, O_TRUNC
        // is that check, then a SETATTR of size 0.
        let wanted = [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            // The server clears suid/sgid on write, truncate and chown; without this the
            // kernel would send a chmod as the writer, which only the owner may make.
            InitFlags::FUSE_HANDLE_KILLPRIV,
            // A symlink's target never changes: the kernel may keep it.
            InitFlags::FUSE_CACHE_SYMLINKS,
            // Cached pages go when another client's change shows in the mtime or size.
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_MAX_PAGES,
            // Creates carry the mode and the umask apart: a parent's default ACL replaces
            // the umask, and only the server knows whether it has one (`mode_with_umask`).
            InitFlags::FUSE_DONT_MASK,
            // File handles that outlive the kernel's cache (NFS re-export, open_by_handle_at):
            // the kernel finds an inode by its number with a LOOKUP of "." in it, and a
            // directory's parent with a LOOKUP of "..", which the server answers.
            InitFlags::FUSE_EXPORT_SUPPORT,
            // fcntl and flock locks go to the server (`locks.rs`), so that every mount of the
            // namespace sees them; without these the kernel keeps them, each mount its own.
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
        ];
        // Under `default_permissions` the kernel enforces ACLs (it reads them with GETXATTR
        // and keeps them with the inode); keeping them in step with the mode and inheriting
        // default ACLs is the server's. Without it the server checks everything, ACLs
        // included, and ACL xattrs pass through as any other: asking for FUSE_POSIX_ACL then
        // would turn the kernel's own checks on, which after every change in a directory ask
        // its attributes again — one GETATTR more for each create and remove
        // (`mount/examples/fuse_ceiling.rs` counts them).
        let posix_acl = if self.mount.kernel_checks {
            InitFlags::FUSE_POSIX_ACL
        } else {
            InitFlags::empty()
        };
        for capability in wanted.into_iter().chain([posix_acl]) {
            if let Err(missing) = config.add_capabilities(capability) {
                debug!(?missing, "the kernel does not offer this capability");
            }
        }
        if let Err(nearest) = config.set_max_write(MAX_WRITE) {
            config.set_max_write(nearest).ok();
        }
        config.set_max_background(MAX_BACKGROUND).ok();
        config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4).ok();
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move {
            let answer = m.lookup(caller, parent.0, name).await;
            entry(reply, &m, answer);
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            let answer = m.getattr(caller, ino.0).await;
            attr_reply(reply, &m, answer);
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let caller = Caller::of(req);
        let set = SetRequest {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh: fh.map(|f| f.0),
        };
        self.spawn(move |m| async move {
            let answer = m.setattr(caller, ino.0, set).await;
            attr_reply(reply, &m, answer);
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            match m.readlink(caller, ino.0).await {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move {
            let answer = m.mknod(caller, parent.0, name, (mode, umask), rdev).await;
            entry(reply, &m, answer);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move {
            let answer = m.mkdir(caller, parent.0, name, (mode, umask)).await;
            entry(reply, &m, answer);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move { empty(reply, m.unlink(caller, parent.0, name).await) });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move { empty(reply, m.rmdir(caller, parent.0, name).await) });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(link_name, reply));
        let target = target.as_os_str().as_bytes().to_vec();
        self.spawn(move |m| async move {
            let answer = m.symlink(caller, parent.0, name, target).await;
            entry(reply, &m, answer);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let caller = Caller::of(req);
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        self.spawn(move |m| async move {
            let src = (parent.0, name);
            let dst = (newparent.0, newname);
            empty(reply, m.rename(caller, src, dst, flags).await);
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(newname, reply));
        self.spawn(move |m| async move {
            let answer = m.link(caller, ino.0, newparent.0, name).await;
            entry(reply, &m, answer);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            match m.open(caller, ino.0, flags.0).await {
                Ok((handle, _)) => {
                    reply.opened(FileHandle(crate::files::fh_of(handle)), FopenFlags::empty());
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let caller = Caller::of(req);
        // A sequential reader's READ that the blocks fetched ahead hold: answered here, with
        // no hand-off (the runtime entered for the blocks it asks ahead in turn).
        let answer = {
            let _in = self.runtime.enter();
            self.mount.read_at_once(fh.0, offset, size)
        };
        match answer {
            Some(Ok(data)) => return reply.data(&data),
            Some(Err(e)) => return reply.error(e),
            None => {}
        }
        self.spawn(move |m| async move {
            match m.read(caller, fh.0, offset, size).await {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let caller = Caller::of(req);
        // Pages the kernel writes back (a shared writable map's), through any handle open to
        // write: never appended, whatever that handle was opened with.
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        // Into a file in objects: copied once, from the request into the file's buffer, and
        // answered here (a hand-off to the runtime per MiB cost more than the copy).
        let write = (offset, data);
        match self
            .mount
            .write_at_once(caller, fh.0, write, flags.0, from_cache)
        {
            Some(Ok((written, upload))) => {
                if let Some(ino) = upload {
                    self.spawn(move |m| async move { m.upload_behind(ino).await });
                }
                return reply.written(written);
            }
            Some(Err(e)) => return reply.error(e),
            None => {}
        }
        let data = data.to_vec();
        self.spawn(move |m| async move {
            let write = (offset, data.as_slice());
            match m.write(caller, fh.0, write, flags.0, from_cache).await {
                Ok(written) => reply.written(written),
                Err(e) => reply.error(e),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if self.mount.holds_locks(ino.0, lock_owner.0) {
            // A close drops the closer's POSIX locks on the file, before close(2) returns.
            return self.spawn(move |m| async move {
                m.unlock_owner(ino.0, fh.0, lock_owner.0).await;
                empty(reply, m.flush(fh.0).await);
            });
        }
        // A close of a file on the server waits for nothing: answered here (a create's four
        // requests are LOOKUP, CREATE, FLUSH and RELEASE).
        if let Some(answer) = self.mount.flush_at_once(fh.0) {
            return empty(reply, answer);
        }
        self.spawn(move |m| async move { empty(reply, m.flush(fh.0).await) });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The locks taken through this open file go with it: flock's (the kernel's
        // `lock_owner` says so) and OFD locks (it does not); the mount knows both.
        self.spawn(move |m| async move {
            m.unlock_released(ino.0, fh.0).await;
            m.release(fh.0).await;
            reply.ok();
        });
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let Some(lock) = locks::lock_of(start, end, typ, pid) else {
            return reply.error(Errno::EINVAL);
        };
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            match m.getlk(caller, (ino.0, fh.0, lock_owner.0), lock).await {
                Ok(l) => reply.locked(l.start, l.end, locks::typ_of(l.kind), l.pid),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let Some(lock) = locks::lock_of(start, end, typ, pid) else {
            return reply.error(Errno::EINVAL);
        };
        let caller = Caller::of(req);
        let asked = (ino.0, fh.0, lock_owner.0);
        self.spawn(move |m| async move { empty(reply, m.setlk(caller, asked, lock, sleep).await) });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |m| async move { empty(reply, m.fsync_file(fh.0).await) });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            match m.opendir(caller, ino.0).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            let listed = m
                .readdir(caller, fh.0, offset, false, |e, offset| {
                    reply.add(INodeNo(e.ino), offset, file_type(e.kind), &e.name)
                })
                .await;
            match listed {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            // The entry and its attributes are kept as long as the shorter of the two timeouts
            // allows (fuser gives READDIRPLUS one for both).
            let ttl = m.timeouts.attr.min(m.timeouts.entry);
            let listed = m
                .readdir(caller, fh.0, offset, true, |e, offset| {
                    let (attrs, generation) = match &e.attr {
                        Some(a) => (file_attr(a), a.generation),
                        None => (dot_attr(e.ino), 0),
                    };
                    let generation = Generation(generation);
                    reply.add(INodeNo(e.ino), offset, &e.name, &ttl, &attrs, generation)
                })
                .await;
            match listed {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.mount.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |m| async move { empty(reply, m.fsyncdir(fh.0).await) });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(move |m| async move {
            match m.statfs().await {
                Ok(s) => reply.statfs(
                    s.blocks,
                    s.bfree,
                    s.bavail,
                    s.files,
                    s.ffree,
                    STATFS_BLOCK,
                    mds_client::proto::MAX_NAME as u32,
                    STATFS_BLOCK,
                ),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        let value = value.to_vec();
        self.spawn(move |m| async move {
            empty(reply, m.setxattr(caller, ino.0, name, value, flags).await);
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move {
            xattr_reply(reply, size, m.getxattr(caller, ino.0, name).await);
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            xattr_reply(reply, size, m.listxattr(caller, ino.0).await);
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move { empty(reply, m.removexattr(caller, ino.0, name).await) });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let caller = Caller::of(req);
        self.spawn(
            move |m| async move { empty(reply, m.access(caller, ino.0, mask.bits()).await) },
        );
    }

    // What the mount leaves to the kernel, answered as fuser's defaults answer but without
    // their warning on each call: no ioctls (ENOTTY, as isatty(3) expects of a file); the
    // rest ENOSYS, after which the kernel stops asking and does it itself — poll as always
    // ready, lseek (SEEK_DATA and SEEK_HOLE too) by the file size, copy_file_range by reads
    // and writes, and fallocate refused with EOPNOTSUPP (posix_fallocate(3) then writes).

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let caller = Caller::of(req);
        self.spawn(move |m| async move {
            empty(
                reply,
                m.fallocate(caller, fh.0, offset.saturating_add(length), mode)
                    .await,
            );
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.spawn(move |m| async move {
            match m.seek_data(fh.0, offset, whence).await {
                Ok(at) => reply.offset(at),
                Err(e) => reply.error(e),
            }
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (caller, name) = (Caller::of(req), name_or_reply!(name, reply));
        self.spawn(move |m| async move {
            match m.create(caller, parent.0, name, (mode, umask), flags).await {
                // One timeout for the entry and its attributes: the shorter.
                Ok((handle, a)) => reply.created(
                    &m.timeouts.attr.min(m.timeouts.entry),
                    &file_attr(&a),
                    Generation(a.generation),
                    FileHandle(crate::files::fh_of(handle)),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(e),
            }
        });
    }
}
