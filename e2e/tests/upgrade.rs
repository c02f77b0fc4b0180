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

use postgres::Client;
use pubjson_e2e::{drop_slot, exec, one_string, pg_bin, Server};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

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

/// pg_dump's schema-only output of `db` (plus `extra` options), without
/// the lines that name the database.
fn dump(db: &str, extra: &[&str]) -> String {
    let Server { host, port } = Server::main();
    let out = Command::new(pg_bin("pg_dump"))
        .args(["--schema-only", "--no-comments", "-h", &host, "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", "-d", db])
        .args(extra)
        .output()
        .expect("running pg_dump");
    assert!(
        out.status.success(),
        "pg_dump {db} {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("pg_dump output is UTF-8");
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

fn snapshot(db: &str, c: &mut Client) -> Snapshot {
    Snapshot {
        dump: dump(db, &[]),
        binary_upgrade_dump: dump(db, &["--binary-upgrade"]),
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
