//! The load tool stays light: it reaches the server through the protocol and client crates
//! only, so building it needs neither RocksDB nor a C++ toolchain (a regression once: it
//! depended on the server crate for the wire types and compiled RocksDB).

use std::process::Command;

#[test]
fn loadgen_depends_on_neither_rocksdb_nor_the_server() {
    // The cargo running this test, read when it runs: the one named at build time may be gone
    // (a target directory shared by two checkouts keeps binaries another checkout built).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "loadgen",
            "-e",
            "normal",
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
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"mds-client"), "{tree}");
    for heavy in [
        "rocksdb",
        "librocksdb-sys",
        "journal",
        "mds",
        "reply",
        "bindgen",
    ] {
        assert!(
            !crates.contains(&heavy),
            "loadgen's normal dependencies include {heavy}:\n{tree}"
        );
    }
}
