#!/usr/bin/env bash
# What connections nobody has authenticated cost a server: for each build and each kind of
# flood, a fresh server, then CONNS connections that never send CONNECT, each from one of
# SOURCES loopback addresses — `silent` ones that send nothing, `parked` ones that send the
# length of a 64 KiB frame (the most a frame may declare) and its first 1000 bytes — held for
# HOLD seconds. Prints the server's resident memory before and after, per connection, how
# many connections the server kept open (the rest it refused: EBUSY, or EPROTO for a frame
# too long before CONNECT), and whether a client connecting from yet another address was
# served meanwhile (a CONNECT and a GETATTR, in how many milliseconds).
#   OLD=/var/tmp/bench-old NEW=/var/tmp/bench-new ./bench/preauth-memory.sh
# (each a directory holding that build's `mds`; see bench/before-after.sh for building one).
# OLD_VERSION (default 7) is the protocol version the old build speaks.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
CONNS="${CONNS:-1000}"
SOURCES="${SOURCES:-20}"
HOLD="${HOLD:-3}"
BUILDS=()
[ -n "${OLD:-}" ] && BUILDS+=("old=$OLD=${OLD_VERSION:-7}")
BUILDS+=("new=${NEW:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}=8")
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

pid=""
data=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$data" ]; then rm -rf "$data" "$data.log"; fi
}
trap cleanup EXIT

printf '%-5s %-7s %-6s %-9s %-9s %-9s %-6s %-8s %s\n' build flood conns "rss0 KiB" \
  "rss1 KiB" "KiB/conn" kept refused "client ms"
for build in "${BUILDS[@]}"; do
for flood in silent parked; do
  name=${build%%=*}; rest=${build#*=}; bin=${rest%=*}; version=${rest##*=}
  data=$(mktemp -d /var/tmp/mds-preauth.XXXXXX)
  "$bin/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --partitions 2 2>"$data.log" &
  pid=$!
  wait_for_mds "$data.log"
  sleep 1
  before=$(rss_kib "$pid")
  # The flood, and a client from another address while it holds.
  read -r after kept refused client_ms < <(python3 - "$MDS_ADDR" "$CONNS" "$SOURCES" "$HOLD" \
    "$pid" "$flood" "$version" "$(dirname "$0")" <<'PY'
import socket, struct, sys, time
sys.path.insert(0, sys.argv[8])
from wire import connect, getattr_
host, port = sys.argv[1].rsplit(":", 1)
conns, sources, hold, pid = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
flood, version = sys.argv[6], int(sys.argv[7])
socks = []
for i in range(conns):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((f"127.0.0.{2 + i % sources}", 0))
    s.connect((host, int(port)))
    if flood == "parked":
        # A 64 KiB frame's length and its first 1000 bytes, the rest never sent.
        s.sendall(struct.pack(">I", 65536) + b"\0" * 1000)
    socks.append(s)
time.sleep(hold)
with open(f"/proc/{pid}/status") as f:
    rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
kept = refused = 0
for s in socks:
    s.setblocking(False)
    try:
        data = s.recv(64)
        # A refusal (EBUSY or EPROTO, xid 0) then close; nothing at all while it waits.
        refused += 1 if data is not None else 0
    except BlockingIOError:
        kept += 1
    except OSError:
        refused += 1
# A client from an address of its own: CONNECT (xid 1, the build's version, a random identity) and
# GETATTR of the root (xid 2), postcard-encoded by hand.
start = time.monotonic()
c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
c.settimeout(10)
c.bind(("127.0.0.250", 0))
c.connect((host, int(port)))
c.sendall(connect(version) + getattr_(2, 1, acked_xid=1))
got = b""
replies = 0
while replies < 2:
    chunk = c.recv(65536)
    if not chunk:
        break
    got += chunk
    while len(got) >= 4 and len(got) >= 4 + struct.unpack(">I", got[:4])[0]:
        n = struct.unpack(">I", got[:4])[0]
        got = got[4 + n:]
        replies += 1
ms = (time.monotonic() - start) * 1000 if replies == 2 else -1
print(rss, kept, refused, f"{ms:.1f}")
PY
  )
  kill -TERM "$pid"; wait "$pid" || true
  pid=""
  rm -rf "$data" "$data.log"
  data=""
  per=$(awk -v a="$after" -v b="$before" -v n="$CONNS" 'BEGIN{printf "%.1f", (a - b) / n}')
  printf '%-5s %-7s %-6s %-9s %-9s %-9s %-6s %-8s %s\n' "$name" "$flood" "$CONNS" "$before" \
    "$after" "$per" "$kept" "$refused" "$client_ms"
done
done
