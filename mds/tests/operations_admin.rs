//! What an operator meets: a busy address is refused before any store is created, a store
//! another server holds is refused naming that server, SIGHUP does not kill a serving server
//! (its default action would) and loses no request, and the start-up log says what runs.

mod common;

use std::process::Command;

use mds_client::ROOT;

fn serve(data: &std::path::Path, listen: &str) -> std::process::Output {
    Command::new(common::MDS)
        .args(["serve", "--data"])
        .arg(data)
        .args(["--listen", listen, "--metrics-listen", "127.0.0.1:0"])
        .output()
        .unwrap()
}

#[test]
fn a_busy_address_is_refused_before_a_store_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let store = dir.path().join("store");
    let out = serve(&store, &busy.local_addr().unwrap().to_string());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("address in use"), "{stderr}");
    assert!(
        !store.exists(),
        "no store may be created for a server that cannot listen"
    );
}

#[test]
fn a_store_another_server_holds_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = common::start(dir.path(), &[]);
    let out = serve(dir.path(), "127.0.0.1:0");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("in use by a running server (pid {})", first.pid())),
        "{stderr}"
    );
    let log = first.log_text();
    assert!(log.contains("mds serving"), "{log}");
    assert!(log.contains(env!("CARGO_PKG_VERSION")), "{log}");
    // The line names every setting an operator asks about, defaults too.
    let serving = log.lines().find(|l| l.contains("mds serving")).unwrap();
    for setting in [
        "ack=\"commit\"",
        "cred_check=",
        "edit_log=\"on\"",
        "inline_data_max=1048576",
        "object_grace=3600s",
        "session_expiry=",
        "max_uncommitted=65536",
        "commit_siblings=",
    ] {
        assert!(serving.contains(setting), "no {setting} in {serving}");
    }
    assert!(first.stop().success());
}

#[test]
fn sighup_under_load_loses_nothing_and_kills_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = server.client().await;
        let d = client.mkdir(ROOT, "hup", 0o755).await.unwrap().ino;
        let mut creates = tokio::task::JoinSet::new();
        for i in 0..3000 {
            let client = client.clone();
            creates.spawn(async move { client.create(d, &format!("f{i}"), 0o644).await });
            if i % 1000 == 500 {
                server.signal(libc::SIGHUP);
            }
        }
        let mut ok = 0;
        while let Some(done) = creates.join_next().await {
            done.unwrap().unwrap();
            ok += 1;
        }
        assert_eq!(ok, 3000);
        assert_eq!(client.readdir_all(d).await.unwrap().len(), 3000);
    });
    let log = server.log_text();
    assert!(log.contains("SIGHUP"), "{log}");
    assert!(server.stop().success(), "still serving, stopped cleanly");
}

/// Under systemd (`Type=notify`), the server says READY=1 once it listens and STOPPING=1 at
/// SIGTERM, on the datagram socket NOTIFY_SOCKET names.
#[test]
fn it_tells_the_service_manager_when_it_is_ready_and_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let manager = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    manager
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut child = Command::new(common::MDS)
        .args(["serve", "--data"])
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &socket_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    let n = manager.recv(&mut buf).expect("READY=1 within a minute");
    let said = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(said.contains("READY=1"), "{said}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = manager.recv(&mut buf).expect("STOPPING=1 at SIGTERM");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert!(child.wait().unwrap().success());
}

/// An online backup: SIGUSR1 writes a checkpoint of the store while the server serves; the
/// copy is fsck-clean and a server started on it finds everything committed before it.
#[test]
fn sigusr1_writes_a_checkpoint_that_restores_clean() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let backups_flag = backups.to_str().unwrap().to_owned();
    let server = common::start(
        &dir.path().join("data"),
        &["--checkpoint-dir", &backups_flag],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = server.client().await;
        let d = c.mkdir(ROOT, "kept", 0o755).await.unwrap().ino;
        for i in 0..50 {
            c.create(d, &format!("f{i}"), 0o644).await.unwrap();
        }
    });
    server.signal(libc::SIGUSR1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let written = loop {
        let log = server.log_text();
        if let Some(rest) = log.split("checkpoint written to ").nth(1) {
            break std::path::PathBuf::from(rest.split_whitespace().next().unwrap());
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint: {log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(written.starts_with(&backups), "{}", written.display());
    // Served on while the copy was taken; the copy is a store of its own.
    let (code, out) = common::fsck(&written);
    assert_eq!(code, 0, "{out}");
    assert!(server.stop().success());
    let restored = common::InProcess::on(&written);
    rt.block_on(async {
        let c = restored.client().await;
        let d = c.lookup(ROOT, "kept").await.unwrap().ino;
        assert_eq!(c.readdir_all(d).await.unwrap().len(), 50);
    });
    restored.stop().unwrap();
}
