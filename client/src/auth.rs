//! The shared key of the CONNECT challenge–response (Lustre's shared-secret mode): reading it
//! from its file, which only its owner may read, and the HMAC-SHA256 proof both sides compute
//! over a server nonce. The server (which depends on this crate) checks proofs with the same
//! code the clients make them with, so the two can never disagree on the bytes.

use std::path::{Path, PathBuf};

use hmac::{KeyInit, Mac};
use mds_proto::{
    AUTH_CONTEXT, NONCE_LEN, PEER_CONTEXT, PEER_SECRET_LEN, PROOF_LEN, SESSION_CONTEXT,
    SESSION_SECRET_LEN,
};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Fewest bytes a key file may hold: below 16 it is a password, not a key.
pub const MIN_KEY_LEN: usize = 16;

/// Why a key file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    #[error("reading key file {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// Group or others may read or write it: the key may no longer be secret.
    #[error(
        "key file {} has mode {mode:04o}: group and others must have no access \
         (chmod 600 {})",
        path.display(),
        path.display()
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "key file {} holds {len} bytes; a key is at least {MIN_KEY_LEN} \
         (head -c 32 /dev/urandom > FILE)",
        path.display()
    )]
    TooShort { path: PathBuf, len: usize },
}

/// The shared key. Its bytes never appear in `Debug` output or logs.
#[derive(Clone)]
pub struct AuthKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthKey({} bytes)", self.bytes.len())
    }
}

impl AuthKey {
    /// A key from its bytes (at least [`MIN_KEY_LEN`] of them, as a file must hold).
    pub fn from_bytes(bytes: Vec<u8>) -> Option<AuthKey> {
        (bytes.len() >= MIN_KEY_LEN).then_some(AuthKey { bytes })
    }

    /// Reads the key file: every byte of it is the key (no trimming, so a binary key and a
    /// text one with its newline both work, as long as every side reads the same file). Refused
    /// if group or others have any access to it, as ssh refuses an exposed private key.
    pub fn from_file(path: &Path) -> Result<AuthKey, KeyFileError> {
        use std::os::unix::fs::PermissionsExt;
        let read = |cause| KeyFileError::Read {
            path: path.to_owned(),
            cause,
        };
        let mode = std::fs::metadata(path).map_err(read)?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyFileError::Exposed {
                path: path.to_owned(),
                mode,
            });
        }
        let bytes = std::fs::read(path).map_err(read)?;
        let len = bytes.len();
        AuthKey::from_bytes(bytes).ok_or_else(|| KeyFileError::TooShort {
            path: path.to_owned(),
            len,
        })
    }

    fn mac(&self, nonce: &[u8; NONCE_LEN], client: u64, version: u32) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.bytes).expect("HMAC takes keys of any length");
        mac.update(AUTH_CONTEXT);
        mac.update(nonce);
        mac.update(&client.to_be_bytes());
        mac.update(&version.to_be_bytes());
        mac
    }

    /// The proof a client sends for `nonce`: HMAC-SHA256(key, context ‖ nonce ‖ client ‖
    /// version), integers big-endian. Binding the identity and version means a proof made for
    /// one client or protocol passes for no other, even on the same nonce.
    pub fn proof(&self, nonce: &[u8; NONCE_LEN], client: u64, version: u32) -> [u8; PROOF_LEN] {
        self.mac(nonce, client, version)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Whether `proof` is this key's proof for `nonce`, `client` and `version`, compared in
    /// constant time so its timing tells a guesser nothing of how many bytes matched.
    pub fn verify(
        &self,
        nonce: &[u8; NONCE_LEN],
        client: u64,
        version: u32,
        proof: &[u8; PROOF_LEN],
    ) -> bool {
        self.mac(nonce, client, version).verify_slice(proof).is_ok()
    }
}

/// The secret a server issues a client identity at its session's first CONNECT
/// (`Connected::session_secret`): whoever reconnects as that identity while the server keeps
/// the session must prove it. Its bytes never appear in `Debug` output or logs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionSecret([u8; SESSION_SECRET_LEN]);

impl std::fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

impl SessionSecret {
    pub fn from_bytes(bytes: [u8; SESSION_SECRET_LEN]) -> SessionSecret {
        SessionSecret(bytes)
    }

    /// A fresh secret from the operating system's random source.
    pub fn random() -> SessionSecret {
        let mut bytes = [0; SESSION_SECRET_LEN];
        getrandom::fill(&mut bytes).expect("the operating system's random source works");
        SessionSecret(bytes)
    }

    pub fn bytes(&self) -> &[u8; SESSION_SECRET_LEN] {
        &self.0
    }

    fn mac(&self, nonce: &[u8; NONCE_LEN], client: u64) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(SESSION_CONTEXT);
        mac.update(nonce);
        mac.update(&client.to_be_bytes());
        mac
    }

    /// The session proof a reconnecting client sends for `nonce`: HMAC-SHA256(secret,
    /// context ‖ nonce ‖ client), the identity big-endian.
    pub fn proof(&self, nonce: &[u8; NONCE_LEN], client: u64) -> [u8; PROOF_LEN] {
        self.mac(nonce, client).finalize().into_bytes().into()
    }

    /// Whether `proof` is this secret's proof for `nonce` and `client`, in constant time.
    pub fn verify(&self, nonce: &[u8; NONCE_LEN], client: u64, proof: &[u8; PROOF_LEN]) -> bool {
        self.mac(nonce, client).verify_slice(proof).is_ok()
    }
}

/// The cluster's peer secret: what a server proves, after a PEER_CONNECT, to be let send
/// what only the cluster's servers send (MAKE_PENDING_DIR, PREPARE_RMDIR, RESOLVE_REMOTE).
/// No client holds it: the servers read it from etcd. Its bytes never appear in `Debug`
/// output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerKey([u8; PEER_SECRET_LEN]);

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

impl PeerKey {
    pub fn from_bytes(bytes: [u8; PEER_SECRET_LEN]) -> PeerKey {
        PeerKey(bytes)
    }

    /// A fresh secret from the operating system's random source.
    pub fn random() -> PeerKey {
        let mut bytes = [0; PEER_SECRET_LEN];
        getrandom::fill(&mut bytes).expect("the operating system's random source works");
        PeerKey(bytes)
    }

    pub fn bytes(&self) -> &[u8; PEER_SECRET_LEN] {
        &self.0
    }

    fn mac(&self, nonce: &[u8; NONCE_LEN], client: u64, version: u32) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(PEER_CONTEXT);
        mac.update(nonce);
        mac.update(&client.to_be_bytes());
        mac.update(&version.to_be_bytes());
        mac
    }

    /// The proof a server sends for `nonce` after its PEER_CONNECT: HMAC-SHA256(secret,
    /// context ‖ nonce ‖ client ‖ version), integers big-endian. Another context than the
    /// shared key's, so that neither proof ever passes for the other, whatever the keys.
    pub fn proof(&self, nonce: &[u8; NONCE_LEN], client: u64, version: u32) -> [u8; PROOF_LEN] {
        self.mac(nonce, client, version)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Whether `proof` is this secret's proof for `nonce`, `client` and `version`, in
    /// constant time.
    pub fn verify(
        &self,
        nonce: &[u8; NONCE_LEN],
        client: u64,
        version: u32,
        proof: &[u8; PROOF_LEN],
    ) -> bool {
        self.mac(nonce, client, version).verify_slice(proof).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key(byte: u8) -> AuthKey {
        AuthKey::from_bytes(vec![byte; 32]).unwrap()
    }

    #[test]
    fn a_proof_passes_only_for_its_key_nonce_client_and_version() {
        let (k, nonce) = (key(1), [9; NONCE_LEN]);
        let proof = k.proof(&nonce, 42, 2);
        assert!(k.verify(&nonce, 42, 2, &proof));
        assert!(!key(2).verify(&nonce, 42, 2, &proof), "another key");
        assert!(!k.verify(&[8; NONCE_LEN], 42, 2, &proof), "another nonce");
        assert!(!k.verify(&nonce, 43, 2, &proof), "another client");
        assert!(!k.verify(&nonce, 42, 3, &proof), "another version");
        let mut flipped = proof;
        flipped[31] ^= 1;
        assert!(!k.verify(&nonce, 42, 2, &flipped));
    }

    #[test]
    fn the_proof_is_hmac_sha256_of_the_documented_bytes() {
        // RFC 4231 test case 2 checks the HMAC itself; this checks what goes into it, by
        // recomputing over the message laid out as docs/protocol.md describes.
        let k = AuthKey::from_bytes(b"Jefe-and-some-more".to_vec()).unwrap();
        let nonce = [0x11; NONCE_LEN];
        let mut message = b"mds-connect-v1".to_vec();
        message.extend_from_slice(&nonce);
        message.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        message.extend_from_slice(&[0, 0, 0, 2]);
        let mut mac = HmacSha256::new_from_slice(b"Jefe-and-some-more").unwrap();
        mac.update(&message);
        let expected: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(k.proof(&nonce, 0x0102_0304_0506_0708, 2), expected);
    }

    #[test]
    fn a_session_proof_passes_only_for_its_secret_nonce_and_client() {
        let (secret, nonce) = (SessionSecret::random(), [3; NONCE_LEN]);
        let proof = secret.proof(&nonce, 42);
        assert!(secret.verify(&nonce, 42, &proof));
        assert!(
            !SessionSecret::random().verify(&nonce, 42, &proof),
            "another secret"
        );
        assert!(!secret.verify(&[4; NONCE_LEN], 42, &proof), "another nonce");
        assert!(!secret.verify(&nonce, 43, &proof), "another client");
        // The documented bytes: HMAC-SHA256(secret, "mds-session-v1" || nonce || client).
        let mut mac = HmacSha256::new_from_slice(secret.bytes()).unwrap();
        mac.update(b"mds-session-v1");
        mac.update(&nonce);
        mac.update(&42u64.to_be_bytes());
        let expected: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(proof, expected);
        assert_eq!(format!("{secret:?}"), "SessionSecret(..)");
    }

    #[test]
    fn a_peer_proof_is_its_own_and_never_a_shared_key_proof() {
        let (peer, nonce) = (PeerKey::from_bytes([5; PEER_SECRET_LEN]), [6; NONCE_LEN]);
        let proof = peer.proof(&nonce, 42, 7);
        assert!(peer.verify(&nonce, 42, 7, &proof));
        assert!(
            !peer.verify(&[7; NONCE_LEN], 42, 7, &proof),
            "another nonce"
        );
        assert!(!peer.verify(&nonce, 43, 7, &proof), "another client");
        assert!(
            !PeerKey::random().verify(&nonce, 42, 7, &proof),
            "another secret"
        );
        // The same bytes as a shared key: the contexts keep the two proofs apart both ways.
        let shared = AuthKey::from_bytes(vec![5; PEER_SECRET_LEN]).unwrap();
        assert!(!shared.verify(&nonce, 42, 7, &proof));
        assert!(!peer.verify(&nonce, 42, 7, &shared.proof(&nonce, 42, 7)));
        // The documented bytes: HMAC-SHA256(secret, "mds-peer-v1" || nonce || client ||
        // version).
        let mut mac = HmacSha256::new_from_slice(&[5; PEER_SECRET_LEN]).unwrap();
        mac.update(b"mds-peer-v1");
        mac.update(&nonce);
        mac.update(&42u64.to_be_bytes());
        mac.update(&7u32.to_be_bytes());
        let expected: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(proof, expected);
        assert_eq!(format!("{peer:?}"), "PeerKey(..)");
    }

    #[test]
    fn key_files_open_to_group_or_others_or_too_short_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, [7u8; 32]).unwrap();
        for mode in [0o640, 0o604, 0o620, 0o602, 0o660, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = AuthKey::from_file(&path).unwrap_err();
            assert!(matches!(err, KeyFileError::Exposed { mode: m, .. } if m == mode));
            let text = err.to_string();
            assert!(text.contains(&format!("{mode:04o}")), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let k = AuthKey::from_file(&path).unwrap();
            assert!(k.verify(&[0; 32], 1, 2, &key(7).proof(&[0; 32], 1, 2)));
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, b"short\n").unwrap();
        assert!(matches!(
            AuthKey::from_file(&path),
            Err(KeyFileError::TooShort { len: 6, .. })
        ));
        assert!(matches!(
            AuthKey::from_file(&dir.path().join("missing")),
            Err(KeyFileError::Read { .. })
        ));
        assert!(
            !format!("{:?}", key(7)).contains("7, 7"),
            "Debug hides the key"
        );
    }
}
