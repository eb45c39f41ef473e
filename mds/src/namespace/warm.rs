//! A standby's namespace kept warm: loaded once from a follower's view of another server's
//! store (`Journal::open_follower`), then brought up to date batch by batch from what that
//! server commits (`Journal::follow`), so that taking the shard over needs no load of the
//! namespace — the part of a start that grows with the store (about 5 s per million inodes
//! here, docs/benchmarks/journal.md, "Restart of a large store") — only RocksDB's own open and what `Recovered` says.
//!
//! A batch is applied in the order that makes it whole whatever order the commit wrote it
//! in: inode images first (a directory made in the batch must be there for its entries),
//! then entries, attributes and orphans as written, inode deletions last. Anything that
//! does not fit (an entry in a directory that is not there) marks the namespace broken: the
//! takeover then loads the store as any start does, which reports what is wrong with it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use journal::{Change, Journal, Recovered};

use super::node::{AttrValue, DirName, Entries, Entry, InodeAttr, Node};
use super::{Namespace, node};

/// A namespace following its owner's commits, with what a takeover checks it against.
pub struct WarmNamespace {
    ns: Namespace,
    /// The store's orphans: a start hands them to recovery (`Namespace::orphan_owners`).
    orphans: BTreeMap<u64, Vec<u64>>,
    /// The last commit applied.
    last_committed: u64,
    /// Why it cannot be used, once something did not fit.
    broken: Option<String>,
}

impl WarmNamespace {
    /// Loads the namespace a follower's `journal` reads, as a start would.
    pub fn load(journal: &Journal, recovered: &Recovered) -> crate::error::Result<WarmNamespace> {
        let ns = Namespace::load(journal, recovered)?;
        let orphans = std::mem::take(&mut *ns.loaded_orphans.lock())
            .into_iter()
            .collect();
        Ok(WarmNamespace {
            ns,
            orphans,
            last_committed: recovered.last_committed,
            broken: None,
        })
    }

    /// The last commit it holds.
    pub fn last_committed(&self) -> u64 {
        self.last_committed
    }

    /// Why it cannot be taken over, if something its owner committed did not fit.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Applies one committed batch's changes (`Journal::follow`).
    pub fn apply(&mut self, batch: Vec<Change>) {
        if self.broken.is_some() {
            return;
        }
        let (mut images, mut rest, mut gone) = (Vec::new(), Vec::new(), Vec::new());
        for change in batch {
            match change {
                Change::Inode(inode) => images.push(inode),
                Change::InodeGone(ino) => gone.push(ino),
                other => rest.push(other),
            }
        }
        for inode in images {
            self.put_inode(InodeAttr::from_record(inode));
        }
        for change in rest {
            if let Err(why) = self.apply_one(change) {
                self.broken = Some(why);
                return;
            }
        }
        for ino in gone {
            self.remove_inode(ino);
        }
    }

    fn put_inode(&mut self, attr: InodeAttr) {
        let ns = &self.ns;
        let mut locked = ns.table.lock(&[attr.ino]);
        if let Some(node) = locked.get_mut(attr.ino) {
            ns.count_file(&node.attr, false);
            ns.count_file(&attr, true);
            node.attr = attr;
            return;
        }
        ns.count(attr.kind, 1);
        ns.count_file(&attr, true);
        let entries = attr.kind.is_dir().then(Entries::new);
        let inserted = locked.insert(Node::new(attr, entries));
        debug_assert!(inserted, "looked up under the same lock");
    }

    fn remove_inode(&mut self, ino: u64) {
        let ns = &self.ns;
        let Some(node) = ns.table.lock(&[ino]).remove(ino) else {
            return; // made and removed within the batch: never written
        };
        ns.count(node.attr.kind, -1);
        ns.count_file(&node.attr, false);
        if let Some(xattrs) = &node.xattrs {
            ns.xattr_bytes
                .fetch_sub(xattrs.bytes as u64, Ordering::Relaxed);
        }
    }

    fn apply_one(&mut self, change: Change) -> Result<(), String> {
        let ns = &self.ns;
        match change {
            Change::Dentry {
                parent,
                name,
                entry,
            } => {
                let mut locked = ns.table.lock(&[parent]);
                let Some(entries) = locked.get_mut(parent).and_then(Node::entries_mut) else {
                    return Err(format!(
                        "entry {parent}/{name:?} in a directory the follower does not hold"
                    ));
                };
                entries.insert(DirName::new(&name), Entry::from_record(entry));
            }
            Change::DentryGone { parent, name } => {
                let mut locked = ns.table.lock(&[parent]);
                if let Some(entries) = locked.get_mut(parent).and_then(Node::entries_mut) {
                    entries.remove(name.as_bytes());
                }
            }
            Change::Xattr { ino, name, value } => {
                // An inode made and removed within the batch has no image: its attributes
                // go with it.
                let mut locked = ns.table.lock(&[ino]);
                if let Some(node) = locked.get_mut(ino) {
                    let xattrs = node.xattrs.get_or_insert_with(Default::default);
                    let charge = node::xattr_charge(&name, &value);
                    let before = xattrs
                        .by_name
                        .insert(name.as_str().into(), AttrValue::committed(value))
                        .map_or(0, |old| name.len() + old.len() + node::XATTR_OVERHEAD);
                    xattrs.bytes = xattrs.bytes + charge - before;
                    ns.xattr_bytes.fetch_add(charge as u64, Ordering::Relaxed);
                    ns.xattr_bytes.fetch_sub(before as u64, Ordering::Relaxed);
                }
            }
            Change::XattrGone { ino, name } => {
                let mut locked = ns.table.lock(&[ino]);
                if let Some(xattrs) = locked.get_mut(ino).and_then(|n| n.xattrs.as_mut())
                    && let Some(old) = xattrs.by_name.remove(name.as_str())
                {
                    let charge = name.len() + old.len() + node::XATTR_OVERHEAD;
                    xattrs.bytes -= charge;
                    ns.xattr_bytes.fetch_sub(charge as u64, Ordering::Relaxed);
                }
            }
            Change::Orphan { ino, owners } => {
                self.orphans.insert(ino, owners);
            }
            Change::OrphanGone(ino) => {
                self.orphans.remove(&ino);
            }
            Change::LastCommitted(transno) => self.last_committed = transno,
            Change::Inode(_) | Change::InodeGone(_) => unreachable!("sorted out by apply"),
        }
        Ok(())
    }

    /// The namespace to serve, once `journal` is the store opened for writing by the new
    /// owner and `recovered` what its open read: the warm inodes and entries, with every
    /// counter, ceiling and pending directory from the open. Refused (the caller loads the
    /// store instead) if it is broken or holds another commit than the store's last.
    pub fn take_over(self, journal: &Journal, recovered: &Recovered) -> Result<Namespace, String> {
        if let Some(why) = self.broken {
            return Err(why);
        }
        if self.last_committed != recovered.last_committed {
            return Err(format!(
                "it holds commit {}, the store's last is {}",
                self.last_committed, recovered.last_committed
            ));
        }
        let shell = Namespace::without_inodes(journal, recovered).map_err(|e| e.to_string())?;
        let warm = self.ns;
        *warm.loaded_orphans.lock() = self.orphans.into_iter().collect();
        warm.orphans
            .store(warm.loaded_orphans.lock().len() as u64, Ordering::Relaxed);
        Ok(Namespace {
            table: warm.table,
            directories: warm.directories,
            files: warm.files,
            others: warm.others,
            xattr_bytes: warm.xattr_bytes,
            file_bytes: warm.file_bytes,
            data_blocks: warm.data_blocks,
            orphans: warm.orphans,
            loaded_orphans: warm.loaded_orphans,
            ..shell
        })
    }
}

#[cfg(test)]
mod tests;
