//! One method of [`Client`] per protocol operation, taking and returning plain values: the
//! namespace's (names, attributes, directories, links, extended attributes), a file's data
//! through the handles the session numbers, the server's figures and the cluster's shard map.
//! Each sends one request with the session's credentials (a caller of its own uses
//! [`Client::call_as`]) and reads the reply's body as the kind the operation answers with.

use mds_proto::{
    Attr, Body, DirEntry, Errno, Kind, MAX_IO, MAX_READDIR, Op, OpenFlags, RenameHow, SetAttr,
    ShardMap, StatFs, Target, XattrSet, XattrValue,
};

use crate::client::Client;
use crate::error::{ClientError, Result, attr, done, unexpected};
use crate::handles::Handle;

impl Client {
    pub async fn ping(&self) -> Result<()> {
        self.call(Op::Ping).await.map(drop)
    }

    /// Creates a directory, owned by the session's credentials.
    pub async fn mkdir(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Mkdir { parent, name, mode }).await?)
    }

    /// Creates a regular file (exclusive), owned by the session's credentials.
    pub async fn create(&self, parent: u64, name: &str, mode: u32) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Create { parent, name, mode }).await?)
    }

    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        attr(
            self.call(Op::Lookup {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        attr(self.call(Op::Getattr { ino }).await?)
    }

    pub async fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr> {
        attr(self.call(Op::Setattr { ino, attr: set }).await?)
    }

    /// One page of a directory: entries after `cursor`, and the cursor of the next page.
    pub async fn readdir(
        &self,
        ino: u64,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<(Vec<DirEntry>, Option<String>)> {
        match self.call(Op::Readdir { ino, cursor, limit }).await? {
            Body::Entries { entries, next } => Ok((entries, next)),
            other => Err(unexpected(other)),
        }
    }

    /// A whole directory, page by page.
    pub async fn readdir_all(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = self.readdir(ino, cursor, MAX_READDIR).await?;
            all.extend(page);
            match next {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        done(
            self.call(Op::Unlink {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        done(
            self.call(Op::Rmdir {
                parent,
                name: name.into(),
            })
            .await?,
        )
    }

    pub async fn rename(&self, sp: u64, sn: &str, dp: u64, dn: &str) -> Result<()> {
        self.rename_how(sp, sn, dp, dn, RenameHow::Replace).await
    }

    /// RENAME with `renameat2`'s flags: never replace the target, or exchange the two.
    pub async fn rename_how(
        &self,
        sp: u64,
        sn: &str,
        dp: u64,
        dn: &str,
        how: RenameHow,
    ) -> Result<()> {
        done(
            self.call(Op::Rename {
                src_parent: sp,
                src_name: sn.into(),
                dst_parent: dp,
                dst_name: dn.into(),
                how,
            })
            .await?,
        )
    }

    /// A new name `name` in `parent` for the inode `ino`; the inode's attributes after.
    pub async fn link(&self, ino: u64, parent: u64, name: &str) -> Result<Attr> {
        let name = name.into();
        attr(self.call(Op::Link { ino, parent, name }).await?)
    }

    /// A symbolic link to `target`, owned by the session's credentials.
    pub async fn symlink(&self, parent: u64, name: &str, target: &[u8]) -> Result<Attr> {
        let (name, target) = (name.into(), Target(target.to_vec()));
        attr(
            self.call(Op::Symlink {
                parent,
                name,
                target,
            })
            .await?,
        )
    }

    pub async fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        match self.call(Op::Readlink { ino }).await? {
            Body::Target(t) => Ok(t.0),
            other => Err(unexpected(other)),
        }
    }

    /// A fifo, socket, device (`rdev`) or regular file, owned by the session's credentials.
    pub async fn mknod(
        &self,
        parent: u64,
        name: &str,
        kind: Kind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr> {
        let name = name.into();
        attr(
            self.call(Op::Mknod {
                parent,
                name,
                kind,
                mode,
                rdev,
            })
            .await?,
        )
    }

    pub async fn setxattr(&self, ino: u64, name: &str, value: &[u8], how: XattrSet) -> Result<()> {
        let (name, value) = (name.into(), XattrValue(value.to_vec()));
        done(
            self.call(Op::Setxattr {
                ino,
                name,
                value,
                how,
            })
            .await?,
        )
    }

    pub async fn getxattr(&self, ino: u64, name: &str) -> Result<Vec<u8>> {
        let name = name.into();
        match self.call(Op::Getxattr { ino, name }).await? {
            Body::Xattr(v) => Ok(v.0),
            other => Err(unexpected(other)),
        }
    }

    pub async fn listxattr(&self, ino: u64) -> Result<Vec<String>> {
        match self.call(Op::Listxattr { ino }).await? {
            Body::XattrNames(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    pub async fn removexattr(&self, ino: u64, name: &str) -> Result<()> {
        let name = name.into();
        done(self.call(Op::Removexattr { ino, name }).await?)
    }

    pub async fn statfs(&self) -> Result<StatFs> {
        match self.call(Op::Statfs).await? {
            Body::StatFs(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// Returns once every mutation the server executed before it is durable.
    pub async fn sync(&self) -> Result<()> {
        done(self.call(Op::Sync).await?)
    }

    /// Opens `ino` as `flags` say, under a handle number the session chooses, and records the
    /// handle in the session (which reopens it after a server restart). The file's attributes
    /// come with it (after the truncate, if `flags.truncate`).
    pub async fn open(&self, ino: u64, flags: OpenFlags) -> Result<(Handle, Attr)> {
        let session = self.session();
        let handle = session.new_handle(ino, flags);
        let opened = attr(self.call(handle.open_op()).await?)?;
        session.handle_opened(handle, self.server_boot());
        Ok((handle, opened))
    }

    /// Closes `handle`. Once the server has answered (Done, or an error: either way it is
    /// done with it) the session forgets it; a dead handle is forgotten without asking. A
    /// connection lost first leaves it held, to release again.
    pub async fn release(&self, handle: Handle) -> Result<()> {
        let session = self.session();
        if session.handle_error(handle).is_some() {
            session.handle_released(handle);
            return Ok(());
        }
        let answered = self.call(handle.release_op()).await;
        if matches!(answered, Ok(_) | Err(ClientError::Errno(_))) {
            session.handle_released(handle);
        }
        done(answered?)
    }

    /// Up to `len` bytes (at most [`MAX_IO`]; EINVAL, unsent, beyond) from `offset`: fewer
    /// at the end of the file, none past it.
    pub async fn read(&self, handle: Handle, offset: u64, len: u32) -> Result<Vec<u8>> {
        self.usable(handle)?;
        if len as usize > MAX_IO {
            return Err(ClientError::Errno(Errno::EINVAL));
        }
        match self.call(handle.read_op(offset, len)).await? {
            Body::Data(data) => Ok(data.0),
            other => Err(unexpected(other)),
        }
    }

    /// Writes `data` (at most [`MAX_IO`] bytes; EINVAL, unsent, beyond) at `offset`, or at
    /// the end of the file through a handle opened to append. The file's attributes after it
    /// (its new size and mtime).
    pub async fn write(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        self.usable(handle)?;
        if data.len() > MAX_IO {
            return Err(ClientError::Errno(Errno::EINVAL));
        }
        attr(self.call(handle.write_op(offset, data.to_vec())).await?)
    }

    /// `ftruncate(2)`: sets the size through `handle`, which must be open for writing.
    pub async fn ftruncate(&self, handle: Handle, size: u64) -> Result<Attr> {
        self.usable(handle)?;
        attr(self.call(handle.truncate_op(size)).await?)
    }

    /// Writes all of `data` from `offset` in [`MAX_IO`] pieces, one after the other. The
    /// file's attributes after the last piece (a GETATTR's when there is nothing to write).
    pub async fn write_all(&self, handle: Handle, offset: u64, data: &[u8]) -> Result<Attr> {
        if data.is_empty() {
            self.usable(handle)?;
            return self.getattr(handle.ino()).await;
        }
        let mut at = offset;
        let mut last = None;
        for piece in data.chunks(MAX_IO) {
            last = Some(self.write(handle, at, piece).await?);
            at += piece.len() as u64;
        }
        Ok(last.expect("data is not empty"))
    }

    /// The whole file from its start, read in [`MAX_IO`] pieces until one comes back short.
    pub async fn read_to_end(&self, handle: Handle) -> Result<Vec<u8>> {
        let mut all = Vec::new();
        loop {
            let piece = self.read(handle, all.len() as u64, MAX_IO as u32).await?;
            let short = piece.len() < MAX_IO;
            all.extend_from_slice(&piece);
            if short {
                return Ok(all);
            }
        }
    }

    /// The errno of a handle whose reopen was refused, before anything is sent.
    fn usable(&self, handle: Handle) -> Result<()> {
        match self.session().handle_error(handle) {
            Some(errno) => Err(ClientError::Errno(errno)),
            None => Ok(()),
        }
    }

    /// Which server serves each shard of the cluster this server belongs to (outside a
    /// cluster: no shard, no servers).
    pub async fn shard_map(&self) -> Result<ShardMap> {
        match self.call(Op::ShardMap).await? {
            Body::ShardMap(map) => Ok(map),
            other => Err(unexpected(other)),
        }
    }

    /// The shard map once the server's view of the cluster is newer than etcd revision
    /// `after`, or after `wait` (the server holds it a minute at most) as it is, with the
    /// revision it reflects (SHARD_MAP_WAIT; 0 and an empty map outside a cluster). The
    /// server answers this connection's later requests only after it: a watcher of the map
    /// ([`crate::MapWatch`]) sends it on a connection of its own.
    pub async fn shard_map_after(
        &self,
        after: u64,
        wait: std::time::Duration,
    ) -> Result<(u64, ShardMap)> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        match self.call(Op::ShardMapWait { after, wait_ms }).await? {
            Body::ShardMapAt { revision, map } => Ok((revision, map)),
            other => Err(unexpected(other)),
        }
    }
}
