#!/usr/bin/env bash
# Builds pubjson (release) and installs it into PostgreSQL 15's directories.
# The old library is unlinked first: `cargo pgrx install` overwrites files in
# place, which would corrupt the copy that running servers have mapped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO rm -f "$("$PG_CONFIG" --pkglibdir)/pubjson.so"
cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null
