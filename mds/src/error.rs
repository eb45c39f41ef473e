//! The server library's one error type: what keeps `mds serve` from starting or from
//! stopping cleanly, and what keeps `mds fsck` from reading a store. Each variant says what
//! failed and on what, and keeps its cause as its source; [`chain`] prints the whole chain
//! (the binary's `mds: ...` line). Requests never fail with it: they are answered with an
//! errno.

use std::path::PathBuf;

/// What can go wrong starting, running or stopping the server, or checking a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A flag or config-file value is refused; the message names the flag.
    #[error("{0}")]
    Invalid(String),
    /// The config file could not be read.
    #[error("reading config file {}", path.display())]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The config file is not TOML of the known keys.
    #[error("parsing config file {}", path.display())]
    ConfigParse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// `--auth-key` names no usable key file.
    #[error("--auth-key")]
    AuthKey(#[source] mds_client::auth::KeyFileError),
    /// `--tls-cert` and `--tls-key` do not make a usable TLS configuration.
    #[error("{what}")]
    Tls {
        what: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The data directory is held by a running server.
    #[error("{} is in use by a running server (pid {pid}); stop it first", path.display())]
    InUse { path: PathBuf, pid: i32 },
    /// A system call failed while starting or stopping (binding, a thread, a directory).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The journal failed: opening, reading or writing the store.
    #[error("{what}")]
    Journal {
        what: String,
        #[source]
        source: journal::Error,
    },
    /// The store's content contradicts itself; `mds fsck` says where.
    #[error("store is inconsistent: {0}")]
    Inconsistent(String),
    /// The store holds a resend record this build cannot decode.
    #[error("the store holds a resend record this build cannot read: {0}")]
    UnreadableRecord(String),
    /// The metrics recorder could not be installed.
    #[error("installing the metrics recorder: {0}")]
    Metrics(String),
    /// The cluster's configuration in etcd, or this server's claim on a shard.
    #[error("{what}")]
    Cluster {
        what: String,
        #[source]
        source: mds_cluster::Error,
    },
    /// The journal failed while serving: the server stopped refusing mutations.
    #[error("the journal failed while serving; the last mutations were refused with EIO")]
    JournalFailed,
}

/// The library's result.
pub type Result<T> = std::result::Result<T, Error>;

impl From<journal::Error> for Error {
    fn from(source: journal::Error) -> Self {
        Error::Journal {
            what: "the journal".into(),
            source,
        }
    }
}

/// What an I/O failure was doing, for [`Error::Io`].
pub trait IoContext<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            what: what(),
            source,
        })
    }
}

/// `error` and each of its causes, joined by ": " (what `{:#}` prints for anyhow's errors).
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        out.push_str(": ");
        out.push_str(&e.to_string());
        cause = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_what_failed_then_why() {
        let e = Error::Io {
            what: "binding 127.0.0.1:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(chain(&e), "binding 127.0.0.1:1: address in use");
        let e = Error::InUse {
            path: "/d".into(),
            pid: 7,
        };
        assert_eq!(
            chain(&e),
            "/d is in use by a running server (pid 7); stop it first"
        );
    }
}
