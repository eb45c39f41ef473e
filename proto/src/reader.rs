//! Postcard's bytes read by hand for the messages a metadata workload exchanges most, the
//! reading counterpart of [`crate::PostcardWriter`]: the server's requests of CREATE, MKDIR,
//! LOOKUP, GETATTR, UNLINK and RMDIR ([`decode_request`]), and the client's replies carrying
//! attributes, DONE, PONG or a notice ([`decode_reply`]). Through serde, postcard reads a
//! message field by field through its visitors (~500 instructions a CREATE request above its
//! name's allocation, ~1,000 an ATTR reply, counted with `bench/cachegrind.sh`); these are
//! integers and at most one name.
//!
//! A hand reader takes only what it can read exactly as postcard would, and gives up on
//! anything else: another operation or body, a replay, an error reply, an integer longer than
//! its plain form needs here (a 64-bit integer of ten bytes, a `u32` of five, where postcard's
//! overflow checks begin), more groups than [`MAX_GROUPS`], a name that is not UTF-8, a short
//! or long payload. Every give-up decodes the whole payload again with postcard, so what a
//! message decodes to, and every error, is postcard's own: proptests hold the two to the same
//! result over every variant and width, and the fuzzer (`fuzz/fuzz_targets/decode_frames.rs`)
//! over arbitrary bytes.

use crate::frame::{DecodeError, decode};
use crate::op::{Cred, MAX_GROUPS, Op, Request, opcode};
use crate::postcard_writer::BODY_ATTR;
use crate::reply::{Attr, Body, Reply};
use crate::values::Kind;

/// Decodes a request's payload: by hand for the common operations, by postcard otherwise.
/// The same result as [`decode::<Request>`] for every input.
pub fn decode_request(payload: &[u8]) -> Result<Request, DecodeError> {
    match by_hand(payload) {
        Some(request) => Ok(request),
        None => decode(payload),
    }
}

/// The request, or `None` where postcard is to decide.
fn by_hand(payload: &[u8]) -> Option<Request> {
    let mut r = Reader { buf: payload };
    let xid = r.u64()?;
    let op = match u8::try_from(r.u32()?).ok()? {
        opcode::CREATE => {
            let parent = r.u64()?;
            let name = r.string()?;
            let mode = r.u32()?;
            Op::Create { parent, name, mode }
        }
        opcode::MKDIR => {
            let parent = r.u64()?;
            let name = r.string()?;
            let mode = r.u32()?;
            Op::Mkdir { parent, name, mode }
        }
        opcode::LOOKUP => {
            let parent = r.u64()?;
            let name = r.string()?;
            Op::Lookup { parent, name }
        }
        opcode::UNLINK => {
            let parent = r.u64()?;
            let name = r.string()?;
            Op::Unlink { parent, name }
        }
        opcode::RMDIR => {
            let parent = r.u64()?;
            let name = r.string()?;
            Op::Rmdir { parent, name }
        }
        opcode::GETATTR => Op::Getattr { ino: r.u64()? },
        _ => return None,
    };
    let acked_xid = r.u64()?;
    let uid = r.u32()?;
    let gid = r.u32()?;
    let count = usize::try_from(r.u64()?).ok()?;
    if count > MAX_GROUPS {
        return None;
    }
    let mut groups = Vec::with_capacity(count);
    for _ in 0..count {
        groups.push(r.u32()?);
    }
    // `replay`: `None` is one zero byte; a replay is rare and postcard's to read.
    if r.byte()? != 0 || !r.buf.is_empty() {
        return None;
    }
    Some(Request {
        xid,
        op,
        acked_xid,
        cred: Cred { uid, gid, groups },
        replay: None,
    })
}

/// Decodes a reply's payload: by hand for ATTR, DONE, PONG and notices, by postcard
/// otherwise. The same result as [`decode::<Reply>`] for every input.
pub fn decode_reply(payload: &[u8]) -> Result<Reply, DecodeError> {
    match reply_by_hand(payload) {
        Some(reply) => Ok(reply),
        None => decode(payload),
    }
}

/// [`Body`]'s other variant indexes the hand reader takes (ATTR's is the writer's): each its
/// place in the enum, which `docs/protocol.md` numbers.
const BODY_PONG: u32 = 1;
const BODY_DONE: u32 = 4;
const BODY_NOTICE: u32 = 6;

/// The reply, or `None` where postcard is to decide.
fn reply_by_hand(payload: &[u8]) -> Option<Reply> {
    let mut r = Reader { buf: payload };
    let xid = r.u64()?;
    let transno = r.u64()?;
    let last_committed = r.u64()?;
    // `Result`: variant 0 is `Ok`; an error reply is postcard's to read. Variant indexes
    // are `u32`s (one of six bytes is postcard's error, not a zero).
    if r.u32()? != 0 {
        return None;
    }
    let body = match r.u32()? {
        BODY_ATTR => Body::Attr(r.attr()?),
        BODY_DONE => Body::Done,
        BODY_NOTICE => Body::Notice,
        BODY_PONG => Body::Pong,
        _ => return None,
    };
    let ticket = r.u64()?;
    if !r.buf.is_empty() {
        return None;
    }
    Some(Reply {
        xid,
        transno,
        last_committed,
        result: Ok(body),
        ticket,
    })
}

/// What is left of the payload.
struct Reader<'a> {
    buf: &'a [u8],
}

// Counted, not guessed: the varint readers called rather than inlined cost the client 112
// instructions a create (`SIDE=loadgen ./bench/cachegrind.sh`); with plain `#[inline]` (tried on
// a word-at-a-time varint) the compiler left them called.
#[allow(clippy::inline_always)]
impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.buf.split_first()?;
        self.buf = rest;
        Some(b)
    }

    /// A varint of at most `max_bytes` bytes (LEB128, as postcard writes it); `None` for a
    /// longer one. Below the width's full length no bit can overflow, so there is nothing
    /// of postcard's to check.
    #[inline(always)]
    fn varint(&mut self, max_bytes: usize) -> Option<u64> {
        // The common case, with room for the longest varint: one bounds check, not one a
        // byte (a timestamp is nine bytes).
        if let Some(window) = self.buf.first_chunk::<9>() {
            let mut value = 0u64;
            for (i, &b) in window.iter().enumerate().take(max_bytes) {
                value |= u64::from(b & 0x7f) << (7 * i);
                if b & 0x80 == 0 {
                    self.buf = &self.buf[i + 1..];
                    return Some(value);
                }
            }
            return None;
        }
        let mut value = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A `u64` of up to nine bytes (63 bits).
    #[inline(always)]
    fn u64(&mut self) -> Option<u64> {
        self.varint(9)
    }

    /// A `u32` of up to four bytes (28 bits: any mode, and ids below 268,435,456).
    #[inline(always)]
    fn u32(&mut self) -> Option<u32> {
        self.varint(4).and_then(|v| u32::try_from(v).ok())
    }

    /// An `i64` of up to nine bytes: zigzag, then a varint (any time in nanoseconds until
    /// the year 2116 either side of 1970).
    #[inline(always)]
    fn i64(&mut self) -> Option<i64> {
        let v = self.u64()?;
        Some((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// An [`Attr`], field by field in declaration order.
    fn attr(&mut self) -> Option<Attr> {
        let ino = self.u64()?;
        let kind = *Kind::ALL.get(usize::try_from(self.u32()?).ok()?)?;
        let mode = self.u32()?;
        let uid = self.u32()?;
        let gid = self.u32()?;
        let nlink = self.u32()?;
        let size = self.u64()?;
        let atime_ns = self.i64()?;
        let mtime_ns = self.i64()?;
        let ctime_ns = self.i64()?;
        let rdev = self.u64()?;
        let generation = self.u64()?;
        let blocks = self.u64()?;
        Some(Attr {
            ino,
            kind,
            mode,
            uid,
            gid,
            nlink,
            size,
            atime_ns,
            mtime_ns,
            ctime_ns,
            rdev,
            generation,
            blocks,
        })
    }

    /// A `String`: its length, then UTF-8.
    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.u64()?).ok()?;
        if len > self.buf.len() {
            return None;
        }
        let (bytes, rest) = self.buf.split_at(len);
        let name = std::str::from_utf8(bytes).ok()?;
        self.buf = rest;
        Some(name.to_owned())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Errno;
    use crate::op::{Replay, RequestRef};
    use proptest::prelude::*;

    /// postcard's result, comparable: the request, or the error's text.
    fn postcards(payload: &[u8]) -> Result<Request, String> {
        decode::<Request>(payload).map_err(|e| e.to_string())
    }

    fn by_reader(payload: &[u8]) -> Result<Request, String> {
        decode_request(payload).map_err(|e| e.to_string())
    }

    /// Any width of integer, so that every varint length is written.
    pub(crate) fn wide_u64() -> impl Strategy<Value = u64> {
        (0u32..64, any::<u64>()).prop_map(|(bits, v)| if bits == 0 { 0 } else { v >> (64 - bits) })
    }

    pub(crate) fn wide_u32() -> impl Strategy<Value = u32> {
        (0u32..32, any::<u32>()).prop_map(|(bits, v)| if bits == 0 { 0 } else { v >> (32 - bits) })
    }

    fn op() -> impl Strategy<Value = Op> {
        let name = ".{0,40}";
        prop_oneof![
            (wide_u64(), name, wide_u32()).prop_map(|(parent, name, mode)| Op::Create {
                parent,
                name,
                mode
            }),
            (wide_u64(), name, wide_u32()).prop_map(|(parent, name, mode)| Op::Mkdir {
                parent,
                name,
                mode
            }),
            (wide_u64(), name).prop_map(|(parent, name)| Op::Lookup { parent, name }),
            (wide_u64(), name).prop_map(|(parent, name)| Op::Unlink { parent, name }),
            (wide_u64(), name).prop_map(|(parent, name)| Op::Rmdir { parent, name }),
            wide_u64().prop_map(|ino| Op::Getattr { ino }),
            // Others go to postcard.
            Just(Op::Ping),
            (wide_u64(), proptest::option::of(name), wide_u32())
                .prop_map(|(ino, cursor, limit)| Op::Readdir { ino, cursor, limit }),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = Request> {
        (
            (wide_u64(), op(), wide_u64()),
            (
                wide_u32(),
                wide_u32(),
                proptest::collection::vec(wide_u32(), 0..MAX_GROUPS + 3),
            ),
            proptest::option::of((wide_u64(), wide_u64(), wide_u64(), wide_u64())),
        )
            .prop_map(
                |((xid, op, acked_xid), (uid, gid, groups), replay)| Request {
                    xid,
                    op,
                    acked_xid,
                    cred: Cred { uid, gid, groups },
                    replay: replay.map(|(xid, transno, ino, ticket)| Replay {
                        xid,
                        transno,
                        ino,
                        ticket,
                    }),
                },
            )
    }

    /// Where to cut a payload, where to change a byte and to what (also the byte appended).
    type Damage = (prop::sample::Index, prop::sample::Index, u8);

    fn damage() -> impl Strategy<Value = Damage> {
        (
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            any::<u8>(),
        )
    }

    /// The hand reader and postcard agree on `payload` cut short, with a byte after it, and
    /// with one byte changed.
    fn read_alike<T: PartialEq + std::fmt::Debug>(
        payload: &[u8],
        (cut, at, byte): Damage,
        by_hand: fn(&[u8]) -> Result<T, String>,
        by_postcard: fn(&[u8]) -> Result<T, String>,
    ) -> Result<(), TestCaseError> {
        let short = &payload[..cut.index(payload.len())];
        prop_assert_eq!(by_hand(short), by_postcard(short));
        let mut long = payload.to_vec();
        long.push(byte);
        prop_assert_eq!(by_hand(&long), by_postcard(&long));
        let mut changed = payload.to_vec();
        changed[at.index(payload.len())] = byte;
        prop_assert_eq!(by_hand(&changed), by_postcard(&changed));
        Ok(())
    }

    proptest! {
        /// Every width of varint, with or without bytes after it (the one-window path needs
        /// nine bytes in view, the byte loop takes the rest): the value if it has at most
        /// nine bytes (four for a `u32`), and what follows left in place; nothing for a
        /// longer one.
        #[test]
        fn a_varint_reads_as_written_at_every_width(v in wide_u64(), after in 0usize..12) {
            let mut bytes = postcard::to_stdvec(&v).unwrap();
            let len = bytes.len();
            bytes.extend((0..after).map(|i| 0x80 | i as u8));
            let mut r = Reader { buf: &bytes };
            if len <= 9 {
                prop_assert_eq!(r.u64(), Some(v));
                prop_assert_eq!(r.buf.len(), after);
            } else {
                prop_assert_eq!(r.u64(), None);
            }
            let mut r = Reader { buf: &bytes };
            let narrow = r.u32();
            if len <= 4 {
                prop_assert_eq!(narrow, Some(v as u32));
            } else {
                prop_assert_eq!(narrow, None);
            }
        }
    }

    proptest! {
        /// Every request, of every operation and width: what postcard decodes, and the
        /// request itself.
        #[test]
        fn a_request_reads_as_postcard_reads_it(request in request()) {
            let payload = postcard::to_stdvec(&request).unwrap();
            prop_assert_eq!(by_reader(&payload), Ok(request));
        }

        /// A request cut short, with bytes after it, or with one byte changed: the same
        /// request or the same error as postcard's.
        #[test]
        fn damaged_bytes_read_as_postcard_reads_them(
            request in request(),
            damage in damage(),
        ) {
            let payload = postcard::to_stdvec(&request).unwrap();
            read_alike(&payload, damage, by_reader, postcards)?;
        }

        /// Arbitrary bytes after a CREATE's opcode: postcard's result.
        #[test]
        fn arbitrary_bytes_read_as_postcard_reads_them(
            xid in wide_u64(),
            rest in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let mut payload = postcard::to_stdvec(&xid).unwrap();
            payload.push(opcode::CREATE);
            payload.extend(rest);
            prop_assert_eq!(by_reader(&payload), postcards(&payload));
        }
    }

    /// The forms postcard accepts that the hand reader leaves to it: the same result.
    #[test]
    fn what_the_reader_leaves_to_postcard_still_decodes() {
        let create = Request {
            xid: 7,
            op: Op::Create {
                parent: 1,
                name: "f".to_owned(),
                mode: 0o644,
            },
            acked_xid: 6,
            cred: Cred::default(),
            replay: None,
        };
        let payload = postcard::to_stdvec(&create).unwrap();
        // A ten-byte xid (an over-long 7) and a five-byte uid (an over-long 0).
        let mut long_xid = vec![0x87, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        long_xid.extend(&payload[1..]);
        assert_eq!(by_reader(&long_xid), Ok(create.clone()));
        // Past 64 bits in a ten-byte xid, and past 32 in a five-byte uid: postcard's error.
        long_xid[9] = 0x02;
        assert_eq!(by_reader(&long_xid), postcards(&long_xid));
        assert!(by_reader(&long_xid).is_err());
        let uid_at = payload.len() - 4; // uid, gid, no groups, no replay
        let mut long_uid = payload[..uid_at].to_vec();
        long_uid.extend([0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0]);
        assert_eq!(by_reader(&long_uid), postcards(&long_uid));
        assert!(by_reader(&long_uid).is_err());
        long_uid[uid_at + 4] = 0x0f;
        assert_eq!(by_reader(&long_uid), postcards(&long_uid));
        assert!(by_reader(&long_uid).is_ok());
        // A replay, and a uid past 28 bits.
        let replayed = Request {
            replay: Some(Replay {
                xid: 1,
                transno: 2,
                ino: 3,
                ticket: 4,
            }),
            cred: Cred {
                uid: u32::MAX,
                gid: 1 << 30,
                groups: vec![u32::MAX],
            },
            ..create
        };
        let payload = postcard::to_stdvec(&RequestRef {
            xid: replayed.xid,
            op: &replayed.op,
            acked_xid: replayed.acked_xid,
            cred: &replayed.cred,
            replay: replayed.replay,
        })
        .unwrap();
        assert_eq!(by_reader(&payload), Ok(replayed));
        // Not UTF-8: postcard's error.
        let mut bad = postcard::to_stdvec(&(7u64, opcode::CREATE, 1u64)).unwrap();
        bad.extend([1, 0xff, 0, 0, 0, 0, 0, 0]);
        assert_eq!(by_reader(&bad), postcards(&bad));
        assert!(by_reader(&bad).is_err());
    }

    fn reply_postcards(payload: &[u8]) -> Result<Reply, String> {
        decode::<Reply>(payload).map_err(|e| e.to_string())
    }

    fn reply_by_reader(payload: &[u8]) -> Result<Reply, String> {
        decode_reply(payload).map_err(|e| e.to_string())
    }

    fn wide_i64() -> impl Strategy<Value = i64> {
        (wide_u64(), any::<bool>()).prop_map(|(v, negative)| {
            let v = v as i64;
            if negative { v.wrapping_neg() } else { v }
        })
    }

    /// Attributes with every field at every width (shared with the writer's tests).
    pub(crate) fn attr() -> impl Strategy<Value = Attr> {
        (
            (
                wide_u64(),
                proptest::sample::select(Kind::ALL.to_vec()),
                wide_u32(),
                wide_u32(),
                wide_u32(),
                wide_u32(),
            ),
            (wide_u64(), wide_i64(), wide_i64(), wide_i64()),
            (wide_u64(), wide_u64(), wide_u64()),
        )
            .prop_map(
                |(
                    (ino, kind, mode, uid, gid, nlink),
                    (size, atime_ns, mtime_ns, ctime_ns),
                    (rdev, generation, blocks),
                )| Attr {
                    ino,
                    kind,
                    mode,
                    uid,
                    gid,
                    nlink,
                    size,
                    atime_ns,
                    mtime_ns,
                    ctime_ns,
                    rdev,
                    generation,
                    blocks,
                },
            )
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let result = prop_oneof![
            attr().prop_map(|a| Ok(Body::Attr(a))),
            Just(Ok(Body::Done)),
            Just(Ok(Body::Notice)),
            Just(Ok(Body::Pong)),
            // Others go to postcard.
            (wide_u64(), proptest::sample::select(Kind::ALL.to_vec()))
                .prop_map(|(ino, kind)| Ok(Body::Remote { ino, kind })),
            proptest::sample::select(Errno::ALL.to_vec()).prop_map(Err),
        ];
        (wide_u64(), wide_u64(), wide_u64(), result, wide_u64()).prop_map(
            |(xid, transno, last_committed, result, ticket)| Reply {
                xid,
                transno,
                last_committed,
                result,
                ticket,
            },
        )
    }

    proptest! {
        /// Every reply, of every body the reader takes and some it leaves, and every width.
        #[test]
        fn a_reply_reads_as_postcard_reads_it(reply in reply()) {
            let payload = postcard::to_stdvec(&reply).unwrap();
            prop_assert_eq!(reply_by_reader(&payload), Ok(reply));
        }

        /// A reply cut short, with bytes after it, or with one byte changed: the same reply or
        /// the same error as postcard's.
        #[test]
        fn damaged_reply_bytes_read_as_postcard_reads_them(reply in reply(), damage in damage()) {
            let payload = postcard::to_stdvec(&reply).unwrap();
            read_alike(&payload, damage, reply_by_reader, reply_postcards)?;
        }

        /// Arbitrary bytes after an ATTR reply's header: postcard's result.
        #[test]
        fn arbitrary_reply_bytes_read_as_postcard_reads_them(
            header in (wide_u64(), wide_u64(), wide_u64()),
            rest in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let mut payload = postcard::to_stdvec(&header).unwrap();
            payload.extend([0, 2]); // Ok, Attr
            payload.extend(rest);
            prop_assert_eq!(reply_by_reader(&payload), reply_postcards(&payload));
        }
    }

    /// Variant indexes are `u32`s: an over-long zero of six bytes is postcard's error, one of
    /// five its zero; a kind past the last is its error too.
    #[test]
    fn reply_variant_indexes_are_read_as_postcard_reads_them() {
        let done = Reply::new(1, 2, 3, Ok(Body::Done));
        let payload = postcard::to_stdvec(&done).unwrap();
        assert_eq!(payload[3], 0); // Ok
        for zero in [
            &[0x80, 0x80, 0x80, 0x80, 0x00][..],
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
        ] {
            let mut long = payload[..3].to_vec();
            long.extend(zero);
            long.extend(&payload[4..]);
            assert_eq!(reply_by_reader(&long), reply_postcards(&long));
        }
        let attr = Reply::new(
            1,
            2,
            3,
            Ok(Body::Attr(Attr {
                ino: 9,
                kind: Kind::File,
                mode: 0o644,
                uid: 0,
                gid: 0,
                nlink: 1,
                size: 0,
                atime_ns: -1,
                mtime_ns: i64::MIN,
                ctime_ns: i64::MAX,
                rdev: 0,
                generation: 0,
                blocks: 0,
            })),
        );
        let mut payload = postcard::to_stdvec(&attr).unwrap();
        assert_eq!(reply_by_reader(&payload), Ok(attr));
        payload[6] = Kind::ALL.len() as u8; // the kind, after 1, 2, 3, Ok, Attr, 9
        assert_eq!(reply_by_reader(&payload), reply_postcards(&payload));
        assert!(reply_by_reader(&payload).is_err());
    }
}
