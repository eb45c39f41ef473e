#!/usr/bin/env bash
# Restart time of a large store (docs/benchmarks/journal.md, "Restart of a large store"): builds a
# store of INODES inodes straight through the journal (journal/examples/build_store.rs), then
# times `mds serve` from its start to `listening on`, split at its `journal open` and
# `namespace loaded` log lines, three times:
#   1. on the store as build_store closed it;
#   2. after a BURST of loadgen creates against server 1, then a clean stop (SIGTERM);
#   3. after a BURST against server 2, then a SIGKILL (a crash: WAL replay);
# and times `mds fsck` on the result. Before each start it prints the store's size and its
# write-ahead log (*.log files); after each, the server's resident memory (VmRSS). With
# COLD=1 (the default) the store's files are dropped from the page cache before each start
# and before fsck (posix_fadvise DONTNEED on those files only: other processes' cache stays),
# as after a reboot. The store is deleted at the end (KEEP=1 keeps it).
#   INODES=10000000 BURST=10s ./bench/restart-time.sh
# BUILD=0 reuses the binaries in $BIN (default $CARGO_TARGET_DIR/release) instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
INODES="${INODES:-10000000}"
BURST="${BURST:-10s}"
# Loadgen's threads and depth during the burst.
BURST_LOAD="${BURST_LOAD:-64x16}"
if [ "${BUILD:-1}" = 1 ]; then
  cargo build --release --workspace --bins --examples
fi
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
COLD="${COLD:-1}"
DATA=$(mktemp -d /var/tmp/mds-restart.XXXXXX)
rmdir "$DATA"
LOG="$DATA.log"
PID=
cleanup() {
  if [ -n "$PID" ]; then kill -KILL "$PID" 2>/dev/null || true; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $DATA"; else rm -rf "$DATA" "$LOG"; fi
}
trap cleanup EXIT

mib() { awk -v b="$1" 'BEGIN{printf "%.1f MiB", b / 1048576}'; }
wal() { find "$DATA" -maxdepth 1 -name '*.log' -printf '%s\n' | awk '{n++; s+=$1} END{printf "%d %d", n, s}'; }
store() {
  read -r files bytes <<<"$(wal)"
  echo "  store $(mib "$(du -sb "$DATA" | cut -f1)") on disk; WAL $files files, $(mib "$bytes")"
}
# Seconds since the epoch of the first log line containing $1 (tracing's RFC 3339 stamp).
stamp() {
  grep -m1 "$1" "$LOG" | awk '{print $1}' | sed -E 's/\x1b\[[0-9;]*m//g' |
    python3 -c 'import sys, datetime; print(datetime.datetime.fromisoformat(sys.stdin.read().strip().replace("Z", "+00:00")).timestamp())'
}

# Drops the store's files from the page cache (COLD=1).
evict() {
  [ "$COLD" = 1 ] || return 0
  python3 - "$DATA" <<'PY'
import os, sys
for name in os.listdir(sys.argv[1]):
    path = os.path.join(sys.argv[1], name)
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}

# Starts a server on the store, waits for `listening on`, prints the time split and VmRSS.
start() {
  local t0 t_open t_loaded t_listen
  : >"$LOG"
  evict
  t0=$(date +%s.%N)
  "$BIN/mds" serve --data "$DATA" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$LOG" &
  PID=$!
  until grep -q "listening on" "$LOG"; do
    kill -0 "$PID" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.05
  done
  t_open=$(stamp "journal open"); t_loaded=$(stamp "namespace loaded")
  t_listen=$(stamp "listening on")
  ADDR=$(grep -o 'listening on [0-9.:]*' "$LOG" | awk '{print $3}')
  awk -v a="$t0" -v b="$t_open" -v c="$t_loaded" -v d="$t_listen" 'BEGIN{
    printf "  start to listening %.2f s: journal open %.2f s, namespace load %.2f s, rest %.2f s\n",
      d - a, b - a, c - b, d - c}'
  # CPU time the start took (user + system), steadier than wall time on a shared machine.
  awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "  CPU %.2f s (user + system)", ($12 + $13) / hz}' \
    "/proc/$PID/stat"
  echo "; after start: $(grep VmRSS "/proc/$PID/status" | tr -s ' ')"
}
stop() {
  kill -"$1" "$PID"
  { wait "$PID" || true; } 2>/dev/null
  PID=
  grep -o 'memtables flushed.*' "$LOG" | sed 's/^/  at stop: /' || true
}
burst() {
  echo "== burst: loadgen create $BURST_LOAD for $BURST, then SIG$1"
  "$BIN/loadgen" create --server "$ADDR" --threads "${BURST_LOAD%x*}" \
    --depth "${BURST_LOAD#*x}" --duration "$BURST" --dir "/burst-$1" --quiet |
    grep '^Rate:' | sed 's/^/  /'
  stop "$1"
}

echo "== build_store --inodes $INODES"
/usr/bin/time -f "  %e s, max RSS %M KiB" "$BIN/examples/build_store" --data "$DATA" \
  --inodes "$INODES" --progress 2000000
store
echo "== 1. start on the store as build_store closed it"
start
burst TERM
echo "== 2. start after a clean stop (SIGTERM)"
store
start
burst KILL
echo "== 3. start after SIGKILL (WAL replay)"
store
start
stop TERM
echo "== mds fsck"
store
evict
/usr/bin/time -f "  %e s, max RSS %M KiB" "$BIN/mds" fsck --data "$DATA" | tail -1 | sed 's/^/  /'
