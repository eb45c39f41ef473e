#!/usr/bin/env bash
# A remote directory's cost against a local one, in one run: one etcd (Debian's etcd-server,
# data on tmpfs), a two-shard cluster, and `client/examples/mkdir_rate.rs` making COUNT
# directories in the root with MKDIR, then COUNT with MKDIR_REMOTE on shard 1, from CLIENTS
# tasks each one request at a time. A remote mkdir is two commits in a row (the child's
# shard's, then the parent's) and two round trips between the servers.
#   ./bench/remote-mkdir.sh                  # COUNT=2000 CLIENTS=4
#   COUNT=5000 CLIENTS=16 ./bench/remote-mkdir.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
COUNT="${COUNT:-2000}"
CLIENTS="${CLIENTS:-4}"
command -v etcd >/dev/null || { echo "remote-mkdir.sh: needs etcd (Debian etcd-server)" >&2; exit 1; }
cargo build --release --workspace --examples -q
cluster_scratch remote-mkdir

etcd_url=$ETCD_URL
"$BIN/mds" cluster init --etcd "$etcd_url" --shards 2 --data-root "$work/stores" >/dev/null

addrs=() servers=()
for shard in 0 1; do
  log="$work/shard-$shard.log"
  "$BIN/mds" serve --etcd "$etcd_url" --shard "$shard" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 --partitions 1 >"$log" 2>&1 &
  pids+=($!) servers+=($!)
  wait_for_mds "$log"
  for _ in $(seq 1 300); do grep -q "mds serving" "$log" && break; sleep 0.1; done
  addrs+=("$MDS_ADDR")
done
sleep 0.5 # each server's watch has seen the other's claim
echo "# remote-mkdir.sh: COUNT=$COUNT CLIENTS=$CLIENTS, 2 shards, 1 partition each ($(date -u +%F))"
"$CARGO_TARGET_DIR/release/examples/mkdir_rate" "${addrs[0]}" "$COUNT" "$CLIENTS" 1
kill -TERM "${servers[@]}"
for p in "${servers[@]}"; do wait "$p" 2>/dev/null || true; done
"$BIN/mds" fsck --cluster "$work/stores" 2>&1 | tail -1
