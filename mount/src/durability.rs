//! What fsync waits for. A server started with `--ack early` answers a change before its
//! commit (`transno > last_committed` on the reply); the mount remembers, per inode, the
//! highest such transno that touched it — the inode, its parent, both parents of a rename and
//! the inode it replaced — so that fsync of an inode returns at once when `last_committed`
//! covers it and otherwise asks the server for a commit (SYNC) and waits, as ceph-fuse's fsync
//! waits for the inode's last unsafe request. fsync of the root means everything the mount did.
//! Under `--ack commit` every answered change is durable already and nothing is remembered.
//!
//! A server restart may refuse to take back a change it had answered early (its recovery
//! window closed first): the client library counts it lost and keeps it. The inodes it touched
//! are marked with the loss, and fsync and close on each answer EIO — once per open file that
//! was open when the loss happened, as Linux reports a writeback error once per descriptor —
//! and the loss is logged with what it was.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mds_client::Session;
use mds_client::proto::{Op, ROOT_INO, Reply};
use parking_lot::Mutex;
use tracing::error;

/// Past this many inodes remembered, those `last_committed` covers are dropped; the next
/// pruning waits until the map has doubled from what was left, so that a long run of early
/// replies without a commit scans the map once per doubling, not once per reply.
const PRUNE_AT: usize = 4096;

pub struct Durability {
    session: Arc<Session>,
    /// Per inode, the highest transno of an early reply that touched it, and the size at
    /// which it is pruned next.
    unsafe_by_ino: Mutex<(HashMap<u64, u64>, usize)>,
    /// The highest transno of any early reply: what fsync of the root waits for.
    highest: AtomicU64,
    /// Per inode, the last loss (numbered from 1 in the order they were found) that touched it.
    lost_by_ino: Mutex<HashMap<u64, u64>>,
    /// Losses found so far; an open file remembers the count when it opened.
    losses: AtomicU64,
    /// The session's loss count when its lost requests were last taken.
    lost_taken: AtomicU64,
}

impl Durability {
    pub fn new(session: Arc<Session>) -> Durability {
        Durability {
            session,
            unsafe_by_ino: Mutex::new((HashMap::new(), PRUNE_AT)),
            highest: AtomicU64::new(0),
            lost_by_ino: Mutex::new(HashMap::new()),
            losses: AtomicU64::new(0),
            lost_taken: AtomicU64::new(0),
        }
    }

    /// A reply arrived for a request that touched `inodes`: if it is early, they are not
    /// durable until `last_committed` reaches its transno.
    pub fn note(&self, reply: &Reply, inodes: &[u64]) {
        if reply.result.is_ok() && reply.transno > reply.last_committed {
            let transno = reply.transno;
            self.highest.fetch_max(transno, Ordering::Relaxed);
            let mut guard = self.unsafe_by_ino.lock();
            let (by_ino, prune_at) = &mut *guard;
            if by_ino.len() >= *prune_at {
                let committed = self.session.last_committed();
                by_ino.retain(|_, t| *t > committed);
                *prune_at = (by_ino.len() * 2).max(PRUNE_AT);
            }
            for &ino in inodes {
                let t = by_ino.entry(ino).or_insert(0);
                *t = (*t).max(transno);
            }
        }
        self.take_losses();
    }

    /// The transno fsync of `ino` must see durable, if `last_committed` does not cover it
    /// yet (the root: every change of the mount).
    pub fn pending(&self, ino: u64) -> Option<u64> {
        let transno = if ino == ROOT_INO {
            self.highest.load(Ordering::Relaxed)
        } else {
            self.unsafe_by_ino.lock().0.get(&ino).copied().unwrap_or(0)
        };
        (transno > self.session.last_committed()).then_some(transno)
    }

    /// The loss count now: an open file that remembers it is told of later losses only.
    pub fn losses(&self) -> u64 {
        self.take_losses();
        self.losses.load(Ordering::Relaxed)
    }

    /// The latest loss that touched `ino` (for the root, any loss) if it came after `since`
    /// (what an open file was last told of).
    pub fn lost_since(&self, ino: u64, since: u64) -> Option<u64> {
        self.take_losses();
        let last = if ino == ROOT_INO {
            self.losses.load(Ordering::Relaxed)
        } else {
            self.lost_by_ino.lock().get(&ino).copied().unwrap_or(0)
        };
        (last > since).then_some(last)
    }

    /// Marks the inodes of the requests the session lost since last asked, and logs each.
    fn take_losses(&self) {
        if self.lost_taken.load(Ordering::Acquire) == self.session.lost() {
            return;
        }
        // Under the marks' lock, so that a caller who finds the count taken by another also
        // finds the inodes marked when it looks.
        let mut by_ino = self.lost_by_ino.lock();
        let lost = self.session.lost();
        if self.lost_taken.swap(lost, Ordering::AcqRel) == lost {
            return;
        }
        for (transno, request) in self.session.take_lost() {
            let loss = self.losses.fetch_add(1, Ordering::AcqRel) + 1;
            let inodes = touched_by(&request.op, request.ino);
            error!(
                transno,
                op = request.op.name(),
                ?inodes,
                uid = request.cred.uid,
                "the server restarted and refused to take back a change it had answered \
                 before its commit: the change is lost; fsync and close of these inodes \
                 answer EIO"
            );
            for ino in inodes {
                by_ino.insert(ino, loss);
            }
        }
    }
}

/// The inodes a request changes, as far as the request says: the inode it names, the
/// directories whose entries it changes, and `created` (the inode it made, or 0). A rename's
/// moved and replaced inodes and a release's inode are not in the request; callers add them.
pub fn touched_by(op: &Op, created: u64) -> Vec<u64> {
    let mut inodes = match op {
        Op::Mkdir { parent, .. }
        | Op::Create { parent, .. }
        | Op::Symlink { parent, .. }
        | Op::Mknod { parent, .. }
        | Op::Unlink { parent, .. }
        | Op::Rmdir { parent, .. } => vec![*parent],
        Op::Setattr { ino, .. }
        | Op::Setxattr { ino, .. }
        | Op::Removexattr { ino, .. }
        | Op::Open { ino, .. }
        | Op::Write { ino, .. } => vec![*ino],
        Op::Rename {
            src_parent,
            dst_parent,
            ..
        } => vec![*src_parent, *dst_parent],
        Op::Link { ino, parent, .. } => vec![*ino, *parent],
        _ => vec![],
    };
    if created != 0 {
        inodes.push(created);
    }
    inodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use mds_client::Unsafe;
    use mds_client::proto::{Body, Errno};

    fn lost_request(op: Op, ino: u64) -> Unsafe {
        Unsafe {
            xid: 1,
            op,
            cred: mds_client::proto::Cred::default(),
            ino,
            ticket: 1,
            replayed_as: 0,
        }
    }

    fn early(transno: u64, last_committed: u64) -> Reply {
        Reply::new(1, transno, last_committed, Ok(Body::Done))
    }

    #[test]
    fn an_early_reply_is_pending_for_its_inodes_until_committed() {
        let session = Arc::new(Session::with_cred(mds_client::proto::Cred::default()));
        let d = Durability::new(session.clone());
        d.note(&early(10, 4), &[5, 1]);
        d.note(&early(12, 4), &[6]);
        d.note(&Reply::new(2, 13, 4, Err(Errno::EEXIST)), &[7]);
        d.note(&early(9, 9), &[8]);
        assert_eq!(d.pending(5), Some(10));
        assert_eq!(d.pending(6), Some(12));
        assert_eq!(
            d.pending(ROOT_INO),
            Some(12),
            "the root waits for everything"
        );
        assert_eq!(d.pending(7), None, "an error changed nothing");
        assert_eq!(d.pending(8), None, "answered after its commit");
        session.committed(10);
        assert_eq!((d.pending(5), d.pending(6)), (None, Some(12)));
        session.committed(12);
        assert_eq!(d.pending(ROOT_INO), None);
    }

    #[test]
    fn a_lost_change_is_reported_once_to_each_file_open_before_it() {
        let session = Arc::new(Session::with_cred(mds_client::proto::Cred::default()));
        let d = Durability::new(session.clone());
        let opened_before = d.losses();
        assert_eq!(opened_before, 0);
        let create = Op::Create {
            parent: 3,
            name: "f".into(),
            mode: 0o644,
        };
        session.lose(20, lost_request(create, 40));
        let loss = d
            .lost_since(40, opened_before)
            .expect("the created inode lost it");
        assert_eq!(d.lost_since(3, opened_before), Some(loss), "and its parent");
        assert_eq!(d.lost_since(ROOT_INO, opened_before), Some(loss));
        assert_eq!(
            d.lost_since(41, opened_before),
            None,
            "another inode did not"
        );
        assert_eq!(d.lost_since(40, loss), None, "told once");
        let opened_after = d.losses();
        assert_eq!(
            d.lost_since(40, opened_after),
            None,
            "a file opened later is not told"
        );
    }

    #[test]
    fn requests_name_the_inodes_they_change() {
        let rename = Op::Rename {
            src_parent: 2,
            src_name: "a".into(),
            dst_parent: 3,
            dst_name: "b".into(),
            how: mds_client::proto::RenameHow::Replace,
        };
        assert_eq!(touched_by(&rename, 0), [2, 3]);
        let link = Op::Link {
            ino: 9,
            parent: 4,
            name: "l".into(),
        };
        assert_eq!(touched_by(&link, 0), [9, 4]);
        assert!(touched_by(&Op::Sync, 0).is_empty());
    }
}
