#!/usr/bin/env bash
# Builds pubjson (release, scripts/package.sh) and installs it into the
# directories of PostgreSQL $PG_MAJOR (default 15; see scripts/pg-env.sh).
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

# The release package, with the committed extension scripts of sql/ (every
# version and upgrade script, so ALTER EXTENSION pubjson UPDATE finds them).
package=$(scripts/package.sh)
(cd "$package" && find . -type f) | while read -r file; do
  dest="/${file#./}"
  $SUDO mkdir -p "$(dirname "$dest")"
  mode=0644
  case "$file" in *.so) mode=0755 ;; esac
  $SUDO install -m "$mode" "$package/$file" "$dest.pubjson-new"
  $SUDO mv -f "$dest.pubjson-new" "$dest"
done
