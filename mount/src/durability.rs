//! What fsync waits for. A server started with `--ack early` answers a change before its
//! commit (`transno > last_committed` on the reply); the mount remembers, per inode, the
//! highest such transno that touched it — the inode, its parent, both parents of a rename and
//! the inode it replaced — so that fsync of an inode returns at once when `last_committed`
//! covers it and otherwise asks the server for a commit (SYNC) and waits, as ceph-fuse's fsync
//! waits for the inode's last unsafe request. fsync of the root means everything the mount did.
//! Under `--ack commit` every answered change is durable already and nothing is remembered.
//! In a cluster each shard has its own transnos and its own session: an inode's number says
//! its shard, whose `last_committed` it is compared with and which is asked to commit.
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
use mds_client::proto::{Op, ROOT_INO, Reply, shard_of};
use parking_lot::{Mutex, RwLock};
use tracing::error;

/// Past this many inodes remembered, those `last_committed` covers are dropped; the next
/// pruning waits until the map has doubled from what was left, so that a long run of early
/// replies without a commit scans the map once per doubling, not once per reply.
const PRUNE_AT: usize = 4096;

pub struct Durability {
    /// Each shard the mount talks to (one outside a cluster, numbered 0): the session that
    /// speaks to it, whose `last_committed` and losses are that shard's alone — transnos are
    /// per shard, and an inode's number says its shard.
    shards: RwLock<HashMap<u16, Arc<Tracked>>>,
    /// Per inode, the highest transno of an early reply that touched it (a transno of the
    /// inode's own shard), and the size at which it is pruned next.
    unsafe_by_ino: Mutex<(HashMap<u64, u64>, usize)>,
    /// Per inode, the last loss (numbered from 1 in the order they were found, over all
    /// shards) that touched it.
    lost_by_ino: Mutex<HashMap<u64, u64>>,
    /// Losses found so far; an open file remembers the count when it opened.
    losses: AtomicU64,
    /// The last loss that touched every inode: a server start that came back without
    /// commits an earlier start had reported ([`mds_client::Rollback`]), which says nothing
    /// of which inodes they changed.
    lost_everywhere: AtomicU64,
}

/// One shard's session, as fsync needs it.
struct Tracked {
    session: Arc<Session>,
    /// The highest transno of any early reply of this shard: what fsync of the root waits for.
    highest: AtomicU64,
    /// The session's loss count when its lost requests were last taken.
    lost_taken: AtomicU64,
    /// The session's rollback count when its rollbacks were last taken.
    rollbacks_taken: AtomicU64,
}

impl Default for Durability {
    fn default() -> Durability {
        Durability::new()
    }
}

impl Durability {
    pub fn new() -> Durability {
        Durability {
            shards: RwLock::new(HashMap::new()),
            unsafe_by_ino: Mutex::new((HashMap::new(), PRUNE_AT)),
            lost_by_ino: Mutex::new(HashMap::new()),
            losses: AtomicU64::new(0),
            lost_everywhere: AtomicU64::new(0),
        }
    }

    /// From now on the mount speaks to `shard` as `session`.
    pub fn track(&self, shard: u16, session: Arc<Session>) {
        self.shards.write().insert(
            shard,
            Arc::new(Tracked {
                session,
                highest: AtomicU64::new(0),
                lost_taken: AtomicU64::new(0),
                rollbacks_taken: AtomicU64::new(0),
            }),
        );
    }

    fn tracked(&self, shard: u16) -> Option<Arc<Tracked>> {
        self.shards.read().get(&shard).cloned()
    }

    /// `shard`'s reply arrived for a request that touched `inodes`: if it is early, they are
    /// not durable until that shard's `last_committed` reaches its transno. (Every inode a
    /// request of a shard changes is that shard's; one of another shard is not noted.)
    pub fn note(&self, shard: u16, reply: &Reply, inodes: &[u64]) {
        if reply.result.is_ok()
            && reply.transno > reply.last_committed
            && let Some(tracked) = self.tracked(shard)
        {
            let transno = reply.transno;
            tracked.highest.fetch_max(transno, Ordering::Relaxed);
            let mut guard = self.unsafe_by_ino.lock();
            let (by_ino, prune_at) = &mut *guard;
            if by_ino.len() >= *prune_at {
                let committed = self.committed_by_shard();
                by_ino.retain(|ino, t| committed.get(&shard_of(*ino)).is_none_or(|c| *t > *c));
                *prune_at = (by_ino.len() * 2).max(PRUNE_AT);
            }
            for &ino in inodes.iter().filter(|&&ino| shard_of(ino) == shard) {
                let t = by_ino.entry(ino).or_insert(0);
                *t = (*t).max(transno);
            }
        }
        self.take_losses();
    }

    fn committed_by_shard(&self) -> HashMap<u16, u64> {
        let shards = self.shards.read();
        shards
            .iter()
            .map(|(&shard, t)| (shard, t.session.last_committed()))
            .collect()
    }

    /// The shards that must commit before fsync of `ino` may return: its own, if an early
    /// reply touched it that its `last_committed` does not cover yet; for the root, every
    /// shard with such a reply (fsync of the root means every change of the mount).
    pub fn pending(&self, ino: u64) -> Vec<u16> {
        if ino == ROOT_INO {
            let shards = self.shards.read();
            return shards
                .iter()
                .filter(|(_, t)| t.highest.load(Ordering::Relaxed) > t.session.last_committed())
                .map(|(&shard, _)| shard)
                .collect();
        }
        let shard = shard_of(ino);
        let transno = self.unsafe_by_ino.lock().0.get(&ino).copied().unwrap_or(0);
        match self.tracked(shard) {
            Some(t) if transno > t.session.last_committed() => vec![shard],
            _ => Vec::new(),
        }
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
            let own = self.lost_by_ino.lock().get(&ino).copied().unwrap_or(0);
            own.max(self.lost_everywhere.load(Ordering::Relaxed))
        };
        (last > since).then_some(last)
    }

    /// Marks the inodes of the requests each session lost since last asked, and logs each.
    fn take_losses(&self) {
        // Read-locked throughout: this runs after every reply, and must not allocate.
        let shards = self.shards.read();
        for tracked in shards.values() {
            let session = &tracked.session;
            if tracked.rollbacks_taken.load(Ordering::Acquire) != session.rollbacks() {
                self.take_rollbacks(tracked);
            }
            if tracked.lost_taken.load(Ordering::Acquire) == session.lost() {
                continue;
            }
            // Under the marks' lock, so that a caller who finds the count taken by another
            // also finds the inodes marked when it looks.
            let mut by_ino = self.lost_by_ino.lock();
            let lost = session.lost();
            if tracked.lost_taken.swap(lost, Ordering::AcqRel) == lost {
                continue;
            }
            for (transno, request) in session.take_lost() {
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

    /// Counts and logs each rollback `tracked`'s session found since last asked: a loss of
    /// every inode, which fsync and close of each file open now answer with EIO once.
    fn take_rollbacks(&self, tracked: &Tracked) {
        // Under the marks' lock, as losses are taken: one caller takes them.
        let _marks = self.lost_by_ino.lock();
        let rollbacks = tracked.session.rollbacks();
        if tracked.rollbacks_taken.swap(rollbacks, Ordering::AcqRel) == rollbacks {
            return;
        }
        for rollback in tracked.session.take_rollbacks() {
            let loss = self.losses.fetch_add(1, Ordering::AcqRel) + 1;
            self.lost_everywhere.fetch_max(loss, Ordering::AcqRel);
            error!(
                reported = rollback.reported,
                now = rollback.now,
                "the server restarted without changes it had reported durable (it went back \
                 in time: transnos after `now` up to `reported` are gone; its store lost them, \
                 or it is not the store it was); fsync and close of every file open now \
                 answer EIO"
            );
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

    /// A mount outside a cluster: one server, shard 0.
    fn one_shard() -> (Durability, Arc<Session>) {
        let session = Arc::new(Session::with_cred(mds_client::proto::Cred::default()));
        let d = Durability::new();
        d.track(0, session.clone());
        (d, session)
    }

    fn early(transno: u64, last_committed: u64) -> Reply {
        Reply::new(1, transno, last_committed, Ok(Body::Done))
    }

    #[test]
    fn an_early_reply_is_pending_for_its_inodes_until_committed() {
        let (d, session) = one_shard();
        d.note(0, &early(10, 4), &[5, 1]);
        d.note(0, &early(12, 4), &[6]);
        d.note(0, &Reply::new(2, 13, 4, Err(Errno::EEXIST)), &[7]);
        d.note(0, &early(9, 9), &[8]);
        assert_eq!(d.pending(5), [0]);
        assert_eq!(d.pending(6), [0]);
        assert_eq!(d.pending(ROOT_INO), [0], "the root waits for everything");
        assert!(d.pending(7).is_empty(), "an error changed nothing");
        assert!(d.pending(8).is_empty(), "answered after its commit");
        session.committed(10);
        assert_eq!((d.pending(5), d.pending(6)), (vec![], vec![0]));
        session.committed(12);
        assert!(d.pending(ROOT_INO).is_empty());
    }

    #[test]
    fn each_shard_is_compared_with_its_own_commits() {
        let (d, zero) = one_shard();
        let one = Arc::new(Session::with_cred(mds_client::proto::Cred::default()));
        d.track(1, one.clone());
        let on_one = |local: u64| 1 << mds_client::proto::SHARD_SHIFT | local;
        // Shard 1's transno 3 is not shard 0's: each counts its own.
        d.note(0, &early(50, 40), &[5]);
        d.note(1, &early(3, 1), &[on_one(7), on_one(2)]);
        d.note(1, &early(4, 1), &[5]);
        assert_eq!(d.pending(on_one(7)), [1]);
        assert_eq!(d.pending(5), [0], "noted by its own shard only");
        let mut root = d.pending(ROOT_INO);
        root.sort_unstable();
        assert_eq!(root, [0, 1], "the root waits for every shard");
        zero.committed(50);
        assert!(d.pending(5).is_empty());
        assert_eq!(
            d.pending(on_one(7)),
            [1],
            "shard 0's commit is not shard 1's"
        );
        one.committed(3);
        assert!(d.pending(on_one(7)).is_empty());
        assert_eq!(
            d.pending(ROOT_INO),
            [1],
            "shard 1's transno 4 is not durable"
        );
    }

    #[test]
    fn a_lost_change_is_reported_once_to_each_file_open_before_it() {
        let (d, session) = one_shard();
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
    fn a_server_that_went_back_in_time_is_a_loss_of_every_file_open_before() {
        let (d, session) = one_shard();
        session.connected(7, false, false, 10);
        session.committed(60);
        let opened_before = d.losses();
        // The next start has only 1..=50 of what the last reported durable.
        session.connected(8, false, false, 50);
        let loss = d
            .lost_since(12, opened_before)
            .expect("any inode may have changed in 51..=60");
        assert_eq!(d.lost_since(ROOT_INO, opened_before), Some(loss));
        assert_eq!(d.lost_since(12, loss), None, "told once");
        assert_eq!(
            d.lost_since(13, d.losses()),
            None,
            "not a file opened later"
        );
        // A restart that kept everything is no loss.
        session.committed(70);
        let now = d.losses();
        session.connected(9, false, false, 70);
        assert_eq!(d.lost_since(12, now), None);
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
