//! Statistics entries follow the replication slots: the shared table
//! (`pubjson.max_tracked_slots` entries) reuses the entries of dropped
//! slots, a slot created under the name of a dropped one starts from zero
//! (whichever way it is created), a slot that cannot be tracked is reported
//! once per session, and live slots keep their counters throughout. Also:
//! peeking counts as decoding, as docs/sql-functions.md says.

use postgres::Client;
use pubjson_e2e::{drop_slot, recvlogical, ExtraCluster};

const PORT: u16 = 54342;
const TRACKED: usize = 4;

/// The slot's counter, None when it has none (decoding_stats() lists
/// every pubjson slot, with NULL counters for one not counted).
fn txns_decoded(db: &mut Client, slot: &str) -> Option<i64> {
    db.query_opt(
        "select txns_decoded from pubjson.decoding_stats() where slot_name = $1",
        &[&slot],
    )
    .expect("decoding_stats")
    .and_then(|r| r.get(0))
}

fn create(db: &mut Client, slot: &str) {
    db.execute(
        "select pg_create_logical_replication_slot($1, 'pubjson')",
        &[&slot],
    )
    .unwrap_or_else(|e| panic!("create {slot}: {e}"));
}

/// Commits `n` transactions that each insert a row.
fn write(db: &mut Client, n: usize) {
    for _ in 0..n {
        db.batch_execute("insert into t default values")
            .expect("insert");
    }
}

fn decode(db: &mut Client, slot: &str) -> usize {
    db.query(
        "select data from pg_logical_slot_get_changes($1, null, null, 'format-version', '2')",
        &[&slot],
    )
    .unwrap_or_else(|e| panic!("decode {slot}: {e}"))
    .len()
}

fn setting(db: &mut Client, name: &str) -> String {
    db.query_one(&format!("show {name}"), &[])
        .expect("show")
        .get(0)
}

#[test]
fn entries_follow_the_slots() {
    let cluster = ExtraCluster::start(&pubjson_e2e::cluster_dir("trackedslots"), PORT);
    let mut db = cluster.connect("postgres");
    // The default is max_replication_slots.
    assert_eq!(
        setting(&mut db, "pubjson.max_tracked_slots"),
        setting(&mut db, "max_replication_slots")
    );
    db.batch_execute(&format!(
        "alter system set pubjson.max_tracked_slots = {TRACKED}"
    ))
    .expect("alter system");
    drop(db);
    cluster.restart();
    let mut db = cluster.connect("postgres");
    assert_eq!(
        setting(&mut db, "pubjson.max_tracked_slots"),
        TRACKED.to_string()
    );
    db.batch_execute(
        // No autovacuum: its ANALYZE would be a transaction to decode.
        "create extension pubjson;
         create table t (id serial primary key, v int) with (autovacuum_enabled = false)",
    )
    .expect("setup");

    // A live slot with known counts.
    create(&mut db, "keep");
    write(&mut db, 2);
    decode(&mut db, "keep");
    assert_eq!(txns_decoded(&mut db, "keep"), Some(2));

    // Three times as many slots as the table holds, decoded and dropped one
    // after another: each is tracked while it exists, none once dropped.
    for i in 0..3 * TRACKED {
        let slot = format!("s{i}");
        create(&mut db, &slot);
        write(&mut db, 1);
        decode(&mut db, &slot);
        assert_eq!(txns_decoded(&mut db, &slot), Some(1), "{slot} is tracked");
        drop_slot(&mut db, &slot);
        assert_eq!(txns_decoded(&mut db, &slot), None, "dropped {slot} is gone");
    }
    assert_eq!(txns_decoded(&mut db, "keep"), Some(2), "live slot intact");

    // Created again under a dropped slot's name, by each way of creating a
    // slot, with no read of the statistics in between (which would reclaim
    // the old entry): the new slot starts from zero.
    let pg_recvlogical = |args: &[&str]| {
        let out = recvlogical::command(&cluster.server(), ("postgres", "postgres"))
            .args(args)
            .output()
            .expect("pg_recvlogical");
        assert!(out.status.success(), "pg_recvlogical {args:?}: {out:?}");
    };
    type Creator<'a> = Box<dyn Fn(&mut Client, &str) + 'a>;
    let creators: Vec<(&str, Creator)> = vec![
        ("pg_create_logical_replication_slot", Box::new(create)),
        (
            "CREATE_REPLICATION_SLOT (pg_recvlogical --create-slot)",
            Box::new(|_, slot| pg_recvlogical(&["-S", slot, "--create-slot", "-P", "pubjson"])),
        ),
        (
            "pg_copy_logical_replication_slot",
            Box::new(|db, slot| {
                // Copy a slot that has decoded everything so far.
                create(db, "copy_source");
                db.execute(
                    "select pg_copy_logical_replication_slot('copy_source', $1)",
                    &[&slot],
                )
                .expect("copy");
                drop_slot(db, "copy_source");
            }),
        ),
    ];
    for (how, make) in &creators {
        create(&mut db, "again");
        write(&mut db, 3);
        decode(&mut db, "again");
        drop_slot(&mut db, "again");
        make(&mut db, "again");
        write(&mut db, 1);
        decode(&mut db, "again");
        assert_eq!(
            txns_decoded(&mut db, "again"),
            Some(1),
            "slot recreated by {how} starts from zero"
        );
        drop_slot(&mut db, "again");
    }

    // The same name with another plugin is another slot: the dropped
    // pubjson slot's counters do not show for it.
    create(&mut db, "plug");
    write(&mut db, 1);
    decode(&mut db, "plug");
    drop_slot(&mut db, "plug");
    db.execute(
        "select pg_create_logical_replication_slot('plug', 'test_decoding')",
        &[],
    )
    .expect("test_decoding slot");
    assert_eq!(txns_decoded(&mut db, "plug"), None);
    drop_slot(&mut db, "plug");

    // A full table: keep and f1..f3 are tracked, f4 is not; its decoding
    // session is told so once.
    for slot in ["f1", "f2", "f3", "f4"] {
        create(&mut db, slot);
    }
    write(&mut db, 1);
    for slot in ["f1", "f2", "f3"] {
        decode(&mut db, slot);
    }
    let mut session = cluster
        .server()
        .connect_keeping_notices("postgres", "postgres");
    assert_eq!(
        decode(&mut session.client, "f4"),
        3,
        "B I C decoded all the same"
    );
    write(&mut db, 1);
    assert_eq!(decode(&mut session.client, "f4"), 3);
    let warnings: Vec<String> = session
        .take_notice_errors()
        .iter()
        .map(|n| {
            format!(
                "{}: {} | {} | {}",
                n.severity(),
                n.message(),
                n.detail().unwrap_or(""),
                n.hint().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per session: {warnings:?}");
    assert!(
        warnings[0].starts_with(
            "WARNING: pubjson does not track decoding statistics of replication slot \"f4\""
        ) && warnings[0].contains(&format!(
            "All {TRACKED} entries of pubjson.max_tracked_slots"
        )) && warnings[0].contains("Raise pubjson.max_tracked_slots"),
        "{warnings:?}"
    );
    assert_eq!(txns_decoded(&mut db, "f4"), None);
    // Every slot has a row; the one not tracked has no counters.
    let listed: Vec<(String, bool)> = db
        .query(
            "select slot_name, txns_decoded is not null from pubjson.decoding_stats() order by 1",
            &[],
        )
        .expect("stats")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let listed: Vec<(&str, bool)> = listed.iter().map(|(s, t)| (s.as_str(), *t)).collect();
    assert_eq!(
        listed,
        [
            ("f1", true),
            ("f2", true),
            ("f3", true),
            ("f4", false),
            ("keep", true)
        ]
    );
    assert_eq!(txns_decoded(&mut db, "keep"), Some(2), "live slot intact");
    for slot in ["f1", "f2", "f3"] {
        assert_eq!(txns_decoded(&mut db, slot), Some(1), "{slot} intact");
    }

    // Room again once a slot is dropped: f4 is tracked from then on.
    drop_slot(&mut db, "f1");
    write(&mut db, 1);
    decode(&mut session.client, "f4");
    assert_eq!(txns_decoded(&mut db, "f4"), Some(1));
    assert!(session.take_notice_errors().is_empty());
    drop(session);
    println!(
        "{} slots decoded and dropped through a table of {TRACKED}; recreated slots start from zero; one warning when full",
        3 * TRACKED
    );
}

/// Peeking decodes, so it counts: two peeks of two transactions count four
/// (docs/sql-functions.md says so); getting them counts them once more, and a get
/// with nothing new counts nothing.
#[test]
fn peek_counts_as_decoding() {
    let mut db = pubjson_e2e::TestDb::new("peekcount");
    let schema = db.schema.clone();
    db.exec(&format!(
        "create extension if not exists pubjson; create table {schema}.t (id int primary key)"
    ));
    let (slot, _guard) = db.create_slot("pubjson", "peek");
    db.run(&[
        &format!("insert into {schema}.t values (1)"),
        &format!("insert into {schema}.t values (2)"),
    ]);
    // Up to the end of the workload only: nothing else may be counted.
    let upto = db.upto_lsn.clone().expect("upto_lsn");
    let client = &mut db.conn.client;
    let count = |client: &mut Client| -> (i64, i64) {
        let r = client
            .query_one(
                "select txns_decoded, changes_seen from pubjson.decoding_stats() where slot_name = $1",
                &[&slot],
            )
            .expect("stats");
        (r.get(0), r.get(1))
    };
    let changes = |client: &mut Client, how: &str| -> usize {
        client
            .query(
                &format!(
                    "select data from pg_logical_slot_{how}_changes($1, $2::text::pg_lsn, null, 'format-version', '2')"
                ),
                &[&slot, &upto],
            )
            .expect("decode")
            .len()
    };
    assert_eq!(changes(client, "peek"), 6);
    assert_eq!(count(client), (2, 2));
    assert_eq!(changes(client, "peek"), 6);
    assert_eq!(count(client), (4, 4), "a second peek counts again");
    assert_eq!(changes(client, "get"), 6);
    assert_eq!(count(client), (6, 6), "get counts what it decodes");
    assert_eq!(changes(client, "get"), 0);
    assert_eq!(count(client), (6, 6), "nothing decoded, nothing counted");
}
