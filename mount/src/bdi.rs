//! The kernel's settings of the mount's device that no FUSE request reaches: its readahead,
//! which the kernel sets to 128 KiB for every FUSE mount and lets only root raise, through
//! `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb` (the mount's device number is found in
//! `/proc/self/mountinfo`: a stat of the mount point would ask the mount itself, which is not
//! serving yet). A sequential reader then gets READs of up to 1 MiB instead of 128 KiB.

use std::path::Path;

use tracing::{info, warn};

/// Sets the readahead of the FUSE mount on `mountpoint` to `kb` KiB, or says in the log why
/// it stays at the kernel's (not root, no sysfs).
pub fn set_read_ahead(mountpoint: &Path, kb: u32) {
    let device = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|info| device_of(&info, mountpoint));
    let Some(device) = device else {
        warn!(mountpoint = %mountpoint.display(), "the mount is not in /proc/self/mountinfo: readahead stays the kernel's");
        return;
    };
    let knob = format!("/sys/class/bdi/{device}/read_ahead_kb");
    match std::fs::write(&knob, kb.to_string()) {
        Ok(()) => info!(read_ahead_kb = kb, %device, "readahead set"),
        Err(e) => {
            info!(read_ahead_kb = kb, %knob, cause = %e, "readahead stays the kernel's (128 KiB): setting it needs root");
        }
    }
}

/// The device number (`MAJOR:MINOR`) of the last mount on `mountpoint` in a
/// `/proc/PID/mountinfo` text (the newest of mounts stacked on one directory comes last).
/// The mount point field escapes space, tab, newline and backslash as octal (`\040`).
fn device_of(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let wanted = mountpoint.to_str()?;
    mountinfo.lines().rev().find_map(|line| {
        let mut fields = line.split(' ');
        let device = fields.nth(2)?;
        let point = fields.nth(1)?;
        (unescape(point) == wanted).then(|| device.to_owned())
    })
}

/// A mountinfo field with its octal escapes (`\040`) turned back into bytes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
36 22 0:41 / /var/tmp/mnt rw,nosuid,nodev,relatime shared:180 - fuse.mdsmount 127.0.0.1:7400 rw,user_id=0,group_id=0
37 22 0:42 / /var/tmp/two\\040words rw,nosuid,nodev,relatime shared:181 - fuse.mdsmount 127.0.0.1:7400 rw,user_id=0,group_id=0
38 36 0:43 / /var/tmp/mnt rw,nosuid,nodev,relatime shared:182 - fuse.mdsmount 127.0.0.1:7401 rw,user_id=0,group_id=0
";

    #[test]
    fn the_device_is_the_newest_mount_on_the_directory() {
        assert_eq!(
            device_of(MOUNTINFO, Path::new("/var/tmp/mnt")).as_deref(),
            Some("0:43")
        );
        assert_eq!(
            device_of(MOUNTINFO, Path::new("/var/tmp/two words")).as_deref(),
            Some("0:42")
        );
        assert_eq!(device_of(MOUNTINFO, Path::new("/var/tmp")), None);
    }

    #[test]
    fn octal_escapes_are_undone_and_a_lone_backslash_kept() {
        assert_eq!(unescape("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape("a\\9b\\"), "a\\9b\\");
    }
}
