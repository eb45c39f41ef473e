#!/usr/bin/env bash
# Cache misses per create, counted rather than timed: each build in BUILDS (release
# directories, each with an mds) serves a fixed COUNT of creates at THREADS x DEPTH under
# valgrind's cachegrind, one build after the other, driven by the loadgen in LOADGEN_BIN; prints
# instructions, D1 misses and last-level misses per create for each. On a shared host whose
# timings move by ±10% between runs, a change worth a few percent of CPU shows here as a
# count that repeats.
#
# cachegrind simulates two levels; LL (default 2 MiB, 16-way, 64-byte lines) stands for this
# machine's per-core L2, so "LL misses" are what left the core's own cache. The server runs
# ~20x slower and its threads one at a time, so the figures are the work and the misses of
# the create path (plus start-up and shutdown, the same for every build), not its timing.
# cg_annotate on the files under OUT says where the misses are.
#   BUILDS="/var/tmp/old/release /var/tmp/mds-target/release" ./bench/cachegrind.sh
#   LOADGEN_BIN=each ...    # each build driven by its own loadgen (builds of different protocols)
#   COUNT=400000 LL=2097152,16,64 ...   # the defaults
#   SERVER_ARGS="--inline-data-max 0" ... # server flags for every build
#   SIDE=loadgen LOADGEN_BIN=each ...     # count the load generator instead (each build's
#                                         # loadgen under cachegrind, its server not)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BUILDS="${BUILDS:-$CARGO_TARGET_DIR/release}"
LOADGEN_BIN="${LOADGEN_BIN:-$CARGO_TARGET_DIR/release}"
COUNT="${COUNT:-400000}"
THREADS="${THREADS:-64}"
DEPTH="${DEPTH:-16}"
LL="${LL:-2097152,16,64}"
OUT="${OUT:-/var/tmp/mds-cachegrind}"
SERVER_ARGS="${SERVER_ARGS:-}"
SIDE="${SIDE:-server}"
case "$SIDE" in server|loadgen) ;; *) echo "SIDE is server or loadgen, not $SIDE" >&2; exit 2;; esac
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 2; }
mkdir -p "$OUT"

pid=""
data=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$data" ]; then rm -rf "$data" "$data.log" "$data.counted"; fi
}
trap cleanup EXIT

# The figure after "$1" in cachegrind's summary in log $2, without thousands separators.
summary() {
  grep -a "$1" "$2" | head -1 | sed -E 's/.*: *([0-9,]+).*/\1/' | tr -d ,
}

printf '%-40s %12s %12s %12s\n' build "instr/create" "D1 miss/c" "LL miss/c"
n=0
for build in $BUILDS; do
  n=$((n + 1))
  data=$(mktemp -d /var/tmp/mds-cg.XXXXXX)
  counted=(valgrind --tool=cachegrind --cache-sim=yes --LL="$LL"
    --cachegrind-out-file="$OUT/cachegrind.$n.out")
  server=() client=("${counted[@]}" --log-file="$data.counted") summary_log="$data.counted"
  if [ "$SIDE" = server ]; then
    server=("${counted[@]}") client=() summary_log="$data.log"
  fi
  # shellcheck disable=SC2086 # $SERVER_ARGS is a list of flags
  "${server[@]}" "$build/mds" serve --data "$data" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 $SERVER_ARGS 2>"$data.log" &
  pid=$!
  wait_for_mds "$data.log"
  lg="$LOADGEN_BIN"
  if [ "$lg" = each ]; then lg="$build"; fi
  "${client[@]}" "$lg/loadgen" create --server "$MDS_ADDR" --threads "$THREADS" --depth "$DEPTH" \
    --count "$COUNT" --warmup 0 --quiet >/dev/null
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
  ir=$(summary "I *refs" "$summary_log")
  d1=$(summary "D1  misses" "$summary_log")
  ll=$(summary "LL misses" "$summary_log")
  awk -v b="$build" -v ir="$ir" -v d1="$d1" -v ll="$ll" -v c="$COUNT" \
    'BEGIN {printf "%-40s %12.0f %12.2f %12.2f\n", b, ir / c, d1 / c, ll / c}'
  rm -rf "$data" "$data.log" "$data.counted"
  data=""
done
echo "$SIDE's, per create over $COUNT creates at ${THREADS} x ${DEPTH}, LL=$LL; cachegrind files in $OUT"
