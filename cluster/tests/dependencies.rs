//! The cluster crate stays light: it talks to etcd and takes the shard layout from the
//! protocol crate, so building it (and running its etcd tests) needs neither RocksDB nor its
//! C++ build. It once depended on the journal for one constant.

#[test]
fn mds_cluster_depends_on_neither_rocksdb_nor_the_journal() {
    let (tree, crates) = mds_testkit::dependency_tree("mds-cluster", "normal,build");
    assert!(
        !tree.to_lowercase().contains("rocksdb"),
        "mds-cluster's dependencies mention RocksDB:\n{tree}"
    );
    assert!(crates.iter().any(|c| c == "mds-proto"), "{tree}");
    for heavy in ["journal", "mds", "librocksdb-sys"] {
        assert!(
            !crates.iter().any(|c| c == heavy),
            "mds-cluster's dependencies include {heavy}:\n{tree}"
        );
    }
}
