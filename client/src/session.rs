//! The client's side of a session: its identity, its xids, and which of them still wait for a
//! reply. One [`Session`] outlives the connections it is used on, so a client that reconnects
//! keeps its identity and keeps counting xids upward, and every request can tell the server
//! the watermark below which it has every reply (`acked_xid`).

use std::collections::BTreeSet;

use mds_proto::{Cred, MAX_GROUPS};
use parking_lot::Mutex;

/// A client identity and its xid bookkeeping; share it between the connections of one client
/// (`Arc<Session>`).
#[derive(Debug)]
pub struct Session {
    id: u64,
    /// The credentials every request of this session carries.
    cred: Cred,
    xids: Mutex<Xids>,
}

#[derive(Debug)]
struct Xids {
    /// The next xid to hand out; xids start at 1.
    next: u64,
    /// Handed out and not yet answered: a resend after a reconnect reuses these.
    outstanding: BTreeSet<u64>,
}

impl Session {
    /// A new identity drawn from the operating system's random source, with the credentials
    /// of this process.
    pub fn new() -> Session {
        Session::with_cred(process_cred())
    }

    /// A new identity with the given credentials.
    pub fn with_cred(cred: Cred) -> Session {
        Session {
            id: random_identity(),
            cred,
            xids: Mutex::new(Xids {
                next: 1,
                outstanding: BTreeSet::new(),
            }),
        }
    }

    /// The identity CONNECT carries.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    /// Hands out the next xid and marks it outstanding, returning it with the watermark the
    /// request should carry.
    pub fn begin(&self) -> (u64, u64) {
        let mut xids = self.xids.lock();
        let xid = xids.next;
        xids.next += 1;
        xids.outstanding.insert(xid);
        let acked = xids.acked();
        (xid, acked)
    }

    /// The watermark for a request sent again with an xid it already has (a resend).
    pub fn acked_xid(&self) -> u64 {
        self.xids.lock().acked()
    }

    /// `xid` has its reply.
    pub fn finish(&self, xid: u64) {
        self.xids.lock().outstanding.remove(&xid);
    }
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Xids {
    /// Every xid at or below this has its reply: just below the oldest outstanding one, or
    /// everything handed out so far.
    fn acked(&self) -> u64 {
        self.outstanding
            .first()
            .map_or(self.next - 1, |&oldest| oldest - 1)
    }
}

/// A random non-zero identity: two clients must never share one, and a restarted client must
/// not inherit the session of its previous run.
fn random_identity() -> u64 {
    loop {
        let id = getrandom::u64().expect("the operating system's random source");
        if id != 0 {
            return id;
        }
    }
}

/// The credentials of this process, as requests carry them.
pub fn process_cred() -> Cred {
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut groups = vec![0 as libc::gid_t; MAX_GROUPS];
    // SAFETY: the buffer holds MAX_GROUPS entries, as the count passed says; on error (more
    // groups than that) the call writes nothing and returns -1.
    let n = unsafe { libc::getgroups(MAX_GROUPS as libc::c_int, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(n).unwrap_or(0));
    Cred { uid, gid, groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_increase_and_the_watermark_stays_below_the_oldest_unanswered() {
        let s = Session::with_cred(Cred::default());
        assert_eq!(s.begin(), (1, 0));
        assert_eq!(s.begin(), (2, 0));
        assert_eq!(s.begin(), (3, 0));
        s.finish(2);
        assert_eq!(s.acked_xid(), 0, "1 still waits");
        s.finish(1);
        assert_eq!(s.acked_xid(), 2, "3 still waits");
        s.finish(3);
        assert_eq!(s.acked_xid(), 3);
        assert_eq!(s.begin(), (4, 3));
    }

    #[test]
    fn identities_are_random_and_never_zero() {
        let a = Session::new();
        let b = Session::new();
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), 0);
    }

    #[test]
    fn the_process_credentials_are_read() {
        let cred = process_cred();
        // SAFETY: as above.
        assert_eq!(cred.uid, unsafe { libc::getuid() });
        assert!(cred.groups.len() <= MAX_GROUPS);
    }
}
