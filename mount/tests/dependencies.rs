//! The mount stays a client: it reaches the server through the protocol and client crates
//! only, so building it needs neither RocksDB nor a C++ toolchain (and fuser, without its
//! libfuse features, links no libfuse: its build script only picks the pure-Rust mount).

use std::process::Command;

#[test]
fn mdsmount_depends_on_neither_rocksdb_nor_the_server() {
    // The cargo running this test, read when it runs (see loadgen/tests/dependencies.rs).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "mdsmount",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(mds_testkit::package_dir())
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        !tree.to_lowercase().contains("rocksdb"),
        "mdsmount's dependencies mention RocksDB:\n{tree}"
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"mds-client"), "{tree}");
    assert!(crates.contains(&"fuser"), "{tree}");
    for heavy in ["journal", "mds", "reply", "bindgen", "librocksdb-sys"] {
        assert!(
            !crates.contains(&heavy),
            "mdsmount's dependencies include {heavy}:\n{tree}"
        );
    }
}
