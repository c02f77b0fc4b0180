-- A SQL_ASCII database stores bytes without an encoding: values that are
-- not UTF-8 still come out as valid JSON (each such byte as \u00XX, its
-- Latin-1 reading); valid UTF-8 passes through.
SET client_min_messages = warning;
DROP DATABASE IF EXISTS pubjson_sql_ascii;
CREATE DATABASE pubjson_sql_ascii ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C';
\c pubjson_sql_ascii
SET client_min_messages = warning;
SET client_encoding = 'SQL_ASCII';
CREATE TABLE latin (id int PRIMARY KEY, t text);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_sql_ascii', 'pubjson');
INSERT INTO latin VALUES (1, convert_from('\x63616ce9'::bytea, 'SQL_ASCII'));   -- "cal" + 0xE9
INSERT INTO latin VALUES (2, convert_from('\xc3a9'::bytea, 'SQL_ASCII'));       -- UTF-8 "é"
SELECT data::json IS NOT NULL AS valid, convert_to(data, 'SQL_ASCII') AS bytes
  FROM pg_logical_slot_peek_changes('regress_sql_ascii', NULL, NULL, 'format-version', '2', 'include-types', '0', 'include-transaction', '0');
SELECT 'stop' FROM pg_drop_replication_slot('regress_sql_ascii');
\c postgres
DROP DATABASE pubjson_sql_ascii;
