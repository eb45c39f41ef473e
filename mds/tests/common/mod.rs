//! The integration tests' view of `mds::testing`: the harness with this package's binaries.
#![allow(dead_code)]

use std::path::Path;

pub use mds::testing::Server;

pub const MDS: &str = env!("CARGO_BIN_EXE_mds");
pub const MDSCTL: &str = env!("CARGO_BIN_EXE_mdsctl");

/// Starts `mds serve` on `data` with 2 partitions and `extra` flags.
pub fn start(data: &Path, extra: &[&str]) -> Server {
    Server::start(Path::new(MDS), data, extra)
}

/// `mds fsck --data DIR`: (exit code, output).
pub fn fsck(data: &Path) -> (i32, String) {
    mds::testing::fsck(Path::new(MDS), data)
}

/// The names in directory `ino`, in READDIR order.
pub async fn names(client: &mds::client::Client, ino: u64) -> Vec<String> {
    client
        .readdir_all(ino)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}
