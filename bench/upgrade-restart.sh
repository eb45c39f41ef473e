#!/usr/bin/env bash
# A start-up before and after a schema change, on one store, in one run: OLD's mds serves
# COUNT creates (loadgen, 64 x 16) into a new store and stops cleanly; the store is copied
# twice; then, alternating, OLD starts on one copy and NEW on the other (its first start
# upgrades the store, if NEW's schema is newer), each timed from exec to `listening on`, with
# its CPU time (user + system) and resident memory then; NEW once more at the end. Made for
# schema 5 (entries keyed by child, docs/benchmarks/journal.md "Entries keyed by their child").
# FILL=each: each build's server fills a store of its own (in its own format) instead, and
# each restarts on its own: a restart of a store as each schema writes it (schema 6, "A new
# inode's image in its entry").
# FILL_WITH=write makes the fill `loadgen write --size $SIZE` (4k) instead of creates: files
# holding data, which a schema change counting every file's data (schema 9, `data_blocks`)
# reads at its first start.
#   OLD=/var/tmp/old/release NEW=/var/tmp/mds-target/release COUNT=1000000 ./bench/upgrade-restart.sh
#   FILL=each OLD=... NEW=... ./bench/upgrade-restart.sh
#   FILL_WITH=write SIZE=4k COUNT=200000 OLD=... NEW=... ./bench/upgrade-restart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OLD="${OLD:?OLD: the release directory of the build before}"
NEW="${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}"
COUNT="${COUNT:-1000000}"
FILL="${FILL:-old}"
FILL_WITH="${FILL_WITH:-create}"
SIZE="${SIZE:-4k}"
case "$FILL_WITH" in create|write) ;; *) echo "FILL_WITH is create or write, not $FILL_WITH" >&2; exit 2;; esac
case "$FILL" in old|each) ;; *) echo "FILL is old or each, not $FILL" >&2; exit 2;; esac
work=$(mktemp -d /var/tmp/mds-upgrade-restart.XXXXXX)
log="$work/log"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# start BIN DATA LABEL: starts BIN's server on DATA, waits for it, prints the figures.
start() {
  : >"$log"
  local t0 t1
  t0=$(date +%s.%N)
  "$1/mds" serve --data "$2" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$log" &
  pid=$!
  until grep -q "listening on" "$log"; do
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  addr=$(grep -o 'listening on [0-9.:]*' "$log" | awk '{print $3}')
  awk -v a="$t0" -v b="$t1" -v label="$3" -v hz="$(getconf CLK_TCK)" \
    -v rss="$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" \
    -v up="$(grep -o 'upgraded the store from schema version [0-9]*' "$log" | head -1)" \
    '{sub(/.*\) /, ""); printf "%-34s start to listening %5.2f s, CPU %5.2f s, RSS %7d KiB  %s\n",
      label, b - a, ($12 + $13) / hz, rss, up}' "/proc/$pid/stat"
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
}

# fill BIN DATA LABEL: BIN's server takes COUNT creates from BIN's loadgen into DATA.
fill() {
  start "$1" "$2" "$3"
  local size=()
  [ "$FILL_WITH" = write ] && size=(--size "$SIZE")
  "$1/loadgen" "$FILL_WITH" --server "$addr" --threads 64 --depth 16 --count "$COUNT" "${size[@]}" --quiet | grep '^Rate'
  stop
  echo "$3: store $(du -sh "$2" | cut -f1)"
}

if [ "$FILL" = each ]; then
  fill "$OLD" "$work/old" "old build, filling its store"
  fill "$NEW" "$work/new" "new build, filling its store"
else
  fill "$OLD" "$work/store" "old build, filling"
  cp -a "$work/store" "$work/old"
  cp -a "$work/store" "$work/new"
fi
for round in 1 2; do
  start "$OLD" "$work/old" "old build, round $round"
  stop
  start "$NEW" "$work/new" "new build, round $round"
  stop
done
start "$NEW" "$work/new" "new build, round 3"
stop
