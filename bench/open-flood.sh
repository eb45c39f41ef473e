#!/usr/bin/env bash
# What OPENs cost a server that keeps every handle a client asks for: for each build, a fresh
# server, then SESSIONS connections (each its own client identity, one after the other), each
# sending N OPENs of the root directory under handles 1..N, pipelined, reading every reply;
# then each disconnects, which leaves its handles open until its session expires. Prints the
# server's resident memory before, after the OPENs and after the disconnects, the handles it
# holds (`mds_open_handles`) and the OPENs it refused, by errno (`mds_requests_total`).
#   OLD=/var/tmp/bench-old NEW=/var/tmp/bench-new ./bench/open-flood.sh
# (each a directory holding that build's `mds`; see bench/before-after.sh for building one).
# N defaults to 1,000,000 and SESSIONS to 1; EXTRA holds flags for every server (e.g.
# "--max-open-per-session 100k"). OLD_VERSION (default 7) is the protocol version the old
# build speaks; the new one speaks 8.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
N="${N:-1000000}"
SESSIONS="${SESSIONS:-1}"
BUILDS=()
[ -n "${OLD:-}" ] && BUILDS+=("old=$OLD=${OLD_VERSION:-7}")
BUILDS+=("new=${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}=8")

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

pid=""
data=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$data" ]; then rm -rf "$data" "$data.log"; fi
}
trap cleanup EXIT

printf '%-5s %-8s %-8s %-9s %-9s %-9s %-8s %s\n' build sessions opens "rss0 KiB" \
  "rss1 KiB" "rss2 KiB" handles refused
for build in "${BUILDS[@]}"; do
  name=${build%%=*}; rest=${build#*=}; bin=${rest%=*}; version=${rest##*=}
  data=$(mktemp -d /var/tmp/mds-open-flood.XXXXXX)
  # shellcheck disable=SC2086 # EXTRA is flags, split on purpose
  "$bin/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 2 ${EXTRA:-} 2>"$data.log" &
  pid=$!
  wait_for_mds "$data.log"
  sleep 1
  before=$(rss_kib "$pid")
  read -r during after < <(python3 - "$MDS_ADDR" "$N" "$SESSIONS" "$pid" "$(dirname "$0")" "$version" <<'PY'
import socket, struct, sys, threading, time
sys.path.insert(0, sys.argv[5])
from wire import connect, open_
host, port = sys.argv[1].rsplit(":", 1)
n, sessions, pid = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
version = int(sys.argv[6])

def rss():
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))

def read_replies(s, count):
    """Reads `count` whole frames (the CONNECT's and every OPEN's)."""
    got, seen = b"", 0
    while seen < count:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise SystemExit("the server closed the connection")
        got += chunk
        at = 0
        while len(got) - at >= 4:
            length = struct.unpack_from(">I", got, at)[0]
            if len(got) - at < 4 + length:
                break
            at += 4 + length
            seen += 1
        got = got[at:]

socks = []
for _ in range(sessions):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect((host, int(port)))
    s.sendall(connect(version))
    reader = threading.Thread(target=read_replies, args=(s, 1 + n))
    reader.start()
    batch = []
    for h in range(1, n + 1):
        # xid h + 1 (the CONNECT was 1); every reply so far acknowledged is not needed:
        # OPEN is not a mutation and keeps no resend record.
        batch.append(open_(h + 1, 1, h, version=version))
        if len(batch) == 4096:
            s.sendall(b"".join(batch))
            batch = []
    s.sendall(b"".join(batch))
    reader.join()
    socks.append(s)
during = rss()
for s in socks:
    s.close()
time.sleep(2)
print(during, rss())
PY
  )
  metrics=$(curl -s "http://$MDS_METRICS/metrics")
  handles=$(awk '$1 == "mds_open_handles" {print $2}' <<<"$metrics")
  refused=$(awk -F'[{}", ]+' '/^mds_requests_total\{op="open",result="E/ {
      split($0, v, " "); sum[$5] += v[2] } END { for (e in sum) if (sum[e] > 0) printf "%s=%d ", e, sum[e] }' \
    <<<"$metrics")
  kill -TERM "$pid"; wait "$pid" || true
  pid=""
  rm -rf "$data" "$data.log"
  data=""
  printf '%-5s %-8s %-8s %-9s %-9s %-9s %-8s %s\n' "$name" "$SESSIONS" "$N" "$before" \
    "$during" "$after" "$handles" "${refused:-none}"
done
