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
