#!/usr/bin/env bash
# Where the latency tail at THREADS x DEPTH comes from, in one run: a fresh server of the
# build in BIN (extra server flags in ARGS), `loadgen create` for DURATION, then
#   - loadgen's latency line (the client's view: p50 ... p99.9, max);
#   - from the server's /metrics: the server's own span per create (read -> reply queued,
#     `mds_request_duration_seconds{op="create"}`), the drain duration, the synced commit
#     write, and how long the committer waited with records in hand for an earlier transno
#     (`mds_commit_gap_wait_seconds`, absent in builds before it existed) — quantiles are
#     the histogram's bucket bounds, each mean exact (its sum over its count), and the
#     bucket every sample fell within ("all <="); RocksDB's write stalls in seconds;
#   - from /proc/<pid>/task/*/schedstat, just before loadgen ends: how long the committer,
#     each partition and loadgen's threads ran and waited on the run queue.
#   BIN=/var/tmp/mds-target/release ./bench/tail.sh
#   SERVER_CPUS=0 LOAD_CPUS=1 ARGS="--partitions 1" ./bench/tail.sh   # per-core.sh's placement:
#     the server (every thread it starts) under taskset -c SERVER_CPUS, loadgen under LOAD_CPUS
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
THREADS="${THREADS:-64}"
DEPTH="${DEPTH:-16}"
DURATION_S="${DURATION_S:-10}"
ARGS="${ARGS:-}"
SERVER_ON=() LOAD_ON=()
[[ -n "${SERVER_CPUS:-}" ]] && SERVER_ON=(taskset -c "$SERVER_CPUS")
[[ -n "${LOAD_CPUS:-}" ]] && LOAD_ON=(taskset -c "$LOAD_CPUS")

data=$(mktemp -d /var/tmp/mds-tail.XXXXXX)
log="$data.log"
# shellcheck disable=SC2086 # $ARGS is a list of flags
"${SERVER_ON[@]}" "$BIN/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  $ARGS 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$data" "$log"' EXIT
wait_for_mds "$log"
addr=$MDS_ADDR
metrics=$MDS_METRICS

"${LOAD_ON[@]}" "$BIN/loadgen" create --server "$addr" --threads "$THREADS" --depth "$DEPTH" \
  --duration "${DURATION_S}s" --quiet >"$data.loadgen" &
lg=$!
sleep "$(awk -v d="$DURATION_S" 'BEGIN{print d - 0.5}')"
echo "schedstat (run, run-queue wait) over the run so far:"
for t in /proc/"$pid"/task/*; do
  name=$(cat "$t/comm")
  case "$name" in
    mds-committer | mds-part-*)
      awk -v n="$name" '{printf "  %-14s run %.2f s  waited %.2f s  slices %d\n", n, $1 / 1e9, $2 / 1e9, $3}' "$t/schedstat" ;;
  esac
done
cat /proc/"$lg"/task/*/schedstat |
  awk '{r += $1; w += $2; s += $3} END {printf "  loadgen (all)  run %.2f s  waited %.2f s  slices %d  (%.0f us waited per slice)\n", r / 1e9, w / 1e9, s, w / s / 1e3}'
wait "$lg"
grep -E '^(Rate|latency)' "$data.loadgen"
curl -s "http://$metrics/metrics" >"$data.metrics"

# Quantiles of one histogram (its series summed, those whose labels contain $2), in ms.
quantiles() {
  python3 - "$1" "${2:-}" "$data.metrics" <<'PY'
import re, sys
name, filt, path = sys.argv[1], sys.argv[2], sys.argv[3]
buckets = {}
sums = 0.0
for line in open(path):
    s = re.match(name + r'_sum(?:\{(.*)\})? (\S+)', line)
    if s and filt in (s.group(1) or ''):
        sums += float(s.group(2))
    m = re.match(name + r'_bucket\{(.*)\} (\S+)', line)
    if not m or filt not in m.group(1):
        continue
    le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
    le = float('inf') if le == '+Inf' else float(le)
    buckets[le] = buckets.get(le, 0.0) + float(m.group(2))
total = buckets.get(float('inf'), 0.0)
if not total:
    print(f"  {name}: no samples"); sys.exit()
out = []
for q in (0.5, 0.99, 0.999):
    bound = next(b for b in sorted(buckets) if buckets[b] >= q * total)
    out.append(f"p{q * 100:g} <= {bound * 1e3:g} ms")
top = next(b for b in sorted(buckets) if buckets[b] >= total)
out.append(f"all <= {top * 1e3:g} ms" if top != float('inf') else "some above the last bucket")
out.append(f"mean {sums / total * 1e3:.3f} ms")
print(f"  {name}{' ' + filt if filt else ''}: {int(total)} samples, " + ", ".join(out))
PY
}
echo "server (quantiles: bucket bounds; means exact):"
quantiles mds_request_duration_seconds 'op="create"'
quantiles mds_drain_duration_seconds
quantiles mds_commit_write_sync_duration_seconds
if grep -q '^mds_commit_gap_wait_seconds_count' "$data.metrics"; then
  awk '/^mds_commit_gap_wait_seconds_(sum|count)/ {v[$1] = $2} /^mds_commits_total/ {c = $2}
    END {printf "  commit gap waits: %d, %.3f s in all, over %d commits\n",
      v["mds_commit_gap_wait_seconds_count"], v["mds_commit_gap_wait_seconds_sum"], c}' "$data.metrics"
  quantiles mds_commit_gap_wait_seconds
fi
# A write stall would hold every request in flight for its length: the first thing to rule out
# when the client's max is far above the server's buckets.
awk '/^mds_rocksdb_stall_seconds_total/ {printf "  RocksDB write stalls: %.3f s\n", $2}' "$data.metrics"
rm -f "$data.loadgen" "$data.metrics"
