#!/usr/bin/env bash
# The tools people run on a mount, under each way the mount can ask to be answered, side by
# side in one run: one `mds serve` (its default `--ack commit`), two mounts of it — the
# default, which asks for early replies (`-o ack=early`), and `-o ack=commit` — and a
# directory of the same disk. Workloads, each timed on each target in a turned order, ROUNDS
# (3) rounds, medians: `cp -a` of TREE (/usr/lib/python3.11), `tar x` of an archive of it
# (made once, on /var/tmp), and `git clone` of REPO (this repository, without hard links)
# then `git status`. Each target's copy is removed between rounds. The server on SERVER_CPU
# (0), the mounts and the workloads on LOAD_CPU (1): a server host and a client host. Needs
# root (mounts).
#   ./bench/mount-ack.sh | tee bench/results/mount-ack-$(date +%F).txt
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --workspace >&2
  BIN="$CARGO_TARGET_DIR/release"
fi
ROUNDS="${ROUNDS:-3}"
TREE="${TREE:-/usr/lib/python3.11}"
REPO="${REPO:-$PWD}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"

WORK="$(mktemp -d /var/tmp/mount-ack.XXXXXX)"
SERVER=""
cleanup() {
  set +e
  for m in "$WORK"/mnt-*; do
    if grep -qs " $m " /proc/mounts; then
      timeout -k 5 30 fusermount3 -u "$m" || umount -l "$m"
    fi
  done
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

taskset -c "$SERVER_CPU" "$BIN/mds" serve --data "$WORK/data" --listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 >"$WORK/server.log" 2>&1 &
SERVER=$!
wait_for_mds "$WORK/server.log"
TARGETS=(directory early commit)
mkdir -p "$WORK/directory"
for ack in early commit; do
  mkdir -p "$WORK/mnt-$ack"
  taskset -c "$LOAD_CPU" "$BIN/mdsmount" "$MDS_ADDR" "$WORK/mnt-$ack" -o "ack=$ack" \
    --log-file "$WORK/mount-$ack.log"
done
place() { if [ "$1" = directory ]; then echo "$WORK/directory"; else echo "$WORK/mnt-$1"; fi; }
tar -C "$(dirname "$TREE")" -cf "$WORK/tree.tar" "$(basename "$TREE")"

# One timed command on LOAD_CPU: prints its seconds.
timed() {
  local t0 t1
  t0="$(date +%s.%N)"
  taskset -c "$LOAD_CPU" "$@" >/dev/null 2>&1
  t1="$(date +%s.%N)"
  echo "$t1 $t0" | awk '{printf "%.3f\n", $1-$2}'
}

RESULTS="$WORK/results"
: >"$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
  n=${#TARGETS[@]}
  for k in $(seq 0 $((n - 1))); do
    t="${TARGETS[$(((round + k) % n))]}"
    at="$(place "$t")"
    echo "$round $t cp-a $(timed cp -a "$TREE" "$at/cp")" >>"$RESULTS"
    echo "$round $t tar-x $(timed tar -C "$at" -xf "$WORK/tree.tar")" >>"$RESULTS"
    echo "$round $t git-clone $(timed sh -c "git clone -q --no-hardlinks '$REPO' '$at/clone' && git -C '$at/clone' status --short")" >>"$RESULTS"
    diff -r --no-dereference "$TREE" "$at/cp" >/dev/null || { echo "mount-ack: the copy on $t differs" >&2; exit 1; }
    rm -rf "${at:?}/cp" "${at:?}/$(basename "$TREE")" "${at:?}/clone"
  done
done

echo "# mount-ack.sh, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'): ROUNDS=$ROUNDS TREE=$TREE ($(find "$TREE" | wc -l) entries, $(du -sm "$TREE" | cut -f1) MiB) REPO=$REPO; server on CPU $SERVER_CPU, mounts and work on CPU $LOAD_CPU"
python3 - "$RESULTS" "${TARGETS[@]}" <<'EOF'
import statistics, sys
path, targets = sys.argv[1], sys.argv[2:]
runs = {}
for line in open(path):
    rnd, target, work, secs = line.split()
    runs.setdefault((work, target), []).append(float(secs))
print(f"{'seconds (median)':18}" + "".join(f"{t:>22}" for t in targets))
for work in ("cp-a", "tar-x", "git-clone"):
    base = statistics.median(runs[(work, "directory")])
    cells = []
    for t in targets:
        m = statistics.median(runs[(work, t)])
        cells.append(f"{m:8.2f} ({m / base:5.1f}x dir)")
    print(f"{work:18}" + "".join(f"{c:>22}" for c in cells))
EOF
