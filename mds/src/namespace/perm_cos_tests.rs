//! Commit-on-share of permission checks: an answer a permission check decided, granted or
//! refused, builds on whoever last changed the attributes it read — the directory's mode and
//! owner, and under the sticky bit the entry's owner — and must wait for (a mutation: be built
//! on) that change while it is another client's and not durable. Root's checks read nothing,
//! so root waits for none of it. `ops/mod.rs` explains why this is needed for correctness.

use journal::ROOT_INO;

use super::tests::empty;
use super::{Caller, Exec, Namespace};
use mds_proto::{Body, Cred, Errno, Op, SetAttr};

const ROOT: u64 = 9;
const ALICE: u64 = 1;
const BOB: u64 = 2;

fn cred_of(client: u64) -> Cred {
    let uid = match client {
        ALICE => 1000,
        BOB => 2000,
        _ => 0,
    };
    Cred {
        uid,
        gid: 100,
        groups: Vec::new(),
    }
}

/// Executes `op` for `client`, judged against `last_committed`.
fn run(ns: &Namespace, client: u64, last_committed: u64, op: Op) -> Exec {
    let cred = cred_of(client);
    ns.execute(
        op,
        &Caller {
            client,
            cred: &cred,
            last_committed,
            reuse_ino: None,
            replay: false,
            atime: mds_proto::Atime::default(),
        },
    )
}

/// (errno, what held it) of a refusal.
fn refused(exec: &Exec) -> (Errno, u64) {
    match exec {
        Exec::Now {
            result: Err(e),
            wait,
        } => (*e, *wait),
        other => panic!("want a refusal, got {other:?}"),
    }
}

/// (transno, what it built on) of a mutation.
fn mutated(exec: &Exec) -> (u64, u64) {
    match exec {
        Exec::Mutation {
            transno, built_on, ..
        } => (*transno, *built_on),
        other @ Exec::Now { .. } => panic!("want a mutation, got {other:?}"),
    }
}

/// The inode a successful CREATE or MKDIR made.
fn made(exec: Exec) -> u64 {
    match exec {
        Exec::Mutation {
            body: Body::Attr(attr),
            ..
        } => attr.ino,
        other => panic!("want a create, got {other:?}"),
    }
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

fn chown(ino: u64, uid: u32) -> Op {
    Op::Setattr {
        ino,
        attr: SetAttr {
            uid: Some(uid),
            ..SetAttr::default()
        },
    }
}

fn lookup(parent: u64, name: &str) -> Op {
    Op::Lookup {
        parent,
        name: name.into(),
    }
}

fn unlink(parent: u64, name: &str) -> Op {
    Op::Unlink {
        parent,
        name: name.into(),
    }
}

/// Root makes `d` (mode `mode`, owned by Alice) holding the file `d/f`; all of it durable.
/// Returns (the namespace, d, the last transno).
fn alices_directory(mode: u32) -> (Namespace, u64, u64) {
    let ns = empty();
    let d = made(run(
        &ns,
        ROOT,
        0,
        Op::Mkdir {
            parent: ROOT_INO,
            name: "d".into(),
            mode,
        },
    ));
    made(run(
        &ns,
        ROOT,
        0,
        Op::Create {
            parent: d,
            name: "f".into(),
            mode: 0o644,
        },
    ));
    mutated(&run(&ns, ROOT, 0, chown(d, 1000)));
    let last = ns.last_transno();
    (ns, d, last)
}

#[test]
fn a_refusal_waits_for_the_uncommitted_chmod_it_read() {
    let (ns, d, durable) = alices_directory(0o777);
    let (t, _) = mutated(&run(&ns, ALICE, durable, chmod(d, 0o700)));
    // Bob is refused because of Alice's chmod: that answer may not leave before it is
    // durable, for LOOKUP (which reads the parent only through its search check) as for
    // UNLINK.
    assert_eq!(
        refused(&run(&ns, BOB, durable, lookup(d, "f"))),
        (Errno::EACCES, t)
    );
    assert_eq!(
        refused(&run(&ns, BOB, durable, unlink(d, "f"))),
        (Errno::EACCES, t)
    );
    assert_eq!(
        refused(&run(&ns, BOB, durable, lookup(d, "nothing"))),
        (Errno::EACCES, t),
        "refused before the name is even looked at"
    );
    // Once it is durable nothing holds him; Alice's own change never held her.
    assert_eq!(
        refused(&run(&ns, BOB, t, lookup(d, "f"))),
        (Errno::EACCES, 0)
    );
    assert!(matches!(
        run(&ns, ALICE, durable, lookup(d, "f")),
        Exec::Now {
            result: Ok(_),
            wait: 0
        }
    ));
}

#[test]
fn a_grant_builds_on_the_uncommitted_chmod_that_allowed_it() {
    let (ns, d, durable) = alices_directory(0o700);
    let (t, _) = mutated(&run(&ns, ALICE, durable, chmod(d, 0o777)));
    assert!(matches!(
        run(&ns, BOB, durable, lookup(d, "f")),
        Exec::Now {
            result: Ok(_),
            wait
        } if wait == t
    ));
    // Bob's unlink is allowed only by Alice's chmod: were it lost in a crash, his unlink
    // could not be replayed, so it is built on it (its early reply waits for it).
    let (_, built_on) = mutated(&run(&ns, BOB, durable, unlink(d, "f")));
    assert_eq!(built_on, t);
}

#[test]
fn root_waits_for_no_change_its_checks_would_have_read() {
    let (ns, d, durable) = alices_directory(0o777);
    mutated(&run(&ns, ALICE, durable, chmod(d, 0o700)));
    assert!(matches!(
        run(&ns, ROOT, durable, lookup(d, "f")),
        Exec::Now {
            result: Ok(_),
            wait: 0
        }
    ));
    let (_, built_on) = mutated(&run(&ns, ROOT, durable, unlink(d, "f")));
    assert_eq!(built_on, 0);
}

#[test]
fn under_the_sticky_bit_a_removal_builds_on_the_entry_owners_uncommitted_change() {
    let (ns, d, durable) = alices_directory(0o1777);
    // The file is root's: Bob may not remove it from Alice's sticky directory.
    assert_eq!(
        refused(&run(&ns, BOB, durable, unlink(d, "f"))),
        (Errno::EPERM, 0)
    );
    let f = match run(&ns, ROOT, durable, lookup(d, "f")) {
        Exec::Now {
            result: Ok(Body::Attr(attr)),
            ..
        } => attr.ino,
        other => panic!("{other:?}"),
    };
    // Root gives it to Bob, then takes it back, neither durably yet: Bob's refusal rests
    // on the second change, his unlink in between was allowed by the first alone.
    let (given, _) = mutated(&run(&ns, ROOT, durable, chown(f, 2000)));
    let (taken, _) = mutated(&run(&ns, ROOT, given, chown(f, 0)));
    assert_eq!(
        refused(&run(&ns, BOB, given, unlink(d, "f"))),
        (Errno::EPERM, taken)
    );
    let (given_again, _) = mutated(&run(&ns, ROOT, taken, chown(f, 2000)));
    let (_, built_on) = mutated(&run(&ns, BOB, taken, unlink(d, "f")));
    assert_eq!(built_on, given_again);
}
