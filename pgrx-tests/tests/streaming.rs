//! Streaming of in-progress transactions and two-phase commit.
//!
//! Streaming is forced with `logical_decoding_work_mem = 64kB` in the
//! decoding session. Each test replays pubjson's output the way a consumer
//! would (the algorithm documented in the README: buffer streamed changes
//! per top-level transaction, drop what an `A` object aborts, apply at `C`,
//! hold prepared transactions until `CP`/`RP`) and checks that the result is
//! exactly the committed table contents.

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::time::Duration;

use pubjson_e2e::{complete_lines, pg_bin, pg_env, scratch_dir, wait_for, SlotGuard, TestDb};
use serde_json::Value;

/// Table contents: id -> (v, big).
type Model = BTreeMap<i64, (Option<String>, Option<String>)>;

fn str_value(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A change in a form both formats reduce to.
#[derive(Debug, Clone)]
struct Change {
    action: char,
    /// New row: column -> value (unchanged TOAST columns absent).
    columns: BTreeMap<String, Option<String>>,
    /// Old row's key.
    key: Option<i64>,
}

impl Change {
    fn apply(&self, model: &mut Model) {
        let id_of = |cols: &BTreeMap<String, Option<String>>| -> i64 {
            cols.get("id")
                .cloned()
                .flatten()
                .expect("id column")
                .parse()
                .expect("numeric id")
        };
        match self.action {
            'I' => {
                let id = id_of(&self.columns);
                let row = (
                    self.columns.get("v").cloned().flatten(),
                    self.columns.get("big").cloned().flatten(),
                );
                assert!(
                    model.insert(id, row).is_none(),
                    "INSERT of existing id {id}"
                );
            }
            'U' => {
                let id = id_of(&self.columns);
                let old_id = self.key.unwrap_or(id);
                let old = model
                    .remove(&old_id)
                    .unwrap_or_else(|| panic!("UPDATE of missing id {old_id}"));
                let v = if self.columns.contains_key("v") {
                    self.columns["v"].clone()
                } else {
                    old.0
                };
                let big = if self.columns.contains_key("big") {
                    self.columns["big"].clone()
                } else {
                    old.1
                };
                model.insert(id, (v, big));
            }
            'D' => {
                let id = self.key.expect("DELETE carries its key");
                assert!(model.remove(&id).is_some(), "DELETE of missing id {id}");
            }
            other => panic!("unexpected action {other}"),
        }
    }
}

fn v2_change(obj: &Value) -> Change {
    let action = obj["action"]
        .as_str()
        .expect("action")
        .chars()
        .next()
        .expect("letter");
    let mut columns = BTreeMap::new();
    if let Some(cols) = obj["columns"].as_array() {
        for c in cols {
            columns.insert(
                c["name"].as_str().expect("name").to_string(),
                str_value(&c["value"]),
            );
        }
    }
    let key = obj["identity"].as_array().and_then(|ids| {
        ids.iter()
            .find(|c| c["name"] == "id")
            .and_then(|c| c["value"].as_i64())
    });
    Change {
        action,
        columns,
        key,
    }
}

fn v1_change(obj: &Value) -> Change {
    let action = match obj["kind"].as_str().expect("kind") {
        "insert" => 'I',
        "update" => 'U',
        "delete" => 'D',
        other => panic!("unexpected kind {other}"),
    };
    let mut columns = BTreeMap::new();
    if let (Some(names), Some(values)) = (
        obj["columnnames"].as_array(),
        obj["columnvalues"].as_array(),
    ) {
        for (n, v) in names.iter().zip(values) {
            columns.insert(n.as_str().expect("name").to_string(), str_value(v));
        }
    }
    let key = obj["oldkeys"]["keynames"].as_array().and_then(|names| {
        names
            .iter()
            .position(|n| n == "id")
            .and_then(|i| obj["oldkeys"]["keyvalues"][i].as_i64())
    });
    Change {
        action,
        columns,
        key,
    }
}

/// What the consumer saw, beyond the final data.
#[derive(Debug, Default)]
struct ReplayStats {
    stream_blocks: usize,
    streamed_commits: usize,
    subxact_aborts: usize,
    txn_aborts: usize,
    prepares: usize,
    commit_prepared: usize,
    rollback_prepared: usize,
}

/// Applies a format-2 stream to `model`, as documented in the README.
fn replay_v2(lines: &[String], model: &mut Model) -> ReplayStats {
    let mut stats = ReplayStats::default();
    // Streamed changes per top-level xid: (subxid, change).
    let mut pending: HashMap<u64, Vec<(u64, Change)>> = HashMap::new();
    // Changes of the transaction being committed (B..C) or prepared (B..P).
    let mut current: Vec<Change> = Vec::new();
    let mut prepared: HashMap<String, Vec<Change>> = HashMap::new();
    let mut block: Option<u64> = None;
    for line in lines {
        let obj: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("invalid JSON {e}: {line}"));
        let xid = obj["xid"].as_u64();
        match obj["action"].as_str().expect("action") {
            "S" => {
                assert!(block.is_none(), "nested S");
                block = xid;
                stats.stream_blocks += 1;
            }
            "E" => {
                assert_eq!(block, xid, "E closes another block");
                block = None;
            }
            "B" => current.clear(),
            "I" | "U" | "D" => {
                let change = v2_change(&obj);
                match block {
                    Some(top) => pending
                        .entry(top)
                        .or_default()
                        .push((xid.expect("streamed change has xid"), change)),
                    None => current.push(change),
                }
            }
            "C" if obj["streamed"] == true => {
                stats.streamed_commits += 1;
                for (_, c) in pending.remove(&xid.expect("xid")).unwrap_or_default() {
                    c.apply(model);
                }
            }
            "C" => {
                for c in current.drain(..) {
                    c.apply(model);
                }
            }
            "A" => {
                let top = xid.expect("xid");
                let sub = obj["subxid"].as_u64().expect("subxid");
                if sub == top {
                    stats.txn_aborts += 1;
                    pending.remove(&top);
                } else {
                    stats.subxact_aborts += 1;
                    if let Some(list) = pending.get_mut(&top) {
                        list.retain(|(x, _)| *x != sub);
                    }
                }
            }
            "P" => {
                stats.prepares += 1;
                let gid = obj["gid"].as_str().expect("gid").to_string();
                let changes = if obj["streamed"] == true {
                    pending
                        .remove(&xid.expect("xid"))
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(_, c)| c)
                        .collect()
                } else {
                    std::mem::take(&mut current)
                };
                prepared.insert(gid, changes);
            }
            "CP" => {
                stats.commit_prepared += 1;
                for c in prepared
                    .remove(obj["gid"].as_str().expect("gid"))
                    .expect("prepared before")
                {
                    c.apply(model);
                }
            }
            "RP" => {
                stats.rollback_prepared += 1;
                prepared.remove(obj["gid"].as_str().expect("gid"));
            }
            "M" | "T" => {}
            other => panic!("unexpected action {other}: {line}"),
        }
    }
    assert!(block.is_none(), "stream ended inside a block");
    assert!(
        pending.is_empty(),
        "streamed transactions never finished: {:?}",
        pending.keys().collect::<Vec<_>>()
    );
    stats
}

/// Applies a format-1 stream (block documents, transaction documents and
/// the shared control objects) to `model`.
fn replay_v1(docs: &[String], model: &mut Model) -> ReplayStats {
    let mut stats = ReplayStats::default();
    let mut pending: HashMap<u64, Vec<(u64, Change)>> = HashMap::new();
    let mut last_txn: Vec<Change> = Vec::new();
    let mut prepared: HashMap<String, Vec<Change>> = HashMap::new();
    for doc in docs {
        let obj: Value =
            serde_json::from_str(doc).unwrap_or_else(|e| panic!("invalid JSON {e}: {doc}"));
        let xid = obj["xid"].as_u64();
        let action = obj["action"].as_str();
        // A transaction document is committed, unless the object right
        // after it is its PREPARE.
        if action.is_some() && action != Some("P") {
            for c in std::mem::take(&mut last_txn) {
                c.apply(model);
            }
        }
        match action {
            Some("S") => {
                stats.stream_blocks += 1;
                let top = xid.expect("xid");
                for el in obj["change"].as_array().expect("change array") {
                    let sub = el["xid"].as_u64().expect("streamed element has xid");
                    if el["kind"] != "message" {
                        pending.entry(top).or_default().push((sub, v1_change(el)));
                    }
                }
            }
            Some("C") => {
                stats.streamed_commits += 1;
                for (_, c) in pending.remove(&xid.expect("xid")).unwrap_or_default() {
                    c.apply(model);
                }
            }
            Some("A") => {
                let top = xid.expect("xid");
                let sub = obj["subxid"].as_u64().expect("subxid");
                if sub == top {
                    stats.txn_aborts += 1;
                    pending.remove(&top);
                } else {
                    stats.subxact_aborts += 1;
                    if let Some(list) = pending.get_mut(&top) {
                        list.retain(|(x, _)| *x != sub);
                    }
                }
            }
            Some("P") => {
                stats.prepares += 1;
                let gid = obj["gid"].as_str().expect("gid").to_string();
                let changes = if obj["streamed"] == true {
                    pending
                        .remove(&xid.expect("xid"))
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(_, c)| c)
                        .collect()
                } else {
                    std::mem::take(&mut last_txn)
                };
                prepared.insert(gid, changes);
            }
            Some("CP") => {
                stats.commit_prepared += 1;
                for c in prepared
                    .remove(obj["gid"].as_str().expect("gid"))
                    .expect("prepared before")
                {
                    c.apply(model);
                }
            }
            Some("RP") => {
                stats.rollback_prepared += 1;
                prepared.remove(obj["gid"].as_str().expect("gid"));
            }
            Some(other) => panic!("unexpected action {other}"),
            None => {
                for c in std::mem::take(&mut last_txn) {
                    c.apply(model);
                }
                last_txn = obj["change"]
                    .as_array()
                    .expect("change array")
                    .iter()
                    .filter(|el| el["kind"] != "message")
                    .map(v1_change)
                    .collect();
            }
        }
    }
    for c in last_txn {
        c.apply(model);
    }
    assert!(pending.is_empty(), "streamed transactions never finished");
    stats
}

fn table_model(db: &mut TestDb, table: &str) -> Model {
    let rows = db
        .conn
        .client
        .query(
            &format!("select id::int8, v, big from {table} order by id"),
            &[],
        )
        .expect("select table");
    rows.iter()
        .map(|r| (r.get::<_, i64>(0), (r.get(1), r.get(2))))
        .collect()
}

/// The big-transaction workload, with `tag` keeping ids apart.
fn workload(db: &mut TestDb, table: &str, second: &mut postgres::Client) {
    db.exec(&format!(
        "create table {table} (id int primary key, v text, big text);
         alter table {table} alter column big set storage external"
    ));
    // A committed transaction with a rolled-back subtransaction and a
    // nested savepoint, large enough to be streamed in many blocks.
    db.exec(&format!(
        "begin;
         insert into {table} select i, 'base ' || i, null from generate_series(1, 3000) i;
         savepoint s1;
         insert into {table} select i, 'rolled back', null from generate_series(3001, 4000) i;
         savepoint s2;
         update {table} set v = 'inner' where id <= 100;
         rollback to savepoint s1;
         savepoint s3;
         update {table} set v = 'kept ' || id where id % 7 = 0;
         release savepoint s3;
         delete from {table} where id % 11 = 0;
         commit"
    ));
    // Two large transactions interleaved from two sessions.
    db.exec(&format!(
        "begin; insert into {table} select i, 'one', null from generate_series(10001, 11500) i"
    ));
    second
        .batch_execute(&format!(
            "begin; insert into {table} select i, 'two', null from generate_series(20001, 21500) i"
        ))
        .expect("second session");
    db.exec(&format!(
        "insert into {table} select i, 'one b', null from generate_series(11501, 12500) i"
    ));
    second
        .batch_execute(&format!(
            "update {table} set v = 'two b' where id between 20001 and 20500; commit"
        ))
        .expect("second session commit");
    db.exec("commit");
    // A large transaction that finally aborts.
    db.exec(&format!(
        "begin; insert into {table} select i, 'aborted', null from generate_series(30001, 36000) i; rollback"
    ));
    // TOAST values (incompressible, stored out of line) inside streamed blocks.
    db.exec(&format!(
        "begin;
         insert into {table} select i, 'toast', (select string_agg(md5(i::text || g::text), '') from generate_series(1, 150) g)
           from generate_series(40001, 40060) i;
         insert into {table} select i, 'filler', null from generate_series(40100, 41500) i;
         update {table} set v = 'toast kept' where id between 40001 and 40030;
         commit"
    ));
    db.flush_wal();
}

fn peek(db: &mut TestDb, slot: &str, options: &str) -> Vec<String> {
    let upto = db.upto_lsn.clone().expect("flush_wal first");
    db.exec("set logical_decoding_work_mem = '64kB'");
    let sql = format!(
        "select data from pg_logical_slot_peek_changes('{slot}', '{upto}', NULL, {options})"
    );
    let rows = db
        .conn
        .client
        .query(&sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    db.exec("reset logical_decoding_work_mem");
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

fn create_slot(db: &mut TestDb, name: &str, two_phase: bool) -> SlotGuard {
    db.exec(&format!(
        "select pg_create_logical_replication_slot('{name}', 'pubjson', false, {two_phase})"
    ));
    SlotGuard {
        names: vec![name.to_string()],
    }
}

fn second_session() -> postgres::Client {
    pubjson_e2e::connect().client
}

#[test]
fn streamed_format_2_replays_to_the_committed_data() {
    let mut db = TestDb::new("stream_v2");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, false);
    let mut second = second_session();
    workload(&mut db, &table, &mut second);
    let expected = table_model(&mut db, &table);

    let lines = peek(&mut db, &slot, "'format-version', '2', 'streaming', 'on'");
    let mut model = Model::new();
    let stats = replay_v2(&lines, &mut model);
    println!("format 2 streamed: {} lines, {stats:?}", lines.len());
    assert!(
        stats.stream_blocks >= 10,
        "too few stream blocks: {stats:?}"
    );
    assert!(stats.streamed_commits >= 3, "{stats:?}");
    assert!(
        stats.subxact_aborts >= 1,
        "no subtransaction abort was streamed: {stats:?}"
    );
    assert!(
        stats.txn_aborts >= 1,
        "no transaction abort was streamed: {stats:?}"
    );
    assert_eq!(model.len(), expected.len());
    assert!(model == expected, "replayed data differs from the table");

    // The same WAL without streaming gives the same data (and no S/A objects).
    let plain = peek(&mut db, &slot, "'format-version', '2'");
    let mut plain_model = Model::new();
    let plain_stats = replay_v2(&plain, &mut plain_model);
    assert_eq!(plain_stats.stream_blocks, 0);
    assert!(plain_model == expected);
}

#[test]
fn streamed_format_1_replays_to_the_committed_data() {
    let mut db = TestDb::new("stream_v1");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, false);
    let mut second = second_session();
    workload(&mut db, &table, &mut second);
    let expected = table_model(&mut db, &table);

    let docs = peek(&mut db, &slot, "'format-version', '1', 'streaming', 'on'");
    let mut model = Model::new();
    let stats = replay_v1(&docs, &mut model);
    println!("format 1 streamed: {} documents, {stats:?}", docs.len());
    assert!(
        stats.stream_blocks >= 10 && stats.subxact_aborts >= 1 && stats.txn_aborts >= 1,
        "{stats:?}"
    );
    assert!(model == expected, "replayed data differs from the table");
}

#[test]
fn streaming_applies_publication_row_filters() {
    let mut db = TestDb::new("stream_pub");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, false);
    db.exec(&format!(
        "create table {table} (id int primary key, v text, big text)"
    ));
    db.exec(&format!(
        "create publication {}_pub for table {table} where (id % 2 = 0)",
        db.schema
    ));
    db.exec(&format!(
        "begin;
         insert into {table} select i, 'x', null from generate_series(1, 4000) i;
         update {table} set id = id + 100001 where id <= 1000;
         delete from {table} where id between 2000 and 2100;
         commit"
    ));
    db.flush_wal();
    let options = format!(
        "'format-version', '2', 'publication_names', '{}_pub'",
        db.schema
    );
    let streamed = peek(&mut db, &slot, &format!("{options}, 'streaming', 'on'"));
    let plain = peek(&mut db, &slot, &options);
    let changes = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| {
                let mut v: Value = serde_json::from_str(l).expect("json");
                let action = v["action"].as_str().unwrap_or_default().to_string();
                ["I", "U", "D"].contains(&action.as_str()).then(|| {
                    v.as_object_mut().expect("object").remove("xid");
                    v.to_string()
                })
            })
            .collect()
    };
    let streamed_changes = changes(&streamed);
    assert!(
        streamed.iter().any(|l| l.starts_with("{\"action\":\"S\"")),
        "not streamed"
    );
    assert!(
        streamed_changes
            .iter()
            .any(|c| c.contains("\"transformedfrom\":\"U\"")),
        "no transformed UPDATE"
    );
    assert_eq!(
        streamed_changes,
        changes(&plain),
        "streamed changes differ from committed ones"
    );
    db.exec(&format!("drop publication {}_pub", db.schema));
}

#[test]
fn two_phase_with_and_without_streaming() {
    let mut db = TestDb::new("twophase");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, true);
    db.exec(&format!(
        "create table {table} (id int primary key, v text, big text)"
    ));
    let gid = |n: &str| format!("{}_{n}", db.schema);
    let (g1, g2, g3, g4) = (gid("g1"), gid("g2"), gid("g3"), gid("g4"));
    db.exec(&format!("begin; insert into {table} values (1, 'committed prepared', null); prepare transaction '{g1}'"));
    db.exec(&format!("commit prepared '{g1}'"));
    db.exec(&format!("begin; insert into {table} values (2, 'rolled back prepared', null); prepare transaction '{g2}'"));
    db.exec(&format!("rollback prepared '{g2}'"));
    db.exec(&format!(
        "begin; insert into {table} select i, 'big prepared', null from generate_series(100, 4000) i; prepare transaction '{g3}'"
    ));
    db.exec(&format!("commit prepared '{g3}'"));
    db.exec(&format!(
        "begin; insert into {table} select i, 'big rolled back', null from generate_series(5000, 9000) i; prepare transaction '{g4}'"
    ));
    db.exec(&format!("rollback prepared '{g4}'"));
    db.flush_wal();
    let expected = table_model(&mut db, &table);
    assert_eq!(expected.len(), 1 + 3901);

    for streaming in ["off", "on"] {
        let lines = peek(
            &mut db,
            &slot,
            &format!("'format-version', '2', 'streaming', '{streaming}'"),
        );
        let mut model = Model::new();
        let stats = replay_v2(&lines, &mut model);
        println!("two-phase, streaming {streaming}: {stats:?}");
        assert_eq!(
            (
                stats.prepares,
                stats.commit_prepared,
                stats.rollback_prepared
            ),
            (4, 2, 2),
            "{stats:?}"
        );
        if streaming == "on" {
            assert!(stats.stream_blocks > 0, "{stats:?}");
            assert!(lines
                .iter()
                .any(|l| l.contains("\"action\":\"P\"") && l.contains("\"streamed\":true")));
        }
        assert!(
            model == expected,
            "two-phase replay differs (streaming {streaming})"
        );
    }
    let docs = peek(&mut db, &slot, "'format-version', '1'");
    let mut model = Model::new();
    let stats = replay_v1(&docs, &mut model);
    assert_eq!(
        (
            stats.prepares,
            stats.commit_prepared,
            stats.rollback_prepared
        ),
        (4, 2, 2),
        "{stats:?}"
    );
    assert!(model == expected, "format-1 two-phase replay differs");
}

#[test]
fn streaming_through_pg_recvlogical() {
    let mut db = TestDb::new("stream_recv");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, false);
    let mut second = second_session();
    workload(&mut db, &table, &mut second);
    let expected = table_model(&mut db, &table);
    let end = db.upto_lsn.clone().expect("flushed");

    let dir = scratch_dir("stream_recv");
    let file = dir.join("out.json");
    let env = pg_env();
    // A walsender takes logical_decoding_work_mem from its startup options.
    let status = Command::new(pg_bin("pg_recvlogical"))
        .env("PGOPTIONS", "-c logical_decoding_work_mem=64kB")
        .args([
            "-h",
            &env.host,
            "-p",
            &env.port.to_string(),
            "-U",
            &env.user,
            "-d",
            &env.dbname,
        ])
        .args(["-S", &slot, "--start", "--no-loop", "-E", &end, "-f"])
        .arg(&file)
        .args(["-o", "format-version=2", "-o", "streaming"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("run pg_recvlogical");
    assert!(status.success(), "pg_recvlogical failed: {status}");
    wait_for("output file", Duration::from_secs(10), || file.exists());
    let lines = complete_lines(&file);
    let mut model = Model::new();
    let stats = replay_v2(&lines, &mut model);
    println!("pg_recvlogical streamed: {} lines, {stats:?}", lines.len());
    assert!(
        stats.stream_blocks >= 10 && stats.txn_aborts >= 1,
        "{stats:?}"
    );
    assert!(
        model == expected,
        "pg_recvlogical replay differs from the table"
    );
}

#[test]
fn two_phase_through_pg_recvlogical() {
    let mut db = TestDb::new("twophase_recv");
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, true);
    db.exec(&format!(
        "create table {table} (id int primary key, v text, big text)"
    ));
    let g = |n: &str| format!("{}_{n}", db.schema);
    let (g1, g2, g3) = (g("g1"), g("g2"), g("g3"));
    db.exec(&format!(
        "begin; insert into {table} values (1, 'one', null); prepare transaction '{g1}'"
    ));
    db.exec(&format!(
        "begin; insert into {table} values (2, 'two', null); prepare transaction '{g2}'"
    ));
    db.exec(&format!("commit prepared '{g1}'"));
    db.exec(&format!("rollback prepared '{g2}'"));
    db.exec(&format!(
        "begin; insert into {table} select i, 'big', null from generate_series(10, 3000) i; prepare transaction '{g3}'"
    ));
    db.exec(&format!("commit prepared '{g3}'"));
    db.flush_wal();
    let expected = table_model(&mut db, &table);
    let end = db.upto_lsn.clone().expect("flushed");

    for (name, streaming) in [("plain", false), ("streamed", true)] {
        // Each run reads the slot from its start: copy it first.
        let copy = format!("{slot}_{name}");
        db.exec(&format!(
            "select pg_copy_logical_replication_slot('{slot}', '{copy}')"
        ));
        let _copy_guard = SlotGuard {
            names: vec![copy.clone()],
        };
        let dir = scratch_dir(&format!("twophase_recv_{name}"));
        let file = dir.join("out.json");
        let env = pg_env();
        let mut cmd = Command::new(pg_bin("pg_recvlogical"));
        if streaming {
            cmd.env("PGOPTIONS", "-c logical_decoding_work_mem=64kB");
        }
        cmd.args([
            "-h",
            &env.host,
            "-p",
            &env.port.to_string(),
            "-U",
            &env.user,
            "-d",
            &env.dbname,
        ])
        .args(["-S", &copy, "--start", "--no-loop", "-E", &end, "-f"])
        .arg(&file)
        .args(["-o", "format-version=2", "-o", "two_phase"]);
        if streaming {
            cmd.args(["-o", "streaming"]);
        }
        let status = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("run pg_recvlogical");
        assert!(status.success(), "pg_recvlogical failed: {status}");
        let lines = complete_lines(&file);
        let mut model = Model::new();
        let stats = replay_v2(&lines, &mut model);
        println!("two-phase via pg_recvlogical ({name}): {stats:?}");
        assert_eq!(
            (
                stats.prepares,
                stats.commit_prepared,
                stats.rollback_prepared
            ),
            (3, 2, 1),
            "{stats:?}"
        );
        if streaming {
            assert!(stats.stream_blocks > 0, "{stats:?}");
        }
        assert!(
            model == expected,
            "two-phase replay through pg_recvlogical differs ({name})"
        );
    }
}
