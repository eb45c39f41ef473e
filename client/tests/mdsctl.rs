//! `mdsctl` as a user runs it against a real server: output shapes, POSIX error names on
//! stderr, exit codes.

use std::process::{Command, Output};

use mds_testkit::Server;

const MDSCTL: &str = env!("CARGO_BIN_EXE_mdsctl");

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
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
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
    assert!(status.contains("cos_conflicts:   0"), "{status}");

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
