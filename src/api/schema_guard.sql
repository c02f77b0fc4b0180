-- pubjson: first statement of the extension script.
--
-- CREATE EXTENSION runs this script in schema pubjson (pubjson.control:
-- schema = pubjson), creating the schema when it does not exist, using it
-- when it does. An existing schema must not be in the hands of another
-- role: its owner could drop and replace the functions created below, and
-- any role that may create objects in it could plant look-alikes of them,
-- which superusers calling pubjson.* would then run. So the script refuses
-- a schema pubjson that a role other than a superuser owns or may create
-- objects in.
--
-- The script's search_path is "pubjson, pg_temp" (set by CREATE EXTENSION;
-- pg_catalog is searched first), so every name below is qualified all the
-- same: nothing in a schema under inspection may take part in checking it.
DO $guard$
DECLARE
    owner_name pg_catalog.text;
    owner_is_superuser pg_catalog.bool;
    creators pg_catalog.text;
BEGIN
    SELECT r.rolname, r.rolsuper INTO owner_name, owner_is_superuser
      FROM pg_catalog.pg_namespace n
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'pubjson';
    IF NOT owner_is_superuser THEN
        RAISE EXCEPTION 'schema "pubjson" is owned by role "%", which is not a superuser', owner_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of the schema could drop or replace the functions of the extension.',
                  HINT = 'Drop or rename that schema, or make a superuser its owner (ALTER SCHEMA pubjson OWNER TO ...), then create the extension again.';
    END IF;
    SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                                      ELSE pg_catalog.quote_ident(r.rolname) END, ', ')
      INTO creators
      FROM pg_catalog.pg_namespace n
     CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.nspname OPERATOR(pg_catalog.=) 'pubjson'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND r.rolsuper IS NOT TRUE;
    IF creators IS NOT NULL THEN
        RAISE EXCEPTION 'schema "pubjson" lets roles that are not superusers create objects in it: %', creators
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Such a role could plant objects that callers of the extension''s functions would run.',
                  HINT = 'REVOKE CREATE ON SCHEMA pubjson FROM those roles, then create the extension again.';
    END IF;
END
$guard$;
