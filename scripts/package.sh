#!/usr/bin/env bash
# Builds pubjson (release) for PostgreSQL $PG_MAJOR (default 15; see
# scripts/pg-env.sh) into target/release/pubjson-pgNN, laid out under the
# server's absolute directories (cargo pgrx package): the library, the control
# file and the extension scripts. The scripts are the committed ones of sql/
# (every version's install script, the upgrade scripts and the control files
# of older versions), after checking that the script pgrx generates for the
# current version equals sql/pubjson--VERSION.sql (see scripts/sql-lib.sh);
# pgrx's own copy is kept as target/release/pubjson-pgNN.generated.sql.
# PUBJSON_SQL_CHECK=0 skips the check (scripts/sql-script.sh regenerating).
# Used by install.sh and deb.sh; prints the package directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
# shellcheck source=scripts/sql-lib.sh
. scripts/sql-lib.sh

package=target/release/pubjson-pg$PG_MAJOR
version=$(pubjson_version)
# The changelog's date for the build, whoever calls: deb.sh needs it (file
# dates), and cargo rebuilds pgrx-pg-sys when a build script's environment
# changes, so install.sh after deb.sh (test.sh) would build everything again
# without it.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l packaging/debian/changelog -S Timestamp)}
export SOURCE_DATE_EPOCH
# The package mirrors absolute paths: files of an earlier server prefix
# (a new build-pg.sh recipe) must not be installed again.
rm -rf "$package"
# pgrx-pg-sys finds only 15 through ~/.pgrx/config.toml here: name the
# server, by its real path: pgrx regenerates its bindings when that path
# changes, not when the pgNN symlink of the cache moves to another build.
pg_config=$(readlink -f "$PG_CONFIG")
PGRX_PG_CONFIG_PATH=$pg_config cargo pgrx package --pg-config "$pg_config" >/dev/null
[ -d "$package" ] || { echo "cargo pgrx package produced no $package" >&2; exit 1; }

extension_dir=$package$("$pg_config" --sharedir)/extension
generated=$extension_dir/pubjson--$version.sql
[ -f "$generated" ] || { echo "cargo pgrx package produced no $generated" >&2; exit 1; }
mv "$generated" "$package.generated.sql"
if [ "${PUBJSON_SQL_CHECK:-1}" != 0 ]; then
  pubjson_check_sql "$package.generated.sql"
fi
cp sql/pubjson--*.sql sql/pubjson--*.control "$extension_dir/"
echo "$package"
