#!/usr/bin/env bash
# File data through mdsmount against the disk it lands on, side by side in one run: 1 GiB
# written sequentially in 1 MiB writes then fsynced, and read back, the kernel's caches
# dropped before each, on (1) a directory of /var/tmp — the file system the local object store
# is on — (2) a mount of a fresh mds whose object store is its default directory there, and
# (3) a mount of one whose object store is a one-node Garage (its data under /var/tmp too).
# DATA_PATH_ROUNDS rounds (3), each running the three in a turned order; prints each one's
# median MiB/s, the range, and the mount's ratio to the directory. The work is
# `mount/tests/objects.rs::data_path_figures`, ignored by the test command and run here;
# DATA_PATH_MIB sets the size (default 1024). Needs root (mounts, drop_caches) and garage
# (scripts/install-deps.sh). Not pinned to cores: the data moves between the mount and the
# disk; the server only places slices.
#   ./bench/data-path.sh | tee bench/results/data-path-$(date +%F).txt
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
cargo build --release --workspace
cargo test --release --workspace --test objects -- --ignored --exact data_path_figures \
  --nocapture 2>&1 | grep -E '^(backing|mdsmount)'
