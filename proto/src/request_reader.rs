//! A request's postcard bytes read by hand, for the operations a metadata workload sends
//! most (CREATE, MKDIR, LOOKUP, GETATTR, UNLINK, RMDIR), the reading counterpart of
//! [`crate::PostcardWriter`]. Through serde, postcard reads a `Request` field by field through
//! its visitors (~830 instructions a CREATE, counted in `bench/budget.sh`); these fields are
//! integers and one name.
//!
//! The hand reader takes only what it can read exactly as postcard would, and gives up on
//! anything else: another operation, a replay, an integer longer than its plain form needs
//! here (a `u64` of ten bytes, a `u32` of five, where postcard's overflow checks begin), more
//! groups than [`MAX_GROUPS`], a name that is not UTF-8, a short or long payload. Every give-up
//! decodes the whole payload again with postcard, so what a request decodes to, and every
//! error, is postcard's own: a proptest holds the two to the same result over every operation
//! and the fuzzer (`fuzz/fuzz_targets/decode_frames.rs`) over arbitrary bytes.

use crate::frame::{DecodeError, decode};
use crate::op::{Cred, MAX_GROUPS, Op, Request, opcode};

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

/// What is left of the payload.
struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.buf.split_first()?;
        self.buf = rest;
        Some(b)
    }

    /// A varint of at most `max_bytes` bytes (LEB128, as postcard writes it); `None` for a
    /// longer one. Below the width's full length no bit can overflow, so there is nothing
    /// of postcard's to check.
    fn varint(&mut self, max_bytes: u32) -> Option<u64> {
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
    fn u64(&mut self) -> Option<u64> {
        self.varint(9)
    }

    /// A `u32` of up to four bytes (28 bits: any mode, and ids below 268,435,456).
    fn u32(&mut self) -> Option<u32> {
        self.varint(4).and_then(|v| u32::try_from(v).ok())
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
mod tests {
    use super::*;
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
    fn wide_u64() -> impl Strategy<Value = u64> {
        (0u32..64, any::<u64>()).prop_map(|(bits, v)| if bits == 0 { 0 } else { v >> (64 - bits) })
    }

    fn wide_u32() -> impl Strategy<Value = u32> {
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

    fn request() -> impl Strategy<Value = Request> {
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
            cut in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let payload = postcard::to_stdvec(&request).unwrap();
            let short = &payload[..cut.index(payload.len())];
            prop_assert_eq!(by_reader(short), postcards(short));
            let mut long = payload.clone();
            long.push(byte);
            prop_assert_eq!(by_reader(&long), postcards(&long));
            let mut changed = payload.clone();
            changed[at.index(payload.len())] = byte;
            prop_assert_eq!(by_reader(&changed), postcards(&changed));
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
}
