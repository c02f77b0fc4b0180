//! Extension upgrades: every released version of the SQL in `sql/`, updated
//! step by step with `ALTER EXTENSION pubjson UPDATE`, must leave exactly
//! what a fresh `CREATE EXTENSION pubjson` of the current version creates,
//! and the library must decode and count through the upgraded functions.
//!
//! "Exactly" is checked three ways, each compared between a database
//! upgraded from the old version and a fresh one: `pg_dump --schema-only`
//! (what a dump restores, grants included); `pg_dump --schema-only
//! --binary-upgrade`, which also prints the extension's member objects
//! (functions, their attributes and bodies, their grants and initial
//! privileges, in the form pg_upgrade restores them); and a catalog report
//! (the extension's row, its dependencies and members, schema `pubjson`,
//! `pg_init_privs`, every function's definition, ACL and comment).
//!
//! The scripts are the ones scripts/install.sh installed from `sql/` into
//! the server's extension directory; the test checks that the server offers
//! exactly the versions `sql/` has.
//!
//! Upgrades of PostgreSQL itself: `pg_upgrade` from 17 (the tree of
//! `$PUBJSON_PG_CACHE/pg17`, with pubjson installed) to the 18 under test
//! carries a pubjson slot whose consumer has caught up, and the consumer
//! continues on 18 with nothing lost or repeated; the extension, created at
//! the oldest version on 17, is then updated on 18 as pg_upgrade's
//! `update_extensions.sql` says and equals a fresh install. A slot that has
//! not consumed the WAL stops `pg_upgrade --check` with PostgreSQL's
//! message. These run on 18 only and skip themselves elsewhere, or when
//! the 17 tree or its pubjson is missing (own clusters, ports 54410-54413).

use postgres::Client;
use pubjson_e2e::env::current_test;
use pubjson_e2e::{
    drop_slot, exec, note_skip, one_row, one_string, pg_bin_dir, pg_bin_dir_of, pg_upgrade,
    scratch_dir, wait_commits, wait_true, ExtraCluster, Place, RecvLogical, Server,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The versions with an install script in `sql/` (`pubjson--X.sql`).
fn versions_in_sql_dir() -> BTreeSet<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sql");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let version = name.strip_prefix("pubjson--")?.strip_suffix(".sql")?;
            (!version.contains("--")).then(|| version.to_string())
        })
        .collect()
}

fn fresh_database(db: &str) -> Client {
    Server::main().fresh_database(db)
}

fn drop_database(db: &str) {
    let _ = Server::main().drop_database(db);
}

fn extension_version(c: &mut Client) -> String {
    one_string(
        c,
        "select extversion from pg_extension where extname = 'pubjson'",
    )
}

/// pg_dump's schema-only output of `db` on `server` (plus `extra`
/// options), without the lines that name the database.
fn dump(server: &Server, db: &str, extra: &[&str]) -> String {
    let text = server.run_client(
        "pg_dump",
        db,
        &[&["--schema-only", "--no-comments"], extra].concat(),
    );
    // OIDs, relfilenodes, LSNs and xids pg_dump --binary-upgrade prints for
    // the extension's table and view differ between any two databases.
    let varying = regex::Regex::new(
        r"(binary_upgrade_set_next_[a-z_]+\(')[^']*(')|(relfrozenxid = ')\d+(')|(WHERE oid = ')\d+(')",
    )
    .expect("regex");
    // pg_dump 17+ prints a random \restrict key; nothing else differs by run.
    text.lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .map(|l| format!("{}\n", varying.replace_all(l, "$1$3$5<varies>$2$4$6")))
        .collect()
}

/// What the catalogs say about the extension, one sorted line per fact.
const CATALOG_REPORT: &str = r#"
with ext as (select e.* from pg_extension e where e.extname = 'pubjson'),
members as (
    select d.classid, d.objid, d.objsubid from pg_depend d, ext
     where d.refclassid = 'pg_extension'::regclass and d.refobjid = ext.oid and d.deptype = 'e'
)
select line from (
    select format('extension %s version %s schema %s relocatable %s config %s condition %s owner %s',
                  extname, extversion, extnamespace::regnamespace, extrelocatable,
                  extconfig, extcondition, extowner::regrole) as line
      from ext
    union all
    select format('extension depends on %s (%s)',
                  pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype)
      from pg_depend d, ext
     where d.classid = 'pg_extension'::regclass and d.objid = ext.oid
    union all
    select format('member %s', pg_describe_object(classid, objid, objsubid)) from members
    union all
    select format('schema %s owner %s acl %s comment %s', nspname, nspowner::regrole, nspacl,
                  obj_description(oid, 'pg_namespace'))
      from pg_namespace where nspname = 'pubjson'
    union all
    select format('initial privileges of %s (%s): %s',
                  pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype, i.initprivs)
      from pg_init_privs i
     where (i.classoid, i.objoid, i.objsubid) in (select * from members)
        or (i.classoid = 'pg_namespace'::regclass and i.objoid = 'pubjson'::regnamespace)
    union all
    select format(E'function %s owner %s acl %s comment %s\n%s',
                  p.oid::regprocedure, p.proowner::regrole, p.proacl,
                  obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
      from pg_proc p where p.pronamespace = 'pubjson'::regnamespace
) facts
order by line
"#;

fn catalog_report(c: &mut Client) -> String {
    c.query(CATALOG_REPORT, &[])
        .unwrap_or_else(|e| panic!("catalog report: {}", pubjson_e2e::describe_error(&e)))
        .iter()
        .map(|r| format!("{}\n", r.get::<_, String>(0)))
        .collect()
}

/// Panics with a unified diff when `upgraded` differs from `fresh`.
fn assert_same(what: &str, fresh: &str, upgraded: &str) {
    if fresh == upgraded {
        return;
    }
    let dir = pubjson_e2e::cluster_dir("upgrade-diff");
    std::fs::create_dir_all(&dir).expect("diff directory");
    let (a, b) = (format!("{dir}/fresh"), format!("{dir}/upgraded"));
    std::fs::write(&a, fresh).expect("write");
    std::fs::write(&b, upgraded).expect("write");
    let diff = Command::new("diff")
        .args(["-u", &a, &b])
        .output()
        .expect("diff");
    panic!(
        "{what}: the upgraded database differs from a fresh CREATE EXTENSION \
         (- fresh, + upgraded; update the upgrade script in sql/):\n{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

/// Everything compared, for database `db`.
struct Snapshot {
    dump: String,
    binary_upgrade_dump: String,
    catalogs: String,
}

/// [`snapshot_on`] the shared test cluster.
fn snapshot(db: &str, c: &mut Client) -> Snapshot {
    snapshot_on(&Server::main(), db, c)
}

fn snapshot_on(server: &Server, db: &str, c: &mut Client) -> Snapshot {
    Snapshot {
        dump: dump(server, db, &[]),
        binary_upgrade_dump: dump(server, db, &["--binary-upgrade"]),
        catalogs: catalog_report(c),
    }
}

fn assert_same_snapshot(from: &str, fresh: &Snapshot, upgraded: &Snapshot) {
    assert_same(
        &format!("pg_dump --schema-only, upgraded from {from}"),
        &fresh.dump,
        &upgraded.dump,
    );
    assert_same(
        &format!("pg_dump --schema-only --binary-upgrade, upgraded from {from}"),
        &fresh.binary_upgrade_dump,
        &upgraded.binary_upgrade_dump,
    );
    assert_same(
        &format!("catalogs, upgraded from {from}"),
        &fresh.catalogs,
        &upgraded.catalogs,
    );
}

/// The steps `ALTER EXTENSION pubjson UPDATE` takes from `from` to `to`.
fn update_path(c: &mut Client, from: &str, to: &str) -> Vec<String> {
    let path: Option<String> = c
        .query_one(
            "select path from pg_extension_update_paths('pubjson') where source = $1 and target = $2",
            &[&from, &to],
        )
        .unwrap_or_else(|e| panic!("pg_extension_update_paths: {e}"))
        .get(0);
    let path = path.unwrap_or_else(|| {
        panic!("no upgrade path from {from} to {to}: add sql/pubjson--{from}--<next>.sql")
    });
    path.split("--").skip(1).map(str::to_string).collect()
}

/// Decodes one insert through a new pubjson slot in `c`'s database and
/// checks the rows and the slot's statistics.
fn decode_and_count(c: &mut Client, slot: &str) {
    exec(
        c,
        "create table upgrade_t (id int primary key, note text); insert into upgrade_t values (0, 'before')",
    );
    exec(
        c,
        &format!("select pg_create_logical_replication_slot('{slot}', 'pubjson')"),
    );
    exec(c, "insert into upgrade_t values (1, 'after the upgrade')");
    let rows: Vec<String> = c
        .query(
            &format!(
                "select data from pg_logical_slot_get_changes('{slot}', NULL, NULL, 'format-version', '2')"
            ),
            &[],
        )
        .unwrap_or_else(|e| panic!("decoding {slot}: {}", pubjson_e2e::describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    let changes: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| serde_json::from_str(r).unwrap_or_else(|e| panic!("{r}: {e}")))
        .collect();
    assert_eq!(changes.len(), 3, "B, I, C: {rows:?}");
    assert_eq!(changes[1]["action"], "I", "{rows:?}");
    assert_eq!(changes[1]["table"], "upgrade_t", "{rows:?}");
    assert_eq!(
        changes[1]["columns"][1]["value"], "after the upgrade",
        "{rows:?}"
    );
    let stats = c
        .query_one(
            "select txns_emitted, changes_emitted, conflicting is not true, invalidation_reason \
             from pubjson.decoding_stats() where slot_name = $1",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("decoding_stats: {}", pubjson_e2e::describe_error(&e)));
    assert_eq!(stats.get::<_, i64>(0), 1, "txns_emitted");
    assert_eq!(stats.get::<_, i64>(1), 1, "changes_emitted");
    assert!(stats.get::<_, bool>(2), "conflicting");
    assert_eq!(
        stats.get::<_, Option<String>>(3),
        None,
        "invalidation_reason"
    );
    drop_slot(c, slot);
}

#[test]
fn every_version_upgrades_to_a_fresh_install() {
    let _serial = pubjson_e2e::serialize();
    let versions = versions_in_sql_dir();
    let mut fresh = fresh_database("pubjson_upgrade_fresh");
    let available: BTreeSet<String> = fresh
        .query(
            "select version from pg_available_extension_versions where name = 'pubjson'",
            &[],
        )
        .expect("pg_available_extension_versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        available, versions,
        "the server's extension directory offers other versions than sql/ (run scripts/install.sh)"
    );
    exec(&mut fresh, "create extension pubjson");
    let current = extension_version(&mut fresh);
    assert!(versions.contains(&current), "no sql/pubjson--{current}.sql");
    let expected = snapshot("pubjson_upgrade_fresh", &mut fresh);
    assert!(
        expected.binary_upgrade_dump.contains("decoding_stats"),
        "pg_dump --binary-upgrade prints the member functions"
    );

    let older: Vec<&String> = versions.iter().filter(|v| **v != current).collect();
    assert!(
        !older.is_empty(),
        "sql/ has no released version to upgrade from"
    );
    for from in older {
        let db = format!("pubjson_upgrade_from_{}", from.replace('.', "_"));
        let mut c = fresh_database(&db);
        // As the old version was installed (0.1.0: in public, see
        // sql/pubjson--0.1.0.control).
        exec(
            &mut c,
            &format!("create extension pubjson version '{from}'"),
        );
        assert_eq!(extension_version(&mut c), *from);
        // A slot created before the upgrade keeps decoding after it.
        exec(&mut c, "create table before_upgrade (id int primary key)");
        exec(
            &mut c,
            "select pg_create_logical_replication_slot('upgrade_old_slot', 'pubjson')",
        );
        for step in update_path(&mut c, from, &current) {
            exec(
                &mut c,
                &format!("alter extension pubjson update to '{step}'"),
            );
            assert_eq!(extension_version(&mut c), step);
        }
        exec(&mut c, "insert into before_upgrade values (1)");
        let old_slot_rows = c
            .query(
                "select data from pg_logical_slot_get_changes('upgrade_old_slot', NULL, NULL)",
                &[],
            )
            .expect("decoding the slot created before the upgrade");
        assert!(
            old_slot_rows
                .iter()
                .any(|r| r.get::<_, String>(0).contains("before_upgrade")),
            "the slot created before the upgrade decodes the insert after it"
        );
        drop_slot(&mut c, "upgrade_old_slot");
        exec(&mut c, "drop table before_upgrade");
        let upgraded = snapshot(&db, &mut c);
        assert_same_snapshot(from, &expected, &upgraded);

        decode_and_count(&mut c, "upgrade_new_slot");
        // DROP EXTENSION leaves schema pubjson, as after a fresh install,
        // and CREATE EXTENSION accepts it again.
        exec(
            &mut c,
            "drop extension pubjson; create extension pubjson; drop extension pubjson",
        );
        assert_eq!(
            one_string(
                &mut c,
                "select count(*)::text from pg_namespace where nspname = 'pubjson'"
            ),
            "1"
        );
        drop(c);
        drop_database(&db);
    }
    drop(fresh);
    drop_database("pubjson_upgrade_fresh");
}

/// 0.1.0 had no `schema` in its control file: it lived in whatever schema
/// came first on its creator's search_path. Its control file as shipped now
/// (sql/pubjson--0.1.0.control) installs it in public, so the test moves it
/// the way an install under `search_path = legacy_home` would have left it
/// (pg_extension.extnamespace and the extension's dependency on its schema).
/// After `ALTER EXTENSION pubjson UPDATE` (no target: every step) it lives
/// in pubjson, no longer holds that schema (which can be dropped), and
/// equals a fresh install.
#[test]
fn extension_created_in_another_schema_moves_to_pubjson() {
    let _serial = pubjson_e2e::serialize();
    let mut fresh = fresh_database("pubjson_upgrade_fresh2");
    exec(&mut fresh, "create extension pubjson");
    let current = extension_version(&mut fresh);
    let expected = snapshot("pubjson_upgrade_fresh2", &mut fresh);
    let db = "pubjson_upgrade_home";
    let mut c = fresh_database(db);
    exec(
        &mut c,
        "create extension pubjson version '0.1.0'; create schema legacy_home; \
         update pg_depend set refobjid = 'legacy_home'::regnamespace \
          where classid = 'pg_extension'::regclass \
            and objid = (select oid from pg_extension where extname = 'pubjson') \
            and refclassid = 'pg_namespace'::regclass and refobjid = 'public'::regnamespace; \
         update pg_extension set extnamespace = 'legacy_home'::regnamespace where extname = 'pubjson'",
    );
    let err = c
        .batch_execute("drop schema legacy_home")
        .expect_err("0.1.0 holds the schema it lives in");
    assert_eq!(pubjson_e2e::sqlstate(&err), "2BP01", "{err}");
    exec(&mut c, "alter extension pubjson update");
    assert_eq!(extension_version(&mut c), current);
    exec(&mut c, "drop schema legacy_home");
    assert_same_snapshot("0.1.0 in another schema", &expected, &snapshot(db, &mut c));
    drop(c);
    drop_database(db);
    drop(fresh);
    drop_database("pubjson_upgrade_fresh2");
}

/// The upgrade checks schema pubjson as CREATE EXTENSION does: a schema
/// another role owns stops it with SQLSTATE 42501, and nothing changes;
/// once a superuser owns it again, what the former owner planted in it
/// still stops the update.
#[test]
fn upgrade_refuses_a_schema_in_other_hands() {
    let _serial = pubjson_e2e::serialize();
    let versions = versions_in_sql_dir();
    let mut fresh = fresh_database("pubjson_upgrade_guard");
    exec(&mut fresh, "create extension pubjson");
    let current = extension_version(&mut fresh);
    exec(&mut fresh, "drop extension pubjson");
    for from in versions.iter().filter(|v| **v != current) {
        exec(
            &mut fresh,
            &format!(
                "drop schema if exists pubjson cascade; \
                 create extension pubjson version '{from}'; \
                 drop role if exists pubjson_upgrade_intruder; \
                 create role pubjson_upgrade_intruder; \
                 alter schema pubjson owner to pubjson_upgrade_intruder"
            ),
        );
        let err = fresh
            .batch_execute("alter extension pubjson update")
            .expect_err("the upgrade must refuse a schema owned by another role");
        assert_eq!(
            pubjson_e2e::sqlstate(&err),
            "42501",
            "{}",
            pubjson_e2e::describe_error(&err)
        );
        assert!(
            pubjson_e2e::describe_error(&err).contains("pubjson_upgrade_intruder"),
            "{}",
            pubjson_e2e::describe_error(&err)
        );
        assert_eq!(extension_version(&mut fresh), *from);
        // What the owner planted meanwhile stays when a superuser takes the
        // schema back as the hint says: the update still refuses it.
        exec(
            &mut fresh,
            "set role pubjson_upgrade_intruder; \
             create function pubjson.decoding_stats(x int default 0) returns int language sql as 'select 1'; \
             reset role; alter schema pubjson owner to postgres",
        );
        let err = fresh
            .batch_execute("alter extension pubjson update")
            .expect_err("the update must refuse what the former owner planted");
        assert_eq!(pubjson_e2e::sqlstate(&err), "42501", "{err:?}");
        assert!(
            pubjson_e2e::describe_error(&err).contains("function pubjson.decoding_stats(integer)"),
            "{}",
            pubjson_e2e::describe_error(&err)
        );
        assert_eq!(extension_version(&mut fresh), *from);
        exec(
            &mut fresh,
            "drop function pubjson.decoding_stats(int); alter extension pubjson update; \
             drop extension pubjson; drop schema pubjson; drop role pubjson_upgrade_intruder",
        );
    }
    drop(fresh);
    drop_database("pubjson_upgrade_guard");
}

/// Every upgrade script opens with the schema guard of the install script
/// (the DO block of src/api/schema_guard.sql, the same text), so that each
/// ALTER EXTENSION UPDATE checks schema pubjson as CREATE EXTENSION does.
#[test]
fn every_upgrade_script_runs_the_schema_guard() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let guard = std::fs::read_to_string(root.join("src/api/schema_guard.sql"))
        .expect("src/api/schema_guard.sql");
    let start = guard.find("DO $guard$").expect("DO $guard$");
    let block = &guard[start..];
    let block = &block[..block.find("\n$guard$;").expect("end of the guard") + 9];
    let mut scripts = 0;
    for entry in std::fs::read_dir(root.join("sql")).expect("sql/") {
        let name = entry
            .expect("sql/ entry")
            .file_name()
            .into_string()
            .unwrap();
        if name.ends_with(".sql") && name.matches("--").count() == 2 {
            let text = std::fs::read_to_string(root.join("sql").join(&name))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                text.contains(block),
                "{name} must hold the DO block of src/api/schema_guard.sql, byte for byte"
            );
            scripts += 1;
        }
    }
    assert!(scripts > 0, "no upgrade script in sql/");
}

/// Issue 23's upgrade path: objects planted in schema pubjson by a role
/// that had CREATE on it stop ALTER EXTENSION UPDATE after the grant is
/// revoked (as the CREATE hint says), and nothing changes; once they are
/// dropped (as the content hint says) the update goes through and the
/// extension's functions are the only ones left.
#[test]
fn upgrade_refuses_objects_planted_in_the_schema() {
    let _serial = pubjson_e2e::serialize();
    let versions = versions_in_sql_dir();
    let db = "pubjson_upgrade_planted";
    let mut c = fresh_database(db);
    exec(&mut c, "create extension pubjson");
    let current = extension_version(&mut c);
    exec(&mut c, "drop extension pubjson; drop schema pubjson");
    let functions = |c: &mut Client| -> Vec<String> {
        c.query(
            "select p.oid::regprocedure::text || ' ' || md5(p.prosrc) from pg_proc p \
              where p.pronamespace = 'pubjson'::regnamespace order by 1",
            &[],
        )
        .expect("functions")
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    for from in versions.iter().filter(|v| **v != current) {
        exec(
            &mut c,
            &format!(
                "create extension pubjson version '{from}'; \
                 drop role if exists pubjson_upgrade_attacker; \
                 create role pubjson_upgrade_attacker; \
                 create table t (id int primary key); create publication p1 for table t; \
                 grant create on schema pubjson to pubjson_upgrade_attacker; \
                 set role pubjson_upgrade_attacker; \
                 CREATE FUNCTION pubjson.publication_risks(publication text) \
                   RETURNS TABLE(schema_name name, table_name name, risk text, detail text, hint text) \
                   LANGUAGE plpgsql AS $$BEGIN EXECUTE 'ALTER ROLE pubjson_upgrade_attacker SUPERUSER'; RETURN; END$$; \
                 CREATE FUNCTION pubjson.decoding_stats(x int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT 1'; \
                 reset role"
            ),
        );
        let before = functions(&mut c);
        let err = c
            .batch_execute("alter extension pubjson update")
            .expect_err("a schema open to CREATE is refused");
        let hint = err.as_db_error().and_then(|d| d.hint()).unwrap_or("");
        assert_eq!(pubjson_e2e::sqlstate(&err), "42501", "{err:?}");
        assert!(hint.contains("also refuses every object"), "{hint}");
        exec(
            &mut c,
            "revoke create on schema pubjson from pubjson_upgrade_attacker",
        );
        let err = c
            .batch_execute("alter extension pubjson update")
            .expect_err("planted functions are refused");
        let d = err.as_db_error().expect("server error");
        assert_eq!(d.code().code(), "42501", "{err:?}");
        for planted in [
            "function pubjson.publication_risks(pg_catalog.text)",
            "function pubjson.decoding_stats(integer)",
        ] {
            assert!(d.detail().unwrap_or("").contains(planted), "{err:?}");
        }
        assert!(
            d.hint().unwrap_or("").contains("drop them"),
            "{:?}",
            d.hint()
        );
        assert_eq!(extension_version(&mut c), *from, "nothing changed");
        assert_eq!(functions(&mut c), before, "nothing changed");
        // (Before the update, 0.1.0's publication_risks(name) loses a call
        // with a literal to the planted one: not called here.)
        exec(
            &mut c,
            "drop function pubjson.publication_risks(text); \
             drop function pubjson.decoding_stats(int); \
             alter extension pubjson update; \
             select * from pubjson.publication_risks('p1'); \
             select * from pubjson.decoding_stats()",
        );
        assert_eq!(extension_version(&mut c), current);
        let superuser: bool = c
            .query_one(
                "select rolsuper from pg_roles where rolname = 'pubjson_upgrade_attacker'",
                &[],
            )
            .expect("pg_roles")
            .get(0);
        assert!(!superuser, "a planted function ran");
        exec(
            &mut c,
            "drop extension pubjson; drop schema pubjson; drop publication p1; drop table t; \
             drop role pubjson_upgrade_attacker",
        );
    }
    drop(c);
    drop_database(db);
}

/// publication_risks(name) becomes publication_risks(text) in 0.2.0: the
/// update drops the old function, so it stops (SQLSTATE 2BP01, nothing
/// changed) while a view uses it, and goes through once the view is
/// dropped; the view can then be created again on the new function, as
/// docs/operations.md says.
#[test]
fn upgrade_stops_while_a_view_uses_the_old_publication_risks() {
    let _serial = pubjson_e2e::serialize();
    let db = "pubjson_upgrade_risks_view";
    let mut c = fresh_database(db);
    let view = "create view public.my_risks as select risk from pubjson.publication_risks('p1')";
    exec(
        &mut c,
        &format!(
            "create table t (id int primary key); create publication p1 for table t; \
             create extension pubjson version '0.1.0'; {view}"
        ),
    );
    let err = c
        .batch_execute("alter extension pubjson update to '0.2.0'")
        .expect_err("a view on publication_risks(name) stops the update");
    assert_eq!(pubjson_e2e::sqlstate(&err), "2BP01", "{err:?}");
    assert_eq!(extension_version(&mut c), "0.1.0");
    exec(
        &mut c,
        &format!(
            "drop view public.my_risks; alter extension pubjson update to '0.2.0'; {view}; \
             select * from public.my_risks"
        ),
    );
    assert_eq!(extension_version(&mut c), "0.2.0");
    drop(c);
    drop_database(db);
}

/// Views that a pg_monitor member built on pubjson functions (issue 23).
/// The update replaces in place every function whose signature and result
/// type stay the same, so a view on subscription_status() survives it and
/// still works; standby_conflicts() gains result columns and must be
/// dropped and created again, so a view on it stops the update (2BP01,
/// naming the function and the view, nothing changed). The procedure in
/// docs/operations.md (drop the view, update, create it again) works.
#[test]
fn upgrade_keeps_views_on_unchanged_functions_and_stops_on_changed_ones() {
    let _serial = pubjson_e2e::serialize();
    let db = "pubjson_upgrade_views";
    let mut c = fresh_database(db);
    let sb_view = "create view public.mon_sb as select applies from pubjson.standby_conflicts()";
    exec(
        &mut c,
        &format!(
            "drop role if exists upgrade_mon; create role upgrade_mon in role pg_monitor;
             grant create on schema public to upgrade_mon;
             create extension pubjson version '0.1.0';
             set role upgrade_mon;
             create view public.mon_subs as select subscription, enabled from pubjson.subscription_status();
             {sb_view};
             reset role"
        ),
    );
    let err = c
        .batch_execute("alter extension pubjson update to '0.2.0'")
        .expect_err("a view on standby_conflicts() stops the update");
    assert_eq!(pubjson_e2e::sqlstate(&err), "2BP01", "{err:?}");
    let db_err = err.as_db_error().expect("a server error");
    assert!(
        db_err.message().contains("pubjson.standby_conflicts()"),
        "{db_err:?}"
    );
    assert!(
        db_err.detail().unwrap_or("").contains("mon_sb"),
        "{db_err:?}"
    );
    assert_eq!(extension_version(&mut c), "0.1.0");
    exec(
        &mut c,
        &format!(
            "drop view public.mon_sb;
             alter extension pubjson update to '0.2.0';
             set role upgrade_mon; {sb_view}; reset role;
             select * from public.mon_sb"
        ),
    );
    assert_eq!(extension_version(&mut c), "0.2.0");
    // The view on the unchanged function survived and still runs, as its
    // owner (pg_monitor may still execute the function).
    let n: i64 = c
        .query_one(
            "select count(*) from pg_catalog.pg_views where schemaname = 'public' and viewname in ('mon_subs', 'mon_sb')",
            &[],
        )
        .expect("views")
        .get(0);
    assert_eq!(n, 2);
    exec(
        &mut c,
        "set role upgrade_mon; select * from public.mon_subs; select * from public.mon_sb; reset role",
    );
    drop(c);
    drop_database(db);
    let mut admin = Server::main().connect("postgres");
    exec(&mut admin, "drop role upgrade_mon");
}

// ===========================================================================
// pg_upgrade from 17 to 18 with a pubjson slot
// ===========================================================================

/// The major pg_upgrade upgrades from, and the one it upgrades to (the
/// server under test).
const UPGRADE_FROM: u32 = 17;
const UPGRADE_TO: u32 = 18;

/// The clusters of the upgrade (old, new) and of the refused check.
const UPGRADE_OLD: Place = Place::new("pgupgrade-old", 54410);
const UPGRADE_NEW: Place = Place::new("pgupgrade-new", 54411);
const BEHIND_OLD: Place = Place::new("pgupgrade-behind-old", 54412);
const BEHIND_NEW: Place = Place::new("pgupgrade-behind-new", 54413);

/// The oldest version in `sql/`, compared number by number.
fn oldest_version() -> String {
    let key = |v: &String| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap_or(0)).collect() };
    versions_in_sql_dir()
        .into_iter()
        .min_by_key(key)
        .expect("sql/ has no install script")
}

/// The programs of PostgreSQL 17 when `test` can run: the server under
/// test is 18 and the 17 tree has pubjson (its library, control file and
/// `version`'s script; `scripts/test.sh --all-versions` installs 17 before
/// 18). Otherwise notes why the test skips its checks and returns None.
fn upgrade_source(test: &str, version: &str) -> Option<PathBuf> {
    let major = pubjson_e2e::major_of(&pg_bin_dir());
    if major != Some(UPGRADE_TO) {
        let this = major.map_or("an unknown major".to_string(), |m| m.to_string());
        note_skip(
            test,
            &format!("pg_upgrade from {UPGRADE_FROM} runs on PostgreSQL {UPGRADE_TO} only, not on {this}"),
        );
        return None;
    }
    let bin = pg_bin_dir_of(UPGRADE_FROM);
    if let Some(missing) = pubjson_e2e::pubjson_missing_from(&bin, &[version]) {
        note_skip(
            test,
            &format!(
                "no PostgreSQL {UPGRADE_FROM} with pubjson to upgrade from ({missing}; \
                 scripts/build-pg.sh {UPGRADE_FROM} && PG_MAJOR={UPGRADE_FROM} scripts/install.sh)"
            ),
        );
        return None;
    }
    Some(bin)
}

/// A new PostgreSQL 17 cluster at `place` with pubjson `version` in
/// database `db`, a table `pgu` and, created after it, a pubjson slot
/// `slot`. Autovacuum is off: its ANALYZE of `pgu` would commit a
/// transaction in the slot's database that no consumer has read, which
/// pg_upgrade counts as WAL not consumed.
fn old_cluster(place: Place, bin: &Path, db: &str, version: &str, slot: &str) -> ExtraCluster {
    let cl = place.create_with(bin, &[]);
    cl.append_conf("autovacuum = off\n");
    cl.start_server();
    exec(
        &mut cl.connect("postgres"),
        &format!("create database {db}"),
    );
    let mut c = cl.connect(db);
    exec(
        &mut c,
        &format!(
            "create extension pubjson version '{version}'; \
             create table pgu (id int primary key, note text)"
        ),
    );
    exec(
        &mut c,
        &format!("select pg_create_logical_replication_slot('{slot}', 'pubjson')"),
    );
    cl
}

/// Inserts rows `ids` into `pgu`, `per_txn` rows per transaction.
fn insert_rows(c: &mut Client, ids: std::ops::RangeInclusive<i32>, per_txn: i32) {
    let (first, last) = (*ids.start(), *ids.end());
    for start in (first..=last).step_by(per_txn as usize) {
        let end = (start + per_txn - 1).min(last);
        exec(
            c,
            &format!(
                "insert into pgu select g, 'row ' || g from generate_series({start}, {end}) g"
            ),
        );
    }
}

/// What a consumer received.
struct Received {
    /// The ids of the rows inserted into `pgu`, in the order received.
    ids: Vec<i32>,
    /// The commit LSN of each transaction (format 2's `C` with
    /// `include-lsn`), what a consumer deduplicates by.
    commit_lsns: Vec<u64>,
}

/// Consumes `slot` of `db` on `server` with pg_recvlogical (format 2 with
/// `include-lsn`) into `file` until it has received `commits` transactions
/// and confirmed everything written before the call. Every object must be
/// a BEGIN, a COMMIT or an insert into `pgu`.
fn consume(server: &Server, db: &str, slot: &str, file: &Path, commits: usize) -> Received {
    let mut c = server.connect(db);
    let written = one_string(&mut c, "select pg_current_wal_lsn()::text");
    let mut recv = RecvLogical::start_on(
        server,
        ("postgres", db),
        slot,
        file,
        &["format-version=2", "include-lsn"],
        &[],
    );
    wait_commits(file, commits);
    wait_true(
        &mut c,
        &format!("{slot} confirmed up to {written}"),
        Duration::from_secs(60),
        "select confirmed_flush_lsn >= $1::text::pg_lsn from pg_replication_slots where slot_name = $2",
        &[&written, &slot],
    );
    recv.stop();
    // Everything it wrote, once stopped: no more than awaited.
    let mut received = Received {
        ids: Vec::new(),
        commit_lsns: Vec::new(),
    };
    for line in &pubjson_e2e::complete_lines(file) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["action"].as_str() {
            Some("B") => {}
            Some("C") => received
                .commit_lsns
                .push(pubjson_e2e::lsn(v["lsn"].as_str().expect("lsn"))),
            Some("I") if v["table"] == "pgu" => received
                .ids
                .push(v["columns"][0]["value"].as_i64().expect("id") as i32),
            _ => panic!("{slot} sent an unexpected object: {line}"),
        }
    }
    assert_eq!(
        received.commit_lsns.len(),
        commits,
        "transactions received from {slot}"
    );
    received
}

/// How many rows decoding `slot` would give now (0: its consumer has
/// caught up).
fn pending_rows(c: &mut Client, slot: &str) -> i64 {
    c.query_one(
        "select count(*) from pg_logical_slot_peek_changes($1, NULL, NULL, 'format-version', '2')",
        &[&slot],
    )
    .unwrap_or_else(|e| panic!("peeking {slot}: {}", pubjson_e2e::describe_error(&e)))
    .get(0)
}

/// The pg_upgrade report file `name` of the last run in `new`'s
/// `pg_upgrade_output.d` (kept when pg_upgrade fails).
fn upgrade_report(new: &ExtraCluster, name: &str) -> String {
    fn find(dir: &Path, name: &str, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                find(&path, name, found);
            } else if path.file_name().is_some_and(|n| n == name) {
                found.push(path);
            }
        }
    }
    let root = PathBuf::from(new.pgdata()).join("pg_upgrade_output.d");
    let mut found = Vec::new();
    find(&root, name, &mut found);
    // The run directories are named by their start time.
    found.sort();
    let path = found
        .last()
        .unwrap_or_else(|| panic!("no {name} under {}", root.display()));
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Issue 30: pg_upgrade carries a pubjson slot from 17 to 18. On 17: the
/// extension at its oldest version, a slot, three transactions that
/// pg_recvlogical consumes until the slot has confirmed everything, then a
/// clean stop. `pg_upgrade --check`, then `pg_upgrade`, to a new 18
/// cluster (initdb `--no-data-checksums`, as 17's cluster has none). On
/// 18: the slot is there with its plugin, decoding it gives nothing of
/// before the upgrade; update_extensions.sql (written by pg_upgrade) runs
/// ALTER EXTENSION pubjson UPDATE, after which the extension equals a
/// fresh CREATE EXTENSION; two new transactions reach pg_recvlogical from
/// the slot, exactly their rows, and the statistics count exactly them.
#[test]
fn pg_upgrade_from_17_keeps_a_caught_up_slot() {
    let test = current_test(module_path!());
    let oldest = oldest_version();
    let Some(old_bin) = upgrade_source(&test, &oldest) else {
        return;
    };
    let (db, slot) = ("pubjson_pgu", "pgu_slot");
    let work = scratch_dir("pg-upgrade");
    let old = old_cluster(UPGRADE_OLD, &old_bin, db, &oldest, slot);
    let mut c = old.connect(db);
    insert_rows(&mut c, 1..=30, 10);
    let before = consume(&old.server(), db, slot, &work.join("on17.json"), 3);
    assert_eq!(
        before.ids,
        (1..=30).collect::<Vec<_>>(),
        "rows received on 17"
    );
    assert_eq!(pending_rows(&mut c, slot), 0, "the consumer has caught up");
    drop(c);
    old.stop_server();

    let new = UPGRADE_NEW.create_with(&pg_bin_dir(), &["--no-data-checksums"]);
    let check = pg_upgrade(&old, &new, &work, &["--check"]);
    assert!(
        check.success,
        "pg_upgrade --check failed:\n{}",
        check.output
    );
    assert!(
        check
            .output
            .contains("Checking for valid logical replication slots"),
        "{}",
        check.output
    );
    let upgrade = pg_upgrade(&old, &new, &work, &[]);
    assert!(upgrade.success, "pg_upgrade failed:\n{}", upgrade.output);
    for said in [
        "Restoring logical replication slots in the new cluster",
        "Your installation contains extensions that should be updated",
    ] {
        assert!(upgrade.output.contains(said), "{said}:\n{}", upgrade.output);
    }
    let update_script = work.join("update_extensions.sql");
    let script = std::fs::read_to_string(&update_script)
        .unwrap_or_else(|e| panic!("{}: {e}", update_script.display()));
    assert_eq!(
        script,
        format!("\\connect {db}\nALTER EXTENSION \"pubjson\" UPDATE;\n"),
        "update_extensions.sql"
    );

    new.start_server();
    let server = new.server();
    let mut c = new.connect(db);
    let row = one_row(
        &mut c,
        "select plugin::text, database::text, two_phase, invalidation_reason \
           from pg_replication_slots where slot_name = 'pgu_slot' and slot_type = 'logical'",
    );
    assert_eq!(row.get::<_, String>(0), "pubjson");
    assert_eq!(row.get::<_, String>(1), db);
    assert!(!row.get::<_, bool>(2), "two_phase");
    assert_eq!(row.get::<_, Option<String>>(3), None, "invalidation_reason");
    assert_eq!(
        extension_version(&mut c),
        oldest,
        "pg_upgrade keeps the version"
    );
    assert_eq!(pending_rows(&mut c, slot), 0, "nothing of 17's WAL again");

    // The extension's SQL upgrade path, as pg_upgrade's report says.
    let script_path = update_script.to_str().expect("a UTF-8 path");
    server.run_client(
        "psql",
        "postgres",
        &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", script_path],
    );
    let fresh_db = "pubjson_pgu_fresh";
    exec(
        &mut new.connect("postgres"),
        &format!("create database {fresh_db}"),
    );
    let mut fresh = new.connect(fresh_db);
    exec(&mut fresh, "create extension pubjson");
    let current = extension_version(&mut fresh);
    assert_eq!(extension_version(&mut c), current, "updated on 18");

    // The consumer continues on 18: exactly the new rows.
    insert_rows(&mut c, 31..=50, 10);
    let after = consume(&server, db, slot, &work.join("on18.json"), 2);
    assert_eq!(
        after.ids,
        (31..=50).collect::<Vec<_>>(),
        "rows received on 18"
    );
    // 18's WAL continues after 17's: a consumer that deduplicates by
    // commit LSN (docs/formats.md) takes the new transactions as new.
    assert!(
        after.commit_lsns[0] > *before.commit_lsns.last().expect("commits on 17"),
        "commit LSNs on 18 {:?} after those on 17 {:?}",
        after.commit_lsns,
        before.commit_lsns
    );
    wait_true(
        &mut c,
        "decoding_stats() of the walsender's two transactions",
        Duration::from_secs(30),
        "select txns_emitted = 2 from pubjson.decoding_stats() where slot_name = $1",
        &[&slot],
    );
    let stats = one_row(
        &mut c,
        "select d.changes_emitted, d.active, d.confirmed_flush_lsn = s.confirmed_flush_lsn, \
                d.invalidation_reason \
           from pubjson.decoding_stats() d join pg_replication_slots s on s.slot_name = d.slot_name \
          where d.slot_name = 'pgu_slot'",
    );
    assert_eq!(stats.get::<_, i64>(0), 20, "changes_emitted");
    assert!(!stats.get::<_, bool>(1), "active");
    assert!(stats.get::<_, bool>(2), "confirmed_flush_lsn");
    assert_eq!(
        stats.get::<_, Option<String>>(3),
        None,
        "invalidation_reason"
    );
    let pending: i64 = c
        .query_one(
            "select count(*) from pubjson.pending_transactions() where slot_name = $1",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("pending_transactions: {}", pubjson_e2e::describe_error(&e)))
        .get(0);
    assert_eq!(pending, 0, "nobody decodes the slot");

    // The upgraded extension equals a fresh install (with the test's own
    // objects gone).
    drop_slot(&mut c, slot);
    exec(&mut c, "drop table pgu");
    let upgraded = snapshot_on(&server, db, &mut c);
    assert!(
        upgraded.binary_upgrade_dump.contains("decoding_stats"),
        "pg_dump --binary-upgrade prints the member functions"
    );
    assert_same_snapshot(
        &format!("{oldest} on {UPGRADE_FROM} through pg_upgrade"),
        &snapshot_on(&server, fresh_db, &mut fresh),
        &upgraded,
    );
    drop((c, fresh));
    drop((new, old));
    let _ = std::fs::remove_dir_all(&work);
}

/// Issue 30: a pubjson slot with WAL its consumer has not read (rows
/// written after the last consume) stops `pg_upgrade --check` with
/// PostgreSQL's message, and the list it names says which slot; once the
/// consumer has read the rest, the check passes.
#[test]
fn pg_upgrade_check_refuses_a_slot_that_has_not_consumed_the_wal() {
    let test = current_test(module_path!());
    let oldest = oldest_version();
    let Some(old_bin) = upgrade_source(&test, &oldest) else {
        return;
    };
    let (db, slot) = ("pubjson_pgu_behind", "pgu_behind");
    let work = scratch_dir("pg-upgrade-behind");
    let old = old_cluster(BEHIND_OLD, &old_bin, db, &oldest, slot);
    let mut c = old.connect(db);
    insert_rows(&mut c, 1..=10, 10);
    let first = consume(&old.server(), db, slot, &work.join("first.json"), 1);
    assert_eq!(first.ids, (1..=10).collect::<Vec<_>>());
    insert_rows(&mut c, 11..=20, 10);
    drop(c);
    old.stop_server();

    let new = BEHIND_NEW.create_with(&pg_bin_dir(), &["--no-data-checksums"]);
    let check = pg_upgrade(&old, &new, &work, &["--check"]);
    assert!(
        !check.success,
        "pg_upgrade --check passed:\n{}",
        check.output
    );
    assert!(
        check.output.contains(
            "Your installation contains logical replication slots that cannot be upgraded.\n\
             You can remove invalid slots and/or consume the pending WAL for other slots,\n\
             and then restart the upgrade."
        ),
        "{}",
        check.output
    );
    assert_eq!(
        upgrade_report(&new, "invalid_logical_slots.txt"),
        format!("The slot \"{slot}\" has not consumed the WAL yet\n")
    );

    // Consumed, the slot passes.
    old.start_server();
    let rest = consume(&old.server(), db, slot, &work.join("rest.json"), 1);
    assert_eq!(rest.ids, (11..=20).collect::<Vec<_>>());
    old.stop_server();
    let check = pg_upgrade(&old, &new, &work, &["--check"]);
    assert!(
        check.success,
        "pg_upgrade --check failed:\n{}",
        check.output
    );
    drop((new, old));
    let _ = std::fs::remove_dir_all(&work);
}
