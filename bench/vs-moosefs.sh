#!/usr/bin/env bash
# mds under mdsmount against the MooseFS master under mfsmount, the same metadata workload on
# each, side by side in one run. Both are a metadata server on loopback behind a FUSE mount:
#   moosefs        mfsmaster (Debian moosefs-master) with its defaults: CHANGELOG_SAVE_MODE 0,
#                  the changelog written by a background process, never fsynced per operation
#   moosefs-fsync  the same with CHANGELOG_SAVE_MODE 2: an fsync after each changelog write
#                  (RUN="moosefs mds-early mds-commit" leaves it out; RUN names the systems)
#   mds-early      mds --ack early: replies leave at once, commits follow; fsync waits for them
#   mds-commit     mds --ack commit (the default): each reply leaves once its commit is durable
# No chunkserver: MooseFS stores no file data without one, so every file is empty on both.
# For each process count in PROCS (1 2 8) and each system:
#   fs_mark        -s 0 -S 0 (create+close) and -s 0 -S 1 (create, fsync, close), -t P
#                  threads of FILES files each, -L 1; its Files/sec
#   file/dir       a small Python driver (below): P processes, each FILES operations in its own
#                  directory, one phase at a time behind a barrier: create (open O_CREAT|O_EXCL
#                  + close), stat, remove; mkdir, stat, rmdir. Rate = P * FILES / (last end -
#                  first start). Before each stat phase the kernel's dentry and inode caches
#                  are dropped (drop_caches 3), so a stat is a LOOKUP on the server, not the
#                  kernel's cache; remove follows stat with the dentries it left (mdtest-like).
# On 2 cores: every server (mfsmaster with its changelog writer; mds with its one partition
# and RocksDB threads) on SERVER_CPU (0), and the load with its FUSE daemon (mfsmount,
# mdsmount) on LOAD_CPU (1): a client machine and a server machine. Each mount with its own
# defaults (mfsmount: attributes 1 s, file entries 0 s, directory entries 1 s; mdsmount:
# attributes and entries 1 s).
# mdtest (IOR) is not packaged in Debian, and this script downloads nothing: with
# MDTEST=/path/to/mdtest it also runs `mdtest -F -u -n FILES` and `mdtest -D -u -n FILES`
# under `mpiexec -n P` on each system (-u: a directory per task, as the driver; in one shared
# directory every system fell to 500-1,500 ops/s at 8 tasks here). Its stat phase follows its
# create with the caches it left: where a mount keeps entries and attributes (mdsmount 1 s,
# mfsmount directories 1 s) that measures the kernel, not the server. Built from the IOR
# sources with Debian's mpich in ~10 s:
#   apt-get install --no-install-recommends mpich libmpich-dev autoconf automake make pkg-config
#   git clone -b 4.0.0 https://github.com/hpc/ior && cd ior
#   ./bootstrap && ./configure --prefix=/var/tmp/ior && make -j2 install   # /var/tmp/ior/bin/mdtest
# Installs moosefs-master and moosefs-client with apt when missing; cleans everything up at
# exit. Needs root (mounts, drop_caches, apt).
#   ./bench/vs-moosefs.sh | tee bench/results/vs-moosefs-$(date +%F).txt
#   PROCS="1 8" FILES=500 ./bench/vs-moosefs.sh
# BIN=<release dir> skips the build and uses the mds and mdsmount there.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
PROCS="${PROCS:-1 2 8}"
FILES="${FILES:-1000}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
RUN="${RUN:-moosefs moosefs-fsync mds-early mds-commit}"
MDTEST="${MDTEST:-}"

if [ "$(id -u)" -ne 0 ]; then
  echo "vs-moosefs: needs root (FUSE mounts, drop_caches, apt)" >&2
  exit 2
fi
need=()
for pkg in moosefs-master moosefs-client fsmark fuse3 python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "vs-moosefs: installing ${need[*]}" >&2
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi
if [ -z "${BIN:-}" ] && [[ "$RUN" == *mds* ]]; then
  cargo build --release --bin mds --bin mdsmount >&2
  BIN="$CARGO_TARGET_DIR/release"
fi

WORK="$(mktemp -d /var/tmp/vs-moosefs.XXXXXX)"
chmod 755 "$WORK" # mfsmaster runs as the mfs user
# Mount points with short paths: fs_mark takes directories of fewer than 40 bytes.
MNTS="$(mktemp -d /tmp/vsm.XXXXXX)"
PIDS=()
MOUNTS=()
cleanup() {
  set +e
  local m pid
  for m in "${MOUNTS[@]}"; do unmount "$m"; done
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$WORK"
  rmdir "$MNTS"/* "$MNTS" 2>/dev/null
}
trap cleanup EXIT

# The FUSE connection number of the mount at $1 (from mountinfo: a stat of a hung mount hangs).
fuse_conn() {
  awk -v m="$1" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) ~ /^fuse/) { split($3, d, ":"); print d[2] } } }' /proc/self/mountinfo | tail -n1
}
mounted() { [ -n "$(fuse_conn "$1")" ]; }
unmount() {
  local m=$1 conn
  conn=$(fuse_conn "$m")
  [ -n "$conn" ] || return 0
  timeout -k 5 30 fusermount3 -u "$m" 2>/dev/null && return 0
  timeout -k 5 30 umount -l "$m" 2>/dev/null
  # Only after a lazy unmount, straight away: the connection then still belongs to the stuck
  # daemon. Once a connection is gone its number is free for the next mount, which an abort
  # written later would tear down.
  if [ -e "/sys/fs/fuse/connections/$conn/abort" ]; then
    echo 1 >"/sys/fs/fuse/connections/$conn/abort" 2>/dev/null || true
  fi
}
wait_mounted() {
  for _ in $(seq 1 300); do mounted "$1" && return 0; sleep 0.1; done
  echo "vs-moosefs: $1 did not mount" >&2
  return 1
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
if ! mountpoint -q /sys/fs/fuse/connections 2>/dev/null; then
  mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null || true
fi

cat >"$WORK/mdops.py" <<'PY'
import os, sys, time, multiprocessing as mp

PHASES = ["file-create", "file-stat", "file-remove", "dir-create", "dir-stat", "dir-remove"]

def worker(root, idx, n, barrier, out):
    d = os.path.join(root, "p%d" % idx)
    files = [os.path.join(d, "f%d" % i) for i in range(n)]
    dirs = [os.path.join(d, "d%d" % i) for i in range(n)]
    for ph in PHASES:
        barrier.wait()
        t0 = time.perf_counter()
        if ph == "file-create":
            for f in files:
                os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        elif ph == "file-stat":
            for f in files:
                os.stat(f)
        elif ph == "file-remove":
            for f in files:
                os.unlink(f)
        elif ph == "dir-create":
            for f in dirs:
                os.mkdir(f, 0o755)
        elif ph == "dir-stat":
            for f in dirs:
                os.stat(f)
        elif ph == "dir-remove":
            for f in dirs:
                os.rmdir(f)
        out.put((ph, time.perf_counter() - t0, t0, time.perf_counter()))
        barrier.wait()

def main():
    root, procs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for i in range(procs):
        os.mkdir(os.path.join(root, "p%d" % i))
    barrier = mp.Barrier(procs + 1)
    out = mp.Queue()
    ws = [mp.Process(target=worker, args=(root, i, n, barrier, out)) for i in range(procs)]
    for w in ws:
        w.start()
    for ph in PHASES:
        if ph.endswith("-stat"):
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        barrier.wait()
        barrier.wait()
        rs = [out.get() for _ in range(procs)]
        t0 = min(r[2] for r in rs)
        t1 = max(r[3] for r in rs)
        print("%s %.1f" % (ph, procs * n / (t1 - t0)), flush=True)
    for w in ws:
        w.join()
        if w.exitcode != 0:
            sys.exit(1)
    for i in range(procs):
        os.rmdir(os.path.join(root, "p%d" % i))

main()
PY

RESULTS="$WORK/results"
: >"$RESULTS"
record() { echo "$1 $2 $3 $4" >>"$RESULTS"; }   # system workload procs rate

# The workload on the mount at $2, for system $1.
workload() {
  local sys=$1 mnt=$2 p out rate
  for p in $PROCS; do
    for sync in 0 1; do
      mkdir "$mnt/fsm-$p-$sync"
      out=$(cd "$WORK" && timeout -k 10 900 taskset -c "$LOAD_CPU" \
        fs_mark -d "$mnt/fsm-$p-$sync" -n "$FILES" -t "$p" -s 0 -S "$sync" -L 1) || {
        echo "vs-moosefs: fs_mark failed on $sys:" >&2
        echo "$out" >&2
        return 1
      }
      rate=$(awk '!/^#/ && NF >= 4 && $4 ~ /^[0-9.]+$/ { r = $4 } END { print r }' <<<"$out")
      record "$sys" "fs_mark-S$sync" "$p" "${rate:-fail}"
    done
    mkdir "$mnt/ops-$p"
    while read -r phase rate; do
      record "$sys" "$phase" "$p" "$rate"
    done < <(timeout -k 10 900 taskset -c "$LOAD_CPU" python3 "$WORK/mdops.py" "$mnt/ops-$p" "$p" "$FILES")
    if [ -n "$MDTEST" ]; then
      for kind in F D; do
        out=$(timeout -k 10 900 env MPIR_CVAR_POLLS_BEFORE_YIELD=1 taskset -c "$LOAD_CPU" mpiexec -n "$p" "$MDTEST" -$kind -u -n "$FILES" \
          -d "$mnt/mdtest-$p-$kind" 2>&1) || {
          echo "vs-moosefs: mdtest -$kind failed on $sys:" >&2
          echo "$out" >&2
          return 1
        }
        while read -r op rate; do
          record "$sys" "$op" "$p" "$rate"
        done < <(awk '/^ *(File|Directory) (creation|stat|removal) / { printf "mdtest-%s-%s %s\n", tolower($1), tolower($2), $5 }' <<<"$out" | sed 's/^mdtest-directory/mdtest-dir/')
      done
    fi
    echo "vs-moosefs: $sys, $p process(es) done" >&2
  done
}

run_moosefs() {
  local sys=$1 save_mode=$2 dir="$WORK/$1" mnt="$MNTS/$1" port_cl port_cs port_ml pid
  mkdir -p "$dir/data" "$mnt"
  cp /var/lib/mfs/metadata.mfs.empty "$dir/data/metadata.mfs"
  chown -R mfs:mfs "$dir/data"
  port_cl=$(free_port) port_cs=$(free_port) port_ml=$(free_port)
  cat >"$dir/mfsmaster.cfg" <<CFG
WORKING_USER = mfs
DATA_PATH = $dir/data
EXPORTS_FILENAME = $dir/mfsexports.cfg
CHANGELOG_SAVE_MODE = $save_mode
MATOML_LISTEN_HOST = 127.0.0.1
MATOML_LISTEN_PORT = $port_ml
MATOCS_LISTEN_HOST = 127.0.0.1
MATOCS_LISTEN_PORT = $port_cs
MATOCL_LISTEN_HOST = 127.0.0.1
MATOCL_LISTEN_PORT = $port_cl
CFG
  echo "127.0.0.1 / rw,alldirs,maproot=0:0" >"$dir/mfsexports.cfg"
  taskset -c "$SERVER_CPU" mfsmaster -c "$dir/mfsmaster.cfg" -f start >"$dir/master.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 100); do
    grep -q "main master server module: listen on" "$dir/master.log" && break
    sleep 0.1
  done
  grep -q "main master server module: listen on" "$dir/master.log" || {
    cat "$dir/master.log" >&2
    return 1
  }
  taskset -c "$LOAD_CPU" mfsmount "$mnt" -H 127.0.0.1 -P "$port_cl" -f >"$dir/mount.log" 2>&1 &
  PIDS+=("$!")
  MOUNTS+=("$mnt")
  wait_mounted "$mnt"
  workload "$sys" "$mnt"
  unmount "$mnt"
  kill -TERM "$pid"
  wait "$pid" || true
}

run_mds() {
  local sys=$1 ack=$2 dir="$WORK/$1" mnt="$MNTS/$1" pid
  mkdir -p "$dir" "$mnt"
  MDS_LOG=info taskset -c "$SERVER_CPU" "$BIN/mds" serve --data "$dir/data" --ack "$ack" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$dir/mds.log" &
  pid=$!
  PIDS+=("$pid")
  wait_for_mds "$dir/mds.log"
  taskset -c "$LOAD_CPU" "$BIN/mdsmount" "$MDS_ADDR" "$mnt" -f >"$dir/mount.log" 2>&1 &
  PIDS+=("$!")
  MOUNTS+=("$mnt")
  wait_mounted "$mnt"
  workload "$sys" "$mnt"
  unmount "$mnt"
  kill -TERM "$pid"
  wait "$pid" || true
}

SYSTEMS=()
for s in $RUN; do
  case "$s" in
    moosefs) run_moosefs moosefs 0 ;;
    moosefs-fsync) run_moosefs moosefs-fsync 2 ;;
    mds-early) run_mds mds-early early ;;
    mds-commit) run_mds mds-commit commit ;;
    *) echo "vs-moosefs: unknown system $s" >&2; exit 2 ;;
  esac
  SYSTEMS+=("$s")
done

echo "# vs-moosefs: $(date -u +%FT%TZ), $(uname -r), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo "# mfsmaster $(dpkg-query -W -f '${Version}' moosefs-master), mds $("${BIN:-$CARGO_TARGET_DIR/release}/mds" --version 2>/dev/null | awk '{print $NF}'), mdsmount $("${BIN:-$CARGO_TARGET_DIR/release}/mdsmount" --version 2>/dev/null | awk '{print $NF}') (commit $(git rev-parse --short HEAD 2>/dev/null), tree $(git diff --quiet 2>/dev/null && echo clean || echo modified))"
echo "# PROCS=\"$PROCS\" FILES=$FILES (per process); servers on CPU $SERVER_CPU, load and FUSE daemons on CPU $LOAD_CPU"
echo "# ops/s. MooseFS writes its changelog without an fsync per operation (CHANGELOG_SAVE_MODE 0,"
echo "# its default); moosefs-fsync fsyncs after each changelog write (mode 2). mds-commit answers"
echo "# each mutation once its group commit is durable; mds-early at once (fsync waits for it)."
echo "# fs_mark-S1 fsyncs each (empty) file: mds answers it after a commit covering the file."
echo "# file-*/dir-*: the driver, kernel caches dropped before each stat phase. Every file is empty."
if [ -n "$MDTEST" ]; then
  echo "# mdtest-*-stat: right after mdtest's create, from the kernel's caches where the mount keeps"
  echo "# them (mdsmount: entries and attributes 1 s; mfsmount: attributes 1 s, file entries 0 s)."
fi
printf '%-20s %5s' workload procs
for s in "${SYSTEMS[@]}"; do printf ' %14s' "$s"; done
printf '\n'
for w in $(awk '!seen[$2]++ { print $2 }' "$RESULTS"); do
  for p in $PROCS; do
    printf '%-20s %5s' "$w" "$p"
    for s in "${SYSTEMS[@]}"; do
      printf ' %14s' "$(awk -v s="$s" -v w="$w" -v p="$p" '$1 == s && $2 == w && $3 == p { print $4 }' "$RESULTS")"
    done
    printf '\n'
  done
done
