#!/usr/bin/env bash
# The figures of docs/benchmarks/group-commit.md ("Server against its ceiling"), side by side in one run on one machine:
#   1. the journal ceiling: RocksDB's synced batched write rate for create records (criterion);
#   2. creates/s through mds at 1, 2, 8, 64 threads (depth 1), 8x16 and 64x16;
# then bench/results/matrix.csv and the chart docs/creates-vs-outstanding.svg.
#   DURATION=10s ./bench/loadgen-matrix.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
DURATION="${DURATION:-10s}"
OUT=bench/results
mkdir -p "$OUT"
cargo build --release -p mds -p loadgen
BIN="$CARGO_TARGET_DIR/release"

# Benchmarks write to the disk mds uses, not to a tmpfs.
export MDS_BENCH_DIR=/var/tmp
cargo bench -p journal --bench group_commit -- --noplot 2>&1 | tee "$OUT/ceiling.txt"
# "thrpt: [lo mid hi]" of the 256 batch, in elements (creates) per second.
CEILING=$(awk '/journal_synced_create_batch\/256/{f=1} f&&/thrpt/{print; exit}' "$OUT/ceiling.txt" \
  | sed -E 's/.*thrpt: *\[[^ ]+ [^ ]+ ([0-9.]+) ([KM]?)elem\/s.*/\1 \2/' \
  | awk '{m=1; if($2=="K")m=1e3; if($2=="M")m=1e6; printf "%.0f", $1*m}')

DATA=$(mktemp -d /var/tmp/mds-bench.XXXXXX)
LOG="$OUT/mds.log"
"$BIN/mds" serve --data "$DATA" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
wait_for_mds "$LOG"
ADDR=$MDS_ADDR

echo "threads,depth,creates_per_sec,p50_us,p99_us,p999_us,ops_per_commit,ceiling_per_sec" > "$OUT/matrix.csv"
for cfg in "1 1" "2 1" "8 1" "64 1" "8 16" "64 16"; do
  # shellcheck disable=SC2086 # "threads depth", split on purpose
  set -- $cfg
  J="$OUT/create-$1x$2.json"
  "$BIN/loadgen" create --server "$ADDR" --threads "$1" --depth "$2" --duration "$DURATION" \
    --dir "/bench/$1x$2" --quiet --json "$J"
  python3 - "$J" "$CEILING" >> "$OUT/matrix.csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); p = r["parameters"]; l = r["latency_us"]
print(f'{p["threads"]},{p["depth"]},{r["rate_per_sec"]:.0f},{l["p50"]},{l["p99"]},{l["p99_9"]},{r["server"]["ops_per_commit"]:.1f},{sys.argv[2]}')
PY
done
kill -TERM $PID; wait $PID || true
python3 bench/chart.py "$OUT/matrix.csv" docs/creates-vs-outstanding.svg
column -s, -t "$OUT/matrix.csv"
