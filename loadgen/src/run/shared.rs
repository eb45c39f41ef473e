//! What the whole run shares while it runs ([`Shared`]): whether to stop, the operations
//! left and done, the outages seen, the logs and the latency histograms. The run makes it;
//! the lanes and the progress display read and count into it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use mds_client::resilient::{Downtime, Outages};

use super::latency::Latencies;

/// What the whole run shares.
pub(super) struct Shared {
    pub(super) stop: AtomicBool,
    /// Operations left to start in a `--count` run.
    pub(super) budget: AtomicU64,
    pub(super) counted: bool,
    /// Counted operations answered so far, and warm-up ones.
    pub(super) done: AtomicU64,
    pub(super) warmup_done: AtomicU64,
    /// The end of the warm-up: requests intended from then on count.
    pub(super) measure_from: Instant,
    pub(super) outages: Arc<Outages>,
    /// Down time as of `measure_from` (what the warm-up saw), once it has passed.
    pub(super) downtime_at_start: std::sync::Mutex<Option<Downtime>>,
    pub(super) send_log: bool,
    pub(super) ack_log: Option<std::sync::mpsc::Sender<String>>,
    pub(super) failure: std::sync::Mutex<Option<String>>,
    pub(super) latencies: Latencies,
}

impl Shared {
    /// Takes the right to start one more counted operation.
    pub(super) fn take_one(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        if self.counted {
            return self
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok();
        }
        true
    }
}
