//! Decoding statistics on a server where pubjson is not in
//! `shared_preload_libraries`: the functions say so (`source = 'this
//! backend'`) and show what the calling backend decoded itself; another
//! session sees the slot without counters, and `library_version()` says the
//! library is not preloaded. (The preloaded case is in `sql/stats.sql`.)

use pubjson_e2e::{drop_slot, one_row, rows, ExtraCluster};

#[test]
fn counters_fall_back_to_the_calling_backend() {
    // SAFETY (test process): set before any thread reads the environment;
    // the cluster script inherits it.
    std::env::set_var("PUBJSON_PRELOAD", "0");
    let cluster = ExtraCluster::start(&pubjson_e2e::cluster_dir("nopreload"), 54334);
    std::env::remove_var("PUBJSON_PRELOAD");
    let mut db = cluster.connect("postgres");
    let preload: String = db
        .query_one("show shared_preload_libraries", &[])
        .expect("show")
        .get(0);
    assert!(
        !preload.contains("pubjson"),
        "cluster preloads pubjson: {preload}"
    );
    for sql in [
        "create extension pubjson",
        "create table t (id int primary key)",
        "select pg_create_logical_replication_slot('nopreload', 'pubjson')",
        "insert into t values (1), (2)",
        "insert into t values (3)",
    ] {
        db.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let decoded = rows(
        &mut db,
        "select data from pg_logical_slot_get_changes('nopreload', NULL, NULL, 'format-version', '2')",
    );
    assert_eq!(decoded.len(), 7, "B I I C, B I C");
    let row = one_row(
        &mut db,
        "select source, txns_decoded, changes_seen, changes_emitted from pubjson.decoding_stats() where slot_name = 'nopreload'",
    );
    assert_eq!(row.get::<_, String>(0), "this backend");
    assert_eq!(
        (
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            row.get::<_, i64>(3)
        ),
        (2, 3, 3)
    );

    // Another backend sees the slot, not the decoding session's counters.
    let mut other = cluster.connect("postgres");
    let seen = one_row(
        &mut other,
        "select count(*), count(*) filter (where source is null and txns_decoded is null) \
           from pubjson.decoding_stats() where slot_name = 'nopreload'",
    );
    assert_eq!(
        (seen.get::<_, i64>(0), seen.get::<_, i64>(1)),
        (1, 1),
        "another backend sees the decoding session's counters"
    );
    let library = one_row(
        &mut other,
        "select preloaded from pubjson.library_version()",
    );
    assert!(!library.get::<_, bool>(0), "not preloaded");

    // In the decoding session: a slot created again under the name of a
    // dropped one starts from zero, and a dropped slot is gone.
    drop_slot(&mut db, "nopreload");
    for sql in [
        "select pg_create_logical_replication_slot('nopreload', 'pubjson')",
        "insert into t values (4)",
        "select count(*) from pg_logical_slot_get_changes('nopreload', NULL, NULL)",
    ] {
        db.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let decoded: i64 = db
        .query_one(
            "select txns_decoded from pubjson.decoding_stats() where slot_name = 'nopreload'",
            &[],
        )
        .expect("stats of the recreated slot")
        .get(0);
    assert_eq!(decoded, 1, "the recreated slot starts from zero");
    drop_slot(&mut db, "nopreload");
    let left = rows(&mut db, "select * from pubjson.decoding_stats()");
    assert!(
        left.is_empty(),
        "a dropped slot is gone from the statistics"
    );
    println!("without preload: the decoding session sees its counters, another session none");
}
