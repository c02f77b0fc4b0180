//! Backfill through the slot (`CALL pubjson.backfill(t)`, docs/backfill.md):
//! the objects a consumer gets, convergence of a replica kept from the
//! stream alone while writers keep writing (through the SQL functions and
//! pg_recvlogical; TRUNCATE, two-phase and streamed transactions, with
//! two_phase and streaming on and off), a cancelled backfill resumed, a
//! backfill killed (pg_terminate_backend, an immediate shutdown) resumed,
//! a second one refused, forged messages ignored, publications deciding
//! the rows, errors.
//!
//! Each test has its own database `pubjson_bf_<name>`; slot creation is
//! serialized with the other suites.

use postgres::Client;
// Each test decodes with format 3 (`get`, consuming) from its slots of
// pubjson (`slot`).
use pubjson_e2e::{
    complete_lines, describe_error, drop_slot, exec, get_format3 as get, one_row,
    pubjson_slot as slot, rows, scratch_dir, serialize, sqlstate, suite_database, wait_true,
    RecvLogical, SeededRng, Server,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The most transactions a convergence writer runs (see `writer`).
const WRITER_TRANSACTIONS: u64 = 150;

fn database(name: &str) -> (String, Client) {
    suite_database("pubjson_bf_", name)
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

/// The rows of the table `name` as format 3 writes them.
fn table(c: &mut Client, name: &str) -> BTreeMap<i64, Map<String, Value>> {
    rows(c, &format!("select to_jsonb(x)::text from {name} x"))
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
    let (_, mut c) = database_with_slot(
        "example",
        "create table orders (id int primary key, item text, qty int);
         insert into orders select i, 'item ' || i, i * 10 from generate_series(1, 5) i;",
        "bf_example",
    );
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

/// An LSN (`X/Y`) as a number.
fn lsn(v: &Value) -> u64 {
    let text = v.as_str().unwrap_or_else(|| panic!("lsn: {v}"));
    let (hi, lo) = text.split_once('/').expect("X/Y");
    (u64::from_str_radix(hi, 16).expect("lsn") << 32) | u64::from_str_radix(lo, 16).expect("lsn")
}

/// A consumer applying the stream as docs/format3.md's algorithm says
/// (docs/streaming.md's rules): transactions buffered until their `C`,
/// streamed blocks kept per transaction until the streamed `C`, `A` of a
/// subtransaction or of the whole, prepared transactions kept under their
/// `gid` until `CP`, and every transaction whose commit LSN is before the
/// last one applied skipped (the at-least-once rule after a reconnect).
#[derive(Default)]
struct Consumer {
    replica: Replica,
    /// The `nextlsn` of the last transaction applied.
    applied: u64,
    /// The open `B`: its commit LSN and its changes.
    txn: Option<(u64, Vec<Value>)>,
    /// The streamed transaction whose block is open.
    block: Option<i64>,
    /// Streamed transactions: changes counted, changes kept.
    streams: HashMap<i64, (u64, Vec<Value>)>,
    prepared: HashMap<String, Vec<Value>>,
    /// What it saw, by kind: applied and skipped transactions, streamed
    /// commits, A objects, P, CP, RP, T.
    seen: BTreeMap<&'static str, usize>,
}

impl Consumer {
    /// A new decoding session (docs/streaming.md rule 1).
    fn new_session(&mut self) {
        self.txn = None;
        self.block = None;
        self.streams.clear();
    }

    fn count(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    fn commit(&mut self, o: &Value, commit_lsn: u64, changes: Vec<Value>) {
        if commit_lsn < self.applied {
            self.count("skipped");
            return;
        }
        self.count("applied");
        for change in &changes {
            self.replica.apply(change);
        }
        self.applied = lsn(&o["nextlsn"]);
    }

    fn on(&mut self, o: &Value) {
        let xid = || o["xid"].as_i64().expect("xid");
        match action(o) {
            "R" => {}
            "M" if o["transactional"] != true => {}
            "B" => {
                assert!(
                    self.txn.is_none() && self.block.is_none(),
                    "B in a transaction: {o}"
                );
                self.txn = Some((lsn(&o["lsn"]), Vec::new()));
            }
            "S" => {
                let x = xid();
                if o["first"] == true || !self.streams.contains_key(&x) {
                    self.streams.insert(x, (0, Vec::new()));
                }
                self.block = Some(x);
            }
            "E" => self.block = None,
            "A" => {
                self.count("A");
                let (x, sub) = (xid(), o["subxid"].as_i64().expect("subxid"));
                if sub == x {
                    self.streams.remove(&x);
                } else if let Some((_, changes)) = self.streams.get_mut(&x) {
                    changes.retain(|c| c["xid"].as_i64().unwrap_or(x) != sub);
                }
            }
            "C" if o["streamed"] == true => {
                self.count("streamed C");
                let (count, changes) = self.streams.remove(&xid()).unwrap_or_default();
                assert_eq!(Some(count), o["changes"].as_u64(), "{o}");
                self.commit(o, lsn(&o["lsn"]), changes);
            }
            "C" => {
                let (commit_lsn, changes) = self.txn.take().expect("C after B");
                assert_eq!(Some(changes.len() as u64), o["changes"].as_u64(), "{o}");
                self.commit(o, commit_lsn, changes);
            }
            "P" => {
                self.count("P");
                // A prepared transaction is never skipped as empty: a
                // streamed one that emitted nothing has a P (changes 0)
                // and no block.
                let changes = if o["streamed"] == true {
                    let (count, changes) = self.streams.remove(&xid()).unwrap_or_default();
                    assert_eq!(Some(count), o["changes"].as_u64(), "{o}");
                    changes
                } else {
                    let (_, changes) = self.txn.take().expect("P after B");
                    assert_eq!(Some(changes.len() as u64), o["changes"].as_u64(), "{o}");
                    changes
                };
                self.prepared
                    .insert(o["gid"].as_str().expect("gid").to_string(), changes);
            }
            "CP" => {
                self.count("CP");
                let kept = self.prepared.remove(o["gid"].as_str().expect("gid"));
                self.streams.remove(&xid());
                let commit_lsn = lsn(&o["lsn"]);
                if commit_lsn >= self.applied {
                    let changes = kept.unwrap_or_else(|| panic!("CP of a P never sent: {o}"));
                    self.commit(o, commit_lsn, changes);
                } else {
                    self.count("skipped");
                }
            }
            "RP" => {
                self.count("RP");
                self.prepared.remove(o["gid"].as_str().expect("gid"));
                self.streams.remove(&xid());
            }
            _ => {
                if action(o) == "T" {
                    self.count("T");
                }
                if let Some(x) = self.block {
                    let stream = self.streams.get_mut(&x).expect("block of a stream");
                    stream.0 += 1;
                    stream.1.push(o.clone());
                } else {
                    let (_, changes) = self
                        .txn
                        .as_mut()
                        .unwrap_or_else(|| panic!("a change outside a transaction: {o}"));
                    changes.push(o.clone());
                }
            }
        }
    }

    /// The streamed and prepared transactions it keeps, briefly.
    fn leftovers(&self) -> String {
        let streams: Vec<String> = self
            .streams
            .iter()
            .map(|(xid, (count, changes))| {
                let first = changes.first().map(|o| o.to_string()).unwrap_or_default();
                format!(
                    "xid {xid}: {count} changes, first {}",
                    pubjson_e2e::truncate(&first, 150)
                )
            })
            .collect();
        let gids: Vec<&String> = self.prepared.keys().collect();
        format!("streams {streams:?}, prepared {gids:?}")
    }

    /// Applies the complete lines of one pg_recvlogical session's file.
    fn session_from_file(&mut self, file: &std::path::Path) {
        self.new_session();
        for line in complete_lines(file) {
            let o: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            self.on(&o);
        }
    }
}

/// A consumer of what `slot` has now (SQL, format 3 and `extra`); the
/// objects are kept in `dump` for a failure's inquiry.
fn consume_sql(c: &mut Client, slot: &str, extra: &[&str], dump: &std::path::Path) -> Consumer {
    let objects = get(c, slot, extra);
    let lines: String = objects.iter().map(|o| format!("{o}\n")).collect();
    std::fs::write(dump, lines).expect("write the objects");
    let mut consumer = Consumer::default();
    for o in &objects {
        consumer.on(o);
    }
    consumer
}

/// Settings of a decoding session that stream every transaction (16+:
/// at once; 15: past 64 kB, the least `logical_decoding_work_mem`).
fn streaming_settings(major: u32) -> &'static str {
    if major >= 16 {
        "debug_logical_replication_streaming=immediate"
    } else {
        "logical_decoding_work_mem=64kB"
    }
}

/// One writer's random transactions, until `stop` is set or it has run
/// `WRITER_TRANSACTIONS` (and at least 60 of them): inserts, updates of
/// values, of TOAST values and of the key
/// (upwards, ahead of the backfill, and downwards, behind it: those also
/// write the TOAST column, see docs/backfill.md on the one exception),
/// deletes, rolled back transactions and savepoints, transactions large
/// enough to be streamed (with a subtransaction rolled back), two-phase
/// transactions kept prepared over the writer's next transactions (so that
/// chunks start and end while they are prepared) and then committed or
/// rolled back, and (writer 1, once 10 chunks are done) a TRUNCATE that
/// fills the table again in the same transaction, while the backfill runs
/// (checked); `truncated_flag` says it is done. Waits for a lock at most
/// 200 ms (a chunk may wait for a transaction this writer keeps prepared).
fn writer(
    dbname: &str,
    seed: u64,
    stop: &std::sync::atomic::AtomicBool,
    truncated_flag: &std::sync::atomic::AtomicBool,
) -> u64 {
    use std::sync::atomic::Ordering;
    let mut c = Server::main().connect(dbname);
    exec(&mut c, "set lock_timeout = '200ms'");
    let mut rng = SeededRng::new(seed);
    let mut done = 0;
    let mut next_key = 100_000 + seed as i64 * 100_000;
    let mut next_low = -(seed as i64) * 100_000;
    let mut prepared: std::collections::VecDeque<String> = Default::default();
    let mut truncated = seed != 1;
    let deadline = std::time::Instant::now() + TIMEOUT;
    let finish = |c: &mut Client, gid: &str, rng: &mut SeededRng| {
        let verb = if rng.chance(25) { "rollback" } else { "commit" };
        exec(c, &format!("{verb} prepared '{gid}'"));
    };
    // At most WRITER_TRANSACTIONS while the backfill runs, which bounds
    // the test's time (the backfill itself ends at the largest key of its
    // first chunk, whatever the writers add beyond it).
    while (!stop.load(Ordering::Relaxed) && done < WRITER_TRANSACTIONS) || done < 60 || !truncated {
        assert!(std::time::Instant::now() < deadline, "writer {seed}");
        if !truncated
            && one_row(
                &mut c,
                "select coalesce((select chunks >= 10 from pubjson.backfills), false)",
            )
            .get::<_, bool>(0)
        {
            // Its own prepared transactions would hold the TRUNCATE back.
            while let Some(gid) = prepared.pop_front() {
                finish(&mut c, &gid, &mut rng);
            }
            let refill = "begin; set local lock_timeout = '20s'; truncate t;
                 insert into t select i, 'again ' || i,
                        case when i % 10 = 0 then repeat(md5(i::text), 120) end
                   from generate_series(1, 3000) i";
            exec(&mut c, refill);
            // The backfill had to wait for it: it is still running.
            let state: String = one_row(&mut c, "select state from pubjson.backfills").get(0);
            assert_eq!(state, "running", "TRUNCATE during the backfill");
            exec(&mut c, "commit");
            truncated = true;
            truncated_flag.store(true, Ordering::Relaxed);
        }
        let id = 1 + rng.below(3000) as i64;
        let sql = match rng.below(12) {
            0 => format!("insert into t values ({id}, 'new {done}', NULL) on conflict do nothing"),
            1 => format!("update t set v = 'upd {seed} {done}' where id = {id}"),
            2 => format!("update t set big = repeat(md5('{done}'), 120) where id = {id}"),
            3 => {
                next_key += 1;
                format!("update t set id = {next_key} where id = {id}")
            }
            4 => {
                next_low -= 1;
                format!("update t set id = {next_low}, big = big || '' where id = {id}")
            }
            5 => format!("delete from t where id = {id}"),
            6 => format!("begin; update t set v = 'rolled back' where id = {id}; rollback"),
            7 => format!(
                "begin; update t set v = 'kept {done}' where id = {id};
                 savepoint s; delete from t where id = {}; rollback to savepoint s;
                 insert into t values ({}, 'sp', NULL) on conflict do nothing; commit",
                id + 1,
                3000 + id
            ),
            8 | 9 => {
                let gid = format!("bf-{seed}-{done}");
                let sql = format!(
                    "begin; update t set v = 'prepared {seed} {done}' where id = {id};
                     insert into t values ({}, 'prepared', NULL) on conflict do nothing;
                     prepare transaction '{gid}'",
                    id + 5000
                );
                if run_or_roll_back(&mut c, &sql) {
                    prepared.push_back(gid);
                }
                String::new()
            }
            _ => {
                // About 600 rows: streamed on 15 past 64 kB too.
                let to = if rng.chance(50) { "commit" } else { "rollback" };
                format!(
                    "begin; update t set v = 'bulk {seed} {done}' where id between {id} and {id} + 300;
                     savepoint s; update t set v = 'undone' where id between {id} + 301 and {id} + 600;
                     rollback to savepoint s;
                     update t set v = 'bulk kept' where id = {id} + 700; {to}"
                )
            }
        };
        if !sql.is_empty() {
            run_or_roll_back(&mut c, &sql);
        }
        if prepared.len() > 2 || (!prepared.is_empty() && rng.chance(30)) {
            let gid = prepared.pop_front().expect("gid");
            finish(&mut c, &gid, &mut rng);
        }
        done += 1;
    }
    while let Some(gid) = prepared.pop_front() {
        finish(&mut c, &gid, &mut rng);
    }
    done
}

/// Runs a writer's `sql`; whether it succeeded. A key update can collide
/// with a concurrent insert (23505); a lock held by a prepared transaction
/// times out (55P03), or a deadlock (40P01): then the transaction is
/// rolled back. Any other error fails.
fn run_or_roll_back(c: &mut Client, sql: &str) -> bool {
    let Err(e) = c.batch_execute(sql) else {
        return true;
    };
    let state = sqlstate(&e);
    assert!(
        ["23505", "55P03", "40P01"].contains(&state.as_str()),
        "{sql}: {}",
        describe_error(&e)
    );
    let _ = c.batch_execute("rollback");
    false
}

/// The issue's convergence check: four writers of every kind above while
/// a backfill of chunks of 20 rows runs (held at row 1500 until the
/// TRUNCATE comes, so that it comes mid-way); three consumers, each applying
/// what it gets as docs/format3.md's algorithm says, end with exactly the
/// table's rows: one over SQL with `two_phase` (prepared transactions at
/// PREPARE), one over SQL with `two_phase` and `streaming` (every
/// transaction streamed), one over pg_recvlogical with `streaming` and
/// without `two_phase` (prepared transactions at COMMIT PREPARED).
#[test]
fn a_replica_from_the_stream_alone_converges_while_writers_write() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let started = std::time::Instant::now();
    let (dbname, mut c) = database("converge");
    let major = pubjson_e2e::server_major(&mut c);
    exec(
        &mut c,
        "create table t (id int primary key, v text, big text);
         alter table t alter big set storage external;
         insert into t select i, 'v' || i,
                case when i % 10 = 0 then repeat(md5(i::text), 120) end
           from generate_series(1, 3000) i;",
    );
    {
        let _serial = serialize();
        for (name, two_phase) in [
            ("bf_converge_2pc", true),
            ("bf_converge_both", true),
            ("bf_converge_recv", false),
        ] {
            c.execute(
                "select pg_create_logical_replication_slot($1, 'pubjson', false, $2)",
                &[&name, &two_phase],
            )
            .unwrap_or_else(|e| panic!("slot {name}: {}", describe_error(&e)));
        }
    }
    let dir = scratch_dir("backfill-converge");
    let file = dir.join("stream.jsonl");
    // The replication connection's options stream every transaction.
    let conninfo = format!("dbname={dbname} options='-c {}'", streaming_settings(major));
    let mut recv = RecvLogical::start_in(
        &conninfo,
        "bf_converge_recv",
        &file,
        &[("format-version", Some("3")), ("streaming", Some("on"))],
        &[],
    );
    let (stop, truncated) = (AtomicBool::new(false), AtomicBool::new(false));
    // Row 1500 is held until writer 1's TRUNCATE waits (or is done): the
    // backfill, stopped there, runs still when the TRUNCATE is done.
    let mut holder = holding(&dbname, "begin; select from t where id = 1500 for update");
    let written = std::thread::scope(|s| {
        let writers: Vec<_> = (1..=4)
            .map(|seed| {
                let (dbname, stop, truncated) = (&dbname, &stop, &truncated);
                s.spawn(move || writer(dbname, seed, stop, truncated))
            })
            .collect();
        let (dbname, truncated) = (&dbname, &truncated);
        s.spawn(move || {
            let mut w = Server::main().connect(dbname);
            pubjson_e2e::wait_for("the TRUNCATE waits", TIMEOUT, || {
                truncated.load(Ordering::Relaxed)
                    || one_row(
                        &mut w,
                        "select exists (select from pg_stat_activity
                          where datname = current_database() and pid <> pg_backend_pid()
                            and query like '%truncate t;%' and wait_event_type = 'Lock')",
                    )
                    .get::<_, bool>(0)
            });
            exec(&mut holder, "commit");
        });
        // Small chunks: the writers hit chunks in progress.
        let mut b = Server::main().connect(dbname);
        exec(&mut b, "call pubjson.backfill('t', chunk_rows => 20)");
        stop.store(true, Ordering::Relaxed);
        writers
            .into_iter()
            .map(|w| w.join().expect("writer"))
            .sum::<u64>()
    });
    assert!(written >= 240, "{written}");
    // A writer's last transaction may have aborted: its abort record is in
    // the WAL but maybe not yet flushed (an abort never waits for it), and
    // the SQL functions decode only the flushed WAL, so a consumer that
    // streamed the transaction would miss its A. A commit of a transaction
    // that wrote WAL flushes everything before it.
    exec(
        &mut c,
        "select pg_logical_emit_message(true, 'bf-test', 'writers done')",
    );
    assert_eq!(
        one_row(&mut c, "select count(*) from pg_prepared_xacts").get::<_, i64>(0),
        0
    );
    let expected = table(&mut c, "t");
    let check = |what: &str, consumer: &Consumer, kinds: &[&str]| {
        assert_eq!(consumer.replica.starts, 1, "{what}");
        assert_eq!(consumer.replica.ends.len(), 1, "{what}");
        assert!(
            consumer.streams.is_empty() && consumer.prepared.is_empty(),
            "{what}: transactions left without their end: {}",
            consumer.leftovers()
        );
        for kind in kinds {
            assert!(
                consumer.seen.get(kind).is_some_and(|n| *n > 0),
                "{what}: no {kind} in {:?}",
                consumer.seen
            );
        }
        assert_same(what, &consumer.replica.rows, &expected);
        eprintln!("{what}: {:?}", consumer.seen);
    };

    let two_phase = consume_sql(&mut c, "bf_converge_2pc", &[], &dir.join("2pc.jsonl"));
    check("SQL, two_phase", &two_phase, &["P", "CP", "RP", "T"]);

    let (name, value) = streaming_settings(major)
        .split_once('=')
        .expect("name=value");
    exec(&mut c, &format!("set {name} = '{value}'"));
    let both = consume_sql(
        &mut c,
        "bf_converge_both",
        &["streaming", "on"],
        &dir.join("both.jsonl"),
    );
    exec(&mut c, "reset all");
    check(
        "SQL, two_phase and streaming",
        &both,
        &["P", "CP", "RP", "T", "A", "streamed C"],
    );

    end_of_stream(&mut c, &mut recv);
    let mut streaming = Consumer::default();
    streaming.session_from_file(&file);
    check(
        "pg_recvlogical, streaming",
        &streaming,
        &["T", "A", "streamed C"],
    );
    assert!(!streaming.seen.contains_key("P"), "{:?}", streaming.seen);
    drop_slot(&mut c, "bf_converge_2pc");
    drop_slot(&mut c, "bf_converge_both");
    drop_slot(&mut c, "bf_converge_recv");
    eprintln!(
        "converged: {written} writer transactions, {} rows, {:?}",
        expected.len(),
        started.elapsed()
    );
}

/// `create table {name} (id int primary key, v text)` with the rows 1 to
/// `n` (`v` is `'v' || id`).
fn numbered_table(name: &str, n: u32) -> String {
    format!(
        "create table {name} (id int primary key, v text);
         insert into {name} select i, 'v' || i from generate_series(1, {n}) i;"
    )
}

/// `create table m (id int primary key, v text)` partitioned by range of
/// `id` in m1 (1 to 99) and m2 (100 to 199), with every `step`th row of 1
/// to 199 (`v` is `'v' || id`).
fn partitioned_m(step: u32) -> String {
    format!(
        "create table m (id int primary key, v text) partition by range (id);
         create table m1 partition of m for values from (1) to (100);
         create table m2 partition of m for values from (100) to (200);
         insert into m select i, 'v' || i from generate_series(1, 199, {step}) i;"
    )
}

/// The test's database `name` (see `database`) after `sql`.
fn database_with(name: &str, sql: &str) -> (String, Client) {
    let (dbname, mut c) = database(name);
    exec(&mut c, sql);
    (dbname, c)
}

/// The test's database `name` (see `database`) after `sql`, with the slot
/// `slot_name` of pubjson.
fn database_with_slot(name: &str, sql: &str, slot_name: &str) -> (String, Client) {
    let (dbname, mut c) = database_with(name, sql);
    slot(&mut c, slot_name);
    (dbname, c)
}

/// A statement running in a session on a thread of its own.
type Background = std::thread::JoinHandle<(Client, Result<(), String>)>;

/// Runs `sql` in `client`'s session on a thread of its own; the thread
/// gives the session back (it stays connected) with the outcome's SQLSTATE.
fn in_background(mut client: Client, sql: &str) -> Background {
    let sql = sql.to_string();
    std::thread::spawn(move || {
        let outcome = client.batch_execute(&sql).map_err(|e| sqlstate(&e));
        (client, outcome)
    })
}

fn backend_pid(c: &mut Client) -> i32 {
    one_row(c, "select pg_backend_pid()").get(0)
}

fn wait_for_lock(c: &mut Client, what: &str, pid: i32) {
    wait_true(
        c,
        what,
        TIMEOUT,
        "select exists (select from pg_stat_activity where pid = $1 and wait_event_type = 'Lock')",
        &[&pid],
    );
}

/// A session of `dbname` of its own after `sql` (a transaction it keeps
/// open, holding rows).
fn holding(dbname: &str, sql: &str) -> Client {
    let mut holder = Server::main().connect(dbname);
    exec(&mut holder, sql);
    holder
}

/// A call waiting for a row another session holds.
struct Held {
    /// The session holding the row, in its transaction.
    holder: Client,
    /// The backend running the call.
    pid: i32,
    running: Background,
}

/// Runs `hold` (a transaction it keeps open, holding rows) in a session
/// of `dbname` of its own, then `call` in another one on a thread of its
/// own, and returns once the call waits for a lock (`what` says which).
fn held_call(c: &mut Client, dbname: &str, hold: &str, call: &str, what: &str) -> Held {
    let holder = holding(dbname, hold);
    let mut b = Server::main().connect(dbname);
    let pid = backend_pid(&mut b);
    let running = in_background(b, call);
    wait_for_lock(c, what, pid);
    Held {
        holder,
        pid,
        running,
    }
}

/// Cancels the statement of backend `pid`, which `running` runs: it fails
/// with 57014. Gives its session back.
fn cancel(c: &mut Client, pid: i32, running: Background) -> Client {
    exec(c, &format!("select pg_cancel_backend({pid})"));
    let (session, outcome) = running.join().expect("backfill thread");
    assert_eq!(outcome, Err("57014".to_string()));
    session
}

/// `running` ends without an error (`what` names it).
fn succeeds(running: Background, what: &str) {
    let (_, outcome) = running.join().expect("backfill thread");
    assert_eq!(outcome, Ok(()), "{what}");
}

/// The replica of `table` (keyed by `id`) from `objects`, and the
/// number of its F objects.
fn replica_of(objects: &[Value], table: &str) -> (Replica, usize) {
    let mut replica = Replica::default();
    let mut fs = 0;
    for o in objects {
        if o.get("table").is_some_and(|t| t != table) {
            continue;
        }
        if action(o) == "F" {
            fs += 1;
        }
        replica.apply(o);
    }
    (replica, fs)
}

/// A consumer's replica of the table `name` after one backfill of its
/// `rows` rows: one start, one end counting them, and the table's rows.
fn assert_converged(c: &mut Client, what: &str, replica: &Replica, name: &str, rows: u64) {
    assert_eq!(replica.starts, 1, "{what}");
    assert_eq!(replica.ends, [(name.to_string(), rows)], "{what}");
    assert_same(what, &replica.rows, &table(c, name));
}

/// What `slot` has now of the backfill of the table `name`: each of its
/// `rows` rows sent once, and a replica equal to the table.
fn assert_backfilled_once(c: &mut Client, what: &str, slot: &str, name: &str, rows: u64) {
    let objects = get(c, slot, &[]);
    let (replica, fs) = replica_of(&objects, name);
    assert_eq!(fs, rows as usize, "each row once");
    assert_converged(c, what, &replica, name, rows);
}

/// The ids of the F objects among `objects`, in their order.
fn f_ids<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Vec<i64> {
    objects
        .into_iter()
        .filter(|o| action(o) == "F")
        .map(|o| o["new"]["id"].as_i64().expect("id"))
        .collect()
}

/// The FS and FE objects among `objects`: action, table and rows.
fn markers(objects: &[Value]) -> Vec<(&str, &str, Option<u64>)> {
    objects
        .iter()
        .filter(|o| matches!(action(o), "FS" | "FE"))
        .map(|o| {
            (
                action(o),
                o["table"].as_str().expect("table"),
                o["rows"].as_u64(),
            )
        })
        .collect()
}

/// Nothing of a backfill (F, FS or FE) is among `objects`.
fn assert_no_backfill(objects: &[Value]) {
    assert!(
        objects
            .iter()
            .all(|o| !matches!(action(o), "F" | "FS" | "FE")),
        "{objects:#?}"
    );
}

/// Closes `session` (of `role`) and drops the role and what it owns.
fn drop_role(c: &mut Client, session: Client, role: &str) {
    drop(session);
    exec(c, &format!("drop owned by {role}; drop role {role}"));
}

#[test]
fn a_cancelled_backfill_resumes_and_a_second_one_is_refused() {
    let (dbname, mut c) = database_with_slot("resume", &numbered_table("t", 300), "bf_resume");
    // A writer holds row 150: the backfill waits at the chunk that reads it.
    let mut held = held_call(
        &mut c,
        &dbname,
        "begin; select * from t where id = 150 for update",
        "call pubjson.backfill('t', chunk_rows => 20)",
        "the backfill waits for the held row",
    );
    // Another session is refused while this one runs.
    let mut second = Server::main().connect(&dbname);
    let refused = second
        .batch_execute("call pubjson.backfill('t')")
        .expect_err("a second backfill");
    assert_eq!(sqlstate(&refused), "55006", "{}", describe_error(&refused));
    cancel(&mut c, held.pid, held.running);
    exec(
        &mut held.holder,
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
    assert_backfilled_once(&mut c, "resumed", "bf_resume", "t", 300);
    drop_slot(&mut c, "bf_resume");
}

#[test]
fn a_message_pubjson_did_not_write_is_ignored() {
    let (dbname, mut c) = database_with_slot(
        "forged",
        "create table t (id int primary key, v text);
         insert into t values (1, 'real');
         drop role if exists pubjson_bf_forger;
         create role pubjson_bf_forger login;
         grant select, update on t to pubjson_bf_forger;",
        "bf_forged",
    );
    exec(&mut c, "call pubjson.backfill('t')");
    let real = get(&mut c, "bf_forged", &[]);
    assert_eq!(real.iter().filter(|o| action(o) == "F").count(), 1);
    // Well-formed bytes of the layout (a row of t's row type is not even
    // needed to be refused), garbage, and a message written in the same
    // transaction as a real chunk: none is decoded.
    let relid: u32 = one_row(&mut c, "select 't'::regclass::oid").get(0);
    let mut forged = b"PJB2".to_vec();
    forged.extend_from_slice(&relid.to_le_bytes());
    forged.push(3);
    forged.extend_from_slice(&1u64.to_le_bytes());
    forged.extend_from_slice(&relid.to_le_bytes());
    forged.extend_from_slice(&1u32.to_le_bytes());
    forged.extend_from_slice(&4u32.to_le_bytes());
    forged.extend_from_slice(b"junk");
    let mut forger = Server::main().connect_as(&dbname, "pubjson_bf_forger");
    for content in [forged.clone(), b"PJB2".to_vec(), b"anything".to_vec()] {
        forger
            .execute(
                "select pg_logical_emit_message(true, 'pubjson.backfill', $1::bytea)",
                &[&content],
            )
            .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    }
    assert_no_backfill(&get(&mut c, "bf_forged", &[]));
    drop_role(&mut c, forger, "pubjson_bf_forger");
    drop_slot(&mut c, "bf_forged");
}

#[test]
fn publications_decide_which_rows_each_slot_gets() {
    let (_, mut c) = database_with(
        "publications",
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
    assert_no_backfill(&get(
        &mut c,
        "bf_pub_other",
        &["publication_names", "bf_other"],
    ));
    for s in ["bf_pub_even", "bf_pub_all", "bf_pub_other"] {
        drop_slot(&mut c, s);
    }
}

#[test]
fn partitions_are_backfilled_one_by_one_and_published_via_the_root() {
    let (_, mut c) = database_with_slot(
        "partitions",
        &format!(
            "{}
             create publication bf_root for table m with (publish_via_partition_root = true);",
            partitioned_m(7)
        ),
        "bf_parts",
    );
    exec(&mut c, "call pubjson.backfill('m')");
    let objects = get(&mut c, "bf_parts", &["publication_names", "bf_root"]);
    let tables: Vec<&str> = objects
        .iter()
        .filter(|o| action(o) == "F")
        .map(|o| o["table"].as_str().expect("table"))
        .collect();
    assert_eq!(tables.len(), 29);
    assert!(tables.iter().all(|t| *t == "m"), "{tables:?}");
    // One start and one end, naming the table the backfill was asked for,
    // counting the rows of both partitions.
    assert_eq!(
        markers(&objects),
        [("FS", "m", None), ("FE", "m", Some(29))]
    );
    drop_slot(&mut c, "bf_parts");
}

#[test]
fn bad_calls_are_refused_with_their_sqlstate() {
    let (dbname, mut c) = database_with(
        "errors",
        "create table nokey (v text);
         create table t (id int primary key);
         create view vw as select 1 as id;
         create unlogged table u (id int primary key);
         drop role if exists pubjson_bf_reader;
         create role pubjson_bf_reader login;
         grant usage on schema pubjson to pubjson_bf_reader;
         grant select on t to pubjson_bf_reader;",
    );
    let refused = |c: &mut Client, sql: &str, code: &str| {
        let e = c.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&e), code, "{sql}: {}", describe_error(&e));
    };
    for (sql, code) in [
        ("call pubjson.backfill('nokey')", "55000"),
        ("call pubjson.backfill('vw')", "42809"),
        ("call pubjson.backfill('u')", "55000"),
        ("call pubjson.backfill('pg_class')", "42809"),
        ("call pubjson.backfill('missing')", "42P01"),
        ("call pubjson.backfill('t', chunk_rows => 0)", "22023"),
        ("call pubjson.backfill('t', chunk_bytes => 10)", "22023"),
        ("call pubjson.backfill(NULL)", "22004"),
    ] {
        refused(&mut c, sql, code);
    }
    // Chunks commit: not inside a transaction block.
    refused(&mut c, "begin; call pubjson.backfill('t')", "2D000");
    exec(&mut c, "rollback");
    // FOR SHARE needs UPDATE on a column as well as SELECT; then an
    // ordinary role backfills (with USAGE on schema pubjson).
    let mut reader = Server::main().connect_as(&dbname, "pubjson_bf_reader");
    refused(&mut reader, "call pubjson.backfill('t')", "42501");
    exec(&mut c, "grant update (id) on t to pubjson_bf_reader");
    exec(&mut reader, "call pubjson.backfill('t')");
    // Nothing of a refused call stays behind as running.
    let left: i64 = one_row(
        &mut c,
        "select count(*) from pubjson.backfills where state = 'running'",
    )
    .get(0);
    assert_eq!(left, 0);
    drop_role(&mut c, reader, "pubjson_bf_reader");
}

/// D1: a chunk's end never comes from a row a writer changed while the
/// chunk waited for it. Under READ COMMITTED, PostgreSQL returns such a row
/// in its newest version, with its new key (20 -> 200001), where the old
/// one was: the chunk must neither end there nor skip the rows between.
/// Once where the chunk ends by its rows (the moved row is its last), once
/// where it ends by its bytes (the moved row is the one that reaches them),
/// and once more by its bytes with a writer that began after the chunk's
/// snapshot (its transaction id at or after the snapshot's xmax).
#[test]
fn a_key_moved_while_a_chunk_waits_skips_no_rows() {
    let (dbname, mut c) = database_with_slot(
        "moved",
        &format!(
            "{}
             create table w (id int primary key, v text);
             insert into w select i, repeat('x', 600) from generate_series(1, 50) i;
             create table x (like w including all);
             insert into x select * from w;",
            numbered_table("t", 100)
        ),
        "bf_moved",
    );
    for (table, held, call) in [
        ("t", 20, "call pubjson.backfill('t', chunk_rows => 20)"),
        // Rows of about 640 bytes: the second one reaches 1024.
        ("w", 2, "call pubjson.backfill('w', chunk_bytes => 1024)"),
    ] {
        let mut held = held_call(
            &mut c,
            &dbname,
            &format!("begin; update {table} set id = 200001 where id = {held}"),
            call,
            "the chunk waits for the moved row",
        );
        exec(&mut held.holder, "commit");
        succeeds(held.running, table);
    }
    // A writer that begins after the chunk's snapshot (the chunk waits at
    // row 1) moves the row that reaches the bytes: its version is not the
    // snapshot's either.
    let mut first = held_call(
        &mut c,
        &dbname,
        "begin; select * from x where id = 1 for update",
        "call pubjson.backfill('x', chunk_bytes => 1024)",
        "the chunk waits for row 1",
    );
    exec(&mut c, "update x set id = 200001 where id = 2");
    exec(&mut first.holder, "commit");
    succeeds(first.running, "x");

    let objects = get(&mut c, "bf_moved", &[]);
    for (table, rows) in [("t", 100), ("w", 50), ("x", 50)] {
        let (replica, fs) = replica_of(&objects, table);
        assert_eq!(replica.starts, 1, "{table}");
        assert_eq!(replica.ends.len(), 1, "{table}");
        // The moved row's new key (200001) is beyond the run's end (the
        // largest key when it started): its U is the stream's.
        assert!(fs >= rows - 1, "{table}: {fs} F for {rows} rows");
        assert_same(table, &replica.rows, &self::table(&mut c, table));
    }
    drop_slot(&mut c, "bf_moved");
}

/// D2: a cancelled CALL whose session stays connected no longer owns the
/// backfill: the view says it stopped, and another session (or the same
/// one) resumes it at once.
#[test]
fn a_cancelled_backfill_resumes_at_once_in_any_session() {
    let (dbname, mut c) = database_with_slot("cancel", &numbered_table("t", 300), "bf_cancel");
    let mut b = Server::main().connect(&dbname);
    let pid = backend_pid(&mut b);
    let mut other = Server::main().connect(&dbname);
    // Cancelled twice, each time while a chunk waits for a held row: the
    // same session resumes the first time, another one the second time.
    for (held, resumer) in [(100, "same"), (200, "other")] {
        let mut holder = holding(
            &dbname,
            &format!("begin; select * from t where id = {held} for update"),
        );
        let running = in_background(b, "call pubjson.backfill('t', chunk_rows => 20)");
        wait_for_lock(&mut c, "the backfill waits for the held row", pid);
        b = cancel(&mut c, pid, running);
        exec(&mut holder, "commit");
        // Still connected, and no longer running it.
        assert_eq!(backend_pid(&mut b), pid);
        let view = one_row(&mut c, "select state, stopped from pubjson.backfills");
        assert_eq!(view.get::<_, String>(0), "running");
        assert!(
            view.get::<_, bool>(1),
            "stopped after the cancel ({resumer})"
        );
        if resumer == "same" {
            // Resumed up to the next held row, then cancelled again above.
            continue;
        }
        exec(&mut other, "call pubjson.backfill('t', chunk_rows => 20)");
    }
    assert_backfilled_once(&mut c, "resumed", "bf_cancel", "t", 300);
    drop_slot(&mut c, "bf_cancel");
}

/// D3: `restart => true` discards a stopped backfill's progress and
/// starts again, with a new FS.
#[test]
fn restart_discards_a_stopped_backfill() {
    let (_, mut c) = database_with_slot("restart", &numbered_table("t", 30), "bf_restart");
    // A backfill stopped after its first chunk (this session's statements
    // ended: nothing runs it).
    exec(
        &mut c,
        "select pubjson._backfill_start('t'::regclass::oid, 10, 1048576, false, 't'::regclass::oid);
         select pubjson._backfill_chunk('t'::regclass::oid, 't'::regclass::oid, 10, 1048576, true);",
    );
    let stopped = one_row(
        &mut c,
        "select stopped, last_key::text from pubjson.backfills",
    );
    assert!(stopped.get::<_, bool>(0));
    assert_eq!(stopped.get::<_, String>(1), "{10}");
    exec(&mut c, "call pubjson.backfill('t', restart => true)");
    let objects = get(&mut c, "bf_restart", &[]);
    let second_start = objects.iter().rposition(|o| action(o) == "FS").expect("FS");
    let starts = objects.iter().filter(|o| action(o) == "FS").count();
    assert_eq!(starts, 2, "{objects:#?}");
    let (replica, fs) = replica_of(&objects[second_start..], "t");
    assert_eq!(fs, 30, "every row after the new start");
    assert_eq!(replica.ends, [("t".to_string(), 30)]);
    let progress = one_row(&mut c, "select chunks, rows from pubjson.backfills");
    assert_eq!(progress.get::<_, i64>(1), 30);
    drop_slot(&mut c, "bf_restart");
}

/// D4: the resume key is the same text whatever the sessions' DateStyle,
/// TimeZone and extra_float_digits: a backfill stopped in one session
/// resumes in another with other settings, each row sent once.
#[test]
fn the_resume_key_does_not_depend_on_session_settings() {
    let (dbname, mut c) = database_with_slot(
        "settings",
        "create table ts (k timestamptz primary key, id int);
         insert into ts select timestamptz '2026-03-04 10:00:00.123456+00' + i * interval '1 day 1 hour', i
           from generate_series(1, 30) i;
         create table fl (k float8 primary key, id int);
         insert into fl select i * 0.1::float8, i from generate_series(1, 30) i;",
        "bf_settings",
    );
    // Stopped after a first chunk under some settings, resumed under
    // others (in the same session: it owns the backfill either way).
    let mut a = Server::main().connect(&dbname);
    for sql in [
        "set datestyle = 'SQL, DMY'; set timezone = 'Asia/Kolkata'; set extra_float_digits = 0;
         set intervalstyle = 'sql_standard';
         select pubjson._backfill_start('ts'::regclass::oid, 7, 1048576, false, 'ts'::regclass::oid);
         select pubjson._backfill_chunk('ts'::regclass::oid, 'ts'::regclass::oid, 7, 1048576, true);
         select pubjson._backfill_start('fl'::regclass::oid, 3, 1048576, false, 'fl'::regclass::oid);
         select pubjson._backfill_chunk('fl'::regclass::oid, 'fl'::regclass::oid, 3, 1048576, true);",
        "set datestyle = 'ISO, MDY'; set timezone = 'America/New_York'; set extra_float_digits = 1",
        "call pubjson.backfill('ts', chunk_rows => 7)",
        "call pubjson.backfill('fl', chunk_rows => 3)",
    ] {
        exec(&mut a, sql);
    }
    let objects = get(&mut c, "bf_settings", &[]);
    for table in ["ts", "fl"] {
        let ids = f_ids(objects.iter().filter(|o| o["table"] == table));
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, (1..=30).collect::<Vec<i64>>(), "{table}: {ids:?}");
        let ends: Vec<u64> = objects
            .iter()
            .filter(|o| action(o) == "FE" && o["table"] == table)
            .map(|o| o["rows"].as_u64().expect("rows"))
            .collect();
        assert_eq!(ends, [30], "{table}");
    }
    drop_slot(&mut c, "bf_settings");
}

/// D5: the progress row of a dropped table does not make a new table that
/// got the same OID resume at the old key (the OID's reuse is simulated by
/// moving the row, as the test cannot make PostgreSQL reuse an OID).
#[test]
fn a_dropped_tables_progress_is_not_resumed_by_a_new_table() {
    let (_, mut c) = database_with_slot(
        "reused",
        &format!(
            "create table gone (id int primary key);
             insert into gone select generate_series(1, 20);
             select pubjson._backfill_start('gone'::regclass::oid, 5, 1048576, false, 'gone'::regclass::oid);
             select pubjson._backfill_chunk('gone'::regclass::oid, 'gone'::regclass::oid, 5, 1048576, true);
             create temporary table gone_oid as select 'gone'::regclass::oid as oid;
             drop table gone;
             {}",
            numbered_table("fresh", 20)
        ),
        "bf_reused",
    );
    exec(
        &mut c,
        "update pubjson.backfill_progress set relid = 'fresh'::regclass
          where relid = (select oid from gone_oid)",
    );
    exec(&mut c, "call pubjson.backfill('fresh')");
    assert_backfilled_once(&mut c, "fresh", "bf_reused", "fresh", 20);
    drop_slot(&mut c, "bf_reused");
}

/// A role under row-level security would read only the rows its policies
/// show: refused (42501) before anything starts, not a partial copy.
#[test]
fn row_level_security_is_refused() {
    let (dbname, mut c) = database_with(
        "rls",
        "create table t (id int primary key, owner text);
         insert into t select i, case when i % 2 = 0 then 'pubjson_bf_rls' else 'other' end
           from generate_series(1, 10) i;
         alter table t enable row level security;
         create policy mine on t using (owner = current_user);
         drop role if exists pubjson_bf_rls;
         create role pubjson_bf_rls login;
         grant usage on schema pubjson to pubjson_bf_rls;
         grant select, update on t to pubjson_bf_rls;",
    );
    let mut reader = Server::main().connect_as(&dbname, "pubjson_bf_rls");
    let e = reader
        .batch_execute("call pubjson.backfill('t')")
        .expect_err("a backfill under row-level security");
    assert_eq!(sqlstate(&e), "42501", "{}", describe_error(&e));
    let text = describe_error(&e);
    assert!(text.contains("row-level security"), "{text}");
    let left: i64 = one_row(&mut c, "select count(*) from pubjson.backfill_progress").get(0);
    assert_eq!(left, 0);
    // The owner (here a superuser) is not under its policies.
    exec(&mut c, "call pubjson.backfill('t')");
    drop_role(&mut c, reader, "pubjson_bf_rls");
}

/// A chunk that fails with lock_timeout, or as a deadlock's victim, is
/// tried again and the backfill completes.
#[test]
fn lock_timeouts_and_deadlocks_are_retried() {
    let (dbname, mut c) = database_with_slot(
        "retry",
        &format!("{}{}", numbered_table("t", 40), numbered_table("d", 10)),
        "bf_retry",
    );

    // lock_timeout: the row is released after the chunk timed out once
    // (its lock is asked for a second time, a later wait).
    let mut holder = holding(&dbname, "begin; select * from t where id = 5 for update");
    let mut b = Server::main().connect(&dbname);
    let pid = backend_pid(&mut b);
    exec(&mut b, "set lock_timeout = '100ms'");
    let running = in_background(b, "call pubjson.backfill('t', chunk_rows => 10)");
    let waiting = "select min(waitstart)::text from pg_locks where pid = $1 and not granted";
    let first: String = pubjson_e2e::poll("the chunk's first wait", TIMEOUT, || {
        c.query_one(waiting, &[&pid])
            .ok()?
            .get::<_, Option<String>>(0)
    });
    pubjson_e2e::poll("a wait after the timeout", TIMEOUT, || {
        let now: Option<String> = c.query_one(waiting, &[&pid]).ok()?.get(0);
        now.filter(|w| *w != first)
    });
    exec(&mut holder, "commit");
    succeeds(running, "t");

    // A deadlock whose victim is the chunk: it holds rows 1-4 and waits for
    // row 5, whose writer then waits for row 2.
    exec(&mut holder, "begin; update d set v = 'held' where id = 5");
    let mut b = Server::main().connect(&dbname);
    let pid = backend_pid(&mut b);
    // The chunk is the one to find the deadlock: it checks 2 s after it
    // began to wait, by when the writer waits too.
    exec(&mut b, "set deadlock_timeout = '2s'");
    let running = in_background(b, "call pubjson.backfill('d', chunk_rows => 10)");
    wait_for_lock(&mut c, "the chunk waits for row 5", pid);
    exec(&mut holder, "set deadlock_timeout = '1min'");
    let writer = in_background(holder, "update d set v = 'waited' where id = 2; commit");
    let (_, written) = writer.join().expect("writer thread");
    assert_eq!(written, Ok(()), "the writer is not the victim");
    succeeds(running, "d");

    let objects = get(&mut c, "bf_retry", &[]);
    for (name, rows) in [("t", 40), ("d", 10)] {
        let (replica, _) = replica_of(&objects, name);
        assert_eq!(replica.ends, [(name.to_string(), rows)], "{name}");
        assert_same(name, &replica.rows, &table(&mut c, name));
    }
    drop_slot(&mut c, "bf_retry");
}

/// A partitioned table's backfill stopped in its second partition resumes
/// there: the first one is not read again, and the markers (one start, one
/// end) name the partitioned table and count the rows of both.
#[test]
fn a_partitioned_backfill_resumes_in_the_partition_it_stopped_in() {
    let (dbname, mut c) = database_with_slot("partresume", &partitioned_m(1), "bf_partresume");
    let mut held = held_call(
        &mut c,
        &dbname,
        "begin; select * from m where id = 150 for update",
        "call pubjson.backfill('m', chunk_rows => 10)",
        "the backfill waits in the second partition",
    );
    cancel(&mut c, held.pid, held.running);
    exec(&mut held.holder, "commit");
    let mut other = Server::main().connect(&dbname);
    exec(&mut other, "call pubjson.backfill('m', chunk_rows => 10)");
    let objects = get(&mut c, "bf_partresume", &[]);
    let mut ids = f_ids(&objects);
    ids.sort();
    assert_eq!(ids, (1..=199).collect::<Vec<i64>>(), "each row once");
    assert_eq!(
        markers(&objects),
        [("FS", "m", None), ("FE", "m", Some(199))]
    );
    let progress = rows(
        &mut c,
        "select relation::text, state, rows from pubjson.backfills order by 1",
    );
    let progress: Vec<(String, String, i64)> = progress
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        progress,
        [
            ("m".to_string(), "finished".to_string(), 199),
            ("m1".to_string(), "finished".to_string(), 99),
            ("m2".to_string(), "finished".to_string(), 100),
        ]
    );
    drop_slot(&mut c, "bf_partresume");
}

/// A table of 2000 rows (every tenth with a TOAST value) for the tests of
/// backfills killed mid-way.
const KILLED_TABLE: &str = "create table t (id int primary key, v text, big text);
     alter table t alter big set storage external;
     insert into t select i, 'v' || i,
            case when i % 10 = 0 then repeat(md5(i::text), 120) end
       from generate_series(1, 2000) i;";

/// Writes while a killed backfill is stopped: behind it, ahead of it, and
/// a new row beyond the run's end (the stream's I: the resumed backfill
/// still sends the 2000 rows there were when it started).
const WHILE_STOPPED: &str = "update t set v = 'behind' where id = 5;
     update t set v = 'ahead', big = repeat('z', 3000) where id = 1500;
     insert into t values (2500, 'new', NULL);";

/// Starts `CALL pubjson.backfill('t', chunk_rows => 50)` in a session of
/// its own on `server` and returns once it is mid-way: chunks done, and
/// the next one waiting for row 1000, which `holder` keeps locked.
fn backfill_held_mid_way(
    server: &Server,
    dbname: &str,
    holder: &mut Client,
    c: &mut Client,
) -> (i32, Background) {
    exec(holder, "begin; update t set v = 'held' where id = 1000");
    let mut b = server.connect(dbname);
    let pid = backend_pid(&mut b);
    let running = in_background(b, "call pubjson.backfill('t', chunk_rows => 50)");
    wait_true(
        c,
        "the backfill is mid-way",
        TIMEOUT,
        "select exists (select from pubjson.backfills where chunks > 0)
            and exists (select from pg_stat_activity where pid = $1 and wait_event_type = 'Lock')",
        &[&pid],
    );
    (pid, running)
}

fn wait_stopped(c: &mut Client) {
    wait_true(
        c,
        "the backfill is stopped",
        TIMEOUT,
        "select coalesce((select state = 'running' and stopped from pubjson.backfills), false)",
        &[],
    );
}

/// The pg_recvlogical consumer's end: a transactional message, then a
/// non-transactional one decoded after the first one's commit (its C is in
/// the file once the second is), which it waits for.
fn end_of_stream(c: &mut Client, recv: &mut RecvLogical) {
    exec(
        c,
        "select pg_logical_emit_message(true, 'bf-test', 'the end');
         select pg_logical_emit_message(false, 'bf-test', 'the very end')",
    );
    recv.wait_received("the very end", TIMEOUT);
    recv.stop();
}

/// The issue's "killed mid-way" (1): the backend running the CALL is
/// terminated (pg_terminate_backend) while a chunk waits; another session
/// resumes it. A pg_recvlogical consumer streaming all along ends with the
/// table, each row sent once, and FE counts every row read.
#[test]
fn a_terminated_backfill_resumes_from_another_session() {
    let started = std::time::Instant::now();
    let (dbname, mut c) = database_with_slot("terminated", KILLED_TABLE, "bf_terminated");
    let file = scratch_dir("backfill-terminated").join("stream.jsonl");
    let mut recv = RecvLogical::format3_in(&dbname, "bf_terminated", &file);
    let server = Server::main();
    let mut holder = server.connect(&dbname);
    let (pid, running) = backfill_held_mid_way(&server, &dbname, &mut holder, &mut c);
    let terminated = one_row(
        &mut c,
        &format!("select pg_terminate_backend({pid}, 60000)"),
    );
    assert!(terminated.get::<_, bool>(0));
    let (_, outcome) = running.join().expect("backfill thread");
    assert!(outcome.is_err(), "{outcome:?}");
    wait_stopped(&mut c);
    exec(&mut holder, "commit");
    exec(&mut c, WHILE_STOPPED);
    let mut other = server.connect(&dbname);
    exec(&mut other, "call pubjson.backfill('t', chunk_rows => 50)");
    end_of_stream(&mut c, &mut recv);

    let mut consumer = Consumer::default();
    consumer.session_from_file(&file);
    let fs = complete_lines(&file)
        .iter()
        .filter(|l| l.contains(r#""action":"F","#))
        .count();
    assert_eq!(fs, 2000, "each row once");
    assert_converged(
        &mut c,
        "resumed after pg_terminate_backend",
        &consumer.replica,
        "t",
        2000,
    );
    drop_slot(&mut c, "bf_terminated");
    eprintln!("terminated and resumed: {:?}", started.elapsed());
}

/// The suite's own cluster, stopped with `-m immediate` mid-backfill.
const CRASHED: pubjson_e2e::Place = pubjson_e2e::Place::new("backfill", 54391);

/// The issue's "killed mid-way" (2): the cluster is stopped with
/// `pg_ctl -m immediate` while a chunk waits, and started again; the
/// backfill resumes with a new CALL. The pg_recvlogical consumer that was
/// streaming (and had F rows already) reconnects with a new run and
/// applies what it gets, skipping the transactions sent again whose
/// commit it applied: its replica ends equal to the table.
#[test]
fn a_backfill_stopped_by_an_immediate_shutdown_resumes_after_the_restart() {
    let started = std::time::Instant::now();
    let cluster = CRASHED.take();
    let server = cluster.server();
    let dbname = "pubjson_bf_crashed";
    let mut c = server.fresh_database_with_pubjson(dbname);
    exec(&mut c, KILLED_TABLE);
    exec(
        &mut c,
        "select pg_create_logical_replication_slot('bf_crashed', 'pubjson')",
    );
    let dir = scratch_dir("backfill-crashed");
    let (before, after) = (dir.join("before.jsonl"), dir.join("after.jsonl"));
    let recv_into = |file: &std::path::Path| {
        RecvLogical::start_on(
            &server,
            ("postgres", dbname),
            "bf_crashed",
            file,
            &["format-version=3"],
            &[],
        )
    };
    let mut recv = recv_into(&before);
    let mut holder = server.connect(dbname);
    let (_, running) = backfill_held_mid_way(&server, dbname, &mut holder, &mut c);
    // The consumer has rows of the backfill when the server goes.
    recv.wait_received(r#""action":"F""#, TIMEOUT);
    cluster.pg_ctl_restart("immediate");
    let (_, outcome) = running.join().expect("backfill thread");
    assert!(outcome.is_err(), "{outcome:?}");
    drop(holder);
    recv.wait_exit(TIMEOUT);

    let mut c = server.connect(dbname);
    wait_stopped(&mut c);
    exec(&mut c, WHILE_STOPPED);
    let mut recv = recv_into(&after);
    exec(&mut c, "call pubjson.backfill('t', chunk_rows => 50)");
    end_of_stream(&mut c, &mut recv);

    let mut consumer = Consumer::default();
    consumer.session_from_file(&before);
    consumer.session_from_file(&after);
    assert_converged(
        &mut c,
        "resumed after an immediate shutdown",
        &consumer.replica,
        "t",
        2000,
    );
    drop_slot(&mut c, "bf_crashed");
    eprintln!(
        "stopped, restarted and resumed: {:?}, {:?}",
        started.elapsed(),
        consumer.seen
    );
}

/// A table growing at its end: the run ends at the largest key its first
/// chunk found (`end_key`), and rows inserted beyond it reach the replica
/// as the stream's I objects, so a backfill ends however fast its table
/// grows. The rows are inserted while a chunk waits for a locked row in
/// the middle: a backfill without an end would read them (F beyond 2000).
#[test]
fn a_backfill_of_a_table_growing_at_its_end_ends() {
    let (dbname, mut c) = database_with_slot(
        "growing",
        "create table g (id bigint generated always as identity primary key, v text);
         insert into g (v) select 'row ' || i from generate_series(1, 2000) i;",
        "bf_growing",
    );
    let mut held = held_call(
        &mut c,
        &dbname,
        "begin; select * from g where id = 1000 for update",
        "call pubjson.backfill('g', chunk_rows => 20)",
        "a chunk waits for row 1000",
    );
    exec(
        &mut c,
        "insert into g (v) select 'later ' || i from generate_series(1, 100) i;
         update g set v = v || ' updated' where id = 2050",
    );
    exec(&mut held.holder, "commit");
    succeeds(held.running, "the backfill ends");
    let end: i64 = c
        .query_one(
            "select end_key[1]::bigint from pubjson.backfill_progress where relid = 'g'::regclass",
            &[],
        )
        .expect("end_key")
        .get(0);
    assert_eq!(end, 2000, "the largest key when the first chunk ran");
    let shown: String = c
        .query_one(
            "select end_key::text from pubjson.backfills where relation = 'g'::regclass",
            &[],
        )
        .expect("the view's end_key")
        .get(0);
    assert_eq!(shown, "{2000}", "the view shows where the run ends");

    let objects = get(&mut c, "bf_growing", &[]);
    let (replica, fs) = replica_of(&objects, "g");
    let beyond: Vec<i64> = f_ids(&objects).into_iter().filter(|&id| id > end).collect();
    assert!(beyond.is_empty(), "F objects beyond the end: {beyond:?}");
    assert_eq!(fs, 2000, "every row present at the start, once");
    assert_converged(&mut c, "g", &replica, "g", 2000);
    assert_eq!(replica.rows.len(), 2100);
    drop_slot(&mut c, "bf_growing");
}
