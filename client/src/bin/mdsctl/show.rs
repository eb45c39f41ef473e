//! What mdsctl prints: attributes, directory entries and server figures, as text for people
//! and as JSON for programs.

use std::time::{Duration, UNIX_EPOCH};

use mds_client::proto::{Attr, DirEntry, Kind, StatFs};
use serde_json::{Value, json};

use crate::values::{major, minor};

pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Directory => "directory",
        Kind::File => "file",
        Kind::Symlink => "symlink",
        Kind::Fifo => "fifo",
        Kind::Socket => "socket",
        Kind::CharDevice => "char-device",
        Kind::BlockDevice => "block-device",
    }
}

/// A device's (major, minor); `None` for every other kind.
pub(crate) fn device(a: &Attr) -> Option<(u32, u32)> {
    matches!(a.kind, Kind::CharDevice | Kind::BlockDevice).then(|| (major(a.rdev), minor(a.rdev)))
}

/// RFC 3339 in UTC; a time before the epoch shows as the epoch (humantime cannot say it).
pub(crate) fn rfc3339(ns: i64) -> String {
    let ns = u64::try_from(ns).unwrap_or(0);
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

pub(crate) fn attr_json(path: &str, a: &Attr) -> Value {
    let dev = device(a);
    json!({
        "path": path,
        "inode": a.ino,
        "kind": kind_name(a.kind),
        "mode": format!("{:04o}", a.mode),
        "uid": a.uid,
        "gid": a.gid,
        "nlink": a.nlink,
        "size": a.size,
        "rdev": a.rdev,
        "major": dev.map(|(major, _)| major),
        "minor": dev.map(|(_, minor)| minor),
        "atime": rfc3339(a.atime_ns),
        "atime_ns": a.atime_ns,
        "mtime": rfc3339(a.mtime_ns),
        "mtime_ns": a.mtime_ns,
        "ctime": rfc3339(a.ctime_ns),
        "ctime_ns": a.ctime_ns,
        "generation": a.generation,
    })
}

pub(crate) fn entry_json(e: &DirEntry) -> Value {
    json!({ "name": e.name, "inode": e.ino, "kind": kind_name(e.kind) })
}

pub(crate) fn per_commit(s: &StatFs) -> f64 {
    if s.commits > 0 {
        s.committed_transactions as f64 / s.commits as f64
    } else {
        0.0
    }
}

pub(crate) fn status_json(server: &str, s: &StatFs) -> Value {
    json!({
        "server": server,
        "inodes": s.inodes,
        "directories": s.directories,
        "files": s.files,
        "others": s.others,
        "xattr_bytes": s.xattr_bytes,
        "file_bytes": s.file_bytes,
        "data_bytes": s.data_bytes,
        "inline_data_max": s.inline_data_max,
        "open_handles": s.open_handles,
        "orphans": s.orphans,
        "store_bytes": s.store_bytes,
        "store_bytes_free": s.store_bytes_free,
        "store_bytes_available": s.store_bytes_available,
        "last_committed": s.last_committed,
        "last_transno": s.last_transno,
        "commits": s.commits,
        "committed_txns": s.committed_transactions,
        "txns_per_commit": per_commit(s),
        "max_txns_per_commit": s.max_transactions_per_commit,
        "partitions": s.partitions,
        "read_only": s.read_only,
        "cos_conflicts": s.cos_conflicts,
    })
}

/// Bytes in binary units for people: `512 B`, `1.5 KiB`, `931.3 GiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

pub(crate) fn print_status(server: &str, s: &StatFs) {
    println!("server:          {server}");
    println!("inodes:          {}", s.inodes);
    println!("directories:     {}", s.directories);
    println!("files:           {}", s.files);
    println!("others:          {}", s.others);
    println!("xattr_bytes:     {}", s.xattr_bytes);
    println!("file_bytes:      {}", s.file_bytes);
    println!("data_bytes:      {}", s.data_bytes);
    // 0: the server keeps no file data (READ and WRITE are refused).
    println!("inline_data_max: {}", s.inline_data_max);
    println!("open_handles:    {}", s.open_handles);
    println!("orphans:         {}", s.orphans);
    if s.store_bytes == 0 {
        println!("store:           unknown");
    } else {
        println!(
            "store:           {} total, {} free, {} available",
            human_bytes(s.store_bytes),
            human_bytes(s.store_bytes_free),
            human_bytes(s.store_bytes_available)
        );
    }
    println!("last_committed:  {}", s.last_committed);
    println!("last_transno:    {}", s.last_transno);
    println!("commits:         {}", s.commits);
    println!("committed_txns:  {}", s.committed_transactions);
    println!(
        "txns_per_commit: {:.2} (max {})",
        per_commit(s),
        s.max_transactions_per_commit
    );
    println!("partitions:      {}", s.partitions);
    println!("read_only:       {}", s.read_only);
    println!("cos_conflicts:   {}", s.cos_conflicts);
}

pub(crate) fn print_attr(path: &str, a: &Attr) {
    println!("path:       {path}");
    println!("inode:      {}", a.ino);
    println!("kind:       {}", kind_name(a.kind));
    println!("mode:       {:04o}", a.mode);
    println!("uid:        {}", a.uid);
    println!("gid:        {}", a.gid);
    println!("nlink:      {}", a.nlink);
    println!("size:       {}", a.size);
    match device(a) {
        Some((major, minor)) => println!("rdev:       {major},{minor}"),
        None => println!("rdev:       {}", a.rdev),
    }
    println!("atime:      {}", rfc3339(a.atime_ns));
    println!("mtime:      {}", rfc3339(a.mtime_ns));
    println!("ctime:      {}", rfc3339(a.ctime_ns));
    println!("generation: {}", a.generation);
}

/// Prints one JSON document on stdout.
pub(crate) fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a Value always serializes")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_name() {
        let names: Vec<_> = Kind::ALL.into_iter().map(kind_name).collect();
        assert_eq!(
            names,
            [
                "directory",
                "file",
                "symlink",
                "fifo",
                "socket",
                "char-device",
                "block-device"
            ]
        );
    }
}
