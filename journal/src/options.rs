//! Every RocksDB option the journal sets, in one place, so that tuning is one diff.

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, MemtableFactory, Options,
};

use crate::schema::{ALL_CFS, CF_CLIENTS};

/// Options for the database as a whole.
pub(crate) fn db_options() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // One writer (the committer) issues one synced batch at a time; pipelined or unordered
    // writes gain nothing there (CRATES.md), so the defaults stay.
    opts.set_max_background_jobs(2);
    // Required by the vector memtable below; one writer gains nothing from concurrent inserts.
    opts.set_allow_concurrent_memtable_write(false);
    opts.set_bytes_per_sync(1 << 20);
    opts.set_keep_log_file_num(4);
    opts.enable_statistics();
    opts
}

/// Options for each column family. Metadata records are small and compress well; the block
/// cache is shared so that hot directories stay in memory whichever family they live in.
pub(crate) fn cf_descriptors(cache: &Cache) -> Vec<ColumnFamilyDescriptor> {
    ALL_CFS
        .iter()
        .map(|name| {
            let mut block = BlockBasedOptions::default();
            block.set_block_cache(cache);
            block.set_bloom_filter(10.0, false);
            let mut cf = Options::default();
            cf.set_block_based_table_factory(&block);
            cf.set_compression_type(DBCompressionType::Lz4);
            cf.set_write_buffer_size(64 << 20);
            if *name == CF_CLIENTS {
                // Resend slots are written on every commit and read only at open: a vector
                // memtable appends (it sorts once, at flush or at the open's scan) where the
                // default skiplist searches on every insert, on the committer's serial path.
                cf.set_memtable_factory(MemtableFactory::Vector);
            }
            ColumnFamilyDescriptor::new(*name, cf)
        })
        .collect()
}

/// The block cache shared by all column families.
pub(crate) fn block_cache() -> Cache {
    Cache::new_lru_cache(256 << 20)
}
