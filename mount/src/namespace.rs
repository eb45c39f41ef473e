//! Names and inodes: LOOKUP, GETATTR, SETATTR, MKDIR, MKNOD, SYMLINK, READLINK, LINK, UNLINK,
//! RMDIR, RENAME, STATFS, ACCESS and the extended attributes, each one request to the server
//! (RENAME under early replies two: the names it moves and replaces are looked up first, so
//! that fsync of either inode waits for it; STATFS in a cluster one to each shard).

use fuser::{Errno, RenameFlags};
use mds_client::proto::{
    Attr, Body, Cred, Kind, Op, ROOT_INO, RenameHow, SetAttr, StatFs, Target, XattrSet, XattrValue,
    mode_with_umask,
};
use tracing::warn;

use crate::attr::{Fallible, attr, errno, server_rdev};
use crate::creds::Caller;
use crate::mount::Mount;

/// What SETATTR asks, as the kernel gave it.
#[derive(Debug, Default)]
pub struct SetRequest {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<fuser::TimeOrNow>,
    pub mtime: Option<fuser::TimeOrNow>,
    /// The open file it goes through (ftruncate), if any.
    pub fh: Option<u64>,
}

/// What STATFS answers, in the kernel's terms.
pub struct FsStats {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
}

/// The block size STATFS counts in.
pub const STATFS_BLOCK: u32 = 4096;

/// Inodes are only memory on the server (no table to fill): `df -i` shows this many in all.
const INODE_CEILING: u64 = u32::MAX as u64;

/// What an S3 store is taken to hold in all: it says no capacity, so `df` shows this much
/// less what the files hold (JuiceFS shows the same 1 PiB without a quota).
const UNBOUNDED_STORE: u64 = 1 << 50;

/// `df` of the mount from the server's STATFS: used is the data the files hold (holes not
/// counted); free is what the server's store's file system has free — where inline data and
/// a local object store's slices go — or, with an S3 store, [`UNBOUNDED_STORE`] less what is
/// used. Inodes are the server's count against [`INODE_CEILING`].
fn fs_stats(s: &StatFs) -> FsStats {
    let block = u64::from(STATFS_BLOCK);
    let used = s.data_bytes.div_ceil(block);
    let (free, available) = if s.object_store.starts_with("s3://") {
        let free = UNBOUNDED_STORE.saturating_sub(s.data_bytes) / block;
        (free, free)
    } else {
        (s.store_bytes_free / block, s.store_bytes_available / block)
    };
    FsStats {
        blocks: used + free,
        bfree: free,
        bavail: available,
        files: INODE_CEILING.max(s.inodes),
        ffree: INODE_CEILING.saturating_sub(s.inodes),
    }
}

impl Mount {
    /// LOOKUP; "." (an inode by its number, which the kernel asks for a file handle whose
    /// inode it no longer holds) is the inode's own attributes, ".." the server's answer.
    pub async fn lookup(&self, caller: Caller, parent: u64, name: String) -> Fallible<Attr> {
        if name == "." {
            return self.getattr(caller, parent).await;
        }
        let cred = self.cred(caller);
        self.lookup_as(&cred, parent, name).await
    }

    /// LOOKUP on the parent's shard; an entry naming another shard's directory
    /// (`Body::Remote`) is then asked of that shard (GETATTR), as a Lustre client asks the MDT
    /// a FID lives on.
    pub async fn lookup_as(&self, cred: &Cred, parent: u64, name: String) -> Fallible<Attr> {
        match self.call(cred, Op::Lookup { parent, name }, &[]).await? {
            Body::Remote { ino, .. } => attr(self.call(cred, Op::Getattr { ino }, &[]).await?),
            body => attr(body),
        }
    }

    pub async fn getattr(&self, caller: Caller, ino: u64) -> Fallible<Attr> {
        let cred = self.cred(caller);
        match self
            .call(&cred, Op::Getattr { ino }, &[])
            .await
            .and_then(attr)
        {
            // The kernel asks about an inode it holds; gone from the server, a directory this
            // mount has open is still there for its holder (an fstat) until the last close.
            Err(Errno::ESTALE | Errno::ENOENT) if let Some(kept) = self.removed_but_open(ino) => {
                Ok(kept)
            }
            answer => answer,
        }
    }

    /// SETATTR; a size past the inline cap of a file on the server moves it to objects
    /// first (the server answers EFBIG until it is there).
    pub async fn setattr(&self, caller: Caller, ino: u64, set: SetRequest) -> Fallible<Attr> {
        let _no_flush = match set.size {
            Some(size) => self.resize_objects(ino, size).await?,
            None => None,
        };
        let answer = match self.setattr_once(caller, ino, &set).await {
            Err(e)
                if e == Errno::EFBIG && set.size.is_some() && self.move_to_objects(ino).await? =>
            {
                self.setattr_once(caller, ino, &set).await
            }
            answer => answer,
        };
        if let (Ok(attr), Some(_)) = (&answer, set.size) {
            self.sized_objects(ino, attr.size);
        }
        answer
    }

    async fn setattr_once(&self, caller: Caller, ino: u64, set: &SetRequest) -> Fallible<Attr> {
        let cred = self.cred(caller);
        let mut mtime = set.mtime.map(crate::attr::set_time);
        if set.size.is_some() && set.atime.is_none() {
            // ftruncate(2) comes with "mtime now" (ATTR_MTIME without a time), which the
            // server would judge as utimensat's (owner or root only) and refuse a writer who
            // does not own the file. A truncate sets mtime and ctime anyway.
            mtime = mtime.filter(|t| *t != mds_client::proto::SetTime::Now);
        }
        let mut change = SetAttr {
            mode: set.mode.map(|m| m & 0o7777),
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set.atime.map(crate::attr::set_time),
            mtime,
            handle: None,
        };
        // A size through an open file is ftruncate: the handle's write access decides, not
        // the mode as it is now.
        let open = set
            .fh
            .filter(|_| set.size.is_some())
            .and_then(|fh| self.files.lock().get(&fh).cloned())
            .filter(|f| f.handle.ino() == ino && f.handle.flags().write);
        let Some(open) = open else {
            return attr(
                self.call(&cred, Op::Setattr { ino, attr: change }, &[])
                    .await?,
            );
        };
        change.handle = Some(open.handle.id());
        let op = Op::Setattr { ino, attr: change };
        let (shard, conn) = self.conn_of(ino).await?;
        let reply = conn.call_on(&cred, open.handle, op).await?;
        self.durability().note(shard, &reply, &[ino]);
        attr(reply.result.map_err(crate::attr::errno)?)
    }

    pub async fn mkdir(
        &self,
        caller: Caller,
        parent: u64,
        name: String,
        (mode, umask): (u32, u32),
    ) -> Fallible<Attr> {
        let cred = self.cred(caller);
        let op = Op::Mkdir {
            parent,
            name,
            mode: mode_with_umask(mode & 0o7777, umask),
        };
        attr(self.call(&cred, op, &[]).await?)
    }

    /// A fifo, socket, device or regular file, of the kind the mode's `S_IFMT` bits name.
    pub async fn mknod(
        &self,
        caller: Caller,
        parent: u64,
        name: String,
        (mode, umask): (u32, u32),
        rdev: u32,
    ) -> Fallible<Attr> {
        let cred = self.cred(caller);
        let kind = Kind::from_mode_bits(mode).ok_or(Errno::EINVAL)?;
        let rdev = match kind {
            Kind::CharDevice | Kind::BlockDevice => server_rdev(rdev),
            _ => 0,
        };
        let op = Op::Mknod {
            parent,
            name,
            kind,
            mode: mode_with_umask(mode & 0o7777, umask),
            rdev,
        };
        attr(self.call(&cred, op, &[]).await?)
    }

    pub async fn symlink(
        &self,
        caller: Caller,
        parent: u64,
        name: String,
        target: Vec<u8>,
    ) -> Fallible<Attr> {
        let cred = self.cred(caller);
        let op = Op::Symlink {
            parent,
            name,
            target: Target(target),
        };
        attr(self.call(&cred, op, &[]).await?)
    }

    pub async fn readlink(&self, caller: Caller, ino: u64) -> Fallible<Vec<u8>> {
        let cred = self.cred(caller);
        match self.call(&cred, Op::Readlink { ino }, &[]).await? {
            Body::Target(target) => Ok(target.0),
            _ => Err(Errno::EIO),
        }
    }

    pub async fn link(
        &self,
        caller: Caller,
        ino: u64,
        parent: u64,
        name: String,
    ) -> Fallible<Attr> {
        let cred = self.cred(caller);
        attr(
            self.call(&cred, Op::Link { ino, parent, name }, &[])
                .await?,
        )
    }

    pub async fn unlink(&self, caller: Caller, parent: u64, name: String) -> Fallible<()> {
        let cred = self.cred(caller);
        self.call(&cred, Op::Unlink { parent, name }, &[])
            .await
            .map(drop)
    }

    pub async fn rmdir(&self, caller: Caller, parent: u64, name: String) -> Fallible<()> {
        let cred = self.cred(caller);
        self.call(&cred, Op::Rmdir { parent, name }, &[])
            .await
            .map(drop)
    }

    /// RENAME with renameat2's flags. Under early replies the two names are looked up first:
    /// the inode moved and the one replaced (or exchanged) change too, and fsync of either
    /// must wait for the rename.
    pub async fn rename(
        &self,
        caller: Caller,
        (src_parent, src_name): (u64, String),
        (dst_parent, dst_name): (u64, String),
        flags: RenameFlags,
    ) -> Fallible<()> {
        let cred = self.cred(caller);
        let how = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameHow::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameHow::NoReplace
        } else if flags.is_empty() {
            RenameHow::Replace
        } else {
            return Err(Errno::EINVAL); // RENAME_WHITEOUT: overlayfs's, not ours
        };
        let mut also = Vec::new();
        if self.conn_of(src_parent).await?.1.session().is_early() {
            let src = self.lookup_as(&cred, src_parent, src_name.clone());
            let dst = self.lookup_as(&cred, dst_parent, dst_name.clone());
            let (src, dst) = futures::join!(src, dst);
            also.extend([src, dst].into_iter().filter_map(Result::ok).map(|a| a.ino));
        }
        let op = Op::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            how,
        };
        self.call(&cred, op, &also).await.map(drop)
    }

    /// STATFS (df): the root's shard's answer, with the inodes and the data of every other
    /// shard added — each shard holds its own part of the namespace. Free space stays the root
    /// shard's: a cluster's shards share one object store, and shards on one host one disk,
    /// whose free space added up would be counted again. A shard that does not answer is left
    /// out (and logged): df shows the rest rather than failing.
    pub async fn statfs(&self) -> Fallible<FsStats> {
        let root = self.shards.of(ROOT_INO);
        let mut total = self.statfs_of(root).await?;
        let others = self.shards.all().into_iter().filter(|&s| s != root);
        let answers = futures::future::join_all(
            others.map(|shard| async move { (shard, self.statfs_of(shard).await) }),
        )
        .await;
        for (shard, answer) in answers {
            match answer {
                Ok(s) => {
                    total.inodes += s.inodes;
                    total.data_bytes += s.data_bytes;
                }
                Err(e) => warn!(shard, errno = ?e, "STATFS of a shard failed: df leaves it out"),
            }
        }
        Ok(fs_stats(&total))
    }

    /// STATFS of one shard, as the mount itself.
    async fn statfs_of(&self, shard: u16) -> Fallible<StatFs> {
        let cred = self.own_cred().clone();
        let reply = self
            .shards
            .conn(shard)
            .await?
            .call(&cred, Op::Statfs)
            .await?;
        match reply.result.map_err(errno)? {
            Body::StatFs(s) => Ok(*s),
            _ => Err(Errno::EIO),
        }
    }

    /// access(2) without `default_permissions`: the mode bits of GETATTR judged as the server
    /// judges them (owner's class, else the group's — the primary or a supplementary group —
    /// else the others'; root passes read and write, and execute if anyone may).
    pub async fn access(&self, caller: Caller, ino: u64, mask: i32) -> Fallible<()> {
        self.accessible(caller, ino, mask).await.map(drop)
    }

    /// ACCESS: whether the caller may `mask` (access(2)'s `R_OK`, `W_OK`, `X_OK`) on `ino`,
    /// judged by the server, which holds the inode's ACL; its attributes if so.
    pub async fn accessible(&self, caller: Caller, ino: u64, mask: i32) -> Fallible<Attr> {
        let cred = self.cred(caller);
        let mask = (mask & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        attr(self.call(&cred, Op::Access { ino, mask }, &[]).await?)
    }

    pub async fn setxattr(
        &self,
        caller: Caller,
        ino: u64,
        name: String,
        value: Vec<u8>,
        flags: i32,
    ) -> Fallible<()> {
        let cred = self.cred(caller);
        let how = match flags {
            0 => XattrSet::Either,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return Err(Errno::EINVAL),
        };
        let op = Op::Setxattr {
            ino,
            name,
            value: XattrValue(value),
            how,
        };
        self.call(&cred, op, &[]).await.map(drop)
    }

    pub async fn getxattr(&self, caller: Caller, ino: u64, name: String) -> Fallible<Vec<u8>> {
        let cred = self.cred(caller);
        match self.call(&cred, Op::Getxattr { ino, name }, &[]).await? {
            Body::Xattr(value) => Ok(value.0),
            _ => Err(Errno::EIO),
        }
    }

    /// The names, each followed by a NUL, as listxattr(2) returns them.
    pub async fn listxattr(&self, caller: Caller, ino: u64) -> Fallible<Vec<u8>> {
        let cred = self.cred(caller);
        match self.call(&cred, Op::Listxattr { ino }, &[]).await? {
            Body::XattrNames(names) => Ok(names
                .iter()
                .flat_map(|n| n.bytes().chain(std::iter::once(0)))
                .collect()),
            _ => Err(Errno::EIO),
        }
    }

    pub async fn removexattr(&self, caller: Caller, ino: u64, name: String) -> Fallible<()> {
        let cred = self.cred(caller);
        self.call(&cred, Op::Removexattr { ino, name }, &[])
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_shows_the_files_data_used_and_the_stores_room_free() {
        let local = StatFs {
            inodes: 7,
            data_bytes: 10 * 4096 + 1,
            store_bytes: 1 << 40,
            store_bytes_free: 100 << 20,
            store_bytes_available: 90 << 20,
            object_store: "file:///var/lib/mds/objects".into(),
            ..StatFs::default()
        };
        let df = fs_stats(&local);
        assert_eq!(
            (df.blocks - df.bfree, df.bfree, df.bavail),
            (11, 25_600, 23_040)
        );
        assert_eq!((df.files - df.ffree, df.files), (7, INODE_CEILING));
        // An S3 store says no capacity: 1 PiB less what is used, whatever the server's disk.
        let s3 = StatFs {
            object_store: "s3://bucket/prefix?endpoint=http://127.0.0.1:3900".into(),
            ..local
        };
        let df = fs_stats(&s3);
        assert_eq!(df.blocks - df.bfree, 11);
        assert_eq!(df.bavail, df.bfree);
        assert_eq!(df.blocks, 11 + (UNBOUNDED_STORE - (10 * 4096 + 1)) / 4096);
    }
}
