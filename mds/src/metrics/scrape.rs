//! Figures read only when Prometheus scrapes, written straight into the response text:
//! the [`ScrapeExtras`] hook the server fills, the Prometheus text-format writer
//! ([`write_family`]), RocksDB's per-column-family sizes and counters ([`write_store`]), and
//! the process's CPU, memory, descriptors and threads read from /proc ([`write_process`]).

use std::fmt::Write as _;
use std::sync::Arc;

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
}

/// The process's CPU time, resident memory, open descriptors and threads, from /proc.
pub fn write_process(out: &mut String) {
    let Some(p) = process_figures() else { return };
    write_family(
        out,
        "mds_process_cpu_seconds_total",
        "counter",
        "User and system CPU time of the mds process.",
        &[("", p.cpu_seconds)],
    );
    write_family(
        out,
        "mds_process_resident_memory_bytes",
        "gauge",
        "Resident memory of the mds process.",
        &[("", p.resident_bytes)],
    );
    write_family(
        out,
        "mds_process_open_fds",
        "gauge",
        "Open file descriptors of the mds process.",
        &[("", p.open_fds)],
    );
    write_family(
        out,
        "mds_process_threads",
        "gauge",
        "Threads of the mds process.",
        &[("", p.threads)],
    );
}

struct ProcessFigures {
    cpu_seconds: f64,
    resident_bytes: f64,
    open_fds: f64,
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
    // After ")": state is index 0, so utime (14th field) is 11, stime 12, num_threads 17,
    // rss 21.
    Some(ProcessFigures {
        cpu_seconds: (field(11)? + field(12)?) / ticks,
        threads: field(17)?,
        resident_bytes: field(21)? * page,
        open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
    })
}
