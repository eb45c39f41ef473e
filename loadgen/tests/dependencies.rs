//! The load tool stays light: it reaches the server through the protocol and client crates
//! only, so building it needs neither RocksDB nor a C++ toolchain (a regression once: it
//! depended on the server crate for the wire types and compiled RocksDB).

#[test]
fn loadgen_depends_on_neither_rocksdb_nor_the_server() {
    let (tree, crates) = mds_testkit::dependency_tree("loadgen", "normal");
    assert!(crates.iter().any(|c| c == "mds-client"), "{tree}");
    for heavy in [
        "rocksdb",
        "librocksdb-sys",
        "journal",
        "mds",
        "reply",
        "bindgen",
    ] {
        assert!(
            !crates.iter().any(|c| c == heavy),
            "loadgen's normal dependencies include {heavy}:\n{tree}"
        );
    }
}
