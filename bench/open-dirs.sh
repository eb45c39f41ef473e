#!/usr/bin/env bash
# What keeping an open directory's attributes costs a listing: two mdsmount binaries (OLD and
# NEW) mount one server side by side, and `find -type f` and `ls -lR` walk the same tree of
# DIRS directories of FILES files each through each mount, ROUNDS times in turn, the kernel's
# caches dropped before every walk. Prints each walk's seconds and the server's requests per
# walk (a counted figure, stable where seconds are not). The server on SERVER_CPU, the mounts
# and the walks on LOAD_CPU. OPTS: the mounts' -o options (e.g. default_permissions, where
# the kernel checks permissions and an OPENDIR asks the server nothing else). Needs root.
#   OLD=/tmp/mdsmount-old NEW=/var/tmp/mds-target/release/mdsmount ./bench/open-dirs.sh
#   OPTS=default_permissions OLD=... ./bench/open-dirs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
BIN="${BIN:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}"
OLD="${OLD:?OLD=path of the mdsmount to compare with}"
NEW="${NEW:-$BIN/mdsmount}"
DIRS="${DIRS:-400}"
FILES="${FILES:-5}"
ROUNDS="${ROUNDS:-5}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
OPTS="${OPTS:-}"

work=$(mktemp -d /var/tmp/mds-open-dirs.XXXXXX)
pids=()
cleanup() {
  for m in "$work"/m-*; do
    [ -d "$m" ] && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

taskset -c "$SERVER_CPU" "$BIN/mds" serve --data "$work/data" --listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --partitions 1 >"$work/mds.log" 2>&1 &
pids+=($!)
wait_for_mds "$work/mds.log"

requests() {
  curl -s "http://$MDS_METRICS/metrics" |
    awk '/^mds_requests_total/ { n += $2 } END { printf "%d\n", n }'
}

for which in old new; do
  bin=$OLD
  [ "$which" = new ] && bin=$NEW
  mkdir -p "$work/m-$which"
  taskset -c "$LOAD_CPU" "$bin" "$MDS_ADDR" "$work/m-$which" -f ${OPTS:+-o "$OPTS"} >"$work/mount-$which.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    mountpoint -q "$work/m-$which" && break
    sleep 0.1
  done
  mountpoint -q "$work/m-$which" || { cat "$work/mount-$which.log" >&2; exit 1; }
done

mkdir "$work/m-new/tree"
for d in $(seq 1 "$DIRS"); do
  mkdir "$work/m-new/tree/$d"
  for f in $(seq 1 "$FILES"); do : >"$work/m-new/tree/$d/$f"; done
done

walk() {
  local which=$1 what=$2 before after start end
  sync
  echo 3 >/proc/sys/vm/drop_caches
  before=$(requests)
  start=$(date +%s.%N)
  case $what in
    find) taskset -c "$LOAD_CPU" find "$work/m-$which/tree" -type f | wc -l >/dev/null ;;
    ls-lR) taskset -c "$LOAD_CPU" ls -lR "$work/m-$which/tree" >/dev/null ;;
  esac
  end=$(date +%s.%N)
  after=$(requests)
  printf '%-4s %-6s %6.3f s  %6d requests\n' "$which" "$what" "$(echo "$end - $start" | bc)" \
    "$((after - before))"
}

echo "# $DIRS directories of $FILES files; -o ${OPTS:-(none)}; OLD=$OLD NEW=$NEW; $(date -u +%F)"
for _ in $(seq 1 "$ROUNDS"); do
  for what in find ls-lR; do
    walk old "$what"
    walk new "$what"
  done
done
