#!/usr/bin/env bash
# The main job end to end: build, start mds on a default data dir with its Prometheus
# endpoint, drive it with loadgen (a create workload, 64 threads), print the rate, stop mds
# cleanly and check the store. The first build compiles RocksDB's C++: about 20 minutes on
# 2 cores; later runs are incremental.
#   DATA=/path THREADS=64 DURATION=10 ./scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

echo "demo: the first build compiles RocksDB's C++: about 20 minutes on 2 cores" \
  "(later runs reuse \$CARGO_TARGET_DIR and are incremental)."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
cargo build --release -p mds -p loadgen --bins

DATA="${DATA:-/var/tmp/mds-demo-data}"
LISTEN="${LISTEN:-127.0.0.1:7400}"
METRICS="${METRICS:-127.0.0.1:9400}"
THREADS="${THREADS:-64}"
DURATION="${DURATION:-10}"
BIN="$CARGO_TARGET_DIR/release"

LOG="$(mktemp)"
"$BIN/mds" serve --data "$DATA" --listen "$LISTEN" --metrics-listen "$METRICS" 2>"$LOG" &
MDS_PID=$!
trap 'kill "$MDS_PID" 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 200); do
  grep -q "listening on" "$LOG" && break
  kill -0 "$MDS_PID" 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
grep -E "listening on|metrics endpoint on" "$LOG" | sed 's/^/mds: /'

"$BIN/loadgen" create --server "$LISTEN" --threads "$THREADS" --duration "${DURATION}s" --dir "/demo/$(date +%s)"
echo "metrics: $(curl -s "http://$METRICS/metrics" 2>/dev/null | grep -c '^mds_' || true) mds_ series at http://$METRICS/metrics"

kill -TERM "$MDS_PID"
wait "$MDS_PID"
"$BIN/mds" fsck --data "$DATA"
