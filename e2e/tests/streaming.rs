//! Streaming of in-progress transactions and two-phase commit.
//!
//! Streaming is forced with `logical_decoding_work_mem = 64kB` in the
//! decoding session. Each test replays pubjson's output the way a consumer
//! would (the algorithm documented in docs/streaming.md: buffer streamed changes
//! per top-level transaction, drop what an `A` object aborts, apply at `C`,
//! hold prepared transactions until `CP`/`RP`; drop every stream buffer when
//! a new decoding session starts and a transaction's buffer at its
//! `"first":true`; skip commits at or before the last one applied) and
//! checks that the result is exactly the committed table contents, with no
//! buffer left over.
//!
//! Sessions: several `pg_logical_slot_get_changes` calls cut inside open
//! transactions; a prepared transaction streamed again by a later session
//! before its COMMIT PREPARED; and, on the reliability suite's private
//! cluster (`pubjson_e2e::reliability`), pg_recvlogical reconnecting from the
//! slot's confirmed position after the walsender is terminated
//! (`pg_terminate_backend`), SIGKILLed (the postmaster then restarts every
//! backend, as after a crash), or the server restarted with `-m immediate`,
//! each while two large transactions are open and streamed and two
//! prepared ones are held.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use pubjson_e2e::recvlogical::command_for_test_db;
use pubjson_e2e::{
    complete_lines, drop_slot, exec, one_string, scratch_dir, wait_for, RecvLogical, SlotGuard,
    TestDb,
};
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
    sessions: usize,
    stream_blocks: usize,
    streamed_commits: usize,
    subxact_aborts: usize,
    txn_aborts: usize,
    /// `A` objects with `"lsn":null`: a transaction cut off by a crash.
    crash_aborts: usize,
    prepares: usize,
    commit_prepared: usize,
    rollback_prepared: usize,
    /// Non-empty stream buffers dropped because a new session started.
    dropped_at_reconnect: usize,
    /// Non-empty stream buffers dropped at an `S` with `"first":true`.
    dropped_at_first: usize,
    /// Non-empty stream buffers dropped at the `CP`/`RP` of their xid.
    dropped_at_finish_prepared: usize,
    /// `S` with `"first":true` for a transaction an earlier session streamed.
    restreamed: usize,
    /// Commits (plain, streamed, `CP`, `RP`) at or before the last one
    /// applied: delivered again after a reconnect, skipped.
    duplicates: usize,
}

/// Whether the consumer is told when a new decoding session starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sessions {
    /// A new connection, a new pg_recvlogical run, a new SQL call.
    Seen,
    /// One output with the sessions run together, as pg_recvlogical writes
    /// it when it reconnects by itself.
    Unseen,
}

/// The consumer state both formats share, following docs/streaming.md's algorithm:
/// streamed changes buffered per top-level transaction, prepared
/// transactions held by gid, and the LSN of the last commit applied.
struct Consumer<'m> {
    model: &'m mut Model,
    stats: ReplayStats,
    sessions: Sessions,
    /// Streamed changes per top-level xid: (the change's own xid, change).
    pending: HashMap<u64, Vec<(u64, Change)>>,
    prepared: HashMap<String, Vec<Change>>,
    /// Commit LSN of the last transaction applied (or rolled back).
    last_commit: u64,
    /// Top-level xids with an `S` in the current session (checks `first`).
    streamed_in_session: HashSet<u64>,
    /// Top-level xids with an `S` in any session.
    streamed_ever: HashSet<u64>,
}

fn lsn_of(obj: &Value, key: &str) -> Option<u64> {
    obj[key].as_str().map(pubjson_e2e::lsn)
}

impl<'m> Consumer<'m> {
    fn new(model: &'m mut Model, sessions: Sessions) -> Self {
        Consumer {
            model,
            stats: ReplayStats::default(),
            sessions,
            pending: HashMap::new(),
            prepared: HashMap::new(),
            last_commit: 0,
            streamed_in_session: HashSet::new(),
            streamed_ever: HashSet::new(),
        }
    }

    /// Rule 1: a new session resends every transaction that was still open,
    /// from its first change, and sends no `A` for one that ended meanwhile
    /// (or was cut off by a crash): every stream buffer goes. Prepared
    /// transactions stay.
    fn new_session(&mut self) {
        self.stats.sessions += 1;
        self.stats.dropped_at_reconnect += self.pending.values().filter(|b| !b.is_empty()).count();
        self.pending.clear();
        self.streamed_in_session.clear();
    }

    fn apply(&mut self, changes: impl IntoIterator<Item = Change>) {
        for c in changes {
            c.apply(self.model);
        }
    }

    /// The delivery guarantee's deduplication: a commit whose LSN is not
    /// after the last one applied was applied before this reconnect.
    fn already_applied(&mut self, obj: &Value) -> bool {
        let Some(lsn) = lsn_of(obj, "lsn") else {
            // Without include-lsn a plain `C` has no LSN (one session only).
            return false;
        };
        if lsn <= self.last_commit {
            self.stats.duplicates += 1;
            return true;
        }
        self.last_commit = lsn;
        false
    }

    /// `S`: rule 2, a first block drops what an earlier session left.
    fn stream_start(&mut self, obj: &Value) -> u64 {
        let xid = obj["xid"].as_u64().expect("xid");
        let first = obj["first"].as_bool().expect("first");
        self.stats.stream_blocks += 1;
        if self.sessions == Sessions::Seen {
            // pubjson's promise: "first" is the session's first block of xid.
            assert_eq!(
                first,
                self.streamed_in_session.insert(xid),
                "\"first\" of transaction {xid} is wrong: {obj}"
            );
        }
        if first {
            if !self.streamed_ever.insert(xid) {
                self.stats.restreamed += 1;
            }
            if self.pending.remove(&xid).is_some_and(|b| !b.is_empty()) {
                self.stats.dropped_at_first += 1;
            }
        }
        xid
    }

    fn buffer(&mut self, top: u64, xid: u64, change: Change) {
        self.pending.entry(top).or_default().push((xid, change));
    }

    fn take_streamed(&mut self, top: u64) -> Vec<Change> {
        self.pending
            .remove(&top)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, c)| c)
            .collect()
    }

    /// An `A` or streamed `C` ends a transaction this session streamed.
    fn check_streamed_in_session(&self, obj: &Value) {
        if self.sessions == Sessions::Seen {
            let xid = obj["xid"].as_u64().expect("xid");
            assert!(
                self.streamed_in_session.contains(&xid),
                "{obj} for a transaction this session did not stream"
            );
        }
    }

    /// Plain `C` (outside a block): the transaction's changes.
    fn commit(&mut self, obj: &Value, changes: Vec<Change>) {
        if !self.already_applied(obj) {
            self.apply(changes);
        }
    }

    /// `C` with `"streamed":true`.
    fn streamed_commit(&mut self, obj: &Value) {
        self.check_streamed_in_session(obj);
        self.stats.streamed_commits += 1;
        let changes = self.take_streamed(obj["xid"].as_u64().expect("xid"));
        if !self.already_applied(obj) {
            self.apply(changes);
        }
    }

    /// `A`: the whole transaction, or one subtransaction's changes.
    fn abort(&mut self, obj: &Value) {
        self.check_streamed_in_session(obj);
        let top = obj["xid"].as_u64().expect("xid");
        let sub = obj["subxid"].as_u64().expect("subxid");
        if obj["lsn"].is_null() {
            self.stats.crash_aborts += 1;
        }
        if sub == top {
            self.stats.txn_aborts += 1;
            self.pending.remove(&top);
        } else {
            self.stats.subxact_aborts += 1;
            if let Some(list) = self.pending.get_mut(&top) {
                list.retain(|(x, _)| *x != sub);
            }
        }
    }

    /// `P`: holds the transaction's changes (streamed ones, or `decoded`)
    /// under its gid, replacing a copy delivered before a reconnect.
    fn prepare(&mut self, obj: &Value, decoded: Vec<Change>) {
        self.stats.prepares += 1;
        let changes = if obj["streamed"] == true {
            self.take_streamed(obj["xid"].as_u64().expect("xid"))
        } else {
            decoded
        };
        self.prepared
            .insert(obj["gid"].as_str().expect("gid").to_string(), changes);
    }

    /// `CP` / `RP`. A session that started after the `P` may have streamed
    /// the prepared transaction again (no second `P`): that copy goes too.
    fn finish_prepared(&mut self, obj: &Value, commit: bool) {
        let gid = obj["gid"].as_str().expect("gid");
        let held = self.prepared.remove(gid);
        if self
            .pending
            .remove(&obj["xid"].as_u64().expect("xid"))
            .is_some_and(|b| !b.is_empty())
        {
            self.stats.dropped_at_finish_prepared += 1;
        }
        if self.already_applied(obj) {
            return;
        }
        if commit {
            self.stats.commit_prepared += 1;
            let changes = held.unwrap_or_else(|| panic!("{obj}: never prepared"));
            self.apply(changes);
        } else {
            // May name a transaction never sent at PREPARE time.
            self.stats.rollback_prepared += 1;
        }
    }

    /// Nothing may be left over once every transaction has ended.
    fn finish(self) -> ReplayStats {
        assert!(
            self.pending.is_empty(),
            "streamed transactions never finished: {:?}",
            self.pending.keys().collect::<Vec<_>>()
        );
        assert!(
            self.prepared.is_empty(),
            "prepared transactions never finished: {:?}",
            self.prepared.keys().collect::<Vec<_>>()
        );
        self.stats
    }
}

/// Applies a format-2 stream read in one session to `model`.
fn replay_v2(lines: &[String], model: &mut Model) -> ReplayStats {
    replay_v2_sessions(&[lines], model, Sessions::Seen)
}

/// Applies format-2 output of consecutive decoding sessions to `model`, as
/// documented in docs/streaming.md. With [`Sessions::Unseen`] the consumer is not
/// told where a session ends: only `"first":true` protects it, and buffers
/// of transactions that ended between sessions may stay (returned, not
/// checked).
fn replay_v2_sessions(sessions: &[&[String]], model: &mut Model, seen: Sessions) -> ReplayStats {
    let mut consumer = Consumer::new(model, seen);
    // Changes of the transaction being committed (B..C) or prepared (B..P).
    let mut current: Vec<Change> = Vec::new();
    let mut block: Option<u64> = None;
    for (n, lines) in sessions.iter().enumerate() {
        if n == 0 || seen == Sessions::Seen {
            // A session may end anywhere: inside a block, between B and C.
            consumer.new_session();
            current.clear();
            block = None;
        }
        for line in lines.iter() {
            let obj: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("invalid JSON {e}: {line}"));
            let xid = obj["xid"].as_u64();
            match obj["action"].as_str().expect("action") {
                "S" => {
                    // Unseen sessions: a block cut off by the disconnect.
                    assert!(block.is_none() || seen == Sessions::Unseen, "nested S");
                    block = Some(consumer.stream_start(&obj));
                }
                "E" => {
                    assert_eq!(block, xid, "E closes another block");
                    block = None;
                }
                "B" => current.clear(),
                "I" | "U" | "D" => {
                    let change = v2_change(&obj);
                    match block {
                        Some(top) => {
                            consumer.buffer(top, xid.expect("streamed change has xid"), change)
                        }
                        None => current.push(change),
                    }
                }
                "C" if obj["streamed"] == true => consumer.streamed_commit(&obj),
                "C" => consumer.commit(&obj, std::mem::take(&mut current)),
                "A" => consumer.abort(&obj),
                "P" => consumer.prepare(&obj, std::mem::take(&mut current)),
                "CP" => consumer.finish_prepared(&obj, true),
                "RP" => consumer.finish_prepared(&obj, false),
                "M" | "T" => {}
                other => panic!("unexpected action {other}: {line}"),
            }
        }
    }
    if seen == Sessions::Unseen {
        consumer.pending.clear();
        return consumer.stats;
    }
    assert!(block.is_none(), "stream ended inside a block");
    consumer.finish()
}

/// Applies a format-1 stream (block documents, transaction documents and
/// the shared control objects), read in one session, to `model`.
fn replay_v1(docs: &[String], model: &mut Model) -> ReplayStats {
    let mut consumer = Consumer::new(model, Sessions::Seen);
    consumer.new_session();
    // A transaction document is committed, unless the object right after it
    // is its PREPARE.
    let mut last_txn: Vec<Change> = Vec::new();
    for doc in docs {
        let obj: Value =
            serde_json::from_str(doc).unwrap_or_else(|e| panic!("invalid JSON {e}: {doc}"));
        let action = obj["action"].as_str();
        if action != Some("P") {
            consumer.apply(std::mem::take(&mut last_txn));
        }
        match action {
            Some("S") => {
                let top = consumer.stream_start(&obj);
                for el in obj["change"].as_array().expect("change array") {
                    if el["kind"] != "message" {
                        consumer.buffer(
                            top,
                            el["xid"].as_u64().expect("streamed element has xid"),
                            v1_change(el),
                        );
                    }
                }
            }
            Some("C") => consumer.streamed_commit(&obj),
            Some("A") => consumer.abort(&obj),
            Some("P") => consumer.prepare(&obj, std::mem::take(&mut last_txn)),
            Some("CP") => consumer.finish_prepared(&obj, true),
            Some("RP") => consumer.finish_prepared(&obj, false),
            Some(other) => panic!("unexpected action {other}"),
            None => {
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
    consumer.apply(last_txn);
    consumer.finish()
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

/// Whether the workload's aborted transaction reaches the plugin: from 18
/// on the reorder buffer drops a transaction it finds already aborted
/// instead of streaming it (ReorderBufferCheckAndTruncateAbortedTXN), so
/// there is nothing to abort downstream. (The immediate-streaming test
/// still sees stream aborts on 18.)
fn aborted_transactions_are_streamed(db: &mut TestDb) -> bool {
    db.server_major() < 18
}

/// The data of `pg_logical_slot_{how}_changes` (`how`: get or peek) on
/// `slot` up to `upto`, with `options`.
fn changes(db: &mut TestDb, how: &str, slot: &str, upto: &str, options: &str) -> Vec<String> {
    let sql = format!(
        "select data from pg_logical_slot_{how}_changes('{slot}', '{upto}', NULL, {options})"
    );
    let rows = db
        .conn
        .client
        .query(&sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// `f` under `logical_decoding_work_mem = '64kB'` (reset after it): the
/// large transactions are streamed.
fn with_small_work_mem<T>(db: &mut TestDb, f: impl FnOnce(&mut TestDb) -> T) -> T {
    db.exec("set logical_decoding_work_mem = '64kB'");
    let result = f(db);
    db.exec("reset logical_decoding_work_mem");
    result
}

/// The changes up to the last flush (`flush_wal`), peeked with `options`
/// and a small `logical_decoding_work_mem`.
fn peek(db: &mut TestDb, slot: &str, options: &str) -> Vec<String> {
    let upto = db.upto_lsn.clone().expect("flush_wal first");
    with_small_work_mem(db, |db| changes(db, "peek", slot, &upto, options))
}

fn create_slot(db: &mut TestDb, name: &str, two_phase: bool) -> SlotGuard {
    db.exec(&format!(
        "select pg_create_logical_replication_slot('{name}', 'pubjson', false, {two_phase})"
    ));
    SlotGuard {
        names: vec![name.to_string()],
    }
}

/// A test database `name` with its slot (`two_phase`): the database, the
/// names of its table `t` (not created) and of the slot, and the slot's
/// guard.
fn database_with_slot(name: &str, two_phase: bool) -> (TestDb, String, String, SlotGuard) {
    let mut db = TestDb::new(name);
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    let guard = create_slot(&mut db, &slot, two_phase);
    (db, table, slot, guard)
}

/// A test database `name` with its table `t` (`create_table`): the
/// database and the table's name.
fn database_with_table(name: &str) -> (TestDb, String) {
    let mut db = TestDb::new(name);
    let table = format!("{}.t", db.schema);
    create_table(&mut db, &table);
    (db, table)
}

/// Creates the tests' table (`id`, `v`, `big`) named `table`.
fn create_table(db: &mut TestDb, table: &str) {
    db.exec(&format!(
        "create table {table} (id int primary key, v text, big text)"
    ));
}

/// The replay's PREPAREs, COMMIT PREPAREDs and ROLLBACK PREPAREDs.
fn assert_two_phase(stats: &ReplayStats, expected: (usize, usize, usize)) {
    assert_eq!(
        (
            stats.prepares,
            stats.commit_prepared,
            stats.rollback_prepared
        ),
        expected,
        "{stats:?}"
    );
}

/// Runs pg_recvlogical on `slot` up to `end` into `file`, with format 2
/// and `opts`; `small_work_mem`: with a `logical_decoding_work_mem` of 64kB
/// (a walsender takes it from its startup options), which streams.
fn recv_until(slot: &str, end: &str, file: &std::path::Path, small_work_mem: bool, opts: &[&str]) {
    let mut cmd = command_for_test_db();
    if small_work_mem {
        cmd.env("PGOPTIONS", "-c logical_decoding_work_mem=64kB");
    }
    cmd.args(["-S", slot, "--start", "--no-loop", "-E", end, "-f"])
        .arg(file)
        .args(["-o", "format-version=2"]);
    for opt in opts {
        cmd.args(["-o", opt]);
    }
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("run pg_recvlogical");
    assert!(status.success(), "pg_recvlogical failed: {status}");
}

/// A new model with `lines` replayed into it by `replay`, and the
/// replay's counts.
fn replayed(
    lines: &[String],
    replay: fn(&[String], &mut Model) -> ReplayStats,
) -> (Model, ReplayStats) {
    let mut model = Model::new();
    let stats = replay(lines, &mut model);
    (model, stats)
}

/// `peek` with `options`, replayed by `replay` into a new model: the
/// lines, the model and the replay's counts.
fn peek_replayed(
    db: &mut TestDb,
    slot: &str,
    options: &str,
    replay: fn(&[String], &mut Model) -> ReplayStats,
) -> (Vec<String>, Model, ReplayStats) {
    let lines = peek(db, slot, options);
    let (model, stats) = replayed(&lines, replay);
    (lines, model, stats)
}

/// A new model with `sessions` replayed into it (see `replay_v2_sessions`),
/// and the replay's counts.
fn replayed_sessions(sessions: &[&[String]], seen: Sessions) -> (Model, ReplayStats) {
    let mut model = Model::new();
    let stats = replay_v2_sessions(sessions, &mut model, seen);
    (model, stats)
}

fn second_session() -> postgres::Client {
    pubjson_e2e::connect().client
}

/// A test database with a slot, then the big-transaction workload in it:
/// the database, the slot, its guard and the table's final contents.
fn streamed_workload(name: &str) -> (TestDb, String, SlotGuard, Model) {
    let (mut db, table, slot, guard) = database_with_slot(name, false);
    let mut second = second_session();
    workload(&mut db, &table, &mut second);
    let expected = table_model(&mut db, &table);
    (db, slot, guard, expected)
}

/// `streamed_workload(name)` peeked in format `version` with streaming on
/// and replayed: stream blocks, a subtransaction abort and a transaction
/// abort streamed, and the table's data. Gives the database, the slot, its
/// guard, the table's data and the replay's counts.
fn assert_streamed_replay(
    name: &str,
    version: u8,
) -> (TestDb, String, SlotGuard, Model, ReplayStats) {
    let (mut db, slot, guard, expected) = streamed_workload(name);
    let replay: fn(&[String], &mut Model) -> ReplayStats =
        if version == 1 { replay_v1 } else { replay_v2 };
    let options = format!("'format-version', '{version}', 'streaming', 'on'");
    let (lines, model, stats) = peek_replayed(&mut db, &slot, &options, replay);
    println!(
        "format {version} streamed: {} lines, {stats:?}",
        lines.len()
    );
    assert!(
        stats.stream_blocks >= 10,
        "too few stream blocks: {stats:?}"
    );
    assert!(
        stats.subxact_aborts >= 1,
        "no subtransaction abort was streamed: {stats:?}"
    );
    assert!(
        stats.txn_aborts >= 1 || !aborted_transactions_are_streamed(&mut db),
        "no transaction abort was streamed: {stats:?}"
    );
    assert_eq!(model.len(), expected.len());
    assert!(model == expected, "replayed data differs from the table");
    (db, slot, guard, expected, stats)
}

#[test]
fn streamed_format_2_replays_to_the_committed_data() {
    let (mut db, slot, _guard, expected, stats) = assert_streamed_replay("stream_v2", 2);
    assert!(stats.streamed_commits >= 3, "{stats:?}");

    // The same WAL without streaming gives the same data (and no S/A objects).
    let (_, plain_model, plain_stats) =
        peek_replayed(&mut db, &slot, "'format-version', '2'", replay_v2);
    assert_eq!(plain_stats.stream_blocks, 0);
    assert!(plain_model == expected);
}

#[test]
fn streamed_format_1_replays_to_the_committed_data() {
    assert_streamed_replay("stream_v1", 1);
}

#[test]
fn streaming_applies_publication_row_filters() {
    let (mut db, table, slot, _guard) = database_with_slot("stream_pub", false);
    create_table(&mut db, &table);
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
    let (mut db, table, slot, _guard) = database_with_slot("twophase", true);
    create_table(&mut db, &table);
    let gid = |n: &str| format!("{}_{n}", db.schema);
    let (g1, g2, g3, g4) = (gid("g1"), gid("g2"), gid("g3"), gid("g4"));
    db.run(&[
        &format!("begin; insert into {table} values (1, 'committed prepared', null); prepare transaction '{g1}'"),
        &format!("commit prepared '{g1}'"),
        &format!("begin; insert into {table} values (2, 'rolled back prepared', null); prepare transaction '{g2}'"),
        &format!("rollback prepared '{g2}'"),
        &format!("begin; insert into {table} select i, 'big prepared', null from generate_series(100, 4000) i; prepare transaction '{g3}'"),
        &format!("commit prepared '{g3}'"),
        &format!("begin; insert into {table} select i, 'big rolled back', null from generate_series(5000, 9000) i; prepare transaction '{g4}'"),
        &format!("rollback prepared '{g4}'"),
    ]);
    let expected = table_model(&mut db, &table);
    assert_eq!(expected.len(), 1 + 3901);

    for streaming in ["off", "on"] {
        let (lines, model, stats) = peek_replayed(
            &mut db,
            &slot,
            &format!("'format-version', '2', 'streaming', '{streaming}'"),
            replay_v2,
        );
        println!("two-phase, streaming {streaming}: {stats:?}");
        assert_two_phase(&stats, (4, 2, 2));
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
    let (_, model, stats) = peek_replayed(&mut db, &slot, "'format-version', '1'", replay_v1);
    assert_two_phase(&stats, (4, 2, 2));
    assert!(model == expected, "format-1 two-phase replay differs");
}

#[test]
fn streaming_through_pg_recvlogical() {
    let (mut db, slot, _guard, expected) = streamed_workload("stream_recv");
    let end = db.upto_lsn.clone().expect("flushed");

    let dir = scratch_dir("stream_recv");
    let file = dir.join("out.json");
    // A walsender takes logical_decoding_work_mem from its startup options.
    recv_until(&slot, &end, &file, true, &["streaming"]);
    wait_for("output file", Duration::from_secs(10), || file.exists());
    let lines = complete_lines(&file);
    let (model, stats) = replayed(&lines, replay_v2);
    println!("pg_recvlogical streamed: {} lines, {stats:?}", lines.len());
    assert!(
        stats.stream_blocks >= 10
            && (stats.txn_aborts >= 1 || !aborted_transactions_are_streamed(&mut db)),
        "{stats:?}"
    );
    assert!(
        model == expected,
        "pg_recvlogical replay differs from the table"
    );
}

#[test]
fn two_phase_through_pg_recvlogical() {
    let (mut db, table, slot, _guard) = database_with_slot("twophase_recv", true);
    create_table(&mut db, &table);
    let g = |n: &str| format!("{}_{n}", db.schema);
    let (g1, g2, g3) = (g("g1"), g("g2"), g("g3"));
    db.run(&[
        &format!("begin; insert into {table} values (1, 'one', null); prepare transaction '{g1}'"),
        &format!("begin; insert into {table} values (2, 'two', null); prepare transaction '{g2}'"),
        &format!("commit prepared '{g1}'"),
        &format!("rollback prepared '{g2}'"),
        &format!("begin; insert into {table} select i, 'big', null from generate_series(10, 3000) i; prepare transaction '{g3}'"),
        &format!("commit prepared '{g3}'"),
    ]);
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
        let opts: &[&str] = if streaming {
            &["two_phase", "streaming"]
        } else {
            &["two_phase"]
        };
        recv_until(&copy, &end, &file, streaming, opts);
        let lines = complete_lines(&file);
        let (model, stats) = replayed(&lines, replay_v2);
        println!("two-phase via pg_recvlogical ({name}): {stats:?}");
        assert_two_phase(&stats, (3, 2, 1));
        if streaming {
            assert!(stats.stream_blocks > 0, "{stats:?}");
        }
        assert!(
            model == expected,
            "two-phase replay through pg_recvlogical differs ({name})"
        );
    }
}

/// PostgreSQL 16+: `debug_logical_replication_streaming = immediate` streams
/// every change as it is decoded, so even small transactions arrive as
/// stream blocks; the replay must still give the committed data.
#[test]
fn immediate_streaming_of_small_transactions() {
    let mut db = TestDb::new("stream_now");
    pubjson_e2e::require_major!(
        db.server_major(),
        16,
        "debug_logical_replication_streaming is new in PostgreSQL 16"
    );
    let table = format!("{}.t", db.schema);
    let slot = format!("{}_slot", db.schema);
    create_table(&mut db, &table);
    let _guard = create_slot(&mut db, &slot, false);
    db.run(&[
        &format!("insert into {table} values (1, 'a'), (2, 'b'), (3, 'c')"),
        &format!(
            "begin; insert into {table} values (4, 'd'); savepoint s;
             insert into {table} values (5, 'gone'); rollback to s;
             update {table} set v = 'bb' where id = 2; commit"
        ),
        &format!("begin; insert into {table} values (6, 'aborted'); rollback"),
        &format!("delete from {table} where id = 3"),
    ]);
    db.flush_wal();
    let expected = table_model(&mut db, &table);

    let upto = db.upto_lsn.clone().expect("flushed");
    db.exec("set debug_logical_replication_streaming = immediate");
    let mut peek_streaming = |value: &str| -> Vec<String> {
        let options = format!("'format-version', '2', 'streaming', '{value}'");
        changes(&mut db, "peek", &slot, &upto, &options)
    };
    let lines = peek_streaming("on");
    // pgoutput's `parallel` (16+) is plain streaming for pubjson.
    assert_eq!(peek_streaming("parallel"), lines);
    db.exec("reset debug_logical_replication_streaming");
    let (model, stats) = replayed(&lines, replay_v2);
    println!("immediate streaming: {} lines, {stats:?}", lines.len());
    assert!(stats.stream_blocks >= 3, "{stats:?}\n{lines:#?}");
    assert_eq!(stats.streamed_commits, 3, "{stats:?}\n{lines:#?}");
    assert!(stats.subxact_aborts >= 1, "{stats:?}\n{lines:#?}");
    assert!(stats.txn_aborts >= 1, "{stats:?}\n{lines:#?}");
    assert!(model == expected, "replayed data differs from the table");
}

/// A table whose column's type needs a catalog lookup to print each
/// value the first time (an enum's label): decoding a change of a
/// transaction that has rolled back fails in that lookup ("concurrent
/// abort"), which PostgreSQL catches when it is streaming or preparing the
/// transaction. Rows 1 and 4 commit; rows 2 and 3 roll back, 3 with the
/// label no committed row printed before it. `prepared`: the rollback is a
/// ROLLBACK PREPARED.
fn rolled_back_while_decoded(db: &mut TestDb, prepared: bool) -> String {
    let table = format!("{}.e", db.schema);
    let mood = format!("{}.mood", db.schema);
    let gid = format!("{}_rolled_back", db.schema);
    db.exec(&format!(
        "create type {mood} as enum ('calm', 'rare', 'late')"
    ));
    db.exec(&format!(
        "create table {table} (id int primary key, m {mood}, z text)"
    ));
    let (end, rollback) = if prepared {
        (
            format!("prepare transaction '{gid}'"),
            format!("rollback prepared '{gid}'"),
        )
    } else {
        ("rollback".to_string(), "select 1".to_string())
    };
    db.run(&[
        &format!("insert into {table} values (1, 'calm', 'kept')"),
        &format!(
            "begin; insert into {table} values (2, 'calm', 'rolled back'), (3, 'rare', 'rolled back'); {end}"
        ),
        &rollback,
        &format!("insert into {table} values (4, 'late', 'kept')"),
    ]);
    db.flush_wal();
    table
}

/// Every row of `lines` is JSON (format 3's rows: each line), and none
/// shows `absent`.
fn assert_whole_objects(lines: &[String], absent: &str) {
    for line in lines.iter().flat_map(|l| l.split('\n')) {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}\n{lines:#?}"));
        assert!(!line.contains(absent), "{absent}: {line}");
    }
}

/// A streamed transaction that rolled back before it was decoded: the
/// change whose decoding fails is left out whole, the block around it ends,
/// and the objects batched before it stay (format 3 kept its batch in hand
/// while writing a change, and an interrupted one lost the batch).
#[test]
fn a_change_cut_short_by_its_rollback_leaves_no_half_object() {
    let mut db = TestDb::new("stream_cut");
    pubjson_e2e::require_major!(
        db.server_major(),
        16,
        "debug_logical_replication_streaming is new in PostgreSQL 16"
    );
    let slot = format!("{}_slot", db.schema);
    let _guard = create_slot(&mut db, &slot, false);
    let table = rolled_back_while_decoded(&mut db, false);
    let upto = db.upto_lsn.clone().expect("flushed");
    db.exec("set debug_logical_replication_streaming = immediate");
    for options in [
        "'format-version', '3', 'streaming', 'on'",
        "'format-version', '3', 'streaming', 'on', 'batch-bytes', '0'",
        "'format-version', '2', 'streaming', 'on'",
        "'format-version', '1', 'streaming', 'on'",
    ] {
        let lines = changes(&mut db, "peek", &slot, &upto, options);
        // Row 2 may be streamed before the rollback is seen; row 3 never.
        assert_whole_objects(&lines, "rare");
        let objects: Vec<Value> = lines
            .iter()
            .flat_map(|l| l.split('\n'))
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        let count = |action: &str| objects.iter().filter(|o| o["action"] == action).count();
        // Every block that starts ends (format 1: a block is one document).
        if !options.contains("'1'") {
            assert_eq!(count("S"), count("E"), "{options}: {lines:#?}");
        }
        if db.server_major() < 18 {
            // PostgreSQL 18 does not stream a transaction it knows aborted.
            assert_eq!(count("A"), 1, "{options}: {lines:#?}");
        }
        let text = lines.join("\n");
        for kept in ["calm", "late"] {
            assert!(
                text.contains(kept),
                "{options}: row of {kept} missing: {lines:#?}"
            );
        }
        // Format 3 describes the table before its next change.
        if options.contains("'3'") {
            let last_r = objects.iter().rposition(|o| o["action"] == "R");
            let last_i = objects.iter().rposition(|o| o["action"] == "I");
            assert!(last_r < last_i, "{options}: {lines:#?}");
        }
    }
    db.exec("reset debug_logical_replication_streaming");
    let ids = format!("select string_agg(id::text, ',' order by id) from {table}");
    assert_eq!(one_string(&mut db.conn.client, &ids), "1,4");
}

/// A prepared transaction rolled back before its PREPARE is decoded: what
/// PostgreSQL still delivers of it depends on what the session's caches
/// hold (here the table's and the first label's are warm, the second
/// label's is not), so pubjson writes none of its changes, in every
/// session: its `P` counts none, and a session that starts cold writes the
/// same.
#[test]
fn a_prepared_transaction_rolled_back_before_it_is_decoded_shows_no_changes() {
    let (mut db, _, slot, _guard) = database_with_slot("twophase_gone", true);
    rolled_back_while_decoded(&mut db, true);
    let upto = db.upto_lsn.clone().expect("flushed");
    for format in ["3", "2", "1"] {
        let options = format!("'format-version', '{format}'");
        let lines = changes(&mut db, "peek", &slot, &upto, &options);
        assert_whole_objects(&lines, "rolled back");
        let prepare = lines
            .iter()
            .find(|l| l.contains("\"action\":\"P\""))
            .unwrap_or_else(|| panic!("no P: {lines:#?}"));
        if format == "3" {
            assert!(prepare.contains("\"changes\":0"), "{prepare}");
        }
        assert!(
            lines.iter().any(|l| l.contains("\"action\":\"RP\"")),
            "{lines:#?}"
        );
        // The same from a session whose caches know nothing yet.
        db.conn = pubjson_e2e::connect();
        let again = changes(&mut db, "peek", &slot, &upto, &options);
        assert_eq!(again, lines, "format {format}");
    }
}

/// Each `pg_logical_slot_get_changes` call is a decoding session of its
/// own: a transaction still open where a call stops is streamed again from
/// its first change by the next call (`"first":true`), and one that aborted
/// in between gets no `A` from a call that did not stream it. Three calls
/// cut the WAL while two large transactions are open.
#[test]
fn streamed_replay_across_sql_calls() {
    let (mut db, table, slot, _guard) = database_with_slot("stream_calls", false);
    create_table(&mut db, &table);
    let (mut s1, mut s2) = (second_session(), second_session());
    let run = |c: &mut postgres::Client, sql: &str| {
        c.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", pubjson_e2e::describe_error(&e)))
    };
    run(
        &mut s1,
        &format!(
            "begin; insert into {table} select i, 'one', null from generate_series(1, 3000) i"
        ),
    );
    run(
        &mut s2,
        &format!(
            "begin; insert into {table} select i, 'two', null from generate_series(10001, 13000) i"
        ),
    );
    // A commit flushes the open transactions' WAL.
    db.exec(&format!("insert into {table} values (0, 'flush', null)"));
    db.flush_wal();
    let cut1 = db.upto_lsn.clone().expect("flushed");
    run(&mut s2, &format!(
        "savepoint a; insert into {table} select i, 'gone', null from generate_series(13001, 14000) i;
         rollback to savepoint a;
         insert into {table} select i, 'two b', null from generate_series(14001, 15000) i"
    ));
    run(&mut s1, &format!("insert into {table} select i, 'one b', null from generate_series(3001, 5000) i; commit"));
    db.exec(&format!("insert into {table} values (-1, 'flush', null)"));
    db.flush_wal();
    let cut2 = db.upto_lsn.clone().expect("flushed");
    run(&mut s2, "rollback");
    db.exec(&format!(
        "insert into {table} select i, 'three', null from generate_series(20001, 25000) i"
    ));
    db.flush_wal();
    let end = db.upto_lsn.clone().expect("flushed");
    let expected = table_model(&mut db, &table);

    let calls: Vec<Vec<String>> = with_small_work_mem(&mut db, |db| {
        [&cut1, &cut2, &end]
            .iter()
            .map(|upto| {
                let options = "'format-version', '2', 'include-lsn', '1', 'streaming', 'on'";
                changes(db, "get", &slot, upto, options)
            })
            .collect()
    });
    let sessions: Vec<&[String]> = calls.iter().map(Vec::as_slice).collect();

    let (model, stats) = replayed_sessions(&sessions, Sessions::Seen);
    println!("three get_changes calls: {stats:?}");
    assert!(
        model == expected,
        "replay across calls differs from the table"
    );
    assert!(
        stats.dropped_at_reconnect >= 1 && stats.restreamed >= 1,
        "no transaction was open and streamed at a cut: {stats:?}"
    );
    // The same output run together: `first` alone still keeps every change
    // from being applied twice.
    let (model, unseen) = replayed_sessions(&sessions, Sessions::Unseen);
    assert!(unseen.dropped_at_first >= 1, "{unseen:?}");
    assert!(
        model == expected,
        "replay without session boundaries differs"
    );
}

/// A session that starts after a confirmed PREPARE does not send it again,
/// but PostgreSQL may stream the prepared transaction again (it is still in
/// the reorder buffer, waiting for COMMIT PREPARED) when another
/// transaction fills the buffer: `S` … `E` for its xid, then `CP` alone.
/// Whether it does depends on how much of it stayed in memory, so the test
/// tries a few sizes until it happens; every replay must be exact.
#[test]
fn prepared_transaction_streamed_again_after_a_new_session() {
    let (mut db, table) = database_with_table("stream_prep_again");
    let mut seen_again = None;
    for (round, rows) in (3000..=4500).step_by(100).enumerate() {
        let slot = format!("{}_slot{round}", db.schema);
        let _guard = create_slot(&mut db, &slot, true);
        let gid = format!("{}_g{round}", db.schema);
        db.exec(&format!("truncate {table}"));
        db.exec(&format!(
            "begin; insert into {table} select i, 'prepared', null from generate_series(1, {rows}) i;
             prepare transaction '{gid}'"
        ));
        db.flush_wal();
        let prepared = db.upto_lsn.clone().expect("flushed");
        db.exec(&format!(
            "insert into {table} select i, 'other', null from generate_series(100001, 101000) i"
        ));
        db.exec(&format!("commit prepared '{gid}'"));
        db.flush_wal();
        let end = db.upto_lsn.clone().expect("flushed");
        let expected = table_model(&mut db, &table);
        let calls: Vec<Vec<String>> = with_small_work_mem(&mut db, |db| {
            [&prepared, &end]
                .iter()
                .map(|upto| {
                    let options = "'format-version', '2', 'include-lsn', '1', 'streaming', 'on',
                                   'two_phase', '1'";
                    changes(db, "get", &slot, upto, options)
                })
                .collect()
        });
        let sessions: Vec<&[String]> = calls.iter().map(Vec::as_slice).collect();
        let mut model = Model::new();
        // The data before the truncate of this round is not in this slot.
        let stats = replay_v2_sessions(&sessions, &mut model, Sessions::Seen);
        assert!(
            model == expected,
            "{rows} rows: replay differs from the table"
        );
        assert_eq!(stats.commit_prepared, 1, "{stats:?}");
        let second: Vec<Value> = calls[1]
            .iter()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert!(
            !second.iter().any(|o| o["action"] == "P"),
            "the confirmed PREPARE was sent again"
        );
        if stats.dropped_at_finish_prepared > 0 {
            seen_again = Some((rows, stats));
            break;
        }
    }
    let (rows, stats) = seen_again
        .expect("no size made PostgreSQL stream a prepared transaction again in a later session");
    println!("prepared transaction of {rows} rows streamed again before its CP: {stats:?}");
}

// ---------------------------------------------------------------------------
// Reconnecting after a fault in the middle of a stream. These tests stop
// and crash a server, so they run on the reliability suite's private
// cluster (see reliability.rs).
// ---------------------------------------------------------------------------

use pubjson_e2e::reliability as rel;
use pubjson_e2e::WalsenderFault as Fault;

/// The slot's walsender pid and whether `confirmed_flush_lsn` >= `lsn`.
fn slot_state(slot: &str, lsn: &str) -> Option<(Option<i32>, bool)> {
    let mut c = rel::try_connect("postgres", "postgres").ok()?;
    let row = c
        .query_opt(
            "select active_pid, confirmed_flush_lsn >= $2::text::pg_lsn
             from pg_replication_slots where slot_name = $1",
            &[&slot, &lsn],
        )
        .ok()??;
    Some((row.get(0), row.get(1)))
}

/// Every complete line of a pg_recvlogical file, which (its pg_recvlogical
/// was never SIGKILLed) must not end inside a line.
fn session_lines(path: &std::path::Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    assert!(
        bytes.last().is_none_or(|b| *b == b'\n'),
        "{} ends inside a line",
        path.display()
    );
    complete_lines(path)
}

fn objects(path: &std::path::Path) -> Vec<Value> {
    complete_lines(path)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("invalid JSON {e}: {l}")))
        .collect()
}

/// Commits row `id` and stops `recv` (SIGINT) once it has written that
/// commit to `file` and, with `confirmed_on`, that slot has confirmed it.
fn end_session(
    recv: &mut RecvLogical,
    w: &mut postgres::Client,
    file: &std::path::Path,
    id: i64,
    confirmed_on: Option<&str>,
) {
    exec(w, &format!("insert into t values ({id}, 'marker', null)"));
    let mut commit: Option<String> = None;
    wait_for(
        &format!("the commit of {id} in {}", file.display()),
        Duration::from_secs(60),
        || {
            let objs = objects(file);
            commit = objs
                .iter()
                .position(|o| o["columns"][0]["value"] == id)
                .and_then(|i| objs[i..].iter().find(|o| o["action"] == "C"))
                .map(|c| c["nextlsn"].as_str().expect("nextlsn").to_string());
            commit.is_some()
        },
    );
    if let (Some(slot), Some(lsn)) = (confirmed_on, commit) {
        wait_for(
            &format!("{slot} to confirm {lsn}"),
            Duration::from_secs(60),
            || slot_state(slot, &lsn).is_some_and(|(_, confirmed)| confirmed),
        );
    }
    recv.interrupt();
    assert!(
        recv.try_wait_exit(Duration::from_secs(30)).is_some(),
        "pg_recvlogical ignores SIGINT"
    );
}

/// Streams through pg_recvlogical while two large transactions are open
/// and have been streamed, two prepared transactions have been confirmed,
/// and committed, rolled-back and aborted transactions went by; injects
/// `fault`; reconnects from the slot's confirmed position (session 2);
/// ends the open (unless the fault killed them) and prepared transactions;
/// then stops pg_recvlogical and starts it again for a checkpoint (session
/// 3). The consumer replays each pg_recvlogical run as one session; the
/// result must be the table, with no buffer left.
fn reconnect_mid_stream(fault: Fault) {
    let cluster = rel::cluster();
    let started = std::time::Instant::now();
    let db = format!("stream_{}", fault.name());
    let slot = db.clone();
    let mut admin = rel::fresh_db(&db);
    exec(
        &mut admin,
        "create table t (id int primary key, v text, big text)",
    );
    // A walsender takes its settings from the database too.
    exec(
        &mut admin,
        &format!("alter database {db} set logical_decoding_work_mem = '64kB'"),
    );
    exec(
        &mut admin,
        &format!("select pg_create_logical_replication_slot('{slot}', 'pubjson', false, true)"),
    );
    let major: i32 = one_string(
        &mut admin,
        "select (current_setting('server_version_num')::int / 10000)::text",
    )
    .parse()
    .expect("major");
    drop(admin);
    let dir = scratch_dir(&format!("stream_{}", fault.name()));
    let opts = [
        "format-version=2",
        "include-xids",
        "include-lsn",
        "streaming",
        "two_phase",
    ];
    let files = [1, 2, 3].map(|n| dir.join(format!("session{n}.jsonl")));
    let mut recv = rel::recv_start(&db, &slot, &files[0], &opts, &[]);

    // Session 1: a committed transaction with a rolled-back savepoint, an
    // aborted one, two prepared ones, then two that stay open.
    let mut w = rel::connect(&db);
    exec(
        &mut w,
        "begin;
         insert into t select i, 'committed', null from generate_series(1, 3000) i;
         savepoint s;
         insert into t select i, 'rolled back', null from generate_series(3001, 4000) i;
         rollback to savepoint s;
         update t set v = 'updated' where id % 5 = 0;
         commit;
         begin;
         insert into t select i, 'aborted', null from generate_series(5001, 8000) i;
         rollback;
         begin;
         insert into t select i, 'prepared', null from generate_series(10001, 13000) i;
         prepare transaction 'g1';
         begin;
         insert into t select i, 'prepared, rolled back', null from generate_series(14001, 17000) i;
         prepare transaction 'g2'",
    );
    let open_xact = |sql: &str| -> (postgres::Client, u64) {
        let mut c = rel::connect(&db);
        exec(&mut c, sql);
        let xid = one_string(&mut c, "select txid_current()::text");
        (c, xid.parse().expect("xid"))
    };
    let (mut open1, xid1) = open_xact(
        "begin;
         insert into t select i, 'open', null from generate_series(20001, 23000) i;
         savepoint s;
         insert into t select i, 'open', null from generate_series(23001, 24000) i",
    );
    let (mut open2, xid2) = open_xact(
        "begin;
         insert into t select i, 'open 2', null from generate_series(30001, 33000) i;
         savepoint s;
         insert into t select i, 'gone', null from generate_series(33001, 34000) i;
         rollback to savepoint s;
         insert into t select i, 'open 2', null from generate_series(34001, 35000) i",
    );
    // A commit flushes the open transactions' WAL.
    exec(&mut w, "insert into t values (900001, 'flush', null)");

    // Mid-stream: both open transactions have blocks in the file and the
    // slot has confirmed the second PREPARE.
    let t0 = std::time::Instant::now();
    loop {
        assert!(
            recv.running(),
            "pg_recvlogical exited before the fault: {}",
            recv.stderr()
        );
        let objs = objects(&files[0]);
        let streamed = |xid: u64| objs.iter().any(|o| o["action"] == "S" && o["xid"] == xid);
        let prepared = objs
            .iter()
            .find(|o| o["action"] == "P" && o["gid"] == "g2")
            .and_then(|o| o["nextlsn"].as_str().map(str::to_string));
        if let Some(p) = prepared.filter(|_| streamed(xid1) && streamed(xid2)) {
            if slot_state(&slot, &p).is_some_and(|(_, confirmed)| confirmed) {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "session 1 never streamed both open transactions ({xid1}, {xid2}) and confirmed the prepares"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    match fault {
        Fault::TerminateWalsender => {
            let mut c = rel::connect("postgres");
            let terminated = one_string(
                &mut c,
                &format!(
                    "select pg_terminate_backend(active_pid)::text from pg_replication_slots
                     where slot_name = '{slot}'"
                ),
            );
            assert_eq!(terminated, "true");
        }
        Fault::KillWalsender => {
            let pid = slot_state(&slot, "0/0")
                .and_then(|(pid, _)| pid)
                .expect("walsender pid");
            rel::server().kill9_backend(pid);
        }
        Fault::ImmediateRestart => cluster.pg_ctl_restart("immediate"),
    }
    assert!(
        recv.try_wait_exit(Duration::from_secs(30)).is_some(),
        "pg_recvlogical still runs after {fault:?}: {}",
        recv.stderr()
    );
    wait_for("the slot to be released", Duration::from_secs(60), || {
        slot_state(&slot, "0/0").is_some_and(|(pid, _)| pid.is_none())
    });

    // Session 2, from the slot's confirmed position.
    let mut recv = rel::recv_start(&db, &slot, &files[1], &opts, &[]);
    let crashed = fault != Fault::TerminateWalsender;
    if crashed {
        // The crash ended the open transactions (no abort record).
        w = rel::connect(&db);
    } else {
        exec(
            &mut open1,
            "insert into t select i, 'open, committed', null from generate_series(24001, 25000) i",
        );
    }
    exec(
        &mut w,
        "insert into t select i, 'after', null from generate_series(50001, 54000) i",
    );
    exec(&mut w, "commit prepared 'g1'");
    exec(&mut w, "rollback prepared 'g2'");
    if !crashed {
        exec(&mut open1, "commit");
        exec(&mut open2, "rollback");
    }
    drop((open1, open2));
    end_session(&mut recv, &mut w, &files[1], 999998, Some(&slot));

    // Session 3 (pg_recvlogical stopped and started again) starts after
    // everything session 2 sent and first reads a running-transactions
    // record, where PostgreSQL finds that the transactions a crash cut off
    // are gone. This session has not streamed them: no `A`.
    let mut recv = rel::recv_start(&db, &slot, &files[2], &opts, &[]);
    exec(&mut w, "checkpoint");
    end_session(&mut recv, &mut w, &files[2], 999999, None);

    let mut c = rel::connect(&db);
    let expected: Model = c
        .query("select id::int8, v, big from t order by id", &[])
        .expect("select t")
        .iter()
        .map(|r| (r.get::<_, i64>(0), (r.get(1), r.get(2))))
        .collect();
    let lines: Vec<Vec<String>> = files.iter().map(|f| session_lines(f)).collect();
    let sessions: Vec<&[String]> = lines.iter().map(Vec::as_slice).collect();

    let (model, stats) = replayed_sessions(&sessions, Sessions::Seen);
    println!(
        "reconnect after {fault:?} (PostgreSQL {major}): {:?} lines, {stats:?}, {:.1} s",
        lines.iter().map(Vec::len).collect::<Vec<_>>(),
        started.elapsed().as_secs_f64()
    );
    if model != expected {
        let extra = pubjson_e2e::keys_not_in(&model, &expected);
        let missing = pubjson_e2e::keys_not_in(&expected, &model);
        panic!(
            "replay after {fault:?} differs from the table: extra {extra:?}, missing {missing:?}"
        );
    }
    assert!(
        stats.dropped_at_reconnect >= 1,
        "the fault left no open stream buffer: {stats:?}"
    );
    if !crashed {
        assert!(
            stats.restreamed >= 1,
            "the open transactions were not streamed again after the reconnect: {stats:?}"
        );
    }
    let second: Vec<Value> = objects(&files[1]);
    let in_second = |action: &str| second.iter().filter(|o| o["action"] == action).count();
    assert_eq!((in_second("CP"), in_second("RP")), (1, 1));
    if !crashed {
        // The confirmed PREPAREs are not sent again: COMMIT/ROLLBACK
        // PREPARED arrive alone, for the transactions held since session 1.
        // (After a crash the slot restarts from the confirmed position it
        // last saved to disk, which may be older.)
        assert_eq!(in_second("P"), 0, "PREPAREs sent again");
    }
    assert_eq!((stats.commit_prepared, stats.rollback_prepared), (1, 1));

    // Without the session boundaries, `first` alone keeps the replay exact.
    let (model, unseen) = replayed_sessions(&sessions, Sessions::Unseen);
    assert!(
        model == expected,
        "replay without session boundaries after {fault:?} differs from the table"
    );
    println!("  sessions unseen: {unseen:?}");
    drop_slot(&mut c, &slot);
}

pubjson_e2e::walsender_fault_tests!(reconnect_mid_stream);
