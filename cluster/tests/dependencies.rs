//! The cluster crate stays light: it talks to etcd and takes the shard layout from the
//! protocol crate, so building it (and running its etcd tests) needs neither RocksDB nor its
//! C++ build. It once depended on the journal for one constant.

use std::process::Command;

#[test]
fn mds_cluster_depends_on_neither_rocksdb_nor_the_journal() {
    // The cargo running this test, read when it runs (see loadgen/tests/dependencies.rs).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "mds-cluster",
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
        "mds-cluster's dependencies mention RocksDB:\n{tree}"
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"mds-proto"), "{tree}");
    for heavy in ["journal", "mds", "librocksdb-sys"] {
        assert!(
            !crates.contains(&heavy),
            "mds-cluster's dependencies include {heavy}:\n{tree}"
        );
    }
}
