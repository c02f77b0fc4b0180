-- pubjson: backfill through the slot (docs/backfill.md).
--
--   CALL pubjson.backfill(relation regclass, chunk_rows integer, chunk_bytes bigint)
--   pubjson.backfills (view)
--
-- The procedure commits after every chunk, so it cannot pin search_path
-- with SET (PostgreSQL refuses transaction control in a procedure with a
-- SET clause): every name in it is qualified instead. The C functions it
-- calls (backfill.rs) pin it. The progress table is written only by them,
-- as its owner.

CREATE TABLE pubjson.backfill_progress (
    relid oid PRIMARY KEY,
    relation text NOT NULL,
    state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished')),
    chunks bigint NOT NULL DEFAULT 0,
    rows bigint NOT NULL DEFAULT 0,
    last_key text[],
    -- SHA-256 of the last chunk's message (src/backfill.rs): the decoder
    -- decodes a backfill message only when its transaction recorded it here.
    digest bytea,
    started timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished timestamptz,
    owner_pid integer,
    owner_start timestamptz
);
REVOKE ALL ON pubjson.backfill_progress FROM PUBLIC;
-- Monitoring (monitoring/pubjson-exporter-queries.yaml, a role with
-- pg_monitor) reads every backfill's progress, not its keys (table data).
GRANT SELECT (relid, relation, state, chunks, rows, started, updated, finished,
              owner_pid, owner_start)
    ON pubjson.backfill_progress TO pg_monitor;

-- Progress of every backfill of a table the caller may read (the last key
-- is the table's data).
CREATE VIEW pubjson.backfills WITH (security_barrier) AS
    SELECT p.relid::pg_catalog.regclass AS relation, p.state, p.chunks, p.rows,
           p.last_key, p.started, p.updated, p.finished,
           CASE WHEN p.state OPERATOR(pg_catalog.=) 'running' THEN p.owner_pid END AS pid,
           p.state OPERATOR(pg_catalog.=) 'running' AND NOT EXISTS (
               SELECT FROM pg_catalog.pg_stat_activity a
               WHERE a.pid OPERATOR(pg_catalog.=) p.owner_pid) AS stopped
    FROM pubjson.backfill_progress p
    WHERE pg_catalog.has_table_privilege(p.relid, 'SELECT');
GRANT SELECT ON pubjson.backfills TO PUBLIC;

CREATE PROCEDURE pubjson.backfill(
    relation pg_catalog.regclass,
    chunk_rows pg_catalog.int4 DEFAULT 1000,
    chunk_bytes pg_catalog.int8 DEFAULT 8388608)
LANGUAGE plpgsql
AS $proc$
DECLARE
    target pg_catalog.regclass;
    done pg_catalog.bool;
BEGIN
    IF relation IS NULL THEN
        RAISE EXCEPTION 'relation must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- The leaf partitions of a partitioned table, else the relation
    -- itself (_backfill_start refuses what is not a table).
    FOR target IN
        SELECT t.relid FROM pg_catalog.pg_partition_tree(relation) t
        WHERE t.isleaf
          AND EXISTS (SELECT FROM pg_catalog.pg_class c
                      WHERE c.oid OPERATOR(pg_catalog.=) relation
                        AND c.relkind OPERATOR(pg_catalog.=) 'p')
        UNION ALL
        SELECT relation
        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c
                          WHERE c.oid OPERATOR(pg_catalog.=) relation
                            AND c.relkind OPERATOR(pg_catalog.=) 'p')
    LOOP
        PERFORM pubjson._backfill_start(target::pg_catalog.oid, chunk_rows, chunk_bytes);
        COMMIT;
        LOOP
            BEGIN
                done := pubjson._backfill_chunk(target::pg_catalog.oid, chunk_rows, chunk_bytes);
            EXCEPTION WHEN lock_not_available THEN
                -- lock_timeout: the chunk is tried again.
                done := false;
            END;
            COMMIT;
            EXIT WHEN done;
        END LOOP;
    END LOOP;
END
$proc$;
