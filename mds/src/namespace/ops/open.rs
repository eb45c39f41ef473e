//! OPEN and RELEASE, and the orphans open handles keep: a file whose last name goes while a
//! handle holds it stays (`nlink` 0, journaled with the clients that held it, Lustre's
//! PENDING directory) until its last handle is released — then its inode, data and
//! extended attributes go in one record. Handles do not survive a restart: the orphans the
//! store holds at start wait for the recovery window, in which their clients take their
//! handles back (an OPEN with `reopen`), and those nobody took back are reclaimed when it
//! ends ([`Namespace::reclaim_orphans`]). A session that ends (expired) releases its handles
//! the same way ([`Namespace::release_all`]).

use std::sync::atomic::Ordering;

use journal::{JournalOp, TxRecord};
use mds_proto::{Body, Errno, OpenFlags};

use super::{Cx, OpResult, inode_mut, may, may_execute, mutation, now, see_inode};
use crate::namespace::handles::{NotInserted, OpenHandle};
use crate::namespace::node::FileKind;
use crate::namespace::perm::{self, READ, WRITE};
use crate::namespace::{Caller, Namespace, now_ns, to_attr};

impl Namespace {
    /// OPEN: checks what the handle is for as Linux's `may_open` does (read and write
    /// permission; a truncate needs write permission even without write access, as
    /// `O_RDONLY|O_TRUNC` does; execve(2)'s open needs execute permission, not read, so a
    /// `--x` program runs; a directory only to read, EISDIR; a symlink never, ELOOP),
    /// then records the handle; O_TRUNC on a regular file cuts it to 0 bytes, a mutation.
    /// A reopen after a restart of an orphan this client held is not checked again: it was
    /// open before the restart, and a chmod since would not have closed it.
    pub(super) fn open(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        flags: OpenFlags,
        reopen: bool,
    ) -> OpResult {
        if reopen && flags.truncate {
            return Err(Errno::EINVAL);
        }
        let client = cx.caller.client;
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        let wants_write = flags.write || flags.truncate;
        match node.attr.kind {
            FileKind::Directory if wants_write => return Err(Errno::EISDIR),
            FileKind::Symlink => return Err(Errno::ELOOP),
            _ => {}
        }
        let held_before = reopen && node.is_orphan() && self.held_before_restart(ino, client);
        if !held_before {
            if flags.exec {
                may_execute(cx, node)?;
            } else {
                let want = if flags.read { READ } else { 0 } | if wants_write { WRITE } else { 0 };
                may(cx, node, want)?;
            }
        }
        let open = OpenHandle {
            ino,
            read: flags.read,
            write: flags.write,
            append: flags.append,
        };
        let truncate = flags.truncate && node.attr.kind == FileKind::File;
        if let Some(existing) = self.handles.get(client, handle) {
            // The same OPEN again (a resend, or the reopen of a handle a replay reopened):
            // the same handle. Anything else by that number is the client's mistake.
            return if existing == open && !truncate {
                Ok(now(Body::Attr(to_attr(&node.attr))))
            } else {
                Err(Errno::EINVAL)
            };
        }
        if !truncate {
            self.handles.insert(client, handle, open).map_err(refusal)?;
            node.add_open(client);
            return Ok(now(Body::Attr(to_attr(&node.attr))));
        }
        self.writable()?;
        let partial = self.prepare_resize(node, 0)?;
        self.handles.insert(client, handle, open).map_err(refusal)?;
        let transno = match self.next_transno() {
            Ok(t) => t,
            Err(e) => {
                self.handles.remove(client, handle, ino);
                return Err(e);
            }
        };
        node.add_open(client);
        node.stamp = cx.stamp(node.stamp, transno);
        let mut ops = self.journal_ops([]);
        self.apply_resize(node, 0, partial, transno, &mut ops);
        let attr = &mut node.attr;
        attr.mode = perm::mode_after_write(cx.caller.cred, attr);
        attr.mtime_ns = now_at;
        attr.ctime_ns = now_at;
        attr.transno = transno;
        ops.push(JournalOp::PutInode(attr.image()));
        Ok(mutation(transno, ops, Body::Attr(to_attr(attr))))
    }

    /// Whether `client` held the orphan `ino` open when the last start ended.
    fn held_before_restart(&self, ino: u64, client: u64) -> bool {
        self.loaded_orphans
            .lock()
            .iter()
            .any(|(o, owners)| *o == ino && owners.contains(&client))
    }

    /// RELEASE: the handle goes; an orphan's last one takes the file with it. A handle that
    /// is not open answers Done (a resend of a release that was answered, or one of a handle
    /// a restart took).
    pub(super) fn release(&self, cx: &mut Cx<'_>, handle: u64) -> OpResult {
        let client = cx.caller.client;
        let Some(open) = self.handles.get(client, handle) else {
            return Ok(now(Body::Done));
        };
        let ino = open.ino;
        let mut l = self.table.lock(&[ino]);
        let last_of_orphan = l
            .get(ino)
            .is_some_and(|n| n.is_orphan() && n.open_count() == 1);
        if !last_of_orphan {
            if self.handles.remove(client, handle, ino).is_some()
                && let Some(node) = l.get_mut(ino)
            {
                node.drop_open(client);
            }
            return Ok(now(Body::Done));
        }
        // The transno first: if none can be had, the handle stays and the client may retry.
        self.writable()?;
        let transno = self.next_transno()?;
        self.handles.remove(client, handle, ino);
        let mut ops = self.journal_ops([]);
        self.delete_inode(cx, &mut l, ino, transno, &mut ops);
        Ok(mutation(transno, ops, Body::Done))
    }

    /// A session ended: every handle `client` held goes, and each orphan whose last handle
    /// that was goes with it, in a record of its own (returned, for the committer).
    pub fn release_all(&self, client: u64, last_committed: u64) -> Vec<TxRecord> {
        let caller = Caller::server(client, last_committed);
        let cx = &mut Cx {
            caller: &caller,
            wait: 0,
        };
        let mut records = Vec::new();
        for (_, open) in self.handles.take_all(client) {
            let mut l = self.table.lock(&[open.ino]);
            let Some(node) = l.get_mut(open.ino) else {
                continue;
            };
            node.drop_open(client);
            if node.is_orphan() && node.opens.is_none() {
                records.extend(self.reclaim(cx, &mut l, open.ino));
            }
        }
        records
    }

    /// Recovery ended: the orphans loaded at start that no client took a handle back on go,
    /// each in a record of its own (returned, for the committer). Those that were taken back
    /// stay until their last release.
    pub fn reclaim_orphans(&self, last_committed: u64) -> Vec<TxRecord> {
        let loaded = std::mem::take(&mut *self.loaded_orphans.lock());
        let mut records = Vec::new();
        for (ino, owners) in loaded {
            let caller = Caller::server(owners.first().copied().unwrap_or(0), last_committed);
            let cx = &mut Cx {
                caller: &caller,
                wait: 0,
            };
            let mut l = self.table.lock(&[ino]);
            if l.get(ino)
                .is_some_and(|n| n.is_orphan() && n.opens.is_none())
            {
                records.extend(self.reclaim(cx, &mut l, ino));
            }
        }
        if !records.is_empty() {
            tracing::info!(
                reclaimed = records.len(),
                "orphans no client took back are reclaimed"
            );
        }
        records
    }

    /// Deletes the orphan `ino` (locked, with no handle left) in a transno of its own. Left
    /// for the next start if no transno can be had (the journal failed, or the ceiling).
    fn reclaim(
        &self,
        cx: &mut Cx<'_>,
        l: &mut crate::namespace::table::Locked<'_>,
        ino: u64,
    ) -> Option<TxRecord> {
        let transno = self.writable().and_then(|()| self.next_transno());
        let Ok(transno) = transno else {
            tracing::warn!(
                ino,
                "an orphan cannot be reclaimed now; the next start will"
            );
            return None;
        };
        let mut ops = Vec::with_capacity(4);
        self.delete_inode(cx, l, ino, transno, &mut ops);
        Some(TxRecord { transno, ops })
    }

    /// An orphan was made (`drop_link`) or went: the count STATFS reports.
    pub(super) fn count_orphan(&self, n: i64) {
        self.orphans.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// The answer to an OPEN whose handle was not recorded: EINVAL for a number the client
/// holds (opened concurrently under one number), else the cap's EMFILE or ENFILE.
fn refusal(why: NotInserted) -> Errno {
    match why {
        NotInserted::Taken => Errno::EINVAL,
        NotInserted::Capped(errno) => errno,
    }
}
