#!/usr/bin/env bash
# Decoding benchmark: pubjson vs pgoutput, wal2json and test_decoding on the
# same WAL (see bench/decode_bench.py). Uses its own cluster (port 54330).
#   scripts/bench.sh [--runs N] [--scale F] [--workload mixed wide toast]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export PUBJSON_PGDATA=/tmp/pubjson-bench/data PUBJSON_SOCKET=/tmp/pubjson-bench/socket PUBJSON_PORT=54330
export PUBJSON_LIBDIR=/tmp/pubjson-bench/lib
scripts/install-deps.sh
# The release build is loaded from a private directory (dynamic_library_path),
# so benchmarking never replaces the library other clusters are using.
cargo build --release --lib
scripts/cluster.sh destroy
mkdir -p "$PUBJSON_LIBDIR"
install -m 755 target/release/libpubjson.so "$PUBJSON_LIBDIR/pubjson.so"
scripts/cluster.sh start
eval "$(scripts/cluster.sh env)"
python3 bench/decode_bench.py "$@"
scripts/cluster.sh stop
