#!/usr/bin/env bash
# Per-CPU reply queues against the global baseline, side by side in one run: for each round, a
# fresh server on a fresh store per path (`--reply-path per-cpu`, then `--reply-path global`
# with its 16 service threads; the order alternates between rounds), loadgen at THREADS x DEPTH
# for DURATION, then a scrape of the server's /metrics before it stops. Prints per run the
# create rate, the server's CPU per create (user + system from /proc), the drain duration
# (commit durable -> replies queued for their sockets; p50 and p99 from the histogram), and
# for the global path the service lock's total wait per create; then the per-CPU/global
# ratio of the mean rates and the per-round ratios.
#   ROUNDS=4 DURATION=10s ./bench/reply-paths.sh
# BIN=<release dir> skips the build and uses the mds and loadgen there.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release -p mds -p loadgen
  BIN="$CARGO_TARGET_DIR/release"
fi
THREADS="${THREADS:-64}"
DEPTH="${DEPTH:-16}"
DURATION="${DURATION:-10s}"
ROUNDS="${ROUNDS:-3}"
# A command prefix for loadgen, e.g. "nice -n 10": on a machine where loadgen shares the
# server's cores, the scheduler splits CPU per thread, so the global path's 16 service threads
# take CPU from loadgen that the per-CPU path's 2 partitions leave to it; a niced loadgen lets
# each path take what it needs, so the rate measures the server's work, not its thread count.
LOADGEN_PREFIX="${LOADGEN_PREFIX:-}"
# The same for the server, e.g. "taskset -c 1" with LOADGEN_PREFIX="taskset -c 0": each on
# its own cores, so the rate is the server's capacity on the cores it has, not its share.
SERVER_PREFIX="${SERVER_PREFIX:-}"

# Quantile q of histogram `name` (summed over labels) in a /metrics text on stdin, in µs.
quantile() {
  python3 -c '
import sys, re
name, q = sys.argv[1], float(sys.argv[2])
buckets = {}
for line in sys.stdin:
    m = re.match(name + r"_bucket\{(.*)\} (\S+)", line)
    if not m:
        continue
    le = re.search(r"le=\"([^\"]+)\"", m.group(1)).group(1)
    le = float("inf") if le == "+Inf" else float(le)
    buckets[le] = buckets.get(le, 0.0) + float(m.group(2))
bounds = sorted(buckets)
total = buckets.get(float("inf"), 0.0)
if total == 0:
    print("-"); sys.exit()
for b in bounds:
    if buckets[b] >= q * total:
        print("%.0f" % (b * 1e6) if b != float("inf") else "inf"); break
' "$1" "$2"
}

# Sum of one series family (all labels) in a /metrics text on stdin.
family_sum() {
  awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.6f", s }'
}

# One run: prints "rate cpu_us_per_create drain_p50_us drain_p99_us lock_wait_us_per_create".
run() {
  local path=$1 data log pid addr metrics line creates ticks text
  data=$(mktemp -d /var/tmp/mds-rp.XXXXXX)
  log="$data.log"
  # shellcheck disable=SC2086 # $SERVER_PREFIX is a command prefix or nothing
  $SERVER_PREFIX "$BIN/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --reply-path "$path" 2>"$log" &
  pid=$!
  wait_for_mds "$log"
  addr=$MDS_ADDR
  metrics=$MDS_METRICS
  # shellcheck disable=SC2086 # $LOADGEN_PREFIX is a command prefix or nothing
  line=$($LOADGEN_PREFIX "$BIN/loadgen" create --server "$addr" --threads "$THREADS" --depth "$DEPTH" \
    --duration "$DURATION" --quiet | grep '^Rate:')
  ticks=$(sed -E 's/.*\) //' "/proc/$pid/stat" | awk '{print $12 + $13}')
  text=$(curl -s "http://$metrics/metrics")
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$data" "$log"
  creates=$(echo "$line" | sed -E 's/.* threads ([0-9]+) creates.*/\1/')
  local p50 p99 waited
  p50=$(echo "$text" | quantile mds_drain_duration_seconds 0.5)
  p99=$(echo "$text" | quantile mds_drain_duration_seconds 0.99)
  waited=$(echo "$text" | family_sum mds_service_lock_wait_seconds_sum)
  echo "$line" | awk -v t="$ticks" -v c="$creates" -v hz="$(getconf CLK_TCK)" \
    -v p50="$p50" -v p99="$p99" -v w="$waited" \
    '{printf "%s %.2f %s %s %.3f\n", $2, t / hz * 1e6 / c, p50, p99, w * 1e6 / c}'
}

printf '%-6s %-8s %-12s %-10s %-14s %-14s %s\n' round path "creates/s" "cpu us/c" \
  "drain p50 us" "drain p99 us" "lock wait us/c"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="per-cpu global"; else order="global per-cpu"; fi
  declare -A rate=()
  for path in $order; do
    read -r r cpu p50 p99 wait <<<"$(run "$path")"
    rate[$path]=$r
    printf '%-6s %-8s %-12s %-10s %-14s %-14s %s\n' "$round" "$path" "$r" "$cpu" "$p50" "$p99" "$wait"
  done
  ratios+=("$(awk -v a="${rate[per-cpu]}" -v b="${rate[global]}" 'BEGIN{printf "%.3f", a / b}')")
  unset rate
done
echo "per-cpu/global creates/s by round: ${ratios[*]}"
printf '%s\n' "${ratios[@]}" | awk '{s += $1; ss += $1 * $1; n++} END {
  m = s / n; sd = (n > 1) ? sqrt((ss - n * m * m) / (n - 1)) : 0
  printf "per-cpu/global creates/s: mean %.3f, stdev %.3f over %d rounds\n", m, sd, n }'
