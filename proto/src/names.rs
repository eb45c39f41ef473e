//! Name rules: what a directory entry's name may be.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
