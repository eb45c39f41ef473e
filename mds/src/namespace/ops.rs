//! The namespace operations and their POSIX rules.
//!
//! Each mutation locks its inodes (`Table::lock`, stripe order), re-checks what it read
//! before locking where it had to look an inode up first, changes the in-memory state, takes
//! its transno under the locks, and returns the journal record: full images of every inode it
//! changed and every entry it added or removed, so that replaying records in transno order
//! rebuilds the namespace. Images are built from the in-memory state with
//! `InodeAttr::image` and `Entry::record` (`node.rs`), never by sharing the record types.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use journal::{JournalOp, TxRecord};

use super::node::{Entry, FileKind, InodeAttr, Node};
use super::table::Locked;
use super::{Exec, Namespace, now_ns, to_attr, to_kind};
use mds_proto::{Body, Cred, DirEntry, Errno, MAX_FRAME, MAX_READDIR, Op, SetAttr, check_name};

/// READDIR stops adding entries past this many bytes, so a page always fits a frame.
const READDIR_BUDGET: usize = MAX_FRAME / 2;

type OpResult = Result<Exec, Errno>;

fn dir<'a>(l: &'a Locked<'_>, ino: u64) -> Result<&'a Node, Errno> {
    let node = l.get(ino).ok_or(Errno::ESTALE)?;
    if node.entries.is_none() {
        return Err(Errno::ENOTDIR);
    }
    Ok(node)
}

fn dir_mut<'a>(l: &'a mut Locked<'_>, ino: u64) -> Result<&'a mut Node, Errno> {
    let node = l.get_mut(ino).ok_or(Errno::ESTALE)?;
    if node.entries.is_none() {
        return Err(Errno::ENOTDIR);
    }
    Ok(node)
}

fn entries_mut(node: &mut Node) -> &mut BTreeMap<String, Entry> {
    node.entries.as_mut().expect("checked to be a directory")
}

fn touch(attr: &mut InodeAttr, now: i64, transno: u64) {
    attr.mtime_ns = now;
    attr.ctime_ns = now;
    attr.transno = transno;
}

impl Namespace {
    /// Executes one operation for the caller `cred` (not CONNECT, PING, STATFS or SYNC,
    /// which the connection answers itself). New inodes belong to `cred`.
    pub fn execute(&self, op: Op, cred: &Cred) -> Exec {
        let result = match op {
            Op::Mkdir { parent, name, mode } => {
                self.create(parent, name, FileKind::Directory, mode, cred)
            }
            Op::Create { parent, name, mode } => {
                self.create(parent, name, FileKind::File, mode, cred)
            }
            Op::Lookup { parent, name } => self.lookup(parent, &name),
            Op::Getattr { ino } => self.getattr(ino),
            Op::Setattr { ino, attr } => self.setattr(ino, attr),
            Op::Readdir { ino, cursor, limit } => self.readdir(ino, cursor.as_deref(), limit),
            Op::Unlink { parent, name } => self.remove(parent, name, FileKind::File),
            Op::Rmdir { parent, name } => self.remove(parent, name, FileKind::Directory),
            Op::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            } => self.rename(src_parent, src_name, dst_parent, dst_name),
            Op::Connect { .. } | Op::Ping | Op::Statfs | Op::Sync => Err(Errno::EPROTO),
        };
        result.unwrap_or_else(|e| Exec::Now(Err(e)))
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.is_read_only() {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    fn create(
        &self,
        parent: u64,
        name: String,
        kind: FileKind,
        mode: u32,
        cred: &Cred,
    ) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let now = now_ns();
        let is_dir = kind == FileKind::Directory;
        let mut l = self.table.lock(&[parent, ino]);
        let p = dir_mut(&mut l, parent)?;
        if entries_mut(p).contains_key(&name) {
            return Err(Errno::EEXIST);
        }
        let transno = self.next_transno();
        let entry = Entry { ino, kind };
        entries_mut(p).insert(name.clone(), entry);
        p.attr.entries += 1;
        if is_dir {
            p.attr.nlink += 1;
        }
        touch(&mut p.attr, now, transno);
        let parent_image = p.attr.image();
        let attr = InodeAttr {
            ino,
            kind,
            mode: mode & 0o7777,
            uid: cred.uid,
            gid: cred.gid,
            nlink: if is_dir { 2 } else { 1 },
            size: 0,
            ctime_ns: now,
            mtime_ns: now,
            generation: transno,
            parent: if is_dir { parent } else { 0 },
            entries: 0,
            transno,
        };
        let image = attr.image();
        let body = Body::Attr(to_attr(&attr));
        l.insert(Node {
            attr,
            entries: is_dir.then(BTreeMap::new),
        });
        drop(l);
        if is_dir {
            self.directories.fetch_add(1, Ordering::Relaxed);
        } else {
            self.files.fetch_add(1, Ordering::Relaxed);
        }
        let ops = vec![
            JournalOp::PutInode(image),
            JournalOp::PutDentry {
                parent,
                name,
                entry: entry.record(),
            },
            JournalOp::PutInode(parent_image),
        ];
        Ok(Exec::Mutation {
            transno,
            record: TxRecord { transno, ops },
            body,
        })
    }

    fn lookup(&self, parent: u64, name: &str) -> OpResult {
        check_name(name)?;
        let child = {
            let l = self.table.lock(&[parent]);
            let p = dir(&l, parent)?;
            p.entries
                .as_ref()
                .and_then(|e| e.get(name))
                .ok_or(Errno::ENOENT)?
                .ino
        };
        // The parent's lock is released before the child's is taken (lock order); a child
        // removed in between was removed after this lookup, which then answers ENOENT.
        let l = self.table.lock(&[child]);
        let node = l.get(child).ok_or(Errno::ENOENT)?;
        Ok(Exec::Now(Ok(Body::Attr(to_attr(&node.attr)))))
    }

    fn getattr(&self, ino: u64) -> OpResult {
        let l = self.table.lock(&[ino]);
        let node = l.get(ino).ok_or(Errno::ESTALE)?;
        Ok(Exec::Now(Ok(Body::Attr(to_attr(&node.attr)))))
    }

    fn setattr(&self, ino: u64, set: SetAttr) -> OpResult {
        self.writable()?;
        let now = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = l.get_mut(ino).ok_or(Errno::ESTALE)?;
        let attr = &mut node.attr;
        if set.size.is_some() && attr.kind == FileKind::Directory {
            return Err(Errno::EISDIR);
        }
        let transno = self.next_transno();
        if let Some(mode) = set.mode {
            attr.mode = mode & 0o7777;
        }
        if let Some(uid) = set.uid {
            attr.uid = uid;
        }
        if let Some(gid) = set.gid {
            attr.gid = gid;
        }
        if let Some(size) = set.size {
            attr.size = size;
        }
        if let Some(mtime) = set.mtime_ns {
            attr.mtime_ns = mtime;
        }
        attr.ctime_ns = now;
        attr.transno = transno;
        let image = attr.image();
        let body = Body::Attr(to_attr(attr));
        drop(l);
        Ok(Exec::Mutation {
            transno,
            body,
            record: TxRecord {
                transno,
                ops: vec![JournalOp::PutInode(image)],
            },
        })
    }

    fn readdir(&self, ino: u64, cursor: Option<&str>, limit: u32) -> OpResult {
        let limit = limit.clamp(1, MAX_READDIR) as usize;
        let l = self.table.lock(&[ino]);
        let entries = dir(&l, ino)?.entries.as_ref().expect("a directory");
        let range = match cursor {
            Some(c) => {
                entries.range::<str, _>((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
            }
            None => entries.range::<str, _>(..),
        };
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut more = false;
        for (name, entry) in range {
            if page.len() == limit || bytes + name.len() + 24 > READDIR_BUDGET {
                more = true;
                break;
            }
            bytes += name.len() + 24;
            page.push(DirEntry {
                name: name.clone(),
                ino: entry.ino,
                kind: to_kind(entry.kind),
            });
        }
        let next = if more {
            page.last().map(|e| e.name.clone())
        } else {
            None
        };
        Ok(Exec::Now(Ok(Body::Entries {
            entries: page,
            next,
        })))
    }

    /// UNLINK (`want` = File) and RMDIR (`want` = Directory).
    fn remove(&self, parent: u64, name: String, want: FileKind) -> OpResult {
        check_name(&name)?;
        self.writable()?;
        loop {
            let child = {
                let l = self.table.lock(&[parent]);
                let p = dir(&l, parent)?;
                *p.entries
                    .as_ref()
                    .and_then(|e| e.get(&name))
                    .ok_or(Errno::ENOENT)?
            };
            match (want, child.kind) {
                (FileKind::File, FileKind::Directory) => return Err(Errno::EISDIR),
                (FileKind::Directory, FileKind::File) => return Err(Errno::ENOTDIR),
                _ => {}
            }
            let now = now_ns();
            let mut l = self.table.lock(&[parent, child.ino]);
            let p = dir_mut(&mut l, parent)?;
            if entries_mut(p).get(&name) != Some(&child) {
                continue; // changed between the two lock rounds: look again
            }
            if want == FileKind::Directory
                && l.get(child.ino)
                    .and_then(|c| c.entries.as_ref())
                    .is_some_and(|e| !e.is_empty())
            {
                return Err(Errno::ENOTEMPTY);
            }
            let transno = self.next_transno();
            let p = dir_mut(&mut l, parent)?;
            entries_mut(p).remove(&name);
            p.attr.entries -= 1;
            if want == FileKind::Directory {
                p.attr.nlink -= 1;
            }
            touch(&mut p.attr, now, transno);
            let parent_image = p.attr.image();
            let mut ops = vec![JournalOp::DeleteDentry { parent, name }];
            ops.push(self.drop_link(&mut l, child.ino, now, transno));
            ops.push(JournalOp::PutInode(parent_image));
            drop(l);
            return Ok(Exec::Mutation {
                transno,
                body: Body::Done,
                record: TxRecord { transno, ops },
            });
        }
    }

    /// Removes one name of `ino`: a directory or a file's last link deletes the inode.
    fn drop_link(&self, l: &mut Locked<'_>, ino: u64, now: i64, transno: u64) -> JournalOp {
        let node = l.get_mut(ino).expect("an entry names a live inode");
        if node.attr.kind == FileKind::File && node.attr.nlink > 1 {
            node.attr.nlink -= 1;
            node.attr.ctime_ns = now;
            node.attr.transno = transno;
            return JournalOp::PutInode(node.attr.image());
        }
        let removed = l.remove(ino).expect("just found");
        match removed.attr.kind {
            FileKind::Directory => self.directories.fetch_sub(1, Ordering::Relaxed),
            FileKind::File => self.files.fetch_sub(1, Ordering::Relaxed),
        };
        JournalOp::DeleteInode(ino)
    }

    fn rename(&self, sp: u64, sn: String, dp: u64, dn: String) -> OpResult {
        check_name(&sn)?;
        check_name(&dn)?;
        self.writable()?;
        let _cross = (sp != dp).then(|| self.rename_lock.lock());
        loop {
            let (src, dst) = {
                let l = self.table.lock(&[sp, dp]);
                let s = dir(&l, sp)?;
                let d = dir(&l, dp)?;
                let src = *s
                    .entries
                    .as_ref()
                    .and_then(|e| e.get(&sn))
                    .ok_or(Errno::ENOENT)?;
                (src, d.entries.as_ref().and_then(|e| e.get(&dn)).copied())
            };
            if sp == dp && sn == dn {
                return Ok(Exec::Now(Ok(Body::Done)));
            }
            if let Some(dst) = dst {
                match (src.kind, dst.kind) {
                    (FileKind::Directory, FileKind::File) => return Err(Errno::ENOTDIR),
                    (FileKind::File, FileKind::Directory) => return Err(Errno::EISDIR),
                    _ => {}
                }
            }
            if src.kind == FileKind::Directory && sp != dp && self.is_ancestor(src.ino, dp) {
                return Err(Errno::EINVAL);
            }
            let now = now_ns();
            let mut inos = vec![sp, dp, src.ino];
            inos.extend(dst.map(|d| d.ino));
            let mut l = self.table.lock(&inos);
            let still_src = dir(&l, sp)?
                .entries
                .as_ref()
                .and_then(|e| e.get(&sn))
                .copied();
            let still_dst = dir(&l, dp)?
                .entries
                .as_ref()
                .and_then(|e| e.get(&dn))
                .copied();
            if still_src != Some(src) || still_dst != dst {
                continue; // changed between the two lock rounds: look again
            }
            if let Some(dst) = dst
                && dst.kind == FileKind::Directory
                && l.get(dst.ino)
                    .and_then(|d| d.entries.as_ref())
                    .is_some_and(|e| !e.is_empty())
            {
                return Err(Errno::ENOTEMPTY);
            }
            let transno = self.next_transno();
            let is_dir = src.kind == FileKind::Directory;
            let mut ops = Vec::with_capacity(6);

            // Source directory loses the name (and the moved directory's "..").
            let s = dir_mut(&mut l, sp)?;
            entries_mut(s).remove(&sn);
            s.attr.entries -= 1;
            if is_dir && sp != dp {
                s.attr.nlink -= 1;
            }
            touch(&mut s.attr, now, transno);
            ops.push(JournalOp::DeleteDentry {
                parent: sp,
                name: sn,
            });

            // A replaced target loses its name, and its inode if that was the last one.
            if let Some(dst) = dst {
                ops.push(self.drop_link(&mut l, dst.ino, now, transno));
                let d = dir_mut(&mut l, dp)?;
                d.attr.entries -= 1;
                if dst.kind == FileKind::Directory {
                    d.attr.nlink -= 1;
                }
            }

            // Destination directory gains the name.
            let d = dir_mut(&mut l, dp)?;
            entries_mut(d).insert(dn.clone(), src);
            d.attr.entries += 1;
            if is_dir && sp != dp {
                d.attr.nlink += 1;
            }
            touch(&mut d.attr, now, transno);
            ops.push(JournalOp::PutDentry {
                parent: dp,
                name: dn,
                entry: src.record(),
            });

            let moved = l.get_mut(src.ino).expect("an entry names a live inode");
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
            drop(l);
            return Ok(Exec::Mutation {
                transno,
                body: Body::Done,
                record: TxRecord { transno, ops },
            });
        }
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors. Called under the
    /// rename lock, so no directory changes parent meanwhile.
    fn is_ancestor(&self, ancestor: u64, mut dir: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            let parent = {
                let l = self.table.lock(&[dir]);
                match l.get(dir) {
                    Some(node) => node.attr.parent,
                    None => return false,
                }
            };
            if parent == dir {
                return false; // the root is its own parent
            }
            dir = parent;
        }
    }
}
