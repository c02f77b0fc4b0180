//! The standby metrics of pubjson's query file for Debian's Prometheus
//! PostgreSQL exporter (`monitoring/pubjson-exporter-queries.yaml`), scraped
//! from a real hot standby of a primary of the test's own, through a role
//! with only pg_monitor (made on the primary, replicated):
//!
//! - before any conflict: replay does not wait, the budget and the delay
//!   match max_standby_streaming_delay, no query is at risk, nothing was
//!   cancelled;
//! - a lock conflict: a standby session holds a lock on a table the primary
//!   truncates; while replay waits, the scrape shows the wait, its kind and
//!   the session (pid, application_name, blocks_replay) with the time it has
//!   left, as `standby_queries_at_risk()` says at the same moment;
//! - the startup process cancels the session when the budget runs out: the
//!   next scrapes show replay going on, no query at risk, and the
//!   cancellation counted in `pubjson_standby_confl_lock_total`.
//!
//! Every scrape runs the whole query file without error, and the standby
//! metrics have the declared types. (On a primary the standby series are
//! absent: `tests/monitoring.rs` checks that.)

use postgres::Client;
use pubjson_e2e::{
    alter_system, exec, one_string, poll, server_major, Exporter, ExtraCluster, Metrics, Standby,
};
use std::time::{Duration, Instant};

const PRIMARY_PORT: u16 = 54347;
const STANDBY_PORT: u16 = 54348;
const DB: &str = "monsbdb";
const EXPORTER_ROLE: &str = "e2e_monsb_exporter";
const APP: &str = "e2e_monsb_reader";
/// A logical slot on the standby (16+).
const STANDBY_SLOT: &str = "e2e_monsb_standby_slot";
/// max_standby_streaming_delay on the standby, in seconds: long enough for
/// SQL and a scrape while replay waits, short enough for the wall time.
const DELAY_S: f64 = 10.0;

/// What SQL says on the standby: replay_waiting, confl_lock of the test's
/// database, and the budget left (seconds).
fn replay(c: &mut Client) -> (Option<bool>, i64, Option<f64>) {
    let r = c
        .query_one(
            "select replay_waiting, confl_lock, extract(epoch from budget_left)::float8
               from pubjson.standby_conflicts() where database = current_database()",
            &[],
        )
        .expect("standby_conflicts");
    (r.get(0), r.get(1), r.get(2))
}

/// time_left (seconds) of `pid` in standby_queries_at_risk(), if listed.
fn time_left(c: &mut Client, pid: i32) -> Option<f64> {
    c.query(
        "select extract(epoch from time_left)::float8
           from pubjson.standby_queries_at_risk() where pid = $1",
        &[&pid],
    )
    .expect("standby_queries_at_risk")
    .first()
    .map(|r| r.get::<_, Option<f64>>(0).expect("time_left"))
}

/// The scrape ran every query of the file without error.
fn assert_clean(m: &Metrics, exporter: &Exporter) {
    let log = exporter.log_text();
    assert_eq!(m.value("pg_up", &[]), 1.0, "{log}");
    assert_eq!(m.value("pg_exporter_last_scrape_error", &[]), 0.0, "{log}");
    assert_eq!(m.value("pg_exporter_user_queries_load_error", &[]), 0.0);
    assert!(!log.contains("Error running query"), "exporter log:\n{log}");
}

/// Types as declared (see `Metrics::assert_types`), for `expected`
/// standby metric names at least.
fn assert_types(m: &Metrics, expected: usize) {
    let n = m.assert_types("pubjson_standby");
    assert!(n >= expected, "{n} standby metrics");
}

/// The one series of the replay metrics.
fn scraped_replay(m: &Metrics, name: &str) -> f64 {
    m.value(&format!("pubjson_standby_replay_{name}"), &[])
}

/// 16+: a logical slot on the standby, in pubjson_slot_* (its WAL counted
/// from the replay position) and pubjson_standby_logical_slots.
///
/// Debian 12's exporter (0.11) then fails its own built-in
/// pg_replication_slots query on the standby (it calls
/// pg_current_wal_lsn(), "recovery is in progress"): pubjson's metrics are
/// all there, but the scrape counts an error. With
/// --disable-default-metrics the scrape is clean.
fn standby_slot(p: &mut Client, sb: &Standby, exporter: &mut Exporter, major: u32) {
    // The slot's creation waits for a running-transactions record from the
    // primary: ask for one until it is done.
    let standby = sb.server();
    let creating = std::thread::spawn(move || {
        let mut c = standby.connect(DB);
        exec(
            &mut c,
            &format!("select pg_create_logical_replication_slot('{STANDBY_SLOT}', 'pubjson')"),
        );
    });
    while !creating.is_finished() {
        exec(p, "select pg_log_standby_snapshot()");
        std::thread::sleep(Duration::from_millis(200));
    }
    creating.join().expect("slot created on the standby");

    let check = |m: &Metrics| {
        let db = [("database", DB)];
        assert_eq!(m.value("pubjson_standby_logical_slots", &db), 1.0);
        assert_eq!(
            m.value("pubjson_standby_logical_slots_invalidated", &db),
            0.0
        );
        let slot = [
            ("slot_name", STANDBY_SLOT),
            ("database", DB),
            ("plugin", "pubjson"),
        ];
        assert_eq!(m.value("pubjson_slot_active", &slot), 0.0);
        assert_eq!(m.value("pubjson_slot_invalidated", &slot), 0.0);
        let retained = m.value("pubjson_slot_retained_wal_bytes", &slot);
        assert!(retained >= 0.0, "{retained}");
        assert_eq!(scraped_replay(m, "waiting"), 0.0);
    };
    let m = exporter.scrape();
    println!(
        "--- a logical slot on the standby\n{}",
        m.lines("pubjson_slot")
    );
    check(&m);
    let log = exporter.log_text();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Error running query"))
        .collect();
    assert!(
        !errors.is_empty()
            && errors
                .iter()
                .all(|l| l.contains("pg_replication_slots pq: recovery is in progress")),
        "only the exporter's built-in slot query fails: {log}"
    );

    let mut plain = Exporter::start(
        &sb.server(),
        EXPORTER_ROLE,
        DB,
        major,
        &["--disable-default-metrics"],
        "standby-plain",
    );
    let m = plain.scrape();
    assert_clean(&m, &plain);
    check(&m);
}

#[test]
fn exporter_scrapes_standby_replay_wait_and_query_at_risk() {
    let started = Instant::now();
    let primary = ExtraCluster::start(&pubjson_e2e::cluster_dir("monsbprimary"), PRIMARY_PORT);
    let mut p = primary.server().fresh_database_with_pubjson(DB);
    let major = server_major(&mut p);
    exec(
        &mut p,
        &format!(
            "create table t (id int primary key);
             insert into t select generate_series(1, 10);
             create role {EXPORTER_ROLE} login;
             grant pg_monitor to {EXPORTER_ROLE};
             alter role {EXPORTER_ROLE} set search_path = pg_catalog;"
        ),
    );

    let sb = Standby::start_of(
        &primary.server(),
        &pubjson_e2e::cluster_dir("monsbstandby"),
        STANDBY_PORT,
    );
    let mut s = sb.connect(DB);
    alter_system(
        &mut s,
        &format!("max_standby_streaming_delay = '{}s'", DELAY_S as i64),
    );
    poll(
        "the standby caught up with the new delay",
        Duration::from_secs(30),
        || {
            let n: i64 = s.query_one("select count(*) from t", &[]).ok()?.get(0);
            let delay = one_string(&mut s, "show max_standby_streaming_delay");
            (n == 10 && delay == format!("{}s", DELAY_S as i64)).then_some(())
        },
    );

    let mut exporter = Exporter::start(&sb.server(), EXPORTER_ROLE, DB, major, &[], "standby");

    // --- Before any conflict.
    let m = exporter.scrape();
    println!("--- before any conflict\n{}", m.lines("pubjson_standby"));
    assert_clean(&m, &exporter);
    assert_eq!(scraped_replay(&m, "waiting"), 0.0);
    assert_eq!(scraped_replay(&m, "max_delay_seconds"), DELAY_S);
    assert_eq!(scraped_replay(&m, "waits_forever"), 0.0);
    assert_eq!(scraped_replay(&m, "behind_seconds"), 0.0, "caught up");
    let budget = scraped_replay(&m, "budget_left_seconds");
    assert!((0.0..=DELAY_S).contains(&budget), "budget {budget}");
    let db = [("database", DB)];
    assert_eq!(m.value("pubjson_standby_confl_lock_total", &db), 0.0);
    assert_eq!(m.value("pubjson_standby_confl_snapshot_total", &db), 0.0);
    assert!(m.lines("pubjson_standby_replay_conflict_").is_empty());
    assert!(m.lines("pubjson_standby_query_").is_empty());
    // Every database of the standby has its counters.
    assert!(!m
        .find(
            "pubjson_standby_confl_lock_total",
            &[("database", "postgres")]
        )
        .is_empty());
    assert_eq!(m.value("pubjson_standby_logical_slots", &db), 0.0);
    assert_eq!(
        m.value("pubjson_standby_logical_slots_invalidated", &db),
        0.0
    );
    // Nothing of a primary's on a standby.
    assert!(m.lines("pubjson_subscription").is_empty());

    assert_types(&m, 14);

    // --- Lock conflict: a standby session holds a lock on t (read
    // committed, idle in transaction), the primary truncates t.
    let mut b = sb.connect(DB);
    exec(&mut b, &format!("set application_name = '{APP}'"));
    let b_pid: i32 = b
        .query_one("select pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    exec(&mut b, "begin; select from t");
    exec(&mut p, "truncate t");
    poll("replay waits on the lock", Duration::from_secs(20), || {
        (replay(&mut s).0 == Some(true)).then_some(())
    });
    let waiting_since = Instant::now();
    // SQL just before and after the scrape: the budget only counts down
    // while replay waits, so the scraped time lies between.
    let left_before = time_left(&mut s, b_pid).expect("b at risk");
    let m = exporter.scrape();
    let left_after = time_left(&mut s, b_pid).expect("b still at risk");
    println!(
        "--- replay waits for session {b_pid}\n{}",
        m.lines("pubjson_standby")
    );
    assert!(
        waiting_since.elapsed().as_secs_f64() < DELAY_S - 2.0,
        "sampled well within the budget"
    );
    assert_clean(&m, &exporter);
    // The 14 of before, the conflict's kind and the session's time left.
    assert_types(&m, 16);
    // As docs/monitoring.md quotes it.
    m.check_quoted("docs/monitoring.md", "e2e/tests/monitoring_standby.rs");
    assert_eq!(scraped_replay(&m, "waiting"), 1.0);
    assert_eq!(
        m.value(
            "pubjson_standby_replay_conflict_waiting",
            &[("conflict", "lock")]
        ),
        1.0
    );
    assert_eq!(
        m.find("pubjson_standby_replay_conflict_waiting", &[]).len(),
        1
    );
    assert_eq!(scraped_replay(&m, "budget_exact"), 1.0);
    let behind = scraped_replay(&m, "behind_seconds");
    let budget = scraped_replay(&m, "budget_left_seconds");
    assert!(
        behind > 0.0 && budget > 0.0 && budget < DELAY_S,
        "{behind} {budget}"
    );
    assert!(
        (behind + budget - DELAY_S).abs() < 0.01,
        "the budget is the delay minus the time replay is behind: {behind} + {budget}"
    );
    let session = [
        ("pid", b_pid.to_string()),
        ("database", DB.to_string()),
        ("usename", "postgres".to_string()),
        ("application_name", APP.to_string()),
        ("conflict", "lock".to_string()),
        ("blocks_replay", "true".to_string()),
    ];
    let session: Vec<(&str, &str)> = session.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let left = m.value("pubjson_standby_query_time_left_seconds", &session);
    assert!((0.0..=DELAY_S).contains(&left), "{left}");
    assert!(
        left <= left_before + 0.01 && left >= left_after - 0.01,
        "scraped {left} s, SQL {left_before} s before and {left_after} s after"
    );
    assert!(
        (left - budget).abs() < 0.5,
        "one budget for all: {left} {budget}"
    );
    // Only the session that holds the lock: not the exporter's own, not the
    // test's idle one.
    let queries = m.find("pubjson_standby_query_time_left_seconds", &[]);
    assert_eq!(queries.len(), 1, "{}", m.lines("pubjson_standby_query"));
    assert_eq!(m.value("pubjson_standby_confl_lock_total", &db), 0.0);

    // --- The budget runs out: the startup process cancels b (idle in a
    // transaction: its connection is terminated), replay goes on. The
    // replay, conflict and query metrics come from separate queries of a
    // scrape, run one after another: a scrape may see the wait in one and
    // its end in another, so the wait is for one that sees the end in all.
    let m = poll(
        "a scrape after the cancellation, without the conflict's series",
        Duration::from_secs(DELAY_S as u64 + 20),
        || {
            let m = exporter.scrape();
            (scraped_replay(&m, "waiting") == 0.0
                && m.value("pubjson_standby_confl_lock_total", &db) >= 1.0
                && m.lines("pubjson_standby_replay_conflict_").is_empty()
                && m.lines("pubjson_standby_query_").is_empty())
            .then_some(m)
        },
    );
    let cancelled_after = waiting_since.elapsed().as_secs_f64();
    println!(
        "--- after the cancellation ({cancelled_after:.1} s after replay began to wait)\n{}",
        m.lines("pubjson_standby")
    );
    assert!(
        cancelled_after > left_after - 0.5,
        "not cancelled before the budget ran out: {cancelled_after} s, {left_after} s left"
    );
    assert_clean(&m, &exporter);
    assert_eq!(m.value("pubjson_standby_confl_lock_total", &db), 1.0);
    let budget = scraped_replay(&m, "budget_left_seconds");
    assert!((0.0..=DELAY_S).contains(&budget), "budget {budget}");
    let err = b.batch_execute("select 1").expect_err("b was cancelled");
    assert!(
        format!("{err:?}").contains("conflict with recovery") || b.is_closed(),
        "{err:?}"
    );
    assert_eq!(replay(&mut s).1, 1, "SQL agrees");
    let n: i64 = s.query_one("select count(*) from t", &[]).unwrap().get(0);
    assert_eq!(n, 0, "the truncate was replayed");

    // A delay of -1: replay would wait forever, there is no budget.
    alter_system(&mut s, "max_standby_streaming_delay = -1");
    let m = poll(
        "a scrape with the delay -1",
        Duration::from_secs(10),
        || {
            let m = exporter.scrape();
            (scraped_replay(&m, "waits_forever") == 1.0).then_some(m)
        },
    );
    assert_clean(&m, &exporter);
    assert!(scraped_replay(&m, "max_delay_seconds").is_nan());
    assert!(scraped_replay(&m, "budget_left_seconds").is_nan());
    assert_eq!(scraped_replay(&m, "waiting"), 0.0);

    if major >= 16 {
        standby_slot(&mut p, &sb, &mut exporter, major);
    }
    drop(exporter);
    drop(sb);
    println!("standby monitoring test took {:?}", started.elapsed());
}
