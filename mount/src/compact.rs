//! A file in objects rewritten in many small scattered pieces is compacted by the mount that
//! wrote it (JuiceFS's clients compact their slices so too): once the pieces it placed since it
//! last looked pass [`LOOK_AFTER`], it asks the file's layout, and past [`COMPACT_AT`] pieces
//! reads the file's bytes by that layout, uploads them as one new slice — one piece per run of
//! data, holes kept — and asks the server to replace the layout with it (COMPACT_LAYOUT),
//! which it does only if nothing changed the file since the layout it read: a write of another
//! mount meanwhile is never undone. The old slices go to the server's collector; an upload
//! the server refused is reclaimed by it too. Reads and writes never wait for a compaction:
//! it runs in the flush that found the layout long, under the file's flush lock. Below
//! `data.rs`, which calls it after its placements.

use bytes::Bytes;
use fuser::Errno;
use mds_client::Handle;
use mds_client::proto::{Cred, Errno as ProtoErrno, MAX_PLACED, Op, Placed};
use tracing::{info, warn};

use crate::attr::{Fallible, errno};
use crate::mount::Mount;
use crate::objects::{FileData, runs, sources};

/// Pieces this mount places in one file before it looks at the file's layout again.
pub const LOOK_AFTER: usize = 512;

/// Pieces past which a file's layout is compacted: a layout is one value the server rewrites
/// with each placement and a reader fetches whole, and the server refuses one past 65,536.
const COMPACT_AT: usize = 1024;

/// Most bytes of data one compaction reads and rewrites (it holds them meanwhile); a larger
/// file keeps its pieces.
const COMPACT_MAX: u64 = 256 << 20;

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
            Ok(Some((before, after))) => {
                let mut s = fd.state.lock();
                s.placements += 1;
                s.layout = None;
                info!(
                    ino,
                    pieces_before = before,
                    pieces_after = after,
                    "layout compacted"
                );
            }
            Ok(None) => {}
            Err(e) => warn!(ino, error = ?e, "compaction failed: the layout stays as it is"),
        }
    }

    /// The compaction itself: Some((pieces before, after)) if the layout was replaced.
    async fn compact(
        &self,
        ino: u64,
        writer: Option<&(Handle, Cred)>,
    ) -> Fallible<Option<(usize, usize)>> {
        // Read as the mount itself: the writer's handle may be open only to write, and the
        // bytes read go nowhere but back into the same file.
        let own = self.own_cred().clone();
        let layout = self.layout_as(&own, ino, None).await?;
        if !layout.objects || layout.placed.len() <= COMPACT_AT {
            return Ok(None);
        }
        let mut extents: Vec<(u64, u64)> = layout
            .placed
            .iter()
            .map(|p| (p.file_off, p.file_end()))
            .collect();
        let runs = runs(&mut extents, layout.size);
        let total: u64 = runs.iter().map(|(s, e)| e - s).sum();
        if runs.len() > MAX_PLACED || total > COMPACT_MAX {
            info!(
                ino,
                pieces = layout.placed.len(),
                runs = runs.len(),
                bytes = total,
                "layout not compacted: too many runs of data or too many bytes for one slice"
            );
            return Ok(None);
        }
        let objects = self.objects.as_ref().ok_or(Errno::EIO)?;
        let mut parts = Vec::with_capacity(runs.len());
        for &(start, end) in &runs {
            let mut buf = vec![0u8; usize::try_from(end - start).expect("a run fits memory")];
            for (at, len, src) in sources(&layout.placed, start, end) {
                let Some(src) = src else { continue };
                let bytes = objects
                    .store
                    .read_slice(src.slice, src.at, len)
                    .await
                    .map_err(|e| {
                        warn!(ino, slice = src.slice, error = %e, "compaction: read failed");
                        Errno::EIO
                    })?;
                let dst = usize::try_from(at - start).expect("within the run");
                buf[dst..dst + bytes.len()].copy_from_slice(&bytes);
            }
            parts.push(Bytes::from(buf));
        }
        let id = self.slice_id(ino).await?;
        objects.store.put_slice(id, &parts).await.map_err(|e| {
            warn!(ino, slice = id, error = %e, "compaction: upload failed");
            Errno::EIO
        })?;
        let mut placed = Vec::with_capacity(runs.len());
        let mut slice_off = 0;
        for &(start, end) in &runs {
            placed.push(Placed {
                slice: id,
                slice_size: total,
                slice_off,
                file_off: start,
                len: end - start,
            });
            slice_off += end - start;
        }
        let (shard, conn) = self.conn_of(ino).await?;
        let op = Op::CompactLayout {
            ino,
            handle: writer.map_or(0, |(h, _)| h.id()),
            version: layout.version,
            placed,
        };
        let reply = match writer {
            Some((h, cred)) => conn.call_on(cred, *h, op).await?,
            None => conn.call(&own, op).await?,
        };
        self.durability().note(shard, &reply, &[ino]);
        match reply.result {
            Ok(_) => Ok(Some((layout.placed.len(), runs.len()))),
            // Changed since: the next look tries again; the upload is the collector's.
            Err(ProtoErrno::ESTALE) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }
}
