//! The ceiling of any FUSE mount on this machine: a file system that keeps its whole namespace
//! in one process's memory and answers every request on fuser's session thread at once — no
//! server, no network, no journal — mounted with the capabilities and timeouts `mdsmount`
//! asks for, so the kernel sends it what it sends `mdsmount`. `bench/vs-moosefs.sh` runs the
//! same workloads on it as on the mounts it compares (`RUN=fuse-ceiling`), and it counts the
//! requests the kernel sends: SIGUSR1 prints the counts since the last SIGUSR1 on one line
//! (`requests LOOKUP=… CREATE=…`) and starts again from zero, so a script finds how many
//! requests of each kind one create, stat or remove costs.
//!
//! `fuse_ceiling [--posix-acl] MOUNTPOINT` serves until unmounted (`fusermount3 -u`).
//! `--posix-acl` asks for `FUSE_POSIX_ACL` as `mdsmount -o default_permissions` does: with it
//! the kernel checks permissions itself and so asks a directory's attributes again after each
//! change in it — what that costs. Regular files hold
//! their bytes in memory; enough of POSIX for the benchmarks (create, stat, remove, mkdir,
//! rmdir, rename, symlinks, readdir, read, write, truncate, chmod, chown and utimes; no
//! permission checks, no extended attributes), not a file system to keep anything in.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

/// `mdsmount`'s default attribute and entry timeouts.
const TTL: Duration = Duration::from_secs(1);

/// Requests by kind since the last report.
type Counts = Arc<Mutex<BTreeMap<&'static str, u64>>>;

struct Node {
    attr: FileAttr,
    parent: u64,
    /// A directory's entries.
    entries: BTreeMap<OsString, u64>,
    /// A regular file's bytes.
    data: Vec<u8>,
}

#[derive(Default)]
struct Tables {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

struct Ceiling {
    tables: Mutex<Tables>,
    counts: Counts,
    posix_acl: bool,
}

fn attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::Now => SystemTime::now(),
        TimeOrNow::SpecificTime(t) => t,
    }
}

impl Ceiling {
    fn count(&self, kind: &'static str) {
        *self.counts.lock().entry(kind).or_default() += 1;
    }

    /// A new inode named `name` in `parent`: its attributes, or why not.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let mut t = self.tables.lock();
        let ino = t.next_ino;
        let dir = t.nodes.get_mut(&parent.0).ok_or(Errno::ENOENT)?;
        if dir.attr.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if dir.entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        dir.entries.insert(name.to_owned(), ino);
        dir.attr.mtime = SystemTime::now();
        dir.attr.ctime = dir.attr.mtime;
        if kind == FileType::Directory {
            dir.attr.nlink += 1;
        }
        let a = attr(ino, kind, (mode & !umask & 0o7777) as u16, req);
        t.next_ino += 1;
        t.nodes.insert(
            ino,
            Node {
                attr: a,
                parent: parent.0,
                entries: BTreeMap::new(),
                data: Vec::new(),
            },
        );
        Ok(a)
    }

    /// Removes `name` from `parent`, a directory (`dir`, which must be empty) or not.
    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut t = self.tables.lock();
        let ino = *t
            .nodes
            .get(&parent.0)
            .and_then(|p| p.entries.get(name))
            .ok_or(Errno::ENOENT)?;
        let node = &t.nodes[&ino];
        match (dir, node.attr.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !node.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        t.nodes.remove(&ino);
        let p = t.nodes.get_mut(&parent.0).expect("the parent is there");
        p.entries.remove(name);
        p.attr.mtime = SystemTime::now();
        p.attr.ctime = p.attr.mtime;
        if dir {
            p.attr.nlink -= 1;
        }
        Ok(())
    }

    fn listed(&self, ino: INodeNo) -> Result<Vec<(u64, OsString, FileAttr)>, Errno> {
        let t = self.tables.lock();
        let dir = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
        let mut out = vec![
            (ino.0, ".".into(), dir.attr),
            (dir.parent, "..".into(), t.nodes[&dir.parent].attr),
        ];
        out.extend(
            dir.entries
                .iter()
                .map(|(name, &i)| (i, name.clone(), t.nodes[&i].attr)),
        );
        Ok(out)
    }
}

impl Filesystem for Ceiling {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // What `mdsmount` asks for (`mount/src/fs.rs`), so the kernel behaves as it does there.
        let posix_acl = if self.posix_acl {
            InitFlags::FUSE_POSIX_ACL
        } else {
            InitFlags::empty()
        };
        for capability in [
            posix_acl,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_HANDLE_KILLPRIV,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_DONT_MASK,
            InitFlags::FUSE_EXPORT_SUPPORT,
        ] {
            config.add_capabilities(capability).ok();
        }
        if let Err(nearest) = config.set_max_write(1 << 20) {
            config.set_max_write(nearest).ok();
        }
        config.set_max_background(64).ok();
        config.set_congestion_threshold(48).ok();
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.count("LOOKUP");
        let t = self.tables.lock();
        let Some(dir) = t.nodes.get(&parent.0) else {
            return reply.error(Errno::ENOENT);
        };
        let ino = match name.as_encoded_bytes() {
            b"." => Some(parent.0),
            b".." => Some(dir.parent),
            _ => dir.entries.get(name).copied(),
        };
        match ino.and_then(|i| t.nodes.get(&i)) {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        // Which kind of inode the kernel asks about says why it asks (a directory's, after a
        // change in it; a file's, for a stat).
        if let Some(n) = self.tables.lock().nodes.get(&ino.0) {
            self.count(if n.attr.kind == FileType::Directory {
                "GETATTR(dir)"
            } else {
                "GETATTR"
            });
            reply.attr(&TTL, &n.attr);
        } else {
            self.count("GETATTR");
            reply.error(Errno::ENOENT);
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.count("SETATTR");
        let mut t = self.tables.lock();
        let Some(n) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(mode) = mode {
            n.attr.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            n.attr.uid = uid;
        }
        if let Some(gid) = gid {
            n.attr.gid = gid;
        }
        if let Some(size) = size {
            n.data.resize(size as usize, 0);
            n.attr.size = size;
            n.attr.mtime = SystemTime::now();
        }
        if let Some(t) = atime {
            n.attr.atime = time(t);
        }
        if let Some(t) = mtime {
            n.attr.mtime = time(t);
        }
        n.attr.ctime = SystemTime::now();
        reply.attr(&TTL, &n.attr);
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
        self.count("MKDIR");
        match self.make(req, parent, name, FileType::Directory, mode, umask) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("UNLINK");
        match self.remove(parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("RMDIR");
        match self.remove(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.count("RENAME");
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let mut t = self.tables.lock();
        let Some(ino) = t.nodes.get(&parent.0).and_then(|p| p.entries.get(name)) else {
            return reply.error(Errno::ENOENT);
        };
        let ino = *ino;
        let replaced = t
            .nodes
            .get(&newparent.0)
            .and_then(|p| p.entries.get(newname));
        if let Some(&old) = replaced {
            if old == ino {
                return reply.ok();
            }
            if !t.nodes[&old].entries.is_empty() {
                return reply.error(Errno::ENOTEMPTY);
            }
            t.nodes.remove(&old);
        }
        t.nodes.get_mut(&parent.0).map(|p| p.entries.remove(name));
        match t.nodes.get_mut(&newparent.0) {
            Some(p) => p.entries.insert(newname.to_owned(), ino),
            None => return reply.error(Errno::ENOENT),
        };
        t.nodes.get_mut(&ino).expect("renamed").parent = newparent.0;
        reply.ok();
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        self.count("SYMLINK");
        match self.make(req, parent, link_name, FileType::Symlink, 0o777, 0) {
            Ok(mut a) => {
                let mut t = self.tables.lock();
                let n = t.nodes.get_mut(&a.ino.0).expect("just made");
                n.data = target.as_os_str().as_encoded_bytes().to_vec();
                n.attr.size = n.data.len() as u64;
                a.size = n.attr.size;
                reply.entry(&TTL, &a, Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.count("READLINK");
        match self.tables.lock().nodes.get(&ino.0) {
            Some(n) if n.attr.kind == FileType::Symlink => reply.data(&n.data),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.count("OPEN");
        if !self.tables.lock().nodes.contains_key(&ino.0) {
            return reply.error(Errno::ENOENT);
        }
        reply.opened(FileHandle(ino.0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.count("READ");
        let t = self.tables.lock();
        let Some(n) = t.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let start = (offset as usize).min(n.data.len());
        let end = (start + size as usize).min(n.data.len());
        reply.data(&n.data[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.count("WRITE");
        let mut t = self.tables.lock();
        let Some(n) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset as usize + data.len();
        if n.data.len() < end {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.attr.size = n.data.len() as u64;
        n.attr.blocks = n.attr.size.div_ceil(512);
        n.attr.mtime = SystemTime::now();
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.count("FLUSH");
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.count("RELEASE");
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("FSYNC");
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.count("OPENDIR");
        reply.opened(FileHandle(ino.0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count("READDIR");
        match self.listed(ino) {
            Ok(entries) => {
                for (i, (e, name, a)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(e), i as u64 + 1, a.kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.count("READDIRPLUS");
        match self.listed(ino) {
            Ok(entries) => {
                for (i, (e, name, a)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(e), i as u64 + 1, &name, &TTL, &a, Generation(0)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count("RELEASEDIR");
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.count("STATFS");
        let files = self.tables.lock().nodes.len() as u64;
        reply.statfs(1 << 30, 1 << 30, 1 << 30, files, 1 << 30, 4096, 255, 4096);
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, r: ReplyXattr) {
        self.count("GETXATTR");
        r.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.count("LISTXATTR");
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.count("ACCESS");
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.count("CREATE");
        match self.make(req, parent, name, FileType::RegularFile, mode, umask) {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(a.ino.0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }
}

/// Prints the counts on each SIGUSR1, and starts them again from zero.
fn report_on_sigusr1(counts: Counts) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut usr1 = runtime.block_on(async {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
    })?;
    std::thread::spawn(move || {
        runtime.block_on(async {
            while usr1.recv().await.is_some() {
                let taken = std::mem::take(&mut *counts.lock());
                let line: Vec<String> = taken.iter().map(|(k, n)| format!("{k}={n}")).collect();
                println!("requests {}", line.join(" "));
            }
        });
    });
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<_> = std::env::args_os().skip(1).collect();
    let posix_acl = args.iter().any(|a| a == "--posix-acl");
    args.retain(|a| a != "--posix-acl");
    let [mountpoint] = &args[..] else {
        bail!("usage: fuse_ceiling [--posix-acl] MOUNTPOINT");
    };
    let mountpoint = PathBuf::from(mountpoint);
    let counts = Counts::default();
    report_on_sigusr1(counts.clone())?;
    let fs = Ceiling {
        tables: Mutex::new(Tables::default()),
        counts,
        posix_acl,
    };
    {
        let mut t = fs.tables.lock();
        // SAFETY: getuid(2) and getgid(2) cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let now = SystemTime::now();
        let root = FileAttr {
            ino: INodeNo(1),
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        t.nodes.insert(
            1,
            Node {
                attr: root,
                parent: 1,
                entries: BTreeMap::new(),
                data: Vec::new(),
            },
        );
        t.next_ino = 2;
    }
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("fuse-ceiling".into()),
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    config.acl = fuser::SessionACL::Owner;
    config.n_threads = Some(1);
    let session = fuser::Session::new(fs, &mountpoint, &config)
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    session.run().context("serving")?;
    Ok(())
}
