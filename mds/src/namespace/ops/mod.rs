//! The namespace operations and their POSIX rules.
//!
//! Each mutation locks its inodes (`Table::lock`, stripe order), re-checks what it read
//! before locking where it had to look an inode up first, changes the in-memory state, takes
//! its transno under the locks, and returns the journal record: full images of every inode it
//! changed and every entry it added or removed, so that replaying records in transno order
//! rebuilds the namespace. Images are built from the in-memory state with
//! `InodeAttr::image` and `Entry::record` (`node.rs`), never by sharing the record types.
//!
//! Commit-on-share: every object an operation observes or builds on is shown to its caller's
//! [`Cx`] (`cx.see(stamp)`), which remembers the newest transno of *another* client's change
//! that is not durable yet; every object a mutation changes gets the caller's stamp. What each
//! operation looks at follows docs/design.md, "The operation table": LOOKUP the entry (or the removal of the name)
//! and the inode; GETATTR, SETATTR and READDIR the inode and, for a directory, its content;
//! CREATE the entry or the name's removal and the parent itself; UNLINK and RMDIR the entry,
//! the inode, and for RMDIR the directory's content; RENAME both entries, both parents and
//! the inodes moved and replaced, and for a directory moved to another parent every directory
//! its "not into its own subtree" check passes on the way up. Creates and removals of
//! *different* names in one directory only write its content stamp, which they do not look
//! at: they do not conflict.
//!
//! An answer that refuses an inode — ESTALE because it is gone, ENOTDIR because it is a file
//! — builds on the change that made it so, and looks at the inode's stamp before refusing:
//! for a removed inode, the stamp its removal left in the table (`Locked::note_removed`),
//! kept until that removal is durable.
//!
//! Permissions (`perm.rs`) are checked where Linux checks them, so the same request gets the
//! same errno: search on the parent before anything about the name (EACCES before ENOENT or
//! EEXIST), write+search on the parent once the name is known to exist (CREATE: EEXIST before
//! EACCES) or not, then the sticky bit (EPERM), then the kinds (EISDIR, ENOTDIR), then
//! emptiness (ENOTEMPTY); RENAME refuses a directory moved into itself (EINVAL) before any of
//! its write checks. A mutation checks under the locks it takes its transno under, so no
//! concurrent chmod can slip between its check and its change.
//!
//! A permission check reads the inode's mode, owner and group: its answer, granted or
//! refused, builds on whoever last changed them (SETATTR, the inode's creation, a move — the
//! changes that write the inode's own stamp). So a check shows `cx` that stamp, and a sticky
//! check the stamp of the entry's inode, whose owner it reads. Without that, a client could be
//! allowed to unlink under another client's chmod that a crash then takes back — with early
//! replies, its replay would then be refused, and a client that did come back would lose an
//! operation because of one that did not. Most operations look at that stamp already (CREATE,
//! READDIR, SETATTR, RENAME); LOOKUP, UNLINK and RMDIR look at it only through their
//! permission checks. Root's checks pass whatever the attributes say, so for root they look
//! at nothing: what root sees of commit-on-share is exactly what it saw before permissions.
//!
//! RENAME, with its walk up the tree, is in `ops/rename.rs`.

use std::sync::atomic::Ordering;

use journal::{EntryName, JournalOp, TxRecord};

use super::acl;
use super::dir::Slot;
use super::node::{DirState, Entries, Entry, FileKind, InodeAttr, Node, Stamp, Xattrs};
use super::perm::{self, READ, SEARCH, WRITE};
use super::table::Locked;
use super::{Caller, Exec, Namespace, now_ns, to_attr};
use mds_proto::{
    Atime, Attr, Body, Cred, DirEntry, Errno, Kind, MAX_FRAME, MAX_READDIR, Op, SetAttr, SetTime,
    check_name,
};

mod acls;
mod data;
mod link;
mod objects;
mod open;
mod remote;
mod rename;
mod xattr;

pub(super) use super::op_lists::RESEND_OPS;

/// READDIR stops adding entries past this many bytes, so a page always fits a frame.
const READDIR_BUDGET: usize = MAX_FRAME / 2;

type OpResult = Result<Exec, Errno>;

/// One operation's caller and what it saw of other clients' uncommitted changes.
struct Cx<'a> {
    caller: &'a Caller<'a>,
    /// The newest transno of another client's change this operation observed or built on
    /// that is not durable yet; 0 if none.
    wait: u64,
}

impl Cx<'_> {
    fn see(&mut self, stamp: &Stamp) {
        let held = stamp.holds(self.caller.client, self.caller.last_committed);
        self.wait = self.wait.max(held);
    }

    /// A stamp for what this operation changes in `transno`, continuing `before`.
    /// An operation's outcome, with what it built on.
    fn finish(&self, result: OpResult) -> Exec {
        let mut exec = result.unwrap_or_else(|e| Exec::Now {
            result: Err(e),
            wait: 0,
        });
        match &mut exec {
            Exec::Now { wait, .. } => *wait = self.wait,
            Exec::Mutation { built_on, .. } => *built_on = self.wait,
        }
        exec
    }

    fn stamp(&self, mut before: Stamp, transno: u64) -> Stamp {
        before.write(self.caller.client, transno);
        before
    }

    /// Whether removed names must be remembered (commit-on-share is on).
    fn keeps_removals(&self) -> bool {
        self.caller.last_committed != u64::MAX
    }
}

/// The inode `ino`, or ESTALE. That answer builds on the inode's removal as any other answer
/// builds on its last change, so `cx` is shown the stamp the removal left.
#[inline]
fn inode<'a>(cx: &mut Cx<'_>, l: &'a Locked<'_>, ino: u64) -> Result<&'a Node, Errno> {
    l.get_or_removed(ino).map_err(|removal| {
        cx.see(&removal);
        Errno::ESTALE
    })
}

/// READ, WRITE and the data tier's requests are of regular files: EISDIR for a directory,
/// EINVAL for anything else.
fn regular(node: &Node) -> Result<(), Errno> {
    match node.attr.kind {
        FileKind::File => Ok(()),
        FileKind::Directory => Err(Errno::EISDIR),
        _ => Err(Errno::EINVAL),
    }
}

#[inline]
fn inode_mut<'a>(cx: &mut Cx<'_>, l: &'a mut Locked<'_>, ino: u64) -> Result<&'a mut Node, Errno> {
    l.get_mut_or_removed(ino).map_err(|removal| {
        cx.see(&removal);
        Errno::ESTALE
    })
}

/// The directory `ino`, or ESTALE, or ENOTDIR. A refusal builds on what the inode is (or
/// was), so `cx` is shown its stamp before it is refused; a directory that passes is looked
/// at only where the operation's own rule says so (LOOKUP does not look at the parent itself).
#[inline]
fn dir<'a>(cx: &mut Cx<'_>, l: &'a Locked<'_>, ino: u64) -> Result<&'a Node, Errno> {
    let node = inode(cx, l, ino)?;
    if node.dir.is_none() {
        cx.see(&node.stamp);
        return Err(Errno::ENOTDIR);
    }
    Ok(node)
}

#[inline]
fn dir_mut<'a>(cx: &mut Cx<'_>, l: &'a mut Locked<'_>, ino: u64) -> Result<&'a mut Node, Errno> {
    let node = inode_mut(cx, l, ino)?;
    if node.dir.is_none() {
        cx.see(&node.stamp);
        return Err(Errno::ENOTDIR);
    }
    Ok(node)
}

/// Permission `want` (a mask of `READ`, `WRITE`, `SEARCH`) on `node`, or EACCES. Shows `cx`
/// the node's stamp unless the caller is root, whose answer does not depend on it.
// On every request's path: inline, it is a few tests; LLVM left it out of line once it
// looked at the ACL (12 instructions a create, counted by bench/cachegrind.sh).
#[allow(clippy::inline_always)]
#[inline(always)]
fn may(cx: &mut Cx<'_>, node: &Node, want: u32) -> Result<(), Errno> {
    let cred = cx.caller.cred;
    if perm::is_root(cred) {
        return Ok(());
    }
    cx.see(&node.stamp);
    perm::check(cred, &node.attr, node.access_acl(), want)
}

/// The mode a new inode of `kind` in `parent` takes, asked for as `mode` (its owner and
/// set-ID bits already settled, `perm::new_inode_owner`), and the ACLs it inherits: where
/// the parent has a default ACL, its permission bits and ACLs from that (`acl::inherit`; a
/// new directory keeps the default ACL too), whatever the umask; else `umask` takes its bits
/// away, where the caller left that to the server (the mount does: `mds_proto::umask_of`).
/// Symbolic links have no ACLs and take no umask. Inline, with the rest out of line: most
/// parents have no attributes, and a create pays one test for all of this (LLVM kept it out
/// of line when merely asked: 27 instructions a create, counted by bench/cachegrind.sh).
#[allow(clippy::inline_always)]
#[inline(always)]
fn inherit_acl(
    parent: &Node,
    kind: FileKind,
    mode: u32,
    umask: Option<u32>,
) -> (u32, Option<Box<Xattrs>>) {
    match parent.default_acl() {
        Some(default) if kind != FileKind::Symlink => inherit_default_acl(default, kind, mode),
        _ if kind == FileKind::Symlink => (mode, None),
        _ => (mode & !umask.unwrap_or(0), None),
    }
}

#[inline(never)]
fn inherit_default_acl(default: &[u8], kind: FileKind, mode: u32) -> (u32, Option<Box<Xattrs>>) {
    let (bits, access) = acl::inherit(default, mode & 0o777);
    let inherited = acls::Inherited {
        access,
        default: kind.is_dir().then(|| default.to_vec()),
    };
    (mode & !0o777 | bits, inherited.into_xattrs())
}

/// Execute permission on the regular file `node`, as execve(2) asks for it: the mode's (or
/// the ACL's) `x` for the caller's class; root only where some class has `x` (Linux's
/// CAP_DAC_OVERRIDE grants execute only so). EACCES otherwise, and for anything but a
/// regular file.
fn may_execute(cx: &mut Cx<'_>, node: &Node) -> Result<(), Errno> {
    cx.see(&node.stamp);
    if node.attr.kind != FileKind::File {
        return Err(Errno::EACCES);
    }
    if perm::is_root(cx.caller.cred) {
        return if node.attr.mode & 0o111 != 0 {
            Ok(())
        } else {
            Err(Errno::EACCES)
        };
    }
    perm::check(cx.caller.cred, &node.attr, node.access_acl(), SEARCH)
}

/// The sticky bit: whether the caller may remove the entry of `dir` naming `victim` (UNLINK,
/// RMDIR, RENAME's source and replaced target), or EPERM. Reads the victim's owner only where
/// the sticky rule can refuse, and shows `cx` its stamp then.
#[inline]
fn may_remove(cx: &mut Cx<'_>, dir: &Node, victim: &Node) -> Result<(), Errno> {
    let cred = cx.caller.cred;
    if !perm::sticky_applies(cred, &dir.attr) {
        return Ok(());
    }
    cx.see(&dir.stamp);
    cx.see(&victim.stamp);
    perm::sticky(cred, &dir.attr, victim.attr.uid)
}

/// The directory `p` loses its entry `name` (`entry`, a directory's if `is_dir`) in
/// `transno`: commit-on-share keeps the removal for what asks after the name, the counts and
/// times follow. Returns the directory's new image, for the journal.
fn lose_entry(
    cx: &mut Cx<'_>,
    p: &mut Node,
    (name, entry, is_dir): (&str, Entry, bool),
    now: i64,
    transno: u64,
) -> journal::Inode {
    change_content(cx, p, transno);
    entries_mut(p).remove(name.as_bytes());
    if cx.keeps_removals() {
        let stamp = cx.stamp(entry.stamp, transno);
        p.note_removed(name.to_owned(), stamp, cx.caller.last_committed);
    }
    p.attr.entries -= 1;
    if is_dir {
        p.attr.nlink -= 1;
    }
    touch(&mut p.attr, now, transno);
    p.attr.image()
}

/// Commit-on-share: the set of entries of the directory `node` changes in `transno`.
fn change_content(cx: &mut Cx<'_>, node: &mut Node, transno: u64) {
    let dir = node.dir_mut();
    dir.content = cx.stamp(dir.content, transno);
}

fn entries_mut(node: &mut Node) -> &mut Entries {
    &mut node.dir_mut().entries
}

fn touch(attr: &mut InodeAttr, now: i64, transno: u64) {
    attr.mtime_ns = now;
    attr.ctime_ns = now;
    attr.transno = transno;
}

impl Namespace {
    /// Executes one operation for `caller` (not CONNECT, AUTHENTICATE, PING, STATFS, SYNC,
    /// SHARD_MAP or SHARD_MAP_WAIT, which dispatch answers itself). New inodes belong to the
    /// caller's credentials.
    /// The result says which of another client's uncommitted changes it built on
    /// (commit-on-share).
    pub fn execute(&self, op: Op, caller: &Caller<'_>) -> Exec {
        let cx = &mut Cx { caller, wait: 0 };
        let result = match op {
            Op::Mkdir { parent, name, mode } => {
                self.create(cx, parent, name, New::of(FileKind::Directory, mode))
            }
            Op::Create { parent, name, mode } => {
                self.create(cx, parent, name, New::of(FileKind::File, mode))
            }
            Op::Mknod {
                parent,
                name,
                kind,
                mode,
                rdev,
            } => self.mknod(cx, parent, name, kind, mode, rdev),
            Op::Symlink {
                parent,
                name,
                target,
            } => self.symlink(cx, parent, name, target.0),
            Op::Link { ino, parent, name } => self.link(cx, ino, parent, name),
            Op::Readlink { ino } => self.readlink(cx, ino),
            Op::Lookup { parent, name } => self.lookup(cx, parent, &name),
            Op::Getattr { ino } => self.getattr(cx, ino),
            Op::Setattr { ino, attr } => self.setattr(cx, ino, attr),
            Op::Readdir { ino, cursor, limit } => self.readdir(cx, ino, cursor.as_deref(), limit),
            Op::Unlink { parent, name } => self.remove(cx, parent, name, false),
            Op::Rmdir { parent, name } => self.remove(cx, parent, name, true),
            Op::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                how,
            } => self.rename(cx, (src_parent, src_name), (dst_parent, dst_name), how),
            Op::Setxattr {
                ino,
                name,
                value,
                how,
            } => self.setxattr(cx, ino, name, value.0, how),
            Op::Getxattr { ino, name } => self.getxattr(cx, ino, &name),
            Op::Listxattr { ino } => self.listxattr(cx, ino),
            Op::Access { ino, mask } => self.access(cx, ino, mask),
            Op::Removexattr { ino, name } => self.removexattr(cx, ino, name),
            Op::Open {
                ino,
                handle,
                flags,
                reopen,
            } => self.open(cx, ino, handle, flags, reopen),
            Op::Release { handle } => self.release(cx, handle),
            Op::Read {
                ino,
                handle,
                offset,
                len,
            } => self.read(cx, ino, handle, offset, len),
            Op::Write {
                ino,
                handle,
                offset,
                data,
            } => self.write(cx, ino, handle, offset, data.0),
            Op::AllocSlices { count } => self.alloc_slices(count),
            Op::WriteSlices {
                ino,
                handle,
                size,
                placed,
            } => self.write_slices(cx, ino, handle, size, placed),
            Op::Layout { ino, handle } => self.layout(cx, ino, handle),
            Op::CompactLayout {
                ino,
                handle,
                version,
                placed,
            } => self.compact_layout(cx, ino, handle, version, placed),
            Op::MakePendingDir {
                shard: _,
                parent,
                name,
                mode,
                uid,
                gid,
            } => self.make_pending_dir(cx, parent, name, (uid, gid, mode)),
            Op::ResolveRemote { parent, name, ino } => self.resolve_remote(cx, parent, &name, ino),
            Op::PrepareRmdir {
                ino,
                parent,
                name,
                owner,
            } => self.prepare_rmdir(cx, ino, parent, name, owner),
            // Two steps over two shards: dispatch drives them (`dispatch/remote.rs`).
            Op::MkdirRemote { .. }
            | Op::Connect { .. }
            | Op::PeerConnect { .. }
            | Op::Authenticate { .. }
            | Op::Ping
            | Op::Statfs
            | Op::Sync
            | Op::ShardMap
            | Op::ShardMapWait { .. }
            // The lock table's, not the namespace's (`locks.rs`).
            | Op::Getlk { .. }
            | Op::Setlk { .. } => Err(Errno::EPROTO),
        };
        cx.finish(result)
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.is_read_only() {
            Err(self.refusal())
        } else {
            Ok(())
        }
    }

    /// MKNOD: a fifo, socket or regular file for anyone who may create in `parent`; a device
    /// for root alone (Linux's CAP_MKNOD), EPERM after the checks every create makes; a
    /// directory never (EPERM, before anything else, as Linux's `may_mknod`), nor a symlink
    /// (EINVAL).
    fn mknod(
        &self,
        cx: &mut Cx<'_>,
        parent: u64,
        name: String,
        kind: Kind,
        mode: u32,
        rdev: u64,
    ) -> OpResult {
        let kind = FileKind::from_wire(kind);
        match kind {
            FileKind::Directory => return Err(Errno::EPERM),
            FileKind::Symlink => return Err(Errno::EINVAL),
            _ => {}
        }
        let new = New {
            rdev: if kind.is_device() { rdev } else { 0 },
            ..New::of(kind, mode)
        };
        self.create(cx, parent, name, new)
    }

    /// SYMLINK: a link to `target` (1 to `MAX_SYMLINK` bytes: ENOENT for none, as Linux
    /// answers an empty path, ENAMETOOLONG beyond), mode 0777 whatever the caller's umask.
    fn symlink(&self, cx: &mut Cx<'_>, parent: u64, name: String, target: Vec<u8>) -> OpResult {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > mds_proto::MAX_SYMLINK {
            return Err(Errno::ENAMETOOLONG);
        }
        let new = New {
            target: Some(target.into()),
            ..New::of(FileKind::Symlink, 0o777)
        };
        self.create(cx, parent, name, new)
    }

    fn create(&self, cx: &mut Cx<'_>, parent: u64, name: String, new: New) -> OpResult {
        let cred = cx.caller.cred;
        check_name(&name)?;
        self.writable()?;
        let ino = self.ino_for_create(cx, new.kind.is_dir())?;
        let now = now_ns();
        let kind = new.kind;
        let is_dir = kind.is_dir();
        let mut l = self.table.lock(&[parent, ino]);
        if l.get(ino).is_some() {
            // A replayed create's inode number was handed out before the crash and lost with
            // it, and only replays run until recovery ends, so no live inode has it; a new
            // one is above every number ever handed out. Either way, a live inode with it
            // must never be replaced: the replay no longer applies.
            return Err(if cx.caller.reuse_ino.is_some() {
                Errno::EINVAL
            } else {
                tracing::error!(ino, "a new inode number is in use; refusing the create");
                Errno::EIO
            });
        }
        let p = dir_mut(cx, &mut l, parent)?;
        cx.see(&p.stamp);
        may(cx, p, SEARCH)?;
        self.refuse_if_removing(cx, p)?;
        // Judged now, refused only after EEXIST as POSIX orders them: it looks at nothing
        // commit-on-share has not seen already (the parent's stamp, just above), so judging it
        // early changes no answer and no wait. It lets the name be searched for once: the
        // search is most of a create's share of memcmp in a large directory.
        let may_write = may(cx, p, WRITE | SEARCH);
        let (gid, mode) = perm::new_inode_owner(cred, &p.attr, kind, new.mode);
        let (mode, inherited) = inherit_acl(p, kind, mode, mds_proto::umask_of(new.mode));
        let Node {
            attr: dir_attr,
            dir,
            ..
        } = p;
        let DirState {
            entries,
            content,
            removed,
        } = &mut **dir.as_mut().expect("checked to be a directory");
        let vacant = match entries.slot(&name) {
            Slot::Free(free) => free,
            Slot::Taken(existing) => {
                cx.see(&existing.stamp);
                return Err(Errno::EEXIST);
            }
        };
        let removed_stamp = removed.get(&name).copied().unwrap_or_default();
        cx.see(&removed_stamp);
        may_write?;
        if kind.is_device() && !perm::is_root(cred) {
            return Err(Errno::EPERM);
        }
        let transno = self.next_transno()?;
        removed.remove(&name);
        let entry = vacant.insert(Entry {
            ino,
            kind,
            stamp: cx.stamp(removed_stamp, transno),
        });
        let entry_record = entry.record();
        *content = cx.stamp(*content, transno);
        dir_attr.entries += 1;
        if is_dir {
            dir_attr.nlink += 1;
        }
        touch(dir_attr, now, transno);
        let parent_image = dir_attr.image();
        let attr = InodeAttr {
            ino,
            kind,
            mode,
            uid: cred.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            size: new.target.as_ref().map_or(0, |t| t.len() as u64),
            ctime_ns: now,
            mtime_ns: now,
            generation: transno,
            parent: if is_dir { parent } else { 0 },
            entries: 0,
            transno,
            atime_ns: now,
            rdev: new.rdev,
            target: new.target,
            data_blocks: 0,
        };
        let image = attr.image();
        let body = Body::Attr(to_attr(&attr));
        let acl_ops = inherited.as_deref().map(|x| Self::put_inherited(ino, x));
        self.add_created(&mut l, attr, cx.stamp(Stamp::default(), transno), inherited);
        drop(l);
        // Pushed one by one: the create is most mutations, and an array of its three ops
        // was built and then copied into the list (`journal_ops`).
        let mut ops = self.op_list(3);
        ops.push(JournalOp::PutInode(image));
        if let Some(acl_ops) = acl_ops {
            ops.extend(acl_ops);
        }
        ops.push(JournalOp::PutDentry {
            parent,
            name: EntryName::from(name.as_str()),
            entry: entry_record,
        });
        ops.push(JournalOp::PutInode(parent_image));
        Ok(mutation(transno, ops, body))
    }

    /// The inode number a create takes: a new one, or a replay's again — one handed out
    /// before the crash, below the ceiling this start's own numbers begin at (recovery
    /// checked it, and it is below the ceiling now, so the counter cannot wrap past it).
    fn ino_for_create(&self, cx: &Cx<'_>, dir: bool) -> Result<u64, Errno> {
        match cx.caller.reuse_ino {
            Some(ino) => {
                if !self.may_have_handed_out(ino) {
                    return Err(Errno::EINVAL);
                }
                self.next_ino.fetch_max(ino + 1, Ordering::Relaxed);
                self.run_epoch.fetch_add(1, Ordering::AcqRel);
                Ok(ino)
            }
            None => self.allocate_ino(dir),
        }
    }

    /// Puts a created inode into the table, under the lock its create holds (its number was
    /// checked vacant under that lock), with the attributes it inherited (its ACLs), and
    /// counts it.
    #[inline]
    fn add_created(
        &self,
        l: &mut Locked<'_>,
        attr: InodeAttr,
        stamp: Stamp,
        xattrs: Option<Box<Xattrs>>,
    ) {
        let (ino, kind) = (attr.ino, attr.kind);
        let mut node = Node::new(attr, kind.is_dir().then(Entries::new));
        node.stamp = stamp;
        if let Some(xattrs) = xattrs {
            self.xattr_bytes
                .fetch_add(xattrs.bytes as u64, Ordering::Relaxed);
            node.xattrs = Some(xattrs);
        }
        if !l.insert(node) {
            unreachable!("inode {ino} was checked vacant under the same lock");
        }
        self.count(kind, 1);
    }

    /// The journal ops that write the ACLs a new inode `ino` inherited.
    #[cold]
    fn put_inherited(ino: u64, xattrs: &Xattrs) -> Vec<JournalOp> {
        xattrs
            .by_name
            .iter()
            .map(|(name, value)| JournalOp::PutXattr {
                ino,
                name: name.to_string(),
                value: value
                    .in_memory()
                    .expect("an ACL is kept in memory")
                    .to_vec(),
            })
            .collect()
    }

    fn lookup(&self, cx: &mut Cx<'_>, parent: u64, name: &str) -> OpResult {
        if name == ".." {
            return self.lookup_parent(cx, parent);
        }
        check_name(name)?;
        let child = {
            let l = self.table.lock(&[parent]);
            let p = dir(cx, &l, parent)?;
            may(cx, p, SEARCH)?;
            if let Some(entry) = p.entry(name) {
                cx.see(&entry.stamp);
                if self.is_remote(entry.ino) {
                    return Ok(remote_entry(entry.ino));
                }
                entry.ino
            } else {
                cx.see(&p.removed_stamp(name));
                return Err(Errno::ENOENT);
            }
        };
        // The parent's lock is released before the child's is taken (lock order); a child
        // removed in between was removed after this lookup, which then answers ENOENT, built
        // on that removal.
        self.attr_of_found(cx, child)
    }

    /// The attributes of `ino`, which a lookup found under a lock it has let go of: ENOENT,
    /// built on the removal, if it went in between.
    fn attr_of_found(&self, cx: &mut Cx<'_>, ino: u64) -> OpResult {
        let l = self.table.lock(&[ino]);
        let node = l.get_or_removed(ino).map_err(|removal| {
            cx.see(&removal);
            Errno::ENOENT
        })?;
        see_inode(cx, node);
        Ok(now(Body::Attr(to_attr(&node.attr))))
    }

    /// LOOKUP of ".." in `dir`: its parent (the root's is the root), for a caller who may
    /// search it — what a file handle's decoder asks (a mount re-exported over NFS finds a
    /// directory's parent so). A parent on another shard is answered as a remote entry.
    /// Commit-on-share: a rename that moved the directory changed its inode, seen here.
    fn lookup_parent(&self, cx: &mut Cx<'_>, ino: u64) -> OpResult {
        let up = {
            let l = self.table.lock(&[ino]);
            let d = dir(cx, &l, ino)?;
            may(cx, d, SEARCH)?;
            // Its parent is the inode's (a rename changes it), not its entries'.
            cx.see(&d.stamp);
            d.attr.parent
        };
        if self.is_remote(up) {
            return Ok(remote_entry(up));
        }
        self.attr_of_found(cx, up)
    }

    /// ACCESS: `mask`'s rwx bits judged as every other check here judges them (the mode,
    /// else the ACL), and root's execute as Linux grants it: on a directory, or a file some
    /// class may execute.
    fn access(&self, cx: &mut Cx<'_>, ino: u64, mask: u32) -> OpResult {
        let l = self.table.lock(&[ino]);
        let node = inode(cx, &l, ino)?;
        see_inode(cx, node);
        let want = mask & (READ | WRITE | SEARCH);
        let attr = &node.attr;
        if perm::is_root(cx.caller.cred) {
            let executable = attr.kind == FileKind::Directory || attr.mode & 0o111 != 0;
            if want & SEARCH != 0 && !executable {
                return Err(Errno::EACCES);
            }
        } else {
            perm::check(cx.caller.cred, attr, node.access_acl(), want)?;
        }
        Ok(now(Body::Attr(to_attr(attr))))
    }

    /// Whether `client` (as `cred`) may lock `ino`: through `handle`, one of its open handles
    /// of `ino` (EBADF otherwise), or without one (0: a directory, which has no handles on
    /// the server) if it may read the inode. Locks are no change of the inode: commit-on-
    /// share does not hold them.
    pub fn may_lock(&self, client: u64, cred: &Cred, ino: u64, handle: u64) -> Result<(), Errno> {
        if handle != 0 {
            return match self.handles.get(client, handle) {
                Some(open) if open.ino == ino => Ok(()),
                _ => Err(Errno::EBADF),
            };
        }
        let l = self.table.lock(&[ino]);
        let node = l.get_or_removed(ino).map_err(|_| Errno::ESTALE)?;
        perm::check(cred, &node.attr, node.access_acl(), READ)
    }

    /// The attributes of `ino` as a lock granted on it finds them: a client drops what it
    /// cached of the file when they moved since its last lock (what the last holder changed).
    pub fn lock_attr(&self, ino: u64) -> Result<Attr, Errno> {
        let l = self.table.lock(&[ino]);
        let node = l.get_or_removed(ino).map_err(|_| Errno::ESTALE)?;
        Ok(to_attr(&node.attr))
    }

    fn getattr(&self, cx: &mut Cx<'_>, ino: u64) -> OpResult {
        let l = self.table.lock(&[ino]);
        let node = inode(cx, &l, ino)?;
        see_inode(cx, node);
        Ok(now(Body::Attr(to_attr(&node.attr))))
    }

    fn setattr(&self, cx: &mut Cx<'_>, ino: u64, set: SetAttr) -> OpResult {
        self.writable()?;
        let now = now_ns();
        if let Some(handle) = set.handle
            && !cx.caller.replay
        {
            // ftruncate: through a handle of this inode opened for writing.
            match self.handles.get(cx.caller.client, handle) {
                Some(open) if open.ino == ino => {
                    if !open.write {
                        return Err(Errno::EINVAL);
                    }
                }
                _ => return Err(Errno::EBADF),
            }
        }
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        if set.size.is_some() {
            match node.attr.kind {
                FileKind::File => {}
                FileKind::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        let cred = cx.caller.cred;
        perm::may_setattr(cred, &node.attr, node.access_acl(), &set)?;
        let mode = perm::mode_after_setattr(cred, &node.attr, &set);
        let partial = set
            .size
            .map(|size| self.prepare_resize(node, size))
            .transpose()?;
        let transno = self.next_transno()?;
        node.stamp = cx.stamp(node.stamp, transno);
        let mut ops = self.journal_ops([]);
        if let (Some(size), Some(partial)) = (set.size, partial) {
            // Truncating changes the file's data, as a write does, even to the same size.
            self.apply_resize(node, size, partial, transno, &mut ops);
            node.attr.mtime_ns = now;
        }
        if set.mode.is_some()
            && let Some(op) = acls::chmod_acl(node, mode)
        {
            ops.push(op);
        }
        let attr = &mut node.attr;
        attr.mode = mode;
        if let Some(uid) = set.uid {
            attr.uid = uid;
        }
        if let Some(gid) = set.gid {
            attr.gid = gid;
        }
        let at = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(ns) => ns,
        };
        if let Some(t) = set.atime {
            attr.atime_ns = at(t);
        }
        if let Some(t) = set.mtime {
            attr.mtime_ns = at(t);
        }
        attr.ctime_ns = now;
        attr.transno = transno;
        ops.push(JournalOp::PutInode(attr.image()));
        let body = Body::Attr(to_attr(attr));
        drop(l);
        Ok(mutation(transno, ops, body))
    }

    fn readdir(&self, cx: &mut Cx<'_>, ino: u64, cursor: Option<&str>, limit: u32) -> OpResult {
        let limit = limit.clamp(1, MAX_READDIR) as usize;
        let mut l = self.table.lock(&[ino]);
        let d = dir_mut(cx, &mut l, ino)?;
        see_inode(cx, d);
        // Read alone: Linux lists a directory with `r` and no `x` (names and kinds; it is
        // the attributes of the entries that need search).
        may(cx, d, READ)?;
        if cursor.is_none() {
            touch_atime(cx, &mut d.attr, now_ns());
        }
        let entries = d.entries().expect("a directory");
        let range = entries.after(cursor.map(str::as_bytes));
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut more = false;
        for (name, entry) in range {
            let name = name.as_str();
            if page.len() == limit || bytes + name.len() + 24 > READDIR_BUDGET {
                more = true;
                break;
            }
            bytes += name.len() + 24;
            page.push(DirEntry {
                name: name.to_owned(),
                ino: entry.ino,
                kind: entry.kind.wire(),
            });
        }
        let next = if more {
            page.last().map(|e| e.name.clone())
        } else {
            None
        };
        Ok(now(Body::Entries {
            entries: page,
            next,
        }))
    }

    /// UNLINK (`rmdir` false: anything but a directory) and RMDIR.
    fn remove(&self, cx: &mut Cx<'_>, parent: u64, name: String, rmdir: bool) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        loop {
            let child = {
                let l = self.table.lock(&[parent]);
                let p = dir(cx, &l, parent)?;
                may(cx, p, SEARCH)?;
                if let Some(entry) = p.entry(&name) {
                    if self.is_remote(entry.ino) {
                        // Its inode is another shard's (MKDIR_REMOTE): not removed from here
                        // (a cluster's RMDIR of it goes through `dispatch/remote.rs`), but a
                        // caller who may not remove anything here is told that first.
                        cx.see(&entry.stamp);
                        may(cx, p, WRITE | SEARCH)?;
                        return Err(Errno::EXDEV);
                    }
                    entry
                } else {
                    cx.see(&p.removed_stamp(&name));
                    return Err(Errno::ENOENT);
                }
            };
            cx.see(&child.stamp);
            let now = now_ns();
            let mut l = self.table.lock(&[parent, child.ino]);
            let p = dir(cx, &l, parent)?;
            let Some(current) = p.entry(&name) else {
                continue; // changed between the two lock rounds: look again
            };
            if !current.same_child(&child) {
                continue;
            }
            cx.see(&current.stamp);
            // Checked again under the locks the transno is taken under (search included).
            may(cx, p, WRITE | SEARCH)?;
            let c = l.get(child.ino).expect("an entry names a live inode");
            may_remove(cx, p, c)?;
            match (rmdir, child.kind.is_dir()) {
                (false, true) => return Err(Errno::EISDIR),
                (true, false) => return Err(Errno::ENOTDIR),
                _ => {}
            }
            see_inode(cx, c);
            if rmdir && c.entries().is_some_and(|e| !e.is_empty()) {
                return Err(Errno::ENOTEMPTY);
            }
            let transno = self.next_transno()?;
            let p = dir_mut(cx, &mut l, parent)?;
            let parent_image = lose_entry(cx, p, (name.as_str(), current, rmdir), now, transno);
            let mut ops = Vec::with_capacity(3 + RESEND_OPS);
            ops.push(JournalOp::DeleteDentry {
                parent,
                name: EntryName::from(name.as_str()),
                child: child.ino,
            });
            self.drop_link(cx, &mut l, child.ino, now, transno, &mut ops);
            ops.push(JournalOp::PutInode(parent_image));
            drop(l);
            return Ok(mutation(transno, ops, Body::Done));
        }
    }

    /// Removes one name of `ino`: a directory, or a non-directory's last link with no handle
    /// open on it, deletes the inode (its extended attributes one delete each, its data);
    /// another link only drops its count and sets its ctime; the last one of a file that is
    /// open leaves an orphan, journaled with the clients that hold it. Appends the journal
    /// ops that say so.
    fn drop_link(
        &self,
        cx: &Cx<'_>,
        l: &mut Locked<'_>,
        ino: u64,
        now: i64,
        transno: u64,
        ops: &mut Vec<JournalOp>,
    ) {
        let node = l.get_mut(ino).expect("an entry names a live inode");
        if !node.attr.kind.is_dir() && (node.attr.nlink > 1 || node.opens.is_some()) {
            node.stamp = cx.stamp(node.stamp, transno);
            node.attr.nlink -= 1;
            node.attr.ctime_ns = now;
            node.attr.transno = transno;
            ops.push(JournalOp::PutInode(node.attr.image()));
            if node.attr.nlink == 0 {
                ops.push(JournalOp::PutOrphan {
                    ino,
                    owners: node.open_by(),
                });
                self.count_orphan(1);
            }
            return;
        }
        self.delete_inode(cx, l, ino, transno, ops);
    }

    /// Deletes the inode `ino` (locked) in `transno`, with its extended attributes, its data
    /// and, for an orphan, its orphan record.
    fn delete_inode(
        &self,
        cx: &Cx<'_>,
        l: &mut Locked<'_>,
        ino: u64,
        transno: u64,
        ops: &mut Vec<JournalOp>,
    ) {
        let removed = l.remove(ino).expect("just found");
        if cx.keeps_removals() {
            let stamp = cx.stamp(removed.stamp, transno);
            l.note_removed(ino, stamp, cx.caller.last_committed);
        }
        self.count(removed.attr.kind, -1);
        self.delete_data(&removed, ops);
        if removed.is_orphan() {
            ops.push(JournalOp::DeleteOrphan(ino));
            self.count_orphan(-1);
        }
        if let Some(xattrs) = removed.xattrs {
            self.xattr_bytes
                .fetch_sub(xattrs.bytes as u64, Ordering::Relaxed);
            ops.extend(
                xattrs
                    .by_name
                    .into_keys()
                    .map(|name| JournalOp::DeleteXattr {
                        ino,
                        name: name.into(),
                    }),
            );
        }
        ops.push(JournalOp::DeleteInode(ino));
    }
}

/// What a create makes: its kind, the mode asked for, and what only some kinds have.
struct New {
    kind: FileKind,
    mode: u32,
    rdev: u64,
    target: Option<std::sync::Arc<[u8]>>,
}

impl New {
    fn of(kind: FileKind, mode: u32) -> New {
        New {
            kind,
            mode,
            rdev: 0,
            target: None,
        }
    }
}

/// A read's atime update, as the caller's session asks: relatime-style (Linux's default) only
/// when the atime is not newer than the mtime or ctime, or is a day old; strictatime every
/// read; noatime never. In memory only: the inode's next journaled change writes it, and a
/// crash before one loses it, as relatime allows — a read never waits for, or forces, a
/// commit.
fn touch_atime(cx: &Cx<'_>, attr: &mut InodeAttr, now: i64) {
    const DAY_NS: i64 = 24 * 3600 * 1_000_000_000;
    let stale = attr.atime_ns <= attr.mtime_ns
        || attr.atime_ns <= attr.ctime_ns
        || now.saturating_sub(attr.atime_ns) >= DAY_NS;
    let moves = match cx.caller.atime {
        Atime::Relatime => stale,
        Atime::Strictatime => true,
        Atime::Noatime => false,
    };
    if moves {
        attr.atime_ns = attr.atime_ns.max(now);
    }
}

/// A mutation's result: its transno, the journal ops of its record, its reply (`execute`
/// adds what it built on).
fn mutation(transno: u64, ops: Vec<JournalOp>, body: Body) -> Exec {
    Exec::Mutation {
        transno,
        record: TxRecord { transno, ops },
        body,
        built_on: 0,
    }
}

/// An answer that needs no commit of its own (the caller's context adds what it built on).
fn now(body: Body) -> Exec {
    Exec::Now {
        result: Ok(body),
        wait: 0,
    }
}

/// Shows `cx` an inode: the inode itself and, for a directory, its set of entries (its size,
/// nlink and mtime move with them).
fn see_inode(cx: &mut Cx<'_>, node: &Node) {
    cx.see(&node.stamp);
    if let Some(dir) = &node.dir {
        cx.see(&dir.content);
    }
}

/// LOOKUP's answer for an entry naming another shard's directory.
fn remote_entry(ino: u64) -> Exec {
    now(Body::Remote {
        ino,
        kind: FileKind::Directory.wire(),
    })
}
