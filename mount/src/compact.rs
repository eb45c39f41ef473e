//! A file in objects rewritten in many small scattered pieces is compacted by the mount that
//! wrote it (JuiceFS's clients compact their slices so too): once the pieces it placed since it
//! last looked pass [`LOOK_AFTER`], it asks the file's layout, and past [`COMPACT_AT`] pieces
//! plans a new one. The file is seen as windows of [`WINDOW`] bytes: the windows where
//! rewriting saves the most pieces are read by the layout and uploaded, each as one new slice
//! with a piece per run of data (holes kept), up to [`COMPACT_MAX`] bytes a compaction; every
//! other window keeps the slices it names, each byte named once (the bytes newer pieces hid
//! are dropped from the layout without reading anything). As each window is uploaded the
//! mount asks the server to replace the layout with one that names it (COMPACT_LAYOUT), which
//! it does only if nothing changed the file since the layout it last read or replaced: a
//! write of another mount meanwhile is never undone, and ends the compaction there. The
//! slices no longer named go to the server's collector; an upload the server refused is
//! reclaimed by it too. Reads and writes never wait for a compaction: it runs in the flush
//! that found the layout long, under the file's flush lock, holding one window's bytes at a
//! time. Below
//! `data.rs`, which calls it after its placements.

use bytes::Bytes;
use fuser::Errno;
use mds_client::Handle;
use mds_client::proto::{Cred, Errno as ProtoErrno, MAX_PLACED, Op, Placed};
use tracing::{info, warn};

use crate::attr::{Fallible, errno};
use crate::mount::Mount;
use crate::objects::{FileData, sources};
use crate::readahead::SliceAt;

/// Pieces this mount places in one file before it looks at the file's layout again.
pub const LOOK_AFTER: usize = 512;

/// Pieces past which a file's layout is compacted: a layout is one value the server rewrites
/// with each placement and a reader fetches whole, and the server refuses one past 65,536.
const COMPACT_AT: usize = 1024;

/// The span of the file one rewritten slice covers (JuiceFS's chunk): a compaction rewrites
/// whole windows, so a file of any size is compacted a window at a time.
const WINDOW: u64 = 64 << 20;

/// Most bytes of data one compaction reads and rewrites: it runs in a flush, so a large file
/// has its most fragmented windows rewritten first and the rest at its next looks.
const COMPACT_MAX: u64 = 256 << 20;

/// Pieces a window's rewrite must save for its bytes to be read and uploaded again.
const WORTH_A_REWRITE: usize = 8;

/// A run of the file's bytes as a reader sees them: file offset, length, and where they are.
type Seen = (u64, u64, SliceAt);

/// What one compaction does: the pieces kept as they are and the windows rewritten (each the
/// runs of data in it, in file order).
#[derive(Debug, Default)]
struct Plan {
    keep: Vec<Placed>,
    rewrite: Vec<Vec<Seen>>,
    /// Pieces of the layout after it.
    pieces: usize,
}

/// The plan for a file of `size` bytes whose layout is `layout` (oldest piece first).
fn plan(layout: &[Placed], size: u64) -> Plan {
    let seen: Vec<Seen> = sources(layout, 0, size)
        .into_iter()
        .filter_map(|(off, len, src)| src.map(|at| (off, len, at)))
        .collect();
    // The seen runs cut at window boundaries, grouped by window.
    let mut windows: Vec<(u64, Vec<Seen>)> = Vec::new();
    for &(mut off, mut len, mut at) in &seen {
        while len > 0 {
            let index = off / WINDOW;
            let take = len.min((index + 1) * WINDOW - off);
            match windows.last_mut() {
                Some((i, runs)) if *i == index => runs.push((off, take, at)),
                _ => windows.push((index, vec![(off, take, at)])),
            }
            (off, len) = (off + take, len - take);
            at.at += take;
        }
    }
    // Rewrite the windows that save the most pieces, within the budget.
    let mut gains: Vec<(usize, usize, u64)> = windows
        .iter()
        .enumerate()
        .map(|(w, (_, runs))| {
            let before = merged(runs.iter().map(kept)).len();
            let after = data_runs(runs).len();
            let bytes = runs.iter().map(|r| r.1).sum();
            (w, before.saturating_sub(after), bytes)
        })
        .filter(|&(_, gain, _)| gain >= WORTH_A_REWRITE)
        .collect();
    gains.sort_by_key(|&(w, gain, _)| (std::cmp::Reverse(gain), w));
    let mut chosen = vec![false; windows.len()];
    let mut budget = COMPACT_MAX;
    for (w, _, bytes) in gains {
        if bytes <= budget {
            budget -= bytes;
            chosen[w] = true;
        }
    }
    let mut plan = Plan::default();
    let mut kept_runs = Vec::new();
    for ((_, runs), rewrite) in windows.into_iter().zip(chosen) {
        if rewrite {
            plan.pieces += data_runs(&runs).len();
            plan.rewrite.push(runs);
        } else {
            kept_runs.extend(runs);
        }
    }
    plan.keep = merged(kept_runs.iter().map(kept));
    plan.pieces += plan.keep.len();
    plan
}

/// A seen run as a piece naming the slice it is in.
fn kept(&(off, len, at): &Seen) -> Placed {
    Placed {
        slice: at.slice,
        slice_size: at.size,
        slice_off: at.at,
        file_off: off,
        len,
    }
}

/// Pieces in file order with each that continues the one before it in the same slice joined
/// to it.
fn merged(pieces: impl Iterator<Item = Placed>) -> Vec<Placed> {
    let mut out: Vec<Placed> = Vec::new();
    for p in pieces {
        match out.last_mut() {
            Some(last)
                if last.slice == p.slice
                    && last.file_end() == p.file_off
                    && last.slice_off + last.len == p.slice_off =>
            {
                last.len += p.len;
            }
            _ => out.push(p),
        }
    }
    out
}

/// The runs of data (offset, length) that `seen` (in file order) makes: what a rewritten slice
/// places, a piece each.
fn data_runs(seen: &[Seen]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(off, len, _) in seen {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == off => last.1 += len,
            _ => out.push((off, len)),
        }
    }
    out
}

impl Mount {
    /// Compacts the layout of `ino` if it has grown past [`COMPACT_AT`] pieces; a failure is
    /// logged and leaves the layout as it was (the flush that called it succeeded).
    pub(crate) async fn compact_if_fragmented(
        &self,
        ino: u64,
        fd: &FileData,
        writer: Option<&(Handle, Cred)>,
    ) {
        match self.compact(ino, writer).await {
            Ok(Some((before, after, bytes))) => {
                let mut s = fd.state.lock();
                s.placements += 1;
                s.layout = None;
                info!(
                    ino,
                    pieces_before = before,
                    pieces_after = after,
                    bytes_rewritten = bytes,
                    "layout compacted"
                );
            }
            Ok(None) => {}
            Err(e) => warn!(ino, error = ?e, "compaction failed: the layout stays as it is"),
        }
    }

    /// The compaction itself: Some((pieces before, after, bytes rewritten)) if the layout was
    /// replaced at least once.
    async fn compact(
        &self,
        ino: u64,
        writer: Option<&(Handle, Cred)>,
    ) -> Fallible<Option<(usize, usize, u64)>> {
        // Read as the mount itself: the writer's handle may be open only to write, and the
        // bytes read go nowhere but back into the same file.
        let own = self.own_cred().clone();
        let layout = self.layout_as(&own, ino, None).await?;
        if !layout.objects || layout.placed.len() <= COMPACT_AT {
            return Ok(None);
        }
        let plan = plan(&layout.placed, layout.size);
        if plan.pieces >= layout.placed.len() || plan.pieces > MAX_PLACED {
            info!(
                ino,
                pieces = layout.placed.len(),
                after = plan.pieces,
                "layout not compacted: no window's rewrite would save pieces"
            );
            return Ok(None);
        }
        let objects = self.objects.as_ref().ok_or(Errno::EIO)?;
        // Each window is placed as soon as it is uploaded, so that no upload waits for the
        // others before its layout names it (the collector's grace bounds that wait): the
        // layout sent is the kept pieces, the windows done, and those still to do as they
        // were. Each replacement is checked against the state the one before it left.
        let mut windows: Vec<Vec<Placed>> = plan
            .rewrite
            .iter()
            .map(|w| merged(w.iter().map(kept)))
            .collect();
        let (mut version, mut pieces, mut rewritten) = (layout.version, 0, 0);
        let (shard, conn) = self.conn_of(ino).await?;
        for (w, runs) in plan.rewrite.iter().enumerate() {
            let new_runs = data_runs(runs);
            let count = plan.keep.len()
                + windows
                    .iter()
                    .enumerate()
                    .map(|(i, v)| if i == w { new_runs.len() } else { v.len() })
                    .sum::<usize>();
            if count > MAX_PLACED {
                // Only the windows still as they were can make it so; their turn comes later.
                break;
            }
            // The window's runs, read one by one, are the new slice's parts as they came.
            let mut parts = Vec::with_capacity(runs.len());
            for &(off, len, at) in runs {
                let bytes: Bytes = objects
                    .store
                    .read_slice(at.slice, at.at, len)
                    .await
                    .map_err(|e| {
                        warn!(ino, slice = at.slice, off, error = %e, "compaction: read failed");
                        Errno::EIO
                    })?;
                parts.push(bytes);
            }
            let size: u64 = runs.iter().map(|r| r.1).sum();
            let id = self.slice_id(ino).await?;
            objects.store.put_slice(id, &parts).await.map_err(|e| {
                warn!(ino, slice = id, error = %e, "compaction: upload failed");
                Errno::EIO
            })?;
            let mut slice_off = 0;
            windows[w] = new_runs
                .into_iter()
                .map(|(file_off, len)| {
                    let piece = Placed {
                        slice: id,
                        slice_size: size,
                        slice_off,
                        file_off,
                        len,
                    };
                    slice_off += len;
                    piece
                })
                .collect();
            let placed: Vec<Placed> = plan
                .keep
                .iter()
                .chain(windows.iter().flatten())
                .copied()
                .collect();
            let op = Op::CompactLayout {
                ino,
                handle: writer.map_or(0, |(h, _)| h.id()),
                version,
                placed,
            };
            let reply = match writer {
                Some((h, cred)) => conn.call_on(cred, *h, op).await?,
                None => conn.call(&own, op).await?,
            };
            self.durability().note(shard, &reply, &[ino]);
            match reply.result {
                Ok(_) => {
                    version = reply.transno;
                    pieces = count;
                    rewritten += size;
                }
                // Changed since: the next look tries again; the upload is the collector's.
                Err(ProtoErrno::ESTALE) => break,
                Err(e) if rewritten == 0 => return Err(errno(e)),
                Err(e) => {
                    warn!(ino, errno = ?e, "compaction stopped part way");
                    break;
                }
            }
        }
        Ok((rewritten > 0).then_some((layout.placed.len(), pieces, rewritten)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn piece(slice: u64, slice_off: u64, file_off: u64, len: u64) -> Placed {
        Placed {
            slice,
            slice_size: 1 << 40,
            slice_off,
            file_off,
            len,
        }
    }

    /// A run of a file as a reader sees it: offset, length, (slice, offset in it) or a hole.
    type Shown = (u64, u64, Option<(u64, u64)>);

    /// The bytes a layout shows up to `size`, run by run.
    fn shown(layout: &[Placed], size: u64) -> Vec<Shown> {
        sources(layout, 0, size)
            .into_iter()
            .map(|(o, l, s)| (o, l, s.map(|s| (s.slice, s.at))))
            .collect()
    }

    /// A file of `size` bytes written whole as slice 1, then `pages` pages of 4 KiB scattered
    /// over `span` bytes from `from`, each its own slice.
    fn scattered(size: u64, from: u64, span: u64, pages: u64) -> Vec<Placed> {
        let mut layout = vec![piece(1, 0, 0, size)];
        for i in 0..pages {
            let at = from + (i * 7919 * 4096) % (span - 4096) / 4096 * 4096;
            layout.push(piece(100 + i, 0, at, 4096));
        }
        layout
    }

    #[test]
    fn a_small_file_is_rewritten_whole_as_one_piece() {
        let layout = scattered(8 * MIB, 0, 8 * MIB, 1300);
        let p = plan(&layout, 8 * MIB);
        assert!(p.keep.is_empty());
        assert_eq!(p.rewrite.len(), 1);
        assert_eq!(data_runs(&p.rewrite[0]), vec![(0, 8 * MIB)]);
        assert_eq!(p.pieces, 1);
        // The runs to read are the bytes as a reader sees them, newest piece first.
        let read: Vec<_> = p.rewrite[0]
            .iter()
            .map(|&(o, l, at)| (o, l, Some((at.slice, at.at))))
            .collect();
        assert_eq!(read, shown(&layout, 8 * MIB));
    }

    #[test]
    fn a_file_past_the_budget_has_its_most_fragmented_windows_rewritten_and_keeps_the_rest() {
        // 640 MiB: ten windows. Pages over the first 320 MiB (five windows, ~200 each), and 400
        // in window 7.
        let size = 640 * MIB;
        let mut layout = scattered(size, 0, 320 * MIB, 1000);
        for i in 0..400u64 {
            layout.push(piece(5000 + i, 0, 7 * WINDOW + i * 8192, 4096));
        }
        let p = plan(&layout, size);
        // Four windows fit the budget; window 7 saves the most, so it is one of them.
        assert_eq!(p.rewrite.len(), 4);
        let windows: Vec<u64> = p.rewrite.iter().map(|w| w[0].0 / WINDOW).collect();
        assert!(windows.contains(&7), "{windows:?}");
        for w in &p.rewrite {
            assert_eq!(data_runs(w).len(), 1, "a full window is one run");
            assert!(w.iter().all(|r| r.0 / WINDOW == w[0].0 / WINDOW));
        }
        let rewritten: u64 = p.rewrite.iter().flatten().map(|r| r.1).sum();
        assert_eq!(rewritten, COMPACT_MAX);
        // Two windows of ~200 pages kept: ~400 pieces each.
        assert!(
            p.pieces < layout.len() * 2 / 3,
            "{} of {}",
            p.pieces,
            layout.len()
        );
        // What is kept shows the same bytes as before where it was not rewritten.
        let mut after = p.keep.clone();
        for (i, w) in p.rewrite.iter().enumerate() {
            let mut at = 0;
            for (off, len) in data_runs(w) {
                after.push(piece(9000 + i as u64, at, off, len));
                at += len;
            }
        }
        let before = shown(&layout, size);
        let now = shown(&after, size);
        let mut keep_bytes = 0;
        for &(off, len, src) in &now {
            if src.is_some_and(|(s, _)| s < 9000) {
                keep_bytes += len;
                let old = sources(&layout, off, off + len);
                assert_eq!(
                    old.len(),
                    1,
                    "a kept piece is one run of the old layout at {off}"
                );
                assert_eq!(old[0].2.map(|s| (s.slice, s.at)), src);
            }
        }
        assert_eq!(keep_bytes, size - COMPACT_MAX);
        let covered = |v: &[Shown]| v.iter().filter(|r| r.2.is_some()).map(|r| r.1).sum::<u64>();
        assert_eq!(covered(&now), covered(&before), "no byte lost or added");
        // The next compaction finds the two windows left and nothing else worth a rewrite.
        let next = plan(&after, size);
        assert_eq!(next.rewrite.len(), 2);
        assert!(next.pieces < p.pieces);
    }

    #[test]
    fn holes_stay_holes_and_a_layout_with_nothing_to_save_is_left_alone() {
        // A sparse file: pages far apart, none meeting, over 2 GiB.
        let layout: Vec<Placed> = (0..200u64)
            .map(|i| piece(i + 1, 0, i * 10 * MIB, 4096))
            .collect();
        let p = plan(&layout, 2048 * MIB);
        assert!(p.rewrite.is_empty(), "no window saves a piece");
        assert_eq!(p.pieces, 200);
        assert_eq!(p.keep, layout);
        // The same pages each written twice, the second hiding the first: the hidden ones
        // are dropped without reading anything.
        let mut twice = layout.clone();
        twice.extend(
            layout
                .iter()
                .map(|q| piece(q.slice + 1000, 0, q.file_off, 4096)),
        );
        let p = plan(&twice, 2048 * MIB);
        assert!(p.rewrite.is_empty());
        assert_eq!(p.pieces, 200);
        assert!(p.keep.iter().all(|q| q.slice > 1000));
        // 64 pages next to each other in window 23 (beside six of the scattered ones): that
        // window is rewritten, seven runs of data, the rest kept.
        let mut dense = layout.clone();
        dense.extend((0..64u64).map(|i| piece(5000 + i, 0, 1505 * MIB + i * 4096, 4096)));
        let p = plan(&dense, 2048 * MIB);
        assert_eq!(p.rewrite.len(), 1);
        let runs = data_runs(&p.rewrite[0]);
        assert_eq!(runs.len(), 7, "{runs:?}");
        assert!(runs.contains(&(1505 * MIB, 64 * 4096)));
        assert_eq!(p.pieces, 194 + 7);
    }
}
