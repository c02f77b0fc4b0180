#!/usr/bin/env bash
# pubjson end to end: installs what is missing, builds and installs the
# extension, starts a throwaway cluster and shows committed changes as JSON
# through pg_logical_slot_get_changes and through pg_recvlogical.
# PostgreSQL 15 by default; PG_MAJOR=16, 17 or 18 fetches or builds and uses
# that server.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

scripts/install-deps.sh
echo "==> building and installing pubjson"
scripts/install.sh
# A running cluster has the previous library preloaded: restart it.
scripts/cluster.sh restart
eval "$(scripts/cluster.sh env)"
psql() { "$PUBJSON_PG_BIN/psql" -X -q "$@"; }

psql -d postgres -c "DROP DATABASE IF EXISTS pubjson_demo" -c "CREATE DATABASE pubjson_demo"
psql -d pubjson_demo <<'SQL'
CREATE EXTENSION pubjson;
CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), paid bool, placed timestamptz DEFAULT '2026-01-01 12:00+00');
SELECT 'slot created' FROM pg_create_logical_replication_slot('demo_sql', 'pubjson');
SELECT 'slot created' FROM pg_create_logical_replication_slot('demo_stream', 'pubjson');
SQL

echo "==> streaming slot demo_stream with pg_recvlogical in the background"
out=$(mktemp)
"$PUBJSON_PG_BIN/pg_recvlogical" -d pubjson_demo -S demo_stream --start -f "$out" -F 1 \
  -o format-version=2 -o include-xids -o include-lsn \
  2> >(grep -v 'unexpected termination of replication stream: $' >&2) &
recv=$!

psql -d pubjson_demo <<'SQL'
INSERT INTO orders (id, customer, amount, paid) VALUES (1, 'Ada', 12.50, false), (2, 'Grace "Amazing" Hopper', 99.99, false);
UPDATE orders SET paid = true WHERE id = 1;
BEGIN; SELECT 'an empty transaction leaves no trace'; COMMIT;
DELETE FROM orders WHERE id = 2;
SELECT pg_logical_emit_message(true, 'audit', 'closing the day');
SQL

echo "==> pg_logical_slot_get_changes('demo_sql', ..., 'format-version', '2')"
psql -d pubjson_demo -At -c "SELECT data FROM pg_logical_slot_get_changes('demo_sql', NULL, NULL, 'format-version', '2')"
echo
echo "==> the same changes in format 1, pretty-printed (peek: slot not advanced)"
psql -d pubjson_demo -c "INSERT INTO orders (id, customer, amount, paid) VALUES (3, 'Linus', 7, true)"
psql -d pubjson_demo -At -c "SELECT data FROM pg_logical_slot_peek_changes('demo_sql', NULL, NULL, 'pretty-print', '1')"

# Wait (bounded) until pg_recvlogical has written the last commit, then stop it.
for _ in $(seq 1 50); do
  [ "$(grep -c '"action":"C"' "$out" || true)" -ge 5 ] && break
  sleep 0.2
done
# SIGINT is pg_recvlogical's normal stop: it confirms what it wrote.
kill -INT "$recv"; wait "$recv" || true
echo
echo "==> what pg_recvlogical received (format-version=2, include-xids, include-lsn)"
cat "$out"
rm -f "$out"

psql -d pubjson_demo -c "SELECT pg_drop_replication_slot('demo_sql'), pg_drop_replication_slot('demo_stream')" >/dev/null
echo
env_prefix=""
if [ "${PG_MAJOR:-15}" != 15 ]; then env_prefix="PG_MAJOR=$PG_MAJOR "; fi
echo "==> demo done. The cluster keeps running: ${env_prefix}scripts/cluster.sh psql -d pubjson_demo ; ${env_prefix}scripts/cluster.sh stop"
