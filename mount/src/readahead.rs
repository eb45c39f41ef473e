//! Reading a file in objects: whole blocks of its slices fetched ahead of a sequential reader
//! and kept in a small cache the mount's files share, so that a reader going through a file
//! costs one GET per block (4 MiB) instead of one per FUSE read (128 KiB), with the next blocks
//! already on their way while it reads this one. A slice never changes once written (its id is
//! used once), so a kept block is never stale and nothing invalidates the cache: a file's new
//! bytes are new slices, which its layout names. A read that does not follow the one before it
//! fetches just its range and keeps nothing (a database's random reads would otherwise fetch
//! 4 MiB for 4 KiB). Below `data.rs`, which asks it for each piece of a read.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use mds_objects::{BLOCK, Store};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

/// Blocks kept: 64 MiB a mount with 4 MiB blocks. Four sequential readers at once each keep
/// the block they are in and the ones fetched ahead of it.
const KEPT_BLOCKS: usize = 16;

/// Blocks fetched past the one a sequential reader is in.
const AHEAD: u64 = 2;

/// A read starting this close to where the file's last read ended follows it: the kernel's
/// readahead sends the reads of a window (1 MiB, `bdi.rs`, in reads of up to 1 MiB) and of
/// the next at once, which arrive in any order.
pub const FOLLOWS_WITHIN: u64 = 4 << 20;

/// Bytes of a slice from an offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAt {
    pub slice: u64,
    pub at: u64,
    /// The slice's size: how far a read ahead in it may go.
    pub size: u64,
}

/// (slice, block).
type Key = (u64, u64);

/// The blocks kept, each fetched once however many readers want it at the same time.
pub struct Blocks {
    store: Store,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    cells: HashMap<Key, Arc<OnceCell<Bytes>>>,
    /// Oldest first: a sequential reader is done with the blocks it kept first.
    order: VecDeque<Key>,
}

impl Blocks {
    pub fn new(store: Store) -> Arc<Blocks> {
        Arc::new(Blocks {
            store,
            kept: Mutex::new(Kept::default()),
        })
    }

    /// `len` bytes of a slice from `src`. `follows`: the read continues the file's last one,
    /// so whole blocks are fetched and kept and the next ones fetched ahead.
    pub async fn read(
        self: &Arc<Self>,
        src: SliceAt,
        len: u64,
        follows: bool,
    ) -> mds_objects::Result<Bytes> {
        let (first, last) = (src.at / BLOCK, (src.at + len - 1) / BLOCK);
        if !follows {
            if let Some(kept) = self.kept_range(src, len, first, last) {
                return Ok(kept);
            }
            return self.store.read_slice(src.slice, src.at, len).await;
        }
        self.fetch_ahead(src, last);
        let mut pieces = Vec::with_capacity(usize::try_from(last - first + 1).unwrap_or(1));
        for block in first..=last {
            pieces.push(self.block(src.slice, src.size, block).await?);
        }
        Ok(cut(&pieces, src.at - first * BLOCK, len))
    }

    /// [`Blocks::read`] without waiting: the bytes if every block they span is kept and
    /// fetched (then, for a read that `follows`, the blocks past them are asked for as
    /// [`Blocks::read`] does, on the runtime the caller has entered). None: read them.
    pub fn read_kept(self: &Arc<Self>, src: SliceAt, len: u64, follows: bool) -> Option<Bytes> {
        let (first, last) = (src.at / BLOCK, (src.at + len - 1) / BLOCK);
        let kept = self.kept_range(src, len, first, last)?;
        if follows {
            self.fetch_ahead(src, last);
        }
        Some(kept)
    }

    /// The [`AHEAD`] blocks of `src`'s slice past block `last` that are not kept, fetched
    /// into the cache by tasks of their own.
    fn fetch_ahead(self: &Arc<Self>, src: SliceAt, last: u64) {
        for ahead in last + 1..=last + AHEAD {
            if ahead * BLOCK < src.size && !self.has((src.slice, ahead)) {
                let (blocks, cell) = (self.clone(), self.cell((src.slice, ahead)));
                tokio::spawn(async move {
                    // A failure here is the reader's to meet when it gets there.
                    let _ = blocks.fill(&cell, src.slice, src.size, ahead).await;
                });
            }
        }
    }

    /// Block `block` of `slice` (`size` bytes) whole: kept, or fetched now (once, whoever
    /// else asks meanwhile).
    async fn block(&self, slice: u64, size: u64, block: u64) -> mds_objects::Result<Bytes> {
        self.fill(&self.cell((slice, block)), slice, size, block)
            .await
    }

    /// The block in `cell`, fetched into it unless it holds it already.
    async fn fill(
        &self,
        cell: &OnceCell<Bytes>,
        slice: u64,
        size: u64,
        block: u64,
    ) -> mds_objects::Result<Bytes> {
        cell.get_or_try_init(|| {
            let from = block * BLOCK;
            self.store.read_slice(slice, from, BLOCK.min(size - from))
        })
        .await
        .cloned()
    }

    /// The cell of a block, made (and the oldest let go past the bound) if it is new. A cell
    /// let go while its fetch is under way still answers those waiting on it.
    fn cell(&self, key: Key) -> Arc<OnceCell<Bytes>> {
        let mut kept = self.kept.lock();
        if let Some(cell) = kept.cells.get(&key) {
            return cell.clone();
        }
        while kept.order.len() >= KEPT_BLOCKS {
            let oldest = kept.order.pop_front().expect("not empty");
            kept.cells.remove(&oldest);
        }
        let cell = Arc::new(OnceCell::new());
        kept.cells.insert(key, cell.clone());
        kept.order.push_back(key);
        cell
    }

    fn has(&self, key: Key) -> bool {
        self.kept.lock().cells.contains_key(&key)
    }

    /// The bytes asked for, if every block they span is kept and fetched.
    fn kept_range(&self, src: SliceAt, len: u64, first: u64, last: u64) -> Option<Bytes> {
        let kept = self.kept.lock();
        let pieces: Option<Vec<Bytes>> = (first..=last)
            .map(|b| kept.cells.get(&(src.slice, b))?.get().cloned())
            .collect();
        Some(cut(&pieces?, src.at - first * BLOCK, len))
    }
}

/// `len` bytes from `off` of consecutive blocks: a piece of one without a copy, or copied
/// together across several.
fn cut(blocks: &[Bytes], off: u64, len: u64) -> Bytes {
    let off = usize::try_from(off).expect("within a few blocks");
    let len = usize::try_from(len).expect("a read fits memory");
    if let [one] = blocks {
        return one.slice(off..off + len);
    }
    let mut out = Vec::with_capacity(len);
    let mut skip = off;
    for b in blocks {
        let from = skip.min(b.len());
        skip -= from;
        let take = (b.len() - from).min(len - out.len());
        out.extend_from_slice(&b[from..from + take]);
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_cut_from_one_block_or_across_several() {
        let a = Bytes::from_static(b"abcd");
        let b = Bytes::from_static(b"efgh");
        assert_eq!(
            cut(std::slice::from_ref(&a), 1, 2),
            Bytes::from_static(b"bc")
        );
        assert_eq!(
            cut(&[a.clone(), b.clone()], 3, 3),
            Bytes::from_static(b"def")
        );
        assert_eq!(cut(&[a, b], 0, 8), Bytes::from_static(b"abcdefgh"));
    }

    /// A store in a new directory (kept while the directory is).
    fn local_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let address = mds_objects::Address::parse(dir.path().to_str().unwrap()).unwrap();
        let store = Store::open(&address).unwrap();
        (dir, store)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_sequential_reader_fetches_whole_blocks_once_and_a_random_one_keeps_nothing() {
        let (_dir, store) = local_store();
        let size = 5 * BLOCK / 2;
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let rt = runtime();
        rt.block_on(store.put_slice(7, &[Bytes::from(data.clone())]))
            .unwrap();
        let blocks = Blocks::new(store);
        let src = |at| SliceAt { slice: 7, at, size };
        let want = |at: u64, len: u64| &data[at as usize..(at + len) as usize];

        // Random: the range only, nothing kept.
        let got = rt
            .block_on(blocks.read(src(BLOCK + 5), 100, false))
            .unwrap();
        assert_eq!(got, want(BLOCK + 5, 100));
        assert!(!blocks.has((7, 1)));

        // Sequential: the block it is in, kept, and the next ones (there is one more) fetched.
        let got = rt.block_on(blocks.read(src(10), 1000, true)).unwrap();
        assert_eq!(got, want(10, 1000));
        assert!(blocks.has((7, 0)) && blocks.has((7, 1)) && blocks.has((7, 2)));
        assert!(!blocks.has((7, 3)), "past the slice's end");
        // Across a block's end, and to the slice's last byte.
        let got = rt.block_on(blocks.read(src(BLOCK - 3), 10, true)).unwrap();
        assert_eq!(got, want(BLOCK - 3, 10));
        let got = rt.block_on(blocks.read(src(size - 7), 7, true)).unwrap();
        assert_eq!(got, want(size - 7, 7));
        // A random read of kept blocks is answered from them.
        let got = rt.block_on(blocks.read(src(2 * BLOCK), 50, false)).unwrap();
        assert_eq!(got, want(2 * BLOCK, 50));
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_blocks_oldest_let_go_first() {
        let (_dir, store) = local_store();
        let blocks = Blocks::new(store);
        for b in 0..KEPT_BLOCKS as u64 + 3 {
            blocks.cell((1, b));
        }
        let kept = blocks.kept.lock();
        assert_eq!(kept.cells.len(), KEPT_BLOCKS);
        assert!(!kept.cells.contains_key(&(1, 2)) && kept.cells.contains_key(&(1, 3)));
    }

    #[test]
    fn a_block_that_is_missing_is_an_error_and_is_asked_again_next_time() {
        let (_dir, store) = local_store();
        let rt = runtime();
        let blocks = Blocks::new(store.clone());
        let src = SliceAt {
            slice: 9,
            at: 0,
            size: 100,
        };
        assert!(rt.block_on(blocks.read(src, 10, true)).is_err());
        rt.block_on(store.put_slice(9, &[Bytes::from(vec![3u8; 100])]))
            .unwrap();
        assert_eq!(
            rt.block_on(blocks.read(src, 10, true)).unwrap(),
            vec![3u8; 10]
        );
    }
}
