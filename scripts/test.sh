#!/usr/bin/env bash
# Runs every pubjson test suite on a fresh machine (Debian 12, root or sudo):
#   1. installs what is missing (scripts/install-deps.sh)
#   2. formatting and clippy
#   3. unit tests of the pure modules (cargo test)
#   4. builds and installs the extension, starts a throwaway cluster
#   5. SQL regression suite (pg_regress, pgrx-tests/sql + expected)
#   6. end-to-end suites (cargo test -p pubjson-e2e): differential tests
#      against wal2json, pg_recvlogical streaming, large transactions
# Set PUBJSON_SKIP_LINT=1 to skip step 2 while iterating.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

scripts/install-deps.sh

if [ "${PUBJSON_SKIP_LINT:-0}" != 1 ]; then
  echo "==> cargo fmt --check / clippy"
  cargo fmt --all --check
  cargo clippy --workspace --all-targets -- -D warnings
fi

echo "==> unit tests"
cargo test -p pubjson --lib

echo "==> build and install the extension"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null

echo "==> fresh test cluster"
scripts/cluster.sh destroy
scripts/cluster.sh start

echo "==> SQL regression suite"
scripts/regress.sh

echo "==> end-to-end suites"
eval "$(scripts/cluster.sh env)"
cargo test -p pubjson-e2e --release -- --test-threads=2

scripts/cluster.sh stop
echo "==> all pubjson test suites passed"
