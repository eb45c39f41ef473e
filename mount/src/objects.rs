//! What the mount keeps of file data past the server's inline cap (`data.rs` does the work): the
//! object store it opened, and per file in use the writes not placed yet — the newest in
//! [`Ranges`] that merge as they come, older ones sealed in batches being uploaded — with the
//! size the mount knows and the layout the server last told; and how a layout's pieces map a
//! byte range to the slices holding it ([`sources`]). Below `mount.rs`, which holds an
//! [`Objects`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;

use mds_client::Handle;
use mds_client::proto::{Body, Cred, FileLayout, Op, Placed};
use mds_objects::{Address, Store};
use parking_lot::Mutex;
use tracing::{info, warn};

use crate::conn::Conn;
use crate::readahead::{Blocks, SliceAt};

/// A file's writes past which they are sealed and uploaded while the writer goes on: the size
/// of a sequential writer's slices.
pub const FLUSH_AT: usize = 16 << 20;

/// Sealed bytes of one file still uploading past which a writer waits for them: with
/// [`FLUSH_AT`], the most memory one file being written holds here (~64 MiB).
pub const MAX_SEALED: usize = 3 * FLUSH_AT;

/// A range this long that grows at its end is a sequential writer's: it gets room for a
/// whole batch.
const SEQUENTIAL: usize = 1 << 20;

/// Slice ids asked for at once (ALLOC_SLICES, one commit each time).
pub const IDS_AT_ONCE: u32 = 256;

/// The object store, as the server named it, and the files in it this mount is using.
pub struct Objects {
    pub store: Store,
    /// Blocks read ahead for sequential readers, shared by the files.
    pub blocks: Arc<Blocks>,
    /// The server's `--inline-data-max`: a write past it goes to objects.
    pub inline_max: u64,
    pub files: Mutex<HashMap<u64, Arc<FileData>>>,
    /// Slice ids in hand, per shard (each shard's collector judges the ids of its range
    /// against its own layouts, so a file's slices take its shard's ids).
    pub ids: Mutex<HashMap<u16, Range<u64>>>,
    /// Held to read by each WRITE to the server, from its choice of the server over objects
    /// until its answer, and to write by a file's move to objects while it reads the file's
    /// bytes back: a WRITE under way then would land on the server after the read and be
    /// dropped with the server's copy.
    pub moving: tokio::sync::RwLock<()>,
}

impl Objects {
    /// The object store the server behind `conn` names (STATFS), opened here with this
    /// host's credentials; None, said in the log, when it names none or it cannot be
    /// opened (files then stay within the inline cap: a write past it is EFBIG).
    pub async fn of_server(conn: &Conn, cred: &Cred) -> Option<Objects> {
        let stats = match conn.call(cred, Op::Statfs).await.map(|r| r.result) {
            Ok(Ok(Body::StatFs(stats))) => stats,
            other => {
                warn!(answer = ?other.map(|r| r.map(drop)), "STATFS failed: no object store");
                return None;
            }
        };
        if stats.object_store.is_empty() {
            info!(
                inline_max = stats.inline_data_max,
                "the server names no object store"
            );
            return None;
        }
        let opened = Address::parse(&stats.object_store).and_then(|a| Store::open(&a));
        match opened {
            Ok(store) => {
                info!(object_store = %store.address(), inline_max = stats.inline_data_max, "file data past the inline cap goes to the object store");
                Some(Objects::new(store, stats.inline_data_max))
            }
            Err(e) => {
                warn!(object_store = %stats.object_store, error = %e, "cannot open the server's object store: files stay within the inline cap");
                None
            }
        }
    }

    pub fn new(store: Store, inline_max: u64) -> Objects {
        Objects {
            blocks: Blocks::new(store.clone()),
            store,
            inline_max,
            files: Mutex::new(HashMap::new()),
            ids: Mutex::new(HashMap::new()),
            moving: tokio::sync::RwLock::new(()),
        }
    }

    pub fn file(&self, ino: u64) -> Option<Arc<FileData>> {
        self.files.lock().get(&ino).cloned()
    }
}

/// One file in objects that this mount uses.
#[derive(Default)]
pub struct FileData {
    pub state: Mutex<Unflushed>,
    /// One flush at a time (writes go on meanwhile); a truncate holds it too, so that no
    /// flush of bytes it cut lands after it.
    pub flushing: Arc<tokio::sync::Mutex<()>>,
    /// Where the last read of it ended: a read that starts near it follows it, and reads
    /// whole blocks ahead (`readahead.rs`).
    pub read_end: AtomicU64,
}

/// Written byte ranges by offset: none overlaps or touches another. Writes land in `Vec`s
/// ([`Ranges`]); a sealed batch holds the same buffers as `Bytes` ([`Batch`]), which the upload
/// hands to the store as they are.
#[derive(Clone)]
pub struct Ranges<B = Vec<u8>> {
    pub map: BTreeMap<u64, B>,
    pub bytes: usize,
}

/// Writes sealed for upload: their buffers, frozen.
pub type Batch = Ranges<Bytes>;

/// A buffer a range is kept in.
pub trait Buffer: AsRef<[u8]> {
    /// Keeps the first `len` bytes.
    fn cut(&mut self, len: usize);
}

impl Buffer for Vec<u8> {
    fn cut(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl Buffer for Bytes {
    fn cut(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl<B> Default for Ranges<B> {
    fn default() -> Self {
        Ranges {
            map: BTreeMap::new(),
            bytes: 0,
        }
    }
}

impl<B: Buffer> Ranges<B> {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The end of the last range.
    pub fn end(&self) -> u64 {
        self.map
            .iter()
            .next_back()
            .map_or(0, |(s, b)| s + b.as_ref().len() as u64)
    }

    /// The ranges as (start, end).
    pub fn spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map
            .iter()
            .map(|(s, b)| (*s, s + b.as_ref().len() as u64))
    }

    /// Ranges past `size` dropped, the one across it cut.
    pub fn truncate(&mut self, size: u64) {
        let past: Vec<u64> = self.map.range(size..).map(|(s, _)| *s).collect();
        for s in past {
            self.bytes -= self.map.remove(&s).expect("listed").as_ref().len();
        }
        if let Some((&start, buf)) = self.map.range_mut(..size).next_back() {
            let keep = usize::try_from(size - start).unwrap_or(usize::MAX);
            let len = buf.as_ref().len();
            if len > keep {
                self.bytes -= len - keep;
                buf.cut(keep);
            }
        }
    }

    /// Lays the bytes of `off..off + out.len()` it holds over `out`.
    pub fn overlay(&self, off: u64, out: &mut [u8]) {
        let end = off + out.len() as u64;
        let first = self.map.range(..=off).next_back().map_or(off, |(s, _)| *s);
        for (&s, b) in self.map.range(first..end) {
            let b = b.as_ref();
            let (from, to) = (s.max(off), (s + b.len() as u64).min(end));
            if from < to {
                let src = usize::try_from(from - s).expect("fits");
                let dst = usize::try_from(from - off).expect("fits");
                let n = usize::try_from(to - from).expect("fits");
                out[dst..dst + n].copy_from_slice(&b[src..src + n]);
            }
        }
    }
}

impl Ranges {
    /// `data` written at `off`: merged with the ranges it overlaps or touches. A write that
    /// continues the range before it (a sequential writer) extends it in place.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        let none_inside = self.map.range(off + 1..=end).next().is_none();
        if let Some((&start, buf)) = self.map.range_mut(..=off).next_back()
            && start + buf.len() as u64 >= off
            && none_inside
        {
            let within = usize::try_from(off - start).expect("a range fits memory");
            let before = buf.len();
            if within + data.len() > buf.capacity() && before >= SEQUENTIAL {
                // A sequential writer: room for the rest of its batch at once, so that the
                // buffer never grows by copying what it holds (room not written to is never
                // touched, so costs no memory).
                buf.reserve_exact(FLUSH_AT.max(within + data.len()) - before);
            }
            let overlap = (before - within).min(data.len());
            buf[within..within + overlap].copy_from_slice(&data[..overlap]);
            buf.extend_from_slice(&data[overlap..]);
            self.bytes += buf.len() - before;
            return;
        }
        let touching: Vec<u64> = self
            .map
            .range(..=end)
            .filter(|(s, b)| **s + b.len() as u64 >= off)
            .map(|(s, _)| *s)
            .collect();
        let start = touching.first().map_or(off, |s| (*s).min(off));
        let mut merged_end = end;
        let mut pieces = Vec::with_capacity(touching.len());
        for s in touching {
            let b = self.map.remove(&s).expect("just listed");
            self.bytes -= b.len();
            merged_end = merged_end.max(s + b.len() as u64);
            pieces.push((s, b));
        }
        let mut buf = vec![0; usize::try_from(merged_end - start).expect("fits memory")];
        for (s, b) in pieces {
            let at = usize::try_from(s - start).expect("fits");
            buf[at..at + b.len()].copy_from_slice(&b);
        }
        let at = usize::try_from(off - start).expect("fits");
        buf[at..at + data.len()].copy_from_slice(data);
        self.bytes += buf.len();
        self.map.insert(start, buf);
    }
}

/// A file's writes not placed yet, and what this mount knows of it.
#[derive(Default)]
pub struct Unflushed {
    /// Writes since the last seal.
    pub ranges: Ranges,
    /// Batches sealed for upload, oldest first, each kept (for reads) until the server has
    /// placed it: a writer goes on into `ranges` while they upload.
    pub sealed: VecDeque<Arc<Batch>>,
    /// The file's size as this mount knows it: the server's when first seen, moved by this
    /// mount's writes and truncates since.
    pub size: u64,
    /// The handle (and credentials) of the last write: what WRITE_SLICES goes through.
    pub writer: Option<(Handle, Cred)>,
    /// The layout as the server last told it, until a change here or an open.
    pub layout: Option<Arc<FileLayout>>,
    /// Batches placed so far: a layout asked for before a placement is not kept after it.
    pub placements: u64,
    /// Pieces placed since this mount last looked at how many the file's layout holds
    /// (`compact.rs`).
    pub placed_unlooked: usize,
}

impl Unflushed {
    pub fn write(&mut self, off: u64, data: &[u8]) {
        self.size = self.size.max(off + data.len() as u64);
        self.ranges.write(off, data);
    }

    /// Whether anything written here is not placed yet.
    pub fn unflushed(&self) -> bool {
        !self.ranges.is_empty() || !self.sealed.is_empty()
    }

    /// The writes so far become a batch to upload.
    pub fn seal(&mut self) {
        if !self.ranges.is_empty() {
            let Ranges { map, bytes } = std::mem::take(&mut self.ranges);
            let map = map.into_iter().map(|(s, b)| (s, Bytes::from(b))).collect();
            self.sealed.push_back(Arc::new(Batch { map, bytes }));
        }
    }

    pub fn sealed_bytes(&self) -> usize {
        self.sealed.iter().map(|b| b.bytes).sum()
    }

    /// The file cut (or grown) to `size`: what lies past it dropped.
    pub fn truncate(&mut self, size: u64) {
        self.size = size;
        self.ranges.truncate(size);
        for batch in &mut self.sealed {
            Arc::make_mut(batch).truncate(size);
        }
        self.sealed.retain(|b| !b.is_empty());
        self.layout = None;
    }

    /// The byte ranges written here and not placed yet, as (start, end).
    pub fn extents(&self) -> Vec<(u64, u64)> {
        let mut extents: Vec<(u64, u64)> = self.sealed.iter().flat_map(|b| b.spans()).collect();
        extents.extend(self.ranges.spans());
        extents
    }

    /// Lays what is not placed yet of `off..off + out.len()` over `out`: the sealed batches
    /// in order, then the newest writes.
    pub fn overlay(&self, off: u64, out: &mut [u8]) {
        for batch in &self.sealed {
            batch.overlay(off, out);
        }
        self.ranges.overlay(off, out);
    }
}

/// The data `extents` (start, end; in any order, overlapping or not) as the runs of bytes they
/// cover, in order, cut at `size`: what lies between two runs is a hole.
pub fn runs(extents: &mut [(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    extents.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(extents.len());
    for &(s, e) in extents.iter() {
        let e = e.min(size);
        if s >= e {
            continue;
        }
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// SEEK_DATA (`data`) or SEEK_HOLE from `offset` (below `size`) over the data `extents`
/// (start, end; in any order, overlapping or not): the first byte at or after `offset` that is
/// data, or that is not (`size` at the latest: the end is a hole); None for no data there.
pub fn seek_in(extents: &mut [(u64, u64)], offset: u64, size: u64, data: bool) -> Option<u64> {
    let merged = runs(extents, size);
    if data {
        merged
            .iter()
            .find(|&&(_, e)| e > offset)
            .map(|&(s, _)| s.max(offset))
    } else {
        let within = merged.iter().find(|&&(s, e)| s <= offset && offset < e);
        Some(within.map_or(offset, |&(_, e)| e))
    }
}

/// Where bytes come from: a slice, or None for a hole.
pub type Source = Option<SliceAt>;

/// Where the bytes `off..end` of a file come from under `layout` (oldest piece first, newer
/// wins): (file offset, length, source).
pub fn sources(layout: &[Placed], off: u64, end: u64) -> Vec<(u64, u64, Source)> {
    let mut parts: Vec<(u64, u64, Source)> = vec![(off, end, None)];
    for p in layout {
        let (ps, pe) = (p.file_off, p.file_end());
        if pe <= off || ps >= end {
            continue;
        }
        let mut next = Vec::with_capacity(parts.len() + 2);
        for (s, e, src) in parts {
            if e <= ps || s >= pe {
                next.push((s, e, src));
                continue;
            }
            if s < ps {
                next.push((s, ps, src));
            }
            let (cs, ce) = (s.max(ps), e.min(pe));
            let at = p.slice_off + (cs - ps);
            next.push((
                cs,
                ce,
                Some(SliceAt {
                    slice: p.slice,
                    at,
                    size: p.slice_size,
                }),
            ));
            if e > pe {
                let moved = src.map(|from| SliceAt {
                    at: from.at + (pe - s),
                    ..from
                });
                next.push((pe, e, moved));
            }
        }
        parts = next;
    }
    parts
        .into_iter()
        .map(|(s, e, src)| (s, e - s, src))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(slice: u64, slice_off: u64, file_off: u64, len: u64) -> Placed {
        Placed {
            slice,
            slice_size: 1 << 30,
            slice_off,
            file_off,
            len,
        }
    }

    fn from(slice: u64, at: u64) -> SliceAt {
        SliceAt {
            slice,
            at,
            size: 1 << 30,
        }
    }

    #[test]
    fn the_newest_piece_wins_and_uncovered_bytes_are_holes() {
        let layout = [placed(1, 0, 0, 100), placed(2, 1000, 40, 20)];
        assert_eq!(
            sources(&layout, 0, 150),
            vec![
                (0, 40, Some(from(1, 0))),
                (40, 20, Some(from(2, 1000))),
                (60, 40, Some(from(1, 60))),
                (100, 50, None),
            ]
        );
        assert_eq!(
            sources(&layout, 50, 70),
            vec![(50, 10, Some(from(2, 1010))), (60, 10, Some(from(1, 60)))]
        );
    }

    #[test]
    fn unflushed_writes_merge_and_a_sequential_writer_extends_its_range() {
        let mut u = Unflushed::default();
        u.write(0, &[1; 10]);
        u.write(10, &[2; 10]);
        assert_eq!(u.ranges.map.len(), 1, "touching: one range");
        u.write(30, &[3; 5]);
        u.write(5, &[4; 30]);
        assert_eq!(u.ranges.map.len(), 1);
        let mut out = vec![9u8; 40];
        u.overlay(0, &mut out);
        assert_eq!(&out[..5], &[1; 5]);
        assert_eq!(&out[5..35], &[4; 30]);
        assert_eq!(&out[35..], &[9; 5], "not written: left as it was");
        assert_eq!(u.ranges.bytes, 35);
        assert_eq!(u.size, 35);
        u.truncate(20);
        assert_eq!(u.ranges.bytes, 20);
        assert_eq!(u.size, 20);
        u.write(100, &[5; 3]);
        assert_eq!(u.ranges.map.len(), 2);
        assert_eq!(u.size, 103);
    }

    #[test]
    fn seek_data_and_seek_hole_find_the_next_extent_or_gap() {
        let mut e = vec![(100, 200), (0, 10), (150, 300), (500, 600)];
        assert_eq!(seek_in(&mut e.clone(), 0, 1000, true), Some(0));
        assert_eq!(seek_in(&mut e.clone(), 10, 1000, true), Some(100));
        assert_eq!(seek_in(&mut e.clone(), 250, 1000, true), Some(250));
        assert_eq!(seek_in(&mut e.clone(), 300, 1000, true), Some(500));
        assert_eq!(
            seek_in(&mut e.clone(), 600, 1000, true),
            None,
            "no data after"
        );
        assert_eq!(seek_in(&mut e.clone(), 0, 1000, false), Some(10));
        assert_eq!(
            seek_in(&mut e.clone(), 120, 1000, false),
            Some(300),
            "merged"
        );
        assert_eq!(seek_in(&mut e.clone(), 400, 1000, false), Some(400));
        assert_eq!(
            seek_in(&mut e, 550, 560, false),
            Some(560),
            "the end is a hole"
        );
    }

    #[test]
    fn sealed_batches_lie_under_newer_writes_and_a_truncate_cuts_them_all() {
        let mut u = Unflushed::default();
        u.write(0, &[1; 100]);
        u.seal();
        let uploading = u.sealed[0].clone(); // an upload holds the batch meanwhile
        u.write(50, &[2; 100]);
        assert!(u.unflushed());
        let mut out = vec![0u8; 150];
        u.overlay(0, &mut out);
        assert_eq!((&out[..50], &out[50..]), (&[1; 50][..], &[2; 100][..]));
        u.truncate(60);
        assert_eq!((u.sealed[0].end(), u.ranges.end()), (60, 60));
        assert_eq!(uploading.end(), 100, "the upload's copy is its own");
        u.seal();
        assert_eq!(u.sealed.len(), 2);
        assert_eq!(u.sealed_bytes(), 70);
    }
}
