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
