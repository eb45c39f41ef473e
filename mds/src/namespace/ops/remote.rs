//! Directories across shards (Lustre's DNE1 remote directories). A remote directory's
//! entry lives on its parent's shard (P) and names an inode of another shard (C), where the
//! directory's inode and everything under it live. P answers LOOKUP of such an entry with
//! its number alone ([`Body::Remote`]): the client asks C for the rest. MKDIR_REMOTE makes
//! one in two journaled steps (dispatch drives them, `dispatch/remote.rs`): C makes the
//! inode, pending (`make_pending_dir`); P puts the entry (`link_remote_dir`). C confirms a
//! pending directory once P says its entry is durable (`resolve_remote`), and deletes one
//! whose entry never came (`drop_pending`): a crash between the steps leaves nothing behind.
//! An UNLINK, RMDIR or RENAME of a remote entry is refused with EXDEV, as across file
//! systems.

use journal::{JournalOp, PendingDir, TxRecord};
use mds_proto::{Attr, Body, Errno, check_name};

use super::super::node::{DirName, Entry, FileKind, InodeAttr, Stamp};
use super::super::perm::{self, SEARCH, WRITE};
use super::super::{Caller, Exec, Namespace, now_ns, to_attr};
use super::{Cx, OpResult, dir, dir_mut, journal_ops, may, mutation, now, touch};

impl Namespace {
    /// Whether `ino` is another shard's.
    pub fn is_remote(&self, ino: u64) -> bool {
        mds_proto::shard_of(ino) != mds_proto::shard_of(self.ino_floor)
    }

    /// MKDIR_REMOTE's first look, on the parent's shard, before the child's shard is asked
    /// anything: the checks MKDIR makes of `parent` and `name`, and the owner and mode the new
    /// directory gets (a set-group-ID parent's group and bit). Nothing changes.
    pub fn check_remote_mkdir(
        &self,
        caller: &Caller<'_>,
        parent: u64,
        name: &str,
        mode: u32,
    ) -> Result<(u32, u32, u32), Errno> {
        check_name(name)?;
        self.writable()?;
        let cx = &mut Cx { caller, wait: 0 };
        let l = self.table.lock(&[parent]);
        let p = dir(cx, &l, parent)?;
        may(cx, p, SEARCH)?;
        if p.entry(name).is_some() {
            return Err(Errno::EEXIST);
        }
        may(cx, p, WRITE | SEARCH)?;
        let (gid, mode) = perm::new_inode_owner(caller.cred, &p.attr, FileKind::Directory, mode);
        Ok((caller.cred.uid, gid, mode))
    }

    /// MKDIR_REMOTE's second step, on the parent's shard: the entry `name` in `parent` for
    /// the directory `child` another shard made (pending there), with MKDIR's checks made
    /// again under the parent's lock. The parent counts it as a subdirectory.
    pub fn link_remote_dir(
        &self,
        caller: &Caller<'_>,
        parent: u64,
        name: String,
        child: Attr,
    ) -> Exec {
        let cx = &mut Cx { caller, wait: 0 };
        let result = self.add_remote_entry(cx, parent, name, child);
        cx.finish(result)
    }

    fn add_remote_entry(
        &self,
        cx: &mut Cx<'_>,
        parent: u64,
        name: String,
        child: Attr,
    ) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        if !self.is_remote(child.ino) {
            return Err(Errno::EINVAL);
        }
        let now_at = now_ns();
        let mut l = self.table.lock(&[parent]);
        let p = dir_mut(cx, &mut l, parent)?;
        cx.see(&p.stamp);
        may(cx, p, SEARCH)?;
        if let Some(existing) = p.entry(&name) {
            cx.see(&existing.stamp);
            return Err(Errno::EEXIST);
        }
        cx.see(&p.removed_stamp(&name));
        may(cx, p, WRITE | SEARCH)?;
        let transno = self.next_transno()?;
        let before = p.take_removed(&name);
        let entry = Entry {
            ino: child.ino,
            kind: FileKind::Directory,
            stamp: cx.stamp(before, transno),
        };
        let record = entry.record();
        p.entries
            .as_mut()
            .expect("checked to be a directory")
            .insert(DirName::new(&name), entry);
        p.content = cx.stamp(p.content, transno);
        p.attr.entries += 1;
        p.attr.nlink += 1;
        touch(&mut p.attr, now_at, transno);
        let parent_image = p.attr.image();
        drop(l);
        let ops = journal_ops([
            JournalOp::PutDentry {
                parent,
                name,
                entry: record,
            },
            JournalOp::PutInode(parent_image),
        ]);
        Ok(mutation(transno, ops, Body::Attr(child)))
    }

    /// MAKE_PENDING_DIR, on the child's shard: a directory inode whose entry `name` is to
    /// live in `parent` on another shard, owned and moded as that shard decided, pending
    /// until its entry is found. No entry of this shard names it.
    pub(super) fn make_pending_dir(
        &self,
        cx: &mut Cx<'_>,
        parent: u64,
        name: String,
        owner: (u32, u32, u32),
    ) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        if !perm::is_root(cx.caller.cred) {
            return Err(Errno::EPERM);
        }
        if !self.is_remote(parent) {
            return Err(Errno::EINVAL);
        }
        let (uid, gid, mode) = owner;
        let ino = self.allocate_ino()?;
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        if l.get(ino).is_some() {
            tracing::error!(ino, "a new inode number is in use; refusing the create");
            return Err(Errno::EIO);
        }
        let transno = self.next_transno()?;
        let attr = InodeAttr {
            ino,
            kind: FileKind::Directory,
            mode: mode & 0o7777,
            uid,
            gid,
            nlink: 2,
            size: 0,
            ctime_ns: now_at,
            mtime_ns: now_at,
            generation: transno,
            parent,
            entries: 0,
            transno,
            atime_ns: now_at,
            rdev: 0,
            target: None,
        };
        let image = attr.image();
        let body = Body::Attr(to_attr(&attr));
        let stamp = cx.stamp(Stamp::default(), transno);
        self.add_created(&mut l, attr, stamp);
        drop(l);
        let pending = PendingDir { ino, parent, name };
        self.pending_dirs.lock().insert(ino, pending.clone());
        let ops = journal_ops([
            JournalOp::PutInode(image),
            JournalOp::PutPendingDir(pending),
        ]);
        Ok(mutation(transno, ops, body))
    }

    /// RESOLVE_REMOTE, on the parent's shard: Done if `name` in `parent` names `ino` (the
    /// caller's context holds the answer until that entry is durable), ENOENT otherwise.
    pub(super) fn resolve_remote(
        &self,
        cx: &mut Cx<'_>,
        parent: u64,
        name: &str,
        ino: u64,
    ) -> OpResult {
        check_name(name)?;
        if !perm::is_root(cx.caller.cred) {
            return Err(Errno::EPERM);
        }
        let l = self.table.lock(&[parent]);
        let p = match dir(cx, &l, parent) {
            Ok(p) => p,
            Err(Errno::ESTALE) => return Err(Errno::ENOENT),
            Err(e) => return Err(e),
        };
        match p.entry(name) {
            Some(entry) if entry.ino == ino => {
                cx.see(&entry.stamp);
                Ok(now(Body::Done))
            }
            Some(entry) => {
                cx.see(&entry.stamp);
                Err(Errno::ENOENT)
            }
            None => {
                cx.see(&p.removed_stamp(name));
                Err(Errno::ENOENT)
            }
        }
    }

    /// The directories this shard made for other shards' entries and has not confirmed.
    pub fn pending_dirs(&self) -> Vec<PendingDir> {
        self.pending_dirs.lock().values().cloned().collect()
    }

    /// The entry of pending directory `ino` was found durable on its parent's shard: it is
    /// not pending any more. The record to commit (no reply waits on it), if it was pending.
    pub fn confirm_pending(&self, ino: u64) -> Option<TxRecord> {
        self.pending_dirs.lock().remove(&ino)?;
        let transno = self.next_transno().ok()?;
        Some(TxRecord {
            transno,
            ops: vec![JournalOp::DeletePendingDir(ino)],
        })
    }

    /// The entry of pending directory `ino` was found missing on its parent's shard (the
    /// MKDIR_REMOTE that made it did not finish): it is deleted, unless something was put in
    /// it meanwhile (ENOTEMPTY: left pending, for `mds fsck --cluster` and an operator).
    pub fn drop_pending(&self, ino: u64) -> Result<Option<TxRecord>, Errno> {
        let mut pending = self.pending_dirs.lock();
        if !pending.contains_key(&ino) {
            return Ok(None);
        }
        let caller = Caller::server(0, u64::MAX);
        let cx = Cx {
            caller: &caller,
            wait: 0,
        };
        let mut l = self.table.lock(&[ino]);
        let Some(node) = l.get(ino) else {
            pending.remove(&ino);
            return Ok(None);
        };
        if node.attr.entries > 0 {
            return Err(Errno::ENOTEMPTY);
        }
        let transno = self.next_transno()?;
        let mut ops = vec![JournalOp::DeletePendingDir(ino)];
        self.delete_inode(&cx, &mut l, ino, transno, &mut ops);
        pending.remove(&ino);
        Ok(Some(TxRecord { transno, ops }))
    }
}

/// LOOKUP's answer for an entry naming another shard's directory.
pub(super) fn remote_entry(ino: u64) -> Exec {
    now(Body::Remote {
        ino,
        kind: FileKind::Directory.wire(),
    })
}
