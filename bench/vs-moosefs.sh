#!/usr/bin/env bash
# mds under mdsmount against the MooseFS master under mfsmount, the same metadata workload on
# each, side by side in one run, then one data workload (cp -a of a directory tree). Both are
# a metadata server on loopback behind a FUSE mount:
#   moosefs        mfsmaster (Debian moosefs-master) with its defaults: CHANGELOG_SAVE_MODE 0,
#                  the changelog written by a background process, never fsynced per operation
#   moosefs-fsync  the same with CHANGELOG_SAVE_MODE 2: an fsync after each changelog write
#                  (RUN="moosefs mds-early mds-commit" leaves it out; RUN names the systems)
#   mds-early      mds --ack early: replies leave at once, commits follow; fsync waits for them
#   mds-commit     mds --ack commit (the default): each reply leaves once its commit is durable
#   fuse-ceiling   no server: the no-op file system of mount/examples/fuse_ceiling.rs, its
#                  namespace in its own memory, answering each request on its session thread
#                  at once, mounted with mdsmount's capabilities and timeouts: what any FUSE
#                  mount on this machine can do at most. Its daemon on CEILING_CPU (LOAD_CPU,
#                  where every FUSE daemon runs). After its workloads it counts the requests
#                  the kernel sends for one create, stat (caches dropped) and remove, one
#                  process, FILES of each (printed as "requests per operation").
#   ceiling-acl    the same with FUSE_POSIX_ACL, which mdsmount asks for under
#                  -o default_permissions: with it the kernel checks permissions itself and
#                  asks a directory's attributes again after each change in it.
# WORKLOADS names the workloads, "meta data" by default: WORKLOADS=data runs the copy alone,
# and DATA=0 leaves it out (the script as it was before the copy: no chunkserver at all).
# WORKLOADS=locks (with or after the others) times file locks, lock and unlock round trips:
# for each P in PROCS, P processes, each LOCK_OPS (2000) pairs of an exclusive lock and its
# unlock on a file of its own (fcntl-lock-unlock: lockf(3), POSIX record locks;
# flock-lock-unlock: flock(2)), then on one file all P share (fcntl-one-file: each lock
# waits for the others' unlocks). Rate = pairs/s of all P together. MooseFS 3's locks are
# global (its master's), as mds's are (its server's); fuse-ceiling answers none, so the
# kernel keeps its locks itself, local to the mount: what a lock costs with no server.
# The metadata workloads (meta) run with no chunkserver: MooseFS stores no file data without
# one, so every file is empty on both.
# For each process count in PROCS (1 2 8) and each system:
#   fs_mark        -s 0 -S 0 (create+close) and -s 0 -S 1 (create, fsync, close), -t P
#                  threads of FILES files each, -L 1; its Files/sec
#   file/dir       a small Python driver (below): P processes, each FILES operations in its own
#                  directory, one phase at a time behind a barrier: create (open O_CREAT|O_EXCL
#                  + close), stat, remove; mkdir, stat, rmdir. Rate = P * FILES / (last end -
#                  first start). Before each stat phase the kernel's dentry and inode caches
#                  are dropped (drop_caches 3), so a stat is a LOOKUP on the server, not the
#                  kernel's cache; remove follows stat with the dentries it left (mdtest-like).
# The data workload (data), after the metadata workloads on the same mount: `cp -a` of
# DATA_SRC (the first /usr/lib/python3.* directory, Debian's standard library: on bookworm
# ~1,400 files, 50 MiB, 24 MiB of it two static libraries) onto the mount, timed, then `diff -r
# --no-dereference` against the source, which must find nothing (the run fails otherwise).
# The same copy onto a directory of /var/tmp (local: the disk both systems' data land on)
# is the baseline; each round copies once to local and once to the mount, the order turned
# every round, DATA_ROUNDS (3) rounds per system. Before each copy `sync` and drop_caches 3,
# so each copy reads its source from disk; before each diff too, so the diff reads the copy
# back from the servers, not the kernel's page cache. Each copy is removed after its diff,
# untimed. Printed per system: the median seconds of cp and its range, files/s (regular
# files) and MiB/s (their bytes) from that median, and the ratio of its seconds to local's
# median; then the median seconds of the `sync` that follows each copy (the copy's dirty
# pages, the servers' included, written to disk) and the ratio of cp+sync to local's. Only
# mds makes the copy durable as it goes: cp does not fsync, nor does the chunkserver
# (HDD_FSYNC_BEFORE_CLOSE 0) or moosefs's changelog (moosefs-fsync's does); mds-commit's
# commits are durable, with the data of the files under its inline cap (1 MiB by default,
# all but the two libraries here) in the store with their metadata, and mdsmount fsyncs each
# object it writes to the local object store, and its directory.
#   MooseFS: one mfschunkserver (Debian moosefs-chunkserver), started once the metadata
#   workloads are done, on SERVER_CPU with the master. Its config, written here: WORKING_USER
#   mfs; DATA_PATH (its lock file) and the one mfshdd.cfg entry (its chunks) in directories of
#   WORK owned by mfs; MASTER_HOST/MASTER_PORT the master's chunkserver port. MooseFS refuses
#   loopback between the two: the chunkserver will not connect to a 127.x master ("localhost
#   can't be used for connecting with master") and the master drops a chunkserver that
#   registers with a 127.x address, which is its CSSERV_LISTEN_HOST. So with the data workload
#   each MooseFS system runs in a network namespace of its own (ip netns, deleted at exit),
#   whose lo carries 127.0.0.1 and MFS_CS_ADDR (10.77.0.1): master and chunkserver talk and
#   listen on MFS_CS_ADDR there (MATOCS_LISTEN_HOST, BIND_HOST, CSSERV_LISTEN_HOST), every
#   other port of the master on 127.0.0.1, and no port on a real interface. mfsmount and the
#   mfs tools run in that namespace too (through nsenter, which keeps the host's mount
#   namespace, so the mount is an ordinary one). The root's goal is set to 1 (mfssetgoal -r
#   1) before the copy: MooseFS 3.0's default is 2, which one chunkserver leaves undergoal.
#   The copy waits until `mfscli -SCS` lists the chunkserver with its space (its registration
#   done, its folder scanned), for at most 30 s, then fails. Removed copies go to MooseFS's
#   trash (its default, 24 h), so their chunks are not deleted during the next round.
#   mds: the systems as for the metadata workloads, with the default object store (objects/
#   in the server's store, on /var/tmp), which mdsmount writes and reads directly.
# On 2 cores: every server (mfsmaster with its changelog writer, and mfschunkserver; mds with
# its one partition and RocksDB threads) on SERVER_CPU (0), and the load (fs_mark, the driver,
# cp, diff) with its FUSE daemon (mfsmount, mdsmount) on LOAD_CPU (1): a client machine and a
# server machine. Each mount with its own defaults (mfsmount: attributes 1 s, file entries
# 0 s, directory entries 1 s; mdsmount: attributes and entries 1 s).
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
# Installs moosefs-master and moosefs-client (with the data workload moosefs-chunkserver,
# moosefs-cli and iproute2 too) with apt when missing; cleans everything up at exit: every
# mount unmounted, every process it started killed, the namespaces deleted, WORK (stores,
# chunks, copies, logs) removed. Needs root (mounts, drop_caches, network namespaces, apt).
#   ./bench/vs-moosefs.sh | tee bench/results/vs-moosefs-$(date +%F).txt
#   PROCS="1 8" FILES=500 ./bench/vs-moosefs.sh
#   WORKLOADS=data RUN="moosefs mds-commit" ./bench/vs-moosefs.sh
#   RUN="fuse-ceiling mds-early mds-commit moosefs" PROCS=8 ./bench/vs-moosefs.sh
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
CEILING_CPU="${CEILING_CPU:-$LOAD_CPU}"
MDTEST="${MDTEST:-}"
WORKLOADS="${WORKLOADS:-meta data}"
if [ "${DATA:-1}" = 0 ]; then WORKLOADS="${WORKLOADS//data/}"; fi
DATA_ROUNDS="${DATA_ROUNDS:-3}"
DATA_SRC="${DATA_SRC:-}"
MFS_CS_ADDR="${MFS_CS_ADDR:-10.77.0.1}"
if [[ "$MFS_CS_ADDR" == 127.* ]]; then
  echo "vs-moosefs: MFS_CS_ADDR must not be a loopback address: MooseFS refuses those" >&2
  exit 2
fi
LOCK_OPS="${LOCK_OPS:-2000}"
DO_META=0 DO_DATA=0 DO_LOCKS=0
for w in $WORKLOADS; do
  case "$w" in
    meta) DO_META=1 ;;
    data) DO_DATA=1 ;;
    locks) DO_LOCKS=1 ;;
    *) echo "vs-moosefs: unknown workload $w (WORKLOADS: meta, data, locks)" >&2; exit 2 ;;
  esac
done
if [ "$DO_META" = 0 ] && [ "$DO_DATA" = 0 ] && [ "$DO_LOCKS" = 0 ]; then
  echo "vs-moosefs: no workload (WORKLOADS=\"$WORKLOADS\")" >&2
  exit 2
fi
if [ "$DO_DATA" = 1 ] && [ -z "$DATA_SRC" ]; then
  for d in /usr/lib/python3.*; do
    if [ -d "$d" ]; then DATA_SRC=$d; break; fi
  done
fi
if [ "$DO_DATA" = 1 ] && [ ! -d "$DATA_SRC" ]; then
  echo "vs-moosefs: no directory to copy (DATA_SRC, or a /usr/lib/python3.* directory)" >&2
  exit 2
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "vs-moosefs: needs root (FUSE mounts, drop_caches, network namespaces, apt)" >&2
  exit 2
fi
need=()
pkgs=(moosefs-master moosefs-client fsmark fuse3 python3)
if [ "$DO_DATA" = 1 ]; then pkgs+=(moosefs-chunkserver moosefs-cli iproute2); fi
for pkg in "${pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "vs-moosefs: installing ${need[*]}" >&2
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi
if [ -z "${BIN:-}" ] && [[ "$RUN" == *mds* || "$RUN" == *fuse-ceiling* ]]; then
  # The whole workspace, as the tests build it: another set of packages could select other
  # features of a shared dependency and build it again.
  cargo build --release --workspace --bins --examples >&2
  BIN="$CARGO_TARGET_DIR/release"
fi

WORK="$(mktemp -d /var/tmp/vs-moosefs.XXXXXX)"
chmod 755 "$WORK" # mfsmaster runs as the mfs user
# Mount points with short paths: fs_mark takes directories of fewer than 40 bytes.
MNTS="$(mktemp -d /tmp/vsm.XXXXXX)"
PIDS=()
MOUNTS=()
NETNS=()
LOAD_PID=""
cleanup() {
  set +e
  local m pid ns
  # The copy or diff under way first, so that nothing writes where a mount was.
  if [ -n "$LOAD_PID" ]; then
    kill -TERM "$LOAD_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$LOAD_PID" 2>/dev/null
  fi
  for m in "${MOUNTS[@]}"; do unmount "$m"; done
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  for ns in "${NETNS[@]}"; do ip netns delete "$ns" 2>/dev/null; done
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

cat >"$WORK/locks.py" <<'PY'
import fcntl, os, sys, time, multiprocessing as mp

def worker(path, n, how, barrier, out):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    lock, unlock = {
        "fcntl": (lambda: fcntl.lockf(fd, fcntl.LOCK_EX), lambda: fcntl.lockf(fd, fcntl.LOCK_UN)),
        "flock": (lambda: fcntl.flock(fd, fcntl.LOCK_EX), lambda: fcntl.flock(fd, fcntl.LOCK_UN)),
    }[how]
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(n):
        lock()
        unlock()
    out.put((t0, time.perf_counter()))
    os.close(fd)

def main():
    root, procs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for name, how, shared in [("fcntl-lock-unlock", "fcntl", False),
                              ("flock-lock-unlock", "flock", False),
                              ("fcntl-one-file", "fcntl", True)]:
        barrier = mp.Barrier(procs)
        out = mp.Queue()
        paths = [os.path.join(root, "%s-%d" % (name, 0 if shared else i)) for i in range(procs)]
        ws = [mp.Process(target=worker, args=(paths[i], n, how, barrier, out)) for i in range(procs)]
        for w in ws:
            w.start()
        rs = [out.get() for _ in range(procs)]
        for w in ws:
            w.join()
            if w.exitcode != 0:
                sys.exit(1)
        t0, t1 = min(r[0] for r in rs), max(r[1] for r in rs)
        print("%s %.1f" % (name, procs * n / (t1 - t0)), flush=True)

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

# The lock workload on the mount at $2, for system $1 (see WORKLOADS=locks above).
lock_workload() {
  local sys=$1 mnt=$2 p
  for p in $PROCS; do
    mkdir "$mnt/locks-$p"
    while read -r name rate; do
      record "$sys" "$name" "$p" "$rate"
    done < <(timeout -k 10 900 taskset -c "$LOAD_CPU" python3 "$WORK/locks.py" "$mnt/locks-$p" "$p" "$LOCK_OPS")
    echo "vs-moosefs: $sys, locks, $p process(es) done" >&2
  done
}

# The data workload: one timed `cp -a` of DATA_SRC to $2 (which must not exist yet), recorded
# for system $1 as round $3 with the `sync` after it; then, untimed, the check and the removal.
DRESULTS="$WORK/data-results"
: >"$DRESULTS"
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# Runs "$@" in the background and waits for it, so that a signal to this script ends the wait
# at once and the cleanup stops it (LOAD_PID) before unmounting; returns its status.
load() {
  local rc=0
  "$@" &
  LOAD_PID=$!
  wait "$LOAD_PID" || rc=$?
  LOAD_PID=""
  return "$rc"
}
copy_once() {
  local sys=$1 dst=$2 round=$3 t0 t1 t2
  drop_caches
  t0=$(date +%s.%N)
  if ! load timeout -k 10 900 taskset -c "$LOAD_CPU" cp -a "$DATA_SRC" "$dst"; then
    echo "vs-moosefs: cp -a $DATA_SRC $dst failed ($sys, round $round)" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  sync
  t2=$(date +%s.%N)
  drop_caches
  if ! load timeout -k 10 900 taskset -c "$LOAD_CPU" diff -r --no-dereference "$DATA_SRC" "$dst" \
    >"$WORK/diff.out" 2>&1; then
    echo "vs-moosefs: FAILED: the copy on $sys differs from $DATA_SRC (round $round):" >&2
    head -n 40 "$WORK/diff.out" >&2
    return 1
  fi
  load timeout -k 10 900 rm -rf "$dst"
  awk -v s="$sys" -v r="$round" -v a="$t0" -v b="$t1" -v c="$t2" \
    'BEGIN { printf "%s %s %.3f %.3f\n", s, r, b - a, c - b }' >>"$DRESULTS"
}

# The data workload on the mount at $2, for system $1: DATA_ROUNDS rounds, each one copy to
# local (a directory of WORK, on /var/tmp) and one to the mount, the order turned every round.
data_workload() {
  local sys=$1 mnt=$2 r
  mkdir -p "$WORK/local"
  for r in $(seq 1 "$DATA_ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then
      copy_once local "$WORK/local/$sys-$r" "$sys-$r"
      copy_once "$sys" "$mnt/cp-$r" "$r"
    else
      copy_once "$sys" "$mnt/cp-$r" "$r"
      copy_once local "$WORK/local/$sys-$r" "$sys-$r"
    fi
    echo "vs-moosefs: $sys, data round $r done" >&2
  done
}

run_moosefs() {
  local sys=$1 save_mode=$2 dir="$WORK/$1" mnt="$MNTS/$1" port_cl port_cs port_ml port_csserv
  local pid cs_pid="" ns deadline cs_host=127.0.0.1 nsx=()
  mkdir -p "$dir/data" "$mnt"
  cp /var/lib/mfs/metadata.mfs.empty "$dir/data/metadata.mfs"
  chown -R mfs:mfs "$dir/data"
  port_cl=$(free_port) port_cs=$(free_port) port_ml=$(free_port)
  if [ "$DO_DATA" = 1 ]; then
    # MooseFS refuses loopback between master and chunkserver (see the header): a network
    # namespace of their own, whose lo also carries MFS_CS_ADDR.
    ns="vs-moosefs-$$-$sys"
    ip netns add "$ns"
    NETNS+=("$ns")
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$MFS_CS_ADDR/32" dev lo
    nsx=(nsenter "--net=/run/netns/$ns")
    cs_host=$MFS_CS_ADDR
  fi
  cat >"$dir/mfsmaster.cfg" <<CFG
WORKING_USER = mfs
DATA_PATH = $dir/data
EXPORTS_FILENAME = $dir/mfsexports.cfg
CHANGELOG_SAVE_MODE = $save_mode
MATOML_LISTEN_HOST = 127.0.0.1
MATOML_LISTEN_PORT = $port_ml
MATOCS_LISTEN_HOST = $cs_host
MATOCS_LISTEN_PORT = $port_cs
MATOCL_LISTEN_HOST = 127.0.0.1
MATOCL_LISTEN_PORT = $port_cl
CFG
  echo "127.0.0.1 / rw,alldirs,maproot=0:0" >"$dir/mfsexports.cfg"
  taskset -c "$SERVER_CPU" "${nsx[@]}" mfsmaster -c "$dir/mfsmaster.cfg" -f start >"$dir/master.log" 2>&1 &
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
  taskset -c "$LOAD_CPU" "${nsx[@]}" mfsmount "$mnt" -H 127.0.0.1 -P "$port_cl" -f >"$dir/mount.log" 2>&1 &
  PIDS+=("$!")
  MOUNTS+=("$mnt")
  wait_mounted "$mnt"
  if [ "$DO_META" = 1 ]; then workload "$sys" "$mnt"; fi
  if [ "$DO_LOCKS" = 1 ]; then lock_workload "$sys" "$mnt"; fi
  if [ "$DO_DATA" = 1 ]; then
    mkdir -p "$dir/cs/lock" "$dir/cs/chunks"
    chown -R mfs:mfs "$dir/cs"
    echo "$dir/cs/chunks" >"$dir/mfshdd.cfg"
    port_csserv=$(free_port)
    cat >"$dir/mfschunkserver.cfg" <<CFG
WORKING_USER = mfs
DATA_PATH = $dir/cs/lock
HDD_CONF_FILENAME = $dir/mfshdd.cfg
BIND_HOST = $MFS_CS_ADDR
MASTER_HOST = $MFS_CS_ADDR
MASTER_PORT = $port_cs
MASTER_CONTROL_PORT = $port_ml
CSSERV_LISTEN_HOST = $MFS_CS_ADDR
CSSERV_LISTEN_PORT = $port_csserv
CFG
    taskset -c "$SERVER_CPU" "${nsx[@]}" mfschunkserver -c "$dir/mfschunkserver.cfg" -f start \
      >"$dir/chunkserver.log" 2>&1 &
    cs_pid=$!
    PIDS+=("$cs_pid")
    # Registered, its folder scanned: the master lists it with its total space.
    deadline=$((SECONDS + 30))
    until "${nsx[@]}" mfscli -n -H 127.0.0.1 -P "$port_cl" -SCS 2>/dev/null |
      awk -F'\t' -v a="$MFS_CS_ADDR" '$1 == "chunk servers:" && $2 == a && $11 > 0 { ok = 1 } END { exit !ok }'; do
      if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$cs_pid" 2>/dev/null; then
        echo "vs-moosefs: the chunkserver of $sys did not register with mfsmaster within 30 s;" \
          "its log, then the master's:" >&2
        cat "$dir/chunkserver.log" >&2
        tail -n 20 "$dir/master.log" >&2
        return 1
      fi
      sleep 0.2
    done
    # One copy of each chunk: MooseFS 3.0's default goal is 2, undergoal with one chunkserver.
    "${nsx[@]}" mfssetgoal -r 1 "$mnt" >/dev/null
    data_workload "$sys" "$mnt"
  fi
  unmount "$mnt"
  if [ -n "$cs_pid" ]; then
    kill -TERM "$cs_pid"
    wait "$cs_pid" || true
  fi
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
  # The mount answered as the server's --ack says (it asks for early replies by default).
  taskset -c "$LOAD_CPU" "$BIN/mdsmount" "$MDS_ADDR" "$mnt" -f -o ack=server >"$dir/mount.log" 2>&1 &
  PIDS+=("$!")
  MOUNTS+=("$mnt")
  wait_mounted "$mnt"
  if [ "$DO_META" = 1 ]; then workload "$sys" "$mnt"; fi
  if [ "$DO_LOCKS" = 1 ]; then lock_workload "$sys" "$mnt"; fi
  if [ "$DO_DATA" = 1 ]; then data_workload "$sys" "$mnt"; fi
  unmount "$mnt"
  kill -TERM "$pid"
  wait "$pid" || true
}

# The kernel's requests to the no-op file system $1 (its daemon $3, printing to $4) for one
# process's FILES creates, stats with the caches dropped, and removes in $2: a line each,
# "SYSTEM PHASE KIND=N/FILES …".
RQRESULTS="$WORK/requests"
: >"$RQRESULTS"
count_requests() {
  local sys=$1 dir=$2 pid=$3 out=$4 phase lines
  mkdir "$dir"
  for phase in create stat remove; do
    [ "$phase" = stat ] && drop_caches
    lines=$(wc -l <"$out")
    kill -USR1 "$pid" # from zero
    for _ in $(seq 1 100); do [ "$(wc -l <"$out")" -gt "$lines" ] && break; sleep 0.05; done
    timeout -k 10 300 taskset -c "$LOAD_CPU" python3 -c '
import os, sys
d, n, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n):
    f = os.path.join(d, "f%d" % i)
    if phase == "create":
        os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    elif phase == "stat":
        os.stat(f)
    else:
        os.unlink(f)
' "$dir" "$FILES" "$phase"
    lines=$(wc -l <"$out")
    kill -USR1 "$pid"
    for _ in $(seq 1 100); do [ "$(wc -l <"$out")" -gt "$lines" ] && break; sleep 0.05; done
    tail -n1 "$out" | awk -v s="$sys" -v p="$phase" -v n="$FILES" '$1 == "requests" {
      line = s " file-" p
      for (i = 2; i <= NF; i++) { split($i, kv, "="); line = line sprintf(" %s=%.2f", kv[1], kv[2] / n) }
      print line }' >>"$RQRESULTS"
  done
  rmdir "$dir"
}

run_ceiling() {
  local sys=$1 dir="$WORK/$1" mnt="$MNTS/$1" pid
  shift
  mkdir -p "$dir" "$mnt"
  taskset -c "$CEILING_CPU" "$BIN/examples/fuse_ceiling" "$@" "$mnt" >"$dir/ceiling.out" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  MOUNTS+=("$mnt")
  wait_mounted "$mnt"
  if [ "$DO_META" = 1 ]; then
    workload "$sys" "$mnt"
    count_requests "$sys" "$mnt/requests" "$pid" "$dir/ceiling.out"
  fi
  if [ "$DO_LOCKS" = 1 ]; then lock_workload "$sys" "$mnt"; fi
  if [ "$DO_DATA" = 1 ]; then data_workload "$sys" "$mnt"; fi
  unmount "$mnt"
  wait "$pid" || true
}

SYSTEMS=()
for s in $RUN; do
  case "$s" in
    moosefs) run_moosefs moosefs 0 ;;
    moosefs-fsync) run_moosefs moosefs-fsync 2 ;;
    mds-early) run_mds mds-early early ;;
    mds-commit) run_mds mds-commit commit ;;
    fuse-ceiling) run_ceiling fuse-ceiling ;;
    ceiling-acl) run_ceiling ceiling-acl --posix-acl ;;
    *) echo "vs-moosefs: unknown system $s" >&2; exit 2 ;;
  esac
  SYSTEMS+=("$s")
done

echo "# vs-moosefs: $(date -u +%FT%TZ), $(uname -r), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
mfs_versions="mfsmaster $(dpkg-query -W -f '${Version}' moosefs-master)"
if [ "$DO_DATA" = 1 ]; then
  mfs_versions+=", mfschunkserver $(dpkg-query -W -f '${Version}' moosefs-chunkserver)"
fi
echo "# $mfs_versions, mds $("${BIN:-$CARGO_TARGET_DIR/release}/mds" --version 2>/dev/null | awk '{print $NF}'), mdsmount $("${BIN:-$CARGO_TARGET_DIR/release}/mdsmount" --version 2>/dev/null | awk '{print $NF}') (commit $(git rev-parse --short HEAD 2>/dev/null), tree $(git diff --quiet 2>/dev/null && echo clean || echo modified))"
if [ "$DO_META" = 1 ]; then
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
fi
if [ "$DO_LOCKS" = 1 ]; then
  echo "# locks: lock+unlock pairs/s of all processes, LOCK_OPS=$LOCK_OPS pairs each; *-lock-unlock on a"
  echo "# file per process, fcntl-one-file on one file all share. fuse-ceiling: the kernel's own locks."
  echo "# Servers on CPU $SERVER_CPU, the processes and FUSE daemons on CPU $LOAD_CPU."
fi
if [ -s "$RESULTS" ]; then
  printf '%-20s %5s' workload procs
  for s in "${SYSTEMS[@]}"; do printf ' %14s' "$s"; done
  printf '\n'
  while read -r w; do
    for p in $PROCS; do
      printf '%-20s %5s' "$w" "$p"
      for s in "${SYSTEMS[@]}"; do
        printf ' %14s' "$(awk -v s="$s" -v w="$w" -v p="$p" '$1 == s && $2 == w && $3 == p { print $4 }' "$RESULTS")"
      done
      printf '\n'
    done
  done < <(awk '!seen[$2]++ { print $2 }' "$RESULTS")
  if [ -s "$RQRESULTS" ]; then
    echo "# requests per operation: what the kernel sent the no-op file system for each of"
    echo "# FILES=$FILES creates (open O_CREAT|O_EXCL + close), stats (caches dropped) and removes by"
    echo "# one process; mdsmount's capabilities and timeouts (ceiling-acl: with FUSE_POSIX_ACL)."
    cat "$RQRESULTS"
  fi
fi
if [ "$DO_DATA" = 1 ]; then
  nfiles=$(find "$DATA_SRC" -type f | wc -l)
  nlinks=$(find "$DATA_SRC" -type l | wc -l)
  ndirs=$(find "$DATA_SRC" -type d | wc -l)
  bytes=$(find "$DATA_SRC" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')
  echo "# data: cp -a $DATA_SRC ($nfiles files, $nlinks symlinks, $ndirs directories; $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB"
  echo "# in the files) onto each mount and onto a directory of /var/tmp (local): $DATA_ROUNDS rounds per"
  echo "# system, each one copy to local and one to the mount (local: $DATA_ROUNDS copies per system). Servers"
  echo "# on CPU $SERVER_CPU (MooseFS: master and chunkserver, goal 1), cp and FUSE daemons on CPU $LOAD_CPU."
  echo "# Caches dropped before each copy and before each diff -r, which found every copy identical."
  echo "# cp s: the median seconds of the copy [min-max]; files/s and MiB/s from that median; x local:"
  echo "# its ratio to local's median (higher is slower). +sync s: the median seconds of the sync(1)"
  echo "# right after each copy; x local: the median of cp+sync against local's."
  printf '%-14s %8s %15s %9s %8s %8s %8s %8s\n' system "cp s" "[min-max]" files/s MiB/s "x local" "+sync s" "x local"
  for s in local "${SYSTEMS[@]}"; do
    awk -v s="$s" -v files="$nfiles" -v bytes="$bytes" '
      function median(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      $1 == "local" { l++; lcp[l] = $3; lall[l] = $3 + $4 }
      $1 == s { n++; cp[n] = $3; sy[n] = $4; all[n] = $3 + $4
        if (n == 1 || $3 < lo) lo = $3
        if (n == 1 || $3 > hi) hi = $3 }
      END {
        if (n == 0) exit
        m = median(cp, n); ms = median(sy, n); ma = median(all, n)
        lm = median(lcp, l); la = median(lall, l)
        printf "%-14s %8.2f %15s %9.0f %8.1f %8.2f %8.2f %8.2f\n", s, m, sprintf("[%.2f-%.2f]", lo, hi),
          files / m, bytes / 1048576 / m, m / lm, ms, ma / la
      }' "$DRESULTS"
  done
fi
