-- Decoding statistics: exact counts after a known workload, visible from
-- another session (pubjson is in shared_preload_libraries on the test
-- cluster), the largest transaction after a forced spill, reset and
-- permissions.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pubjson;
SELECT pubjson.reset_stats();
CREATE TABLE st_a (id int PRIMARY KEY, v int);
ALTER TABLE st_a REPLICA IDENTITY FULL;
CREATE TABLE st_b (id int PRIMARY KEY);
CREATE PUBLICATION st_pub FOR TABLE st_a WHERE (v > 10);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_stats', 'pubjson');
INSERT INTO st_a VALUES (1, 5), (2, 50);   -- one filtered out by the row filter
UPDATE st_a SET v = 20 WHERE id = 1;       -- becomes an INSERT
UPDATE st_a SET v = 1 WHERE id = 2;        -- becomes a DELETE
INSERT INTO st_b VALUES (1);               -- table not published: empty transaction
SELECT count(*) FROM pg_logical_slot_get_changes('regress_stats', NULL, NULL,
       'format-version', '2', 'publication_names', 'st_pub');

-- A new session reads the counters from shared memory.
\c
SELECT slot_name, source, txns_decoded, txns_emitted, txns_skipped_empty,
       changes_seen, changes_emitted, filtered_by_table, filtered_by_action,
       filtered_by_row_filter, updates_to_insert, updates_to_delete,
       bytes_emitted > 0 AS bytes, largest_txn_changes, largest_txn_spilled,
       total_txns IS NOT NULL AS joined_with_pg_stat, wal_status
  FROM pubjson.decoding_stats() WHERE slot_name = 'regress_stats';
-- The slot's state from pg_replication_slots: conflicting is 16+ (NULL on
-- 15: expected/stats_1.out is the 16+ output), inactive_since 17+.
SELECT conflicting, invalidation_reason, retained_wal_bytes >= 0 AS retained_measured,
       (inactive_since IS NOT NULL) = (current_setting('server_version_num')::int >= 170000)
         AS inactive_since_per_version
  FROM pubjson.decoding_stats() WHERE slot_name = 'regress_stats';
SELECT rank, changes, spilled, commit_to_emit_ms >= 0 AS delay_measured, committed_at IS NOT NULL AS has_time
  FROM pubjson.worst_transactions() WHERE slot_name = 'regress_stats' ORDER BY rank;

-- A transaction larger than logical_decoding_work_mem spills to disk.
INSERT INTO st_a SELECT i, i FROM generate_series(100, 5099) i;
SET logical_decoding_work_mem = '64kB';
SELECT count(*) FROM pg_logical_slot_get_changes('regress_stats', NULL, NULL,
       'format-version', '2', 'actions', 'delete');
RESET logical_decoding_work_mem;
SELECT largest_txn_changes, largest_txn_spilled, largest_txn_streamed, filtered_by_action,
       peak_reorder_buffer_bytes > 0 AS peak_measured
  FROM pubjson.decoding_stats() WHERE slot_name = 'regress_stats';

-- Reading needs pg_read_all_stats; resetting needs a superuser.
CREATE ROLE st_nobody;
CREATE ROLE st_monitor IN ROLE pg_monitor;
SET ROLE st_nobody;
SELECT count(*) FROM pubjson.decoding_stats();
RESET ROLE;
SET ROLE st_monitor;
SELECT count(*) > 0 AS visible FROM pubjson.decoding_stats();
SELECT pubjson.reset_stats();
RESET ROLE;
SELECT pubjson.reset_stats('regress_stats');
-- The slot keeps its row, without counters until it decodes again.
SELECT txns_decoded IS NULL AS reset, source IS NULL AS no_source, wal_status
  FROM pubjson.decoding_stats() WHERE slot_name = 'regress_stats';

SELECT 'stop' FROM pg_drop_replication_slot('regress_stats');

-- The library this session runs: the extension's version, built for this
-- major, the postmaster's preloaded copy.
SELECT version = (SELECT extversion FROM pg_extension WHERE extname = 'pubjson') AS same_version,
       split_part(split_part(built_for, ' ', 2), '.', 1)::int
         = current_setting('server_version_num')::int / 10000 AS same_major,
       preloaded
  FROM pubjson.library_version();
DROP ROLE st_nobody;
DROP ROLE st_monitor;
DROP PUBLICATION st_pub;
DROP TABLE st_a, st_b;

-- TRUNCATE (one change per table) and logical messages are changes; a
-- prepared transaction decoded at PREPARE time counts in prepared_txns.
CREATE TABLE st_c (id int PRIMARY KEY);
CREATE TABLE st_d (id int PRIMARY KEY);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_stats2', 'pubjson', false, true);
TRUNCATE st_c, st_d;
SELECT 'msg' FROM pg_logical_emit_message(true, 'p', 'in a transaction');
SELECT 'msg' FROM pg_logical_emit_message(false, 'p', 'outside');
SELECT 'msg' FROM pg_logical_emit_message(false, 'other', 'filtered');
BEGIN; INSERT INTO st_c VALUES (1); PREPARE TRANSACTION 'regress_stats_gid';
COMMIT PREPARED 'regress_stats_gid';
-- truncate is not an action wanted here; only messages prefixed p.
SELECT data::json->>'action' AS action FROM pg_logical_slot_get_changes('regress_stats2', NULL, NULL,
       'format-version', '2', 'actions', 'insert', 'add-msg-prefixes', 'p');
SELECT txns_decoded, changes_seen, changes_emitted, filtered_by_action, filtered_by_table, prepared_txns
  FROM pubjson.decoding_stats() WHERE slot_name = 'regress_stats2';
SELECT 'stop' FROM pg_drop_replication_slot('regress_stats2');
DROP TABLE st_c, st_d;
