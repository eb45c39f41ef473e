#!/usr/bin/env bash
# How long a shard is without a server after its owner dies, and after a planned handover,
# measured RUNS times each: one etcd (Debian's etcd-server, data on tmpfs), a one-shard
# cluster with lease TTL TTL_S, an owner and a standby. Each run creates a file through the
# owner, then either SIGKILLs it or SIGTERMs it, and tries `mdsctl create` on the standby's
# address every 20 ms until one is acknowledged: the time from the signal to that
# acknowledgement is the figure (the client's view: the lease's expiry, the standby's claim,
# the store's open and recovery, the connect). The killed process then comes back as the
# next standby, so the runs alternate between the two.
# INODES=N: the shard starts as a store of N inodes (journal/examples/build_store.rs, built
# here), so that each takeover opens a large shard. FOLLOW=1: every standby follows the shard
# (`--follow 0`, a warm standby) and has loaded it before the signal; each run says whether
# its takeover was warm. LOAD=0 skips the runs under load.
#   ./bench/failover.sh                 # RUNS=10 TTL_S=3
#   RUNS=5 TTL_S=5 ./bench/failover.sh
#   INODES=1000000 RUNS=3 LOAD=0 ./bench/failover.sh; FOLLOW=1 INODES=1000000 RUNS=3 LOAD=0 ./bench/failover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
RUNS="${RUNS:-10}"
TTL_S="${TTL_S:-3}"
INODES="${INODES:-0}"
FOLLOW="${FOLLOW:-0}"
LOAD="${LOAD:-1}"
standby_args=(--standby)
[ "$FOLLOW" = 1 ] && standby_args+=(--follow 0)
command -v etcd >/dev/null || { echo "failover.sh: needs etcd (Debian etcd-server)" >&2; exit 1; }

cluster_scratch failover

etcd_url=$ETCD_URL
"$BIN/mds" cluster init --etcd "$etcd_url" --shards 1 --lease-ttl "$TTL_S" --data-root "$work/stores" >/dev/null
if [ "$INODES" -gt 0 ]; then
  # A store made outside a cluster is shard 0 of a one-shard cluster: its first owner claims it.
  cargo build --release -q --workspace --examples # -p journal alone would rebuild RocksDB
  "$BIN/examples/build_store" --data "$work/stores/shard-0" --inodes "$INODES" >/dev/null
fi

# Starts `mds serve --etcd` with $1 (--shard 0 or --standby), logging to $2; sets SERVER_PID
# and SERVER_ADDR.
start_server() {
  "$BIN/mds" serve --etcd "$etcd_url" "$@" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 1 >"$log" 2>&1 &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  wait_for_mds "$log"
  SERVER_ADDR=$MDS_ADDR
}

now_ms() { date +%s%3N; }
log="$work/owner.log"; start_server --shard 0
owner_pid=$SERVER_PID owner_addr=$SERVER_ADDR owner_log=$log
for _ in $(seq 1 300); do grep -q "mds serving" "$owner_log" && break; sleep 0.1; done
log="$work/standby-0.log"; start_server "${standby_args[@]}"
standby_pid=$SERVER_PID standby_addr=$SERVER_ADDR standby_log=$log

echo "# failover.sh: lease TTL ${TTL_S} s, $RUNS runs per signal, a shard of $INODES inodes" \
  "at start, $([ "$FOLLOW" = 1 ] && echo "standbys following it (--follow 0)" || echo "cold standbys") ($(date -u +%F))"
for signal in KILL TERM; do
  figures=() warm=0
  for run in $(seq 1 "$RUNS"); do
    "$BIN/mdsctl" --server "$owner_addr" create "/before-$signal-$run" >/dev/null
    sleep 0.5 # the standby is waiting on its watch
    if [ "$FOLLOW" = 1 ]; then
      for _ in $(seq 1 1200); do grep -q "shard 0 loaded; following" "$standby_log" && break; sleep 0.1; done
    fi
    takeover_log=$standby_log
    sent=$(now_ms)
    kill -s "$signal" "$owner_pid"
    until "$BIN/mdsctl" --server "$standby_addr" create "/after-$signal-$run" >/dev/null 2>&1; do
      sleep 0.02
    done
    figures+=($(( $(now_ms) - sent )))
    wait "$owner_pid" 2>/dev/null || true
    "$BIN/mdsctl" --server "$standby_addr" stat "/before-$signal-$run" >/dev/null
    grep -q "namespace taken over warm" "$takeover_log" && warm=$((warm + 1))
    # The standby owns the shard now; the old owner comes back as the next standby.
    owner_pid=$standby_pid owner_addr=$standby_addr
    log="$work/standby-$signal-$run.log"; start_server "${standby_args[@]}"
    standby_pid=$SERVER_PID standby_addr=$SERVER_ADDR standby_log=$log
  done
  sorted=$(printf '%s\n' "${figures[@]}" | sort -n | tr '\n' ' ')
  echo "SIG$signal: first acknowledged create on the standby after (ms, sorted): $sorted;" \
    "taken over warm: $warm of $RUNS"
done
[ "$LOAD" = 1 ] || exit 0

# Under load: loadgen creates through the owner (4 threads x depth 4, every acknowledged path
# in its --ack-log); the owner is SIGKILLed 3 s in; loadgen's connections follow the shard to
# the standby and go on. Afterwards every acknowledged path must be there, and loadgen must
# have seen no error (an EEXIST of its own name would be one: a create done twice).
for ack in commit early; do
  pkill -9 -f "mds serve --etcd $etcd_url" 2>/dev/null || true
  sleep 0.5
  rm -rf "$work/stores"
  "$BIN/mds" cluster init --etcd "$etcd_url" --cluster "load-$ack" --shards 1 \
    --lease-ttl "$TTL_S" --data-root "$work/stores-$ack" >/dev/null
  log="$work/load-owner-$ack.log"; start_server --cluster "load-$ack" --shard 0 --ack "$ack"
  owner_pid=$SERVER_PID owner_addr=$SERVER_ADDR
  for _ in $(seq 1 300); do grep -q "mds serving" "$log" && break; sleep 0.1; done
  log="$work/load-standby-$ack.log"; start_server --cluster "load-$ack" --standby --ack "$ack"
  standby_addr=$SERVER_ADDR
  sleep 1 # the owner's watch lists the standby
  "$BIN/loadgen" create --server "$owner_addr" --threads 4 --depth 4 --duration 8s \
    --reconnect-timeout 30s --ack-log "$work/acked-$ack" --quiet >"$work/loadgen-$ack.txt" 2>&1 &
  load_pid=$!
  sleep 3
  kill -9 "$owner_pid"
  load_ok=0; wait "$load_pid" && load_ok=1
  acked=$(wc -l <"$work/acked-$ack")
  # Every acknowledged path, listed directory by directory on the new owner.
  missing=0
  for d in $(sed 's|/[^/]*$||' "$work/acked-$ack" | sort -u); do
    "$BIN/mdsctl" --server "$standby_addr" ls "$d" | sed "s|^|$d/|" >>"$work/present-$ack"
  done
  missing=$(comm -23 <(sort "$work/acked-$ack") <(sort "$work/present-$ack") | wc -l)
  echo "under load, --ack $ack: loadgen exit ok=$load_ok, $acked creates acknowledged, $missing missing after the failover;" \
    "$(grep -m1 -o 'Rate: .*' "$work/loadgen-$ack.txt" || true)"
  grep -iE "reconnect|down" "$work/loadgen-$ack.txt" | head -2 || true
  grep -iE "error|EEXIST" "$work/loadgen-$ack.txt" | head -3 || true
done
