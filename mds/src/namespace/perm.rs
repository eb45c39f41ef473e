//! POSIX permissions: who may do what to an inode, from the credentials a request carries
//! (uid, primary gid, supplementary groups) and the inode's mode, owner and group — the rules
//! of Linux's `generic_permission`, `may_delete`, `setattr_prepare` and `notify_change`, which
//! `mds/tests/permissions.rs` checks against the running kernel. Also root squash, which
//! rewrites the credentials before any of this sees them.
//!
//! Pure functions of their arguments: no locks, no allocation (group membership is a scan of
//! at most `MAX_GROUPS` words). The operations in `ops/mod.rs` decide where each check goes in
//! their order of checks and what it shows commit-on-share.

use mds_proto::{Cred, Errno, SetAttr, SetTime};

use super::acl::{
    self, ACL_ENTRY, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ,
    MAX_ACL_ENTRIES,
};
use super::node::{FileKind, InodeAttr};

/// Read permission, as a mask of one class's `rwx` bits.
pub(crate) const READ: u32 = 0o4;
/// Write permission.
pub(crate) const WRITE: u32 = 0o2;
/// Search permission on a directory (execute on a file, which nothing here asks for).
pub(crate) const SEARCH: u32 = 0o1;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o0010;

/// The uid and gid root squash maps root to: `nobody`/`nogroup` on Linux, as NFS's
/// `anonuid`/`anongid` default.
pub(crate) const NOBODY: u32 = 65534;

pub(crate) use super::cred::{in_group, is_root};

/// Whether the caller may `want` (a mask of [`READ`], [`WRITE`], [`SEARCH`]) on `inode`,
/// whose access ACL is `acl` if it has one: EACCES if not. One class decides, as POSIX says:
/// the owner's bits if the caller owns it; else, where an ACL and a group class with some
/// bit set, the ACL (Linux's `acl_permission_check`: [`acl::permits`]); else the group's bits
/// if it is in the inode's group, else the others' — so an owner whose own bits lack
/// something is refused even when the group or others have it.
#[inline]
#[allow(clippy::verbose_bit_mask)] // a mask of rwx bits, not a count of trailing zeros
pub(crate) fn check(
    cred: &Cred,
    inode: &InodeAttr,
    acl: Option<&[u8]>,
    want: u32,
) -> Result<(), Errno> {
    if is_root(cred) {
        return Ok(());
    }
    let class = if cred.uid == inode.uid {
        inode.mode >> 6
    } else if let Some(acl) = acl.filter(|_| inode.mode & 0o070 != 0) {
        return acl::permits(cred, inode.gid, acl, want);
    } else if in_group(cred, inode.gid) {
        inode.mode >> 3
    } else {
        inode.mode
    };
    // The three permission bits wanted and not granted: none.
    if want & !class & 0o7 == 0 {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// The sticky bit: in a directory with S_ISVTX set, an entry may be removed or renamed away
/// (or replaced by a rename) only by the entry's owner, the directory's owner, or root.
/// EPERM otherwise, as Linux's `may_delete` answers.
#[inline]
pub(crate) fn sticky(cred: &Cred, dir: &InodeAttr, victim_uid: u32) -> Result<(), Errno> {
    if dir.mode & S_ISVTX == 0 || is_root(cred) || cred.uid == victim_uid || cred.uid == dir.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// Whether the sticky rule could refuse `cred` anything in `dir`, whoever owns the entry:
/// only then does the answer depend on the entry's owner.
#[inline]
pub(crate) fn sticky_applies(cred: &Cred, dir: &InodeAttr) -> bool {
    dir.mode & S_ISVTX != 0 && !is_root(cred) && cred.uid != dir.uid
}

/// Whether the caller may make every change `set` asks for on `inode`, checked in the order
/// Linux's `truncate`, `setattr_prepare` and `notify_change` do: a new size needs write
/// permission (EACCES); a new owner is root's alone, though the owner may "change" it to
/// itself; a new group is the owner's to give, to its current group or one it is a member
/// of, or root's; a new mode and any explicitly set time are the owner's or root's (EPERM
/// for these). Both times set to now — `utimensat` with no times or `UTIME_NOW` for both,
/// which Linux treats alike — are also allowed to anyone with write permission (EACCES);
/// one time set to now and the other left is an explicit change (Linux's
/// `ATTR_TIMES_SET`), the owner's.
pub(crate) fn may_setattr(
    cred: &Cred,
    inode: &InodeAttr,
    acl: Option<&[u8]>,
    set: &SetAttr,
) -> Result<(), Errno> {
    // ftruncate: through a handle opened for writing (checked by the caller), write
    // permission was checked when it was opened, and is not again.
    if set.size.is_some() && set.handle.is_none() {
        check(cred, inode, acl, WRITE)?;
    }
    if is_root(cred) {
        return Ok(());
    }
    let owner = cred.uid == inode.uid;
    if set.uid.is_some_and(|uid| !owner || uid != inode.uid) {
        return Err(Errno::EPERM);
    }
    if set
        .gid
        .is_some_and(|gid| !owner || (gid != inode.gid && !in_group(cred, gid)))
    {
        return Err(Errno::EPERM);
    }
    let touch = set.atime == Some(SetTime::Now) && set.mtime == Some(SetTime::Now);
    let times = set.atime.is_some() || set.mtime.is_some();
    if (set.mode.is_some() || (times && !touch)) && !owner {
        return Err(Errno::EPERM);
    }
    if touch && !owner {
        check(cred, inode, acl, WRITE)?;
    }
    Ok(())
}

/// Linux's `protected_hardlinks` (on by default, and on here): LINK of an inode the caller
/// does not own is allowed only for a regular file that is not set-user-ID, not set-group-ID
/// with group execute, and that the caller may both read and write. EPERM otherwise. Root
/// (CAP_FOWNER) may link anything.
pub(crate) fn may_hardlink(
    cred: &Cred,
    inode: &InodeAttr,
    acl: Option<&[u8]>,
) -> Result<(), Errno> {
    if is_root(cred) || cred.uid == inode.uid {
        return Ok(());
    }
    let safe = inode.kind == FileKind::File
        && inode.mode & S_ISUID == 0
        && inode.mode & (S_ISGID | S_IXGRP) != S_ISGID | S_IXGRP
        && check(cred, inode, acl, READ | WRITE).is_ok();
    if safe { Ok(()) } else { Err(Errno::EPERM) }
}

/// Where an extended attribute's name puts it, as Linux's `xattr_permission` and the
/// handlers of each namespace read the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XattrSpace {
    User,
    Trusted,
    Security,
    /// `system.posix_acl_access` and `system.posix_acl_default`.
    Acl {
        default: bool,
    },
    /// Any other `system.` name: no file system here keeps one.
    System,
    /// A prefix no namespace has.
    Unknown,
}

impl XattrSpace {
    pub(crate) fn of(name: &str) -> XattrSpace {
        if name.starts_with("user.") {
            XattrSpace::User
        } else if name.starts_with("trusted.") {
            XattrSpace::Trusted
        } else if name.starts_with("security.") {
            XattrSpace::Security
        } else if name == "system.posix_acl_access" {
            XattrSpace::Acl { default: false }
        } else if name == "system.posix_acl_default" {
            XattrSpace::Acl { default: true }
        } else if name.starts_with("system.") {
            XattrSpace::System
        } else {
            XattrSpace::Unknown
        }
    }

    /// Whether a handler takes `name`, asked after the permission check as Linux's
    /// `xattr_resolve_name` is: EOPNOTSUPP for no namespace kept here, EINVAL for a bare
    /// prefix (`user.`).
    pub(crate) fn resolve(self, name: &str) -> Result<(), Errno> {
        match self {
            XattrSpace::System | XattrSpace::Unknown => Err(Errno::EOPNOTSUPP),
            _ if name.ends_with('.') && name.matches('.').count() == 1 => Err(Errno::EINVAL),
            _ => Ok(()),
        }
    }
}

/// Whether the caller may read (`write` false: GETXATTR) or change (SETXATTR, REMOVEXATTR)
/// an attribute of `space` on `inode`, as Linux's `xattr_permission` with the namespace
/// handlers of a file system such as ext4 or tmpfs: `trusted.` is root's alone (a read by
/// anyone else finds nothing, ENODATA; a change is EPERM); `security.` anyone reads and only
/// root changes (the capability module's rule); `user.` lives only on regular files and
/// directories (ENODATA / EPERM on others), follows the mode bits (read for reading, write
/// for changing) and in a sticky directory is changed only by its owner or root; other
/// `system.` names pass (no handler takes them: EOPNOTSUPP next); unknown prefixes need the
/// mode bits first. ACLs have rules of their own ([`may_set_acl`], [`may_get_acl`]).
pub(crate) fn may_xattr(
    cred: &Cred,
    inode: &InodeAttr,
    acl: Option<&[u8]>,
    space: XattrSpace,
    write: bool,
) -> Result<(), Errno> {
    let root = is_root(cred);
    let refused = if write { Errno::EPERM } else { Errno::ENODATA };
    match space {
        XattrSpace::Unknown => check(cred, inode, acl, if write { WRITE } else { READ }),
        XattrSpace::Trusted if !root => Err(refused),
        XattrSpace::Security if write && !root => Err(Errno::EPERM),
        XattrSpace::System
        | XattrSpace::Acl { .. }
        | XattrSpace::Trusted
        | XattrSpace::Security => Ok(()),
        XattrSpace::User => {
            if !matches!(inode.kind, FileKind::File | FileKind::Directory) {
                return Err(refused);
            }
            if write
                && inode.kind == FileKind::Directory
                && inode.mode & S_ISVTX != 0
                && !(root || cred.uid == inode.uid)
            {
                return Err(Errno::EPERM);
            }
            check(cred, inode, acl, if write { WRITE } else { READ })
        }
    }
}

/// Linux's `set_posix_acl`: whether the caller may set (`setting`, an ACL with entries) or
/// remove (an empty value, or REMOVEXATTR) an ACL on `inode`. Symbolic links have none
/// (EOPNOTSUPP, before anything else); a default ACL is a directory's (setting one
/// elsewhere is EACCES, removing one there succeeds and does nothing: `Ok(false)`); only the
/// owner or root may (EPERM). No mode bit is asked for: anyone may read an ACL.
pub(crate) fn may_set_acl(
    cred: &Cred,
    inode: &InodeAttr,
    default: bool,
    setting: bool,
) -> Result<bool, Errno> {
    if inode.kind == FileKind::Symlink {
        return Err(Errno::EOPNOTSUPP);
    }
    if default && inode.kind != FileKind::Directory {
        return if setting {
            Err(Errno::EACCES)
        } else {
            Ok(false)
        };
    }
    if !(is_root(cred) || cred.uid == inode.uid) {
        return Err(Errno::EPERM);
    }
    Ok(true)
}

/// Reading an ACL: anyone may, but a symbolic link has none to read (EOPNOTSUPP).
pub(crate) fn may_get_acl(inode: &InodeAttr) -> Result<(), Errno> {
    if inode.kind == FileKind::Symlink {
        Err(Errno::EOPNOTSUPP)
    } else {
        Ok(())
    }
}

/// Whether LISTXATTR shows an attribute of `space` to the caller: everything but `trusted.`,
/// which only root sees listed (Linux lists what the caller could read of the others).
pub(crate) fn lists_xattr(cred: &Cred, space: XattrSpace) -> bool {
    space != XattrSpace::Trusted || is_root(cred)
}

/// An ACL value as Linux's `posix_acl_from_xattr` reads it, before any permission check: a
/// 4-byte little-endian version (EINVAL if the value is shorter, EOPNOTSUPP if it is not 2),
/// then whole 8-byte entries (tag u16, permissions u16, id u32) of known tags, named users
/// and groups with a real id (EINVAL otherwise). Its entries, or `None` for no ACL (an empty
/// value, or a header alone): a removal. [`check_acl`] judges the entries, later.
pub(crate) fn parse_acl(value: &[u8]) -> Result<Option<&[u8]>, Errno> {
    const HEADER: usize = 4;
    const VERSION: u32 = 2;
    if value.is_empty() {
        return Ok(None);
    }
    let Some(version) = value.get(..HEADER) else {
        return Err(Errno::EINVAL);
    };
    if u32::from_le_bytes(version.try_into().expect("four bytes")) != VERSION {
        return Err(Errno::EOPNOTSUPP);
    }
    let entries = &value[HEADER..];
    if !entries.len().is_multiple_of(ACL_ENTRY) {
        return Err(Errno::EINVAL);
    }
    for (tag, _, id) in acl::entries(entries) {
        match tag {
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => {}
            ACL_USER | ACL_GROUP if id != u32::MAX => {}
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok((!entries.is_empty()).then_some(entries))
}

/// Linux's `posix_acl_valid`, judged once the caller may set the ACL: permissions within
/// `rwx`, and the entries in order — the owner, named users, the owning group, named groups,
/// the mask (required if there are named entries), the others. EINVAL otherwise; E2BIG for
/// more than [`MAX_ACL_ENTRIES`], which every ACL kept in memory needs.
pub(crate) fn check_acl(entries: &[u8]) -> Result<(), Errno> {
    #[derive(PartialEq)]
    enum Next {
        UserObj,
        Users,
        Groups,
        Other,
        Done,
    }
    if entries.len() / ACL_ENTRY > MAX_ACL_ENTRIES {
        return Err(Errno::E2BIG);
    }
    let mut next = Next::UserObj;
    let mut needs_mask = false;
    for (tag, perm, _) in acl::entries(entries) {
        if perm & !0o7 != 0 {
            return Err(Errno::EINVAL);
        }
        next = match (tag, &next) {
            (ACL_USER_OBJ, Next::UserObj) => Next::Users,
            (ACL_USER, Next::Users) | (ACL_GROUP, Next::Groups) => {
                needs_mask = true;
                continue;
            }
            (ACL_GROUP_OBJ, Next::Users) => Next::Groups,
            (ACL_MASK, Next::Groups) => Next::Other,
            (ACL_OTHER, Next::Other) => Next::Done,
            (ACL_OTHER, Next::Groups) if !needs_mask => Next::Done,
            _ => return Err(Errno::EINVAL),
        };
    }
    if next == Next::Done {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// The mode an inode has after an allowed SETATTR `set`, with the set-id bits Linux takes
/// away on the way:
/// - a new mode, from a caller that is not root and not a member of the inode's group (its
///   new group if `set` changes that too), loses S_ISGID: otherwise anyone could make a file
///   that runs with a group they do not have;
/// - anything but a directory that is chowned — a new owner, a new group, or the ones it
///   has, Linux's `chown_common` asks no more than that `uid` or `gid` be given — loses
///   S_ISUID, even when root chowns it, and S_ISGID where it means "run as the group" (group
///   execute set) or the caller is not root and not in the file's group (`ATTR_KILL_SUID`
///   and `setattr_should_drop_sgid`);
/// - a regular file truncated by anyone but root loses them the same way (the kernel removes
///   them on any write: `file_remove_privs`).
///
/// An explicit new mode is taken as it is asked (apart from the first rule): it replaces the
/// bits the last two rules would take away. Directories keep their S_ISGID, which means
/// "new entries take my group" there, not "run as", and their S_ISUID.
pub(crate) fn mode_after_setattr(cred: &Cred, inode: &InodeAttr, set: &SetAttr) -> u32 {
    let root = is_root(cred);
    if let Some(mode) = set.mode {
        let mode = mode & 0o7777;
        let group = set.gid.unwrap_or(inode.gid);
        return if root || in_group(cred, group) {
            mode
        } else {
            mode & !S_ISGID
        };
    }
    let mode = inode.mode;
    let chown = set.uid.is_some() || set.gid.is_some();
    let truncate = set.size.is_some() && !root && inode.kind == FileKind::File;
    if inode.kind == FileKind::Directory || !(chown || truncate) {
        return mode;
    }
    let drop_sgid =
        mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !(root || in_group(cred, inode.gid)));
    let mode = mode & !S_ISUID;
    if drop_sgid { mode & !S_ISGID } else { mode }
}

/// The mode after `cred` sets an access ACL that stands for permission bits `bits`
/// (`acl::mode_of`), as Linux's `posix_acl_update_mode`: the bits replace the mode's, and
/// S_ISGID goes unless the caller is root or a member of the inode's group, as on a chmod.
pub(crate) fn mode_after_acl(cred: &Cred, inode: &InodeAttr, bits: u32) -> u32 {
    let mode = inode.mode & !0o777 | bits & 0o777;
    if is_root(cred) || in_group(cred, inode.gid) {
        mode
    } else {
        mode & !S_ISGID
    }
}

/// The mode of a regular file after a non-empty WRITE, or an O_TRUNC, by `cred`: Linux's
/// `file_remove_privs` drops set-user-ID, and set-group-ID where group execute makes it mean
/// "run as" (or the writer is not in the group), unless the writer is root (CAP_FSETID), so
/// nobody can change a program that runs as someone else and keep it running so.
pub(crate) fn mode_after_write(cred: &Cred, inode: &InodeAttr) -> u32 {
    let mode = inode.mode;
    if is_root(cred) || inode.kind != FileKind::File {
        return mode;
    }
    // Linux 6.x's `setattr_should_drop_sgid`: set-group-ID goes where it means "run as the
    // group", and also without group execute if the writer is not in the file's group.
    let drop_sgid = mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !in_group(cred, inode.gid));
    let mode = mode & !S_ISUID;
    if drop_sgid { mode & !S_ISGID } else { mode }
}

/// The owner group and mode a new inode takes in directory `parent`, asked for with `mode` by
/// `cred`: in a set-group-ID directory it takes the directory's group rather than the caller's
/// (BSD semantics, which System V file systems give such directories), and a new directory
/// there inherits the set-group-ID bit; a new file asking there to run as that group
/// (S_ISGID with group execute) keeps S_ISGID only if the caller is a member of the group or
/// root. S_ISGID without group execute does not mean "run as" (it marks mandatory locking),
/// and Linux keeps it. A new directory never takes set-ID bits from the mode asked for (Linux
/// masks MKDIR's mode to permissions and the sticky bit): only the inherited S_ISGID.
pub(crate) fn new_inode_owner(
    cred: &Cred,
    parent: &InodeAttr,
    kind: FileKind,
    mode: u32,
) -> (u32, u32) {
    let dir = kind == FileKind::Directory;
    let mode = if dir { mode & 0o1777 } else { mode & 0o7777 };
    if parent.mode & S_ISGID == 0 {
        return (cred.gid, mode);
    }
    let mode = if dir {
        mode | S_ISGID
    } else if mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP
        && !(is_root(cred) || in_group(cred, parent.gid))
    {
        mode & !S_ISGID
    } else {
        mode
    };
    (parent.gid, mode)
}

/// Root squash (`--root-squash`), as Linux's NFS server does it: uid 0 becomes [`NOBODY`],
/// and so does group 0 wherever it appears, primary or supplementary, whoever carries it. In
/// place, so a request's credentials cost no allocation.
pub(crate) fn squash_root(cred: &mut Cred) {
    if cred.uid == 0 {
        cred.uid = NOBODY;
    }
    if cred.gid == 0 {
        cred.gid = NOBODY;
    }
    for gid in &mut cred.groups {
        if *gid == 0 {
            *gid = NOBODY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    fn inode(kind: FileKind, mode: u32, uid: u32, gid: u32) -> InodeAttr {
        InodeAttr {
            ino: 7,
            kind,
            mode,
            uid,
            gid,
            nlink: 1,
            size: 0,
            ctime_ns: 0,
            mtime_ns: 0,
            generation: 1,
            parent: 0,
            entries: 0,
            transno: 1,
            atime_ns: 0,
            rdev: 0,
            target: None,
            data_blocks: 0,
        }
    }

    fn dir(mode: u32, uid: u32, gid: u32) -> InodeAttr {
        inode(FileKind::Directory, mode, uid, gid)
    }

    fn file(mode: u32, uid: u32, gid: u32) -> InodeAttr {
        inode(FileKind::File, mode, uid, gid)
    }

    const ALICE: u32 = 1000;
    const BOB: u32 = 2000;
    const STAFF: u32 = 50;
    const USERS: u32 = 100;

    #[test]
    fn one_class_decides_owner_then_group_then_others() {
        let alice = cred(ALICE, USERS, &[]);
        // Alice owns it: only her bits count, even where group and others have more.
        assert_eq!(
            check(&alice, &dir(0o077, ALICE, USERS), None, SEARCH),
            Err(Errno::EACCES)
        );
        assert_eq!(
            check(&alice, &dir(0o300, ALICE, USERS), None, WRITE | SEARCH),
            Ok(())
        );
        // In the group (primary): the group's bits, not the others'.
        assert_eq!(
            check(&alice, &dir(0o707, BOB, USERS), None, READ),
            Err(Errno::EACCES)
        );
        assert_eq!(
            check(&alice, &dir(0o050, BOB, USERS), None, READ | SEARCH),
            Ok(())
        );
        // A supplementary group counts as much as the primary one.
        let member = cred(ALICE, USERS, &[9, STAFF]);
        assert_eq!(
            check(&member, &dir(0o030, BOB, STAFF), None, WRITE | SEARCH),
            Ok(())
        );
        // Neither: the others' bits.
        assert_eq!(check(&alice, &dir(0o001, BOB, STAFF), None, SEARCH), Ok(()));
        assert_eq!(
            check(&alice, &dir(0o771, BOB, STAFF), None, WRITE | SEARCH),
            Err(Errno::EACCES)
        );
        // Both bits are needed: write without search is not enough.
        assert_eq!(
            check(&alice, &dir(0o002, BOB, STAFF), None, WRITE | SEARCH),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn root_passes_every_check_and_nobody_does_not() {
        let root = cred(0, 0, &[]);
        assert_eq!(
            check(
                &root,
                &dir(0o000, ALICE, USERS),
                None,
                READ | WRITE | SEARCH
            ),
            Ok(())
        );
        assert_eq!(
            check(&root, &file(0o000, ALICE, USERS), None, WRITE),
            Ok(())
        );
        let mut squashed = cred(0, 0, &[0, STAFF]);
        squash_root(&mut squashed);
        assert_eq!(squashed, cred(NOBODY, NOBODY, &[NOBODY, STAFF]));
        assert_eq!(
            check(&squashed, &dir(0o770, 0, 0), None, SEARCH),
            Err(Errno::EACCES),
            "a squashed root is in neither root's user nor its group"
        );
        let mut user = cred(ALICE, 0, &[]);
        squash_root(&mut user);
        assert_eq!(
            user,
            cred(ALICE, NOBODY, &[]),
            "group 0 is squashed for anyone"
        );
    }

    #[test]
    fn a_sticky_directory_lets_only_the_entry_owner_the_directory_owner_or_root_remove() {
        let tmp = dir(0o1777, 0, 0);
        let alice = cred(ALICE, USERS, &[]);
        assert_eq!(sticky(&alice, &tmp, ALICE), Ok(()));
        assert_eq!(sticky(&alice, &tmp, BOB), Err(Errno::EPERM));
        assert_eq!(sticky(&cred(0, 0, &[]), &tmp, BOB), Ok(()));
        assert_eq!(sticky(&alice, &dir(0o1777, ALICE, USERS), BOB), Ok(()));
        assert_eq!(sticky(&alice, &dir(0o0777, 0, 0), BOB), Ok(()));
        assert!(sticky_applies(&alice, &tmp));
        assert!(!sticky_applies(&alice, &dir(0o1777, ALICE, USERS)));
        assert!(!sticky_applies(&cred(0, 0, &[]), &tmp));
    }

    #[test]
    fn setattr_is_the_owners_and_chown_is_roots() {
        let alice = cred(ALICE, USERS, &[STAFF]);
        let hers = file(0o644, ALICE, USERS);
        let bobs = file(0o666, BOB, USERS);
        let set = |f: fn(&mut SetAttr)| {
            let mut s = SetAttr::default();
            f(&mut s);
            s
        };
        let chmod = set(|s| s.mode = Some(0o600));
        let utimes = set(|s| s.mtime = Some(SetTime::At(5)));
        let touch = set(|s| {
            s.atime = Some(SetTime::Now);
            s.mtime = Some(SetTime::Now);
        });
        let touch_mtime = set(|s| s.mtime = Some(SetTime::Now));
        // Both times to now: the owner, or anyone who may write; one of them: the owner.
        assert_eq!(may_setattr(&alice, &bobs, None, &touch), Ok(()));
        assert_eq!(
            may_setattr(&alice, &file(0o644, BOB, USERS), None, &touch),
            Err(Errno::EACCES)
        );
        assert_eq!(
            may_setattr(&alice, &bobs, None, &touch_mtime),
            Err(Errno::EPERM)
        );
        assert_eq!(may_setattr(&alice, &hers, None, &touch_mtime), Ok(()));
        let truncate = set(|s| s.size = Some(0));
        assert_eq!(may_setattr(&alice, &hers, None, &chmod), Ok(()));
        assert_eq!(may_setattr(&alice, &bobs, None, &chmod), Err(Errno::EPERM));
        assert_eq!(may_setattr(&alice, &hers, None, &utimes), Ok(()));
        assert_eq!(may_setattr(&alice, &bobs, None, &utimes), Err(Errno::EPERM));
        // Truncating needs write permission, not ownership.
        assert_eq!(may_setattr(&alice, &bobs, None, &truncate), Ok(()));
        assert_eq!(
            may_setattr(&alice, &file(0o444, ALICE, USERS), None, &truncate),
            Err(Errno::EACCES)
        );
        // chown: root's, except to the owner it already has.
        assert_eq!(
            may_setattr(&alice, &hers, None, &set(|s| s.uid = Some(BOB))),
            Err(Errno::EPERM)
        );
        assert_eq!(
            may_setattr(&alice, &hers, None, &set(|s| s.uid = Some(ALICE))),
            Ok(())
        );
        assert_eq!(
            may_setattr(&cred(0, 0, &[]), &hers, None, &set(|s| s.uid = Some(BOB))),
            Ok(())
        );
        // chgrp: the owner's, to a group it is in or the one the file has.
        assert_eq!(
            may_setattr(&alice, &hers, None, &set(|s| s.gid = Some(STAFF))),
            Ok(())
        );
        assert_eq!(
            may_setattr(&alice, &hers, None, &set(|s| s.gid = Some(7))),
            Err(Errno::EPERM)
        );
        assert_eq!(
            may_setattr(
                &alice,
                &file(0o644, ALICE, 7),
                None,
                &set(|s| s.gid = Some(7))
            ),
            Ok(())
        );
        assert_eq!(
            may_setattr(&alice, &bobs, None, &set(|s| s.gid = Some(STAFF))),
            Err(Errno::EPERM)
        );
        // Nothing to change: nothing to check.
        assert_eq!(
            may_setattr(&alice, &bobs, None, &SetAttr::default()),
            Ok(())
        );
    }

    #[test]
    fn set_id_bits_go_where_linux_drops_them() {
        let alice = cred(ALICE, USERS, &[]);
        let root = cred(0, 0, &[]);
        let chmod = |mode| SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        // chmod g+s by an owner outside the file's group: dropped; inside, or root: kept.
        let other_group = file(0o644, ALICE, STAFF);
        assert_eq!(
            mode_after_setattr(&alice, &other_group, &chmod(0o2755)),
            0o755
        );
        assert_eq!(
            mode_after_setattr(&root, &other_group, &chmod(0o2755)),
            0o2755
        );
        assert_eq!(
            mode_after_setattr(&alice, &file(0o644, ALICE, USERS), &chmod(0o102_755)),
            0o2755,
            "type bits are not permission bits"
        );
        // chown of a set-uid, set-gid, group-executable file: both dropped, even by root.
        let setid = file(0o6755, ALICE, USERS);
        let chown = SetAttr {
            uid: Some(BOB),
            ..SetAttr::default()
        };
        assert_eq!(mode_after_setattr(&root, &setid, &chown), 0o755);
        // S_ISGID without group execute is not "run as the group": root keeps it.
        assert_eq!(
            mode_after_setattr(&root, &file(0o6745, ALICE, USERS), &chown),
            0o2745
        );
        // Directories keep their set-id bits through a chown.
        assert_eq!(
            mode_after_setattr(&root, &dir(0o6775, ALICE, USERS), &chown),
            0o6775
        );
        // Every other kind loses them as a regular file does (issue 53, finding 8).
        let fifo = inode(FileKind::Fifo, 0o6774, ALICE, USERS);
        assert_eq!(mode_after_setattr(&root, &fifo, &chown), 0o774);
        // The owner's chgrp to a group it is in, or to the group the file has: a chown too.
        let member = cred(ALICE, USERS, &[STAFF]);
        for gid in [STAFF, USERS] {
            let chgrp = SetAttr {
                gid: Some(gid),
                ..SetAttr::default()
            };
            assert_eq!(
                mode_after_setattr(&member, &file(0o6555, ALICE, USERS), &chgrp),
                0o555
            );
        }
        // Truncate: a user loses them, root does not.
        let truncate = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(mode_after_setattr(&alice, &setid, &truncate), 0o755);
        assert_eq!(mode_after_setattr(&root, &setid, &truncate), 0o6755);
        // Times alone change no mode.
        let utimes = SetAttr {
            mtime: Some(SetTime::At(1)),
            ..SetAttr::default()
        };
        assert_eq!(mode_after_setattr(&alice, &setid, &utimes), 0o6755);
    }

    #[test]
    fn a_set_group_id_directory_gives_new_entries_its_group() {
        let alice = cred(ALICE, USERS, &[]);
        let plain = dir(0o777, 0, STAFF);
        assert_eq!(
            new_inode_owner(&alice, &plain, FileKind::File, 0o2644),
            (USERS, 0o2644)
        );
        assert_eq!(
            new_inode_owner(&alice, &plain, FileKind::Directory, 0o100_755),
            (USERS, 0o755),
            "type bits are not permission bits"
        );
        let shared = dir(0o2777, 0, STAFF);
        assert_eq!(
            new_inode_owner(&alice, &shared, FileKind::Directory, 0o755),
            (STAFF, 0o2755)
        );
        assert_eq!(
            new_inode_owner(&alice, &shared, FileKind::File, 0o2755),
            (STAFF, 0o755),
            "not a member of the group it would run as"
        );
        assert_eq!(
            new_inode_owner(&alice, &shared, FileKind::File, 0o2644),
            (STAFF, 0o2644),
            "without group execute it would not run as the group"
        );
        let member = cred(ALICE, USERS, &[STAFF]);
        assert_eq!(
            new_inode_owner(&member, &shared, FileKind::File, 0o2644),
            (STAFF, 0o2644)
        );
    }

    #[test]
    fn a_new_directory_takes_no_set_id_bits_from_the_mode_asked_for() {
        let alice = cred(ALICE, USERS, &[STAFF]);
        assert_eq!(
            new_inode_owner(&alice, &dir(0o777, 0, STAFF), FileKind::Directory, 0o7755),
            (USERS, 0o1755),
            "the sticky bit stays"
        );
        assert_eq!(
            new_inode_owner(&alice, &dir(0o2777, 0, STAFF), FileKind::Directory, 0o4755),
            (STAFF, 0o2755),
            "S_ISGID comes from the parent only"
        );
    }
}
