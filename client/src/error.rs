//! Why a call of the client library fails ([`ClientError`]), and the reading of a reply's
//! body as the kind a call expects: anything else is the server speaking past this client.

use mds_proto::{Attr, Body, Errno};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{0}")]
    Errno(Errno),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before the reply came.
    #[error("connection closed before the reply")]
    Disconnected,
    /// The server sent something this client does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server requires the shared key and this client was given none. (A key the server
    /// does not share is refused with `Errno(EAUTH)`.)
    #[error("the server requires authentication: give the shared key file (--auth-key FILE)")]
    AuthRequired,
    /// LOOKUP found an entry naming another shard's directory, inode `.0` (MKDIR_REMOTE):
    /// its attributes are on that shard ([`crate::Router::lookup`] asks it).
    #[error("the entry names inode {0:#x}, another shard's (ask that shard: mds_client::Router)")]
    Remote(u64),
}

impl ClientError {
    /// The server's error code, if that is what this is.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ClientError::Errno(e) => Some(*e),
            ClientError::Remote(_) => Some(Errno::EREMOTE),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// The attributes a call answers with; an entry naming another shard's directory is
/// [`ClientError::Remote`].
pub(crate) fn attr(body: Body) -> Result<Attr> {
    match body {
        Body::Attr(a) => Ok(a),
        Body::Remote { ino, .. } => Err(ClientError::Remote(ino)),
        other => Err(unexpected(other)),
    }
}

/// The plain "done" a call without a result answers with.
pub(crate) fn done(body: Body) -> Result<()> {
    match body {
        Body::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// A reply body the call does not expect.
pub(crate) fn unexpected(body: Body) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {body:?}"))
}
