//! What the mount's tests share: a mounted `mdsmount -f` that is unmounted, and its process
//! ended, when dropped — also when the test fails (`fusermount3 -u`, then `umount -l`, then
//! the process is killed) — and small helpers. Every child but the mount itself is bounded by
//! `timeout -k`.
#![allow(dead_code)]

use std::ffi::CString;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mds_testkit::Server;

/// A mounted `mdsmount -f`: unmounted, and its process ended, when dropped.
pub struct Mounted {
    pub at: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
    /// Holds the mount point and the log; leaked instead of removed if the mount would not
    /// go (removing it would walk into the mount).
    dir: Option<tempfile::TempDir>,
}

impl Mounted {
    /// Mounts `server` in the foreground with `options` (`-o` and flags).
    pub fn new(server: &Server, options: &[&str]) -> Mounted {
        Mounted::address(&server.addr.to_string(), options)
    }

    /// Mounts the server at `address` (HOST:PORT) in the foreground with `options`.
    pub fn address(address: &str, options: &[&str]) -> Mounted {
        Mounted::address_env(address, options, &[])
    }

    /// [`Mounted::new`] with `env` in the mount's environment (an object store's
    /// credentials).
    pub fn with_env(server: &Server, options: &[&str], env: &[(&str, &str)]) -> Mounted {
        Mounted::address_env(&server.addr.to_string(), options, env)
    }

    fn address_env(address: &str, options: &[&str], env: &[(&str, &str)]) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("mnt");
        fs::create_dir(&at).unwrap();
        let log = dir.path().join("mount.log");
        // Spawned itself, not under `timeout`: killing it must kill the mount's process; and
        // it dies with the test if the test dies without unwinding.
        let child = mds_testkit::die_with_parent(&mut Command::new(mds_testkit::bin("mdsmount")))
            .arg(address)
            .arg(&at)
            .arg("-f")
            .args(options)
            .envs(env.iter().copied())
            .env("MDSMOUNT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("starting mdsmount");
        let mut mounted = Mounted {
            at,
            log,
            child: Some(child),
            dir: Some(dir),
        };
        mounted.wait_until_mounted();
        mounted
    }

    pub fn wait_until_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&self.at) {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "mdsmount exited ({status}) before mounting: {}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "not mounted: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.at.join(name)
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmounts with `fusermount3 -u` and waits for mdsmount to exit: its exit status.
    pub fn unmount(mut self) -> std::process::ExitStatus {
        assert!(
            bounded("fusermount3", &["-u"], &self.at),
            "fusermount3 -u failed"
        );
        let status = wait_for(self.child.as_mut().unwrap(), Duration::from_secs(40));
        self.child = None;
        status.unwrap_or_else(|| panic!("mdsmount did not exit: {}", self.log_text()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.at) && !bounded("fusermount3", &["-u"], &self.at) {
            bounded("umount", &["-l"], &self.at);
        }
        if let Some(mut child) = self.child.take()
            && wait_for(&mut child, Duration::from_secs(40)).is_none()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        if is_mounted(&self.at) {
            std::mem::forget(self.dir.take());
        }
    }
}

/// `program args… path` under `timeout -k 2 20`: whether it succeeded.
pub fn bounded(program: &str, args: &[&str], path: &Path) -> bool {
    Command::new("timeout")
        .args(["-k", "2", "20", program])
        .args(args)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `path` is a mount point of this namespace (its line in /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = path.to_str().unwrap();
    info.lines()
        .any(|line| line.split(' ').nth(4) == Some(want))
}

pub fn server(dir: &Path, extra: &[&str]) -> Server {
    Server::start(&mds_testkit::bin("mds"), &dir.join("data"), extra)
}

/// A port on 127.0.0.1 free now, for a server restarted on the same address.
pub fn free_listen() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}
