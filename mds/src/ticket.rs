//! Replay tickets: the server's proof, carried by an early reply and handed back by its replay
//! after a restart, that it gave this transno and inode number to this client's request with
//! this xid. Without it any client could replay a transno it was never given — another
//! client's, whose own replay would then fail, or one far past anything handed out.
//!
//! A ticket is SipHash-2-4 under the store's replay key (drawn when the store was created,
//! kept in its `meta` family: `Recovered::replay_key`; its first 16 bytes key the hash) of a
//! context string, the four numbers big-endian, and the operation as the request encoded it:
//! a replay must be the very operation its client was answered for, or a client could replay
//! its transno as another operation (an UNLINK where it was told of a CREATE) ahead of other
//! clients' replays that did not build on it. SipHash is a keyed pseudo-random
//! function made for short inputs — a MAC for exactly this — and costs tens of nanoseconds
//! where HMAC-SHA256 took two SHA-256 compressions, on every early reply. The key is the same
//! at every start of a store, so a ticket issued before a crash still proves its replay after
//! it, or after a second crash. Sixty-four bits suffice: a guess is checked once, during a
//! recovery window, on a connection that the first wrong guess closes.

use std::hash::Hasher;

use siphasher::sip::SipHasher24;

/// What every ticket's input begins with.
const CONTEXT: &[u8] = b"mds-replay-v1";

/// The store's replay key.
#[derive(Clone, Copy)]
pub struct ReplayKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for ReplayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayKey(..)")
    }
}

impl ReplayKey {
    pub fn new(key: &[u8; journal::SECRET_LEN]) -> ReplayKey {
        let half = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
        ReplayKey {
            k0: half(0),
            k1: half(8),
        }
    }

    /// The ticket of `client`'s request `xid`, the operation encoded as `op`, executed as
    /// `transno`, creating `ino` (0: it created none). Never 0, which means "no ticket" on the
    /// wire.
    pub fn ticket(&self, client: u64, xid: u64, transno: u64, ino: u64, op: &[u8]) -> u64 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write(CONTEXT);
        for n in [client, xid, transno, ino] {
            h.write(&n.to_be_bytes());
        }
        h.write(op);
        h.finish().max(1)
    }

    /// Whether `ticket` is the one this key makes for these numbers and operation. The
    /// comparison of two integers does not leak which bytes matched in any way a client can
    /// time.
    pub fn verify(
        &self,
        ticket: u64,
        client: u64,
        xid: u64,
        transno: u64,
        ino: u64,
        op: &[u8],
    ) -> bool {
        ticket != 0 && ticket == self.ticket(client, xid, transno, ino, op)
    }

    /// `op` as the protocol encodes it, into `buf` (a replay's operation is checked against
    /// the ticket in the bytes its original was): on the stack for any operation but one with
    /// two long names, without an allocation.
    pub fn encode_op<'b>(
        op: &mds_proto::Op,
        buf: &'b mut [u8; 1024],
    ) -> std::borrow::Cow<'b, [u8]> {
        match postcard::to_slice(op, buf) {
            Ok(bytes) => std::borrow::Cow::Borrowed(bytes),
            Err(_) => std::borrow::Cow::Owned(mds_proto::encode(op)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_proves_exactly_its_client_xid_transno_inode_and_operation() {
        let key = ReplayKey::new(&[7; journal::SECRET_LEN]);
        let t = key.ticket(1, 2, 3, 4, b"op");
        assert_ne!(t, 0);
        assert!(key.verify(t, 1, 2, 3, 4, b"op"));
        for (c, x, tr, i) in [(9, 2, 3, 4), (1, 9, 3, 4), (1, 2, 9, 4), (1, 2, 3, 9)] {
            assert!(!key.verify(t, c, x, tr, i, b"op"), "{c} {x} {tr} {i}");
        }
        assert!(!key.verify(t, 1, 2, 3, 4, b"another op"));
        assert!(!key.verify(0, 1, 2, 3, 4, b"op"), "0 is no ticket");
        let mut other = [7; journal::SECRET_LEN];
        other[15] = 8;
        assert!(
            !ReplayKey::new(&other).verify(t, 1, 2, 3, 4, b"op"),
            "another store's key"
        );
        // The documented bytes: SipHash-2-4 keyed by the key's first 16 bytes (two u64s,
        // little-endian) of "mds-replay-v1" || four u64 BE || the operation's encoding.
        let mut h = SipHasher24::new_with_keys(0x0707_0707_0707_0707, 0x0707_0707_0707_0707);
        let mut input = b"mds-replay-v1".to_vec();
        for n in [1u64, 2, 3, 4] {
            input.extend_from_slice(&n.to_be_bytes());
        }
        input.extend_from_slice(b"op");
        h.write(&input);
        assert_eq!(t, h.finish().max(1));
    }

    #[test]
    fn an_operation_encodes_as_the_protocol_does_on_the_stack_or_off_it() {
        let op = mds_proto::Op::Create {
            parent: 1,
            name: "a".into(),
            mode: 0o644,
        };
        let mut buf = [0u8; 1024];
        assert_eq!(
            &*ReplayKey::encode_op(&op, &mut buf),
            &mds_proto::encode(&op)[..]
        );
        let long = mds_proto::Op::Rename {
            src_parent: 1,
            src_name: "x".repeat(600),
            dst_parent: 1,
            dst_name: "y".repeat(600),
            how: mds_proto::RenameHow::Replace,
        };
        let encoded = ReplayKey::encode_op(&long, &mut buf);
        assert!(matches!(encoded, std::borrow::Cow::Owned(_)));
        assert_eq!(&*encoded, &mds_proto::encode(&long)[..]);
    }
}
