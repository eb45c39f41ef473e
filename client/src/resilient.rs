//! A connection that survives the server going away: on a broken connection it reconnects
//! with backoff, as the same client (the same [`Session`]: identity and xids carry over), for
//! up to a timeout, and resends the request with its original xid. Many lanes share one
//! connection; the first to notice a break reconnects, the others wait for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mds_proto::{Op, Reply};
use tokio::sync::Mutex;

use crate::{Client, ClientError, Session};

/// Why a request could not be answered at all.
#[derive(Debug)]
pub enum Gone {
    /// The server stayed away past the reconnect timeout.
    Timeout(Duration),
    /// Something other than a broken connection (a protocol error).
    Other(ClientError),
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Timeout(d) => write!(f, "server unreachable for {d:?}"),
            Gone::Other(e) => write!(f, "{e}"),
        }
    }
}

/// The answer to one request.
pub struct Answer {
    pub reply: Reply,
    /// The request was resent after a reconnect (it may have executed before the break).
    pub resent: bool,
}

pub struct ResilientConn {
    server: String,
    session: Arc<Session>,
    /// (generation, client): the generation tells a lane whether someone already replaced the
    /// client it saw fail.
    current: Mutex<(u64, Client)>,
    reconnect_timeout: Duration,
    pub reconnects: Arc<AtomicU64>,
}

impl ResilientConn {
    pub async fn connect(
        server: &str,
        session: Arc<Session>,
        reconnect_timeout: Duration,
        reconnects: Arc<AtomicU64>,
    ) -> Result<ResilientConn, ClientError> {
        let client = Client::connect_session(server, session.clone()).await?;
        Ok(ResilientConn {
            server: server.to_owned(),
            session,
            current: Mutex::new((0, client)),
            reconnect_timeout,
            reconnects,
        })
    }

    /// Sends `op`; on a broken connection reconnects and resends it with the same xid.
    pub async fn call(&self, op: Op) -> Result<Answer, Gone> {
        let (xid, _) = self.session.begin();
        let mut resent = false;
        loop {
            let (generation, client) = {
                let current = self.current.lock().await;
                (current.0, current.1.clone())
            };
            match client.send_as(xid, op.clone()).await {
                Ok(reply) => return Ok(Answer { reply, resent }),
                Err(ClientError::Disconnected | ClientError::Io(_)) => {
                    self.reconnect(generation).await?;
                    resent = true;
                }
                Err(e) => return Err(Gone::Other(e)),
            }
        }
    }

    async fn reconnect(&self, failed: u64) -> Result<(), Gone> {
        let mut current = self.current.lock().await;
        if current.0 != failed {
            return Ok(()); // another lane already reconnected
        }
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            match Client::connect_session(self.server.as_str(), self.session.clone()).await {
                Ok(client) => {
                    *current = (failed + 1, client);
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(_) if started.elapsed() < self.reconnect_timeout => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(_) => return Err(Gone::Timeout(self.reconnect_timeout)),
            }
        }
    }
}
