//! Postcard's bytes for the few values every create encodes, written by hand: an inode's
//! image in the journal, the ATTR body of a reply (its resend record and its frame), and the
//! client's request of the common operations (CREATE, MKDIR, LOOKUP, GETATTR, UNLINK, RMDIR).
//! Through serde, postcard encodes each integer as a varint into a temporary and then copies
//! it into its output with a bounds check and a `memcpy` call, ~40 instructions a field;
//! an inode image is 16 fields, three of them 9-byte timestamps (~800 instructions counted).
//! [`PostcardWriter`] writes the same varints straight into a buffer on the stack.
//!
//! The bytes must be exactly postcard's (they are the wire format and the store's), so every
//! hand-written encoder here is checked against `postcard::to_stdvec` by a proptest over
//! every field's whole range, and decoding stays postcard's own.

use bytes::BytesMut;

use crate::op::{Op, RequestRef, opcode};
use crate::reply::{Attr, Body};

/// A fixed buffer of `N` bytes (a power of two) written with postcard's varints. The caller
/// bounds what it writes: at most 10 bytes per integer, plus what it copies in.
pub struct PostcardWriter<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for PostcardWriter<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> PostcardWriter<N> {
    const POWER_OF_TWO: () = assert!(N.is_power_of_two());

    pub fn new() -> Self {
        let () = Self::POWER_OF_TWO;
        PostcardWriter {
            buf: [0; N],
            len: 0,
        }
    }

    /// What has been written.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Room left, in bytes.
    pub fn room(&self) -> usize {
        N - self.len
    }

    /// One byte. The index is masked, not checked: with `N` a power of two no write can
    /// fall outside the buffer, and a caller that overran its bound would write wrong bytes
    /// (which the proptests would see), never out of bounds.
    #[inline]
    fn byte(&mut self, b: u8) {
        debug_assert!(self.len < N, "PostcardWriter<{N}> overrun");
        self.buf[self.len & (N - 1)] = b;
        self.len += 1;
    }

    /// An unsigned integer (u16, u32, u64, usize, an enum's variant index): LEB128.
    #[inline]
    pub fn varint(&mut self, v: u64) {
        if v < LONG_VARINT {
            self.varint_bytewise(v);
        } else {
            self.long_varint(v);
        }
    }

    /// A varint of five bytes or more: its low 56 bits spread into eight 7-bit groups and
    /// stored at once, then what is left above them a byte at a time. The byte-at-a-time
    /// loop costs ~5 instructions a byte, this ~25 whatever the length: a create writes
    /// 9-byte timestamps three at a time (its reply, its entry's inode image, its
    /// directory's image), and inode numbers, modes and ids of one to four bytes. Always
    /// inlined: out of line it takes the writer's address, and the callers' buffers are then
    /// zeroed in full (a `memset` call each; 14,497 -> 14,689 server instructions a create).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn long_varint(&mut self, v: u64) {
        let Some(out) = self
            .buf
            .get_mut(self.len..)
            .and_then(<[u8]>::first_chunk_mut::<8>)
        else {
            return self.varint_bytewise(v);
        };
        let above = v >> 56;
        if above != 0 {
            // Nine or ten bytes (every timestamp): eight continued, then the rest.
            *out = (spread_7_bit_groups(v) | 0x8080_8080_8080_8080).to_le_bytes();
            self.len += 8;
            self.varint_bytewise(above);
        } else {
            // Five to eight bytes, 7 bits each; every byte but the last has the continuation
            // bit.
            let bytes = (64 - v.leading_zeros()).div_ceil(7) as usize;
            let continued = 0x8080_8080_8080_8080 & ((1u64 << (8 * (bytes - 1))) - 1);
            *out = (spread_7_bit_groups(v) | continued).to_le_bytes();
            self.len += bytes;
        }
    }

    /// [`PostcardWriter::varint`] a byte at a time, whatever the value: for writers of small
    /// values at many places (the request encoder's ids and modes), which inline it where
    /// `varint`, with its eight-byte path, stayed a call at each (loadgen 3,975 -> 4,060
    /// instructions a create, counted: docs/BENCHMARKS.md, "Resend slots in the commit's
    /// edit").
    #[inline]
    pub fn varint_bytewise(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    /// A signed integer: zigzag, then a varint.
    #[inline]
    pub fn signed(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    /// A byte string or `str`: its length as a varint, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        assert!(b.len() + 10 <= self.room(), "PostcardWriter<{N}>: no room");
        self.varint(b.len() as u64);
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// An [`Attr`], field by field in declaration order.
    #[inline]
    pub fn attr(&mut self, a: &Attr) {
        self.varint(a.ino);
        self.varint(a.kind as u64);
        self.varint(a.mode.into());
        self.varint(a.uid.into());
        self.varint(a.gid.into());
        self.varint(a.nlink.into());
        self.varint(a.size);
        self.signed(a.atime_ns);
        self.signed(a.mtime_ns);
        self.signed(a.ctime_ns);
        self.varint(a.rdev);
        self.varint(a.generation);
        self.varint(a.blocks);
    }
}

/// The least value [`PostcardWriter::varint`] writes eight bytes at once for: five bytes of
/// varint or more.
const LONG_VARINT: u64 = 1 << 28;

/// The low 56 bits of `v` as eight 7-bit groups, one in each byte's low bits, least
/// significant first (LEB128's order when stored little-endian); the high bits are clear.
#[inline]
fn spread_7_bit_groups(v: u64) -> u64 {
    let x = v & 0x00ff_ffff_ffff_ffff;
    // Two 28-bit halves into 32-bit lanes, four 14-bit quarters into 16-bit lanes, eight
    // 7-bit groups into bytes.
    let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x00ff_ffff_f000_0000) << 4);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
    (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1)
}

/// [`Body::Attr`]'s variant index (its place in the enum, which `docs/protocol.md` numbers).
pub(crate) const BODY_ATTR: u32 = 2;

/// `f` called with `body`'s postcard encoding (what [`crate::encode`] gives): by hand for an
/// ATTR body, the body of most mutations' replies, on the stack without an allocation;
/// through serde for the rest.
pub fn encode_body_with<R>(body: &Body, f: impl FnOnce(&[u8]) -> R) -> R {
    match body {
        Body::Attr(attr) => {
            // 1 + 12 fields of at most 10 bytes.
            let mut w = PostcardWriter::<128>::new();
            w.varint(BODY_ATTR.into());
            w.attr(attr);
            f(w.as_slice())
        }
        other => f(&crate::encode(other)),
    }
}

/// Appends one frame holding `request` (what [`crate::encode_frame`] appends for it): by hand
/// for CREATE, MKDIR, LOOKUP, GETATTR, UNLINK and RMDIR, the requests a create or stat
/// workload sends, through serde for the rest. Through serde a CREATE cost ~430 instructions
/// of the client's ~5,900 a create (counted, `SIDE=loadgen ./bench/cachegrind.sh`): a call
/// and a bounds-checked copy per field.
pub fn encode_request_frame(request: &RequestRef<'_>, out: &mut BytesMut) {
    const ROOM: usize = 256;
    let (code, first, name, mode) = match request.op {
        Op::Create { parent, name, mode } => (opcode::CREATE, *parent, Some(name), Some(*mode)),
        Op::Mkdir { parent, name, mode } => (opcode::MKDIR, *parent, Some(name), Some(*mode)),
        Op::Lookup { parent, name } => (opcode::LOOKUP, *parent, Some(name), None),
        Op::Unlink { parent, name } => (opcode::UNLINK, *parent, Some(name), None),
        Op::Rmdir { parent, name } => (opcode::RMDIR, *parent, Some(name), None),
        Op::Getattr { ino } => (opcode::GETATTR, *ino, None, None),
        _ => return crate::encode_frame(request, out),
    };
    let name_len = name.map_or(0, String::len);
    // Nine integers of at most 10 bytes, a replay's 41, the name and the groups.
    if 90 + 41 + name_len + 5 * request.cred.groups.len() > ROOM {
        return crate::encode_frame(request, out);
    }
    let mut w = PostcardWriter::<ROOM>::new();
    w.varint_bytewise(request.xid);
    w.varint_bytewise(code.into());
    w.varint_bytewise(first);
    if let Some(name) = name {
        w.bytes(name.as_bytes());
    }
    if let Some(mode) = mode {
        w.varint_bytewise(mode.into());
    }
    w.varint_bytewise(request.acked_xid);
    w.varint_bytewise(request.cred.uid.into());
    w.varint_bytewise(request.cred.gid.into());
    w.varint_bytewise(request.cred.groups.len() as u64);
    for &group in &request.cred.groups {
        w.varint_bytewise(group.into());
    }
    match request.replay {
        None => w.byte(0),
        Some(replay) => {
            w.byte(1);
            w.varint_bytewise(replay.xid);
            w.varint_bytewise(replay.transno);
            w.varint_bytewise(replay.ino);
            w.varint_bytewise(replay.ticket);
        }
    }
    let bytes = w.as_slice();
    out.reserve(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::tests::{attr, request};
    use crate::{Cred, Request};
    use proptest::prelude::*;

    fn borrowed(request: &Request) -> RequestRef<'_> {
        RequestRef {
            xid: request.xid,
            op: &request.op,
            acked_xid: request.acked_xid,
            cred: &request.cred,
            replay: request.replay,
        }
    }

    proptest! {
        /// Every request's frame is serde's, appended after what the buffer held: the common
        /// operations' by hand (and those too long for the stack through serde), the rest
        /// through serde.
        #[test]
        fn a_request_frame_is_serdes(request in request()) {
            let (mut hand, mut serde) = (BytesMut::from(&b"before"[..]), BytesMut::from(&b"before"[..]));
            encode_request_frame(&borrowed(&request), &mut hand);
            crate::encode_frame(&request, &mut serde);
            prop_assert_eq!(&hand[..], &serde[..]);
        }

        /// Names long enough to pass the stack buffer, with and without groups.
        #[test]
        fn a_long_request_frame_is_serdes(name in "[a-z]{150,300}", groups in 0usize..70) {
            let request = Request {
                xid: 1 << 40,
                op: Op::Create { parent: 7, name, mode: 0o644 },
                acked_xid: 3,
                cred: Cred { uid: 1000, gid: 1000, groups: (0..groups as u32).collect() },
                replay: None,
            };
            let (mut hand, mut serde) = (BytesMut::new(), BytesMut::new());
            encode_request_frame(&borrowed(&request), &mut hand);
            crate::encode_frame(&request, &mut serde);
            prop_assert_eq!(&hand[..], &serde[..]);
        }

        #[test]
        fn an_attr_body_is_postcards_bytes(attr in attr()) {
            let body = Body::Attr(attr);
            prop_assert_eq!(encode_body_with(&body, <[u8]>::to_vec), postcard::to_stdvec(&body).unwrap());
        }

        #[test]
        fn integers_are_postcards_varints(u in any::<u64>(), i in any::<i64>(), s in any::<u32>()) {
            let mut w = PostcardWriter::<64>::new();
            w.varint(u);
            w.signed(i);
            w.varint(s.into());
            prop_assert_eq!(w.as_slice(), &postcard::to_stdvec(&(u, i, s)).unwrap()[..]);
        }

        #[test]
        fn bytes_are_postcards(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut w = PostcardWriter::<512>::new();
            w.bytes(&b);
            prop_assert_eq!(w.as_slice(), &postcard::to_stdvec(&b).unwrap()[..]);
        }
    }

    #[test]
    fn the_extremes_of_every_width() {
        for (u, i) in [
            (0, 0),
            (u64::MAX, i64::MIN),
            (127, -64),
            (128, 64),
            (1 << 63, i64::MAX),
        ] {
            let mut w = PostcardWriter::<32>::new();
            w.varint(u);
            w.signed(i);
            assert_eq!(w.as_slice(), &postcard::to_stdvec(&(u, i)).unwrap()[..]);
        }
    }

    /// Both sides of every width's edge, written at every place in the buffer: where eight
    /// bytes fit (stored at once) and in the last seven (a byte at a time).
    #[test]
    fn every_width_at_every_place_in_the_buffer() {
        let values: Vec<u64> = (0..64)
            .flat_map(|k| {
                let p = 1u64 << k;
                [
                    p - 1,
                    p,
                    p + 1,
                    p | (p >> 1),
                    p.wrapping_mul(0x9e37_79b9) | p,
                ]
            })
            .chain([
                u64::MAX,
                u64::MAX - 1,
                0x0101_0101_0101_0101,
                0x8080_8080_8080_8080,
            ])
            .collect();
        for &v in &values {
            let want = postcard::to_stdvec(&v).unwrap();
            for at in 0..=(32 - want.len()) {
                let mut w = PostcardWriter::<32>::new();
                for _ in 0..at {
                    w.byte(0x55);
                }
                w.varint(v);
                assert_eq!(&w.as_slice()[at..], &want[..], "{v:#x} at {at}");
                assert!(
                    w.as_slice()[..at].iter().all(|&b| b == 0x55),
                    "{v:#x} at {at}"
                );
            }
        }
    }

    #[test]
    fn every_other_body_goes_through_serde() {
        for body in [Body::Done, Body::Pong, Body::Notice] {
            assert_eq!(
                encode_body_with(&body, <[u8]>::to_vec),
                postcard::to_stdvec(&body).unwrap()
            );
        }
    }

    #[test]
    #[should_panic(expected = "no room")]
    fn bytes_past_the_buffer_are_refused() {
        PostcardWriter::<16>::new().bytes(&[0; 8]);
    }
}
