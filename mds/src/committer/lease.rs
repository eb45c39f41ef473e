//! The commit deadline of a shard's owner on shared storage: the moment until which its lease
//! in etcd surely holds, on this process's monotonic clock, which the committer checks before
//! every write to the store. A lease alone is not mutual exclusion: an owner stopped past its
//! TTL (SIGSTOP, a long stall, a slow disk) resumes believing it owns the shard while a standby
//! on another host already serves it, and the epoch check at open fences off only a server
//! that opens the store after that. So the owner commits only while `sent + TTL - margin` of
//! its last successful renewal lies ahead (`sent` is when the renewal was asked for, so an
//! answer that comes late extends nothing), and stops at once (fail-stop, as when etcd says the
//! lease is gone) at the first write it would make past it — the write a stopped process had
//! pending when it was resumed included. The check is one atomic load and one clock read per
//! group commit; outside shared storage (one host, where RocksDB's lock keeps a second server
//! out) the deadline is unbounded and the clock is not read.
//!
//! A process holds at most one lease and serves at most one shard, and the thread that renews
//! the lease and the committer have no common owner before the store is open: the deadline is
//! the process's one [`OWNER_LEASE`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::error;

/// The exit status of a server that stopped because it lost its shard's lease (EX_TEMPFAIL:
/// a service manager restarts it, and it claims again or waits as the owner it finds says).
pub const EXIT_LEASE_LOST: i32 = 75;

/// Ends the process now, without unwinding or flushing: another server may be given the
/// shard at any moment, and nothing may be committed after that. The committer calls it too,
/// when its lease's deadline passed before a write (`committer::lease`).
pub fn fail_stop(why: &str) -> ! {
    error!("lost the shard's lease: {why}; stopping at once (fail-stop)");
    // SAFETY: _exit(2) ends the process; no destructor runs, as after SIGKILL, which the
    // store survives by design.
    unsafe { libc::_exit(EXIT_LEASE_LOST) }
}

/// This process's lease: unbounded until `cluster::keep_lease` binds it (shared storage only).
pub static OWNER_LEASE: LeaseDeadline = LeaseDeadline::unbounded();

/// No lease bounds the commits.
const UNBOUNDED: u64 = u64::MAX;

/// Until when a lease surely holds, as nanoseconds after [`base`] (a plain integer, so that
/// the committer's check is one load).
#[derive(Debug)]
pub struct LeaseDeadline {
    valid_until_ns: AtomicU64,
}

/// The lease may have run out: it was `past_by` past its deadline when checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    pub past_by: Duration,
}

/// The origin of the deadlines' nanoseconds, fixed at first use.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `at` as nanoseconds after the base; an instant before the base (a deadline already past
/// when the base was fixed) is the base itself, which has passed too.
fn ns(at: Instant) -> u64 {
    let since = at.checked_duration_since(base()).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(UNBOUNDED - 1)
}

/// The last moment a lease of `ttl` renewed (or granted) by a request sent at `sent` surely
/// still holds: etcd starts its TTL no earlier than it receives the request.
fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(mds_cluster::renewal_margin(ttl))
}

impl LeaseDeadline {
    /// A deadline that never passes: commits need no lease.
    pub const fn unbounded() -> LeaseDeadline {
        LeaseDeadline {
            valid_until_ns: AtomicU64::new(UNBOUNDED),
        }
    }

    /// From now on commits need the lease of `ttl` granted by a request sent at `granted`.
    pub fn bind(&self, granted: Instant, ttl: Duration) {
        self.valid_until_ns
            .store(ns(valid_until(granted, ttl)), Ordering::Release);
    }

    /// A renewal sent at `sent` was answered with `ttl`: the deadline moves to `sent + ttl -
    /// margin` if that is later (an answer to an older request never moves it back). An
    /// unbounded deadline stays unbounded.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        self.valid_until_ns
            .fetch_max(ns(valid_until(sent, ttl)), Ordering::AcqRel);
    }

    /// Whether the lease surely holds at `now`.
    pub fn holds_at(&self, now: Instant) -> Result<(), Expired> {
        let until = self.valid_until_ns.load(Ordering::Acquire);
        if until == UNBOUNDED {
            return Ok(());
        }
        let now = ns(now);
        if now < until {
            Ok(())
        } else {
            Err(Expired {
                past_by: Duration::from_nanos(now - until),
            })
        }
    }

    /// Whether the lease surely holds now: the committer asks before each write.
    pub fn holds(&self) -> Result<(), Expired> {
        if self.valid_until_ns.load(Ordering::Relaxed) == UNBOUNDED {
            return Ok(());
        }
        self.holds_at(Instant::now())
    }
}

#[cfg(test)]
#[allow(clippy::unchecked_time_subtraction)] // instants a few seconds after now
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);
    /// `renewal_margin(3 s)`: a sixth of the TTL, at least 500 ms.
    const MARGIN: Duration = Duration::from_millis(500);

    #[test]
    fn the_margin_is_the_one_the_keep_alive_gives_up_at() {
        assert_eq!(mds_cluster::renewal_margin(TTL), MARGIN);
        assert_eq!(
            mds_cluster::renewal_margin(Duration::from_secs(60)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn an_unbound_deadline_never_passes_and_renewals_do_not_bind_it() {
        let lease = LeaseDeadline::unbounded();
        let t0 = Instant::now();
        lease.renewed(t0, TTL);
        assert_eq!(lease.holds_at(t0 + Duration::from_secs(3600)), Ok(()));
        assert_eq!(lease.holds(), Ok(()));
    }

    #[test]
    fn a_bound_lease_holds_until_the_ttl_less_the_margin_from_its_request() {
        let lease = LeaseDeadline::unbounded();
        let granted = Instant::now();
        lease.bind(granted, TTL);
        let deadline = granted + TTL - MARGIN;
        assert_eq!(lease.holds_at(granted), Ok(()));
        assert_eq!(lease.holds_at(deadline - Duration::from_nanos(1)), Ok(()));
        assert_eq!(
            lease.holds_at(deadline),
            Err(Expired {
                past_by: Duration::ZERO
            })
        );
        // A process resumed long after (SIGSTOP): the first check after it says how long.
        assert_eq!(
            lease.holds_at(deadline + Duration::from_secs(7)),
            Err(Expired {
                past_by: Duration::from_secs(7)
            })
        );
    }

    #[test]
    fn a_renewal_counts_from_its_request_and_never_moves_the_deadline_back() {
        let lease = LeaseDeadline::unbounded();
        let t0 = Instant::now();
        lease.bind(t0, TTL);
        // Sent at t0 + 1 s: holds until t0 + 3.5 s, whenever its answer came.
        let sent = t0 + Duration::from_secs(1);
        lease.renewed(sent, TTL);
        let deadline = sent + TTL - MARGIN;
        assert_eq!(lease.holds_at(deadline - Duration::from_nanos(1)), Ok(()));
        assert!(lease.holds_at(deadline).is_err());
        // An answer that arrives 10 s late (the process was stopped while it was under way)
        // extends nothing past its request's TTL: the check after the resume fails.
        assert!(lease.holds_at(sent + Duration::from_secs(10)).is_err());
        // An older request's answer, taken after a newer one's, leaves the newer deadline.
        lease.renewed(t0, TTL);
        assert_eq!(lease.holds_at(deadline - Duration::from_nanos(1)), Ok(()));
        // A newer renewal moves it on.
        let later = t0 + Duration::from_secs(2);
        lease.renewed(later, TTL);
        assert_eq!(
            lease.holds_at(later + TTL - MARGIN - Duration::from_nanos(1)),
            Ok(())
        );
        // A shorter TTL from etcd counts as given.
        let short = Duration::from_secs(1);
        let last = t0 + Duration::from_secs(5);
        lease.renewed(last, short);
        assert!(lease.holds_at(last + short).is_err());
    }

    #[test]
    fn a_deadline_before_the_clocks_base_has_passed() {
        let lease = LeaseDeadline::unbounded();
        // Fix the base, then bind a lease granted long before it: its deadline is past.
        let now = Instant::now();
        let _ = base();
        let Some(long_ago) = now.checked_sub(Duration::from_secs(60)) else {
            return; // a machine up for less than a minute: no instant that old
        };
        lease.bind(long_ago, TTL);
        assert!(lease.holds_at(now).is_err());
    }
}
