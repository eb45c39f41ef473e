//! The mount stays a client: it reaches the server through the protocol and client crates
//! only, so building it needs neither RocksDB nor a C++ toolchain (and fuser, without its
//! libfuse features, links no libfuse: its build script only picks the pure-Rust mount).

#[test]
fn mdsmount_depends_on_neither_rocksdb_nor_the_server() {
    let (tree, crates) = mds_testkit::dependency_tree("mdsmount", "normal,build");
    assert!(
        !tree.to_lowercase().contains("rocksdb"),
        "mdsmount's dependencies mention RocksDB:\n{tree}"
    );
    assert!(crates.iter().any(|c| c == "mds-client"), "{tree}");
    assert!(crates.iter().any(|c| c == "fuser"), "{tree}");
    for heavy in ["journal", "mds", "reply", "bindgen", "librocksdb-sys"] {
        assert!(
            !crates.iter().any(|c| c == heavy),
            "mdsmount's dependencies include {heavy}:\n{tree}"
        );
    }
}
