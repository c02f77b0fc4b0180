//! Backfill through the slot (`CALL pubjson.backfill(t)`, docs/backfill.md):
//! the objects a consumer gets, convergence of a replica kept from the
//! stream alone while writers keep writing (through the SQL functions and
//! pg_recvlogical), a cancelled backfill resumed, a second one refused,
//! forged messages ignored, publications deciding the rows, errors.
//!
//! Each test has its own database `pubjson_bf_<name>`; slot creation is
//! serialized with the other suites.

use postgres::Client;
use pubjson_e2e::{
    complete_lines, describe_error, drop_slot, exec, one_row, rows, scratch_dir, serialize,
    sqlstate, wait_true, RecvLogical, SeededRng, Server,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

fn database(name: &str) -> (String, Client) {
    let dbname = format!("pubjson_bf_{name}");
    let client = Server::main().fresh_database_with_pubjson(&dbname);
    (dbname, client)
}

fn slot(c: &mut Client, name: &str) {
    let _serial = serialize();
    c.execute(
        "select pg_create_logical_replication_slot($1, 'pubjson')",
        &[&name],
    )
    .unwrap_or_else(|e| panic!("slot {name}: {}", describe_error(&e)));
}

/// Decodes with format 3 (plus `extra` options), consuming.
fn get(c: &mut Client, slot: &str, extra: &[&str]) -> Vec<Value> {
    exec(c, "select txid_current()");
    let mut opts: Vec<String> = vec!["format-version".into(), "3".into()];
    opts.extend(extra.iter().map(|s| s.to_string()));
    c.query(
        "select data from pg_logical_slot_get_changes($1, NULL, NULL, VARIADIC $2::text[])",
        &[&slot, &opts],
    )
    .unwrap_or_else(|e| panic!("get_changes: {}", describe_error(&e)))
    .iter()
    .map(|r| {
        let text: String = r.get(0);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    })
    .collect()
}

fn action(v: &Value) -> &str {
    v["action"].as_str().unwrap_or("?")
}

/// The table as a consumer keeps it: rows by `id`, applying I/U/D/T as
/// usual and F as an upsert (docs/backfill.md's algorithm).
#[derive(Default)]
struct Replica {
    rows: BTreeMap<i64, Map<String, Value>>,
    /// FE objects seen: (relation, rows).
    ends: Vec<(String, u64)>,
    starts: usize,
}

impl Replica {
    fn apply(&mut self, o: &Value) {
        let key = |row: &Value| row["id"].as_i64().expect("id");
        match action(o) {
            "F" | "I" => {
                let row = o["new"].as_object().expect("new").clone();
                self.rows.insert(key(&o["new"]), row);
            }
            "U" => {
                let from = if o["old"].is_object() {
                    key(&o["old"])
                } else {
                    key(&o["new"])
                };
                // A row not backfilled yet has no stored values: its F
                // comes later (docs/backfill.md, unchanged TOAST values).
                let mut row = self.rows.remove(&from).unwrap_or_default();
                for (column, value) in o["new"].as_object().expect("new") {
                    row.insert(column.clone(), value.clone());
                }
                self.rows.insert(key(&o["new"]), row);
            }
            "D" => {
                self.rows.remove(&key(&o["old"]));
            }
            "T" => self.rows.clear(),
            "FS" => self.starts += 1,
            "FE" => self.ends.push((
                o["table"].as_str().expect("table").to_string(),
                o["rows"].as_u64().expect("rows"),
            )),
            "B" | "C" | "R" | "M" => {}
            other => panic!("unexpected {other}: {o}"),
        }
    }
}

/// Fails naming the rows that differ (not the whole tables).
fn assert_same(
    what: &str,
    got: &BTreeMap<i64, Map<String, Value>>,
    expected: &BTreeMap<i64, Map<String, Value>>,
) {
    let differing: Vec<String> = expected
        .keys()
        .chain(got.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| got.get(k) != expected.get(k))
        .take(5)
        .map(|k| {
            let short =
                |row: Option<&Map<String, Value>>| pubjson_e2e::truncate(&format!("{row:?}"), 200);
            format!(
                "id {k}: got {} expected {}",
                short(got.get(k)),
                short(expected.get(k))
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "{what}: {} rows, {} expected; first differences:\n{}",
        got.len(),
        expected.len(),
        differing.join("\n")
    );
}

/// The table's rows as format 3 writes them.
fn table(c: &mut Client, sql: &str) -> BTreeMap<i64, Map<String, Value>> {
    rows(c, sql)
        .iter()
        .map(|r| {
            let row: Value = serde_json::from_str(&r.get::<_, String>(0)).expect("row json");
            (
                row["id"].as_i64().expect("id"),
                row.as_object().expect("row").clone(),
            )
        })
        .collect()
}

#[test]
fn the_documented_example() {
    let (_, mut c) = database("example");
    exec(
        &mut c,
        "create table orders (id int primary key, item text, qty int);
         insert into orders select i, 'item ' || i, i * 10 from generate_series(1, 5) i;",
    );
    slot(&mut c, "bf_example");
    exec(&mut c, "call pubjson.backfill('orders', chunk_rows => 2)");
    let objects = get(&mut c, "bf_example", &[]);
    let actions: Vec<&str> = objects.iter().map(action).collect();
    assert_eq!(
        actions,
        [
            "B", "FS", "R", "F", "F", "C", // chunk 1
            "B", "F", "F", "C", // chunk 2
            "B", "F", "FE", "C" // chunk 3: the last
        ],
        "{objects:#?}"
    );
    let f: Vec<&Value> = objects.iter().filter(|o| action(o) == "F").collect();
    assert_eq!(
        f[0]["new"],
        serde_json::json!({"id": 1, "item": "item 1", "qty": 10})
    );
    for o in &f {
        assert_eq!(o["schema"], "public");
        assert_eq!(o["table"], "orders");
        assert!(o.get("old").is_none(), "{o}");
    }
    let end = objects.iter().find(|o| action(o) == "FE").expect("FE");
    assert_eq!(end["rows"], 5);
    // C counts the objects of its transaction (F and the markers).
    assert_eq!(objects[5]["changes"], 3);
    // Formats 1 and 2 get nothing of it, the progress table included.
    exec(&mut c, "call pubjson.backfill('orders')");
    let wal2json: Vec<String> = rows(
        &mut c,
        "select data from pg_logical_slot_get_changes('bf_example', NULL, NULL, 'format-version', '2')",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(wal2json.is_empty(), "{wal2json:?}");
    let progress = one_row(
        &mut c,
        "select state, chunks, rows, last_key::text, pid is null from pubjson.backfills",
    );
    assert_eq!(progress.get::<_, String>(0), "finished");
    assert_eq!(progress.get::<_, i64>(1), 1);
    assert_eq!(progress.get::<_, i64>(2), 5);
    assert_eq!(progress.get::<_, String>(3), "{5}");
    assert!(progress.get::<_, bool>(4));
    drop_slot(&mut c, "bf_example");
}

/// One writer's random transactions, until `stop` is set: inserts, updates
/// of values, of TOAST values and of the key (upwards: see
/// docs/backfill.md on keys moved behind the backfill), deletes, rolled
/// back transactions and savepoints.
fn writer(dbname: &str, seed: u64, stop: &std::sync::atomic::AtomicBool) -> u64 {
    use std::sync::atomic::Ordering;
    let mut c = Server::main().connect(dbname);
    let mut rng = SeededRng::new(seed);
    let mut done = 0;
    let mut next_key = 100_000 + seed as i64 * 100_000;
    while !stop.load(Ordering::Relaxed) || done < 50 {
        let id = 1 + rng.below(3000) as i64;
        let sql = match rng.below(8) {
            0 => format!("insert into t values ({id}, 'new {done}', NULL) on conflict do nothing"),
            1 | 2 => format!("update t set v = 'upd {seed} {done}' where id = {id}"),
            3 => format!("update t set big = repeat(md5('{done}'), 120) where id = {id}"),
            4 => {
                next_key += 1;
                format!("update t set id = {next_key} where id = {id}")
            }
            5 => format!("delete from t where id = {id}"),
            6 => format!("begin; update t set v = 'rolled back' where id = {id}; rollback"),
            _ => format!(
                "begin; update t set v = 'kept {done}' where id = {id};
                 savepoint s; delete from t where id = {}; rollback to savepoint s;
                 insert into t values ({}, 'sp', NULL) on conflict do nothing; commit",
                id + 1,
                3000 + id
            ),
        };
        if let Err(e) = c.batch_execute(&sql) {
            // A key update can collide with a concurrent insert.
            assert_eq!(sqlstate(&e), "23505", "{sql}: {}", describe_error(&e));
            let _ = c.batch_execute("rollback");
        }
        done += 1;
    }
    done
}

#[test]
fn a_replica_from_the_stream_alone_converges_while_writers_write() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dbname, mut c) = database("converge");
    exec(
        &mut c,
        "create table t (id int primary key, v text, big text);
         alter table t alter big set storage external;
         insert into t select i, 'v' || i,
                case when i % 10 = 0 then repeat(md5(i::text), 120) end
           from generate_series(1, 2000) i;",
    );
    slot(&mut c, "bf_converge_sql");
    slot(&mut c, "bf_converge_recv");
    let dir = scratch_dir("backfill-converge");
    let file = dir.join("stream.jsonl");
    let mut recv = RecvLogical::start_in(
        &dbname,
        "bf_converge_recv",
        &file,
        &[("format-version", Some("3"))],
        &[],
    );
    let stop = AtomicBool::new(false);
    let written = std::thread::scope(|s| {
        let writers: Vec<_> = (1..=2)
            .map(|seed| {
                let (dbname, stop) = (&dbname, &stop);
                s.spawn(move || writer(dbname, seed, stop))
            })
            .collect();
        // Small chunks: the writers hit chunks in progress.
        let mut b = Server::main().connect(&dbname);
        exec(&mut b, "call pubjson.backfill('t', chunk_rows => 25)");
        stop.store(true, Ordering::Relaxed);
        writers
            .into_iter()
            .map(|w| w.join().expect("writer"))
            .sum::<u64>()
    });
    assert!(written >= 100, "{written}");
    let expected = table(&mut c, "select to_jsonb(t)::text from t");

    let mut sql_replica = Replica::default();
    for o in get(&mut c, "bf_converge_sql", &[]) {
        sql_replica.apply(&o);
    }
    assert_eq!(sql_replica.starts, 1);
    assert_eq!(sql_replica.ends.len(), 1);
    assert_same("SQL consumer", &sql_replica.rows, &expected);

    exec(
        &mut c,
        "select pg_logical_emit_message(true, 'bf-test', 'the end')",
    );
    recv.wait_received("the end", TIMEOUT);
    recv.stop();
    let mut recv_replica = Replica::default();
    for line in complete_lines(&file) {
        let o: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        recv_replica.apply(&o);
    }
    assert_same("pg_recvlogical consumer", &recv_replica.rows, &expected);
    drop_slot(&mut c, "bf_converge_sql");
    drop_slot(&mut c, "bf_converge_recv");
}

#[test]
fn a_cancelled_backfill_resumes_and_a_second_one_is_refused() {
    let (dbname, mut c) = database("resume");
    exec(
        &mut c,
        "create table t (id int primary key, v text);
         insert into t select i, 'v' || i from generate_series(1, 300) i;",
    );
    slot(&mut c, "bf_resume");
    // A writer holds row 150: the backfill waits at the chunk that reads it.
    let mut holder = Server::main().connect(&dbname);
    exec(
        &mut holder,
        "begin; select * from t where id = 150 for update",
    );
    let mut b = Server::main().connect(&dbname);
    let backfill_pid: i32 = one_row(&mut b, "select pg_backend_pid()").get(0);
    let running = std::thread::spawn(move || {
        b.batch_execute("call pubjson.backfill('t', chunk_rows => 20)")
            .map_err(|e| sqlstate(&e))
    });
    wait_true(
        &mut c,
        "the backfill waits for the held row",
        TIMEOUT,
        "select exists (select from pg_stat_activity where pid = $1 and wait_event_type = 'Lock')",
        &[&backfill_pid],
    );
    // Another session is refused while this one runs.
    let mut second = Server::main().connect(&dbname);
    let refused = second
        .batch_execute("call pubjson.backfill('t')")
        .expect_err("a second backfill");
    assert_eq!(sqlstate(&refused), "55006", "{}", describe_error(&refused));
    exec(&mut c, &format!("select pg_cancel_backend({backfill_pid})"));
    let outcome = running.join().expect("backfill thread");
    assert_eq!(outcome, Err("57014".to_string()));
    exec(
        &mut holder,
        "update t set v = 'while stopped' where id = 150; commit",
    );
    let stopped = one_row(
        &mut c,
        "select state, chunks, stopped, last_key::text from pubjson.backfills",
    );
    assert_eq!(stopped.get::<_, String>(0), "running");
    assert_eq!(stopped.get::<_, i64>(1), 7, "chunks up to the held row");
    assert!(stopped.get::<_, bool>(2));
    assert_eq!(stopped.get::<_, String>(3), "{140}");
    // Resumed from the last key: no second start, nothing lost.
    exec(&mut second, "call pubjson.backfill('t', chunk_rows => 20)");
    let mut replica = Replica::default();
    let objects = get(&mut c, "bf_resume", &[]);
    for o in &objects {
        replica.apply(o);
    }
    assert_eq!(replica.starts, 1);
    assert_eq!(replica.ends, [("t".to_string(), 300)]);
    let fs = objects.iter().filter(|o| action(o) == "F").count();
    assert_eq!(fs, 300, "each row once");
    assert_same(
        "resumed",
        &replica.rows,
        &table(&mut c, "select to_jsonb(t)::text from t"),
    );
    drop_slot(&mut c, "bf_resume");
}

#[test]
fn a_message_pubjson_did_not_write_is_ignored() {
    let (dbname, mut c) = database("forged");
    exec(
        &mut c,
        "create table t (id int primary key, v text);
         insert into t values (1, 'real');
         drop role if exists pubjson_bf_forger;
         create role pubjson_bf_forger login;
         grant select, update on t to pubjson_bf_forger;",
    );
    slot(&mut c, "bf_forged");
    exec(&mut c, "call pubjson.backfill('t')");
    let real = get(&mut c, "bf_forged", &[]);
    assert_eq!(real.iter().filter(|o| action(o) == "F").count(), 1);
    // Well-formed bytes of the layout (a row of t's row type is not even
    // needed to be refused), garbage, and a message written in the same
    // transaction as a real chunk: none is decoded.
    let relid: u32 = one_row(&mut c, "select 't'::regclass::oid").get(0);
    let mut forged = b"PJB1".to_vec();
    forged.extend_from_slice(&relid.to_le_bytes());
    forged.push(3);
    forged.extend_from_slice(&1u64.to_le_bytes());
    forged.extend_from_slice(&1u32.to_le_bytes());
    forged.extend_from_slice(&4u32.to_le_bytes());
    forged.extend_from_slice(b"junk");
    let mut forger = Server::main().connect_as(&dbname, "pubjson_bf_forger");
    for content in [forged.clone(), b"PJB1".to_vec(), b"anything".to_vec()] {
        forger
            .execute(
                "select pg_logical_emit_message(true, 'pubjson.backfill', $1::bytea)",
                &[&content],
            )
            .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    }
    let objects = get(&mut c, "bf_forged", &[]);
    assert!(
        objects
            .iter()
            .all(|o| !matches!(action(o), "F" | "FS" | "FE")),
        "{objects:#?}"
    );
    drop(forger);
    exec(
        &mut c,
        "drop owned by pubjson_bf_forger; drop role pubjson_bf_forger",
    );
    drop_slot(&mut c, "bf_forged");
}

#[test]
fn publications_decide_which_rows_each_slot_gets() {
    let (_, mut c) = database("publications");
    exec(
        &mut c,
        "create table t (id int primary key, v text, secret text);
         insert into t select i, 'v' || i, 's' || i from generate_series(1, 10) i;
         create table other (id int primary key);
         insert into other values (1);
         create publication bf_even for table t (id, v) where (id % 2 = 0);
         create publication bf_all for table t;
         create publication bf_other for table other;",
    );
    slot(&mut c, "bf_pub_even");
    slot(&mut c, "bf_pub_all");
    slot(&mut c, "bf_pub_other");
    exec(&mut c, "call pubjson.backfill('t')");
    let f = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| action(o) == "F")
            .map(|o| o["new"].clone())
            .collect()
    };
    let even = get(&mut c, "bf_pub_even", &["publication_names", "bf_even"]);
    let expected: Vec<Value> = (1..=10)
        .filter(|i| i % 2 == 0)
        .map(|i| serde_json::json!({"id": i, "v": format!("v{i}")}))
        .collect();
    assert_eq!(f(&even), expected);
    assert_eq!(
        f(&get(&mut c, "bf_pub_all", &["publication_names", "bf_all"])).len(),
        10
    );
    let other = get(&mut c, "bf_pub_other", &["publication_names", "bf_other"]);
    assert!(
        other
            .iter()
            .all(|o| !matches!(action(o), "F" | "FS" | "FE")),
        "{other:#?}"
    );
    for s in ["bf_pub_even", "bf_pub_all", "bf_pub_other"] {
        drop_slot(&mut c, s);
    }
}

#[test]
fn partitions_are_backfilled_one_by_one_and_published_via_the_root() {
    let (_, mut c) = database("partitions");
    exec(
        &mut c,
        "create table m (id int primary key, v text) partition by range (id);
         create table m1 partition of m for values from (1) to (100);
         create table m2 partition of m for values from (100) to (200);
         insert into m select i, 'v' || i from generate_series(1, 199, 7) i;
         create publication bf_root for table m with (publish_via_partition_root = true);",
    );
    slot(&mut c, "bf_parts");
    exec(&mut c, "call pubjson.backfill('m')");
    let objects = get(&mut c, "bf_parts", &["publication_names", "bf_root"]);
    let tables: Vec<&str> = objects
        .iter()
        .filter(|o| action(o) == "F")
        .map(|o| o["table"].as_str().expect("table"))
        .collect();
    assert_eq!(tables.len(), 29);
    assert!(tables.iter().all(|t| *t == "m"), "{tables:?}");
    let ends: Vec<&str> = objects
        .iter()
        .filter(|o| action(o) == "FE")
        .map(|o| o["table"].as_str().expect("table"))
        .collect();
    assert_eq!(ends, ["m1", "m2"]);
    drop_slot(&mut c, "bf_parts");
}

#[test]
fn bad_calls_are_refused_with_their_sqlstate() {
    let (dbname, mut c) = database("errors");
    exec(
        &mut c,
        "create table nokey (v text);
         create table t (id int primary key);
         create view vw as select 1 as id;
         create unlogged table u (id int primary key);
         drop role if exists pubjson_bf_reader;
         create role pubjson_bf_reader login;
         grant select on t to pubjson_bf_reader;",
    );
    let refused = |c: &mut Client, sql: &str, code: &str| {
        let e = c.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {}", describe_error(&e));
    };
    refused(&mut c, "call pubjson.backfill('nokey')", "55000");
    refused(&mut c, "call pubjson.backfill('vw')", "42809");
    refused(&mut c, "call pubjson.backfill('u')", "55000");
    refused(&mut c, "call pubjson.backfill('pg_class')", "42809");
    refused(&mut c, "call pubjson.backfill('missing')", "42P01");
    refused(
        &mut c,
        "call pubjson.backfill('t', chunk_rows => 0)",
        "22023",
    );
    refused(
        &mut c,
        "call pubjson.backfill('t', chunk_bytes => 10)",
        "22023",
    );
    refused(&mut c, "call pubjson.backfill(NULL)", "22004");
    // Chunks commit: not inside a transaction block.
    refused(&mut c, "begin; call pubjson.backfill('t')", "2D000");
    exec(&mut c, "rollback");
    // FOR SHARE needs UPDATE on the table as well as SELECT.
    let mut reader = Server::main().connect_as(&dbname, "pubjson_bf_reader");
    refused(&mut reader, "call pubjson.backfill('t')", "42501");
    // Nothing of a refused call stays behind as running.
    let left: i64 = one_row(
        &mut c,
        "select count(*) from pubjson.backfills where state = 'running' and not stopped",
    )
    .get(0);
    assert_eq!(left, 0);
    drop(reader);
    exec(
        &mut c,
        "drop owned by pubjson_bf_reader; drop role pubjson_bf_reader",
    );
}
