#!/usr/bin/env bash
# Writes sql/pubjson--VERSION.sql (VERSION: Cargo.toml's) from the extension
# script pgrx generates, after a change to the SQL surface (#[pg_extern]
# functions, extension_sql!, src/api/*.sql):
#   scripts/sql-script.sh          build for $PG_MAJOR (default 15), rewrite the script
#   scripts/sql-script.sh --check  build and only compare (what install.sh does)
# Then review `git diff sql/` and bring the upgrade script(s) into the current
# version up to date (sql/README.md). A released version's script is never
# rewritten: bump the version first.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/sql-lib.sh
. scripts/sql-lib.sh

case "${1:-}" in
  "") mode=write ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
version=$(pubjson_version)
committed=sql/pubjson--$version.sql
if [ $mode = write ] && grep -q "  pubjson--$version.sql\$" sql/released.sha256; then
  echo "ERROR: version $version is released (sql/released.sha256): its script is frozen." >&2
  echo "Bump the version in Cargo.toml first, then run $0 again (see sql/README.md)." >&2
  exit 1
fi
package=$(PUBJSON_SQL_CHECK=0 scripts/package.sh)
if [ $mode = check ]; then
  pubjson_check_sql "$package.generated.sql"
  echo "$committed is what this build generates"
  exit 0
fi
pubjson_normalize_sql "$package.generated.sql" > "$committed.new"
mv "$committed.new" "$committed"
if git diff --quiet -- "$committed" 2>/dev/null && git ls-files --error-unmatch "$committed" >/dev/null 2>&1; then
  echo "$committed unchanged"
else
  echo "wrote $committed: review 'git diff sql/' and the upgrade scripts into $version (sql/README.md)"
fi
