//! The CONNECT handshake: the protocol version check, the challenge and its proofs
//! (AUTHENTICATE) — the shared key when the server has one, the session secret when the
//! server keeps a session for the identity, the cluster's peer secret after a PEER_CONNECT
//! (another server of the cluster) — the connection slot, and attaching the connection to
//! its client's session: everything a connection does before it has a session.

use std::net::SocketAddr;
use std::sync::Arc;

use mds_proto::opcode::{AUTHENTICATE, CONNECT, PEER_CONNECT};
use mds_proto::{self as protocol, AckAsked, Atime, Body, Errno, Op, PROTOCOL_VERSION, Request};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, warn};

use crate::auth::{AuthFailure, Authenticator};
use crate::dispatch::Origin;
use crate::output::ConnOutput;
use crate::partition::Partition;
use crate::partition::admission::{Credentials, HandshakeSlot};
use crate::session::{AttachRefused, Session};

/// A request was refused and the connection must close (an EPROTO reply is queued).
pub(super) struct Refused;

/// A connection before its session exists, and what it holds of the partition's limits:
/// who is at the other end, the challenge its CONNECT was sent while it waits for the proof,
/// its handshake slot until then, and its connection slot after.
pub(super) struct Handshaking {
    peer: SocketAddr,
    /// The server's end of the connection (the owner of a loopback peer is looked up by both).
    local: SocketAddr,
    challenge: Option<Challenge>,
    /// Held until the handshake completes.
    slot: Option<HandshakeSlot>,
    /// Taken when it completes; held for the connection's life.
    connection: Option<OwnedSemaphorePermit>,
    /// What the connection's requests may say they are (`--cred-check`).
    pub(super) credentials: Credentials,
    /// Who is at the other end: another server of the cluster once a PEER_CONNECT proved the
    /// peer secret, a client otherwise.
    pub(super) origin: Origin,
}

/// A challenge sent and not yet answered. Taken out at the first request after it, whatever
/// that request is: one proof per nonce.
struct Challenge {
    nonce: [u8; protocol::NONCE_LEN],
    /// The identity the CONNECT gave, which the proofs must be made for.
    client: u64,
    atime: Atime,
    ack: AckAsked,
    acked_xid: u64,
    /// It asked for the shared key's proof. (Whether the session secret must be proved is
    /// decided again at attach, under the session table's lock.)
    key: bool,
    /// A PEER_CONNECT: the proof is the cluster's peer secret's, not the shared key's.
    peer: bool,
}

impl Handshaking {
    pub(super) fn new(peer: SocketAddr, local: SocketAddr, slot: HandshakeSlot) -> Handshaking {
        Handshaking {
            peer,
            local,
            challenge: None,
            slot: Some(slot),
            connection: None,
            credentials: Credentials::Any,
            origin: Origin::Client,
        }
    }

    /// Resolves when the connection's handshake slot went to a newer connection (it must
    /// close); never once the handshake has completed.
    pub(super) async fn evicted(&self) {
        match &self.slot {
            Some(slot) => slot.evicted().await,
            None => std::future::pending().await,
        }
    }

    /// The connection ended: if it was challenged and gave no proof (it left, or timed out),
    /// that is a client without the key (or the secret), counted and logged as such.
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
    /// refusal; when something must be proved (the shared key, or the secret of a session
    /// the server keeps for the identity), CONNECT is answered with a challenge and the next
    /// frame must be its proof. The version is read from the prefix every version shares, so
    /// a client of another version is told so rather than failing to decode.
    pub(super) fn handshake(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        handshaking: &mut Handshaking,
        frame: &[u8],
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        if let Some(challenge) = handshaking.challenge.take() {
            return self.authenticate(conn, session, handshaking, challenge, frame, answered);
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
            && (prefix.opcode == u32::from(CONNECT) || prefix.opcode == u32::from(PEER_CONNECT))
            && prefix.version != PROTOCOL_VERSION
        {
            warn!(
                partition = self.id,
                conn = conn.id(),
                "closing connection: client speaks protocol version {}; this server speaks \
                 {PROTOCOL_VERSION}",
                prefix.version
            );
            self.metrics.handshake.increment(1);
            answered.push((CONNECT, Err(Errno::EPROTO)));
            // In the layout every version reads.
            conn.append_version_refusal(prefix.xid, self.shared.core.replies.last_committed());
            return Err(Refused);
        }
        let request: Request = match protocol::decode(frame) {
            Ok(r) => r,
            Err(e) => return refuse(0, &format!("malformed first request: {e}")),
        };
        let (client, atime, ack, peer) = match request.op {
            Op::Connect {
                client, atime, ack, ..
            } => (client, atime, ack, false),
            Op::PeerConnect { client, .. } => (client, Atime::default(), AckAsked::Server, true),
            _ => return refuse(request.xid, "request before CONNECT"),
        };
        if client == 0 {
            return refuse(request.xid, "client identity 0");
        }
        // Another server of the cluster proves the peer secret instead of the shared key,
        // always: a PEER_CONNECT is never let through unproved (outside a cluster, where
        // there is no secret, no proof passes).
        let key = self.shared.net.auth.is_some() || peer;
        let secret = self.shared.core.sessions.requires_proof(client);
        if key || secret {
            // Nothing of the client's session is touched before it has proved what it must:
            // an impostor cannot even replace a real client's connection.
            if let Some(slot) = &handshaking.slot {
                slot.spoke();
            }
            let nonce = Authenticator::nonce();
            handshaking.challenge = Some(Challenge {
                nonce,
                client,
                atime,
                ack,
                acked_xid: request.acked_xid,
                key,
                peer,
            });
            answered.push((if peer { PEER_CONNECT } else { CONNECT }, Ok(())));
            self.reply_now(
                conn,
                request.xid,
                Ok(Body::Challenge {
                    nonce,
                    key,
                    session: secret,
                }),
            );
            return Ok(());
        }
        self.attach(
            conn,
            session,
            handshaking,
            Attach {
                client,
                atime,
                ack,
                acked_xid: request.acked_xid,
                xid: request.xid,
                opcode: CONNECT,
                keyed: false,
                peer: false,
                session_proof: None,
            },
            answered,
        )
    }

    /// The frame after a challenge: an AUTHENTICATE with the proofs it asked for, which
    /// completes the CONNECT it answers; anything else is refused with EAUTH (EPROTO if it
    /// does not even decode), counted and logged with the peer's address, and the connection
    /// closed.
    fn authenticate(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        handshaking: &mut Handshaking,
        challenge: Challenge,
        frame: &[u8],
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        let peer = handshaking.peer;
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
        let Op::Authenticate {
            proof,
            session: session_proof,
        } = request.op
        else {
            let opcode = request.op.opcode();
            return refuse(request.xid, opcode, Errno::EAUTH, AuthFailure::Missing);
        };
        if challenge.peer {
            // The peer secret as this server last read it from etcd: a connection proved
            // under a secret since rotated out is refused (its server reads the new one
            // within `PEER_SECRET_REFRESH` and connects again).
            let peer_key = self
                .shared
                .core
                .shard_view
                .as_ref()
                .and_then(|c| c.peers.key());
            let proved = proof.is_some_and(|proof| {
                peer_key.is_some_and(|k| {
                    k.verify(&challenge.nonce, challenge.client, PROTOCOL_VERSION, &proof)
                })
            });
            if !proved {
                let failure = if proof.is_some() {
                    AuthFailure::Wrong
                } else {
                    AuthFailure::Missing
                };
                return refuse(request.xid, AUTHENTICATE, Errno::EAUTH, failure);
            }
        } else if challenge.key {
            let auth = self
                .shared
                .net
                .auth
                .as_ref()
                .expect("only a server with a key asks for its proof");
            let Some(proof) = proof else {
                return refuse(
                    request.xid,
                    AUTHENTICATE,
                    Errno::EAUTH,
                    AuthFailure::Missing,
                );
            };
            if let Err(failure) =
                auth.check(&challenge.nonce, challenge.client, PROTOCOL_VERSION, &proof)
            {
                return refuse(request.xid, AUTHENTICATE, Errno::EAUTH, failure);
            }
        }
        self.attach(
            conn,
            session,
            handshaking,
            Attach {
                client: challenge.client,
                atime: challenge.atime,
                ack: challenge.ack,
                acked_xid: request.acked_xid.max(challenge.acked_xid),
                xid: request.xid,
                opcode: AUTHENTICATE,
                keyed: challenge.key && !challenge.peer,
                peer: challenge.peer,
                session_proof: session_proof.map(|p| (challenge.nonce, p)),
            },
            answered,
        )
    }

    /// The session of `client` with `conn` attached to it (`proved`: whether a secret the
    /// server keeps for it was proved), or the refusal said to the client and logged:
    /// EAUTH for an unproved identity the server keeps a session for, EBUSY when no session
    /// more may start. `answering`: the opcode (for metrics) and the xid of the request.
    fn session_for(
        &self,
        conn: &Arc<ConnOutput>,
        peer: SocketAddr,
        client: u64,
        proved: impl FnOnce(&mds_client::auth::SessionSecret) -> bool,
        (opcode, xid): (u8, u64),
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<crate::session::Attached, Refused> {
        match self
            .shared
            .core
            .sessions
            .attach(client, conn.clone(), proved)
        {
            Ok(attached) => Ok(attached),
            Err(AttachRefused::Unproved) => {
                warn!(
                    partition = self.id,
                    conn = conn.id(),
                    %peer,
                    client,
                    reason = AuthFailure::Session.reason(),
                    "closing connection: the server keeps a session for this identity, and \
                     the connection did not prove its secret"
                );
                AuthFailure::Session.count();
                answered.push((opcode, Err(Errno::EAUTH)));
                self.reply_now(conn, xid, Err(Errno::EAUTH));
                Err(Refused)
            }
            Err(AttachRefused::Full) => {
                // As a full partition is told: EBUSY under xid 0, then the close.
                warn!(
                    partition = self.id,
                    %peer,
                    client,
                    "refusing connection: the server keeps {} sessions (--max-sessions), and \
                     this identity would start another",
                    self.shared.core.sessions.len()
                );
                metrics::counter!(crate::metrics::SESSIONS_REFUSED).increment(1);
                answered.push((opcode, Err(Errno::EBUSY)));
                self.reply_now(conn, 0, Err(Errno::EBUSY));
                Err(Refused)
            }
        }
    }

    /// Completes a handshake: the connection takes a connection slot, its credentials policy
    /// is settled, and it becomes its client's session's, replacing an older one — if it
    /// proved the session's secret, or started the session — and is answered `Connected`
    /// under the CONNECT's xid, or the AUTHENTICATE's that proved it.
    fn attach(
        &self,
        conn: &Arc<ConnOutput>,
        session: &mut Option<Arc<Session>>,
        handshaking: &mut Handshaking,
        attach: Attach,
        answered: &mut Vec<(u8, Result<(), Errno>)>,
    ) -> Result<(), Refused> {
        let Attach {
            client,
            atime,
            ack,
            acked_xid,
            xid,
            opcode,
            keyed,
            peer: proved_peer,
            session_proof,
        } = attach;
        let peer = handshaking.peer;
        // A proven peer speaks for the cluster's servers: whatever its credentials say goes,
        // as for a connection that proved the shared key.
        let credentials = match Credentials::of(
            self.shared.net.cred_check,
            peer,
            handshaking.local,
            keyed || proved_peer,
        ) {
            Ok(c) => c,
            Err(why) => {
                warn!(partition = self.id, conn = conn.id(), %peer, client, "closing connection: {why}");
                AuthFailure::Credentials.count();
                answered.push((opcode, Err(Errno::EAUTH)));
                self.reply_now(conn, xid, Err(Errno::EAUTH));
                return Err(Refused);
            }
        };
        let Some(slot) = self.connection_slot() else {
            let why = super::super::admission::Refused::Connections;
            warn!(partition = self.id, %peer, "refusing connection: {}", why.describe(&self.shared.net.limits));
            metrics::counter!(crate::metrics::CONNECTIONS_REFUSED).increment(1);
            answered.push((opcode, Err(Errno::EBUSY)));
            self.reply_now(conn, 0, Err(Errno::EBUSY));
            return Err(Refused);
        };
        let proved = |secret: &mds_client::auth::SessionSecret| {
            session_proof.is_some_and(|(nonce, proof)| secret.verify(&nonce, client, &proof))
        };
        let attached = self.session_for(conn, peer, client, proved, (opcode, xid), answered)?;
        handshaking.connection = Some(slot);
        handshaking.slot = None;
        handshaking.credentials = credentials;
        if proved_peer {
            handshaking.origin = Origin::Peer;
        }
        let recovering = self.shared.core.recovery.expects(client);
        // A client the journal knew from before the restart: noted, so the window's close
        // does not evict it; forgotten when it is done replaying, unless its replays make it
        // hold something early again.
        self.shared.core.recovery.connected(client);
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
        attached.session.set_atime(atime);
        let early = self.shared.core.ack.early_for(ack);
        attached.session.set_early(early);
        attached.session.note_acked(acked_xid);
        attached.session.note_replied(xid);
        *session = Some(attached.session);
        answered.push((opcode, Ok(())));
        self.reply_now(
            conn,
            xid,
            Ok(Body::Connected {
                version: PROTOCOL_VERSION,
                server_boot: self.shared.net.boot,
                partition: self.id as u32,
                ack_early: early,
                recovering,
                evicted: self.shared.core.recovery.evicted(client),
                session_secret: attached.issued.map(|s| *s.bytes()),
            }),
        );
        Ok(())
    }
}

/// What completing a handshake needs to know of it.
struct Attach {
    client: u64,
    /// How the session's reads move atimes, as its CONNECT said.
    atime: Atime,
    /// When the session asked to be answered, as its CONNECT said.
    ack: AckAsked,
    acked_xid: u64,
    /// The xid `Connected` answers.
    xid: u64,
    /// For metrics: CONNECT, or the AUTHENTICATE that proved it.
    opcode: u8,
    /// The connection proved the shared key.
    keyed: bool,
    /// The connection proved the cluster's peer secret (PEER_CONNECT).
    peer: bool,
    /// The nonce and the session proof the AUTHENTICATE carried, if any.
    session_proof: Option<([u8; protocol::NONCE_LEN], [u8; protocol::PROOF_LEN])>,
}
