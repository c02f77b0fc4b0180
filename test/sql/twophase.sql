-- Two-phase decoding through pgoutput's `two_phase` option on a slot
-- created without twophase: before the option, a prepared transaction is
-- decoded at COMMIT PREPARED (B/C, like wal2json); with it, at PREPARE time
-- (B, then P, then CP/RP). Using the option enables two-phase on the slot
-- for good, as PostgreSQL does.
SET client_min_messages = warning;
CREATE TABLE tp (id int PRIMARY KEY);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_twophase', 'pubjson');
BEGIN; INSERT INTO tp VALUES (1); PREPARE TRANSACTION 'regress_g1';
COMMIT PREPARED 'regress_g1';
BEGIN; INSERT INTO tp VALUES (2); PREPARE TRANSACTION 'regress_g2';
ROLLBACK PREPARED 'regress_g2';

SELECT data::json->>'action' AS action, data::json->>'gid' AS gid
  FROM pg_logical_slot_peek_changes('regress_twophase', NULL, NULL, 'format-version', '2');
-- regress_g2 was rolled back before this decoding reaches its PREPARE:
-- its P comes without its change (docs/streaming.md).
SELECT data::json->>'action' AS action, data::json->>'gid' AS gid, data::json->>'streamed' AS streamed
  FROM pg_logical_slot_peek_changes('regress_twophase', NULL, NULL, 'format-version', '2', 'two_phase', 'on');
SELECT two_phase FROM pg_replication_slots WHERE slot_name = 'regress_twophase';
-- Repeating a pgoutput option is an error, as in pgoutput.
SELECT data FROM pg_logical_slot_peek_changes('regress_twophase', NULL, NULL, 'two_phase', 'on', 'two_phase', 'off');

SELECT 'stop' FROM pg_drop_replication_slot('regress_twophase');
DROP TABLE tp;
