//! Translations between the server's types and the kernel's: an inode's attributes as FUSE
//! wants them, kinds, device numbers (the kernel's 32-bit encoding against the 64-bit
//! `makedev` the server keeps), times, names, and the server's error codes as errno values.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};
use mds_client::proto::{self, Attr, Body, Kind, MAX_IO, SetTime};

/// What every operation of the mount answers: a value, or the errno the caller sees.
pub type Fallible<T> = Result<T, Errno>;

/// The block size `stat` reports: a server READ or WRITE carries at most this, so stdio and
/// `cp` that size their buffers by it send whole requests.
const IO_BLOCK: u32 = MAX_IO as u32;

/// The attributes of `attr` as FUSE carries them.
pub fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        // The server's count of the data the file holds, holes left out: `cp`, `tar` and
        // `du` take a file with fewer blocks than its size for sparse, and look for holes.
        blocks: attr.blocks,
        atime: system_time(attr.atime_ns),
        mtime: system_time(attr.mtime_ns),
        ctime: system_time(attr.ctime_ns),
        crtime: system_time(attr.ctime_ns),
        kind: file_type(attr.kind),
        perm: (attr.mode & 0o7777) as u16,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: kernel_rdev(attr.rdev),
        blksize: IO_BLOCK,
        flags: 0,
    }
}

pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Directory => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

/// Nanoseconds since the epoch (negative before it) as a `SystemTime`.
pub fn system_time(ns: i64) -> SystemTime {
    let offset = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + offset
    } else {
        UNIX_EPOCH - offset
    }
}

/// A `SystemTime` as nanoseconds since the epoch, saturating at what an `i64` holds.
pub fn nanos(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// utimensat's time as SETATTR carries it: `UTIME_NOW` apart from an explicit time, since
/// they need different permissions.
pub fn set_time(time: fuser::TimeOrNow) -> SetTime {
    match time {
        fuser::TimeOrNow::Now => SetTime::Now,
        fuser::TimeOrNow::SpecificTime(t) => SetTime::At(nanos(t)),
    }
}

/// The kernel's device number (`new_encode_dev`: minor bits 0–7 and 20–31, major 8–19) as
/// glibc's 64-bit `makedev`, which the server keeps.
pub fn server_rdev(rdev: u32) -> u64 {
    let major = (rdev >> 8) & 0xfff;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xf_ff00);
    libc::makedev(major, minor)
}

/// The server's device number in the kernel's 32-bit encoding (a major past 4095 or a minor
/// past 2^20 does not fit it, as in the kernel).
pub fn kernel_rdev(rdev: u64) -> u32 {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A name from the kernel as the server takes it: UTF-8, or EILSEQ (as a file system with
/// `utf8only` answers; the server's names are UTF-8 by its protocol).
pub fn name(name: &OsStr) -> Fallible<String> {
    name.to_str().map(str::to_owned).ok_or(Errno::EILSEQ)
}

/// The errno a caller sees for the server's error code.
pub fn errno(e: proto::Errno) -> Errno {
    use proto::Errno as E;
    let code = match e {
        E::ENOENT => libc::ENOENT,
        E::EEXIST => libc::EEXIST,
        E::ENOTDIR => libc::ENOTDIR,
        E::EISDIR => libc::EISDIR,
        E::ENOTEMPTY => libc::ENOTEMPTY,
        E::EINVAL => libc::EINVAL,
        E::ENAMETOOLONG => libc::ENAMETOOLONG,
        E::ENOSPC => libc::ENOSPC,
        E::ESTALE => libc::ESTALE,
        E::EBUSY => libc::EBUSY,
        E::EACCES => libc::EACCES,
        E::EPERM => libc::EPERM,
        E::EMLINK => libc::EMLINK,
        E::ENODATA => libc::ENODATA,
        E::ERANGE => libc::ERANGE,
        E::E2BIG => libc::E2BIG,
        E::EOPNOTSUPP => libc::EOPNOTSUPP,
        E::EBADF => libc::EBADF,
        E::EFBIG => libc::EFBIG,
        E::ELOOP => libc::ELOOP,
        E::EREMOTE => libc::EREMOTE,
        E::EXDEV => libc::EXDEV,
        E::EMFILE => libc::EMFILE,
        E::ENFILE => libc::ENFILE,
        E::EAGAIN => libc::EAGAIN,
        E::EDEADLK => libc::EDEADLK,
        E::ENOLCK => libc::ENOLCK,
        E::EINTR => libc::EINTR,
        // EPROTO and EAUTH are the connection's, EIO the journal's: to a program on the
        // mount, all are an I/O error.
        _ => libc::EIO,
    };
    Errno::from_i32(code)
}

/// The inode's attributes from an answer that must carry them.
pub fn attr(body: Body) -> Fallible<Attr> {
    match body {
        Body::Attr(a) => Ok(a),
        // A LOOKUP's answer is read by `lookup_as`, which follows a remote entry.
        _ => Err(Errno::EIO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_survive_the_round_trip_through_both_encodings() {
        for (major, minor) in [
            (0, 0),
            (1, 3),
            (8, 17),
            (259, 0),
            (4095, 0xf_ffff),
            (13, 300),
        ] {
            let dev = libc::makedev(major, minor);
            let kernel = kernel_rdev(dev);
            assert_eq!(server_rdev(kernel), dev, "{major}:{minor}");
            // The kernel's own packing of the same pair.
            let packed = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
            assert_eq!(kernel, packed, "{major}:{minor}");
        }
    }

    #[test]
    fn times_before_and_after_the_epoch_keep_their_nanoseconds() {
        for ns in [0, 1, 1_700_000_000_123_456_789, -1, -1_500_000_001] {
            assert_eq!(nanos(system_time(ns)), ns);
        }
    }

    #[test]
    fn a_file_reports_the_servers_data_count_and_its_mode_bits() {
        let attr = Attr {
            ino: 7,
            kind: Kind::File,
            mode: 0o104_755,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 4097,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            rdev: 0,
            generation: 3,
            blocks: 16,
        };
        let fa = file_attr(&attr);
        assert_eq!(
            (fa.blocks, fa.perm, fa.kind),
            (16, 0o4755, FileType::RegularFile)
        );
        assert_eq!(fa.blksize, 65536);
    }

    #[test]
    fn every_server_error_has_an_errno() {
        for &e in proto::Errno::ALL {
            assert!(errno(e).code() > 0);
        }
        assert_eq!(errno(proto::Errno::ENODATA).code(), libc::ENODATA);
        assert_eq!(errno(proto::Errno::EPROTO).code(), libc::EIO);
        // The caps on open handles reach open(2) as a process's and the kernel's would.
        assert_eq!(errno(proto::Errno::EMFILE).code(), libc::EMFILE);
        assert_eq!(errno(proto::Errno::ENFILE).code(), libc::ENFILE);
    }
}
