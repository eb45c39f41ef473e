#!/usr/bin/env bash
# What 1 GiB of file data costs through mdsmount, counted as well as timed, for one or two
# mdsmount builds on one server whose object store is its default local directory, beside the
# same on the directory that store is in: `dd` of SIZE_MIB (1024) in 1 MiB writes then fsync,
# and `dd` reading it back, the kernel's caches dropped before each. Per run it records the
# elapsed time, the CPU time the whole machine was busy (/proc/stat: the mount, the kernel's
# copies, dd, the server) and its context switches (perf stat -a); ROUNDS (5) rounds, each
# running the systems in a turned order. Prints per system and direction the median MiB/s,
# the median of each round's ratio to the directory, and the median CPU-seconds and context
# switches per GiB. The machine's speed swings several-fold within minutes; the counted
# figures hold still. Needs root (mounts, drop_caches) and perf.
#   ./bench/data-cost.sh                                  # the mdsmount of BIN
#   MOUNT2=/path/to/older/mdsmount ./bench/data-cost.sh   # and another build beside it
#   MOUNT2_ARGS="-o read_ahead_kb=0" ./bench/data-cost.sh # one build under two settings
# (MOUNT2 defaults to MOUNT when MOUNT2_ARGS is given; MOUNT_ARGS for the first.)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --workspace >&2
  BIN="$CARGO_TARGET_DIR/release"
fi
MOUNT="${MOUNT:-$BIN/mdsmount}"
MOUNT_ARGS="${MOUNT_ARGS:-}"
MOUNT2_ARGS="${MOUNT2_ARGS:-}"
MOUNT2="${MOUNT2:-${MOUNT2_ARGS:+$MOUNT}}"
ROUNDS="${ROUNDS:-5}"
SIZE_MIB="${SIZE_MIB:-1024}"
command -v perf >/dev/null || { echo "data-cost: needs perf" >&2; exit 2; }

WORK="$(mktemp -d /var/tmp/data-cost.XXXXXX)"
SERVER=""
cleanup() {
  set +e
  for m in "$WORK"/mnt*; do
    if grep -qs " $m " /proc/mounts; then
      timeout -k 5 30 fusermount3 -u "$m" || umount -l "$m"
    fi
  done
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN/mds" serve --data "$WORK/data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$WORK/server.log" 2>&1 &
SERVER=$!
wait_for_mds "$WORK/server.log"
SYSTEMS=(directory)
mkdir -p "$WORK/directory"
mount_one() { # name binary options
  mkdir -p "$WORK/mnt-$1"
  # shellcheck disable=SC2086 # the options are words
  "$2" "$MDS_ADDR" "$WORK/mnt-$1" --log-file "$WORK/$1.log" $3
  SYSTEMS+=("$1")
}
mount_one mdsmount "$MOUNT" "$MOUNT_ARGS"
if [ -n "$MOUNT2" ]; then mount_one mdsmount2 "$MOUNT2" "$MOUNT2_ARGS"; fi
place() { if [ "$1" = directory ]; then echo "$WORK/directory"; else echo "$WORK/mnt-$1"; fi; }

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
# One measured command: prints "seconds cpu-seconds context-switches".
measure() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
  local b0 b1 t0 t1 switches
  b0="$(busy)"
  t0="$(date +%s.%N)"
  switches="$(perf stat -a -x, -e context-switches -- "$@" 2>&1 >/dev/null | awk -F, '/context-switches/{print $1}')"
  t1="$(date +%s.%N)"
  b1="$(busy)"
  echo "$t1 $t0 $b1 $b0 $switches" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.4f %.3f %d\n", $1-$2, ($3-$4)/hz, $5}'
}

RESULTS="$WORK/results"
: >"$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
  n=${#SYSTEMS[@]}
  for k in $(seq 0 $((n - 1))); do
    s="${SYSTEMS[$(((round + k) % n))]}"
    f="$(place "$s")/f"
    echo "$round $s write $(measure dd if=/dev/zero of="$f" bs=1M count="$SIZE_MIB" conv=fsync status=none)" >>"$RESULTS"
    echo "$round $s read $(measure dd if="$f" of=/dev/null bs=1M status=none)" >>"$RESULTS"
    rm -f "$f"
  done
done

echo "# data-cost.sh, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'): ROUNDS=$ROUNDS SIZE_MIB=$SIZE_MIB, MOUNT=$MOUNT $MOUNT_ARGS${MOUNT2:+ MOUNT2=$MOUNT2 $MOUNT2_ARGS}"
python3 - "$RESULTS" "$SIZE_MIB" "${SYSTEMS[@]}" <<'EOF'
import statistics, sys
path, mib, systems = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}
for line in open(path):
    rnd, system, way, secs, cpu, switches = line.split()
    runs[(int(rnd), system, way)] = (float(secs), float(cpu), int(switches))
gib = mib / 1024
for way in ("write", "read"):
    for system in systems:
        mine = {r: v for (r, s, w), v in runs.items() if s == system and w == way}
        rates = [mib / v[0] for v in mine.values()]
        ratios = [runs[(r, "directory", way)][0] / v[0] for r, v in mine.items()]
        cpu = statistics.median(v[1] / gib for v in mine.values())
        sw = statistics.median(v[2] / gib for v in mine.values())
        print(f"{way:5} {system:10} {statistics.median(rates):6.0f} MiB/s "
              f"({min(rates):.0f}-{max(rates):.0f}; {statistics.median(ratios):.2f}x the directory), "
              f"{cpu:.2f} CPU-s and {sw:,.0f} context switches per GiB")
EOF
