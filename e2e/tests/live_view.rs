//! `pubjson.pending_transactions()` and the live totals of
//! `decoding_stats()`, while pg_recvlogical streams a slot and another
//! session holds a batch transaction open: the view shows it within a
//! second with its changes (at least its rows) and its owner, spilled past
//! `logical_decoding_work_mem` (or streamed with `streaming`), forecasts
//! its commit's delay from the slot's measured replay rate, and forgets it
//! after COMMIT and after ROLLBACK. Roles without pg_read_all_stats see no
//! other session's query.

use postgres::Client;
use pubjson_e2e::{
    exec, one_string, poll, retry, scratch_dir, RecvLogical, Server, SlotGuard, TestDb,
};
use std::time::{Duration, Instant};

/// Rows of the batch transaction: enough to spill past 64kB many times
/// and to take a measurable time to replay.
const ROWS: i64 = 40_000;
const DECODER: &str = "e2e_live_decoder";
const READER: &str = "e2e_live_reader";

/// One row of pending_transactions() for `xid`.
#[derive(Debug)]
struct Pending {
    changes: i64,
    spilled: bool,
    spilled_changes: i64,
    streamed: bool,
    streamed_changes: i64,
    pid: Option<i32>,
    query: Option<String>,
    forecast_ms: Option<f64>,
    rate: Option<f64>,
    retained_wal_bytes: f64,
    age_ms: f64,
}

fn pending(c: &mut Client, slot: &str, xid: &str) -> Option<Pending> {
    let rows = c
        .query(
            "select changes, spilled, spilled_changes, streamed, streamed_changes, pid, query,
                    extract(epoch from forecast_commit_delay)::float8 * 1000,
                    retained_wal_bytes::float8, extract(epoch from age)::float8 * 1000,
                    replay_changes_per_sec
               from pubjson.pending_transactions()
              where slot_name = $1 and xid::text = $2",
            &[&slot, &xid],
        )
        .unwrap_or_else(|e| panic!("pending_transactions: {}", pubjson_e2e::describe_error(&e)));
    rows.first().map(|r| Pending {
        changes: r.get(0),
        spilled: r.get(1),
        spilled_changes: r.get(2),
        streamed: r.get(3),
        streamed_changes: r.get(4),
        pid: r.get(5),
        query: r.get(6),
        forecast_ms: r.get(7),
        retained_wal_bytes: r.get(8),
        age_ms: r.get(9),
        rate: r.get(10),
    })
}

/// A session that opens a transaction and inserts `rows` rows; returns
/// the connection (transaction still open), its pid and its xid. Its WAL
/// is flushed before this returns: a decoder reads flushed WAL only, and
/// an open transaction's last WAL page waits for something else to flush
/// it (here a commit in another session).
fn open_batch(schema: &str, rows: i64, first_id: i64) -> (Client, i32, String) {
    let dbname = pubjson_e2e::pg_env().dbname;
    let mut c = Server::main().connect(&dbname);
    exec(&mut c, "begin");
    let pid: i32 = c.query_one("select pg_backend_pid()", &[]).unwrap().get(0);
    let xid = one_string(&mut c, "select pg_current_xact_id()::text");
    exec(
        &mut c,
        &format!(
            "insert into {schema}.batch select g, repeat('x', 40) \
             from generate_series({first_id}, {}) g",
            first_id + rows - 1
        ),
    );
    exec(
        &mut Server::main().connect(&dbname),
        "select pg_current_xact_id()",
    );
    (c, pid, xid)
}

/// Commits `batch` and waits until pg_recvlogical has received it: a
/// message emitted after the commit (`marker`) is in its file.
fn commit_and_wait_received(
    batch: &mut Client,
    c: &mut Client,
    rl: &mut RecvLogical,
    marker: &str,
) {
    exec(batch, "commit");
    exec(
        c,
        &format!("select pg_logical_emit_message(false, 'live', '{marker}')"),
    );
    rl.wait_received(marker, Duration::from_secs(120));
}

/// Waits until pending_transactions() shows `xid` for `slot` (with at
/// least `changes` changes, if given: PostgreSQL adds a snapshot, and in
/// newer minor releases the invalidations, to every open transaction when
/// another one commits a catalog change, an autovacuum's for instance);
/// the timeout's message says what it showed last.
fn wait_shown(c: &mut Client, slot: &str, xid: &str, changes: Option<i64>, what: &str) -> Pending {
    retry(Duration::from_secs(60), || match pending(c, slot, xid) {
        Some(p) if changes.is_none_or(|n| p.changes >= n) => Ok(p),
        seen => Err(seen),
    })
    .unwrap_or_else(|seen| panic!("timed out after 60 s waiting for {what}; last shown: {seen:?}"))
}

/// Waits until `xid` is no longer in pending_transactions() for `slot`.
fn wait_gone(c: &mut Client, slot: &str, xid: &str, what: &str) {
    poll(what, Duration::from_secs(10), || {
        pending(c, slot, xid).is_none().then_some(())
    });
}

/// The extension in the test database, and the roles: a replication
/// role whose sessions spill past 64kB, and a reader without
/// pg_read_all_stats.
fn setup(c: &mut Client) {
    exec(c, "create extension if not exists pubjson");
    // Roles are cluster-wide and kept from run to run (their grants tie
    // them to the extension's functions).
    exec(
        c,
        &format!(
            "do $$ begin
               if not exists (select from pg_roles where rolname = '{DECODER}') then
                 create role {DECODER} login replication;
               end if;
               if not exists (select from pg_roles where rolname = '{READER}') then
                 create role {READER} login;
               end if;
             end $$;
             alter role {DECODER} set logical_decoding_work_mem = '64kB';
             grant usage on schema pubjson to {READER};
             grant execute on function pubjson.pending_transactions(),
                                       pubjson._pending_transactions() to {READER}"
        ),
    );
}

/// The test's schema with a table `batch`, [`setup`], and a pubjson slot
/// named after `suffix`: (the database, its schema, the slot, its guard).
fn batch_db(name: &str, suffix: &str) -> (TestDb, String, String, SlotGuard) {
    let mut db = TestDb::new(name);
    let schema = db.schema.clone();
    db.exec(&format!(
        "create table {schema}.batch (id int primary key, pad text)"
    ));
    setup(&mut db.conn.client);
    let (slot, guard) = db.create_slot("pubjson", suffix);
    (db, schema, slot, guard)
}

fn start_decoder(slot: &str, name: &str, opts: &[&str]) -> RecvLogical {
    let dir = scratch_dir("live_view");
    let file = dir.join(format!("{name}.out"));
    let env = pubjson_e2e::pg_env();
    RecvLogical::start_on(
        &Server::main(),
        (DECODER, &env.dbname),
        slot,
        &file,
        opts,
        &[],
    )
}

/// commit_to_emit_ms of transaction `xid` in worst_transactions().
fn commit_to_emit_ms(c: &mut Client, slot: &str, xid: &str) -> Option<f64> {
    c.query(
        "select commit_to_emit_ms from pubjson.worst_transactions()
          where slot_name = $1 and xid::text = $2",
        &[&slot, &xid],
    )
    .expect("worst_transactions")
    .first()
    .map(|r| r.get(0))
}

#[test]
fn a_held_back_batch_is_shown_while_it_builds_up() {
    let (_db, schema, slot, _guard) = batch_db("live", "spill");
    let mut rl = start_decoder(&slot, "spill", &[]);
    let mut c = Server::main().connect(&pubjson_e2e::pg_env().dbname);

    // Small transactions first: they measure no replay rate (their time
    // is their fixed cost), so the first batch held back has no forecast
    // (docs/sql-functions.md).
    for id in 0..5 {
        exec(
            &mut c,
            &format!("insert into {schema}.batch values ({}, 'small')", -1 - id),
        );
    }
    let (mut warm, _, warm_xid) = open_batch(&schema, ROWS, 1);
    let unmeasured = wait_shown(&mut c, &slot, &warm_xid, Some(ROWS), "the first batch");
    let replayed: i64 = c
        .query_one(
            "select txns_emitted from pubjson.decoding_stats() where slot_name = $1",
            &[&slot],
        )
        .expect("decoding_stats")
        .get(0);
    assert!(
        replayed >= 5,
        "the small transactions were replayed: {replayed}"
    );
    assert_eq!(
        (unmeasured.forecast_ms, unmeasured.rate),
        (None, None),
        "no forecast from small transactions: {unmeasured:?}"
    );
    // The first batch, committed: the slot's replay rate is measured on it.
    commit_and_wait_received(&mut warm, &mut c, &mut rl, "warm");

    // The batch held open: shown within a second of its WAL being
    // flushed, with exactly its rows.
    let (mut batch, batch_pid, xid) = open_batch(&schema, ROWS, ROWS + 1);
    let inserted = Instant::now();
    let shown = wait_shown(
        &mut c,
        &slot,
        &xid,
        Some(ROWS),
        "the open batch in pending_transactions()",
    );
    let latency = inserted.elapsed();
    eprintln!("shown after {latency:?}: {shown:?}");
    assert!(
        latency < Duration::from_secs(1),
        "shown only after {latency:?}"
    );
    assert_eq!(shown.pid, Some(batch_pid));
    assert!(shown
        .query
        .as_deref()
        .is_some_and(|q| q.contains("generate_series")));
    // `query` is the session's last statement, not the one that made the
    // changes (docs/sql-functions.md).
    exec(&mut batch, "select 'the last statement'");
    let last = wait_shown(&mut c, &slot, &xid, Some(ROWS), "the batch again");
    assert_eq!(
        last.query.as_deref(),
        Some("select 'the last statement'"),
        "{last:?}"
    );
    assert!(shown.spilled && shown.spilled_changes > 0, "{shown:?}");
    assert!(!shown.streamed && shown.streamed_changes == 0, "{shown:?}");
    assert!(
        shown.retained_wal_bytes > 0.0 && shown.age_ms >= 0.0,
        "{shown:?}"
    );
    let forecast_ms = shown
        .forecast_ms
        .expect("a forecast once a batch was replayed");
    // The row as docs/sql-functions.md quotes it.
    let json: String = c
        .query_one(
            "select row_to_json(p)::text from pubjson.pending_transactions() p
              where slot_name = $1 and xid::text = $2",
            &[&slot, &xid],
        )
        .map(|r| r.get(0))
        .unwrap_or_default();
    eprintln!("pending_transactions(): {json}");

    // decoding_stats() counts it.
    let row = c
        .query_one(
            "select pending_txns, reorder_buffer_bytes, oldest_pending_age is not null
               from pubjson.decoding_stats() where slot_name = $1",
            &[&slot],
        )
        .expect("decoding_stats");
    let (txns, bytes, aged): (i32, i64, bool) = (row.get(0), row.get(1), row.get(2));
    assert!(txns >= 1 && bytes >= 0 && aged, "{txns} {bytes} {aged}");

    // Someone without pg_read_all_stats sees the transaction, not the query.
    let mut reader = Server::main().connect_as(&pubjson_e2e::pg_env().dbname, READER);
    let seen = pending(&mut reader, &slot, &xid).expect("the reader sees the row");
    assert_ne!(seen.query, shown.query, "{seen:?}");
    assert!(!seen
        .query
        .as_deref()
        .unwrap_or("")
        .contains("generate_series"));

    // The forecast is the held changes at the slot's measured rate.
    let (expected_ms, forecast_now_ms): (f64, f64) = c
        .query_one(
            "select changes::float8 / replay_changes_per_sec * 1000,
                    extract(epoch from forecast_commit_delay)::float8 * 1000
               from pubjson.pending_transactions() where slot_name = $1 and xid::text = $2",
            &[&slot, &xid],
        )
        .map(|r| (r.get(0), r.get(1)))
        .expect("the batch's forecast");
    assert!(
        (expected_ms - forecast_now_ms).abs() < 0.01,
        "forecast {forecast_now_ms} ms, changes / rate {expected_ms} ms"
    );

    // COMMIT: the row goes; the forecast is the real delay's order of
    // magnitude (a factor of ten: the rate was measured on the previous
    // batch, and a loaded machine replays one batch several times slower
    // than the next).
    commit_and_wait_received(&mut batch, &mut c, &mut rl, "batch");
    wait_gone(&mut c, &slot, &xid, "the committed batch to leave the view");
    let measured_ms = commit_to_emit_ms(&mut c, &slot, &xid).expect("the batch's delay");
    eprintln!("forecast {forecast_ms:.0} ms, measured {measured_ms:.0} ms");
    assert!(
        forecast_ms <= measured_ms * 10.0 && forecast_ms >= measured_ms / 10.0,
        "forecast {forecast_ms} ms vs measured {measured_ms} ms"
    );

    // ROLLBACK: shown, then gone (no callback tells the plugin).
    let (mut doomed, _, doomed_xid) = open_batch(&schema, 100, 3 * ROWS);
    wait_shown(&mut c, &slot, &doomed_xid, Some(100), "the doomed batch");
    exec(&mut doomed, "rollback");
    wait_gone(
        &mut c,
        &slot,
        &doomed_xid,
        "the rolled back batch to leave the view",
    );

    // The session ends: nothing is left of it.
    let (mut last, _, last_xid) = open_batch(&schema, 10, 4 * ROWS);
    wait_shown(&mut c, &slot, &last_xid, None, "the last batch");
    assert!(rl.stop().success(), "{}", rl.stderr());
    wait_gone(&mut c, &slot, &last_xid, "the ended session's rows to go");
    exec(&mut last, "rollback");
}

#[test]
fn a_streamed_batch_counts_what_was_sent() {
    let (_db, schema, slot, _guard) = batch_db("live_stream", "stream");
    let mut rl = start_decoder(&slot, "stream", &["streaming=on"]);
    let mut c = Server::main().connect(&pubjson_e2e::pg_env().dbname);
    let (mut batch, pid, xid) = open_batch(&schema, ROWS, 1);
    let shown = wait_shown(&mut c, &slot, &xid, Some(ROWS), "the streamed batch");
    eprintln!("{shown:?}");
    assert_eq!(shown.pid, Some(pid));
    assert!(shown.streamed && shown.streamed_changes > 0, "{shown:?}");
    assert!(!shown.spilled, "streamed, not spilled: {shown:?}");
    commit_and_wait_received(&mut batch, &mut c, &mut rl, "streamed");
    wait_gone(&mut c, &slot, &xid, "the streamed batch to leave the view");
    assert!(rl.stop().success(), "{}", rl.stderr());
}

#[test]
fn sql_decoding_leaves_no_rows_behind() {
    let (mut db, schema, slot, _guard) = batch_db("live_sql", "sql");
    let (mut open, _, xid) = open_batch(&schema, 100, 1);
    db.flush_wal();
    let mut c = Server::main().connect(&pubjson_e2e::pg_env().dbname);
    exec(
        &mut c,
        &format!("select count(*) from pg_logical_slot_peek_changes('{slot}', null, null)"),
    );
    // The peek decoded the open transaction; its session is over.
    assert!(pending(&mut c, &slot, &xid).is_none());
    let none: i64 = c
        .query_one(
            "select count(*) from pubjson.decoding_stats()
              where slot_name = $1 and pending_txns <> 0",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(none, 0);
    exec(&mut open, "rollback");
}
