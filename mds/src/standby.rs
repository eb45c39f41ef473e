//! A warm standby (`mds serve --etcd … --standby --follow N`): while it waits for a shard
//! without owner, a thread of its own ("mds-follow") keeps shard N's namespace loaded from
//! the store its owner writes — a RocksDB secondary instance on that store, and each batch
//! the owner commits read from the owner's log ([`journal::Journal::follow`]) into a
//! [`WarmNamespace`] — so that when the owner goes and this standby claims the shard, the
//! start opens the store and serves without loading the namespace, the part of a takeover
//! that grows with the shard (HDFS's standby NameNode, which tails the edit log).
//!
//! The owner writes nothing more for it and never waits for it. What the follower cannot
//! follow (the log file it needed is gone, or a batch it cannot read whole) it loads again;
//! whatever goes wrong, the takeover falls back to the load every start does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use journal::Journal;
use tracing::{info, warn};

use crate::error::{IoContext, Result};
use crate::metrics::{
    STANDBY_FOLLOW_LOADS, STANDBY_FOLLOWED, STANDBY_FOLLOWED_AT, STANDBY_FOLLOWING,
};
use crate::namespace::WarmNamespace;

/// How often the follower reads what the owner committed. The owner keeps its log files
/// until its memtables flush (seconds under load): far longer.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How long it waits before loading again after a failure (no store yet, a read error).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The thread following one shard's store.
pub struct Follower {
    shard: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<Followed>>>,
}

/// What the thread holds once it has loaded the shard.
struct Followed {
    journal: Journal,
    ns: WarmNamespace,
    /// The store's sequence number it has read up to.
    seq: u64,
    /// The secondary instance's own directory (its info log).
    own: PathBuf,
}

impl Follower {
    /// Starts following shard `shard`, whose store is `store`.
    pub fn start(shard: u16, store: PathBuf) -> Result<Follower> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("mds-follow".into())
            .spawn({
                let stop = stop.clone();
                move || follow(shard, &store, &stop)
            })
            .doing(|| "starting the follower thread".into())?;
        info!(
            shard,
            "standby: following shard {shard} to take it over warm"
        );
        Ok(Follower {
            shard,
            stop,
            thread: Some(thread),
        })
    }

    pub fn shard(&self) -> u16 {
        self.shard
    }

    /// Stops following and gives the namespace, brought up to date with all its store holds:
    /// called once this server owns the shard and the last owner has let go of the store, so
    /// nothing is written to it any more. None if it had none, or cannot follow to the end.
    pub fn finish(mut self) -> Option<WarmNamespace> {
        let mut followed = self.stop_thread()?;
        let Followed {
            journal, ns, seq, ..
        } = &mut followed;
        if let Err(e) = journal.follow(seq, |batch| ns.apply(batch)) {
            warn!(shard = self.shard, cause = %e, "standby: cannot read the shard's last commits; loading it");
            return None;
        }
        let Followed {
            journal, ns, own, ..
        } = followed;
        drop(journal);
        let _ = std::fs::remove_dir_all(&own);
        Some(ns)
    }

    fn stop_thread(&mut self) -> Option<Followed> {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.take()?;
        thread.thread().unpark();
        thread.join().ok().flatten()
    }
}

impl Drop for Follower {
    /// Not taken over (the standby claimed another shard, or stops): the thread goes, and
    /// the secondary instance's directory with it.
    fn drop(&mut self) {
        if let Some(followed) = self.stop_thread() {
            let own = followed.own.clone();
            drop(followed);
            let _ = std::fs::remove_dir_all(own);
        }
    }
}

/// The thread: loads the shard, then reads the owner's commits every [`FOLLOW_EVERY`] until
/// told to stop, loading again whenever it cannot follow.
fn follow(shard: u16, store: &Path, stop: &AtomicBool) -> Option<Followed> {
    let gauges = Gauges::new(shard);
    let temp = std::env::temp_dir();
    remove_stale(&temp);
    let own = temp.join(format!("{OWN_PREFIX}{}-shard-{shard}", std::process::id()));
    let mut followed: Option<Followed> = None;
    let mut told = None::<String>;
    while !stop.load(Ordering::Acquire) {
        let pause = match followed.as_mut() {
            None => match load(store, &own) {
                Ok(loaded) => {
                    gauges.loads.increment(1);
                    gauges.read(loaded.ns.last_committed());
                    info!(
                        shard,
                        last_committed = loaded.ns.last_committed(),
                        "standby: shard {shard} loaded; following its owner's commits"
                    );
                    followed = Some(loaded);
                    told = None;
                    FOLLOW_EVERY
                }
                Err(e) => {
                    let e = e.to_string();
                    if told.as_ref() != Some(&e) {
                        warn!(shard, cause = %e, "standby: cannot load shard {shard} to follow it; trying again");
                        told = Some(e);
                    }
                    RETRY_AFTER
                }
            },
            Some(Followed {
                journal, ns, seq, ..
            }) => match journal.follow(seq, |batch| ns.apply(batch)) {
                Ok(_) if ns.broken().is_none() => {
                    gauges.read(ns.last_committed());
                    FOLLOW_EVERY
                }
                outcome => {
                    let why = match outcome {
                        Err(e) => e.to_string(),
                        Ok(_) => ns.broken().unwrap_or_default().to_owned(),
                    };
                    warn!(shard, cause = %why, "standby: cannot follow shard {shard} from its owner's log; loading it again");
                    gauges.following.set(0.0);
                    followed = None;
                    Duration::ZERO
                }
            },
        };
        std::thread::park_timeout(pause);
    }
    gauges.following.set(0.0);
    followed
}

/// The follower's series, labelled with its shard.
struct Gauges {
    following: metrics::Gauge,
    followed: metrics::Gauge,
    followed_at: metrics::Gauge,
    loads: metrics::Counter,
}

impl Gauges {
    fn new(shard: u16) -> Gauges {
        let label = shard.to_string();
        let following = metrics::gauge!(STANDBY_FOLLOWING, "shard" => label.clone());
        following.set(0.0);
        Gauges {
            following,
            followed: metrics::gauge!(STANDBY_FOLLOWED, "shard" => label.clone()),
            followed_at: metrics::gauge!(STANDBY_FOLLOWED_AT, "shard" => label.clone()),
            loads: metrics::counter!(STANDBY_FOLLOW_LOADS, "shard" => label),
        }
    }

    /// The owner's log read to its end, up to commit `transno`.
    fn read(&self, transno: u64) {
        self.following.set(1.0);
        self.followed.set(transno as f64);
        self.followed_at.set(crate::metrics::unix_now());
    }
}

/// The secondary instance's own directory, in the temporary directory: this, the process's
/// pid, `-shard-N`. One per process and shard: two standbys of one host never share one.
const OWN_PREFIX: &str = "mds-follow-";

/// Removes the directories (in `temp`) of followers whose process is gone: a standby killed
/// while it followed never removed its own. One whose pid runs, this process's included, is
/// left alone.
fn remove_stale(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(OWN_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Opens the store as a follower and loads its namespace.
fn load(store: &Path, own: &Path) -> Result<Followed> {
    let journal_error = |source| crate::error::Error::Journal {
        what: format!("following {}", store.display()),
        source,
    };
    let (journal, recovered) = Journal::open_follower(store, own).map_err(journal_error)?;
    let ns = WarmNamespace::load(&journal, &recovered)?;
    let seq = journal.sequence();
    Ok(Followed {
        journal,
        ns,
        seq,
        own: own.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directories_of_followers_that_are_gone_are_removed_and_no_other() {
        let temp = tempfile::tempdir().unwrap();
        // A pid that ran and is gone.
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        let gone = exited.id();
        exited.wait().unwrap();
        let mine = std::process::id();
        let dirs = [
            format!("{OWN_PREFIX}{gone}-shard-0"),
            format!("{OWN_PREFIX}{mine}-shard-1"),
            format!("{OWN_PREFIX}not-a-pid"),
            "something-else-1".to_owned(),
        ];
        for dir in &dirs {
            std::fs::create_dir(temp.path().join(dir)).unwrap();
            std::fs::write(temp.path().join(dir).join("LOG"), b"x").unwrap();
        }
        remove_stale(temp.path());
        let left: Vec<bool> = dirs.iter().map(|d| temp.path().join(d).exists()).collect();
        assert_eq!(left, [false, true, true, true]);
    }
}
