#!/usr/bin/env bash
# Aggregate creates/s of one shard against three, in one run: one etcd (Debian's etcd-server,
# data on tmpfs), a one-shard cluster and a three-shard cluster beside it (two cluster names
# in the same etcd), every server with `--max-batch MAX_BATCH` and one partition, so that each
# shard is bound by its own commits (at most MAX_BATCH creates per synced write batch) rather
# than by the two cores all of them share here. `loadgen create --spread-shards` drives each
# cluster in turn, ROUNDS times, THREADS threads of DEPTH requests for DURATION each run,
# and the script prints each run's aggregate and per-shard rates, then the medians' ratio.
#   ./bench/shards.sh                           # MAX_BATCH=8 THREADS=12 DEPTH=4 DURATION=10s ROUNDS=3
#   MAX_BATCH=8192 ./bench/shards.sh             # default batching: the cores bind, not the design
# SYNC_LATENCY=5ms: every server's commits take at least that long to sync (the hidden
# benchmark hook --inject-sync-latency), as if each shard had a disk of its own with that
# sync time: on one machine's one disk, the shards are then bound each by its "own" device,
# as the issue's commit-bound shards are, rather than by the disk and cores they share.
#   SYNC_LATENCY=5ms ./bench/shards.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
MAX_BATCH="${MAX_BATCH:-8}"
THREADS="${THREADS:-12}"
DEPTH="${DEPTH:-4}"
DURATION="${DURATION:-10s}"
ROUNDS="${ROUNDS:-3}"
SYNC_LATENCY="${SYNC_LATENCY:-}"
device_args=()
[ -n "$SYNC_LATENCY" ] && device_args=(--inject-sync-latency "$SYNC_LATENCY")
command -v etcd >/dev/null || { echo "shards.sh: needs etcd (Debian etcd-server)" >&2; exit 1; }
[ -n "${BIN_PREBUILT:-}" ] || cargo build --release --workspace -q
cluster_scratch shards


# Starts cluster $1 with $2 shards; sets SEED to one of its servers.
start_cluster() {
  local name=$1 shards=$2 shard log
  "$BIN/mds" cluster init --etcd "$ETCD_URL" --cluster "$name" --shards "$shards" \
    --data-root "$work/$name" >/dev/null
  for shard in $(seq 0 $((shards - 1))); do
    log="$work/$name-$shard.log"
    "$BIN/mds" serve --etcd "$ETCD_URL" --cluster "$name" --shard "$shard" \
      --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --partitions 1 \
      --max-batch "$MAX_BATCH" "${device_args[@]}" >"$log" 2>&1 &
    pids+=($!)
    wait_for_mds "$log"
    for _ in $(seq 1 300); do grep -q "mds serving" "$log" && break; sleep 0.1; done
    SEED=$MDS_ADDR
  done
}
start_cluster one 1
one=$SEED
start_cluster three 3
three=$SEED
sleep 0.5 # each server's watch has seen the others' claims

echo "# shards.sh: MAX_BATCH=$MAX_BATCH SYNC_LATENCY=${SYNC_LATENCY:-none} THREADS=$THREADS DEPTH=$DEPTH DURATION=$DURATION ROUNDS=$ROUNDS, $(nproc) cores ($(date -u +%F))"
# One run against $1; prints its line and appends the aggregate rate to file $2.
run() {
  local seed=$1 out=$2 json
  json=$(mktemp "$work/report.XXXXXX.json")
  "$BIN/loadgen" create --server "$seed" --spread-shards --threads "$THREADS" \
    --depth "$DEPTH" --duration "$DURATION" --dir "/r$RANDOM$RANDOM" --quiet --json "$json" \
    >/dev/null
  python3 - "$json" "$out" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
parts = ", ".join(f"shard {s} {p['rate_per_sec']:.0f}/s" for s, p in sorted(r["shards"].items()))
s = r["server"] or {}
print(f"  {r['rate_per_sec']:9.0f} creates/s  ({parts}; {s.get('ops_per_commit', 0):.1f} per commit)")
open(sys.argv[2], "a").write(f"{r['rate_per_sec']}\n")
EOF
}
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round: 1 shard"
  run "$one" "$work/one.rates"
  echo "round $round: 3 shards"
  run "$three" "$work/three.rates"
done
python3 - "$work/one.rates" "$work/three.rates" <<'EOF'
import statistics, sys
one = statistics.median(float(x) for x in open(sys.argv[1]))
three = statistics.median(float(x) for x in open(sys.argv[2]))
print(f"median: 1 shard {one:.0f} creates/s, 3 shards {three:.0f} creates/s: {three / one:.2f}x")
EOF
kill -TERM "${pids[@]:1}"
for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
for name in one three; do "$BIN/mds" fsck --cluster "$work/$name" 2>&1 | tail -1; done
