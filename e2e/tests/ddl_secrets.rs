//! DDL capture never writes a credential (docs/ddl.md, "What `command`
//! leaves out"): the options of user mappings, foreign servers, wrappers
//! and tables, subscriptions' connection strings and role passwords,
//! whatever the form (alone, among other statements of a query string
//! before or after them, run by a `DO` block, a function or a procedure,
//! through the extended protocol, in a string cut at its length limit, with
//! backslashes read either way), reach no stream: not format 3 (SQL and
//! `pg_recvlogical`), not format 2's capture messages, not the raw message
//! as test_decoding prints it, not what docs/ddl.md's consumer algorithm
//! makes of the stream. The events are still there, in their place, with
//! their objects.
//!
//! Each test has its own database `pubjson_ddlsec_<name>`.

use postgres::Client;
use pubjson_e2e::{
    drop_slot, exec, get_format3, get_texts, json_lines, pg_env, pubjson_slot, rows, scratch_dir,
    sqlstate, suite_database, wait_commits, RecvLogical, SchemaReplica, Server,
};
use serde_json::Value;

fn database(name: &str) -> (String, Client) {
    suite_database("pubjson_ddlsec_", name)
}

/// The n-th secret: no 6-byte window of it occurs in anything a test
/// decodes but the secret itself.
fn secret(n: usize) -> String {
    format!("Kq7vWx-s{n:02}-Zp")
}

/// Fails if any 6-byte window of any of the first `count` secrets occurs
/// in `text` (`what` names the stream).
fn assert_no_secret(text: &str, count: usize, what: &str) {
    for n in 1..=count {
        let s = secret(n);
        for w in s.as_bytes().windows(6) {
            let w = std::str::from_utf8(w).expect("ASCII");
            if let Some(at) = text.find(w) {
                let from = at.saturating_sub(120);
                let to = (at + 120).min(text.len());
                panic!(
                    "{what}: secret {n}'s bytes {w:?} at {at}: ...{}...",
                    text.get(from..to).unwrap_or(text)
                );
            }
        }
    }
}

fn ddl_events(objects: &[Value]) -> Vec<&Value> {
    objects.iter().filter(|o| o["action"] == "DDL").collect()
}

/// One way of running DDL, what it must give (the tags of its DDL events,
/// in order) and, where given, the exact `command` of its first event.
struct Form {
    name: &'static str,
    sql: String,
    tags: &'static [&'static str],
    first_command: Option<String>,
}

fn form(name: &'static str, sql: String, tags: &'static [&'static str]) -> Form {
    Form {
        name,
        sql,
        tags,
        first_command: None,
    }
}

/// Drops the test's subscription (its publisher does not exist: no slot
/// to drop there).
const DROP_SUBSCRIPTION: &str =
    "ALTER SUBSCRIPTION pj_sub SET (slot_name = NONE); DROP SUBSCRIPTION pj_sub";

/// Drops the subscription a failed run left in the test's database
/// (a database with a subscription cannot be dropped).
fn drop_leftover_subscription(dbname: &str) {
    if let Ok(mut old) = Server::main().try_connect(dbname, "postgres") {
        let _ = old.batch_execute(DROP_SUBSCRIPTION);
    }
}

#[test]
fn no_credential_reaches_any_stream() {
    drop_leftover_subscription("pubjson_ddlsec_forms");
    let (dbname, mut c) = database("forms");
    let env = pg_env();
    exec(
        &mut c,
        &format!(
            "create extension postgres_fdw;
             create foreign data wrapper pj_dummy;
             create server s foreign data wrapper pj_dummy;
             create schema pj_src; create table pj_src.imported (id int primary key, v text);
             create schema pj_dst;
             create server pj_loop foreign data wrapper postgres_fdw
               options (host '{}', port '{}', dbname '{dbname}');
             do $$ begin
               if not exists (select from pg_roles where rolname = 'ddlsec_role') then
                 create role ddlsec_role;
               end if;
             end $$;
             select pubjson.enable_ddl_capture()",
            env.host, env.port
        ),
    );
    pubjson_slot(&mut c, "ddlsec_f3");
    pubjson_slot(&mut c, "ddlsec_f2");
    pubjson_slot(&mut c, "ddlsec_recv");
    c.execute(
        "select pg_create_logical_replication_slot('ddlsec_td', 'test_decoding')",
        &[],
    )
    .expect("test_decoding slot");
    let dir = scratch_dir("ddlsec_recv");
    let file = dir.join("out.jsonl");
    let mut recv = RecvLogical::format3_in(&dbname, "ddlsec_recv", &file);

    let filler = "é".repeat(70_000);
    let forms = vec![
        Form {
            first_command: Some(
                "CREATE USER MAPPING FOR postgres SERVER s OPTIONS (user '[redacted]', password '[redacted]')".into(),
            ),
            ..form(
                "user mapping",
                format!("CREATE USER MAPPING FOR postgres SERVER s OPTIONS (user 'bob', password '{}')", secret(1)),
                &["CREATE USER MAPPING"],
            )
        },
        form(
            "alter user mapping",
            format!("ALTER USER MAPPING FOR postgres SERVER s OPTIONS (SET password '{}')", secret(2)),
            &["ALTER USER MAPPING"],
        ),
        form(
            "server",
            format!("CREATE SERVER s2 FOREIGN DATA WRAPPER pj_dummy OPTIONS (host 'h', password '{}')", secret(3)),
            &["CREATE SERVER"],
        ),
        form(
            "alter server",
            format!("ALTER SERVER s2 OPTIONS (ADD token '{}')", secret(4)),
            &["ALTER SERVER"],
        ),
        form(
            "wrapper",
            format!("CREATE FOREIGN DATA WRAPPER pj_dummy2 OPTIONS (secret E'{}')", secret(5)),
            &["CREATE FOREIGN DATA WRAPPER"],
        ),
        form(
            "alter wrapper",
            format!("ALTER FOREIGN DATA WRAPPER pj_dummy2 OPTIONS (SET secret $x${}$x$)", secret(6)),
            &["ALTER FOREIGN DATA WRAPPER"],
        ),
        Form {
            first_command: Some(
                "CREATE SUBSCRIPTION pj_sub CONNECTION '[redacted]' PUBLICATION p WITH (connect = false)".into(),
            ),
            ..form(
                "subscription",
                format!(
                    "CREATE SUBSCRIPTION pj_sub CONNECTION 'host=h dbname=x user=bob password={}' PUBLICATION p WITH (connect = false)",
                    secret(7)
                ),
                &["CREATE SUBSCRIPTION"],
            )
        },
        form(
            "alter subscription",
            format!("ALTER SUBSCRIPTION pj_sub CONNECTION 'host=h password={}'", secret(8)),
            &["ALTER SUBSCRIPTION"],
        ),
        form(
            "foreign table",
            format!("CREATE FOREIGN TABLE ft (id int) SERVER s OPTIONS (password '{}')", secret(9)),
            &["CREATE FOREIGN TABLE"],
        ),
        form(
            "alter foreign table",
            format!(
                "ALTER FOREIGN TABLE ft OPTIONS (ADD token '{}'); ALTER FOREIGN TABLE ft ALTER COLUMN id OPTIONS (ADD col_secret '{}')",
                secret(10),
                secret(11)
            ),
            &["ALTER FOREIGN TABLE", "ALTER FOREIGN TABLE"],
        ),
        Form {
            // The table's own statement keeps its text.
            first_command: Some(
                "CREATE TABLE m1 (id int primary key, note text DEFAULT 'kept'); CREATE USER MAPPING FOR public SERVER s OPTIONS (user '[redacted]', password '[redacted]')".into(),
            ),
            ..form(
                "several statements, the secret after",
                format!(
                    "CREATE TABLE m1 (id int primary key, note text DEFAULT 'kept'); CREATE USER MAPPING FOR public SERVER s OPTIONS (user 'u', password '{}')",
                    secret(12)
                ),
                &["CREATE TABLE", "CREATE USER MAPPING"],
            )
        },
        Form {
            first_command: Some(
                "ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password '[redacted]'); CREATE TABLE m2 (id int)".into(),
            ),
            ..form(
                "several statements, the secret before",
                format!(
                    "ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password '{}'); CREATE TABLE m2 (id int)",
                    secret(13)
                ),
                &["ALTER USER MAPPING", "CREATE TABLE"],
            )
        },
        Form {
            first_command: Some("DO '[redacted]'".into()),
            ..form(
                "DO block",
                format!(
                    "DO $$ BEGIN EXECUTE 'CREATE TABLE d1 (id int)'; EXECUTE 'ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password ''{}'')'; END $$",
                    secret(14)
                ),
                &["CREATE TABLE", "ALTER USER MAPPING"],
            )
        },
        form(
            "function taking the secret",
            "CREATE FUNCTION pj_set_pw(pw text) RETURNS void LANGUAGE plpgsql AS $$BEGIN \
             EXECUTE format('ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password %L)', pw); END$$"
                .into(),
            &["CREATE FUNCTION"],
        ),
        Form {
            first_command: Some("SELECT pj_set_pw('[redacted]')".into()),
            ..form(
                "function call",
                format!("SELECT pj_set_pw('{}')", secret(15)),
                &["ALTER USER MAPPING"],
            )
        },
        form(
            "function holding the secret",
            format!(
                "CREATE FUNCTION pj_body() RETURNS void LANGUAGE plpgsql AS $$BEGIN \
                 EXECUTE 'ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password ''{}'')'; END$$",
                secret(16)
            ),
            &["CREATE FUNCTION"],
        ),
        form("its call", "SELECT pj_body()".into(), &["ALTER USER MAPPING"]),
        form(
            "procedure",
            "CREATE PROCEDURE pj_proc(pw text) LANGUAGE plpgsql AS $$BEGIN \
             EXECUTE format('CREATE USER MAPPING FOR ddlsec_role SERVER s OPTIONS (password %L)', pw); END$$"
                .into(),
            &["CREATE PROCEDURE"],
        ),
        form(
            "procedure call",
            format!("CALL pj_proc('{}')", secret(17)),
            &["CREATE USER MAPPING"],
        ),
        Form {
            first_command: Some(
                "CREATE TABLE r1 (id int); ALTER ROLE ddlsec_role PASSWORD '[redacted]'".into(),
            ),
            ..form(
                "a role's password beside a table",
                format!("CREATE TABLE r1 (id int); ALTER ROLE ddlsec_role PASSWORD '{}'", secret(18)),
                &["CREATE TABLE"],
            )
        },
        // A comment's text is kept (what the catalog shows): these strings
        // stay longer than the limit where nothing is replaced.
        form(
            "a string cut at the limit, the secret after the cut",
            format!(
                "CREATE TABLE long1 (id int); COMMENT ON TABLE long1 IS '{filler}'; \
                 ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password '{}')",
                secret(19)
            ),
            &["CREATE TABLE", "COMMENT", "ALTER USER MAPPING"],
        ),
        form(
            "a string cut at the limit, the secret before the cut",
            format!(
                "ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password '{}'); \
                 CREATE TABLE long2 (id int); COMMENT ON TABLE long2 IS '{filler}'",
                secret(20)
            ),
            &["ALTER USER MAPPING", "CREATE TABLE", "COMMENT"],
        ),
        form(
            "IMPORT FOREIGN SCHEMA",
            format!(
                "CREATE USER MAPPING FOR postgres SERVER pj_loop OPTIONS (user 'postgres', password '{}'); \
                 IMPORT FOREIGN SCHEMA pj_src FROM SERVER pj_loop INTO pj_dst OPTIONS (import_default 'true')",
                secret(21)
            ),
            &["CREATE USER MAPPING", "IMPORT FOREIGN SCHEMA"],
        ),
    ];
    let mut expected_tags: Vec<String> = Vec::new();
    let mut first_commands: Vec<(usize, &Form)> = Vec::new();
    for f in &forms {
        if f.first_command.is_some() {
            first_commands.push((expected_tags.len(), f));
        }
        expected_tags.extend(f.tags.iter().map(|t| t.to_string()));
        c.batch_execute(&f.sql)
            .unwrap_or_else(|e| panic!("{}: {}", f.name, pubjson_e2e::describe_error(&e)));
    }
    // Through the extended protocol: a statement sent as a prepared one,
    // and the secret as a bound parameter.
    c.execute(
        &format!(
            "ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password '{}')",
            secret(22)
        ),
        &[],
    )
    .expect("extended protocol");
    c.execute("SELECT pj_set_pw($1)", &[&secret(23)])
        .expect("a bound parameter");
    expected_tags.extend([
        "ALTER USER MAPPING".to_string(),
        "ALTER USER MAPPING".to_string(),
    ]);
    // Backslashes read as escapes when the server parsed the string.
    c.batch_execute("SET standard_conforming_strings = off")
        .expect("set");
    c.batch_execute(&format!(
        "ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password 'a\\'{}')",
        secret(24)
    ))
    .expect("escaped quote");
    // ... and a SET in the same string changes how the rest would be read.
    c.batch_execute(&format!(
        "SET standard_conforming_strings = on; ALTER USER MAPPING FOR public SERVER s OPTIONS (SET password 'b\\\\{}')",
        secret(25)
    ))
    .expect("escaped backslash");
    expected_tags.extend([
        "ALTER USER MAPPING".to_string(),
        "ALTER USER MAPPING".to_string(),
    ]);
    const SECRETS: usize = 25;

    // Format 3 through the SQL functions.
    let objects = get_format3(&mut c, "ddlsec_f3", &[]);
    let text: String = objects.iter().map(|o| o.to_string() + "\n").collect();
    assert_no_secret(&text, SECRETS, "format 3");
    let events = ddl_events(&objects);
    let tags: Vec<&str> = events
        .iter()
        .map(|e| e["tag"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(tags, expected_tags, "every event, in order");
    for (at, f) in first_commands {
        assert_eq!(
            events[at]["command"].as_str(),
            f.first_command.as_deref(),
            "{}",
            f.name
        );
    }
    for e in &events {
        let tag = e["tag"].as_str().unwrap_or("");
        let objects = e["objects"].as_array().expect("objects");
        assert!(!objects.is_empty(), "{e}");
        if tag.contains("USER MAPPING") {
            assert_eq!(objects[0]["type"], "user mapping", "{e}");
        }
        // A credential's command keeps no constant of any kind.
        if tag.contains("MAPPING")
            || tag.contains("SUBSCRIPTION")
            || tag.contains("FOREIGN")
            || tag.contains("SERVER")
        {
            let rest = e["command"]
                .as_str()
                .unwrap_or("")
                .replace("'[redacted]'", "");
            assert!(
                !rest.contains('\'') && !rest.contains("$$") && !rest.contains("$x$"),
                "{e}"
            );
        }
        if tag.contains("SUBSCRIPTION") {
            assert_eq!(objects[0]["identity"], "pj_sub", "{e}");
        }
    }
    // The tables of the several-statement strings are described.
    for table in ["m1", "m2", "d1", "r1", "long1", "long2"] {
        assert!(
            events.iter().any(|e| e["relations"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["table"] == table))),
            "{table} described"
        );
    }
    // Cut strings say so: the table's and the comment's events of both
    // long strings; the mappings' events, whose every constant is
    // replaced, are short.
    let cut: Vec<&str> = events
        .iter()
        .filter(|e| e["command_truncated"] == true)
        .map(|e| e["tag"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(cut, ["CREATE TABLE", "COMMENT", "CREATE TABLE", "COMMENT"]);

    // docs/ddl.md's consumer algorithm over the same stream.
    let (replica_db, mut replica) = database("forms_replica");
    let mut schema_replica = SchemaReplica::default();
    for o in &objects {
        schema_replica.apply(&mut replica, o);
    }
    let dump = Server::main().run_client("pg_dump", &replica_db, &["--schema-only"]);
    assert!(dump.contains("m1"), "the replica has the tables: {dump}");
    assert_no_secret(&dump, SECRETS, "the replica");

    // pg_recvlogical: the same objects.
    let commits = objects.iter().filter(|o| o["action"] == "C").count();
    let received = wait_commits(&file, commits);
    recv.stop();
    let received_text: String = received.iter().map(|o| o.to_string() + "\n").collect();
    assert_no_secret(&received_text, SECRETS, "pg_recvlogical");
    assert_eq!(ddl_events(&received).len(), events.len());

    // Format 2 with the capture messages asked for: the raw message.
    let f2 = get_texts(
        &mut c,
        "ddlsec_f2",
        &["format-version", "2", "add-msg-prefixes", "pubjson.ddl"],
    );
    let messages: Vec<Value> = json_lines(&f2)
        .into_iter()
        .filter(|o| o["action"] == "M")
        .collect();
    assert_eq!(messages.len(), events.len(), "one message per event");
    assert_no_secret(&f2.join("\n"), SECRETS, "format 2");

    // test_decoding prints the message's content as the WAL holds it.
    let td: Vec<String> = rows(
        &mut c,
        "select data from pg_logical_slot_get_changes('ddlsec_td', null, null)",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    let td_messages = td
        .iter()
        .filter(|l| l.contains("prefix: pubjson.ddl"))
        .count();
    assert_eq!(td_messages, events.len(), "the WAL's messages");
    assert_no_secret(&td.join("\n"), SECRETS, "the WAL (test_decoding)");

    drop(recv);
    for s in ["ddlsec_f3", "ddlsec_f2", "ddlsec_recv", "ddlsec_td"] {
        drop_slot(&mut c, s);
    }
    exec(&mut c, DROP_SUBSCRIPTION);
}

/// `pubjson.ddl_capture_command = none` writes no statement text at all;
/// only a superuser may change it.
#[test]
fn the_setting_none_writes_no_text() {
    let (dbname, mut c) = database("none");
    exec(
        &mut c,
        "select pubjson.enable_ddl_capture();
         do $$ begin
           if not exists (select from pg_roles where rolname = 'ddlsec_none_user') then
             create role ddlsec_none_user login;
           end if;
         end $$;
         grant create on schema public to ddlsec_none_user",
    );
    pubjson_slot(&mut c, "ddlsec_none");
    exec(
        &mut c,
        "set pubjson.ddl_capture_command = none; create table n1 (id int default 42)",
    );
    exec(
        &mut c,
        "reset pubjson.ddl_capture_command; create table n2 (id int)",
    );
    let objects = get_format3(&mut c, "ddlsec_none", &[]);
    let events = ddl_events(&objects);
    assert_eq!(events.len(), 2);
    assert!(events[0]["command"].is_null(), "{}", events[0]);
    assert_eq!(events[0]["command_redacted"], true);
    assert_eq!(events[0]["relations"][0]["table"], "n1");
    assert_eq!(
        events[1]["command"],
        "reset pubjson.ddl_capture_command; create table n2 (id int)"
    );
    assert!(events[1].get("command_redacted").is_none(), "{}", events[1]);
    // An ordinary role, once the library is loaded in its session (its
    // first DDL loads it), may not change it.
    let mut user = Server::main().connect_as(&dbname, "ddlsec_none_user");
    exec(&mut user, "create table n3 (id int)");
    let e = user
        .batch_execute("set pubjson.ddl_capture_command = none")
        .expect_err("superuser only");
    assert_eq!(sqlstate(&e), "42501");
    drop(user);
    drop_slot(&mut c, "ddlsec_none");
}

/// A query string the parser cannot split the way the server read it (a
/// SET in the string changed how backslashes are read) is withheld
/// whole, and the event is still there.
#[test]
fn text_that_cannot_be_split_for_sure_is_withheld() {
    let (_db, mut c) = database("unsplit");
    exec(&mut c, "select pubjson.enable_ddl_capture()");
    pubjson_slot(&mut c, "ddlsec_unsplit");
    // Read with backslashes plain when it ran; read with them as escapes
    // (as the SET leaves the session), the constant swallows the rest and
    // the string no longer parses.
    exec(
        &mut c,
        "SET standard_conforming_strings = off; CREATE TABLE w1 (a text DEFAULT 'x\\'); -- '",
    );
    exec(&mut c, "SET standard_conforming_strings = on");
    let objects = get_format3(&mut c, "ddlsec_unsplit", &[]);
    let events = ddl_events(&objects);
    assert_eq!(events.len(), 1, "{objects:?}");
    assert!(events[0]["command"].is_null(), "{}", events[0]);
    assert_eq!(events[0]["command_redacted"], true);
    assert_eq!(events[0]["relations"][0]["table"], "w1");
    drop_slot(&mut c, "ddlsec_unsplit");
}
