//! The server's side of the CONNECT challenge–response: a fresh nonce per connection, the
//! check of the client's proof (the HMAC itself is `mds_client::auth`, shared with the
//! clients), and the diagnosis of a refusal — no proof, a wrong one, one already accepted on
//! another connection (a captured handshake played again), an identity whose session secret
//! was not proved, credentials no owner vouches for — counted by reason.
//!
//! Authentication happens once per connection, before its session exists; nothing here is on
//! a request's path.

use std::collections::{HashSet, VecDeque};

use mds_client::auth::AuthKey;
use mds_proto::{NONCE_LEN, PROOF_LEN};
use parking_lot::Mutex;

/// Proofs remembered to tell a replay from a wrong key. A replayed proof is refused whether
/// it is remembered or not (its nonce was another connection's); this only names the reason.
const REMEMBERED_PROOFS: usize = 4096;

/// Why a connection was refused at CONNECT; the label of `mds_auth_failures_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// The client answered the challenge with no proof: it closed, let the CONNECT deadline
    /// pass, or sent another request.
    Missing,
    /// The proof does not match this connection's nonce: another key (or a forgery).
    Wrong,
    /// The proof is one this server already accepted, for another connection's nonce: a
    /// captured handshake sent again.
    Replayed,
    /// The server keeps a session for the identity the CONNECT gave, and the connection did
    /// not prove that session's secret: someone naming another client's identity.
    Session,
    /// `--cred-check owner`: the connection has no owner the server can learn (it is from
    /// another host, from an unprivileged port, without the key).
    Credentials,
}

impl AuthFailure {
    pub const ALL: [AuthFailure; 5] = [
        AuthFailure::Missing,
        AuthFailure::Wrong,
        AuthFailure::Replayed,
        AuthFailure::Session,
        AuthFailure::Credentials,
    ];

    pub fn reason(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Wrong => "wrong",
            AuthFailure::Replayed => "replayed",
            AuthFailure::Session => "session",
            AuthFailure::Credentials => "credentials",
        }
    }

    /// Counts one refusal.
    pub fn count(self) {
        metrics::counter!(crate::metrics::AUTH_FAILURES, "reason" => self.reason()).increment(1);
    }
}

/// The shared key and what the server remembers of the proofs it accepted.
pub struct Authenticator {
    key: AuthKey,
    accepted: Mutex<AcceptedProofs>,
}

/// Accepted proofs, oldest first, with a set for the lookup: bounded, so a server up for
/// months remembers only the last few thousand connections' proofs.
#[derive(Default)]
struct AcceptedProofs {
    order: VecDeque<[u8; PROOF_LEN]>,
    set: HashSet<[u8; PROOF_LEN]>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(key: AuthKey) -> Authenticator {
        Authenticator {
            key,
            accepted: Mutex::new(AcceptedProofs::default()),
        }
    }

    /// A nonce for one connection's challenge, from the operating system's random source:
    /// never predictable, so no proof can be made before the challenge is seen.
    pub fn nonce() -> [u8; NONCE_LEN] {
        let mut nonce = [0; NONCE_LEN];
        getrandom::fill(&mut nonce).expect("the operating system's random source works");
        nonce
    }

    /// Checks `proof` for the challenge `nonce` this connection was sent and the identity and
    /// version its CONNECT gave. The nonce is the caller's to forget, whatever the answer:
    /// one proof per challenge.
    pub fn check(
        &self,
        nonce: &[u8; NONCE_LEN],
        client: u64,
        version: u32,
        proof: &[u8; PROOF_LEN],
    ) -> Result<(), AuthFailure> {
        let mut accepted = self.accepted.lock();
        if self.key.verify(nonce, client, version, proof) {
            if accepted.set.insert(*proof) {
                accepted.order.push_back(*proof);
                if accepted.order.len() > REMEMBERED_PROOFS
                    && let Some(oldest) = accepted.order.pop_front()
                {
                    accepted.set.remove(&oldest);
                }
            }
            Ok(())
        } else if accepted.set.contains(proof) {
            Err(AuthFailure::Replayed)
        } else {
            Err(AuthFailure::Wrong)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> AuthKey {
        AuthKey::from_bytes(vec![byte; 32]).unwrap()
    }

    #[test]
    fn a_proof_passes_once_per_nonce_and_a_replay_is_named_as_such() {
        let auth = Authenticator::new(key(1));
        let (first, second) = (Authenticator::nonce(), Authenticator::nonce());
        assert_ne!(first, second, "a fresh nonce per challenge");
        let proof = key(1).proof(&first, 5, 2);
        assert_eq!(auth.check(&first, 5, 2, &proof), Ok(()));
        // The same proof on another connection (another nonce): refused, and recognised.
        assert_eq!(
            auth.check(&second, 5, 2, &proof),
            Err(AuthFailure::Replayed)
        );
        assert_eq!(
            auth.check(&second, 5, 2, &key(2).proof(&second, 5, 2)),
            Err(AuthFailure::Wrong)
        );
        assert_eq!(
            auth.check(&second, 5, 2, &key(1).proof(&second, 5, 2)),
            Ok(())
        );
    }

    #[test]
    fn remembered_proofs_are_bounded_oldest_out_first() {
        let auth = Authenticator::new(key(1));
        let nonces: Vec<_> = (0..=REMEMBERED_PROOFS)
            .map(|_| Authenticator::nonce())
            .collect();
        for nonce in &nonces {
            assert!(auth.check(nonce, 1, 2, &key(1).proof(nonce, 1, 2)).is_ok());
        }
        let accepted = auth.accepted.lock();
        let lens = (accepted.order.len(), accepted.set.len());
        assert_eq!(lens, (REMEMBERED_PROOFS, REMEMBERED_PROOFS));
        assert!(!accepted.set.contains(&key(1).proof(&nonces[0], 1, 2)));
        assert!(
            accepted
                .set
                .contains(&key(1).proof(&nonces[REMEMBERED_PROOFS], 1, 2))
        );
    }
}
