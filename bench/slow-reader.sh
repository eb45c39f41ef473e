#!/usr/bin/env bash
# One client that floods the server with READDIRs of a 3,000-entry directory and never reads
# its replies, against everyone else: in one run, the create rate of a loadgen alone, then of
# the same loadgen while the flood goes on, their ratio, and the server's resident memory
# before the flood and at its peak over 3 s of flood alone (VmHWM, reset when it starts; the
# run with the flood creates files, which the namespace keeps in memory, so it is not used).
# The flooding client speaks the protocol from Python (postcard by hand: a handful of
# varints), so nothing here reads its replies by accident.
#   ./bench/slow-reader.sh                      # THREADS=4 DEPTH=16 DURATION=5s FLOODERS=1
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
BIN="${BIN:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}"
THREADS="${THREADS:-4}"
DEPTH="${DEPTH:-16}"
DURATION="${DURATION:-5s}"
FLOODERS="${FLOODERS:-1}"

data=$(mktemp -d /var/tmp/mds-slow.XXXXXX)
log="$data.log"
"$BIN/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$log" &
pid=$!
flood_pids=()
cleanup() {
  for p in "${flood_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$log"
}
trap cleanup EXIT
wait_for_mds "$log"
addr=$MDS_ADDR

"$BIN/loadgen" create --server "$addr" --threads 2 --depth 16 --count 3000 --dir /big \
  --shared-dir --quiet >/dev/null
ino=$("$BIN/mdsctl" --server "$addr" -o json stat /big |
  python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["inode"])')

rate() {
  "$BIN/loadgen" create --server "$addr" --threads "$THREADS" --depth "$DEPTH" \
    --duration "$DURATION" --dir "$1" --quiet | awk '/^Rate:/ {print $2}'
}
mem() { awk "/^$1:/ {print \$2}" "/proc/$pid/status"; }

alone=$(rate /alone)
rss_before=$(mem VmRSS)
# Resets VmHWM to the current RSS, so the peak below is the flood's (Linux 4.0+).
echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true
for i in $(seq 1 "$FLOODERS"); do
  python3 - "$addr" "$ino" "$i" <<'PY' &
import socket, sys, time

def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)

def request(xid, op):
    # Request { xid, op, acked_xid: 0, cred { uid 0, gid 0, groups [] }, replay: None }
    payload = varint(xid) + op + varint(0) + varint(0) + varint(0) + varint(0) + b"\x00"
    return len(payload).to_bytes(4, "big") + payload

host, port = sys.argv[1].rsplit(":", 1)
ino, me = int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, int(port)))
connect = varint(0) + varint(2) + varint(0xF100D000 + me)  # Connect { version 2, client }
readdir = varint(7) + varint(ino) + b"\x00" + varint(1024)  # Readdir { ino, None, 1024 }
frames = request(1, connect) + b"".join(request(x, readdir) for x in range(2, 20002))
s.settimeout(60)
try:
    s.sendall(frames)  # blocks once the server stops reading this connection
except OSError:
    pass
time.sleep(120)  # hold the connection, unread, until killed
PY
  flood_pids+=($!)
done
# The flood alone for a while: whatever it makes the server hold, it holds by now.
sleep 3
flooded=$(mem VmHWM)
with=$(rate /with)
python3 - "$alone" "$with" "$rss_before" "$flooded" "$FLOODERS" <<'PY'
import sys
alone, with_, before, flooded, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"creates/s alone {alone:.0f}, with {n} non-reading READDIR flooder(s) {with_:.0f}: ratio {with_ / alone:.3f}")
print(f"server RSS before the flood {before / 1024:.1f} MiB, peak over 3 s of flood alone "
      f"(VmHWM) {flooded / 1024:.1f} MiB: +{(flooded - before) / 1024:.1f} MiB")
PY
