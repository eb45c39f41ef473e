//! Small files' data on the server (Lustre's Data-on-MDT): READ and WRITE through handles,
//! and what a size change does to the data. Data is kept in blocks of `journal::DATA_BLOCK`
//! bytes, each stored whole up to the file's end as it was when written; a block that is not
//! stored is a hole and reads as zeros, as do the bytes past a short block's end. No block
//! past the file's end is ever kept: a truncate deletes them.
//!
//! A WRITE journals the blocks it touches with the inode (size, mtime, ctime) in one record,
//! so after a crash size, times and data agree. Memory holds only what may not be durable yet
//! (`Node::data`, trimmed after each commit by [`Namespace::data_committed`]); committed
//! blocks are read from the store, so the server's memory does not grow with the data it
//! keeps. Every block a WRITE changes part of, and a truncate's partial block, is read
//! before the transno is taken: nothing may fail after it.
//!
//! Commit-on-share: data is part of the inode's state — a WRITE writes the inode's stamp, a
//! READ looks at it, so another client's read of uncommitted data waits for its commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use journal::{DATA_BLOCK, JournalOp};
use mds_proto::{Body, Data, Errno, MAX_IO};

use super::objects::Resize;
use super::{Cx, OpResult, RESEND_OPS, inode_mut, mutation, now, regular, see_inode, touch_atime};
use crate::namespace::handles::OpenHandle;
use crate::namespace::node::{FileKind, Node};
use crate::namespace::perm;
use crate::namespace::{Namespace, now_ns, to_attr};

const BLOCK: u64 = DATA_BLOCK as u64;

/// Blocks a file of `size` bytes spans.
fn blocks(size: u64) -> u32 {
    u32::try_from(size.div_ceil(BLOCK)).unwrap_or(u32::MAX)
}

impl Namespace {
    fn data_on(&self) -> Result<(), Errno> {
        if self.inline_data_max == 0 {
            Err(Errno::EOPNOTSUPP)
        } else {
            Ok(())
        }
    }

    /// The handle a READ or WRITE names, or EBADF if the client holds none by that number on
    /// `ino`; `None` for a replay, which executes without one (the restart took the handles;
    /// its ticket proves the server allowed it).
    pub(super) fn handle_for(
        &self,
        cx: &Cx<'_>,
        ino: u64,
        handle: u64,
    ) -> Result<Option<OpenHandle>, Errno> {
        if cx.caller.replay {
            return Ok(None);
        }
        match self.handles.get(cx.caller.client, handle) {
            Some(open) if open.ino == ino => Ok(Some(open)),
            _ => Err(Errno::EBADF),
        }
    }

    /// Block `block` of `node` as a reader must see it: what an uncommitted change wrote, a
    /// hole where an uncommitted truncate cut, or what the store holds (empty: a hole).
    fn block_of(&self, node: &Node, block: u32) -> Result<Vec<u8>, Errno> {
        if let Some(pending) = &node.data {
            if let Some((bytes, _)) = pending.blocks.get(&block) {
                return Ok(bytes.to_vec());
            }
            if pending.cut.is_some_and(|(from, _)| block >= from) {
                return Ok(Vec::new());
            }
        }
        let mut bytes = Vec::new();
        if let Some(store) = &self.store {
            store
                .read_block(node.attr.ino, block, &mut bytes)
                .map_err(|e| {
                    tracing::error!(ino = node.attr.ino, block, cause = %e, "reading file data");
                    Errno::EIO
                })?;
        }
        Ok(bytes)
    }

    /// Whether block `block` of `node` holds data as a reader must see it (`block_of` not
    /// empty), without reading it where that can be told otherwise: no block at or past
    /// the file's end is ever kept.
    fn block_held(&self, node: &Node, block: u32) -> Result<bool, Errno> {
        if block >= blocks(node.attr.size) {
            return Ok(false);
        }
        if let Some(pending) = &node.data {
            if pending.blocks.contains_key(&block) {
                return Ok(true);
            }
            if pending.cut.is_some_and(|(from, _)| block >= from) {
                return Ok(false);
            }
        }
        let Some(store) = &self.store else {
            return Ok(false);
        };
        store.has_block(node.attr.ino, block).map_err(|e| {
            tracing::error!(ino = node.attr.ino, block, cause = %e, "reading file data");
            Errno::EIO
        })
    }

    /// How many of blocks `from..to` of `node` hold data (`block_held`), read in one pass
    /// over the store's keys: what a truncate from `from` takes away.
    fn blocks_held(&self, node: &Node, from: u32, to: u32) -> Result<u64, Errno> {
        let to = to.min(blocks(node.attr.size));
        if from >= to {
            return Ok(0);
        }
        let stored = match &self.store {
            Some(store) => store.stored_blocks(node.attr.ino, from, to).map_err(|e| {
                tracing::error!(ino = node.attr.ino, cause = %e, "reading file data");
                Errno::EIO
            })?,
            None => Vec::new(),
        };
        let pending = node.data.as_deref();
        let cut = pending.and_then(|p| p.cut).map(|(f, _)| f);
        let mut held = stored
            .into_iter()
            .filter(|&b| cut.is_none_or(|f| b < f))
            .filter(|b| pending.is_none_or(|p| !p.blocks.contains_key(b)))
            .count() as u64;
        if let Some(p) = pending {
            held += p.blocks.range(from..to).count() as u64;
        }
        Ok(held)
    }

    /// READ: up to `len` bytes from `offset`, fewer at the end of the file, holes as zeros.
    pub(super) fn read(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        offset: u64,
        len: u32,
    ) -> OpResult {
        self.data_on()?;
        if self.handle_for(cx, ino, handle)?.is_some_and(|h| !h.read) {
            return Err(Errno::EBADF);
        }
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        regular(node)?;
        if node.attr.in_objects() {
            return Err(Errno::EMEDIUMTYPE);
        }
        let end = offset
            .saturating_add((len as usize).min(MAX_IO) as u64)
            .min(node.attr.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let within = (pos % BLOCK) as usize;
            let take = (BLOCK - pos % BLOCK).min(end - pos) as usize;
            let block = self.block_of(node, (pos / BLOCK) as u32)?;
            let have = block.len().saturating_sub(within).min(take);
            out.extend_from_slice(&block[within.min(block.len())..][..have]);
            out.resize(out.len() + take - have, 0);
            pos += take as u64;
        }
        touch_atime(cx, &mut node.attr, now_ns());
        Ok(now(Body::Data(Data(out))))
    }

    /// WRITE: `data` at `offset` (at the end for a handle opened to append, or an offset of
    /// `u64::MAX`, which is how an appending write is replayed), up to `--inline-data-max`
    /// (EFBIG beyond); set-ID bits go as Linux drops them on a write.
    pub(super) fn write(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> OpResult {
        self.data_on()?;
        if data.len() > MAX_IO {
            return Err(Errno::EINVAL);
        }
        self.writable()?;
        let open = self.handle_for(cx, ino, handle)?;
        if open.is_some_and(|h| !h.write) {
            return Err(Errno::EBADF);
        }
        let append = open.is_some_and(|h| h.append) || offset == u64::MAX;
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        regular(node)?;
        if node.attr.in_objects() {
            return Err(Errno::EMEDIUMTYPE);
        }
        let offset = if append { node.attr.size } else { offset };
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= self.inline_data_max)
            .ok_or(Errno::EFBIG)?;
        if data.is_empty() {
            return Ok(now(Body::Attr(to_attr(&node.attr))));
        }
        // Every block it touches, whole, before the transno; and how many of them held no
        // data before (the file's count grows by those).
        let mut written = Vec::with_capacity(data.len() / DATA_BLOCK + 2);
        let (mut pos, mut rest, mut new_blocks) = (offset, &data[..], 0u64);
        while !rest.is_empty() {
            let block = (pos / BLOCK) as u32;
            let within = (pos % BLOCK) as usize;
            let take = (DATA_BLOCK - within).min(rest.len());
            let mut bytes = if within == 0 && take == DATA_BLOCK {
                new_blocks += u64::from(!self.block_held(node, block)?);
                Vec::with_capacity(DATA_BLOCK)
            } else {
                let bytes = self.block_of(node, block)?;
                new_blocks += u64::from(bytes.is_empty());
                bytes
            };
            if bytes.len() < within + take {
                bytes.resize(within + take, 0);
            }
            bytes[within..within + take].copy_from_slice(&rest[..take]);
            written.push((block, bytes));
            rest = &rest[take..];
            pos += take as u64;
        }
        let transno = self.next_transno()?;
        let held = u64::from(node.attr.data_blocks) + new_blocks;
        self.set_data_blocks(&mut node.attr, held);
        let mut ops = Vec::with_capacity(written.len() + 1 + RESEND_OPS);
        for (block, bytes) in written {
            ops.push(JournalOp::PutData {
                ino,
                block,
                bytes: bytes.clone(),
            });
            self.hold_block(node, block, bytes.into(), transno);
        }
        self.pending_data.lock().push_back((transno, ino));
        Ok(self.written(cx, node, end, (now_at, transno), ops))
    }

    /// A write's change to its file, in `transno` at `now_at`, its data ops in `ops`: the size
    /// at least `end`, set-ID bits dropped as Linux drops them, mtime and ctime; the inode
    /// journaled with them and answered.
    pub(super) fn written(
        &self,
        cx: &mut Cx<'_>,
        node: &mut Node,
        end: u64,
        (now_at, transno): (i64, u64),
        mut ops: Vec<JournalOp>,
    ) -> crate::namespace::Exec {
        let attr = &mut node.attr;
        if end > attr.size {
            self.file_bytes
                .fetch_add(end - attr.size, Ordering::Relaxed);
            attr.size = end;
        }
        attr.mode = perm::mode_after_write(cx.caller.cred, attr);
        attr.mtime_ns = now_at;
        attr.ctime_ns = now_at;
        attr.transno = transno;
        node.stamp = cx.stamp(node.stamp, transno);
        ops.push(JournalOp::PutInode(node.attr.image()));
        mutation(transno, ops, Body::Attr(to_attr(&node.attr)))
    }

    /// Keeps a block written in `transno` where readers find it until that is durable.
    fn hold_block(&self, node: &mut Node, block: u32, bytes: Arc<[u8]>, transno: u64) {
        let len = bytes.len() as u64;
        let pending = node.data.get_or_insert_with(Default::default);
        let before = pending.blocks.insert(block, (bytes, transno));
        let freed = before.map_or(0, |(b, _)| b.len() as u64);
        self.pending_data_bytes.fetch_add(len, Ordering::Relaxed);
        self.pending_data_bytes.fetch_sub(freed, Ordering::Relaxed);
    }

    /// A size change to `size`, before its transno: for a file in objects (or an empty one
    /// that moves there) what `ops/objects.rs` finds; else EFBIG past `--inline-data-max`
    /// (when file data is on), and the block it cuts into, cut, if that block holds bytes
    /// past the new end (they must read as zeros if the file grows again).
    pub(super) fn prepare_resize(&self, node: &Node, size: u64) -> Result<Resize, Errno> {
        if let Some(resize) = self.prepare_objects_resize(node, size)? {
            return Ok(resize);
        }
        self.prepare_inline_resize(node, size)
    }

    fn prepare_inline_resize(&self, node: &Node, size: u64) -> Result<Resize, Errno> {
        let old = node.attr.size;
        if size > old && self.inline_data_max > 0 && size > self.inline_data_max {
            return Err(Errno::EFBIG);
        }
        if size >= old || node.attr.kind != FileKind::File {
            return Ok(Resize::Inline {
                partial: None,
                dropped: 0,
            });
        }
        let dropped = self.blocks_held(node, blocks(size), blocks(old))?;
        let within = (size % BLOCK) as usize;
        let partial = if within == 0 {
            None
        } else {
            let block = (size / BLOCK) as u32;
            let mut bytes = self.block_of(node, block)?;
            (bytes.len() > within).then(|| {
                bytes.truncate(within);
                (block, bytes)
            })
        };
        Ok(Resize::Inline { partial, dropped })
    }

    /// A size change, under its transno: blocks past the new end deleted (and read as holes
    /// until that is durable), the cut block rewritten, the size and the files' total moved.
    pub(super) fn apply_resize(
        &self,
        node: &mut Node,
        size: u64,
        resize: Resize,
        transno: u64,
        ops: &mut Vec<JournalOp>,
    ) {
        let (ino, old) = (node.attr.ino, node.attr.size);
        if node.attr.kind == FileKind::File {
            if size >= old {
                self.file_bytes.fetch_add(size - old, Ordering::Relaxed);
            } else {
                self.file_bytes.fetch_sub(old - size, Ordering::Relaxed);
            }
        }
        node.attr.size = size;
        let partial = match resize {
            Resize::Inline { partial, dropped } => {
                let held = u64::from(node.attr.data_blocks).saturating_sub(dropped);
                self.set_data_blocks(&mut node.attr, held);
                partial
            }
            objects => return self.apply_objects_resize(node, objects, transno, ops),
        };
        if size >= old || node.attr.kind != FileKind::File {
            return;
        }
        let (from, to) = (blocks(size), blocks(old));
        if from < to {
            ops.push(JournalOp::DeleteData { ino, from, to });
            let pending = node.data.get_or_insert_with(Default::default);
            let dropped: usize = pending
                .blocks
                .split_off(&from)
                .values()
                .map(|(b, _)| b.len())
                .sum();
            self.pending_data_bytes
                .fetch_sub(dropped as u64, Ordering::Relaxed);
            let first = pending.cut.map_or(from, |(f, _)| f.min(from));
            pending.cut = Some((first, transno));
            self.pending_data.lock().push_back((transno, ino));
        }
        if let Some((block, bytes)) = partial {
            ops.push(JournalOp::PutData {
                ino,
                block,
                bytes: bytes.clone(),
            });
            self.hold_block(node, block, bytes.into(), transno);
            self.pending_data.lock().push_back((transno, ino));
        }
    }

    /// The journal ops that delete a file's data with the file.
    pub(super) fn delete_data(&self, node: &Node, ops: &mut Vec<JournalOp>) {
        if let Some(pending) = &node.data {
            self.pending_data_bytes
                .fetch_sub(pending.bytes() as u64, Ordering::Relaxed);
        }
        if let Some(xattrs) = &node.xattrs {
            self.pending_data_bytes
                .fetch_sub(xattrs.pending_bytes() as u64, Ordering::Relaxed);
        }
        if node.attr.kind != FileKind::File {
            return;
        }
        self.count_file(&node.attr, false);
        if node.attr.in_objects() {
            // The collector deletes its slices, then the layout (`crate::objects`).
            ops.push(JournalOp::LayoutGone {
                ino: node.attr.ino,
                since: crate::namespace::unix_now(),
            });
        } else if node.attr.size > 0 {
            ops.push(JournalOp::DeleteData {
                ino: node.attr.ino,
                from: 0,
                to: blocks(node.attr.size),
            });
        }
    }

    /// A file moving to objects in `transno`: its blocks on the server deleted (and read as
    /// holes until that is durable; nothing reads them after, as the file is in objects).
    pub(super) fn drop_inline(&self, node: &mut Node, transno: u64, ops: &mut Vec<JournalOp>) {
        let ino = node.attr.ino;
        let to = blocks(node.attr.size);
        if to > 0 {
            ops.push(JournalOp::DeleteData { ino, from: 0, to });
        }
        self.set_data_blocks(&mut node.attr, 0);
        if let Some(pending) = node.data.as_mut() {
            let dropped = pending.bytes();
            pending.blocks.clear();
            self.pending_data_bytes
                .fetch_sub(dropped as u64, Ordering::Relaxed);
            pending.cut = Some((0, transno));
            self.pending_data.lock().push_back((transno, ino));
        }
    }

    /// Everything up to `last_committed` is durable: the data and long attribute values it
    /// wrote are dropped from memory (readers find them in the store now). Called by the committer after each commit.
    pub fn data_committed(&self, last_committed: u64) {
        loop {
            let ino = {
                let mut queue = self.pending_data.lock();
                match queue.front() {
                    Some(&(transno, ino)) if transno <= last_committed => {
                        queue.pop_front();
                        ino
                    }
                    _ => return,
                }
            };
            let mut l = self.table.lock(&[ino]);
            let Some(node) = l.get_mut(ino) else {
                continue; // deleted since, and its data with it
            };
            if let Some(pending) = node.data.as_mut() {
                let dropped = pending.trim(last_committed);
                self.pending_data_bytes
                    .fetch_sub(dropped as u64, Ordering::Relaxed);
                if pending.is_empty() {
                    node.data = None;
                }
            }
            if let Some(xattrs) = node.xattrs.as_mut() {
                let dropped = xattrs.trim(last_committed);
                self.pending_data_bytes
                    .fetch_sub(dropped as u64, Ordering::Relaxed);
            }
        }
    }
}
