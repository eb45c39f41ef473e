//! Name rules: what a directory entry's name may be, and the order READDIR lists names in.

use std::cmp::Ordering;

use crate::{Errno, MAX_NAME};

/// Checks a name as POSIX and the design want it: not empty, not `.` or `..`, no `/` or NUL,
/// at most [`MAX_NAME`] bytes.
///
/// Both bytes are ASCII, so they are searched for as bytes (`memchr2`, many at a time), not
/// as `char`s: `str::contains` with a `char` array decodes every character first (~10
/// instructions a byte, 247 a create's name, counted).
pub fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || memchr::memchr2(b'/', b'\0', name.as_bytes()).is_some()
    {
        Err(Errno::EINVAL)
    } else if name.len() > MAX_NAME {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

/// The word a name sorts by first in a directory: its bytes, zero-padded on the right, when it
/// has at most eight; else its last eight bytes. Big-endian, so comparing words compares those
/// bytes. Names hold no NUL, so a short name's word never equals a long name's.
pub fn name_order_key(name: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    if name.len() <= 8 {
        word[..name.len()].copy_from_slice(name);
    } else {
        word.copy_from_slice(&name[name.len() - 8..]);
    }
    u64::from_be_bytes(word)
}

/// The order READDIR lists a directory's names in (docs/protocol.md): by [`name_order_key`],
/// then by bytes. Byte order among names of up to eight bytes; longer ones by their ends, so
/// names that count up at their end stay together.
pub fn name_order(a: &[u8], b: &[u8]) -> Ordering {
    name_order_key(a)
        .cmp(&name_order_key(b))
        .then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_names_order_as_bytes_and_long_ones_by_their_last_eight() {
        let mut names = vec![
            "b",
            "ab",
            "a",
            "file.10",
            "file.9",
            "aa-report.2",
            "zz-report.1",
        ];
        names.sort_by(|a, b| name_order(a.as_bytes(), b.as_bytes()));
        assert_eq!(
            names,
            [
                "a",
                "ab",
                "b",
                "file.10",
                "file.9",
                "zz-report.1",
                "aa-report.2"
            ]
        );
        assert_eq!(name_order_key(b"a"), 0x6100_0000_0000_0000);
        assert_eq!(
            name_order_key(b"xx-report.1"),
            u64::from_be_bytes(*b"report.1")
        );
        assert!(
            name_order(b"q-same-end", b"p-same-end").is_gt(),
            "a shared word: bytes"
        );
    }

    proptest! {
        /// The byte search finds a `/` or NUL wherever the character search does: any
        /// string, short or past the widths memchr searches at once, with either byte put
        /// anywhere in it.
        #[test]
        fn the_byte_search_is_the_character_search(
            name in "(.|/|\u{0}){0,300}",
            put in proptest::option::of((any::<prop::sample::Index>(), any::<bool>())),
        ) {
            let mut name = name;
            if let Some((at, slash)) = put {
                let at = at.index(name.len() + 1);
                if name.is_char_boundary(at) {
                    name.insert(at, if slash { '/' } else { '\0' });
                }
            }
            let by_chars = name.contains(['/', '\0']);
            prop_assert_eq!(
                check_name(&name) == Err(Errno::EINVAL),
                name.is_empty() || name == "." || name == ".." || by_chars
            );
        }
    }
}
