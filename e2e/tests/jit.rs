//! The extension's own queries are never JIT-compiled (issue 42;
//! src/pg/settings.rs says why), on a server that has JIT with `jit = on`
//! and the default thresholds, as most servers run: backfill's chunks and
//! catalog look-ups, DDL capture's kept plans, the SQL functions' queries.
//! pg_stat_statements (preloaded in a cluster of the test's own, tracking
//! nested statements) counts the functions JIT compiled per statement; a
//! query of the test's own compiled under `jit_above_cost = 0` shows that
//! the count works.

use pubjson_e2e::{exec, note_skip, one_row, rows, ExtraCluster};

#[test]
fn no_internal_query_is_jit_compiled() {
    let cluster = ExtraCluster::start(&pubjson_e2e::cluster_dir("jit"), 54360);
    cluster.append_conf(
        "shared_preload_libraries = 'pubjson, pg_stat_statements'\n\
         pg_stat_statements.track = all\n\
         jit = on\n",
    );
    cluster.restart();
    let mut c = cluster.connect("postgres");
    let available: bool = one_row(&mut c, "select pg_jit_available()").get(0);
    if !available {
        note_skip(
            "jit::no_internal_query_is_jit_compiled",
            "this server has no JIT provider (llvmjit)",
        );
        return;
    }
    // The defaults, as the server runs them.
    let settings: Vec<String> = rows(
        &mut c,
        "select name || '=' || setting from pg_settings \
         where name in ('jit', 'jit_above_cost', 'jit_inline_above_cost', 'jit_optimize_above_cost') \
         order by name",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(
        settings,
        [
            "jit=on",
            "jit_above_cost=100000",
            "jit_inline_above_cost=500000",
            "jit_optimize_above_cost=500000"
        ]
    );
    exec(
        &mut c,
        "create extension pg_stat_statements;
         create extension pubjson;
         create table t (id int primary key, name text, amount numeric(12,2),
                         created timestamptz, flag bool, doc jsonb);
         insert into t select i, 'name ' || i, i * 1.5, now(), i % 2 = 0,
                              jsonb_build_object('i', i)
           from generate_series(1, 20000) i;
         create table composite (a int, b text, v int, primary key (a, b));
         insert into composite select i % 100, 'b' || i, i from generate_series(1, 2000) i;
         create publication p for table t;
         analyze;
         select pg_stat_statements_reset()",
    );
    // Backfill (chunks of 1000 and of 100 rows, a key of two columns),
    // DDL capture, every SQL function that queries.
    for sql in [
        "call pubjson.backfill('t')",
        "call pubjson.backfill('t', chunk_rows => 100, restart => true)",
        "call pubjson.backfill('composite', chunk_rows => 50)",
        "select pubjson.enable_ddl_capture()",
        "create table captured (id int primary key); alter table captured add column v text; \
         create index on captured (v); drop table captured",
        "select count(*) from pubjson.decoding_stats()",
        "select count(*) from pubjson.pending_transactions()",
        "select count(*) from pubjson.publication_risks('p')",
        "select count(*) from pubjson.subscription_status()",
        "select count(*) from pubjson.standby_conflicts()",
        "select count(*) from pubjson.backfills",
        "select pubjson.disable_ddl_capture()",
    ] {
        exec(&mut c, sql);
    }
    // What the extension ran: its nested statements were counted...
    let nested: i64 = one_row(
        &mut c,
        "select count(*) from pg_stat_statements \
         where not toplevel and query like '%backfill_progress%'",
    )
    .get(0);
    assert!(nested > 0, "pg_stat_statements saw backfill's statements");
    // ... and none was compiled.
    let compiled: Vec<String> = rows(
        &mut c,
        "select jit_functions || ' functions: ' || query from pg_stat_statements \
         where jit_functions > 0 order by query",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(compiled.is_empty(), "JIT-compiled: {compiled:#?}");

    // The count works: a query of the test's own under jit_above_cost 0.
    exec(
        &mut c,
        "set jit_above_cost = 0; select sum(amount) from t where flag; reset jit_above_cost",
    );
    let control: i64 = one_row(
        &mut c,
        "select coalesce(sum(jit_functions), 0)::int8 from pg_stat_statements \
         where query like 'select sum(amount) from t%'",
    )
    .get(0);
    assert!(control > 0, "the control query was compiled");
}
