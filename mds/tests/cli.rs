//! `mdsctl` and `mds fsck` as a user runs them: output shapes, POSIX error names on stderr,
//! exit codes; fsck finding a damaged store.

mod common;

use std::process::{Command, Output};

use common::{MDS, MDSCTL, Server, fsck};
use journal::{Dentry, FileKind, Journal, JournalOp, JournalOptions, ROOT_INO, TxRecord};

fn ctl(server: &Server, args: &[&str]) -> Output {
    Command::new(MDSCTL)
        .args(["--server", &server.addr.to_string()])
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}, stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails_with(out: Output, errno: &str) {
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(errno), "expected {errno} in {stderr:?}");
}

#[test]
fn mdsctl_does_what_a_user_types() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    ok(ctl(&server, &["mkdir", "/a", "/b"]));
    ok(ctl(&server, &["mkdir", "-p", "/a/x/y/z"]));
    ok(ctl(&server, &["create", "/a/f1", "/a/f2"]));
    assert_eq!(ok(ctl(&server, &["ls", "/a"])), "f1\nf2\nx\n");
    assert_eq!(ok(ctl(&server, &["ls"])), "a\nb\n");
    let stat = ok(ctl(&server, &["stat", "/a/f1"]));
    assert!(stat.contains("kind:       file"), "{stat}");
    assert!(stat.contains("mode:       0644"), "{stat}");
    assert!(stat.contains("nlink:      1"), "{stat}");
    let stat = ok(ctl(&server, &["stat", "/a"]));
    assert!(
        stat.contains("kind:       directory") && stat.contains("size:       3"),
        "{stat}"
    );
    let set = ok(ctl(
        &server,
        &["setattr", "/a/f1", "--mode", "600", "--size", "4096"],
    ));
    assert!(
        set.contains("mode:       0600") && set.contains("size:       4096"),
        "{set}"
    );
    ok(ctl(&server, &["mv", "/a/f1", "/b/g"]));
    assert_eq!(ok(ctl(&server, &["ls", "/b"])), "g\n");
    ok(ctl(&server, &["rm", "/b/g"]));
    ok(ctl(&server, &["rmdir", "/b"]));
    ok(ctl(&server, &["sync"]));
    let status = ok(ctl(&server, &["status"]));
    assert!(status.contains("directories:     5"), "{status}");
    assert!(status.contains("files:           1"), "{status}");

    fails_with(ctl(&server, &["stat", "/nope"]), "ENOENT");
    fails_with(ctl(&server, &["mkdir", "/a"]), "EEXIST");
    fails_with(ctl(&server, &["rmdir", "/a"]), "ENOTEMPTY");
    fails_with(ctl(&server, &["rm", "/a"]), "EISDIR");
    fails_with(ctl(&server, &["create", "/a/f2/x"]), "ENOTDIR");
    fails_with(ctl(&server, &["create", "relative"]), "EINVAL");
    fails_with(ctl(&server, &["mv", "/a", "/a/x/inside"]), "EINVAL");
    let long = format!("/{}", "n".repeat(300));
    fails_with(ctl(&server, &["create", &long]), "ENAMETOOLONG");
    let unreachable = Command::new(MDSCTL)
        .args(["--server", "127.0.0.1:1", "status"])
        .output()
        .unwrap();
    assert!(!unreachable.status.success());
}

#[test]
fn fsck_passes_a_clean_store_and_reports_each_finding_of_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = common::start(dir.path(), &[]);
        ok(ctl(&server, &["mkdir", "-p", "/a/b"]));
        ok(ctl(&server, &["create", "/a/b/f"]));
        assert!(server.stop().success());
    }
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 findings"), "{out}");
    {
        // A store a running server holds is refused, not half-read.
        let server = common::start(dir.path(), &[]);
        let (code, out) = fsck(dir.path());
        assert_eq!(code, 2, "{out}");
        assert!(
            out.contains(&format!(
                "in use by a running server (pid {})",
                server.pid()
            )),
            "{out}"
        );
    }

    // Damage it the way a broken writer would: an entry to nowhere, and an orphan inode.
    {
        let (j, rec) = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let t = rec.last_committed + 1;
        let mut orphan = j.inode(ROOT_INO).unwrap().unwrap();
        orphan.ino = rec.next_ino;
        orphan.kind = FileKind::File;
        orphan.nlink = 1;
        orphan.transno = t;
        j.commit(&[TxRecord {
            transno: t,
            ops: vec![
                JournalOp::PutDentry {
                    parent: ROOT_INO,
                    name: "dangling".into(),
                    entry: Dentry {
                        ino: 999_999,
                        kind: FileKind::File,
                    },
                },
                JournalOp::PutInode(orphan),
            ],
        }])
        .unwrap();
    }
    let (code, out) = fsck(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("names inode 999999 which does not exist"),
        "{out}"
    );
    assert!(out.contains("orphan"), "{out}");
    assert!(out.contains("records 1 entries but has 2"), "{out}");

    let missing = Command::new(MDS)
        .args(["fsck", "--data"])
        .arg(dir.path().join("no-such-store"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}
