//! What is happening on a hot standby right now: `standby_conflicts()`'s
//! replay columns (replay_waiting, replay_conflict, the startup process's
//! wait event, replay_behind) and `standby_queries_at_risk()`, on a primary
//! of its own and a real hot standby, before the startup process cancels
//! anything.
//!
//! - a lock conflict: a standby session holds a lock on a table the primary
//!   truncates; replay waits on it (wait event Lock/relation), the session is
//!   listed as blocking replay, an unprivileged role sees the row without its
//!   query text; ending the session's transaction lets replay go on;
//! - a snapshot conflict: a REPEATABLE READ cursor on the standby sees rows
//!   the primary deletes and vacuums; replay waits
//!   (RecoveryConflictSnapshot), the session is at risk with a budget that
//!   counts down with the clock, and the startup process cancels it when the
//!   budget runs out, not before; afterwards nothing waits.

use postgres::Client;
use pubjson_e2e::conflicts::await_replay_receipt_time;
use pubjson_e2e::{poll, sqlstate, ExtraCluster, Standby};
use std::time::{Duration, Instant};

const PRIMARY_PORT: u16 = 54345;
const STANDBY_PORT: u16 = 54346;
/// max_standby_streaming_delay on the standby, in seconds: long enough to
/// sample the countdown, short enough for the test's wall time.
const DELAY_S: f64 = 8.0;

/// The replay columns of standby_conflicts() for this database.
#[derive(Debug)]
struct Replay {
    waiting: Option<bool>,
    conflict: Option<String>,
    event_type: Option<String>,
    event: Option<String>,
    behind_s: Option<f64>,
    budget_s: Option<f64>,
    exact: Option<bool>,
    confl_snapshot: i64,
    confl_lock: i64,
}

fn replay(c: &mut Client) -> Replay {
    let r = c
        .query_one(
            "select replay_waiting, replay_conflict, replay_wait_event_type, replay_wait_event,
                    extract(epoch from replay_behind)::float8, extract(epoch from budget_left)::float8,
                    estimate_exact, confl_snapshot, confl_lock
               from pubjson.standby_conflicts() where database = current_database()",
            &[],
        )
        .expect("standby_conflicts");
    Replay {
        waiting: r.get(0),
        conflict: r.get(1),
        event_type: r.get(2),
        event: r.get(3),
        behind_s: r.get(4),
        budget_s: r.get(5),
        exact: r.get(6),
        confl_snapshot: r.get(7),
        confl_lock: r.get(8),
    }
}

/// One row of standby_queries_at_risk().
#[derive(Debug)]
struct AtRisk {
    pid: i32,
    query: Option<String>,
    has_xmin: bool,
    locked: Vec<String>,
    at_risk_from: Vec<String>,
    blocks_replay: Option<bool>,
    conflict: Option<String>,
    time_left_s: Option<f64>,
}

fn at_risk(c: &mut Client) -> Vec<AtRisk> {
    c.query(
        "select pid, query, backend_xmin is not null, coalesce(locked_relations, '{}'),
                at_risk_from, blocks_replay, replay_conflict, extract(epoch from time_left)::float8
           from pubjson.standby_queries_at_risk()",
        &[],
    )
    .expect("standby_queries_at_risk")
    .iter()
    .map(|r| AtRisk {
        pid: r.get(0),
        query: r.get(1),
        has_xmin: r.get(2),
        locked: r.get(3),
        at_risk_from: r.get(4),
        blocks_replay: r.get(5),
        conflict: r.get(6),
        time_left_s: r.get(7),
    })
    .collect()
}

fn backend_pid(c: &mut Client) -> i32 {
    c.query_one("select pg_backend_pid()", &[])
        .expect("pid")
        .get(0)
}

/// Prints both functions' rows as JSON (the README's worked example).
fn show(c: &mut Client, label: &str) {
    let rows: Vec<String> = c
        .query(
            "select jsonb_pretty(to_jsonb(x) - 'logical_slot_details' - 'logical_slot_hint')
               from pubjson.standby_conflicts() x where database = current_database()
             union all
             select jsonb_pretty(to_jsonb(q)) from pubjson.standby_queries_at_risk() q",
            &[],
        )
        .expect("show")
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!("--- {label}\n{}", rows.join("\n"));
}

#[test]
fn replay_waits_and_queries_at_risk_before_cancellation() {
    let started = Instant::now();
    let primary = ExtraCluster::start(&pubjson_e2e::cluster_dir("riskprimary"), PRIMARY_PORT);
    let mut p = primary.server().fresh_database_with_pubjson("riskdb");
    p.batch_execute(
        "create table t (id int primary key, v text);
         insert into t select g, 'x' from generate_series(1, 1000) g;
         create table t2 (id int primary key);
         insert into t2 select generate_series(1, 10);
         create role risk_reader login;
         grant usage on schema pubjson to risk_reader;
         grant execute on function pubjson.standby_queries_at_risk(), pubjson._standby_replay(),
               pubjson._replay_receipt_time(), pubjson.standby_conflicts(),
               pubjson._slot_invalidation(jsonb), pubjson._slot_conflicting(jsonb) to risk_reader;
         create role risk_monitor login in role pg_monitor;",
    )
    .expect("primary setup");
    // On a primary: nothing at risk.
    assert!(at_risk(&mut p).is_empty());

    let sb = Standby::start_of(
        &primary.server(),
        &pubjson_e2e::cluster_dir("riskstandby"),
        STANDBY_PORT,
    );
    let mut m = sb.connect("riskdb");
    m.batch_execute(&format!(
        "alter system set max_standby_streaming_delay = '{}s'",
        DELAY_S as i64
    ))
    .expect("set the delay");
    m.batch_execute("select pg_reload_conf()").expect("reload");
    // The lock conflict's budget below is exact only once the startup
    // process has published its receipt time.
    await_replay_receipt_time(&mut p, &mut m);
    poll(
        "the standby replayed the setup",
        Duration::from_secs(30),
        || {
            let n: i64 = m.query_one("select count(*) from t2", &[]).ok()?.get(0);
            let r = replay(&mut m);
            (n == 10 && r.behind_s == Some(0.0)).then_some(())
        },
    );
    // Nothing is waiting and nobody else holds a snapshot or lock.
    let r = replay(&mut m);
    assert_eq!(
        (r.waiting, r.conflict.as_deref(), r.behind_s),
        (Some(false), None, Some(0.0)),
        "{r:?}"
    );
    assert!(at_risk(&mut m).is_empty());

    // Streaming, as pg_monitor sees it; a role without pg_read_all_stats
    // sees only the WAL receiver's pid in pg_stat_wal_receiver, so which
    // delay applies is hidden: NULL, never the archive delay (issue 23).
    {
        let delay_cols = "select delay_setting, max_delay::text, waits_forever,
                                 wal_receiver_status, wal_receipt_time is null, budget_left::text,
                                 estimate_exact, how_derived
                            from pubjson.standby_conflicts() where database = current_database()";
        type Cols = (
            Option<String>,
            Option<String>,
            Option<bool>,
            Option<String>,
            bool,
            Option<String>,
            Option<bool>,
            String,
        );
        let get = |c: &mut Client| -> Cols {
            let r = c.query_one(delay_cols, &[]).expect("standby_conflicts");
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            )
        };
        // The limit, its value, whether it is unlimited, and the WAL source.
        let limit = |t: &Cols| (t.0.clone(), t.1.clone(), t.2, t.3.clone());
        let seen = get(&mut sb.server().connect_as("riskdb", "risk_monitor"));
        assert_eq!(
            limit(&seen),
            (
                Some("max_standby_streaming_delay".to_string()),
                Some("00:00:08".to_string()),
                Some(false),
                Some("streaming".to_string())
            ),
            "pg_monitor: {seen:?}"
        );
        assert!(seen.5.is_some(), "pg_monitor sees a budget: {seen:?}");
        let hidden = get(&mut sb.server().connect_as("riskdb", "risk_reader"));
        assert_eq!(
            (
                hidden.0.as_deref(),
                hidden.1.as_deref(),
                hidden.2,
                hidden.3.as_deref(),
                hidden.4,
                hidden.5.as_deref(),
                hidden.6
            ),
            (None, None, None, None, true, None, None),
            "without pg_read_all_stats: {hidden:?}"
        );
        assert!(
            hidden.7.contains("hidden") && hidden.7.contains("pg_read_all_stats"),
            "{hidden:?}"
        );
    }

    // --- Lock conflict: a session on the standby holds a lock on t2 (read
    // committed, idle in transaction: no snapshot), the primary truncates it.
    let mut b = sb.connect("riskdb");
    let b_pid = backend_pid(&mut b);
    b.batch_execute("begin; select count(*) from t2 /* b holds t2 */;")
        .expect("b locks t2");
    let rows = at_risk(&mut m);
    let row = rows.iter().find(|x| x.pid == b_pid).expect("b listed");
    assert!(!row.has_xmin, "read committed, idle: no snapshot: {row:?}");
    assert!(row.locked.contains(&"public.t2".to_string()), "{row:?}");
    assert_eq!(row.at_risk_from, vec!["lock".to_string()]);
    assert_eq!(row.blocks_replay, Some(false), "replay is not waiting yet");
    assert!(row.query.as_deref().unwrap().contains("b holds t2"));
    let lock_before = replay(&mut m).confl_lock;

    p.batch_execute("truncate t2").expect("truncate");
    let r = poll("replay waits on the lock", Duration::from_secs(20), || {
        let r = replay(&mut m);
        (r.waiting == Some(true)).then_some(r)
    });
    show(&mut m, "lock conflict: replay waits for session b");
    assert_eq!(r.conflict.as_deref(), Some("lock"), "{r:?}");
    assert_eq!(
        (r.event_type.as_deref(), r.event.as_deref()),
        (Some("Lock"), Some("relation")),
        "{r:?}"
    );
    assert_eq!(r.exact, Some(true), "{r:?}");
    let behind = r.behind_s.expect("behind");
    let budget = r.budget_s.expect("budget");
    assert!(behind > 0.0 && budget < DELAY_S, "{r:?}");
    assert!((behind + budget - DELAY_S).abs() < 0.01, "{r:?}");
    let rows = at_risk(&mut m);
    let row = rows.iter().find(|x| x.pid == b_pid).expect("b listed");
    assert_eq!(row.blocks_replay, Some(true), "pg_blocking_pids: {row:?}");
    assert_eq!(row.conflict.as_deref(), Some("lock"));
    assert!(row.time_left_s.unwrap() <= budget, "{row:?}");

    // An unprivileged role (EXECUTE granted, no pg_read_all_stats): the row,
    // but neither b's query text nor the startup process's wait event.
    {
        let mut u = sb.server().connect_as("riskdb", "risk_reader");
        let rows = at_risk(&mut u);
        let row = rows.iter().find(|x| x.pid == b_pid).expect("b listed");
        assert_eq!(row.query.as_deref(), Some("<insufficient privilege>"));
        assert_eq!(row.blocks_replay, None, "wait event hidden: {row:?}");
        assert!(rows
            .iter()
            .all(|x| !x.query.as_deref().unwrap_or("").contains("b holds t2")));
    }

    // Ending b's transaction lets replay go on; nothing was cancelled.
    b.batch_execute("rollback").expect("b ends its transaction");
    poll("replay no longer waits", Duration::from_secs(20), || {
        let r = replay(&mut m);
        (r.waiting == Some(false)).then_some(())
    });
    let n: i64 = poll("truncate replayed", Duration::from_secs(20), || {
        let n: i64 = m.query_one("select count(*) from t2", &[]).ok()?.get(0);
        (n == 0).then_some(n)
    });
    assert_eq!(n, 0);
    assert_eq!(
        replay(&mut m).confl_lock,
        lock_before,
        "b was not cancelled"
    );
    assert!(at_risk(&mut m).iter().all(|x| x.pid != b_pid));

    // --- Snapshot conflict: a REPEATABLE READ cursor on the standby while
    // the primary deletes and vacuums the rows it can still see.
    let mut a = sb.connect("riskdb");
    let a_pid = backend_pid(&mut a);
    a.batch_execute(
        "begin isolation level repeatable read; declare c cursor for select * from t; fetch 10 from c;",
    )
    .expect("open cursor on standby");
    let snapshot_before = replay(&mut m).confl_snapshot;
    p.batch_execute("delete from t where id <= 900")
        .expect("delete");
    p.batch_execute("vacuum t").expect("vacuum");

    // Sample until a is cancelled: (instant, time_left) while replay waits.
    let mut samples: Vec<(Instant, f64)> = Vec::new();
    let mut last_fetch = Instant::now();
    let mut printed = false;
    // When a first went missing from the list, or was listed with its
    // snapshot or its locks gone, while replay waited.
    let mut unlisted: Option<Instant> = None;
    let err = loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "a was never cancelled; samples {samples:?}"
        );
        let r = replay(&mut m);
        let sampled = Instant::now();
        if r.waiting == Some(true) {
            assert_eq!(r.conflict.as_deref(), Some("snapshot"), "{r:?}");
            assert_eq!(
                (r.event_type.as_deref(), r.event.as_deref()),
                (Some("IPC"), Some("RecoveryConflictSnapshot")),
                "{r:?}"
            );
            let rows = at_risk(&mut m);
            match rows.iter().find(|x| x.pid == a_pid) {
                // Replay stopped waiting between the two reads: the startup
                // process reports its wait event only while it sleeps
                // (ResolveRecoveryConflictWithVirtualXIDs), not between two
                // checks nor in the 5 ms after it cancels a. The function
                // then sees no conflict, and says a blocks nothing; nothing
                // else of the row is about the conflict being sampled.
                Some(row) if row.conflict.is_none() => {
                    assert_eq!(row.blocks_replay, Some(false), "{row:?}");
                }
                // Being cancelled: a's abort clears its xmin, then releases
                // its locks, and the function reads pg_stat_activity and
                // pg_locks one after the other, so it can catch a with one
                // of the two gone. That can only happen once the budget has
                // run out.
                Some(row) if !row.has_xmin || row.locked.is_empty() => {
                    let expected = if row.has_xmin { "snapshot" } else { "lock" };
                    assert_eq!(row.at_risk_from, vec![expected], "{row:?}");
                    assert!(row.time_left_s.is_some_and(|t| t < 0.25), "{row:?}");
                    unlisted = unlisted.or(Some(sampled));
                }
                Some(row) => {
                    // a leaves the list (or loses its snapshot or locks) only
                    // as it is cancelled.
                    assert!(
                        unlisted.is_none(),
                        "a listed again after {unlisted:?}: {row:?}"
                    );
                    assert!(row.has_xmin, "{row:?}");
                    assert_eq!(row.at_risk_from, vec!["snapshot", "lock"], "{row:?}");
                    // The horizon is not visible from SQL: a could be the one.
                    assert_eq!(row.blocks_replay, None, "{row:?}");
                    if let Some(left) = row.time_left_s {
                        samples.push((sampled, left));
                    }
                    if !printed {
                        show(&mut m, "snapshot conflict: replay waits, session a at risk");
                        printed = true;
                    }
                }
                // Cancelled between the two queries: replay still waits for
                // a to exit, a's snapshot is already gone. The budget checks
                // below need samples in which a was listed.
                None => unlisted = unlisted.or(Some(sampled)),
            }
        }
        if last_fetch.elapsed() > Duration::from_millis(250) {
            last_fetch = Instant::now();
            if let Err(e) = a.batch_execute("fetch 1 from c") {
                break e;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let cancelled = Instant::now();
    println!(
        "session a cancelled: {err:?}; {} samples while replay waited",
        samples.len()
    );
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    assert!(
        format!("{err:?}").contains("conflict with recovery"),
        "{err:?}"
    );

    // The budget counted down with the clock before the cancellation, and
    // the cancellation came when it ran out.
    // Samples before the budget ran out (afterwards time_left reads 0, overdue,
    // until the startup process's next check cancels the session).
    let counting: Vec<(Instant, f64)> = samples.iter().copied().filter(|s| s.1 > 0.0).collect();
    assert!(counting.len() >= 2, "{samples:?}");
    let (t_first, left_first) = counting[0];
    let (t_last, left_last) = *counting.last().unwrap();
    assert!(left_first > 1.0, "sampled early in the wait: {samples:?}");
    assert!(left_last < left_first, "{samples:?}");
    let elapsed = (t_last - t_first).as_secs_f64();
    assert!(
        ((left_first - left_last) - elapsed).abs() < 0.5,
        "counts down with the clock: {elapsed} s elapsed, {left_first} s -> {left_last} s"
    );
    let predicted = left_first;
    let actual = (cancelled - t_first).as_secs_f64();
    // Not before the budget ran out; after it within the startup process's
    // retry sleep (up to 1 s) and this loop's fetch interval.
    assert!(
        actual > predicted - 0.5 && actual < predicted + 2.0,
        "predicted cancellation in {predicted} s, came after {actual} s"
    );
    println!(
        "budget {left_first:.2} s at the first sample, cancelled {actual:.2} s later; {:.1} s to {:.1} s over {elapsed:.1} s",
        left_first, left_last
    );

    // Counted, and nothing waits any more.
    let r = poll(
        "replay goes on after the cancellation",
        Duration::from_secs(20),
        || {
            let r = replay(&mut m);
            (r.waiting == Some(false) && r.confl_snapshot > snapshot_before).then_some(r)
        },
    );
    assert_eq!(r.conflict, None);
    show(&mut m, "after the cancellation");
    // Replay goes on once a's virtual transaction lock is gone, a moment
    // before the rest of its locks.
    poll("a no longer listed", Duration::from_secs(20), || {
        at_risk(&mut m).iter().all(|x| x.pid != a_pid).then_some(())
    });
    drop(sb);
    println!("standby at-risk test took {:?}", started.elapsed());
}
