//! The space of the file system a path is on (`statvfs`), for STATFS: what the store may
//! still grow into.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes of a file system: in all, free, and free to an unprivileged writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    pub total: u64,
    pub free: u64,
    pub available: u64,
}

/// The space of the file system `path` is on.
pub fn of(path: &Path) -> std::io::Result<Space> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `statvfs` only writes the struct it is given, which is plain data, and reads
    // the NUL-terminated path, which outlives the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &raw mut st) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = st.f_frsize;
    Ok(Space {
        total: st.f_blocks.saturating_mul(unit),
        free: st.f_bfree.saturating_mul(unit),
        available: st.f_bavail.saturating_mul(unit),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_reports_its_file_systems_space_and_a_missing_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let space = of(dir.path()).unwrap();
        assert!(space.total > 0);
        assert!(space.free <= space.total && space.available <= space.free);
        assert!(of(&dir.path().join("missing")).is_err());
    }
}
