#!/usr/bin/env bash
# What one create costs a FUSE daemon, counted rather than timed: context switches and CPU
# time (perf stat -e context-switches,task-clock on the daemon's process) while one process
# makes FILES creates (open O_CREAT|O_EXCL + close) in a fresh directory. The figures are
# per create. Systems, in the order given by RUN (each may repeat, to see the spread):
#   mdsmount      MOUNT (the mdsmount of BIN by default) on a fresh `mds serve --ack ACK`
#                 (early by default); another mdsmount build to compare: MOUNT2
#   mdsmount2     MOUNT2 on the same server
#   fuse-ceiling  the no-op file system of mount/examples/fuse_ceiling.rs: what the kernel
#                 and fuser cost with nothing behind them
# The server on SERVER_CPU (0); the daemon and the creating process on LOAD_CPU (1). Needs
# root (mounts, perf).
#   BIN=/var/tmp/mds-target/release ./bench/mount-switches.sh
#   RUN="mdsmount mdsmount2 mdsmount mdsmount2" MOUNT2=/path/to/older/mdsmount ./bench/mount-switches.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
FILES="${FILES:-3000}"
ACK="${ACK:-early}"
RUN="${RUN:-fuse-ceiling mdsmount fuse-ceiling mdsmount}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --workspace --bins --examples >&2
  BIN="$CARGO_TARGET_DIR/release"
fi
MOUNT="${MOUNT:-$BIN/mdsmount}"
command -v perf >/dev/null || { echo "mount-switches: needs perf" >&2; exit 2; }

WORK="$(mktemp -d /var/tmp/mount-switches.XXXXXX)"
MNT="$WORK/mnt"
mkdir -p "$MNT"
SERVER=""
DAEMON=""
cleanup() {
  set +e
  if grep -qs " $MNT " /proc/mounts; then
    timeout -k 5 30 fusermount3 -u "$MNT" || umount -l "$MNT"
  fi
  for pid in $DAEMON $SERVER; do kill -TERM "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

server_addr() {
  if [ -z "$SERVER" ]; then
    MDS_LOG=info taskset -c "$SERVER_CPU" "$BIN/mds" serve --data "$WORK/data" --ack "$ACK" \
      --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$WORK/mds.log" &
    SERVER=$!
    wait_for_mds "$WORK/mds.log"
  fi
}

# One system's creates, counted; prints "system: switches/create cpu-us/create".
measure() {
  local sys=$1 dir
  case "$sys" in
    # Answered as the server's --ack says (older builds, as MOUNT2, always were).
    mdsmount) server_addr; taskset -c "$LOAD_CPU" "$MOUNT" "$MDS_ADDR" "$MNT" -f -o ack=server >"$WORK/daemon.log" 2>&1 & ;;
    mdsmount2) server_addr; taskset -c "$LOAD_CPU" "${MOUNT2:?MOUNT2 names the other build}" "$MDS_ADDR" "$MNT" -f >"$WORK/daemon.log" 2>&1 & ;;
    fuse-ceiling) taskset -c "$LOAD_CPU" "$BIN/examples/fuse_ceiling" "$MNT" >"$WORK/daemon.log" 2>&1 & ;;
    *) echo "mount-switches: unknown system $sys" >&2; exit 2 ;;
  esac
  DAEMON=$!
  for _ in $(seq 1 100); do grep -qs " $MNT " /proc/mounts && break; sleep 0.1; done
  dir="$MNT/d$RANDOM$RANDOM"
  mkdir "$dir"
  perf stat -e context-switches,task-clock -p "$DAEMON" -o "$WORK/stat" &
  local perf=$!
  sleep 0.3
  timeout -k 10 300 taskset -c "$LOAD_CPU" python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(os.path.join(d, "f%d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
' "$dir" "$FILES"
  kill -INT "$perf"
  wait "$perf" || true
  awk -v s="$sys" -v n="$FILES" '
    /context-switches/ { gsub(",", "", $1); cs = $1 }
    /task-clock/ { gsub(",", "", $1); ms = $1 }
    END { printf "%-14s %10.2f %12.1f\n", s, cs / n, ms * 1000 / n }' "$WORK/stat"
  timeout -k 5 30 fusermount3 -u "$MNT"
  wait "$DAEMON" || true
  DAEMON=""
}

echo "# mount-switches: $(date -u +%FT%TZ), $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null)"
echo "# one process, FILES=$FILES creates; mds --ack $ACK on CPU $SERVER_CPU; daemon and load on CPU $LOAD_CPU"
printf '%-14s %10s %12s\n' system "switches" "cpu-us"
for sys in $RUN; do measure "$sys"; done
