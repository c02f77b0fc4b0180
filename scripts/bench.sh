#!/usr/bin/env bash
# Benchmarks, on their own cluster (port 54330) with a release build:
#   scripts/bench.sh [speed] [--runs N] [--scale F] [--workload mixed wide toast]
#       decoding speed vs pgoutput, wal2json and test_decoding on the same WAL
#       (bench/decode_bench.py)
#   scripts/bench.sh large [--rows N] [--latency-seconds S]
#       a huge transaction through pg_recvlogical: walsender memory, and how
#       soon a long transaction's first changes arrive (bench/large_txn.py)
#   scripts/bench.sh ddl [--runs N] [--commands N]
#       10,000 DDL commands with DDL capture off and on: time ratio and WAL
#       added per command (bench/ddl_bench.py)
# PG_MAJOR picks the server (see scripts/pg-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
bench_root=${PUBJSON_TMP:-/tmp}/pubjson-bench
export PUBJSON_PGDATA=$bench_root/data PUBJSON_SOCKET=$bench_root/socket PUBJSON_PORT=54330
export PUBJSON_LIBDIR=$bench_root/lib
scripts/install-deps.sh
# The release build is loaded from a private directory (dynamic_library_path),
# so benchmarking never replaces the library other clusters are using. It is
# built for the server's major (pg_config by its real path, as install.sh).
PGRX_PG_CONFIG_PATH=$(readlink -f "$PG_CONFIG") \
  cargo build --release --lib --no-default-features --features "pg$PG_MAJOR"
scripts/cluster.sh destroy
mkdir -p "$PUBJSON_LIBDIR"
install -m 755 target/release/libpubjson.so "$PUBJSON_LIBDIR/pubjson.so"
scripts/cluster.sh start
eval "$(scripts/cluster.sh env)"
case "${1:-speed}" in
  large) shift; python3 bench/large_txn.py "$@" ;;
  ddl) shift; python3 bench/ddl_bench.py "$@" ;;
  speed) [ $# -gt 0 ] && shift; python3 bench/decode_bench.py "$@" ;;
  *) python3 bench/decode_bench.py "$@" ;;
esac
scripts/cluster.sh stop
