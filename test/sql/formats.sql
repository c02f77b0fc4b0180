-- wal2json formats 1 and 2 for the basic change kinds, deferred BEGIN,
-- savepoints and aborted transactions.
SET client_min_messages = warning;
CREATE TABLE fmt (id int PRIMARY KEY, name text, price numeric(10,2), ok bool, raw bytea, ratio float8);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_formats', 'pubjson');

INSERT INTO fmt VALUES (1, 'one', 1.50, true, '\x0102', 0.5);
UPDATE fmt SET name = 'uno' WHERE id = 1;
UPDATE fmt SET id = 2 WHERE id = 1;
DELETE FROM fmt WHERE id = 2;
-- A transaction with no change at all to decode, and one whose only change
-- is filtered out below: pubjson emits nothing for them by default.
BEGIN; INSERT INTO fmt VALUES (10, 'ten', NULL, NULL, NULL, 'NaN'); ROLLBACK;
BEGIN;
INSERT INTO fmt VALUES (3, 'three', 3, false, NULL, '-Infinity');
SAVEPOINT s1;
INSERT INTO fmt VALUES (4, 'rolled back', 4, true, NULL, 4);
ROLLBACK TO SAVEPOINT s1;
INSERT INTO fmt VALUES (5, E'tab\there "quoted" back\\slash', 5, true, NULL, 1e300);
COMMIT;

SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '2');
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '1');
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '1', 'pretty-print', '1', 'include-pk', '1');
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '1', 'write-in-chunks', '1', 'actions', 'delete');
-- Deferred BEGIN: only DELETEs pass, so the other transactions vanish.
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '2', 'actions', 'delete');
-- skip-empty-xacts = false restores wal2json's empty transactions.
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '2', 'actions', 'delete', 'skip-empty-xacts', 'false');
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '1', 'actions', 'delete', 'skip-empty-xacts', 'off');
SELECT data FROM pg_logical_slot_peek_changes('regress_formats', NULL, NULL, 'format-version', '2', 'include-transaction', '0', 'include-schemas', '0', 'include-types', '0', 'include-type-oids', '1', 'include-not-null', '1', 'include-column-positions', '1', 'include-pk', '1');

SELECT 'stop' FROM pg_drop_replication_slot('regress_formats');
DROP TABLE fmt;
