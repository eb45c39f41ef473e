//! What a caller's credentials say by themselves: whether it is root, and whether it is in a
//! group. Below every check that uses them (`perm.rs`, `acl.rs`), so that the ACL functions
//! need nothing of the permission rules that call them.

use mds_proto::Cred;

/// Whether the caller is the superuser. Root passes every read and write check and every
/// search check on a directory (Linux's CAP_DAC_OVERRIDE), and every owner-only rule (CAP_FOWNER,
/// CAP_CHOWN, CAP_FSETID). Execute permission on a regular file, which root has only if some
/// `x` bit is set, is never asked for here.
#[inline]
pub(crate) fn is_root(cred: &Cred) -> bool {
    cred.uid == 0
}

/// Whether `gid` is the caller's primary group or one of its supplementary groups.
#[inline]
pub(crate) fn in_group(cred: &Cred, gid: u32) -> bool {
    cred.gid == gid || cred.groups.contains(&gid)
}
