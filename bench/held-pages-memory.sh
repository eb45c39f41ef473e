#!/usr/bin/env bash
# What one client that asks for READDIR pages and never reads them costs a server while the
# pages wait for another client's commits (commit-on-share): for each build, a fresh server
# with one partition committing one mutation at a time (--max-batch 1, so those commits come
# slowly), a directory of 1000 files, a loadgen that keeps creating in it, and a client that
# sends 4096 READDIRs of it in one write and reads nothing. Prints the server's peak resident
# memory above what it had before that client came, and how many of the 4096 pages the
# server built (each a commit-on-share conflict, `mds_cos_conflicts_total{op="readdir"}`).
#   OLD=/var/tmp/bench-old NEW=/var/tmp/bench-new ./bench/held-pages-memory.sh
# (each a directory with that build's mds, loadgen and mdsctl). OLD_VERSION (default 7) is the
# protocol version the old build speaks.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
BUILDS=()
[ -n "${OLD:-}" ] && BUILDS+=("old=$OLD=${OLD_VERSION:-7}")
BUILDS+=("new=${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}=8")

status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

pid=""
writer=""
data=""
cleanup() {
  for p in $writer $pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ -n "$data" ]; then rm -rf "$data" "$data.log"; fi
}
trap cleanup EXIT

printf '%-5s %-12s %-12s %-14s %s\n' build "rss0 KiB" "peak KiB" "peak-rss0 KiB" "pages built"
for build in "${BUILDS[@]}"; do
  name=${build%%=*}; rest=${build#*=}; bin=${rest%=*}; version=${rest##*=}
  data=$(mktemp -d /var/tmp/mds-held.XXXXXX)
  "$bin/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 1 --max-batch 1 2>"$data.log" &
  pid=$!
  wait_for_mds "$data.log"
  "$bin/loadgen" create --server "$MDS_ADDR" --threads 4 --depth 16 --shared-dir --dir /held \
    --count 1000 --quiet >/dev/null
  ino=$("$bin/mdsctl" --server "$MDS_ADDR" -o json stat /held |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["inode"])')
  "$bin/loadgen" create --server "$MDS_ADDR" --threads 16 --depth 64 --shared-dir --dir /held \
    --duration 8s --quiet >/dev/null &
  writer=$!
  sleep 1
  before=$(status_kib "$pid" VmRSS)
  python3 - "$MDS_ADDR" "$ino" "$version" "$(dirname "$0")" <<'PY'
import socket, sys, time
sys.path.insert(0, sys.argv[4])
from wire import connect, readdir
host, port = sys.argv[1].rsplit(":", 1)
ino, version = int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect((host, int(port)))
s.sendall(connect(version))
s.recv(4096)  # Connected
asks = b"".join(readdir(10 + i, ino) for i in range(4096))
s.sendall(asks)
time.sleep(4)  # reading nothing
s.close()
PY
  peak=$(status_kib "$pid" VmHWM)
  pages=$(curl -s "http://$MDS_METRICS/metrics" |
    awk '/^mds_cos_conflicts_total\{op="readdir"\}/ {print $2}')
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  writer=""
  kill -TERM "$pid"; wait "$pid" || true
  pid=""
  rm -rf "$data" "$data.log"
  data=""
  printf '%-5s %-12s %-12s %-14s %s\n' "$name" "$before" "$peak" "$((peak - before))" "${pages:-0}"
done
