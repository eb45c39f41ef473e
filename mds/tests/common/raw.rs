//! A client that speaks the protocol frame by frame, for tests that must send what the client
//! library never would (forged replays, credentials of another user, a thousand silent
//! handshakes): blocking, one request at a time, with the CONNECT handshake done as the
//! library does it (proving the shared key or the session secret when challenged).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use mds_client::Session;
use mds_client::auth::AuthKey;
use mds_proto::{
    self as protocol, Body, Cred, Op, PROTOCOL_VERSION, Replay, Reply, Request, encode_frame,
};

/// One connection, written and read frame by frame.
pub struct Raw {
    pub stream: TcpStream,
}

/// A request with the default credentials of the tests (root's).
pub fn request(xid: u64, op: Op, replay: Option<Replay>) -> Request {
    Request {
        xid,
        op,
        acked_xid: 0,
        cred: Cred::default(),
        replay,
    }
}

impl Raw {
    /// A connection with nothing sent yet.
    pub fn open(addr: SocketAddr) -> Raw {
        Raw::on(TcpStream::connect(addr).expect("connecting"))
    }

    /// A connection over `stream` (bound however the test needs).
    pub fn on(stream: TcpStream) -> Raw {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Raw { stream }
    }

    /// Connects as `session`'s identity, proving its secret (and `key`) when the server asks,
    /// and returns the connection with the server's final answer (`Connected`, or why not).
    pub fn connect(addr: SocketAddr, session: &Session, key: Option<&AuthKey>) -> (Raw, Reply) {
        let mut raw = Raw::open(addr);
        let reply = raw.handshake(session, key);
        (raw, reply)
    }

    /// The CONNECT handshake as `session`, on this connection.
    pub fn handshake(&mut self, session: &Session, key: Option<&AuthKey>) -> Reply {
        let connect = Op::Connect {
            version: PROTOCOL_VERSION,
            client: session.id(),
            atime: mds_proto::Atime::default(),
            ack: session.ack_asked(),
        };
        let (xid, _) = session.begin();
        let reply = self.call(&request(xid, connect, None));
        session.finish(xid);
        // Kept, as the client library keeps it, so that a reconnect as this session proves it.
        if let Ok(Body::Connected {
            session_secret: Some(secret),
            ..
        }) = &reply.result
        {
            session.set_secret(mds_client::auth::SessionSecret::from_bytes(*secret));
        }
        let Ok(Body::Challenge {
            nonce,
            key: wants_key,
            session: wants_session,
        }) = reply.result
        else {
            return reply;
        };
        let proof = wants_key
            .then(|| key.map(|k| k.proof(&nonce, session.id(), PROTOCOL_VERSION)))
            .flatten();
        let session_proof = wants_session
            .then(|| session.secret().map(|s| s.proof(&nonce, session.id())))
            .flatten();
        let (xid, _) = session.begin();
        let reply = self.call(&request(
            xid,
            Op::Authenticate {
                proof,
                session: session_proof,
            },
            None,
        ));
        session.finish(xid);
        reply
    }

    pub fn send(&mut self, request: &Request) {
        let mut buf = BytesMut::new();
        encode_frame(request, &mut buf);
        self.stream.write_all(&buf).expect("sending");
    }

    /// The next reply, or `None` once the server closed the connection.
    pub fn recv(&mut self) -> Option<Reply> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut payload).ok()?;
        Some(protocol::decode(&payload).expect("a reply that decodes"))
    }

    /// Sends `request` and returns its answer: the next reply with its xid, or one the
    /// connection itself is answered with (xid 0, not a notice). A reply to another xid is
    /// dropped, as the client library drops a reply nobody waits for: the server releases a
    /// request's reply to its client's connection of now, so one sent on an older connection
    /// may be answered here, even before this connection's handshake is.
    pub fn call(&mut self, request: &Request) -> Reply {
        self.send(request);
        loop {
            let reply = self
                .reply()
                .expect("an answer before the connection closed");
            if reply.xid == request.xid || reply.xid == 0 {
                return reply;
            }
        }
    }

    /// The next reply that is not a commit notice, `None` once the connection closed.
    pub fn reply(&mut self) -> Option<Reply> {
        loop {
            let reply = self.recv()?;
            if reply.xid != 0 || reply.result != Ok(Body::Notice) {
                return Some(reply);
            }
        }
    }

    /// Whether the server has closed the connection (after reading what it sent first).
    pub fn closed(&mut self) -> bool {
        let mut sink = [0u8; 4096];
        loop {
            match self.stream.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }
}
