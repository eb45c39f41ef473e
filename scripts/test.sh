#!/usr/bin/env bash
# Every check a contributor must pass, from a fresh machine: installs dependencies, then
# formatting, clippy, all tests (release profile: RocksDB is compiled once, shared with the
# binaries), and the loom model checks of the reply hand-over.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

# Outside the clone, so reruns (and CI on a fresh clone) are incremental.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"

cargo fmt --all -- --check
python3 dashboards/generate.py --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace

# loom needs its own cfg, hence its own target dir (only the reply crate is rebuilt there).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR}-loom" \
  cargo test --release -p reply --test loom
