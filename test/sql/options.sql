-- Option errors: raised in the startup callback with wal2json's messages and
-- PostgreSQL's SQLSTATEs, before anything is consumed from the slot.
SET client_min_messages = warning;

CREATE TABLE opt (id int PRIMARY KEY);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_options', 'pubjson');
INSERT INTO opt VALUES (1);

-- Each call fails with the message shown (and the slot's context), then the
-- same call through try_options() shows its SQLSTATE.
CREATE FUNCTION try_options(VARIADIC opts text[]) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_logical_slot_get_changes('regress_options', NULL, NULL, VARIADIC opts);
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'nonsense', 'yes');
SELECT try_options('nonsense', 'yes');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'include-xids', 'maybe');
SELECT try_options('include-xids', 'maybe');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'format-version', '4');
SELECT try_options('format-version', '4');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'format-version', '0');
SELECT try_options('format-version', '0');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'format-version', 'two');
SELECT try_options('format-version', 'two');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'actions', 'insert,upsert');
SELECT try_options('actions', 'insert,upsert');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'actions', 'insert,,delete');
SELECT try_options('actions', 'insert,,delete');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'add-tables', 'nodot');
SELECT try_options('add-tables', 'nodot');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'filter-tables', 'public.a b');
SELECT try_options('filter-tables', 'public.a b');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'include-unchanged-toast', '1');
SELECT try_options('include-unchanged-toast', '1');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'skip-empty-xacts', 'sometimes');
SELECT try_options('skip-empty-xacts', 'sometimes');

-- Nothing was consumed: the insert is still there, with good options.
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'format-version', '2', 'include-types', 'off');
SELECT data FROM pg_logical_slot_get_changes('regress_options', NULL, NULL, 'format-version', '2');

-- Accepted spellings: PostgreSQL's parse_bool and GUC integer rules.
INSERT INTO opt VALUES (2);
SELECT data FROM pg_logical_slot_peek_changes('regress_options', NULL, NULL, 'format-version', ' 0x2 ', 'include-types', 'OF', 'include-schemas', 'n', 'include-transaction', 'FALSE');
SELECT data FROM pg_logical_slot_peek_changes('regress_options', NULL, NULL, 'format-version', '1.5', 'include-types', '0', 'add-tables', 'public.opt, *.nothing');
SELECT data FROM pg_logical_slot_peek_changes('regress_options', NULL, NULL, 'format-version', '2', 'add-tables', '');

SELECT 'stop' FROM pg_drop_replication_slot('regress_options');
DROP TABLE opt;
DROP FUNCTION try_options(text[]);
