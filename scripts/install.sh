#!/usr/bin/env bash
# Builds pubjson (release) and installs it into PostgreSQL's directories.
# Files are packaged first, then moved into place by rename: a running
# server keeps its mapping of the old library (`cargo pgrx install` would
# overwrite it in place) and never finds the library missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

cargo pgrx package --pg-config "$PG_CONFIG" >/dev/null
package=$(find target/release -maxdepth 1 -type d -name 'pubjson-pg*' | head -n 1)
[ -n "$package" ] || { echo "cargo pgrx package produced no package" >&2; exit 1; }
(cd "$package" && find . -type f) | while read -r file; do
  dest="/${file#./}"
  $SUDO mkdir -p "$(dirname "$dest")"
  mode=0644
  case "$file" in *.so) mode=0755 ;; esac
  $SUDO install -m "$mode" "$package/$file" "$dest.pubjson-new"
  $SUDO mv -f "$dest.pubjson-new" "$dest"
done
