//! Extended attributes: SETXATTR, GETXATTR, LISTXATTR and REMOVEXATTR, with Linux's limits
//! (names of 1 to 255 bytes, ERANGE otherwise; values up to 64 KiB, E2BIG beyond) and its
//! rules per namespace (`perm::may_xattr`). An attribute belongs to its inode for
//! commit-on-share: a change writes the inode's stamp and sets its ctime, a read looks at
//! the stamp. Each inode holds at most [`MAX_XATTR_BYTES`] of them, each charged its name,
//! its value and [`XATTR_OVERHEAD`](crate::namespace::node::XATTR_OVERHEAD) (ENOSPC past it, as a file system out of room for them):
//! so one inode's memory is bounded, and its LISTXATTR — each name with a length of at most
//! 2 bytes — always fits a reply, however short the names. Values longer than
//! [`INLINE_XATTR_MAX`](crate::namespace::node::INLINE_XATTR_MAX) are read from the store
//! once committed ([`AttrValue`]): memory holds their names and lengths, not their bytes.

use std::sync::atomic::Ordering;

use journal::JournalOp;

use crate::namespace::node::{XATTR_OVERHEAD, xattr_charge as charge};
use mds_proto::{Body, Errno, MAX_XATTR_NAME, MAX_XATTR_VALUE, XattrSet, XattrValue};

use super::{Cx, OpResult, inode, inode_mut, mutation, now, see_inode};
use crate::namespace::acl;
use crate::namespace::node::{AttrValue, Node, Xattrs};
use crate::namespace::perm::{self, XattrSpace};
use crate::namespace::{Namespace, now_ns};

/// The most bytes of extended attributes one inode holds, as [`charge`] counts them: one
/// attribute of the largest size and room for a few small ones. LISTXATTR's reply is at most
/// this less 14 bytes per attribute, under `MAX_FRAME` with room for the reply's header.
pub(crate) const MAX_XATTR_BYTES: usize = MAX_XATTR_VALUE + 4096;

/// A name's length, as the system calls check it before anything else.
fn check_xattr_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name.len() > MAX_XATTR_NAME {
        Err(Errno::ERANGE)
    } else {
        Ok(())
    }
}

impl Namespace {
    pub(super) fn setxattr(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        name: String,
        value: Vec<u8>,
        how: XattrSet,
    ) -> OpResult {
        check_xattr_name(&name)?;
        if value.len() > MAX_XATTR_VALUE {
            return Err(Errno::E2BIG);
        }
        self.writable()?;
        let space = XattrSpace::of(&name);
        if let XattrSpace::Acl { default } = space {
            let value = perm::parse_acl(&value)?.is_some().then_some(value);
            return self.change_acl(cx, ino, name, value, default);
        }
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        perm::may_xattr(cx.caller.cred, &node.attr, node.access_acl(), space, true)?;
        space.resolve(&name)?;
        match (how, value_len(node, &name)) {
            (XattrSet::Create, Some(_)) => return Err(Errno::EEXIST),
            (XattrSet::Replace, None) => return Err(Errno::ENODATA),
            _ => {}
        }
        self.change_xattr(cx, node, ino, name, Some(value), None, now_at)
    }

    pub(super) fn getxattr(&self, cx: &mut Cx<'_>, ino: u64, name: &str) -> OpResult {
        check_xattr_name(name)?;
        let space = XattrSpace::of(name);
        let l = self.table.lock(&[ino]);
        let node = inode(cx, &l, ino)?;
        see_inode(cx, node);
        perm::may_xattr(cx.caller.cred, &node.attr, node.access_acl(), space, false)?;
        space.resolve(name)?;
        if matches!(space, XattrSpace::Acl { .. }) {
            perm::may_get_acl(&node.attr)?;
        }
        let value = node
            .xattrs
            .as_ref()
            .and_then(|x| x.by_name.get(name))
            .ok_or(Errno::ENODATA)?;
        let value = match value.in_memory() {
            Some(v) => v.to_vec(),
            None => self.stored_xattr(ino, name)?,
        };
        Ok(now(Body::Xattr(XattrValue(value))))
    }

    pub(super) fn listxattr(&self, cx: &mut Cx<'_>, ino: u64) -> OpResult {
        let l = self.table.lock(&[ino]);
        let node = inode(cx, &l, ino)?;
        see_inode(cx, node);
        let cred = cx.caller.cred;
        let names = node.xattrs.as_ref().map_or_else(Vec::new, |x| {
            x.by_name
                .keys()
                .filter(|n| perm::lists_xattr(cred, XattrSpace::of(n)))
                .map(ToString::to_string)
                .collect()
        });
        Ok(now(Body::XattrNames(names)))
    }

    pub(super) fn removexattr(&self, cx: &mut Cx<'_>, ino: u64, name: String) -> OpResult {
        check_xattr_name(&name)?;
        self.writable()?;
        let space = XattrSpace::of(&name);
        if let XattrSpace::Acl { default } = space {
            return self.change_acl(cx, ino, name, None, default);
        }
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        perm::may_xattr(cx.caller.cred, &node.attr, node.access_acl(), space, true)?;
        space.resolve(&name)?;
        if value_len(node, &name).is_none() {
            return Err(Errno::ENODATA);
        }
        self.change_xattr(cx, node, ino, name, None, None, now_at)
    }

    /// An ACL set (`value`, which has entries) or removed (`None`: an empty value, or
    /// REMOVEXATTR), by Linux's `set_posix_acl` rules: SETXATTR's create/replace flags do not
    /// apply, and removing an ACL that is not there — or a default ACL from something that
    /// cannot have one — succeeds and changes nothing (no ENODATA). Setting an access ACL
    /// sets the mode it stands for (`perm::mode_after_acl`), and one the mode says all of is
    /// not kept (any kept before goes), as Linux's `posix_acl_update_mode`; removing one
    /// leaves the mode.
    fn change_acl(
        &self,
        cx: &mut Cx<'_>,
        ino: u64,
        name: String,
        value: Option<Vec<u8>>,
        default: bool,
    ) -> OpResult {
        let now_at = now_ns();
        let mut l = self.table.lock(&[ino]);
        let node = inode_mut(cx, &mut l, ino)?;
        see_inode(cx, node);
        let cred = cx.caller.cred;
        if !perm::may_set_acl(cred, &node.attr, default, value.is_some())? {
            return Ok(now(Body::Done));
        }
        let Some(value) = value else {
            if value_len(node, &name).is_none() {
                return Ok(now(Body::Done));
            }
            return self.change_xattr(cx, node, ino, name, None, None, now_at);
        };
        let entries = perm::parse_acl(&value)?.expect("parsed: it has entries");
        perm::check_acl(entries)?;
        if default {
            return self.change_xattr(cx, node, ino, name, Some(value), None, now_at);
        }
        let (bits, equivalent) = acl::mode_of(entries);
        let mode = perm::mode_after_acl(cred, &node.attr, bits);
        let value = (!equivalent).then_some(value);
        self.change_xattr(cx, node, ino, name, value, Some(mode), now_at)
    }

    /// Sets (`value`) or removes (`None`; an attribute the inode lacks stays lacking) one
    /// attribute of the locked `node`, within [`MAX_XATTR_BYTES`] (ENOSPC), and gives it
    /// `mode` if one is given (an access ACL's): takes the transno, stamps the inode, sets
    /// its ctime, and returns the mutation.
    #[allow(clippy::too_many_arguments)] // one change of one attribute, each argument of it
    fn change_xattr(
        &self,
        cx: &mut Cx<'_>,
        node: &mut Node,
        ino: u64,
        name: String,
        value: Option<Vec<u8>>,
        mode: Option<u32>,
        now_at: i64,
    ) -> OpResult {
        let held = node.xattrs.as_ref().map_or(0, |x| x.bytes);
        let freed = value_len(node, &name).map_or(0, |v| v + name.len() + XATTR_OVERHEAD);
        let added = value.as_ref().map_or(0, |v| charge(&name, v));
        let bytes = held - freed + added;
        if bytes > MAX_XATTR_BYTES {
            return Err(Errno::ENOSPC);
        }
        let transno = self.next_transno()?;
        // Wrapping: a removal, or a smaller value than the one it replaces, takes bytes away.
        self.xattr_bytes
            .fetch_add((bytes as u64).wrapping_sub(held as u64), Ordering::Relaxed);
        let xattrs = node.xattrs.get_or_insert_with(Default::default);
        xattrs.bytes = bytes;
        let (op, replaced) = if let Some(value) = value {
            // Without a store (a namespace in memory only, in tests) every value is kept.
            let kept = if self.store.is_some() {
                AttrValue::written(value.clone(), transno)
            } else {
                AttrValue::Inline(value.as_slice().into())
            };
            let pending = kept.pending_bytes();
            if pending > 0 {
                // In memory until this transno is durable: counted with file data's pending
                // bytes (and their cap), and dropped after the commit.
                self.pending_data_bytes
                    .fetch_add(pending as u64, Ordering::Relaxed);
                self.pending_data.lock().push_back((transno, ino));
            }
            let replaced = xattrs.by_name.insert(name.as_str().into(), kept);
            (JournalOp::PutXattr { ino, name, value }, replaced)
        } else {
            let replaced = xattrs.by_name.remove(name.as_str());
            drop_if_empty(&mut node.xattrs);
            (JournalOp::DeleteXattr { ino, name }, replaced)
        };
        if let Some(pending) = replaced.map(|v| v.pending_bytes()).filter(|&p| p > 0) {
            self.pending_data_bytes
                .fetch_sub(pending as u64, Ordering::Relaxed);
        }
        node.stamp = cx.stamp(node.stamp, transno);
        if let Some(mode) = mode {
            node.attr.mode = mode;
        }
        node.attr.ctime_ns = now_at;
        node.attr.transno = transno;
        let ops = self.journal_ops([op, JournalOp::PutInode(node.attr.image())]);
        Ok(mutation(transno, ops, Body::Done))
    }
}

impl Namespace {
    /// A committed value memory does not keep, from the store: EIO if the store does not
    /// have it (the inode says it does) or cannot be read.
    pub(crate) fn stored_xattr(&self, ino: u64, name: &str) -> Result<Vec<u8>, Errno> {
        let store = self.store.as_ref().ok_or(Errno::EIO)?;
        match store.xattr(ino, name) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => {
                tracing::error!(ino, name, "an extended attribute is missing from the store");
                Err(Errno::EIO)
            }
            Err(e) => {
                tracing::error!(ino, name, cause = %e, "cannot read an extended attribute");
                Err(Errno::EIO)
            }
        }
    }
}

/// The length of `node`'s attribute `name`, if it has one.
fn value_len(node: &Node, name: &str) -> Option<usize> {
    node.xattrs
        .as_ref()
        .and_then(|x| x.by_name.get(name))
        .map(AttrValue::len)
}

/// Frees the map of an inode left with no attributes: most inodes have none, and keep none.
#[allow(clippy::box_collection)]
fn drop_if_empty(xattrs: &mut Option<Box<Xattrs>>) {
    if xattrs.as_ref().is_some_and(|x| x.by_name.is_empty()) {
        *xattrs = None;
    }
}
