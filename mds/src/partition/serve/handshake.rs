//! The CONNECT handshake: the protocol version check, the shared-key challenge and its proof
//! (AUTHENTICATE) when the server has a key, and attaching the connection to its client's
//! session — everything a connection does before it has a session.

use std::net::SocketAddr;
use std::sync::Arc;

use mds_proto::{self as protocol, Body, Errno, Op, PROTOCOL_VERSION, Request};
use tracing::{debug, warn};

use super::Refused;
use crate::auth::{AuthFailure, Authenticator};
use crate::partition::Partition;
use crate::partition::conn::ConnOutput;
use crate::session::Session;

/// CONNECT's opcode, for metrics of a handshake that may not have decoded.
pub(super) const CONNECT: u8 = 0;
/// AUTHENTICATE's opcode, for the same.
const AUTHENTICATE: u8 = 13;

/// A connection before its session exists: who is at the other end, and the challenge its
/// CONNECT was sent, while it waits for the proof.
pub(super) struct Handshaking {
    peer: SocketAddr,
    challenge: Option<Challenge>,
}

/// A challenge sent and not yet answered. Taken out at the first request after it, whatever
/// that request is: one proof per nonce.
struct Challenge {
    nonce: [u8; protocol::NONCE_LEN],
    /// The identity the CONNECT gave, which the proof must be made for.
    client: u64,
    acked_xid: u64,
}

impl Handshaking {
    pub(super) fn new(peer: SocketAddr) -> Handshaking {
        Handshaking {
            peer,
            challenge: None,
        }
    }

    /// The connection ended: if it was challenged and gave no proof (it left, or timed out),
    /// that is a client without the key, counted and logged as such.
    pub(super) fn count_if_unproved(&self, partition: usize, conn: u64) {
        if self.challenge.is_some() {
            warn!(
                partition,
                conn,
                peer = %self.peer,
                reason = "missing",
                "authentication failed: the challenge got no proof"
            );
            AuthFailure::Missing.count();
        }
    }
}

impl Partition {
    /// A frame before the connection's session exists: CONNECT of this protocol version, or a
    /// refusal; with a shared key, CONNECT is answered with a challenge and the next frame
    /// must be its proof. The version is read from the prefix every version shares, so a
    /// client of another version is told so rather than failing to decode.
    pub(super) fn handshake(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        handshaking: &mut Handshaking,
        frame: &[u8],
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        if let Some(challenge) = handshaking.challenge.take() {
            let peer = handshaking.peer;
            return self.authenticate(conn, session, peer, challenge, frame, answered);
        }
        let mut refuse = |xid: u64, why: &str| {
            warn!(
                partition = self.id,
                conn = conn.id(),
                "closing connection: {why}"
            );
            self.metrics.handshake.increment(1);
            answered.push((CONNECT, Err(Errno::EPROTO)));
            self.reply_now(conn, xid, Err(Errno::EPROTO));
            Err(Refused)
        };
        if let Some(prefix) = protocol::peek_handshake(frame)
            && prefix.opcode == 0
            && prefix.version != PROTOCOL_VERSION
        {
            return refuse(
                prefix.xid,
                &format!(
                    "client speaks protocol version {}; this server speaks {PROTOCOL_VERSION}",
                    prefix.version
                ),
            );
        }
        let request: Request = match protocol::decode(frame) {
            Ok(r) => r,
            Err(e) => return refuse(0, &format!("malformed first request: {e}")),
        };
        let Op::Connect { client, .. } = request.op else {
            return refuse(request.xid, "request before CONNECT");
        };
        if client == 0 {
            return refuse(request.xid, "client identity 0");
        }
        if self.shared.auth.is_some() {
            // Nothing of the client's session is touched before it has proved the key: an
            // impostor cannot even replace a real client's connection.
            let nonce = Authenticator::nonce();
            handshaking.challenge = Some(Challenge {
                nonce,
                client,
                acked_xid: request.acked_xid,
            });
            answered.push((CONNECT, Ok(())));
            self.reply_now(conn, request.xid, Ok(Body::Challenge { nonce }));
            return Ok(());
        }
        self.attach(conn, session, client, request.acked_xid, request.xid);
        answered.push((CONNECT, Ok(())));
        Ok(())
    }

    /// The frame after a challenge: an AUTHENTICATE whose proof matches, which completes the
    /// CONNECT it answers; anything else is refused with EAUTH (EPROTO if it does not even
    /// decode), counted and logged with the peer's address, and the connection closed.
    fn authenticate(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        peer: SocketAddr,
        challenge: Challenge,
        frame: &[u8],
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        let mut refuse = |xid: u64, opcode: u8, errno: Errno, failure: AuthFailure| {
            warn!(
                partition = self.id,
                conn = conn.id(),
                %peer,
                client = challenge.client,
                reason = failure.reason(),
                "closing connection: authentication failed"
            );
            failure.count();
            answered.push((opcode, Err(errno)));
            self.reply_now(conn, xid, Err(errno));
            Err(Refused)
        };
        let Ok(request) = protocol::decode::<Request>(frame) else {
            self.metrics.handshake.increment(1);
            return refuse(0, AUTHENTICATE, Errno::EPROTO, AuthFailure::Missing);
        };
        let Op::Authenticate { proof } = request.op else {
            let opcode = request.op.opcode();
            return refuse(request.xid, opcode, Errno::EAUTH, AuthFailure::Missing);
        };
        let auth = self
            .shared
            .auth
            .as_ref()
            .expect("only a server with a key sends a challenge");
        if let Err(failure) =
            auth.check(&challenge.nonce, challenge.client, PROTOCOL_VERSION, &proof)
        {
            return refuse(request.xid, AUTHENTICATE, Errno::EAUTH, failure);
        }
        let acked_xid = request.acked_xid.max(challenge.acked_xid);
        self.attach(conn, session, challenge.client, acked_xid, request.xid);
        answered.push((AUTHENTICATE, Ok(())));
        Ok(())
    }

    /// Completes a handshake: the connection becomes its client's session's, replacing an
    /// older one, and is answered `Connected` under `xid` (the CONNECT's, or the
    /// AUTHENTICATE's that proved it).
    fn attach(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        client: u64,
        acked_xid: u64,
        xid: u64,
    ) {
        let attached = self.shared.sessions.attach(client, conn.clone());
        let recovering = self.shared.recovery.expects(client);
        // A client the journal knew from before the restart: noted, so the window's close
        // does not evict it; forgotten when it is done replaying, unless its replays make it
        // hold something early again.
        self.shared.recovery.connected(client);
        if let Some(older) = attached.replaced {
            debug!(
                partition = self.id,
                conn = conn.id(),
                replaced = older.id(),
                client,
                "client reconnected; closing its older connection"
            );
            self.metrics.sessions_replaced.increment(1);
            older.replace();
        }
        attached.session.note_acked(acked_xid);
        attached.session.note_replied(xid);
        *session = Some(attached.session);
        self.reply_now(
            conn,
            xid,
            Ok(Body::Connected {
                version: PROTOCOL_VERSION,
                server_boot: self.shared.boot,
                partition: self.id as u32,
                ack_early: self.shared.ack_early,
                recovering,
                evicted: self.shared.recovery.evicted(client),
            }),
        );
    }
}
