//! File data in the object store, as the server sees it: a file whose data outgrew
//! `--inline-data-max` keeps it in slices (objects written once by the client, never changed)
//! and the server keeps only the file's layout — which pieces of which slices make up which
//! bytes, newest last (`mds_proto::Placed`). ALLOC_SLICES hands out slice ids, WRITE_SLICES
//! adds pieces a client has uploaded, LAYOUT tells a reader where the bytes are; a truncate
//! clips the layout, and a deletion leaves it for the collector (`crate::objects`).
//!
//! A file in objects is marked in its inode (`InodeAttr::in_objects`), so that a WRITE or READ
//! of it is refused (EMEDIUMTYPE: ask LAYOUT) and a deletion knows it without a read. The
//! layout itself is read from the store when asked for, with what an uncommitted change wrote
//! held in memory until its commit, as inline data is (`ops/data.rs`); every read happens
//! before the transno is taken.
//!
//! Commit-on-share: the layout is part of the inode's state, as data is.

use std::collections::HashSet;
use std::sync::Arc;

use journal::JournalOp;
use mds_proto::{Body, Errno, FileLayout, MAX_PLACED, MAX_SLICE_IDS, Placed};

use super::{Cx, OpResult, inode_mut, mutation, now, see_inode};
use crate::namespace::node::{FileKind, Node};
use crate::namespace::perm::{self, READ, WRITE};
use crate::namespace::{Namespace, now_ns, unix_now};

/// Most pieces one file's layout holds: a layout is one value in the store, rewritten by each
/// WRITE_SLICES. Pieces wholly covered by a newer one are dropped as they come, so only a
/// file rewritten in more small scattered pieces than this reaches it (EFBIG then).
pub const MAX_LAYOUT: usize = 1 << 16;

/// The largest size a file may have: Linux's `MAX_LFS_FILESIZE` on 64-bit machines.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// What a size change does to a file's data, found before its transno.
pub(crate) enum Resize {
    /// A file on the server: the block it cuts into, cut, if that block holds bytes past the
    /// new end; and how many blocks holding data it cuts off.
    Inline {
        partial: Option<(u32, Vec<u8>)>,
        dropped: u64,
    },
    /// A file in objects cut shorter: its layout clipped to the new size, and the slices no
    /// piece names any more (id, size).
    Clip {
        layout: Vec<Placed>,
        garbage: Vec<(u64, u64)>,
    },
    /// A file in objects that grows (the new bytes are a hole), or an empty file on the
    /// server that grows past the cap and moves to objects with nothing placed.
    Grow,
}

/// `layout` with `new` added after it: pieces wholly inside a new one's bytes dropped (they
/// can never be read again). Returns the slices that no piece names any more (id, size).
pub(crate) fn place(layout: &mut Vec<Placed>, new: &[Placed]) -> Vec<(u64, u64)> {
    let before: Vec<(u64, u64)> = distinct_slices(layout);
    for p in new {
        layout.retain(|q| !(q.file_off >= p.file_off && q.file_end() <= p.file_end()));
        layout.push(*p);
    }
    unnamed(before, layout)
}

/// `layout` cut at `size`: pieces past it dropped, a piece across it shortened. Returns the
/// slices no piece names any more (id, size).
pub(crate) fn clip(layout: &mut Vec<Placed>, size: u64) -> Vec<(u64, u64)> {
    let before = distinct_slices(layout);
    layout.retain(|p| p.file_off < size);
    for p in layout.iter_mut() {
        p.len = p.len.min(size - p.file_off);
    }
    unnamed(before, layout)
}

fn distinct_slices(layout: &[Placed]) -> Vec<(u64, u64)> {
    let mut seen = HashSet::new();
    layout
        .iter()
        .filter(|p| seen.insert(p.slice))
        .map(|p| (p.slice, p.slice_size))
        .collect()
}

/// Of the slices `before` named, those `layout` does not.
fn unnamed(before: Vec<(u64, u64)>, layout: &[Placed]) -> Vec<(u64, u64)> {
    let named: HashSet<u64> = layout.iter().map(|p| p.slice).collect();
    before
        .into_iter()
        .filter(|(slice, _)| !named.contains(slice))
        .collect()
}

/// What WRITE_SLICES and COMPACT_LAYOUT ask of the inode, under its lock: a regular file the
/// caller may write — through its handle, or by its permission bits without one.
fn may_place(cx: &mut Cx<'_>, node: &Node, handle: u64) -> Result<(), Errno> {
    see_inode(cx, node);
    super::regular(node)?;
    if handle == 0 && !cx.caller.replay {
        perm::check(cx.caller.cred, &node.attr, node.access_acl(), WRITE)?;
    }
    Ok(())
}

impl Namespace {
    /// What WRITE_SLICES and COMPACT_LAYOUT check before the inode's lock: an object store,
    /// at most [`MAX_PLACED`] pieces, each inside its slice, a namespace that takes changes, and a
    /// handle (if one is named) open to write.
    fn check_placing(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        placed: &[Placed],
    ) -> Result<(), Errno> {
        self.objects_on()?;
        if placed.len() > MAX_PLACED || !placed.iter().all(Placed::is_valid) {
            return Err(Errno::EINVAL);
        }
        self.writable()?;
        let open = if handle == 0 {
            None
        } else {
            self.handle_for(cx, ino, handle)?
        };
        if open.is_some_and(|h| !h.write) {
            return Err(Errno::EBADF);
        }
        Ok(())
    }

    /// Whether files may grow past the inline cap into an object store.
    fn objects_on(&self) -> Result<(), Errno> {
        if self.object_store {
            Ok(())
        } else {
            Err(Errno::EOPNOTSUPP)
        }
    }

    /// The layout of the file in objects `node` as a reader must see it: what an uncommitted
    /// change wrote, or the store's. `None` for a file on the server.
    pub(crate) fn layout_of(&self, node: &Node) -> Result<Option<Arc<Vec<Placed>>>, Errno> {
        if node.attr.kind != FileKind::File || !node.attr.in_objects() {
            return Ok(None);
        }
        if let Some((layout, _)) = node.data.as_ref().and_then(|d| d.layout.as_ref()) {
            return Ok(Some(layout.clone()));
        }
        let Some(store) = &self.store else {
            return Ok(Some(Arc::default()));
        };
        let ino = node.attr.ino;
        match store.layout(ino) {
            Ok(layout) => Ok(Some(Arc::new(layout.unwrap_or_default()))),
            Err(e) => {
                tracing::error!(ino, cause = %e, "reading a file's layout");
                Err(Errno::EIO)
            }
        }
    }

    /// Keeps a layout written in `transno` where readers find it until that is durable.
    fn hold_layout(&self, node: &mut Node, layout: Arc<Vec<Placed>>, transno: u64) {
        let pending = node.data.get_or_insert_with(Default::default);
        pending.layout = Some((layout, transno));
        self.pending_data.lock().push_back((transno, node.attr.ino));
    }

    /// The journal ops that put slices no layout names into the collector's list.
    fn to_garbage(garbage: Vec<(u64, u64)>, ops: &mut Vec<JournalOp>) {
        let since = unix_now();
        ops.extend(
            garbage
                .into_iter()
                .map(|(slice, size)| JournalOp::PutGarbage { slice, size, since }),
        );
    }

    /// ALLOC_SLICES: `count` ids never handed out, from this shard's range (the inode
    /// numbers' range: each shard's ids differ in the same top bits as its inodes'), the
    /// counter journaled with the answer, which waits for that commit.
    pub(super) fn alloc_slices(&self, count: u32) -> OpResult {
        self.objects_on()?;
        if count == 0 || count > MAX_SLICE_IDS {
            return Err(Errno::EINVAL);
        }
        self.writable()?;
        let mut next = self.next_slice.lock();
        let first = if let Some(n) = *next {
            n
        } else {
            let stored = match &self.store {
                Some(store) => store.next_slice().map_err(|e| {
                    tracing::error!(cause = %e, "reading the slice counter");
                    Errno::EIO
                })?,
                None => None,
            };
            stored.unwrap_or(0).max(self.slice_range().start)
        };
        let end = first
            .checked_add(u64::from(count))
            .filter(|&end| end <= self.slice_range().end)
            .ok_or(Errno::ENOSPC)?;
        let transno = self.next_transno()?;
        *next = Some(end);
        Ok(mutation(
            transno,
            vec![JournalOp::NextSlice(end)],
            Body::Slices { first, count },
        ))
    }

    /// WRITE_SLICES: pieces the client uploaded become part of `ino` after its layout
    /// (newest wins), the size at least `size` and every piece's end; a file on the server
    /// moves to objects with it (its blocks deleted: the client uploaded them as a piece).
    pub(super) fn write_slices(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        size: u64,
        placed: Vec<Placed>,
    ) -> OpResult {
        self.check_placing(cx, ino, handle, &placed)?;
        let end = placed.iter().map(Placed::file_end).fold(size, u64::max);
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        may_place(cx, node, handle)?;
        let converting = !node.attr.in_objects();
        let mut layout = self
            .layout_of(node)?
            .map(|l| l.as_ref().clone())
            .unwrap_or_default();
        let garbage = place(&mut layout, &placed);
        if layout.len() > MAX_LAYOUT {
            return Err(Errno::EFBIG);
        }
        let transno = self.next_transno()?;
        let mut ops = self.journal_ops([]);
        if converting {
            self.drop_inline(node, transno, &mut ops);
            node.attr.set_in_objects();
        }
        Self::to_garbage(garbage, &mut ops);
        ops.push(JournalOp::PutLayout {
            ino,
            placed: layout.clone(),
        });
        self.set_data_blocks(&mut node.attr, journal::layout_data_blocks(&layout));
        self.hold_layout(node, Arc::new(layout), transno);
        Ok(self.written(cx, node, end, (now_at, transno), ops))
    }

    /// LAYOUT: where the file's bytes are, through a handle open to read (or, without one,
    /// for a caller who may read it). Through a handle it is the read of a file in objects
    /// that the server sees (the bytes themselves come from the store), so it moves the atime
    /// as READ does.
    pub(super) fn layout(&self, cx: &mut Cx<'_>, ino: u64, handle: u64) -> OpResult {
        let open = if handle == 0 {
            None
        } else {
            self.handle_for(cx, ino, handle)?
        };
        if open.is_some_and(|h| !h.read) {
            return Err(Errno::EBADF);
        }
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        super::regular(node)?;
        if handle == 0 {
            perm::check(cx.caller.cred, &node.attr, node.access_acl(), READ)?;
        } else if node.attr.in_objects() {
            super::touch_atime(cx, &mut node.attr, now_ns());
        }
        let layout = self.layout_of(node)?;
        Ok(now(Body::Layout(FileLayout {
            size: node.attr.size,
            objects: layout.is_some(),
            placed: layout.map(|l| l.as_ref().clone()).unwrap_or_default(),
            version: node.attr.transno,
        })))
    }

    /// COMPACT_LAYOUT: the layout of `ino` replaced by `placed` (the same bytes, fewer
    /// pieces, uploaded by the caller) if it is still the one of `version`; ESTALE if
    /// anything changed the inode since. Size and times unchanged; the slices no piece names
    /// any more to the collector's list.
    pub(super) fn compact_layout(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        handle: u64,
        version: u64,
        placed: Vec<Placed>,
    ) -> OpResult {
        self.check_placing(cx, ino, handle, &placed)?;
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        may_place(cx, node, handle)?;
        if !node.attr.in_objects() || node.attr.transno != version {
            return Err(Errno::ESTALE);
        }
        if placed.iter().any(|p| p.file_end() > node.attr.size) {
            return Err(Errno::EINVAL);
        }
        let old = self.layout_of(node)?.unwrap_or_default();
        let garbage = unnamed(distinct_slices(&old), &placed);
        let transno = self.next_transno()?;
        let mut ops = self.journal_ops([]);
        Self::to_garbage(garbage, &mut ops);
        ops.push(JournalOp::PutLayout {
            ino,
            placed: placed.clone(),
        });
        self.set_data_blocks(&mut node.attr, journal::layout_data_blocks(&placed));
        self.hold_layout(node, Arc::new(placed), transno);
        node.attr.transno = transno;
        node.stamp = cx.stamp(node.stamp, transno);
        ops.push(JournalOp::PutInode(node.attr.image()));
        Ok(mutation(
            transno,
            ops,
            Body::Attr(crate::namespace::to_attr(&node.attr)),
        ))
    }

    /// A size change of a file in objects, or of an empty one on the server past the cap,
    /// before its transno; `None` for a file on the server that stays there.
    pub(super) fn prepare_objects_resize(
        &self,
        node: &Node,
        size: u64,
    ) -> Result<Option<Resize>, Errno> {
        let old = node.attr.size;
        if node.attr.kind != FileKind::File {
            return Ok(None);
        }
        if !node.attr.in_objects() {
            // Past the cap an empty file moves to objects (`truncate -s 2G`); one with bytes
            // on the server is moved by its client first, which uploads them (EFBIG until).
            let past_cap = size > self.inline_data_max;
            return if past_cap && self.object_store && old == 0 {
                Ok(Some(Resize::Grow))
            } else {
                Ok(None)
            };
        }
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if size >= old {
            return Ok(Some(Resize::Grow));
        }
        let mut layout = self
            .layout_of(node)?
            .map(|l| l.as_ref().clone())
            .unwrap_or_default();
        let garbage = clip(&mut layout, size);
        Ok(Some(Resize::Clip { layout, garbage }))
    }

    /// A size change of a file in objects, under its transno.
    pub(super) fn apply_objects_resize(
        &self,
        node: &mut Node,
        resize: Resize,
        transno: u64,
        ops: &mut Vec<JournalOp>,
    ) {
        match resize {
            Resize::Inline { .. } => {}
            Resize::Grow => {
                if !node.attr.in_objects() {
                    node.attr.set_in_objects();
                    ops.push(JournalOp::PutLayout {
                        ino: node.attr.ino,
                        placed: Vec::new(),
                    });
                    self.hold_layout(node, Arc::default(), transno);
                }
            }
            Resize::Clip { layout, garbage } => {
                Self::to_garbage(garbage, ops);
                self.set_data_blocks(&mut node.attr, journal::layout_data_blocks(&layout));
                ops.push(JournalOp::PutLayout {
                    ino: node.attr.ino,
                    placed: layout.clone(),
                });
                self.hold_layout(node, Arc::new(layout), transno);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(slice: u64, file_off: u64, len: u64) -> Placed {
        Placed {
            slice,
            slice_size: 1 << 20,
            slice_off: 0,
            file_off,
            len,
        }
    }

    #[test]
    fn a_piece_wholly_covered_by_a_newer_one_goes_and_its_slice_with_it() {
        let mut layout = vec![piece(1, 0, 100), piece(2, 100, 100)];
        let freed = place(&mut layout, &[piece(3, 50, 200)]);
        // Slice 2's piece is inside 50..250; slice 1's sticks out below 50 and stays.
        assert_eq!(layout, vec![piece(1, 0, 100), piece(3, 50, 200)]);
        assert_eq!(freed, vec![(2, 1 << 20)]);
        // The same bytes again (a replay): the older copy goes, the slice stays named.
        let freed = place(&mut layout, &[piece(3, 50, 200)]);
        assert_eq!(layout, vec![piece(1, 0, 100), piece(3, 50, 200)]);
        assert!(freed.is_empty());
    }

    #[test]
    fn a_clip_shortens_the_piece_across_the_end_and_frees_the_slices_past_it() {
        let mut layout = vec![piece(1, 0, 100), piece(2, 100, 100), piece(1, 300, 10)];
        let freed = clip(&mut layout, 150);
        assert_eq!(layout, vec![piece(1, 0, 100), piece(2, 100, 50)]);
        assert!(freed.is_empty(), "slice 1 is still named below the cut");
        let freed = clip(&mut layout, 0);
        assert!(layout.is_empty());
        assert_eq!(freed, vec![(1, 1 << 20), (2, 1 << 20)]);
    }

    #[test]
    fn a_piece_outside_its_slice_is_not_valid() {
        assert!(piece(1, 0, 10).is_valid());
        assert!(!piece(1, 0, 0).is_valid(), "empty");
        let past = Placed {
            slice_off: (1 << 20) - 5,
            ..piece(1, 0, 10)
        };
        assert!(!past.is_valid());
        assert!(
            !piece(1, u64::MAX - 3, 10).is_valid(),
            "past the largest offset"
        );
    }
}
