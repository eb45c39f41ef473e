#!/usr/bin/env bash
# The counted cost of a durable create, by stage: the server serves COUNT creates at
# THREADS x DEPTH under callgrind (one partition, so its stages are one thread's), and the
# inclusive instruction counts of the functions that begin each stage, divided by COUNT, make
# the table docs/benchmarks/create-path.md keeps ("Where a create's instructions go"). Then Redis, if
# installed, serves COUNT durable SETs (appendfsync always) under cachegrind, driven at the same
# outstanding count (redis-benchmark -c THREADS -P DEPTH), for its instructions per SET.
# Counts repeat where timings on this host do not; the server runs ~50x slower under valgrind,
# so batches are larger than at full speed (the figures say so: mutations per commit).
#   ./bench/budget.sh                 # COUNT=100000 THREADS=64 DEPTH=16
#   MDS_BIN=/var/tmp/old/release ./bench/budget.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
MDS_BIN="${MDS_BIN:-${CARGO_TARGET_DIR:-/var/tmp/mds-target}/release}"
COUNT="${COUNT:-100000}"
THREADS="${THREADS:-64}"
DEPTH="${DEPTH:-16}"
OUT="${OUT:-/var/tmp/mds-budget}"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 2; }
mkdir -p "$OUT"
data="$(mktemp -d /var/tmp/mds-budget.XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$data"' EXIT

valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
  "$MDS_BIN/mds" serve --data "$data/store" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --partitions 1 2>"$data/log" &
pid=$!
wait_for_mds "$data/log"
"$MDS_BIN/loadgen" create --server "$MDS_ADDR" --threads "$THREADS" --depth "$DEPTH" \
  --count "$COUNT" --warmup 0 --quiet | grep -E "^server:" || true
kill -TERM "$pid"
wait "$pid" || true
pid=""
callgrind_annotate --inclusive=yes --threshold=100 "$OUT/callgrind.out" >"$OUT/inclusive.txt"

# The inclusive count of the function named $1 (exactly, after its source file; a name
# ending in `*` is a prefix), the largest of its entries (callgrind_annotate lists a
# function once per source file its code came from: the largest is the whole function), per
# create. A second argument keeps only the entries whose source file ends with it (a thread's
# body that the compiler inlined into std's thread start is named by its file alone).
per_create() {
  awk -v want="$1" -v file="${2:-}" -v c="$COUNT" '
    / \([ 0-9.]+%\)  / {
      line = $0
      sub(/ \[[^]]*\]$/, "", line)
      at = index(line, "%)  ")
      name = substr(line, at + 4)
      src = name
      sub(/:.*$/, "", src)
      sub(/^[^:]*:/, "", name)
      if (file != "" && substr(src, length(src) - length(file) + 1) != file) next
      prefix = substr(want, length(want)) == "*"
      w = prefix ? substr(want, 1, length(want) - 1) : want
      if ((prefix && index(name, w) == 1) || (!prefix && name == w)) {
        v = $1
        gsub(",", "", v)
        if (v + 0 > best) best = v + 0
      }
    }
    END { printf "%8.0f", best / c }' "$OUT/inclusive.txt"
}
total=$(grep "PROGRAM TOTALS" "$OUT/inclusive.txt" | awk -v c="$COUNT" '{gsub(",", "", $1); printf "%8.0f", $1 / c}')
printf '%-58s %8s\n' "stage (inclusive instructions per create)" "instr"
printf '%-58s %8s\n' "all of the server" "$total"
printf '%-58s %8s\n' "partition: read, decode, dispatch, execute, journal hand-off" "$(per_create 'mds::partition::serve::<impl mds::partition::Partition>::execute_read::{{closure}}')"
printf '%-58s %8s\n' "  decode the request" "$(per_create 'mds_proto::reader::decode_request')"
printf '%-58s %8s\n' "  dispatch (session, record, ticket, namespace)" "$(per_create 'mds::dispatch::execute')"
printf '%-58s %8s\n' "    namespace: CREATE" "$(per_create 'mds::namespace::ops::<impl mds::namespace::Namespace>::create')"
printf '%-58s %8s\n' "    session: begin" "$(per_create 'mds::session::Session::begin_capped')"
printf '%-58s %8s\n' "    resend record: reply encoded" "$(per_create 'mds_proto::postcard_writer::encode_body_with')"
printf '%-58s %8s\n' "drain: replies released and encoded" "$(per_create 'mds::partition::drain::drain_partition')"
printf '%-58s %8s\n' "  reply frames encoded" "$(per_create 'mds_proto::frame::encode_reply_frame')"
committer=$(per_create 'mds::committer::Worker::run')
if [ "$committer" -eq 0 ]; then
  committer=$(per_create 'std::sys::backtrace::__rust_begin_short_backtrace' 'mds/src/committer/mod.rs')
fi
printf '%-58s %8s\n' "committer thread" "$committer"
printf '%-58s %8s\n' "  Journal::commit (write batch built, RocksDB write)" "$(per_create 'journal::store::Journal::commit')"
printf '%-58s %8s\n' "    RocksDB WriteImpl (WAL, memtable inserts, sync)" "$(per_create 'rocksdb::DBImpl::WriteImpl(rocksdb::WriteOptions const&, rocksdb::WriteBatch**')"
printf '%-58s %8s\n' "RocksDB background flush (memtable sort, table build)" "$(per_create 'rocksdb::DBImpl::BGWorkFlush(void*)')"
printf '%-58s %8s\n' "checkpointer: edit log images sorted, tables built, ingested" "$(per_create 'journal::store::edits::run')"
echo "over $COUNT creates at ${THREADS} x ${DEPTH}, --partitions 1; callgrind files in $OUT"

if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
  port=$((20000 + RANDOM % 20000))
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$OUT/redis.cg.out" \
    redis-server --port "$port" --bind 127.0.0.1 --dir "$data" --appendonly yes \
    --appendfsync always --save "" --daemonize no >"$data/redis.log" 2>"$data/redis.vg" &
  pid=$!
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  redis-benchmark -p "$port" -t set -n "$COUNT" -r 100000000 -c "$THREADS" -P "$DEPTH" -q |
    tr '\r' '\n' | tail -1
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  pid=""
  grep "I *refs" "$data/redis.vg" | awk -v c="$COUNT" \
    '{gsub(",", "", $4); printf "redis-server, appendfsync always: %.0f instructions per SET\n", $4 / c}'
fi
