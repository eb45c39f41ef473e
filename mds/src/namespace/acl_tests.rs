//! POSIX ACLs through the namespace's operations, as Linux's file systems keep them: enforced
//! for everyone but the owner and root, an access ACL setting the mode (and not kept where the
//! mode says it all), a chmod setting the ACL, a directory's default ACL inherited by what is
//! made in it in place of the umask, and ACCESS judging all of it. Also execve(2)'s OPEN,
//! which asks for execute permission (by the mode or the ACL) instead of read.

use journal::ROOT_INO;

use super::acl::{ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ};
use super::tests::empty;
use super::{Caller, Exec, Namespace};
use mds_proto::{Body, Cred, Errno, Op, OpenFlags, SetAttr, XattrSet, XattrValue};

const ALICE: u32 = 1000;
const BOB: u32 = 2000;
const CAROL: u32 = 3000;
const USERS: u32 = 100;
const STAFF: u32 = 50;
const NONE: u32 = u32::MAX;
const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";

fn cred(uid: u32) -> Cred {
    Cred {
        uid,
        gid: if uid == 0 { 0 } else { USERS },
        groups: if uid == CAROL {
            vec![STAFF]
        } else {
            Vec::new()
        },
    }
}

fn run(ns: &Namespace, uid: u32, op: Op) -> Result<Body, Errno> {
    let cred = cred(uid);
    let exec = ns.execute(
        op,
        &Caller {
            client: u64::from(uid) + 1,
            cred: &cred,
            last_committed: u64::MAX,
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        },
    );
    match exec {
        Exec::Now { result, .. } => result,
        Exec::Mutation { body, .. } => Ok(body),
    }
}

/// A `system.posix_acl_*` value from (tag, permissions, id) triples.
fn value(list: &[(u16, u16, u32)]) -> Vec<u8> {
    super::acl::to_value(&super::acl::tests::acl(list))
}

fn set_acl(ns: &Namespace, uid: u32, ino: u64, name: &str, acl: Vec<u8>) -> Result<Body, Errno> {
    run(
        ns,
        uid,
        Op::Setxattr {
            ino,
            name: name.into(),
            value: XattrValue(acl),
            how: XattrSet::Either,
        },
    )
}

fn get_acl(ns: &Namespace, ino: u64, name: &str) -> Result<Vec<u8>, Errno> {
    match run(
        ns,
        0,
        Op::Getxattr {
            ino,
            name: name.into(),
        },
    )? {
        Body::Xattr(v) => Ok(v.0),
        other => panic!("{other:?}"),
    }
}

fn mode(ns: &Namespace, ino: u64) -> u32 {
    match run(ns, 0, Op::Getattr { ino }).unwrap() {
        Body::Attr(a) => a.mode & 0o7777,
        other => panic!("{other:?}"),
    }
}

fn ino(body: Body) -> u64 {
    match body {
        Body::Attr(a) => a.ino,
        other => panic!("{other:?}"),
    }
}

fn open_to_read(ns: &Namespace, uid: u32, ino: u64, handle: u64) -> Result<Body, Errno> {
    run(
        ns,
        uid,
        Op::Open {
            ino,
            handle,
            flags: OpenFlags {
                read: true,
                ..OpenFlags::default()
            },
            reopen: false,
        },
    )
}

fn chmod(ino: u64, mode: u32) -> Op {
    Op::Setattr {
        ino,
        attr: SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        },
    }
}

/// A namespace whose root everyone may write in.
fn open_to_all() -> Namespace {
    let ns = empty();
    run(&ns, 0, chmod(ROOT_INO, 0o777)).unwrap();
    ns
}

/// Alice's file `f` (0644) in a directory everyone may write in.
fn alices_file() -> (Namespace, u64) {
    let ns = open_to_all();
    let f = ino(run(
        &ns,
        ALICE,
        Op::Create {
            parent: ROOT_INO,
            name: "f".into(),
            mode: 0o644,
        },
    )
    .unwrap());
    (ns, f)
}

#[test]
fn a_named_user_entry_shuts_out_a_reader_the_mode_would_let_in() {
    let (ns, f) = alices_file();
    assert!(open_to_read(&ns, BOB, f, 1).is_ok());
    // setfacl -m u:bob:--- f
    let acl = value(&[
        (ACL_USER_OBJ, 0o6, NONE),
        (ACL_USER, 0o0, BOB),
        (ACL_GROUP_OBJ, 0o4, NONE),
        (ACL_MASK, 0o4, NONE),
        (ACL_OTHER, 0o4, NONE),
    ]);
    set_acl(&ns, ALICE, f, ACCESS, acl).unwrap();
    assert_eq!(open_to_read(&ns, BOB, f, 2), Err(Errno::EACCES));
    assert_eq!(
        run(&ns, BOB, Op::Access { ino: f, mask: 4 }),
        Err(Errno::EACCES)
    );
    // Carol, another member of the group, still reads; the owner and root too.
    assert!(open_to_read(&ns, CAROL, f, 3).is_ok());
    assert!(open_to_read(&ns, ALICE, f, 4).is_ok());
    assert!(open_to_read(&ns, 0, f, 5).is_ok());
    // Removed, the mode alone decides again.
    run(
        &ns,
        ALICE,
        Op::Removexattr {
            ino: f,
            name: ACCESS.into(),
        },
    )
    .unwrap();
    assert!(open_to_read(&ns, BOB, f, 6).is_ok());
}

#[test]
fn a_named_group_grants_write_within_the_mask_and_chmod_sets_the_mask() {
    let (ns, f) = alices_file();
    // setfacl -m g:staff:rw f: Carol (in staff) may write, Bob may not.
    let acl = value(&[
        (ACL_USER_OBJ, 0o6, NONE),
        (ACL_GROUP_OBJ, 0o4, NONE),
        (ACL_GROUP, 0o6, STAFF),
        (ACL_MASK, 0o6, NONE),
        (ACL_OTHER, 0o4, NONE),
    ]);
    set_acl(&ns, ALICE, f, ACCESS, acl).unwrap();
    assert_eq!(mode(&ns, f), 0o664, "the group class is the mask");
    assert!(run(&ns, CAROL, Op::Access { ino: f, mask: 2 }).is_ok());
    assert_eq!(
        run(&ns, BOB, Op::Access { ino: f, mask: 2 }),
        Err(Errno::EACCES)
    );
    // chmod g-w sets the mask, which now takes Carol's write away; the group entry stays.
    run(&ns, ALICE, chmod(f, 0o644)).unwrap();
    assert_eq!(
        run(&ns, CAROL, Op::Access { ino: f, mask: 2 }),
        Err(Errno::EACCES)
    );
    assert_eq!(
        get_acl(&ns, f, ACCESS).unwrap(),
        value(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_GROUP_OBJ, 0o4, NONE),
            (ACL_GROUP, 0o6, STAFF),
            (ACL_MASK, 0o4, NONE),
            (ACL_OTHER, 0o4, NONE),
        ])
    );
}

#[test]
fn an_access_acl_sets_the_mode_and_one_the_mode_says_all_of_is_not_kept() {
    let (ns, f) = alices_file();
    // What cp -a does after creating its copy 0600: the source's ACL, here a plain 0755.
    run(&ns, ALICE, chmod(f, 0o600)).unwrap();
    let plain = value(&[
        (ACL_USER_OBJ, 0o7, NONE),
        (ACL_GROUP_OBJ, 0o5, NONE),
        (ACL_OTHER, 0o5, NONE),
    ]);
    set_acl(&ns, ALICE, f, ACCESS, plain).unwrap();
    assert_eq!(mode(&ns, f), 0o755);
    assert_eq!(get_acl(&ns, f, ACCESS), Err(Errno::ENODATA));
    // A non-member of the file's group loses S_ISGID by setting one, as by a chmod.
    run(&ns, 0, chmod(f, 0o2755)).unwrap();
    run(
        &ns,
        0,
        Op::Setattr {
            ino: f,
            attr: SetAttr {
                gid: Some(STAFF),
                ..SetAttr::default()
            },
        },
    )
    .unwrap();
    run(&ns, 0, chmod(f, 0o2755)).unwrap();
    let restricted = value(&[
        (ACL_USER_OBJ, 0o7, NONE),
        (ACL_GROUP_OBJ, 0o5, NONE),
        (ACL_OTHER, 0o0, NONE),
    ]);
    set_acl(&ns, ALICE, f, ACCESS, restricted).unwrap();
    assert_eq!(mode(&ns, f), 0o750);
    // Only the owner or root sets one.
    assert_eq!(
        set_acl(&ns, BOB, f, ACCESS, value(&[(ACL_USER_OBJ, 0o7, NONE)])),
        Err(Errno::EPERM)
    );
}

#[test]
fn an_acl_of_more_than_31_entries_is_refused_e2big() {
    let (ns, f) = alices_file();
    // The owner, 28 named users, the owning group, the mask and the others: 32.
    let mut list = vec![(ACL_USER_OBJ, 0o6, NONE)];
    list.extend((0..28).map(|i| (ACL_USER, 0o4, 5000 + i)));
    list.extend([
        (ACL_GROUP_OBJ, 0o4, NONE),
        (ACL_MASK, 0o4, NONE),
        (ACL_OTHER, 0o4, NONE),
    ]);
    assert_eq!(
        set_acl(&ns, ALICE, f, ACCESS, value(&list)),
        Err(Errno::E2BIG)
    );
    list.remove(1);
    set_acl(&ns, ALICE, f, ACCESS, value(&list)).unwrap();
}

#[test]
fn a_default_acl_is_inherited_in_place_of_the_umask() {
    let ns = open_to_all();
    let shared = ino(run(
        &ns,
        ALICE,
        Op::Mkdir {
            parent: ROOT_INO,
            name: "shared".into(),
            mode: 0o770,
        },
    )
    .unwrap());
    let default = value(&[
        (ACL_USER_OBJ, 0o7, NONE),
        (ACL_USER, 0o7, BOB),
        (ACL_GROUP_OBJ, 0o7, NONE),
        (ACL_MASK, 0o7, NONE),
        (ACL_OTHER, 0o0, NONE),
    ]);
    set_acl(&ns, ALICE, shared, DEFAULT, default.clone()).unwrap();
    // Access for Bob to the directory itself, to make things in it.
    let access = value(&[
        (ACL_USER_OBJ, 0o7, NONE),
        (ACL_USER, 0o7, BOB),
        (ACL_GROUP_OBJ, 0o7, NONE),
        (ACL_MASK, 0o7, NONE),
        (ACL_OTHER, 0o0, NONE),
    ]);
    set_acl(&ns, ALICE, shared, ACCESS, access).unwrap();
    // Bob's editor asks for 0666 under umask 077: the default ACL wins.
    let file = ino(run(
        &ns,
        BOB,
        Op::Create {
            parent: shared,
            name: "notes".into(),
            mode: mds_proto::mode_with_umask(0o666, 0o077),
        },
    )
    .unwrap());
    assert_eq!(mode(&ns, file), 0o660);
    assert_eq!(
        get_acl(&ns, file, ACCESS).unwrap(),
        value(&[
            (ACL_USER_OBJ, 0o6, NONE),
            (ACL_USER, 0o7, BOB),
            (ACL_GROUP_OBJ, 0o7, NONE),
            (ACL_MASK, 0o6, NONE),
            (ACL_OTHER, 0o0, NONE),
        ])
    );
    assert_eq!(get_acl(&ns, file, DEFAULT), Err(Errno::ENODATA));
    // A subdirectory keeps the default ACL, and passes it on.
    let sub = ino(run(
        &ns,
        BOB,
        Op::Mkdir {
            parent: shared,
            name: "sub".into(),
            mode: mds_proto::mode_with_umask(0o777, 0o022),
        },
    )
    .unwrap());
    assert_eq!(mode(&ns, sub), 0o770);
    assert_eq!(get_acl(&ns, sub, DEFAULT).unwrap(), default);
    // Outside it, the umask carried applies; a mode without one is taken as it is.
    let plain = ino(run(
        &ns,
        BOB,
        Op::Create {
            parent: ROOT_INO,
            name: "plain".into(),
            mode: mds_proto::mode_with_umask(0o666, 0o027),
        },
    )
    .unwrap());
    assert_eq!(mode(&ns, plain), 0o640);
    assert_eq!(get_acl(&ns, plain, ACCESS), Err(Errno::ENODATA));
    let given = ino(run(
        &ns,
        BOB,
        Op::Create {
            parent: ROOT_INO,
            name: "given".into(),
            mode: 0o604,
        },
    )
    .unwrap());
    assert_eq!(mode(&ns, given), 0o604);
}

#[test]
fn access_judges_root_execute_by_the_x_bits() {
    let (ns, f) = alices_file();
    assert!(run(&ns, 0, Op::Access { ino: f, mask: 6 }).is_ok());
    assert_eq!(
        run(&ns, 0, Op::Access { ino: f, mask: 1 }),
        Err(Errno::EACCES)
    );
    run(&ns, ALICE, chmod(f, 0o001)).unwrap();
    assert!(run(&ns, 0, Op::Access { ino: f, mask: 1 }).is_ok());
    assert!(
        run(
            &ns,
            0,
            Op::Access {
                ino: ROOT_INO,
                mask: 1
            }
        )
        .is_ok()
    );
    // The owner's class decides even where the others' would allow more.
    run(&ns, ALICE, chmod(f, 0o077)).unwrap();
    assert_eq!(
        run(&ns, ALICE, Op::Access { ino: f, mask: 4 }),
        Err(Errno::EACCES)
    );
    assert!(run(&ns, BOB, Op::Access { ino: f, mask: 7 }).is_ok());
    assert!(
        run(&ns, BOB, Op::Access { ino: f, mask: 0 }).is_ok(),
        "existence"
    );
}

fn open_to_execute(ns: &Namespace, uid: u32, ino: u64, handle: u64) -> Result<Body, Errno> {
    run(
        ns,
        uid,
        Op::Open {
            ino,
            handle,
            flags: OpenFlags {
                read: true,
                exec: true,
                ..OpenFlags::default()
            },
            reopen: false,
        },
    )
}

#[test]
fn execves_open_asks_for_execute_not_read() {
    let (ns, f) = alices_file();
    // --x for others: Bob runs it, though he may not read it.
    run(&ns, ALICE, chmod(f, 0o711)).unwrap();
    assert_eq!(open_to_read(&ns, BOB, f, 1), Err(Errno::EACCES));
    assert!(open_to_execute(&ns, BOB, f, 2).is_ok());
    // Only the group's x, and the group is staff: Bob is not in it; Carol is.
    run(
        &ns,
        0,
        Op::Setattr {
            ino: f,
            attr: SetAttr {
                gid: Some(STAFF),
                ..SetAttr::default()
            },
        },
    )
    .unwrap();
    run(&ns, ALICE, chmod(f, 0o610)).unwrap();
    assert_eq!(open_to_execute(&ns, BOB, f, 3), Err(Errno::EACCES));
    assert!(open_to_execute(&ns, CAROL, f, 4).is_ok());
    // The owner's class decides: rw- for the owner, x for the others, and the owner may not.
    run(&ns, ALICE, chmod(f, 0o601)).unwrap();
    assert_eq!(open_to_execute(&ns, ALICE, f, 5), Err(Errno::EACCES));
    assert!(open_to_execute(&ns, BOB, f, 6).is_ok());
    // Root runs what some class may run, and nothing else.
    assert!(open_to_execute(&ns, 0, f, 7).is_ok());
    run(&ns, ALICE, chmod(f, 0o644)).unwrap();
    assert_eq!(open_to_execute(&ns, 0, f, 8), Err(Errno::EACCES));
    // A named user's x in an ACL.
    let acl = value(&[
        (ACL_USER_OBJ, 0o6, NONE),
        (ACL_USER, 0o1, BOB),
        (ACL_GROUP_OBJ, 0o0, NONE),
        (ACL_MASK, 0o1, NONE),
        (ACL_OTHER, 0o0, NONE),
    ]);
    set_acl(&ns, ALICE, f, ACCESS, acl).unwrap();
    assert!(open_to_execute(&ns, BOB, f, 9).is_ok());
    assert_eq!(open_to_execute(&ns, CAROL, f, 10), Err(Errno::EACCES));
    // A directory is never executed.
    assert_eq!(open_to_execute(&ns, 0, ROOT_INO, 11), Err(Errno::EACCES));
}
