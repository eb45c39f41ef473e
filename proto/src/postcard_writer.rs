//! Postcard's bytes for the few values every create encodes, written by hand: an inode's
//! image in the journal and the ATTR body of a reply (its resend record and its frame).
//! Through serde, postcard encodes each integer as a varint into a temporary and then copies
//! it into its output with a bounds check and a `memcpy` call, ~40 instructions a field;
//! an inode image is 16 fields, three of them 9-byte timestamps (~800 instructions counted).
//! [`PostcardWriter`] writes the same varints straight into a buffer on the stack.
//!
//! The bytes must be exactly postcard's (they are the wire format and the store's), so every
//! hand-written encoder here is checked against `postcard::to_stdvec` by a proptest over
//! every field's whole range, and decoding stays postcard's own.

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
    pub fn varint(&mut self, mut v: u64) {
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
    }
}

/// [`Body::Attr`]'s variant index (its place in the enum, which `docs/protocol.md` numbers).
pub(crate) const BODY_ATTR: u32 = 2;

/// `body`'s postcard encoding (what [`crate::encode`] gives): by hand for an ATTR body, the
/// body of most mutations' replies; through serde for the rest.
pub fn encode_body(body: &Body) -> Vec<u8> {
    match body {
        Body::Attr(attr) => {
            // 1 + 12 fields of at most 10 bytes.
            let mut w = PostcardWriter::<128>::new();
            w.varint(BODY_ATTR.into());
            w.attr(attr);
            w.as_slice().to_vec()
        }
        other => crate::encode(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::tests::attr;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_attr_body_is_postcards_bytes(attr in attr()) {
            let body = Body::Attr(attr);
            prop_assert_eq!(encode_body(&body), postcard::to_stdvec(&body).unwrap());
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

    #[test]
    fn every_other_body_goes_through_serde() {
        for body in [Body::Done, Body::Pong, Body::Notice] {
            assert_eq!(encode_body(&body), postcard::to_stdvec(&body).unwrap());
        }
    }

    #[test]
    #[should_panic(expected = "no room")]
    fn bytes_past_the_buffer_are_refused() {
        PostcardWriter::<16>::new().bytes(&[0; 8]);
    }
}
