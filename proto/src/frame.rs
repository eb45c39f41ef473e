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

/// A frame's length field named more than [`MAX_FRAME`] bytes: the stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a frame of {0} bytes, more than the {MAX_FRAME} allowed")]
pub struct FrameTooLong(pub usize);

/// The first whole frame at the start of `buf`: its payload and how many bytes it took
/// (length field included); `None` until all of it has arrived. What [`codec`] reads, without
/// taking each frame out of the buffer as a `BytesMut` of its own: a reader decodes every
/// frame of a read where it lies and drops them all at once (the codec's split and advance
/// were ~370 instructions a reply in the client, counted).
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, FrameTooLong> {
    let Some(&length) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(FrameTooLong(length));
    }
    Ok(buf.get(4..4 + length).map(|payload| (payload, 4 + length)))
}

/// Room a reader of pipelined frames asks the socket to fill at a time: a commit's worth of
/// small requests or replies (a longer frame gets more as it arrives).
pub const READ_CHUNK: usize = 64 << 10;

/// Makes room in `input` for the next read: frames read in place ([`split_frame`]) are
/// dropped from the buffer's front, which leaves its spare room at the back, so it is topped
/// up to [`READ_CHUNK`] whenever less than a quarter of that is left.
pub fn make_read_room(input: &mut BytesMut) {
    if input.capacity() - input.len() < READ_CHUNK / 4 {
        input.reserve(READ_CHUNK);
    }
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

    /// `split_frame` finds what the codec finds in any stream of frames, cut anywhere: the
    /// same payloads, none before the whole frame is there, and an oversized length refused.
    #[test]
    fn split_frame_reads_what_the_codec_reads() {
        use tokio_util::codec::Decoder;
        let mut stream = BytesMut::new();
        for len in [0usize, 1, 3, 4, 100, 60_000] {
            put_frame(&vec![len as u8; len], &mut stream);
        }
        let mut codec = codec();
        let mut whole = stream.clone();
        let mut expected = Vec::new();
        while let Some(frame) = codec.decode(&mut whole).unwrap() {
            expected.push(frame.to_vec());
        }
        for cut in [0, 1, 3, 4, 5, 8, 111, 60_000, stream.len()] {
            let mut found = Vec::new();
            let mut at = 0;
            let mut arrived = cut;
            loop {
                match split_frame(&stream[at..arrived]).unwrap() {
                    Some((payload, used)) => {
                        found.push(payload.to_vec());
                        at += used;
                    }
                    None if arrived < stream.len() => arrived = stream.len(),
                    None => break,
                }
            }
            assert_eq!(found, expected, "cut at {cut}");
        }
        let mut long = BytesMut::new();
        long.put_u32(MAX_FRAME as u32 + 1);
        assert_eq!(split_frame(&long), Err(FrameTooLong(MAX_FRAME + 1)));
        assert!(codec.decode(&mut long).is_err(), "the codec refuses it too");
        long.clear();
        long.put_u32(MAX_FRAME as u32);
        assert_eq!(
            split_frame(&long),
            Ok(None),
            "the longest allowed waits for its bytes"
        );
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
