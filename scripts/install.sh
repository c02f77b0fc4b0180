#!/usr/bin/env bash
# Builds pubjson (release) and installs it into the directories of
# PostgreSQL $PG_MAJOR (default 15; see scripts/pg-env.sh).
# Files are packaged first, then moved into place by rename: a running
# server keeps its mapping of the old library (`cargo pgrx install` would
# overwrite it in place) and never finds the library missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

package=target/release/pubjson-pg$PG_MAJOR
# The package mirrors absolute paths: files of an earlier server prefix
# (a new build-pg.sh recipe) must not be installed again.
rm -rf "$package"
# pgrx-pg-sys finds only 15 through ~/.pgrx/config.toml here: name the
# server, by its real path: pgrx regenerates its bindings when that path
# changes, not when the pgNN symlink of the cache moves to another build.
pg_config=$(readlink -f "$PG_CONFIG")
PGRX_PG_CONFIG_PATH=$pg_config cargo pgrx package --pg-config "$pg_config" >/dev/null
[ -d "$package" ] || { echo "cargo pgrx package produced no $package" >&2; exit 1; }
(cd "$package" && find . -type f) | while read -r file; do
  dest="/${file#./}"
  $SUDO mkdir -p "$(dirname "$dest")"
  mode=0644
  case "$file" in *.so) mode=0755 ;; esac
  $SUDO install -m "$mode" "$package/$file" "$dest.pubjson-new"
  $SUDO mv -f "$dest.pubjson-new" "$dest"
done
