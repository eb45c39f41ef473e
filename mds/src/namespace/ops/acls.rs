//! The ACLs a node keeps among its extended attributes, as operations other than SETXATTR
//! change them: the access ACL a chmod rewrites (`acl::chmod`), and the ACLs a new inode
//! takes from its directory's default ACL (`acl::inherit`). Below `ops/mod.rs`, which calls
//! both; above the pure ACL functions and the node.

use journal::JournalOp;

use crate::namespace::acl;
use crate::namespace::node::{ACCESS_ACL, AttrValue, DEFAULT_ACL, Node, Xattrs, xattr_charge};

/// A chmod's new `mode` carried into `node`'s access ACL, if it has one, as Linux's
/// `posix_acl_chmod`: its owner's, mask (else owning group's) and others' entries take the
/// mode's bits. The journal op that writes it; the ACL keeps its length, so its charge.
pub(super) fn chmod_acl(node: &mut Node, mode: u32) -> Option<JournalOp> {
    let value = acl::to_value(&acl::chmod(node.access_acl()?, mode));
    let kept = node.xattrs.as_mut()?.by_name.get_mut(ACCESS_ACL)?;
    *kept = AttrValue::Inline(value.as_slice().into());
    Some(JournalOp::PutXattr {
        ino: node.attr.ino,
        name: ACCESS_ACL.to_owned(),
        value,
    })
}

/// The ACLs a new inode takes from its directory's default ACL (`acl::inherit`): an access
/// ACL where its mode does not say it all, and, for a directory, the default ACL itself.
#[derive(Default)]
pub(super) struct Inherited {
    pub access: Option<Vec<u8>>,
    pub default: Option<Vec<u8>>,
}

impl Inherited {
    /// The attributes as the new inode keeps them, with what they are charged in all.
    pub(super) fn into_xattrs(self) -> Option<Box<Xattrs>> {
        let mut xattrs = Xattrs::default();
        for (name, entries) in [(ACCESS_ACL, self.access), (DEFAULT_ACL, self.default)] {
            if let Some(entries) = entries {
                let value = acl::to_value(&entries);
                xattrs.bytes += xattr_charge(name, &value);
                xattrs
                    .by_name
                    .insert(name.into(), AttrValue::Inline(value.into()));
            }
        }
        (!xattrs.by_name.is_empty()).then(|| Box::new(xattrs))
    }
}
