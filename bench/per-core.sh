#!/usr/bin/env bash
# Durable writes per server core (issue 24): mds, Redis and PostgreSQL side by side in one run,
# each server with every thread it starts on CPU 0 alone (`taskset -c 0`: RocksDB's threads,
# Redis's, PostgreSQL's backends) and its load generator on CPU 1 alone (loadgen,
# redis-benchmark, pgbench), mds with one partition, at 2, 64 and 1024 outstanding. It is
# bench/vs-stores.sh with that placement: the same systems, settings and drivers; ratios
# printed from the one run; bench/results/per-core.csv (and per-core-runs.csv, which also has
# mds's mutations per commit for each run); docs/per-core.svg.
#   ./bench/per-core.sh
#   DURATION=5s ROUNDS=2 SYSTEMS="mds redis" ./bench/per-core.sh
# SERVER_CPUS, LOAD_CPUS and MDS_ARGS may be given to place it otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(nproc)" -lt 2 ]; then
  echo "per-core: needs 2 CPUs (one for the servers, one for the load)" >&2
  exit 2
fi
export SERVER_CPUS="${SERVER_CPUS:-0}" LOAD_CPUS="${LOAD_CPUS:-1}"
export MDS_ARGS="${MDS_ARGS:---partitions 1}" NAME="${NAME:-per-core}"
exec ./bench/vs-stores.sh
