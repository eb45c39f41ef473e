//! File data past the server's inline cap, which the mount reads from and writes to the object
//! store itself (the server never sees those bytes): a file's writes are kept here
//! (`objects::Unflushed`) until a flush uploads them as one new slice and tells the server where its
//! pieces belong (WRITE_SLICES, journaled as any metadata); a read asks the server for the
//! layout (LAYOUT, kept until the next change here) and fetches the ranges it names, with
//! what is not flushed yet laid over them.
//!
//! A file moves to objects when a write or a truncate would take it past the cap (the server
//! answers EFBIG): its bytes on the server are read back and become part of the first slice,
//! whose WRITE_SLICES has the server drop its copy. A file another mount moved is found by the
//! server's EMEDIUMTYPE to a READ or WRITE.
//!
//! Flushes happen at close (FLUSH), fsync, RELEASE, before a truncate, and when a file's
//! unflushed bytes pass `FLUSH_AT`: close-to-open, as NFS — what one mount wrote is seen by
//! another that opens the file after the writer closed it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use fuser::Errno;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use mds_client::Handle;
use mds_client::proto::{Attr, Body, Cred, FileLayout, MAX_IO, MAX_PLACED, Op, OpenFlags, Placed};
use tracing::{info, warn};

use crate::attr::{Fallible, errno};
use crate::compact::LOOK_AFTER;
use crate::mount::Mount;
use crate::objects::{
    Batch, FLUSH_AT, FileData, IDS_AT_ONCE, MAX_SEALED, Unflushed, seek_in, sources,
};
use crate::readahead::FOLLOWS_WITHIN;

/// Sealed batches of one file whose objects are written at the same time (each [`FLUSH_AT`]
/// bytes, written [`mds_objects`]' four objects at a time): the next one's upload overlaps the
/// placement of the last.
const UPLOADS_AHEAD: usize = 2;

impl Mount {
    fn objects_file(&self, ino: u64) -> Option<Arc<FileData>> {
        self.objects.as_ref()?.file(ino)
    }

    /// Whether `ino` has data this mount keeps for the object store (a flush may upload).
    pub fn has_objects_file(&self, ino: u64) -> bool {
        self.objects_file(ino).is_some()
    }

    /// Held by a WRITE to the server from its choice of the server until its answer.
    pub async fn writing_inline(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        match &self.objects {
            Some(objects) => Some(objects.moving.read().await),
            None => None,
        }
    }

    /// Whether a write of `len` bytes at `at` goes to objects: the file is there, or the
    /// write would take it past the cap (`at` `u64::MAX`: an append, whose end the server
    /// knows; tried inline first).
    pub fn writes_to_objects(&self, ino: u64, at: u64, len: usize) -> bool {
        let Some(objects) = &self.objects else {
            return false;
        };
        objects.file(ino).is_some()
            || (at != u64::MAX && at.saturating_add(len as u64) > objects.inline_max)
    }

    /// The attributes a reply about a file should show: the server's, with the size and the
    /// blocks this mount's writes not placed yet add ([`Mount::size_seen`]) — the bytes
    /// written are taken to be all data until they are placed and the server counts them.
    pub fn attr_seen(&self, a: &mut Attr) {
        let size = self.size_seen(a.ino, a.size);
        if size != a.size {
            a.size = size;
            a.blocks = a.blocks.max(size.div_ceil(4096) * 8);
        }
    }

    /// The size a reply about `ino` should show: the server's, or more while this mount holds
    /// writes past it.
    pub fn size_seen(&self, ino: u64, server: u64) -> u64 {
        match self.objects_file(ino) {
            Some(fd) => {
                let s = fd.state.lock();
                if s.unflushed() {
                    server.max(s.size)
                } else {
                    server
                }
            }
            None => server,
        }
    }

    /// The file `ino` in objects as this mount uses it: known already, or asked about now —
    /// one in objects (another mount moved it) is taken as the server says; one on the server
    /// is moved, its bytes read back into the first slice's writes.
    async fn adopt(&self, ino: u64) -> Fallible<Arc<FileData>> {
        let objects = self.objects.as_ref().ok_or(Errno::EFBIG)?;
        if let Some(fd) = objects.file(ino) {
            return Ok(fd);
        }
        let _no_inline_write = objects.moving.write().await;
        if let Some(fd) = objects.file(ino) {
            return Ok(fd);
        }
        let own = self.own_cred().clone();
        let layout = self.layout_as(&own, ino, None).await?;
        let inline = if !layout.objects && layout.size > 0 {
            let bytes = self.read_inline_all(&own, ino, layout.size).await?;
            info!(ino, bytes = bytes.len(), "file moves to the object store");
            Some(bytes)
        } else {
            None
        };
        let fd = Arc::new(FileData::default());
        {
            let mut s = fd.state.lock();
            s.size = layout.size;
            match inline {
                Some(bytes) => s.write(0, &bytes),
                None if layout.objects => s.layout = Some(Arc::new(layout)),
                None => {}
            }
        }
        Ok(objects.files.lock().entry(ino).or_insert(fd).clone())
    }

    /// Every byte of `ino` on the server (`size` of them), through a handle of the mount's
    /// own opened to read.
    async fn read_inline_all(&self, own: &Cred, ino: u64, size: u64) -> Fallible<Vec<u8>> {
        let (_, conn) = self.conn_of(ino).await?;
        let flags = OpenFlags {
            read: true,
            ..OpenFlags::default()
        };
        let (handle, reply) = conn.open(own, ino, flags).await?;
        reply.result.map_err(errno)?;
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        let mut result = Ok(());
        while (out.len() as u64) < size {
            let op = handle.read_op(out.len() as u64, MAX_IO as u32);
            match conn
                .call_on(own, handle, op)
                .await
                .and_then(|r| r.result.map_err(errno))
            {
                Ok(Body::Data(d)) if !d.0.is_empty() => out.extend_from_slice(&d.0),
                Ok(_) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let _ = conn.release(handle).await;
        result.map(|()| out)
    }

    /// LAYOUT of `ino`, through `handle` or, without one, as `cred`.
    pub(crate) async fn layout_as(
        &self,
        cred: &Cred,
        ino: u64,
        handle: Option<Handle>,
    ) -> Fallible<FileLayout> {
        let (_, conn) = self.conn_of(ino).await?;
        let op = Op::Layout {
            ino,
            handle: handle.map_or(0, Handle::id),
        };
        let reply = match handle {
            Some(h) => conn.call_on(cred, h, op).await?,
            None => conn.call(cred, op).await?,
        };
        match reply.result.map_err(errno)? {
            Body::Layout(layout) => Ok(layout),
            _ => Err(Errno::EIO),
        }
    }

    /// A write(2) of `data` at `at` (`u64::MAX`: at the end) to the file in objects, or to
    /// one that moves there now. When the file's writes pass [`FLUSH_AT`] they are sealed and
    /// uploaded by a task of their own while the writer goes on — unless [`MAX_SEALED`] are
    /// still uploading, when the writer waits for them (the memory one file holds here).
    pub async fn write_objects(
        self: &Arc<Self>,
        cred: &Cred,
        handle: Handle,
        at: u64,
        data: &[u8],
    ) -> Fallible<()> {
        let ino = handle.ino();
        let fd = self.adopt(ino).await?;
        let backlog = {
            let mut s = fd.state.lock();
            if !write_buffered(&mut s, cred, handle, at, data)? {
                return Ok(());
            }
            s.sealed_bytes()
        };
        if backlog > MAX_SEALED {
            return self.flush_objects(ino).await;
        }
        let mount = self.clone();
        tokio::spawn(async move { mount.upload_behind(ino).await });
        Ok(())
    }

    /// [`Mount::write_objects`] without waiting, for the FUSE thread: the bytes go into the
    /// buffer of a file already in objects, copied once from the request, with no hand-off
    /// to the runtime. `Ok(true)`: its writes were sealed, and [`Mount::upload_behind`] is to
    /// run. None when the write has to be made the way that may wait: the file is not in
    /// objects here yet, or its uploads are behind by [`MAX_SEALED`].
    pub fn write_objects_now(
        &self,
        cred: &Cred,
        handle: Handle,
        at: u64,
        data: &[u8],
    ) -> Option<Fallible<bool>> {
        let fd = self.objects_file(handle.ino())?;
        let mut s = fd.state.lock();
        let may_seal = s.ranges.bytes + data.len() >= FLUSH_AT;
        if may_seal && s.sealed_bytes() + s.ranges.bytes + data.len() > MAX_SEALED {
            return None;
        }
        Some(write_buffered(&mut s, cred, handle, at, data))
    }

    /// The sealed writes of `ino` uploaded while its writer goes on.
    pub async fn upload_behind(&self, ino: u64) {
        if let Err(e) = self.flush_objects(ino).await {
            // Kept, and tried again by the next flush, whose caller hears of it.
            warn!(ino, error = ?e, "uploading a file's writes failed");
        }
    }

    /// Uploads the writes of `ino` not placed yet, batch by batch in order, each as new slices
    /// the server places (WRITE_SLICES, at most [`MAX_PLACED`] pieces each); nothing to do
    /// for a file with none. A batch that fails stays, first in line for the next flush.
    pub async fn flush_objects(&self, ino: u64) -> Fallible<()> {
        let Some(fd) = self.objects_file(ino) else {
            return Ok(());
        };
        let _one = fd.flushing.lock().await;
        self.flush_locked(ino, &fd).await
    }

    /// [`Mount::flush_objects`], its flush lock held. The batches are uploaded up to
    /// [`UPLOADS_AHEAD`] at a time and placed one by one in the order they were sealed, so
    /// that the next batch's objects are being written while the server commits the last
    /// one's placement; batches sealed meanwhile join the line.
    async fn flush_locked(&self, ino: u64, fd: &FileData) -> Fallible<()> {
        let writer = {
            let mut s = fd.state.lock();
            s.seal();
            s.writer.clone()
        };
        // A writer's handle released since: as the mount itself (its write was allowed).
        let writer = writer.filter(|(h, _)| self.files.lock().values().any(|f| f.handle == *h));
        let mut uploading = FuturesOrdered::new();
        loop {
            while uploading.len() < UPLOADS_AHEAD {
                let Some(batch) = fd.state.lock().sealed.get(uploading.len()).cloned() else {
                    break;
                };
                uploading.push_back(async move {
                    let slices = self.upload(ino, &batch).await;
                    (batch, slices)
                });
            }
            let Some((batch, slices)) = uploading.next().await else {
                break;
            };
            // A failed upload leaves its batch, and those after it, first in line for the
            // next flush; what was stored of them is garbage the collector takes.
            let slices = slices?;
            let size = {
                let s = fd.state.lock();
                // The last batch carries the size (a truncate past the end moved it); one
                // before it no more than its own end, so that no size runs ahead of the
                // bytes placed.
                if s.sealed.len() == 1 {
                    s.size
                } else {
                    batch.end()
                }
            };
            for placed in slices {
                self.place(ino, writer.as_ref(), size, placed).await?;
            }
            let mut s = fd.state.lock();
            if s.sealed.front().is_some_and(|b| Arc::ptr_eq(b, &batch)) {
                s.sealed.pop_front();
            }
            s.placements += 1;
            s.layout = None;
            s.placed_unlooked += batch.map.len();
        }
        let look = {
            let mut s = fd.state.lock();
            let look = s.placed_unlooked >= LOOK_AFTER;
            if look {
                s.placed_unlooked = 0;
            }
            look
        };
        if look {
            self.compact_if_fragmented(ino, fd, writer.as_ref()).await;
        }
        Ok(())
    }

    /// One batch stored as slices: for each, the pieces a WRITE_SLICES is to place (at most
    /// [`MAX_PLACED`] each).
    async fn upload(&self, ino: u64, batch: &Batch) -> Fallible<Vec<Vec<Placed>>> {
        let objects = self.objects.as_ref().ok_or(Errno::EIO)?;
        let ranges: Vec<(&u64, &Bytes)> = batch.map.iter().collect();
        let mut slices = Vec::with_capacity(ranges.len().div_ceil(MAX_PLACED));
        for group in ranges.chunks(MAX_PLACED) {
            let id = self.slice_id(ino).await?;
            let total: u64 = group.iter().map(|(_, b)| b.len() as u64).sum();
            let mut parts = Vec::with_capacity(group.len());
            let mut placed = Vec::with_capacity(group.len());
            let mut slice_off = 0;
            for (off, bytes) in group {
                placed.push(Placed {
                    slice: id,
                    slice_size: total,
                    slice_off,
                    file_off: **off,
                    len: bytes.len() as u64,
                });
                slice_off += bytes.len() as u64;
                parts.push(Bytes::clone(bytes));
            }
            objects.store.put_slice(id, &parts).await.map_err(|e| {
                warn!(ino, slice = id, error = %e, "upload to the object store failed");
                Errno::EIO
            })?;
            slices.push(placed);
        }
        Ok(slices)
    }

    /// WRITE_SLICES of `placed` into `ino`, through the writer's handle if it is still open.
    async fn place(
        &self,
        ino: u64,
        writer: Option<&(Handle, Cred)>,
        size: u64,
        placed: Vec<Placed>,
    ) -> Fallible<()> {
        let (shard, conn) = self.conn_of(ino).await?;
        let op = Op::WriteSlices {
            ino,
            handle: writer.map_or(0, |(h, _)| h.id()),
            size,
            placed,
        };
        let reply = match writer {
            Some((h, cred)) => conn.call_on(cred, *h, op).await?,
            None => conn.call(&self.own_cred().clone(), op).await?,
        };
        self.durability().note(shard, &reply, &[ino]);
        match reply.result {
            Ok(_) => Ok(()),
            Err(e) => {
                warn!(ino, errno = e.name(), "WRITE_SLICES refused");
                Err(errno(e))
            }
        }
    }

    /// A slice id of the shard of `ino`, from the ids in hand or a new ALLOC_SLICES.
    pub(crate) async fn slice_id(&self, ino: u64) -> Fallible<u64> {
        let objects = self.objects.as_ref().ok_or(Errno::EIO)?;
        let (shard, conn) = self.conn_of(ino).await?;
        loop {
            if let Some(range) = objects.ids.lock().get_mut(&shard)
                && let Some(id) = range.next()
            {
                return Ok(id);
            }
            let reply = conn
                .call(
                    &self.own_cred().clone(),
                    Op::AllocSlices { count: IDS_AT_ONCE },
                )
                .await?;
            match reply.result.map_err(errno)? {
                Body::Slices { first, count } => {
                    objects
                        .ids
                        .lock()
                        .insert(shard, first..first + u64::from(count));
                }
                _ => return Err(Errno::EIO),
            }
        }
    }

    /// A read of the file in objects (`None`: the file is not in objects, READ it).
    pub async fn read_objects(
        &self,
        cred: &Cred,
        handle: Handle,
        offset: u64,
        size: u32,
    ) -> Fallible<Option<Bytes>> {
        let ino = handle.ino();
        let Some(fd) = self.objects_file(ino) else {
            return Ok(None);
        };
        // The batches not placed yet as the read begins: one placed while it asks LAYOUT may
        // be in the answer or not, so its bytes are laid over whatever the layout says.
        let (cached, before, placements) = {
            let s = fd.state.lock();
            (s.layout.clone(), s.sealed.clone(), s.placements)
        };
        let layout = if let Some(layout) = cached {
            layout
        } else {
            let layout = Arc::new(self.layout_as(cred, ino, Some(handle)).await?);
            // Kept only if nothing was placed meanwhile.
            let mut s = fd.state.lock();
            if s.placements == placements {
                s.layout = Some(layout.clone());
            }
            layout
        };
        let size_now = {
            let s = fd.state.lock();
            if s.unflushed() || !before.is_empty() {
                layout.size.max(s.size)
            } else {
                layout.size
            }
        };
        let end = offset.saturating_add(u64::from(size)).min(size_now);
        if end <= offset {
            return Ok(Some(Bytes::new()));
        }
        let blocks = &self.objects.as_ref().expect("a file in objects").blocks;
        let last_end = fd.read_end.swap(end, Ordering::Relaxed);
        let follows = offset.abs_diff(last_end) <= FOLLOWS_WITHIN;
        let fetches = sources(&layout.placed, offset, end)
            .into_iter()
            .map(|(at, len, src)| async move {
                let Some(src) = src else {
                    return Ok((at, len, None));
                };
                match blocks.read(src, len, follows).await {
                    Ok(bytes) => Ok((at, len, Some(bytes))),
                    Err(e) => {
                        warn!(ino, slice = src.slice, error = %e, "read from the object store failed");
                        Err(Errno::EIO)
                    }
                }
            });
        let pieces = futures::future::try_join_all(fetches).await?;
        let len = usize::try_from(end - offset).expect("a read fits memory");
        // One piece of one slice, which nothing written here lies over (a sequential reader's
        // every READ, a block read ahead holding it): answered with the block's own bytes.
        if let [(at, piece_len, Some(bytes))] = pieces.as_slice()
            && (*at, *piece_len) == (offset, end - offset)
            && before.is_empty()
            && !fd.state.lock().unflushed()
        {
            return Ok(Some(bytes.clone()));
        }
        // Otherwise the pieces one after another (a hole's bytes are zeros, and so is
        // anything no piece names, which `sources` leaves out only past the layout's end).
        let mut out = Vec::with_capacity(len);
        for (at, piece_len, bytes) in pieces {
            let dst = usize::try_from(at - offset).expect("fits");
            out.resize(dst, 0);
            match bytes {
                Some(bytes) => out.extend_from_slice(&bytes),
                None => out.resize(dst + usize::try_from(piece_len).expect("fits"), 0),
            }
        }
        out.resize(len, 0);
        for batch in &before {
            batch.overlay(offset, &mut out);
        }
        fd.state.lock().overlay(offset, &mut out);
        Ok(Some(Bytes::from(out)))
    }

    /// [`Mount::read_objects`] without waiting, for the FUSE thread (which has entered the
    /// runtime, for the blocks it asks ahead): a read of a file in objects whose layout this
    /// mount holds, with nothing unflushed, that one piece of a slice covers and the block
    /// cache holds whole — a sequential reader's READs, once its first has fetched ahead.
    /// None: read it the way that may wait.
    pub fn read_objects_kept(&self, ino: u64, offset: u64, size: u32) -> Option<Bytes> {
        let fd = self.objects_file(ino)?;
        let layout = {
            let s = fd.state.lock();
            if s.unflushed() {
                return None;
            }
            s.layout.clone()?
        };
        let end = offset.saturating_add(u64::from(size)).min(layout.size);
        if end <= offset {
            return None;
        }
        let [(at, len, Some(src))] = sources(&layout.placed, offset, end)[..] else {
            return None;
        };
        debug_assert_eq!((at, len), (offset, end - offset));
        let follows = offset.abs_diff(fd.read_end.load(Ordering::Relaxed)) <= FOLLOWS_WITHIN;
        let blocks = &self.objects.as_ref()?.blocks;
        let bytes = blocks.read_kept(src, len, follows)?;
        fd.read_end.store(end, Ordering::Relaxed);
        Some(bytes)
    }

    /// lseek(2)'s SEEK_DATA and SEEK_HOLE (the kernel sends no other whence): the first byte
    /// of data, or of a hole, at or after `offset`, from the file's layout and what this mount
    /// has not placed yet — the end of the file is a hole; ENXIO past it. A file on the server
    /// is data from end to end (its holes are blocks, which nothing reports). Asked as the
    /// mount itself: a seek reads no data, and a descriptor open only to write may seek.
    pub async fn seek_data(&self, fh: u64, offset: i64, whence: i32) -> Fallible<i64> {
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
        let ino = self.files.lock().get(&fh).ok_or(Errno::EBADF)?.handle.ino();
        let own = self.own_cred().clone();
        let layout = self.layout_as(&own, ino, None).await?;
        let size = self.size_seen(ino, layout.size);
        if offset >= size {
            return Err(Errno::ENXIO);
        }
        let mut extents: Vec<(u64, u64)> = if layout.objects {
            layout
                .placed
                .iter()
                .map(|p| (p.file_off, p.file_end()))
                .collect()
        } else {
            vec![(0, size)]
        };
        if let Some(fd) = self.objects_file(ino) {
            extents.extend(fd.state.lock().extents());
        }
        let found = seek_in(&mut extents, offset, size, data);
        found
            .map(|at| i64::try_from(at).unwrap_or(i64::MAX))
            .ok_or(Errno::ENXIO)
    }

    /// A READ or WRITE the server refused with EMEDIUMTYPE: the file is in objects (another
    /// mount moved it); take it as such.
    pub async fn found_in_objects(&self, ino: u64) -> Fallible<()> {
        self.adopt(ino).await.map(drop)
    }

    /// Before a size change of `ino`: a file in objects has its unflushed writes cut to the
    /// new size, and what is left flushed, so that the server knows the file in objects (a
    /// file just moved there is still on the server until its first flush) and the size
    /// change comes after every piece. The guard holds off other flushes until the size
    /// change is answered.
    pub async fn resize_objects(
        &self,
        ino: u64,
        size: u64,
    ) -> Fallible<Option<tokio::sync::OwnedMutexGuard<()>>> {
        let Some(fd) = self.objects_file(ino) else {
            return Ok(None);
        };
        let guard = fd.flushing.clone().lock_owned().await;
        fd.state.lock().truncate(size);
        self.flush_locked(ino, &fd).await?;
        Ok(Some(guard))
    }

    /// A truncate the server refused with EFBIG (a file on the server past the cap): the
    /// file moves to objects now, so that the truncate can be sent again.
    pub async fn move_to_objects(&self, ino: u64) -> Fallible<bool> {
        if self.objects.is_none() || self.objects_file(ino).is_some() {
            return Ok(false);
        }
        self.adopt(ino).await?;
        self.flush_objects(ino).await?;
        Ok(true)
    }

    /// OPEN of `ino`, whose size is `size` now: what this mount knew of the file's layout
    /// and size may be stale (close-to-open); with nothing unflushed, the server's size is it.
    pub fn opened_objects(&self, ino: u64, size: u64) {
        if let Some(fd) = self.objects_file(ino) {
            let mut s = fd.state.lock();
            s.layout = None;
            if !s.unflushed() {
                s.size = size;
            }
        }
    }

    /// The layout kept of `ino` (if it is in objects) is asked for again at the next read.
    pub fn forget_layout(&self, ino: u64) {
        if let Some(fd) = self.objects_file(ino) {
            fd.state.lock().layout = None;
        }
    }

    /// A size change of `ino` answered: the file's size is `size`.
    pub fn sized_objects(&self, ino: u64, size: u64) {
        if let Some(fd) = self.objects_file(ino) {
            fd.state.lock().truncate(size);
        }
    }

    /// The last handle of `ino` went: flushed before, so nothing is kept.
    pub fn closed_objects(&self, ino: u64) {
        let Some(objects) = &self.objects else {
            return;
        };
        let open = self.files.lock().values().any(|f| f.handle.ino() == ino);
        let mut files = objects.files.lock();
        if !open
            && let Some(fd) = files.get(&ino)
            && !fd.state.lock().unflushed()
        {
            files.remove(&ino);
        }
    }
}

/// `data` written at `at` (`u64::MAX`: the end as this mount knows it) into the unplaced
/// writes `s` of a file in objects, through `handle`; true when they passed [`FLUSH_AT`] and
/// were sealed for upload.
fn write_buffered(
    s: &mut Unflushed,
    cred: &Cred,
    handle: Handle,
    at: u64,
    data: &[u8],
) -> Fallible<bool> {
    let off = if at == u64::MAX { s.size } else { at };
    if off.saturating_add(data.len() as u64) > i64::MAX as u64 {
        return Err(Errno::EFBIG);
    }
    s.write(off, data);
    if s.writer
        .as_ref()
        .is_none_or(|(h, c)| *h != handle || c != cred)
    {
        s.writer = Some((handle, cred.clone()));
    }
    if s.ranges.bytes < FLUSH_AT {
        return Ok(false);
    }
    s.seal();
    Ok(true)
}
