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
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
# Runs a test command, keeping its output for the final count.
counted() { "$@" 2>&1 | tee -a "$summary"; return "${PIPESTATUS[0]}"; }

scripts/install-deps.sh

if [ "${PUBJSON_SKIP_LINT:-0}" != 1 ]; then
  echo "==> cargo fmt --check / clippy"
  cargo fmt --all --check
  cargo clippy --workspace --all-targets -- -D warnings
fi

echo "==> unit tests"
counted cargo test -p pubjson --lib

echo "==> build and install the extension"
scripts/install.sh

echo "==> fresh test cluster"
scripts/cluster.sh destroy
scripts/cluster.sh start

echo "==> SQL regression suite"
counted scripts/regress.sh

echo "==> end-to-end suites"
eval "$(scripts/cluster.sh env)"
counted cargo test -p pubjson-e2e --release -- --test-threads=2

scripts/cluster.sh stop
passed=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$summary" | awk '{s += $1} END {print s + 0}')
regress=$(sed -n 's/^ *All \([0-9]*\) tests passed\. *$/\1/p' "$summary" | awk '{s += $1} END {print s + 0}')
echo "==> all pubjson test suites passed"
echo "pubjson: $((passed + regress)) passed, 0 failed"
