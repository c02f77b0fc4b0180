//! End-to-end tests of the replication conflict inspection functions
//! (`src/api/conflicts.sql`): pubjson.publication_risks,
//! pubjson.subscription_status and pubjson.standby_conflicts, on the main
//! test cluster, a real logical subscriber and a real physical standby.
//!
//! Run: `scripts/install.sh && scripts/cluster.sh start &&
//! eval "$(scripts/cluster.sh env)" && cargo test -p pubjson-e2e --test conflicts`
//! (as root: the extra clusters are started as the `postgres` OS user).

use pubjson_e2e::conflicts::*;
use pubjson_e2e::{
    one_row, poll, rows, scratch_dir, sqlstate, wait_replayed, wait_true, Exporter, RecvLogical,
    Server,
};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn risks(
    c: &mut postgres::Client,
    publication: &str,
) -> Vec<(String, String, String, String, String)> {
    c.query(
        "select * from pubjson.publication_risks($1)",
        &[&publication],
    )
    .unwrap_or_else(|e| panic!("publication_risks({publication}): {e}"))
    .iter()
    .map(|r| {
        let s: Option<String> = r.get(0);
        let t: Option<String> = r.get(1);
        (
            s.unwrap_or_default(),
            t.unwrap_or_default(),
            r.get(2),
            r.get(3),
            r.get(4),
        )
    })
    .collect()
}

#[test]
fn publication_risks_reports_each_condition() {
    let (host, port) = main_cluster();
    let mut c = fresh_db(&host, port, "pubjson_conflicts_risks", true);
    c.batch_execute(
        "
        create schema r;
        create table r.clean (id int primary key, v text);
        create table r.nopk (a int, b text);
        create table r.nothing (id int primary key, v text);
        alter table r.nothing replica identity nothing;
        create table r.ri_dropped (id int primary key, code int not null, v text);
        create unique index ri_code on r.ri_dropped (code);
        alter table r.ri_dropped replica identity using index ri_code;
        drop index r.ri_code;
        create table r.filt (id int primary key, region text, v text);
        create table r.filt_ok (id int primary key, v text);
        create table r.full_toast (id int primary key, payload text, n int);
        alter table r.full_toast replica identity full;
        create table r.full_wide (c1 int, c2 int, c3 int, c4 int, c5 int, c6 int,
                                  c7 int, c8 int, c9 int, c10 int, c11 int, c12 int);
        alter table r.full_wide replica identity full;
        create table r.full_narrow (a int, b int);
        alter table r.full_narrow replica identity full;
        create table r.seqs (id bigserial primary key, n int generated always as identity,
                             email text unique, v text);
        insert into r.seqs (email, v) select 'x' || g, 'v' from generate_series(1, 41) g;
        create sequence r.shared_seq;
        select setval('r.shared_seq', 1234);
        create table r.defseq (id int primary key default nextval('r.shared_seq'), v text);
        create table r.cl (id int primary key, a int, b int);
        create table r.full_cl (a int, b int);
        alter table r.full_cl replica identity full;
        create table r.parted (id int primary key, k int) partition by range (id);
        create table r.parted_1 partition of r.parted for values from (0) to (100);
        create table r.parted_nopk (id int, k int) partition by range (id);
        create table r.parted_nopk_1 partition of r.parted_nopk for values from (0) to (100);
        create publication p_all_risks for table r.clean, r.nopk, r.nothing, r.ri_dropped,
            r.filt where (region = 'eu'), r.filt_ok where (id > 10), r.full_toast, r.full_wide,
            r.full_narrow, r.seqs, r.defseq, r.cl (a, b), r.full_cl (a, b), r.parted, r.parted_nopk;
        create publication p_insert_only for table r.nopk, r.filt where (region = 'eu')
            with (publish = 'insert');
        ",
    )
    .expect("build risky schema");

    let rows = risks(&mut c, "p_all_risks");
    for r in &rows {
        println!("{r:?}");
    }
    let got: BTreeSet<(String, String)> = rows
        .iter()
        .filter(|r| !r.0.is_empty())
        .map(|r| (r.1.clone(), r.2.clone()))
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("nopk", "no_replica_identity"),
        ("nothing", "replica_identity_nothing"),
        ("nothing", "unique_key_besides_identity"), // its primary key is not the identity
        ("ri_dropped", "replica_identity_index_unusable"),
        ("ri_dropped", "unique_key_besides_identity"),
        ("filt", "row_filter_outside_identity"),
        ("full_toast", "replica_identity_full_wide"),
        ("full_toast", "unique_key_besides_identity"),
        ("full_wide", "replica_identity_full_wide"),
        ("seqs", "sequence_not_replicated"),
        ("seqs", "unique_key_besides_identity"),
        ("defseq", "sequence_not_replicated"),
        ("cl", "column_list_missing_identity"),
        ("full_cl", "column_list_missing_identity"),
        ("parted_nopk_1", "no_replica_identity"),
    ]
    .iter()
    .map(|(t, r)| (t.to_string(), r.to_string()))
    .collect();
    assert_eq!(got, want, "risk set of p_all_risks");

    let find = |table: &str, risk: &str, needle: &str| {
        rows.iter()
            .find(|r| r.1 == table && r.2 == risk && (r.3.contains(needle) || r.4.contains(needle)))
            .unwrap_or_else(|| panic!("no {risk} row for {table} mentioning {needle:?}"))
            .clone()
    };
    // Sequences: the exact setval statement to run on the subscriber.
    find(
        "seqs",
        "sequence_not_replicated",
        "SELECT setval('r.seqs_id_seq', 41, true);",
    );
    find(
        "seqs",
        "sequence_not_replicated",
        "SELECT setval('r.seqs_n_seq', 41, true);",
    );
    find(
        "seqs",
        "sequence_not_replicated",
        "column n is an identity column",
    );
    find(
        "defseq",
        "sequence_not_replicated",
        "SELECT setval('r.shared_seq', 1234, true);",
    );
    // Row filter detail names the column and the identity.
    find(
        "filt",
        "row_filter_outside_identity",
        "uses column(s) region not in the replica identity (id)",
    );
    find(
        "cl",
        "column_list_missing_identity",
        "lacks replica identity column(s) id",
    );
    find(
        "full_cl",
        "column_list_missing_identity",
        "with REPLICA IDENTITY FULL, which allows no column list",
    );
    // Real behaviour: even a column list naming every column fails with FULL.
    let e = c
        .batch_execute("insert into r.full_cl values (1, 1); update r.full_cl set b = 2")
        .expect_err("update with FULL and a column list");
    assert!(
        format!("{e:?}")
            .contains("Column list used by the publication does not cover the replica identity"),
        "{e:?}"
    );
    find(
        "ri_dropped",
        "replica_identity_index_unusable",
        "index was dropped",
    );
    find(
        "full_toast",
        "replica_identity_full_wide",
        "3 columns, 1 TOAST-able (payload)",
    );
    find(
        "full_wide",
        "replica_identity_full_wide",
        "12 columns, 0 TOAST-able",
    );
    find(
        "seqs",
        "unique_key_besides_identity",
        "seqs_email_key on (email)",
    );

    // Generated columns in the replica identity: on 18 they must be
    // published or UPDATE/DELETE fail; before 18 they are never published
    // and nothing fails.
    let version = server_version(&mut c);
    c.batch_execute(
        "create schema g;
         create table g.full_gen (a int, b int generated always as (a * 2) stored);
         alter table g.full_gen replica identity full;
         create table g.key_gen (a int not null, k int not null generated always as (a + 1) stored, v text);
         create unique index key_gen_k on g.key_gen (k);
         alter table g.key_gen replica identity using index key_gen_k;
         insert into g.full_gen (a) values (1); insert into g.key_gen (a, v) values (1, 'x');
         create publication p_gencols for table g.full_gen, g.key_gen;",
    )
    .expect("generated column tables");
    let gen_risks = |c: &mut postgres::Client| -> Vec<(String, String, String)> {
        risks(c, "p_gencols")
            .into_iter()
            .filter(|r| !r.0.is_empty())
            .map(|r| (r.1, r.2, r.3))
            .collect()
    };
    let update = |c: &mut postgres::Client| {
        c.batch_execute("update g.full_gen set a = a + 1")
            .and_then(|_| c.batch_execute("update g.key_gen set v = 'y'"))
    };
    if version >= 180000 {
        // A virtual generated column (18's default) cannot be published at all.
        c.batch_execute(
            "create table g.full_virtual (a int, b int generated always as (a * 3));
             alter table g.full_virtual replica identity full;
             insert into g.full_virtual (a) values (1);
             alter publication p_gencols add table g.full_virtual;",
        )
        .expect("virtual generated column");
        let rows = gen_risks(&mut c);
        println!("{rows:?}");
        let names: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
        assert_eq!(
            names,
            vec![
                ("full_gen", "identity_generated_column_unpublished"),
                ("full_virtual", "identity_generated_column_unpublished"),
                ("key_gen", "identity_generated_column_unpublished"),
            ]
        );
        assert!(rows[0].2.contains("replica identity FULL includes generated column(s) b, not published (publish_generated_columns = none)"), "{rows:?}");
        assert!(
            rows[1]
                .2
                .contains("virtual generated columns cannot be published"),
            "{rows:?}"
        );
        assert!(
            rows[2]
                .2
                .contains("replica identity USING INDEX includes generated column(s) k"),
            "{rows:?}"
        );
        let e = update(&mut c).expect_err("update with unpublished generated identity column");
        assert!(
            format!("{e:?}")
                .contains("Replica identity must not contain unpublished generated columns"),
            "{e:?}"
        );
        // Publishing stored generated columns clears the stored ones.
        c.batch_execute("alter publication p_gencols set (publish_generated_columns = stored)")
            .expect("publish generated columns");
        let rows = gen_risks(&mut c);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].0, "full_virtual");
        update(&mut c).expect("update once generated columns are published");
        c.batch_execute("update g.full_virtual set a = 2")
            .expect_err("a virtual generated column in FULL identity still fails");
    } else {
        assert_eq!(
            gen_risks(&mut c),
            vec![],
            "no generated-column rule before 18"
        );
        update(&mut c).expect("before 18 generated identity columns do not matter");
    }

    // Insert-only: identity and row filter do not matter.
    let ins: Vec<_> = risks(&mut c, "p_insert_only")
        .into_iter()
        .filter(|r| !r.0.is_empty())
        .collect();
    assert!(
        ins.is_empty(),
        "insert-only publication has no table risks: {ins:?}"
    );

    // Unknown publication: 42704.
    let e = c
        .query(
            "select * from pubjson.publication_risks('no_such_pub')",
            &[],
        )
        .expect_err("unknown publication must fail");
    assert_eq!(sqlstate(&e), "42704", "{e:?}");
    let msg = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert_eq!(msg, "publication \"no_such_pub\" does not exist");

    // An inactive logical slot retaining WAL: one row, table columns NULL.
    let slot = "pubjson_conflicts_risk_slot";
    let _cleanup = SlotCleanup(slot.to_string());
    c.execute(
        "select pg_create_logical_replication_slot($1, 'pgoutput')",
        &[&slot],
    )
    .expect("create slot");
    c.batch_execute(
        "insert into r.clean select g, repeat('x', 100) from generate_series(1, 2000) g",
    )
    .expect("write WAL");
    let rows = risks(&mut c, "p_all_risks");
    let slot_rows: Vec<_> = rows.iter().filter(|r| r.3.contains(slot)).collect();
    assert_eq!(slot_rows.len(), 1, "{rows:?}");
    let s = slot_rows[0];
    assert_eq!(
        (s.0.as_str(), s.1.as_str(), s.2.as_str()),
        ("", "", "inactive_slot_retains_wal")
    );
    assert!(s.3.contains("wal_status reserved"), "{s:?}");
    assert!(s.3.contains("max_slot_wal_keep_size unlimited"), "{s:?}");
    // 17+: since when (pg_replication_slots.inactive_since).
    let since = s.3.contains(&format!(
        "{slot} (database pubjson_conflicts_risks, plugin pgoutput) is inactive since 20"
    ));
    assert_eq!(since, server_version(&mut c) >= 170000, "{s:?}");
    assert!(
        s.4.contains(&format!("pg_drop_replication_slot('{slot}')")),
        "{s:?}"
    );
    let retained: i64 = c
        .query_one(
            "select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint from pg_replication_slots where slot_name = $1",
            &[&slot],
        )
        .expect("slot")
        .get(0);
    assert!(retained > 100_000, "slot retains {retained} bytes");

    // Without a publication (no argument, or NULL): the slot rows alone,
    // the same as with one.
    let slot_only = |rows: Vec<(String, String, String, String, String)>| -> Vec<(String, String)> {
        rows.into_iter()
            .filter(|r| r.3.contains(slot))
            .map(|r| (r.2, r.4))
            .collect()
    };
    for call in [
        "select * from pubjson.publication_risks()",
        "select * from pubjson.publication_risks(NULL)",
    ] {
        let rows: Vec<(String, String, String, String, String)> = c
            .query(call, &[])
            .unwrap_or_else(|e| panic!("{call}: {e}"))
            .iter()
            .map(|r| {
                let s: Option<String> = r.get(0);
                let t: Option<String> = r.get(1);
                assert!(s.is_none() && t.is_none(), "{call}: a table row");
                (String::new(), String::new(), r.get(2), r.get(3), r.get(4))
            })
            .collect();
        assert_eq!(
            slot_only(rows),
            slot_only(risks(&mut c, "p_all_risks")),
            "{call}"
        );
    }
}

/// A logical slot whose WAL was removed past max_slot_wal_keep_size (every
/// version): publication_risks reports it invalidated (wal_removed) instead
/// of retaining WAL, and decoding_stats() says why. On a cluster of its own:
/// the setting and the forced checkpoints would disturb the main cluster.
/// max_slot_wal_keep_size invalidates an idle slot and one streamed by
/// pg_recvlogical (held back by an open transaction): the consumer exits
/// with PostgreSQL's error and cannot start again, publication_risks(),
/// decoding_stats() and the exporter say the slots are lost and why, and
/// every function of pubjson returns on them (no error, no wait).
#[test]
fn slot_invalidated_by_wal_removal() {
    let cl = WAL.start();
    let mut c = fresh_db(&cl.socket, cl.port, "waldb", true);
    let version = server_version(&mut c);
    // One statement per transaction: a slot cannot be created in a
    // transaction that has written.
    for q in [
        "create table t (id int primary key, v text)",
        "create table hold (x int)",
        "create publication walpub for table t",
        "select pg_create_logical_replication_slot('wal_slot', 'pubjson')",
        "select pg_create_logical_replication_slot('wal_active', 'pubjson')",
        "insert into t values (1, 'a')",
    ] {
        c.batch_execute(q).unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    // Decode once, so that decoding_stats() has a row for the slot.
    let n = c
        .query(
            "select data from pg_logical_slot_get_changes('wal_slot', NULL, NULL, 'format-version', '2')",
            &[],
        )
        .expect("decode")
        .len();
    assert_eq!(n, 3, "B I C");
    let before = risks(&mut c, "walpub");
    assert!(
        before
            .iter()
            .any(|r| r.2 == "inactive_slot_retains_wal" && r.3.contains("slot wal_slot")),
        "{before:?}"
    );
    // wal_active is streamed by pg_recvlogical when it is invalidated; an
    // open transaction keeps its restart point where it is (a consumer that
    // confirms everything would otherwise keep it within the limit).
    let out = scratch_dir("wal_active").join("out.json");
    let mut recv = RecvLogical::start_on(
        &cl.server(),
        ("postgres", "waldb"),
        "wal_active",
        &out,
        &["format-version=2"],
        &[],
    );
    wait_true(
        &mut c,
        "wal_active in use",
        Duration::from_secs(30),
        "select active from pg_replication_slots where slot_name = 'wal_active'",
        &[],
    );
    let mut hold = cl.connect("waldb");
    hold.batch_execute("begin; insert into hold values (1)")
        .expect("open transaction");
    c.batch_execute("select pg_current_xact_id()")
        .expect("flush");
    c.batch_execute("alter system set max_slot_wal_keep_size = '1MB'")
        .expect("max_slot_wal_keep_size");
    c.batch_execute("select pg_reload_conf()").expect("reload");
    poll("wal_slot invalidated", Duration::from_secs(60), || {
        for _ in 0..3 {
            c.batch_execute(
                "insert into t select g, 'x' from generate_series(1, 100) g on conflict do nothing",
            )
            .expect("write");
            c.batch_execute("select pg_switch_wal()").expect("switch");
        }
        c.batch_execute("checkpoint").expect("checkpoint");
        let r = c
            .query_one(
                "select count(*) from pg_replication_slots where wal_status = 'lost'
                    and slot_name in ('wal_slot', 'wal_active')",
                &[],
            )
            .ok()?;
        (r.get::<_, i64>(0) == 2).then_some(())
    });
    hold.batch_execute("rollback").expect("rollback");

    // The consumer: its walsender was ended to release the slot; it exits
    // with PostgreSQL's error, and cannot come back.
    let (status, stderr) = recv.exit_within(
        Duration::from_secs(60),
        "pg_recvlogical still runs on the invalidated slot",
    );
    println!("pg_recvlogical on the invalidated slot ({status}): {stderr}");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("terminating connection due to administrator command"),
        "{stderr}"
    );
    let again = RecvLogical::start_on(
        &cl.server(),
        ("postgres", "waldb"),
        "wal_active",
        &out.with_extension("again"),
        &["format-version=2"],
        &[],
    );
    let mut again = again;
    let (status, stderr) = again.exit_within(
        Duration::from_secs(60),
        "pg_recvlogical streams from an invalidated slot",
    );
    println!("pg_recvlogical started on the invalidated slot ({status}): {stderr}");
    let refused = if version >= 180000 {
        "can no longer access replication slot \"wal_active\""
    } else if version >= 160000 {
        "can no longer get changes from replication slot \"wal_active\""
    } else {
        "cannot read from logical replication slot \"wal_active\""
    };
    assert!(
        !status.success() && stderr.contains(refused),
        "{status}: {stderr}"
    );
    let rows = risks(&mut c, "walpub");
    for r in &rows {
        println!("{r:?}");
    }
    let slot_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.3.contains("slot wal_slot"))
        .collect();
    assert_eq!(slot_rows.len(), 1, "{rows:?}");
    assert_eq!(slot_rows[0].2, "logical_slot_invalidated");
    assert!(
        slot_rows[0].3.contains("is invalidated (wal_removed)"),
        "{slot_rows:?}"
    );
    assert!(
        slot_rows[0]
            .4
            .contains("SELECT pg_drop_replication_slot('wal_slot');"),
        "{slot_rows:?}"
    );
    let r = c
        .query_one(
            "select conflicting, invalidation_reason from pubjson.decoding_stats() where slot_name = 'wal_slot'",
            &[],
        )
        .expect("decoding_stats");
    assert_eq!(
        r.get::<_, Option<String>>(1).as_deref(),
        Some("wal_removed")
    );
    // conflicting: NULL on 15; on 16+ false (WAL removal is no recovery conflict).
    assert_eq!(
        r.get::<_, Option<bool>>(0),
        (version >= 160000).then_some(false)
    );
    let e = c
        .query(
            "select data from pg_logical_slot_get_changes('wal_slot', NULL, NULL)",
            &[],
        )
        .expect_err("decoding from an invalidated slot");
    println!("decoding from the invalidated slot: {e:?}");
    let quoted = if version >= 180000 {
        "can no longer access replication slot"
    } else {
        "can no longer get changes from replication slot"
    };
    assert!(format!("{e:?}").contains(quoted), "{e:?}");
    assert!(
        slot_rows[0].3.contains(&format!("(ERROR: {quoted})")),
        "{slot_rows:?}"
    );

    // The exporter says the slots are lost, and why.
    let mut exporter = Exporter::start(
        &cl.server(),
        "postgres",
        "waldb",
        (version / 10000) as u32,
        &[],
        "walremoved",
    );
    let m = exporter.scrape();
    println!("{}", m.lines("pubjson_slot"));
    for slot in ["wal_slot", "wal_active"] {
        assert_eq!(
            m.value("pubjson_slot_invalidated", &[("slot_name", slot)]),
            1.0,
            "{slot}"
        );
        assert_eq!(
            m.value(
                "pubjson_slot_state_info",
                &[
                    ("slot_name", slot),
                    ("wal_status", "lost"),
                    ("invalidation_reason", "wal_removed")
                ]
            ),
            1.0,
            "{slot}"
        );
    }
    drop(exporter);

    let pending: i64 = c
        .query_one(
            "select count(*) from pubjson.pending_transactions() where slot_name in ('wal_slot', 'wal_active')",
            &[],
        )
        .expect("pending_transactions")
        .get(0);
    assert_eq!(pending, 0, "an invalidated slot decodes nothing");
    let r = c
        .query_one(
            "select invalidation_reason from pubjson.decoding_stats() where slot_name = 'wal_active'",
            &[],
        )
        .expect("decoding_stats of wal_active");
    assert_eq!(
        r.get::<_, Option<String>>(0).as_deref(),
        Some("wal_removed")
    );
    // Every function of pubjson returns on the invalidated slots: no error,
    // no wait (statement_timeout would end one).
    c.batch_execute("set statement_timeout = '20s'")
        .expect("statement_timeout");
    for q in [
        "select count(*) from pubjson.decoding_stats()",
        "select count(*) from pubjson.pending_transactions()",
        "select count(*) from pubjson.decoding_counters()",
        "select count(*) from pubjson.worst_transactions()",
        "select count(*) from pubjson.publication_risks('walpub')",
        "select count(*) from pubjson.subscription_status()",
        "select count(*) from pubjson.standby_conflicts()",
        "select count(*) from pubjson.standby_queries_at_risk()",
        "select pubjson.reset_stats('wal_active')",
        "select pubjson.reset_stats()",
        "select pubjson.enable_ddl_capture()",
        "select pubjson.disable_ddl_capture()",
        "call pubjson.backfill('t')",
    ] {
        let started = Instant::now();
        c.batch_execute(q).unwrap_or_else(|e| {
            panic!(
                "{q} with invalidated slots: {}",
                pubjson_e2e::describe_error(&e)
            )
        });
        println!("{q}: {:?}", started.elapsed());
    }
}

/// 16+: parallel apply workers (streaming = parallel) are rows of
/// pg_stat_subscription without a table, like the leader apply worker;
/// subscription_status() still returns one row per subscription, with the
/// leader's pid, and counts them in parallel_apply_workers.
#[test]
fn subscription_status_with_parallel_apply() {
    let (host, port) = main_cluster();
    let mut publ = fresh_db(&host, port, "pubjson_conflicts_par", true);
    let version = server_version(&mut publ);
    pubjson_e2e::require_major!(
        version / 10000,
        16,
        "no parallel apply before PostgreSQL 16"
    );
    // Every change is streamed (this database only: the walsender applies
    // the database's settings), so every transaction goes to a parallel
    // apply worker.
    publ.batch_execute(
        "create table t (id int primary key, v text);
         create publication pub_par for table t;
         alter database pubjson_conflicts_par set debug_logical_replication_streaming = immediate;",
    )
    .expect("publisher setup");

    let slot = "pubjson_conflicts_par";
    let (_sub, _cleanup, mut s) =
        subscriber(PAR_SUB, slot, "create table t (id int primary key, v text)");
    s.batch_execute(&format!(
        "create subscription sub_par
           connection 'host={host} port={port} user=postgres dbname=pubjson_conflicts_par'
           publication pub_par with (streaming = parallel, slot_name = '{slot}');"
    ))
    .expect("create subscription");
    // Parallel apply starts only once every table is synchronized.
    poll("table sync ready", Duration::from_secs(30), || {
        let n: i64 = s
            .query_one(
                "select count(*) from pg_subscription_rel where srsubstate <> 'r'",
                &[],
            )
            .ok()?
            .get(0);
        (n == 0).then_some(())
    });
    // A streamed transaction goes to a parallel apply worker, which then
    // stays in the pool. The leader applies it itself while it still sees
    // a table as not ready, so write until a worker shows up.
    let mut batch = 0;
    let (leader, workers) = poll(
        "a parallel apply worker in pg_stat_subscription",
        Duration::from_secs(60),
        || {
            batch += 1;
            publ.batch_execute(&format!(
                "begin; insert into t select g, 'x' from generate_series({} * 1000, {} * 1000 + 99) g;
                 update t set v = 'y' where v = 'x'; commit;",
                batch, batch
            ))
            .expect("transaction");
            poll(
                "streamed transaction applied",
                Duration::from_secs(30),
                || {
                    let n: i64 = s
                        .query_one("select count(*) from t where v = 'y'", &[])
                        .ok()?
                        .get(0);
                    (n == 100 * batch).then_some(())
                },
            );
            let r = s
                .query_one(
                    "select (select pid from pg_stat_subscription where relid is null and leader_pid is null),
                            (select count(*) from pg_stat_subscription where leader_pid is not null)",
                    &[],
                )
                .ok()?;
            let leader: Option<i32> = r.get(0);
            let workers: i64 = r.get(1);
            (leader.is_some() && workers >= 1).then_some((leader, workers))
        },
    );
    println!("a parallel apply worker after {batch} transaction(s)");
    let rows = rows(
        &mut s,
        "select subscription::text, worker_pid, parallel_apply_workers from pubjson.subscription_status()",
    );
    assert_eq!(rows.len(), 1, "one row per subscription");
    assert_eq!(rows[0].get::<_, String>(0), "sub_par");
    assert_eq!(rows[0].get::<_, Option<i32>>(1), leader, "the leader's pid");
    assert_eq!(
        rows[0].get::<_, Option<i32>>(2).map(i64::from),
        Some(workers)
    );
    println!("leader apply worker {leader:?}, parallel apply workers {workers}");
    for q in [
        "alter subscription sub_par disable",
        "alter subscription sub_par set (slot_name = none)",
        "drop subscription sub_par",
    ] {
        s.batch_execute(q).expect(q);
    }
}

#[test]
fn subscription_disabled_by_insert_exists() {
    let started = Instant::now();
    let (host, port) = main_cluster();
    let mut publ = fresh_db(&host, port, "pubjson_conflicts_pub", true);
    publ.batch_execute(
        "create table t (id int primary key, v text);
         insert into t values (0, 'initial'), (100, 'initial'), (101, 'initial');
         create publication pub_conflicts for table t;",
    )
    .expect("publisher setup");

    let slot = "pubjson_conflicts_sub";
    let (_sub, _cleanup, mut s) =
        subscriber(SUB, slot, "create table t (id int primary key, v text)");
    s.batch_execute(&format!(
        "create subscription sub_conflicts
           connection 'host={host} port={port} user=postgres dbname=pubjson_conflicts_pub'
           publication pub_conflicts
           with (disable_on_error = true, slot_name = '{slot}');"
    ))
    .expect("create subscription");

    // Initial sync done.
    poll("initial table sync", Duration::from_secs(30), || {
        let n: i64 = s.query_one("select count(*) from t", &[]).ok()?.get(0);
        (n == 3).then_some(())
    });
    let version = server_version(&mut s);
    let counters_sql = "select confl_insert_exists, confl_update_origin_differs, confl_update_exists,
                               confl_update_missing, confl_delete_origin_differs, confl_delete_missing,
                               confl_multiple_unique_conflicts
                          from pubjson.subscription_status()";
    let counters = |s: &mut postgres::Client| -> Vec<Option<i64>> {
        let r = s.query_one(counters_sql, &[]).expect("counters");
        (0..7).map(|i| r.get(i)).collect()
    };
    let r = s
        .query_one("select enabled, disabled_by_error, worker_pid, apply_error_count, parallel_apply_workers from pubjson.subscription_status()", &[])
        .expect("status");
    assert!(r.get::<_, bool>(0));
    assert!(!r.get::<_, bool>(1));
    // 16+ counts parallel apply workers (none here: streaming is off).
    let parallel: Option<i32> = r.get(4);
    assert_eq!(
        parallel,
        (version >= 160000).then_some(0),
        "parallel_apply_workers"
    );
    if version >= 180000 {
        assert_eq!(counters(&mut s), vec![Some(0); 7], "no conflict yet");
    } else {
        assert_eq!(
            counters(&mut s),
            vec![None; 7],
            "no conflict counters before 18"
        );
    }

    // Conflicts that do not stop apply: the rows the publisher updates and
    // deletes are gone on the subscriber (update_missing, delete_missing:
    // the change is skipped; before 18 only the server log tells).
    s.batch_execute("delete from t where id in (100, 101)")
        .expect("delete on subscriber");
    publ.batch_execute("update t set v = 'updated' where id = 100; delete from t where id = 101;")
        .expect("update and delete on publisher");
    if version >= 180000 {
        let c = poll(
            "update_missing and delete_missing counted",
            Duration::from_secs(30),
            || {
                let _ = s.batch_execute("select pg_stat_clear_snapshot()");
                let c = counters(&mut s);
                (c[3] == Some(1) && c[5] == Some(1)).then_some(c)
            },
        );
        println!("PG18 conflict counters after update/delete of missing rows: {c:?}");
        let r = one_row(
            &mut s,
            "select enabled, apply_error_count, worker_pid is not null from pubjson.subscription_status()",
        );
        assert!(r.get::<_, bool>(0), "missing rows do not stop apply");
        assert_eq!(r.get::<_, i64>(1), 0, "missing rows are not errors");
        assert!(r.get::<_, bool>(2), "apply worker still running");
        assert_eq!(
            c,
            vec![
                Some(0),
                Some(0),
                Some(0),
                Some(1),
                Some(0),
                Some(1),
                Some(0)
            ]
        );
    }

    // Conflict: the subscriber has the key the publisher inserts next.
    s.batch_execute("insert into t values (1, 'subscriber')")
        .expect("insert on subscriber");
    publ.batch_execute("insert into t values (1, 'publisher')")
        .expect("insert on publisher");
    let row = poll(
        "subscription disabled by the error",
        Duration::from_secs(30),
        || {
            let r = s
            .query_one(
                "select subscription, enabled, disable_on_error, disabled_by_error, apply_error_count,
                        sync_error_count, worker_pid, skip_lsn::text, slot_name::text
                   from pubjson.subscription_status()",
                &[],
            )
            .ok()?;
            (!r.get::<_, bool>(1) && r.get::<_, i64>(4) >= 1).then_some(r)
        },
    );
    let json: String = s
        .query_one(
            "select row_to_json(x)::text from pubjson.subscription_status() x",
            &[],
        )
        .expect("json")
        .get(0);
    println!("subscription_status after insert_exists: {json}");
    let _ = row.len();
    assert_eq!(row.get::<_, String>(0), "sub_conflicts");
    assert!(row.get::<_, bool>(2), "disable_on_error");
    assert!(row.get::<_, bool>(3), "disabled_by_error");
    assert_eq!(row.get::<_, i64>(5), 0, "sync_error_count");
    assert_eq!(row.get::<_, Option<String>>(7), None, "no skip lsn set");
    assert_eq!(row.get::<_, String>(8), slot);
    // 18: the error was an insert_exists conflict, counted by type too.
    let c = counters(&mut s);
    if version >= 180000 {
        let view: i64 = s
            .query_one(
                "select confl_insert_exists from pg_stat_subscription_stats where subname = 'sub_conflicts'",
                &[],
            )
            .expect("pg_stat_subscription_stats")
            .get(0);
        assert!(c[0] >= Some(1), "confl_insert_exists counted: {c:?}");
        assert_eq!(
            c[0],
            Some(view),
            "function matches pg_stat_subscription_stats"
        );
        assert_eq!(
            c[0],
            Some(row.get::<_, i64>(4)),
            "every apply error was an insert_exists conflict"
        );
        assert_eq!((c[3], c[5]), (Some(1), Some(1)), "earlier counts kept");
    } else {
        assert_eq!(c, vec![None; 7], "no conflict counters before 18");
    }
    poll("apply worker gone", Duration::from_secs(10), || {
        let r = s
            .query_one("select worker_pid from pubjson.subscription_status()", &[])
            .ok()?;
        r.get::<_, Option<i32>>(0).is_none().then_some(())
    });

    // Publisher side: the slot is now inactive and retains WAL.
    let slot_row = poll(
        "inactive slot row on the publisher",
        Duration::from_secs(20),
        || {
            risks(&mut publ, "pub_conflicts")
                .into_iter()
                .find(|r| r.2 == "inactive_slot_retains_wal" && r.3.contains(slot))
        },
    );
    println!("publisher slot row: {slot_row:?}");

    // Skip LSN shows up once set. It must lie past the subscription's
    // origin LSN: take one ahead of the publisher's WAL position (a fixed
    // value fails once the main cluster's WAL has grown past it).
    let skip_to: String = publ
        .query_one("select (pg_current_wal_lsn() + 1000000)::text", &[])
        .expect("lsn")
        .get(0);
    s.batch_execute(&format!(
        "alter subscription sub_conflicts skip (lsn = '{skip_to}')"
    ))
    .expect("skip");
    let skip: Option<String> = s
        .query_one(
            "select skip_lsn::text from pubjson.subscription_status()",
            &[],
        )
        .expect("status")
        .get(0);
    assert_eq!(skip.as_deref(), Some(skip_to.as_str()));

    for q in [
        "alter subscription sub_conflicts disable",
        "alter subscription sub_conflicts set (slot_name = none)",
        "drop subscription sub_conflicts",
    ] {
        s.batch_execute(q).expect(q);
    }
    println!("subscription test took {:?}", started.elapsed());
}

#[test]
fn standby_snapshot_conflict_and_budget() {
    fn show(c: &mut postgres::Client, label: &str) {
        let json: String = c
            .query_one(
                "select row_to_json(x)::text from pubjson.standby_conflicts() x where database = current_database()",
                &[],
            )
            .expect("json")
            .get(0);
        println!("standby_conflicts ({label}): {json}");
    }
    let started = Instant::now();
    let (host, port) = main_cluster();
    let mut prim = fresh_db(&host, port, "pubjson_conflicts_sb", true);
    prim.batch_execute("create table t (id int primary key, v text); insert into t select g, 'x' from generate_series(1, 1000) g;")
        .expect("primary setup");

    // On the primary: one row, applies = false.
    let rows = prim
        .query(
            "select applies, reason from pubjson.standby_conflicts()",
            &[],
        )
        .expect("primary call");
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].get::<_, bool>(0));
    assert!(rows[0].get::<_, String>(1).contains("not a standby"));

    let sb = standby_of_main();
    let mut a = sb.connect("pubjson_conflicts_sb");
    let status_sql = "select applies, delay_setting, extract(epoch from max_delay)::float8, wal_receiver_status,
                             how_derived, estimate_exact, extract(epoch from budget_left)::float8, confl_snapshot,
                             waits_forever
                        from pubjson.standby_conflicts() where database = current_database()";
    // Wait until the standby streams and has replayed all it received (other
    // activity on the primary can leave replay briefly behind).
    let r = poll(
        "standby streaming and caught up",
        Duration::from_secs(30),
        || {
            let r = a.query_one(status_sql, &[]).ok()?;
            let streaming = r.get::<_, Option<String>>(3).as_deref() == Some("streaming");
            let caught_up = r
                .get::<_, Option<String>>(4)
                .is_some_and(|how| how.starts_with("replay caught up"));
            (streaming && caught_up).then_some(r)
        },
    );
    assert!(r.get::<_, bool>(0));
    assert_eq!(r.get::<_, String>(1), "max_standby_streaming_delay");
    assert_eq!(r.get::<_, f64>(2), 1.0);
    assert!(!r.get::<_, bool>(8));
    let budget: f64 = r.get(6);
    assert!((0.0..=1.0).contains(&budget), "budget {budget}");
    let how: String = r.get(4);
    assert!(how.starts_with("replay caught up"), "{how}");
    let before: i64 = r.get(7);

    // Logical slot columns: NULL on 15 (no logical decoding on a standby),
    // none on this standby on 16+.
    let version = server_version(&mut a);
    let r = a
        .query_one(
            "select confl_active_logicalslot, logical_slots, logical_slots_invalidated,
                    logical_slot_details::text, logical_slot_hint
               from pubjson.standby_conflicts() where database = current_database()",
            &[],
        )
        .expect("logical slot columns");
    let got = (
        r.get::<_, Option<i64>>(0),
        r.get::<_, Option<i32>>(1),
        r.get::<_, Option<i32>>(2),
        r.get::<_, Option<String>>(3),
        r.get::<_, Option<String>>(4),
    );
    if version >= 160000 {
        assert_eq!(got, (Some(0), Some(0), Some(0), Some("[]".into()), None));
    } else {
        assert_eq!(got, (None, None, None, None, None));
    }

    // Snapshot conflict: a REPEATABLE READ cursor on the standby while the
    // primary deletes and vacuums the rows it can still see.
    a.batch_execute("begin isolation level repeatable read; declare c cursor for select * from t; fetch 10 from c;")
        .expect("open cursor on standby");
    prim.batch_execute("delete from t where id <= 900")
        .expect("delete");
    prim.batch_execute("vacuum t").expect("vacuum");
    let t0 = Instant::now();
    let err = poll(
        "standby query canceled",
        Duration::from_secs(20),
        || match a.batch_execute("fetch 10 from c") {
            Ok(()) => {
                std::thread::sleep(Duration::from_millis(200));
                None
            }
            Err(e) => Some(e),
        },
    );
    println!("standby query canceled after {:?}: {err:?}", t0.elapsed());
    assert_eq!(sqlstate(&err), "40001", "{err:?}");
    assert!(
        format!("{err:?}").contains("conflict with recovery"),
        "{err:?}"
    );

    let mut m = sb.connect("pubjson_conflicts_sb");
    let after = poll("confl_snapshot counted", Duration::from_secs(20), || {
        let _ = m.batch_execute("select pg_stat_clear_snapshot()");
        let r = m.query_one(status_sql, &[]).ok()?;
        let n: i64 = r.get(7);
        (n > before).then_some(n)
    });
    let view: i64 = m
        .query_one(
            "select confl_snapshot from pg_stat_database_conflicts where datname = current_database()",
            &[],
        )
        .expect("view")
        .get(0);
    assert_eq!(after, view, "function matches pg_stat_database_conflicts");
    println!("confl_snapshot {before} -> {after}");
    show(&mut m, "after the conflict");

    // Replay paused while WAL keeps arriving: the lagging case.
    await_replay_receipt_time(&mut prim, &mut m);
    m.batch_execute("select pg_wal_replay_pause()")
        .expect("pause");
    prim.batch_execute("insert into t select g, 'y' from generate_series(2001, 3000) g")
        .expect("write");
    let r = poll("replay lagging", Duration::from_secs(20), || {
        let r = m.query_one(status_sql, &[]).ok()?;
        r.get::<_, String>(4)
            .starts_with("replay lags")
            .then_some(r)
    });
    show(&mut m, "replay paused");
    // The startup process's own receipt time (when it last caught up).
    assert!(r.get::<_, bool>(5), "lagging estimate is exact");
    let budget: f64 = r.get(6);
    assert!((0.0..=1.0).contains(&budget), "budget {budget}");
    m.batch_execute("select pg_wal_replay_resume()")
        .expect("resume");

    // WAL receiver stopped (unreachable primary): archive delay applies.
    m.batch_execute("alter system set primary_conninfo = 'host=/nonexistent port=1'")
        .expect("break primary_conninfo");
    m.batch_execute("select pg_reload_conf()").expect("reload");
    let r = poll("WAL receiver stopped", Duration::from_secs(30), || {
        let r = m.query_one(status_sql, &[]).ok()?;
        (r.get::<_, String>(1) == "max_standby_archive_delay").then_some(r)
    });
    let how: String = r.get(4);
    show(&mut m, "receiver stopped");
    assert!(how.starts_with("no WAL receiver streaming"), "{how}");
    assert_eq!(r.get::<_, f64>(2), 30.0);
    assert!(!r.get::<_, bool>(5));
    let budget: f64 = r.get(6);
    assert!((0.0..=30.0).contains(&budget), "budget {budget}");
    println!("standby test took {:?}", started.elapsed());
}

#[test]
fn permissions_follow_pg_monitor() {
    let (host, port) = main_cluster();
    let mut c = fresh_db(&host, port, "pubjson_conflicts_perm", true);
    c.batch_execute(
        "create table t (id int primary key); create publication p_perm for table t;
         drop role if exists pubjson_conflicts_nopriv; drop role if exists pubjson_conflicts_mon;
         create role pubjson_conflicts_nopriv login;
         create role pubjson_conflicts_mon login in role pg_monitor;",
    )
    .expect("roles");
    let calls = [
        "select * from pubjson.publication_risks('p_perm')",
        "select * from pubjson.subscription_status()",
        "select * from pubjson.standby_conflicts()",
        "select * from pubjson.standby_queries_at_risk()",
    ];
    {
        let mut u = Server::new(&host, port)
            .try_connect("pubjson_conflicts_perm", "pubjson_conflicts_nopriv")
            .expect("connect nopriv");
        for q in calls {
            let e = u.query(q, &[]).expect_err("unprivileged call must fail");
            assert_eq!(sqlstate(&e), "42501", "{q}: {e:?}");
        }
        let mut m = Server::new(&host, port)
            .try_connect("pubjson_conflicts_perm", "pubjson_conflicts_mon")
            .expect("connect mon");
        for q in calls {
            m.query(q, &[])
                .unwrap_or_else(|e| panic!("pg_monitor member: {q}: {e:?}"));
        }
        let r = m
            .query_one("select applies from pubjson.standby_conflicts()", &[])
            .expect("call");
        assert!(!r.get::<_, bool>(0));
    }
    // Every function: SECURITY INVOKER, PUBLIC has no EXECUTE.
    let n: i64 = c
        .query_one(
            "select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
              where n.nspname = 'pubjson' and p.proname in ('publication_risks', 'subscription_status', 'standby_conflicts', 'standby_queries_at_risk')
                and not p.prosecdef and not has_function_privilege('public', p.oid, 'execute')
                and has_function_privilege('pg_monitor', p.oid, 'execute')",
            &[],
        )
        .expect("catalog")
        .get(0);
    assert_eq!(n, 4);
    c.batch_execute("drop role pubjson_conflicts_nopriv; drop role pubjson_conflicts_mon;")
        .ok();
}

/// 16+: logical slots on a hot standby (hot_standby_feedback off), one in
/// use by pg_recvlogical and one idle; the primary removes catalog rows they
/// need, replay invalidates both (rows_removed) and terminates the decoding
/// walsender (confl_active_logicalslot). Runs on a primary of its own so
/// nothing else holds back the catalog horizon. On 15 (no logical decoding on
/// a standby) the columns are NULL, checked in standby_snapshot_conflict_and_budget.
#[test]
fn standby_logical_slot_invalidated_by_recovery_conflict() {
    let started = Instant::now();
    let version = server_version(&mut connect_main("postgres"));
    pubjson_e2e::require_major!(
        version / 10000,
        16,
        "no logical decoding on a standby before PostgreSQL 16"
    );
    let primary = LS_PRIMARY.start();
    let mut p = fresh_db(&primary.socket, primary.port, "lsdb", true);
    p.batch_execute(
        "create table t (id int primary key, v text);
         create table flush_wal (id serial primary key);
         create publication lspub for table t;",
    )
    .expect("primary setup");
    let sb = LS_STANDBY.standby_of(&primary.server());
    let mut b = sb.connect("lsdb");

    // Creating a logical slot on a standby waits for a running-xacts record
    // from the primary: log one until both creations return.
    let creator = {
        let mut c = sb.connect("lsdb");
        std::thread::spawn(move || {
            for slot in ["ls_active", "ls_idle"] {
                c.execute(
                    "select pg_create_logical_replication_slot($1, 'pubjson')",
                    &[&slot],
                )
                .unwrap_or_else(|e| panic!("create {slot} on the standby: {e}"));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !creator.is_finished() {
        assert!(
            Instant::now() < deadline,
            "slot creation on the standby hangs"
        );
        p.batch_execute("select pg_log_standby_snapshot()")
            .expect("log standby snapshot");
        std::thread::sleep(Duration::from_millis(200));
    }
    creator.join().expect("slot creation thread");

    // Decoding on the standby; decoding_stats() works there (retained WAL
    // counts from the replay position).
    p.batch_execute("insert into t values (1, 'a'), (2, 'b')")
        .expect("insert");
    let target: String = p
        .query_one("select pg_current_wal_lsn()::text", &[])
        .expect("lsn")
        .get(0);
    wait_replayed(&mut b, "standby replayed the insert", &target);
    let n = b
        .query(
            "select data from pg_logical_slot_get_changes('ls_idle', NULL, NULL, 'format-version', '2')",
            &[],
        )
        .expect("decode on the standby")
        .len();
    assert_eq!(n, 4, "B I I C");
    let r = sb
        .connect("lsdb")
        .query_one(
            "select changes_emitted, retained_wal_bytes >= 0, conflicting, invalidation_reason
               from pubjson.decoding_stats() where slot_name = 'ls_idle'",
            &[],
        )
        .expect("decoding_stats on the standby");
    assert_eq!(r.get::<_, i64>(0), 2);
    assert!(r.get::<_, bool>(1), "retained WAL measured on the standby");
    assert_eq!(r.get::<_, Option<bool>>(2), Some(false));
    assert_eq!(r.get::<_, Option<String>>(3), None);

    // ls_active in use by pg_recvlogical.
    let out = scratch_dir("ls_active").join("out.json");
    let mut recv = RecvLogical::start_on(
        &sb.server(),
        ("postgres", "lsdb"),
        "ls_active",
        &out,
        &[],
        &[],
    );
    wait_true(
        &mut b,
        "ls_active in use",
        Duration::from_secs(30),
        "select active from pg_replication_slots where slot_name = 'ls_active'",
        &[],
    );

    // A transaction open on the primary is in the standby's live view of
    // the slot streamed there: what its reorder buffer holds.
    let mut open = primary.connect("lsdb");
    open.batch_execute("begin; insert into t select g, 'open' from generate_series(100, 149) g")
        .expect("open transaction on the primary");
    let open_xid: String = open
        .query_one("select pg_current_xact_id()::text", &[])
        .expect("xid")
        .get(0);
    // Flush the open transaction's WAL (a commit elsewhere), then replay it.
    p.batch_execute("insert into flush_wal default values")
        .expect("flush");
    let lsn: String = p
        .query_one("select pg_current_wal_lsn()::text", &[])
        .expect("lsn")
        .get(0);
    wait_replayed(&mut b, "standby replayed the open transaction", &lsn);
    let changes = recv.wait_pending(
        &mut b,
        "the open primary transaction in pending_transactions() on the standby",
        ("ls_active", &open_xid),
        50,
    );
    println!(
        "standby's pending_transactions(): primary transaction {open_xid} holds {changes} changes"
    );
    assert_eq!(changes, 50);
    open.batch_execute("rollback").expect("rollback");

    let slots_sql = "select confl_active_logicalslot, logical_slots, logical_slots_invalidated,
                            logical_slot_details::text, logical_slot_hint
                       from pubjson.standby_conflicts() where database = current_database()";
    let r = b.query_one(slots_sql, &[]).expect("standby_conflicts");
    assert_eq!(r.get::<_, Option<i64>>(0), Some(0));
    assert_eq!(r.get::<_, Option<i32>>(1), Some(2));
    assert_eq!(r.get::<_, Option<i32>>(2), Some(0));
    let details: serde_json::Value =
        serde_json::from_str(&r.get::<_, String>(3)).expect("details json");
    println!("healthy slots on the standby: {details}");
    assert_eq!(details[0]["slot_name"], "ls_active");
    assert_eq!(details[0]["active"], true);
    assert_eq!(details[1]["slot_name"], "ls_idle");
    assert_eq!(details[1]["active"], false);
    assert_eq!(details[0]["conflicting"], false);
    assert!(details[1]["invalidation"].is_null());
    let hint: String = r.get(4);
    assert!(hint.starts_with("hot_standby_feedback is off"), "{hint}");

    // The primary removes catalog rows the slots still need: a dropped
    // table's pg_class row, vacuumed once no snapshot can see it. Repeated
    // until replay invalidates both slots.
    let invalidated = poll(
        "both slots invalidated on the standby",
        Duration::from_secs(90),
        || {
            let horizon: String = p
                .query_one("select pg_snapshot_xmin(pg_current_snapshot())::text", &[])
                .ok()?
                .get(0);
            // Two transactions: a row inserted and deleted by the same
            // transaction gives no conflict horizon when pruned.
            p.batch_execute("create table conflict_test (x int)")
                .expect("create");
            p.batch_execute("drop table conflict_test").expect("drop");
            wait_true(
                &mut p,
                "a newer horizon",
                Duration::from_secs(10),
                "select pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8",
                &[&horizon],
            );
            p.batch_execute("vacuum pg_class").expect("vacuum pg_class");
            p.batch_execute("insert into flush_wal default values")
                .expect("insert");
            let lsn: String = p
                .query_one("select pg_current_wal_lsn()::text", &[])
                .ok()?
                .get(0);
            wait_replayed(&mut b, "standby replayed the vacuum", &lsn);
            let _ = b.batch_execute("select pg_stat_clear_snapshot()");
            let r = b.query_one(slots_sql, &[]).ok()?;
            (r.get::<_, Option<i32>>(2) == Some(2) && r.get::<_, Option<i64>>(0) >= Some(1))
                .then_some(r)
        },
    );
    let details: serde_json::Value =
        serde_json::from_str(&invalidated.get::<_, String>(3)).expect("details json");
    println!(
        "after the conflict: confl_active_logicalslot {:?}, slots {details}, hint {:?}",
        invalidated.get::<_, Option<i64>>(0),
        invalidated.get::<_, Option<String>>(4)
    );
    let reason = if version >= 170000 {
        "rows_removed"
    } else {
        "recovery conflict: rows_removed or wal_level_insufficient"
    };
    for slot in details.as_array().expect("array") {
        assert_eq!(slot["invalidation"], reason, "{slot}");
        assert_eq!(slot["conflicting"], true, "{slot}");
        assert_eq!(slot["wal_status"], "lost", "{slot}");
        assert_eq!(slot["active"], false, "{slot}");
    }
    let hint: String = invalidated.get(4);
    assert!(
        hint.starts_with("2 of 2 logical slot(s) invalidated"),
        "{hint}"
    );
    // The consumer of ls_active was ended by the conflict, with an error
    // that says why.
    let (status, stderr) = recv.exit_within(
        Duration::from_secs(60),
        "pg_recvlogical still runs on the invalidated slot",
    );
    println!("pg_recvlogical on the standby's invalidated slot ({status}): {stderr}");
    assert!(!status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("due to conflict with recovery")
            && stderr.contains(
                "DETAIL:  User was using a logical replication slot that must be invalidated."
            ),
        "{stderr}"
    );
    let view: i64 = b
        .query_one(
            "select confl_active_logicalslot from pg_stat_database_conflicts where datname = current_database()",
            &[],
        )
        .expect("view")
        .get(0);
    assert_eq!(invalidated.get::<_, Option<i64>>(0), Some(view));

    // publication_risks on the standby: one logical_slot_invalidated row per
    // slot, and no inactive_slot_retains_wal row for them.
    let rows = risks(&mut b, "lspub");
    for r in &rows {
        println!("{r:?}");
    }
    let inv: Vec<_> = rows
        .iter()
        .filter(|r| r.2 == "logical_slot_invalidated")
        .collect();
    assert_eq!(inv.len(), 2, "{rows:?}");
    assert!(
        inv[0].3.contains(&format!("is invalidated ({reason})")),
        "{inv:?}"
    );
    assert!(
        inv.iter()
            .any(|r| r.4.contains("SELECT pg_drop_replication_slot('ls_idle');")),
        "{inv:?}"
    );
    assert!(
        !rows.iter().any(|r| r.2 == "inactive_slot_retains_wal"),
        "{rows:?}"
    );
    // The error the detail quotes is the one the server gives.
    let e = b
        .query(
            "select data from pg_logical_slot_get_changes('ls_idle', NULL, NULL)",
            &[],
        )
        .expect_err("decoding from an invalidated slot");
    let quoted = if version >= 180000 {
        "can no longer access replication slot"
    } else {
        "can no longer get changes from replication slot"
    };
    assert!(format!("{e:?}").contains(quoted), "{e:?}");
    assert!(inv[0].3.contains(&format!("(ERROR: {quoted})")), "{inv:?}");
    // decoding_stats reports the invalidation too.
    let r = b
        .query_one(
            "select conflicting, invalidation_reason from pubjson.decoding_stats() where slot_name = 'ls_idle'",
            &[],
        )
        .expect("decoding_stats");
    assert_eq!(r.get::<_, Option<bool>>(0), Some(true));
    assert_eq!(r.get::<_, Option<String>>(1).as_deref(), Some(reason));

    if version >= 170000 {
        // 17+: a failover slot of the primary synchronized to the standby
        // (synced) is inactive there by design and cannot be dropped there:
        // it is reported on the primary only.
        p.batch_execute("select pg_create_physical_replication_slot('ls_standby')")
            .expect("physical slot");
        p.batch_execute(
            "select pg_create_logical_replication_slot('ls_failover', 'pubjson', false, false, true)",
        )
        .expect("failover slot");
        for q in [
            "alter system set hot_standby_feedback = on".to_string(),
            "alter system set primary_slot_name = 'ls_standby'".to_string(),
            format!(
                "alter system set primary_conninfo = 'host={} port={} user=postgres dbname=lsdb'",
                primary.socket, primary.port
            ),
            "select pg_reload_conf()".to_string(),
        ] {
            b.batch_execute(&q).unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        // The standby copies the slot once the primary's slot is past what
        // the standby has: advance it and synchronize until it sticks.
        poll(
            "ls_failover synced to the standby",
            Duration::from_secs(60),
            || {
                for q in [
                    "insert into flush_wal default values",
                    "select pg_log_standby_snapshot()",
                    "checkpoint",
                    "select pg_replication_slot_advance('ls_failover', pg_current_wal_lsn())",
                ] {
                    p.batch_execute(q).unwrap_or_else(|e| panic!("{q}: {e}"));
                }
                std::thread::sleep(Duration::from_millis(300));
                let mut fresh = sb.connect("lsdb");
                let _ = fresh.batch_execute("select pg_sync_replication_slots()");
                let r = fresh
                .query_one(
                    "select count(*) from pg_replication_slots where slot_name = 'ls_failover' and synced and not temporary",
                    &[],
                )
                .ok()?;
                (r.get::<_, i64>(0) == 1).then_some(())
            },
        );
        let rows = risks(&mut b, "lspub");
        assert!(
            !rows.iter().any(|r| r.3.contains("ls_failover")),
            "a synced slot is not a risk on the standby: {rows:?}"
        );
        let on_primary = risks(&mut p, "lspub");
        assert!(
            on_primary
                .iter()
                .any(|r| r.2 == "inactive_slot_retains_wal" && r.3.contains("slot ls_failover")),
            "{on_primary:?}"
        );
        let details: String = b
            .query_one(
                "select logical_slot_details::text from pubjson.standby_conflicts() where database = current_database()",
                &[],
            )
            .expect("details")
            .get(0);
        let details: serde_json::Value = serde_json::from_str(&details).expect("json");
        let fs = details
            .as_array()
            .expect("array")
            .iter()
            .find(|s| s["slot_name"] == "ls_failover")
            .unwrap_or_else(|| panic!("ls_failover in {details}"));
        assert_eq!(
            (&fs["synced"], &fs["failover"]),
            (&true.into(), &true.into()),
            "{fs}"
        );
        assert!(fs["invalidation"].is_null(), "{fs}");
        println!("synced failover slot on the standby: {fs}");
    }
    println!("logical slot standby test took {:?}", started.elapsed());
}
