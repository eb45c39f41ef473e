#!/usr/bin/env bash
# GETATTR round trip against a bare loopback echo round trip, side by side in one run: the
# issue's "GETATTR p50 round trip within 1.3x of the bare echo round trip".
#   - GETATTR: a fresh `mds serve` on a fresh store under /var/tmp; `loadgen create` fills one
#     directory for CREATE_SECS, then `loadgen stat --threads 1 --depth 1` (one client thread,
#     one request in flight, through the client library) for DURATION;
#   - echo: `loadgen/examples/echo.rs`, one client thread, depth 1, blocking std sockets with
#     TCP_NODELAY, request and reply frames the size of a GETATTR request and reply (encoded
#     with mds_proto; it prints the sizes), for DURATION, three ways: as the scheduler places
#     its two threads; both pinned to one CPU (`taskset -c 0`: no cross-core wake-up); and
#     the client in a tokio multi-thread runtime (as loadgen runs), to show the runtime's share.
# ROUNDS rounds alternate getattr, echo, echo-pinned, echo-tokio against the same server; it
# prints each round's p50/p99 (µs), the median over rounds of each p50, and getattr/echo for
# each. The floor is the lowest of the three echo medians: a loopback round trip on a 2-core
# VM moves with where the two ends run (one core: ~14 µs; across cores, waking an idle one:
# ~50 µs), and an echo slowed by a wake-up is no floor. Writes
# bench/results/getattr-vs-echo.csv.
#   DURATION=5s ROUNDS=5 ./bench/getattr-vs-echo.sh
# BIN=<release dir> skips the build and uses the binaries there.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
DURATION="${DURATION:-5s}"
ROUNDS="${ROUNDS:-3}"
CREATE_SECS="${CREATE_SECS:-2s}"
OUT=bench/results
CSV="$OUT/getattr-vs-echo.csv"
mkdir -p "$OUT"
if [[ -z "${BIN:-}" ]]; then
  cargo build --release -p mds -p loadgen
  cargo build --release -p loadgen --examples
  BIN="$CARGO_TARGET_DIR/release"
fi

DATA=$(mktemp -d /var/tmp/mds-getattr.XXXXXX)
LOG="$DATA.log"
"$BIN/mds" serve --data "$DATA" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$DATA" "$LOG"' EXIT
wait_for_mds "$LOG"
ADDR=$MDS_ADDR

# One thread at depth 16 fills /getattr/t0, the directory `stat --threads 1` reads.
"$BIN/loadgen" create --server "$ADDR" --threads 1 --depth 16 --duration "$CREATE_SECS" \
  --dir /getattr --quiet | sed -n 1p

# "p50 p99" (µs) from a "latency (us): p50 X p90 Y p99 Z ..." line.
p50_p99() { sed -E 's/.*p50 ([0-9.]+) p90 [0-9.]+ p99 ([0-9.]+) .*/\1 \2/'; }

echo "round,getattr_p50_us,getattr_p99_us,echo_p50_us,echo_p99_us,echo_pinned_p50_us,echo_pinned_p99_us,echo_tokio_p50_us,echo_tokio_p99_us,request_frame_bytes,reply_frame_bytes" >"$CSV"
printf '%-6s %-18s %-18s %-18s %-18s\n' round "getattr p50/p99" "echo p50/p99" "echo-pinned" "echo-tokio"
for round in $(seq 1 "$ROUNDS"); do
  g=$("$BIN/loadgen" stat --server "$ADDR" --threads 1 --depth 1 --duration "$DURATION" \
    --dir /getattr --quiet | grep '^latency' | p50_p99)
  e_out=$("$BIN/examples/echo" --duration "$DURATION")
  e=$(echo "$e_out" | grep '^latency' | p50_p99)
  p=$(taskset -c 0 "$BIN/examples/echo" --duration "$DURATION" | grep '^latency' | p50_p99)
  t=$("$BIN/examples/echo" --duration "$DURATION" --mode tokio | grep '^latency' | p50_p99)
  sizes=$(echo "$e_out" | sed -nE 's/.*request frame ([0-9]+) bytes, reply frame ([0-9]+) bytes.*/\1 \2/p')
  read -r gp50 gp99 <<<"$g"; read -r ep50 ep99 <<<"$e"; read -r pp50 pp99 <<<"$p"
  read -r tp50 tp99 <<<"$t"; read -r req rep <<<"$sizes"
  echo "$round,$gp50,$gp99,$ep50,$ep99,$pp50,$pp99,$tp50,$tp99,$req,$rep" >>"$CSV"
  printf '%-6s %-18s %-18s %-18s %-18s\n' "$round" "$gp50 / $gp99" "$ep50 / $ep99" "$pp50 / $pp99" \
    "$tp50 / $tp99"
done
kill -TERM $PID; wait $PID || true

python3 - "$CSV" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda k: statistics.median(float(r[k]) for r in rows)
g = med("getattr_p50_us")
echoes = {name: med(f"{name.replace('-', '_')}_p50_us") for name in ("echo", "echo-pinned", "echo-tokio")}
floor_name = min(echoes, key=echoes.get)
print(f"frames: request {rows[0]['request_frame_bytes']} bytes, reply {rows[0]['reply_frame_bytes']} bytes (a GETATTR's)")
print(f"median p50 over {len(rows)} rounds: getattr {g:.1f} us, "
      + ", ".join(f"{k} {v:.1f} us" for k, v in echoes.items()))
print(", ".join(f"getattr/{k} {g / v:.2f}" for k, v in echoes.items()))
print(f"getattr / echo floor ({floor_name}): {g / echoes[floor_name]:.2f} (goal <= 1.3)")
PY
