#!/usr/bin/env bash
# What extended attribute bytes cost a server's memory: for each build, a fresh server, then
# COUNT files each given one value of SIZE bytes (`user.blob`, through mdsctl); prints the
# server's resident memory before, after the values are written and committed, and after a
# restart on the same store (which loads every attribute), with the difference per value.
#   OLD=/var/tmp/bench-old NEW=/var/tmp/mds-target/release ./bench/xattr-memory.sh
# (each a directory holding that build's `mds` and `mdsctl`; see bench/before-after.sh for
# building one).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
COUNT="${COUNT:-1500}"
SIZE="${SIZE:-65536}"
BUILDS=()
[ -n "${OLD:-}" ] && BUILDS+=("old=$OLD")
BUILDS+=("new=${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}")

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

pid=""
data=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$data" ]; then rm -rf "$data" "$data.log"; fi
}
trap cleanup EXIT

# A server of build $1 on the store $data, waited for; sets pid and MDS_ADDR.
start() {
  "$1/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    2>>"$data.log" &
  pid=$!
  wait_for_mds "$data.log"
  : >"$data.log"
  sleep 1
}

value=$(head -c "$SIZE" /dev/zero | tr '\0' 'x')
printf '%-5s %-6s %-7s %-10s %-10s %-10s %-11s %s\n' build count size "rss0 KiB" \
  "rss1 KiB" "restart KiB" "KiB/value" "restart KiB/value"
for build in "${BUILDS[@]}"; do
  name=${build%%=*}; bin=${build#*=}
  data=$(mktemp -d /var/tmp/mds-xattr.XXXXXX)
  start "$bin"
  ctl=("$bin/mdsctl" --server "$MDS_ADDR")
  before=$(rss_kib "$pid")
  "${ctl[@]}" mkdir /x
  for i in $(seq 1 "$COUNT"); do
    "${ctl[@]}" create "/x/f$i" >/dev/null
    "${ctl[@]}" setfattr -n user.blob -v "$value" "/x/f$i"
  done
  "${ctl[@]}" sync
  sleep 2
  after=$(rss_kib "$pid")
  "${ctl[@]}" getfattr -n user.blob "/x/f$COUNT" | grep -q xxxx
  kill -TERM "$pid"; wait "$pid" || true; pid=""
  start "$bin"
  ctl=("$bin/mdsctl" --server "$MDS_ADDR")
  "${ctl[@]}" getfattr -n user.blob "/x/f1" | grep -q xxxx
  restarted=$(rss_kib "$pid")
  kill -TERM "$pid"; wait "$pid" || true; pid=""
  awk -v n="$name" -v c="$COUNT" -v s="$SIZE" -v b="$before" -v a="$after" -v r="$restarted" \
    'BEGIN { printf "%-5s %-6d %-7d %-10d %-10d %-10d %-11.1f %.1f\n", n, c, s, b, a, r, (a - b) / c, (r - b) / c }'
  rm -rf "$data" "$data.log"; data=""
done
