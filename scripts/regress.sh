#!/usr/bin/env bash
# Runs the SQL regression suite (test/sql -> test/expected) with
# PostgreSQL's pg_regress against the running test cluster
# (scripts/cluster.sh start). `cargo pgrx regress` cannot be used as root.
#   scripts/regress.sh [test ...]      run all or some tests
#   REGRESS_ACCEPT=1 scripts/regress.sh  copy results over the expected files
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/cluster.sh env)"
PG_REGRESS=$(dirname "$("$PUBJSON_PG_BIN/pg_config" --pgxs)")/../test/regress/pg_regress
out=${REGRESS_OUTPUT:-${PUBJSON_TMP:-/tmp}/pubjson-regress-pg${PG_MAJOR:-15}}
rm -rf "$out" && mkdir -p "$out"
if [ $# -gt 0 ]; then tests=("$@"); else
  tests=(); for f in test/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
fi
# --use-existing does not create the database: start from a fresh one.
"$PUBJSON_PG_BIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS pubjson_regress" -c "CREATE DATABASE pubjson_regress"
status=0
"$PG_REGRESS" --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres \
  --bindir="$PUBJSON_PG_BIN" --inputdir=test --outputdir="$out" \
  --dbname=pubjson_regress "${tests[@]}" || status=$?
if [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
  for t in "${tests[@]}"; do cp "$out/results/$t.out" "test/expected/$t.out"; done
  echo "accepted ${#tests[@]} result files"
  exit 0
fi
if [ $status -ne 0 ] && [ -f "$out/regression.diffs" ]; then cat "$out/regression.diffs"; fi
exit $status
