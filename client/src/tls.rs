//! TLS on the client side: the trust anchors a client checks the server's certificate against
//! (a PEM file, usually the one CA that signed the server's certificate, or the server's own
//! self-signed certificate), the name that certificate must carry, and the handshake over a
//! connected socket. rustls on the ring provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Why a TLS client could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    #[error("reading CA file {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: rustls_pki_types::pem::Error,
    },
    #[error("CA file {} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("CA file {}: {cause}", path.display())]
    BadCertificate { path: PathBuf, cause: rustls::Error },
    #[error("invalid TLS server name {0:?} (a DNS name or an IP address)")]
    ServerName(String),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// How a client speaks TLS to a server: whom it trusts, and which name it expects.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    /// The name the server's certificate must carry; without one, the host part of the
    /// address connected to.
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsClient {
    /// Trusts the certificates in the PEM file `ca` and nothing else (not the system's
    /// store: a metadata server's certificate is an operator's own, not a public CA's).
    pub fn from_ca_file(ca: &Path, server_name: Option<&str>) -> Result<TlsClient, TlsConfigError> {
        let certs = CertificateDer::pem_file_iter(ca)
            .and_then(std::iter::Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|cause| TlsConfigError::Read {
                path: ca.to_owned(),
                cause,
            })?;
        if certs.is_empty() {
            return Err(TlsConfigError::NoCertificate {
                path: ca.to_owned(),
            });
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|cause| TlsConfigError::BadCertificate {
                    path: ca.to_owned(),
                    cause,
                })?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let server_name = server_name
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|_| TlsConfigError::ServerName(name.to_owned()))
            })
            .transpose()?;
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    /// Runs the TLS handshake on `tcp`, connected to `addr` (HOST:PORT).
    pub(crate) async fn handshake(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => host_name(addr).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no TLS server name in {addr:?}: give one"),
                )
            })?,
        };
        self.connector.connect(name, tcp).await
    }
}

/// The host part of HOST:PORT (`[v6]:port` too) as a server name.
fn host_name(addr: &str) -> Option<ServerName<'static>> {
    let (host, _port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_defaults_to_the_host_of_the_address() {
        let name = |a: &str| host_name(a).map(|n| n.to_str().into_owned());
        assert_eq!(name("mds.example:7400").as_deref(), Some("mds.example"));
        assert_eq!(name("127.0.0.1:7400").as_deref(), Some("127.0.0.1"));
        assert_eq!(name("[::1]:7400").as_deref(), Some("::1"));
        assert_eq!(name("no-port"), None);
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = TlsClient::from_ca_file(&path, None).unwrap_err();
        assert!(matches!(err, TlsConfigError::NoCertificate { .. }), "{err}");
        assert!(err.to_string().contains("ca.pem"));
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&path, cert.cert.pem()).unwrap();
        assert!(TlsClient::from_ca_file(&path, Some("localhost")).is_ok());
        assert!(matches!(
            TlsClient::from_ca_file(&path, Some("not a name")),
            Err(TlsConfigError::ServerName(_))
        ));
    }
}
