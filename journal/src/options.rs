//! Every RocksDB option the journal sets, in one place, so that tuning is one diff: the
//! database's and each column family's options, the block cache, and the read options of the
//! full scans done at start-up and by fsck.

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, MemtableFactory, Options,
    ReadOptions,
};

use crate::schema::{ALL_CFS, CF_CLIENTS, CF_DATA, CF_DENTRIES, CF_INODES, CF_META};

/// How much write-ahead log may be live before RocksDB forces flushes: about the most a
/// restart after a crash replays.
///
/// A WAL file can be deleted only once every column family with data in it has flushed that
/// data. `meta` (`last_committed`, `next_ino`) and `clients` (resend slots) are written by
/// every commit, so they have data in every WAL file, while their memtables fill slowly (the
/// same few keys overwritten; under load one commit carries hundreds of creates). Left alone
/// they would keep every WAL file alive up to RocksDB's default limit, four times the sum of
/// all write buffers: 2.5 GiB with 64 MiB buffers in every family, which a restart then
/// replayed. Past this limit RocksDB flushes every family with data in the oldest live WAL
/// file, and that file goes.
///
/// The value follows from how the namespace families flush (measured, docs/BENCHMARKS.md): a
/// create writes ~180 bytes of WAL and two ~68-byte entries into the `inodes` memtable (the
/// file and its parent's new image), so `inodes` fills its 64 MiB write buffer by itself about
/// every 490k creates, ~85 MiB of WAL. (Under load a batch writes each directory's image once,
/// for all its creates in the batch: fewer bytes of both per create, in the same proportion.
/// Measured with a vector memtable; the skiplist that `inodes` now uses also holds each entry's
/// links, so it fills sooner by their size — not measured here.)
/// A limit just above that leaves `inodes` flushing full buffers on its own, and forces out
/// `meta`, `clients` and `dentries` (whose entries fill 64 MiB only after ~180 MiB of WAL, so
/// it flushes buffers about two thirds full; more compaction work than full ones, still large
/// sorted runs). 128 MiB is ~7 s of creates at the server's peak rate here (~100k creates/s)
/// and replays in a few seconds; a lower limit would cut `inodes` flushes short too, a higher
/// one replays more for no gain.
pub(crate) const MAX_TOTAL_WAL_SIZE: u64 = 128 << 20;

/// Write buffer (memtable) of `inodes` and `dentries`, the bulk of the data: large, so that
/// they flush large sorted runs and compaction stays cheap.
pub(crate) const NAMESPACE_WRITE_BUFFER: usize = 64 << 20;

/// Write buffer of `meta` and `clients`, the families every commit writes: small, so that
/// they pin little WAL. `meta` grows ~100 bytes per commit, and under load the WAL limit
/// flushes it first: a tiny table (a few keys), the memtable held overwritten copies.
/// `clients` overwrites its slots in place ([`cf_options`]) and grows only by a slot's record
/// that outgrew the one before it, so the WAL limit flushes it too.
pub(crate) const PER_COMMIT_WRITE_BUFFER: usize = 4 << 20;

/// Memtables `meta` and `clients` may hold while earlier ones wait for the one flush thread
/// (which may be busy with a 64 MiB `inodes` memtable): with RocksDB's default of two, a small
/// buffer filled again before its flush would stall the committer's write.
const PER_COMMIT_WRITE_BUFFERS: i32 = 4;

/// Memtables `inodes` and `dentries` may hold while earlier ones wait for the flush thread.
/// With RocksDB's default of two, writes stopped whenever the WAL limit above switched every
/// family's memtable while `inodes` was still flushing a full one — its vector memtable of a
/// million entries takes ~0.7 s to sort and write here under load — and the committer's
/// synced write waited it out: "[inodes] Stopping writes because we have 2 immutable
/// memtables", one 0.63 s stall per ~2M creates at 64 x 16, every request in flight waiting
/// behind it (the client's max latency, and much of its p99.9). Four lets the small switched
/// memtable wait its turn; more than two exist only while a flush is behind.
const NAMESPACE_WRITE_BUFFERS: i32 = 4;

/// Readahead of the full scans: start-up and fsck read each family from start to end, so read
/// table files in large sequential pieces rather than block by block.
const SCAN_READAHEAD: usize = 2 << 20;

/// The sizes above, in one value so that tests can shrink them; `Tuning::default()` is what
/// the journal runs with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub max_total_wal_size: u64,
    pub namespace_write_buffer: usize,
    pub per_commit_write_buffer: usize,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            max_total_wal_size: MAX_TOTAL_WAL_SIZE,
            namespace_write_buffer: NAMESPACE_WRITE_BUFFER,
            per_commit_write_buffer: PER_COMMIT_WRITE_BUFFER,
        }
    }
}

/// Options for the database as a whole.
pub(crate) fn db_options(tuning: &Tuning) -> Options {
    // Every iterator total-order unless it opts in: `clients` has a prefix extractor
    // ([`cf_options`]), and a scan must see all of its memtable, not one bucket. Not in the
    // C API that the crate wraps.
    let mut opts = Options::default()
        .get_options_from_string("prefix_seek_opt_in_only=true")
        .expect("RocksDB parses its own option string");
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // One writer (the committer) issues one synced batch at a time; pipelined or unordered
    // writes gain nothing there (CRATES.md), so the defaults stay.
    opts.set_max_background_jobs(2);
    // Required by the vector memtable below; one writer gains nothing from concurrent inserts.
    opts.set_allow_concurrent_memtable_write(false);
    opts.set_bytes_per_sync(1 << 20);
    opts.set_keep_log_file_num(4);
    opts.set_max_total_wal_size(tuning.max_total_wal_size);
    opts.enable_statistics();
    opts
}

/// Options for each column family. The block cache is shared so that hot directories stay in
/// memory whichever family they live in.
pub(crate) fn cf_descriptors(cache: &Cache, tuning: &Tuning) -> Vec<ColumnFamilyDescriptor> {
    ALL_CFS
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, cf_options(cache, tuning, name)))
        .collect()
}

/// The prefix of an `inodes` or `dentries` key (a big-endian inode number: the inode's, the
/// entry's child's) whose memtable insert hint RocksDB keeps: one hint per 65,536 consecutive
/// numbers. New inodes' numbers nearly only grow (the server hands them out in runs of 64 a
/// thread, a directory a block of its own), so each create's image and entry land right after
/// or a few entries before the ones before them in their group's hint, found by a short
/// search from it; a directory's new image (an older number), or
/// an older file's entry (a link, a rename), uses its own group's hint and moves nobody
/// else's. A whole-key prefix would keep a hint (~250 bytes) per key; none at all would make
/// every directory image drag the one hint away from the new inodes.
const HINT_PREFIX: usize = 6;

/// The options of the column family `name`.
///
/// The memtables, by what is written to them (counted per create, docs/BENCHMARKS.md,
/// "RocksDB's share of a create"):
/// - `inodes` and `dentries` are skiplists that insert with a hint ([`HINT_PREFIX`]): nearly
///   every key comes right after the previous one (an entry is keyed by its child first,
///   `schema::dentry_key`), so an insert costs a few comparisons, and the flush walks the
///   list in order instead of sorting a million entries. (Entries keyed by parent and name,
///   as before schema version 5, arrived in no order a hint could follow: a hint on the
///   parent's number cost 1,254 instructions per create more than a vector's sort.)
/// - `clients` holds a few resend slots per client, each rewritten by every commit that
///   carries one of the client's records: at one request in flight, one put a create. Its
///   memtable is a hash of skiplists, one bucket per client (the key's first 8 bytes,
///   [`crate::schema::resend_key`]; capped, so a shorter key of an old store is its own
///   prefix), and a put overwrites the slot's entry in place when the new record is no
///   larger (`inplace_update_support`). A vector memtable held one entry a put and sorted them
///   all at flush: 2,400 instructions a create at 64 x 1 (docs/BENCHMARKS.md, "The resend
///   slots written in place"). With a prefix extractor, RocksDB's iterators would see one
///   bucket only unless asked for total order: `prefix_seek_opt_in_only` (a database option,
///   [`db_options`]) makes every iterator total-order unless it opts in, and none of
///   `clients` does (`meta`'s prefix iterators opt in; `meta` has no extractor).
/// - `meta` and the rest are vector memtables, which append and sort
///   once at flush (on a background thread) or for the open's scan. The price of a vector is paid by
///   point reads of a mutable memtable (each sorts a copy), which only offline tools and
///   tests make: the server never reads these families while serving (the namespace is in
///   memory; start-up and fsck scan them once).
/// - `data` keeps RocksDB's default skiplist: the server reads committed blocks back while
///   serving (a READ, or the rest of a block a WRITE changes part of), and a skiplist's point
///   reads do not sort.
///
/// Flushes write level 0 uncompressed (the bytes are rewritten, compressed with LZ4, by the
/// first compaction; LZ4 at flush cost 1,340 instructions per create), and only `data` keeps
/// a Bloom filter: it is the one family read by key while serving, and a filter is built by
/// hashing every key at every flush and compaction.
pub(crate) fn cf_options(cache: &Cache, tuning: &Tuning, name: &str) -> Options {
    let mut block = BlockBasedOptions::default();
    block.set_block_cache(cache);
    if name == CF_DATA {
        block.set_bloom_filter(10.0, false);
    }
    let mut cf = if name == CF_INODES || name == CF_DENTRIES {
        // Not in the C API that the crate wraps; RocksDB's option string sets it.
        Options::default()
            .get_options_from_string(format!(
                "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.{HINT_PREFIX}"
            ))
            .expect("RocksDB parses its own option string")
    } else if name == CF_CLIENTS {
        Options::default()
            .get_options_from_string("prefix_extractor=rocksdb.CappedPrefix.8")
            .expect("RocksDB parses its own option string")
    } else {
        Options::default()
    };
    cf.set_block_based_table_factory(&block);
    cf.set_compression_type(DBCompressionType::Lz4);
    cf.set_compression_per_level(&[DBCompressionType::None, DBCompressionType::Lz4]);
    if name == CF_META || name == CF_CLIENTS {
        cf.set_write_buffer_size(tuning.per_commit_write_buffer);
        cf.set_max_write_buffer_number(PER_COMMIT_WRITE_BUFFERS);
    } else {
        cf.set_write_buffer_size(tuning.namespace_write_buffer);
        cf.set_max_write_buffer_number(NAMESPACE_WRITE_BUFFERS);
    }
    if name == CF_CLIENTS {
        cf.set_memtable_factory(MemtableFactory::HashSkipList {
            // 128 KiB of bucket heads a memtable; more clients than buckets share them.
            bucket_count: 16 << 10,
            height: 4,
            branching_factor: 4,
        });
        cf.set_inplace_update_support(true);
    } else if name != CF_DATA && name != CF_INODES && name != CF_DENTRIES {
        cf.set_memtable_factory(MemtableFactory::Vector);
    }
    cf
}

/// The block cache shared by all column families.
pub(crate) fn block_cache() -> Cache {
    Cache::new_lru_cache(256 << 20)
}

/// Read options of a scan of a whole family (start-up, fsck): every block is read once, so
/// caching them would only push out what point reads cached, and leave the process holding up
/// to the whole cache in blocks nobody reads again (the namespace is in memory by then).
pub(crate) fn full_scan() -> ReadOptions {
    let mut read = ReadOptions::default();
    read.fill_cache(false);
    read.set_readahead_size(SCAN_READAHEAD);
    read
}

/// Turns off RocksDB's per-thread performance counters for the calling thread. RocksDB's
/// default level counts (a thread-local counter bumped at every key comparison of a memtable
/// insert, reached through a TLS wrapper each time: ~300 instructions a create, counted in
/// `bench/budget.sh`), and nothing in mds reads them. The committer calls it at its start;
/// no option reaches RocksDB's own flush threads. On x86-64 Linux RocksDB is built without
/// the counters (`.cargo/config.toml`), and this changes nothing; it is for other builds.
pub fn no_perf_counters_on_this_thread() {
    rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::Disable);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::store::{Journal, JournalOptions};

    /// The newest OPTIONS file RocksDB wrote in `dir`, as section → key → value.
    fn options_file(dir: &Path) -> HashMap<String, HashMap<String, String>> {
        let newest = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|name| Some((name.strip_prefix("OPTIONS-")?.parse::<u64>().ok()?, name)))
            .max()
            .expect("RocksDB writes an OPTIONS file at open")
            .1;
        let text = std::fs::read_to_string(dir.join(newest)).unwrap();
        let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
            } else if let Some((key, value)) = line.split_once('=') {
                sections
                    .entry(section.clone())
                    .or_default()
                    .insert(key.to_owned(), value.to_owned());
            }
        }
        sections
    }

    /// What RocksDB itself recorded for a store the journal opened: the options are the ones
    /// this file says, not only the ones it passes.
    #[test]
    fn the_store_runs_with_the_options_this_file_sets() {
        let dir = tempfile::tempdir().unwrap();
        let _journal = Journal::open(dir.path(), JournalOptions::default()).unwrap();
        let written = options_file(dir.path());
        let get = |section: &str, key: &str| -> &str {
            written
                .get(section)
                .and_then(|s| s.get(key))
                .unwrap_or_else(|| panic!("no {key} in [{section}]"))
        };
        assert_eq!(
            get("DBOptions", "max_total_wal_size"),
            MAX_TOTAL_WAL_SIZE.to_string()
        );
        assert_eq!(
            get("DBOptions", "prefix_seek_opt_in_only"),
            "true",
            "a scan of `clients` must see its whole memtable, not one client's bucket"
        );
        for (family, buffer, buffers, memtable) in [
            (
                "inodes",
                NAMESPACE_WRITE_BUFFER,
                NAMESPACE_WRITE_BUFFERS,
                "SkipListFactory",
            ),
            (
                "dentries",
                NAMESPACE_WRITE_BUFFER,
                NAMESPACE_WRITE_BUFFERS,
                "SkipListFactory",
            ),
            (
                "meta",
                PER_COMMIT_WRITE_BUFFER,
                PER_COMMIT_WRITE_BUFFERS,
                "VectorRepFactory",
            ),
            (
                "clients",
                PER_COMMIT_WRITE_BUFFER,
                PER_COMMIT_WRITE_BUFFERS,
                "HashSkipListRepFactory",
            ),
        ] {
            let section = format!("CFOptions \"{family}\"");
            assert_eq!(
                get(&section, "write_buffer_size"),
                buffer.to_string(),
                "{family}"
            );
            assert_eq!(
                get(&section, "max_write_buffer_number"),
                buffers.to_string(),
                "{family}"
            );
            assert!(
                get(&section, "memtable_factory").contains(memtable),
                "{family}: {}",
                get(&section, "memtable_factory")
            );
            assert_eq!(get(&section, "compression"), "kLZ4Compression", "{family}");
            assert_eq!(
                get(&section, "compression_per_level"),
                "kNoCompression:kLZ4Compression",
                "{family}: level 0 plain, the rest LZ4"
            );
            let (in_place, prefix) = if family == "clients" {
                ("true", "rocksdb.CappedPrefix.8")
            } else {
                ("false", "nullptr")
            };
            assert_eq!(
                get(&section, "inplace_update_support"),
                in_place,
                "{family}"
            );
            assert_eq!(get(&section, "prefix_extractor"), prefix, "{family}");
            let hint = get(&section, "memtable_insert_with_hint_prefix_extractor");
            if family == "inodes" || family == "dentries" {
                assert_eq!(hint, format!("rocksdb.FixedPrefix.{HINT_PREFIX}"));
            } else {
                assert_eq!(hint, "nullptr", "{family}");
            }
            let filter = get(
                &format!("TableOptions/BlockBasedTable \"{family}\""),
                "filter_policy",
            );
            assert_eq!(filter, "nullptr", "{family}: no Bloom filter");
        }
        let data_filter = get("TableOptions/BlockBasedTable \"data\"", "filter_policy");
        assert!(data_filter.contains("bloom"), "data: {data_filter}");
        assert!(
            get("CFOptions \"data\"", "memtable_factory").contains("SkipListFactory"),
            "data reads blocks back while serving: no vector memtable"
        );
        // The per-commit families are the small ones: that is the point of the split.
        const { assert!(PER_COMMIT_WRITE_BUFFER * 8 <= NAMESPACE_WRITE_BUFFER) };
    }
}
