-- pubjson: replication conflict inspection functions (schema pubjson).
--
--   pubjson.publication_risks(publication text DEFAULT NULL)
--   pubjson.subscription_status()
--   pubjson.standby_conflicts()
--   pubjson.standby_queries_at_risk()
--
-- All four are SECURITY INVOKER: they read only catalogs and statistics
-- views the caller could read itself (values the caller may not see, such as
-- a sequence it has no privilege on or WAL receiver details without
-- pg_read_all_stats, come back NULL). EXECUTE is revoked from PUBLIC and
-- granted to pg_monitor, the convention of the statistics views.
--
-- One text for PostgreSQL 15 to 18. Columns of system views that exist only
-- on newer servers are read as pg_catalog.to_jsonb(row) ->> 'column', which
-- is NULL where the view has no such column, so nothing fails to plan on an
-- older server; where NULL and 0 would mean different things the value is
-- gated on server_version_num. The functions return the same columns on
-- every version: the ones a server does not track are NULL there.

-- Schema pubjson is created by CREATE EXTENSION (pubjson.control: schema =
-- pubjson), checked by schema_guard.sql first.
GRANT USAGE ON SCHEMA pubjson TO pg_monitor;

-------------------------------------------------------------------------------
-- _slot_conflicting, _slot_invalidation (internal)
-------------------------------------------------------------------------------
-- Whether a logical slot was invalidated by a recovery conflict (17's
-- meaning of pg_replication_slots.conflicting), from its row as jsonb;
-- NULL on 15 and for physical slots. 16 reports conflicting = true for
-- every invalidated logical slot, WAL removal included; WAL removal is the
-- only invalidation that clears restart_lsn (InvalidatePossiblyObsoleteSlot),
-- which tells the two apart.
CREATE FUNCTION pubjson._slot_conflicting(slot jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN (slot ->> 'conflicting')::boolean AND slot ->> 'restart_lsn' IS NULL
                THEN false
                ELSE (slot ->> 'conflicting')::boolean END
$fn$;

-- Why a replication slot was invalidated, NULL if it was not, from its
-- pg_replication_slots row as jsonb (the columns differ by version):
--   17+  invalidation_reason: wal_removed, rows_removed,
--        wal_level_insufficient, idle_timeout (18)
--   16   a recovery conflict on a standby (rows_removed or
--        wal_level_insufficient, not told apart: see _slot_conflicting)
--        or wal_status 'lost' (wal_removed: every invalidated slot reads
--        'lost' on 16)
--   15   wal_status 'lost' (wal_removed)
CREATE FUNCTION pubjson._slot_invalidation(slot jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(slot ->> 'invalidation_reason',
                    CASE WHEN pubjson._slot_conflicting(slot)
                         THEN 'recovery conflict: rows_removed or wal_level_insufficient'
                         WHEN slot ->> 'wal_status' = 'lost' THEN 'wal_removed' END)
$fn$;

-------------------------------------------------------------------------------
-- publication_risks
-------------------------------------------------------------------------------
-- Every condition known to make a subscriber of `publication` fail or
-- silently diverge; without a publication, the slot rows only (what a
-- user of another plugin, wal2json's say, needs too). Risk names:
--   no_replica_identity, replica_identity_nothing,
--   replica_identity_index_unusable  UPDATE/DELETE fail on the publisher
--   row_filter_outside_identity      UPDATE/DELETE fail on the publisher
--   column_list_missing_identity     UPDATE/DELETE fail on the publisher
--   identity_generated_column_unpublished (18+) UPDATE/DELETE fail on the publisher
--   replica_identity_full_wide       WAL volume, slow apply without an index
--   sequence_not_replicated          subscriber sequences stay behind
--   unique_key_besides_identity      insert_exists conflicts (multi-writer)
--   inactive_slot_retains_wal        (one row per slot; schema/table NULL)
--   logical_slot_invalidated         (one row per slot; schema/table NULL)
-- Volatile: it reads the current WAL position.
--
-- The parameter is text, not name (0.1.0 had name), so that the documented
-- call with a string literal, publication_risks('mypub'), resolves to this
-- function whatever overloads exist: an unknown-type literal matches text
-- exactly (text is the preferred type of its category), so another schema's
-- publication_risks(text) can only tie with it, never beat it; a tie goes
-- to the schema first on the search_path, and a qualified call
-- (pubjson.publication_risks) considers schema pubjson alone, which holds
-- nothing but the extension's functions (schema_guard.sql). With name, any
-- publication_risks(text) on the search_path, before or after pubjson,
-- would have won over it (issue 23). A name or varchar argument is cast to
-- text implicitly; the comparison below is pg_catalog's name = text.
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

-------------------------------------------------------------------------------
-- subscription_status
-------------------------------------------------------------------------------
-- One row per subscription of the current database. The last columns are
-- NULL on servers that do not track them: parallel_apply_workers before 16,
-- the conflict counters (pg_stat_subscription_stats) before 18.
CREATE FUNCTION pubjson.subscription_status()
RETURNS TABLE (
    subscription name,
    enabled boolean,
    disable_on_error boolean,
    disabled_by_error boolean,
    skip_lsn pg_lsn,
    apply_error_count bigint,
    sync_error_count bigint,
    stats_reset timestamptz,
    worker_pid integer,
    tablesync_workers integer,
    received_lsn pg_lsn,
    latest_end_lsn pg_lsn,
    latest_end_time timestamptz,
    last_msg_receipt_time timestamptz,
    transport_delay interval,
    applied_remote_lsn pg_lsn,
    apply_backlog_bytes numeric,
    slot_name name,
    parallel_apply_workers integer,
    confl_insert_exists bigint,
    confl_update_origin_differs bigint,
    confl_update_exists bigint,
    confl_update_missing bigint,
    confl_delete_origin_differs bigint,
    confl_delete_missing bigint,
    confl_multiple_unique_conflicts bigint
)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    -- The apply progress (replication origin pg_<subscription oid>) is
    -- readable only with SELECT on pg_replication_origin_status (superuser
    -- by default): without it the view is not referenced at all and
    -- applied_remote_lsn / apply_backlog_bytes are NULL.
    origin_source text := CASE
        WHEN pg_catalog.has_table_privilege('pg_catalog.pg_replication_origin_status', 'SELECT')
        THEN '(SELECT r.external_id, r.remote_lsn FROM pg_catalog.pg_replication_origin_status r)'
        ELSE '(SELECT NULL::pg_catalog.text AS external_id, NULL::pg_catalog.pg_lsn AS remote_lsn WHERE false)'
    END;
BEGIN
    RETURN QUERY EXECUTE pg_catalog.format($q$

    SELECT s.subname,
           s.subenabled,
           s.subdisableonerr,
           -- PostgreSQL (15 to 18) does not record why a subscription was
           -- disabled: it is disabled by an error when disable_on_error is
           -- set, it is disabled, and an apply or sync error was counted.
           (NOT s.subenabled AND s.subdisableonerr
            AND coalesce(st.apply_error_count + st.sync_error_count, 0) > 0),
           CASE WHEN s.subskiplsn <> '0/0'::pg_catalog.pg_lsn THEN s.subskiplsn END,
           st.apply_error_count,
           st.sync_error_count,
           st.stats_reset,
           w.pid,
           (SELECT count(*)::int FROM pg_catalog.pg_stat_subscription t
             WHERE t.subid = s.oid AND t.relid IS NOT NULL),
           w.received_lsn,
           w.latest_end_lsn,
           w.latest_end_time,
           w.last_msg_receipt_time,
           w.last_msg_receipt_time - w.last_msg_send_time,
           NULLIF(o.remote_lsn, '0/0'::pg_catalog.pg_lsn),
           -- received from the publisher but not yet applied
           CASE WHEN w.received_lsn IS NOT NULL AND o.remote_lsn IS NOT NULL
                THEN greatest(pg_catalog.pg_wal_lsn_diff(w.received_lsn, o.remote_lsn), 0) END,
           s.subslotname,
           -- 16+: parallel apply workers (streaming = parallel) are the
           -- pg_stat_subscription rows with a leader_pid.
           CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000 THEN
             (SELECT count(*)::int FROM pg_catalog.pg_stat_subscription t
               WHERE t.subid = s.oid AND (pg_catalog.to_jsonb(t) ->> 'leader_pid') IS NOT NULL) END,
           -- 18+: conflicts the apply worker detected, by type (NULL before).
           -- insert_exists, update_exists and multiple_unique_conflicts
           -- stop apply (and are also counted in apply_error_count);
           -- update_missing and delete_missing skip the change;
           -- *_origin_differs apply it (last update wins) and are detected
           -- only with track_commit_timestamp = on on the subscriber.
           (sj.j ->> 'confl_insert_exists')::bigint,
           (sj.j ->> 'confl_update_origin_differs')::bigint,
           (sj.j ->> 'confl_update_exists')::bigint,
           (sj.j ->> 'confl_update_missing')::bigint,
           (sj.j ->> 'confl_delete_origin_differs')::bigint,
           (sj.j ->> 'confl_delete_missing')::bigint,
           (sj.j ->> 'confl_multiple_unique_conflicts')::bigint
    FROM pg_catalog.pg_subscription s
    LEFT JOIN pg_catalog.pg_stat_subscription_stats st ON st.subid = s.oid
    LEFT JOIN LATERAL (SELECT pg_catalog.to_jsonb(st) AS j) sj ON true
    -- The leader apply worker: no table (tablesync workers have one) and,
    -- on 16+, no leader (parallel apply workers have one).
    LEFT JOIN pg_catalog.pg_stat_subscription w ON w.subid = s.oid AND w.relid IS NULL
         AND (pg_catalog.to_jsonb(w) ->> 'leader_pid') IS NULL
    LEFT JOIN %s o ON o.external_id = 'pg_' || s.oid::pg_catalog.text
    WHERE s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
    ORDER BY s.subname
$q$, origin_source);
END
$fn$;

COMMENT ON FUNCTION pubjson.subscription_status() IS
'Subscriptions of this database: enabled, disabled by disable_on_error, skip LSN, apply/sync error counts, apply worker progress and backlog, parallel apply workers (16+), conflict counters by type (18+)';

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

REVOKE ALL ON FUNCTION pubjson._slot_conflicting(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._slot_invalidation(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.publication_risks(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.subscription_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.standby_conflicts() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.standby_queries_at_risk() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._standby_replay() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._replay_receipt_time() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.publication_risks(text) TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson.subscription_status() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson.standby_conflicts() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson.standby_queries_at_risk() TO pg_monitor;
-- Called by standby_conflicts and standby_queries_at_risk (SECURITY INVOKER).
GRANT EXECUTE ON FUNCTION pubjson._standby_replay() TO pg_monitor;
GRANT EXECUTE ON FUNCTION pubjson._replay_receipt_time() TO pg_monitor;
-- Called by decoding_stats (pg_read_all_stats) and standby_conflicts.
GRANT EXECUTE ON FUNCTION pubjson._slot_conflicting(jsonb) TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson._slot_invalidation(jsonb) TO pg_read_all_stats;
