//! Absolute paths, `/a/b/c`, resolved by LOOKUP from the root name by name, as `mdsctl`
//! takes them: a symbolic link on the way is not followed.

use mds_proto::{Attr, Errno};

use crate::client::{Client, ROOT};
use crate::error::{ClientError, Result};

/// Splits an absolute path into its names; relative paths are refused with EINVAL.
pub fn components(path: &str) -> Result<Vec<&str>> {
    if !path.starts_with('/') {
        return Err(ClientError::Errno(Errno::EINVAL));
    }
    Ok(path.split('/').filter(|c| !c.is_empty()).collect())
}

/// What resolving a path asks of the namespace: LOOKUP and GETATTR — of one server
/// ([`Client`]) or of the shard that serves each inode ([`crate::Router`]).
pub(crate) trait Lookups {
    async fn getattr(&self, ino: u64) -> Result<Attr>;
    async fn lookup(&self, parent: u64, name: &str) -> Result<Attr>;
}

/// Resolves an absolute path by LOOKUP from the root.
pub(crate) async fn resolve(ns: &impl Lookups, path: &str) -> Result<Attr> {
    let mut current = ns.getattr(ROOT).await?;
    for name in components(path)? {
        current = ns.lookup(current.ino, name).await?;
    }
    Ok(current)
}

/// Resolves all but the last component of `path`: (parent inode, last name).
pub(crate) async fn resolve_parent<'p>(ns: &impl Lookups, path: &'p str) -> Result<(u64, &'p str)> {
    let parts = components(path)?;
    let Some((last, dirs)) = parts.split_last() else {
        return Err(ClientError::Errno(Errno::EINVAL)); // "/" has no parent entry
    };
    let mut ino = ROOT;
    for name in dirs {
        ino = ns.lookup(ino, name).await?.ino;
    }
    Ok((ino, last))
}

impl Lookups for Client {
    async fn getattr(&self, ino: u64) -> Result<Attr> {
        Client::getattr(self, ino).await
    }

    async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        Client::lookup(self, parent, name).await
    }
}

impl Client {
    /// Resolves an absolute path by LOOKUP from the root.
    pub async fn resolve(&self, path: &str) -> Result<Attr> {
        resolve(self, path).await
    }

    /// Resolves all but the last component of `path`: (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(u64, &'p str)> {
        resolve_parent(self, path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_names_and_must_be_absolute() {
        assert_eq!(components("/a//b/c/").unwrap(), vec!["a", "b", "c"]);
        assert!(components("/").unwrap().is_empty());
        assert_eq!(components("a/b").unwrap_err().errno(), Some(Errno::EINVAL));
    }
}
