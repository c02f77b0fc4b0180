//! Differential tests: add-tables / filter-tables (wildcards, escapes),
//! add-msg-prefixes / filter-msg-prefixes, and actions.

use pubjson_e2e::{case, option_matrix, require_wal2json, Case, TestDb};

/// Each case in format 1, format 2, and format 1 with write-in-chunks.
fn in_all_formats(label: &str, opts: &[(&str, &str)]) -> Vec<Case> {
    let base = case(label, opts);
    vec![
        base.with("(v1)", &[("format-version", "1")]),
        base.with(
            "(v1 chunks)",
            &[("format-version", "1"), ("write-in-chunks", "1")],
        ),
        base.with("(v2)", &[("format-version", "2")]),
        base.with(
            "(v2 xids)",
            &[("format-version", "2"), ("include-xids", "1")],
        ),
    ]
}

#[test]
fn table_filters() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "filt",
        r#"
        drop schema if exists e2e_filt2 cascade;
        create schema e2e_filt2;
        drop schema if exists "e2e_filt3.s" cascade;
        create schema "e2e_filt3.s";
        create table "e2e_filt3.s".t1 (id int primary key);
        create table e2e_filt.t1 (id int primary key, v text);
        create table e2e_filt.t2 (id int primary key, v text);
        create table e2e_filt2.t1 (id int primary key, v text);
        create table e2e_filt2.other (id int primary key);
        create table e2e_filt."dot.and,comma" (id int primary key);
        create table e2e_filt."a b" (id int primary key);
        create table e2e_filt."back\slash" (id int primary key);
        create table e2e_filt."*" (id int primary key);
        "#,
    );
    db.run(&[
        "insert into e2e_filt.t1 values (1, 'a')",
        "insert into e2e_filt.t2 values (1, 'b')",
        "insert into e2e_filt2.t1 values (1, 'c')",
        "insert into e2e_filt2.other values (1)",
        r#"insert into e2e_filt."dot.and,comma" values (1)"#,
        r#"insert into e2e_filt."a b" values (1)"#,
        r#"insert into e2e_filt."back\slash" values (1)"#,
        r#"insert into e2e_filt."*" values (1)"#,
        r#"insert into "e2e_filt3.s".t1 values (1)"#,
        "begin;
         insert into e2e_filt.t1 values (2, 'a2');
         insert into e2e_filt.t2 values (2, 'b2');
         insert into e2e_filt2.t1 values (2, 'c2');
         update e2e_filt.t1 set v = 'a1' where id = 1;
         update e2e_filt2.t1 set v = 'c1' where id = 1;
         delete from e2e_filt.t2 where id = 1;
         commit",
        // Only one table: empty when that table is filtered out.
        "update e2e_filt.t1 set v = v || '!'",
        "delete from e2e_filt2.t1 where id = 2",
        "truncate e2e_filt.t1, e2e_filt2.t1",
        r#"truncate e2e_filt."dot.and,comma", e2e_filt."a b", e2e_filt.t2"#,
        "create table e2e_filt.ddl_only (a int)",
    ]);
    let mut cases = Vec::new();
    // One option each (the first word of the label), then combinations.
    for (label, value) in [
        ("filter-tables one", "e2e_filt.t1"),
        (
            "filter-tables two with spaces",
            " e2e_filt.t1 ,  e2e_filt2.t1 ",
        ),
        ("filter-tables *.t1", "*.t1"),
        ("filter-tables schema.*", "e2e_filt.*"),
        ("filter-tables *.*", "*.*"),
        (
            "filter-tables escaped dot and comma",
            r"e2e_filt.dot\.and\,comma",
        ),
        (
            "filter-tables escaped space and backslash",
            r"e2e_filt.a\ b,e2e_filt.back\\slash",
        ),
        (
            "filter-tables escaped star (a table named *)",
            r"e2e_filt.\*",
        ),
        ("filter-tables missing table", "e2e_filt.nosuch"),
        ("filter-tables empty", ""),
        ("add-tables one", "e2e_filt.t2"),
        ("add-tables *.t1", "*.t1"),
        ("add-tables schema.*", "e2e_filt2.*"),
        (
            "add-tables escaped",
            r"e2e_filt.dot\.and\,comma,e2e_filt.a\ b,e2e_filt.back\\slash",
        ),
        ("add-tables escaped star", r"e2e_filt.\*"),
        ("add-tables schema with a dot", r"e2e_filt3\.s.t1"),
        ("filter-tables schema with a dot", r"e2e_filt3\.s.*"),
        ("add-tables unescaped dot in schema", "e2e_filt3.s.t1"),
        ("add-tables empty", ""),
        ("add-tables missing table", "nosuch.nosuch"),
    ] {
        let name = label.split(' ').next().expect("a label");
        cases.extend(in_all_formats(label, &[(name, value)]));
    }
    for (label, opts) in [
        (
            "add-tables and filter-tables",
            &[
                ("add-tables", "e2e_filt.*,e2e_filt2.t1"),
                ("filter-tables", "e2e_filt.t1"),
            ],
        ),
        (
            "add-tables twice (last wins)",
            &[("add-tables", "e2e_filt.t1"), ("add-tables", "e2e_filt.t2")],
        ),
        (
            "filter-tables twice",
            &[
                ("filter-tables", "e2e_filt.t1"),
                ("filter-tables", "e2e_filt.t2"),
            ],
        ),
        (
            "add-tables with actions",
            &[("add-tables", "*.t1"), ("actions", "update,truncate")],
        ),
    ] {
        cases.extend(in_all_formats(label, opts));
    }
    // And a few of the standard options with a filter.
    for c in option_matrix()
        .iter()
        .filter(|c| c.label.ends_with("defaults") || c.label.contains("many options"))
    {
        cases.push(c.with(
            "+ filter-tables",
            &[("filter-tables", "e2e_filt.t1,*.other")],
        ));
    }
    db.compare_all(&slots, &cases);
    db.exec(r#"drop schema e2e_filt2 cascade; drop schema "e2e_filt3.s" cascade"#);
}

#[test]
fn message_filters() {
    require_wal2json!();
    let (mut db, slots) =
        TestDb::with_slot_pair("msgfilt", "create table e2e_msgfilt.t (id int primary key)");
    db.run(&[
        "select pg_logical_emit_message(true, 'pfx', 'in pfx')",
        "select pg_logical_emit_message(true, 'other', 'in other')",
        // Non-transactional. (wal2json 2.5 prints a stray comma in format 1
        // when the transaction decoded before it had several changes, so
        // each one here follows a single-change transaction.)
        "select pg_logical_emit_message(false, 'pfx', 'non-transactional pfx')",
        "select pg_logical_emit_message(false, 'zzz', 'non-transactional zzz')",
        r"select pg_logical_emit_message(true, 'a\,b', 'prefix with a backslash')",
        "select pg_logical_emit_message(true, 'a,b', 'prefix with a comma')",
        "select pg_logical_emit_message(true, '', 'empty prefix')",
        "select pg_logical_emit_message(true, 'q\"u\\o é', 'prefix with a quote, a backslash and unicode')",
        "select pg_logical_emit_message(true, 'pfx', ''::text)",
        "select pg_logical_emit_message(true, 'bytes', convert_to('é \" \\ ' || chr(10) || chr(1), 'UTF8'))",
        "begin;
         insert into e2e_msgfilt.t values (1);
         select pg_logical_emit_message(true, 'pfx', 'between changes');
         insert into e2e_msgfilt.t values (2);
         select pg_logical_emit_message(true, 'other', 'last');
         commit",
        "begin;
         select pg_logical_emit_message(true, 'other', 'only other');
         select pg_logical_emit_message(true, 'other', 'twice');
         commit",
        "insert into e2e_msgfilt.t values (3)",
    ]);
    let mut cases = Vec::new();
    for (label, opts) in [
        ("no message filter", &[][..]),
        ("filter-msg-prefixes pfx", &[("filter-msg-prefixes", "pfx")]),
        (
            "filter-msg-prefixes pfx,other",
            &[("filter-msg-prefixes", "pfx, other")],
        ),
        (
            r"filter-msg-prefixes a\,b",
            &[("filter-msg-prefixes", r"a\,b")],
        ),
        ("filter-msg-prefixes empty", &[("filter-msg-prefixes", "")]),
        ("add-msg-prefixes pfx", &[("add-msg-prefixes", "pfx")]),
        (
            "add-msg-prefixes other,zzz",
            &[("add-msg-prefixes", "other,zzz")],
        ),
        (r"add-msg-prefixes a\,b", &[("add-msg-prefixes", r"a\,b")]),
        ("add-msg-prefixes empty", &[("add-msg-prefixes", "")]),
        (
            "add and filter the same prefix",
            &[
                ("add-msg-prefixes", "pfx,other"),
                ("filter-msg-prefixes", "other"),
            ],
        ),
        ("messages are not actions", &[("actions", "")]),
        (
            "message filter with table filter",
            &[
                ("filter-msg-prefixes", "other"),
                ("filter-tables", "e2e_msgfilt.t"),
            ],
        ),
    ] {
        cases.extend(in_all_formats(label, opts));
    }
    cases.push(case(
        "pretty v1",
        &[
            ("pretty-print", "1"),
            ("add-msg-prefixes", "pfx,other,bytes"),
        ],
    ));
    cases.push(case(
        "pretty v1 chunks",
        &[
            ("pretty-print", "1"),
            ("write-in-chunks", "1"),
            ("filter-msg-prefixes", "zzz"),
        ],
    ));
    cases.push(case(
        "pretty v2",
        &[
            ("format-version", "2"),
            ("pretty-print", "1"),
            ("include-lsn", "1"),
        ],
    ));
    cases.push(case(
        "v2 include-transaction=0",
        &[("format-version", "2"), ("include-transaction", "0")],
    ));
    db.compare_all(&slots, &cases);
}

#[test]
fn replication_origins() {
    require_wal2json!();
    let mut db = TestDb::new("origin");
    db.exec(
        "create table e2e_origin.t (id int primary key);
         select pg_replication_origin_drop(roname) from pg_replication_origin where roname like 'e2e_origin_%';
         select pg_replication_origin_create('e2e_origin_a');
         select pg_replication_origin_create('e2e_origin_b');",
    );
    let origin_a = db.query_one_string("select pg_replication_origin_oid('e2e_origin_a')::text");
    let origin_b = db.query_one_string("select pg_replication_origin_oid('e2e_origin_b')::text");
    let slots = db.create_slot_pair();
    let mut replica = pubjson_e2e::connect();
    let mut in_origin = |origin: &str, sql: &str| {
        replica
            .client
            .batch_execute(&format!(
                "select pg_replication_origin_session_setup('{origin}');
                 {sql};
                 select pg_replication_origin_session_reset();"
            ))
            .expect("replica session");
    };
    db.run(&["insert into e2e_origin.t values (1)"]);
    in_origin("e2e_origin_a", "insert into e2e_origin.t values (2)");
    in_origin("e2e_origin_b", "begin; insert into e2e_origin.t values (3); select pg_logical_emit_message(true, 'o', 'from b'); commit");
    in_origin(
        "e2e_origin_a",
        "update e2e_origin.t set id = 20 where id = 2",
    );
    db.run(&["delete from e2e_origin.t where id = 1"]);
    let mut cases = Vec::new();
    let both = format!("{origin_a},{origin_b}");
    for (label, opts) in [
        ("include-origin", &[("include-origin", "1")][..]),
        (
            "filter-origins a",
            &[
                ("filter-origins", origin_a.as_str()),
                ("include-origin", "1"),
            ],
        ),
        ("filter-origins a,b", &[("filter-origins", both.as_str())]),
        (
            "filter-origins unknown",
            &[("filter-origins", "4242"), ("include-origin", "1")],
        ),
        ("filter-origins empty", &[("filter-origins", "")]),
    ] {
        cases.extend(in_all_formats(label, opts));
    }
    db.compare_all(&slots, &cases);
    db.exec("select pg_replication_origin_drop('e2e_origin_a'); select pg_replication_origin_drop('e2e_origin_b')");
}
