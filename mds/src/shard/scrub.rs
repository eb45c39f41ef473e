//! The scrub of this shard's pending directories (remote directories whose entry lives on
//! another shard, `namespace/ops/remote.rs`): each is asked about on its parent's shard and
//! kept, or deleted when no entry names it. On the cluster thread's runtime, beside the
//! request path.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mds_proto::{Errno, Op};
use tracing::{info, warn};

use super::view::ShardView;
use crate::committer::{CommitMsg, ToCommitter};
use crate::metrics::{REMOTE_DIRS_PENDING, REMOTE_DIRS_SCRUBBED};
use crate::namespace::Namespace;

/// How often the scrub looks at this shard's pending directories, and how old one must be
/// before it is asked about (a MKDIR_REMOTE under way finishes in milliseconds; the parent's
/// shard answers EBUSY for one that is still under way anyway).
pub const SCRUB_EVERY: Duration = Duration::from_secs(2);

/// Starts [`scrub`] on the runtime peer requests run on (none before the server serves its
/// shard, and then nothing is started).
pub fn start(view: &Arc<ShardView>, namespace: Arc<Namespace>, commit_tx: ToCommitter) {
    if let Some(runtime) = view.peers.runtime() {
        runtime.spawn(scrub(namespace, commit_tx, view.clone()));
    }
}

/// The scrub, on the cluster thread's runtime: every [`SCRUB_EVERY`], each pending directory
/// seen at the previous round too, and each being removed, is asked about on its parent's
/// shard by its whole (parent, name, inode) triple (RESOLVE_REMOTE, which answers Done too
/// when the parent names the inode under another name): kept when its entry is durable
/// there, deleted when there is none,
/// left for the next round when that shard is away or still changing the entry. One being
/// removed need not wait a round: its RMDIR holds the name on the parent's shard (EBUSY)
/// from before it was marked until its entry's removal executed. Runs until the process ends.
pub async fn scrub(namespace: Arc<Namespace>, commit_tx: ToCommitter, view: Arc<ShardView>) {
    // The committer ends before the cluster thread's runtime at shutdown: then so does the
    // scrub (nothing it changed would become durable any more).
    let commit = |record| commit_tx.offer(CommitMsg::Record(record)).is_ok();
    let mut seen: HashSet<u64> = HashSet::new();
    let outcome = |what: &'static str| {
        let c = metrics::counter!(REMOTE_DIRS_SCRUBBED, "outcome" => what);
        c.increment(0);
        c
    };
    let (confirmed, deleted) = (outcome("confirmed"), outcome("deleted"));
    // Of those being removed: the RMDIR's entry went (the usual end), or it is still there.
    let (removed, kept) = (outcome("removed"), outcome("kept"));
    loop {
        let pending = namespace.pending_dirs();
        metrics::gauge!(REMOTE_DIRS_PENDING).set(pending.len() as f64);
        tokio::time::sleep(SCRUB_EVERY).await;
        let pending = namespace.pending_dirs();
        let mut next = HashSet::new();
        for (dir, mark) in pending {
            if !dir.removing && !seen.contains(&dir.ino) {
                next.insert(dir.ino);
                continue;
            }
            // A parent on a shard the cluster does not have can hold no entry: nothing is
            // asked (no server would answer), the directory is deleted. (MAKE_PENDING_DIR
            // refuses such a parent; a store written before it did may hold one.)
            let asked = if view.peers.has_shard(mds_proto::shard_of(dir.parent)) {
                view.peers
                    .call(Op::ResolveRemote {
                        parent: dir.parent,
                        name: dir.name.clone(),
                        ino: dir.ino,
                    })
                    .await
            } else {
                Err(Errno::ENOENT)
            };
            match asked {
                Ok(_) => {
                    if let Some(record) = namespace.confirm_pending(dir.ino, mark) {
                        if dir.removing {
                            info!(ino = dir.ino, parent = dir.parent, name = %dir.name, "remote directory kept: its entry is still there, its RMDIR did not happen");
                            kept.increment(1);
                        } else {
                            info!(ino = dir.ino, parent = dir.parent, name = %dir.name, "remote directory confirmed");
                            confirmed.increment(1);
                        }
                        if !commit(record) {
                            return;
                        }
                    }
                }
                Err(Errno::ENOENT) => match namespace.drop_pending(dir.ino, mark) {
                    Ok(Some(record)) => {
                        if dir.removing {
                            info!(ino = dir.ino, parent = dir.parent, name = %dir.name, "remote directory removed");
                            removed.increment(1);
                        } else {
                            info!(ino = dir.ino, parent = dir.parent, name = %dir.name, "pending directory without an entry deleted");
                            deleted.increment(1);
                        }
                        if !commit(record) {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        warn!(ino = dir.ino, parent = dir.parent, name = %dir.name, errno = ?e, "pending directory without an entry kept: it is not empty");
                        next.insert(dir.ino);
                    }
                },
                Err(e) => {
                    if e != Errno::EBUSY {
                        warn!(ino = dir.ino, errno = ?e, "could not ask about a pending directory; asking again");
                    }
                    next.insert(dir.ino);
                }
            }
        }
        seen = next;
    }
}
