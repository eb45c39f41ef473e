//! The permission table: the same operations, by the same users, on the same modes and owners,
//! asked of the local kernel (on a temporary directory) and of a real mds server, whose answers
//! must agree errno for errno — and, where an operation creates or changes an inode, in its
//! mode, owner and group afterwards, and where it reads something (a symlink's target, an
//! extended attribute's value, the names LISTXATTR shows), in what it read. Each case also
//! carries the answer POSIX's rules give, as Linux reads them, written out by hand (`want`):
//! the server is checked against it always; the kernel whenever the test may ask it as another
//! user, which takes root. Run as anyone else (CI may not be root), the kernel half is
//! skipped, and the test says so.
//!
//! The kernel is asked from a forked child that sets its groups, gid and uid and makes one
//! system call; the errno it left is the child's exit status, and what it read it writes to a
//! pipe. Between `fork` and `_exit` the child makes system calls only (everything it needs is
//! built before the fork), as a child of a threaded process must. Paths are never followed
//! past their last component's symlink (`lstat`, `l*xattr`, `AT_SYMLINK_NOFOLLOW`), as the
//! server's inodes are asked for by number. Root squash: the server is started again on the
//! same store with `--root-squash` and asked as uid 0 (groups 0), the kernel as what squashing
//! makes of that, uid and gid 65534. At the end, `mds_permission_denied_total` must have
//! counted, by operation, exactly the refusals the server gave; the counters are process-wide,
//! which is why this file holds one test.
//!
//! The temporary directory must be on a file system with extended attributes in the `user.`,
//! `trusted.` and `security.` namespaces and POSIX ACLs (ext4, tmpfs, xfs, btrfs). Every
//! case's answer is the kernel's: the server differs from it in none.
//!
//! The answers are Linux 6.x's: older kernels dropped set-group-ID bits in fewer places, and
//! with `fs.protected_hardlinks` = 1, the default.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fmt::Write as _;
use std::io::Read as _;
use std::os::fd::FromRawFd as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use common::InProcess;
use mds_client::{Client, ClientError, ROOT, Session};
use mds_proto::{Attr, Cred, Errno, Kind, Op, OpenFlags, RenameHow, SetAttr, SetTime, XattrSet};

/// Who asks. `squashed`: root on a client of the root-squashing server, whom the kernel is
/// asked as [`SQUASHED_AS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct User {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: &'static [u32],
    squashed: bool,
}

const STAFF: u32 = 50;
const USERS: u32 = 100;
const BOBS: u32 = 200;
const NOBODY: u32 = 65534;

const ROOT_USER: User = User {
    name: "root",
    uid: 0,
    gid: 0,
    groups: &[],
    squashed: false,
};
/// In group `USERS`, and `STAFF` as a supplementary group.
const ALICE: User = User {
    name: "alice",
    uid: 1000,
    gid: USERS,
    groups: &[STAFF],
    squashed: false,
};
const BOB: User = User {
    name: "bob",
    uid: 2000,
    gid: BOBS,
    groups: &[],
    squashed: false,
};
/// Root on a root-squashing server: what its requests say.
const SQUASHED: User = User {
    name: "root, squashed",
    uid: 0,
    gid: 0,
    groups: &[0],
    squashed: true,
};
/// What the kernel is asked as for [`SQUASHED`]: squashing's answer.
const SQUASHED_AS: User = User {
    name: "nobody",
    uid: NOBODY,
    gid: NOBODY,
    groups: &[NOBODY],
    squashed: false,
};

/// What an inode of a case's tree is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Make {
    Dir,
    File,
    /// A symbolic link to this target (its mode is 0777, as every symlink's).
    Symlink(&'static str),
    Fifo,
    Socket,
}

/// One inode of a case's tree, made by root: path under the case's directory, what it is, mode,
/// owner, and the extended attributes root gives it last.
#[derive(Clone, Debug)]
struct Node {
    path: &'static str,
    make: Make,
    mode: u32,
    uid: u32,
    gid: u32,
    xattrs: Vec<(&'static str, &'static [u8])>,
}

fn node(path: &'static str, make: Make, mode: u32, uid: u32, gid: u32) -> Node {
    Node {
        path,
        make,
        mode,
        uid,
        gid,
        xattrs: Vec::new(),
    }
}

fn dir(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    node(path, Make::Dir, mode, uid, gid)
}

fn file(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    node(path, Make::File, mode, uid, gid)
}

fn fifo(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    node(path, Make::Fifo, mode, uid, gid)
}

fn socket(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    node(path, Make::Socket, mode, uid, gid)
}

fn symlink(path: &'static str, target: &'static str, uid: u32, gid: u32) -> Node {
    node(path, Make::Symlink(target), 0o777, uid, gid)
}

impl Node {
    /// With the extended attribute `name` set to `value` (by root, after the mode).
    fn x(mut self, name: &'static str, value: &'static [u8]) -> Node {
        self.xattrs.push((name, value));
        self
    }
}

/// The times a `utimensat` sets.
#[derive(Clone, Copy, Debug)]
enum When {
    /// `times` NULL: both to now.
    Null,
    /// Both `UTIME_NOW`, which Linux takes as NULL.
    NowNow,
    /// atime `UTIME_NOW`, mtime `UTIME_OMIT`: an explicit change, as Linux counts them.
    NowOmit,
    /// Both to this second.
    At(i64),
}

/// The operation a case asks for, by path under the case's directory. A path's last
/// component is never followed if it is a symlink.
#[derive(Clone, Copy, Debug)]
enum Act {
    Lookup(&'static str),
    Readdir(&'static str),
    Create(&'static str, u32),
    Mkdir(&'static str, u32),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    Chmod(&'static str, u32),
    Chown(&'static str, u32),
    Chgrp(&'static str, u32),
    /// An explicit mtime, in seconds (atime `UTIME_OMIT`).
    Utimes(&'static str, i64),
    /// `utimensat` in one of its shapes.
    Times(&'static str, When),
    Truncate(&'static str, u64),
    /// A new name (the second path) for the inode the first names.
    Link(&'static str, &'static str),
    /// A symlink at the path, to the target.
    Symlink(&'static str, &'static str),
    Readlink(&'static str),
    /// MKNOD of a kind, mode and device number.
    Mknod(&'static str, Kind, u32, u64),
    /// `renameat2` with its flags.
    Rename2(&'static str, &'static str, RenameHow),
    SetX(&'static str, &'static str, &'static [u8], XattrSet),
    GetX(&'static str, &'static str),
    ListX(&'static str),
    RemoveX(&'static str, &'static str),
    /// `open(2)` (`O_NOFOLLOW`) to read, write or both, with `O_TRUNC` or not; closed at once.
    Open(&'static str, OpenFlags),
    /// One byte written at offset 0 through a descriptor opened to write, then closed.
    Write(&'static str),
}

/// OPEN's flags for the cases: read, write, both, and with O_TRUNC.
const O_RDONLY: OpenFlags = OpenFlags {
    read: true,
    write: false,
    truncate: false,
    append: false,
    exec: false,
};
const O_WRONLY: OpenFlags = OpenFlags {
    read: false,
    write: true,
    truncate: false,
    append: false,
    exec: false,
};
const O_RDWR: OpenFlags = OpenFlags {
    read: true,
    write: true,
    truncate: false,
    append: false,
    exec: false,
};
const O_WRONLY_TRUNC: OpenFlags = OpenFlags {
    truncate: true,
    ..O_WRONLY
};
const O_RDONLY_TRUNC: OpenFlags = OpenFlags {
    truncate: true,
    ..O_RDONLY
};

/// (mode, uid, gid) of an inode.
type Owner = (u32, u32, u32);

/// What an operation read, to compare: a symlink's target or an attribute's value (one item),
/// or the names LISTXATTR shows (sorted).
type Shown = Vec<Vec<u8>>;

struct Case {
    what: &'static str,
    tree: Vec<Node>,
    who: User,
    act: Act,
    /// What the rules answer.
    want: Result<(), Errno>,
    /// After the operation: a path, and the (mode, uid, gid) the rules say it has.
    then: Option<(&'static str, Owner)>,
    /// What the operation reads, when it succeeds.
    shows: Option<Shown>,
}

fn case(what: &'static str, who: User, act: Act, want: Result<(), Errno>, tree: &[Node]) -> Case {
    Case {
        what,
        tree: tree.to_vec(),
        who,
        act,
        want,
        then: None,
        shows: None,
    }
}

impl Case {
    fn then(mut self, path: &'static str, mode: u32, uid: u32, gid: u32) -> Case {
        self.then = Some((path, (mode, uid, gid)));
        self
    }

    /// What READLINK or GETXATTR reads.
    fn shows(mut self, value: &[u8]) -> Case {
        self.shows = Some(vec![value.to_vec()]);
        self
    }

    /// The names LISTXATTR shows, in any order.
    fn lists(mut self, names: &[&str]) -> Case {
        let mut names: Shown = names.iter().map(|n| n.as_bytes().to_vec()).collect();
        names.sort();
        self.shows = Some(names);
        self
    }
}

use Act::*;
use Errno::*;
use RenameHow::{Exchange, NoReplace};
use XattrSet::{Create as XCreate, Either, Replace as XReplace};

const A: u32 = 1000;
const B: u32 = 2000;

// POSIX ACLs as `system.posix_acl_*` values carry them: a version, then entries of (tag,
// permissions, id), little-endian.
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
/// The id of an entry that names no one (the owner's, the group's, the mask, the others').
const NO_ID: u32 = u32::MAX;

fn acl(version: u32, entries: &[(u16, u16, u32)]) -> &'static [u8] {
    let mut value = version.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        value.extend(tag.to_le_bytes());
        value.extend(perm.to_le_bytes());
        value.extend(id.to_le_bytes());
    }
    Box::leak(value.into_boxed_slice())
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[rustfmt::skip] // A table: each case on two lines, what and who, then the tree.
fn cases() -> Vec<Case> {
    let ok = Ok(());
    // rw-r--r--: what mode 0644 says, which Linux keeps as the mode alone.
    let acl_644 = acl(2, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_GROUP_OBJ, 4, NO_ID), (ACL_OTHER, 4, NO_ID)]);
    // rw-r----- and alice r--: an ACL Linux keeps (mode 0640).
    let acl_alice = acl(2, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_USER, 4, A), (ACL_GROUP_OBJ, 4, NO_ID),
                             (ACL_MASK, 4, NO_ID), (ACL_OTHER, 0, NO_ID)]);
    let acl_no_entries = acl(2, &[]);
    let acl_version_3 = acl(3, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_GROUP_OBJ, 4, NO_ID), (ACL_OTHER, 4, NO_ID)]);
    // Well formed, but with no group or others entry.
    let acl_owner_only = acl(2, &[(ACL_USER_OBJ, 6, NO_ID)]);
    let not_an_acl: &'static [u8] = b"abc";
    // rw-r--r-- with bob ---: a named user shut out of what others may read (mode 0644).
    let acl_not_bob = acl(2, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_USER, 0, B), (ACL_GROUP_OBJ, 4, NO_ID),
                               (ACL_MASK, 4, NO_ID), (ACL_OTHER, 4, NO_ID)]);
    // rw------- with bob rw- under a mask r--: what bob gets is r-- (mode 0640).
    let acl_bob_masked = acl(2, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_USER, 6, B), (ACL_GROUP_OBJ, 0, NO_ID),
                                  (ACL_MASK, 4, NO_ID), (ACL_OTHER, 0, NO_ID)]);
    // rw------- with group staff rw- (mode 0660): alice's supplementary group writes.
    let acl_staff = acl(2, &[(ACL_USER_OBJ, 6, NO_ID), (ACL_GROUP_OBJ, 0, NO_ID), (ACL_GROUP, 6, STAFF),
                             (ACL_MASK, 6, NO_ID), (ACL_OTHER, 0, NO_ID)]);
    // rwxr-xr-x with bob rwx (mode 0775): bob makes entries in a directory he does not own.
    let acl_bob_dir = acl(2, &[(ACL_USER_OBJ, 7, NO_ID), (ACL_USER, 7, B), (ACL_GROUP_OBJ, 5, NO_ID),
                               (ACL_MASK, 7, NO_ID), (ACL_OTHER, 5, NO_ID)]);
    // A default ACL: rwx for the owner and bob, r-x for the group, nothing for others.
    let default_bob = acl(2, &[(ACL_USER_OBJ, 7, NO_ID), (ACL_USER, 7, B), (ACL_GROUP_OBJ, 5, NO_ID),
                               (ACL_MASK, 7, NO_ID), (ACL_OTHER, 0, NO_ID)]);
    let name_255 = leak(format!("user.{}", "n".repeat(250)));
    let name_256 = leak(format!("user.{}", "n".repeat(251)));
    let value_65537: &'static [u8] = Box::leak(vec![b'x'; 65537].into_boxed_slice());
    let null_dev = libc::makedev(1, 3);
    let loop_dev = libc::makedev(7, 0);
    vec![
        // LOOKUP: search permission on the parent, and only the class the caller is in.
        case("lookup with search", BOB, Lookup("d/f"), ok,
             &[dir("d", 0o755, A, USERS), file("d/f", 0o600, A, USERS)]),
        case("lookup without search", BOB, Lookup("d/f"), Err(EACCES),
             &[dir("d", 0o644, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("lookup of a missing name without search: EACCES first", BOB, Lookup("d/nothing"), Err(EACCES),
             &[dir("d", 0o700, A, USERS)]),
        case("lookup through the group's bits", ALICE, Lookup("d/f"), ok,
             &[dir("d", 0o070, 0, USERS), file("d/f", 0o600, 0, 0)]),
        case("lookup through a supplementary group", ALICE, Lookup("d/f"), ok,
             &[dir("d", 0o010, 0, STAFF), file("d/f", 0o600, 0, 0)]),
        case("the owner's bits decide for the owner", ALICE, Lookup("d/f"), Err(EACCES),
             &[dir("d", 0o077, A, USERS), file("d/f", 0o600, A, USERS)]),
        case("root searches a mode-0 directory", ROOT_USER, Lookup("d/f"), ok,
             &[dir("d", 0o000, A, USERS), file("d/f", 0o600, A, USERS)]),
        // READDIR: read permission; search is not needed to list names.
        case("readdir with read and no search", BOB, Readdir("d"), ok,
             &[dir("d", 0o444, A, USERS), file("d/f", 0o600, A, USERS)]),
        case("readdir with search and no read", BOB, Readdir("d"), Err(EACCES),
             &[dir("d", 0o311, A, USERS)]),
        case("root lists a mode-0 directory", ROOT_USER, Readdir("d"), ok,
             &[dir("d", 0o000, A, USERS)]),
        // CREATE and MKDIR: write and search on the parent; EEXIST before the write check.
        case("create without write", BOB, Create("d/new", 0o644), Err(EACCES),
             &[dir("d", 0o755, A, USERS)]),
        case("create with write", BOB, Create("d/new", 0o644), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/new", 0o644, B, BOBS),
        case("create with write and search, no read", BOB, Create("d/new", 0o640), ok,
             &[dir("d", 0o733, A, USERS)])
            .then("d/new", 0o640, B, BOBS),
        case("create with write, no search", BOB, Create("d/new", 0o644), Err(EACCES),
             &[dir("d", 0o666, A, USERS)]),
        case("create of an existing name without write: EEXIST", BOB, Create("d/f", 0o644), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("create g+s in a set-group-ID directory, outside its group", BOB, Create("d/new", 0o2755), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/new", 0o755, B, STAFF),
        case("create g+s without group execute, outside its group", BOB, Create("d/new", 0o2644), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/new", 0o2644, B, STAFF),
        case("create g+s in a set-group-ID directory, a member of its group", ALICE, Create("d/new", 0o2755), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/new", 0o2755, A, STAFF),
        case("mkdir without write", ALICE, Mkdir("d/new", 0o755), Err(EACCES),
             &[dir("d", 0o755, 0, 0)]),
        case("mkdir in a set-group-ID directory inherits it", BOB, Mkdir("d/new", 0o755), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/new", 0o2755, B, STAFF),
        case("mkdir asking for set-ID bits gets none", BOB, Mkdir("d/new", 0o7755), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/new", 0o1755, B, BOBS),
        case("mkdir asking for set-user-ID in a set-group-ID directory: only S_ISGID, inherited", BOB, Mkdir("d/new", 0o4755), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/new", 0o2755, B, STAFF),
        case("mkdir of an existing name without write: EEXIST", BOB, Mkdir("d/e", 0o755), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), dir("d/e", 0o755, A, USERS)]),
        // UNLINK and RMDIR: write and search on the parent; the file's own mode does not matter.
        case("unlink of one's own file from a directory one cannot write", BOB, Unlink("d/f"), Err(EACCES),
             &[dir("d", 0o755, A, USERS), file("d/f", 0o644, B, BOBS)]),
        case("unlink of another's read-only file from a writable directory", BOB, Unlink("d/f"), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o444, A, USERS)]),
        case("unlink of a missing name without write: ENOENT", BOB, Unlink("d/nothing"), Err(ENOENT),
             &[dir("d", 0o555, A, USERS)]),
        case("unlink of a directory", BOB, Unlink("d/e"), Err(EISDIR),
             &[dir("d", 0o777, A, USERS), dir("d/e", 0o777, A, USERS)]),
        case("rmdir without write", BOB, Rmdir("d/e"), Err(EACCES),
             &[dir("d", 0o555, A, USERS), dir("d/e", 0o777, B, BOBS)]),
        case("rmdir of a full directory", BOB, Rmdir("d/e"), Err(ENOTEMPTY),
             &[dir("d", 0o777, A, USERS), dir("d/e", 0o777, A, USERS), file("d/e/f", 0o644, A, USERS)]),
        case("rmdir of a file", BOB, Rmdir("d/f"), Err(ENOTDIR),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS)]),
        // The sticky bit: only the entry's owner, the directory's owner, or root.
        case("sticky: another's file", BOB, Unlink("t/f"), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o666, A, USERS)]),
        case("sticky: one's own file", BOB, Unlink("t/f"), ok,
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, B, BOBS)]),
        case("sticky: the directory's owner", BOB, Unlink("t/f"), ok,
             &[dir("t", 0o1777, B, BOBS), file("t/f", 0o644, A, USERS)]),
        case("sticky: root", ROOT_USER, Unlink("t/f"), ok,
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, A, USERS)]),
        case("sticky: unlink of another's directory, EPERM before EISDIR", BOB, Unlink("t/e"), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), dir("t/e", 0o777, A, USERS)]),
        case("sticky: rmdir of another's directory", BOB, Rmdir("t/e"), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), dir("t/e", 0o777, A, USERS)]),
        case("sticky: rename another's file", BOB, Rename("t/f", "t/g"), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o666, A, USERS)]),
        case("sticky: rename over another's file", BOB, Rename("d/f", "t/g"), Err(EPERM),
             &[dir("d", 0o777, 0, 0), file("d/f", 0o644, B, BOBS), dir("t", 0o1777, 0, 0), file("t/g", 0o666, A, USERS)]),
        // RENAME: write and search on both parents; a directory moving to another parent needs
        // write on itself.
        case("rename into a directory one cannot write", BOB, Rename("d/f", "e/f"), Err(EACCES),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, B, BOBS), dir("e", 0o755, A, USERS)]),
        case("rename across writable directories", BOB, Rename("d/f", "e/g"), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), dir("e", 0o777, A, USERS)]),
        case("move another's directory to another parent", BOB, Rename("d/s", "e/s"), Err(EACCES),
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o755, A, USERS), dir("e", 0o777, A, USERS)]),
        case("rename another's directory within its parent", BOB, Rename("d/s", "d/t"), ok,
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o755, A, USERS)]),
        case("rename onto itself without write", BOB, Rename("d/f", "d/f"), ok,
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("rename into its own subtree without write: EINVAL first", BOB, Rename("d/s", "d/s/x"), Err(EINVAL),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o777, A, USERS)]),
        case("rename onto an ancestor without write: ENOTEMPTY first", BOB, Rename("d/s/f", "d"), Err(ENOTEMPTY),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o555, A, USERS), file("d/s/f", 0o644, A, USERS)]),
        case("rename onto its own parent without write: ENOTEMPTY first", BOB, Rename("d/s/f", "d/s"), Err(ENOTEMPTY),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o555, A, USERS), file("d/s/f", 0o644, A, USERS)]),
        case("rename a file onto a directory without write: EACCES first", BOB, Rename("d/f", "d/e"), Err(EACCES),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS), dir("d/e", 0o777, A, USERS)]),
        case("rename a file onto a directory", BOB, Rename("d/f", "d/e"), Err(EISDIR),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), dir("d/e", 0o777, A, USERS)]),
        // SETATTR: chmod and explicit times are the owner's, chown root's, chgrp the owner's to
        // a group it is in; truncate needs write. Set-ID bits go as Linux drops them.
        case("chmod of another's file", BOB, Chmod("d/f", 0o600), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("chmod of one's own file", ALICE, Chmod("d/f", 0o600), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)])
            .then("d/f", 0o600, A, USERS),
        case("chmod g+s outside the file's group drops it", ALICE, Chmod("d/f", 0o2755), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, BOBS)])
            .then("d/f", 0o755, A, BOBS),
        case("chmod g+s in a supplementary group keeps it", ALICE, Chmod("d/f", 0o2755), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, STAFF)])
            .then("d/f", 0o2755, A, STAFF),
        case("chmod by root", ROOT_USER, Chmod("d/f", 0o2700), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, BOBS)])
            .then("d/f", 0o2700, A, BOBS),
        case("chown to another by the owner", ALICE, Chown("d/f", B), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("chown to oneself by the owner", ALICE, Chown("d/f", A), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)])
            .then("d/f", 0o644, A, USERS),
        case("chown by root drops set-user-ID", ROOT_USER, Chown("d/f", B), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o4755, A, USERS)])
            .then("d/f", 0o755, B, USERS),
        case("chown by root keeps set-group-ID without group execute", ROOT_USER, Chown("d/f", B), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2745, A, USERS)])
            .then("d/f", 0o2745, B, USERS),
        case("chgrp by the owner to a group it is in", ALICE, Chgrp("d/f", STAFF), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)])
            .then("d/f", 0o644, A, STAFF),
        case("chgrp by the owner to a group it is not in", ALICE, Chgrp("d/f", BOBS), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("chgrp of another's file", BOB, Chgrp("d/f", BOBS), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        // Set-ID bits on a chown (issue 53, finding 8): every chown of a non-directory drops
        // set-user-ID, whoever makes it and whatever it changes, and set-group-ID where it
        // means "run as the group" (group execute) or the caller is not root and not in the
        // file's group; a directory keeps both.
        case("chgrp by the owner to one of its groups drops set-ID bits", ALICE, Chgrp("d/f", STAFF), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6555, A, USERS)])
            .then("d/f", 0o555, A, STAFF),
        case("chgrp by the owner to the group it has drops set-ID bits", ALICE, Chgrp("d/f", USERS), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6555, A, USERS)])
            .then("d/f", 0o555, A, USERS),
        case("chown to oneself by the owner drops set-user-ID", ALICE, Chown("d/f", A), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o4755, A, USERS)])
            .then("d/f", 0o755, A, USERS),
        case("chgrp by the owner keeps set-group-ID without group execute", ALICE, Chgrp("d/f", STAFF), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2745, A, USERS)])
            .then("d/f", 0o2745, A, STAFF),
        case("chown by an owner outside the file's group drops set-group-ID without group execute", ALICE, Chown("d/f", A), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2745, A, BOBS)])
            .then("d/f", 0o745, A, BOBS),
        case("chgrp by root drops set-group-ID with group execute", ROOT_USER, Chgrp("d/f", BOBS), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6755, A, USERS)])
            .then("d/f", 0o755, A, BOBS),
        // Not only regular files: any non-directory (the outside suite's fifo cases).
        case("chgrp by the owner of a set-ID fifo drops them", ALICE, Chgrp("d/p", STAFF), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o6555, A, USERS)])
            .then("d/p", 0o555, A, STAFF),
        case("chown by root of a set-ID fifo drops them", ROOT_USER, Chown("d/p", B), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o6755, A, USERS)])
            .then("d/p", 0o755, B, USERS),
        case("chgrp by the owner of a set-ID directory keeps them", ALICE, Chgrp("d/e", STAFF), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o6775, A, USERS)])
            .then("d/e", 0o6775, A, STAFF),
        // Times change no set-ID bit, whoever sets them.
        case("explicit times by the owner keep set-ID bits", ALICE, Times("d/f", When::At(5)), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6755, A, USERS)])
            .then("d/f", 0o6755, A, USERS),
        case("times set to now by a writer keep set-ID bits", BOB, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6777, A, USERS)])
            .then("d/f", 0o6777, A, USERS),
        case("explicit times on another's writable file", BOB, Utimes("d/f", 1_000_000), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("explicit times on one's own read-only file", ALICE, Utimes("d/f", 1_000_000), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o444, A, USERS)]),
        case("truncate without write", BOB, Truncate("d/f", 0), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("truncate another's writable file", BOB, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)])
            .then("d/f", 0o666, A, USERS),
        case("truncate by a user drops set-ID bits", BOB, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6777, A, USERS)])
            .then("d/f", 0o777, A, USERS),
        case("truncate by root keeps them", ROOT_USER, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6755, A, USERS)])
            .then("d/f", 0o6755, A, USERS),
        case("truncate by the owner drops set-user-ID", ALICE, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o4766, A, USERS)])
            .then("d/f", 0o766, A, USERS),
        case("truncate by a member keeps set-group-ID without group execute", ALICE, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2666, 0, STAFF)])
            .then("d/f", 0o2666, 0, STAFF),
        // WRITE: set-user-ID goes on any write by anyone but root, and set-group-ID where it
        // means "run as the group" or the writer is not in the file's group (`file_remove_privs`).
        case("write by another user drops set-ID bits", BOB, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6777, A, USERS)])
            .then("d/f", 0o777, A, USERS),
        case("write by the owner drops set-user-ID", ALICE, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o4766, A, USERS)])
            .then("d/f", 0o766, A, USERS),
        case("write by a member keeps set-group-ID without group execute", ALICE, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2666, 0, STAFF)])
            .then("d/f", 0o2666, 0, STAFF),
        case("write by a non-member drops set-group-ID without group execute", BOB, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2666, A, USERS)])
            .then("d/f", 0o666, A, USERS),
        case("write by a member drops set-group-ID with group execute", ALICE, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2676, 0, STAFF)])
            .then("d/f", 0o676, 0, STAFF),
        case("write by root keeps set-ID bits", ROOT_USER, Write("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6777, A, USERS)])
            .then("d/f", 0o6777, A, USERS),
        case("write without write permission", BOB, Write("d/f"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6755, A, USERS)])
            .then("d/f", 0o6755, A, USERS),
        case("truncate of a directory", ROOT_USER, Truncate("d", 0), Err(EISDIR),
             &[dir("d", 0o777, 0, 0)]),
        // OPEN, as open(2) checks it (`may_open`).
        case("open to read another's readable file", BOB, Open("d/f", O_RDONLY), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("open to write without write", BOB, Open("d/f", O_WRONLY), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("open to read and write without write", BOB, Open("d/f", O_RDWR), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("open to read without read", BOB, Open("d/f", O_RDONLY), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o622, A, USERS)]),
        case("open to write a write-only file", BOB, Open("d/f", O_WRONLY), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o622, A, USERS)]),
        case("the owner's bits, not the others'", ALICE, Open("d/f", O_RDONLY), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o077, A, USERS)]),
        case("the group's bits for a member", ALICE, Open("d/f", O_RDWR), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o460, 0, USERS)]),
        case("root opens anything to write", ROOT_USER, Open("d/f", O_RDWR), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("O_RDONLY|O_TRUNC needs write", BOB, Open("d/f", O_RDONLY_TRUNC), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("O_RDONLY|O_TRUNC truncates with write", BOB, Open("d/f", O_RDONLY_TRUNC), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)])
            .then("d/f", 0o666, A, USERS),
        case("O_TRUNC by a user drops set-ID bits", BOB, Open("d/f", O_WRONLY_TRUNC), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6777, A, USERS)])
            .then("d/f", 0o777, A, USERS),
        case("O_TRUNC drops a group-ID without x for a non-member", BOB, Open("d/f", O_WRONLY_TRUNC), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2666, A, USERS)])
            .then("d/f", 0o666, A, USERS),
        case("O_TRUNC keeps a group-ID without x for a member", ALICE, Open("d/f", O_WRONLY_TRUNC), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o2666, 0, USERS)])
            .then("d/f", 0o2666, 0, USERS),
        case("O_TRUNC by root keeps set-ID bits", ROOT_USER, Open("d/f", O_WRONLY_TRUNC), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o6755, A, USERS)])
            .then("d/f", 0o6755, A, USERS),
        case("open a directory to read", BOB, Open("d", O_RDONLY), ok,
             &[dir("d", 0o755, A, USERS)]),
        case("open a directory to write", ROOT_USER, Open("d", O_WRONLY), Err(EISDIR),
             &[dir("d", 0o777, 0, 0)]),
        case("open a directory to read and write", ROOT_USER, Open("d", O_RDWR), Err(EISDIR),
             &[dir("d", 0o777, 0, 0)]),
        case("open an unreadable directory", BOB, Open("d", O_RDONLY), Err(EACCES),
             &[dir("d", 0o711, A, USERS)]),
        case("open a symlink", ROOT_USER, Open("d/l", O_RDONLY), Err(ELOOP),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", 0, 0)]),
        case("open a fifo to read", BOB, Open("d/p", O_RDONLY), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o644, A, USERS)]),
        // Root squash: root on a client is nobody.
        case("squashed root cannot write root's directory", SQUASHED, Create("d/new", 0o644), Err(EACCES),
             &[dir("d", 0o755, 0, 0)]),
        case("squashed root creates as nobody", SQUASHED, Create("d/new", 0o644), ok,
             &[dir("d", 0o777, 0, 0)])
            .then("d/new", 0o644, NOBODY, NOBODY),
        case("squashed root cannot chown", SQUASHED, Chown("d/f", A), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, 0, 0)]),
        case("squashed root cannot search root's private directory", SQUASHED, Lookup("d/f"), Err(EACCES),
             &[dir("d", 0o700, 0, 0), file("d/f", 0o644, 0, 0)]),
        case("squashed group 0 is nobody's group", SQUASHED, Lookup("d/f"), ok,
             &[dir("d", 0o070, 0, NOBODY), file("d/f", 0o644, 0, 0)]),
        case("squashed root and the sticky bit", SQUASHED, Unlink("t/f"), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o666, 0, 0)]),
        // UTIMENSAT in its four shapes: both times to now (NULL, or UTIME_NOW twice, which
        // Linux reads as NULL) for the owner or anyone who may write (EACCES otherwise); one
        // time to now and the other left, or any explicit time, for the owner alone (EPERM).
        case("times NULL on one's own read-only file", ALICE, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o444, A, USERS)]),
        case("times NOW,NOW on one's own read-only file", ALICE, Times("d/f", When::NowNow), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o444, A, USERS)]),
        case("times NOW,OMIT on one's own read-only file", ALICE, Times("d/f", When::NowOmit), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o444, A, USERS)]),
        case("explicit atime and mtime on one's own read-only file", ALICE, Times("d/f", When::At(1_000_000)), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o444, A, USERS)]),
        case("times NULL on another's writable file", BOB, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("times NOW,NOW on another's writable file", BOB, Times("d/f", When::NowNow), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("times NOW,OMIT on another's writable file", BOB, Times("d/f", When::NowOmit), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("explicit atime and mtime on another's writable file", BOB, Times("d/f", When::At(1_000_000)), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("times NULL on another's read-only file", BOB, Times("d/f", When::Null), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("times NOW,NOW on another's read-only file", BOB, Times("d/f", When::NowNow), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("times NOW,OMIT on another's read-only file", BOB, Times("d/f", When::NowOmit), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("explicit atime and mtime on another's read-only file", BOB, Times("d/f", When::At(1_000_000)), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("times NULL by root on a mode-0 file", ROOT_USER, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("times NOW,NOW by root on a mode-0 file", ROOT_USER, Times("d/f", When::NowNow), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("times NOW,OMIT by root on a mode-0 file", ROOT_USER, Times("d/f", When::NowOmit), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("explicit times by root on a mode-0 file", ROOT_USER, Times("d/f", When::At(1_000_000)), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("times NULL through a supplementary group's write bit", ALICE, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o460, B, STAFF)]),
        case("times NOW,NOW on another's directory one may write", BOB, Times("d/e", When::NowNow), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o777, A, USERS)]),
        case("times NULL on another's symlink, which everyone may write", BOB, Times("d/l", When::Null), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("explicit times on another's symlink", BOB, Times("d/l", When::At(1_000_000)), Err(EPERM),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("explicit times on one's own symlink", ALICE, Times("d/l", When::At(1_000_000)), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("times NULL by squashed root on root's writable file", SQUASHED, Times("d/f", When::Null), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, 0, 0)]),
        case("times NULL by squashed root on root's read-only file", SQUASHED, Times("d/f", When::Null), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, 0, 0)]),
        case("explicit times by squashed root on root's writable file", SQUASHED, Times("d/f", When::At(1_000_000)), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, 0, 0)]),
        // LINK: search on both paths, then the new name free (EEXIST), then protected_hardlinks
        // for an inode one does not own (EPERM), then write on the new name's directory
        // (EACCES), then never a directory (EPERM).
        case("link of another's file one may read and write", BOB, Link("d/f", "d/g"), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o666, A, USERS)])
            .then("d/g", 0o666, A, USERS),
        case("link of another's file one may not read: protected_hardlinks", BOB, Link("d/f", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o622, A, USERS)]),
        case("link of another's file one may not write: protected_hardlinks", BOB, Link("d/f", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("link of another's set-user-ID file", BOB, Link("d/f", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o4666, A, USERS)]),
        case("link of another's set-group-ID file with group execute", BOB, Link("d/f", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o2676, A, USERS)]),
        case("link of another's set-group-ID file without group execute", BOB, Link("d/f", "d/g"), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o2666, A, USERS)])
            .then("d/g", 0o2666, A, USERS),
        case("link of another's file through a supplementary group", ALICE, Link("d/f", "d/g"), ok,
             &[dir("d", 0o777, 0, 0), file("d/f", 0o060, B, STAFF)])
            .then("d/g", 0o060, B, STAFF),
        case("link of another's fifo", BOB, Link("d/p", "d/q"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), fifo("d/p", 0o666, A, USERS)]),
        case("link of another's symlink", BOB, Link("d/l", "d/m"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), symlink("d/l", "f", A, USERS)]),
        case("link of one's own fifo", BOB, Link("d/p", "d/q"), ok,
             &[dir("d", 0o777, A, USERS), fifo("d/p", 0o600, B, BOBS)])
            .then("d/q", 0o600, B, BOBS),
        case("link of one's own symlink", ALICE, Link("d/l", "d/m"), ok,
             &[dir("d", 0o777, 0, 0), symlink("d/l", "nowhere", A, USERS)])
            .then("d/m", 0o777, A, USERS),
        case("link of one's own file with no permission bits", ALICE, Link("d/f", "d/g"), ok,
             &[dir("d", 0o777, 0, 0), file("d/f", 0o000, A, USERS)])
            .then("d/g", 0o000, A, USERS),
        case("link of one's own set-user-ID file", ALICE, Link("d/f", "d/g"), ok,
             &[dir("d", 0o777, 0, 0), file("d/f", 0o4755, A, USERS)])
            .then("d/g", 0o4755, A, USERS),
        case("link by root of another's set-user-ID file into a read-only directory", ROOT_USER, Link("d/f", "e/g"), ok,
             &[dir("d", 0o755, A, USERS), file("d/f", 0o4700, A, USERS), dir("e", 0o500, B, BOBS)])
            .then("e/g", 0o4700, A, USERS),
        case("link by root of another's fifo", ROOT_USER, Link("d/p", "d/q"), ok,
             &[dir("d", 0o755, A, USERS), fifo("d/p", 0o600, A, USERS)])
            .then("d/q", 0o600, A, USERS),
        case("link of one's own directory", ALICE, Link("d/e", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), dir("d/e", 0o777, A, USERS)]),
        case("link of a directory by root", ROOT_USER, Link("d/e", "d/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), dir("d/e", 0o777, A, USERS)]),
        case("link of another's directory into one not writable: EPERM first", BOB, Link("d/e", "x/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), dir("d/e", 0o777, A, USERS), dir("x", 0o755, A, USERS)]),
        case("link onto an existing name without write: EEXIST", BOB, Link("d/f", "d/g"), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o666, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("link of another's private file onto an existing name: EEXIST first", BOB, Link("d/f", "d/g"), Err(EEXIST),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o600, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("link into a directory one cannot write", BOB, Link("d/f", "e/g"), Err(EACCES),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o666, A, USERS), dir("e", 0o755, A, USERS)]),
        case("link of another's read-only file into a directory one cannot write: EPERM first", BOB, Link("d/f", "e/g"), Err(EPERM),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), dir("e", 0o755, A, USERS)]),
        case("link into a directory one may write and not search", BOB, Link("d/f", "e/g"), Err(EACCES),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o666, A, USERS), dir("e", 0o772, A, USERS)]),
        case("link out of a directory one cannot search", BOB, Link("d/f", "e/g"), Err(EACCES),
             &[dir("d", 0o776, A, USERS), file("d/f", 0o666, A, USERS), dir("e", 0o777, A, USERS)]),
        case("link of a missing name", BOB, Link("d/nothing", "d/g"), Err(ENOENT),
             &[dir("d", 0o777, A, USERS)]),
        case("link in a sticky directory: the sticky bit does not matter", BOB, Link("t/f", "t/g"), ok,
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o666, A, USERS)])
            .then("t/g", 0o666, A, USERS),
        case("link in a set-group-ID directory keeps the inode's group", BOB, Link("d/f", "d/g"), ok,
             &[dir("d", 0o2777, 0, STAFF), file("d/f", 0o666, A, USERS)])
            .then("d/g", 0o666, A, USERS),
        case("link by squashed root of root's private file", SQUASHED, Link("d/f", "d/g"), Err(EPERM),
             &[dir("d", 0o777, 0, 0), file("d/f", 0o600, 0, 0)]),
        // SYMLINK: as a create (search, EEXIST, then write); mode 0777, the caller's owner, a
        // set-group-ID directory's group.
        case("symlink with write", BOB, Symlink("d/l", "f"), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/l", 0o777, B, BOBS),
        case("symlink without write", BOB, Symlink("d/l", "f"), Err(EACCES),
             &[dir("d", 0o755, A, USERS)]),
        case("symlink with write, no search", BOB, Symlink("d/l", "f"), Err(EACCES),
             &[dir("d", 0o666, A, USERS)]),
        case("symlink of an existing name without write: EEXIST", BOB, Symlink("d/f", "g"), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("symlink over an existing symlink: EEXIST", BOB, Symlink("d/l", "g"), Err(EEXIST),
             &[dir("d", 0o777, A, USERS), symlink("d/l", "f", B, BOBS)]),
        case("symlink to nowhere", BOB, Symlink("d/l", "no/such/thing"), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/l", 0o777, B, BOBS),
        case("symlink with an empty target: ENOENT before anything", BOB, Symlink("d/l", ""), Err(ENOENT),
             &[dir("d", 0o555, A, USERS)]),
        case("symlink in a set-group-ID directory takes its group", BOB, Symlink("d/l", "f"), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/l", 0o777, B, STAFF),
        case("symlink by root in a mode-0 directory", ROOT_USER, Symlink("d/l", "f"), ok,
             &[dir("d", 0o000, A, USERS)])
            .then("d/l", 0o777, 0, 0),
        case("symlink by squashed root in root's directory", SQUASHED, Symlink("d/l", "f"), Err(EACCES),
             &[dir("d", 0o755, 0, 0)]),
        // READLINK needs nothing of the link itself; LOOKUP of a link is lstat's.
        case("readlink of another's symlink", BOB, Readlink("d/l"), ok,
             &[dir("d", 0o755, A, USERS), symlink("d/l", "secret/f", A, USERS)])
            .shows(b"secret/f"),
        case("readlink through a directory one may only search", BOB, Readlink("d/l"), ok,
             &[dir("d", 0o711, A, USERS), symlink("d/l", "../f", A, USERS)])
            .shows(b"../f"),
        case("readlink through a directory one cannot search", BOB, Readlink("d/l"), Err(EACCES),
             &[dir("d", 0o744, A, USERS), symlink("d/l", "f", A, USERS)]),
        case("readlink by root through a mode-0 directory", ROOT_USER, Readlink("d/l"), ok,
             &[dir("d", 0o000, A, USERS), symlink("d/l", "/elsewhere", A, USERS)])
            .shows(b"/elsewhere"),
        case("readlink of a file", BOB, Readlink("d/f"), Err(EINVAL),
             &[dir("d", 0o755, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("readlink of a directory", BOB, Readlink("d/e"), Err(EINVAL),
             &[dir("d", 0o755, A, USERS), dir("d/e", 0o755, A, USERS)]),
        case("readlink of a missing name", BOB, Readlink("d/nothing"), Err(ENOENT),
             &[dir("d", 0o755, A, USERS)]),
        case("lookup of a symlink into a private directory does not follow it", BOB, Lookup("d/l"), ok,
             &[dir("d", 0o755, A, USERS), dir("p", 0o700, A, USERS), file("p/f", 0o600, A, USERS),
               symlink("d/l", "../p/f", A, USERS)]),
        case("lookup of a dangling symlink", BOB, Lookup("d/l"), ok,
             &[dir("d", 0o755, A, USERS), symlink("d/l", "nothing", A, USERS)]),
        case("lookup of a symlink in a directory one cannot search", BOB, Lookup("d/l"), Err(EACCES),
             &[dir("d", 0o744, A, USERS), symlink("d/l", "f", A, USERS)]),
        // MKNOD: a fifo, socket or regular file for anyone who may create there; a device for
        // root alone, EPERM after EEXIST and EACCES; a directory never (EPERM), a symlink not
        // this way (EINVAL), both before anything else.
        case("mkfifo with write", BOB, Mknod("d/p", Kind::Fifo, 0o644, 0), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/p", 0o644, B, BOBS),
        case("mkfifo g+s in a set-group-ID directory, outside its group", BOB, Mknod("d/p", Kind::Fifo, 0o2774, 0), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/p", 0o774, B, STAFF),
        case("mkdir in a set-group-ID directory by a member", ALICE, Mkdir("d/new", 0o700), ok,
             &[dir("d", 0o2770, 0, STAFF)])
            .then("d/new", 0o2700, A, STAFF),
        case("mkdir in a set-group-ID subdirectory of a set-group-ID directory", BOB, Mkdir("d/e/new", 0o755), ok,
             &[dir("d", 0o2777, 0, STAFF), dir("d/e", 0o2777, A, STAFF)])
            .then("d/e/new", 0o2755, B, STAFF),
        case("mkfifo without write", BOB, Mknod("d/p", Kind::Fifo, 0o644, 0), Err(EACCES),
             &[dir("d", 0o755, A, USERS)]),
        case("mkfifo with write, no search", BOB, Mknod("d/p", Kind::Fifo, 0o644, 0), Err(EACCES),
             &[dir("d", 0o666, A, USERS)]),
        case("mkfifo of an existing name without write: EEXIST", BOB, Mknod("d/f", Kind::Fifo, 0o644, 0), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("mknod of a socket with write", BOB, Mknod("d/s", Kind::Socket, 0o640, 0), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/s", 0o640, B, BOBS),
        case("mknod of a regular file with write", BOB, Mknod("d/f", Kind::File, 0o600, 0), ok,
             &[dir("d", 0o777, A, USERS)])
            .then("d/f", 0o600, B, BOBS),
        case("mknod of a character device by a user", BOB, Mknod("d/c", Kind::CharDevice, 0o666, null_dev), Err(EPERM),
             &[dir("d", 0o777, A, USERS)]),
        case("mknod of a block device by a user", ALICE, Mknod("d/b", Kind::BlockDevice, 0o660, loop_dev), Err(EPERM),
             &[dir("d", 0o777, A, USERS)]),
        case("mknod of a device by a user without write: EACCES first", BOB, Mknod("d/c", Kind::CharDevice, 0o666, null_dev), Err(EACCES),
             &[dir("d", 0o755, A, USERS)]),
        case("mknod of a device on an existing name by a user: EEXIST first", BOB, Mknod("d/f", Kind::CharDevice, 0o666, null_dev), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("mknod of a character device by root", ROOT_USER, Mknod("d/c", Kind::CharDevice, 0o666, null_dev), ok,
             &[dir("d", 0o755, A, USERS)])
            .then("d/c", 0o666, 0, 0),
        case("mknod of a block device by root in a mode-0 directory", ROOT_USER, Mknod("d/b", Kind::BlockDevice, 0o660, loop_dev), ok,
             &[dir("d", 0o000, A, USERS)])
            .then("d/b", 0o660, 0, 0),
        case("mknod of a device by squashed root", SQUASHED, Mknod("d/c", Kind::CharDevice, 0o666, null_dev), Err(EPERM),
             &[dir("d", 0o777, 0, 0)]),
        case("mknod of a directory", ALICE, Mknod("d/e", Kind::Directory, 0o755, 0), Err(EPERM),
             &[dir("d", 0o777, A, USERS)]),
        case("mknod of a directory by root", ROOT_USER, Mknod("d/e", Kind::Directory, 0o755, 0), Err(EPERM),
             &[dir("d", 0o555, A, USERS)]),
        case("mknod of a symlink", ALICE, Mknod("d/l", Kind::Symlink, 0o777, 0), Err(EINVAL),
             &[dir("d", 0o777, A, USERS)]),
        case("mkfifo in a set-group-ID directory takes its group", BOB, Mknod("d/p", Kind::Fifo, 0o644, 0), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/p", 0o644, B, STAFF),
        case("mkfifo g+s in a set-group-ID directory, outside its group", BOB, Mknod("d/p", Kind::Fifo, 0o2775, 0), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/p", 0o775, B, STAFF),
        case("mkfifo g+s in a set-group-ID directory, a member of its group", ALICE, Mknod("d/p", Kind::Fifo, 0o2775, 0), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/p", 0o2775, A, STAFF),
        case("mknod of a device by root in a set-group-ID directory takes its group", ROOT_USER, Mknod("d/c", Kind::CharDevice, 0o600, null_dev), ok,
             &[dir("d", 0o2777, 0, STAFF)])
            .then("d/c", 0o600, 0, STAFF),
        // RENAME_NOREPLACE: EEXIST for a target that exists, before any write or sticky check;
        // otherwise a rename's rules.
        case("noreplace onto an existing name", BOB, Rename2("d/f", "d/g", NoReplace), Err(EEXIST),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("noreplace onto an existing name without write: EEXIST first", BOB, Rename2("d/f", "d/g", NoReplace), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("noreplace onto another's file in a sticky directory: EEXIST first", BOB, Rename2("t/f", "t/g", NoReplace), Err(EEXIST),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, B, BOBS), file("t/g", 0o644, A, USERS)]),
        case("noreplace onto itself: EEXIST", BOB, Rename2("d/f", "d/f", NoReplace), Err(EEXIST),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("noreplace of a missing name onto an existing one: ENOENT first", BOB, Rename2("d/nothing", "d/g", NoReplace), Err(ENOENT),
             &[dir("d", 0o777, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("noreplace to a free name", BOB, Rename2("d/f", "d/g", NoReplace), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS)])
            .then("d/g", 0o644, A, USERS),
        case("noreplace to a free name without write", BOB, Rename2("d/f", "d/g", NoReplace), Err(EACCES),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("noreplace of another's file out of a sticky directory", BOB, Rename2("t/f", "d/f", NoReplace), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, A, USERS), dir("d", 0o777, 0, 0)]),
        case("noreplace of another's directory to another parent", BOB, Rename2("d/s", "e/s", NoReplace), Err(EACCES),
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o755, A, USERS), dir("e", 0o777, A, USERS)]),
        case("noreplace of a directory into its own subtree: EINVAL first", BOB, Rename2("d/s", "d/s/x", NoReplace), Err(EINVAL),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o777, A, USERS)]),
        // RENAME_EXCHANGE: both names must exist (ENOENT, before any write check); each side is
        // removed from its directory (write, the sticky bit), and a directory changing parent
        // needs write on itself; the kinds need not match.
        case("exchange with a missing name", BOB, Rename2("d/f", "d/g", Exchange), Err(ENOENT),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("exchange with a missing name without write: ENOENT first", BOB, Rename2("d/f", "d/g", Exchange), Err(ENOENT),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("exchange of a missing name with an existing one", BOB, Rename2("d/nothing", "d/g", Exchange), Err(ENOENT),
             &[dir("d", 0o777, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("exchange two files", BOB, Rename2("d/f", "d/g", Exchange), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o600, A, USERS), file("d/g", 0o644, B, BOBS)])
            .then("d/f", 0o644, B, BOBS),
        case("exchange without write", BOB, Rename2("d/f", "d/g", Exchange), Err(EACCES),
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS), file("d/g", 0o644, A, USERS)]),
        case("exchange onto itself without write", BOB, Rename2("d/f", "d/f", Exchange), ok,
             &[dir("d", 0o555, A, USERS), file("d/f", 0o644, A, USERS)]),
        case("exchange a file with a directory", BOB, Rename2("d/f", "d/e", Exchange), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), dir("d/e", 0o755, A, USERS)])
            .then("d/f", 0o755, A, USERS),
        case("exchange two others' directories within one parent", BOB, Rename2("d/s", "d/t", Exchange), ok,
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o755, A, USERS), dir("d/t", 0o700, A, USERS)])
            .then("d/s", 0o700, A, USERS),
        case("exchange two files across parents", BOB, Rename2("d/f", "e/g", Exchange), ok,
             &[dir("d", 0o777, A, USERS), file("d/f", 0o600, A, USERS), dir("e", 0o777, A, USERS), file("e/g", 0o644, B, BOBS)])
            .then("e/g", 0o600, A, USERS),
        case("exchange across parents, the target's not writable", BOB, Rename2("d/f", "e/g", Exchange), Err(EACCES),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, A, USERS), dir("e", 0o755, A, USERS), file("e/g", 0o644, A, USERS)]),
        case("exchange across parents, the source's not writable", BOB, Rename2("d/f", "e/g", Exchange), Err(EACCES),
             &[dir("d", 0o755, A, USERS), file("d/f", 0o644, A, USERS), dir("e", 0o777, A, USERS), file("e/g", 0o644, A, USERS)]),
        case("exchange in a sticky directory, another's target", BOB, Rename2("t/f", "t/g", Exchange), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, B, BOBS), file("t/g", 0o644, A, USERS)]),
        case("exchange in a sticky directory, another's source", BOB, Rename2("t/f", "t/g", Exchange), Err(EPERM),
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o644, A, USERS), file("t/g", 0o644, B, BOBS)]),
        case("exchange in a sticky directory, both one's own", BOB, Rename2("t/f", "t/g", Exchange), ok,
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o600, B, BOBS), file("t/g", 0o644, B, BOBS)])
            .then("t/f", 0o644, B, BOBS),
        case("exchange in a sticky directory by its owner", ALICE, Rename2("t/f", "t/g", Exchange), ok,
             &[dir("t", 0o1777, A, USERS), file("t/f", 0o600, B, BOBS), file("t/g", 0o644, 0, 0)])
            .then("t/f", 0o644, 0, 0),
        case("exchange by root in a sticky directory", ROOT_USER, Rename2("t/f", "t/g", Exchange), ok,
             &[dir("t", 0o1777, 0, 0), file("t/f", 0o600, A, USERS), file("t/g", 0o644, B, BOBS)])
            .then("t/f", 0o644, B, BOBS),
        case("exchange with another's file in a sticky directory across parents", BOB, Rename2("d/f", "t/g", Exchange), Err(EPERM),
             &[dir("d", 0o777, 0, 0), file("d/f", 0o644, B, BOBS), dir("t", 0o1777, 0, 0), file("t/g", 0o644, A, USERS)]),
        case("exchange a directory across parents without write on it", BOB, Rename2("d/s", "e/f", Exchange), Err(EACCES),
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o755, A, USERS), dir("e", 0o777, A, USERS), file("e/f", 0o644, B, BOBS)]),
        case("exchange across parents with a directory target one cannot write", BOB, Rename2("d/f", "e/s", Exchange), Err(EACCES),
             &[dir("d", 0o777, A, USERS), file("d/f", 0o644, B, BOBS), dir("e", 0o777, A, USERS), dir("e/s", 0o755, A, USERS)]),
        case("exchange a directory one may write across parents", BOB, Rename2("d/s", "e/f", Exchange), ok,
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o777, A, USERS), dir("e", 0o777, A, USERS), file("e/f", 0o644, B, BOBS)])
            .then("e/f", 0o777, A, USERS),
        case("exchange two directories across parents, one not writable", BOB, Rename2("d/s", "e/t", Exchange), Err(EACCES),
             &[dir("d", 0o777, A, USERS), dir("d/s", 0o777, A, USERS), dir("e", 0o777, A, USERS), dir("e/t", 0o755, A, USERS)]),
        case("exchange a directory with an entry inside it: EINVAL first", BOB, Rename2("d/s", "d/s/x", Exchange), Err(EINVAL),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o555, A, USERS), file("d/s/x", 0o644, A, USERS)]),
        case("exchange an entry with a directory above it: EINVAL first", BOB, Rename2("d/s/x", "d/s", Exchange), Err(EINVAL),
             &[dir("d", 0o555, A, USERS), dir("d/s", 0o555, A, USERS), file("d/s/x", 0o644, A, USERS)]),
        // Extended attributes in user.: regular files and directories only (EPERM to change,
        // ENODATA to read, on anything else, even for root), by the mode bits, and in a sticky
        // directory changed by its owner or root alone.
        case("user xattr set on one's own file", ALICE, SetX("d/f", "user.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("user xattr set on another's file without write", BOB, SetX("d/f", "user.a", b"v", Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("user xattr set on another's writable file", BOB, SetX("d/f", "user.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("user xattr set by the owner without write bits", ALICE, SetX("d/f", "user.a", b"v", Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o466, A, USERS)]),
        case("user xattr set through a supplementary group", ALICE, SetX("d/f", "user.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o060, B, STAFF)]),
        case("user xattr set by root on a mode-0 file", ROOT_USER, SetX("d/f", "user.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("user xattr set in a directory one cannot search", BOB, SetX("d/f", "user.a", b"v", Either), Err(EACCES),
             &[dir("d", 0o744, A, USERS), file("d/f", 0o666, A, USERS)]),
        case("user xattr set by squashed root on root's file", SQUASHED, SetX("d/f", "user.a", b"v", Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, 0, 0)]),
        case("user xattr get with read", BOB, GetX("d/f", "user.a"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")])
            .shows(b"1"),
        case("user xattr get without read", BOB, GetX("d/f", "user.a"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("user.a", b"1")]),
        case("user xattr get of a missing name", BOB, GetX("d/f", "user.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("user xattr get of a missing name without read: EACCES first", BOB, GetX("d/f", "user.a"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS)]),
        case("user xattr get by root of a mode-0 file", ROOT_USER, GetX("d/f", "user.a"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS).x("user.a", b"root reads")])
            .shows(b"root reads"),
        case("user xattr set on another's directory one may write", BOB, SetX("d/e", "user.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o777, A, USERS)]),
        case("user xattr get on a directory one cannot read", BOB, GetX("d/e", "user.a"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o711, A, USERS).x("user.a", b"1")]),
        case("user xattr set on another's sticky directory", BOB, SetX("t", "user.a", b"v", Either), Err(EPERM),
             &[dir("t", 0o1777, A, USERS)]),
        case("user xattr set on one's own sticky directory", ALICE, SetX("t", "user.a", b"v", Either), ok,
             &[dir("t", 0o1777, A, USERS)]),
        case("user xattr set on a sticky directory by root", ROOT_USER, SetX("t", "user.a", b"v", Either), ok,
             &[dir("t", 0o1777, A, USERS)]),
        case("user xattr get on another's sticky directory", BOB, GetX("t", "user.a"), ok,
             &[dir("t", 0o1777, A, USERS).x("user.a", b"sticky")])
            .shows(b"sticky"),
        case("user xattr remove on another's sticky directory", BOB, RemoveX("t", "user.a"), Err(EPERM),
             &[dir("t", 0o1777, A, USERS).x("user.a", b"1")]),
        case("user xattr set on another's sticky directory one may not write: EPERM first", BOB, SetX("t", "user.a", b"v", Either), Err(EPERM),
             &[dir("t", 0o1755, A, USERS)]),
        case("user xattr set on one's own symlink", ALICE, SetX("d/l", "user.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("user xattr get on a symlink", BOB, GetX("d/l", "user.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("user xattr remove on one's own symlink", ALICE, RemoveX("d/l", "user.a"), Err(EPERM),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("user xattr set on one's own fifo", ALICE, SetX("d/p", "user.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o666, A, USERS)]),
        case("user xattr set by root on a fifo", ROOT_USER, SetX("d/p", "user.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o666, A, USERS)]),
        case("user xattr get on a fifo", BOB, GetX("d/p", "user.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o666, A, USERS)]),
        case("user xattr set on one's own socket", ALICE, SetX("d/s", "user.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), socket("d/s", 0o666, A, USERS)]),
        case("user xattr remove without write", BOB, RemoveX("d/f", "user.a"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr remove with write", BOB, RemoveX("d/f", "user.a"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS).x("user.a", b"1")]),
        case("user xattr remove of a missing name", ALICE, RemoveX("d/f", "user.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("user xattr create of an existing name: EEXIST", ALICE, SetX("d/f", "user.a", b"v", XCreate), Err(EEXIST),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr create of a new name", ALICE, SetX("d/f", "user.b", b"v", XCreate), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr replace of a missing name: ENODATA", ALICE, SetX("d/f", "user.b", b"v", XReplace), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr replace of an existing name", ALICE, SetX("d/f", "user.a", b"v", XReplace), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr create of an existing name without write: EACCES first", BOB, SetX("d/f", "user.a", b"v", XCreate), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("user xattr replace of a missing name without write: EACCES first", BOB, SetX("d/f", "user.b", b"v", XReplace), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set with an empty name: ERANGE", ALICE, SetX("d/f", "", b"v", Either), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set with a 256-byte name: ERANGE", ALICE, SetX("d/f", name_256, b"v", Either), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set with a 255-byte name", ALICE, SetX("d/f", name_255, b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr get with an empty name: ERANGE", ALICE, GetX("d/f", ""), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr get with a 256-byte name: ERANGE", ALICE, GetX("d/f", name_256), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr remove with a 256-byte name: ERANGE", ALICE, RemoveX("d/f", name_256), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr get with an empty name without read: ERANGE first", BOB, GetX("d/f", ""), Err(ERANGE),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS)]),
        case("xattr set of a 65537-byte value: E2BIG", ALICE, SetX("d/f", "user.a", value_65537, Either), Err(E2BIG),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set of a 65537-byte value without write: E2BIG first", BOB, SetX("d/f", "user.a", value_65537, Either), Err(E2BIG),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set of a bare user. prefix: EINVAL", ALICE, SetX("d/f", "user.", b"v", Either), Err(EINVAL),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set of a bare user. prefix without write: EACCES first", BOB, SetX("d/f", "user.", b"v", Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        // trusted.: root's alone; anyone else reads nothing (ENODATA) and changes nothing (EPERM).
        case("trusted xattr set by a user on its own file", ALICE, SetX("d/f", "trusted.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("trusted xattr get by a user", ALICE, GetX("d/f", "trusted.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("trusted.a", b"1")]),
        case("trusted xattr get of a missing name by a user", ALICE, GetX("d/f", "trusted.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("trusted xattr remove by a user", ALICE, RemoveX("d/f", "trusted.a"), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("trusted.a", b"1")]),
        case("trusted xattr get by root", ROOT_USER, GetX("d/f", "trusted.a"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("trusted.a", b"for root")])
            .shows(b"for root"),
        case("trusted xattr set by root", ROOT_USER, SetX("d/f", "trusted.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("trusted xattr remove by root", ROOT_USER, RemoveX("d/f", "trusted.a"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("trusted.a", b"1")]),
        case("trusted xattr set by root on a symlink", ROOT_USER, SetX("d/l", "trusted.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("trusted xattr get by root on a fifo", ROOT_USER, GetX("d/p", "trusted.a"), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o600, A, USERS).x("trusted.a", b"fifo")])
            .shows(b"fifo"),
        case("trusted xattr set by squashed root", SQUASHED, SetX("d/f", "trusted.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, 0, 0)]),
        case("trusted xattr get by squashed root", SQUASHED, GetX("d/f", "trusted.a"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, 0, 0).x("trusted.a", b"1")]),
        case("trusted xattr set by a user on its own directory", ALICE, SetX("d/e", "trusted.a", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o777, A, USERS)]),
        case("trusted xattr set by root on a mode-0 directory", ROOT_USER, SetX("d/e", "trusted.a", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o000, A, USERS)]),
        // security.: anyone reads, whatever the mode; only root changes.
        case("security xattr get of another's private file", BOB, GetX("d/f", "security.test"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("security.test", b"label")])
            .shows(b"label"),
        case("security xattr get of a missing name", BOB, GetX("d/f", "security.test"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("security xattr set by the owner", ALICE, SetX("d/f", "security.test", b"v", Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("security xattr remove by the owner", ALICE, RemoveX("d/f", "security.test"), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("security.test", b"label")]),
        case("security xattr set by root", ROOT_USER, SetX("d/f", "security.test", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS)]),
        case("security xattr set by root on a symlink", ROOT_USER, SetX("d/l", "security.test", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("security xattr get of a symlink", BOB, GetX("d/l", "security.test"), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS).x("security.test", b"link")])
            .shows(b"link"),
        case("security xattr get of a directory one cannot read", BOB, GetX("d/e", "security.test"), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o700, A, USERS).x("security.test", b"dir")])
            .shows(b"dir"),
        case("security xattr set by root on a fifo", ROOT_USER, SetX("d/p", "security.test", b"v", Either), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o600, A, USERS)]),
        // POSIX ACLs: anyone reads; the owner or root sets; a default ACL only on a directory
        // (EACCES elsewhere); the value must be one. Values are never compared: Linux keeps an
        // ACL that says no more than the mode as the mode alone.
        case("access ACL set by the owner", ALICE, SetX("d/f", "system.posix_acl_access", acl_644, Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set on another's writable file", BOB, SetX("d/f", "system.posix_acl_access", acl_644, Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o666, A, USERS)]),
        case("access ACL set by root", ROOT_USER, SetX("d/f", "system.posix_acl_access", acl_644, Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set on one's own fifo", ALICE, SetX("d/p", "system.posix_acl_access", acl_644, Either), ok,
             &[dir("d", 0o755, 0, 0), fifo("d/p", 0o644, A, USERS)]),
        case("default ACL set on one's own file: EACCES", ALICE, SetX("d/f", "system.posix_acl_default", acl_644, Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("default ACL set on another's file: EACCES first", BOB, SetX("d/f", "system.posix_acl_default", acl_644, Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set on one's own directory", ALICE, SetX("d/e", "system.posix_acl_access", acl_644, Either), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o644, A, USERS)]),
        case("access ACL get of another's directory one cannot read", BOB, GetX("d/e", "system.posix_acl_access"), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)]),
        case("default ACL set on one's own directory", ALICE, SetX("d/e", "system.posix_acl_default", acl_644, Either), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o755, A, USERS)]),
        case("default ACL set on another's writable directory", BOB, SetX("d/e", "system.posix_acl_default", acl_644, Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o777, A, USERS)]),
        case("access ACL get of another's file", BOB, GetX("d/f", "system.posix_acl_access"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)]),
        case("access ACL get of a file that has none", BOB, GetX("d/f", "system.posix_acl_access"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS)]),
        case("default ACL get of a file", BOB, GetX("d/f", "system.posix_acl_default"), Err(ENODATA),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL remove by another", BOB, RemoveX("d/f", "system.posix_acl_access"), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)]),
        case("access ACL remove by the owner", ALICE, RemoveX("d/f", "system.posix_acl_access"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)]),
        case("access ACL set to something not an ACL: EINVAL", ALICE, SetX("d/f", "system.posix_acl_access", not_an_acl, Either), Err(EINVAL),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set to something not an ACL on another's file: EINVAL first", BOB, SetX("d/f", "system.posix_acl_access", not_an_acl, Either), Err(EINVAL),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set, well formed but not valid, on another's file: EPERM first", BOB, SetX("d/f", "system.posix_acl_access", acl_owner_only, Either), Err(EPERM),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set, well formed but not valid, by the owner", ALICE, SetX("d/f", "system.posix_acl_access", acl_owner_only, Either), Err(EINVAL),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set to a version 3 value: EOPNOTSUPP", ALICE, SetX("d/f", "system.posix_acl_access", acl_version_3, Either), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set to a header with no entries removes it", ALICE, SetX("d/f", "system.posix_acl_access", acl_no_entries, Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)]),
        case("access ACL remove when there is none", ALICE, RemoveX("d/f", "system.posix_acl_access"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("default ACL remove from one's own file", ALICE, RemoveX("d/f", "system.posix_acl_default"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("access ACL set on one's own symlink: EOPNOTSUPP", ALICE, SetX("d/l", "system.posix_acl_access", acl_644, Either), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("access ACL set on another's symlink: EOPNOTSUPP first", BOB, SetX("d/l", "system.posix_acl_access", acl_644, Either), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        case("access ACL get of a symlink: EOPNOTSUPP", BOB, GetX("d/l", "system.posix_acl_access"), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS)]),
        // Other names: the generic permission check first, then no handler (EOPNOTSUPP);
        // system. names skip the check.
        case("xattr set of an unknown namespace without write: EACCES first", BOB, SetX("d/f", "other.a", b"v", Either), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set of an unknown namespace: EOPNOTSUPP", ALICE, SetX("d/f", "other.a", b"v", Either), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr get of an unknown namespace without read: EACCES first", BOB, GetX("d/f", "other.a"), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS)]),
        case("xattr get of an unknown namespace: EOPNOTSUPP", BOB, GetX("d/f", "other.a"), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr set of another system. name without write: EOPNOTSUPP", BOB, SetX("d/f", "system.other", b"v", Either), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        case("xattr remove of another system. name", ALICE, RemoveX("d/f", "system.other"), Err(EOPNOTSUPP),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)]),
        // LISTXATTR: no permission on the inode; trusted. names only for root.
        case("listxattr by the owner hides trusted names", ALICE, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1").x("trusted.a", b"2").x("security.test", b"3")])
            .lists(&["security.test", "user.a"]),
        case("listxattr by root shows them", ROOT_USER, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("user.a", b"1").x("trusted.a", b"2").x("security.test", b"3")])
            .lists(&["security.test", "trusted.a", "user.a"]),
        case("listxattr of another's mode-0 file", BOB, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o000, A, USERS).x("user.a", b"1").x("user.b", b"2")])
            .lists(&["user.a", "user.b"]),
        case("ACL: a named user's --- shuts him out of a 0644 file", BOB, Open("d/f", O_RDONLY), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS).x("system.posix_acl_access", acl_not_bob)]),
        case("ACL: others still read it", ALICE, Open("d/f", O_RDONLY), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, B, BOBS).x("system.posix_acl_access", acl_not_bob)]),
        case("ACL: a named user reads what the mask leaves him", BOB, Open("d/f", O_RDONLY), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("system.posix_acl_access", acl_bob_masked)]),
        case("ACL: and not what the mask takes away", BOB, Open("d/f", O_WRONLY), Err(EACCES),
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("system.posix_acl_access", acl_bob_masked)]),
        case("ACL: a named supplementary group writes", ALICE, Open("d/f", O_RDWR), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, B, BOBS).x("system.posix_acl_access", acl_staff)]),
        case("ACL: truncate by a named group's write", ALICE, Truncate("d/f", 0), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, B, BOBS).x("system.posix_acl_access", acl_staff)]),
        case("ACL: a named user creates in another's directory", BOB, Create("d/e/new", 0o644), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o755, A, USERS).x("system.posix_acl_access", acl_bob_dir)]),
        case("ACL: a named user removes from another's directory", BOB, Unlink("d/e/f"), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o755, A, USERS).x("system.posix_acl_access", acl_bob_dir),
               file("d/e/f", 0o644, A, USERS)]),
        case("ACL: a chmod by the owner sets the mask", ALICE, Chmod("d/f", 0o604), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS).x("system.posix_acl_access", acl_bob_masked)])
            .then("d/f", 0o604, A, USERS),
        case("ACL: a file made in a directory with a default ACL takes it", ALICE, Create("d/e/new", 0o666), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o755, A, USERS).x("system.posix_acl_default", default_bob)])
            .then("d/e/new", 0o660, A, USERS),
        case("ACL: a directory made there keeps it", ALICE, Mkdir("d/e/sub", 0o777), ok,
             &[dir("d", 0o755, 0, 0), dir("d/e", 0o755, A, USERS).x("system.posix_acl_default", default_bob)])
            .then("d/e/sub", 0o770, A, USERS),
        case("ACL: an access ACL set by the owner sets the mode", ALICE, SetX("d/f", "system.posix_acl_access", acl_bob_dir, Either), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o600, A, USERS)])
            .then("d/f", 0o775, A, USERS),
        case("listxattr of a file with none", BOB, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, A, USERS)])
            .lists(&[]),
        case("listxattr of a file with an ACL", BOB, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o640, A, USERS).x("system.posix_acl_access", acl_alice)])
            .lists(&["system.posix_acl_access"]),
        case("listxattr of a symlink by another", BOB, ListX("d/l"), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS).x("trusted.a", b"1").x("security.test", b"2")])
            .lists(&["security.test"]),
        case("listxattr of a symlink by root", ROOT_USER, ListX("d/l"), ok,
             &[dir("d", 0o755, 0, 0), symlink("d/l", "f", A, USERS).x("trusted.a", b"1").x("security.test", b"2")])
            .lists(&["security.test", "trusted.a"]),
        case("listxattr in a directory one cannot search", BOB, ListX("d/f"), Err(EACCES),
             &[dir("d", 0o744, A, USERS), file("d/f", 0o644, A, USERS).x("user.a", b"1")]),
        case("listxattr by squashed root hides trusted names", SQUASHED, ListX("d/f"), ok,
             &[dir("d", 0o755, 0, 0), file("d/f", 0o644, 0, 0).x("user.a", b"1").x("trusted.a", b"2")])
            .lists(&["user.a"]),
    ]
}

// ---------------------------------------------------------------------------------------------
// The kernel's side.

/// One system call, its arguments built before the fork.
enum Call {
    Stat(CString),
    OpenDir(CString),
    Create(CString, u32),
    Mkdir(CString, u32),
    Unlink(CString),
    Rmdir(CString),
    Rename(CString, CString),
    Chmod(CString, u32),
    Chown(CString, u32, u32),
    Utimes(CString, i64),
    /// `utimensat(AT_SYMLINK_NOFOLLOW)`, times NULL or these.
    Times(CString, Option<[libc::timespec; 2]>),
    Truncate(CString, u64),
    Link(CString, CString),
    /// (target, path).
    Symlink(CString, CString),
    Readlink(CString),
    /// Path, mode with the file-type bits, device.
    Mknod(CString, u32, libc::dev_t),
    /// From, to, `renameat2` flags.
    Rename2(CString, CString, libc::c_uint),
    SetX(CString, CString, &'static [u8], libc::c_int),
    GetX(CString, CString),
    ListX(CString),
    RemoveX(CString, CString),
    /// Path, `open(2)` flags.
    Open(CString, libc::c_int),
    /// One byte at offset 0 through a descriptor opened to write.
    Write(CString),
}

fn c_path(root: &Path, path: &str) -> CString {
    CString::new(root.join(path).as_os_str().as_bytes()).expect("no NUL in test paths")
}

fn c_str(s: &str) -> CString {
    CString::new(s).expect("no NUL in test names")
}

/// The exit status of a child that could not take on the caller's identity.
const COULD_NOT_BECOME: i32 = 255;

/// Room for anything the child reads: a target, a value, a list of names.
const READ_ROOM: usize = 1 << 17;

/// Linux's `renameat2` flags.
const RENAME_NOREPLACE: libc::c_uint = 1;
const RENAME_EXCHANGE: libc::c_uint = 2;

const NS: i64 = 1_000_000_000;

fn timespec(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// Asks the kernel, as `user`, to do `act` under `root`: Ok, or the errno it answered; and
/// what it read, for the operations that read something.
fn kernel(user: User, root: &Path, act: Act) -> (Result<(), i32>, Option<Shown>) {
    let user = if user.squashed { SQUASHED_AS } else { user };
    let p = |path| c_path(root, path);
    let call = match act {
        Lookup(path) => Call::Stat(p(path)),
        Readdir(path) => Call::OpenDir(p(path)),
        Create(path, mode) => Call::Create(p(path), mode),
        Mkdir(path, mode) => Call::Mkdir(p(path), mode),
        Unlink(path) => Call::Unlink(p(path)),
        Rmdir(path) => Call::Rmdir(p(path)),
        Rename(from, to) => Call::Rename(p(from), p(to)),
        Chmod(path, mode) => Call::Chmod(p(path), mode),
        Chown(path, uid) => Call::Chown(p(path), uid, u32::MAX),
        Chgrp(path, gid) => Call::Chown(p(path), u32::MAX, gid),
        Utimes(path, secs) => Call::Utimes(p(path), secs),
        Times(path, when) => Call::Times(
            p(path),
            match when {
                When::Null => None,
                When::NowNow => Some([timespec(0, libc::UTIME_NOW); 2]),
                When::NowOmit => {
                    Some([timespec(0, libc::UTIME_NOW), timespec(0, libc::UTIME_OMIT)])
                }
                When::At(secs) => Some([timespec(secs, 0); 2]),
            },
        ),
        Truncate(path, size) => Call::Truncate(p(path), size),
        Open(path, how) => Call::Open(p(path), open_flags(how)),
        Write(path) => Call::Write(p(path)),
        Link(from, to) => Call::Link(p(from), p(to)),
        Symlink(path, target) => Call::Symlink(c_str(target), p(path)),
        Readlink(path) => Call::Readlink(p(path)),
        Mknod(path, kind, mode, rdev) => Call::Mknod(p(path), kind.mode_bits() | mode, rdev),
        Rename2(from, to, how) => Call::Rename2(
            p(from),
            p(to),
            match how {
                RenameHow::Replace => 0,
                RenameHow::NoReplace => RENAME_NOREPLACE,
                RenameHow::Exchange => RENAME_EXCHANGE,
            },
        ),
        SetX(path, name, value, how) => Call::SetX(
            p(path),
            c_str(name),
            value,
            match how {
                XattrSet::Either => 0,
                XattrSet::Create => libc::XATTR_CREATE,
                XattrSet::Replace => libc::XATTR_REPLACE,
            },
        ),
        GetX(path, name) => Call::GetX(p(path), c_str(name)),
        ListX(path) => Call::ListX(p(path)),
        RemoveX(path, name) => Call::RemoveX(p(path), c_str(name)),
    };
    let groups: Vec<libc::gid_t> = user.groups.to_vec();
    let mut room = vec![0u8; READ_ROOM];
    let mut pipe = [0; 2];
    // SAFETY: fills the two descriptors.
    let piped = unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(piped, 0, "pipe2: {}", std::io::Error::last_os_error());
    let [read_end, write_end] = pipe;
    // SAFETY: the child makes only system calls on memory built before the fork, then exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: as above; this never returns.
        unsafe { become_and_call(&groups, user.uid, user.gid, &call, &mut room, write_end) }
    }
    // SAFETY: the parent's copy of the write end, which it does not use; and the read end,
    // which the file owns from here.
    let mut read = unsafe {
        libc::close(write_end);
        std::fs::File::from_raw_fd(read_end)
    };
    let mut out = Vec::new();
    read.read_to_end(&mut out)
        .expect("reading what the child read");
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &raw mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "the child died: status {status:#x}"
    );
    let answer = match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        COULD_NOT_BECOME => panic!("could not take on uid {} gid {}", user.uid, user.gid),
        errno => Err(errno),
    };
    let shown = match (answer, act) {
        (Ok(()), Readlink(_) | GetX(..)) => Some(vec![out]),
        (Ok(()), ListX(_)) => {
            let mut names: Shown = out
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            names.sort();
            Some(names)
        }
        _ => None,
    };
    (answer, shown)
}

/// In the forked child: takes on the identity (raw system calls, which change this thread's
/// credentials only — the child has no other), clears the umask so modes are taken as asked,
/// makes the call, writes what it read (if anything) to `out`, and exits with its errno (0 for
/// success).
unsafe fn become_and_call(
    groups: &[libc::gid_t],
    uid: u32,
    gid: u32,
    call: &Call,
    room: &mut [u8],
    out: libc::c_int,
) -> ! {
    // SAFETY: system calls on live memory only.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0
            || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
            || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
        {
            libc::_exit(COULD_NOT_BECOME);
        }
        libc::umask(0);
        let at = libc::AT_FDCWD;
        let buf = room.as_mut_ptr();
        // A call that reads returns how much (or -1); the others 0 (or -1).
        let rc: isize = match call {
            Call::Stat(p) => {
                let mut st: libc::stat = std::mem::zeroed();
                libc::fstatat(at, p.as_ptr(), &raw mut st, libc::AT_SYMLINK_NOFOLLOW) as isize
            }
            Call::OpenDir(p) => {
                let fd = libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                (if fd >= 0 { libc::close(fd) } else { fd }) as isize
            }
            Call::Create(p, mode) => {
                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                let fd = libc::open(p.as_ptr(), flags, *mode);
                (if fd >= 0 { libc::close(fd) } else { fd }) as isize
            }
            Call::Mkdir(p, mode) => libc::mkdir(p.as_ptr(), *mode) as isize,
            Call::Unlink(p) => libc::unlink(p.as_ptr()) as isize,
            Call::Rmdir(p) => libc::rmdir(p.as_ptr()) as isize,
            Call::Rename(from, to) => libc::rename(from.as_ptr(), to.as_ptr()) as isize,
            Call::Chmod(p, mode) => libc::chmod(p.as_ptr(), *mode) as isize,
            Call::Chown(p, uid, gid) => libc::chown(p.as_ptr(), *uid, *gid) as isize,
            Call::Utimes(p, secs) => {
                let times = [timespec(0, libc::UTIME_OMIT), timespec(*secs, 0)];
                libc::utimensat(at, p.as_ptr(), times.as_ptr(), 0) as isize
            }
            Call::Times(p, times) => {
                let times = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                libc::utimensat(at, p.as_ptr(), times, libc::AT_SYMLINK_NOFOLLOW) as isize
            }
            Call::Truncate(p, size) => libc::truncate(p.as_ptr(), *size as libc::off_t) as isize,
            Call::Link(from, to) => libc::linkat(at, from.as_ptr(), at, to.as_ptr(), 0) as isize,
            Call::Symlink(target, p) => libc::symlinkat(target.as_ptr(), at, p.as_ptr()) as isize,
            Call::Readlink(p) => libc::readlinkat(at, p.as_ptr(), buf.cast(), room.len()),
            Call::Mknod(p, mode, dev) => libc::mknodat(at, p.as_ptr(), *mode, *dev) as isize,
            Call::Rename2(from, to, flags) => libc::syscall(
                libc::SYS_renameat2,
                at,
                from.as_ptr(),
                at,
                to.as_ptr(),
                *flags,
            ) as isize,
            Call::SetX(p, name, value, flags) => libc::lsetxattr(
                p.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                *flags,
            ) as isize,
            Call::GetX(p, name) => {
                libc::lgetxattr(p.as_ptr(), name.as_ptr(), buf.cast(), room.len())
            }
            Call::ListX(p) => libc::llistxattr(p.as_ptr(), buf.cast(), room.len()),
            Call::RemoveX(p, name) => libc::lremovexattr(p.as_ptr(), name.as_ptr()) as isize,
            Call::Open(p, flags) => {
                let fd = libc::open(p.as_ptr(), *flags);
                (if fd >= 0 { libc::close(fd) } else { fd }) as isize
            }
            Call::Write(p) => {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_NOFOLLOW);
                if fd < 0 {
                    -1
                } else {
                    let written = libc::pwrite(fd, b"x".as_ptr().cast(), 1, 0);
                    libc::close(fd);
                    if written < 0 { -1 } else { 0 }
                }
            }
        };
        if rc < 0 {
            libc::_exit(*libc::__errno_location());
        }
        if matches!(call, Call::Readlink(_) | Call::GetX(..) | Call::ListX(_)) {
            let mut written = 0;
            while written < rc {
                let n = libc::write(out, buf.offset(written).cast(), (rc - written) as usize);
                if n <= 0 {
                    break;
                }
                written += n;
            }
        }
        libc::_exit(0)
    }
}

/// The server's name for a kernel errno.
fn errno_name(errno: i32) -> Option<Errno> {
    Some(match errno {
        libc::EACCES => EACCES,
        libc::EPERM => EPERM,
        libc::ENOENT => ENOENT,
        libc::EEXIST => EEXIST,
        libc::ENOTDIR => ENOTDIR,
        libc::EISDIR => EISDIR,
        libc::ENOTEMPTY => ENOTEMPTY,
        libc::EINVAL => EINVAL,
        libc::ENAMETOOLONG => ENAMETOOLONG,
        libc::EMLINK => EMLINK,
        libc::ENODATA => ENODATA,
        libc::ERANGE => ERANGE,
        libc::E2BIG => E2BIG,
        libc::EOPNOTSUPP => EOPNOTSUPP,
        libc::ELOOP => ELOOP,
        libc::EBADF => EBADF,
        libc::EFBIG => EFBIG,
        _ => return None,
    })
}

/// Makes a case's tree under `root` as root: each inode, then its owner, then its mode (a new
/// owner would drop set-ID bits set before it), then its extended attributes (an access ACL
/// sets the group bits from its mask: the cases give the mode it leaves).
fn kernel_tree(root: &Path, tree: &[Node]) {
    std::fs::create_dir(root).unwrap();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    for node in tree {
        let path = root.join(node.path);
        let c = c_path(root, node.path);
        let special = |kind: u32| {
            // SAFETY: a path that lives across the call.
            let rc = unsafe { libc::mknod(c.as_ptr(), kind | 0o600, 0) };
            assert_eq!(
                rc,
                0,
                "mknod {}: {}",
                node.path,
                std::io::Error::last_os_error()
            );
        };
        match node.make {
            Make::Dir => std::fs::create_dir(&path).unwrap(),
            Make::File => drop(std::fs::File::create(&path).unwrap()),
            Make::Symlink(target) => std::os::unix::fs::symlink(target, &path).unwrap(),
            Make::Fifo => special(libc::S_IFIFO),
            Make::Socket => special(libc::S_IFSOCK),
        }
        std::os::unix::fs::lchown(&path, Some(node.uid), Some(node.gid)).unwrap();
        if !matches!(node.make, Make::Symlink(_)) {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(node.mode)).unwrap();
        }
        for (name, value) in &node.xattrs {
            let name = c_str(name);
            // SAFETY: a path, a name and a value that live across the call.
            let rc = unsafe {
                libc::lsetxattr(
                    c.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            };
            assert_eq!(
                rc,
                0,
                "lsetxattr {name:?} on {}: {}",
                node.path,
                std::io::Error::last_os_error()
            );
        }
    }
}

fn kernel_owner(root: &Path, path: &str) -> Option<Owner> {
    let meta = std::fs::symlink_metadata(root.join(path)).ok()?;
    Some((meta.mode() & 0o7777, meta.uid(), meta.gid()))
}

// ---------------------------------------------------------------------------------------------
// The server's side.

/// An operation refused: which request of the ones the client sent refused it (a path is
/// walked by LOOKUPs first), and with what.
type Refusal = (&'static str, Errno);

/// `open(2)`'s flags for OPEN's: never following a symlink (as the server opens none), never
/// blocking (a fifo).
fn open_flags(how: OpenFlags) -> libc::c_int {
    let access = match (how.read, how.write) {
        (_, false) => libc::O_RDONLY,
        (false, true) => libc::O_WRONLY,
        (true, true) => libc::O_RDWR,
    };
    let truncate = if how.truncate { libc::O_TRUNC } else { 0 };
    access | truncate | libc::O_NOFOLLOW | libc::O_NONBLOCK
}

fn refusal(op: &'static str) -> impl Fn(ClientError) -> Refusal {
    move |e| {
        let errno = e
            .errno()
            .unwrap_or_else(|| panic!("{op}: not an answer: {e}"));
        (op, errno)
    }
}

/// Walks `path` (names separated by `/`) from `from` by LOOKUP: its attributes.
async fn walk(client: &Client, from: u64, path: &str) -> Result<Attr, Refusal> {
    let mut attr = client.getattr(from).await.map_err(refusal("getattr"))?;
    for name in path.split('/') {
        attr = client
            .lookup(attr.ino, name)
            .await
            .map_err(refusal("lookup"))?;
    }
    Ok(attr)
}

/// Walks to the parent of `path`: (its inode, the last name).
async fn walk_parent<'p>(
    client: &Client,
    from: u64,
    path: &'p str,
) -> Result<(u64, &'p str), Refusal> {
    match path.rsplit_once('/') {
        Some((parent, name)) => Ok((walk(client, from, parent).await?.ino, name)),
        None => Ok((from, path)),
    }
}

/// Asks the server, as `client`, to do `act` under directory `root`: what it read, for the
/// operations that read something.
async fn server(client: &Client, root: u64, act: Act) -> Result<Option<Shown>, Refusal> {
    let setattr = |path: &'static str, set: SetAttr| async move {
        let ino = walk(client, root, path).await?.ino;
        client
            .setattr(ino, set)
            .await
            .map(drop)
            .map_err(refusal("setattr"))
    };
    let done = Ok(None);
    match act {
        Lookup(path) => walk(client, root, path).await.and(done),
        Readdir(path) => {
            let ino = walk(client, root, path).await?.ino;
            client
                .readdir_all(ino)
                .await
                .map_err(refusal("readdir"))
                .and(done)
        }
        Create(path, mode) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .create(parent, name, mode)
                .await
                .map_err(refusal("create"))
                .and(done)
        }
        Mkdir(path, mode) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .mkdir(parent, name, mode)
                .await
                .map_err(refusal("mkdir"))
                .and(done)
        }
        Unlink(path) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .unlink(parent, name)
                .await
                .map_err(refusal("unlink"))
                .and(done)
        }
        Rmdir(path) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .rmdir(parent, name)
                .await
                .map_err(refusal("rmdir"))
                .and(done)
        }
        Rename(from, to) => {
            let (sp, sn) = walk_parent(client, root, from).await?;
            let (dp, dn) = walk_parent(client, root, to).await?;
            client
                .rename(sp, sn, dp, dn)
                .await
                .map_err(refusal("rename"))
                .and(done)
        }
        Rename2(from, to, how) => {
            let (sp, sn) = walk_parent(client, root, from).await?;
            let (dp, dn) = walk_parent(client, root, to).await?;
            client
                .rename_how(sp, sn, dp, dn, how)
                .await
                .map_err(refusal("rename"))
                .and(done)
        }
        Chmod(path, mode) => {
            let set = SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Chown(path, uid) => {
            let set = SetAttr {
                uid: Some(uid),
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Chgrp(path, gid) => {
            let set = SetAttr {
                gid: Some(gid),
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Utimes(path, secs) => {
            let set = SetAttr {
                mtime: Some(SetTime::At(secs * NS)),
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Times(path, when) => {
            let (atime, mtime) = match when {
                When::Null | When::NowNow => (Some(SetTime::Now), Some(SetTime::Now)),
                When::NowOmit => (Some(SetTime::Now), None),
                When::At(secs) => (Some(SetTime::At(secs * NS)), Some(SetTime::At(secs * NS))),
            };
            let set = SetAttr {
                atime,
                mtime,
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Truncate(path, size) => {
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            setattr(path, set).await.and(done)
        }
        Open(path, flags) => {
            let ino = walk(client, root, path).await?.ino;
            let open = Op::Open {
                ino,
                handle: 1,
                flags,
                reopen: false,
            };
            client.call(open).await.map_err(refusal("open"))?;
            client
                .call(Op::Release { handle: 1 })
                .await
                .map_err(refusal("release"))
                .and(done)
        }
        Write(path) => {
            let ino = walk(client, root, path).await?.ino;
            let (handle, _) = client.open(ino, O_WRONLY).await.map_err(refusal("open"))?;
            let written = client
                .write(handle, 0, b"x")
                .await
                .map_err(refusal("write"));
            client.release(handle).await.map_err(refusal("release"))?;
            written.and(done)
        }
        Link(from, to) => {
            let ino = walk(client, root, from).await?.ino;
            let (parent, name) = walk_parent(client, root, to).await?;
            client
                .link(ino, parent, name)
                .await
                .map_err(refusal("link"))
                .and(done)
        }
        Symlink(path, target) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .symlink(parent, name, target.as_bytes())
                .await
                .map_err(refusal("symlink"))
                .and(done)
        }
        Readlink(path) => {
            let ino = walk(client, root, path).await?.ino;
            let target = client.readlink(ino).await.map_err(refusal("readlink"))?;
            Ok(Some(vec![target]))
        }
        Mknod(path, kind, mode, rdev) => {
            let (parent, name) = walk_parent(client, root, path).await?;
            client
                .mknod(parent, name, kind, mode, rdev)
                .await
                .map_err(refusal("mknod"))
                .and(done)
        }
        SetX(path, name, value, how) => {
            let ino = walk(client, root, path).await?.ino;
            client
                .setxattr(ino, name, value, how)
                .await
                .map_err(refusal("setxattr"))
                .and(done)
        }
        GetX(path, name) => {
            let ino = walk(client, root, path).await?.ino;
            let value = client
                .getxattr(ino, name)
                .await
                .map_err(refusal("getxattr"))?;
            Ok(Some(vec![value]))
        }
        ListX(path) => {
            let ino = walk(client, root, path).await?.ino;
            let names = client.listxattr(ino).await.map_err(refusal("listxattr"))?;
            let mut names: Shown = names.into_iter().map(String::into_bytes).collect();
            names.sort();
            Ok(Some(names))
        }
        RemoveX(path, name) => {
            let ino = walk(client, root, path).await?.ino;
            client
                .removexattr(ino, name)
                .await
                .map_err(refusal("removexattr"))
                .and(done)
        }
    }
}

/// Makes a case's tree in a new directory `name` of the server's root, as root (`client`), in
/// the order [`kernel_tree`] makes it. Returns the directory's inode.
async fn server_tree(client: &Client, name: &str, tree: &[Node]) -> u64 {
    let root = client.mkdir(ROOT, name, 0o755).await.unwrap().ino;
    let mut inos: HashMap<&str, u64> = HashMap::new();
    for node in tree {
        let (parent, last) = match node.path.rsplit_once('/') {
            Some((parent, last)) => (inos[parent], last),
            None => (root, node.path),
        };
        let made = match node.make {
            Make::Dir => client.mkdir(parent, last, 0o700).await,
            Make::File => client.create(parent, last, 0o600).await,
            Make::Symlink(target) => client.symlink(parent, last, target.as_bytes()).await,
            Make::Fifo => client.mknod(parent, last, Kind::Fifo, 0o600, 0).await,
            Make::Socket => client.mknod(parent, last, Kind::Socket, 0o600, 0).await,
        };
        let ino = made
            .unwrap_or_else(|e| panic!("making {} on the server: {e}", node.path))
            .ino;
        let owner = SetAttr {
            uid: Some(node.uid),
            gid: Some(node.gid),
            ..SetAttr::default()
        };
        client.setattr(ino, owner).await.unwrap();
        if !matches!(node.make, Make::Symlink(_)) {
            let mode = SetAttr {
                mode: Some(node.mode),
                ..SetAttr::default()
            };
            client.setattr(ino, mode).await.unwrap();
        }
        for (name, value) in &node.xattrs {
            client
                .setxattr(ino, name, value, XattrSet::Either)
                .await
                .unwrap_or_else(|e| panic!("setting {name} on {} on the server: {e}", node.path));
        }
        inos.insert(node.path, ino);
    }
    root
}

async fn connect(addr: std::net::SocketAddr, user: User) -> Client {
    let cred = Cred {
        uid: user.uid,
        gid: user.gid,
        groups: user.groups.to_vec(),
    };
    Client::connect_session(addr, Arc::new(Session::with_cred(cred)))
        .await
        .expect("connecting")
}

// ---------------------------------------------------------------------------------------------
// The comparison.

/// What one case got.
struct Row {
    kernel: Option<Result<(), i32>>,
    server: Result<(), Refusal>,
    kernel_owner: Option<Owner>,
    server_owner: Option<Owner>,
    kernel_shown: Option<Shown>,
    server_shown: Option<Shown>,
}

fn show(answer: Result<(), Errno>) -> String {
    match answer {
        Ok(()) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

fn show_kernel(answer: Result<(), i32>) -> String {
    match answer {
        Ok(()) => "ok".into(),
        Err(e) => errno_name(e).map_or_else(|| format!("errno {e}"), |e| e.to_string()),
    }
}

fn show_owner(owner: Option<Owner>) -> String {
    owner.map_or_else(
        || "-".into(),
        |(mode, uid, gid)| format!("{mode:04o} {uid}:{gid}"),
    )
}

fn show_shown(shown: Option<&Shown>) -> String {
    shown.map_or_else(
        || "-".into(),
        |items| {
            let items: Vec<String> = items
                .iter()
                .map(|i| format!("{:?}", String::from_utf8_lossy(i)))
                .collect();
            format!("[{}]", items.join(", "))
        },
    )
}

/// Whether a case's answers, the kernel's and the server's, all agree with its `want`; the
/// problems, if not.
fn disagreements(case: &Case, row: &Row) -> Vec<String> {
    let mut problems = Vec::new();
    let server = row.server.map_err(|(_, e)| e);
    if server != case.want {
        problems.push(format!("server {}", show(server)));
    }
    if let Some(kernel) = row.kernel
        && kernel.map_err(|e| errno_name(e).ok_or(e)) != case.want.map_err(Ok)
    {
        problems.push(format!("kernel {}", show_kernel(kernel)));
    }
    if let Some((_, owner)) = case.then {
        if row.server_owner != Some(owner) {
            problems.push(format!("server's inode {}", show_owner(row.server_owner)));
        }
        if row.kernel.is_some() && row.kernel_owner != Some(owner) {
            problems.push(format!("kernel's inode {}", show_owner(row.kernel_owner)));
        }
    }
    if let Some(want) = &case.shows {
        if server.is_ok() && row.server_shown.as_ref() != Some(want) {
            problems.push(format!(
                "server read {}",
                show_shown(row.server_shown.as_ref())
            ));
        }
        if row.kernel == Some(Ok(())) && row.kernel_shown.as_ref() != Some(want) {
            problems.push(format!(
                "kernel read {}",
                show_shown(row.kernel_shown.as_ref())
            ));
        }
    }
    problems
}

fn table(cases: &[Case], rows: &[Row]) -> String {
    let mut out = format!(
        "{:>4}  {:<90} {:<14} {:<10} {:<10} {:<10} {}\n",
        "#", "case", "as", "want", "kernel", "server", "inode after (want / kernel / server)"
    );
    for (i, (case, row)) in cases.iter().zip(rows).enumerate() {
        let problems = disagreements(case, row);
        let mut after = match case.then {
            Some((path, owner)) => format!(
                "{path}: {} / {} / {}",
                show_owner(Some(owner)),
                show_owner(row.kernel_owner),
                show_owner(row.server_owner)
            ),
            None => String::new(),
        };
        if let Some(want) = &case.shows {
            after = format!(
                "read {} / {} / {}",
                show_shown(Some(want)),
                show_shown(row.kernel_shown.as_ref()),
                show_shown(row.server_shown.as_ref())
            );
        }
        let mark = if problems.is_empty() { ' ' } else { '!' };
        let _ = writeln!(
            out,
            "{mark}{i:>3}  {:<90} {:<14} {:<10} {:<10} {:<10} {after}",
            case.what,
            case.who.name,
            show(case.want),
            row.kernel.map_or_else(|| "-".into(), show_kernel),
            show(row.server.map_err(|(_, e)| e)),
        );
    }
    out
}

/// The operations whose refusals `mds_permission_denied_total` counts, by label (`Op::name`):
/// each series must exist from start-up and count exactly the EACCES and EPERM answers of its
/// operation.
const COUNTED: [&str; 14] = [
    "mkdir",
    "create",
    "lookup",
    "setattr",
    "readdir",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "symlink",
    "mknod",
    "setxattr",
    "getxattr",
    "removexattr",
];
/// Operations no permission check refuses (only the LOOKUPs on the way to their inode, counted
/// as those): their series need not exist, and count nothing if they do.
const NEVER_REFUSED: [&str; 2] = ["readlink", "listxattr"];

#[test]
fn the_server_answers_permission_questions_as_the_kernel_does() {
    let cases = cases();
    assert!(cases.len() >= 150, "the issue asks for at least 150 cases");
    // SAFETY: reads the process's effective uid.
    let ask_kernel = unsafe { libc::geteuid() } == 0;
    if !ask_kernel {
        eprintln!(
            "not running as root: the kernel cannot be asked as other users, so the server is \
             checked against the hand-written POSIX answers alone"
        );
    }
    let data = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // Other users must be able to reach the cases' directories.
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kernel_root = |i: usize| scratch.path().join(format!("c{i:02}"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rows: Vec<Option<Row>> = (0..cases.len()).map(|_| None).collect();
    let mut denied: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut miscounted: Vec<String> = Vec::new();

    // Each phase: a server, its clients by user, and the cases it answers. The trees are made
    // in the first, by a root that is not squashed; the second serves the same store squashing
    // root.
    let mut roots = vec![0u64; cases.len()];
    for squash in [false, true] {
        let mut config = common::config(data.path());
        // Every user's questions go over connections the test's own user holds, which need
        // not be root: credentials are taken as sent.
        config.keys.cred_check = mds::config::CredCheck::Off;
        config.keys.root_squash = if squash {
            mds::config::Switch::On
        } else {
            mds::config::Switch::Off
        };
        let server_process = InProcess::start(config);
        let addr = server_process.addr;
        rt.block_on(async {
            let admin = connect(addr, if squash { SQUASHED } else { ROOT_USER }).await;
            if !squash {
                for (i, case) in cases.iter().enumerate() {
                    roots[i] = server_tree(&admin, &format!("c{i:02}"), &case.tree).await;
                    if ask_kernel {
                        kernel_tree(&kernel_root(i), &case.tree);
                    }
                }
            }
            let mut clients: HashMap<&str, Client> = HashMap::new();
            for (i, case) in cases.iter().enumerate() {
                if case.who.squashed != squash {
                    continue;
                }
                if !clients.contains_key(case.who.name) {
                    clients.insert(case.who.name, connect(addr, case.who).await);
                }
                let (by_kernel, kernel_shown) = if ask_kernel {
                    let (answer, shown) = kernel(case.who, &kernel_root(i), case.act);
                    (Some(answer), shown)
                } else {
                    (None, None)
                };
                let answer = server(&clients[case.who.name], roots[i], case.act).await;
                if let Err((op, EACCES | EPERM)) = answer {
                    *denied.entry(op).or_default() += 1;
                }
                let (kernel_owner, server_owner) = match case.then {
                    Some((path, _)) => (
                        kernel_owner(&kernel_root(i), path),
                        walk(&admin, roots[i], path)
                            .await
                            .ok()
                            .map(|a| (a.mode, a.uid, a.gid)),
                    ),
                    None => (None, None),
                };
                rows[i] = Some(Row {
                    kernel: by_kernel,
                    server: answer.clone().map(drop),
                    kernel_owner,
                    server_owner,
                    kernel_shown,
                    server_shown: answer.ok().flatten(),
                });
            }
        });
        if squash {
            // Every refusal the server gave was counted, by the operation that gave it, and
            // nothing else was (the counters are process-wide: this is the only test here).
            let text = common::scrape(server_process.metrics);
            for op in COUNTED.iter().chain(&NEVER_REFUSED) {
                let series = format!("mds_permission_denied_total{{op=\"{op}\"}}");
                let counted = common::sample(&text, &series);
                let refused = denied.get(op).copied().unwrap_or(0) as f64;
                let right = counted == Some(refused)
                    || (NEVER_REFUSED.contains(op) && counted.is_none() && refused == 0.0);
                if !right {
                    miscounted.push(format!(
                        "{series} is {counted:?}; the server refused {refused} such requests \
                         with EACCES or EPERM"
                    ));
                }
            }
        }
        server_process.stop().unwrap();
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| r.expect("every case ran"))
        .collect();
    let mut wrong = cases
        .iter()
        .zip(&rows)
        .enumerate()
        .filter_map(|(i, (case, row))| {
            let problems = disagreements(case, row);
            (!problems.is_empty())
                .then(|| format!("case {i} ({}): {}", case.what, problems.join(", ")))
        })
        .collect::<Vec<_>>();
    wrong.extend(miscounted);
    eprintln!("{}", table(&cases, &rows));
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    eprintln!(
        "{} cases: the server answers as the rules say{}",
        cases.len(),
        if ask_kernel {
            ", and as the kernel does"
        } else {
            ""
        }
    );
    let (code, out) = common::fsck(data.path());
    assert_eq!(code, 0, "{out}");
}
