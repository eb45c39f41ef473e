//! Directories across shards (Lustre's DNE1 remote directories). A remote directory's
//! entry lives on its parent's shard (P) and names an inode of another shard (C), where the
//! directory's inode and everything under it live. P answers LOOKUP of such an entry with
//! its number alone ([`Body::Remote`]): the client asks C for the rest. MKDIR_REMOTE makes
//! one in two journaled steps (dispatch drives them, `dispatch/remote.rs`): C makes the
//! inode, pending (`make_pending_dir`); P puts the entry (`link_remote_dir`). C confirms a
//! pending directory once P says its entry is durable (`resolve_remote`), and deletes one
//! whose entry never came (`drop_pending`): a crash between the steps leaves nothing behind.
//! RMDIR of a remote entry is the same in reverse: P looks (`check_remote_rmdir`), C checks
//! the directory and marks it pending again, being removed — empty, and refusing new entries
//! from then on (`prepare_rmdir`) — and P removes the entry (`unlink_remote_dir`). C's scrub
//! then deletes it once P says the entry went, or keeps it if the entry is still there (P
//! crashed or refused): the same two outcomes, by the same question. An UNLINK or RENAME of a
//! remote entry is refused with EXDEV, as across file systems.

use std::sync::atomic::Ordering;

use journal::{EntryName, JournalOp, PendingDir, TxRecord};
use mds_proto::{Attr, Body, Errno, check_name};

use super::super::node::{DirName, Entry, FileKind, InodeAttr, Node, Stamp};
use super::super::perm::{self, SEARCH, WRITE};
use super::super::{Caller, Exec, Namespace, now_ns, to_attr};
use super::{
    Cx, OpResult, change_content, dir, dir_mut, entries_mut, lose_entry, may, mutation, now,
    see_inode, touch,
};

impl Namespace {
    /// Whether `ino` is another shard's.
    pub fn is_remote(&self, ino: u64) -> bool {
        mds_proto::shard_of(ino) != mds_proto::shard_of(self.ino_floor)
    }

    /// ENOENT for a new entry in the directory `dir` while it is being removed (between
    /// PREPARE_RMDIR and its scrub), as Linux refuses one in a directory rmdir took. Called
    /// under `dir`'s stripe lock, which PREPARE_RMDIR marks it under: both see the same
    /// count. One load while no directory of this shard is being removed.
    #[inline]
    pub(super) fn refuse_if_removing(&self, cx: &mut Cx<'_>, dir: &Node) -> Result<(), Errno> {
        if self.removing_dirs.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let removing = self
            .pending_dirs
            .lock()
            .get(&dir.attr.ino)
            .is_some_and(|(p, _)| p.removing);
        if removing {
            cx.see(&dir.stamp);
            return Err(Errno::ENOENT);
        }
        Ok(())
    }

    /// Drops `ino` from the pending directories, keeping the count of those being removed.
    fn forget_pending(
        &self,
        pending: &mut std::collections::BTreeMap<u64, (PendingDir, u64)>,
        ino: u64,
    ) -> Option<PendingDir> {
        let (gone, _) = pending.remove(&ino)?;
        if gone.removing {
            self.removing_dirs.fetch_sub(1, Ordering::Relaxed);
        }
        Some(gone)
    }

    /// MKDIR_REMOTE's first look, on the parent's shard, before the child's shard is asked
    /// anything: the checks MKDIR makes of `parent` and `name`, and the owner and mode the new
    /// directory gets (a set-group-ID parent's group and bit, the permission bits its default
    /// ACL gives — not its ACLs, which stay behind). Nothing changes.
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
        self.refuse_if_removing(cx, p)?;
        if p.entry(name).is_some() {
            return Err(Errno::EEXIST);
        }
        may(cx, p, WRITE | SEARCH)?;
        let umask = mds_proto::umask_of(mode);
        let (gid, mode) = perm::new_inode_owner(caller.cred, &p.attr, FileKind::Directory, mode);
        // The permission bits a parent's default ACL gives, but not the ACLs themselves: the
        // directory is made on another shard, which MAKE_PENDING_DIR tells only its mode.
        let (mode, _not_carried) = super::inherit_acl(p, FileKind::Directory, mode, umask);
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
        self.refuse_if_removing(cx, p)?;
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
        entries_mut(p).insert(DirName::new(&name), entry);
        change_content(cx, p, transno);
        p.attr.entries += 1;
        p.attr.nlink += 1;
        touch(&mut p.attr, now_at, transno);
        let parent_image = p.attr.image();
        drop(l);
        let ops = self.journal_ops([
            JournalOp::PutDentry {
                parent,
                name: EntryName::from(name.as_str()),
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
        let ino = self.allocate_ino(true)?;
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
            data_blocks: 0,
        };
        let image = attr.image();
        let body = Body::Attr(to_attr(&attr));
        let stamp = cx.stamp(Stamp::default(), transno);
        self.add_created(&mut l, attr, stamp, None);
        drop(l);
        let pending = PendingDir {
            ino,
            parent,
            name,
            removing: false,
        };
        self.pending_dirs
            .lock()
            .insert(ino, (pending.clone(), transno));
        let ops = self.journal_ops([
            JournalOp::PutInode(image),
            JournalOp::PutPendingDir(pending),
        ]);
        Ok(mutation(transno, ops, body))
    }

    /// RMDIR's look, on the parent's shard of a cluster, at `name` in `parent`: the inode of
    /// the other shard's directory it names, and the owner that directory must have where the
    /// parent's sticky bit says so, if the caller may remove it; None if the entry is this
    /// shard's own (RMDIR as on one server). ENOENT without an entry. Nothing changes.
    pub fn check_remote_rmdir(
        &self,
        caller: &Caller<'_>,
        parent: u64,
        name: &str,
    ) -> Result<Option<(u64, Option<u32>)>, Errno> {
        check_name(name)?;
        self.writable()?;
        let cx = &mut Cx { caller, wait: 0 };
        let l = self.table.lock(&[parent]);
        let p = dir(cx, &l, parent)?;
        may(cx, p, SEARCH)?;
        let Some(entry) = p.entry(name) else {
            return Err(Errno::ENOENT);
        };
        if !self.is_remote(entry.ino) {
            return Ok(None);
        }
        may(cx, p, WRITE | SEARCH)?;
        let owner = perm::sticky_applies(caller.cred, &p.attr).then_some(caller.cred.uid);
        Ok(Some((entry.ino, owner)))
    }

    /// PREPARE_RMDIR, on the directory's shard: RMDIR's checks of the directory `ino` itself,
    /// whose entry `name` in `parent` lives on another shard — a directory of that parent,
    /// empty, and owned by `owner` where the parent's sticky bit asks it — and then it is
    /// marked pending, being removed: no new entry goes into it from then on, and the scrub
    /// deletes it once the parent's shard says the entry went (keeps it while it is there).
    /// Asked again (a resent RMDIR), the same.
    pub(super) fn prepare_rmdir(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        parent: u64,
        name: String,
        owner: Option<u32>,
    ) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        if !perm::is_root(cx.caller.cred) {
            return Err(Errno::EPERM);
        }
        if !self.is_remote(parent) || self.is_remote(ino) {
            return Err(Errno::EINVAL);
        }
        let mut l = self.table.lock(&[ino]);
        let node = dir_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        if node.attr.parent != parent {
            return Err(Errno::EINVAL);
        }
        if owner.is_some_and(|uid| uid != node.attr.uid) {
            return Err(Errno::EPERM);
        }
        if node.entries().is_some_and(|e| !e.is_empty()) {
            return Err(Errno::ENOTEMPTY);
        }
        let transno = self.next_transno()?;
        // What is refused in it from now on builds on this.
        node.stamp = cx.stamp(node.stamp, transno);
        let pending = PendingDir {
            ino,
            parent,
            name,
            removing: true,
        };
        let was = self
            .pending_dirs
            .lock()
            .insert(ino, (pending.clone(), transno));
        if !was.is_some_and(|(p, _)| p.removing) {
            self.removing_dirs.fetch_add(1, Ordering::Relaxed);
        }
        drop(l);
        let ops = self.journal_ops([JournalOp::PutPendingDir(pending)]);
        Ok(mutation(transno, ops, Body::Done))
    }

    /// RMDIR of a remote directory's last step, on the parent's shard, once the directory's
    /// shard marked it being removed: the entry `name` in `parent`, naming `ino`, goes, with
    /// RMDIR's checks of the parent made again under its lock.
    pub fn unlink_remote_dir(
        &self,
        caller: &Caller<'_>,
        parent: u64,
        name: String,
        ino: u64,
    ) -> Exec {
        let cx = &mut Cx { caller, wait: 0 };
        let result = self.remove_remote_entry(cx, parent, name, ino);
        cx.finish(result)
    }

    fn remove_remote_entry(
        &self,
        cx: &mut Cx<'_>,
        parent: u64,
        name: String,
        ino: u64,
    ) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        let now_at = now_ns();
        let mut l = self.table.lock(&[parent]);
        let p = dir_mut(cx, &mut l, parent)?;
        may(cx, p, SEARCH)?;
        let Some(current) = p.entry(&name) else {
            cx.see(&p.removed_stamp(&name));
            return Err(Errno::ENOENT);
        };
        cx.see(&current.stamp);
        if current.ino != ino {
            // Another entry by that name since the first look (the name is held while the
            // removal is under way, so not by a remote directory): asked again, it is removed.
            return Err(Errno::EBUSY);
        }
        may(cx, p, WRITE | SEARCH)?;
        let transno = self.next_transno()?;
        let parent_image = lose_entry(cx, p, (&name, current, true), now_at, transno);
        drop(l);
        let ops = self.journal_ops([
            JournalOp::DeleteDentry {
                parent,
                name: EntryName::from(name.as_str()),
                child: ino,
            },
            JournalOp::PutInode(parent_image),
        ]);
        Ok(mutation(transno, ops, Body::Done))
    }

    /// RESOLVE_REMOTE, on the parent's shard: Done if `name` in `parent` names `ino` (the
    /// caller's context holds the answer until that entry is durable) — or if another name
    /// in `parent` does — ENOENT otherwise.
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
                return Ok(now(Body::Done));
            }
            Some(entry) => cx.see(&entry.stamp),
            None => cx.see(&p.removed_stamp(name)),
        }
        // `name` does not name it. Before the asker deletes a directory on that answer, the
        // rest of the parent is looked at: a step sent with another name than the entry's
        // (no server sends one; only a peer may send a step at all) must not delete a
        // directory an entry still names, which would leave that entry naming nothing. A
        // scan of the parent, on this path alone: once per remote directory removed, or
        // pending directory whose MKDIR_REMOTE did not finish.
        if self.is_remote(ino)
            && let Some((_, entry)) = p
                .entries()
                .and_then(|entries| entries.iter().find(|(_, e)| e.ino == ino))
        {
            cx.see(&entry.stamp);
            return Ok(now(Body::Done));
        }
        Err(Errno::ENOENT)
    }

    /// This shard's directories that wait for their parents' shards — made for entries not
    /// confirmed yet, and being removed — each with the mark (transno) it was asked about
    /// under.
    pub fn pending_dirs(&self) -> Vec<(PendingDir, u64)> {
        self.pending_dirs.lock().values().cloned().collect()
    }

    /// The entry of pending directory `ino` was found durable on its parent's shard: it is
    /// not pending any more (one being removed takes entries again: its RMDIR did not
    /// happen). The record to commit (no reply waits on it), if it was pending with `mark`
    /// still — not marked again since it was asked about, by a resent RMDIR.
    pub fn confirm_pending(&self, ino: u64, mark: u64) -> Option<TxRecord> {
        let mut pending = self.pending_dirs.lock();
        if pending.get(&ino).is_none_or(|(_, m)| *m != mark) {
            return None;
        }
        self.forget_pending(&mut pending, ino)?;
        drop(pending);
        let transno = self.next_transno().ok()?;
        Some(TxRecord {
            transno,
            ops: vec![JournalOp::DeletePendingDir(ino)],
        })
    }

    /// The entry of pending directory `ino` was found missing on its parent's shard (the
    /// MKDIR_REMOTE that made it did not finish, or the RMDIR that marked it did): it is
    /// deleted, unless something was put in it meanwhile (ENOTEMPTY: left pending, for
    /// `mds fsck --cluster` and an operator; one being removed takes no entries).
    pub fn drop_pending(&self, ino: u64, mark: u64) -> Result<Option<TxRecord>, Errno> {
        let caller = Caller::server(0, u64::MAX);
        let cx = Cx {
            caller: &caller,
            wait: 0,
        };
        // The stripe first: a new entry's check takes the pending lock under it.
        let mut l = self.table.lock(&[ino]);
        let mut pending = self.pending_dirs.lock();
        if pending.get(&ino).is_none_or(|(_, m)| *m != mark) {
            return Ok(None);
        }
        let Some(node) = l.get(ino) else {
            self.forget_pending(&mut pending, ino);
            return Ok(None);
        };
        if node.attr.entries > 0 {
            return Err(Errno::ENOTEMPTY);
        }
        let transno = self.next_transno()?;
        let mut ops = vec![JournalOp::DeletePendingDir(ino)];
        self.delete_inode(&cx, &mut l, ino, transno, &mut ops);
        self.forget_pending(&mut pending, ino);
        Ok(Some(TxRecord { transno, ops }))
    }
}
