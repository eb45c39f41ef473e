//! Who is asking. A FUSE request carries the caller's uid, gid and pid but not its
//! supplementary groups, which the server's permission checks need (a file of group `staff`
//! that a member of `staff` may write): they are read from `/proc/PID/status`, as MooseFS
//! and JuiceFS read them, and kept for a second per (pid, uid, gid) so that a process issuing
//! many requests reads its status once, and one that changes its uid or gid (a daemon
//! dropping root) is read again at once.
//!
//! The status is believed only if it is the status of the identity that asked: its
//! file-system uid and gid (those the kernel puts in the request's header) must be the
//! request's. A process that changed its ids or exec'd a set-ID program since it asked, or a
//! new process that took the pid of one that is gone, would otherwise lend its groups to a
//! request that was never theirs; such a request goes with its uid and gid alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mds_client::proto::{Cred, MAX_GROUPS};
use parking_lot::Mutex;

/// The identity in a FUSE request's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// 0 for requests the kernel makes on nobody's behalf (a release at exit, a forget).
    pub pid: u32,
}

impl Caller {
    pub fn of(req: &fuser::Request) -> Caller {
        Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        }
    }
}

/// How long a process's groups are taken as read: a process that changes its groups (rare:
/// `newgrp`, a setgroups before exec) is seen with its new ones within this.
const GROUPS_TTL: Duration = Duration::from_secs(1);

/// Past this many pids cached, the stale ones are dropped before the next is added.
const GROUPS_CACHE_PIDS: usize = 4096;

/// A process's groups, and when they were read.
type Read = (Instant, Arc<[u32]>);

/// Supplementary groups by caller — pid, uid and gid, so that a process whose identity
/// changed is not checked with the groups it had — read when first needed and kept for
/// [`GROUPS_TTL`].
#[derive(Default)]
pub struct Groups {
    by_caller: Mutex<HashMap<Caller, Read>>,
}

impl Groups {
    /// The credentials a request of `caller` carries to the server.
    pub fn cred(&self, caller: Caller) -> Cred {
        Cred {
            uid: caller.uid,
            gid: caller.gid,
            groups: self.of(caller).to_vec(),
        }
    }

    fn of(&self, caller: Caller) -> Arc<[u32]> {
        let pid = caller.pid;
        if pid == 0 {
            return Arc::from([]);
        }
        let now = Instant::now();
        if let Some((read, groups)) = self.by_caller.lock().get(&caller)
            && now.duration_since(*read) < GROUPS_TTL
        {
            return groups.clone();
        }
        // A process gone before we look has no groups to lend, nor has one that is no longer
        // (or not yet) the identity that asked: its request goes with its uid and gid alone.
        let groups: Arc<[u32]> = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| groups_of(&status, caller))
            .unwrap_or_default()
            .into();
        let mut by_caller = self.by_caller.lock();
        if by_caller.len() >= GROUPS_CACHE_PIDS {
            by_caller.retain(|_, (read, _)| now.duration_since(*read) < GROUPS_TTL);
        }
        by_caller.insert(caller, (now, groups.clone()));
        groups
    }
}

/// The supplementary groups in a `/proc/PID/status` (one read of it: the kernel writes every
/// line from one snapshot of the process's credentials), if that status is `caller`'s: its
/// file-system uid and gid, the fourth figure of the `Uid:` and `Gid:` lines, are the
/// request's. `None` otherwise.
fn groups_of(status: &str, caller: Caller) -> Option<Vec<u32>> {
    let fs_id = |prefix: &str| -> Option<u32> {
        let line = status.lines().find_map(|line| line.strip_prefix(prefix))?;
        line.split_whitespace().nth(3)?.parse().ok()
    };
    if fs_id("Uid:")? != caller.uid || fs_id("Gid:")? != caller.gid {
        tracing::debug!(
            pid = caller.pid,
            uid = caller.uid,
            gid = caller.gid,
            "the process is no longer the identity that asked: no supplementary groups"
        );
        return None;
    }
    Some(parse_groups(status))
}

/// The `Groups:` line of a `/proc/PID/status`, at most [`MAX_GROUPS`] of them (the server
/// refuses more; the first ones are kept, as NFS's AUTH_SYS keeps its first 16).
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|list| {
            list.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .take(MAX_GROUPS)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_line_is_read_and_capped() {
        let status =
            "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 1000 \nNSpid:\t9\n";
        assert_eq!(parse_groups(status), [4, 24, 27, 1000]);
        assert!(parse_groups("Groups:\t\n").is_empty());
        assert!(parse_groups("Name:\tx\n").is_empty());
        let many = (0..100)
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            parse_groups(&format!("Groups:\t{many}\n")).len(),
            MAX_GROUPS
        );
    }

    /// Issue 53, finding 10: a status is believed only for the identity that asked.
    #[test]
    fn groups_are_lent_only_by_the_identity_that_asked() {
        let status = "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\n\
                      Groups:\t4 27 1000 \n";
        let asked = |uid, gid| Caller { uid, gid, pid: 9 };
        assert_eq!(groups_of(status, asked(1000, 100)), Some(vec![4, 27, 1000]));
        assert_eq!(groups_of(status, asked(0, 100)), None, "another uid");
        assert_eq!(groups_of(status, asked(1000, 0)), None, "another gid");
        // A set-user-ID program: real 1000, effective and file-system 0. The header says 0.
        let setuid = "Uid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\nGroups:\t4\n";
        assert_eq!(groups_of(setuid, asked(0, 100)), Some(vec![4]));
        assert_eq!(groups_of(setuid, asked(1000, 100)), None);
        assert_eq!(
            groups_of("Groups:\t4 27\n", asked(1000, 100)),
            None,
            "a status without ids proves nothing"
        );
    }

    /// This process's file-system uid and gid, as a FUSE header would carry them.
    fn own_ids() -> (u32, u32) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let fs_id = |prefix: &str| {
            let line = status.lines().find_map(|l| l.strip_prefix(prefix)).unwrap();
            line.split_whitespace().nth(3).unwrap().parse().unwrap()
        };
        (fs_id("Uid:"), fs_id("Gid:"))
    }

    #[test]
    fn this_process_groups_are_found_and_the_kernel_has_none() {
        let groups = Groups::default();
        let (uid, gid) = own_ids();
        let me = Caller {
            uid,
            gid,
            pid: std::process::id(),
        };
        let cred = groups.cred(me);
        assert_eq!((cred.uid, cred.gid), (uid, gid));
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(cred.groups, parse_groups(&status));
        let kernel = Caller { pid: 0, ..me };
        assert!(groups.cred(kernel).groups.is_empty());
        // The same pid under another uid — a process that changed its ids since it asked,
        // or another that took its pid — is not lent the groups this one has.
        let other = Caller {
            uid: uid.wrapping_add(7),
            ..me
        };
        let cred = groups.cred(other);
        assert_eq!((cred.uid, cred.gid), (other.uid, gid));
        assert!(cred.groups.is_empty(), "{:?}", cred.groups);
        assert!(
            groups
                .cred(Caller {
                    gid: gid.wrapping_add(7),
                    ..me
                })
                .groups
                .is_empty()
        );
        assert_eq!(groups.cred(me).groups, parse_groups(&status));
        assert_eq!(groups.by_caller.lock().len(), 3, "one entry per identity");
    }

    /// A process with groups of its own (made by `setpriv`, which needs root): its groups go
    /// with requests of its identity, and with none of another's that names its pid — a
    /// request from before it changed its ids, or from an earlier holder of its pid. Before
    /// the check, the second was lent uid 1000's groups.
    #[test]
    fn another_identity_at_the_same_pid_is_lent_no_groups() {
        if own_ids() != (0, 0) {
            eprintln!("not root: setpriv cannot give a child another uid; skipped");
            return;
        }
        let mut child = std::process::Command::new("setpriv")
            .args([
                "--reuid=1000",
                "--regid=1000",
                "--groups=4242,4343",
                "sleep",
                "30",
            ])
            .spawn()
            .expect("setpriv");
        let pid = child.id();
        let groups = Groups::default();
        let mut theirs = Vec::new();
        // Until setpriv has dropped to uid 1000, its status is root's: wait (bounded).
        for _ in 0..500 {
            theirs = groups
                .cred(Caller {
                    uid: 1000,
                    gid: 1000,
                    pid,
                })
                .groups;
            if !theirs.is_empty() {
                break;
            }
            groups.by_caller.lock().clear();
            std::thread::sleep(Duration::from_millis(10));
        }
        let roots = groups
            .cred(Caller {
                uid: 0,
                gid: 0,
                pid,
            })
            .groups;
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(theirs, [4242, 4343]);
        assert!(roots.is_empty(), "root's request was lent {roots:?}");
    }
}
