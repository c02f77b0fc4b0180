//! pubjson's Prometheus metrics for real: Debian's
//! `prometheus-postgres-exporter` runs with `monitoring/pubjson-exporter-queries.yaml`
//! against the test cluster as a role with only `pg_monitor`, and its
//! `/metrics` endpoint is scraped over loopback while
//!
//! - pg_recvlogical decodes a pubjson slot and another session holds a
//!   batch transaction open (so the slot's reorder buffer holds it back,
//!   spilled past a 64kB `logical_decoding_work_mem`),
//! - a second pubjson slot is inactive and retains WAL,
//! - a subscription in a second database was disabled by an apply error
//!   (`disable_on_error`, a duplicate key on the subscriber).
//!
//! Every value is checked against what SQL says at the same time; the
//! types (counter or gauge) and the exporter's own health metrics too.
//! After COMMIT, the next scrape no longer shows the transaction.
//! The standby metrics are checked on a real standby by
//! `tests/monitoring_standby.rs`.
//!
//! A second test scrapes a backfill's progress (`pubjson_backfill_*`)
//! while it waits at a held row, once its session is gone, and after it
//! was resumed and finished.

use postgres::Client;
use pubjson_e2e::{
    exec, one_row, one_string, poll, scratch_dir, server_major, sqlstate, wait_true, Exporter,
    RecvLogical, Server,
};
use std::time::{Duration, Instant};

const PUB_DB: &str = "pubjson_e2e_mon";
const SUB_DB: &str = "pubjson_e2e_mon_sub";
const EXPORTER_ROLE: &str = "e2e_mon_exporter";
const DECODER_ROLE: &str = "e2e_mon_decoder";
const DECODED_SLOT: &str = "e2e_mon_decoded";
const IDLE_SLOT: &str = "e2e_mon_idle";
const SUB_SLOT: &str = "e2e_mon_sub";
const SUBSCRIPTION: &str = "e2e_mon_sub";
/// Rows of the held-back batch: enough to spill past 64kB many times.
const ROWS: i64 = 20_000;
const BACKFILL_DB: &str = "pubjson_e2e_mon_bf";

/// Drops what an earlier (killed) run may have left: the subscription
/// (a database with one cannot be dropped while it is enabled), then the
/// databases with their slots.
fn clean_up(server: &Server) {
    let mut admin = server.connect("postgres");
    let has_sub: bool = admin
        .query_one(
            "select exists (select from pg_database where datname = $1)",
            &[&SUB_DB],
        )
        .expect("pg_database")
        .get(0);
    if has_sub {
        let mut s = server.connect(SUB_DB);
        let _ = s.batch_execute(&format!(
            "alter subscription {SUBSCRIPTION} disable;
             alter subscription {SUBSCRIPTION} set (slot_name = none);
             drop subscription {SUBSCRIPTION};"
        ));
    }
    for db in [SUB_DB, PUB_DB] {
        server.drop_database(db).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Removes the subscription and databases when the test ends, passed or not.
struct Cleanup(Server);

impl Drop for Cleanup {
    fn drop(&mut self) {
        clean_up(&self.0);
    }
}

/// A fresh database `name` with pubjson, the roles created
/// ([`create_roles`]), and the server's major version.
fn fresh_database_with_roles(server: &Server, name: &str) -> (Client, u32) {
    let mut c = server.fresh_database_with_pubjson(name);
    let major = server_major(&mut c);
    create_roles(&mut c);
    (c, major)
}

/// The roles: the exporter's (pg_monitor only, search_path pinned as
/// docs/monitoring.md says) and a replication role whose decoding
/// sessions spill past 64kB. Roles are cluster-wide and kept between runs.
/// One test at a time: this file's two tests run at once, and two
/// sessions creating the same role collide on pg_authid's unique index
/// (an advisory lock would not serialize them: they are in different
/// databases).
fn create_roles(c: &mut Client) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    exec(
        c,
        &format!(
            "do $$ begin
               if not exists (select from pg_roles where rolname = '{EXPORTER_ROLE}') then
                 create role {EXPORTER_ROLE} login;
               end if;
               if not exists (select from pg_roles where rolname = '{DECODER_ROLE}') then
                 create role {DECODER_ROLE} login replication;
               end if;
             end $$;
             grant pg_monitor to {EXPORTER_ROLE};
             alter role {EXPORTER_ROLE} set search_path = pg_catalog;
             alter role {DECODER_ROLE} set logical_decoding_work_mem = '64kB';"
        ),
    );
}

/// WAL the idle slot retains now, by SQL.
fn idle_retained(c: &mut Client) -> f64 {
    c.query_one(
        "select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8
           from pg_replication_slots where slot_name = $1",
        &[&IDLE_SLOT],
    )
    .expect("idle slot")
    .get(0)
}

#[test]
fn exporter_scrapes_held_back_transaction_idle_slot_and_disabled_subscription() {
    let started = Instant::now();
    let server = Server::main();
    clean_up(&server);
    let _cleanup = Cleanup(server.clone());

    // Publisher database: a published table, a batch table, and hostile
    // operators in public that a scrape must never call.
    let (mut publ, major) = fresh_database_with_roles(&server, PUB_DB);
    exec(
        &mut publ,
        "create table replicated (id int primary key, v text);
         create table batch (id int primary key, pad text);
         create publication mon_pub for table replicated;
         create function public.hostile_minus(timestamptz, timestamptz) returns interval
           language plpgsql as $$ begin raise exception 'hostile operator called'; end $$;
         create operator public.- (function = public.hostile_minus,
                                   leftarg = timestamptz, rightarg = timestamptz);
         create function public.hostile_arrow(jsonb, text) returns text
           language plpgsql as $$ begin raise exception 'hostile operator called'; end $$;
         create operator public.->> (function = public.hostile_arrow,
                                     leftarg = jsonb, rightarg = text);",
    );
    for (slot, plugin) in [
        (DECODED_SLOT, "pubjson"),
        (IDLE_SLOT, "pubjson"),
        (SUB_SLOT, "pgoutput"),
    ] {
        exec(
            &mut publ,
            &format!("select pg_create_logical_replication_slot('{slot}', '{plugin}')"),
        );
    }

    // Subscriber database on the same server, subscribing through the
    // slot made above; the subscriber already has the key the publisher
    // inserts next, so apply fails and disables the subscription.
    let mut sub = server.fresh_database_with_pubjson(SUB_DB);
    exec(
        &mut sub,
        &format!(
            "create table replicated (id int primary key, v text);
             insert into replicated values (1, 'subscriber');
             create subscription {SUBSCRIPTION}
               connection 'host={} port={} user=postgres dbname={PUB_DB}'
               publication mon_pub
               with (create_slot = false, slot_name = '{SUB_SLOT}', copy_data = false,
                     disable_on_error = true)",
            server.host, server.port
        ),
    );
    wait_true(
        &mut sub,
        "the subscription's apply worker",
        Duration::from_secs(30),
        "select worker_pid is not null from pubjson.subscription_status()",
        &[],
    );
    exec(&mut publ, "insert into replicated values (1, 'publisher')");
    poll(
        "the subscription disabled by the error",
        Duration::from_secs(30),
        || {
            let _ = sub.batch_execute("select pg_stat_clear_snapshot()");
            let r = sub
                .query_one(
                    "select disabled_by_error and apply_error_count >= 1
                       from pubjson.subscription_status()",
                    &[],
                )
                .ok()?;
            r.get::<_, bool>(0).then_some(())
        },
    );

    // A decoding session on one slot, and a batch it holds back.
    let dir = scratch_dir("monitoring");
    let mut rl = RecvLogical::start_on(
        &server,
        (DECODER_ROLE, PUB_DB),
        DECODED_SLOT,
        &dir.join("decoded.out"),
        &[],
        &[],
    );
    let mut batch = server.connect(PUB_DB);
    exec(&mut batch, "set application_name = 'e2e_mon_batch'; begin");
    let batch_pid: i32 = batch
        .query_one("select pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let xid = one_string(&mut batch, "select pg_current_xact_id()::text");
    exec(
        &mut batch,
        &format!("insert into batch select g, repeat('x', 40) from generate_series(1, {ROWS}) g"),
    );
    // A decoder reads flushed WAL only: a commit elsewhere flushes it.
    exec(&mut publ, "select pg_current_xact_id()");
    let opened = Instant::now();
    // At least: see the check of the scrape below.
    rl.wait_pending(
        &mut publ,
        "the batch in pending_transactions()",
        (DECODED_SLOT, &xid),
        ROWS,
    );

    // Scrape, with SQL's view of the idle slot's WAL just before and after.
    let mut exporter = Exporter::start(
        &server,
        EXPORTER_ROLE,
        PUB_DB,
        major,
        &[
            "--auto-discover-databases",
            &format!("--include-databases={PUB_DB},{SUB_DB}"),
        ],
        "primary",
    );
    let retained_before = idle_retained(&mut publ);
    let m = exporter.scrape();
    let retained_after = idle_retained(&mut publ);
    let held_for = opened.elapsed().as_secs_f64();
    println!("{}", m.lines("pubjson_"));

    // The exporter ran every query without error.
    exporter.assert_up(&m);
    assert_eq!(m.value("pg_exporter_user_queries_load_error", &[]), 0.0);
    let log = exporter.log_text();
    assert!(
        !log.contains("Error running query") && !log.contains("hostile"),
        "exporter log:\n{log}"
    );

    // The held-back transaction, with its owner.
    let txn = [
        ("slot_name", DECODED_SLOT),
        ("xid", xid.as_str()),
        ("pid", &batch_pid.to_string()),
        ("usename", "postgres"),
        ("application_name", "e2e_mon_batch"),
    ];
    // Its rows, and what PostgreSQL adds to every open transaction when
    // another one commits a catalog change (a snapshot, and in newer minor
    // releases its invalidations): never fewer than the rows, never more
    // than SQL shows after the scrape.
    let scraped = m.value("pubjson_pending_transaction_changes", &txn);
    let changes_after: i64 = publ
        .query_one(
            "select changes from pubjson.pending_transactions()
              where slot_name = $1 and xid::text = $2",
            &[&DECODED_SLOT, &xid],
        )
        .expect("pending_transactions() after the scrape")
        .get(0);
    assert!(
        scraped >= ROWS as f64 && scraped <= changes_after as f64,
        "scraped {scraped} changes, {ROWS} rows, {changes_after} in SQL after the scrape"
    );
    let age = m.value("pubjson_pending_transaction_age_seconds", &txn);
    assert!(age > 0.0 && age <= held_for + 1.0, "age {age} s");
    assert!(m.value("pubjson_pending_transaction_spilled_changes", &txn) > 0.0);
    assert_eq!(
        m.value("pubjson_pending_transaction_streamed_changes", &txn),
        0.0
    );
    assert!(m.value("pubjson_pending_transaction_retained_wal_bytes", &txn) > (ROWS * 40) as f64);
    assert!(m.value("pubjson_pending_transaction_bytes_in_memory", &txn) >= 0.0);
    let decoded = [("slot_name", DECODED_SLOT)];
    // The reorder buffer holds every transaction the WAL shows, of any
    // database: a test beside this one (the backfill's, holding a row)
    // may add its own.
    assert!(m.value("pubjson_decoding_pending_transactions", &decoded) >= 1.0);
    let oldest = m.value("pubjson_decoding_oldest_pending_age_seconds", &decoded);
    assert!(
        oldest > 0.0 && oldest <= held_for + 1.0,
        "oldest {oldest} s"
    );
    let sample_age = m.value("pubjson_decoding_live_sample_age_seconds", &decoded);
    assert!((0.0..60.0).contains(&sample_age), "{sample_age}");
    assert!(m.value("pubjson_decoding_peak_reorder_buffer_bytes", &decoded) > 0.0);

    // The slots: active and inactive, the WAL the idle one retains.
    let slot = |name| {
        [
            ("slot_name", name),
            ("slot_type", "logical"),
            ("database", PUB_DB),
        ]
    };
    assert_eq!(m.value("pubjson_slot_active", &slot(DECODED_SLOT)), 1.0);
    assert_eq!(m.value("pubjson_slot_active", &slot(IDLE_SLOT)), 0.0);
    assert_eq!(m.value("pubjson_slot_active", &slot(SUB_SLOT)), 0.0);
    assert_eq!(
        m.find("pubjson_slot_active", &[("slot_name", SUB_SLOT)])[0]
            .labels
            .get("plugin"),
        Some("pgoutput")
    );
    let retained = m.value("pubjson_slot_retained_wal_bytes", &slot(IDLE_SLOT));
    assert!(
        retained >= retained_before && retained <= retained_after && retained > (ROWS * 40) as f64,
        "retained {retained}, SQL {retained_before}..{retained_after}"
    );
    assert_eq!(m.value("pubjson_slot_invalidated", &slot(IDLE_SLOT)), 0.0);
    let inactive = m.value("pubjson_slot_inactive_seconds", &slot(IDLE_SLOT));
    if major >= 17 {
        assert!(
            inactive > 0.0 && inactive <= started.elapsed().as_secs_f64() + 1.0,
            "{inactive}"
        );
    } else {
        assert!(inactive.is_nan(), "no inactive_since before 17: {inactive}");
    }
    // Failover and synced (17+; tests/failover.rs scrapes a synced failover
    // slot on a promoted standby).
    for metric in ["pubjson_slot_failover", "pubjson_slot_synced"] {
        let v = m.value(metric, &slot(IDLE_SLOT));
        if major >= 17 {
            assert_eq!(v, 0.0, "{metric}");
        } else {
            assert!(v.is_nan(), "{metric} before 17: {v}");
        }
    }
    assert_eq!(
        m.value(
            "pubjson_slot_state_info",
            &[
                ("slot_name", IDLE_SLOT),
                ("wal_status", "reserved"),
                ("invalidation_reason", "")
            ]
        ),
        1.0
    );

    // The subscription, from the second database.
    let subscription = [("datname", SUB_DB), ("subscription", SUBSCRIPTION)];
    assert_eq!(
        m.value("pubjson_subscription_disabled_by_error", &subscription),
        1.0
    );
    assert_eq!(m.value("pubjson_subscription_enabled", &subscription), 0.0);
    assert_eq!(
        m.value("pubjson_subscription_worker_running", &subscription),
        0.0
    );
    let errors: i64 = sub
        .query_one(
            "select apply_error_count from pubjson.subscription_status()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        m.value("pubjson_subscription_apply_errors_total", &subscription),
        errors as f64
    );
    let insert_exists = m.find(
        "pubjson_subscription_conflicts_total",
        &[
            ("datname", SUB_DB),
            ("subscription", SUBSCRIPTION),
            ("conflict", "insert_exists"),
        ],
    );
    if major >= 18 {
        assert_eq!(insert_exists.len(), 1);
        assert!(pubjson_e2e::exporter::sample_value(insert_exists[0]) >= 1.0);
    } else {
        assert!(insert_exists.is_empty(), "conflict counters come with 18");
    }

    // The scrape quoted by the documentation: each line's metric and
    // labels are in this one.
    for doc in ["README.md", "docs/monitoring.md"] {
        m.check_quoted(doc, "e2e/tests/monitoring.rs");
    }

    // Nothing about a standby on a primary.
    assert!(m.lines("pubjson_standby").is_empty());

    // Types as declared: counters end in _total, the rest are gauges; every
    // metric has its help text.
    assert!(m.assert_types("pubjson_") > 40);

    // COMMIT: the next scrape no longer shows the transaction.
    exec(&mut batch, "commit");
    exec(
        &mut publ,
        "select pg_logical_emit_message(false, 'mon', 'done')",
    );
    rl.wait_received("done", Duration::from_secs(60));
    let m = poll(
        "a scrape without the committed transaction",
        Duration::from_secs(10),
        || {
            let m = exporter.scrape();
            (m.value("pubjson_decoding_pending_transactions", &decoded) == 0.0).then_some(m)
        },
    );
    assert!(m
        .find("pubjson_pending_transaction_changes", &[("xid", &xid)])
        .is_empty());
    assert!(m.value("pubjson_decoding_txns_decoded_total", &decoded) >= 1.0);
    assert!(m.value("pubjson_decoding_changes_emitted_total", &decoded) >= ROWS as f64);
    assert!(rl.stop().success(), "{}", rl.stderr());
    drop(exporter);
    println!("monitoring test took {:?}", started.elapsed());
}

#[test]
fn exporter_scrapes_backfill_progress() {
    let server = Server::main();
    let (mut c, major) = fresh_database_with_roles(&server, BACKFILL_DB);
    exec(
        &mut c,
        "create table bf (id int primary key, v text);
         insert into bf select i, 'v' || i from generate_series(1, 100) i;
         analyze bf;",
    );
    // The exporter's role reads the progress, not the keys (table data).
    let mut monitor = server.connect_as(BACKFILL_DB, EXPORTER_ROLE);
    let denied = monitor
        .batch_execute("select last_key from pubjson.backfill_progress")
        .expect_err("last_key is not for pg_monitor");
    assert_eq!(sqlstate(&denied), "42501");

    // A writer holds row 50: a backfill in chunks of 10 rows commits four
    // and waits at the fifth.
    let mut holder = server.connect(BACKFILL_DB);
    exec(
        &mut holder,
        "begin; select * from bf where id = 50 for update",
    );
    let mut b = server.connect(BACKFILL_DB);
    let pid: i32 = one_row(&mut b, "select pg_backend_pid()").get(0);
    let running = std::thread::spawn(move || {
        let _ = b.batch_execute("call pubjson.backfill('bf', chunk_rows => 10)");
    });
    wait_true(
        &mut c,
        "the backfill waits for the held row",
        Duration::from_secs(60),
        "select exists (select from pg_stat_activity where pid = $1 and wait_event_type = 'Lock')",
        &[&pid],
    );
    let mut exporter = Exporter::start(&server, EXPORTER_ROLE, BACKFILL_DB, major, &[], "backfill");
    let m = exporter.scrape();
    println!("{}", m.lines("pubjson_backfill"));
    exporter.assert_up(&m);
    let table = [("datname", BACKFILL_DB), ("relation", "public.bf")];
    assert_eq!(m.value("pubjson_backfill_running", &table), 1.0);
    assert_eq!(m.value("pubjson_backfill_stopped", &table), 0.0);
    assert_eq!(m.value("pubjson_backfill_chunks", &table), 4.0);
    assert_eq!(m.value("pubjson_backfill_rows", &table), 40.0);
    assert_eq!(
        m.value("pubjson_backfill_table_rows_estimate", &table),
        100.0
    );
    let duration = m.value("pubjson_backfill_duration_seconds", &table);
    let age = m.value("pubjson_backfill_last_chunk_age_seconds", &table);
    assert!(
        duration > 0.0 && age >= 0.0 && age <= duration,
        "{duration} {age}"
    );
    m.check_quoted("docs/monitoring.md", "e2e/tests/monitoring.rs (backfill)");
    assert_eq!(m.assert_types("pubjson_backfill"), 7);

    // Its session ends: stopped, until CALL resumes it.
    exec(&mut c, &format!("select pg_terminate_backend({pid})"));
    running.join().expect("backfill thread");
    poll(
        "a scrape with the backfill stopped",
        Duration::from_secs(30),
        || (exporter.scrape().value("pubjson_backfill_stopped", &table) == 1.0).then_some(()),
    );
    exec(&mut holder, "commit");
    exec(&mut c, "call pubjson.backfill('bf', chunk_rows => 10)");
    let m = exporter.scrape();
    let done = one_row(
        &mut c,
        "select chunks, extract(epoch from finished - started)::float8 from pubjson.backfills",
    );
    assert_eq!(m.value("pubjson_backfill_running", &table), 0.0);
    assert_eq!(m.value("pubjson_backfill_stopped", &table), 0.0);
    assert_eq!(m.value("pubjson_backfill_rows", &table), 100.0);
    assert_eq!(
        m.value("pubjson_backfill_chunks", &table),
        done.get::<_, i64>(0) as f64
    );
    let took = m.value("pubjson_backfill_duration_seconds", &table);
    assert!(
        (took - done.get::<_, f64>(1)).abs() < 1e-6,
        "{took} {}",
        done.get::<_, f64>(1)
    );
    drop(exporter);
    drop(monitor);
    server
        .drop_database(BACKFILL_DB)
        .unwrap_or_else(|e| panic!("{e}"));
}
