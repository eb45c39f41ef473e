//! One pending reply: its transno and its payload behind the reply's own lock.
//!
//! The lock is per reply (Lustre's fix for `srv_lock`): whoever releases a reply — its
//! partition's drain, or a partner partition draining for a stalled owner — touches only that
//! reply's state, never a service-wide lock. Today a drain owns the replies it took out of
//! the queue under the queue's lock, so the reply's own lock is uncontended; it is what would
//! let a reply be released from outside the queue (a request waiting on it) without adding
//! one.

use crate::sync::Mutex;

/// A reply waiting for the commit of `transno`.
#[derive(Debug)]
pub struct PendingReply<T> {
    transno: u64,
    /// `None` once released: the payload leaves exactly once.
    state: Mutex<Option<T>>,
}

impl<T> PendingReply<T> {
    pub(crate) fn new(transno: u64, payload: T) -> Self {
        PendingReply {
            transno,
            state: Mutex::new(Some(payload)),
        }
    }

    /// The transno whose durability this reply waits for.
    pub fn transno(&self) -> u64 {
        self.transno
    }

    /// Takes the payload out under this reply's lock; `None` if someone already did.
    pub fn take(&self) -> Option<T> {
        self.state.lock().take()
    }
}
