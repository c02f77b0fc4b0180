#!/usr/bin/env bash
# Installs everything pubjson needs to build and test on Debian 12, idempotently:
# Debian packages (PostgreSQL 15 server + dev headers, clang, sudo, wal2json),
# cargo-pgrx pinned to the pgrx version in Cargo.toml, and `cargo pgrx init`
# pointed at Debian's PostgreSQL 15 (no download).
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

packages=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-$PG_MAJOR-wal2json
          libclang-dev clang sudo pkg-config libssl-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# output_plugin_libraries exists from 15.19 on: upgrade an older server.
server_version=$(dpkg-query -W -f='${Version}' postgresql-$PG_MAJOR 2>/dev/null || true)
if [ -n "$server_version" ] && dpkg --compare-versions "$server_version" lt "15.19"; then
  missing+=(postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Debian starts a default cluster on install; pubjson's scripts run their own.
if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q online; then
  $SUDO pg_ctlcluster "$PG_MAJOR" main stop 2>/dev/null || true
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "==> installing cargo-pgrx $PGRX_VERSION (takes several minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

if ! grep -qs "pg$PG_MAJOR" "$HOME/.pgrx/config.toml"; then
  echo "==> cargo pgrx init --pg$PG_MAJOR $PG_CONFIG"
  cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG"
fi
