#!/usr/bin/env bash
# Installs what building and testing mds needs on a fresh Debian machine: clang and libclang
# (bindgen, for RocksDB's C++), prometheus (promtool and a real Prometheus for the metrics and
# dashboard tests), python3 (dashboard generator, benchmark chart), and the rustfmt and
# clippy components. Extra Debian packages may be named as arguments. Safe to run again.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
for pkg in clang libclang-dev prometheus python3 "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${need[@]}"
fi

if command -v rustup >/dev/null 2>&1; then
  for comp in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
  done
fi
