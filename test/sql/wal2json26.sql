-- Behaviour of wal2json 2.6 that the installed wal2json (2.5) lacks, so the
-- differential suite cannot check it: numeric-data-types-as-string, the
-- format-1 primary key of a DELETE, and REPLICA IDENTITY FULL with include-pk.
SET client_min_messages = warning;
CREATE TABLE nums (id int PRIMARY KEY, i8 int8, f4 float4, f8 float8, n numeric, o oid, s int2);
CREATE TABLE full_ident (id int PRIMARY KEY, v text);
ALTER TABLE full_ident REPLICA IDENTITY FULL;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_w26', 'pubjson');
INSERT INTO nums VALUES (1, -9223372036854775808, 'NaN', '-Infinity', 'NaN', 4294967295, -32768);
INSERT INTO nums VALUES (2, 42, 1.5, 1e-7, 123456789012345678901234567890.1234567890, 0, 7);
INSERT INTO full_ident VALUES (1, 'a');
UPDATE full_ident SET v = 'b';
DELETE FROM full_ident;

SELECT data FROM pg_logical_slot_peek_changes('regress_w26', NULL, NULL, 'format-version', '2', 'numeric-data-types-as-string', '1', 'include-types', '0', 'add-tables', 'public.nums');
SELECT data FROM pg_logical_slot_peek_changes('regress_w26', NULL, NULL, 'format-version', '2', 'include-types', '0', 'add-tables', 'public.nums');
SELECT data FROM pg_logical_slot_peek_changes('regress_w26', NULL, NULL, 'format-version', '1', 'numeric-data-types-as-string', '1', 'include-types', '0', 'add-tables', 'public.nums');
SELECT data FROM pg_logical_slot_peek_changes('regress_w26', NULL, NULL, 'format-version', '1', 'include-pk', '1', 'add-tables', 'public.full_ident');
SELECT data FROM pg_logical_slot_peek_changes('regress_w26', NULL, NULL, 'format-version', '2', 'include-pk', '1', 'add-tables', 'public.full_ident');

SELECT 'stop' FROM pg_drop_replication_slot('regress_w26');
DROP TABLE nums, full_ident;
