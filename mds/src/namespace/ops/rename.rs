//! RENAME: its POSIX rules and what it shows commit-on-share, apart from the other operations
//! because it alone touches two directories, two entries and up to two inodes at once, and
//! alone walks the tree (a directory may not move into its own subtree). Cross-directory
//! renames hold the namespace's rename lock, so no directory changes parent during the walk.

use journal::{EntryName, JournalOp};
use mds_proto::{Body, Errno, RenameHow, check_name};

use super::{
    Cx, OpResult, RESEND_OPS, change_content, dir, dir_mut, entries_mut, may, may_remove, mutation,
    now, see_inode, touch,
};
use crate::namespace::node::{DirName, Entry, FileKind};
use crate::namespace::perm::{SEARCH, WRITE};
use crate::namespace::table::Locked;
use crate::namespace::{Namespace, now_ns};

impl Namespace {
    /// RENAME, in Linux's order of checks: both names looked up (ENOENT for the source; for
    /// `NoReplace` EEXIST if the target exists, for `Exchange` ENOENT if it does not), a
    /// rename onto itself done, then the tree rules (no directory into its own subtree), then
    /// the permissions and kinds.
    pub(super) fn rename(
        &self,
        cx: &mut Cx<'_>,
        (sp, sn): (u64, String),
        (dp, dn): (u64, String),
        how: RenameHow,
    ) -> OpResult {
        check_name(&sn)?;
        check_name(&dn)?;
        self.writable()?;
        let _cross = (sp != dp).then(|| self.rename_lock.lock());
        loop {
            let (src, dst) = self.rename_entries(cx, sp, &sn, dp, &dn)?;
            // A name for another shard's directory (MKDIR_REMOTE) is not moved, replaced or
            // exchanged in this version: its inode's ".." is on the other shard.
            if self.is_remote(src.ino) || dst.is_some_and(|d| self.is_remote(d.ino)) {
                return Err(Errno::EXDEV);
            }
            match (how, dst) {
                (RenameHow::NoReplace, Some(_)) => return Err(Errno::EEXIST),
                (RenameHow::Exchange, None) => return Err(Errno::ENOENT),
                _ => {}
            }
            // Onto itself, or between two names of one inode (hard links): Linux's
            // `vfs_rename` does nothing, before any permission check.
            if (sp == dp && sn == dn) || dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(now(Body::Done));
            }
            if src.kind == FileKind::Directory && sp != dp && self.is_ancestor(cx, src.ino, dp) {
                return Err(Errno::EINVAL);
            }
            // The target holds the source on its way down, so it is not empty; Linux says so
            // before it checks any permission, as for EINVAL just above (and EINVAL for an
            // exchange, which would move the target into the source's subtree).
            if let Some(dst) = dst
                && dst.kind == FileKind::Directory
                && sp != dp
                && self.is_ancestor(cx, dst.ino, sp)
            {
                return Err(if how == RenameHow::Exchange {
                    Errno::EINVAL
                } else {
                    Errno::ENOTEMPTY
                });
            }
            let now = now_ns();
            let mut inos = vec![sp, dp, src.ino];
            inos.extend(dst.map(|d| d.ino));
            let mut l = self.table.lock(&inos);
            let still_src = dir(cx, &l, sp)?.entry(&sn);
            let still_dst = dir(cx, &l, dp)?.entry(&dn);
            let same = |now: Option<Entry>, then: Option<Entry>| match (now, then) {
                (Some(a), Some(b)) => a.same_child(&b),
                (None, None) => true,
                _ => false,
            };
            if !same(still_src, Some(src)) || !same(still_dst, dst) {
                continue; // changed between the two lock rounds: look again
            }
            let src = still_src.expect("checked");
            if let (RenameHow::Exchange, Some(dst)) = (how, still_dst) {
                exchange_allowed(cx, &l, (sp, src), (dp, dst))?;
                let transno = self.next_transno()?;
                let ops = exchange(cx, &mut l, (sp, sn, src), (dp, dn, dst), now, transno)?;
                drop(l);
                return Ok(mutation(transno, ops, Body::Done));
            }
            rename_allowed(cx, &l, (sp, src), (dp, still_dst))?;
            // Into a directory being removed (another shard's RMDIR of it): none, as into
            // one rmdir took.
            let d = dir(cx, &l, dp)?;
            self.refuse_if_removing(cx, d)?;
            let transno = self.next_transno()?;
            let ops =
                self.move_entry(cx, &mut l, (sp, sn, src), (dp, dn, still_dst), now, transno)?;
            drop(l);
            return Ok(mutation(transno, ops, Body::Done));
        }
    }

    /// RENAME's change, once allowed, under its locks: the source directory loses the name
    /// (and a moved directory's ".."), a replaced target loses its name (and its inode with
    /// its last link), the destination gains the name, whose history goes on in its stamp.
    /// Returns the journal ops.
    fn move_entry(
        &self,
        cx: &mut Cx<'_>,
        l: &mut Locked<'_>,
        (sp, sn, src): (u64, String, Entry),
        (dp, dn, still_dst): (u64, String, Option<Entry>),
        now: i64,
        transno: u64,
    ) -> Result<Vec<JournalOp>, Errno> {
        let is_dir = src.kind == FileKind::Directory;
        let mut ops = Vec::with_capacity(6 + RESEND_OPS);
        // Source directory loses the name (and the moved directory's "..").
        let s = dir_mut(cx, l, sp)?;
        change_content(cx, s, transno);
        entries_mut(s).remove(sn.as_bytes());
        if cx.keeps_removals() {
            let stamp = cx.stamp(src.stamp, transno);
            s.note_removed(sn.clone(), stamp, cx.caller.last_committed);
        }
        s.attr.entries -= 1;
        if is_dir && sp != dp {
            s.attr.nlink -= 1;
        }
        touch(&mut s.attr, now, transno);
        ops.push(JournalOp::DeleteDentry {
            parent: sp,
            name: EntryName::from(sn.as_str()),
            child: src.ino,
        });

        // A replaced target loses its name, and its inode if that was the last one. Its
        // entry is deleted by its own key (the child's), which the moved one's put does not
        // overwrite.
        if let Some(dst) = still_dst {
            ops.push(JournalOp::DeleteDentry {
                parent: dp,
                name: EntryName::from(dn.as_str()),
                child: dst.ino,
            });
            self.drop_link(cx, l, dst.ino, now, transno, &mut ops);
            let d = dir_mut(cx, l, dp)?;
            d.attr.entries -= 1;
            if dst.kind == FileKind::Directory {
                d.attr.nlink -= 1;
            }
        }

        // Destination directory gains the name; the name's history goes on in its stamp.
        let d = dir_mut(cx, l, dp)?;
        change_content(cx, d, transno);
        let before = match still_dst {
            Some(dst) => dst.stamp,
            None => d.take_removed(&dn),
        };
        let moved_entry = Entry {
            stamp: cx.stamp(before, transno),
            ..src
        };
        entries_mut(d).insert(DirName::new(&dn), moved_entry);
        d.attr.entries += 1;
        if is_dir && sp != dp {
            d.attr.nlink += 1;
        }
        touch(&mut d.attr, now, transno);
        ops.push(JournalOp::PutDentry {
            parent: dp,
            name: EntryName::from(dn.as_str()),
            entry: moved_entry.record(),
        });

        let moved = l.get_mut(src.ino).expect("an entry names a live inode");
        moved.stamp = cx.stamp(moved.stamp, transno);
        if is_dir {
            moved.attr.parent = dp;
        }
        moved.attr.ctime_ns = now;
        moved.attr.transno = transno;
        ops.push(JournalOp::PutInode(moved.attr.image()));
        ops.push(JournalOp::PutInode(l.get(sp).expect("locked").attr.image()));
        if sp != dp {
            ops.push(JournalOp::PutInode(l.get(dp).expect("locked").attr.image()));
        }
        Ok(ops)
    }

    /// RENAME's first look, under the two parents' locks: both are searchable directories
    /// and the source name exists; the entries it and the target name hold now.
    fn rename_entries(
        &self,
        cx: &mut Cx<'_>,
        sp: u64,
        sn: &str,
        dp: u64,
        dn: &str,
    ) -> Result<(Entry, Option<Entry>), Errno> {
        let l = self.table.lock(&[sp, dp]);
        let s = dir(cx, &l, sp)?;
        cx.see(&s.stamp);
        may(cx, s, SEARCH)?;
        let d = dir(cx, &l, dp)?;
        cx.see(&d.stamp);
        may(cx, d, SEARCH)?;
        let Some(src) = s.entry(sn) else {
            cx.see(&s.removed_stamp(sn));
            return Err(Errno::ENOENT);
        };
        cx.see(&src.stamp);
        let dst = d.entry(dn);
        match &dst {
            Some(dst) => cx.see(&dst.stamp),
            None => cx.see(&d.removed_stamp(dn)),
        }
        Ok((src, dst))
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors. Called under the
    /// rename lock, so no directory changes parent meanwhile. The answer rests on where each
    /// directory passed on the way up is, which another client's uncommitted move may have
    /// decided: `cx` is shown the stamp of each (a move stamps the moved directory).
    fn is_ancestor(&self, cx: &mut Cx<'_>, ancestor: u64, mut dir: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            let parent = {
                let l = self.table.lock(&[dir]);
                match l.get_or_removed(dir) {
                    Ok(node) => {
                        cx.see(&node.stamp);
                        node.attr.parent
                    }
                    Err(removal) => {
                        // Only `dir` itself can be gone (a directory above it is not
                        // empty): the rename then finds it so and answers ESTALE.
                        cx.see(&removal);
                        return false;
                    }
                }
            };
            if parent == dir {
                return false; // the root is its own parent
            }
            dir = parent;
        }
    }
}

/// RENAME's checks under every lock it takes, with the stamps as they are now: write and
/// search on both parents, the sticky bit on the moved and the replaced inode, the kinds, a
/// directory moved to another parent writable itself, and a replaced directory empty.
fn rename_allowed(
    cx: &mut Cx<'_>,
    l: &Locked<'_>,
    (sp, src): (u64, Entry),
    (dp, dst): (u64, Option<Entry>),
) -> Result<(), Errno> {
    cx.see(&src.stamp);
    let (s, d) = (dir(cx, l, sp)?, dir(cx, l, dp)?);
    let moved = l.get(src.ino).expect("an entry names a live inode");
    may(cx, s, WRITE | SEARCH)?;
    may_remove(cx, s, moved)?;
    may(cx, d, WRITE | SEARCH)?;
    if let Some(dst) = dst {
        let replaced = l.get(dst.ino).expect("an entry names a live inode");
        may_remove(cx, d, replaced)?;
        // By kind, not by file type: a directory never replaces a symlink, fifo or device, and
        // none of them replaces a directory.
        match (src.kind.is_dir(), dst.kind.is_dir()) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            _ => {}
        }
    }
    if src.kind == FileKind::Directory && sp != dp {
        // Its ".." changes: a directory moves to another parent only with write permission
        // on itself.
        may(cx, moved, WRITE)?;
    }
    see_inode(cx, moved);
    if let Some(dst) = dst {
        cx.see(&dst.stamp);
        let replaced = l.get(dst.ino).expect("an entry names a live inode");
        see_inode(cx, replaced);
        if replaced.entries().is_some_and(|e| !e.is_empty()) {
            return Err(Errno::ENOTEMPTY);
        }
    }
    Ok(())
}

/// RENAME_EXCHANGE's checks under every lock it takes: each entry may be removed from its
/// directory (write and search, the sticky bit), and a directory that changes parent needs
/// write permission on itself, as Linux's `vfs_rename` asks for both sides of an exchange.
fn exchange_allowed(
    cx: &mut Cx<'_>,
    l: &Locked<'_>,
    (sp, src): (u64, Entry),
    (dp, dst): (u64, Entry),
) -> Result<(), Errno> {
    cx.see(&src.stamp);
    cx.see(&dst.stamp);
    let (s, d) = (dir(cx, l, sp)?, dir(cx, l, dp)?);
    let a = l.get(src.ino).expect("an entry names a live inode");
    let b = l.get(dst.ino).expect("an entry names a live inode");
    may(cx, s, WRITE | SEARCH)?;
    may_remove(cx, s, a)?;
    may(cx, d, WRITE | SEARCH)?;
    may_remove(cx, d, b)?;
    if sp != dp {
        if src.kind.is_dir() {
            may(cx, a, WRITE)?;
        }
        if dst.kind.is_dir() {
            may(cx, b, WRITE)?;
        }
    }
    see_inode(cx, a);
    see_inode(cx, b);
    Ok(())
}

/// Swaps the inodes two entries name: each directory keeps its entry count; a directory that
/// changes parent takes its ".." (a link of the parent) with it. Returns the journal ops.
fn exchange(
    cx: &mut Cx<'_>,
    l: &mut Locked<'_>,
    (sp, sn, src): (u64, String, Entry),
    (dp, dn, dst): (u64, String, Entry),
    now: i64,
    transno: u64,
) -> Result<Vec<JournalOp>, Errno> {
    let to_src = Entry {
        stamp: cx.stamp(src.stamp, transno),
        ..dst
    };
    let to_dst = Entry {
        stamp: cx.stamp(dst.stamp, transno),
        ..src
    };
    let links = |e: &Entry| u32::from(e.kind.is_dir());
    let s = dir_mut(cx, l, sp)?;
    change_content(cx, s, transno);
    entries_mut(s).insert(DirName::new(&sn), to_src);
    if sp != dp {
        s.attr.nlink = s.attr.nlink - links(&src) + links(&dst);
    }
    touch(&mut s.attr, now, transno);
    let d = dir_mut(cx, l, dp)?;
    change_content(cx, d, transno);
    entries_mut(d).insert(DirName::new(&dn), to_dst);
    if sp != dp {
        d.attr.nlink = d.attr.nlink - links(&dst) + links(&src);
    }
    touch(&mut d.attr, now, transno);
    let mut ops = Vec::with_capacity(8 + RESEND_OPS);
    // Each entry is keyed by its child: both old keys go before the two new ones are put.
    ops.push(JournalOp::DeleteDentry {
        parent: sp,
        name: EntryName::from(sn.as_str()),
        child: src.ino,
    });
    ops.push(JournalOp::DeleteDentry {
        parent: dp,
        name: EntryName::from(dn.as_str()),
        child: dst.ino,
    });
    for (entry, new_parent) in [(src, dp), (dst, sp)] {
        let moved = l.get_mut(entry.ino).expect("an entry names a live inode");
        moved.stamp = cx.stamp(moved.stamp, transno);
        if entry.kind.is_dir() {
            moved.attr.parent = new_parent;
        }
        moved.attr.ctime_ns = now;
        moved.attr.transno = transno;
        ops.push(JournalOp::PutInode(moved.attr.image()));
    }
    ops.push(JournalOp::PutDentry {
        parent: sp,
        name: EntryName::from(sn.as_str()),
        entry: to_src.record(),
    });
    ops.push(JournalOp::PutDentry {
        parent: dp,
        name: EntryName::from(dn.as_str()),
        entry: to_dst.record(),
    });
    ops.push(JournalOp::PutInode(l.get(sp).expect("locked").attr.image()));
    if sp != dp {
        ops.push(JournalOp::PutInode(l.get(dp).expect("locked").attr.image()));
    }
    Ok(ops)
}
