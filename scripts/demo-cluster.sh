#!/usr/bin/env bash
# A cluster end to end, on loopback: one etcd (Debian's etcd-server, data on tmpfs), `mds
# cluster init` of SHARDS shards, one `mds serve --etcd --shard N` per shard and a standby,
# then `loadgen create --spread-shards` through shard 0's server (each thread on a shard, in a
# directory made there), which prints the rate per shard and in total; `mds cluster status`;
# a SIGTERM of every server and `mds fsck --cluster` of the stores. Everything it starts is
# stopped when it ends, and its stores are removed (KEEP=1 keeps them, and says where).
#   ./scripts/demo-cluster.sh                       # SHARDS=3 THREADS=12 DEPTH=4 DURATION=10
#   DURATION=3 ./scripts/demo-cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh etcd-server
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
# --workspace: a build of fewer packages resolves RocksDB's features apart and compiles it
# again (docs/DEVELOPING.md).
[ -n "${BIN_PREBUILT:-}" ] || cargo build --release --workspace --bins -q
BIN="$CARGO_TARGET_DIR/release"
SHARDS="${SHARDS:-3}"
THREADS="${THREADS:-12}"
DEPTH="${DEPTH:-4}"
DURATION="${DURATION:-10}"
# shellcheck source=bench/lib.sh
. bench/lib.sh

cluster_scratch demo-cluster

echo "demo-cluster: etcd on $ETCD_URL"
"$BIN/mds" cluster init --etcd "$ETCD_URL" --shards "$SHARDS" --data-root "$work/stores"

serve() {
  local log=$1
  shift
  "$BIN/mds" serve --etcd "$ETCD_URL" "$@" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 1 >"$log" 2>&1 &
  pids+=($!)
  wait_for_mds "$log"
}
for shard in $(seq 0 $((SHARDS - 1))); do
  serve "$work/shard-$shard.log" --shard "$shard"
  for _ in $(seq 1 300); do grep -q "mds serving" "$work/shard-$shard.log" && break; sleep 0.1; done
  grep -q "mds serving" "$work/shard-$shard.log" || { cat "$work/shard-$shard.log" >&2; exit 1; }
  [ "$shard" = 0 ] && seed=$MDS_ADDR
  echo "demo-cluster: shard $shard served on $MDS_ADDR (metrics $MDS_METRICS)"
done
serve "$work/standby.log" --standby
echo "demo-cluster: a standby on $MDS_ADDR, waiting for a shard without owner"
sleep 1 # every server's watch has seen every claim (etcd's watch answers within milliseconds)

"$BIN/mds" cluster status --etcd "$ETCD_URL"
echo
"$BIN/loadgen" create --server "$seed" --spread-shards --threads "$THREADS" --depth "$DEPTH" \
  --duration "${DURATION}s" --dir "/demo-$(date +%s)" --quiet

kill -TERM "${pids[@]:1}"
for p in "${pids[@]:1}"; do wait "$p" || { echo "demo-cluster: a server stopped badly" >&2; exit 1; }; done
"$BIN/mds" fsck --cluster "$work/stores"
