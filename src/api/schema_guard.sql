-- pubjson: first statement of the extension script, and of every upgrade
-- script (sql/pubjson--*--*.sql hold the same DO block).
--
-- CREATE EXTENSION runs this script in schema pubjson (pubjson.control:
-- schema = pubjson), creating the schema when it does not exist, using it
-- as it finds it when it does. Superusers call pubjson.* with that schema
-- on their minds, so it must hold nothing but the extension's own objects,
-- now and later:
--
--  1. its owner must be a superuser: the owner of a schema may drop any
--     object in it and create new ones;
--  2. no other role that is not a superuser may create objects in it;
--  3. it must hold nothing that is not a member of the extension: at
--     CREATE EXTENSION (no members yet) it must be empty, at ALTER
--     EXTENSION UPDATE it may hold only what earlier versions created. A
--     role that once owned the schema or had CREATE on it (the state 1 and
--     2 refuse) may have planted look-alikes (issue 23: a
--     publication_risks(text) that a call with a string literal prefers
--     over publication_risks(name), a decoding_stats(int DEFAULT 0) that
--     makes decoding_stats() ambiguous) which stay there after the owner
--     is changed or the grant revoked; so 1 and 2 alone never suffice.
--
-- The hints never suggest making a foreign schema acceptable as it is
-- (changing its owner, revoking a grant) without saying that its content
-- is then checked too; at CREATE EXTENSION they send the caller to a schema
-- the extension creates itself.
--
-- "In the schema" means every catalog with a namespace column (relations of
-- every kind, functions/procedures/aggregates, types and domains,
-- operators, operator classes and families, collations, conversions, text
-- search configurations, dictionaries, parsers and templates, extended
-- statistics), plus casts from or to a type of the schema (a cast has no
-- schema). An object belongs to the extension if pg_depend records it as a
-- member (deptype 'e'), or if it is part of a member (deptype 'i': a
-- relation's row type, an array type, a composite type's relation; deptype
-- 'a' on a member relation: its indexes, owned sequences); the extension
-- has only functions today, the rest keeps the check right if that changes.
-- The other catalogs with a namespace hold nothing that lives in the
-- schema on its own: constraints belong to a table or domain (checked),
-- another extension whose schema is pubjson puts its objects there
-- (checked: they are not pubjson's members), and default privileges or a
-- publication of the schema's tables are settings, not objects callers run.
--
-- Schema pubjson is not made a member of the extension (0.1.0's script
-- created it and was: DROP EXTENSION dropped it). CREATE EXTENSION creates
-- it before this script runs, and the extension records a dependency on
-- its schema, so membership would make the two depend on each other (a
-- state pg_dump and pg_upgrade are not tested in here), and membership
-- would not keep anyone from granting CREATE on it later anyway. So DROP
-- EXTENSION leaves it behind, and this check refuses anything left in it.
--
-- The script's search_path is "pubjson, pg_temp" (set by CREATE EXTENSION;
-- pg_catalog is searched first), so every name below is qualified all the
-- same: nothing in a schema under inspection may take part in checking it.
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
