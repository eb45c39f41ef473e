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

/// Appends one length-prefixed frame holding `value` to `buf`.
pub fn encode_frame<T: Serialize>(value: &T, buf: &mut BytesMut) {
    let start = buf.len();
    buf.put_u32(0);
    let taken = std::mem::take(buf);
    let mut filled = postcard::to_extend(value, taken).expect("encoding into memory cannot fail");
    let len = (filled.len() - start - 4) as u32;
    filled[start..start + 4].copy_from_slice(&len.to_be_bytes());
    *buf = filled;
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
}
