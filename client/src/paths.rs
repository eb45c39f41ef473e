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

impl Client {
    /// Resolves an absolute path by LOOKUP from the root.
    pub async fn resolve(&self, path: &str) -> Result<Attr> {
        let mut current = self.getattr(ROOT).await?;
        for name in components(path)? {
            current = self.lookup(current.ino, name).await?;
        }
        Ok(current)
    }

    /// Resolves all but the last component of `path`: (parent inode, last name).
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(u64, &'p str)> {
        let parts = components(path)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(ClientError::Errno(Errno::EINVAL)); // "/" has no parent entry
        };
        let mut ino = ROOT;
        for name in dirs {
            ino = self.lookup(ino, name).await?.ino;
        }
        Ok((ino, last))
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
