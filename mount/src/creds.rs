//! Who is asking. A FUSE request carries the caller's uid, gid and pid but not its
//! supplementary groups, which the server's permission checks need (a file of group `staff`
//! that a member of `staff` may write): they are read from `/proc/PID/status`, as MooseFS
//! and JuiceFS read them, and kept for a second per (pid, uid, gid) so that a process issuing
//! many requests reads its status once, and one that changes its uid or gid (a daemon
//! dropping root) is read again at once.

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
        // A process gone before we look has no groups to lend: its request goes with its
        // uid and gid alone.
        let groups: Arc<[u32]> = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|status| parse_groups(&status))
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

    #[test]
    fn this_process_groups_are_found_and_the_kernel_has_none() {
        let groups = Groups::default();
        let me = Caller {
            uid: 5,
            gid: 6,
            pid: std::process::id(),
        };
        let cred = groups.cred(me);
        assert_eq!((cred.uid, cred.gid), (5, 6));
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(cred.groups, parse_groups(&status));
        let kernel = Caller { pid: 0, ..me };
        assert!(groups.cred(kernel).groups.is_empty());
        // The same process under another uid (after a setuid) is read again, not served
        // the groups its old identity had.
        let dropped = Caller { uid: 7, ..me };
        groups.cred(dropped);
        groups.cred(me);
        assert_eq!(groups.by_caller.lock().len(), 2, "one entry per identity");
    }
}
