-- Where wal2json prints invalid JSON, pubjson escapes instead: quoted type
-- names with a schema or inner quotes, default expressions with quotes, and
-- message contents with NUL bytes. Every row below must parse as json.
SET client_min_messages = warning;
CREATE SCHEMA "My Schema";
CREATE TYPE "My Schema"."Mood" AS ENUM ('ok', 'sad "very"');
CREATE TYPE "we""ird" AS (a int);
CREATE TABLE "My Schema"."Odd ""Table""" (
    "id col" int PRIMARY KEY,
    mood "My Schema"."Mood",
    moods "My Schema"."Mood"[],
    w "we""ird",
    label text DEFAULT 'say "hi"'
);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_json', 'pubjson');
INSERT INTO "My Schema"."Odd ""Table""" VALUES (1, 'sad "very"', ARRAY['ok','sad "very"']::"My Schema"."Mood"[], ROW(5));
SELECT 'emitted' FROM pg_logical_emit_message(false, 'nul', '\x610062'::bytea);
-- Not UTF-8: wal2json copies the bytes (invalid JSON); pubjson writes \u00XX.
SELECT 'emitted' FROM pg_logical_emit_message(false, 'binary', '\xff41e9c3'::bytea);
SELECT 'emitted' FROM pg_logical_emit_message(true, 'quote"prefix', E'line\nbreak');

SELECT data, data::json IS NOT NULL AS valid
  FROM pg_logical_slot_peek_changes('regress_json', NULL, NULL, 'format-version', '2', 'include-default', '1');
SELECT data::json IS NOT NULL AS valid
  FROM pg_logical_slot_peek_changes('regress_json', NULL, NULL, 'format-version', '1', 'include-default', '1', 'include-pk', '1', 'pretty-print', '1');
SELECT data::json -> 'change' -> 0 -> 'columntypes' AS v1_types
  FROM pg_logical_slot_peek_changes('regress_json', NULL, NULL, 'format-version', '1', 'include-typmod', '0')
 WHERE data LIKE '%insert%';
-- Messages: the NUL byte survives as \u0000 instead of truncating the content.
SELECT data::json IS NOT NULL AS valid, data
  FROM pg_logical_slot_peek_changes('regress_json', NULL, NULL, 'format-version', '2', 'add-msg-prefixes', 'nul, binary');

SELECT 'stop' FROM pg_drop_replication_slot('regress_json');
DROP TABLE "My Schema"."Odd ""Table""";
DROP TYPE "we""ird";
DROP SCHEMA "My Schema" CASCADE;
