#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for pubjson's demo, tests and benchmarks.
#   scripts/cluster.sh init|start|stop|restart|status|destroy|psql [args]|env
# Environment: PG_MAJOR (15 to 18; see pg-env.sh), PUBJSON_PGDATA, PUBJSON_SOCKET, PUBJSON_PORT (where;
# PUBJSON_TMP, default /tmp, holds the default data and socket directories),
# PUBJSON_PRELOAD=0 (no shared_preload_libraries), PUBJSON_LIBDIR (load
# pubjson from that directory first), PUBJSON_LISTEN=127.0.0.1 (also listen
# on TCP on that loopback address, PUBJSON_PORT, with trust for it: only for
# clients that cannot use a Unix socket, such as the pipeline benchmark's
# Debezium), PUBJSON_INITDB_ARGS (more initdb arguments, split at spaces,
# e.g. --no-data-checksums; `init` creates the cluster without starting it).
# Runs as the `postgres` OS user (initdb refuses root). Settings: wal_level =
# logical, output_plugin_libraries including pubjson and wal2json, a local
# replication connection for pg_recvlogical, trust authentication (the
# cluster listens only on a private Unix socket unless PUBJSON_LISTEN says so).
set -euo pipefail

# shellcheck source=scripts/pg-env.sh
. "$(dirname "$0")/pg-env.sh"
PUBJSON_TMP=${PUBJSON_TMP:-/tmp}
PUBJSON_PGDATA=${PUBJSON_PGDATA:-$PUBJSON_TMP/pubjson-pg$PG_MAJOR/data}
PUBJSON_SOCKET=${PUBJSON_SOCKET:-$PUBJSON_TMP/pubjson-pg$PG_MAJOR/socket}
PUBJSON_PORT=${PUBJSON_PORT:-54329}
PUBJSON_LISTEN=${PUBJSON_LISTEN:-}
case "$PUBJSON_LISTEN" in
  '' | 127.0.0.1) ;;
  *) echo "PUBJSON_LISTEN may only be 127.0.0.1 (trust authentication): $PUBJSON_LISTEN" >&2; exit 2 ;;
esac
PG_USER=postgres

as_pg() {
  if [ "$(id -un)" = "$PG_USER" ]; then "$@"; elif [ "$(id -u)" -eq 0 ]; then runuser -u "$PG_USER" -- "$@"; else sudo -u "$PG_USER" "$@"; fi
}

init() {
  local root
  root=$(dirname "$PUBJSON_PGDATA")
  mkdir -p "$root" "$PUBJSON_SOCKET"
  chown "$PG_USER": "$root" "$PUBJSON_SOCKET" 2>/dev/null || sudo chown "$PG_USER": "$root" "$PUBJSON_SOCKET"
  if [ ! -f "$PUBJSON_PGDATA/PG_VERSION" ]; then
    local initdb_args=()
    read -r -a initdb_args <<< "${PUBJSON_INITDB_ARGS:-}"
    as_pg "$PG_BIN/initdb" -D "$PUBJSON_PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
      "${initdb_args[@]}" >/dev/null
    cat >> "$PUBJSON_PGDATA/postgresql.conf" <<CONF
# pubjson test cluster
listen_addresses = '$PUBJSON_LISTEN'
port = $PUBJSON_PORT
unix_socket_directories = '$PUBJSON_SOCKET'
wal_level = logical
max_replication_slots = 64
max_wal_senders = 16
max_prepared_transactions = 16
output_plugin_libraries = 'pgoutput, test_decoding, wal2json, pubjson'
fsync = off
synchronous_commit = on
full_page_writes = off
shared_buffers = 256MB
max_wal_size = 4GB
log_min_messages = warning
log_line_prefix = '%m [%p] '
CONF
    if [ "${PUBJSON_PRELOAD:-1}" != 0 ]; then
      # pubjson's decoding statistics live in shared memory when preloaded.
      echo "shared_preload_libraries = 'pubjson'" >> "$PUBJSON_PGDATA/postgresql.conf"
    fi
    if [ -n "${PUBJSON_LIBDIR:-}" ]; then
      # Load pubjson from a private directory first (the benchmark's build).
      echo "dynamic_library_path = '$PUBJSON_LIBDIR:\$libdir'" >> "$PUBJSON_PGDATA/postgresql.conf"
    fi
    {
      printf 'local all all trust\nlocal replication all trust\n'
      if [ -n "$PUBJSON_LISTEN" ]; then
        printf 'host all all %s/32 trust\nhost replication all %s/32 trust\n' "$PUBJSON_LISTEN" "$PUBJSON_LISTEN"
      fi
    } | as_pg tee "$PUBJSON_PGDATA/pg_hba.conf" >/dev/null
  fi
}

status() { as_pg "$PG_BIN/pg_ctl" -D "$PUBJSON_PGDATA" status >/dev/null 2>&1; }

start() {
  init
  if ! status; then
    # With RUST_BACKTRACE set, pgrx would attach Rust backtraces to the
    # errors it re-raises: the server runs with it, so the tests prove
    # pubjson keeps them away from clients.
    as_pg env RUST_BACKTRACE=1 RUST_LIB_BACKTRACE=1 \
      "$PG_BIN/pg_ctl" -D "$PUBJSON_PGDATA" -l "$(dirname "$PUBJSON_PGDATA")/server.log" -w -t 60 start >/dev/null
  fi
}

stop() { if status; then as_pg "$PG_BIN/pg_ctl" -D "$PUBJSON_PGDATA" -m fast -w stop >/dev/null; fi; }

case "${1:-}" in
  init) init ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status && echo running || echo stopped ;;
  destroy) stop; rm -rf "$(dirname "$PUBJSON_PGDATA")" ;;
  psql) shift; exec "$PG_BIN/psql" -h "$PUBJSON_SOCKET" -p "$PUBJSON_PORT" -U postgres -X "$@" ;;
  env)
    echo "export PGHOST=$PUBJSON_SOCKET PGPORT=$PUBJSON_PORT PGUSER=postgres PUBJSON_PG_BIN=$PG_BIN" ;;
  *) echo "usage: $0 init|start|stop|restart|status|destroy|psql [args]|env" >&2; exit 2 ;;
esac
