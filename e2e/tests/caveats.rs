//! Where pubjson must NOT match the installed wal2json byte for byte:
//! wal2json 2.6 features and fixes (the installed one is 2.5) and the cases
//! where wal2json prints invalid JSON. Each is checked against explicit
//! expected output (or the catalog) on pubjson alone.

use pubjson_e2e::{case, diff_rows, parse_documents, require_wal2json, Case, Row, TestDb};
use serde_json::Value;

fn data(rows: &[Row]) -> Vec<&str> {
    rows.iter().map(|r| r.data.as_str()).collect()
}

fn assert_data(db: &mut TestDb, slot: &str, c: &Case, expected: &[&str]) {
    let rows = db.peek_ok(slot, c);
    assert_eq!(
        data(&rows),
        expected,
        "[{}] pubjson output ({})",
        c.label,
        c.describe()
    );
    parse_documents(&rows, c.chunked()).unwrap_or_else(|e| panic!("[{}] {e}", c.label));
    println!("[{}] {}: {} rows as expected", db.name, c.label, rows.len());
}

/// wal2json 2.6's `numeric-data-types-as-string`: numbers (NaN and the
/// infinities too) as JSON strings, in columns and identities.
#[test]
fn numeric_data_types_as_string() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair("cavnum", "create table e2e_cavnum.num (id int primary key, i2 int2, i8 int8, o oid, f4 float4, f8 float8, n numeric, n2 numeric(5,2), t text);
         create table e2e_cavnum.full_t (n numeric, f float8);
         alter table e2e_cavnum.full_t replica identity full;");
    db.run(&[
        "insert into e2e_cavnum.num values (1, -5, 9223372036854775807, 4294967295, 'NaN', '-Infinity', 1.500, 2.5, '12')",
        "insert into e2e_cavnum.num values (2, null, null, null, 'Infinity', 1e300, 'NaN', -0.01, null)",
        "update e2e_cavnum.num set id = 3 where id = 2",
        "delete from e2e_cavnum.num where id = 1",
        "insert into e2e_cavnum.full_t values ('-Infinity', '-0')",
        "delete from e2e_cavnum.full_t",
    ]);
    let cols1 = r#""columnnames":["id","i2","i8","o","f4","f8","n","n2","t"],"columntypes":["integer","smallint","bigint","oid","real","double precision","numeric","numeric(5,2)","text"]"#;
    let v1 = case(
        "v1 numeric-data-types-as-string",
        &[("numeric-data-types-as-string", "1")],
    );
    assert_data(
        &mut db,
        &slots.pubjson,
        &v1,
        &[
            &format!(
                r#"{{"change":[{{"kind":"insert","schema":"e2e_cavnum","table":"num",{cols1},"columnvalues":["1","-5","9223372036854775807","4294967295","NaN","-Infinity","1.500","2.50","12"]}}]}}"#
            ),
            &format!(
                r#"{{"change":[{{"kind":"insert","schema":"e2e_cavnum","table":"num",{cols1},"columnvalues":["2",null,null,null,"Infinity","1e+300","NaN","-0.01",null]}}]}}"#
            ),
            &format!(
                r#"{{"change":[{{"kind":"update","schema":"e2e_cavnum","table":"num",{cols1},"columnvalues":["3",null,null,null,"Infinity","1e+300","NaN","-0.01",null],"oldkeys":{{"keynames":["id"],"keytypes":["integer"],"keyvalues":["2"]}}}}]}}"#
            ),
            r#"{"change":[{"kind":"delete","schema":"e2e_cavnum","table":"num","oldkeys":{"keynames":["id"],"keytypes":["integer"],"keyvalues":["1"]}}]}"#,
            r#"{"change":[{"kind":"insert","schema":"e2e_cavnum","table":"full_t","columnnames":["n","f"],"columntypes":["numeric","double precision"],"columnvalues":["-Infinity","-0"]}]}"#,
            r#"{"change":[{"kind":"delete","schema":"e2e_cavnum","table":"full_t","oldkeys":{"keynames":["n","f"],"keytypes":["numeric","double precision"],"keyvalues":["-Infinity","-0"]}}]}"#,
        ],
    );
    let col =
        |name: &str, ty: &str, v: &str| format!(r#"{{"name":"{name}","type":"{ty}","value":{v}}}"#);
    let num_columns = |vals: [&str; 9]| {
        let names = ["id", "i2", "i8", "o", "f4", "f8", "n", "n2", "t"];
        let types = [
            "integer",
            "smallint",
            "bigint",
            "oid",
            "real",
            "double precision",
            "numeric",
            "numeric(5,2)",
            "text",
        ];
        (0..9)
            .map(|i| col(names[i], types[i], vals[i]))
            .collect::<Vec<_>>()
            .join(",")
    };
    let v2 = case(
        "v2 numeric-data-types-as-string include-pk",
        &[
            ("format-version", "2"),
            ("numeric-data-types-as-string", "1"),
            ("include-pk", "1"),
        ],
    );
    let pk = r#""pk":[{"name":"id","type":"integer"}]"#;
    // The second row inserted, and the same row after `set id = 3`.
    let second_row = |id: &str| {
        num_columns([
            id,
            "null",
            "null",
            "null",
            r#""Infinity""#,
            r#""1e+300""#,
            r#""NaN""#,
            r#""-0.01""#,
            "null",
        ])
    };
    // full_t's row, inserted and deleted.
    let full_t_row = format!(
        "{},{}",
        col("n", "numeric", r#""-Infinity""#),
        col("f", "double precision", r#""-0""#)
    );
    assert_data(
        &mut db,
        &slots.pubjson,
        &v2,
        &[
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"I","schema":"e2e_cavnum","table":"num","columns":[{}],{pk}}}"#,
                num_columns([
                    r#""1""#,
                    r#""-5""#,
                    r#""9223372036854775807""#,
                    r#""4294967295""#,
                    r#""NaN""#,
                    r#""-Infinity""#,
                    r#""1.500""#,
                    r#""2.50""#,
                    r#""12""#
                ])
            ),
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"I","schema":"e2e_cavnum","table":"num","columns":[{}],{pk}}}"#,
                second_row(r#""2""#)
            ),
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"U","schema":"e2e_cavnum","table":"num","columns":[{}],"identity":[{}],{pk}}}"#,
                second_row(r#""3""#),
                col("id", "integer", r#""2""#)
            ),
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"D","schema":"e2e_cavnum","table":"num","identity":[{}],{pk}}}"#,
                col("id", "integer", r#""1""#)
            ),
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"I","schema":"e2e_cavnum","table":"full_t","columns":[{full_t_row}],"pk":[]}}"#
            ),
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            &format!(
                r#"{{"action":"D","schema":"e2e_cavnum","table":"full_t","identity":[{full_t_row}],"pk":[]}}"#
            ),
            r#"{"action":"C"}"#,
        ],
    );
    // Explicitly off: the same as wal2json 2.5 without the option.
    for fv in ["1", "2"] {
        let with_off = case(
            &format!("v{fv} numeric-data-types-as-string=0"),
            &[
                ("format-version", fv),
                ("numeric-data-types-as-string", "0"),
            ],
        );
        let plain = case(&format!("v{fv}"), &[("format-version", fv)]);
        let pj = db.peek_ok(
            &slots.pubjson,
            &with_off.with("", &[("skip-empty-xacts", "0")]),
        );
        let w2j = db.peek_ok(&slots.wal2json, &plain);
        if let Some(d) = diff_rows(
            "wal2json",
            &w2j,
            "pubjson numeric-data-types-as-string=0",
            &pj,
        ) {
            panic!("[{}] {d}", with_off.label);
        }
    }
}

/// Format 1 `include-pk` as wal2json 2.6 prints it: the "pk" object for
/// every table with a primary key whatever its replica identity, and for
/// DELETE (wal2json 2.5 crashes on a format-1 DELETE with include-pk, so
/// it is never asked here).
#[test]
fn v1_include_pk() {
    let mut db = TestDb::new("cavpk");
    db.exec(
        "create table e2e_cavpk.pk_default (id int primary key, v text);
         create table e2e_cavpk.full_pk (id int primary key, v text);
         alter table e2e_cavpk.full_pk replica identity full;
         create table e2e_cavpk.using_index (code int not null, id int primary key, v text);
         create unique index using_index_code on e2e_cavpk.using_index (code);
         alter table e2e_cavpk.using_index replica identity using index using_index_code;
         create table e2e_cavpk.nothing_pk (id int primary key, v text);
         alter table e2e_cavpk.nothing_pk replica identity nothing;
         create table e2e_cavpk.multi (a int, b text, v text, primary key (b, a));",
    );
    let (slot, _guard) = db.create_slot("pubjson", "pj");
    for (t, cols, row) in [
        ("pk_default", "id, v", "1, 'a'"),
        ("full_pk", "id, v", "1, 'a'"),
        ("using_index", "code, id, v", "7, 1, 'a'"),
        ("nothing_pk", "id, v", "1, 'a'"),
        ("multi", "a, b, v", "1, 'x', 'a'"),
    ] {
        db.run(&[
            &format!("insert into e2e_cavpk.{t} ({cols}) values ({row})"),
            &format!("update e2e_cavpk.{t} set v = 'b'"),
            &format!("delete from e2e_cavpk.{t}"),
        ]);
    }
    let c = case(
        "v1 include-pk",
        &[("format-version", "1"), ("include-pk", "1")],
    );
    let doc = |change: &str| format!(r#"{{"change":[{change}]}}"#);
    let id_v = r#""columnnames":["id","v"],"columntypes":["integer","text"]"#;
    let pk_id = r#""pk":{"pknames":["id"],"pktypes":["integer"]}"#;
    let expected = [
        // REPLICA IDENTITY DEFAULT
        doc(&format!(
            r#"{{"kind":"insert","schema":"e2e_cavpk","table":"pk_default",{id_v},"columnvalues":[1,"a"],{pk_id}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"update","schema":"e2e_cavpk","table":"pk_default",{id_v},"columnvalues":[1,"b"],{pk_id},"oldkeys":{{"keynames":["id"],"keytypes":["integer"],"keyvalues":[1]}}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"delete","schema":"e2e_cavpk","table":"pk_default",{pk_id},"oldkeys":{{"keynames":["id"],"keytypes":["integer"],"keyvalues":[1]}}}}"#
        )),
        // FULL
        doc(&format!(
            r#"{{"kind":"insert","schema":"e2e_cavpk","table":"full_pk",{id_v},"columnvalues":[1,"a"],{pk_id}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"update","schema":"e2e_cavpk","table":"full_pk",{id_v},"columnvalues":[1,"b"],{pk_id},"oldkeys":{{"keynames":["id","v"],"keytypes":["integer","text"],"keyvalues":[1,"a"]}}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"delete","schema":"e2e_cavpk","table":"full_pk",{pk_id},"oldkeys":{{"keynames":["id","v"],"keytypes":["integer","text"],"keyvalues":[1,"b"]}}}}"#
        )),
        // USING INDEX (code); the primary key is id
        doc(&format!(
            r#"{{"kind":"insert","schema":"e2e_cavpk","table":"using_index","columnnames":["code","id","v"],"columntypes":["integer","integer","text"],"columnvalues":[7,1,"a"],{pk_id}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"update","schema":"e2e_cavpk","table":"using_index","columnnames":["code","id","v"],"columntypes":["integer","integer","text"],"columnvalues":[7,1,"b"],{pk_id},"oldkeys":{{"keynames":["code"],"keytypes":["integer"],"keyvalues":[7]}}}}"#
        )),
        doc(&format!(
            r#"{{"kind":"delete","schema":"e2e_cavpk","table":"using_index",{pk_id},"oldkeys":{{"keynames":["code"],"keytypes":["integer"],"keyvalues":[7]}}}}"#
        )),
        // NOTHING: the insert only (UPDATE/DELETE are skipped with a WARNING)
        doc(&format!(
            r#"{{"kind":"insert","schema":"e2e_cavpk","table":"nothing_pk",{id_v},"columnvalues":[1,"a"],{pk_id}}}"#
        )),
        // Multi-column key, in column order
        doc(
            r#"{"kind":"insert","schema":"e2e_cavpk","table":"multi","columnnames":["a","b","v"],"columntypes":["integer","text","text"],"columnvalues":[1,"x","a"],"pk":{"pknames":["a","b"],"pktypes":["integer","text"]}}"#,
        ),
        doc(
            r#"{"kind":"update","schema":"e2e_cavpk","table":"multi","columnnames":["a","b","v"],"columntypes":["integer","text","text"],"columnvalues":[1,"x","b"],"pk":{"pknames":["a","b"],"pktypes":["integer","text"]},"oldkeys":{"keynames":["a","b"],"keytypes":["integer","text"],"keyvalues":[1,"x"]}}"#,
        ),
        doc(
            r#"{"kind":"delete","schema":"e2e_cavpk","table":"multi","pk":{"pknames":["a","b"],"pktypes":["integer","text"]},"oldkeys":{"keynames":["a","b"],"keytypes":["integer","text"],"keyvalues":[1,"x"]}}"#,
        ),
    ];
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_data(&mut db, &slot, &c, &expected);
    // The NOTHING table's UPDATE and DELETE were skipped with warnings.
    let (_, notices) = db.peek(&slot, &c.opts).expect("peek");
    assert_eq!(
        notices,
        [
            r#"WARNING: table "nothing_pk" without primary key or replica identity is nothing"#,
            r#"WARNING: table "nothing_pk" without primary key or replica identity is nothing"#
        ],
        "warnings"
    );

    // Pretty-printed DELETE, as 2.6 lays it out.
    let pretty = case(
        "v1 include-pk pretty-print delete",
        &[
            ("include-pk", "1"),
            ("pretty-print", "1"),
            ("actions", "delete"),
            ("add-tables", "e2e_cavpk.pk_default"),
        ],
    );
    assert_data(
        &mut db,
        &slot,
        &pretty,
        &[concat!(
            "{\n",
            "\t\"change\": [\n",
            "\t\t{\n",
            "\t\t\t\"kind\": \"delete\",\n",
            "\t\t\t\"schema\": \"e2e_cavpk\",\n",
            "\t\t\t\"table\": \"pk_default\",\n",
            "\t\t\t\"pk\": {\n",
            "\t\t\t\t\"pknames\": [\"id\"],\n",
            "\t\t\t\t\"pktypes\": [\"integer\"]\n",
            "\t\t\t},\n",
            "\t\t\t\"oldkeys\": {\n",
            "\t\t\t\t\"keynames\": [\"id\"],\n",
            "\t\t\t\t\"keytypes\": [\"integer\"],\n",
            "\t\t\t\t\"keyvalues\": [1]\n",
            "\t\t\t}\n",
            "\t\t}\n",
            "\t]\n",
            "}"
        )],
    );
}

/// A non-transactional message decoded after a transaction with several
/// changes: wal2json 2.5 prints a stray comma in format 1 (`[,{`), 2.6 and
/// pubjson do not. Everything else equals wal2json.
#[test]
fn v1_non_transactional_message_after_several_changes() {
    require_wal2json!();
    let (mut db, slots) =
        TestDb::with_slot_pair("cavmsg", "create table e2e_cavmsg.t (id int primary key)");
    db.run(&[
        "insert into e2e_cavmsg.t values (1), (2)",
        "select pg_logical_emit_message(false, 'p', 'after two changes')",
        "begin;
         insert into e2e_cavmsg.t values (3), (4), (5);
         select pg_logical_emit_message(false, 'p', 'inside a transaction');
         insert into e2e_cavmsg.t values (6);
         commit",
        "select pg_logical_emit_message(false, 'p', 'after four changes')",
    ]);
    let plain = case("v1", &[("format-version", "1")]);
    let rows = db.peek_ok(&slots.pubjson, &plain);
    let messages: Vec<&str> = data(&rows)
        .into_iter()
        .filter(|d| d.contains(r#""kind":"message""#))
        .collect();
    assert_eq!(
        messages,
        [
            r#"{"change":[{"kind":"message","transactional":false,"prefix":"p","content":"after two changes"}]}"#,
            r#"{"change":[{"kind":"message","transactional":false,"prefix":"p","content":"inside a transaction"}]}"#,
            r#"{"change":[{"kind":"message","transactional":false,"prefix":"p","content":"after four changes"}]}"#,
        ]
    );
    let pretty = case("v1 pretty-print", &[("pretty-print", "1")]);
    let rows = db.peek_ok(&slots.pubjson, &pretty);
    assert_eq!(
        rows[1].data,
        "{\n\t\"change\": [\n\t\t{\n\t\t\t\"kind\": \"message\",\n\t\t\t\"transactional\": false,\n\t\t\t\"prefix\": \"p\",\n\t\t\t\"content\": \"after two changes\"\n\t\t}\n\t]\n}"
    );

    // Apart from that comma, the output is wal2json's.
    for c in [
        plain,
        pretty,
        case("v1 chunks", &[("write-in-chunks", "1")]),
        case(
            "v1 chunks pretty",
            &[
                ("write-in-chunks", "1"),
                ("pretty-print", "1"),
                ("include-xids", "1"),
            ],
        ),
    ] {
        let w2j: Vec<Row> = db
            .peek_ok(&slots.wal2json, &c)
            .into_iter()
            .map(|mut r| {
                if r.data.contains("\"transactional\":false")
                    || r.data.contains("\"transactional\": false")
                {
                    r.data = r
                        .data
                        .replacen("[,{", "[{", 1)
                        .replacen("\t\t,{", "\t\t{", 1);
                }
                r
            })
            .collect();
        let pj = db.peek_ok(&slots.pubjson, &c.with("", &[("skip-empty-xacts", "0")]));
        if let Some(d) = diff_rows("wal2json without the stray comma", &w2j, "pubjson", &pj) {
            panic!("[{}] {d}", c.label);
        }
        parse_documents(&pj, c.chunked()).unwrap_or_else(|e| panic!("[{}] {e}", c.label));
        println!(
            "[{}] {}: {} rows equal wal2json's without the stray comma",
            db.name,
            c.label,
            pj.len()
        );
    }
}

/// The JSON values of a format-1 change's `key` array, or of the `field`s
/// of a format-2 change's `key` array of objects.
fn strings_at(change: &Value, key: &str, field: Option<&str>) -> Vec<Option<String>> {
    let arr = change
        .get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no {key} array in {change}"));
    arr.iter()
        .map(|v| match field {
            Some(f) => v.get(f).and_then(Value::as_str).map(str::to_string),
            None => v.as_str().map(str::to_string),
        })
        .collect()
}

/// Type names that format_type quotes (a schema needing quotes, a name
/// with quotes): wal2json copies them raw into its output (invalid JSON);
/// pubjson escapes them, and the decoded value is format_type's text.
#[test]
fn quoted_type_names_are_valid_json() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "cavtypes",
        r#"
        drop schema if exists "E2e Cav Types" cascade;
        create schema "E2e Cav Types";
        create type "E2e Cav Types".mood as enum ('a', 'b');
        create domain "E2e Cav Types".dom as int check (value > 0);
        drop type if exists public."e2e ""cav""" cascade;
        create type public."e2e ""cav""" as enum ('x');
        create table e2e_cavtypes.t (
            id "E2e Cav Types".dom primary key,
            m "E2e Cav Types".mood,
            q public."e2e ""cav""",
            ma "E2e Cav Types".mood[],
            qa public."e2e ""cav"""[],
            plain int
        );
        alter table e2e_cavtypes.t replica identity full;
        "#,
    );
    db.run(&[
        "insert into e2e_cavtypes.t values (1, 'a', 'x', '{a,b}', '{x}', 1)",
        "update e2e_cavtypes.t set m = 'b'",
        "delete from e2e_cavtypes.t",
    ]);
    // format_type(atttypid, atttypmod) in this session, as the decoder sees it.
    let expected_types: Vec<Option<String>> = db
        .conn
        .client
        .query(
            "select format_type(atttypid, atttypmod) from pg_attribute
             where attrelid = 'e2e_cavtypes.t'::regclass and attnum > 0 and not attisdropped order by attnum",
            &[],
        )
        .expect("format_type")
        .iter()
        .map(|r| Some(r.get(0)))
        .collect();
    assert_eq!(
        expected_types[1].as_deref(),
        Some(r#""E2e Cav Types".mood"#)
    );
    assert_eq!(expected_types[2].as_deref(), Some(r#""e2e ""cav""""#));

    // wal2json 2.5 really does print invalid JSON here (else this test
    // would not exercise the caveat).
    let w2j = db.peek_ok(&slots.wal2json, &case("v1", &[]));
    assert!(
        parse_documents(&w2j, false).is_err(),
        "wal2json's output unexpectedly is valid JSON"
    );

    for c in [
        case("v1", &[]),
        case("v1 pretty", &[("pretty-print", "1")]),
        case("v1 chunks", &[("write-in-chunks", "1")]),
        case(
            "v2 include-pk",
            &[("format-version", "2"), ("include-pk", "1")],
        ),
    ] {
        let rows = db.peek_ok(&slots.pubjson, &c);
        let docs =
            parse_documents(&rows, c.chunked()).unwrap_or_else(|e| panic!("[{}] {e}", c.label));
        let mut checked = 0;
        for doc in &docs {
            // The type lists of this document: (where the list is, when
            // there is one; its key; the member of its elements holding
            // the type; what a failure shows).
            let mut lists: Vec<(Option<&Value>, &str, Option<&str>, &Value)> = Vec::new();
            if c.format() == 1 {
                for change in doc["change"].as_array().expect("change array") {
                    let columns = change.get("columntypes").map(|_| change);
                    lists.push((columns, "columntypes", None, change));
                    lists.push((change.get("oldkeys"), "keytypes", None, change));
                }
            } else {
                for key in ["columns", "identity"] {
                    lists.push((doc.get(key).map(|_| doc), key, Some("type"), doc));
                }
            }
            for (at, key, member, shown) in lists {
                if let Some(at) = at {
                    assert_eq!(
                        strings_at(at, key, member),
                        expected_types,
                        "[{}] {shown}",
                        c.label
                    );
                    checked += 1;
                }
            }
            if c.format() != 1 {
                if let Some(pk) = doc.get("pk") {
                    assert_eq!(
                        pk.to_string(),
                        format!(
                            r#"[{{"name":"id","type":{}}}]"#,
                            Value::from(expected_types[0].clone())
                        )
                    );
                }
            }
        }
        // insert: columns; update: columns and identity; delete: identity.
        assert_eq!(checked, 4, "[{}] type lists checked", c.label);
        println!(
            "[{}] {}: {checked} type lists decode to format_type's text",
            db.name, c.label
        );
    }
    // include-typmod=0 uses the bare type name: plain in both plugins.
    let c = case("v1 include-typmod=0", &[("include-typmod", "0")]);
    let rows = db.peek_ok(&slots.pubjson, &c);
    let docs = parse_documents(&rows, false).unwrap_or_else(|e| panic!("[{}] {e}", c.label));
    assert_eq!(
        strings_at(&docs[0]["change"][0], "columntypes", None),
        [
            "dom",
            "mood",
            r#"e2e "cav""#,
            "_mood",
            r#"_e2e "cav""#,
            "int4"
        ]
        .map(|s| Some(s.to_string()))
    );
    db.exec(r#"drop schema "E2e Cav Types" cascade; drop type public."e2e ""cav""" cascade"#);
}

/// Default expressions containing double quotes: wal2json prints them
/// unescaped; pubjson's decode to pg_get_expr's text.
#[test]
fn default_expressions_with_quotes_are_valid_json() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "cavdef",
        r#"create table e2e_cavdef."Quoted" (id serial primary key, note text default 'say "hi"', plain int default 1, nodefault int);"#,
    );
    db.run(&[r#"insert into e2e_cavdef."Quoted" default values"#]);
    let expected: Vec<Option<String>> = db
        .conn
        .client
        .query(
            r#"select pg_get_expr(d.adbin, d.adrelid) from pg_attribute a
               left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
               where a.attrelid = 'e2e_cavdef."Quoted"'::regclass and a.attnum > 0 order by a.attnum"#,
            &[],
        )
        .expect("pg_get_expr")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        expected,
        [
            Some(r#"nextval('e2e_cavdef."Quoted_id_seq"'::regclass)"#),
            Some(r#"'say "hi"'::text"#),
            Some("1"),
            None
        ]
        .map(|s| s.map(str::to_string))
    );
    let w2j = db.peek_ok(&slots.wal2json, &case("v1", &[("include-default", "1")]));
    assert!(
        parse_documents(&w2j, false).is_err(),
        "wal2json's output unexpectedly is valid JSON"
    );

    let v1 = db.peek_ok(
        &slots.pubjson,
        &case("v1 include-default", &[("include-default", "1")]),
    );
    let docs = parse_documents(&v1, false).expect("valid JSON");
    assert_eq!(
        strings_at(&docs[0]["change"][0], "columndefaults", None),
        expected
    );

    let v2 = db.peek_ok(
        &slots.pubjson,
        &case(
            "v2 include-default",
            &[("format-version", "2"), ("include-default", "1")],
        ),
    );
    let docs = parse_documents(&v2, false).expect("valid JSON");
    assert_eq!(strings_at(&docs[1], "columns", Some("default")), expected);
    println!(
        "[{}] default expressions decode to pg_get_expr's text in formats 1 and 2",
        db.name
    );
}

/// Message content with NUL bytes: wal2json cuts it at the first NUL;
/// pubjson keeps it, as \u0000.
#[test]
fn message_content_with_nul() {
    let mut db = TestDb::new("cavnul");
    let (slot, _guard) = db.create_slot("pubjson", "pj");
    db.run(&[
        r"select pg_logical_emit_message(true, 'nul', '\x6100620000'::bytea)",
        r"select pg_logical_emit_message(false, 'nul', '\x00'::bytea)",
    ]);
    assert_data(
        &mut db,
        &slot,
        &case("v1", &[]),
        &[
            r#"{"change":[{"kind":"message","transactional":true,"prefix":"nul","content":"a\u0000b\u0000\u0000"}]}"#,
            r#"{"change":[{"kind":"message","transactional":false,"prefix":"nul","content":"\u0000"}]}"#,
        ],
    );
    assert_data(
        &mut db,
        &slot,
        &case("v1 chunks", &[("write-in-chunks", "1")]),
        &[
            r#"{"change":["#,
            r#"{"kind":"message","transactional":true,"prefix":"nul","content":"a\u0000b\u0000\u0000"}"#,
            r#"]}"#,
            r#"{"change":[{"kind":"message","transactional":false,"prefix":"nul","content":"\u0000"}]}"#,
        ],
    );
    assert_data(
        &mut db,
        &slot,
        &case("v2", &[("format-version", "2")]),
        &[
            r#"{"action":"B"}"#,
            r#"{"action":"M","transactional":true,"prefix":"nul","content":"a\u0000b\u0000\u0000"}"#,
            r#"{"action":"C"}"#,
            r#"{"action":"M","transactional":false,"prefix":"nul","content":"\u0000"}"#,
        ],
    );
    let rows = db.peek_ok(&slot, &case("v2", &[("format-version", "2")]));
    let v: Value = serde_json::from_str(&rows[1].data).expect("valid JSON");
    assert_eq!(v["content"].as_str(), Some("a\0b\0\0"));
}

/// With `bytea_output = 'escape'` wal2json still skips the first two
/// characters of the output (meant for hex's `\x`): for a value whose
/// output is shorter than two characters it reads past the end of the
/// string (undefined behaviour: usually "", sometimes garbage such as
/// ">$xU"). pubjson drops the same two characters and clamps at the end.
/// Longer values are compared with wal2json in types.rs (session_settings).
#[test]
fn bytea_escape_output_shorter_than_two_characters() {
    let mut db = TestDb::new("cavbytea");
    db.exec("create table e2e_cavbytea.t (id int primary key, b bytea)");
    let (slot, _guard) = db.create_slot("pubjson", "pj");
    db.run(&[
        r"insert into e2e_cavbytea.t values (1, ''), (2, 'A'), (3, 'AB'), (4, '\x00'), (5, 'ABC')",
    ]);
    db.exec("set bytea_output = 'escape'");
    let change = |id: i32, b: &str| {
        format!(
            r#"{{"action":"I","schema":"e2e_cavbytea","table":"t","columns":[{{"name":"id","type":"integer","value":{id}}},{{"name":"b","type":"bytea","value":"{b}"}}]}}"#
        )
    };
    let expected = [
        r#"{"action":"B"}"#.to_string(),
        change(1, ""),
        change(2, ""),
        change(3, ""),
        change(4, "00"),
        change(5, "C"),
        r#"{"action":"C"}"#.to_string(),
    ];
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_data(
        &mut db,
        &slot,
        &case("v2 bytea_output=escape", &[("format-version", "2")]),
        &expected,
    );
}
