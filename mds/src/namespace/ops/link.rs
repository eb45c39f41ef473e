//! LINK and READLINK: a second name for an inode, and what a symbolic link points at. (A
//! symlink, fifo, socket or device is made by `create` in `ops/mod.rs`, as any inode is.)

use journal::{EntryName, JournalOp};
use mds_proto::{Body, Errno, MAX_LINKS, Target, check_name};

use super::{
    Cx, OpResult, RESEND_OPS, change_content, dir_mut, entries_mut, inode, inode_mut, may,
    mutation, now, touch, touch_atime,
};
use crate::namespace::node::{DirName, Entry, FileKind};
use crate::namespace::perm::{self, SEARCH, WRITE};
use crate::namespace::{Namespace, now_ns, to_attr};

impl Namespace {
    /// LINK: `name` in `parent` for `ino`, in Linux's order of checks: the source exists
    /// (ESTALE), the parent is a searchable directory, the name is free (EEXIST), the
    /// caller may link this inode (`protected_hardlinks`, EPERM), may write the parent
    /// (EACCES), the source is not a directory (EPERM) and has links to spare (EMLINK). One
    /// server is one file system: never EXDEV.
    pub(super) fn link(&self, cx: &mut Cx<'_>, ino: u64, parent: u64, name: String) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        let now_at = now_ns();
        let cred = cx.caller.cred;
        let mut l = self.table.lock(&[ino, parent]);
        let source = inode(cx, &l, ino)?;
        cx.see(&source.stamp);
        if source.is_orphan() {
            // Open, its last name gone: Linux's linkat of such a file (not O_TMPFILE).
            return Err(Errno::ENOENT);
        }
        let source_attr = source.attr.clone();
        // Judged now (the source is not borrowed past here), refused in its place below.
        let may_link = perm::may_hardlink(cred, &source.attr, source.access_acl());
        let p = dir_mut(cx, &mut l, parent)?;
        cx.see(&p.stamp);
        may(cx, p, SEARCH)?;
        self.refuse_if_removing(cx, p)?;
        if let Some(existing) = p.entry(&name) {
            cx.see(&existing.stamp);
            return Err(Errno::EEXIST);
        }
        cx.see(&p.removed_stamp(&name));
        may_link?;
        may(cx, p, WRITE | SEARCH)?;
        if source_attr.kind == FileKind::Directory {
            return Err(Errno::EPERM);
        }
        if source_attr.nlink >= MAX_LINKS {
            return Err(Errno::EMLINK);
        }
        let transno = self.next_transno()?;
        let before = p.take_removed(&name);
        let entry = Entry {
            ino,
            kind: source_attr.kind,
            stamp: cx.stamp(before, transno),
        };
        entries_mut(p).insert(DirName::new(&name), entry);
        change_content(cx, p, transno);
        p.attr.entries += 1;
        touch(&mut p.attr, now_at, transno);
        let parent_image = p.attr.image();
        // Under the lock it was seen live with: nothing may fail once the transno is taken.
        let source = l.get_mut(ino).expect("locked, and live above");
        source.stamp = cx.stamp(source.stamp, transno);
        source.attr.nlink += 1;
        source.attr.ctime_ns = now_at;
        source.attr.transno = transno;
        let body = Body::Attr(to_attr(&source.attr));
        let mut ops = Vec::with_capacity(3 + RESEND_OPS);
        ops.push(JournalOp::PutInode(source.attr.image()));
        ops.push(JournalOp::PutDentry {
            parent,
            name: EntryName::from(name.as_str()),
            entry: entry.record(),
        });
        ops.push(JournalOp::PutInode(parent_image));
        drop(l);
        Ok(mutation(transno, ops, body))
    }

    /// READLINK: the target as it was given; EINVAL for anything but a symlink. Needs no
    /// permission on the link itself (Linux checks only the path to it).
    pub(super) fn readlink(&self, cx: &mut Cx<'_>, ino: u64) -> OpResult {
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        cx.see(&node.stamp);
        let Some(target) = node.attr.target.clone() else {
            return Err(Errno::EINVAL);
        };
        touch_atime(cx, &mut node.attr, now_ns());
        Ok(now(Body::Target(Target(target.to_vec()))))
    }
}
