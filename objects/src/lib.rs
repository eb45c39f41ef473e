//! Where file data beyond the server's inline cap lives: an object store — a local directory
//! (the embedded default) or any S3-compatible store — reached through Apache Arrow's
//! `object_store` crate. This crate owns the store's address (`file:///dir`, `s3://bucket/prefix?
//! endpoint=…`), how a **slice** — an immutable run of a file's bytes written once under an id
//! the metadata server hands out — is cut into objects of [`BLOCK`] bytes and named, and the
//! four things done to slices: write one whole, read a range of one, delete one, list what is
//! stored. It knows nothing of files or layouts: which slices make up which bytes of a file is
//! the metadata server's to say.
//!
//! A slice's objects are named `<prefix>/slices/<id / 1024, hex>/<id, 16 hex digits>.<block>`:
//! the id first, so that a listing tells a slice a layout names from one nothing does (an upload
//! whose layout was never committed), and a directory level so that a local directory holds at
//! most 1,024 slices' objects in one place. A write never replaces an object: a slice id is used
//! once.
//!
//! Durability: `put_slice` returns once every block is in the store — for the local directory
//! that includes `fsync` of each file and its directory (`LocalFileSystem::with_fsync`); an S3
//! store acknowledges a PUT once it holds it (Garage: on a quorum of its nodes).

mod address;

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

pub use address::{Address, Credentials};

/// Bytes in each object of a slice (the last one holds the rest): big enough that a PUT's
/// fixed cost is small beside its transfer, small enough that a read of a few KiB fetches a
/// range of one object only and a failed upload is retried cheaply. JuiceFS's default too.
pub const BLOCK: u64 = 4 << 20;

/// Blocks of one slice written at the same time.
const UPLOADS_IN_FLIGHT: usize = 4;

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store's address cannot be used (the message says why).
    #[error("object store address {address:?}: {why}")]
    Address { address: String, why: String },
    /// An object a slice needs is not in the store.
    #[error("slice {id:016x}: object {path} is not in the store")]
    Missing { id: u64, path: String },
    /// A read past the end of what was stored for the slice.
    #[error("slice {id:016x}: {len} bytes at {off} asked, past the {stored} bytes stored")]
    Short {
        id: u64,
        off: u64,
        len: u64,
        stored: u64,
    },
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// One object of a slice, as a listing finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBlock {
    pub id: u64,
    pub block: u32,
    pub size: u64,
    /// When the store last wrote it, in seconds since the Unix epoch.
    pub modified: i64,
}

/// What a listing found: the slices' objects, and how many other objects share the prefix
/// (never touched; a count for the operator).
#[derive(Debug, Default)]
pub struct Listing {
    pub blocks: Vec<StoredBlock>,
    pub foreign: usize,
}

/// An object store, opened.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    address: Address,
}

impl Store {
    /// Opens the store at `address` (a local directory is made if it is missing).
    pub fn open(address: &Address) -> Result<Store> {
        let (inner, prefix) = address.connect()?;
        Ok(Store {
            inner,
            prefix,
            address: address.clone(),
        })
    }

    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The object holding block `block` of slice `id`.
    pub fn block_path(&self, id: u64, block: u32) -> Path {
        self.prefix
            .clone()
            .join("slices")
            .join(format!("{:x}", id >> 10))
            .join(format!("{id:016x}.{block}"))
    }

    /// Stores slice `id` whole: the bytes of `parts`, one after another, in objects of
    /// [`BLOCK`] bytes, a few at a time. Returns once every one of them is in the store. The
    /// parts are a writer's buffers as they are: each object is sent as the pieces of them it
    /// spans, never copied into one buffer first.
    pub async fn put_slice(&self, id: u64, parts: &[Bytes]) -> Result<()> {
        let size: u64 = parts.iter().map(|p| p.len() as u64).sum();
        futures::stream::iter(0..blocks_of(size))
            .map(|block| {
                let from = u64::from(block) * BLOCK;
                let payload = PutPayload::from_iter(cut(parts, from, (from + BLOCK).min(size)));
                let path = self.block_path(id, block);
                async move { self.inner.put(&path, payload).await.map(|_| ()) }
            })
            .buffer_unordered(UPLOADS_IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        Ok(())
    }

    /// `len` bytes of slice `id` from its byte `off`: one ranged read per object it spans.
    pub async fn read_slice(&self, id: u64, off: u64, len: u64) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let end = off + len;
        let (first, last) = (off / BLOCK, (end - 1) / BLOCK);
        let mut pieces = Vec::with_capacity(usize::try_from(last - first + 1).unwrap_or(1));
        for block in first..=last {
            let start = block * BLOCK;
            let range = off.max(start) - start..end.min(start + BLOCK) - start;
            let block = u32::try_from(block).expect("a slice's blocks fit u32");
            let path = self.block_path(id, block);
            let piece = match self.inner.get_range(&path, range.clone()).await {
                Ok(piece) => piece,
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::Missing {
                        id,
                        path: path.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            };
            if (piece.len() as u64) < range.end - range.start {
                return Err(Error::Short {
                    id,
                    off,
                    len,
                    stored: start + range.start + piece.len() as u64,
                });
            }
            pieces.push(piece);
        }
        Ok(match pieces.len() {
            1 => pieces.pop().expect("one piece"),
            _ => Bytes::from(pieces.concat()),
        })
    }

    /// Deletes slice `id`'s objects (`size` bytes were stored under it); objects already gone
    /// are no error, so a deletion may be repeated.
    pub async fn delete_slice(&self, id: u64, size: u64) -> Result<()> {
        for block in 0..blocks_of(size).max(1) {
            match self.inner.delete(&self.block_path(id, block)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Every object under the prefix: the slices' blocks, and a count of anything else.
    pub async fn list(&self) -> Result<Listing> {
        let mut listing = Listing::default();
        let root = self.prefix.clone().join("slices");
        let mut objects = self.inner.list(Some(&root));
        while let Some(meta) = objects.next().await {
            let meta = meta?;
            match parse_block_name(meta.location.filename().unwrap_or_default()) {
                Some((id, block)) if meta.location == self.block_path(id, block) => {
                    listing.blocks.push(StoredBlock {
                        id,
                        block,
                        size: meta.size,
                        modified: meta.last_modified.timestamp(),
                    });
                }
                _ => listing.foreign += 1,
            }
        }
        listing.blocks.sort_by_key(|b| (b.id, b.block));
        Ok(listing)
    }
}

/// Objects a slice of `size` bytes is stored in.
pub fn blocks_of(size: u64) -> u32 {
    u32::try_from(size.div_ceil(BLOCK)).expect("a slice's blocks fit u32")
}

/// Bytes `from..to` of the concatenation of `parts`, as pieces of them (no byte copied).
fn cut(parts: &[Bytes], from: u64, to: u64) -> Vec<Bytes> {
    let mut pieces = Vec::new();
    let mut start = 0u64;
    for part in parts {
        let end = start + part.len() as u64;
        if end > from.max(start) && start < to {
            let lo = usize::try_from(from.saturating_sub(start)).expect("a part fits memory");
            let hi = usize::try_from(to.min(end) - start).expect("a part fits memory");
            pieces.push(part.slice(lo..hi));
        }
        if end >= to {
            break;
        }
        start = end;
    }
    pieces
}

/// `<id, 16 hex digits>.<block>` back into (id, block).
fn parse_block_name(name: &str) -> Option<(u64, u32)> {
    let (id, block) = name.split_once('.')?;
    if id.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(id, 16).ok()?, block.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names_parse_back_and_nothing_else_does() {
        assert_eq!(parse_block_name("00000000000004d2.3"), Some((1234, 3)));
        assert_eq!(parse_block_name("4d2.3"), None);
        assert_eq!(parse_block_name("00000000000004d2"), None);
        assert_eq!(parse_block_name("00000000000004d2.x"), None);
        assert_eq!(parse_block_name("zzzzzzzzzzzzzzzz.1"), None);
    }

    #[test]
    fn a_block_is_cut_from_the_parts_it_spans_and_from_no_other() {
        let parts = [
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"defgh"),
            Bytes::from_static(b"ij"),
        ];
        let text = |v: Vec<Bytes>| {
            v.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(text(cut(&parts, 0, 3)), ["abc"]);
        assert_eq!(text(cut(&parts, 2, 9)), ["c", "defgh", "i"]);
        assert_eq!(text(cut(&parts, 3, 8)), ["defgh"]);
        assert_eq!(text(cut(&parts, 8, 10)), ["ij"]);
        assert_eq!(text(cut(&parts, 0, 10)).concat(), "abcdefghij");
        assert!(cut(&parts, 10, 10).is_empty());
    }

    #[test]
    fn a_slice_takes_whole_blocks_and_at_least_none() {
        assert_eq!(blocks_of(0), 0);
        assert_eq!(blocks_of(1), 1);
        assert_eq!(blocks_of(BLOCK), 1);
        assert_eq!(blocks_of(BLOCK + 1), 2);
    }
}
