//! Frames: a 4-byte big-endian length and a postcard payload; decoding that refuses trailing
//! bytes; and the handshake prefix every protocol version shares.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use crate::{Errno, MAX_FRAME};

/// Why a frame's payload was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed payload: {0}")]
    Malformed(#[from] postcard::Error),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Decodes one frame payload, refusing trailing garbage.
pub fn decode<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, DecodeError> {
    let (value, rest) = postcard::take_from_bytes(payload)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(DecodeError::Trailing(rest.len()))
    }
}

/// Encodes `value` alone, without a frame: a reply body kept in a resend record. Encoded on
/// the stack first, so a small value costs one allocation of its exact size rather than the
/// few a growing `Vec` makes.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut scratch = [0u8; 256];
    match postcard::to_slice(value, &mut scratch) {
        Ok(bytes) => bytes.to_vec(),
        Err(_) => postcard::to_stdvec(value).expect("encoding into memory cannot fail"),
    }
}

/// Appends one length-prefixed frame holding `value` to `buf`. Encoded into a buffer on the
/// stack first, then copied in once: postcard's `to_extend` into a `BytesMut` goes through
/// `Extend<u8>`, a reserve and a push per byte (~700 instructions for a CREATE request,
/// counted in the client's budget). What does not fit the stack (a READ's or WRITE's data, a
/// READDIR page) is encoded into a `Vec` of its own.
pub fn encode_frame<T: Serialize>(value: &T, buf: &mut BytesMut) {
    let mut scratch = [0u8; 512];
    match postcard::to_slice(value, &mut scratch) {
        Ok(bytes) => put_frame(bytes, buf),
        Err(_) => put_frame(
            &postcard::to_stdvec(value).expect("encoding into memory cannot fail"),
            buf,
        ),
    }
}

fn put_frame(bytes: &[u8], buf: &mut BytesMut) {
    buf.reserve(4 + bytes.len());
    buf.put_u32(bytes.len() as u32);
    buf.put_slice(bytes);
}

/// Appends one frame holding a successful [`crate::Reply`] whose body is encoded already
/// (by [`encode`], for the request's resend record): the bytes [`encode_frame`] would write for
/// that reply, without encoding the body a second time.
pub fn encode_reply_frame(
    xid: u64,
    transno: u64,
    last_committed: u64,
    body: &[u8],
    ticket: u64,
    buf: &mut BytesMut,
) {
    let start = buf.len();
    buf.put_u32(0);
    put_varint(buf, xid);
    put_varint(buf, transno);
    put_varint(buf, last_committed);
    // `Result`'s variant index, as postcard encodes an enum's: 0 is `Ok`.
    buf.put_u8(0);
    buf.put_slice(body);
    put_varint(buf, ticket);
    let len = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// A `u64` as postcard writes it: seven bits a byte, low bits first, the high bit set on all
/// but the last.
fn put_varint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// The frame codec both sides use: 4-byte big-endian length, [`MAX_FRAME`] at most.
pub fn codec() -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// The first three values of a CONNECT payload, the same in every protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    pub xid: u64,
    pub opcode: u32,
    pub version: u32,
}

/// Reads the (xid, opcode, version) prefix of a first request without decoding the rest, so
/// a server can refuse another protocol version by name rather than fail to decode it. `None`
/// if even the prefix does not decode.
pub fn peek_handshake(payload: &[u8]) -> Option<Handshake> {
    let ((xid, opcode, version), _rest) =
        postcard::take_from_bytes::<(u64, u32, u32)>(payload).ok()?;
    Some(Handshake {
        xid,
        opcode,
        version,
    })
}

/// Appends the refusal of a client that speaks another protocol version: `Reply { xid,
/// transno: 0, last_committed, result: Err(errno) }` in the layout versions 1 and 2 share
/// (without the ticket of versions 3 and 4), so that such a client decodes it and reports the error.
pub fn encode_version_refusal(xid: u64, last_committed: u64, errno: Errno, buf: &mut BytesMut) {
    // `Result<(), Errno>`'s Err encodes as `Result<Body, Errno>`'s does: variant 1, then the
    // code.
    encode_frame(&(xid, 0u64, last_committed, Err::<(), Errno>(errno)), buf);
}

/// Reads a refusal in the layout of [`encode_version_refusal`]: what a server of another
/// protocol version answers a CONNECT it will not serve. `None` if `payload` is not one.
pub fn decode_version_refusal(payload: &[u8]) -> Option<(u64, Errno)> {
    match decode::<(u64, u64, u64, Result<(), Errno>)>(payload) {
        Ok((xid, _, _, Err(errno))) => Some((xid, errno)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, DirEntry, Kind};
    use proptest::prelude::*;

    proptest! {
        /// A reply framed from its body's bytes is the frame of the whole reply, byte for byte,
        /// for every width of each integer.
        #[test]
        fn a_reply_framed_from_its_encoded_body_is_the_whole_replys_frame(
            xid: u64,
            transno: u64,
            last_committed: u64,
            ticket: u64,
            ino: u64,
            name in "[a-z]{0,40}",
        ) {
            let bodies = [
                Body::Done,
                Body::Entries { entries: vec![DirEntry { name, ino, kind: Kind::File }], next: None },
            ];
            for body in bodies {
                let reply = crate::Reply { xid, transno, last_committed, result: Ok(body.clone()), ticket };
                let (mut whole, mut framed) = (BytesMut::from(&b"before"[..]), BytesMut::from(&b"before"[..]));
                encode_frame(&reply, &mut whole);
                encode_reply_frame(xid, transno, last_committed, &encode(&body), ticket, &mut framed);
                prop_assert_eq!(&whole[..], &framed[..]);
            }
        }
    }

    #[test]
    fn encode_round_trips_small_and_large_values() {
        let small = Body::Done;
        assert_eq!(decode::<Body>(&encode(&small)).unwrap(), small);
        let entries = (0..40)
            .map(|i| DirEntry {
                name: format!("entry-{i:04}"),
                ino: i,
                kind: Kind::File,
            })
            .collect();
        let large = Body::Entries {
            entries,
            next: None,
        };
        let bytes = encode(&large);
        assert!(bytes.len() > 256, "past the stack buffer: {}", bytes.len());
        assert_eq!(decode::<Body>(&bytes).unwrap(), large);
    }

    /// A frame is its length (u32, big-endian) then the value's postcard bytes, whether the
    /// value fits the stack buffer or not, appended after what the buffer held.
    #[test]
    fn a_frame_is_the_length_then_the_values_bytes_small_or_large() {
        let data = |n| crate::Op::Write {
            ino: 7,
            handle: 1,
            offset: 0,
            data: crate::Data(vec![0xab; n]),
        };
        for value in [data(0), data(400), data(600), data(1 << 20)] {
            let bytes = postcard::to_stdvec(&value).unwrap();
            let mut buf = BytesMut::from(&b"held"[..]);
            encode_frame(&value, &mut buf);
            assert_eq!(&buf[..4], b"held");
            assert_eq!(&buf[4..8], &(bytes.len() as u32).to_be_bytes());
            assert_eq!(&buf[8..], &bytes[..]);
        }
    }
}
