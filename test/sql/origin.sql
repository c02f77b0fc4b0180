-- pgoutput's origin option: with origin = none, changes replayed under a
-- replication origin (what a subscriber's apply worker does) are skipped,
-- which prevents loops in bidirectional replication.
SET client_min_messages = warning;
CREATE TABLE orig (id int PRIMARY KEY, note text);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_origin', 'pubjson');
SELECT 'origin' FROM pg_replication_origin_create('regress_upstream');
INSERT INTO orig VALUES (1, 'local');
SELECT 'session' FROM pg_replication_origin_session_setup('regress_upstream');
INSERT INTO orig VALUES (2, 'replicated');
SELECT 'reset' FROM pg_replication_origin_session_reset();
INSERT INTO orig VALUES (3, 'local again');

SELECT data FROM pg_logical_slot_peek_changes('regress_origin', NULL, NULL, 'format-version', '2', 'include-types', '0');
SELECT data FROM pg_logical_slot_peek_changes('regress_origin', NULL, NULL, 'format-version', '2', 'include-types', '0', 'origin', 'none');
SELECT data FROM pg_logical_slot_peek_changes('regress_origin', NULL, NULL, 'format-version', '2', 'include-types', '0', 'origin', 'any');
-- Bad values and repetition are refused like pgoutput refuses them.
SELECT data FROM pg_logical_slot_peek_changes('regress_origin', NULL, NULL, 'origin', 'local');
SELECT data FROM pg_logical_slot_peek_changes('regress_origin', NULL, NULL, 'origin', 'none', 'origin', 'none');

SELECT 'stop' FROM pg_drop_replication_slot('regress_origin');
SELECT 'dropped' FROM pg_replication_origin_drop('regress_upstream');
DROP TABLE orig;
