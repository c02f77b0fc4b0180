#!/usr/bin/env bash
# pubjson end to end: installs what is missing, builds and installs the
# extension, starts a throwaway cluster and shows it at work:
#   1. format 3, pubjson's own (typed values, R relation objects, an UPDATE
#      that leaves a TOAST value alone), through pg_logical_slot_get_changes;
#   2. the same changes as wal2json's format 2;
#   3. pubjson.pending_transactions(): what a slot streamed by pg_recvlogical
#      holds back while a large transaction is still open, and whose it is;
#   4. what pg_recvlogical received.
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
psql() { "$PUBJSON_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
work=$(mktemp -d)
chmod 755 "$work"
recv=""
held=""
cleanup() {
  [ -n "$held" ] && { exec 3>&-; wait "$held" 2>/dev/null || true; }
  [ -n "$recv" ] && { kill -INT "$recv" 2>/dev/null; wait "$recv" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
# Polls (bounded, 0.1 s steps) until the query prints something other than
# empty or "f"; fails with WHAT after 30 s.
wait_until() {
  local what=$1 sql=$2 out
  for _ in $(seq 300); do
    out=$(psql -d pubjson_demo -At -c "$sql")
    if [ -n "$out" ] && [ "$out" != f ]; then return 0; fi
    sleep 0.1
  done
  echo "demo: timed out waiting for $what" >&2
  return 1
}

psql -d postgres -c "SET client_min_messages = warning" \
  -c "DROP DATABASE IF EXISTS pubjson_demo WITH (FORCE)" -c "CREATE DATABASE pubjson_demo"
# Setup and workload: their statements' own output is not the point.
psql -d pubjson_demo -o /dev/null <<'SQL'
CREATE EXTENSION pubjson;
CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), paid bool,
                     placed timestamptz DEFAULT '2026-01-01 12:00+00', items jsonb, note text);
-- note is kept out of line (TOAST) once it is long.
ALTER TABLE orders ALTER note SET STORAGE EXTERNAL;
CREATE TABLE events (id bigint, payload text);
SELECT 'slot created' FROM pg_create_logical_replication_slot('demo_sql', 'pubjson');
SELECT 'slot created' FROM pg_create_logical_replication_slot('demo_stream', 'pubjson');
SQL

echo "==> pg_recvlogical streams slot demo_stream (format 3) in the background"
received=$work/received.jsonl
"$PUBJSON_PG_BIN/pg_recvlogical" -d pubjson_demo -S demo_stream --start -f "$received" -F 1 -s 1 \
  -o format-version=3 \
  2> >(grep -v 'unexpected termination of replication stream: $' >&2) &
recv=$!

psql -d pubjson_demo -o /dev/null <<'SQL'
INSERT INTO orders (id, customer, amount, paid, items, note)
  VALUES (1, 'Ada', 12.50, false, '{"book": 2}', repeat('long delivery note ', 200)),
         (2, 'Grace "Amazing" Hopper', 99.99, false, NULL, NULL);
UPDATE orders SET paid = true WHERE id = 1;   -- note is TOASTed and left alone
BEGIN; SELECT 'an empty transaction leaves no trace'; COMMIT;
DELETE FROM orders WHERE id = 2;
SELECT pg_logical_emit_message(true, 'audit', 'closing the day');
SQL

echo
echo "==> format 3: pg_logical_slot_peek_changes('demo_sql', NULL, NULL, 'format-version', '3')"
echo "    (R describes the table once; the UPDATE lists the TOASTed note as unchanged)"
psql -d pubjson_demo -At -c "SELECT data FROM pg_logical_slot_peek_changes('demo_sql', NULL, NULL, 'format-version', '3')" |
  sed -E 's/(long delivery note ){3}(long delivery note )+/\1\1… /'
echo
echo "==> the same changes as wal2json's format 2 (get: the slot moves on)"
psql -d pubjson_demo -At -c "SELECT data FROM pg_logical_slot_get_changes('demo_sql', NULL, NULL, 'format-version', '2')" |
  sed -E 's/(long delivery note ){3}(long delivery note )+/\1\1… /'

echo
echo "==> a session inserts 20000 rows into events and keeps its transaction open"
mkfifo "$work/held.sql"
psql -d pubjson_demo -v application_name=demo_batch < "$work/held.sql" > /dev/null &
held=$!
exec 3> "$work/held.sql"
echo "SET application_name = 'demo_batch'; BEGIN; INSERT INTO events SELECT g, md5(g::text) FROM generate_series(1, 20000) g;" >&3
wait_until "the open transaction's insert" \
  "SELECT state = 'idle in transaction' FROM pg_stat_activity WHERE application_name = 'demo_batch'"
# Decoding reads flushed WAL only: a commit elsewhere flushes the open
# transaction's last page.
psql -d pubjson_demo -At -c "SELECT txid_current()" > /dev/null
wait_until "pg_recvlogical's decoder to see all 20000 changes" \
  "SELECT true FROM pubjson.pending_transactions() WHERE slot_name = 'demo_stream' AND changes >= 20000"
echo "==> SELECT ... FROM pubjson.pending_transactions(): what demo_stream holds back, and whose it is"
psql -d pubjson_demo -c "SELECT slot_name, changes, spilled, pid IS NOT NULL AS owner_known, application_name, state, left(query, 40) AS query, retained_wal_bytes > 0 AS retains_wal FROM pubjson.pending_transactions()"
echo "COMMIT;" >&3
exec 3>&-
wait "$held"
held=""
wait_until "the commit to reach pg_recvlogical" \
  "SELECT count(*) = 0 FROM pubjson.pending_transactions() WHERE slot_name = 'demo_stream'"

# Bounded wait until pg_recvlogical has written the last commit (20000 rows:
# the fourth C object), then stop it: SIGINT is its normal stop.
for _ in $(seq 300); do
  [ "$(grep -c '"action":"C"' "$received" || true)" -ge 4 ] && break
  sleep 0.1
done
kill -INT "$recv"
wait "$recv" || true
recv=""
echo
echo "==> what pg_recvlogical received (format 3), the 20000 inserts into events counted"
grep -v '"table":"events"' "$received" |
  sed -E 's/(long delivery note ){3}(long delivery note )+/\1\1… /'
echo "    ... and $(grep -c '"action":"I","relid":[0-9]*,"schema":"public","table":"events"' "$received") I objects of table events"

echo
echo "==> pubjson.decoding_stats(): what each slot's decoding did"
psql -d pubjson_demo -c "SELECT slot_name, txns_decoded, txns_emitted, txns_skipped_empty, changes_emitted FROM pubjson.decoding_stats() ORDER BY slot_name"

# The walsender lets the slot go a moment after pg_recvlogical exits.
wait_until "pg_recvlogical's walsender to release demo_stream" \
  "SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = 'demo_stream'"
psql -d pubjson_demo -c "SELECT pg_drop_replication_slot('demo_sql'), pg_drop_replication_slot('demo_stream')" >/dev/null
echo
env_prefix=""
if [ "${PG_MAJOR:-15}" != 15 ]; then env_prefix="PG_MAJOR=$PG_MAJOR "; fi
echo "==> demo done. The cluster keeps running: ${env_prefix}scripts/cluster.sh psql -d pubjson_demo ; ${env_prefix}scripts/cluster.sh stop"
