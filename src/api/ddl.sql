-- pubjson: DDL capture (schema pubjson; docs/ddl.md).
--
--   pubjson.enable_ddl_capture()    superuser: installs the event triggers
--   pubjson.disable_ddl_capture()   superuser: removes them
--   pubjson._ddl_event()            the event triggers' function
--
-- When capture is on, event triggers pubjson_ddl_command_end
-- (ddl_command_end) and pubjson_sql_drop (sql_drop) write one
-- transactional logical message, prefix 'pubjson.ddl', per DDL command: it
-- is decoded where the command committed and vanishes with a rollback. The
-- triggers are members of the extension, so DROP EXTENSION pubjson removes
-- them with the functions.

-- The event triggers' function: the message of one command.
--
-- It runs as the role that ran the DDL (not SECURITY DEFINER), with that
-- role's search_path, which it reports and so cannot pin with SET. So
-- every function, operator and type it names is schema-qualified
-- (OPERATOR(pg_catalog.=), pg_catalog.text), every relation too (types and
-- relations in pg_temp come first on an unpinned path; functions and
-- operators never), and nothing is executed from text: names and the
-- statement only travel as JSON values. It calls nothing in schema
-- pubjson, so a role needs no privilege on it (an event trigger's function
-- is run without an EXECUTE check).
--
-- No EXCEPTION block: a message written in a subtransaction is decoded
-- after the changes its transaction made later (the order of the
-- command's rows would be lost); what it runs reads the catalogs the
-- command just changed and cannot fail where the command did not.
CREATE FUNCTION pubjson._ddl_event()
RETURNS event_trigger
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    event pg_catalog.text := TG_EVENT;
    tag pg_catalog.text := TG_TAG;
    -- The search_path the command ran under: why this function has no
    -- SET search_path of its own.
    path pg_catalog.text := pg_catalog.current_setting('search_path');
    -- The statement text, at most 65536 characters of it: every command of
    -- a multi-statement query string carries the whole string, and a large
    -- migration script must not make each of its commands write it again
    -- (nor a message over 1 GB fail the command).
    command pg_catalog.text;
    truncated pg_catalog.bool := false;
    objects pg_catalog.json;
    relations pg_catalog.json;
    publications pg_catalog.json;
BEGIN
    IF event OPERATOR(pg_catalog.=) 'sql_drop' THEN
        -- A DROP command's own message; an ALTER TABLE that drops a column
        -- or constraint is reported by its ddl_command_end message.
        IF tag OPERATOR(pg_catalog.!~~) 'DROP %' THEN
            RETURN;
        END IF;
        -- The objects named and those dropped by CASCADE, and the
        -- partitions of a dropped table, not the parts that go with them (a
        -- table's row type, indexes, TOAST table). And the publications
        -- that published a dropped table (the catalog no longer can say at
        -- the message): its own memberships, which are dropped with it,
        -- FOR ALL TABLES ones, and those of its schema (the decoder
        -- filters drops by them). One call of the function, which reads
        -- the catalogs for every dropped object.
        WITH d AS MATERIALIZED (
            SELECT x.*, x.ordinality AS position
              FROM pg_catalog.pg_event_trigger_dropped_objects() WITH ORDINALITY AS x
        ), t AS (
            SELECT d.schema_name FROM d
             WHERE d.object_type OPERATOR(pg_catalog.=) ANY ('{table,partitioned table}'::pg_catalog.text[])
               AND NOT d.is_temporary
        )
        SELECT (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                           'type', d.object_type, 'schema', d.schema_name,
                           'identity', d.object_identity, 'oid', d.objid,
                           'classid', d.classid, 'subid', d.objsubid)
                           ORDER BY d.position)
                  FROM d
                 WHERE (d.original OR d.normal OR d.object_type OPERATOR(pg_catalog.=) 'table')
                   AND NOT d.is_temporary),
               (SELECT pg_catalog.json_agg(DISTINCT n.name ORDER BY n.name)
                  FROM (SELECT d.address_args[1] AS name FROM d
                         WHERE d.object_type OPERATOR(pg_catalog.=) 'publication relation'
                        UNION
                        SELECT p.pubname::pg_catalog.text FROM pg_catalog.pg_publication p
                         WHERE p.puballtables AND EXISTS (SELECT FROM t)
                        UNION
                        SELECT p.pubname::pg_catalog.text
                          FROM pg_catalog.pg_publication p
                          JOIN pg_catalog.pg_publication_namespace pn ON pn.pnpubid OPERATOR(pg_catalog.=) p.oid
                          JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) pn.pnnspid
                          JOIN t ON t.schema_name OPERATOR(pg_catalog.=) s.nspname::pg_catalog.text) n)
          INTO objects, publications;
        relations := '[]';
    ELSE
        -- A DROP command's objects are in its sql_drop message (its
        -- ddl_command_end has none).
        IF tag OPERATOR(pg_catalog.~~) 'DROP %' THEN
            RETURN;
        END IF;
        WITH cmd AS (
            SELECT c.*, c.ordinality AS position
              FROM pg_catalog.pg_event_trigger_ddl_commands() WITH ORDINALITY AS c
             WHERE coalesce(c.schema_name OPERATOR(pg_catalog.<>) 'pg_temp', true)
               -- The commands of an extension's script: its CREATE EXTENSION
               -- (or ALTER EXTENSION UPDATE) is the event.
               AND NOT c.in_extension
               -- enable_ddl_capture's own ALTER EXTENSION pubjson ADD.
               AND NOT (c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass::pg_catalog.oid
                        AND c.objid OPERATOR(pg_catalog.=) ANY (SELECT x.oid FROM pg_catalog.pg_extension x
                                                                 WHERE x.extname OPERATOR(pg_catalog.=) 'pubjson'))
        ), rel AS (
            -- The tables whose definition the command changed: a table
            -- itself, an index's, a trigger's or a constraint's table.
            -- Looked up by OID, command by command (LATERAL): the planner
            -- expects a thousand rows of the function and would otherwise
            -- scan the catalogs whole at every command.
            SELECT r.relid
              FROM cmd CROSS JOIN LATERAL (
                    SELECT k.oid FROM pg_catalog.pg_class k
                     WHERE cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid
                       AND k.oid OPERATOR(pg_catalog.=) cmd.objid
                       AND k.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])
                    UNION ALL
                    SELECT i.indrelid FROM pg_catalog.pg_index i
                     WHERE cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid
                       AND i.indexrelid OPERATOR(pg_catalog.=) cmd.objid
                    UNION ALL
                    SELECT t.tgrelid FROM pg_catalog.pg_trigger t
                     WHERE cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass::pg_catalog.oid
                       AND t.oid OPERATOR(pg_catalog.=) cmd.objid
                    UNION ALL
                    SELECT o.conrelid FROM pg_catalog.pg_constraint o
                     WHERE cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid
                       AND o.oid OPERATOR(pg_catalog.=) cmd.objid
                       AND o.conrelid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
                   ) r(relid)
        ), tree AS (
            -- A partitioned table's partitions: a change of the parent
            -- (ALTER TABLE recurses, ATTACH PARTITION) changes them too.
            SELECT rel.relid FROM rel
            UNION
            SELECT t.relid::pg_catalog.oid
              FROM rel CROSS JOIN LATERAL pg_catalog.pg_partition_tree(rel.relid::pg_catalog.regclass) t
             WHERE (SELECT k.relkind FROM pg_catalog.pg_class k
                     WHERE k.oid OPERATOR(pg_catalog.=) rel.relid) OPERATOR(pg_catalog.=) 'p'
               AND t.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) rel.relid
               AND (SELECT k.relkind FROM pg_catalog.pg_class k
                     WHERE k.oid OPERATOR(pg_catalog.=) t.relid::pg_catalog.oid)
                   OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])
        )
        SELECT (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                           'type', cmd.object_type, 'schema', cmd.schema_name,
                           'identity', cmd.object_identity, 'oid', cmd.objid,
                           'classid', cmd.classid, 'subid', cmd.objsubid,
                           'tag', cmd.command_tag)
                           ORDER BY cmd.position)
                  FROM cmd),
               (SELECT pg_catalog.json_agg(tree.relid ORDER BY tree.relid) FROM tree)
          INTO objects, relations;
    END IF;
    IF objects IS NULL THEN
        -- A DROP's ddl_command_end (its sql_drop message has the objects),
        -- or only temporary objects.
        RETURN;
    END IF;
    command := pg_catalog.current_query();
    IF pg_catalog.length(command) OPERATOR(pg_catalog.>) 65536 THEN
        command := pg_catalog.left(command, 65536);
        truncated := true;
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(
        true, 'pubjson.ddl',
        pg_catalog.json_build_object(
            'event', event, 'tag', tag, 'command', command, 'command_truncated', truncated,
            'role', current_user, 'search_path', path,
            'objects', objects, 'relations', coalesce(relations, '[]'::pg_catalog.json),
            'publications', coalesce(publications, '[]'::pg_catalog.json)
        )::pg_catalog.text);
END
$fn$;

CREATE FUNCTION pubjson.enable_ddl_capture()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
