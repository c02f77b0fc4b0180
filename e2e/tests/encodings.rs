//! Output in databases whose encoding is not UTF-8.
//!
//! For each encoding, the same workload (non-ASCII table, column and type
//! names, values, message prefixes and contents) runs in a database of that
//! encoding and in a UTF-8 database. In both formats, the output must be
//! pure ASCII and mean exactly what the UTF-8 database's output means
//! (compared as parsed JSON), the values must be the table's contents read
//! over a UTF-8 connection, and pg_recvlogical (a walsender) must receive
//! the very bytes the SQL functions return.

use std::collections::BTreeMap;
use std::time::Duration;

use pubjson_e2e::{
    complete_lines, connect, connect_db, describe_error, json_lines, message_lines, rows,
    scratch_dir, serialize, wait_for, Conn, RecvLogical, Server,
};
use serde_json::Value;

/// The extension's table of conversion routines, checked against
/// `pg_conversion`.
use pubjson_core::text::conversions;

struct Sample {
    encoding: &'static str,
    table: &'static str,
    column: &'static str,
    type_name: &'static str,
    texts: &'static [&'static str],
}

const SAMPLES: &[Sample] = &[
    Sample {
        encoding: "LATIN1",
        table: "tëst_é",
        column: "größe",
        type_name: "wört",
        // "Ã©" is C3 A9 in LATIN1: bytes that look like UTF-8 "é".
        texts: &["é", "Ã©", "ÿ¼½ å", "naïve \"quoted\" \\ back\tslash"],
    },
    Sample {
        encoding: "WIN1252",
        table: "€uro",
        column: "prix€",
        type_name: "montant€",
        texts: &["€ Š — ‰", "Ã©", "œuvre"],
    },
    Sample {
        encoding: "LATIN2",
        table: "tábla_ő",
        column: "név_ű",
        type_name: "szöveg",
        texts: &["Łódź ő ű", "žluťoučký kůň"],
    },
    Sample {
        encoding: "KOI8R",
        table: "таблица",
        column: "колонка",
        type_name: "текст",
        texts: &["Привет, мир ё", "ЁЖ"],
    },
    Sample {
        encoding: "EUC_JP",
        table: "表",
        column: "列",
        type_name: "文字列",
        // "筺　" is E4A1 A1A1 in EUC_JP: it starts like UTF-8, and the
        // issue's data loss came from it.
        texts: &["日本", "筺　", "ｱｲｳ", "漢字かなカナ"],
    },
    Sample {
        encoding: "EUC_KR",
        table: "표",
        column: "열",
        type_name: "문자열",
        texts: &["한국어", "가나다"],
    },
];

/// The UTF-8 database each workload also runs in, for comparison.
const UTF8_DB: &str = "pubjson_enc_utf8";

/// A database and its slot (slot names are cluster-wide).
fn database_name(encoding: &str) -> String {
    format!("pubjson_enc_{}", encoding.to_ascii_lowercase())
}

/// A fresh database in `encoding` (C locale, which every encoding accepts).
fn fresh_database(admin: &mut Conn, name: &str, encoding: &str) -> Conn {
    drop_database(name);
    exec(
        admin,
        &format!(
            "create database {name} encoding '{encoding}' lc_collate 'C' lc_ctype 'C' template template0"
        ),
    );
    connect_db(name)
}

fn exec(conn: &mut Conn, sql: &str) {
    conn.client
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The workload, with the slot (named after the database) created first.
fn run_workload(conn: &mut Conn, s: &Sample, slot: &str) {
    let (table, column, type_name) = (
        quote_ident(s.table),
        quote_ident(s.column),
        quote_ident(s.type_name),
    );
    exec(
        conn,
        &format!(
            "create domain {type_name} as text; \
             create table {table} (id int primary key, {column} {type_name})"
        ),
    );
    conn.client
        .execute(
            "select pg_create_logical_replication_slot($1, 'pubjson')",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("create slot: {}", describe_error(&e)));
    for (i, text) in s.texts.iter().enumerate() {
        conn.client
            .execute(
                &format!("insert into {table} values ($1, $2::text)"),
                &[&(i as i32 + 1), text],
            )
            .unwrap_or_else(|e| panic!("insert {text:?}: {}", describe_error(&e)));
    }
    exec(
        conn,
        &format!("update {table} set {column} = {column} || '!' where id = 1"),
    );
    exec(conn, &format!("delete from {table} where id = 2"));
    for transactional in [true, false] {
        conn.client
            .execute(
                "select pg_logical_emit_message($1, $2, $3)",
                &[&transactional, &s.table, &s.texts[0]],
            )
            .unwrap_or_else(|e| panic!("message: {}", describe_error(&e)));
    }
    // Non-transactional messages are flushed asynchronously.
    exec(conn, "select pg_switch_wal()");
}

const FORMATS: [&str; 2] = ["1", "2"];

/// Peeks with an empty search_path, as pg_recvlogical's walsender has
/// (type names come out schema-qualified the same way).
fn peek(conn: &mut Conn, slot: &str, format: &str) -> Vec<String> {
    exec(conn, "set search_path = ''");
    let rows = conn
        .client
        .query(
            "select data from pg_logical_slot_peek_changes($1, null, null, \
             'format-version', $2, 'include-types', '1')",
            &[&slot, &format],
        )
        .unwrap_or_else(|e| panic!("peek format {format}: {}", describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    exec(conn, "reset search_path");
    rows
}

/// The output with what differs between two databases (xids, LSNs,
/// timestamps) taken out.
fn meaning(rows: &[String]) -> Vec<Value> {
    fn mask(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["xid", "lsn", "nextlsn", "timestamp"] {
                    if let Some(x) = map.get_mut(key) {
                        *x = Value::Null;
                    }
                }
                map.values_mut().for_each(mask);
            }
            Value::Array(items) => items.iter_mut().for_each(mask),
            _ => {}
        }
    }
    rows.iter()
        .map(|row| {
            let mut v: Value =
                serde_json::from_str(row).unwrap_or_else(|e| panic!("not JSON ({e}): {row}"));
            mask(&mut v);
            v
        })
        .collect()
}

/// Every string in the output.
fn strings(values: &[Value]) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|x| walk(x, out)),
            Value::Object(map) => map.iter().for_each(|(k, x)| {
                out.push(k.clone());
                walk(x, out);
            }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    values.iter().for_each(|v| walk(v, &mut out));
    out
}

#[test]
fn every_encoding_means_what_utf8_means() {
    let _serial = serialize();
    let mut admin = connect();
    let mut sql_outputs = BTreeMap::new();
    for s in SAMPLES {
        let name = database_name(s.encoding);
        let mut db = fresh_database(&mut admin, &name, s.encoding);
        run_workload(&mut db, s, &name);
        let mut reference = fresh_database(&mut admin, UTF8_DB, "UTF8");
        run_workload(&mut reference, s, UTF8_DB);

        // What the table holds, read over a UTF-8 connection.
        let contents: Vec<String> = db
            .client
            .query(
                &format!(
                    "select {}::text from {} order by id",
                    quote_ident(s.column),
                    quote_ident(s.table)
                ),
                &[],
            )
            .expect("read the table")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(contents.len(), s.texts.len() - 1);
        assert_eq!(contents[0], format!("{}!", s.texts[0]));

        for format in FORMATS {
            let rows = peek(&mut db, &name, format);
            for row in &rows {
                assert!(row.is_ascii(), "{}: not ASCII: {row}", s.encoding);
            }
            let got = meaning(&rows);
            let expected = meaning(&peek(&mut reference, UTF8_DB, format));
            assert_eq!(got, expected, "{} format {format}", s.encoding);
            let found = strings(&got);
            for text in contents
                .iter()
                .map(String::as_str)
                .chain(s.texts.iter().copied())
                .chain([s.table, s.column])
            {
                assert!(
                    found.iter().any(|f| f == text),
                    "{} format {format}: {text:?} missing from {found:?}",
                    s.encoding
                );
            }
            assert!(
                found
                    .iter()
                    .any(|f| f.trim_start_matches("public.").trim_matches('"') == s.type_name),
                "{} format {format}: type {} missing",
                s.encoding,
                s.type_name
            );
            sql_outputs.insert((s.encoding, format), rows);
        }
        drop(reference);
    }

    // A walsender sends the same bytes.
    for s in SAMPLES {
        let name = database_name(s.encoding);
        for format in FORMATS {
            let expected = &sql_outputs[&(s.encoding, format)];
            let dir = scratch_dir(&format!("enc-{}-{format}", s.encoding.to_lowercase()));
            let file = dir.join("out.json");
            let mut recv = RecvLogical::start_in(
                &name,
                &name,
                &file,
                &[
                    ("format-version", Some(format)),
                    ("include-types", Some("1")),
                ],
                &[],
            );
            wait_for(
                &format!("{} format {format} through pg_recvlogical", s.encoding),
                Duration::from_secs(30),
                || complete_lines(&file).len() >= expected.len(),
            );
            recv.stop();
            assert_eq!(
                &complete_lines(&file),
                expected,
                "{} format {format}: pg_recvlogical differs from the SQL functions",
                s.encoding
            );
        }
    }

    // The data loss: get_changes consumes, and what it returns is
    // what a peek showed.
    let euc_jp = database_name("EUC_JP");
    let mut euc = connect_db(&euc_jp);
    let peeked = peek(&mut euc, &euc_jp, "2");
    exec(&mut euc, "set search_path = ''");
    let got: Vec<String> = euc
        .client
        .query(
            "select data from pg_logical_slot_get_changes($1, null, null, \
             'format-version', '2', 'include-types', '1')",
            &[&euc_jp],
        )
        .unwrap_or_else(|e| panic!("get_changes: {}", describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, peeked);
    assert!(strings(&meaning(&got)).iter().any(|t| t == "筺　"));

    for s in SAMPLES {
        let name = database_name(s.encoding);
        drop_database(&name);
    }
    drop_database(UTF8_DB);
}

fn drop_database(name: &str) {
    Server::main()
        .drop_database(name)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The conversion routines pubjson loads are the default conversions of
/// the server's catalog, for every server encoding.
#[test]
fn conversion_routines_match_pg_conversion() {
    let mut conn = connect();
    let rows = conn
        .client
        .query(
            "select pg_catalog.pg_encoding_to_char(e)::text, p.probin, p.prosrc \
               from generate_series(0, 40) e \
               left join pg_catalog.pg_conversion c \
                 on c.conforencoding = e and c.condefault \
                and c.contoencoding = pg_catalog.pg_char_to_encoding('UTF8') \
               left join pg_catalog.pg_proc p on p.oid = c.conproc \
              where pg_catalog.pg_encoding_to_char(e) <> '' \
                and e <= pg_catalog.pg_char_to_encoding('KOI8U')",
            &[],
        )
        .expect("pg_conversion");
    assert!(rows.len() >= 35, "server encodings: {}", rows.len());
    for row in rows {
        let encoding: String = row.get(0);
        let catalog: Option<(String, String)> =
            row.get::<_, Option<String>>(1).map(|lib| (lib, row.get(2)));
        let ours = conversions::to_utf8_routine(&encoding)
            .map(|r| (r.library.to_owned(), r.symbol.to_owned()));
        if encoding == "UTF8" {
            assert_eq!(ours, None);
        } else {
            assert_eq!(ours, catalog, "{encoding}");
        }
    }
}

/// json documents whose strings hold escapes of every code point of the
/// BMP (lower and upper case hex, each twice, between characters of the
/// sample) and surrogate pairs, as `rows` documents.
fn escape_documents(s: &Sample, rows: usize) -> Vec<String> {
    let text = s.texts[0];
    let points: Vec<u32> = (0u32..=0xffff)
        .filter(|cp| !(0xd800..0xe000).contains(cp))
        .collect();
    let per_row = points.len().div_ceil(rows);
    let mut docs: Vec<String> = points
        .chunks(per_row)
        .map(|chunk| {
            let strings: Vec<String> = chunk
                .chunks(32)
                .enumerate()
                .map(|(n, group)| {
                    let escapes: String = group
                        .iter()
                        .map(|cp| {
                            let e = if n % 2 == 0 {
                                format!("\\u{cp:04x}")
                            } else {
                                format!("\\u{cp:04X}")
                            };
                            e.repeat(2)
                        })
                        .collect();
                    format!("\"{text}{escapes}{text}\"")
                })
                .collect();
            format!("{{\"k\": [{}]}}", strings.join(", "))
        })
        .collect();
    docs.push(format!(
        "[\"\\ud83d\\ude00{text}\\ud800\\udc00\", \"\\udbff\\udfff\", \"\\\\u00e9\\\"\"]"
    ));
    docs
}

/// json[] elements: one per escape of U+0080..U+00FF (the escapes a
/// database byte was once taken for), next to the sample's text.
fn escape_elements(s: &Sample) -> Vec<String> {
    (0x80u32..=0xff)
        .map(|cp| format!("{{\"e\":\"\\u{cp:04x}{}\\u{cp:04X}\"}}", s.texts[0]))
        .chain(["\"\\ud83d\\ude00\"".to_string()])
        .collect()
}

/// Format 3 embeds json text as it is: in every encoding, a json (and
/// json[]) value's escapes mean their characters, through the SQL
/// functions and pg_recvlogical alike, and the output is ASCII.
#[test]
fn format_3_json_escapes_mean_their_characters() {
    let _serial = serialize();
    let mut admin = connect();
    for s in SAMPLES {
        let name = format!("pubjson_enc3_{}", s.encoding.to_ascii_lowercase());
        let mut db = fresh_database(&mut admin, &name, s.encoding);
        exec(
            &mut db,
            "create table j3 (id int primary key, j json, ja json[])",
        );
        db.client
            .execute(
                "select pg_create_logical_replication_slot($1, 'pubjson')",
                &[&name],
            )
            .unwrap_or_else(|e| panic!("create slot: {}", describe_error(&e)));
        let docs = escape_documents(s, 8);
        let elements = escape_elements(s);
        for (i, doc) in docs.iter().enumerate() {
            db.client
                .execute(
                    "insert into j3 values ($1, $2::text::json, $3::text[]::json[])",
                    &[&(i as i32), doc, &elements],
                )
                .unwrap_or_else(|e| panic!("{} insert: {}", s.encoding, describe_error(&e)));
        }
        // What the database holds, rendered by it and converted to UTF-8.
        let expected: BTreeMap<i64, (Value, Value)> = rows(
            &mut db.client,
            "select id, j::text, to_json(ja)::text from j3",
        )
        .iter()
        .map(|r| {
            let id: i32 = r.get(0);
            let j: String = r.get(1);
            let ja: String = r.get(2);
            let parse = |t: &str| -> Value {
                serde_json::from_str(t).unwrap_or_else(|e| panic!("{e}: {t}"))
            };
            (id as i64, (parse(&j), parse(&ja)))
        })
        .collect();
        assert_eq!(expected.len(), docs.len());
        assert_eq!(expected[&0].1.as_array().map(Vec::len), Some(129));

        let rows: Vec<String> = db
            .client
            .query(
                "select data from pg_logical_slot_peek_changes($1, null, null, \
                 'format-version', '3')",
                &[&name],
            )
            .unwrap_or_else(|e| panic!("peek: {}", describe_error(&e)))
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        // One object per line, as pg_recvlogical writes them.
        let rows = message_lines(&rows);
        let check = |rows: &[String], how: &str| {
            let mut got = BTreeMap::new();
            assert!(
                rows.iter().all(|r| r.is_ascii()),
                "{} {how}: not ASCII",
                s.encoding
            );
            for v in json_lines(rows) {
                if v["action"] == "I" {
                    let new = &v["new"];
                    got.insert(
                        new["id"].as_i64().expect("id"),
                        (new["j"].clone(), new["ja"].clone()),
                    );
                }
            }
            assert_eq!(got.len(), expected.len(), "{} {how}", s.encoding);
            for (id, value) in &expected {
                assert!(got[id] == *value, "{} {how}: row {id} differs", s.encoding);
            }
        };
        check(&rows, "SQL");

        let dir = scratch_dir(&format!("enc3-{}", s.encoding.to_lowercase()));
        let file = dir.join("out.json");
        let mut recv =
            RecvLogical::start_in(&name, &name, &file, &[("format-version", Some("3"))], &[]);
        wait_for(
            &format!("{} format 3 through pg_recvlogical", s.encoding),
            Duration::from_secs(60),
            || complete_lines(&file).len() >= rows.len(),
        );
        recv.stop();
        let received = complete_lines(&file);
        check(&received, "pg_recvlogical");
        assert!(
            received == rows,
            "{}: pg_recvlogical differs from the SQL functions",
            s.encoding
        );
        drop(recv);
        drop(db);
        drop_database(&name);
    }
}
