//! The Debezium differential (`format-version` `debezium`): Debezium 3.6's
//! PostgreSQL connector (`plugin.name=pgoutput`, embedded engine, JSON
//! converter) and pubjson over the same WAL, every record's destination,
//! key and value compared (the support library's `debezium` module: the
//! cluster, the capture on both sides, the comparison and the fields it
//! leaves out). Each scenario is one database; each run one set of
//! Debezium settings, all runs of a scenario in one Debezium process.
//! docs/debezium.md lists every difference; the values Debezium gets wrong
//! are compared in `values_debezium_gets_wrong` instead.

use pubjson_e2e::debezium::{
    assert_runs_equal, differences, normalized, Captured, DebeziumCluster, Run, Scenario,
    TableDescriber, TOPIC_PREFIX,
};
use pubjson_e2e::debezium_replica::SchemaChangeReplica;
use pubjson_e2e::exec;
use serde_json::{json, Value};

fn report(label: &str, captured: &Captured, compared: usize) {
    eprintln!(
        "{label}: {compared} records compared over {} runs; Debezium process {:.1} s (JVM start {:.1} s)",
        captured.runs.len(),
        captured.debezium_seconds,
        captured.jvm_seconds
    );
}

const TYPES_SETUP: &str = r#"
create extension hstore;
create domain posint as int check (value > 0);
create domain shorttext as varchar(5);
create table types (id int primary key,
 i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric, n102 numeric(10,2), n50 numeric(5,0), m money,
 bo bool, tx text, vc varchar(10), ch char(3), by bytea, u uuid,
 d date, t time, t3 time(3), t0 time(0), tz timetz, ts timestamp, ts3 timestamp(3), ts0 timestamp(0),
 tst timestamptz, tst3 timestamptz(3), tst0 timestamptz(0), iv interval,
 js json, jb jsonb, x xml, b1 bit, b4 bit(4), b16 bit(16), vb varbit, vb8 varbit(8),
 inet_ inet, cidr_ cidr, mac macaddr, mac8 macaddr8,
 pt point, ln line, ls lseg, bx box, pa path, pg polygon, ci circle,
 i4r int4range, nr numrange, tsr tsrange, tstzr tstzrange, dr daterange, i8r int8range,
 tsv tsvector, tsq tsquery, hs hstore, dom posint, dom2 shorttext,
 ai int[], at text[], ad date[], ab bool[], af float8[], oi oid, c "char", xx xid,
 an numeric[], an2 numeric(6,2)[], au uuid[], atz timestamptz[], ajb jsonb[], avc varchar(3)[]);
create publication pub for all tables;
"#;

const TYPES_WORKLOAD: &str = r#"
insert into types values (1, -2, 3, 9000000000, 1.5, -2.25, 123.456, 12.34, 12345, 12.34,
 true, 'tëxt "q" \ ünï', 'vc', 'ab', '\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
 '2026-03-04', '13:14:15.123456', '13:14:15.123456', '13:14:15.6', '13:14:15.5+02',
 '2026-03-04 13:14:15.654321', '2026-03-04 13:14:15.654321', '2026-03-04 13:14:15.654321',
 '2026-03-04 13:14:15.654321+01', '2026-03-04 13:14:15.654321+01', '2026-03-04 13:14:15.654321+01',
 '1 year 2 mons 3 days 04:05:06.789',
 '{"b": 1,  "a": [1,2]}', '{"b": 1,  "a": [1,2]}', '<a>x</a>', B'1', B'1010', B'1000000100000010', B'101', B'11',
 '192.168.1.5/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05',
 '(1,2)', '{1,2,3}', '[(1,2),(3,4)]', '((3,4),(1,2))', '[(1,2),(3,4)]', '((0,0),(1,1),(1,0))', '<(1,2),3>',
 '[1,5)', '(1.5,2.5]', '[2026-01-01,2026-02-01)', '[2026-01-01 00:00+00,2026-02-01 00:00+00)',
 '[2026-01-01,2026-02-01)', '[1,100)',
 'a fat cat', 'fat & cat', 'a=>1, b=>NULL, "c d"=>"e\"f"', 5, 'hello',
 '{1,2,NULL}', '{"a","b c",NULL}', '{2026-01-01,NULL}', '{t,f}', '{1.5,-2}', 42, 'x', '1234',
 '{1.5,-0.25}', '{1.5,NULL}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}',
 '{2026-01-01 00:00:00.5+00}', '{"{\"a\": 1}"}', '{abc,de}');
insert into types (id) values (2);
insert into types (id, n, n102, d, t, t3, iv, by, b4, m, tst, tst3, ts, tz, f4, f8, pt)
  values (3, '-0.00001', '-99999999.99', '1900-01-01', '24:00:00', '00:00:00', '-1 mon 2 days -00:00:01',
          '', B'0000', -92233720368547758.08, '2026-01-01 00:00:00+00', '1969-12-31 23:59:59.5+00',
          '1960-06-30 12:00:00', '00:00:00-05:30', 'NaN', '-Infinity', '(-1.5,1e20)');
insert into types (id, n, n102, tst, tz, f4, f8, iv) values
  (4, 1e30, 0, '2026-01-01 00:00:00.5+00', '23:59:59.999999+14', 'Infinity', 1e-7, '00:00:00');
update types set tx = 'changed', i4 = null where id = 1;
delete from types where id = 2;
"#;

/// Every type the Debezium documentation lists (and the unknown ones),
/// NULLs in every column, updates and deletes, under the defaults, with
/// schemas on and off.
#[test]
fn types_defaults() {
    let cluster = DebeziumCluster::start("debezium-types");
    let scenario = Scenario {
        database: "dbz_types",
        database_options: "",
        setup: TYPES_SETUP,
        publication: "pub",
        workload: TYPES_WORKLOAD,
        runs: vec![
            Run::new("schemas", &[]),
            Run::new("payload", &[("schemas.enable", "false")]),
            Run::new(
                "unknown",
                &[
                    ("include.unknown.datatypes", "true"),
                    ("schemas.enable", "false"),
                ],
            ),
        ],
    };
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("types_defaults", &captured, compared);
}

/// Every value of every type-mapping setting, over the same types (schemas
/// on: the settings change the schemas too).
#[test]
fn types_settings() {
    let cluster = DebeziumCluster::start("debezium-settings");
    let settings: &[(&str, &[&str])] = &[
        ("decimal.handling.mode", &["double", "string"]),
        (
            "time.precision.mode",
            &["adaptive_time_microseconds", "connect"],
        ),
        (
            "binary.handling.mode",
            &["base64", "base64-url-safe", "hex"],
        ),
        ("interval.handling.mode", &["string"]),
        ("hstore.handling.mode", &["map"]),
    ];
    let runs = settings
        .iter()
        .flat_map(|(name, values)| {
            values.iter().map(move |value| {
                Run::new(
                    &format!("{}_{value}", name.replace('.', "_")).replace('-', "_"),
                    &[(name, value)],
                )
            })
        })
        .collect();
    let scenario = Scenario {
        database: "dbz_settings",
        database_options: "",
        setup: TYPES_SETUP,
        publication: "pub",
        workload: TYPES_WORKLOAD,
        runs,
    };
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("types_settings", &captured, compared);
}

const ENVELOPE_SETUP: &str = r#"
create table items (id int primary key, name text, qty int);
create table keyless (a int, b text);
alter table keyless replica identity full;
create table fullrow (id int primary key, name text, qty int);
alter table fullrow replica identity full;
create table toasted (id int primary key, big text, bb bytea, jb jsonb, ai int[], at text[], n int);
create table toasted_full (id int primary key, big text, n int);
alter table toasted_full replica identity full;
create table other (id int primary key, v text);
create table parted (id int, region text, v text, primary key (id, region)) partition by list (region);
create table parted_eu partition of parted for values in ('eu');
create table parted_us partition of parted for values in ('us');
create publication pub for all tables;
create publication pub_root for all tables with (publish_via_partition_root = true);
"#;

const ENVELOPE_WORKLOAD: &str = r#"
insert into items values (1, 'one', 1), (2, 'two', 2);
update items set qty = 10 where id = 1;
update items set id = 3 where id = 2;
delete from items where id = 1;
insert into keyless values (1, 'x');
update keyless set b = 'y';
delete from keyless;
insert into fullrow values (1, 'a', 1);
update fullrow set qty = 2;
update fullrow set id = 5;
delete from fullrow;
insert into toasted values (1, repeat('x', 100000), (select string_agg(md5(g::text), '') from generate_series(1, 4000) g)::bytea,
  ('{"a":"' || (select string_agg(md5(g::text), '') from generate_series(1, 4000) g) || '"}')::jsonb,
  (select array_agg(g) from generate_series(1, 50000) g),
  (select array_agg(md5(g::text)) from generate_series(1, 5000) g), 1);
update toasted set n = 2;
insert into toasted_full values (1, (select string_agg(md5(g::text), '') from generate_series(1, 4000) g), 1);
update toasted_full set n = 2;
begin;
insert into items values (7, 'seven', 7);
insert into other values (1, 'o');
select pg_logical_emit_message(true, 'my.prefix', 'hello');
update items set name = 'SEVEN' where id = 7;
commit;
select pg_logical_emit_message(false, 'outside', 'bye');
select pg_logical_emit_message(false, 'binary', '\x00ff'::bytea);
select pg_logical_emit_message(true, 'My.Other', 'alone in its transaction');
begin;
insert into other values (9, 'rolled back');
rollback;
insert into parted values (1, 'eu', 'a'), (2, 'us', 'b');
update parted set v = 'c' where id = 1;
delete from parted where id = 2;
truncate other, keyless;
"#;

fn envelope_scenario(
    database: &'static str,
    publication: &'static str,
    runs: Vec<Run>,
) -> Scenario<'static> {
    Scenario {
        database,
        database_options: "",
        setup: ENVELOPE_SETUP,
        publication,
        workload: ENVELOPE_WORKLOAD,
        runs,
    }
}

/// The envelope under the defaults and with transaction metadata,
/// truncates and tombstones switched: inserts, updates (also of the key),
/// deletes, REPLICA IDENTITY DEFAULT and FULL (with and without a key),
/// unchanged TOAST values, a multi-table transaction with a message,
/// messages outside transactions, a rolled-back transaction, a
/// partitioned table, a truncate of two tables.
#[test]
fn envelope() {
    let cluster = DebeziumCluster::start("debezium-envelope");
    let scenario = envelope_scenario(
        "dbz_envelope",
        "pub",
        vec![
            Run::new("defaults", &[]),
            Run::new(
                "metadata",
                &[
                    ("provide.transaction.metadata", "true"),
                    ("skipped.operations", "none"),
                    ("schemas.enable", "false"),
                ],
            ),
            Run::new(
                "skipped_with_metadata",
                &[
                    ("provide.transaction.metadata", "true"),
                    ("skipped.operations", "c,u"),
                    ("schemas.enable", "false"),
                ],
            ),
            Run::new(
                "message_include",
                &[
                    ("provide.transaction.metadata", "true"),
                    ("message.prefix.include.list", r"my\.p.*,BIN.*"),
                    ("schemas.enable", "false"),
                ],
            ),
            Run::new(
                "message_exclude",
                &[
                    ("provide.transaction.metadata", "true"),
                    ("message.prefix.exclude.list", r"my\..*, out.*"),
                    ("schemas.enable", "false"),
                ],
            ),
            Run::new(
                "no_tombstones",
                &[
                    ("tombstones.on.delete", "false"),
                    ("skipped.operations", "c,t"),
                    ("unavailable.value.placeholder", "TOASTED"),
                ],
            ),
        ],
    );
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("envelope", &captured, compared);
    let root = envelope_scenario(
        "dbz_root",
        "pub_root",
        vec![Run::new(
            "via_root",
            &[("provide.transaction.metadata", "true")],
        )],
    );
    let captured = root.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("envelope via partition root", &captured, compared);
}

/// A database in another encoding than UTF-8: names and text with
/// characters outside ASCII, under the defaults.
#[test]
fn latin1_database() {
    let cluster = DebeziumCluster::start("debezium-latin1");
    let scenario = Scenario {
        database: "dbz_latin1",
        database_options: "encoding 'LATIN1' lc_collate 'C' lc_ctype 'C' template template0",
        setup: r#"
create extension hstore;
create table "tablé" (id int primary key, "nâme" text, c char(2), v varchar(5), h hstore, j json);
create publication pub for all tables;
"#,
        publication: "pub",
        workload: r#"
insert into "tablé" values (1, 'déjà vu ÿ', 'éa', 'ñ', 'clé=>"vålue", "a b"=>NULL', '{"é": "ü\\u00e9"}');
update "tablé" set "nâme" = 'naïve' where id = 1;
select pg_logical_emit_message(true, 'préfixe', 'contenu é');
delete from "tablé";
"#,
        runs: vec![
            Run::new("schemas", &[]),
            Run::new("payload", &[("schemas.enable", "false")]),
        ],
    };
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("latin1_database", &captured, compared);
}

/// Values that Debezium writes as numbers that mean nothing or as null:
/// pubjson writes what a consumer can use (docs/debezium.md). Compared
/// like the others for every other field; these fields are checked
/// against pubjson's documented values, and against Debezium's being
/// different (so that a Debezium that fixes them is noticed).
#[test]
fn values_debezium_gets_wrong() {
    let cluster = DebeziumCluster::start("debezium-wrong");
    let scenario = Scenario {
        database: "dbz_wrong",
        database_options: "",
        setup: r#"
create table wrong (id int primary key, d date, ts timestamp, ts3 timestamp(3), nm name, n numeric, a2 int[][], an numeric[], ok text);
create publication pub for all tables;
"#,
        publication: "pub",
        workload: r#"
insert into wrong values (1, 'infinity', 'infinity', 'infinity', 'a name', 'NaN', '{{1,2},{3,4}}', '{1,NaN}', 'x');
insert into wrong values (2, '-infinity', '-infinity', '-infinity', 'other', 'Infinity', '{{5}}', '{2.5}', 'y');
"#,
        runs: vec![
            Run::new("precise", &[("schemas.enable", "false")]),
            Run::new(
                "double",
                &[
                    ("schemas.enable", "false"),
                    ("decimal.handling.mode", "double"),
                    ("time.precision.mode", "connect"),
                ],
            ),
            Run::new(
                "string",
                &[
                    ("schemas.enable", "false"),
                    ("decimal.handling.mode", "string"),
                ],
            ),
        ],
    };
    let mut captured = scenario.capture(&cluster);
    // (column, pubjson's value for row 1 and row 2, per run)
    let expected = |run: &str, column: &str| -> [Value; 2] {
        match (run, column) {
            (_, "d") => [json!(i32::MAX), json!(i32::MIN)],
            (_, "ts" | "ts3") => [json!(i64::MAX), json!(i64::MIN)],
            (_, "nm") => [json!("a name"), json!("other")],
            // No decimal can say NaN: null, as Debezium's.
            ("precise", "n") => [Value::Null, Value::Null],
            ("string", "n") => [json!("NAN"), json!("POSITIVE_INFINITY")],
            (_, "n") => [json!("NaN"), json!("Infinity")],
            // An array of more than one dimension has no Kafka Connect
            // schema (Debezium writes a null per outer element).
            (_, "a2") => [Value::Null, Value::Null],
            _ => unreachable!(),
        }
    };
    for (run, debezium, pubjson) in captured.runs.iter_mut() {
        assert_eq!(debezium.len(), 2, "run {}", run.name);
        assert_eq!(pubjson.len(), 2, "run {}", run.name);
        for (row, (d, p)) in debezium.iter_mut().zip(pubjson.iter_mut()).enumerate() {
            for column in ["d", "ts", "ts3", "nm", "n", "a2"] {
                let want = &expected(&run.name, column)[row];
                let ours = p.value["after"][column].take();
                let theirs = d.value["after"][column].take();
                assert_eq!(&ours, want, "run {} row {row} column {column}", run.name);
                if column == "n" {
                    // Numeric specials: as Debezium writes them.
                    assert_eq!(
                        &theirs, want,
                        "run {} row {row}: Debezium's {column}",
                        run.name
                    );
                } else {
                    assert_ne!(
                        &theirs, want,
                        "run {} row {row} column {column}: Debezium agrees now",
                        run.name
                    );
                }
            }
        }
    }
    // numeric[] with a NaN: null with precise (no decimal says NaN), as
    // Debezium's; with double and string the elements, where Debezium
    // writes null for the whole array.
    for (run, debezium, pubjson) in captured.runs.iter_mut() {
        let want = match run.name.as_str() {
            "precise" => [Value::Null, json!([{"scale": 1, "value": "GQ=="}])],
            "double" => [json!([1.0, "NaN"]), json!([2.5])],
            _ => [json!(["1", "NAN"]), json!(["2.5"])],
        };
        for (row, (d, p)) in debezium.iter_mut().zip(pubjson.iter_mut()).enumerate() {
            let ours = p.value["after"]["an"].take();
            let theirs = d.value["after"]["an"].take();
            assert_eq!(ours, want[row], "run {} row {row}: an", run.name);
            if row == 0 && run.name != "precise" {
                assert_eq!(theirs, Value::Null, "run {}: Debezium's an", run.name);
            } else {
                assert!(
                    pubjson_e2e::debezium::json_equal(&theirs, &ours),
                    "run {} row {row}: Debezium's an {theirs}",
                    run.name
                );
            }
        }
    }
    let compared = assert_runs_equal(&captured);
    report("values_debezium_gets_wrong", &captured, compared);
}

/// What pubjson does not write yet, because the format interface does not
/// pass it (docs/debezium.md): an enum column's allowed labels
/// (`io.debezium.data.Enum`) and a column default in the schema. Checked
/// to be the only differences, so that the list stays true.
#[test]
fn known_differences() {
    let cluster = DebeziumCluster::start("debezium-known");
    let scenario = Scenario {
        database: "dbz_known",
        database_options: "",
        setup: r#"
create type mood as enum ('sad', 'ok', 'happy');
create table known (id int primary key, e mood, d int default 7, t text default 'x');
create publication pub for all tables;
"#,
        publication: "pub",
        workload: "insert into known values (1, 'ok', 1, 'y');",
        runs: vec![Run::new("schemas", &[])],
    };
    let captured = scenario.capture(&cluster);
    let (_, debezium, pubjson) = &captured.runs[0];
    assert_eq!((debezium.len(), pubjson.len()), (1, 1));
    let fields = |r: &Value| {
        r["schema"]["fields"][1]["fields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (theirs, ours) = (fields(&debezium[0].value), fields(&pubjson[0].value));
    assert_eq!(
        theirs[1],
        json!({"type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
               "parameters": {"allowed": "sad,ok,happy"}, "field": "e"})
    );
    assert_eq!(
        ours[1],
        json!({"type": "string", "optional": true, "field": "e"})
    );
    assert_eq!(
        theirs[2],
        json!({"type": "int32", "optional": true, "default": 7, "field": "d"})
    );
    assert_eq!(
        theirs[3],
        json!({"type": "string", "optional": true, "default": "x", "field": "t"})
    );
    assert_eq!(
        ours[2],
        json!({"type": "int32", "optional": true, "field": "d"})
    );
    // Everything else, values included, is equal.
    assert_eq!(
        normalized(&debezium[0]).payload(),
        normalized(&pubjson[0]).payload()
    );
}

/// `pubjson.backfill()` read as Debezium's incremental-snapshot events
/// (`op` `r`, `source.snapshot` `incremental`), while a writer changes the
/// table: a replica built from the events (`c`, `u`, `r` upsert by key,
/// `d` deletes) equals the table.
#[test]
fn backfill_as_incremental_snapshot() {
    use pubjson_e2e::debezium::{pubjson_records, TOPIC_PREFIX};
    use std::collections::BTreeMap;
    let cluster = DebeziumCluster::start("debezium-backfill");
    let server = cluster.server();
    let mut c = server.fresh_database("dbz_backfill");
    c.batch_execute(
        "create extension pubjson;
         create table items (id int primary key, v text, n int);
         insert into items select g, 'v' || g, g from generate_series(1, 2000) g;
         create publication pub for table items;",
    )
    .unwrap_or_else(|e| panic!("{}", pubjson_e2e::describe_error(&e)));
    pubjson_e2e::exec(
        &mut c,
        "select pg_create_logical_replication_slot('dbz_backfill', 'pubjson')",
    );
    // A writer runs while the backfill reads the table in chunks.
    let mut writer = server.connect("dbz_backfill");
    let writing = std::thread::spawn(move || {
        for i in 0..300 {
            let id = 1 + (i * 7) % 2000;
            writer
                .batch_execute(&format!(
                    "update items set n = n + 1000 where id = {id};
                     delete from items where id = {};
                     insert into items values ({}, 'new', 0);",
                    1 + (i * 13) % 2000,
                    3000 + i
                ))
                .expect("writer");
        }
    });
    c.batch_execute("call pubjson.backfill('items', chunk_rows => 100)")
        .unwrap_or_else(|e| panic!("{}", pubjson_e2e::describe_error(&e)));
    writing.join().expect("writer thread");
    let run = Run::new("backfill", &[("schemas.enable", "false")]);
    let records = pubjson_records(&mut c, "dbz_backfill", "pub", &run);
    let mut replica: BTreeMap<i64, Value> = BTreeMap::new();
    let mut snapshot_rows = 0;
    for r in &records {
        assert_eq!(r.destination, format!("{TOPIC_PREFIX}.public.items"));
        if r.value.is_null() {
            continue; // a tombstone
        }
        let op = r.value["op"].as_str().unwrap_or_default();
        let snapshot = r.value["source"]["snapshot"].as_str().unwrap_or_default();
        assert_eq!(snapshot == "incremental", op == "r", "{}", r.value);
        match op {
            "c" | "u" | "r" => {
                snapshot_rows += (op == "r") as usize;
                let after = r.value["after"].clone();
                replica.insert(after["id"].as_i64().expect("id"), after);
            }
            "d" => {
                replica.remove(&r.value["before"]["id"].as_i64().expect("id"));
            }
            other => panic!("op {other}: {}", r.value),
        }
    }
    assert!(snapshot_rows >= 1700, "{snapshot_rows} backfilled rows");
    let table: BTreeMap<i64, Value> = c
        .query("select id, v, n from items", &[])
        .expect("read the table")
        .iter()
        .map(|row| {
            let id: i32 = row.get(0);
            let v: String = row.get(1);
            let n: i32 = row.get(2);
            (id as i64, json!({"id": id, "v": v, "n": n}))
        })
        .collect();
    assert_eq!(replica.len(), table.len());
    assert!(replica == table, "the replica differs from the table");
    drop(c);
    let _ = server.drop_database("dbz_backfill");
}

/// Transactions of the reconnect test: inserts, updates (some of the key),
/// deletes, a message; each in several output messages (`batch-bytes`).
const RECONNECT_TRANSACTIONS: i64 = 40;

/// A consumer of the `debezium` format through the replication protocol
/// (the support library's client), written as docs/debezium.md says
/// ("Consuming"): with transaction metadata, it applies a transaction at
/// its `END` record and skips one whose `END` LSN is not after the last
/// it applied, and confirms only at `END` records. Its walsender is
/// terminated, and killed with SIGKILL, mid-transaction and after
/// transactions it applied without confirming them (sent again: skipped);
/// its copy of the table equals the table, every transaction applied once.
#[test]
fn consumer_through_reconnects() {
    use pubjson_e2e::{retry, Walsender, WalsenderFault, XLogData};
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::{Duration, Instant};

    let cluster = DebeziumCluster::start("debezium-reconnect");
    let server = cluster.server();
    let db = "dbz_reconnect";
    let mut c = server.fresh_database(db);
    pubjson_e2e::exec(
        &mut c,
        "create table t (id bigint primary key, v text not null, n int not null)",
    );
    pubjson_e2e::exec(
        &mut c,
        &format!("select pg_create_logical_replication_slot('{db}', 'pubjson')"),
    );
    for i in 0..RECONNECT_TRANSACTIONS {
        let first = i * 100 + 1;
        c.batch_execute(&format!(
            "begin;
             insert into t select g, 'row ' || g, 0 from generate_series({first}, {}) g;
             update t set n = n + 1, v = v || '+' where id % 7 = {} and id < {first};
             delete from t where id % 11 = {} and id < {first};
             update t set id = id + 100000 where id = {};
             select pg_logical_emit_message(true, 'app', 'txn {i}');
             commit;",
            first + 99,
            i % 7,
            i % 11,
            first + 50
        ))
        .unwrap_or_else(|e| panic!("{}", pubjson_e2e::describe_error(&e)));
    }
    let table: BTreeMap<i64, (String, i64)> = c
        .query("select id, v, n from t", &[])
        .expect("read the table")
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get::<_, i32>(2) as i64)))
        .collect();
    drop(c);

    let options = [
        ("format-version", "debezium"),
        ("topic.prefix", "dbz"),
        ("schemas.enable", "false"),
        ("provide.transaction.metadata", "true"),
        ("batch-bytes", "2000"),
    ];
    let session = |from: u64| -> Walsender {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let attempt = retry(Duration::from_secs(60), || {
                Walsender::try_connect(&server, db, "postgres")
            })
            .and_then(|mut ws| ws.start(db, &options, from).map(|()| ws));
            match attempt {
                Ok(ws) => return ws,
                // The slot still held by the ended session's walsender.
                Err(e) if e.sqlstate() == Some("55006") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("starting a session: {e}"),
            }
        }
    };

    #[derive(Default)]
    struct Consumer {
        rows: BTreeMap<i64, (String, i64)>,
        open: Option<(String, Vec<Value>)>,
        last_end: u64,
        applied: BTreeSet<String>,
        duplicates: usize,
        position: u64,
    }
    impl Consumer {
        /// The records of one message; true when it ended a transaction.
        fn take(&mut self, m: &XLogData) -> bool {
            let text = String::from_utf8(m.payload.clone()).expect("UTF-8");
            let mut ended = false;
            for line in text.split('\n') {
                let r: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                let value = &r["value"];
                if r["destination"] == "dbz.transaction" {
                    let id = value["id"].as_str().expect("id").to_owned();
                    if value["status"] == "BEGIN" {
                        assert!(self.open.is_none(), "BEGIN inside a transaction: {line}");
                        self.open = Some((id, Vec::new()));
                        continue;
                    }
                    let (begin, events) = self.open.take().expect("END outside a transaction");
                    let xid = |id: &str| id.split(':').next().unwrap_or_default().to_owned();
                    assert_eq!(xid(&begin), xid(&id), "{line}");
                    assert_eq!(value["event_count"].as_u64(), Some(events.len() as u64));
                    let end: u64 = id
                        .split(':')
                        .nth(1)
                        .and_then(|l| l.parse().ok())
                        .expect("LSN");
                    ended = true;
                    if end <= self.last_end {
                        self.duplicates += 1;
                        assert!(
                            self.applied.contains(&xid(&id)),
                            "skipped but never applied: {line}"
                        );
                        continue;
                    }
                    for e in &events {
                        self.apply(e);
                    }
                    assert!(self.applied.insert(xid(&id)), "applied twice: {line}");
                    self.last_end = end;
                } else if !value.is_null() {
                    let (_, events) = self.open.as_mut().expect("an event outside a transaction");
                    events.push(value.clone());
                }
            }
            ended
        }
        fn apply(&mut self, e: &Value) {
            let row = |v: &Value| {
                (
                    v["id"].as_i64().expect("id"),
                    (
                        v["v"].as_str().expect("v").to_owned(),
                        v["n"].as_i64().expect("n"),
                    ),
                )
            };
            match e["op"].as_str().unwrap_or_default() {
                "c" | "u" => {
                    let (id, r) = row(&e["after"]);
                    self.rows.insert(id, r);
                }
                "d" => {
                    self.rows.remove(&e["before"]["id"].as_i64().expect("id"));
                }
                "m" => {}
                op => panic!("op {op}: {e}"),
            }
        }
    }

    let mut consumer = Consumer::default();
    let next = |ws: &mut Walsender| -> XLogData {
        ws.next_message(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("reading: {e}"))
            .expect("a message within 60 s")
    };
    let mut ws = session(0);
    let faults = [
        WalsenderFault::TerminateWalsender,
        WalsenderFault::KillWalsender,
    ];
    for round in 0..6 {
        // Some transactions applied and confirmed, then (odd rounds) one
        // applied without confirming, then into the middle of the next.
        let applied = consumer.applied.len() + consumer.duplicates;
        while consumer.applied.len() + consumer.duplicates < applied + 3 {
            let m = next(&mut ws);
            if consumer.take(&m) && consumer.open.is_none() {
                ws.confirm(m.lsn).expect("confirm");
                consumer.position = consumer.position.max(m.lsn);
            }
        }
        if round % 2 == 1 {
            let applied = consumer.applied.len();
            while consumer.applied.len() == applied {
                let m = next(&mut ws);
                consumer.take(&m);
            }
        }
        while consumer.open.as_ref().is_none_or(|(_, e)| e.is_empty()) {
            let m = next(&mut ws);
            consumer.take(&m);
        }
        match faults[round % 2] {
            WalsenderFault::KillWalsender => server.kill9_backend(ws.pid),
            _ => {
                let mut admin = server.connect("postgres");
                let done: bool = admin
                    .query_one("select pg_terminate_backend($1)", &[&ws.pid])
                    .expect("pg_terminate_backend")
                    .get(0);
                assert!(done);
            }
        }
        drop(ws);
        // What the ended session left open is sent again from its start.
        consumer.open = None;
        ws = session(consumer.position);
    }
    while consumer.applied.len() < RECONNECT_TRANSACTIONS as usize {
        let m = next(&mut ws);
        if consumer.take(&m) && consumer.open.is_none() {
            ws.confirm(m.lsn).expect("confirm");
        }
    }
    drop(ws);
    assert!(
        consumer.duplicates >= 3,
        "{} duplicates skipped",
        consumer.duplicates
    );
    assert_eq!(consumer.rows.len(), table.len());
    assert!(consumer.rows == table, "the copy differs from the table");
    eprintln!(
        "consumer_through_reconnects: {} transactions applied, {} sent again and skipped, 6 reconnects",
        consumer.applied.len(),
        consumer.duplicates
    );
    let _ = server.drop_database(db);
}

/// A publication's row filter (an UPDATE leaving or entering it is a
/// delete or a create, as pgoutput sends it to Debezium) and column list.
#[test]
fn publication_rules() {
    let cluster = DebeziumCluster::start("debezium-rules");
    let scenario = Scenario {
        database: "dbz_rules",
        database_options: "",
        setup: r#"
create table filtered (id int primary key, n int, v text);
alter table filtered replica identity full;
create table narrow (id int primary key, shown text, hidden text);
create publication pub for table filtered where (n > 5), table narrow (id, shown);
"#,
        publication: "pub",
        workload: r#"
insert into filtered values (1, 1, 'out'), (2, 10, 'in');
update filtered set n = 20 where id = 1;
update filtered set n = 2 where id = 2;
update filtered set v = 'still in' where id = 1;
delete from filtered where id = 1;
insert into narrow values (1, 'a', 'secret');
update narrow set shown = 'b', hidden = 'other secret';
delete from narrow;
"#,
        runs: vec![
            Run::new("schemas", &[]),
            Run::new("payload", &[("schemas.enable", "false")]),
        ],
    };
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    report("publication_rules", &captured, compared);
}

/// One DDL statement of `ddl_events` and the table changes expected of
/// its schema change event, with the publications (partitions as their
/// root) and without (every table): `(type, schema, table)`, empty when
/// the consumer is shown no event.
struct DdlStep {
    sql: &'static str,
    /// `ddl` when it is not the statement itself (a redacted one).
    ddl: Option<&'static str>,
    published: &'static [(&'static str, &'static str, &'static str)],
    all: &'static [(&'static str, &'static str, &'static str)],
}

const DDL_SETUP: &str = r#"
create extension pubjson;
create extension hstore;
select pubjson.enable_ddl_capture();
create schema other;
create domain shorttext as varchar(5);
create type mood as enum ('a', 'b');
create domain posint as int not null;
create table other.narrow (id int primary key, shown text, hidden text);
create publication dbz_pub for tables in schema public with (publish_via_partition_root = true);
create publication dbz_narrow for table other.narrow (id, shown);
"#;

/// Every type of the differential's tables.
const TYPES_TABLE: &str = "create table types (id int primary key,
 i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric, n102 numeric(10,2), n50 numeric(5,0), m money,
 bo bool, tx text, vc varchar(10), ch char(3), by bytea, u uuid,
 d date, t time, t3 time(3), t0 time(0), tz timetz, ts timestamp, ts3 timestamp(3), ts0 timestamp(0),
 tst timestamptz, tst3 timestamptz(3), tst0 timestamptz(0), iv interval, iv2 interval(2),
 js json, jb jsonb, x xml, b1 bit, b4 bit(4), b16 bit(16), vb varbit, vb8 varbit(8),
 inet_ inet, cidr_ cidr, mac macaddr, mac8 macaddr8,
 pt point, ln line, ls lseg, bx box, pa path, pg polygon, ci circle,
 i4r int4range, nr numrange, tsr tsrange, tstzr tstzrange, dr daterange, i8r int8range,
 tsv tsvector, tsq tsquery, hs hstore, dom posint, dom2 shorttext, e mood default 'b',
 ai int[], at text[], ad date[], ab bool[], af float8[], oi oid, c \"char\", xx xid, nm name,
 an numeric[], an2 numeric(6,2)[], au uuid[], atz timestamptz[], ajb jsonb[], avc varchar(3)[], aiv interval[],
 d1 int default 1, d2 text default 'x', d3 numeric default 1.5, d4 timestamptz default now(), d5 bytea default decode('00', 'hex'),
 d6 money default 1, d7 timetz default '00:00', d8 int[] default '{1}')";

const DDL_STEPS: &[DdlStep] = &[
    DdlStep {
        sql: "create table t1 (id serial primary key, v varchar(10) default 'x', n numeric(10,2), m mood default 'a', d posint, ts timestamptz(3), a int[], f float8, b bit(4), tt time, u uuid, j jsonb default '{}', \"Wé\"\"ird\" text)",
        ddl: None,
        published: &[("CREATE", "public", "t1")],
        all: &[("CREATE", "public", "t1")],
    },
    DdlStep {
        sql: "create table other.hidden (id int primary key, x text)",
        ddl: None,
        published: &[],
        all: &[("CREATE", "other", "hidden")],
    },
    DdlStep {
        sql: "alter table t1 add column z bigint not null default 0",
        ddl: None,
        published: &[("ALTER", "public", "t1")],
        all: &[("ALTER", "public", "t1")],
    },
    DdlStep {
        sql: "alter table t1 alter column v type varchar(20)",
        ddl: None,
        published: &[("ALTER", "public", "t1")],
        all: &[("ALTER", "public", "t1")],
    },
    DdlStep {
        sql: "alter table t1 alter column v set not null",
        ddl: None,
        published: &[("ALTER", "public", "t1")],
        all: &[("ALTER", "public", "t1")],
    },
    DdlStep {
        sql: "alter table t1 drop column b",
        ddl: None,
        published: &[("ALTER", "public", "t1")],
        all: &[("ALTER", "public", "t1")],
    },
    DdlStep {
        sql: "create table p (id int, k int not null, v text, primary key (id, k)) partition by range (k)",
        ddl: None,
        published: &[("CREATE", "public", "p")],
        all: &[("CREATE", "public", "p")],
    },
    DdlStep {
        sql: "create table p_a partition of p for values from (0) to (100)",
        ddl: None,
        published: &[("ALTER", "public", "p")],
        all: &[("CREATE", "public", "p_a")],
    },
    DdlStep {
        sql: "alter table p add column w numeric",
        ddl: None,
        published: &[("ALTER", "public", "p")],
        all: &[("ALTER", "public", "p"), ("ALTER", "public", "p_a")],
    },
    DdlStep {
        sql: "create table t2 as select 1 as id, 'a'::text as v",
        ddl: Some("create table t2 as select 1 as id, '[redacted]'::text as v"),
        published: &[("CREATE", "public", "t2")],
        all: &[("CREATE", "public", "t2")],
    },
    DdlStep {
        sql: "create table t3 (id int not null, x numeric, at timestamp(3)[], c char(4))",
        ddl: None,
        published: &[("CREATE", "public", "t3")],
        all: &[("CREATE", "public", "t3")],
    },
    DdlStep {
        sql: "alter table t3 add primary key (id)",
        ddl: None,
        published: &[("ALTER", "public", "t3")],
        all: &[("ALTER", "public", "t3")],
    },
    DdlStep {
        sql: "alter table other.hidden add column y int",
        ddl: None,
        published: &[],
        all: &[("ALTER", "other", "hidden")],
    },
    DdlStep {
        sql: "alter table other.narrow add column more int",
        ddl: None,
        published: &[("ALTER", "other", "narrow")],
        all: &[("ALTER", "other", "narrow")],
    },
    DdlStep {
        sql: "alter table other.narrow alter column shown set not null",
        ddl: None,
        published: &[("ALTER", "other", "narrow")],
        all: &[("ALTER", "other", "narrow")],
    },
    DdlStep {
        sql: TYPES_TABLE,
        ddl: None,
        published: &[("CREATE", "public", "types")],
        all: &[("CREATE", "public", "types")],
    },
    DdlStep {
        sql: "create index on t1 (v)",
        ddl: None,
        published: &[("ALTER", "public", "t1")],
        all: &[("ALTER", "public", "t1")],
    },
    DdlStep {
        sql: "drop table t2",
        ddl: None,
        published: &[("DROP", "public", "t2")],
        all: &[("DROP", "public", "t2")],
    },
    DdlStep {
        sql: "drop table p",
        ddl: None,
        published: &[("DROP", "public", "p"), ("DROP", "public", "p_a")],
        all: &[("DROP", "public", "p"), ("DROP", "public", "p_a")],
    },
    DdlStep {
        sql: "drop table other.hidden",
        ddl: None,
        published: &[],
        all: &[("DROP", "other", "hidden")],
    },
];

/// A replica table as the comparison sees it: each column's name, type
/// (`format_type`) and whether it takes NULL (a domain's NOT NULL
/// counted), and the primary key's columns in key order.
fn table_shape(
    c: &mut postgres::Client,
    schema: &str,
    table: &str,
    columns: Option<&[String]>,
) -> Value {
    let rel = format!(
        "{}.{}",
        pubjson_e2e::ddl_replica::quote_ident(schema),
        pubjson_e2e::ddl_replica::quote_ident(table)
    );
    let cols: Vec<Value> = c
        .query(
            "select a.attname::text, format_type(a.atttypid, a.atttypmod),
                    a.attnotnull or (t.typtype = 'd' and t.typnotnull)
               from pg_attribute a join pg_type t on t.oid = a.atttypid
              where a.attrelid = $1::text::regclass and a.attnum > 0 and not a.attisdropped
              order by a.attnum",
            &[&rel],
        )
        .expect("columns")
        .iter()
        .filter(|r| columns.is_none_or(|list| list.contains(&r.get::<_, String>(0))))
        .map(|r| {
            json!([
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, bool>(2)
            ])
        })
        .collect();
    let key: Vec<String> = c
        .query(
            "select a.attname::text from pg_index i, unnest(i.indkey) with ordinality k(attnum, n)
               join pg_attribute a on a.attnum = k.attnum
              where i.indrelid = $1::text::regclass and i.indisprimary and a.attrelid = i.indrelid
              order by k.n",
            &[&rel],
        )
        .expect("primary key")
        .iter()
        .map(|r| r.get(0))
        .collect();
    json!({"columns": cols, "key": key})
}

/// One DDL step's xid and the tables Debezium describes for it, with the
/// publications and without.
type ExpectedChange = (u32, Vec<Value>, Vec<Value>);

/// DDL events as Debezium's schema change events (the shape of its other
/// connectors; its PostgreSQL connector writes none), checked against the
/// catalog through Debezium 3.6's own classes: after every statement,
/// `e2e/debezium/describe.py` describes each changed table as Debezium's
/// PostgreSQL connector describes it to itself while streaming and
/// serializes it with `ConnectTableChangeSerializer` and `JsonConverter`;
/// every schema change record's topic, key, `source`, `databaseName`,
/// `schemaName`, `ddl` and `tableChanges` must be what was expected, and
/// with schemas its key and value schemas Debezium's `SchemaFactory`'s.
/// Through a publication filtering tables (a schema, partitions as their
/// root, a column list) and without one. And the consumer docs/debezium.md
/// describes, fed the records step by step, keeps a replica's tables equal
/// to the source's.
#[test]
fn ddl_events() {
    let cluster = DebeziumCluster::start("debezium-ddl");
    let server = cluster.server();
    let db = "dbz_ddl";
    let _ = server.drop_database(db);
    let _ = server.drop_database("dbz_ddl_replica");
    exec(
        &mut server.connect("postgres"),
        &format!("create database {db}"),
    );
    exec(
        &mut server.connect("postgres"),
        "create database dbz_ddl_replica",
    );
    let mut c = server.connect(db);
    c.batch_execute(DDL_SETUP).expect("setup");
    let mut replica = server.connect("dbz_ddl_replica");
    replica
        .batch_execute(
            "create schema other; create extension hstore; create type mood as enum ('a', 'b');
             create domain posint as int not null; create domain shorttext as varchar(5);",
        )
        .expect("the replica's types");
    exec(
        &mut c,
        "select pg_create_logical_replication_slot('dbz_ddl', 'pubjson')",
    );
    exec(
        &mut c,
        "select pg_create_logical_replication_slot('dbz_ddl_replica', 'pubjson')",
    );
    let mut describer = TableDescriber::start(&cluster, db);
    let publications = "dbz_pub,dbz_narrow";
    let publication_of = |schema: &str| {
        if schema == "other" {
            "dbz_narrow"
        } else {
            "dbz_pub"
        }
    };
    let decode =
        |c: &mut postgres::Client, slot: &str, get: bool, published: bool, schemas: bool| {
            let mut opts = vec!["format-version", "debezium", "topic.prefix", TOPIC_PREFIX];
            opts.extend(if published {
                ["publication_names", publications]
            } else {
                ["add-tables", "*.*"]
            });
            opts.extend(["schemas.enable", if schemas { "true" } else { "false" }]);
            let texts = if get {
                pubjson_e2e::get_texts(c, slot, &opts)
            } else {
                pubjson_e2e::peek_texts(c, slot, &opts)
            };
            pubjson_e2e::json_lines(&texts)
        };
    let mut replicated = SchemaChangeReplica::default();
    // Per step: its xid, and the described tables, with the publications
    // and without.
    let mut expected: Vec<ExpectedChange> = Vec::new();
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    for step in DDL_STEPS {
        let mut t = c.transaction().expect("begin");
        t.batch_execute(step.sql)
            .unwrap_or_else(|e| panic!("{}: {}", step.sql, pubjson_e2e::describe_error(&e)));
        let xid: i64 = t
            .query_one("select txid_current()", &[])
            .expect("xid")
            .get(0);
        t.commit().expect("commit");
        let mut describe = |changes: &[(&str, &str, &str)], published: bool| -> Vec<Value> {
            changes
                .iter()
                .map(|&(kind, schema, table)| {
                    let id = format!("\"{schema}\".\"{}\"", table.replace('"', "\"\""));
                    if kind == "DROP" {
                        return json!({"type": "DROP", "id": id, "table": null});
                    }
                    let d = describer.describe(
                        schema,
                        table,
                        published.then(|| publication_of(schema)),
                        kind,
                    );
                    assert_eq!(d["payload"]["id"], json!(id));
                    d["payload"].clone()
                })
                .collect()
        };
        let published = describe(step.published, true);
        let all = describe(step.all, false);
        expected.push((xid as u32, published, all));

        // The replica's consumer, fed this step's records.
        for r in decode(&mut c, "dbz_ddl_replica", true, true, true) {
            replicated.apply(&mut replica, TOPIC_PREFIX, &r);
        }
        let source_tables: Vec<(String, String, Option<Vec<String>>)> = c
            .query(
                "select schemaname::text, tablename::text, attnames::text[] from pg_publication_tables
                  where pubname = any(string_to_array($1, ',')) order by 1, 2",
                &[&publications],
            )
            .expect("published tables")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let replica_tables: Vec<(String, String)> = replica
            .query(
                "select n.nspname::text, c.relname::text from pg_class c join pg_namespace n on n.oid = c.relnamespace
                  where c.relkind in ('r', 'p') and n.nspname in ('public', 'other') order by 1, 2",
                &[],
            )
            .expect("replica tables")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        // A table the consumer has not seen a schema change of yet (other.narrow before
        // its first ALTER) is not on the replica.
        let seen: Vec<(String, String, Option<Vec<String>>)> = source_tables
            .into_iter()
            .filter(|(s, t, _)| {
                replica_tables.contains(&(s.clone(), t.clone())) || !(s == "other" && t == "narrow")
            })
            .collect();
        assert_eq!(
            seen.iter()
                .map(|(s, t, _)| (s.clone(), t.clone()))
                .collect::<Vec<_>>(),
            replica_tables,
            "after {}: the replica's tables",
            step.sql
        );
        for (schema, table, columns) in &seen {
            assert_eq!(
                table_shape(&mut replica, schema, table, None),
                table_shape(&mut c, schema, table, columns.as_deref()),
                "after {}: {schema}.{table} on the replica",
                step.sql
            );
        }
    }

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as i64;
    let mut checked = 0;
    for published in [true, false] {
        let without = decode(&mut c, "dbz_ddl", false, published, false);
        let with = decode(&mut c, "dbz_ddl", false, published, true);
        assert_eq!(without.len(), with.len());
        let changes: Vec<(&Value, &Value)> = without
            .iter()
            .zip(&with)
            .filter(|(r, _)| r["destination"] == TOPIC_PREFIX)
            .collect();
        let wanted: Vec<(usize, &ExpectedChange)> = expected
            .iter()
            .enumerate()
            .filter(|(_, (_, p, a))| !(if published { p } else { a }).is_empty())
            .collect();
        assert_eq!(
            changes.len(),
            wanted.len(),
            "schema change records (published: {published})"
        );
        let mut last_lsn = 0;
        for ((plain, schemas), (step, (xid, p, a))) in changes.into_iter().zip(wanted) {
            let step_sql = DDL_STEPS[step].sql;
            let tables = if published { p } else { a };
            let what = format!("{step_sql} (published: {published})");
            assert_eq!(plain["key"], json!({"databaseName": db}), "{what}");
            let v = &plain["value"];
            let source = &v["source"];
            let lsn = source["lsn"].as_u64().expect("lsn");
            assert!(lsn > last_lsn, "{what}: source.lsn {lsn} after {last_lsn}");
            last_lsn = lsn;
            let names =
                |f: &dyn Fn(&Value) -> String| -> Vec<String> { tables.iter().map(f).collect() };
            let id_part = |t: &Value, i: usize| -> String {
                let (s, n) = pubjson_e2e::debezium_replica::id_parts(t["id"].as_str().expect("id"));
                if i == 0 {
                    s
                } else {
                    n
                }
            };
            let mut schemas_named: Vec<String> = Vec::new();
            for s in names(&|t| id_part(t, 0)) {
                if !schemas_named.contains(&s) {
                    schemas_named.push(s);
                }
            }
            let ts_us = source["ts_us"].as_i64().expect("ts_us");
            assert_eq!(
                source,
                &json!({"version": source["version"], "connector": "postgresql", "name": TOPIC_PREFIX,
                        "ts_ms": ts_us.div_euclid(1000), "snapshot": "false", "db": db,
                        "sequence": source["sequence"], "ts_us": ts_us, "ts_ns": ts_us * 1000,
                        "schema": schemas_named.join(","), "table": names(&|t| id_part(t, 1)).join(","),
                        "txId": xid, "lsn": lsn, "xmin": null, "origin": null, "origin_lsn": null}),
                "{what}: source"
            );
            assert!(source["version"]
                .as_str()
                .is_some_and(|v| v.starts_with("pubjson-")));
            let sequence: Value =
                serde_json::from_str(source["sequence"].as_str().expect("sequence"))
                    .expect("sequence is JSON");
            assert_eq!(sequence[1], json!(lsn.to_string()), "{what}: sequence");
            assert!(
                ts_us / 1000 >= started_ms - 1000 && ts_us / 1000 <= now_ms,
                "{what}: commit time"
            );
            let ts_ms = v["ts_ms"].as_i64().expect("ts_ms");
            assert!(
                ts_ms >= started_ms && ts_ms <= now_ms + 60_000,
                "{what}: ts_ms {ts_ms}"
            );
            let want = json!({"source": source, "ts_ms": ts_ms, "databaseName": db,
                              "schemaName": schemas_named.join(","),
                              "ddl": DDL_STEPS[step].ddl.unwrap_or(step_sql),
                              "tableChanges": tables});
            assert_eq!(v, &want, "{what}: {:#?}", differences(&want, v));
            // With schemas: the converter's envelope, Debezium's schemas.
            assert_eq!(
                schemas["key"],
                json!({"schema": describer.key_schema, "payload": {"databaseName": db}}),
                "{what}: key with schemas"
            );
            assert_eq!(
                schemas["value"]["schema"],
                describer.value_schema,
                "{what}: value schema: {:#?}",
                differences(&describer.value_schema, &schemas["value"]["schema"])
            );
            let mut payload = schemas["value"]["payload"].clone();
            payload["ts_ms"] = json!(ts_ms);
            assert_eq!(&payload, v, "{what}: payload with schemas");
            checked += 1;
        }
    }
    eprintln!(
        "ddl_events: {checked} schema change records checked against Debezium's descriptions"
    );
    drop(describer);
    drop(replica);
    drop(c);
    let _ = server.drop_database("dbz_ddl_replica");
    let _ = server.drop_database(db);
}

/// Debezium's keys: a primary key in its own order (not the columns'),
/// and without one the first unique index by name whose columns are all
/// plain columns (a partial one too, INCLUDE columns with it; an
/// expression index is passed over; a clustered one comes first), so that
/// an update of such a key is a delete, its tombstone and a create; and a
/// domain's NOT NULL in the schemas.
#[test]
fn keys_and_nullability() {
    let cluster = DebeziumCluster::start("debezium-keys");
    let scenario = Scenario {
        database: "dbz_keys",
        database_options: "",
        setup: r#"
create domain nn as int not null;
create table pk_order (a int, b text, c int, primary key (c, a));
create table by_name (a int not null, b text, c int not null, d nn);
create unique index by_name_z on by_name (c);
create unique index by_name_a on by_name (a, b);
alter table by_name replica identity full;
create table partial (a int not null, b int);
create unique index partial_b on partial (b) include (a) where b > 0;
alter table partial replica identity full;
create table expression (a int not null, b int);
create unique index expression_a on expression ((b + 1));
create unique index expression_b on expression (a);
create table clustered (a int not null, b int not null);
create unique index clustered_z on clustered (b);
create unique index clustered_a on clustered (a);
cluster clustered using clustered_z;
alter table clustered replica identity full;
create publication pub for all tables;
"#,
        publication: "pub",
        workload: r#"
insert into pk_order values (1, 'x', 3);
update pk_order set b = 'y';
update pk_order set a = 2;
delete from pk_order;
insert into by_name values (1, 'x', 2, 3);
update by_name set c = 5;
update by_name set b = 'y';
delete from by_name;
insert into partial values (1, 2);
update partial set b = 3;
insert into expression values (1, 2);
insert into clustered values (1, 2);
update clustered set a = 5;
update clustered set b = 6;
delete from clustered;
"#,
        runs: vec![
            Run::new("schemas", &[]),
            Run::new("payload", &[("schemas.enable", "false")]),
        ],
    };
    let captured = scenario.capture(&cluster);
    let compared = assert_runs_equal(&captured);
    // The keys' fields in Debezium's order: JSON objects compare equal
    // in any order, Kafka's key bytes do not.
    let (_, debezium, pubjson) = &captured.runs[0];
    let fields =
        |r: &pubjson_e2e::debezium::Record| r.key.get("schema").map(|s| s["fields"].clone());
    for (d, p) in debezium.iter().zip(pubjson) {
        assert_eq!(fields(d), fields(p), "{}", d.destination);
    }
    assert_eq!(
        debezium[0].key["schema"]["fields"],
        json!([{"type": "int32", "optional": false, "field": "c"},
               {"type": "int32", "optional": false, "field": "a"}])
    );
    report("keys_and_nullability", &captured, compared);
}
