//! TLS on the client port (`--tls-cert`, `--tls-key`): the server's certificate chain and
//! private key read from PEM files into a rustls configuration (ring provider), once, at
//! start-up. Each partition wraps its accepted sockets with it (`partition::serve`).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

fn tls(what: String, source: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Tls {
        what,
        source: Some(Box::new(source)),
    }
}

/// Reads the certificate chain (leaf first) and its private key, and builds the server side
/// of TLS 1.2 and 1.3 with rustls' safe defaults and no client certificates.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(std::iter::Iterator::collect::<std::result::Result<Vec<_>, _>>)
        .map_err(|e| tls(format!("--tls-cert: reading {}", cert.display()), e))?;
    if chain.is_empty() {
        return Err(Error::Tls {
            what: format!(
                "--tls-cert: {} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)",
                cert.display()
            ),
            source: None,
        });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        tls(
            format!("--tls-key: reading a private key from {}", key.display()),
            e,
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls("TLS protocol versions".into(), e))?
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(|e| {
        tls(
            format!(
                "--tls-cert {} and --tls-key {} do not make a usable pair",
                cert.display(),
                key.display()
            ),
            e,
        )
    })?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_and_its_key_load_and_a_mismatched_pair_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        assert!(server_config(&cert, &key).is_ok());

        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&key, other.signing_key.serialize_pem()).unwrap();
        let err = format!("{:#}", server_config(&cert, &key).unwrap_err());
        assert!(err.contains("usable pair"), "{err}");

        std::fs::write(&cert, "nothing here\n").unwrap();
        let err = format!("{:#}", server_config(&cert, &key).unwrap_err());
        assert!(err.contains("--tls-cert"), "{err}");
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.cert.pem()).unwrap();
        let err = format!("{:#}", server_config(&cert, &key).unwrap_err());
        assert!(err.contains("--tls-key"), "{err}");
    }
}
