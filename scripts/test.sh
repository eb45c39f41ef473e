#!/usr/bin/env bash
# Every check a contributor must pass, from a fresh machine: installs dependencies (with the
# test-only ones), then formatting, clippy, all tests (release profile: RocksDB is compiled
# once, shared with the binaries), the packaged files in dist/, a bounded run of the decode
# fuzzer where nightly is installed, and the loom model checks of the reply hand-over.
set -euo pipefail
cd "$(dirname "$0")/.."

MDS_TEST_DEPS=1 ./scripts/install-deps.sh python3-venv

# The dashboard generator's library, pinned in dashboards/requirements.txt, in a venv outside
# the clone: Debian's python3 is externally managed (PEP 668), and reruns reuse the venv. It
# installs again only when the pin changes (the venv keeps a copy of the file it installed).
MDS_VENV="${MDS_VENV:-/var/tmp/mds-venv}"
if ! cmp -s dashboards/requirements.txt "$MDS_VENV/requirements.txt" \
  || ! "$MDS_VENV/bin/python3" -c '' 2>/dev/null; then
  echo "test.sh: installing dashboards/requirements.txt in $MDS_VENV"
  python3 -m venv "$MDS_VENV"
  "$MDS_VENV/bin/python3" -m pip install --quiet --disable-pip-version-check \
    -r dashboards/requirements.txt
  cp dashboards/requirements.txt "$MDS_VENV/requirements.txt"
fi

# Outside the clone, so reruns (and CI on a fresh clone) are incremental.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"

# That directory keeps every test binary ever linked, ~350 MB each with debug info, and a
# clone at another path or a changed dependency links a new set under new names: left alone
# it filled a 90 GB disk mid-run. Short of space, drop them all; relinking takes minutes
# (RocksDB and the other libraries stay built).
MIN_FREE_GB="${MIN_FREE_GB:-30}"
deps="$CARGO_TARGET_DIR/release/deps"
if [ -d "$deps" ]; then
  free_gb=$(df -P -BG "$deps" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
  if [ "$free_gb" -lt "$MIN_FREE_GB" ]; then
    echo "test.sh: ${free_gb} GB free; removing linked test binaries from $deps"
    find "$deps" -maxdepth 1 -type f -perm -u+x ! -name '*.so' ! -name '*.rlib' ! -name '*.d' -delete
  fi
fi

cargo fmt --all -- --check
"$MDS_VENV/bin/python3" dashboards/generate.py --check
cargo clippy --release --workspace --all-targets -- -D warnings
# No crate declares a dependency it does not use (the fuzz crate is checked with the rest).
cargo machete
# No import circle among a crate's files, no function over 120 lines in mds, journal, client.
python3 scripts/check-structure.py --self-test
python3 scripts/check-structure.py
# The mount's tests (mount/tests/) mount FUSE file systems as root and must unmount every one,
# failed or not: a mount of mdsmount that appears during the run and is still there after it
# fails the run (and is detached).
mdsmounts() { awk '{ for (i = 7; i <= NF; i++) if ($i == "-" && $(i + 1) == "fuse.mdsmount") print $5 }' /proc/self/mountinfo | sort; }
mounts_before="$(mdsmounts)"
cargo test --release --workspace
leaked="$(comm -13 <(echo "$mounts_before") <(mdsmounts))"
if [ -n "$leaked" ]; then
  echo "test.sh: the tests left these mdsmount mounts behind (now detached):" >&2
  echo "$leaked" >&2
  while read -r m; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; done <<<"$leaked"
  exit 1
fi
# Every server test again on the global reply path: the baseline must answer exactly as the
# per-CPU path does (the test harnesses read MDS_TEST_REPLY_PATH).
MDS_TEST_REPLY_PATH=global cargo test --release -p mds -p mds-client --tests

# dist/: `mds serve` accepts the packaged mds.toml, every key uncommented (flags override the
# addresses and the data directory so it runs anywhere), starts, and exits 0 at SIGTERM; and,
# where systemd-analyze exists, the unit verifies cleanly.
BIN="$CARGO_TARGET_DIR/release"

TMP="$(mktemp -d)"
MDS_PID=""
trap '[ -n "$MDS_PID" ] && kill -KILL "$MDS_PID" 2>/dev/null; rm -rf "$TMP"' EXIT

# The shipped file, with its commented-out keys (partitions) switched on.
sed -E 's/^# (partitions = )/\1/' dist/mds.toml >"$TMP/mds.toml"
grep -q '^partitions = ' "$TMP/mds.toml"
MDS_LOG=info "$BIN/mds" serve --config "$TMP/mds.toml" --data "$TMP/data" \
  --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$TMP/log" &
MDS_PID=$!
for _ in $(seq 1 300); do
  grep -q "listening on" "$TMP/log" && break
  kill -0 "$MDS_PID" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "listening on" "$TMP/log"; then
  echo "dist: mds did not start with dist/mds.toml:" >&2
  cat "$TMP/log" >&2
  exit 1
fi
kill -TERM "$MDS_PID"
status=0
wait "$MDS_PID" || status=$?
MDS_PID=""
if [ "$status" -ne 0 ]; then
  echo "dist: mds exited $status at SIGTERM:" >&2
  cat "$TMP/log" >&2
  exit 1
fi
echo "dist: dist/mds.toml accepted; mds started and stopped cleanly"

if command -v systemd-analyze >/dev/null 2>&1; then
  # verify wants ExecStart's binary to exist: point it at the built one.
  sed "s|/usr/bin/mds |$BIN/mds |" dist/mds.service >"$TMP/mds.service"
  if ! out="$(systemd-analyze verify "$TMP/mds.service" 2>&1)" || [ -n "$out" ]; then
    echo "dist: systemd-analyze verify dist/mds.service:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "dist: dist/mds.service verified"
else
  echo "dist: no systemd-analyze here; dist/mds.service not verified"
fi

# The Debian package: the three binaries, stripped, the unit, the packaged config (a conffile)
# and the sysusers entry, from what was just built.
cargo deb -p mds --no-build --strip --output "$TMP/mds.deb" >/dev/null
contents="$(dpkg-deb -c "$TMP/mds.deb")"
for path in ./usr/bin/mds ./usr/bin/mdsctl ./usr/bin/loadgen ./etc/mds/mds.toml \
  ./lib/systemd/system/mds.service ./usr/lib/sysusers.d/mds.conf; do
  grep -q " $path\$" <<<"$contents" || { echo "package: $path missing" >&2; exit 1; }
done
dpkg-deb --ctrl-tarfile "$TMP/mds.deb" | tar -xO ./conffiles | grep -qx /etc/mds/mds.toml
mkdir -p "$TMP/pkg" && dpkg-deb -x "$TMP/mds.deb" "$TMP/pkg"
if readelf -S "$TMP/pkg/usr/bin/mds" | grep -q '\.debug_info'; then
  echo "package: /usr/bin/mds is not stripped" >&2
  exit 1
fi
echo "package: $(dpkg-deb -f "$TMP/mds.deb" Package Version | tr '\n' ' ')built and checked"
# The mount's own package, for client machines: the binary in /usr/bin (mount(8) runs
# mount.fuse3 with a fixed PATH), stripped, and fuse3 among its dependencies.
cargo deb -p mdsmount --no-build --strip --output "$TMP/mdsmount.deb" >/dev/null
grep -q ' ./usr/bin/mdsmount$' <<<"$(dpkg-deb -c "$TMP/mdsmount.deb")" \
  || { echo "package: mdsmount's /usr/bin/mdsmount missing" >&2; exit 1; }
dpkg-deb -f "$TMP/mdsmount.deb" Depends | grep -qw fuse3 \
  || { echo "package: mdsmount does not depend on fuse3" >&2; exit 1; }
mkdir -p "$TMP/pkg-mount" && dpkg-deb -x "$TMP/mdsmount.deb" "$TMP/pkg-mount"
if readelf -S "$TMP/pkg-mount/usr/bin/mdsmount" | grep -q '\.debug_info'; then
  echo "package: /usr/bin/mdsmount is not stripped" >&2
  exit 1
fi
echo "package: $(dpkg-deb -f "$TMP/mdsmount.deb" Package Version | tr '\n' ' ')built and checked"

# scripts/demo-cluster.sh, short: etcd, three shards and a standby, loadgen across them; its
# report must give each shard's rate and the total, and the cluster's fsck must be clean.
BIN_PREBUILT=1 DURATION=3 THREADS=6 ./scripts/demo-cluster.sh >"$TMP/demo-cluster.log" 2>&1 || {
  cat "$TMP/demo-cluster.log" >&2
  echo "demo-cluster: failed" >&2
  exit 1
}
for want in '^Rate: [0-9.]* creates/sec' '^shards: 0 [0-9.]*/sec.*; 1 [0-9.]*/sec.*; 2 [0-9.]*/sec' \
  ' 3 shards, 0 findings'; do
  grep -q "$want" "$TMP/demo-cluster.log" || {
    cat "$TMP/demo-cluster.log" >&2
    echo "demo-cluster: no line matching '$want'" >&2
    exit 1
  }
done
echo "demo-cluster: $(grep -m1 '^Rate:' "$TMP/demo-cluster.log")"

# The decode fuzzer for a bounded time, where nightly is installed (libFuzzer needs it): its
# own workspace and target dir, so it never rebuilds RocksDB. Its corpus persists there, so
# each run starts where the last one stopped. FUZZ_SECONDS=0 skips it.
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
if [ "$FUZZ_SECONDS" -gt 0 ] && rustup toolchain list 2>/dev/null | grep -q '^nightly' \
  && cargo fuzz --version >/dev/null 2>&1; then
  corpus="${CARGO_TARGET_DIR}-fuzz/corpus/decode_frames"
  mkdir -p "$corpus"
  (cd fuzz && CARGO_TARGET_DIR="${CARGO_TARGET_DIR}-fuzz" cargo +nightly fuzz run decode_frames \
    "$corpus" -- -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 2>"$TMP/fuzz.log") || {
    tail -n 40 "$TMP/fuzz.log" >&2
    echo "fuzz: decode_frames found a failure (artifact under fuzz/artifacts/)" >&2
    exit 1
  }
  echo "fuzz: decode_frames $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$TMP/fuzz.log" | tail -n1)"
else
  echo "fuzz: skipped (no nightly toolchain or cargo-fuzz, or FUZZ_SECONDS=0)"
fi

# loom needs its own cfg, hence its own target dir (only the reply crate is rebuilt there).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR}-loom" \
  cargo test --release -p reply --test loom
