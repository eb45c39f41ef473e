//! `mdsctl` as a user runs it against a real server: output shapes (text and `-o json`),
//! POSIX error names on stderr, exit codes (1 server error, 2 usage, 3 unreachable, timed out
//! or protocol failure), `MDS_SERVER`.

use std::io::{Read, Write};
use std::net::TcpListener;
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
    assert_eq!(out.status.code(), Some(1), "a server error exits 1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(errno), "expected {errno} in {stderr:?}");
}

fn json(server: &Server, args: &[&str]) -> serde_json::Value {
    let out = ok(ctl(server, &[&["-o", "json"], args].concat()));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Runs mdsctl without `--server`: MDS_SERVER (or the default) says where.
fn ctl_at(server: &str, args: &[&str]) -> Output {
    Command::new(MDSCTL)
        .env("MDS_SERVER", server)
        .args(args)
        .output()
        .unwrap()
}

fn unreachable(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(3),
        "unreachable, timed out or protocol failure exits 3: {stderr}"
    );
    stderr
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
    unreachable(
        &Command::new(MDSCTL)
            .args(["--server", "127.0.0.1:1", "status"])
            .output()
            .unwrap(),
    );
}

#[test]
fn json_output_is_one_document_per_run_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    let made = json(&server, &["mkdir", "-p", "/j/k"]);
    assert_eq!(made[0]["path"], "/j/k");
    assert_eq!(made[0]["kind"], "directory");
    assert_eq!(made[0]["mode"], "0755");
    let again = json(&server, &["mkdir", "-p", "/j/k"]);
    assert_eq!(again[0]["inode"], made[0]["inode"], "-p finds what exists");
    let files = json(&server, &["create", "-m", "600", "/j/f1", "/j/f2"]);
    assert_eq!(files.as_array().unwrap().len(), 2);
    assert_eq!(files[1]["path"], "/j/f2");
    assert_eq!(files[1]["kind"], "file");
    assert_eq!(files[1]["mode"], "0600");
    assert_eq!(files[1]["nlink"], 1);

    // The global flags go before or after the subcommand.
    let out = ok(ctl(&server, &["stat", "/j/f1", "/j", "--output", "json"]));
    let stat: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stat[0]["inode"], files[0]["inode"]);
    assert_eq!(stat[1]["kind"], "directory");
    assert_eq!(stat[1]["size"], 3, "a directory's size is its entry count");
    assert!(stat[0]["ctime"].as_str().unwrap().ends_with('Z'));
    assert!(stat[0]["mtime_ns"].as_i64().unwrap() > 0);

    let ls = json(&server, &["ls", "/j"]);
    let names: Vec<&str> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["f1", "f2", "k"]);
    assert_eq!(ls[2]["kind"], "directory");
    assert_eq!(ls[0]["inode"], files[0]["inode"]);

    // The owner may set the uid only to its own (chown to another is root's): run as anyone.
    // SAFETY: getuid cannot fail and touches no memory.
    let me = unsafe { libc::getuid() }.to_string();
    let set = json(&server, &["setattr", "/j/f1", "--size", "10", "--uid", &me]);
    assert_eq!(
        (set["size"].as_u64(), set["uid"].to_string()),
        (Some(10), me)
    );
    let mv = json(&server, &["mv", "/j/f1", "/j/k/g"]);
    assert_eq!(
        (mv["src"].as_str(), mv["dst"].as_str()),
        (Some("/j/f1"), Some("/j/k/g"))
    );
    let rm = json(&server, &["rm", "/j/k/g", "/j/f2"]);
    assert_eq!(rm[1]["path"], "/j/f2");
    let rmdir = json(&server, &["rmdir", "/j/k"]);
    assert_eq!(rmdir[0]["path"], "/j/k");
    let sync = json(&server, &["sync"]);
    let last = sync["last_committed"].as_u64().unwrap();
    assert!(last > 0, "{sync}");

    let status = json(&server, &["status"]);
    assert_eq!(status["server"], server.addr.to_string());
    assert_eq!(status["directories"], 2, "/ and /j: {status}");
    assert_eq!(status["files"], 0, "{status}");
    assert_eq!(status["read_only"], false);
    assert_eq!(status["partitions"], 2);
    assert!(status["last_committed"].as_u64().unwrap() >= last);
    assert!(status["txns_per_commit"].as_f64().is_some(), "{status}");

    // An error prints nothing on stdout, its POSIX name on stderr, and exits 1.
    let out = ctl(&server, &["-o", "json", "stat", "/nope"]);
    assert!(out.stdout.is_empty());
    fails_with(out, "ENOENT");
}

#[test]
fn exit_codes_separate_server_errors_usage_and_unreachable_servers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    let addr = server.addr.to_string();

    // MDS_SERVER says where when --server is not given; --server wins over it.
    ok(ctl_at(&addr, &["mkdir", "/env"]));
    assert_eq!(ok(ctl_at(&addr, &["ls"])), "env\n");
    ok(ctl_at("127.0.0.1:1", &["--server", &addr, "stat", "/env"]));
    fails_with(ctl_at(&addr, &["mkdir", "/env"]), "EEXIST");

    // Bad usage: clap's 2, before anything is sent.
    for args in [
        &["frobnicate"][..],
        &["--output", "yaml", "status"],
        &["--timeout", "soon", "status"],
        &["mkdir", "--mode", "999", "/x"],
    ] {
        let out = ctl(&server, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    fails_with(ctl(&server, &["stat", "/x"]), "ENOENT");

    // Nothing listens: 3.
    let refused = unreachable(&ctl_at("127.0.0.1:1", &["status"]));
    assert!(refused.contains("connect 127.0.0.1:1"), "{refused}");

    // A server that accepts but never answers: 3 once --timeout passes, not a hang. The
    // kernel completes the handshake from the listen backlog; nobody ever reads.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let out = ctl_at(&silent_addr, &["--timeout", "1s", "status"]);
    let stderr = unreachable(&out);
    assert!(stderr.contains("no answer within 1s"), "{stderr}");
    drop(silent);

    // A server that answers with garbage: a protocol failure, 3.
    let liar = TcpListener::bind("127.0.0.1:0").unwrap();
    let liar_addr = liar.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = liar.accept() {
            let mut buf = [0u8; 256];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\nnot mds at all");
        }
    });
    let out = ctl_at(&liar_addr, &["--timeout", "20s", "status"]);
    let stderr = unreachable(&out);
    assert!(!stderr.contains("no answer within"), "{stderr}");
}

/// Against a server that answers before the commit, mdsctl says what is not committed yet,
/// and `mdsctl sync` waits for it.
#[test]
fn with_early_replies_mdsctl_says_what_is_not_committed_yet() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &mds_testkit::bin("mds"),
        dir.path(),
        &["--ack", "early", "--commit-interval", "60s"],
    );
    // A client's first change is committed (the journal must know the client first); the
    // next ones are answered early.
    let out = ctl(&server, &["create", "/a", "/b", "/c"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 change(s) done but not committed yet"),
        "{stderr}"
    );
    let out = ctl(&server, &["sync"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not committed"));
    let status = ok(ctl(&server, &["status"]));
    assert!(status.contains("files:           3"), "{status}");
    assert!(server.stop().success());
}

#[test]
fn the_shared_key_comes_from_auth_key_or_mds_auth_key_and_a_refusal_says_eauth() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let write_key = |name: &str, byte: u8, mode: u32| {
        let path = dir.path().join(name);
        std::fs::write(&path, [byte; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (key, wrong) = (write_key("key", 1, 0o600), write_key("wrong", 2, 0o600));
    let exposed = write_key("exposed", 1, 0o644);
    let server = Server::start(
        &mds_testkit::bin("mds"),
        &dir.path().join("data"),
        &["--auth-key", &key],
    );
    ok(ctl(&server, &["--auth-key", &key, "mkdir", "/keyed"]));
    let by_env = Command::new(MDSCTL)
        .args(["--server", &server.addr.to_string(), "ls", "/"])
        .env("MDS_AUTH_KEY", &key)
        .output()
        .unwrap();
    assert_eq!(ok(by_env), "keyed\n");
    fails_with(ctl(&server, &["ls", "/"]), "EAUTH");
    fails_with(ctl(&server, &["--auth-key", &wrong, "ls", "/"]), "EAUTH");
    let out = ctl(&server, &["--auth-key", &exposed, "ls", "/"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unusable key file is bad usage"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("0644") && stderr.contains("exposed"),
        "{stderr}"
    );
}
