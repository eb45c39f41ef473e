#!/usr/bin/env bash
# What one create costs in system calls and journal bytes, counted rather than timed (so
# steadier than a rate on a shared machine): a fresh server of the build in BIN (extra
# server flags in ARGS), `loadgen create` at THREADS x DEPTH for DURATION_S seconds under
# `perf stat`, then per create:
#   - loadgen's sendto and recvfrom calls (each sendto on loopback runs the whole TCP path,
#     the receiver's side included);
#   - the server's, counted over the same window by a second `perf stat` on its pid;
#   - WAL bytes the server committed (`mds_commit_bytes_total`).
#   BIN=/var/tmp/mds-target/release ./bench/per-create.sh
# Needs perf (linux-perf) and syscall tracepoints; run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
THREADS="${THREADS:-64}"
DEPTH="${DEPTH:-16}"
DURATION_S="${DURATION_S:-6}"
ARGS="${ARGS:-}"
EVENTS=syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom

data=$(mktemp -d /var/tmp/mds-per-create.XXXXXX)
log="$data.log"
# shellcheck disable=SC2086 # $ARGS is a list of flags
"$BIN/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 $ARGS 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$data" "$data".*' EXIT
wait_for_mds "$log"
addr=$MDS_ADDR
metrics=$MDS_METRICS
bytes_before=$(curl -s "http://$metrics/metrics" | awk '/^mds_commit_bytes_total / {print $2}')

perf stat -x, -e "$EVENTS" -p "$pid" -o "$data.server" -- sleep "$DURATION_S" &
server_stat=$!
perf stat -x, -e "$EVENTS" -o "$data.loadgen" -- \
  "$BIN/loadgen" create --server "$addr" --threads "$THREADS" --depth "$DEPTH" \
  --duration "${DURATION_S}s" --quiet >"$data.out"
wait "$server_stat"
bytes_after=$(curl -s "http://$metrics/metrics" | awk '/^mds_commit_bytes_total / {print $2}')

creates=$(grep -o 'threads [0-9]* creates' "$data.out" | awk '{print $2}')
grep '^Rate:' "$data.out"
per_create() { # $1 = perf stat file, $2 = who
  awk -F, -v c="$creates" -v who="$2" '/sys_enter_/ {
      split($3, name, "sys_enter_"); printf "%-8s %-9s per create: %.3f\n", who, name[2], $1 / c }' "$1"
}
per_create "$data.loadgen" loadgen
per_create "$data.server" server
awk -v a="$bytes_after" -v b="$bytes_before" -v c="$creates" \
  'BEGIN { printf "server   WAL bytes per create: %.1f\n", (a - b) / c }'
