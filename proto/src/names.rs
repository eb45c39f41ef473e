//! Name rules: what a directory entry's name may be.

use crate::{Errno, MAX_NAME};

/// Checks a name as POSIX and the design want it: not empty, not `.` or `..`, no `/` or NUL,
/// at most [`MAX_NAME`] bytes.
pub fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        Err(Errno::EINVAL)
    } else if name.len() > MAX_NAME {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}
