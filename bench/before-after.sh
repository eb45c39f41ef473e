#!/usr/bin/env bash
# Two builds of mds + loadgen side by side in one run, for "no regression beyond noise":
# for each point (threads x depth) each build runs twice, interleaved old, new, new, old, each
# time a fresh server on a fresh store with its own loadgen; prints creates/s per run and the
# new/old ratio of the means, and the server's CPU time per create (user + system, from
# /proc), which is less noisy than the rate on a shared machine, and loadgen's (from bash's
# `times` around it). Build the old tree into its own target dir first, e.g.
#   git worktree add /var/tmp/mds-old <commit>
#   (cd /var/tmp/mds-old && CARGO_TARGET_DIR=/var/tmp/mds-target-old cargo build --release -p mds -p loadgen)
#   OLD=/var/tmp/mds-target-old/release NEW=/var/tmp/mds-target/release ./bench/before-after.sh
# OLD_ARGS and NEW_ARGS add server flags to one side, so one build can be compared with
# itself under two settings, e.g. commit-on-share off against on:
#   OLD=/var/tmp/mds-target/release OLD_ARGS="--cos off" NEW_ARGS="--cos on" ./bench/before-after.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
OLD="${OLD:?set OLD to the release directory of the old build}"
NEW="${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}"
DURATION="${DURATION:-5s}"
POINTS="${POINTS:-1x1 8x1 64x1 64x16}"
OLD_ARGS="${OLD_ARGS:-}"
# Extra loadgen flags for both sides, e.g. LOADGEN_ARGS="--shared-dir"; OLD_LOADGEN_ARGS and
# NEW_LOADGEN_ARGS for one side (a TLS server needs a client with --tls-ca).
LOADGEN_ARGS="${LOADGEN_ARGS:-}"
OLD_LOADGEN_ARGS="${OLD_LOADGEN_ARGS:-}"
NEW_LOADGEN_ARGS="${NEW_LOADGEN_ARGS:-}"
# A command prefix for loadgen on both sides, e.g. LOADGEN_PREFIX="setpriv --reuid=1000
# --regid=1000 --clear-groups" to send a non-root user's credentials (root passes every
# permission check, so a permission-cost figure needs another user).
LOADGEN_PREFIX="${LOADGEN_PREFIX:-}"
NEW_ARGS="${NEW_ARGS:-}"

# CPU seconds (user + system) of the waited-for children in a `times` output (file $1).
children_cpu() {
  sed -n 2p "$1" | sed -E 's/([0-9]+)m([0-9.]+)s/\1 \2/g' |
    awk '{printf "%.3f", $1 * 60 + $2 + $3 * 60 + $4}'
}

# One run: a fresh server of build $1 on a fresh store, loadgen of the same build; prints
# "rate cpu_us_per_create loadgen_cpu_us_per_create".
run() {
  local bin=$1 threads=$2 depth=$3 args=$4 lgargs=$5
  local data log pid addr line creates ticks
  data=$(mktemp -d /var/tmp/mds-ba.XXXXXX)
  log="$data.log"
  # shellcheck disable=SC2086 # $args is a list of flags
  "$bin/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 $args 2>"$log" &
  pid=$!
  wait_for_mds "$log"
  addr=$MDS_ADDR
  local before after
  # `times` must run in this shell, not a command substitution's: it reports its own shell's.
  times >"$data.times"
  before=$(children_cpu "$data.times")
  # shellcheck disable=SC2086 # a list of flags
  line=$($LOADGEN_PREFIX "$bin/loadgen" create --server "$addr" --threads "$threads" --depth "$depth" \
    --duration "$DURATION" --quiet $LOADGEN_ARGS $lgargs | grep '^Rate:')
  # loadgen (and the grep beside it) was waited for inside the command substitution.
  times >"$data.times"
  after=$(children_cpu "$data.times")
  # utime + stime of the server, in clock ticks (fields 14 and 15 after the command name).
  ticks=$(sed -E 's/.*\) //' "/proc/$pid/stat" | awk '{print $12 + $13}')
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$data" "$log" "$data.times"
  creates=$(echo "$line" | sed -E 's/.* threads ([0-9]+) creates.*/\1/')
  echo "$line" | awk -v t="$ticks" -v c="$creates" -v hz="$(getconf CLK_TCK)" \
    -v lg="$(awk -v a="$after" -v b="$before" 'BEGIN{print a - b}')" \
    '{printf "%s %.2f %.2f\n", $2, t / hz * 1e6 / c, lg * 1e6 / c}'
}

# ROUNDS repeats the interleaved old, new, new, old block per point; more rounds narrow the
# ratio's spread (it prints the mean ratio and the spread of per-round ratios).
ROUNDS="${ROUNDS:-1}"
printf '%-7s %-7s %-12s %-12s %-8s %-10s %-10s %-8s %-10s %-10s %s\n' point rounds "old c/s" \
  "new c/s" new/old "old cpu/c" "new cpu/c" new/old "old lg/c" "new lg/c" new/old
for point in $POINTS; do
  threads=${point%x*}; depth=${point#*x}
  results=()
  for _ in $(seq 1 "$ROUNDS"); do
    o1=$(run "$OLD" "$threads" "$depth" "$OLD_ARGS" "$OLD_LOADGEN_ARGS")
    n1=$(run "$NEW" "$threads" "$depth" "$NEW_ARGS" "$NEW_LOADGEN_ARGS")
    n2=$(run "$NEW" "$threads" "$depth" "$NEW_ARGS" "$NEW_LOADGEN_ARGS")
    o2=$(run "$OLD" "$threads" "$depth" "$OLD_ARGS" "$OLD_LOADGEN_ARGS")
    results+=("$o1 $o2 $n1 $n2")
  done
  # One line per point: means over every run, then each round's rate ratio.
  python3 - "$point" "${results[@]}" <<'PY'
import statistics, sys
point, rounds = sys.argv[1], [list(map(float, r.split())) for r in sys.argv[2:]]
# each round: o1 oc1 ol1 o2 oc2 ol2 n1 nc1 nl1 n2 nc2 nl2 (rate, server and loadgen CPU/create)
old = [r[0] for r in rounds] + [r[3] for r in rounds]
new = [r[6] for r in rounds] + [r[9] for r in rounds]
oc = [r[1] for r in rounds] + [r[4] for r in rounds]
nc = [r[7] for r in rounds] + [r[10] for r in rounds]
ol = [r[2] for r in rounds] + [r[5] for r in rounds]
nl = [r[8] for r in rounds] + [r[11] for r in rounds]
mean = statistics.mean
per_round = [(r[6] + r[9]) / (r[0] + r[3]) for r in rounds]
print(f"{point:<7} {len(rounds):<7} {mean(old):>11.0f} {mean(new):>11.0f}  {mean(new) / mean(old):<8.3f} "
      f"{mean(oc):>9.2f} {mean(nc):>9.2f}  {mean(nc) / mean(oc):<8.3f} "
      f"{mean(ol):>9.2f} {mean(nl):>9.2f}  {mean(nl) / mean(ol):.3f}")
print("        rounds' rate ratios: " + " ".join(f"{x:.3f}" for x in per_round)
      + (f"  (stdev {statistics.stdev(per_round):.3f})" if len(per_round) > 1 else ""))
print("        runs old: " + " ".join(f"{x:.0f}" for x in old) + "  new: " + " ".join(f"{x:.0f}" for x in new))
PY
done
