//! Format 3 through the logical replication protocol, read by the support
//! library's own client (`pubjson_e2e::walsender`), as production
//! consumers read it, not through pg_recvlogical.
//!
//! A message may hold several format 3 objects, one per line (`batch-bytes`;
//! when the installed pubjson does not know that option, every message holds
//! one object and the tests check that instead, noting the skip):
//!
//! - `same_objects_as_pg_recvlogical`: slots created at the same point on
//!   the shared cluster decode one workload (small, large, streamed,
//!   aborted, prepared transactions, a rolled-back savepoint, logical
//!   messages in and outside transactions, updates, deletes, a truncate);
//!   the protocol client's messages, split on `\n`, give exactly the lines
//!   pg_recvlogical writes, with `batch-bytes` 0, 300 and the default;
//!   every message holds whole JSON objects, no empty line, and ends at
//!   every `C`, `E`, `A`, `P`, `CP`, `RP` and non-transactional `M` (the
//!   message of a `C`, `P`, `CP`, `RP` has its `nextlsn` as LSN).
//! - `reconnect_after_walsender_terminated`, `..._killed`,
//!   `..._after_immediate_restart`: a writer commits multi-row transactions
//!   (inserts, updates, deletes, rollbacks) spanning several batches on a
//!   cluster of the suite's own (`$PUBJSON_TMP/pubjson-walsender`, port
//!   54350) while a consumer processes message by message and confirms
//!   each message's LSN once processed; in every round, once inside a
//!   transaction (between two batches of it), the fault strikes:
//!   `pg_terminate_backend` of its walsender, kill -9 of it, or an
//!   immediate restart of the cluster. In even rounds the consumer then
//!   processes what still arrives until the connection fails; in odd
//!   rounds it first goes on without confirming until it has applied that
//!   transaction, then processes half of the next batch (not confirmed),
//!   and the fault cuts the rest. It reconnects from its own confirmed
//!   position (sessions alternate between the default batch, 300 bytes and
//!   none) and continues. Applying what it received, skipping a transaction
//!   whose commit LSN it has applied already (the documented at-least-once
//!   rule; every transaction applied unconfirmed must come again), must
//!   give the table exactly, with every committed transaction applied
//!   exactly once.

use postgres::Client;
use pubjson_e2e::walsender::plugin_accepts;
use pubjson_e2e::WalsenderFault as Fault;
use pubjson_e2e::{
    complete_lines, exec, lsn, lsn_text, note_skip, one_string, retry, serialize, soak, Place,
    RecvLogical, SeededRng, SerialCluster, Server, Walsender, WalsenderError, XLogData,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for a message it knows is coming.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// The objects of one message, checked: whole JSON objects, one per line,
/// no empty line, no trailing newline, and nothing after an object that
/// ends a batch. `batch_bytes`: the session's `batch-bytes` (`Some(0)`
/// also when the plugin does not batch): a message of several objects was
/// below it before its last object.
fn split_message(m: &XLogData, batch_bytes: Option<usize>) -> Vec<(String, Value)> {
    let text = m.text();
    let at = lsn_text(m.lsn);
    assert!(!text.is_empty(), "empty message at {at}");
    let lines: Vec<&str> = text.split('\n').collect();
    let objects: Vec<(String, Value)> = lines
        .iter()
        .map(|line| {
            assert!(
                !line.is_empty(),
                "an empty line in the message at {at}: {}",
                pubjson_e2e::truncate(text, 500)
            );
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "not one JSON object per line in the message at {at} ({e}): {}",
                    pubjson_e2e::truncate(line, 500)
                )
            });
            assert!(
                v.is_object() && v["action"].is_string(),
                "{at}: not an object: {line}"
            );
            (line.to_string(), v)
        })
        .collect();
    for (line, v) in &objects[..objects.len() - 1] {
        assert!(
            !ends_batch(v),
            "the message at {at} goes on after {line}: {}",
            pubjson_e2e::truncate(text, 1000)
        );
    }
    match batch_bytes {
        Some(0) => assert_eq!(
            objects.len(),
            1,
            "batch-bytes 0 but several objects in the message at {at}: {}",
            pubjson_e2e::truncate(text, 1000)
        ),
        Some(limit) if objects.len() > 1 => {
            let before_last = text.len() - objects.last().unwrap().0.len() - 1;
            assert!(
                before_last < limit,
                "the message at {at} ({} bytes, {} objects) was at {before_last} bytes before \
                 its last object, batch-bytes {limit}",
                text.len(),
                objects.len()
            );
        }
        _ => {}
    }
    let (_, last) = objects.last().unwrap();
    if matches!(action(last), "C" | "P" | "CP" | "RP") {
        let next = lsn(last["nextlsn"].as_str().expect("nextlsn"));
        assert_eq!(
            m.lsn, next,
            "the message ending with {last} has LSN {at}, not the transaction's end"
        );
    }
    objects
}

fn action(v: &Value) -> &str {
    v["action"].as_str().unwrap_or("?")
}

/// Objects after which a batch ends (issue 28): the end of a transaction,
/// of a streamed block, a stream abort, the two-phase events, and a
/// message outside any transaction.
fn ends_batch(v: &Value) -> bool {
    match action(v) {
        "C" | "E" | "A" | "P" | "CP" | "RP" => true,
        "M" => v["transactional"] == false,
        _ => false,
    }
}

/// The `batch-bytes` values to try when `slot`'s plugin accepts the
/// option (`None`: the default); otherwise only the default, with the skip
/// noted.
fn batch_variants(c: &mut Client, slot: &str, test: &str) -> Vec<Option<&'static str>> {
    if plugin_accepts(c, slot, &[("format-version", "3"), ("batch-bytes", "0")]) {
        vec![Some("0"), Some("300"), None]
    } else {
        note_skip(
            test,
            "this pubjson has no batch-bytes option: only one object per message is checked",
        );
        vec![None]
    }
}

/// `options` with `batch-bytes` set to `batch` (left out when `None`),
/// and what the checks take as the bound on a message's objects: the
/// batch, 0 when the plugin does not batch (`variants` is only the
/// default), none for the default of a plugin that batches.
fn with_batch<'a>(
    options: &[(&'a str, &'a str)],
    batch: Option<&'a str>,
    variants: &[Option<&str>],
) -> (Vec<(&'a str, &'a str)>, Option<usize>) {
    let mut opts = options.to_vec();
    if let Some(b) = batch {
        opts.push(("batch-bytes", b));
    }
    let bound = match batch {
        Some(b) => Some(b.parse().unwrap()),
        None if variants.len() == 1 => Some(0),
        None => None,
    };
    (opts, bound)
}

// ===========================================================================
// The protocol client and pg_recvlogical read the same objects
// ===========================================================================

const OBJECTS_DB: &str = "pubjson_walsender_objects";

/// Transactions of every kind; streaming starts above 64 kB
/// (`logical_decoding_work_mem` of the database).
fn objects_workload(c: &mut Client) {
    for i in 1..=20 {
        exec(c, &format!("insert into t values ({i}, 'small {i}', {i})"));
    }
    exec(
        c,
        "select pg_logical_emit_message(false, 'ws', 'outside 1')",
    );
    exec(
        c,
        "begin;
         insert into t select i, 'big ' || repeat('x', 50) || i, i from generate_series(1001, 4000) i;
         select pg_logical_emit_message(true, 'ws', 'inside');
         update t set n = n + 1 where id <= 10;
         commit",
    );
    exec(
        c,
        "begin;
         insert into t select i, 'kept', i from generate_series(5001, 6000) i;
         savepoint s;
         insert into t select i, 'rolled back', i from generate_series(6001, 7000) i;
         rollback to savepoint s;
         insert into t select i, 'kept too', i from generate_series(7001, 7100) i;
         commit",
    );
    exec(
        c,
        "begin;
         insert into t select i, 'aborted', i from generate_series(8001, 10000) i;
         rollback",
    );
    exec(
        c,
        "begin;
         insert into t select i, 'medium ' || i, i from generate_series(10001, 10050) i;
         select pg_logical_emit_message(false, 'ws', 'outside, while a transaction is open');
         insert into u values ('a', '{\"k\": [1, null, \"x\\ny\"]}'), ('b', 'null');
         commit",
    );
    // One statement per query: COMMIT/ROLLBACK PREPARED refuse a
    // transaction block (which a multi-statement query is).
    for sql in [
        "begin;
         insert into t select i, 'prepared', i from generate_series(11001, 11050) i;
         prepare transaction 'ws1'",
        "commit prepared 'ws1'",
        "begin;
         insert into t select i, 'prepared, streamed', i from generate_series(12001, 14000) i;
         prepare transaction 'ws2'",
        "rollback prepared 'ws2'",
    ] {
        exec(c, sql);
    }
    exec(c, "delete from t where id % 7 = 0 and id < 4000");
    exec(c, "truncate u");
    exec(
        c,
        "select pg_logical_emit_message(false, 'ws', 'outside 2')",
    );
    exec(c, "insert into t values (-1, 'end', 0)");
}

/// The lines up to the `C` of the transaction that inserted row -1.
fn up_to_marker(lines: &[String]) -> Option<usize> {
    let marker = lines.iter().position(|l| {
        let v: Value = serde_json::from_str(l).unwrap_or_default();
        action(&v) == "I" && v["new"]["id"] == -1
    })?;
    lines[marker..]
        .iter()
        .position(|l| l.starts_with(r#"{"action":"C""#))
        .map(|i| marker + i + 1)
}

#[derive(Debug, Default)]
struct MessageStats {
    messages: usize,
    objects: usize,
    multi: usize,
    largest: usize,
}

#[test]
fn same_objects_as_pg_recvlogical() {
    let server = Server::main();
    // A run that failed half-way may have left a prepared transaction,
    // which keeps the database from being dropped.
    if let Ok(mut old) = server.try_connect(OBJECTS_DB, "postgres") {
        for gid in ["ws1", "ws2"] {
            let _ = old.batch_execute(&format!("rollback prepared '{gid}'"));
        }
    }
    let mut c = server.fresh_database(OBJECTS_DB);
    exec(
        &mut c,
        &format!(
            "create table t (id int primary key, v text, n int);
             create table u (k text primary key, doc jsonb);
             alter database {OBJECTS_DB} set logical_decoding_work_mem = '64kB'"
        ),
    );
    let slots = ["ws_obj_ref", "ws_obj_0", "ws_obj_300", "ws_obj_default"];
    {
        let _serial = serialize();
        for s in slots {
            exec(
                &mut c,
                &format!(
                    "select pg_create_logical_replication_slot('{s}', 'pubjson', false, true)"
                ),
            );
        }
    }
    let variants = batch_variants(
        &mut c,
        slots[0],
        "walsender::same_objects_as_pg_recvlogical",
    );
    objects_workload(&mut c);
    let endpos = one_string(&mut c, "select pg_current_wal_lsn()::text");
    let options = [
        ("format-version", "3"),
        ("streaming", "on"),
        ("two_phase", "on"),
    ];

    // pg_recvlogical, with the default batching.
    let dir = pubjson_e2e::scratch_dir("walsender-objects");
    let file = dir.join("recvlogical.jsonl");
    let opts: Vec<String> = options.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let mut recv = RecvLogical::start_on(
        &server,
        ("postgres", OBJECTS_DB),
        slots[0],
        &file,
        &opts,
        &["-E", &endpos],
    );
    let status = recv.wait_exit(Duration::from_secs(120));
    assert!(status.success(), "pg_recvlogical -E: {}", recv.stderr());
    let text = std::fs::read_to_string(&file).expect("pg_recvlogical's file");
    assert!(
        text.ends_with('\n'),
        "pg_recvlogical's file ends inside a line"
    );
    let mut reference = complete_lines(&file);
    let end = up_to_marker(&reference).expect("the marker transaction in pg_recvlogical's file");
    reference.truncate(end);
    let counts = |a: &str| {
        reference
            .iter()
            .filter(|l| l.starts_with(&format!(r#"{{"action":"{a}""#)))
            .count()
    };
    // The workload has what it is meant to have.
    for (a, at_least) in [
        ("S", 1),
        ("E", 1),
        ("A", 1),
        ("P", 2),
        ("CP", 1),
        ("RP", 1),
        ("M", 4),
        ("T", 1),
    ] {
        assert!(
            counts(a) >= at_least,
            "only {} {a} objects in {}",
            counts(a),
            file.display()
        );
    }

    for (slot, batch) in slots[1..].iter().zip([Some("0"), Some("300"), None]) {
        if !variants.contains(&batch) {
            continue;
        }
        let (opts, bound) = with_batch(&options, batch, &variants);
        let mut ws = Walsender::connect(&server, OBJECTS_DB);
        ws.start(slot, &opts, 0)
            .unwrap_or_else(|e| panic!("START_REPLICATION {slot}: {e}"));
        let mut lines: Vec<String> = Vec::new();
        let mut stats = MessageStats::default();
        let (mut marker, mut done) = (false, false);
        while !done {
            let m = ws
                .next_message(MESSAGE_TIMEOUT)
                .unwrap_or_else(|e| panic!("{slot}: {e}"))
                .unwrap_or_else(|| {
                    panic!(
                        "{slot}: no message within {MESSAGE_TIMEOUT:?} after {} lines",
                        lines.len()
                    )
                });
            let objects = split_message(&m, bound);
            stats.messages += 1;
            stats.objects += objects.len();
            stats.multi += (objects.len() > 1) as usize;
            stats.largest = stats.largest.max(m.payload.len());
            for (line, v) in objects {
                marker |= action(&v) == "I" && v["new"]["id"] == -1;
                done |= marker && action(&v) == "C";
                lines.push(line);
            }
            ws.confirm(m.lsn).unwrap_or_else(|e| panic!("{slot}: {e}"));
        }
        ws.close();
        println!("batch-bytes {batch:?}: {stats:?}");
        if let Some(i) = (0..lines.len().min(reference.len())).find(|&i| lines[i] != reference[i]) {
            panic!(
                "batch-bytes {batch:?}: object {i} differs from pg_recvlogical's line:\n  client:        {}\n  pg_recvlogical: {}",
                pubjson_e2e::truncate(&lines[i], 500),
                pubjson_e2e::truncate(&reference[i], 500)
            );
        }
        assert_eq!(
            lines.len(),
            reference.len(),
            "batch-bytes {batch:?}: a different number of objects than pg_recvlogical's lines"
        );
        if batch.is_none() && variants.len() > 1 {
            assert!(
                stats.multi > 0 && stats.messages < stats.objects,
                "the default batches nothing: {stats:?}"
            );
        }
        if batch == Some("300") {
            assert!(
                stats.multi > 0,
                "batch-bytes 300 batches nothing: {stats:?}"
            );
        }
    }
    drop(c);
    server
        .drop_database(OBJECTS_DB)
        .unwrap_or_else(|e| panic!("{e}"));
}

// ===========================================================================
// Reconnecting under faults, message by message
// ===========================================================================

const CLUSTER: Place = Place::new("walsender", 54350);

#[derive(Default, Debug)]
struct WriterLog {
    /// Full xids (txid_current) of transactions whose COMMIT succeeded.
    committed: BTreeSet<i64>,
    /// COMMIT sent, then the connection failed: txid_status tells.
    uncertain: BTreeSet<i64>,
    txns: usize,
    rows: usize,
    rollbacks: usize,
    failed: usize,
    connections: usize,
}

/// Commits transactions of 200-2000 inserted rows (20-200 kB of format 3),
/// some also updating or deleting earlier rows, some rolled back, until
/// `stop`; reconnects whenever the server goes away.
fn writer(server: Server, db: &'static str, stop: Arc<AtomicBool>, log: Arc<Mutex<WriterLog>>) {
    let mut rng = SeededRng::new(0x3a1b);
    let mut next_id: i64 = 1;
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = server.writer_client(&mut client, db, || {
            log.lock().unwrap().connections += 1;
        }) else {
            continue;
        };
        let n = 200 + rng.below(1800) as i64;
        let (first, last) = (next_id, next_id + n - 1);
        next_id += n;
        let kind = rng.below(10);
        let mut stmts = vec![format!(
            "insert into t select i, 'row ' || i || repeat('.', (i % 40)::int), 0
               from generate_series({first}, {last}) i"
        )];
        if first > 1 {
            let from = 1 + rng.below(first as u64 - 1) as i64;
            match kind {
                5..=7 => stmts.push(format!(
                    "update t set n = n + 1, v = v || '+' where id between {from} and {}",
                    from + 300
                )),
                8 => stmts.push(format!(
                    "delete from t where id between {from} and {}",
                    from + 50
                )),
                _ => {}
            }
        }
        let end = if kind == 9 { "rollback" } else { "commit" };
        let xid = c.batch_execute("begin").and_then(|()| {
            let xid: i64 = c.query_one("select txid_current()", &[])?.get(0);
            for s in &stmts {
                c.batch_execute(s)?;
            }
            Ok(xid)
        });
        let Ok(xid) = xid else {
            log.lock().unwrap().failed += 1;
            client = None;
            continue;
        };
        let result = c.batch_execute(end);
        let mut l = log.lock().unwrap();
        match (result, end) {
            (Ok(()), "commit") => {
                l.committed.insert(xid);
                l.txns += 1;
                l.rows += n as usize;
            }
            (Ok(()), _) => l.rollbacks += 1,
            (Err(_), "commit") => {
                l.uncertain.insert(xid);
                l.failed += 1;
                client = None;
            }
            (Err(_), _) => {
                l.failed += 1;
                client = None;
            }
        }
        drop(l);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A transaction received, not yet committed.
struct OpenTxn {
    xid: u64,
    changes: Vec<Value>,
}

/// The consumer: applies committed transactions to its copy of table `t`,
/// skipping a transaction whose commit LSN is not after the last one it
/// applied (delivered again after a reconnect); keeps the position it has
/// confirmed.
#[derive(Default)]
struct Consumer {
    rows: BTreeMap<i64, (String, i64)>,
    /// xid -> commit LSN of every transaction applied.
    applied: BTreeMap<u64, u64>,
    last_commit: u64,
    open: Option<OpenTxn>,
    /// The highest LSN confirmed: where a new session starts.
    position: u64,
    messages: usize,
    objects: usize,
    multi: usize,
    duplicates: usize,
    dropped_at_reconnect: usize,
}

impl Consumer {
    /// Processes all objects of message `m` (split along `bound`), counted.
    fn take(&mut self, m: &XLogData, bound: Option<usize>) {
        let objects = split_message(m, bound);
        self.messages += 1;
        self.multi += (objects.len() > 1) as usize;
        self.process(&objects);
    }

    /// [`Consumer::take`], then confirms `m` to the walsender, which
    /// advances the consumer's position.
    fn take_confirmed(&mut self, ws: &mut Walsender, m: &XLogData, bound: Option<usize>) {
        self.take(m, bound);
        ws.confirm(m.lsn).unwrap_or_else(|e| panic!("confirm: {e}"));
        self.position = self.position.max(m.lsn);
    }

    fn process(&mut self, objects: &[(String, Value)]) {
        self.objects += objects.len();
        for (line, o) in objects {
            match action(o) {
                "B" => {
                    assert!(self.open.is_none(), "B inside a transaction: {line}");
                    self.open = Some(OpenTxn {
                        xid: o["xid"].as_u64().expect("xid"),
                        changes: Vec::new(),
                    });
                }
                "R" => {}
                "I" | "U" | "D" => {
                    assert_eq!(o["table"], "t", "{line}");
                    self.open
                        .as_mut()
                        .unwrap_or_else(|| panic!("a change outside a transaction: {line}"))
                        .changes
                        .push(o.clone());
                }
                "C" => {
                    let t = self
                        .open
                        .take()
                        .unwrap_or_else(|| panic!("C outside a transaction: {line}"));
                    assert_eq!(o["xid"].as_u64(), Some(t.xid), "{line}");
                    assert_eq!(
                        o["changes"].as_u64(),
                        Some(t.changes.len() as u64),
                        "change count of {line}"
                    );
                    let commit = lsn(o["lsn"].as_str().expect("lsn"));
                    if commit <= self.last_commit {
                        // At-least-once: applied before the reconnect.
                        self.duplicates += 1;
                        assert_eq!(
                            self.applied.get(&t.xid),
                            Some(&commit),
                            "transaction {} at {} arrives after a later commit but was never applied",
                            t.xid,
                            lsn_text(commit)
                        );
                        continue;
                    }
                    for ch in &t.changes {
                        self.apply(ch);
                    }
                    assert!(
                        self.applied.insert(t.xid, commit).is_none(),
                        "xid {} committed twice",
                        t.xid
                    );
                    self.last_commit = commit;
                }
                _ => panic!("unexpected object {line}"),
            }
        }
    }

    fn apply(&mut self, ch: &Value) {
        let row = |v: &Value| -> (i64, String, i64) {
            (
                v["id"].as_i64().expect("id"),
                v["v"].as_str().expect("v").to_string(),
                v["n"].as_i64().expect("n"),
            )
        };
        match action(ch) {
            "I" => {
                let (id, v, n) = row(&ch["new"]);
                assert!(
                    self.rows.insert(id, (v, n)).is_none(),
                    "insert of an existing row: {ch}"
                );
            }
            "U" => {
                let (id, v, n) = row(&ch["new"]);
                assert!(
                    self.rows.insert(id, (v, n)).is_some(),
                    "update of a missing row: {ch}"
                );
            }
            "D" => {
                let id = ch["old"]["id"].as_i64().expect("old id");
                assert!(
                    self.rows.remove(&id).is_some(),
                    "delete of a missing row: {ch}"
                );
            }
            _ => unreachable!(),
        }
    }

    /// A new session: what the last one left open is dropped (it is sent
    /// again from its start).
    fn reconnect(&mut self) {
        self.dropped_at_reconnect += self.open.take().is_some() as usize;
    }

    fn mid_transaction(&self) -> bool {
        self.open.as_ref().is_some_and(|t| !t.changes.is_empty())
    }
}

/// A session of the consumer: connects (retrying while the server
/// restarts) and starts from its confirmed position.
fn session(
    server: &Server,
    db: &str,
    slot: &str,
    options: &[(&str, &str)],
    from: u64,
) -> Walsender {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let attempt = retry(Duration::from_secs(60), || {
            Walsender::try_connect(server, db, "postgres")
        })
        .and_then(|mut ws| ws.start(slot, options, from).map(|()| ws));
        match attempt {
            Ok(ws) => return ws,
            // The slot still held by the walsender of a session that ended.
            Err(e) if e.sqlstate() == Some("55006") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("starting a session of {slot} at {}: {e}", lsn_text(from)),
        }
    }
}

fn reconnect_under_fault(fault: Fault) {
    let cluster: SerialCluster = CLUSTER.take();
    let server = cluster.server();
    let started = Instant::now();
    let db: &'static str = match fault {
        Fault::TerminateWalsender => "ws_terminate",
        Fault::KillWalsender => "ws_kill",
        Fault::ImmediateRestart => "ws_immediate",
    };
    let slot = db;
    let mut c = server.fresh_database(db);
    exec(
        &mut c,
        "create table t (id bigint primary key, v text not null, n int not null)",
    );
    exec(
        &mut c,
        &format!("select pg_create_logical_replication_slot('{slot}', 'pubjson')"),
    );
    let test = format!("walsender::reconnect_under_fault({fault:?})");
    let variants = batch_variants(&mut c, slot, &test);
    drop(c);

    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(WriterLog::default()));
    let writer_thread = {
        let (server, stop, log) = (server.clone(), Arc::clone(&stop), Arc::clone(&log));
        std::thread::spawn(move || writer(server, db, stop, log))
    };

    // Sessions cycle through the default, 300 bytes and no batching (the
    // sessions that end in a batch cut in half batch).
    let options_of = |session: usize| -> (Vec<(&str, &str)>, Option<usize>) {
        let cycle = [None, Some("300"), Some("0")];
        let batch = cycle[session % 3].filter(|_| variants.len() > 1);
        with_batch(&[("format-version", "3")], batch, &variants)
    };
    let mut consumer = Consumer::default();
    let mut sessions = 0;
    let (opts, mut bound) = options_of(sessions);
    let mut ws = session(&server, db, slot, &opts, 0);
    let next = |ws: &mut Walsender, what: &str| -> XLogData {
        ws.next_message(MESSAGE_TIMEOUT)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: no message within {MESSAGE_TIMEOUT:?}"))
    };
    let rounds = if soak() { 18 } else { 6 };
    let mut errors: Vec<String> = Vec::new();
    let (mut half_batches, mut unconfirmed_commits) = (0, 0);
    for round in 0..rounds {
        // Stream until a few transactions of this session are applied and
        // the consumer is inside a transaction, between two of its batches.
        let applied_before = consumer.applied.len();
        let t0 = Instant::now();
        loop {
            let m = next(&mut ws, &format!("round {round}"));
            consumer.take_confirmed(&mut ws, &m, bound);
            if consumer.applied.len() >= applied_before + 3 && consumer.mid_transaction() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "round {round}: never inside a transaction after a message"
            );
        }
        // Odd rounds: the consumer goes on without confirming until it has
        // applied the transaction it is in (delivered again after the
        // reconnect: a duplicate to skip), then processes half of the next
        // message when the fault strikes; the rest of it is lost with the
        // session.
        let drain = round % 2 == 0;
        if !drain {
            let applied = consumer.applied.len();
            while consumer.applied.len() == applied {
                let m = next(&mut ws, &format!("round {round}"));
                consumer.take(&m, bound);
            }
            unconfirmed_commits += 1;
            let m = next(&mut ws, &format!("round {round}"));
            let objects = split_message(&m, bound);
            let half = objects.len() / 2;
            consumer.process(&objects[..half]);
            half_batches += (half > 0) as usize;
        }
        match fault {
            Fault::TerminateWalsender => {
                let mut admin = server.connect("postgres");
                let done: bool = admin
                    .query_one("select pg_terminate_backend($1)", &[&ws.pid])
                    .expect("pg_terminate_backend")
                    .get(0);
                assert!(done, "walsender {} not terminated", ws.pid);
            }
            Fault::KillWalsender => server.kill9_backend(ws.pid),
            Fault::ImmediateRestart => cluster.pg_ctl_restart("immediate"),
        }
        if drain {
            // Even rounds: what the server sent before it ended is
            // processed and confirmed, as far as the connection allows.
            let error: WalsenderError = loop {
                match ws.next_message(MESSAGE_TIMEOUT) {
                    Ok(Some(m)) => {
                        let objects = split_message(&m, bound);
                        consumer.messages += 1;
                        consumer.process(&objects);
                        if let Err(e) = ws.confirm(m.lsn) {
                            break e;
                        }
                        consumer.position = consumer.position.max(m.lsn);
                    }
                    Ok(None) => panic!("the session goes on {MESSAGE_TIMEOUT:?} after {fault:?}"),
                    Err(e) => break e,
                }
            };
            if fault == Fault::TerminateWalsender {
                assert_eq!(
                    error.sqlstate(),
                    Some("57P01"),
                    "after pg_terminate_backend: {error}"
                );
            }
            errors.push(error.to_string());
        }
        ws.close();
        consumer.reconnect();
        sessions += 1;
        let (opts, b) = options_of(sessions);
        bound = b;
        ws = session(&server, db, slot, &opts, consumer.position);
    }

    // The writer stops; a last transaction marks the end.
    stop.store(true, Ordering::Relaxed);
    writer_thread.join().expect("writer thread");
    let mut c = server.connect_retrying(db, Duration::from_secs(60));
    exec(&mut c, "insert into t values (-1, 'end', 0)");
    let marker_xid: i64 = {
        let row = c
            .query_one("select xmin::text::bigint from t where id = -1", &[])
            .expect("marker xid");
        row.get(0)
    };
    while !consumer.rows.contains_key(&-1) {
        let m = next(&mut ws, "the end");
        consumer.take_confirmed(&mut ws, &m, bound);
    }
    ws.close();

    // The table, exactly.
    let table: BTreeMap<i64, (String, i64)> = c
        .query("select id, v, n::int8 from t", &[])
        .expect("select t")
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    if consumer.rows != table {
        let missing = pubjson_e2e::keys_not_in(&table, &consumer.rows);
        let extra = pubjson_e2e::keys_not_in(&consumer.rows, &table);
        let differ: Vec<_> = table
            .iter()
            .filter(|(k, v)| consumer.rows.get(k).is_some_and(|w| w != *v))
            .map(|(k, _)| k)
            .take(10)
            .collect();
        panic!(
            "after {fault:?}: the replayed rows differ from the table: missing {missing:?}, \
             extra {extra:?}, different {differ:?}"
        );
    }
    // Every committed transaction, exactly once (the map has one entry per
    // xid): those whose COMMIT failed count when the server says committed.
    let l = log.lock().unwrap();
    let mut committed: BTreeSet<u64> = l
        .committed
        .iter()
        .map(|x| (*x as u64) & 0xffff_ffff)
        .collect();
    for x in &l.uncertain {
        let status: Option<String> = c
            .query_one("select txid_status($1)", &[x])
            .expect("txid_status")
            .get(0);
        if status.as_deref() == Some("committed") {
            committed.insert((*x as u64) & 0xffff_ffff);
        }
    }
    committed.insert((marker_xid as u64) & 0xffff_ffff);
    let applied: BTreeSet<u64> = consumer.applied.keys().copied().collect();
    let missing: Vec<_> = committed.difference(&applied).take(10).collect();
    let unknown: Vec<_> = applied.difference(&committed).take(10).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "after {fault:?}: committed transactions not applied {missing:?}, applied but not committed {unknown:?}"
    );
    assert!(
        consumer.dropped_at_reconnect >= 1,
        "after {fault:?}: no session ended inside a transaction"
    );
    // Each transaction applied and not confirmed came again, and was skipped.
    assert!(
        consumer.duplicates >= unconfirmed_commits,
        "after {fault:?}: {} duplicates, {unconfirmed_commits} commits applied but not confirmed",
        consumer.duplicates
    );
    println!(
        "reconnect after {fault:?}: {rounds} rounds, {} sessions with batch-bytes {variants:?}; writer: {} \
         commits ({} rows), {} rollbacks, {} failed ({} uncertain), {} connections; consumer: {} messages \
         ({} with several objects), {} objects, {} transactions applied, {} duplicates skipped, {} \
         open transactions dropped at reconnects, {} half batches, {} commits not confirmed; errors seen: {errors:?}; {:.1} s",
        sessions + 1,
        l.txns,
        l.rows,
        l.rollbacks,
        l.failed,
        l.uncertain.len(),
        l.connections,
        consumer.messages,
        consumer.multi,
        consumer.objects,
        consumer.applied.len(),
        consumer.duplicates,
        consumer.dropped_at_reconnect,
        half_batches,
        unconfirmed_commits,
        started.elapsed().as_secs_f64()
    );
    pubjson_e2e::drop_slot(&mut c, slot);
}

pubjson_e2e::walsender_fault_tests!(reconnect_under_fault);
