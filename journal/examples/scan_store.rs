//! Times the full scan a start-up does (`scan_namespace`: entries and inodes) on an existing
//! store, read-only, with nothing built from what they read: how much of `Namespace::load`
//! is RocksDB's, and what the scans alone keep resident (docs/BENCHMARKS.md).
//!
//! ```sh
//! cargo build --release --workspace --examples
//! /usr/bin/time -f "%e s, cpu %U+%S" $CARGO_TARGET_DIR/release/examples/scan_store DIR
//! ```

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: scan_store DIR");
        std::process::exit(2);
    };
    let started = Instant::now();
    let (journal, _) = journal::Journal::open_read_only(&dir).expect("opening the store");
    let opened = started.elapsed();
    let (mut entries, mut inodes) = (0u64, 0u64);
    journal
        .scan_namespace(
            |_, _, _| {
                entries += 1;
                Ok(())
            },
            |_| {
                inodes += 1;
                Ok(())
            },
        )
        .expect("scanning the namespace");
    let scanned = started.elapsed();
    let resident = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    println!(
        "open {:.2} s; {entries} entries and {inodes} inodes in {:.2} s; VmRSS {resident}",
        opened.as_secs_f64(),
        scanned.checked_sub(opened).unwrap().as_secs_f64(),
    );
}
