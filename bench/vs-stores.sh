#!/usr/bin/env bash
# Durable creates/s of mds against what a user might pick instead, side by side in one run, at
# 2, 64 and 1024 outstanding requests: every write below is acknowledged only once it is on
# disk (fsync'd), and each system gets DURATION per point on the same machine, one after the
# other (mds, Redis, PostgreSQL; ROUNDS repeats that block):
#   - mds: a fresh `mds serve` on a fresh store under /var/tmp per run (as before-after.sh),
#     `loadgen create` at 2 x 1, 64 x 1 and 64 x 16 (threads x depth);
#   - Redis (`redis-server`, appendonly yes, appendfsync always: one fsync of the AOF per
#     event-loop pass, before the replies of that pass), a fresh server and AOF directory per
#     run, driven by `redis-benchmark -t set -r 100000000` (random keys, so most SETs add a
#     key; its default 3-byte values and one client thread) at -c 2, -c 64 and -c 64 -P 16;
#     redis-benchmark counts requests, not time, so a
#     short run first measures the rate and the timed run gets rate x DURATION requests (it
#     prints how long that took);
#   - PostgreSQL (fsync on, synchronous_commit on, otherwise its defaults), one cluster of its
#     own (initdb as the postgres user under /var/tmp, 127.0.0.1 on a free port), a fresh
#     table per run: files(ino bigserial primary key, parent bigint, name text, unique (parent,
#     name)) -- an inode number and a directory entry, as a create makes -- driven by `pgbench
#     -M prepared` with one INSERT per transaction at -c 2 -j 2, -c 64 -j 2 and -c 1024 -j 2.
#     Why -c 1024 and not -c 64 with pipelines of 16: a PostgreSQL connection runs one
#     transaction at a time, and pgbench's \startpipeline ... \endpipeline sends its statements
#     as ONE implicit transaction (\syncpipeline, which would split it, needs PostgreSQL 17),
#     so a pipeline of 16 INSERTs is a 16-row batch committed once: the client batching the
#     commits, which mds is not given. 1024 connections (max_connections is raised for it)
#     are 1024 independent durable inserts in flight, as mds's 1024 creates are. The batched
#     figure is still printed beside it at 1024 (pg_batch16: -c 64 -j 2, 16 INSERTs per
#     pipeline, 16 rows counted per transaction; PG_BATCHED=0 skips it). pgbench's -T counts
#     its connection time, so the 1024 run gets -T DURATION + PG_CONNECT_SECS, and the rate is
#     its tps without the connection time (the window it measured over is printed).
# Prints per run and a table: outstanding, mds/s, redis/s, pg/s, mds/redis, mds/pg (means over
# rounds); writes bench/results/vs-stores.csv (with the Redis and PostgreSQL versions; every run
# in vs-stores-runs.csv) and draws docs/vs-stores.svg (bench/chart_compare.py). Installs Redis
# and PostgreSQL from Debian's packages if they are missing (apt-get; needs root, as
# everything here runs; where systemd runs, Debian also starts its own default instances on
# ports 6379 and 5432, idle beside these).
#   DURATION=10s ./bench/vs-stores.sh
#   DURATION=3s POINTS="2 64" SYSTEMS="mds redis" ./bench/vs-stores.sh   # a quick look
# BIN=<release dir> skips the build and uses the mds and loadgen there.
# Placement (bench/per-core.sh sets it): SERVER_CPUS runs every server (and every thread it
# starts: RocksDB's, Redis's, PostgreSQL's backends) under `taskset -c SERVER_CPUS`, LOAD_CPUS
# every load generator under `taskset -c LOAD_CPUS`; MDS_ARGS are added to `mds serve` (e.g.
# --partitions 1); NAME names the CSVs and the chart (default vs-stores). With SERVER_CPUS, mds's
# mutations per commit is recorded for each run (from loadgen's `server:` line).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/mds-target}"
DURATION="${DURATION:-10s}"
SECS="${DURATION%s}"
[[ "$SECS" =~ ^[0-9]+$ ]] || { echo "DURATION is whole seconds, e.g. 10s" >&2; exit 2; }
POINTS="${POINTS:-2 64 1024}"
SYSTEMS="${SYSTEMS:-mds redis pg}"
ROUNDS="${ROUNDS:-1}"
PG_BATCHED="${PG_BATCHED:-1}"
PG_CONNECT_SECS="${PG_CONNECT_SECS:-5}"
SERVER_CPUS="${SERVER_CPUS:-}"
LOAD_CPUS="${LOAD_CPUS:-}"
MDS_ARGS="${MDS_ARGS:-}"
NAME="${NAME:-vs-stores}"
OUT=bench/results
CSV="$OUT/$NAME.csv"
RUNS="$OUT/$NAME-runs.csv"
mkdir -p "$OUT"
has() { [[ " $SYSTEMS " == *" $1 "* ]]; }
# The placement: a server's command after "${SERVER_ON[@]}", a load generator's after
# "${LOAD_ON[@]}" (arrays, not functions: a function run with & is a subshell, and $! would
# name it instead of the server that the cleanup must stop).
SERVER_ON=() LOAD_ON=()
[[ -n "$SERVER_CPUS" ]] && SERVER_ON=(taskset -c "$SERVER_CPUS")
[[ -n "$LOAD_CPUS" ]] && LOAD_ON=(taskset -c "$LOAD_CPUS")

# --- what each system needs, installed once -------------------------------------------------
apt_install() {
  if [[ -z "${APT_UPDATED:-}" ]]; then apt-get update -q >/dev/null; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null
}
if has redis && ! { command -v redis-server && command -v redis-benchmark && command -v redis-cli; } >/dev/null; then
  echo "installing redis-server redis-tools" >&2
  apt_install redis-server redis-tools
fi
pg_bin() { find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1; }
if has pg && { [[ -z "$(pg_bin)" ]] || ! command -v pgbench >/dev/null; }; then
  echo "installing postgresql postgresql-contrib" >&2
  apt_install postgresql postgresql-contrib
fi
if [[ -z "${BIN:-}" ]] && has mds; then
  cargo build --release -p mds -p loadgen
  BIN="$CARGO_TARGET_DIR/release"
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Everything started here is stopped on exit, whatever happened.
MDS_PID="" REDIS_PID="" PG_DIR="" SCRATCH=()
cleanup() {
  [[ -n "$MDS_PID" ]] && { kill "$MDS_PID" 2>/dev/null; wait "$MDS_PID" 2>/dev/null; }
  [[ -n "$REDIS_PID" ]] && { kill "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; }
  if [[ -n "$PG_DIR" ]]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1
  fi
  [[ -n "$PG_DIR" ]] && rm -rf "$PG_DIR"
  for d in "${SCRATCH[@]}"; do rm -rf "$d"; done
  return 0
}
trap cleanup EXIT

# The run functions leave their result in RESULT rather than print it: called in $(...), the
# servers they start would be out of reach of the exit trap.
RESULT=""

# --- mds: a fresh server and store per run; RESULT is creates/s -----------------------------
mds_run() {
  local threads=$1 depth=$2 data log addr
  data=$(mktemp -d /var/tmp/mds-vs.XXXXXX); log="$data.log"; SCRATCH+=("$data" "$log")
  # shellcheck disable=SC2086 # MDS_ARGS is a list of flags
  "${SERVER_ON[@]}" "$BIN/mds" serve --data "$data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    $MDS_ARGS 2>"$log" &
  MDS_PID=$!
  wait_for_mds "$log"
  addr=$MDS_ADDR
  local out
  out=$("${LOAD_ON[@]}" "$BIN/loadgen" create --server "$addr" --threads "$threads" --depth "$depth" \
    --duration "$DURATION")
  # creates/s, then the server's mutations per commit over the run
  RESULT=$(awk '/^Rate:/ {r = $2} /^server: / {c = $2} END {print r, c + 0}' <<<"$out")
  kill -TERM "$MDS_PID"; wait "$MDS_PID" || true; MDS_PID=""
  rm -rf "$data" "$log"
}

# --- Redis: a fresh server and AOF per run; RESULT is "SETs/s seconds-it-ran" ---------------
redis_bench() { # port, requests, redis-benchmark flags...; prints its rps
  local port=$1 n=$2; shift 2
  "${LOAD_ON[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -t set -r 100000000 -n "$n" --csv "$@" |
    awk -F'"' '$2 == "SET" {print $4}'
}
redis_run() {
  local dir port rps n started ended rate
  dir=$(mktemp -d /var/tmp/mds-vs-redis.XXXXXX); SCRATCH+=("$dir")
  port=$(free_port)
  "${SERVER_ON[@]}" redis-server --port "$port" --bind 127.0.0.1 --appendonly yes --appendfsync always \
    --dir "$dir" --save '' --daemonize no --logfile "$dir/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 1 100); do
    [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && break; sleep 0.1
  done
  [[ "$(redis-cli -h 127.0.0.1 -p "$port" config get appendfsync | tail -1)" == always ]] ||
    { echo "redis did not start with appendfsync always" >&2; exit 1; }
  # A short run sizes the timed one (and warms the server up).
  local clients=$1 pipeline=$2 flags=(-c "$1")
  [[ "$pipeline" -gt 1 ]] && flags+=(-P "$pipeline")
  n=$((clients * pipeline * 50)); [[ $n -lt 2000 ]] && n=2000
  rps=$(redis_bench "$port" "$n" "${flags[@]}")
  n=$(awk -v r="$rps" -v s="$SECS" 'BEGIN {printf "%d", r * s}')
  started=$(date +%s.%N)
  rate=$(redis_bench "$port" "$n" "${flags[@]}")
  ended=$(date +%s.%N)
  kill -TERM "$REDIS_PID"; wait "$REDIS_PID" || true; REDIS_PID=""
  rm -rf "$dir"
  RESULT=$(awk -v r="$rate" -v a="$started" -v b="$ended" 'BEGIN {printf "%s %.1f", r, b - a}')
}

# --- PostgreSQL: one cluster for the script, a fresh table per run ---------------------------
# The server runs only around its own runs: pg_run starts it, settle stops it.
PG_UP=""
pg_up() {
  [[ -n "$PG_UP" ]] && return
  "${SERVER_ON[@]}" runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=1100 -c fsync=on -c synchronous_commit=on" \
    start >/dev/null
  PG_UP=1
}
pg_down() {
  [[ -z "$PG_UP" ]] && return
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null
  PG_UP=""
}
pg_start() {
  PGBIN=$(pg_bin)
  PG_DIR=$(mktemp -d /var/tmp/mds-vs-pg.XXXXXX)
  chown postgres: "$PG_DIR"
  PG_PORT=$(free_port)
  runuser -u postgres -- "$PGBIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
    -E UTF8 --no-locale >"$PG_DIR/initdb.log"
  pg_up
  export PGHOST=127.0.0.1 PGPORT=$PG_PORT PGUSER=postgres PGDATABASE=postgres
  export PGOPTIONS="-c client_min_messages=warning"
  [[ "$(psql -Atc 'show fsync')/$(psql -Atc 'show synchronous_commit')" == on/on ]] ||
    { echo "postgres is not fsync=on synchronous_commit=on" >&2; exit 1; }
  local insert="INSERT INTO files (parent, name) VALUES (:client_id, 'f.' || nextval('names'));"
  echo "$insert" >"$PG_DIR/insert.sql"
  { printf '%s\n' '\startpipeline'; for _ in $(seq 1 16); do echo "$insert"; done
    printf '%s\n' '\endpipeline'; } >"$PG_DIR/batch16.sql"
}
# clients, script (insert or batch16), rows per transaction; RESULT is "rows/s seconds-measured"
pg_run() {
  local clients=$1 script=$2 rows=$3 secs=$SECS out tps txns
  pg_up
  psql -q -v ON_ERROR_STOP=1 <<'SQL'
DROP TABLE IF EXISTS files; DROP SEQUENCE IF EXISTS names;
CREATE TABLE files (ino bigserial PRIMARY KEY, parent bigint NOT NULL, name text NOT NULL,
  UNIQUE (parent, name));
CREATE SEQUENCE names;
CHECKPOINT;
SQL
  [[ "$clients" -gt 64 ]] && secs=$((SECS + PG_CONNECT_SECS))
  out=$("${LOAD_ON[@]}" pgbench -n -M prepared -f "$PG_DIR/$script.sql" -c "$clients" -j 2 -T "$secs" 2>&1) ||
    { echo "$out" >&2; exit 1; }
  tps=$(echo "$out" | awk '/^tps = / {print $3}')
  txns=$(echo "$out" | awk '/actually processed/ {print $NF}')
  RESULT=$(awk -v t="$tps" -v n="$txns" -v r="$rows" 'BEGIN {printf "%.1f %.1f", t * r, n / t}')
}

# Before each system's run: what the one before left to do must not land in its seconds on the
# shared core and disk. PostgreSQL stayed up for the whole script, and after a run it still had
# the table it filled to checkpoint and autovacuum; mds's run at 1024 came right after it, and
# made 148-149k creates/s in two runs, 170k with the other systems left out, 161k and 206k
# with this (docs/benchmarks/create-path.md). The table is dropped (pg_run makes a new one), checkpointed,
# and every dirty page written. Even so, mds at 1024 made 282k creates/s right after
# PostgreSQL's batched run against 305k before it (same build, same hour), and 249k in both
# rounds of the whole script: PostgreSQL is now stopped as well, until its next run.
settle() {
  if [[ -n "$PG_UP" ]]; then
    psql -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS files' -c 'DROP SEQUENCE IF EXISTS names' \
      -c 'CHECKPOINT'
    pg_down
  fi
  sync
}

REDIS_VERSION="" PG_VERSION=""
if has redis; then REDIS_VERSION=$(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/'); fi
if has pg; then
  pg_start
  PG_VERSION=$(psql -Atc 'show server_version' | awk '{print $1}')
fi
echo "versions: redis ${REDIS_VERSION:-(not run)}, postgresql ${PG_VERSION:-(not run)}; $(nproc) cores; DURATION=$DURATION"

echo "versions: placement ${SERVER_CPUS:+servers on CPU $SERVER_CPUS, load on CPU $LOAD_CPUS, }mds ${MDS_ARGS:-(defaults)}"
echo "outstanding,round,system,config,per_sec,seconds,per_commit" >"$RUNS"
for point in $POINTS; do
  case $point in
    2) m="2 1" r="2 1" p=2 ;;
    64) m="64 1" r="64 1" p=64 ;;
    1024) m="64 16" r="64 16" p=1024 ;;
    *) echo "POINTS: 2, 64 or 1024, not $point" >&2; exit 2 ;;
  esac
  for round in $(seq 1 "$ROUNDS"); do
    if has mds; then
      read -r t d <<<"$m"
      settle
      mds_run "$t" "$d"; read -r rate per_commit <<<"$RESULT"
      echo "$point,$round,mds,loadgen --threads $t --depth $d,$rate,$SECS,$per_commit" | tee -a "$RUNS"
    fi
    if has redis; then
      read -r c pl <<<"$r"
      settle
      redis_run "$c" "$pl"; read -r rate secs <<<"$RESULT"
      rflags="-c $c"; [[ "$pl" -gt 1 ]] && rflags="$rflags -P $pl"
      echo "$point,$round,redis,redis-benchmark $rflags,$rate,$secs," | tee -a "$RUNS"
    fi
    if has pg; then
      settle
      pg_run "$p" insert 1; read -r rate secs <<<"$RESULT"
      echo "$point,$round,pg,pgbench -c $p -j 2,$rate,$secs," | tee -a "$RUNS"
      if [[ "$point" == 1024 && "$PG_BATCHED" == 1 ]]; then
        settle
        pg_run 64 batch16 16; read -r rate secs <<<"$RESULT"
        echo "$point,$round,pg_batch16,pgbench -c 64 -j 2 (16-INSERT pipeline = 1 txn),$rate,$secs," |
          tee -a "$RUNS"
      fi
    fi
  done
done

PLACEMENT=""
[[ -n "$SERVER_CPUS" ]] && PLACEMENT="servers on CPU $SERVER_CPUS, load on CPU $LOAD_CPUS; mds ${MDS_ARGS:-defaults}"
python3 - "$RUNS" "$CSV" "$REDIS_VERSION" "$PG_VERSION" "$SECS" "$PLACEMENT" <<'PY'
import csv, statistics, sys
runs, dst, redis_v, pg_v, secs, placement = sys.argv[1:]
rows = list(csv.DictReader(open(runs)))
points = sorted({int(r["outstanding"]) for r in rows})
systems = ["mds", "redis", "pg", "pg_batch16"]
fields = ["outstanding"] + [f"{s}_{k}" for s in systems for k in ("per_sec", "config")] + [
    "mds_over_redis", "mds_over_pg", "mds_per_commit", "redis_version", "pg_version",
    "duration_secs", "rounds", "placement"]
out = []
for p in points:
    row = {"outstanding": p, "redis_version": redis_v, "pg_version": pg_v, "duration_secs": secs,
           "placement": placement}
    mds_runs = [r for r in rows if int(r["outstanding"]) == p and r["system"] == "mds"]
    per_commit = [float(r["per_commit"]) for r in mds_runs if r.get("per_commit")]
    row["mds_per_commit"] = f"{statistics.mean(per_commit):.2f}" if per_commit else ""
    for s in systems:
        mine = [r for r in rows if int(r["outstanding"]) == p and r["system"] == s]
        row[f"{s}_per_sec"] = f"{statistics.mean(float(r['per_sec']) for r in mine):.0f}" if mine else ""
        row[f"{s}_config"] = mine[0]["config"] if mine else ""
        row["rounds"] = max(row.get("rounds", 0), len(mine))
    for other in ("redis", "pg"):
        a, b = row["mds_per_sec"], row[f"{other}_per_sec"]
        row[f"mds_over_{other}"] = f"{float(a) / float(b):.2f}" if a and b else ""
    out.append(row)
with open(dst, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(out)
print()
print(f"{'outstanding':>11} {'mds/s':>10} {'redis/s':>10} {'pg/s':>10} {'mds/redis':>9} {'mds/pg':>7}   pg batched 16/txn")
for r in out:
    print(f"{r['outstanding']:>11} {r['mds_per_sec']:>10} {r['redis_per_sec']:>10} {r['pg_per_sec']:>10} "
          f"{r['mds_over_redis']:>9} {r['mds_over_pg']:>7}   {r['pg_batch16_per_sec']}")
print(f"redis {redis_v or '-'}, postgresql {pg_v or '-'}; means over {out[0]['rounds'] if out else 0} round(s); {dst}")
PY
python3 bench/chart_compare.py vs-stores "$CSV" "docs/$NAME.svg"
