-- pubjson: backfill through the slot (docs/backfill.md).
--
--   CALL pubjson.backfill(relation regclass, chunk_rows integer, chunk_bytes bigint, restart boolean)
--   pubjson.backfills (view)
--
-- The procedure commits after every chunk, so it cannot pin search_path
-- with SET (PostgreSQL refuses transaction control in a procedure with a
-- SET clause): every name in it is qualified instead. The C functions it
-- calls (backfill.rs) pin it. The progress table is written only by them,
-- as its owner.

CREATE TABLE pubjson.backfill_progress (
    relid oid PRIMARY KEY,
    -- The table's row type: with relid, which table this row is about (a
    -- new table that reuses a dropped one's OID has another row type).
    reltype oid NOT NULL,
    relation text NOT NULL,
    state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished')),
    chunks bigint NOT NULL DEFAULT 0,
    rows bigint NOT NULL DEFAULT 0,
    -- The key the last chunk ended at, as text written under fixed
    -- settings (DateStyle ISO, YMD; extra_float_digits 3; ... see
    -- backfill.rs), whatever the caller's.
    last_key text[],
    -- Where this run ends: the largest key when its first chunk ran (same
    -- settings as last_key), '{}' when the table was empty then. Rows
    -- inserted beyond it are the stream's, so a backfill of a table that
    -- grows at its end still ends. NULL until the first chunk.
    end_key text[],
    -- SHA-256 of the last chunk's message (src/backfill.rs): the decoder
    -- decodes a backfill message only when its transaction recorded it here.
    digest bytea,
    started timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished timestamptz,
    -- The session running it, and its CALL's start (query_start): a
    -- cancelled CALL no longer runs it, though its session lives on.
    owner_pid integer,
    owner_start timestamptz,
    owner_query_start timestamptz,
    -- The relation the backfill was asked for: this table, or the
    -- partitioned table it is a partition of (whose own row counts the
    -- rows of all its partitions), and when that run started: a partition
    -- finished in this run is not read again when the run resumes.
    root oid,
    root_started timestamptz
);
REVOKE ALL ON pubjson.backfill_progress FROM PUBLIC;
-- Monitoring (monitoring/pubjson-exporter-queries.yaml, a role with
-- pg_monitor) reads every backfill's progress, not its keys (table data).
GRANT SELECT (relid, relation, state, chunks, rows, started, updated, finished,
              owner_pid, owner_start, owner_query_start)
    ON pubjson.backfill_progress TO pg_monitor;

-- Progress of every backfill of a table the caller may read (the last key
-- is the table's data).
CREATE VIEW pubjson.backfills WITH (security_barrier) AS
    SELECT p.relid::pg_catalog.regclass AS relation, p.state, p.chunks, p.rows,
           p.last_key, p.end_key, p.started, p.updated, p.finished,
           CASE WHEN p.state OPERATOR(pg_catalog.=) 'running' THEN p.owner_pid END AS pid,
           p.state OPERATOR(pg_catalog.=) 'running'
             AND NOT pubjson._backfill_running(p.relid) AS stopped
    FROM pubjson.backfill_progress p
    WHERE pg_catalog.has_table_privilege(p.relid, 'SELECT');
GRANT SELECT ON pubjson.backfills TO PUBLIC;

CREATE PROCEDURE pubjson.backfill(
    relation pg_catalog.regclass,
    chunk_rows pg_catalog.int4 DEFAULT 1000,
    chunk_bytes pg_catalog.int8 DEFAULT 8388608,
    restart pg_catalog.bool DEFAULT false)
LANGUAGE plpgsql
AS $proc$
DECLARE
    partitioned pg_catalog.bool;
    -- The tables read: the partitioned table's leaf partitions, or the
    -- relation itself (_backfill_start refuses what is not a table).
    tables pg_catalog.oid[];
    n pg_catalog.int4;
    i pg_catalog.int4;
    done pg_catalog.bool;
    -- Failed tries of the current chunk: lock_timeout, a deadlock or a
    -- serialization failure is tried again, at most 100 times in a row,
    -- after a pause of 10 ms, doubled each time up to 1 s.
    failures pg_catalog.int4;
BEGIN
    IF relation IS NULL THEN
        RAISE EXCEPTION 'relation must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF restart IS NULL THEN
        RAISE EXCEPTION 'restart must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    partitioned := EXISTS (SELECT FROM pg_catalog.pg_class c
                           WHERE c.oid OPERATOR(pg_catalog.=) relation
                             AND c.relkind OPERATOR(pg_catalog.=) 'p');
    IF partitioned THEN
        -- The partitioned table's own progress row: its run, its totals.
        PERFORM pubjson._backfill_start(relation::pg_catalog.oid, chunk_rows, chunk_bytes,
                                        restart, relation::pg_catalog.oid);
        COMMIT;
        tables := ARRAY(SELECT t.relid::pg_catalog.oid FROM pg_catalog.pg_partition_tree(relation) t
                        WHERE t.isleaf ORDER BY t.relid::pg_catalog.oid);
    ELSE
        tables := ARRAY[relation::pg_catalog.oid];
    END IF;
    n := COALESCE(pg_catalog.array_length(tables, 1), 0);
    i := 0;
    WHILE i OPERATOR(pg_catalog.<) n LOOP
        i := i OPERATOR(pg_catalog.+) 1;
        -- False: a partition this run finished already.
        done := NOT pubjson._backfill_start(tables[i], chunk_rows, chunk_bytes,
                                            restart AND NOT partitioned, relation::pg_catalog.oid);
        COMMIT;
        CONTINUE WHEN done;
        failures := 0;
        LOOP
            BEGIN
                done := pubjson._backfill_chunk(tables[i], relation::pg_catalog.oid, chunk_rows,
                                                chunk_bytes, i OPERATOR(pg_catalog.=) n);
                failures := 0;
            EXCEPTION WHEN lock_not_available OR deadlock_detected OR serialization_failure THEN
                failures := failures OPERATOR(pg_catalog.+) 1;
                IF failures OPERATOR(pg_catalog.>) 100 THEN
                    RAISE;
                END IF;
                done := false;
            END;
            COMMIT;
            EXIT WHEN done;
            IF failures OPERATOR(pg_catalog.>) 0 THEN
                PERFORM pg_catalog.pg_sleep(LEAST(
                    0.01::pg_catalog.float8 OPERATOR(pg_catalog.*)
                      pg_catalog.power(2::pg_catalog.float8, (failures OPERATOR(pg_catalog.-) 1)::pg_catalog.float8),
                    1::pg_catalog.float8));
                COMMIT;
            END IF;
        END LOOP;
    END LOOP;
END
$proc$;
