//! Failover slots (PostgreSQL 17+), as docs/operations.md ("Failover")
//! sets them up: a pubjson slot created with `failover => true` on a
//! primary of the test's own, a physical standby that synchronizes it
//! (`sync_replication_slots = on`, `hot_standby_feedback = on`,
//! `primary_slot_name`, `dbname` in `primary_conninfo`) and
//! `synchronized_standby_slots` on the primary naming the standby's
//! physical slot.
//!
//! A writer commits transactions (one `fo.log` row each, an upsert of one
//! of 64 `fo.acct` rows and every fifth a delete) while `pg_recvlogical`
//! streams format 2 from the primary. Once the standby's copy of the slot
//! is synchronized (`synced`, not `temporary`) and has followed the
//! consumer, the standby stops receiving WAL (its `primary_conninfo`
//! emptied) while the writer commits 200 more transactions; then the
//! primary crashes (`pg_ctl -m immediate stop`) in the middle of the stream
//! and the writes, and the standby is promoted. The consumer
//! reconnects to the new primary with the same slot name and streams to
//! the end while the writer goes on there.
//!
//! Checked:
//! - everything the consumer received from the old primary is on the new
//!   one and lies before what the standby had flushed
//!   (`synchronized_standby_slots` kept the walsender behind the standby);
//!   what the writer lost with the crash (asynchronous replication: at
//!   least the 200 commits after the standby stopped receiving) is a tail
//!   of its commits that the consumer never saw;
//! - the new primary resumes at the synchronized `confirmed_flush_lsn`: it
//!   delivers again exactly the transactions received from the old primary
//!   whose commit LSN is at or after it, identical, and nothing older (the
//!   at-least-once rule of docs/formats.md, "Delivery guarantee");
//! - the stream applied to an in-memory replica (inserts, updates and
//!   deletes by key, skipping a transaction whose commit LSN is not greater
//!   than the last one applied) equals the new primary's tables;
//! - on the new primary the slot is `failover`, `synced` (left from the
//!   standby, as PostgreSQL documents), not temporary, usable;
//!   `decoding_stats()` counts exactly what the new primary sent and shows
//!   the slot's position, `pending_transactions()` shows a transaction held
//!   open there, `publication_risks()` reports the slot once it is
//!   inactive, and the exporter's slot and decoding metrics say the same.
//!
//! On 15 and 16 (no failover slots) the test is skipped.

use postgres::Client;
use pubjson_e2e::{
    alter_system, complete_lines, exec, lsn, one_row, one_string, poll, rows, scratch_dir,
    server_major, wait_true, Exporter, Place, RecvLogical, Server,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PRIMARY: Place = Place::new("foprimary", 54400);
const STANDBY: Place = Place::new("fostandby", 54401);
const DB: &str = "fodb";
const SLOT: &str = "fo_slot";
/// The standby's physical slot on the primary.
const PHYSICAL_SLOT: &str = "fo_standby";
const EXPORTER_ROLE: &str = "e2e_fo_exporter";
/// Rows of fo.acct the writer upserts and deletes.
const KEYS: i64 = 64;
/// Transactions the consumer receives from the old primary, at least,
/// before the standby's copy of the slot must have caught up with it, and
/// as many more before the crash.
const BEFORE_CRASH: usize = 300;
/// Transactions the writer commits on the old primary after the standby
/// stopped receiving, lost with the crash.
const BEHIND: i64 = 200;
/// The writer's bound on the old primary (it normally stops at the crash).
const MAX_PHASE1: i64 = 200_000;
/// Identifiers of the transactions written on the new primary.
const PHASE2_BASE: i64 = 1_000_000;
const PHASE2_TXNS: i64 = 300;
/// The transaction held open on the new primary for pending_transactions().
const HELD_BASE: i64 = 2_000_000;
const HELD_ROWS: i64 = 50;

/// pg_recvlogical's options: format 2 with the xid and the commit LSN the
/// consumer deduplicates by.
const OPTS: [&str; 4] = [
    "format-version=2",
    "include-xids=true",
    "include-lsn=true",
    "include-types=false",
];

/// One transaction of the write load: its row in fo.log, an upsert of one
/// of the KEYS accounts (an INSERT or an UPDATE) and, every fifth, the
/// delete of another.
fn write_txn(c: &mut Client, n: i64, phase: i32) -> Result<(), postgres::Error> {
    let mut sql = format!(
        "begin;
         insert into fo.log (txn, phase) values ({n}, {phase});
         insert into fo.acct (id, v, txn) values ({k}, {n}, {n})
           on conflict (id) do update set v = fo.acct.v + excluded.v, txn = excluded.txn;",
        k = n % KEYS
    );
    if n % 5 == 0 {
        sql += &format!("delete from fo.acct where id = {};", (n * 7 + 3) % KEYS);
    }
    sql += "commit;";
    c.batch_execute(&sql)
}

/// What the writer on the old primary did: the transactions whose COMMIT
/// returned, and the one it was running when the server went away.
struct Written {
    acked: Vec<i64>,
    interrupted: Option<i64>,
}

/// Writes transactions 1, 2, ... until a statement fails (the crash),
/// `stop` is set or MAX_PHASE1 is reached; `progress` is the last one
/// acknowledged.
fn write_until_failure(server: Server, stop: Arc<AtomicBool>, progress: Arc<AtomicI64>) -> Written {
    let mut c = server.connect(DB);
    let mut acked = Vec::new();
    for n in 1..=MAX_PHASE1 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match write_txn(&mut c, n, 1) {
            Ok(()) => {
                acked.push(n);
                progress.store(n, Ordering::Relaxed);
            }
            Err(_) => {
                return Written {
                    acked,
                    interrupted: Some(n),
                }
            }
        }
    }
    Written {
        acked,
        interrupted: None,
    }
}

/// A decoded transaction: xid, commit LSN (`lsn` of `C`), the position
/// after it (`nextlsn`) and its change objects.
#[derive(Debug, Clone, PartialEq)]
struct Txn {
    xid: i64,
    lsn: u64,
    nextlsn: u64,
    changes: Vec<Value>,
}

/// The transactions of a format-2 stream file, complete ones only (a
/// transaction cut off by the crash is left out, as a consumer that
/// applies at COMMIT leaves it).
fn transactions(path: &Path) -> Vec<Txn> {
    let mut out = Vec::new();
    let mut open: Option<Txn> = None;
    for line in complete_lines(path) {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["action"].as_str() {
            Some("B") => {
                assert!(open.is_none(), "B inside a transaction: {line}");
                open = Some(Txn {
                    xid: v["xid"].as_i64().expect("xid"),
                    lsn: 0,
                    nextlsn: 0,
                    changes: Vec::new(),
                });
            }
            Some("C") => {
                let mut t = open.take().unwrap_or_else(|| panic!("C without B: {line}"));
                assert_eq!(Some(t.xid), v["xid"].as_i64(), "{line}");
                t.lsn = lsn(v["lsn"].as_str().expect("lsn"));
                t.nextlsn = lsn(v["nextlsn"].as_str().expect("nextlsn"));
                out.push(t);
            }
            Some("I" | "U" | "D") => open
                .as_mut()
                .unwrap_or_else(|| panic!("change outside a transaction: {line}"))
                .changes
                .push(v),
            _ => panic!("unexpected object: {line}"),
        }
    }
    out
}

fn changes_in(txns: &[Txn]) -> usize {
    txns.iter().map(|t| t.changes.len()).sum()
}

/// Rows by key, each column's value as text.
type Table = BTreeMap<String, BTreeMap<String, String>>;

fn key_column(table: &str) -> &'static str {
    match table {
        "log" => "txn",
        "acct" => "id",
        "marker" => "tag",
        other => panic!("unexpected table {other}"),
    }
}

/// A JSON value as PostgreSQL's text output of it (ints and text here).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "NULL".to_string(),
        other => other.to_string(),
    }
}

fn row_of(columns: &Value) -> BTreeMap<String, String> {
    columns
        .as_array()
        .unwrap_or_else(|| panic!("not a column array: {columns}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().expect("name").to_string(),
                text(&c["value"]),
            )
        })
        .collect()
}

/// The consumer's copy of the tables, applied in stream order with the
/// documented deduplication: a transaction whose commit LSN is not greater
/// than the last one applied was applied already.
#[derive(Default)]
struct Replica {
    tables: BTreeMap<String, Table>,
    last_lsn: u64,
    applied: usize,
    skipped: usize,
}

impl Replica {
    fn apply(&mut self, t: &Txn) {
        if t.lsn <= self.last_lsn {
            self.skipped += 1;
            return;
        }
        for ch in &t.changes {
            let name = ch["table"].as_str().expect("table");
            let key = key_column(name);
            let table = self.tables.entry(name.to_string()).or_default();
            let old_key = |ch: &Value| {
                let identity = if ch["identity"].is_null() {
                    &ch["columns"]
                } else {
                    &ch["identity"]
                };
                row_of(identity)[key].clone()
            };
            match ch["action"].as_str() {
                Some("I") => {
                    let row = row_of(&ch["columns"]);
                    table.insert(row[key].clone(), row);
                }
                Some("U") => {
                    table.remove(&old_key(ch));
                    let row = row_of(&ch["columns"]);
                    table.insert(row[key].clone(), row);
                }
                Some("D") => {
                    let gone = table.remove(&old_key(ch));
                    assert!(gone.is_some(), "delete of a row the replica lacks: {ch}");
                }
                _ => panic!("unexpected change {ch}"),
            }
        }
        self.last_lsn = t.lsn;
        self.applied += 1;
    }
}

/// A table of the new primary, as the replica holds it.
fn table_on(c: &mut Client, table: &str) -> Table {
    let key = key_column(table);
    let mut out = Table::new();
    for r in rows(c, &format!("select to_jsonb(t)::text from fo.{table} t")) {
        let v: Value = serde_json::from_str(&r.get::<_, String>(0)).expect("row json");
        let row: BTreeMap<String, String> = v
            .as_object()
            .expect("object")
            .iter()
            .map(|(k, v)| (k.clone(), text(v)))
            .collect();
        out.insert(row[key].clone(), row);
    }
    out
}

/// The slot as pg_replication_slots shows it.
#[derive(Debug)]
struct SlotRow {
    failover: bool,
    synced: bool,
    temporary: bool,
    active: bool,
    active_pid: Option<i32>,
    confirmed_flush: Option<String>,
    restart_lsn: Option<String>,
    invalidation_reason: Option<String>,
}

fn slot_row(c: &mut Client) -> Option<SlotRow> {
    c.query_opt(
        "select failover, synced, temporary, active, active_pid,
                confirmed_flush_lsn::text, restart_lsn::text, invalidation_reason
           from pg_replication_slots where slot_name = $1",
        &[&SLOT],
    )
    .expect("pg_replication_slots")
    .map(|r| SlotRow {
        failover: r.get(0),
        synced: r.get(1),
        temporary: r.get(2),
        active: r.get(3),
        active_pid: r.get(4),
        confirmed_flush: r.get(5),
        restart_lsn: r.get(6),
        invalidation_reason: r.get(7),
    })
}

/// Counts the complete transactions (`C` objects) of a stream file as it
/// grows, reading each byte once (the file grows by megabytes while the
/// writer runs).
#[derive(Default)]
struct CommitCounter {
    /// Where the first line not yet counted starts.
    offset: u64,
    commits: usize,
}

impl CommitCounter {
    fn count(&mut self, path: &Path) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(path) else {
            return self.commits;
        };
        let mut new = Vec::new();
        f.seek(SeekFrom::Start(self.offset)).expect("seek");
        f.read_to_end(&mut new).expect("read stream file");
        // Complete lines only: the last one may still be written.
        let Some(end) = new.iter().rposition(|&b| b == b'\n') else {
            return self.commits;
        };
        let text = String::from_utf8_lossy(&new[..=end]);
        self.commits += text
            .lines()
            .filter(|l| l.starts_with(r#"{"action":"C""#))
            .count();
        self.offset += end as u64 + 1;
        self.commits
    }

    /// Polls until the stream file holds `n` transactions; the consumer
    /// must still run.
    fn wait(&mut self, recv: &mut RecvLogical, n: usize, timeout: Duration) {
        poll(
            &format!("{n} transactions in {}", recv.file.display()),
            timeout,
            || {
                assert!(recv.running(), "pg_recvlogical exited: {}", recv.stderr());
                (self.count(&recv.file) >= n).then_some(())
            },
        );
    }
}

/// Waits until the slot on `c`'s server has confirmed `target` (the
/// consumer's status updates come every second).
fn wait_confirmed(c: &mut Client, target: u64, what: &str) {
    poll(what, Duration::from_secs(60), || {
        let s = slot_row(c)?;
        (lsn(s.confirmed_flush.as_deref()?) >= target).then_some(())
    });
}

#[test]
fn failover_slot_follows_the_consumer_to_the_promoted_standby() {
    let started = Instant::now();
    let major = server_major(&mut Server::main().connect("postgres"));
    pubjson_e2e::require_major!(
        major,
        17,
        "failover slots (failover => true, sync_replication_slots) came with PostgreSQL 17"
    );

    // --- The primary, its database and the standby's physical slot.
    let primary = PRIMARY.start();
    let mut p = primary.server().fresh_database_with_pubjson(DB);
    exec(
        &mut p,
        &format!(
            "create schema fo;
             create table fo.log (txn bigint primary key, phase int not null);
             create table fo.acct (id int primary key, v bigint not null, txn bigint not null);
             create table fo.marker (tag text primary key);
             create publication fo_pub for table fo.log, fo.acct, fo.marker;
             do $$ begin
               if not exists (select from pg_roles where rolname = '{EXPORTER_ROLE}') then
                 create role {EXPORTER_ROLE} login;
               end if;
             end $$;
             grant pg_monitor to {EXPORTER_ROLE};
             alter role {EXPORTER_ROLE} set search_path = pg_catalog;
             select pg_create_physical_replication_slot('{PHYSICAL_SLOT}');"
        ),
    );

    // --- The standby: what slot synchronization needs (docs/operations.md).
    let standby = STANDBY.standby_with(
        &primary.server(),
        &format!(
            "primary_conninfo = 'host={} port={} user=postgres dbname=postgres application_name=fostandby'
primary_slot_name = '{PHYSICAL_SLOT}'
hot_standby_feedback = on
sync_replication_slots = on",
            primary.socket, primary.port
        ),
    );
    let mut s = standby.connect("postgres");
    wait_true(
        &mut p,
        "the standby streams through its physical slot",
        Duration::from_secs(60),
        "select active from pg_replication_slots where slot_name = $1",
        &[&PHYSICAL_SLOT],
    );
    // Set only on the primary, after the base backup: the standby must not
    // carry it into its own promotion (it names a slot only the old
    // primary has).
    alter_system(
        &mut p,
        &format!("synchronized_standby_slots = '{PHYSICAL_SLOT}'"),
    );
    wait_true(
        &mut p,
        "synchronized_standby_slots in effect",
        Duration::from_secs(30),
        "select current_setting('synchronized_standby_slots') = $1",
        &[&PHYSICAL_SLOT],
    );

    // --- The failover slot and its consumer on the primary.
    exec(
        &mut p,
        &format!(
            "select pg_create_logical_replication_slot('{SLOT}', 'pubjson', false, false, true)"
        ),
    );
    let dir = scratch_dir("failover");
    let file_old = dir.join("old_primary.json");
    let file_new = dir.join("new_primary.json");
    let mut recv_old = RecvLogical::start_on(
        &primary.server(),
        ("postgres", DB),
        SLOT,
        &file_old,
        &OPTS,
        &[],
    );

    // --- The write load.
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicI64::new(0));
    let writer = {
        let (server, stop, progress) = (primary.server(), Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || write_until_failure(server, stop, progress))
    };
    // Stops the writer if the test fails before the crash.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop_writer = StopOnDrop(Arc::clone(&stop));

    let mut received_old = CommitCounter::default();
    received_old.wait(&mut recv_old, BEFORE_CRASH, Duration::from_secs(120));
    // The consumer's position as the primary's slot has it now (past the
    // first transaction at least); the standby's copy must reach it,
    // synchronized and persistent.
    let first = transactions(&file_old)[0].nextlsn;
    let confirmed_on_primary = poll(
        "the primary's slot confirmed a transaction",
        Duration::from_secs(60),
        || {
            let c = lsn(&slot_row(&mut p)?.confirmed_flush?);
            (c >= first).then_some(c)
        },
    );
    let synced_before = poll(
        "the standby's copy of the slot synchronized up to the consumer's position",
        Duration::from_secs(120),
        || {
            // A running-xacts record lets the copy reach a consistent point.
            p.batch_execute("select pg_log_standby_snapshot()").ok()?;
            let r = slot_row(&mut s)?;
            (r.synced
                && !r.temporary
                && r.failover
                && lsn(r.confirmed_flush.as_deref()?) >= confirmed_on_primary)
                .then_some(r)
        },
    );
    println!("standby's copy before the crash: {synced_before:?}");
    // Nothing of the slot was decoded on the standby: its row there has
    // the slot's state and no counters.
    let stats_row = one_row(
        &mut standby.connect(DB),
        &format!(
            "select count(*), count(*) filter (where txns_decoded is null and wal_status is not null)
               from pubjson.decoding_stats() where slot_name = '{SLOT}'"
        ),
    );
    assert_eq!(
        (stats_row.get::<_, i64>(0), stats_row.get::<_, i64>(1)),
        (1, 1),
        "the standby never decoded the synced slot: a row without counters"
    );
    // The copy lags behind the consumer again by the time of the crash.
    let before_crash = received_old.count(&file_old);
    received_old.wait(
        &mut recv_old,
        before_crash + BEFORE_CRASH,
        Duration::from_secs(120),
    );

    // --- The standby falls behind: its WAL receiver stops (primary_conninfo
    // emptied) while the writer goes on. The walsender waits for the
    // standby's slot (synchronized_standby_slots), so the consumer gets
    // nothing the standby does not have; what is committed from now on is
    // lost with the crash.
    alter_system(&mut s, "primary_conninfo = ''");
    wait_true(
        &mut p,
        "the standby's WAL receiver gone",
        Duration::from_secs(60),
        "select not active from pg_replication_slots where slot_name = $1",
        &[&PHYSICAL_SLOT],
    );
    let standby_flush = lsn(&one_string(
        &mut s,
        "select pg_last_wal_receive_lsn()::text",
    ));
    let cut = progress.load(Ordering::Relaxed);
    poll(
        "the writer commits past the standby",
        Duration::from_secs(60),
        || (progress.load(Ordering::Relaxed) >= cut + BEHIND).then_some(()),
    );

    // --- The crash, in the middle of the stream and of the writes.
    assert!(
        !writer.is_finished(),
        "the writer still writes at the crash"
    );
    primary.pg_ctl_stop("immediate");
    let written = writer.join().expect("writer thread");
    let status = recv_old.wait_exit(Duration::from_secs(60));
    println!(
        "old primary crashed after {} acknowledged transactions (interrupted: {:?}); pg_recvlogical: {status}",
        written.acked.len(),
        written.interrupted
    );
    assert!(
        written.interrupted.is_some(),
        "the writer was stopped by the crash, not by its bound"
    );
    drop(p);

    // --- Promotion.
    let synced_at_crash = slot_row(&mut s).expect("the copy on the standby");
    drop(s);
    standby.promote();
    let mut n = standby.connect(DB);
    let slot = slot_row(&mut n).expect("the slot on the new primary");
    println!("the slot on the new primary: {slot:?}");
    assert!(slot.failover, "{slot:?}");
    assert!(slot.synced, "synced stays true after promotion: {slot:?}");
    assert!(!slot.temporary, "{slot:?}");
    assert!(!slot.active, "{slot:?}");
    assert_eq!(slot.invalidation_reason, None, "{slot:?}");
    assert!(slot.restart_lsn.is_some(), "{slot:?}");
    // Where the consumer resumes: the position last copied from the old
    // primary's slot (a copy the synchronization worker fetched just
    // before the crash may have landed after the read above).
    let resume_at = lsn(slot
        .confirmed_flush
        .as_deref()
        .expect("confirmed_flush_lsn"));
    assert!(
        resume_at
            >= lsn(synced_at_crash
                .confirmed_flush
                .as_deref()
                .expect("copy's position")),
        "{slot:?} / {synced_at_crash:?}"
    );
    assert!(
        resume_at >= confirmed_on_primary,
        "the synced position followed the consumer"
    );
    let old = transactions(&file_old);
    let last_old = old.last().expect("transactions from the old primary");
    assert!(
        last_old.nextlsn <= standby_flush,
        "the consumer received nothing past what the standby had flushed"
    );
    assert_eq!(
        one_row(
            &mut n,
            &format!(
                "select count(*) filter (where txns_decoded is null)
                   from pubjson.decoding_stats() where slot_name = '{SLOT}'"
            )
        )
        .get::<_, i64>(0),
        1,
        "no counters before the slot is decoded on the new primary"
    );

    // --- The consumer reconnects to the new primary with the same slot;
    // the writer goes on there.
    let mut recv_new = RecvLogical::start_on(
        &standby.server(),
        ("postgres", DB),
        SLOT,
        &file_new,
        &OPTS,
        &[],
    );
    let writer2 = {
        let server = standby.server();
        std::thread::spawn(move || {
            let mut c = server.connect(DB);
            for n in PHASE2_BASE + 1..=PHASE2_BASE + PHASE2_TXNS {
                write_txn(&mut c, n, 2).unwrap_or_else(|e| panic!("write {n}: {e}"));
            }
        })
    };
    writer2.join().expect("writer on the new primary");
    exec(&mut n, "insert into fo.marker values ('written')");
    recv_new.wait_received(r#""value":"written""#, Duration::from_secs(120));

    // --- A transaction held open on the new primary: the live view.
    let mut held = standby.connect(DB);
    exec(
        &mut held,
        &format!(
            "begin; insert into fo.log select g, 3 from generate_series({}, {}) g",
            HELD_BASE + 1,
            HELD_BASE + HELD_ROWS
        ),
    );
    let held_xid: String = one_row(&mut held, "select pg_current_xact_id()::text").get(0);
    let held_pid: i32 = one_row(&mut held, "select pg_backend_pid()").get(0);
    // Flush its WAL (a commit elsewhere), so the decoder reads it.
    exec(&mut n, "insert into fo.marker values ('flush')");
    let decoder_pid = poll(
        "the held transaction in pending_transactions() on the new primary",
        Duration::from_secs(60),
        || {
            assert!(
                recv_new.running(),
                "pg_recvlogical exited: {}",
                recv_new.stderr()
            );
            let r = n
                .query_opt(
                    "select changes, pid, decoder_pid from pubjson.pending_transactions()
                      where slot_name = $1 and xid::text = $2",
                    &[&SLOT, &held_xid],
                )
                .ok()??;
            (r.get::<_, i64>(0) >= HELD_ROWS).then(|| {
                assert_eq!(r.get::<_, i64>(0), HELD_ROWS);
                assert_eq!(r.get::<_, Option<i32>>(1), Some(held_pid));
                r.get::<_, i32>(2)
            })
        },
    );
    let slot = slot_row(&mut n).expect("slot");
    assert!(slot.active, "{slot:?}");
    assert_eq!(
        slot.active_pid,
        Some(decoder_pid),
        "the slot's walsender decodes it"
    );
    let live = one_row(
        &mut n,
        &format!(
            "select active, pending_txns, source from pubjson.decoding_stats() where slot_name = '{SLOT}'"
        ),
    );
    assert_eq!(live.get::<_, Option<bool>>(0), Some(true));
    assert!(live.get::<_, Option<i32>>(1).is_some_and(|n| n >= 1));
    assert_eq!(live.get::<_, String>(2), "shared memory");

    // The exporter on the new primary at the same moment.
    let mut exporter =
        Exporter::start(&standby.server(), EXPORTER_ROLE, DB, major, &[], "failover");
    let emitted_before: i64 = one_row(
        &mut n,
        &format!("select txns_emitted from pubjson.decoding_stats() where slot_name = '{SLOT}'"),
    )
    .get(0);
    let m = exporter.scrape();
    let emitted_after: i64 = one_row(
        &mut n,
        &format!("select txns_emitted from pubjson.decoding_stats() where slot_name = '{SLOT}'"),
    )
    .get(0);
    println!(
        "--- exporter on the new primary\n{}",
        m.lines("pubjson_slot")
    );
    exporter.assert_up(&m);
    let slot_labels = [
        ("slot_name", SLOT),
        ("slot_type", "logical"),
        ("plugin", "pubjson"),
        ("database", DB),
    ];
    assert_eq!(m.value("pubjson_slot_active", &slot_labels), 1.0);
    assert_eq!(m.value("pubjson_slot_failover", &slot_labels), 1.0);
    assert_eq!(m.value("pubjson_slot_synced", &slot_labels), 1.0);
    assert_eq!(m.value("pubjson_slot_invalidated", &slot_labels), 0.0);
    assert_eq!(m.value("pubjson_slot_inactive_seconds", &slot_labels), 0.0);
    assert!(m.value("pubjson_slot_retained_wal_bytes", &slot_labels) > 0.0);
    assert_eq!(
        m.value(
            "pubjson_slot_state_info",
            &[
                ("slot_name", SLOT),
                ("wal_status", "reserved"),
                ("invalidation_reason", "")
            ]
        ),
        1.0
    );
    let decoded = [("slot_name", SLOT)];
    let scraped = m.value("pubjson_decoding_txns_emitted_total", &decoded);
    assert!(
        (emitted_before as f64..=emitted_after as f64).contains(&scraped),
        "scraped {scraped}, SQL {emitted_before}..{emitted_after}"
    );
    assert!(m.value("pubjson_decoding_pending_transactions", &decoded) >= 1.0);
    assert_eq!(
        m.value(
            "pubjson_pending_transaction_changes",
            &[("slot_name", SLOT), ("xid", held_xid.as_str())]
        ),
        HELD_ROWS as f64
    );
    // The physical slot the standby had is not on the new primary.
    assert!(m
        .find("pubjson_slot_active", &[("slot_name", PHYSICAL_SLOT)])
        .is_empty());

    // --- The end: the held transaction commits, then the last one.
    exec(&mut held, "commit");
    exec(&mut n, "insert into fo.marker values ('end')");
    recv_new.wait_received(r#""value":"end""#, Duration::from_secs(120));
    // Its COMMIT may follow a moment later.
    let new = poll(
        "the last transaction complete in the stream",
        Duration::from_secs(60),
        || {
            let new = transactions(&file_new);
            let last = new.last()?;
            (last.changes.len() == 1 && last.changes[0]["columns"][0]["value"] == "end")
                .then_some(new)
        },
    );
    let end = new.last().expect("transactions from the new primary");
    wait_confirmed(
        &mut n,
        end.nextlsn,
        "the new primary's slot confirmed the end",
    );
    recv_new.stop();

    // --- Redelivery: exactly the old stream's transactions from the
    // synced position on, identical; nothing older.
    for (name, txns) in [("old", &old), ("new", &new)] {
        assert!(
            txns.windows(2).all(|w| w[0].lsn < w[1].lsn),
            "commit LSNs increase in the {name} stream"
        );
    }
    let old_by_lsn: BTreeMap<u64, &Txn> = old.iter().map(|t| (t.lsn, t)).collect();
    let redelivered: Vec<&Txn> = new.iter().filter(|t| t.lsn <= last_old.lsn).collect();
    for t in &redelivered {
        assert_eq!(
            old_by_lsn.get(&t.lsn),
            Some(t),
            "a transaction delivered again is the one delivered before"
        );
    }
    let expected: Vec<u64> = old
        .iter()
        .filter(|t| t.lsn >= resume_at)
        .map(|t| t.lsn)
        .collect();
    let got: Vec<u64> = redelivered.iter().map(|t| t.lsn).collect();
    assert_eq!(
        got, expected,
        "delivered again: the transactions from the synced confirmed_flush_lsn on"
    );
    assert!(new.first().expect("new stream").lsn >= resume_at);

    // --- Nothing lost: the replica equals the new primary.
    let mut replica = Replica::default();
    for t in old.iter().chain(new.iter()) {
        replica.apply(t);
    }
    assert_eq!(replica.skipped, redelivered.len());
    for table in ["log", "acct", "marker"] {
        let on_primary = table_on(&mut n, table);
        let in_replica = replica.tables.get(table).cloned().unwrap_or_default();
        if in_replica != on_primary {
            let only_replica: Vec<&String> = in_replica
                .keys()
                .filter(|k| !on_primary.contains_key(*k))
                .take(10)
                .collect();
            let only_primary: Vec<&String> = on_primary
                .keys()
                .filter(|k| !in_replica.contains_key(*k))
                .take(10)
                .collect();
            panic!(
                "fo.{table}: replica ({} rows) differs from the new primary ({} rows); \
                 only in the replica: {only_replica:?}; only on the primary: {only_primary:?}",
                in_replica.len(),
                on_primary.len()
            );
        }
    }
    // What the crash lost (acknowledged on the old primary, never
    // replicated) is a tail of the writer's commits, none of which the
    // consumer received.
    let on_new: BTreeSet<i64> = rows(&mut n, "select txn from fo.log where phase = 1")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lost: Vec<i64> = written
        .acked
        .iter()
        .copied()
        .filter(|t| !on_new.contains(t))
        .collect();
    if let Some(first_lost) = lost.first() {
        assert!(
            on_new
                .iter()
                .all(|t| t < first_lost || Some(t) == written.interrupted.as_ref()),
            "lost commits form a tail: first lost {first_lost}"
        );
    }
    let received_old: BTreeSet<String> = old
        .iter()
        .flat_map(|t| &t.changes)
        .filter(|c| c["table"] == "log")
        .map(|c| row_of(&c["columns"])["txn"].clone())
        .collect();
    assert!(
        lost.iter().all(|t| !received_old.contains(&t.to_string())),
        "the consumer received nothing the standby did not have"
    );
    assert!(
        lost.len() as i64 >= BEHIND,
        "the commits after the standby stopped receiving are lost: {}",
        lost.len()
    );

    // --- decoding_stats() on the new primary: exactly what it sent.
    let st = one_row(
        &mut n,
        &format!(
            "select txns_emitted, changes_emitted, txns_decoded, active, confirmed_flush_lsn::text,
                    pending_txns, retained_wal_bytes > 0, invalidation_reason
               from pubjson.decoding_stats() where slot_name = '{SLOT}'"
        ),
    );
    assert_eq!(st.get::<_, i64>(0), new.len() as i64, "txns_emitted");
    assert_eq!(
        st.get::<_, i64>(1),
        changes_in(&new) as i64,
        "changes_emitted"
    );
    assert!(st.get::<_, i64>(2) >= new.len() as i64, "txns_decoded");
    assert_eq!(st.get::<_, Option<bool>>(3), Some(false), "inactive");
    let confirmed = st.get::<_, Option<String>>(4).expect("confirmed_flush_lsn");
    assert!(lsn(&confirmed) >= end.nextlsn, "{confirmed}");
    assert_eq!(st.get::<_, Option<i32>>(5), Some(0));
    assert_eq!(st.get::<_, Option<bool>>(6), Some(true));
    assert_eq!(st.get::<_, Option<String>>(7), None);

    // --- publication_risks(): the inactive slot retains WAL on the new
    // primary, synced or not (only a standby's copies are left out).
    let risks: Vec<(String, String)> = rows(
        &mut n,
        "select risk, hint from pubjson.publication_risks('fo_pub') where detail like 'slot fo_slot %'",
    )
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert_eq!(
        risks,
        vec![(
            "inactive_slot_retains_wal".to_string(),
            format!(
                "re-enable or drop the subscription using it, or: SELECT pg_drop_replication_slot('{SLOT}');"
            )
        )]
    );

    // --- The exporter once the consumer is gone.
    let m = exporter.scrape();
    assert_eq!(m.value("pubjson_slot_active", &slot_labels), 0.0);
    assert_eq!(m.value("pubjson_slot_synced", &slot_labels), 1.0);
    assert!(m.value("pubjson_slot_inactive_seconds", &slot_labels) >= 0.0);
    assert_eq!(
        m.value("pubjson_decoding_txns_emitted_total", &decoded),
        new.len() as f64
    );
    assert_eq!(
        m.value("pubjson_decoding_pending_transactions", &decoded),
        0.0
    );

    println!(
        "failover: {} transactions from the old primary, {} from the new one, {} delivered again \
         (synced position {} behind the consumer's last commit), {} acknowledged commits lost with \
         the crash, {} rows in fo.log; {:?}",
        old.len(),
        new.len(),
        redelivered.len(),
        last_old.nextlsn.saturating_sub(resume_at),
        lost.len(),
        replica.tables.get("log").map_or(0, BTreeMap::len),
        started.elapsed()
    );
    drop(exporter);
    drop(n);
    drop(standby);
    drop(primary);
}
