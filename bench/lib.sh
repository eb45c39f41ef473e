# shellcheck shell=bash
# Shared by the bench scripts (sourced, not run): waiting for a server they started.

# Waits until the `mds serve` logging to $1 listens (up to 30 s), then sets MDS_ADDR (its
# client address) and MDS_METRICS (its /metrics address) from that log. Fails, with the
# log, if it never does.
wait_for_mds() {
  local log=$1
  for _ in $(seq 1 300); do
    grep -aqs "listening on" "$log" && break
    sleep 0.1
  done
  # `|| true`: under `set -e -o pipefail` a grep finding nothing would end the caller here,
  # before the message below.
  # The first line of each: a cluster's server logs its addresses once bound and again when
  # it serves.
  MDS_ADDR=$({ grep -ao 'listening on [0-9.:]*' "$log" || true; } | awk 'NR == 1 {print $3}')
  # shellcheck disable=SC2034 # read by the scripts that source this
  MDS_METRICS=$({ grep -ao 'metrics endpoint on [0-9.:]*' "$log" || true; } | awk 'NR == 1 {print $4}')
  if [ -z "$MDS_ADDR" ]; then
    echo "mds did not start listening; its log:" >&2
    cat "$log" >&2
    return 1
  fi
}

# Starts one etcd (Debian's etcd-server) on free loopback ports with its data in $1 (tmpfs,
# e.g. /dev/shm), logging to $2; sets ETCD_URL and ETCD_PID, and returns once it serves.
start_etcd() {
  local dir=$1 log=$2 client peer
  client=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ETCD_URL="127.0.0.1:$client"
  etcd --name bench --data-dir "$dir" \
    --listen-client-urls "http://$ETCD_URL" --advertise-client-urls "http://$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "bench=http://127.0.0.1:$peer" >"$log" 2>&1 &
  ETCD_PID=$!
  for _ in $(seq 1 100); do grep -q "ready to serve client requests" "$log" && return 0; sleep 0.1; done
  echo "etcd did not start; its log:" >&2
  cat "$log" >&2
  return 1
}

# The scratch of a script that runs a cluster: WORK (/var/tmp/mds-$1.*) for stores and logs,
# an etcd on tmpfs (start_etcd) whose pid starts the array `pids`, and a trap that, however the
# script exits, SIGKILLs every pid in `pids` and removes both directories (KEEP=1 keeps WORK,
# and says where).
cluster_scratch() {
  work=$(mktemp -d "/var/tmp/mds-$1.XXXXXX")
  etcd_dir=$(mktemp -d "/dev/shm/mds-$1-etcd.XXXXXX")
  pids=()
  trap remove_cluster_scratch EXIT
  start_etcd "$etcd_dir" "$work/etcd.log"
  pids+=("$ETCD_PID")
}

remove_cluster_scratch() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$etcd_dir"
  if [ "${KEEP:-0}" = 1 ]; then echo "stores and logs kept in $work" >&2; else rm -rf "$work"; fi
}
