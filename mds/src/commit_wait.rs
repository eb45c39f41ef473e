//! When a small commit waits for a sibling (`--commit-siblings`): PostgreSQL's
//! `commit_delay`/`commit_siblings`, measured rather than set. With two clients of one request
//! each, commits alternate — one client's create syncs while the other's arrives and waits for
//! the next sync — so every sync carries one mutation and the disk sets the rate. A commit of a
//! few records that waits a fraction of a sync for one more lets both ride one sync; once they
//! do, their replies leave together and their next requests arrive together, so the waits keep
//! paying.
//!
//! Whether to wait is learnt from what happens, as a score: a small commit that finds another
//! record already waiting when it finishes (the alternation above) raises it, one that finds
//! none lowers it; a wait that a record ends raises it, one that times out lowers it twice as
//! much. Waits happen only while the score is positive and the batch is small, so with one
//! client (nobody to wait for) or under load (batches already large) the committer never waits,
//! and a wait is never longer than half the recent sync time (nor [`MAX_WAIT`]). Pure state with
//! times passed in, so the rules are tested without a clock.

use std::time::Duration;

/// Batches of at most this many records may wait: beyond it, siblings already share syncs.
pub const SMALL_BATCH: usize = 4;

/// The longest wait, whatever the sync time says.
pub const MAX_WAIT: Duration = Duration::from_millis(1);

/// The shortest wait worth making: below it, a sibling would not make it across the loopback.
const MIN_WAIT: Duration = Duration::from_micros(20);

/// Bounds of the score: a long run of successes is forgotten after a few failures.
const SCORE_MAX: i32 = 8;
const SCORE_MIN: i32 = -4;

/// A moving average (1/8 weight to the newest), of nanoseconds; `None` until the first value.
#[derive(Clone, Copy, Debug, Default)]
struct Average(Option<f64>);

impl Average {
    fn observe(&mut self, d: Duration) {
        let x = d.as_nanos() as f64;
        self.0 = Some(match self.0 {
            Some(a) => a + (x - a) / 8.0,
            None => x,
        });
    }

    fn get(self) -> Option<Duration> {
        self.0.map(|ns| Duration::from_nanos(ns as u64))
    }
}

/// How one wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// A record arrived after this long.
    Joined(Duration),
    /// None came in time.
    TimedOut,
}

#[derive(Debug)]
pub struct SiblingWait {
    enabled: bool,
    score: i32,
    /// How long commits take (write and sync).
    sync: Average,
    /// How long a successful wait took: what the next one allows, twice over.
    gap: Average,
    /// The batch being committed was gathered by a successful wait: what is (not) waiting
    /// when it finishes says nothing about alternation.
    joined: bool,
}

impl SiblingWait {
    pub fn new(enabled: bool) -> SiblingWait {
        SiblingWait {
            enabled,
            score: 0,
            sync: Average::default(),
            gap: Average::default(),
            joined: false,
        }
    }

    /// With `held` records in hand and nothing else arrived: how long to wait for one more
    /// before committing, if at all.
    pub fn wait_for(&self, held: usize) -> Option<Duration> {
        if !self.enabled || held == 0 || held > SMALL_BATCH || self.score <= 0 {
            return None;
        }
        let sync = self.sync.get()?;
        let ceiling = (sync / 2).min(MAX_WAIT);
        let wanted = self.gap.get().map_or(ceiling, |g| g * 2);
        let wait = wanted.clamp(MIN_WAIT, ceiling.max(MIN_WAIT));
        (wait <= ceiling).then_some(wait)
    }

    /// The wait [`SiblingWait::wait_for`] asked for ended.
    pub fn waited(&mut self, how: Waited) {
        match how {
            Waited::Joined(after) => {
                self.gap.observe(after);
                self.bump(1);
                self.joined = true;
            }
            Waited::TimedOut => {
                self.bump(-2);
                self.joined = false;
            }
        }
    }

    /// A commit of `records` took `took`; when it finished, `waiting` records had arrived.
    pub fn committed(&mut self, records: usize, took: Duration, waiting: bool) {
        self.sync.observe(took);
        if records <= SMALL_BATCH && !std::mem::take(&mut self.joined) {
            self.bump(if waiting { 1 } else { -1 });
        }
    }

    fn bump(&mut self, by: i32) {
        self.score = (self.score + by).clamp(SCORE_MIN, SCORE_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: Duration = Duration::from_micros(300);

    #[test]
    fn alternating_small_commits_start_the_waits_and_joined_waits_keep_them() {
        let mut w = SiblingWait::new(true);
        assert_eq!(w.wait_for(1), None, "nothing learnt yet");
        // One client's record waits each time a one-record commit finishes: alternation.
        w.committed(1, SYNC, true);
        let first = w.wait_for(1).expect("alternation makes it wait");
        assert_eq!(first, SYNC / 2, "at first half a sync");
        // The sibling came after 40 us: the next waits allow twice that.
        w.waited(Waited::Joined(Duration::from_micros(40)));
        w.committed(2, SYNC, false);
        assert_eq!(w.wait_for(1), Some(Duration::from_micros(80)));
        // Steady state: every wait joins; nothing waits after the joined commits, and that
        // does not count against them.
        for _ in 0..20 {
            w.waited(Waited::Joined(Duration::from_micros(40)));
            w.committed(2, SYNC, false);
        }
        assert!(w.wait_for(1).is_some());
        assert_eq!(
            w.wait_for(SMALL_BATCH + 1),
            None,
            "a large batch never waits"
        );
    }

    #[test]
    fn one_client_never_waits_and_failed_waits_stop_them() {
        let mut w = SiblingWait::new(true);
        for _ in 0..10 {
            w.committed(1, SYNC, false); // nobody else: nothing waits after a commit
            assert_eq!(w.wait_for(1), None);
        }
        // Alternation seen, waits begin; then the second client goes: two timeouts stop them.
        for _ in 0..6 {
            w.committed(1, SYNC, true);
        }
        assert!(w.wait_for(1).is_some());
        w.waited(Waited::TimedOut);
        w.committed(1, SYNC, false);
        w.waited(Waited::TimedOut);
        w.committed(1, SYNC, false);
        assert_eq!(w.wait_for(1), None, "two timeouts outweigh what was learnt");
    }

    #[test]
    fn waits_are_bounded_by_the_sync_and_off_means_never() {
        let mut w = SiblingWait::new(true);
        w.committed(1, Duration::from_millis(20), true); // a slow disk
        assert_eq!(w.wait_for(1), Some(MAX_WAIT), "never more than MAX_WAIT");
        w.waited(Waited::Joined(Duration::from_millis(5)));
        assert_eq!(
            w.wait_for(1),
            Some(MAX_WAIT),
            "a slow sibling is not waited for longer"
        );
        let mut fast = SiblingWait::new(true);
        fast.committed(1, Duration::from_micros(10), true); // a sync faster than any sibling
        assert_eq!(
            fast.wait_for(1),
            None,
            "half a sync is below the shortest wait"
        );
        let mut off = SiblingWait::new(false);
        for _ in 0..10 {
            off.committed(1, SYNC, true);
        }
        assert_eq!(off.wait_for(1), None);
    }
}
