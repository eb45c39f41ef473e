#!/usr/bin/env bash
# The kill of one shard's owner under load on every shard, RUNS times per `--ack` mode: one
# etcd (Debian's etcd-server, data on tmpfs), a three-shard cluster with lease TTL TTL_S and a
# standby, every server `--partitions 1`. Each run drives all three shards with `loadgen
# create --spread-shards` (THREADS threads of DEPTH, DURATION, every acknowledged path in its
# --ack-log), SIGKILLs shard 1's owner KILL_AT in, and meanwhile reads the standby's
# /metrics every 20 ms until it has answered a create (loadgen's resends and new creates, once
# its connections followed shard 1 there): bench/failover_watch.py. It prints, per run:
#   - the time from the kill to that first acknowledged create on shard 1 (the issue's ≤ 5 s);
#   - the other shards' create rate from the kill to that moment against their rate in the
#     2 s before it, from their servers' mds_requests_total (the issue's ≥ 80%);
#   - loadgen's exit, its errors (an EEXIST of its own name would be a create done twice),
#     and how many acknowledged paths are missing afterwards (each directory listed).
# The killed server comes back as the next run's standby. At the end the servers stop with
# SIGTERM and `mds fsck --cluster` checks every store.
# FOLLOW=1: every standby follows shard 1 (`--follow 1`, a warm standby) and has loaded it
# before the run starts; each run says whether its takeover was warm (followed, not loaded).
#   ./bench/failover-shards.sh                    # RUNS=10 TTL_S=3 ACKS="commit early"
#   RUNS=2 ACKS=early ./bench/failover-shards.sh
#   FOLLOW=1 ./bench/failover-shards.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
RUNS="${RUNS:-10}"
TTL_S="${TTL_S:-3}"
ACKS="${ACKS:-commit early}"
THREADS="${THREADS:-6}"
DEPTH="${DEPTH:-4}"
DURATION="${DURATION:-12}"
KILL_AT="${KILL_AT:-4}"
FOLLOW="${FOLLOW:-0}"
standby_args=(--standby)
[ "$FOLLOW" = 1 ] && standby_args+=(--follow 1)
command -v etcd >/dev/null || { echo "failover-shards.sh: needs etcd (Debian etcd-server)" >&2; exit 1; }

cluster_scratch failover-shards


# Starts `mds serve --etcd` with "$@" (--shard N or --standby) logging to $log; sets
# SERVER_PID, SERVER_ADDR and SERVER_METRICS.
start_server() {
  "$BIN/mds" serve --etcd "$ETCD_URL" "$@" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 1 >"$log" 2>&1 &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  wait_for_mds "$log"
  SERVER_ADDR=$MDS_ADDR SERVER_METRICS=$MDS_METRICS
}

echo "# failover-shards.sh: 3 shards + a standby, lease TTL ${TTL_S} s, $RUNS runs per ack mode," \
  "loadgen --spread-shards $THREADS x $DEPTH for ${DURATION} s, shard 1's owner SIGKILLed ${KILL_AT} s in" \
  "($(nproc) cores, $(date -u +%F))"
for ack in $ACKS; do
  "$BIN/mds" cluster init --etcd "$ETCD_URL" --cluster "fs-$ack" --shards 3 \
    --lease-ttl "$TTL_S" --data-root "$work/stores-$ack" >/dev/null
  declare -A addr=() metrics=() pid=()
  for shard in 0 1 2; do
    log="$work/$ack-owner-$shard.log"; start_server --cluster "fs-$ack" --shard "$shard" --ack "$ack"
    addr[$shard]=$SERVER_ADDR metrics[$shard]=$SERVER_METRICS pid[$shard]=$SERVER_PID
    for _ in $(seq 1 300); do grep -q "mds serving" "$log" && break; sleep 0.1; done
  done
  log="$work/$ack-standby-0.log"; start_server --cluster "fs-$ack" "${standby_args[@]}" --ack "$ack"
  standby=($SERVER_PID "$SERVER_ADDR" "$SERVER_METRICS" "$log")
  sleep 1 # every watch lists every server
  for run in $(seq 1 "$RUNS"); do
    if [ "$FOLLOW" = 1 ]; then
      # The standby has loaded shard 1 (a store grown by the runs before) and follows it.
      for _ in $(seq 1 1200); do grep -q "shard 1 loaded; following" "${standby[3]}" && break; sleep 0.1; done
    fi
    takeover_log=${standby[3]}
    dir="/$ack-$run"
    acked="$work/acked-$ack-$run" report="$work/loadgen-$ack-$run.txt"
    "$BIN/loadgen" create --server "${addr[0]}" --spread-shards --threads "$THREADS" \
      --depth "$DEPTH" --duration "${DURATION}s" --dir "$dir" --reconnect-timeout 30s \
      --ack-log "$acked" --quiet >"$report" 2>&1 &
    load_pid=$!
    python3 bench/failover_watch.py "$KILL_AT" "${pid[1]}" "${metrics[0]}" "${metrics[2]}" \
      "${standby[2]}" >"$work/watch"
    load_ok=0; wait "$load_pid" && load_ok=1
    # The standby serves shard 1 now; the killed server comes back as the next standby.
    addr[1]=${standby[1]} metrics[1]=${standby[2]} pid[1]=${standby[0]}
    log="$work/$ack-standby-$run.log"; start_server --cluster "fs-$ack" "${standby_args[@]}" --ack "$ack"
    standby=($SERVER_PID "$SERVER_ADDR" "$SERVER_METRICS" "$log")
    # Every acknowledged path, listed directory by directory (mdsctl routes each to its shard).
    : >"$work/present"
    for d in $(sed 's|/[^/]*$||' "$acked" | sort -u); do
      "$BIN/mdsctl" --server "${addr[0]}" ls "$d" | sed "s|^|$d/|" >>"$work/present"
    done
    missing=$(comm -23 <(sort "$acked") <(sort "$work/present") | wc -l)
    errors=$(grep -m1 '^errors: ' "$report" || echo "errors: no report")
    warm=$(grep -c "namespace taken over warm" "$takeover_log" || true)
    echo "--ack $ack run $run: $(cat "$work/watch"); loadgen ok=$load_ok," \
      "$(wc -l <"$acked") acknowledged, $missing missing, $errors, warm=$warm"
  done
done
kill -TERM "${pids[@]:1}" 2>/dev/null || true
for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
for ack in $ACKS; do "$BIN/mds" fsck --cluster "$work/stores-$ack" 2>&1 | tail -1; done
