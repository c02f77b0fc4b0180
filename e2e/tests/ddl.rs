//! DDL capture end to end (docs/ddl.md): `pubjson.enable_ddl_capture()`'s
//! event triggers write one `pubjson.ddl` message per command; format 3
//! shows it as a `DDL` object in commit order with the rows around it,
//! formats 1 and 2 as wal2json's ordinary message.
//!
//! Each test has its own database `pubjson_ddl_<name>`; slot creation is
//! serialized with the other suites; roles are named `ddl_<test>_...`.

use postgres::Client;
// Each test decodes with format 3 (`get3`, consuming) from its slots of
// pubjson (`slot`).
use pubjson_e2e::{
    drop_slot, exec, get_format3 as get3, json_lines, peek_texts, pubjson_slot as slot,
    scratch_dir, sqlstate, suite_database, wait_commits, RecvLogical, SchemaReplica, Server,
};
use serde_json::Value;
use std::time::Duration;

fn database(name: &str) -> (String, Client) {
    suite_database("pubjson_ddl_", name)
}

/// `B`, `C`, `R`, `I`... and `DDL:<tag>` per object.
fn summary(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| match o["action"].as_str().unwrap_or("?") {
            "DDL" => format!("DDL:{}", o["tag"].as_str().unwrap_or("?")),
            a => a.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn ddl(objects: &[Value]) -> Vec<&Value> {
    objects.iter().filter(|o| o["action"] == "DDL").collect()
}

fn columns(r: &Value) -> Vec<String> {
    r["columns"]
        .as_array()
        .expect("R columns")
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["name"].as_str().unwrap_or("?"),
                c["type"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", pubjson_e2e::describe_error(&e)))
        .get(0)
}

const TRIGGERS: &str = "select count(*) from pg_event_trigger where evtname like 'pubjson%'";
const FUNCTIONS: &str =
    "select count(*) from pg_proc where proname in ('_ddl_event', 'enable_ddl_capture', 'disable_ddl_capture')";

/// Enable and disable are idempotent, superuser only (42501), and neither
/// the triggers nor the functions outlive DROP EXTENSION.
#[test]
fn capture_on_off_and_drop_extension() {
    let (dbname, mut c) = database("onoff");
    assert_eq!(count(&mut c, TRIGGERS), 0, "off by default");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture(); select pubjson.enable_ddl_capture()",
    );
    assert_eq!(count(&mut c, TRIGGERS), 2);
    assert_eq!(
        count(
            &mut c,
            "select count(*) from pg_depend d join pg_event_trigger e on d.objid = e.oid \
                       where d.deptype = 'e' and e.evtname like 'pubjson%'"
        ),
        2,
        "the triggers are members of the extension"
    );
    exec(
        &mut c,
        "alter event trigger pubjson_sql_drop disable; select pubjson.enable_ddl_capture()",
    );
    assert_eq!(
        count(&mut c, "select count(*) from pg_event_trigger where evtname like 'pubjson%' and evtenabled = 'A'"),
        2,
        "enable turns a disabled trigger back on, ENABLE ALWAYS"
    );
    exec(
        &mut c,
        "do $$ begin if not exists (select from pg_roles where rolname = 'ddl_onoff_user') \
         then create role ddl_onoff_user login; end if; end $$",
    );
    let mut user = Server::main().connect_as(&dbname, "ddl_onoff_user");
    for f in ["enable_ddl_capture", "disable_ddl_capture"] {
        let e = user
            .batch_execute(&format!("select pubjson.{f}()"))
            .expect_err("an ordinary role may not");
        assert_eq!(sqlstate(&e), "42501", "{f}");
    }
    // Granted EXECUTE, the role still meets the superuser check.
    exec(
        &mut c,
        "grant execute on function pubjson.disable_ddl_capture() to ddl_onoff_user",
    );
    let e = user
        .batch_execute("select pubjson.disable_ddl_capture()")
        .expect_err("not a superuser");
    assert_eq!(sqlstate(&e), "42501");
    drop(user);
    exec(
        &mut c,
        "revoke execute on function pubjson.disable_ddl_capture() from ddl_onoff_user",
    );
    exec(
        &mut c,
        "select pubjson.disable_ddl_capture(); select pubjson.disable_ddl_capture()",
    );
    assert_eq!(count(&mut c, TRIGGERS), 0);
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture(); drop extension pubjson",
    );
    assert_eq!(
        count(&mut c, TRIGGERS),
        0,
        "DROP EXTENSION removes the triggers"
    );
    assert_eq!(count(&mut c, FUNCTIONS), 0, "and the functions");
    // DDL goes on without the extension.
    exec(&mut c, "create table after_drop (id int)");
}

/// Each command class gives its DDL object where it committed, between
/// the rows of neighbouring transactions; rolled-back DDL gives nothing;
/// the relations carry the new description.
#[test]
fn command_classes_in_commit_order() {
    let (_db, mut c) = database("classes");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    slot(&mut c, "ddl_classes");
    exec(&mut c, "create table t (id int primary key, a text)");
    exec(&mut c, "insert into t values (1, 'x')");
    exec(&mut c, "begin; alter table t add column gone int; rollback");
    exec(
        &mut c,
        "begin; insert into t values (2, 'y');
         alter table t add column b int default 3, alter column a type varchar(10);
         insert into t values (3, 'z', 4); commit",
    );
    exec(&mut c, "alter table t rename column b to c");
    exec(&mut c, "alter table t drop column c");
    exec(&mut c, "create index t_a on t (a)");
    exec(&mut c, "create table ctas as select id, a from t");
    exec(
        &mut c,
        "create table p (id int, k int) partition by range (k);
         create table p1 (id int, k int);
         alter table p attach partition p1 for values from (0) to (10);
         alter table p detach partition p1",
    );
    exec(&mut c, "drop table ctas");
    let objects = get3(&mut c, "ddl_classes", &[]);
    assert_eq!(
        summary(&objects),
        "B DDL:CREATE TABLE C \
         B R I C \
         B I DDL:ALTER TABLE R I C \
         B DDL:ALTER TABLE C \
         B DDL:ALTER TABLE C \
         B DDL:CREATE INDEX C \
         B R I I I DDL:CREATE TABLE AS C \
         B DDL:CREATE TABLE DDL:CREATE TABLE DDL:ALTER TABLE DDL:ALTER TABLE C \
         B DDL:DROP TABLE C",
        "{objects:#?}"
    );
    let events = ddl(&objects);
    let create = events[0];
    assert_eq!(create["event"], "ddl_command_end");
    assert_eq!(
        create["command"],
        "create table t (id int primary key, a text)"
    );
    assert_eq!(create["role"], "postgres");
    let table = &create["objects"][0];
    assert_eq!(table["type"], "table");
    assert_eq!(table["schema"], "public");
    assert_eq!(table["identity"], "public.t");
    let oid = table["oid"].as_u64().expect("oid");
    assert_eq!(
        create["objects"][1]["type"], "index",
        "the primary key's index"
    );
    assert_eq!(create["relations"].as_array().map(Vec::len), Some(1));
    assert_eq!(create["relations"][0]["relid"].as_u64(), Some(oid));
    assert_eq!(columns(&create["relations"][0]), ["id integer", "a text"]);
    // Several subcommands: one object, the new description, equal to the
    // R object the next change brings.
    let alter = events[1];
    assert_eq!(
        columns(&alter["relations"][0]),
        ["id integer", "a character varying(10)", "b integer"]
    );
    let after: Vec<&Value> = objects.iter().filter(|o| o["action"] == "R").collect();
    assert_eq!(after[1], &alter["relations"][0], "R and DDL agree");
    assert_eq!(
        columns(&events[2]["relations"][0]),
        ["id integer", "a character varying(10)", "c integer"]
    );
    assert_eq!(
        columns(&events[3]["relations"][0]),
        ["id integer", "a character varying(10)"]
    );
    assert_eq!(events[4]["objects"][0]["type"], "index");
    assert_eq!(events[4]["objects"][0]["identity"], "public.t_a");
    assert_eq!(
        events[4]["relations"][0]["relid"].as_u64(),
        Some(oid),
        "an index's table"
    );
    assert_eq!(
        columns(&events[5]["relations"][0]),
        ["id integer", "a character varying(10)"]
    );
    // The multi-statement string: every command carries the whole string.
    let partitions = &events[6..10];
    for e in partitions {
        assert!(
            e["command"]
                .as_str()
                .unwrap_or("")
                .contains("detach partition p1"),
            "{e}"
        );
    }
    assert_eq!(partitions[0]["objects"][0]["type"], "table");
    assert_eq!(partitions[0]["objects"][0]["identity"], "public.p");
    assert_eq!(
        partitions[2]["objects"][0]["identity"], "public.p",
        "attach: the parent"
    );
    assert_eq!(
        partitions[3]["objects"][0]["identity"], "public.p",
        "detach: the parent"
    );
    let drop = events[10];
    assert_eq!(drop["event"], "sql_drop");
    assert_eq!(drop["objects"][0]["identity"], "public.ctas");
    assert_eq!(drop["relations"], serde_json::json!([]));
    drop_slot(&mut c, "ddl_classes");
}

/// An ordinary role creates and alters its own tables with a search_path
/// that puts look-alikes of the functions capture calls first; names with
/// quotes, backslashes and non-ASCII come out intact; nothing planted runs.
#[test]
fn ordinary_role_hostile_names_and_lookalikes() {
    let (dbname, mut c) = database("hostile");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    exec(
        &mut c,
        "do $$ begin if not exists (select from pg_roles where rolname = 'ddl_hostile_user') \
         then create role ddl_hostile_user login; end if; end $$;
         grant create on schema public to ddl_hostile_user;
         create table public.planted_ran (what text);
         grant insert on public.planted_ran to public;
         create function public.current_setting(text) returns text language sql
           as $$ insert into public.planted_ran values ('current_setting') returning 'x' $$;
         create function public.current_query() returns text language sql
           as $$ insert into public.planted_ran values ('current_query') returning 'x' $$;
         create function public.pg_logical_emit_message(boolean, text, text) returns pg_lsn language sql
           as $$ insert into public.planted_ran values ('emit') returning '0/0'::pg_lsn $$;
         create function public.pg_event_trigger_ddl_commands() returns setof int language sql
           as $$ insert into public.planted_ran values ('ddl_commands') returning 1 $$;
         create function public.json_build_object(text, text) returns json language sql
           as $$ insert into public.planted_ran values ('json_build_object') returning '{}'::json $$;
         create function public.ddl_eq(text, text) returns boolean language sql
           as $$ insert into public.planted_ran values ('=') returning pg_catalog.texteq($1, $2) $$;
         create operator public.= (leftarg = text, rightarg = text, function = public.ddl_eq);",
    );
    slot(&mut c, "ddl_hostile");
    let mut user = Server::main().connect_as(&dbname, "ddl_hostile_user");
    exec(
        &mut user,
        "set search_path = public, pg_catalog;
         create table \"q\"\"uo\\te é\" (\"c\"\"ol\\ ü\" int primary key);
         alter table \"q\"\"uo\\te é\" add column \"naïve\" text;
         insert into \"q\"\"uo\\te é\" values (1, 'v');
         create type pg_temp.text as (x int);
         create index qi on \"q\"\"uo\\te é\" (\"naïve\")",
    );
    drop(user);
    let objects = get3(&mut c, "ddl_hostile", &[]);
    assert_eq!(
        summary(&objects),
        // A temporary type is not captured, and a temporary `text` (types
        // in pg_temp come first) does not stop capture.
        "B DDL:CREATE TABLE DDL:ALTER TABLE R I DDL:CREATE INDEX C",
        "{objects:#?}"
    );
    let events = ddl(&objects);
    assert_eq!(events[0]["role"], "ddl_hostile_user");
    assert_eq!(events[0]["search_path"], "public, pg_catalog");
    assert_eq!(
        events[0]["objects"][0]["identity"],
        "public.\"q\"\"uo\\te é\""
    );
    assert_eq!(events[0]["relations"][0]["table"], "q\"uo\\te é");
    assert_eq!(
        columns(&events[1]["relations"][0]),
        ["c\"ol\\ ü integer", "naïve text"]
    );
    assert!(events[0]["command"]
        .as_str()
        .unwrap_or("")
        .contains("create table \"q\"\"uo\\te é\""));
    assert_eq!(
        count(&mut c, "select count(*) from public.planted_ran"),
        0,
        "a look-alike ran"
    );
    // They would be picked by unqualified calls on that path.
    exec(&mut c, "set search_path = public, pg_catalog; select current_query(); select 'a'::text = 'a'::text; reset search_path");
    assert_eq!(count(&mut c, "select count(*) from public.planted_ran"), 2);
    drop_slot(&mut c, "ddl_hostile");
}

/// With publication_names, DDL on published tables only (a FOR TABLES IN
/// SCHEMA target includes a table created there later, FOR ALL TABLES
/// every table), drops of the tables its publications published; without
/// it, every DDL. Formats 1 and 2 show the ordinary message, as wal2json
/// would, only when add-msg-prefixes names its prefix.
#[test]
fn publications_and_other_formats() {
    let (_db, mut c) = database("pubs");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         create schema s;
         create table pa (id int primary key);
         create table pb (id int primary key);
         create publication ddl_pub for table pa, tables in schema s;
         create publication ddl_all for all tables;",
    );
    slot(&mut c, "ddl_pubs");
    exec(&mut c, "alter table pa add column x int");
    exec(&mut c, "alter table pb add column x int");
    exec(&mut c, "create table s.fresh (id int)");
    exec(
        &mut c,
        "create function f() returns int language sql as 'select 1'",
    );
    exec(&mut c, "drop table pb");
    exec(&mut c, "drop table s.fresh");
    exec(&mut c, "drop table pa");
    let peek = |c: &mut Client, opts: &[&str]| json_lines(&peek_texts(c, "ddl_pubs", opts));
    let published = peek(
        &mut c,
        &["format-version", "3", "publication_names", "ddl_pub"],
    );
    let tags = |objects: &[Value]| -> Vec<String> {
        ddl(objects)
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["tag"].as_str().unwrap_or(""),
                    e["objects"][0]["identity"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    // Drops by the publications the trigger found: pa's own membership,
    // s's schema; pb was in none of ddl_pub's.
    assert_eq!(
        tags(&published),
        [
            "ALTER TABLE public.pa",
            "CREATE TABLE s.fresh",
            "DROP TABLE s.fresh",
            "DROP TABLE public.pa"
        ],
        "{published:#?}"
    );
    let every_table = peek(
        &mut c,
        &["format-version", "3", "publication_names", "ddl_all"],
    );
    assert_eq!(
        tags(&every_table),
        [
            "ALTER TABLE public.pa",
            "ALTER TABLE public.pb",
            "CREATE TABLE s.fresh",
            "DROP TABLE public.pb",
            "DROP TABLE s.fresh",
            "DROP TABLE public.pa"
        ],
        "{every_table:#?}"
    );
    let all = peek(&mut c, &["format-version", "3"]);
    assert_eq!(ddl(&all).len(), 7, "{all:#?}");
    let drops: Vec<&Value> = ddl(&all)
        .into_iter()
        .filter(|e| e["event"] == "sql_drop")
        .collect();
    let named: Vec<&Value> = drops.iter().map(|e| &e["publications"]).collect();
    assert_eq!(
        named,
        [
            &serde_json::json!(["ddl_all"]),
            &serde_json::json!(["ddl_all", "ddl_pub"]),
            &serde_json::json!(["ddl_all", "ddl_pub"])
        ],
        "pb, s.fresh, pa"
    );
    // Format 2: wal2json's message object, only when add-msg-prefixes
    // names the prefix (other messages are shown by default).
    exec(&mut c, "select pg_logical_emit_message(true, 'other', 'x')");
    let by_default = peek(&mut c, &["format-version", "2"]);
    let prefixes: Vec<&Value> = by_default
        .iter()
        .filter(|o| o["action"] == "M")
        .map(|o| &o["prefix"])
        .collect();
    assert_eq!(prefixes, [&serde_json::json!("other")], "{by_default:#?}");
    let f2 = peek(
        &mut c,
        &[
            "format-version",
            "2",
            "add-msg-prefixes",
            "other,pubjson.ddl",
        ],
    );
    let messages: Vec<&Value> = f2
        .iter()
        .filter(|o| o["action"] == "M" && o["prefix"] == "pubjson.ddl")
        .collect();
    assert_eq!(messages.len(), 7);
    assert_eq!(messages[0]["prefix"], "pubjson.ddl");
    let content: Value = serde_json::from_str(messages[0]["content"].as_str().expect("content"))
        .expect("JSON content");
    assert_eq!(content["tag"], "ALTER TABLE");
    let filtered = peek(
        &mut c,
        &[
            "format-version",
            "2",
            "add-msg-prefixes",
            "pubjson.ddl",
            "filter-msg-prefixes",
            "pubjson.ddl",
        ],
    );
    assert!(filtered.iter().all(|o| o["action"] != "M"), "{filtered:#?}");
    drop_slot(&mut c, "ddl_pubs");
}

/// pg_recvlogical receives the DDL objects as the SQL functions do.
#[test]
fn pg_recvlogical_receives_ddl() {
    let (dbname, mut c) = database("recv");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    slot(&mut c, "ddl_recv");
    let dir = scratch_dir("ddl_recv");
    let file = dir.join("out.jsonl");
    let mut recv = RecvLogical::format3_in(&dbname, "ddl_recv", &file);
    exec(
        &mut c,
        "create table r (id int primary key); insert into r values (1);
         alter table r add column v text; insert into r values (2, 'two')",
    );
    let objects = wait_commits(&file, 1);
    recv.stop();
    assert_eq!(
        summary(&objects),
        "B DDL:CREATE TABLE R I DDL:ALTER TABLE R I C"
    );
    assert_eq!(
        columns(&ddl(&objects)[1]["relations"][0]),
        ["id integer", "v text"]
    );
    drop(recv);
    drop_slot(&mut c, "ddl_recv");
}

/// In databases of the encodings the encodings suite uses, hostile
/// non-ASCII names come out as pure ASCII JSON that means the right
/// characters, in the DDL object and its relations.
#[test]
fn every_encoding_gives_ascii_json() {
    let samples = [
        ("LATIN1", "tëst_é \"q\" \\", "größe"),
        ("WIN1252", "€uro", "prix€"),
        ("LATIN2", "tábla_ő", "név_ű"),
        ("KOI8R", "таблица", "колонка"),
        ("EUC_JP", "表", "筺　"),
        ("EUC_KR", "표", "열"),
    ];
    let server = Server::main();
    for (encoding, table, column) in samples {
        let dbname = format!("pubjson_ddl_enc_{}", encoding.to_ascii_lowercase());
        server
            .drop_database(&dbname)
            .unwrap_or_else(|e| panic!("{e}"));
        exec(
            &mut server.connect("postgres"),
            &format!("create database {dbname} encoding '{encoding}' lc_collate 'C' lc_ctype 'C' template template0"),
        );
        let mut c = server.connect_retrying(&dbname, Duration::from_secs(20));
        exec(
            &mut c,
            "create extension pubjson; select pubjson.enable_ddl_capture()",
        );
        let slot_name = format!("ddl_enc_{}", encoding.to_ascii_lowercase());
        slot(&mut c, &slot_name);
        let (qt, qc) = (
            format!("\"{}\"", table.replace('"', "\"\"")),
            format!("\"{}\"", column.replace('"', "\"\"")),
        );
        exec(&mut c, &format!("create table {qt} (id int primary key)"));
        exec(&mut c, &format!("alter table {qt} add column {qc} text"));
        exec(&mut c, "select txid_current()");
        let texts: Vec<String> = c
            .query(
                "select data from pg_logical_slot_get_changes($1, NULL, NULL, 'format-version', '3')",
                &[&slot_name],
            )
            .expect("get_changes")
            .iter()
            .map(|r| r.get(0))
            .collect();
        for t in &texts {
            assert!(t.is_ascii(), "{encoding}: not ASCII: {t}");
        }
        let objects = json_lines(&texts);
        let events = ddl(&objects);
        assert_eq!(events.len(), 2, "{encoding}: {objects:#?}");
        assert_eq!(events[0]["relations"][0]["table"], table, "{encoding}");
        assert_eq!(
            events[0]["objects"][0]["identity"],
            format!("public.{qt}"),
            "{encoding}"
        );
        assert_eq!(
            events[1]["command"],
            format!("alter table {qt} add column {qc} text"),
            "{encoding}"
        );
        assert_eq!(
            columns(&events[1]["relations"][0]),
            ["id integer".to_string(), format!("{column} text")],
            "{encoding}"
        );
        drop_slot(&mut c, &slot_name);
        drop(c);
        server
            .drop_database(&dbname)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A column of the source, as the generator tracks it.
#[derive(Clone)]
struct GenColumn {
    name: String,
    /// `id` and the partition key `k`: never dropped, renamed or retyped.
    fixed: bool,
    /// Holds no NULL (so NOT NULL may be set).
    filled: bool,
    not_null: bool,
}

/// A table of the source, as the generator tracks it.
#[derive(Clone)]
struct GenTable {
    schema: String,
    name: String,
    columns: Vec<GenColumn>,
    has_pk: bool,
    /// A partitioned table (with one partition); its partitions are not
    /// tracked on their own.
    partitioned: bool,
}

impl GenTable {
    fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// pg_dump --schema-only of schemas `public` and `other`, reduced to what
/// the events carry: per table, its columns (name, type, NOT NULL) in
/// order and its primary key's columns; sorted by table.
fn normalized_schema(db: &str) -> Vec<String> {
    let server = Server::main();
    let text = server.run_client(
        "pg_dump",
        db,
        &[
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "-n",
            "public",
            "-n",
            "other",
        ],
    );
    let mut tables: std::collections::BTreeMap<String, (Vec<String>, String)> = Default::default();
    let mut current: Option<String> = None;
    let mut altered: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
            let name = rest.split([' ', '(']).next().unwrap_or("").to_string();
            tables.entry(name.clone()).or_default();
            current = rest.trim_end().ends_with('(').then_some(name);
            continue;
        }
        if let Some(table) = current.clone() {
            if line.starts_with(')') {
                current = None;
                continue;
            }
            let mut col = line.trim().trim_end_matches(',').to_string();
            if col.starts_with("CONSTRAINT ") {
                continue;
            }
            let not_null = col.ends_with(" NOT NULL");
            if not_null {
                col.truncate(col.len() - " NOT NULL".len());
            }
            if let Some(at) = col.find(" DEFAULT ") {
                col.truncate(at);
            }
            // 18 names NOT NULL constraints (`CONSTRAINT t_id_not_null NOT
            // NULL`), after the table they were first made for.
            if let Some(at) = col.find(" CONSTRAINT ") {
                col.truncate(at);
            }
            if not_null {
                col.push_str(" NOT NULL");
            }
            tables.get_mut(&table).expect("table").0.push(col);
            continue;
        }
        if let Some(rest) = line.strip_prefix("ALTER TABLE ") {
            let rest = rest.strip_prefix("ONLY ").unwrap_or(rest);
            altered = Some(rest.split([' ', ';']).next().unwrap_or("").to_string());
            continue;
        }
        if let (Some(table), Some(at)) = (altered.clone(), line.find("PRIMARY KEY (")) {
            let keys = line[at..].trim_end_matches(';').to_string();
            tables.entry(table).or_default().1 = keys;
        }
    }
    tables
        .into_iter()
        .map(|(name, (columns, pk))| format!("{name}: {}; {pk}", columns.join(", ")))
        .collect()
}

/// The replica the docs' algorithm keeps: tables created and brought in
/// step (renamed, moved, columns by attnum, NOT NULL, primary key) from
/// every R object, dropped by `sql_drop` events, rows applied; after a
/// randomized sequence of DDL and rows, `pg_dump --schema-only` of the
/// tables, reduced to what the events carry, and every table's rows are
/// the source's.
#[test]
fn replica_kept_by_the_documented_algorithm() {
    let (_db, mut c) = database("replica");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture(); create schema other",
    );
    slot(&mut c, "ddl_replica");
    let (rdb, mut replica) = database("replica_target");
    let mut seed: u64 = std::env::var("PUBJSON_DDL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    eprintln!("seed {seed} (PUBJSON_DDL_SEED)");
    let mut next = |n: usize| -> usize {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut live: Vec<GenTable> = Vec::new();
    let mut serial = 0;
    let mut done: std::collections::BTreeSet<&str> = Default::default();
    let column = |name: &str, fixed: bool, filled: bool, not_null: bool| GenColumn {
        name: name.to_string(),
        fixed,
        filled,
        not_null,
    };
    // At least 140 steps, more until every class of command has run.
    let classes = [
        "create",
        "partitions",
        "add column",
        "drop column",
        "rename column",
        "alter type",
        "drop not null",
        "set not null",
        "rename table",
        "set schema",
        "create table as",
        "add primary key",
        "drop table",
        "insert",
    ];
    for step in 0..1000 {
        if step >= 140 && classes.iter().all(|class| done.contains(class)) {
            break;
        }
        serial += 1;
        let roll = next(16);
        if live.len() < 2 || (roll == 0 && live.len() < 6) {
            let name = format!("t{serial}");
            exec(
                &mut c,
                &format!(
                    "create table {name} (id int primary key, v text, n int not null default 0)"
                ),
            );
            live.push(GenTable {
                schema: "public".into(),
                name,
                columns: vec![
                    column("id", true, true, true),
                    column("v", false, false, false),
                    column("n", false, true, true),
                ],
                has_pk: true,
                partitioned: false,
            });
            done.insert("create");
            continue;
        }
        if roll == 1 && live.len() < 6 {
            let name = format!("p{serial}");
            exec(
                &mut c,
                &format!(
                    "create table {name} (id int, k int not null, v text, n int not null default 0, primary key (id, k)) partition by range (k);
                     create table {name}_a partition of {name} for values from (0) to (100000)"
                ),
            );
            live.push(GenTable {
                schema: "public".into(),
                name,
                columns: vec![
                    column("id", true, true, true),
                    column("k", true, true, true),
                    column("v", false, false, false),
                    column("n", false, true, true),
                ],
                has_pk: true,
                partitioned: true,
            });
            done.insert("partitions");
            continue;
        }
        let at = next(live.len());
        let t = live[at].clone();
        let q = t.qualified();
        let movable: Vec<usize> = (0..t.columns.len())
            .filter(|&i| !t.columns[i].fixed)
            .collect();
        match roll {
            2 | 3 => {
                let name = format!("c{serial}");
                let ty = ["int", "varchar(5)", "bigint"][next(3)];
                exec(&mut c, &format!("alter table {q} add column {name} {ty}"));
                live[at].columns.push(column(&name, false, false, false));
                done.insert("add column");
            }
            4 if !movable.is_empty() => {
                let i = movable[next(movable.len())];
                exec(
                    &mut c,
                    &format!("alter table {q} drop column {}", t.columns[i].name),
                );
                live[at].columns.remove(i);
                done.insert("drop column");
            }
            5 if !movable.is_empty() => {
                let i = movable[next(movable.len())];
                let name = format!("r{serial}");
                exec(
                    &mut c,
                    &format!(
                        "alter table {q} rename column {} to {name}",
                        t.columns[i].name
                    ),
                );
                live[at].columns[i].name = name;
                done.insert("rename column");
            }
            6 if !movable.is_empty() => {
                let i = movable[next(movable.len())];
                let col = &t.columns[i].name;
                let ty = ["varchar(30)", "text", "varchar(12)"][next(3)];
                exec(
                    &mut c,
                    &format!(
                        "alter table {q} alter column {col} type {ty} using {col}::text::{ty}"
                    ),
                );
                done.insert("alter type");
            }
            7 if !movable.is_empty() => {
                // Half the time a column NOT NULL may be set on, if any.
                let settable: Vec<usize> = movable
                    .iter()
                    .copied()
                    .filter(|&i| t.columns[i].filled && !t.columns[i].not_null)
                    .collect();
                let i = if !settable.is_empty() && next(2) == 0 {
                    settable[next(settable.len())]
                } else {
                    movable[next(movable.len())]
                };
                let col = &t.columns[i];
                if col.not_null {
                    exec(
                        &mut c,
                        &format!("alter table {q} alter column {} drop not null", col.name),
                    );
                    live[at].columns[i].not_null = false;
                    done.insert("drop not null");
                } else if col.filled {
                    exec(
                        &mut c,
                        &format!("alter table {q} alter column {} set not null", col.name),
                    );
                    live[at].columns[i].not_null = true;
                    done.insert("set not null");
                }
            }
            8 if !t.partitioned => {
                let name = format!("t{serial}");
                exec(&mut c, &format!("alter table {q} rename to {name}"));
                live[at].name = name;
                done.insert("rename table");
            }
            9 if !t.partitioned => {
                let schema = if t.schema == "public" {
                    "other"
                } else {
                    "public"
                };
                exec(&mut c, &format!("alter table {q} set schema {schema}"));
                live[at].schema = schema.to_string();
                done.insert("set schema");
            }
            10 if !t.partitioned && live.len() < 6 => {
                let name = format!("t{serial}");
                exec(&mut c, &format!("create table {name} as select * from {q}"));
                let mut copy = t.clone();
                copy.schema = "public".into();
                copy.name = name;
                copy.has_pk = false;
                // Its columns have no defaults: rows added later leave them
                // NULL.
                for col in &mut copy.columns {
                    col.not_null = false;
                    col.fixed = false;
                    col.filled = false;
                }
                copy.columns[0].fixed = true;
                copy.columns[0].filled = true;
                live.push(copy);
                done.insert("create table as");
            }
            11 if !t.has_pk => {
                exec(&mut c, &format!("alter table {q} add primary key (id)"));
                live[at].has_pk = true;
                live[at].columns[0].not_null = true;
                done.insert("add primary key");
            }
            12 => {
                exec(&mut c, &format!("drop table {q}"));
                live.remove(at);
                done.insert("drop table");
            }
            _ => {
                let sql = if t.partitioned {
                    format!("insert into {q} (id, k) values ({step}, {step})")
                } else {
                    format!("insert into {q} (id) values ({step})")
                };
                exec(&mut c, &sql);
                done.insert("insert");
            }
        }
    }
    for class in classes {
        assert!(
            done.contains(class),
            "the sequence has no {class}: {done:?}"
        );
    }
    let objects = get3(&mut c, "ddl_replica", &[]);
    // docs/ddl.md's algorithm.
    let mut schema_replica = SchemaReplica::default();
    for o in &objects {
        schema_replica.apply(&mut replica, o);
    }
    let source_schema = normalized_schema("pubjson_ddl_replica");
    assert!(source_schema.len() >= 2, "{source_schema:#?}");
    assert_eq!(
        normalized_schema(&rdb),
        source_schema,
        "the replica's schema"
    );
    // Every table's rows (a partitioned table's partitions on their own,
    // ONLY the partitioned table, which holds none: a plain table on the
    // replica).
    let listing = "select format('%I.%I', n.nspname, c.relname) from pg_class c \
                   join pg_namespace n on n.oid = c.relnamespace \
                   where n.nspname in ('public', 'other') and c.relkind in ('r', 'p') order by 1";
    let names: Vec<String> = c
        .query(listing, &[])
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let replica_names: Vec<String> = replica
        .query(listing, &[])
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(replica_names, names);
    for name in &names {
        let q = format!(
            "select coalesce(string_agg(t::text, ',' order by t::text), '') from only {name} t"
        );
        let a: String = c.query_one(&q, &[]).expect("source rows").get(0);
        let b: String = replica.query_one(&q, &[]).expect("replica rows").get(0);
        assert_eq!(a, b, "rows of {name}");
    }
    drop_slot(&mut c, "ddl_replica");
}

/// DDL run by a DO block or a function carries the calling statement;
/// another extension's CREATE EXTENSION is one event naming the
/// extension, not one per command of its script.
#[test]
fn functions_do_blocks_and_extensions() {
    let (_db, mut c) = database("indirect");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    slot(&mut c, "ddl_indirect");
    exec(&mut c, "do $$ begin create table d1 (id int); end $$");
    exec(
        &mut c,
        "create function mk() returns void language plpgsql as $$ begin create table d2 (id int); end $$",
    );
    exec(&mut c, "select mk()");
    exec(&mut c, "create extension citext");
    let objects = get3(&mut c, "ddl_indirect", &[]);
    let events = ddl(&objects);
    let tags: Vec<&str> = events
        .iter()
        .map(|e| e["tag"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        tags,
        [
            "CREATE TABLE",
            "CREATE FUNCTION",
            "CREATE TABLE",
            "CREATE EXTENSION"
        ],
        "{objects:#?}"
    );
    assert_eq!(
        events[0]["command"],
        "do $$ begin create table d1 (id int); end $$"
    );
    assert_eq!(events[0]["objects"][0]["identity"], "public.d1");
    assert_eq!(events[1]["objects"][0]["type"], "function");
    assert_eq!(events[2]["command"], "select mk()");
    assert_eq!(events[2]["objects"][0]["identity"], "public.d2");
    let ext = events[3]["objects"].as_array().expect("objects");
    assert!(
        ext.iter()
            .any(|o| o["type"] == "extension" && o["identity"] == "citext"),
        "{ext:#?}"
    );
    assert_eq!(
        ext.len(),
        1,
        "the script's commands are not listed: {ext:#?}"
    );
    drop_slot(&mut c, "ddl_indirect");
}

/// In a streamed block the DDL object names its transaction (`xid`), in
/// order with the block's rows; format 1 shows the message as wal2json
/// does; a publication's column list limits `relations`.
#[test]
fn streaming_format_1_and_column_lists() {
    let (_db, mut c) = database("stream");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         create table cl (id int primary key, secret text, open text);
         create publication ddl_cols for table cl (id, open);",
    );
    slot(&mut c, "ddl_stream");
    exec(
        &mut c,
        "begin; insert into cl select i, 's', 'o' from generate_series(1, 3000) i;
         alter table cl add column more int;
         insert into cl values (0, 's', 'o', 1); commit",
    );
    let major = pubjson_e2e::server_major(&mut c);
    exec(
        &mut c,
        if major >= 16 {
            "set debug_logical_replication_streaming = immediate"
        } else {
            "set logical_decoding_work_mem = '64kB'"
        },
    );
    let peek = |c: &mut Client, opts: &[&str]| json_lines(&peek_texts(c, "ddl_stream", opts));
    let streamed = peek(&mut c, &["format-version", "3", "streaming", "on"]);
    assert!(
        streamed.iter().any(|o| o["action"] == "S"),
        "nothing was streamed"
    );
    let events = ddl(&streamed);
    assert_eq!(events.len(), 1, "{events:#?}");
    let xid = events[0]["xid"]
        .as_u64()
        .expect("a streamed DDL object has its xid");
    let commit = streamed.iter().find(|o| o["action"] == "C").expect("C");
    assert_eq!(commit["xid"].as_u64(), Some(xid));
    let position = |pred: &dyn Fn(&Value) -> bool| streamed.iter().position(pred).expect("found");
    let ddl_at = position(&|o| o["action"] == "DDL");
    let last_insert = position(&|o| o["action"] == "I" && o["new"]["id"] == 0);
    let first_insert = position(&|o| o["action"] == "I");
    assert!(
        first_insert < ddl_at && ddl_at < last_insert,
        "order: {first_insert} {ddl_at} {last_insert}"
    );
    assert_eq!(
        columns(&events[0]["relations"][0]),
        ["id integer", "secret text", "open text", "more integer"]
    );
    // With the publication: only its columns.
    let published = peek(
        &mut c,
        &["format-version", "3", "publication_names", "ddl_cols"],
    );
    let events = ddl(&published);
    assert_eq!(events.len(), 1);
    assert_eq!(
        columns(&events[0]["relations"][0]),
        ["id integer", "open text"]
    );
    // Format 1: one message in the transaction's change list, when
    // add-msg-prefixes names the prefix; none by default.
    let f1 = peek(&mut c, &["format-version", "1"]);
    let changes = f1[0]["change"].as_array().expect("change");
    assert!(
        changes.iter().all(|c| c["kind"] != "message"),
        "{changes:#?}"
    );
    let f1 = peek(
        &mut c,
        &["format-version", "1", "add-msg-prefixes", "pubjson.ddl"],
    );
    let changes = f1[0]["change"].as_array().expect("change");
    let messages: Vec<&Value> = changes.iter().filter(|c| c["kind"] == "message").collect();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(messages[0]["prefix"], "pubjson.ddl");
    drop_slot(&mut c, "ddl_stream");
}

/// A role with no privilege on schema pubjson, and with an empty or odd
/// search_path, runs DDL under capture and gets its events.
#[test]
fn capture_needs_no_privilege_and_no_path() {
    let (dbname, mut c) = database("nopath");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         do $$ begin if not exists (select from pg_roles where rolname = 'ddl_nopath_user') \
         then create role ddl_nopath_user login; end if; end $$;
         grant create on schema public to ddl_nopath_user;",
    );
    slot(&mut c, "ddl_nopath");
    let server = Server::main();
    let mut user = server.connect_as(&dbname, "ddl_nopath_user");
    assert_eq!(
        count(
            &mut user,
            "select count(*) from (select 1 where has_schema_privilege('pubjson', 'usage')) x"
        ),
        0,
        "the role has no USAGE on schema pubjson"
    );
    exec(
        &mut user,
        "set search_path = ''; create table public.np (id int);
         set search_path = \"no such schema\", pg_temp; alter table public.np add column v int",
    );
    drop(user);
    let objects = get3(&mut c, "ddl_nopath", &[]);
    let events = ddl(&objects);
    let paths: Vec<&str> = events
        .iter()
        .map(|e| e["search_path"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        paths,
        ["\"\"", "\"no such schema\", pg_temp"],
        "{objects:#?}"
    );
    assert_eq!(events[1]["role"], "ddl_nopath_user");
    drop_slot(&mut c, "ddl_nopath");
}

/// A partition's DDL, with publish_via_partition_root, describes the root
/// (its rows come under the root's name); without it, the partition.
#[test]
fn partitions_published_through_their_root() {
    let (_db, mut c) = database("viaroot");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         create table vp (id int, k int) partition by range (k);
         create table vp1 partition of vp for values from (0) to (10);
         create publication ddl_via_root for table vp with (publish_via_partition_root = true);
         create publication ddl_as_self for table vp;",
    );
    slot(&mut c, "ddl_viaroot");
    exec(&mut c, "create index vp1_id on vp1 (id)");
    exec(&mut c, "select txid_current()");
    for (publication, described) in [("ddl_via_root", "vp"), ("ddl_as_self", "vp1")] {
        let rows: Vec<String> = c
            .query(
                "select data from pg_logical_slot_peek_changes('ddl_viaroot', NULL, NULL, \
                 'format-version', '3', 'publication_names', $1)",
                &[&publication],
            )
            .expect("peek")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let objects = json_lines(&rows);
        let events = ddl(&objects);
        assert_eq!(events.len(), 1, "{publication}: {objects:#?}");
        assert_eq!(events[0]["objects"][0]["identity"], "public.vp1_id");
        let tables: Vec<&str> = events[0]["relations"]
            .as_array()
            .expect("relations")
            .iter()
            .map(|r| r["table"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(tables, [described], "{publication}");
    }
    drop_slot(&mut c, "ddl_viaroot");
}

/// A message content in the trigger's shape.
fn forged(event: &str, tag: &str, objects: Value, relations: Value) -> String {
    serde_json::json!({
        "event": event, "tag": tag, "command": "forged", "role": "forger",
        "search_path": "public", "objects": objects, "relations": relations,
        "publications": ["ddl_forge_pub"],
    })
    .to_string()
}

/// Any role may call pg_logical_emit_message with the capture prefix: a
/// message that does not agree with the catalog at its position (a drop
/// of a table that exists, or from a transaction that changed no catalog;
/// a command naming relations that do not exist) is no DDL object, and is
/// an ordinary message only for a consumer that names the prefix. Genuine
/// DDL of the same role, a drop in a subtransaction included, still is.
#[test]
fn forged_messages_are_not_ddl_events() {
    let (dbname, mut c) = database("forge");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         do $$ begin if not exists (select from pg_roles where rolname = 'ddl_forge_user') \
         then create role ddl_forge_user login; end if; end $$;
         grant create on schema public to ddl_forge_user;
         create table victim (id int primary key);
         create publication ddl_forge_pub for all tables;",
    );
    let victim: i64 = count(&mut c, "select 'victim'::regclass::oid::int8");
    slot(&mut c, "ddl_forge");
    let table = |oid: i64| {
        serde_json::json!([{"type": "table", "schema": "public", "identity": "public.victim",
                            "oid": oid.to_string(), "classid": "1259", "subid": 0}])
    };
    let nowhere: i64 = 4_000_000_000;
    let mut user = Server::main().connect_as(&dbname, "ddl_forge_user");
    // `before` runs first in the message's transaction.
    let emit_after = |u: &mut Client, before: &str, content: &str| {
        let sql = format!(
            "begin; {before} select pg_logical_emit_message(true, 'pubjson.ddl', '{}'); commit",
            content.replace('\'', "''")
        );
        exec(u, &sql);
    };
    let mut scratch = 0;
    let mut emit = |u: &mut Client, content: &str, catalog_change: bool| {
        scratch += 1;
        let before = if catalog_change {
            format!("create temp table scratch{scratch} (id int);")
        } else {
            String::new()
        };
        emit_after(u, &before, content);
    };
    // A drop of an existing table, with and without catalog changes.
    let drop_victim = forged(
        "sql_drop",
        "DROP TABLE",
        table(victim),
        serde_json::json!([]),
    );
    emit(&mut user, &drop_victim, false);
    emit(&mut user, &drop_victim, true);
    // A drop of a table that does not exist, by a transaction that changed
    // no catalog.
    let drop_nowhere = forged(
        "sql_drop",
        "DROP TABLE",
        table(nowhere),
        serde_json::json!([]),
    );
    emit(&mut user, &drop_nowhere, false);
    // A table that is not named as a pg_class object.
    let unclassed = forged(
        "sql_drop",
        "DROP TABLE",
        serde_json::json!([{"type": "table", "oid": nowhere.to_string(), "classid": null, "subid": 0}]),
        serde_json::json!([]),
    );
    emit(&mut user, &unclassed, true);
    // Commands naming relations that do not exist.
    let create_nowhere = forged(
        "ddl_command_end",
        "CREATE TABLE",
        table(nowhere),
        serde_json::json!([]),
    );
    emit(&mut user, &create_nowhere, true);
    let alter_nowhere = forged(
        "ddl_command_end",
        "ALTER TABLE",
        serde_json::json!([]),
        serde_json::json!([nowhere]),
    );
    emit(&mut user, &alter_nowhere, true);
    let column_nowhere = forged(
        "ddl_command_end",
        "ALTER TABLE",
        serde_json::json!([{"type": "table column", "oid": nowhere.to_string(), "classid": "1259", "subid": 2}]),
        serde_json::json!([]),
    );
    emit(&mut user, &column_nowhere, true);
    // A genuine drop of the role's own table, with a forged drop of the
    // victim in the same transaction; a genuine drop in a subtransaction.
    exec(
        &mut user,
        "create table mine (id int); create table mine2 (id int)",
    );
    emit_after(&mut user, "drop table mine;", &drop_victim);
    exec(
        &mut user,
        "begin; savepoint s; drop table mine2; release savepoint s; commit",
    );
    drop(user);
    let forged_count = 8;
    exec(&mut c, "select txid_current()");
    let peek = |c: &mut Client, opts: &[&str]| json_lines(&peek_texts(c, "ddl_forge", opts));
    for opts in [
        &["format-version", "3"][..],
        &["format-version", "3", "publication_names", "ddl_forge_pub"][..],
    ] {
        let objects = peek(&mut c, opts);
        let tags: Vec<String> = ddl(&objects)
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["tag"].as_str().unwrap_or("?"),
                    e["objects"][0]["identity"].as_str().unwrap_or("?"),
                    e["role"].as_str().unwrap_or("?")
                )
            })
            .collect();
        assert_eq!(
            tags,
            [
                "CREATE TABLE public.mine ddl_forge_user",
                "CREATE TABLE public.mine2 ddl_forge_user",
                "DROP TABLE public.mine ddl_forge_user",
                "DROP TABLE public.mine2 ddl_forge_user"
            ],
            "{opts:?}: {objects:#?}"
        );
        assert!(
            objects.iter().all(|o| o["action"] != "M"),
            "{opts:?}: {objects:#?}"
        );
    }
    // Named by add-msg-prefixes, the forged ones are ordinary messages.
    let named = peek(
        &mut c,
        &["format-version", "3", "add-msg-prefixes", "pubjson.ddl"],
    );
    let messages: Vec<&Value> = named.iter().filter(|o| o["action"] == "M").collect();
    assert_eq!(messages.len(), forged_count, "{named:#?}");
    assert_eq!(ddl(&named).len(), 4);
    assert_eq!(count(&mut c, "select count(*) from victim"), 0);
    drop_slot(&mut c, "ddl_forge");
}

/// The triggers are ENABLE ALWAYS: DDL run with session_replication_role =
/// replica (as replication tools apply DDL) is captured.
#[test]
fn captured_with_session_replication_role_replica() {
    let (_db, mut c) = database("srr");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    slot(&mut c, "ddl_srr");
    exec(
        &mut c,
        "set session_replication_role = replica;
         create table rep (id int primary key);
         alter table rep add column v text;
         drop table rep;
         reset session_replication_role",
    );
    let objects = get3(&mut c, "ddl_srr", &[]);
    assert_eq!(
        summary(&objects),
        "B DDL:CREATE TABLE DDL:ALTER TABLE DDL:DROP TABLE C",
        "{objects:#?}"
    );
    drop_slot(&mut c, "ddl_srr");
}

/// A query string longer than 65536 characters (a migration script):
/// each of its commands carries its first 65536 characters and
/// `"command_truncated": true`; a short one has no such member.
#[test]
fn long_query_strings_are_truncated() {
    let (_db, mut c) = database("long");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    slot(&mut c, "ddl_long");
    // Non-ASCII filler: the limit counts characters. A comment's text is
    // kept as written (a query's constants would be replaced).
    let filler = "é".repeat(70_000);
    let script = format!(
        "create table long1 (id int); create table long2 (id int); comment on table long1 is '{filler}'"
    );
    exec(&mut c, &script);
    exec(&mut c, "create table short1 (id int)");
    let objects = get3(&mut c, "ddl_long", &[]);
    let events = ddl(&objects);
    assert_eq!(events.len(), 4, "{}", summary(&objects));
    let prefix: String = script.chars().take(65536).collect();
    for e in &events[..3] {
        assert_eq!(e["command"].as_str(), Some(prefix.as_str()));
        assert_eq!(e["command_truncated"], true);
    }
    assert_eq!(events[3]["command"], "create table short1 (id int)");
    assert!(events[3].get("command_truncated").is_none());
    drop_slot(&mut c, "ddl_long");
}

/// A change of a partitioned table describes its partitions too (ALTER
/// TABLE recurses), ATTACH PARTITION the attached one; dropping it lists
/// its partitions, which go with it.
#[test]
fn partitioned_tables_bring_their_partitions() {
    let (_db, mut c) = database("parts");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         create table pp (id int, k int) partition by range (k);
         create table pp1 partition of pp for values from (0) to (10);
         create table pp2 (id int, k int);",
    );
    slot(&mut c, "ddl_parts");
    exec(&mut c, "alter table pp add column x int");
    exec(
        &mut c,
        "alter table pp2 add column x int; alter table pp attach partition pp2 for values from (10) to (20)",
    );
    exec(&mut c, "drop table pp");
    let objects = get3(&mut c, "ddl_parts", &[]);
    let events = ddl(&objects);
    let tables = |e: &Value| -> Vec<String> {
        e["relations"]
            .as_array()
            .expect("relations")
            .iter()
            .map(|r| r["table"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    assert_eq!(events.len(), 4, "{}", summary(&objects));
    assert_eq!(
        tables(events[0]),
        ["pp", "pp1"],
        "ALTER TABLE on the parent"
    );
    assert_eq!(
        columns(&events[0]["relations"][1]),
        ["id integer", "k integer", "x integer"]
    );
    assert_eq!(tables(events[2]), ["pp", "pp1", "pp2"], "ATTACH PARTITION");
    let mut dropped: Vec<&str> = events[3]["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter(|o| o["type"] == "table")
        .map(|o| o["identity"].as_str().unwrap_or("?"))
        .collect();
    dropped.sort_unstable();
    assert_eq!(dropped, ["public.pp", "public.pp1", "public.pp2"]);
    drop_slot(&mut c, "ddl_parts");
}

/// With pg_logical_emit_message revoked from PUBLIC, DDL of a role that
/// may not call it fails (42501) while capture is on; granted, it works
/// (docs/ddl.md says so).
#[test]
fn revoked_emit_message_makes_ddl_fail() {
    let (dbname, mut c) = database("revoked");
    let each = |what: &str| {
        format!(
            "do $$ declare f regprocedure; begin \
             for f in select oid::regprocedure from pg_proc where proname = 'pg_logical_emit_message' loop \
             execute format('{what}', f); end loop; end $$"
        )
    };
    exec(
        &mut c,
        &format!(
            "select pubjson.enable_ddl_capture();
             do $$ begin if not exists (select from pg_roles where rolname = 'ddl_revoked_user') \
             then create role ddl_revoked_user login; end if; end $$;
             grant create on schema public to ddl_revoked_user;
             {};",
            each("revoke execute on function %s from public")
        ),
    );
    let mut user = Server::main().connect_as(&dbname, "ddl_revoked_user");
    let e = user
        .batch_execute("create table rv (id int)")
        .expect_err("capture cannot write its message");
    assert_eq!(sqlstate(&e), "42501");
    exec(
        &mut c,
        &each("grant execute on function %s to ddl_revoked_user"),
    );
    drop(user);
    let mut user = Server::main().connect_as(&dbname, "ddl_revoked_user");
    exec(&mut user, "create table rv (id int)");
    exec(&mut c, "select pubjson.disable_ddl_capture()");
    exec(&mut c, &each("grant execute on function %s to public"));
}

/// In a streamed transaction, a DDL event carries the (sub)transaction
/// that ran the command, as a change does: one run in a savepoint is
/// dropped with it by a consumer that applies the `A` object of the
/// savepoint's rollback (docs/streaming.md). Decoded while the transaction
/// is open, as a walsender streams it (decoded after the rollback,
/// PostgreSQL stops streaming the savepoint's changes at its first catalog
/// read, and the event is not sent at all).
#[test]
fn streamed_ddl_names_its_subtransaction() {
    let (dbname, mut c) = database("streamed_subxact");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture(); create table big (id int, v text)",
    );
    slot(&mut c, "ddl_streamed_subxact");
    let mut writer = Server::main().connect(&dbname);
    exec(
        &mut writer,
        "begin;
         insert into big select i, repeat('x', 100) from generate_series(1, 2000) i;
         savepoint s;
         create table in_savepoint (id int);
         insert into big select i, repeat('y', 100) from generate_series(1, 2000) i",
    );
    // Streamed while open: the event of the savepoint's command.
    exec(&mut c, "set logical_decoding_work_mem = '64kB'");
    let streamed = json_lines(&peek_texts(
        &mut c,
        "ddl_streamed_subxact",
        &["format-version", "3", "streaming", "on"],
    ));
    let ddl = streamed
        .iter()
        .find(|o| o["action"] == "DDL")
        .unwrap_or_else(|| panic!("the DDL event streamed: {}", summary(&streamed)));
    let top = streamed
        .iter()
        .find(|o| o["action"] == "S")
        .and_then(|o| o["xid"].as_u64())
        .expect("a streamed block");
    let in_savepoint = ddl["xid"].as_u64().expect("xid");
    assert_ne!(
        in_savepoint, top,
        "the savepoint's xid, not the top level's"
    );
    exec(
        &mut writer,
        "rollback to s; release savepoint s;
         insert into big select i, repeat('z', 100) from generate_series(1, 2000) i;
         commit",
    );
    let all = get3(&mut c, "ddl_streamed_subxact", &["streaming", "on"]);
    exec(&mut c, "reset logical_decoding_work_mem");
    assert!(
        all.iter()
            .any(|o| o["action"] == "A" && o["subxid"].as_u64() == Some(in_savepoint)),
        "the savepoint's rollback is an A for {in_savepoint}: {}",
        summary(&all)
    );
    assert!(
        all.iter()
            .any(|o| o["action"] == "C" && o["xid"].as_u64() == Some(top)),
        "the transaction commits: {}",
        summary(&all)
    );
    drop_slot(&mut c, "ddl_streamed_subxact");
}
