//! `mdsctl` as a user runs it against a real server: output shapes (text and `-o json`),
//! POSIX error names on stderr, exit codes (1 server error, 2 usage, 3 unreachable, timed out
//! or protocol failure), `MDS_SERVER`, and file data through `write` and `cat`.

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

/// Bad usage: clap's exit status 2, and nothing sent.
fn usage_error(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "bad usage exits 2: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() == 0 }
}

#[test]
fn ln_makes_hard_and_symbolic_links_and_readlink_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    ok(ctl(&server, &["mkdir", "/d"]));
    ok(ctl(&server, &["create", "/d/f"]));

    // A hard link: a second name for the inode, two links on it.
    let linked = json(&server, &["ln", "/d/f", "/d/g"]);
    assert_eq!(linked["nlink"], 2, "{linked}");
    let stat = json(&server, &["stat", "/d/f", "/d/g"]);
    assert_eq!(stat[0]["inode"], stat[1]["inode"]);
    assert_eq!(
        (&stat[0]["nlink"], &stat[1]["nlink"]),
        (&2.into(), &2.into())
    );
    assert_eq!(stat[1]["kind"], "file");
    fails_with(ctl(&server, &["ln", "/d", "/e"]), "EPERM");
    fails_with(ctl(&server, &["ln", "/d/f", "/d/g"]), "EEXIST");
    fails_with(ctl(&server, &["ln", "/d/nope", "/d/h"]), "ENOENT");
    ok(ctl(&server, &["rm", "/d/f"]));
    assert_eq!(json(&server, &["stat", "/d/g"])[0]["nlink"], 1);

    // A symbolic link keeps its target as given: not resolved, `..` and spaces and all.
    let target = "../up one/ x  y /..";
    let made = json(&server, &["ln", "-s", target, "/d/l"]);
    assert_eq!(made["kind"], "symlink");
    assert_eq!(
        made["size"],
        target.len(),
        "a symlink's size is its target's"
    );
    assert_eq!(
        ok(ctl(&server, &["readlink", "/d/l"])),
        format!("{target}\n")
    );
    let read = json(&server, &["readlink", "/d/l"]);
    assert_eq!(read["target"], target);
    assert_eq!(read["path"], "/d/l");
    // The link itself, never what it points at.
    let stat = ok(ctl(&server, &["stat", "/d/l"]));
    assert!(stat.contains("kind:       symlink"), "{stat}");
    fails_with(ctl(&server, &["ln", "-s", "elsewhere", "/d/l"]), "EEXIST");
    fails_with(ctl(&server, &["readlink", "/d/g"]), "EINVAL");

    // Bytes that are not UTF-8 go through as they are, and come back raw on stdout.
    {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let out = Command::new(MDSCTL)
            .args(["--server", &server.addr.to_string(), "ln", "-s"])
            .arg(OsStr::from_bytes(b"caf\xe9"))
            .arg("/d/latin1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let out = ctl(&server, &["readlink", "/d/latin1"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"caf\xe9\n");

    let ls = ok(ctl(&server, &["ls", "-l", "/d"]));
    let letters: Vec<(&str, &str)> = ls
        .lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let letter = fields.nth(1).unwrap();
            (fields.next().unwrap(), letter)
        })
        .collect();
    assert_eq!(letters, [("g", "-"), ("l", "l"), ("latin1", "l")], "{ls}");
    let kinds = json(&server, &["ls", "/d"]);
    assert_eq!(kinds[1]["kind"], "symlink");
}

#[test]
fn mknod_makes_fifos_sockets_and_root_makes_devices() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    let fifo = json(&server, &["mknod", "/p", "p"]);
    assert_eq!(
        (&fifo["kind"], &fifo["mode"], &fifo["rdev"]),
        (&"fifo".into(), &"0644".into(), &0.into())
    );
    assert!(fifo["major"].is_null() && fifo["minor"].is_null(), "{fifo}");
    let socket = json(&server, &["mknod", "-m", "600", "/s", "s"]);
    assert_eq!(
        (&socket["kind"], &socket["mode"]),
        (&"socket".into(), &"0600".into())
    );
    let stat = ok(ctl(&server, &["stat", "/p"]));
    assert!(stat.contains("kind:       fifo"), "{stat}");
    assert!(stat.contains("rdev:       0"), "{stat}");

    // Devices are root's (Linux's CAP_MKNOD); mdsctl sends this process's credentials.
    let char_device = ctl(&server, &["-o", "json", "mknod", "/null", "c", "1", "3"]);
    if is_root() {
        let made: serde_json::Value = serde_json::from_str(&ok(char_device)).unwrap();
        assert_eq!(made["kind"], "char-device");
        let stat = json(&server, &["stat", "/null"]);
        assert_eq!(stat[0]["kind"], "char-device");
        assert_eq!(stat[0]["rdev"], 0x0103, "Linux's makedev(1, 3)");
        assert_eq!(
            (&stat[0]["major"], &stat[0]["minor"]),
            (&1.into(), &3.into())
        );
        let text = ok(ctl(&server, &["stat", "/null"]));
        assert!(text.contains("rdev:       1,3"), "{text}");
        // `u` is `c`; numbers past the old 8-bit fields keep their bits.
        ok(ctl(&server, &["mknod", "/u", "u", "4", "64"]));
        let block = json(&server, &["mknod", "/sda1", "b", "259", "65537"]);
        assert_eq!(block["kind"], "block-device");
        assert_eq!(
            (&block["major"], &block["minor"]),
            (&259.into(), &65537.into())
        );
        let stat = ok(ctl(&server, &["stat", "/sda1"]));
        assert!(stat.contains("kind:       block-device"), "{stat}");
        assert!(stat.contains("rdev:       259,65537"), "{stat}");
        let ls = ok(ctl(&server, &["ls", "-l"]));
        assert!(ls.lines().any(|l| l.ends_with(" c null")), "{ls}");
        assert!(ls.lines().any(|l| l.ends_with(" b sda1")), "{ls}");
    } else {
        fails_with(char_device, "EPERM");
    }
    let ls = ok(ctl(&server, &["ls", "-l"]));
    assert!(ls.lines().any(|l| l.ends_with(" p p")), "{ls}");
    assert!(ls.lines().any(|l| l.ends_with(" s s")), "{ls}");
    let status = json(&server, &["status"]);
    let others = if is_root() { 5 } else { 2 };
    assert_eq!(status["others"], others, "{status}");
    fails_with(ctl(&server, &["mknod", "/p", "p"]), "EEXIST");

    // Numbers are for devices only, and devices need both: usage errors, nothing sent.
    for args in [
        &["mknod", "/x", "c"][..],
        &["mknod", "/x", "b", "8"],
        &["mknod", "/x", "p", "1", "2"],
        &["mknod", "/x", "s", "1"],
        &["mknod", "/x", "d"],
        &["mknod", "-m", "8", "/x", "p"],
    ] {
        usage_error(&ctl(&server, args));
    }
    fails_with(ctl(&server, &["stat", "/x"]), "ENOENT");
}

/// With root squash even root is refused a device: the refusal root-run tests cannot see
/// otherwise.
#[test]
fn mknod_of_a_device_is_eperm_for_anyone_but_root() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &["--root-squash"]);
    fails_with(ctl(&server, &["mknod", "/null", "c", "1", "3"]), "EPERM");
    fails_with(ctl(&server, &["mknod", "/sda", "b", "8", "0"]), "EPERM");
    fails_with(ctl(&server, &["stat", "/null"]), "ENOENT");
    ok(ctl(&server, &["mknod", "/p", "p"]));
}

#[test]
fn setfattr_and_getfattr_round_trip_values_as_the_attr_tools_do() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    ok(ctl(&server, &["create", "/f"]));
    ok(ctl(
        &server,
        &["setfattr", "-n", "user.text", "-v", "hello world", "/f"],
    ));
    assert_eq!(
        ok(ctl(&server, &["getfattr", "-n", "user.text", "/f"])),
        "user.text=\"hello world\"\n"
    );
    // 0x and hex digits are bytes, in and out.
    ok(ctl(
        &server,
        &["setfattr", "-n", "user.bin", "-v", "0x00ff10", "/f"],
    ));
    assert_eq!(
        ok(ctl(&server, &["getfattr", "-n", "user.bin", "/f"])),
        "user.bin=0x00ff10\n"
    );
    let bin = json(&server, &["getfattr", "-n", "user.bin", "/f"]);
    assert_eq!(bin["path"], "/f");
    assert_eq!(bin["xattrs"][0]["name"], "user.bin");
    assert_eq!(bin["xattrs"][0]["value_hex"], "00ff10");
    // A quoted value with escapes, and what getfattr prints sets the same value again.
    ok(ctl(
        &server,
        &[
            "setfattr",
            "-n",
            "user.q",
            "-v",
            r#""say \"hi\"\012""#,
            "/f",
        ],
    ));
    let printed = ok(ctl(&server, &["getfattr", "-n", "user.q", "/f"]));
    assert_eq!(printed, "user.q=\"say \\042hi\\042\\012\"\n");
    let value = printed.trim_end().strip_prefix("user.q=").unwrap();
    ok(ctl(
        &server,
        &["setfattr", "-n", "user.q2", "-v", value, "/f"],
    ));
    let both = json(&server, &["getfattr", "-d", "/f"]);
    let values: Vec<(&str, &str)> = both["xattrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["name"].as_str().unwrap(), x["value"].as_str().unwrap()))
        .collect();
    assert!(values.contains(&("user.q", "say \"hi\"\n")), "{both}");
    assert!(values.contains(&("user.q2", "say \"hi\"\n")), "{both}");
    // No value is the empty value.
    ok(ctl(&server, &["setfattr", "-n", "user.empty", "/f"]));
    assert_eq!(
        ok(ctl(&server, &["getfattr", "-n", "user.empty", "/f"])),
        "user.empty=\"\"\n"
    );

    // -d, or no -n: every name with its value.
    let dump = ok(ctl(&server, &["getfattr", "-d", "/f"]));
    assert_eq!(dump, ok(ctl(&server, &["getfattr", "/f"])));
    let mut lines: Vec<&str> = dump.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "user.bin=0x00ff10",
            "user.empty=\"\"",
            "user.q2=\"say \\042hi\\042\\012\"",
            "user.q=\"say \\042hi\\042\\012\"",
            "user.text=\"hello world\"",
        ]
    );
    let status = json(&server, &["status"]);
    assert!(status["xattr_bytes"].as_u64().unwrap() > 0, "{status}");

    // XATTR_CREATE and XATTR_REPLACE.
    fails_with(
        ctl(
            &server,
            &["setfattr", "--create", "-n", "user.text", "-v", "x", "/f"],
        ),
        "EEXIST",
    );
    fails_with(
        ctl(
            &server,
            &["setfattr", "--replace", "-n", "user.new", "-v", "x", "/f"],
        ),
        "ENODATA",
    );
    ok(ctl(
        &server,
        &[
            "setfattr",
            "--replace",
            "-n",
            "user.text",
            "-v",
            "bye",
            "/f",
        ],
    ));
    ok(ctl(
        &server,
        &["setfattr", "--create", "-n", "user.new", "-v", "x", "/f"],
    ));
    assert_eq!(
        ok(ctl(&server, &["getfattr", "-n", "user.text", "/f"])),
        "user.text=\"bye\"\n"
    );
    fails_with(
        ctl(&server, &["getfattr", "-n", "user.missing", "/f"]),
        "ENODATA",
    );

    // -x removes.
    let removed = json(&server, &["setfattr", "-x", "user.text", "/f"]);
    assert_eq!(removed["removed"], "user.text");
    fails_with(
        ctl(&server, &["getfattr", "-n", "user.text", "/f"]),
        "ENODATA",
    );
    fails_with(
        ctl(&server, &["setfattr", "-x", "user.text", "/f"]),
        "ENODATA",
    );
    assert!(!ok(ctl(&server, &["getfattr", "/f"])).contains("user.text"));

    for args in [
        &["setfattr", "/f"][..],
        &["setfattr", "-n", "user.a", "-x", "user.a", "/f"],
        &["setfattr", "-n", "user.a", "--create", "--replace", "/f"],
        &["setfattr", "-n", "user.a", "-v", "0xabc", "/f"],
        &["getfattr", "-n", "user.a", "-d", "/f"],
    ] {
        usage_error(&ctl(&server, args));
    }
}

#[test]
fn mv_can_refuse_to_replace_or_exchange_two_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    ok(ctl(&server, &["mkdir", "/d"]));
    ok(ctl(&server, &["create", "/a", "/d/b"]));
    let before = json(&server, &["stat", "/a", "/d/b"]);
    let (a, b) = (&before[0]["inode"], &before[1]["inode"]);

    fails_with(
        ctl(&server, &["mv", "--no-replace", "/a", "/d/b"]),
        "EEXIST",
    );
    assert_eq!(
        &json(&server, &["stat", "/d/b"])[0]["inode"],
        b,
        "nothing replaced"
    );

    let swapped = json(&server, &["mv", "--exchange", "/a", "/d/b"]);
    assert_eq!(swapped["how"], "exchange");
    let after = json(&server, &["stat", "/a", "/d/b"]);
    assert_eq!((&after[0]["inode"], &after[1]["inode"]), (b, a), "swapped");
    fails_with(ctl(&server, &["mv", "--exchange", "/a", "/nope"]), "ENOENT");

    let moved = json(&server, &["mv", "--no-replace", "/a", "/c"]);
    assert_eq!(moved["how"], "no-replace");
    assert_eq!(&json(&server, &["stat", "/c"])[0]["inode"], b);
    assert_eq!(json(&server, &["mv", "/c", "/d/b"])["how"], "replace");
    assert_eq!(&json(&server, &["stat", "/d/b"])[0]["inode"], b, "replaced");
    usage_error(&ctl(
        &server,
        &["mv", "--no-replace", "--exchange", "/d/b", "/e"],
    ));
}

#[test]
fn setattr_sets_times_given_now_or_in_rfc3339() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    ok(ctl(&server, &["create", "/t"]));
    let ns: i64 = 1_700_000_000_123_456_789;
    let set = json(&server, &["setattr", "/t", "--mtime", &ns.to_string()]);
    assert_eq!(set["mtime_ns"], ns);
    let stat = json(&server, &["stat", "/t"]);
    assert_eq!(stat[0]["mtime_ns"], ns);
    assert_eq!(stat[0]["mtime"], "2023-11-14T22:13:20.123456789Z");

    let set = json(
        &server,
        &["setattr", "/t", "--atime", "2023-11-14T22:13:20Z"],
    );
    assert_eq!(set["atime_ns"], 1_700_000_000_000_000_000_i64);
    assert_eq!(set["mtime_ns"], ns, "--atime alone leaves mtime");

    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let now = json(&server, &["setattr", "/t", "--atime", "now"]);
    let atime = u128::try_from(now["atime_ns"].as_i64().unwrap()).unwrap();
    // The server's clock, on this machine: within a second of ours.
    assert!(atime + 1_000_000_000 >= before, "{now}");
    assert_eq!(now["mtime_ns"], ns);
    let both = json(
        &server,
        &["setattr", "/t", "--atime", "now", "--mtime", "now"],
    );
    assert!(both["mtime_ns"].as_i64().unwrap() > ns, "{both}");

    let text = ok(ctl(&server, &["stat", "/t"]));
    for key in [
        "atime:",
        "mtime:",
        "ctime:",
        "rdev:       0",
        "nlink:      1",
    ] {
        assert!(text.contains(key), "{key} in {text}");
    }
    for bad in ["soon", "2023-13-01T00:00:00Z", "9999-01-01T00:00:00Z", ""] {
        usage_error(&ctl(&server, &["setattr", "/t", "--mtime", bad]));
    }
}

/// Runs mdsctl with `input` on its stdin (fed from a thread, so a large input never waits on
/// a full pipe while mdsctl waits on the server).
fn ctl_with_input(server: &Server, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(MDSCTL)
        .args(["--server", &server.addr.to_string()])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    match feeder.join().unwrap() {
        Ok(()) => {}
        // mdsctl refused (a missing path, a directory) and exited before reading its input.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("feeding mdsctl's stdin: {e}"),
    }
    out
}

/// `cat`'s stdout, bytes as they are.
fn cat(server: &Server, path: &str) -> Vec<u8> {
    let out = ctl(server, &["cat", path]);
    assert!(
        out.status.success(),
        "cat {path}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn write_copies_stdin_into_a_file_and_cat_prints_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&mds_testkit::bin("mds"), dir.path(), &[]);
    ok(ctl(&server, &["mkdir", "/d"]));

    // A file write makes, with the mode asked for.
    ok(ctl_with_input(
        &server,
        &["write", "-m", "600", "/d/f"],
        b"hello\n",
    ));
    assert_eq!(cat(&server, "/d/f"), b"hello\n");
    let stat = json(&server, &["stat", "/d/f"]);
    assert_eq!(
        (&stat[0]["kind"], &stat[0]["mode"], &stat[0]["size"]),
        (&"file".into(), &"0600".into(), &6.into())
    );

    // 200 KiB of bytes that are not text: four pieces of at most 64 KiB each way, and what
    // the file held before is cut away first.
    let big: Vec<u8> = (0..200 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let out = ctl_with_input(&server, &["-o", "json", "write", "/d/f"], &big);
    let written: serde_json::Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(
        (&written["written"], &written["size"], &written["path"]),
        (&204_800.into(), &204_800.into(), &"/d/f".into())
    );
    assert_eq!(
        written["inode"], stat[0]["inode"],
        "the same file, rewritten"
    );
    assert_eq!(written["mode"], "0600", "a file that exists keeps its mode");
    let back = cat(&server, "/d/f");
    assert_eq!(back.len(), big.len());
    assert!(
        back == big,
        "200 KiB read back differ from what was written"
    );

    // Rewritten shorter: nothing of the old bytes is left.
    ok(ctl_with_input(&server, &["write", "/d/f"], b"short"));
    assert_eq!(cat(&server, "/d/f"), b"short");
    // --append adds at the end.
    ok(ctl_with_input(
        &server,
        &["write", "--append", "/d/f"],
        b" more",
    ));
    assert_eq!(cat(&server, "/d/f"), b"short more");
    // --offset writes over what is there and leaves the rest; past the end, a hole of zeros.
    ok(ctl_with_input(
        &server,
        &["write", "--offset", "2", "/d/f"],
        b"XY",
    ));
    assert_eq!(cat(&server, "/d/f"), b"shXYt more");
    ok(ctl_with_input(
        &server,
        &["write", "--offset", "12", "/d/f"],
        b"Z",
    ));
    assert_eq!(cat(&server, "/d/f"), b"shXYt more\0\0Z");
    // --append to a file that is not there makes it.
    ok(ctl_with_input(
        &server,
        &["write", "-a", "/d/new"],
        b"first",
    ));
    assert_eq!(cat(&server, "/d/new"), b"first");
    // Empty stdin empties the file.
    ok(ctl_with_input(&server, &["write", "/d/new"], b""));
    assert!(cat(&server, "/d/new").is_empty());
    assert_eq!(json(&server, &["stat", "/d/new"])[0]["size"], 0);

    let shown = json(&server, &["cat", "/d/f"]);
    assert_eq!(shown["path"], "/d/f");
    assert_eq!(shown["size"], 13);
    assert_eq!(shown["data_hex"], "7368585974206d6f726500005a");
    assert_eq!(
        ok(ctl(&server, &["layout", "/d/f"])),
        "/d/f: 13 bytes, on the server\n"
    );

    // A file in the object store, its piece placed as a mount places one: `layout` shows it,
    // `cat` (which reads through the server) says where the data is not.
    let slice = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use mds_client::proto::{Body, Op, Placed};
        let c = mds_client::Client::connect(server.addr).await.unwrap();
        let d = c.lookup(mds_client::ROOT, "d").await.unwrap().ino;
        let ino = c.create(d, "o", 0o644).await.unwrap().ino;
        let Body::Slices { first, .. } = c.call(Op::AllocSlices { count: 1 }).await.unwrap() else {
            panic!("ALLOC_SLICES answers ids")
        };
        let piece = Placed {
            slice: first,
            slice_size: 10,
            slice_off: 0,
            file_off: 5,
            len: 10,
        };
        let op = Op::WriteSlices {
            ino,
            handle: 0,
            size: 0,
            placed: vec![piece],
        };
        c.call(op).await.unwrap();
        first
    });
    assert_eq!(
        ok(ctl(&server, &["layout", "/d/o"])),
        format!(
            "/d/o: 15 bytes, on the object store\n  5..15  slice {slice:016x} bytes 0..10 of 10\n"
        )
    );
    let shown = json(&server, &["layout", "/d/o"]);
    assert_eq!(
        (
            shown["objects"].clone(),
            shown["placed"][0]["file_off"].clone()
        ),
        (true.into(), 5.into())
    );
    fails_with(ctl(&server, &["cat", "/d/o"]), "EMEDIUMTYPE");
    ok(ctl(&server, &["rm", "/d/o"]));

    // The server's figures: the bytes its files hold, and no handle left open by mdsctl.
    let status = json(&server, &["status"]);
    assert_eq!(status["file_bytes"], 13, "{status}");
    assert_eq!(
        status["data_bytes"], 4096,
        "13 bytes: one block held {status}"
    );
    assert_eq!(status["open_handles"], 0, "{status}");
    assert_eq!(status["orphans"], 0, "{status}");
    assert!(
        status["inline_data_max"].as_u64().unwrap() >= 204_800,
        "{status}"
    );
    let text = ok(ctl(&server, &["status"]));
    for line in [
        "file_bytes:      13",
        "data_bytes:      4096",
        "open_handles:    0",
        "orphans:         0",
        "inline_data_max: ",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }

    // Errors: a file that is not there, a directory that is not there, a symbolic link
    // (never followed: the server refuses to open one), a directory to write.
    let out = ctl(&server, &["cat", "/d/missing"]);
    assert!(out.stdout.is_empty());
    fails_with(out, "ENOENT");
    fails_with(
        ctl_with_input(&server, &["write", "/nope/f"], b"x"),
        "ENOENT",
    );
    ok(ctl(&server, &["ln", "-s", "f", "/d/l"]));
    fails_with(ctl(&server, &["cat", "/d/l"]), "ELOOP");
    fails_with(ctl_with_input(&server, &["write", "/d/l"], b"x"), "ELOOP");
    fails_with(ctl_with_input(&server, &["write", "/d"], b"x"), "EISDIR");
    assert_eq!(
        cat(&server, "/d/f"),
        b"shXYt more\0\0Z",
        "unchanged by the refusals"
    );
    for args in [
        &["write", "--append", "--offset", "3", "/d/f"][..],
        &["write", "--offset", "soon", "/d/f"],
        &["write"],
        &["cat"],
    ] {
        usage_error(&ctl(&server, args));
    }
    assert_eq!(json(&server, &["status"])["open_handles"], 0);
}
