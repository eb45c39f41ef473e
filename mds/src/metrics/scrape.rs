//! Figures read only when Prometheus scrapes, written straight into the response text:
//! the [`ScrapeExtras`] hook the server fills, the Prometheus text-format writer
//! ([`write_family`]), the server's state for alert rules ([`write_state`]), RocksDB's
//! per-column-family sizes and counters ([`write_store`]), and the standard `process_*`
//! figures read from /proc ([`write_process`]).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::committer::CommitStats;
use crate::namespace::Namespace;

/// Figures read only when Prometheus scrapes (RocksDB properties, process figures, total
/// pending replies), appended to the exporter's text by [`super::serve`]. They are rendered
/// here rather than through `metrics` handles because they are floating-point counters (CPU
/// and stall seconds), which `metrics` counters (u64) cannot carry in base units, and because
/// reading them costs nothing between scrapes.
pub type ScrapeExtras = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Appends one metric family in Prometheus text format.
pub fn write_family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// RocksDB's sizes and counters, read per column family.
pub fn write_store(out: &mut String, stats: &journal::StoreStats) {
    let per_cf = |pick: fn(&(&'static str, u64, u64, u64)) -> u64| -> Vec<(String, f64)> {
        stats
            .families
            .iter()
            .map(|f| (format!("cf=\"{}\"", f.0), pick(f) as f64))
            .collect()
    };
    let families = [
        (
            "mds_rocksdb_estimated_keys",
            "RocksDB's estimate of keys, by column family.",
            per_cf(|f| f.1),
        ),
        (
            "mds_rocksdb_live_sst_bytes",
            "Live SST file bytes, by column family.",
            per_cf(|f| f.2),
        ),
        (
            "mds_rocksdb_memtable_bytes",
            "Memtable bytes, by column family.",
            per_cf(|f| f.3),
        ),
    ];
    for (name, help, samples) in &families {
        let samples: Vec<(&str, f64)> = samples.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        write_family(out, name, "gauge", help, &samples);
    }
    write_family(
        out,
        "mds_rocksdb_stall_seconds_total",
        "counter",
        "Time RocksDB stalled writes.",
        &[("", stats.stall_micros as f64 / 1e6)],
    );
    write_family(
        out,
        "mds_rocksdb_wal_syncs_total",
        "counter",
        "WAL syncs RocksDB performed.",
        &[("", stats.wal_syncs as f64)],
    );
    if let Some(checkpoints) = stats.checkpoints {
        write_family(
            out,
            "mds_journal_checkpoints_total",
            "counter",
            "Checkpoints of the edit log: its images written into the store.",
            &[("", checkpoints.written as f64)],
        );
        write_family(
            out,
            "mds_journal_checkpoint_seconds_total",
            "counter",
            "Time the edit log's checkpoints took.",
            &[("", checkpoints.seconds)],
        );
        write_family(
            out,
            "mds_journal_edit_bytes",
            "gauge",
            "Edit log bytes committed and not yet written out by a checkpoint.",
            &[("", checkpoints.held_bytes as f64)],
        );
    }
}

/// The server's state as alert rules need it: read-only or not, the build, inodes by kind,
/// and when the last commit became durable (so "commits stalled" needs no rate over a
/// counter that may have just started).
pub fn write_state(out: &mut String, namespace: &Namespace, stats: &CommitStats) {
    write_family(
        out,
        "mds_read_only",
        "gauge",
        "1 after a journal failure: mutations are refused with EIO until a restart.",
        &[("", if namespace.is_read_only() { 1.0 } else { 0.0 })],
    );
    write_family(
        out,
        "mds_build_info",
        "gauge",
        "Always 1; the labels say which build is running.",
        &[(concat!("version=\"", env!("CARGO_PKG_VERSION"), "\""), 1.0)],
    );
    let counts = namespace.counts();
    write_family(
        out,
        "mds_inodes",
        "gauge",
        "Inodes in the namespace, uncommitted changes included, by kind.",
        &[
            ("kind=\"directory\"", counts.directories as f64),
            ("kind=\"file\"", counts.files as f64),
            ("kind=\"other\"", counts.others as f64),
        ],
    );
    write_family(
        out,
        "mds_xattr_bytes",
        "gauge",
        "Bytes of extended attributes in the namespace, as stored: names, values and 16 bytes of overhead each. Values over 256 bytes are read from the store once committed, not held in memory.",
        &[("", counts.xattr_bytes as f64)],
    );
    write_family(
        out,
        "mds_file_bytes",
        "gauge",
        "The sizes of every regular file added up (holes included): what file data kept on the server amounts to at most.",
        &[("", counts.file_bytes as f64)],
    );
    write_family(
        out,
        "mds_file_data_bytes",
        "gauge",
        "The data regular files hold, on the server and in the object store, holes not counted: what their st_blocks add up to, and what df shows used.",
        &[("", counts.data_bytes as f64)],
    );
    write_family(
        out,
        "mds_pending_data_bytes",
        "gauge",
        "File data and extended attribute values over 256 bytes written by changes not durable yet, held in memory until their commit.",
        &[("", namespace.pending_data_bytes() as f64)],
    );
    let (handles, orphans) = namespace.open_files();
    write_family(
        out,
        "mds_open_handles",
        "gauge",
        "Handles open (OPEN without its RELEASE), all clients.",
        &[("", handles as f64)],
    );
    write_family(
        out,
        "mds_orphans",
        "gauge",
        "Files whose last name is gone while handles keep them (journaled; reclaimed with their last handle).",
        &[("", orphans as f64)],
    );
    let last = stats.durable_at_unix_ns.load(Ordering::Relaxed);
    if last > 0 {
        write_family(
            out,
            "mds_last_commit_timestamp_seconds",
            "gauge",
            "When the newest commit became durable, in seconds since the Unix epoch.",
            &[("", last as f64 / 1e9)],
        );
    }
}

/// The process figures every Prometheus client library exports, under their standard names
/// (`process_*`, as client_golang and the Rust `prometheus` crate name them), so existing
/// alerts and dashboards for "descriptors near their limit" or "restarted" work unchanged.
/// Read from /proc at scrape time.
pub fn write_process(out: &mut String) {
    let Some(p) = process_figures() else { return };
    let families: [(&str, &str, &str, f64); 7] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            p.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            p.resident_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            p.virtual_bytes,
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            p.open_fds,
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            p.max_fds,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds,
        ),
        (
            "process_threads",
            "gauge",
            "Number of OS threads in the process.",
            p.threads,
        ),
    ];
    for (name, kind, help, value) in families {
        write_family(out, name, kind, help, &[("", value)]);
    }
}

struct ProcessFigures {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    open_fds: f64,
    max_fds: f64,
    start_time_seconds: f64,
    threads: f64,
}

fn process_figures() -> Option<ProcessFigures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // SAFETY: sysconf has no memory effects.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
        )
    };
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // After ")": state (the 3rd field of proc(5)) is index 0, so field N is at N - 3: utime
    // (14) at 11, stime 12, num_threads (20) 17, starttime (22, ticks after boot) 19, vsize
    // (23) 20, rss (24, pages) 21.
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<f64>()
        .ok()?;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0 {
        limit.rlim_cur as f64
    } else {
        f64::NAN
    };
    Some(ProcessFigures {
        cpu_seconds: (field(11)? + field(12)?) / ticks,
        threads: field(17)?,
        start_time_seconds: boot + field(19)? / ticks,
        virtual_bytes: field(20)?,
        resident_bytes: field(21)? * page,
        open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
        max_fds,
    })
}
