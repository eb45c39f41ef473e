#!/usr/bin/env bash
# mds creates/s against its journal ceiling at 1, 64 and 1024 outstanding creates, side by side
# in one run: the issue's "at least 60 % of the journal ceiling at 1024 outstanding".
#   - the ceiling at N outstanding: RocksDB's synced write rate when each commit carries N
#     create records (new inode, directory entry, updated parent), without a server: the
#     criterion bench journal/benches/group_commit.rs, batch size N, its store under
#     MDS_BENCH_DIR (/var/tmp: the disk mds uses), 10 samples over 4 s; the rate is criterion's
#     middle estimate, with its interval in the CSV. It is what group commit could reach if
#     every outstanding create went into one commit;
#   - mds: a fresh `mds serve` on a fresh store under /var/tmp per point (as before-after.sh),
#     `loadgen create` for DURATION at 1 x 1, 64 x 1 and 64 x 16 (threads x depth), with the
#     mutations per commit the server counted.
# For each point the ceiling is measured first, then mds right after it. Prints a table:
# outstanding, mds/s, ceiling/s, ratio (and mutations per commit); writes
# bench/results/vs-ceiling.csv (criterion's output in bench/results/ceiling-points.txt) and
# draws docs/vs-ceiling.svg (bench/chart_compare.py).
#   DURATION=10s ./bench/journal-ceiling.sh
#   DURATION=3s POINTS="1024" ./bench/journal-ceiling.sh   # a quick look
# BIN=<release dir> skips the build of mds and loadgen and uses the binaries there (the bench
# is still built by cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
export MDS_BENCH_DIR="${MDS_BENCH_DIR:-/var/tmp}"
DURATION="${DURATION:-10s}"
POINTS="${POINTS:-1 64 1024}"
OUT=bench/results
CSV="$OUT/vs-ceiling.csv"
CRITERION="$OUT/ceiling-points.txt"
mkdir -p "$OUT"
if [[ -z "${BIN:-}" ]]; then
  cargo build --release -p mds -p loadgen
  BIN="$CARGO_TARGET_DIR/release"
fi
cargo bench -p journal --bench group_commit --no-run 2>&1 | grep -v '^ *\(Compiling\|Finished\|Executable\)' || true

MDS_PID="" DATA=""
cleanup() {
  [[ -n "$MDS_PID" ]] && { kill "$MDS_PID" 2>/dev/null; wait "$MDS_PID" 2>/dev/null; }
  [[ -n "$DATA" ]] && rm -rf "$DATA" "$DATA.log" "$DATA.json"
  return 0
}
trap cleanup EXIT

# "mid lo hi" creates/s of criterion's journal_synced_create_batch/N, from its output on stdin.
ceiling_of() {
  python3 -c '
import re, sys
n, text = sys.argv[1], sys.stdin.read()
head = text.find(f"journal_synced_create_batch/{n}\n")
m = re.search(r"thrpt:\s*\[\s*([\d.]+)\s*([KMG]?)elem/s\s+([\d.]+)\s*([KMG]?)elem/s\s+([\d.]+)\s*([KMG]?)elem/s", text[head:])
if head < 0 or not m:
    sys.exit(f"no throughput for batch {n} in the criterion output")
scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
lo, mid, hi = (float(m[i]) * scale[m[i + 1]] for i in (1, 3, 5))
print(f"{mid:.0f} {lo:.0f} {hi:.0f}")
' "$1"
}

: >"$CRITERION"
echo "outstanding,threads,depth,mds_per_sec,ops_per_commit,ceiling_per_sec,ceiling_lo,ceiling_hi,ratio" >"$CSV"
printf '%11s %7s %10s %10s %7s %s\n' outstanding "t x d" "mds/s" "ceiling/s" ratio "mutations/commit (ceiling interval)"
for n in $POINTS; do
  case $n in
    1) threads=1 depth=1 ;;
    64) threads=64 depth=1 ;;
    1024) threads=64 depth=16 ;;
    *) echo "POINTS: 1, 64 or 1024, not $n" >&2; exit 2 ;;
  esac
  bench_out=$(cargo bench -q -p journal --bench group_commit -- --noplot \
    "journal_synced_create_batch/$n\$" 2>&1)
  echo "$bench_out" >>"$CRITERION"
  figures=$(echo "$bench_out" | ceiling_of "$n")
  read -r ceiling lo hi <<<"$figures"

  DATA=$(mktemp -d /var/tmp/mds-ceiling.XXXXXX)
  "$BIN/mds" serve --data "$DATA" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$DATA.log" &
  MDS_PID=$!
  wait_for_mds "$DATA.log"
  addr=$MDS_ADDR
  "$BIN/loadgen" create --server "$addr" --threads "$threads" --depth "$depth" \
    --duration "$DURATION" --quiet --json "$DATA.json" >/dev/null
  kill -TERM "$MDS_PID"; wait "$MDS_PID" || true; MDS_PID=""
  figures=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
rate, per_commit = r["rate_per_sec"], r["server"]["ops_per_commit"]
print(f"{rate:.0f} {per_commit:.1f}")' "$DATA.json")
  read -r rate per_commit <<<"$figures"
  rm -rf "$DATA" "$DATA.log" "$DATA.json"; DATA=""

  ratio=$(awk -v a="$rate" -v b="$ceiling" 'BEGIN {printf "%.3f", a / b}')
  echo "$n,$threads,$depth,$rate,$per_commit,$ceiling,$lo,$hi,$ratio" >>"$CSV"
  printf '%11s %7s %10s %10s %7s %s\n' "$n" "${threads}x$depth" "$rate" "$ceiling" "$ratio" \
    "$per_commit ($lo - $hi)"
done
echo "goal: mds >= 0.6 x the ceiling at 1024 outstanding; $CSV"
python3 bench/chart_compare.py vs-ceiling "$CSV" docs/vs-ceiling.svg
