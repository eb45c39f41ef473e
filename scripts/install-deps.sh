#!/usr/bin/env bash
# Installs what building mds and running scripts/demo.sh need, on Debian or Ubuntu:
#   clang, libclang-dev   bindgen and the C++ build of RocksDB (clang also provides cc/c++)
#   protobuf-compiler, libprotobuf-dev
#                         protoc and its well-known .proto files: the etcd client's gRPC code
#                         is generated at build time (cluster/)
#   curl                  the demo reads /metrics with it
# With MDS_TEST_DEPS=1 (scripts/test.sh sets it), also what the test suite needs:
#   prometheus            promtool and a real Prometheus, for the metrics and dashboard tests
#   python3               dashboards/generate.py --check (and bench/chart.py, chart_compare.py)
#   fuse3                 fusermount3, for the mount's tests (mount/tests/)
#   fsmark, git           fs_mark with an fsync per file, and git clone onto a mount
#   make, autoconf,       an autotools project cloned onto a mount, then autoreconf, ./configure
#   automake              and make there (mount/tests/suites.rs; the toolchain's cc builds it)
#   libacl1-dev           what the pjdfstest crate links against
#   acl                   setfacl and getfacl, for the ACL tests through the mount
#   etcd-server           etcd 3.4, for the cluster tests (mds/tests/cluster.rs, cluster/tests/)
#   rustfmt, clippy       rustup components
#   cargo-deb             from crates.io (cargo install), to check the Debian package
#   cargo-fuzz            from crates.io, only where a nightly toolchain is installed
#   cargo-machete         from crates.io, pinned, to keep unused dependencies out
#   pjdfstest             from crates.io, pinned: the POSIX suite mount/tests/suites.rs runs
#                         with mount/tests/pjdfstest.toml (its expected failures name its tests)
#   garage                from crates.io, pinned: the S3-compatible object store the object-store
#                         tests start (testkit/src/garage.rs); a test tool, never linked (AGPL)
# Extra Debian packages may be named as arguments. Packages are installed with
# --no-install-recommends. Also checks that rustc is at least the workspace's rust-version.
# Safe to run again: installs only what is missing.
#   ./scripts/install-deps.sh                    # build + demo
#   MDS_TEST_DEPS=1 ./scripts/install-deps.sh    # + tests
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(clang libclang-dev curl protobuf-compiler libprotobuf-dev)
if [ "${MDS_TEST_DEPS:-0}" = 1 ]; then
  pkgs+=(prometheus python3 fuse3 fsmark git make autoconf automake libacl1-dev acl etcd-server)
fi
pkgs+=("$@")

if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
  need=()
  for pkg in "${pkgs[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "install-deps: installing ${need[*]}"
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
  fi
else
  # Not Debian: say what to install, and stop if the commands are not there.
  cat >&2 <<MSG
install-deps: no apt-get/dpkg on this system; install these by hand (Debian names):
  ${pkgs[*]}
  clang + libclang-dev: a C/C++ compiler and libclang for bindgen
    (Fedora/RHEL: clang clang-devel; Arch: clang; Alpine: clang-dev; macOS: Xcode tools)
MSG
  if [ "${MDS_TEST_DEPS:-0}" = 1 ]; then
    echo "  prometheus: the prometheus and promtool binaries (https://prometheus.io/download/)" >&2
  fi
  missing=()
  cmds=(clang curl)
  if [ "${MDS_TEST_DEPS:-0}" = 1 ]; then cmds+=(prometheus promtool python3); fi
  for cmd in "${cmds[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: not found: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: the commands are there; going on (libclang is not checked)" >&2
fi

# The Rust toolchain: rustc at least the workspace's rust-version.
want="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n1)"
if ! command -v rustc >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: no Rust toolchain (rustc and cargo); mds needs Rust $want or newer." >&2
  echo "  Install it with rustup (https://rustup.rs), then run this again." >&2
  exit 1
fi
have="$(rustc --version | awk '{print $2}')"
have="${have%%-*}"
if [ -n "$want" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
  echo "install-deps: rustc $have is older than this workspace's rust-version $want." >&2
  echo "  Update it (rustup update stable) or install a newer toolchain, then run this again." >&2
  exit 1
fi

if [ "${MDS_TEST_DEPS:-0}" = 1 ] && command -v rustup >/dev/null 2>&1; then
  for comp in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp"
  done
fi

# cargo-deb builds the package scripts/test.sh checks. Its own target dir, so installing it
# never touches the project's build (and never rebuilds RocksDB).
if [ "${MDS_TEST_DEPS:-0}" = 1 ] && ! cargo deb --version >/dev/null 2>&1; then
  echo "installing cargo-deb (cargo install, a few minutes the first time)"
  CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-deb-build" cargo install cargo-deb --locked
fi

# cargo-machete finds dependencies a crate declares and never uses (scripts/test.sh fails on
# any). Pinned: its findings are part of the check, and a new release may find new ones.
MACHETE_VERSION=0.9.2
if [ "${MDS_TEST_DEPS:-0}" = 1 ] \
  && ! cargo machete --version 2>/dev/null | grep -q "$MACHETE_VERSION"; then
  echo "installing cargo-machete $MACHETE_VERSION (cargo install, a minute the first time)"
  CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-machete-build" \
    cargo install cargo-machete --locked --version "$MACHETE_VERSION"
fi

# pjdfstest, the Rust rewrite of the POSIX file-system suite, into cargo's bin directory (it
# persists across runs). Pinned: mount/tests/pjdfstest.toml lists its test cases by name.
PJDFSTEST_VERSION=0.2.2
if [ "${MDS_TEST_DEPS:-0}" = 1 ] \
  && ! "${CARGO_HOME:-$HOME/.cargo}/bin/pjdfstest" --version 2>/dev/null \
    | grep -qw "$PJDFSTEST_VERSION"; then
  echo "installing pjdfstest $PJDFSTEST_VERSION (cargo install, a minute the first time)"
  CARGO_TARGET_DIR="${TMPDIR:-/tmp}/pjdfstest-build" \
    cargo install pjdfstest --locked --version "$PJDFSTEST_VERSION"
fi

# Garage, the S3-compatible store testkit::garage starts three nodes of, into cargo's bin
# directory. Pinned: testkit/src/garage.rs drives its CLI and admin API, whose commands and
# answers change between releases (`garage --version` says `garage cargo:2.5.0 [features: ...]`).
# Its build (525 crates, bundled SQLite and libsodium: 47 minutes on 2 busy cores) is the longest
# here, so its target directory is a persistent one that reruns and CI reuse.
GARAGE_VERSION=2.5.0
if [ "${MDS_TEST_DEPS:-0}" = 1 ] \
  && ! "${CARGO_HOME:-$HOME/.cargo}/bin/garage" --version 2>/dev/null \
    | grep -qE "(^|[ :v])${GARAGE_VERSION//./\\.}( |\$)"; then
  echo "installing garage $GARAGE_VERSION (cargo install, tens of minutes the first time)"
  CARGO_TARGET_DIR="${GARAGE_BUILD_DIR:-/var/tmp/garage-build}" \
    cargo install garage --locked --version "$GARAGE_VERSION"
fi

# cargo-fuzz runs the decode fuzzer for a bounded time in scripts/test.sh, where a nightly
# toolchain is installed (libFuzzer's instrumentation needs nightly); without nightly that
# step is skipped and nothing is installed here.
if [ "${MDS_TEST_DEPS:-0}" = 1 ] && rustup toolchain list 2>/dev/null | grep -q '^nightly' \
  && ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz (cargo install, a few minutes the first time)"
  CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-fuzz-build" cargo install cargo-fuzz --locked
fi
