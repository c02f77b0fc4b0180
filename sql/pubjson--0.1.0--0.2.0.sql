-- pubjson 0.1.0 -> 0.2.0 (ALTER EXTENSION pubjson UPDATE TO '0.2.0').
-- Leaves what a fresh CREATE EXTENSION pubjson of 0.2.0 creates; the e2e
-- test e2e/tests/upgrade.rs compares the two with pg_dump.
--
-- ALTER EXTENSION UPDATE runs this script with search_path "<the schema
-- 0.1.0 was created in, usually public>, pg_temp" (pg_catalog first): every
-- name below is qualified, and operators are spelled OPERATOR(pg_catalog.=),
-- so nothing planted in that schema takes part.
\echo Use "ALTER EXTENSION pubjson UPDATE TO '0.2.0'" to load this file. \quit

-------------------------------------------------------------------------------
-- The schema. 0.1.0's script created schema pubjson itself (so the schema
-- was a member of the extension, dropped with it) and the extension lived
-- in whatever schema came first on the creator's search_path. 0.2.0 names
-- schema pubjson in its control file: CREATE EXTENSION creates it (not a
-- member: DROP EXTENSION leaves it) and the extension lives in it. The
-- schema leaves the extension, is checked as CREATE EXTENSION checks it
-- (schema_guard.sql, the same text), and becomes the extension's schema.
-------------------------------------------------------------------------------
DO $upgrade$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend d
                WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                  AND d.objid OPERATOR(pg_catalog.=) 'pubjson'::pg_catalog.regnamespace
                  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND d.deptype OPERATOR(pg_catalog.=) 'e') THEN
        ALTER EXTENSION pubjson DROP SCHEMA pubjson;
    END IF;
END
$upgrade$;

DO $guard$
DECLARE
    nsp pg_catalog.oid;
    upgrading pg_catalog.bool;
    owner_name pg_catalog.text;
    owner_is_superuser pg_catalog.bool;
    creators pg_catalog.text;
    strangers pg_catalog.int8;
    listed pg_catalog.text;
BEGIN
    SELECT n.oid INTO nsp
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) 'pubjson';
    -- CREATE EXTENSION inserts the extension's row before it runs the
    -- script: members exist only when an older version is being updated.
    upgrading := EXISTS (
        SELECT FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid
           AND e.extname OPERATOR(pg_catalog.=) 'pubjson'
           AND d.deptype OPERATOR(pg_catalog.=) 'e');

    SELECT r.rolname, r.rolsuper INTO owner_name, owner_is_superuser
      FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.oid OPERATOR(pg_catalog.=) nsp;
    IF NOT owner_is_superuser THEN
        RAISE EXCEPTION 'schema "pubjson" is owned by role "%", which is not a superuser', owner_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of the schema could drop or replace the functions of the extension, or plant objects that callers of them would run.',
                  HINT = CASE WHEN upgrading
                              THEN 'Make a superuser its owner (ALTER SCHEMA pubjson OWNER TO ...) and update again: the update then also refuses every object in the schema that is not the extension''s.'
                              ELSE 'Do not take over that schema: drop or rename it (after finding out who made it and what it holds), then run CREATE EXTENSION again, which creates schema pubjson itself.' END;
    END IF;

    SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                                      ELSE pg_catalog.quote_ident(r.rolname) END, ', ')
      INTO creators
      FROM pg_catalog.pg_namespace n
     CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.oid OPERATOR(pg_catalog.=) nsp
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND r.rolsuper IS NOT TRUE;
    IF creators IS NOT NULL THEN
        RAISE EXCEPTION 'schema "pubjson" lets roles that are not superusers create objects in it: %', creators
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Such a role could plant objects that callers of the extension''s functions would run.',
                  HINT = CASE WHEN upgrading
                              THEN 'REVOKE CREATE ON SCHEMA pubjson FROM those roles and update again: the update then also refuses every object in the schema that is not the extension''s.'
                              ELSE 'Do not take over that schema: drop or rename it (after finding out who made it and what it holds), then run CREATE EXTENSION again, which creates schema pubjson itself.' END;
    END IF;

    WITH RECURSIVE
    contents(classid, objid) AS (
        SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_class o WHERE o.relnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_proc o WHERE o.pronamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_type'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_type o WHERE o.typnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_operator o WHERE o.oprnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_opclass o WHERE o.opcnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_opfamily o WHERE o.opfnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_collation o WHERE o.collnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_conversion o WHERE o.connamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_ts_config o WHERE o.cfgnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_ts_dict o WHERE o.dictnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_ts_parser'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_ts_parser o WHERE o.prsnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_ts_template'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_ts_template o WHERE o.tmplnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_statistic_ext o WHERE o.stxnamespace OPERATOR(pg_catalog.=) nsp
        UNION ALL
        SELECT 'pg_catalog.pg_cast'::pg_catalog.regclass::pg_catalog.oid, o.oid
          FROM pg_catalog.pg_cast o
         WHERE EXISTS (SELECT FROM pg_catalog.pg_type t
                        WHERE t.typnamespace OPERATOR(pg_catalog.=) nsp
                          AND (t.oid OPERATOR(pg_catalog.=) o.castsource
                               OR t.oid OPERATOR(pg_catalog.=) o.casttarget))
    ),
    members(classid, objid) AS (
        SELECT d.classid, d.objid
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid
           AND e.extname OPERATOR(pg_catalog.=) 'pubjson'
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
        UNION
        SELECT d.classid, d.objid
          FROM pg_catalog.pg_depend d
          JOIN members m ON d.refclassid OPERATOR(pg_catalog.=) m.classid
                        AND d.refobjid OPERATOR(pg_catalog.=) m.objid
         WHERE d.deptype OPERATOR(pg_catalog.=) 'i'
            OR (d.deptype OPERATOR(pg_catalog.=) 'a'
                AND m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid)
    ),
    foreign_objects AS (
        SELECT c.classid, c.objid FROM contents c
        EXCEPT
        SELECT m.classid, m.objid FROM members m
    ),
    -- What to name, schema-qualified (pg_describe_object would leave out
    -- schema pubjson, on the script's search_path): not the parts of
    -- another foreign object (a planted table names its row type too).
    shown AS (
        SELECT pg_catalog.concat(i.type, ' ', i.identity) AS what
          FROM foreign_objects f
         CROSS JOIN LATERAL pg_catalog.pg_identify_object(f.classid, f.objid, 0) i
         WHERE NOT EXISTS (
                SELECT FROM pg_catalog.pg_depend d
                  JOIN foreign_objects p ON p.classid OPERATOR(pg_catalog.=) d.refclassid
                                        AND p.objid OPERATOR(pg_catalog.=) d.refobjid
                 WHERE d.classid OPERATOR(pg_catalog.=) f.classid
                   AND d.objid OPERATOR(pg_catalog.=) f.objid
                   AND d.deptype OPERATOR(pg_catalog.=) 'i')
    )
    SELECT (SELECT pg_catalog.count(*) FROM foreign_objects),
           (SELECT pg_catalog.string_agg(s.what, '; ' ORDER BY s.what) FROM shown s)
      INTO strangers, listed;
    IF strangers OPERATOR(pg_catalog.>) 0 THEN
        RAISE EXCEPTION 'schema "pubjson" holds objects that are not part of extension "pubjson"'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.concat('Not the extension''s: ', listed,
                                             '. Callers of the extension''s functions could run them.'),
                  HINT = CASE WHEN upgrading
                              THEN 'Find out who created these objects and why; as a superuser, drop them, then update again.'
                              ELSE 'Do not install into that schema: find out who created these objects and why, drop schema pubjson with them (or rename it), then run CREATE EXTENSION again, which creates schema pubjson itself.' END;
    END IF;
END
$guard$;

-- What CREATE EXTENSION records for the schema of a non-relocatable
-- extension (pg_extension.extnamespace and a normal dependency on it);
-- ALTER EXTENSION SET SCHEMA refuses non-relocatable extensions.
UPDATE pg_catalog.pg_depend d
   SET refobjid = 'pubjson'::pg_catalog.regnamespace
 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
   AND d.objid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
                                       WHERE e.extname OPERATOR(pg_catalog.=) 'pubjson')
   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
   AND d.deptype OPERATOR(pg_catalog.=) 'n';
UPDATE pg_catalog.pg_extension
   SET extnamespace = 'pubjson'::pg_catalog.regnamespace
 WHERE extname OPERATOR(pg_catalog.=) 'pubjson';

-- Granted again so that they are recorded as the extension's initial
-- privileges of the schema (pg_init_privs), as a fresh install records them.
GRANT USAGE ON SCHEMA pubjson TO pg_monitor;
GRANT USAGE ON SCHEMA pubjson TO pg_read_all_stats;

-------------------------------------------------------------------------------
-- Functions: search_path pinned, slot conflicts with 17's meaning
-------------------------------------------------------------------------------
CREATE FUNCTION pubjson._slot_conflicting(slot jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN (slot ->> 'conflicting')::boolean AND slot ->> 'restart_lsn' IS NULL
                THEN false
                ELSE (slot ->> 'conflicting')::boolean END
$fn$;

CREATE OR REPLACE FUNCTION pubjson._slot_invalidation(slot jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(slot ->> 'invalidation_reason',
                    CASE WHEN pubjson._slot_conflicting(slot)
                         THEN 'recovery conflict: rows_removed or wal_level_insufficient'
                         WHEN slot ->> 'wal_status' = 'lost' THEN 'wal_removed' END)
$fn$;

-- The startup process's receipt time of streamed WAL (src/api/recovery.rs).
CREATE FUNCTION pubjson._replay_receipt_time() RETURNS timestamp with time zone
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'replay_receipt_time_wrapper';

-------------------------------------------------------------------------------
-- publication_risks: its parameter is text instead of name, so that a call
-- with a string literal resolves to it whatever publication_risks(text)
-- exists elsewhere (issue 23; see src/api/conflicts.sql). A new signature:
-- the old function goes, with what depends on it (ALTER EXTENSION UPDATE
-- stops when a view uses it; docs/operations.md).
-------------------------------------------------------------------------------
DROP FUNCTION pubjson.publication_risks(name);
CREATE FUNCTION pubjson.publication_risks(publication text DEFAULT NULL)
RETURNS TABLE (schema_name name, table_name name, risk text, detail text, hint text)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    pub pg_catalog.pg_publication%ROWTYPE;
BEGIN
    -- Without a publication (NULL, or no argument) only the slot rows:
    -- pub stays all NULL, so no table is published.
    IF publication IS NOT NULL THEN
        SELECT * INTO pub FROM pg_catalog.pg_publication p WHERE p.pubname = publication;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'publication "%" does not exist', publication
                USING ERRCODE = 'undefined_object',
                      HINT = 'List publications with: SELECT pubname FROM pg_publication;';
        END IF;
    END IF;

    RETURN QUERY
    WITH published AS (
        -- What the publication sends: one row per published relation (leaf
        -- partitions, or the root with publish_via_partition_root).
        SELECT c.oid AS relid, n.nspname, c.relname, c.relkind, pt.attnames,
               pr.prqual, pr.prattrs
        FROM pg_catalog.pg_publication_tables pt
        JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
        LEFT JOIN pg_catalog.pg_publication_rel pr ON pr.prpubid = pub.oid AND pr.prrelid = c.oid
        WHERE pt.pubname = pub.pubname
    ),
    targets AS (
        -- The tables whose rows are actually written: the published relation
        -- itself, or the leaf partitions of a published partitioned table.
        -- Replica identity is checked on the leaf that is modified.
        SELECT p.*, p.relid AS leaf
        FROM published p WHERE p.relkind <> 'p'
        UNION ALL
        SELECT p.*, t.relid AS leaf
        FROM published p, pg_catalog.pg_partition_tree(p.relid) t
        WHERE p.relkind = 'p' AND t.isleaf
    ),
    ident AS (
        SELECT t.*, ln.nspname AS leaf_schema, lc.relname AS leaf_name, lc.relreplident,
               ri.indexrelid AS ri_index, ri.ok AS ri_index_ok, ri.index_name AS ri_index_name,
               -- Replica identity columns (by name); NULL when there is none.
               CASE lc.relreplident
                 WHEN 'd' THEN (SELECT array_agg(a.attname ORDER BY a.attnum)
                                FROM pg_catalog.pg_index i
                                JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid
                                     AND a.attnum = ANY (i.indkey)
                                WHERE i.indrelid = t.leaf AND i.indisprimary)
                 WHEN 'i' THEN CASE WHEN ri.ok THEN
                                (SELECT array_agg(a.attname ORDER BY a.attnum)
                                 FROM pg_catalog.pg_attribute a
                                 WHERE a.attrelid = t.leaf AND a.attnum = ANY (ri.indkey)) END
                 WHEN 'f' THEN (SELECT array_agg(a.attname ORDER BY a.attnum)
                                FROM pg_catalog.pg_attribute a
                                WHERE a.attrelid = t.leaf AND a.attnum > 0 AND NOT a.attisdropped)
               END AS ident_cols,
               (SELECT i.indexrelid FROM pg_catalog.pg_index i
                WHERE i.indrelid = t.leaf AND i.indisprimary) AS pk_index
        FROM targets t
        JOIN pg_catalog.pg_class lc ON lc.oid = t.leaf
        JOIN pg_catalog.pg_namespace ln ON ln.oid = lc.relnamespace
        LEFT JOIN LATERAL (
            SELECT i.indexrelid, i.indkey, i.indisvalid AND i.indisready AND i.indislive AS ok,
                   i.indexrelid::pg_catalog.regclass::text AS index_name
            FROM pg_catalog.pg_index i
            WHERE i.indrelid = t.leaf AND i.indisreplident
        ) ri ON true
    ),
    filter_cols AS (
        -- Columns referenced by the row filter, read from the stored node
        -- tree (Var nodes of the published relation, varno 1).
        SELECT DISTINCT i.leaf, a.attname
        FROM ident i,
             regexp_matches(i.prqual::text, '\{VAR :varno 1 :varattno (\d+)', 'g') m
        JOIN pg_catalog.pg_attribute a ON true
        WHERE i.prqual IS NOT NULL AND a.attrelid = i.relid AND a.attnum = m[1]::int2
    ),
    risks (s_schema, s_table, s_risk, s_detail, s_hint) AS (
        -- UPDATE/DELETE without a usable replica identity.
        SELECT i.leaf_schema, i.leaf_name,
               CASE WHEN i.relreplident = 'n' THEN 'replica_identity_nothing'
                    WHEN i.relreplident = 'i' THEN 'replica_identity_index_unusable'
                    ELSE 'no_replica_identity' END,
               format('publication publishes %s; replica identity is %s: UPDATE/DELETE on this table fail on the publisher ("cannot update/delete table ... because it does not have a replica identity")',
                      concat_ws(' and ', CASE WHEN pub.pubupdate THEN 'update' END,
                                         CASE WHEN pub.pubdelete THEN 'delete' END),
                      CASE WHEN i.relreplident = 'n' THEN 'NOTHING'
                           WHEN i.relreplident = 'd' THEN 'DEFAULT and there is no primary key'
                           WHEN i.ri_index IS NULL THEN 'USING INDEX but the index was dropped'
                           ELSE format('USING INDEX %s but the index is not valid (failed CREATE/REINDEX CONCURRENTLY?)', i.ri_index_name) END),
               format('ALTER TABLE %I.%I ADD PRIMARY KEY (...), or ALTER TABLE %I.%I REPLICA IDENTITY USING INDEX <unique index on NOT NULL columns> (FULL as a last resort)',
                      i.leaf_schema, i.leaf_name, i.leaf_schema, i.leaf_name)
        FROM ident i
        WHERE (pub.pubupdate OR pub.pubdelete) AND i.ident_cols IS NULL
        UNION ALL
        -- Row filter referencing columns outside the replica identity.
        SELECT i.leaf_schema, i.leaf_name, 'row_filter_outside_identity',
               format('row filter WHERE %s uses column(s) %s not in the replica identity (%s); publication publishes update/delete, so UPDATE/DELETE on this table fail on the publisher ("Column used in the publication WHERE expression is not part of the replica identity")',
                      pg_catalog.pg_get_expr(i.prqual, i.relid),
                      array_to_string(array_agg(f.attname ORDER BY f.attname), ', '),
                      coalesce(array_to_string(i.ident_cols, ', '), 'none')),
               'filter only on replica identity columns, or change the replica identity to cover them (e.g. REPLICA IDENTITY FULL)'
        FROM ident i JOIN filter_cols f ON f.leaf = i.leaf
        WHERE (pub.pubupdate OR pub.pubdelete) AND i.ident_cols IS NOT NULL
          AND NOT f.attname = ANY (i.ident_cols)
        GROUP BY i.leaf_schema, i.leaf_name, i.prqual, i.relid, i.ident_cols
        UNION ALL
        -- Column list not covering the replica identity (REPLICA IDENTITY
        -- FULL allows no column list at all, even one naming every column).
        SELECT i.leaf_schema, i.leaf_name, 'column_list_missing_identity',
               CASE WHEN i.relreplident = 'f' THEN
                 format('column list (%s) with REPLICA IDENTITY FULL, which allows no column list; UPDATE/DELETE on this table fail on the publisher ("Column list used by the publication does not cover the replica identity")',
                        array_to_string(i.attnames, ', '))
               ELSE
                 format('column list (%s) lacks replica identity column(s) %s; UPDATE/DELETE on this table fail on the publisher ("Column list used by the publication does not cover the replica identity")',
                        array_to_string(i.attnames, ', '),
                        array_to_string(ARRAY(SELECT x FROM unnest(i.ident_cols) x
                                              WHERE NOT x = ANY (i.attnames)), ', ')) END,
               CASE WHEN i.relreplident = 'f' THEN 'drop the column list, or use a replica identity key (primary key or REPLICA IDENTITY USING INDEX) covered by it'
                    ELSE 'add the identity columns to the column list' END
        FROM ident i
        WHERE (pub.pubupdate OR pub.pubdelete) AND i.prattrs IS NOT NULL
          AND i.ident_cols IS NOT NULL
          AND (i.relreplident = 'f' OR NOT i.ident_cols <@ i.attnames)
        UNION ALL
        -- 18+: generated columns in the replica identity must be published
        -- (without a column list: publish_generated_columns = stored; virtual
        -- generated columns never are). Before 18 generated columns are never
        -- published and the publisher does not check.
        SELECT i.leaf_schema, i.leaf_name, 'identity_generated_column_unpublished',
               format('replica identity %s includes generated column(s) %s, not published (publish_generated_columns = %s%s); UPDATE/DELETE on this table fail on the publisher ("Replica identity must not contain unpublished generated columns")',
                      CASE i.relreplident WHEN 'f' THEN 'FULL' WHEN 'i' THEN 'USING INDEX' ELSE 'DEFAULT (primary key)' END,
                      g.cols, g.pubgencols,
                      CASE WHEN g.nvirtual > 0 THEN '; virtual generated columns cannot be published' ELSE '' END),
               CASE WHEN g.nvirtual > 0 THEN 'use a replica identity key without virtual generated columns instead of FULL'
                    ELSE format('ALTER PUBLICATION %I SET (publish_generated_columns = stored), or a replica identity key without generated columns', pub.pubname) END
        FROM ident i
        CROSS JOIN LATERAL (
            SELECT string_agg(a.attname, ', ' ORDER BY a.attnum) AS cols,
                   count(*) FILTER (WHERE a.attgenerated = 'v') AS nvirtual,
                   CASE pg_catalog.to_jsonb(pub) ->> 'pubgencols' WHEN 's' THEN 'stored' ELSE 'none' END AS pubgencols
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = i.leaf AND a.attnum > 0 AND NOT a.attisdropped
              AND a.attname = ANY (i.ident_cols)
              AND (a.attgenerated = 'v'
                   OR (a.attgenerated = 's' AND coalesce(pg_catalog.to_jsonb(pub) ->> 'pubgencols', 'n') <> 's'))
        ) g
        WHERE pg_catalog.current_setting('server_version_num')::int >= 180000
          AND (pub.pubupdate OR pub.pubdelete) AND i.prattrs IS NULL AND g.cols IS NOT NULL
        UNION ALL
        -- REPLICA IDENTITY FULL on wide or TOASTed tables.
        SELECT i.leaf_schema, i.leaf_name, 'replica_identity_full_wide',
               format('REPLICA IDENTITY FULL: %s columns, %s TOAST-able (%s); every UPDATE/DELETE logs the whole old row, and the subscriber scans sequentially per row unless it has a usable index; primary key: %s',
                      w.ncols, w.ntoast, coalesce(w.toast_cols, 'none'),
                      CASE WHEN i.pk_index IS NULL THEN 'none' ELSE 'yes' END),
               'use the primary key or REPLICA IDENTITY USING INDEX; if FULL is required, give the subscriber table a primary key or unique index'
        FROM ident i
        CROSS JOIN LATERAL (
            SELECT count(*) AS ncols,
                   count(*) FILTER (WHERE a.attstorage <> 'p') AS ntoast,
                   string_agg(a.attname, ', ' ORDER BY a.attnum) FILTER (WHERE a.attstorage <> 'p') AS toast_cols
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = i.leaf AND a.attnum > 0 AND NOT a.attisdropped
        ) w
        WHERE i.relreplident = 'f' AND (w.ntoast > 0 OR w.ncols > 10)
        UNION ALL
        -- Sequences feeding published columns.
        SELECT x.leaf_schema, x.leaf_name, 'sequence_not_replicated',
               format('column %s %s sequence %I.%I (last_value %s); sequences are not replicated',
                      s.attname, s.how, s.seqschema, s.seqname,
                      CASE WHEN s.readable IS NOT TRUE THEN 'not readable: no SELECT/USAGE privilege'
                           WHEN s.last_value IS NULL THEN 'never used'
                           ELSE s.last_value::text END),
               CASE WHEN s.last_value IS NOT NULL
                    THEN format('before writing on the subscriber (e.g. after failover), run there: SELECT setval(%L, %s, true);',
                                format('%I.%I', s.seqschema, s.seqname), s.last_value)
                    WHEN s.readable THEN 'sequence not used yet: nothing to copy now; sync it again before writing on the subscriber'
                    ELSE 'a role with SELECT on the sequence can read the value to copy' END
        FROM (SELECT DISTINCT ON (i.leaf, d.seqoid) i.leaf, i.leaf_schema, i.leaf_name, i.attnames,
                     d.attname, d.how, d.seqoid
              FROM ident i
              JOIN LATERAL (
                  -- identity / serial columns (sequence owned by the column)
                  SELECT a.attname, CASE d.deptype WHEN 'i' THEN 'is an identity column on' ELSE 'is fed by (serial)' END AS how,
                         d.objid AS seqoid
                  FROM pg_catalog.pg_depend d
                  JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                  WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
                    AND d.refobjid = i.leaf AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0
                    AND (SELECT relkind FROM pg_catalog.pg_class WHERE oid = d.objid) = 'S'
                  UNION ALL
                  -- defaults calling nextval() on any sequence
                  SELECT a.attname, 'has a default calling nextval() on', d.refobjid
                  FROM pg_catalog.pg_attrdef ad
                  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass
                       AND d.objid = ad.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass
                  JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
                  WHERE ad.adrelid = i.leaf
                    AND (SELECT relkind FROM pg_catalog.pg_class WHERE oid = d.refobjid) = 'S'
              ) d ON true
              WHERE d.attname = ANY (i.attnames)
              ORDER BY i.leaf, d.seqoid, d.how DESC) x
        CROSS JOIN LATERAL (
            SELECT sn.nspname AS seqschema, sc.relname AS seqname, x.attname, x.how,
                   pg_catalog.has_sequence_privilege(sc.oid, 'SELECT,USAGE') AS readable,
                   ps.last_value
            FROM pg_catalog.pg_class sc
            JOIN pg_catalog.pg_namespace sn ON sn.oid = sc.relnamespace
            LEFT JOIN pg_catalog.pg_sequences ps ON ps.schemaname = sn.nspname AND ps.sequencename = sc.relname
            WHERE sc.oid = x.seqoid
        ) s
        UNION ALL
        -- Unique keys besides the replica identity key.
        SELECT i.leaf_schema, i.leaf_name, 'unique_key_besides_identity',
               format('unique %s %s on (%s) is not the replica identity key; with writes on both sides an insert_exists (or update_exists) conflict stops apply',
                      CASE WHEN con.oid IS NOT NULL THEN 'constraint' ELSE 'index' END,
                      coalesce(quote_ident(con.conname), ui.indexrelid::pg_catalog.regclass::text),
                      regexp_replace(pg_catalog.pg_get_indexdef(ui.indexrelid, 0, true), '^.* USING \w+ \((.*)\)', '\1')),
               'make sure only one side writes rows that can collide on this key, or partition the key space between writers'
        FROM ident i
        JOIN pg_catalog.pg_index ui ON ui.indrelid = i.leaf AND ui.indisunique
        LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = ui.indexrelid AND con.contype IN ('p', 'u')
                  AND con.conrelid = i.leaf
        WHERE ui.indexrelid IS DISTINCT FROM
              CASE i.relreplident WHEN 'd' THEN i.pk_index WHEN 'i' THEN i.ri_index END
        UNION ALL
        -- Inactive logical slots retaining WAL (one row per slot; an
        -- invalidated slot retains nothing and is reported below). 17+: a
        -- standby's copies of failover slots (synced) are inactive by
        -- design and follow the primary's slot, reported on the primary.
        -- A promoted standby keeps synced = true on them: there (out of
        -- recovery) they are slots like any other.
        SELECT NULL::name, NULL::name, 'inactive_slot_retains_wal',
               format('slot %s (database %s, plugin %s) is inactive%s and retains %s of WAL (%s bytes); wal_status %s; safe_wal_size %s; max_slot_wal_keep_size %s',
                      quote_ident(s.slot_name), s.database, s.plugin,
                      -- 17+: pg_replication_slots.inactive_since
                      coalesce(' since ' || (pg_catalog.to_jsonb(s) ->> 'inactive_since')::timestamptz, ''),
                      pg_catalog.pg_size_pretty(w.retained), w.retained, s.wal_status,
                      coalesce(pg_catalog.pg_size_pretty(s.safe_wal_size), 'unlimited'),
                      CASE WHEN k.keep_mb < 0 THEN 'unlimited (-1): WAL grows until the disk is full'
                           ELSE format('%s MB, %s%% used', k.keep_mb,
                                       round(100.0 * w.retained / (k.keep_mb * 1024.0 * 1024.0), 1)) END),
               format('re-enable or drop the subscription using it, or: SELECT pg_drop_replication_slot(%L);', s.slot_name)
        FROM pg_catalog.pg_replication_slots s
        CROSS JOIN LATERAL (
            SELECT pg_catalog.pg_wal_lsn_diff(
                     CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                          ELSE pg_catalog.pg_current_wal_lsn() END, s.restart_lsn)::bigint AS retained
        ) w
        CROSS JOIN LATERAL (
            SELECT (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'max_slot_wal_keep_size') AS keep_mb
        ) k
        WHERE s.slot_type = 'logical' AND NOT s.active AND s.restart_lsn IS NOT NULL
          AND s.wal_status IS DISTINCT FROM 'lost'
          AND NOT (pg_catalog.pg_is_in_recovery() AND (pg_catalog.to_jsonb(s) ->> 'synced') IS NOT DISTINCT FROM 'true')
        UNION ALL
        -- Invalidated logical slots (one row per slot): wal_status 'lost' on
        -- every version (15: WAL removed past max_slot_wal_keep_size; 16+
        -- also recovery conflicts of slots on a standby).
        SELECT NULL::name, NULL::name, 'logical_slot_invalidated',
               format('slot %s (database %s, plugin %s) is invalidated (%s)%s: its subscriber can no longer receive changes from it (ERROR: %s replication slot)',
                      quote_ident(s.slot_name), s.database, s.plugin,
                      pubjson._slot_invalidation(pg_catalog.to_jsonb(s)),
                      CASE WHEN s.active THEN format(', still in use by pid %s', s.active_pid) ELSE '' END,
                      CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 180000
                           THEN 'can no longer access' ELSE 'can no longer get changes from' END),
               CASE WHEN pg_catalog.pg_is_in_recovery() AND (pg_catalog.to_jsonb(s) ->> 'synced') IS NOT DISTINCT FROM 'true'
                    THEN 'the slot is synchronized from the primary (failover slot; 17+), so it cannot be dropped on this standby: see the slot of the same name on the primary'
                    ELSE format('the slot cannot be repaired: SELECT pg_drop_replication_slot(%L); then recreate it and resynchronize the subscriber (e.g. a new subscription with copy_data = true)', s.slot_name) END
        FROM pg_catalog.pg_replication_slots s
        WHERE s.slot_type = 'logical'
          AND pubjson._slot_invalidation(pg_catalog.to_jsonb(s)) IS NOT NULL
    )
    SELECT r.s_schema, r.s_table, r.s_risk, r.s_detail, r.s_hint FROM risks r
    ORDER BY r.s_schema NULLS LAST, r.s_table, r.s_risk, r.s_detail;
END
$fn$;
COMMENT ON FUNCTION pubjson.publication_risks(text) IS
'Conditions that make subscribers of a publication fail or diverge: missing replica identity, row filters/column lists outside it, FULL identity on wide tables, unreplicated sequences (with the setval to run), unique keys besides the identity, inactive slots retaining WAL, invalidated slots; without a publication, the slot rows only';
REVOKE ALL ON FUNCTION pubjson.publication_risks(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.publication_risks(text) TO pg_monitor;

-------------------------------------------------------------------------------
-- _standby_replay (internal)
-------------------------------------------------------------------------------
-- The state of replay on a hot standby, one row (none on a primary), shared
-- by standby_conflicts and standby_queries_at_risk: which delay budget
-- applies to a conflicting query, from when it counts, how much is left,
-- how long replay has been behind the received WAL, and whether the startup
-- process is waiting on a recovery conflict right now.
--
-- The startup process (standby.c, GetStandbyLimitTime) cancels conflicting
-- queries once now >= XLogReceiptTime + max_standby_streaming_delay for WAL
-- that came from the WAL receiver, + max_standby_archive_delay otherwise.
-- XLogReceiptTime is when it last found new WAL to replay while caught up
-- (xlogrecovery.c, WaitForWALToBecomeAvailable: reset each time replay
-- reaches the chunk the receiver flushed last, or restores a file), so the
-- budget is shared by every conflict until replay catches up again. For
-- streamed WAL the startup process also publishes it in shared memory
-- (pubjson._replay_receipt_time); for restored WAL it is not visible.
--
-- Wait events of the startup process that mean "replay waits on a
-- conflicting query" (the same names in 15 to 18):
--   IPC/RecoveryConflictSnapshot    ResolveRecoveryConflictWithVirtualXIDs
--                                   (rows removed by VACUUM/pruning)
--   IPC/RecoveryConflictTablespace  the same, for DROP TABLESPACE
--   Lock/<lock type>                ResolveRecoveryConflictWithLock (an
--                                   ACCESS EXCLUSIVE lock being replayed)
--   BufferPin/BufferPin             ResolveRecoveryConflictWithBufferPin
-- A database conflict (DROP DATABASE) cancels without waiting for a budget.
-- pg_stat_activity shows another process's wait event only to members of
-- pg_read_all_stats: without it the wait columns are NULL.
CREATE FUNCTION pubjson._standby_replay()
RETURNS TABLE (
    sampled_at timestamptz,
    wal_receiver_status text,
    received_lsn pg_lsn,
    replayed_lsn pg_lsn,
    last_replayed_xact_time timestamptz,
    delay_setting text,
    max_delay interval,
    waits_forever boolean,
    wal_receipt_time timestamptz,
    how_derived text,
    estimate_exact boolean,
    budget_left interval,
    replay_behind interval,
    startup_pid integer,
    replay_waiting boolean,
    replay_wait_event_type text,
    replay_wait_event text,
    replay_conflict text
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    rcv record;
    startup record;
    v_replay pg_lsn;
    v_xact_time timestamptz;
    v_chunk timestamptz;
    v_setting text;
    v_delay_ms bigint;
    v_moment timestamptz;
    v_how text;
    v_exact boolean;
    v_behind interval;
    v_now timestamptz;
    v_conflict text;
    v_sees_waits boolean := pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE');
BEGIN
    IF NOT pg_catalog.pg_is_in_recovery() THEN
        RETURN;
    END IF;

    SELECT a.pid, a.wait_event_type, a.wait_event
      INTO startup
      FROM pg_catalog.pg_stat_activity a
     WHERE a.backend_type = 'startup';
    SELECT r.pid, r.status, r.flushed_lsn, r.latest_end_lsn, r.latest_end_time,
           r.last_msg_send_time, r.last_msg_receipt_time
      INTO rcv
      FROM pg_catalog.pg_stat_wal_receiver r;
    v_chunk := pubjson._replay_receipt_time();
    -- After reading the receipt times, so that none is in the future.
    v_now := pg_catalog.clock_timestamp();
    v_replay := pg_catalog.pg_last_wal_replay_lsn();
    v_xact_time := pg_catalog.pg_last_xact_replay_timestamp();

    IF rcv.pid IS NOT NULL AND rcv.status IS NULL THEN
        -- pg_stat_wal_receiver shows a caller without pg_read_all_stats
        -- only the pid (15 to 18: every other column is NULL): a receiver
        -- runs, but whether it streams, and so which delay applies, is
        -- hidden. Report that as unknown (NULL), not as archive recovery.
        v_how := 'a WAL receiver is running but its details are hidden from this role (needs pg_read_all_stats): which delay applies, the receipt time and budget_left are unknown';
    ELSIF rcv.status = 'streaming' THEN
        v_setting := 'max_standby_streaming_delay';
        IF v_replay < rcv.flushed_lsn AND v_chunk IS NOT NULL THEN
            -- Behind the receiver (or stopped at a conflict: the record
            -- being replayed is received but not yet replayed): the budget
            -- counts from the startup process's own receipt time.
            v_moment := v_chunk;
            v_how := format('replay lags received WAL by %s bytes (replay_lsn < flushed_lsn): receipt time = when the startup process last caught up with the WAL receiver (its XLogReceiptTime, from shared memory): exact',
                            pg_catalog.pg_wal_lsn_diff(rcv.flushed_lsn, v_replay));
            v_exact := true;
        ELSIF rcv.last_msg_receipt_time IS NULL THEN
            v_how := 'streaming, but WAL receiver details are hidden (needs pg_read_all_stats) or no message received yet: receipt time unknown';
            v_exact := false;
        ELSIF v_replay >= rcv.flushed_lsn THEN
            -- Caught up: the next WAL to arrive restarts the budget.
            v_moment := rcv.last_msg_receipt_time;
            IF rcv.latest_end_time >= rcv.last_msg_send_time THEN
                v_how := 'replay caught up with received WAL (replay_lsn >= flushed_lsn) and the last message advanced the WAL end: receipt time = last_msg_receipt_time';
                v_exact := true;
            ELSE
                v_how := 'replay caught up with received WAL (replay_lsn >= flushed_lsn) but later messages were keepalives: last_msg_receipt_time is an upper bound of when WAL last arrived; the next WAL record restarts the full delay';
                v_exact := false;
            END IF;
        ELSE
            v_moment := rcv.last_msg_receipt_time;
            v_how := format('replay lags received WAL by %s bytes (replay_lsn < flushed_lsn) and the startup process has replayed no streamed WAL since it started: the real receipt time is older than last_msg_receipt_time (an upper bound); budget_left is an upper bound',
                            pg_catalog.pg_wal_lsn_diff(rcv.flushed_lsn, v_replay));
            v_exact := false;
        END IF;
        v_behind := CASE WHEN v_replay >= rcv.flushed_lsn THEN interval '0'
                         ELSE v_now - v_moment END;
    ELSE
        v_setting := 'max_standby_archive_delay';
        v_moment := v_xact_time;
        v_how := format('no WAL receiver streaming (status %s): WAL comes from the archive or pg_wal, receipt time = when the file was restored, not visible from SQL; lower bound used: last replayed commit time (primary clock), so budget_left is a lower bound',
                        coalesce(rcv.status, 'none'));
        v_exact := false;
    END IF;

    SELECT s.setting::bigint * CASE s.unit WHEN 's' THEN 1000 WHEN 'min' THEN 60000 ELSE 1 END
      INTO v_delay_ms
      FROM pg_catalog.pg_settings s WHERE s.name = v_setting;

    IF v_sees_waits THEN
        v_conflict := CASE
            WHEN startup.wait_event = 'RecoveryConflictSnapshot' THEN 'snapshot'
            WHEN startup.wait_event = 'RecoveryConflictTablespace' THEN 'tablespace'
            WHEN startup.wait_event_type = 'Lock' THEN 'lock'
            WHEN startup.wait_event_type = 'BufferPin' THEN 'bufferpin' END;
    END IF;

    RETURN QUERY SELECT
        v_now, rcv.status::text, rcv.flushed_lsn, v_replay, v_xact_time,
        v_setting,
        CASE WHEN v_delay_ms >= 0 THEN v_delay_ms * interval '1 millisecond' END,
        v_delay_ms < 0,
        v_moment, v_how, v_exact,
        CASE WHEN v_delay_ms < 0 OR v_moment IS NULL THEN NULL
             ELSE greatest(v_delay_ms * interval '1 millisecond' - (v_now - v_moment), interval '0') END,
        v_behind,
        startup.pid,
        CASE WHEN v_sees_waits THEN v_conflict IS NOT NULL END,
        CASE WHEN v_sees_waits THEN startup.wait_event_type END,
        CASE WHEN v_sees_waits THEN startup.wait_event END,
        v_conflict;
END
$fn$;

-------------------------------------------------------------------------------
-- standby_conflicts
-------------------------------------------------------------------------------
-- Hot-standby recovery conflicts: one row per database with the
-- pg_stat_database_conflicts counters, plus (repeated on every row) the grace
-- budget the startup process currently allows a conflicting query and what
-- replay is doing right now (see _standby_replay). On a primary: a single
-- row with applies = false and the reason.
-- 16+ (logical decoding on a standby): per database also the
-- confl_active_logicalslot counter and the logical slots on this standby,
-- with the ones invalidated by recovery conflicts; NULL on 15.
-- Volatile: it reads the live WAL receiver and replay positions and the clock.
-- The result gains the replay columns: a new row type, so drop and create.
DROP FUNCTION pubjson.standby_conflicts();
CREATE FUNCTION pubjson.standby_conflicts()
RETURNS TABLE (
    applies boolean,
    reason text,
    database name,
    confl_tablespace bigint,
    confl_lock bigint,
    confl_snapshot bigint,
    confl_bufferpin bigint,
    confl_deadlock bigint,
    delay_setting text,
    max_delay interval,
    waits_forever boolean,
    wal_receiver_status text,
    received_lsn pg_lsn,
    replayed_lsn pg_lsn,
    last_replayed_xact_time timestamptz,
    wal_receipt_time timestamptz,
    how_derived text,
    estimate_exact boolean,
    budget_left interval,
    confl_active_logicalslot bigint,
    logical_slots integer,
    logical_slots_invalidated integer,
    logical_slot_details jsonb,
    logical_slot_hint text,
    replay_waiting boolean,
    replay_conflict text,
    replay_wait_event_type text,
    replay_wait_event text,
    replay_behind interval
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    st record;
    v_version int := pg_catalog.current_setting('server_version_num')::int;
    v_feedback boolean := pg_catalog.current_setting('hot_standby_feedback')::boolean;
    v_primary_slot text := pg_catalog.current_setting('primary_slot_name');
BEGIN
    SELECT * INTO st FROM pubjson._standby_replay();
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 'not a standby: this server is not in recovery, so no recovery conflicts can occur'::text,
            NULL::name, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::text, NULL::interval, NULL::boolean, NULL::text, NULL::pg_lsn, NULL::pg_lsn,
            NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::boolean, NULL::interval,
            NULL::bigint, NULL::integer, NULL::integer, NULL::jsonb, NULL::text,
            NULL::boolean, NULL::text, NULL::text, NULL::text, NULL::interval;
        RETURN;
    END IF;

    RETURN QUERY
    SELECT true, NULL::text, d.datname,
           c.confl_tablespace, c.confl_lock, c.confl_snapshot, c.confl_bufferpin, c.confl_deadlock,
           st.delay_setting, st.max_delay, st.waits_forever,
           st.wal_receiver_status, st.received_lsn, st.replayed_lsn, st.last_replayed_xact_time,
           st.wal_receipt_time, st.how_derived, st.estimate_exact, st.budget_left,
           -- 16+: walsenders/backends decoding a slot that replay had to
           -- invalidate were terminated (counted here).
           (pg_catalog.to_jsonb(c) ->> 'confl_active_logicalslot')::bigint,
           CASE WHEN v_version >= 160000 THEN coalesce(ls.n, 0) END,
           CASE WHEN v_version >= 160000 THEN coalesce(ls.n_invalid, 0) END,
           CASE WHEN v_version >= 160000 THEN coalesce(ls.details, '[]'::jsonb) END,
           CASE WHEN v_version < 160000 OR coalesce(ls.n, 0) = 0 THEN NULL
                ELSE NULLIF(concat_ws(' ',
                  CASE WHEN ls.n_invalid > 0 THEN
                    format('%s of %s logical slot(s) invalidated: they cannot be used again; drop them (pg_drop_replication_slot) and recreate them, then resynchronize their consumers.',
                           ls.n_invalid, ls.n) END,
                  CASE WHEN NOT v_feedback THEN
                    'hot_standby_feedback is off: when the primary removes catalog rows these slots still need (VACUUM), replay invalidates them (rows_removed) and terminates the sessions decoding them (confl_active_logicalslot); set hot_standby_feedback = on and primary_slot_name.'
                       WHEN v_primary_slot = '' THEN
                    'hot_standby_feedback is on but primary_slot_name is not set: the primary forgets this standby''s catalog_xmin whenever the connection drops, so the slots can still be invalidated (rows_removed); use a physical slot on the primary.' END), '')
           END,
           st.replay_waiting, st.replay_conflict, st.replay_wait_event_type, st.replay_wait_event,
           st.replay_behind
    FROM pg_catalog.pg_stat_database_conflicts c
    JOIN pg_catalog.pg_database d ON d.oid = c.datid
    LEFT JOIN LATERAL (
        SELECT count(*)::int AS n,
               (count(*) FILTER (WHERE x.invalidation IS NOT NULL))::int AS n_invalid,
               jsonb_agg(jsonb_build_object(
                   'slot_name', x.slot_name, 'plugin', x.plugin, 'active', x.active,
                   'active_pid', x.active_pid, 'catalog_xmin', x.catalog_xmin,
                   'restart_lsn', x.restart_lsn, 'confirmed_flush_lsn', x.confirmed_flush_lsn,
                   'wal_status', x.wal_status, 'invalidation', x.invalidation,
                   'conflicting', pubjson._slot_conflicting(x.j), -- 16+
                   'inactive_since', x.j -> 'inactive_since',    -- 17+
                   'failover', x.j -> 'failover',                -- 17+
                   'synced', x.j -> 'synced')                    -- 17+
                 ORDER BY x.slot_name) AS details
        FROM (SELECT r.*, pg_catalog.to_jsonb(r) AS j,
                     pubjson._slot_invalidation(pg_catalog.to_jsonb(r)) AS invalidation
              FROM pg_catalog.pg_replication_slots r
              WHERE r.slot_type = 'logical' AND r.datoid = d.oid) x
    ) ls ON true
    ORDER BY d.datname;
END
$fn$;

COMMENT ON FUNCTION pubjson.standby_conflicts() IS
'Hot-standby recovery conflicts per database, the grace budget a conflicting query has left (which delay applies, when WAL was last received, how that was derived), whether replay is waiting on a conflict now and how long it has been behind the received WAL; 16+: logical slots on the standby, their invalidations and confl_active_logicalslot';

-------------------------------------------------------------------------------
-- standby_queries_at_risk
-------------------------------------------------------------------------------
-- The sessions of a hot standby that replay could cancel: one row per
-- process (other than the caller's and the startup process) holding a
-- snapshot (backend_xmin: a snapshot conflict when the primary removes rows
-- it may still see) or relation locks (a lock conflict when replay takes an
-- ACCESS EXCLUSIVE lock on the relation), with the time left before the
-- startup process would cancel it. No rows on a primary.
--
-- The budget is not per query: every conflicting query is cancelled at the
-- same moment, XLogReceiptTime + max_standby_*_delay (see _standby_replay),
-- so time_left is the same on every row. blocks_replay says whether this
-- session is what replay waits for: exact for a lock conflict (it holds a
-- lock on the relation the startup process waits to lock); for a snapshot,
-- tablespace or buffer pin conflict the horizon, tablespace or buffer is not
-- visible from SQL, so a session that could be the one reads NULL.
--
-- What the caller may not see in pg_stat_activity (other roles' query text,
-- state and times without pg_read_all_stats) it does not see here either.
CREATE FUNCTION pubjson.standby_queries_at_risk()
RETURNS TABLE (
    pid integer,
    database name,
    usename name,
    application_name text,
    client_addr inet,
    backend_type text,
    state text,
    backend_xmin xid,
    xact_start timestamptz,
    query_start timestamptz,
    query text,
    locked_relations text[],
    at_risk_from text[],
    blocks_replay boolean,
    replay_conflict text,
    time_left interval,
    estimate_exact boolean
)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    st record;
BEGIN
    SELECT * INTO st FROM pubjson._standby_replay();
    IF NOT FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
    SELECT a.pid, a.datname, a.usename, a.application_name, a.client_addr, a.backend_type,
           a.state, a.backend_xmin, a.xact_start, a.query_start, a.query,
           l.relations,
           array_remove(ARRAY[CASE WHEN a.backend_xmin IS NOT NULL THEN 'snapshot' END,
                              CASE WHEN l.relations IS NOT NULL THEN 'lock' END], NULL),
           CASE WHEN st.replay_waiting IS NULL THEN NULL
                WHEN NOT st.replay_waiting THEN false
                -- pg_blocking_pids() does not know the startup process (no
                -- proc array entry): the lock it waits for is in pg_locks.
                WHEN st.replay_conflict = 'lock' THEN EXISTS (
                    SELECT FROM pg_catalog.pg_locks h
                      JOIN pg_catalog.pg_locks w
                        ON w.pid = st.startup_pid AND NOT w.granted
                       AND w.locktype = h.locktype
                       AND w.database IS NOT DISTINCT FROM h.database
                       AND w.relation IS NOT DISTINCT FROM h.relation
                     WHERE h.pid = a.pid AND h.granted)
                WHEN st.replay_conflict = 'snapshot' AND a.backend_xmin IS NULL THEN false
                ELSE NULL END,
           st.replay_conflict,
           st.budget_left,
           st.estimate_exact
      FROM pg_catalog.pg_stat_activity a
      LEFT JOIN LATERAL (
          -- Relations of this database by name (shared catalogs too), of
          -- other databases by OID.
          SELECT array_agg(CASE WHEN k.database IN (0, (SELECT d.oid FROM pg_catalog.pg_database d
                                                        WHERE d.datname = pg_catalog.current_database()))
                                THEN k.relation::pg_catalog.regclass::text
                                ELSE format('oid %s in database oid %s', k.relation, k.database) END
                           ORDER BY k.relation) AS relations
            FROM pg_catalog.pg_locks k
           WHERE k.pid = a.pid AND k.granted AND k.locktype = 'relation'
      ) l ON true
     WHERE a.pid <> pg_catalog.pg_backend_pid()
       AND a.pid IS DISTINCT FROM st.startup_pid
       AND (a.backend_xmin IS NOT NULL OR l.relations IS NOT NULL)
     ORDER BY a.xact_start NULLS LAST, a.pid;
END
$fn$;

COMMENT ON FUNCTION pubjson.standby_queries_at_risk() IS
'Hot-standby sessions that replay could cancel (holding a snapshot or relation locks): who, since when, what could cancel them, whether replay waits for them now and the time left in the max_standby_*_delay budget';

REVOKE ALL ON FUNCTION pubjson.standby_conflicts() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.standby_queries_at_risk() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._standby_replay() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._replay_receipt_time() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.standby_conflicts() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson.standby_queries_at_risk() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson._standby_replay() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson._replay_receipt_time() TO pg_monitor;

-- decoding_counters and worst_transactions read this backend's state when
-- pubjson is not preloaded: parallel workers would not see it.
ALTER FUNCTION pubjson.worst_transactions() PARALLEL RESTRICTED;

-- The extension's queries are never JIT-compiled (src/pg/settings.rs).
ALTER FUNCTION pubjson.subscription_status() SET jit = off;

-- decoding_counters gains the live view's totals and decoding_stats shows
-- them: their result columns change, so both are created anew (a view
-- built on decoding_stats() makes the upgrade fail: drop it first).
DROP FUNCTION pubjson.decoding_stats();
DROP FUNCTION pubjson.decoding_counters();
CREATE FUNCTION pubjson."decoding_counters"() RETURNS TABLE (
	"slot_name" TEXT,  /* String */
	"source" TEXT,  /* String */
	"txns_decoded" bigint,  /* i64 */
	"txns_emitted" bigint,  /* i64 */
	"txns_skipped_empty" bigint,  /* i64 */
	"changes_seen" bigint,  /* i64 */
	"changes_emitted" bigint,  /* i64 */
	"filtered_by_table" bigint,  /* i64 */
	"filtered_by_action" bigint,  /* i64 */
	"filtered_by_row_filter" bigint,  /* i64 */
	"filtered_by_origin" bigint,  /* i64 */
	"updates_to_insert" bigint,  /* i64 */
	"updates_to_delete" bigint,  /* i64 */
	"bytes_emitted" bigint,  /* i64 */
	"streamed_txns" bigint,  /* i64 */
	"prepared_txns" bigint,  /* i64 */
	"peak_reorder_buffer_bytes" bigint,  /* i64 */
	"largest_txn_xid" bigint,  /* i64 */
	"largest_txn_changes" bigint,  /* i64 */
	"largest_txn_bytes" bigint,  /* i64 */
	"largest_txn_spilled" bool,  /* bool */
	"largest_txn_streamed" bool,  /* bool */
	"max_wal_span_bytes" bigint,  /* i64 */
	"max_commit_to_emit_ms" double precision,  /* f64 */
	"live_pid" INT,  /* Option < i32 > */
	"live_as_of" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pending_txns" INT,  /* i32 */
	"reorder_buffer_bytes" bigint,  /* i64 */
	"oldest_pending_first_seen" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'decoding_counters_wrapper';

-- The live view of the reorder buffers.
CREATE FUNCTION pubjson."_pending_transactions"() RETURNS TABLE (
	"slot_name" TEXT,  /* String */
	"decoder_pid" INT,  /* i32 */
	"as_of" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"replay_changes_per_sec" double precision,  /* Option < f64 > */
	"replay_bytes_per_sec" double precision,  /* Option < f64 > */
	"xid" bigint,  /* i64 */
	"subtransactions" INT,  /* i32 */
	"first_lsn" bigint,  /* i64 */
	"first_seen" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"changes_held" bigint,  /* i64 */
	"changes_in_memory" bigint,  /* i64 */
	"bytes_in_memory" bigint,  /* i64 */
	"changes_streamed" bigint,  /* i64 */
	"spilled" bool,  /* bool */
	"streamed" bool  /* bool */
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_pending_transactions_wrapper';

-- library_version: new in 0.2.0 (which library a session runs).
CREATE FUNCTION pubjson."library_version"() RETURNS TABLE (
	"version" TEXT,  /* String */
	"built_for" TEXT,  /* String */
	"preloaded" bool  /* bool */
)
STRICT STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'library_version_wrapper';
REVOKE ALL ON FUNCTION pubjson.library_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.library_version() TO pg_read_all_stats;

CREATE FUNCTION pubjson.decoding_stats()
RETURNS TABLE (
    slot_name text, source text,
    txns_decoded bigint, txns_emitted bigint, txns_skipped_empty bigint,
    changes_seen bigint, changes_emitted bigint,
    filtered_by_table bigint, filtered_by_action bigint, filtered_by_row_filter bigint, filtered_by_origin bigint,
    updates_to_insert bigint, updates_to_delete bigint,
    bytes_emitted bigint, streamed_txns bigint, prepared_txns bigint,
    peak_reorder_buffer_bytes bigint,
    largest_txn_xid bigint, largest_txn_changes bigint, largest_txn_bytes bigint,
    largest_txn_spilled boolean, largest_txn_streamed boolean,
    max_wal_span_bytes bigint, max_commit_to_emit_ms double precision,
    spill_txns bigint, spill_count bigint, spill_bytes bigint,
    stream_txns bigint, stream_count bigint, stream_bytes bigint,
    total_txns bigint, total_bytes bigint,
    active boolean, restart_lsn pg_lsn, confirmed_flush_lsn pg_lsn,
    retained_wal_bytes numeric, wal_status text, safe_wal_size bigint,
    conflicting boolean, invalidation_reason text, inactive_since timestamptz,
    pending_txns integer, reorder_buffer_bytes bigint, oldest_pending_age interval,
    live_as_of timestamptz
)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    WITH c AS MATERIALIZED (SELECT * FROM pubjson.decoding_counters()),
         n AS (SELECT c.slot_name FROM c
               UNION
               SELECT p.slot_name::pg_catalog.text FROM pg_catalog.pg_replication_slots p
                WHERE p.plugin OPERATOR(pg_catalog.=) 'pubjson')
    SELECT n.slot_name, c.source,
           c.txns_decoded, c.txns_emitted, c.txns_skipped_empty,
           c.changes_seen, c.changes_emitted,
           c.filtered_by_table, c.filtered_by_action, c.filtered_by_row_filter, c.filtered_by_origin,
           c.updates_to_insert, c.updates_to_delete,
           c.bytes_emitted, c.streamed_txns, c.prepared_txns,
           c.peak_reorder_buffer_bytes,
           c.largest_txn_xid, c.largest_txn_changes, c.largest_txn_bytes,
           c.largest_txn_spilled, c.largest_txn_streamed,
           c.max_wal_span_bytes, c.max_commit_to_emit_ms,
           s.spill_txns, s.spill_count, s.spill_bytes,
           s.stream_txns, s.stream_count, s.stream_bytes,
           s.total_txns, s.total_bytes,
           r.active, r.restart_lsn, r.confirmed_flush_lsn,
           pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END,
               r.restart_lsn),
           r.wal_status, r.safe_wal_size,
           pubjson._slot_conflicting(j.slot),
           pubjson._slot_invalidation(j.slot),
           (j.slot OPERATOR(pg_catalog.->>) 'inactive_since')::pg_catalog.timestamptz,
           -- The live view counts while its session still decodes the
           -- slot; a slot nobody decodes holds nothing back; a session
           -- that has not sampled yet is unknown (NULL).
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.pending_txns
                WHEN NOT r.active THEN 0 END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.reorder_buffer_bytes
                WHEN NOT r.active THEN 0 END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid
                THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) c.oldest_pending_first_seen END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.live_as_of END
      FROM n
      LEFT JOIN c ON c.slot_name OPERATOR(pg_catalog.=) n.slot_name
      LEFT JOIN pg_catalog.pg_stat_replication_slots s
             ON s.slot_name OPERATOR(pg_catalog.=) n.slot_name
      LEFT JOIN pg_catalog.pg_replication_slots r
             ON r.slot_name OPERATOR(pg_catalog.=) n.slot_name
      CROSS JOIN LATERAL (SELECT pg_catalog.to_jsonb(r) AS slot) j
     ORDER BY n.slot_name
$$;

CREATE FUNCTION pubjson.pending_transactions()
RETURNS TABLE (
    slot_name text, xid xid, first_lsn pg_lsn, first_seen timestamptz, age interval,
    changes bigint, changes_in_memory bigint, bytes_in_memory bigint,
    spilled boolean, spilled_changes bigint, streamed boolean, streamed_changes bigint,
    subtransactions integer,
    pid integer, usename name, application_name text, client_addr inet,
    xact_start timestamptz, state text, query text,
    retained_wal_bytes numeric, replay_changes_per_sec double precision,
    forecast_commit_delay interval,
    decoder_pid integer, as_of timestamptz
)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    SELECT p.slot_name, x.xid,
           '0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) p.first_lsn::pg_catalog.numeric,
           p.first_seen, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) p.first_seen,
           p.changes_held OPERATOR(pg_catalog.+) p.changes_streamed,
           p.changes_in_memory, p.bytes_in_memory,
           p.spilled,
           CASE WHEN p.spilled THEN p.changes_held OPERATOR(pg_catalog.-) p.changes_in_memory ELSE 0 END,
           p.streamed, p.changes_streamed, p.subtransactions,
           a.pid, a.usename, a.application_name, a.client_addr, a.xact_start, a.state, a.query,
           pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END,
               '0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) p.first_lsn::pg_catalog.numeric),
           p.replay_changes_per_sec,
           pg_catalog.make_interval(secs =>
               p.changes_held::pg_catalog.float8 OPERATOR(pg_catalog./) p.replay_changes_per_sec),
           p.decoder_pid, p.as_of
      FROM pubjson._pending_transactions() p
      JOIN pg_catalog.pg_replication_slots r
        ON r.slot_name OPERATOR(pg_catalog.=) p.slot_name
       AND r.active_pid OPERATOR(pg_catalog.=) p.decoder_pid
      CROSS JOIN LATERAL (SELECT p.xid::pg_catalog.text::pg_catalog.xid AS xid) x
      LEFT JOIN pg_catalog.pg_stat_activity a
        ON a.backend_xid OPERATOR(pg_catalog.=) x.xid
     ORDER BY p.slot_name, p.first_lsn
$$;

REVOKE ALL ON FUNCTION pubjson.decoding_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.decoding_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._pending_transactions() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.pending_transactions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.decoding_counters() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.decoding_stats() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson._pending_transactions() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.pending_transactions() TO pg_read_all_stats;

REVOKE ALL ON FUNCTION pubjson._slot_conflicting(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._slot_invalidation(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson._slot_conflicting(jsonb) TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson._slot_invalidation(jsonb) TO pg_read_all_stats;

-------------------------------------------------------------------------------
-- Backfill through the slot (src/api/backfill.rs, src/api/backfill.sql).
-------------------------------------------------------------------------------
CREATE FUNCTION pubjson."_backfill_chunk"(
	"relation" oid, /* pg_sys :: Oid */
	"root" oid, /* pg_sys :: Oid */
	"chunk_rows" INT, /* i32 */
	"chunk_bytes" bigint, /* i64 */
	"last_table" bool /* bool */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'backfill_chunk_wrapper';

CREATE FUNCTION pubjson."_backfill_running"(
	"relation" oid /* pg_sys :: Oid */
) RETURNS bool /* bool */
STRICT STABLE PARALLEL SAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'backfill_running_wrapper';

CREATE FUNCTION pubjson."_backfill_start"(
	"relation" oid, /* pg_sys :: Oid */
	"chunk_rows" INT, /* i32 */
	"chunk_bytes" bigint, /* i64 */
	"restart" bool, /* bool */
	"root" oid /* pg_sys :: Oid */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'backfill_start_wrapper';

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
-- DDL capture (src/api/ddl.sql).
-- pubjson: DDL capture (schema pubjson; docs/ddl.md).
--
--   pubjson.enable_ddl_capture()    superuser: installs the event triggers
--   pubjson.disable_ddl_capture()   superuser: removes them
--   pubjson._ddl_event()            the event triggers' function (in
--                                   Rust: src/api/ddl_capture.rs)
--
-- When capture is on, event triggers pubjson_ddl_command_end
-- (ddl_command_end) and pubjson_sql_drop (sql_drop) write one
-- transactional logical message, prefix 'pubjson.ddl', per DDL command: it
-- is decoded where the command committed and vanishes with a rollback. The
-- triggers are members of the extension, so DROP EXTENSION pubjson removes
-- them with the functions.

-- The event triggers' function: the message of one DDL command
-- (src/api/ddl_capture.rs). Not SECURITY DEFINER and no SET search_path:
-- it runs as the role that ran the DDL and reports that role's path.
CREATE FUNCTION pubjson._ddl_event()
RETURNS event_trigger
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'ddl_event_wrapper';

CREATE FUNCTION pubjson.enable_ddl_capture()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r
                      WHERE r.rolname OPERATOR(pg_catalog.=) current_user), false) THEN
        RAISE EXCEPTION 'permission denied to enable DDL capture'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Only a superuser can install pubjson''s event triggers.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
                WHERE e.evtname OPERATOR(pg_catalog.=) ANY ('{pubjson_ddl_command_end,pubjson_sql_drop}'::pg_catalog.name[])
                  AND e.evtfoid OPERATOR(pg_catalog.<>) 'pubjson._ddl_event()'::pg_catalog.regprocedure::pg_catalog.oid) THEN
        RAISE EXCEPTION 'event trigger pubjson_ddl_command_end or pubjson_sql_drop exists and is not pubjson''s'
            USING ERRCODE = 'duplicate_object';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
                    WHERE e.evtname OPERATOR(pg_catalog.=) 'pubjson_ddl_command_end') THEN
        CREATE EVENT TRIGGER pubjson_ddl_command_end ON ddl_command_end
            EXECUTE FUNCTION pubjson._ddl_event();
        ALTER EXTENSION pubjson ADD EVENT TRIGGER pubjson_ddl_command_end;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
                    WHERE e.evtname OPERATOR(pg_catalog.=) 'pubjson_sql_drop') THEN
        CREATE EVENT TRIGGER pubjson_sql_drop ON sql_drop
            EXECUTE FUNCTION pubjson._ddl_event();
        ALTER EXTENSION pubjson ADD EVENT TRIGGER pubjson_sql_drop;
    END IF;
    -- ENABLE ALWAYS: DDL run with session_replication_role = replica (a
    -- replication tool applying DDL) is captured too; a trigger someone
    -- disabled fires again.
    ALTER EVENT TRIGGER pubjson_ddl_command_end ENABLE ALWAYS;
    ALTER EVENT TRIGGER pubjson_sql_drop ENABLE ALWAYS;
END
$fn$;

CREATE FUNCTION pubjson.disable_ddl_capture()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r
                      WHERE r.rolname OPERATOR(pg_catalog.=) current_user), false) THEN
        RAISE EXCEPTION 'permission denied to disable DDL capture'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Only a superuser can remove pubjson''s event triggers.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
                WHERE e.evtname OPERATOR(pg_catalog.=) 'pubjson_ddl_command_end'
                  AND e.evtfoid OPERATOR(pg_catalog.=) 'pubjson._ddl_event()'::pg_catalog.regprocedure::pg_catalog.oid) THEN
        ALTER EXTENSION pubjson DROP EVENT TRIGGER pubjson_ddl_command_end;
        DROP EVENT TRIGGER pubjson_ddl_command_end;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger e
                WHERE e.evtname OPERATOR(pg_catalog.=) 'pubjson_sql_drop'
                  AND e.evtfoid OPERATOR(pg_catalog.=) 'pubjson._ddl_event()'::pg_catalog.regprocedure::pg_catalog.oid) THEN
        ALTER EXTENSION pubjson DROP EVENT TRIGGER pubjson_sql_drop;
        DROP EVENT TRIGGER pubjson_sql_drop;
    END IF;
END
$fn$;

-- An event trigger's function is run without an EXECUTE check.
REVOKE ALL ON FUNCTION pubjson._ddl_event() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.enable_ddl_capture() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.disable_ddl_capture() FROM PUBLIC;
