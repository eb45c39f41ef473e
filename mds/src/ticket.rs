//! Replay tickets: the server's proof, carried by an early reply and handed back by its replay
//! after a restart, that it gave this transno and inode number to this client's request with
//! this xid. Without it any client could replay a transno it was never given — another
//! client's, whose own replay would then fail, or one far past anything handed out.
//!
//! A ticket is the first eight bytes of HMAC-SHA256 under the store's replay key (drawn when
//! the store was created, kept in its `meta` family: `Recovered::replay_key`) of a context
//! string and the four numbers, big-endian. The key is the same at every start of a store, so
//! a ticket issued before a crash still proves its replay after it, or after a second crash.
//! Sixty-four bits suffice: a guess is checked once, during a recovery window, on a
//! connection that the first wrong guess closes.

use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What every ticket's MAC begins with.
const CONTEXT: &[u8] = b"mds-replay-v1";

/// The store's replay key, keyed once: a ticket costs one clone of the keyed state and two
/// SHA-256 compressions.
#[derive(Clone)]
pub struct ReplayKey {
    keyed: HmacSha256,
}

impl std::fmt::Debug for ReplayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayKey(..)")
    }
}

impl ReplayKey {
    pub fn new(key: &[u8; journal::SECRET_LEN]) -> ReplayKey {
        ReplayKey {
            keyed: HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length"),
        }
    }

    /// The ticket of `client`'s request `xid`, executed as `transno`, creating `ino` (0: it
    /// created none). Never 0, which means "no ticket" on the wire.
    pub fn ticket(&self, client: u64, xid: u64, transno: u64, ino: u64) -> u64 {
        let mut mac = self.keyed.clone();
        mac.update(CONTEXT);
        for n in [client, xid, transno, ino] {
            mac.update(&n.to_be_bytes());
        }
        let tag = mac.finalize().into_bytes();
        let ticket = u64::from_be_bytes(tag[..8].try_into().expect("a tag has 32 bytes"));
        ticket.max(1)
    }

    /// Whether `ticket` is the one this key makes for these numbers. The comparison of two
    /// integers does not leak which bytes matched in any way a client can time.
    pub fn verify(&self, ticket: u64, client: u64, xid: u64, transno: u64, ino: u64) -> bool {
        ticket != 0 && ticket == self.ticket(client, xid, transno, ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_proves_exactly_its_client_xid_transno_and_inode() {
        let key = ReplayKey::new(&[7; journal::SECRET_LEN]);
        let t = key.ticket(1, 2, 3, 4);
        assert_ne!(t, 0);
        assert!(key.verify(t, 1, 2, 3, 4));
        for (c, x, tr, i) in [(9, 2, 3, 4), (1, 9, 3, 4), (1, 2, 9, 4), (1, 2, 3, 9)] {
            assert!(!key.verify(t, c, x, tr, i), "{c} {x} {tr} {i}");
        }
        assert!(!key.verify(0, 1, 2, 3, 4), "0 is no ticket");
        let other = ReplayKey::new(&[8; journal::SECRET_LEN]);
        assert!(!other.verify(t, 1, 2, 3, 4), "another store's key");
        // The documented bytes: HMAC-SHA256(key, "mds-replay-v1" || four u64 BE), first 8.
        let mut mac = HmacSha256::new_from_slice(&[7; journal::SECRET_LEN]).unwrap();
        mac.update(b"mds-replay-v1");
        for n in [1u64, 2, 3, 4] {
            mac.update(&n.to_be_bytes());
        }
        let tag = mac.finalize().into_bytes();
        assert_eq!(t, u64::from_be_bytes(tag[..8].try_into().unwrap()).max(1));
    }
}
