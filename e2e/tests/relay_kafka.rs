//! pubjson-relay into a Kafka-protocol broker (tansu, memory only, so it
//! is never restarted; its transactions are not isolated, and the relay
//! does not use them): the idempotent producer with acks=all, at least
//! once across a drained restart and through relay kills, an immediate
//! PostgreSQL restart and a frozen broker, every duplicate caught by the
//! documented rule (docs/relay.md),
//! each key on one partition in commit order, the replica equal to the
//! table; in format 3 and (a second relay on the same workload and faults)
//! in the Debezium format, whose records also reach Kafka and JetStream
//! exactly as the slot writes them.

use pubjson_e2e::brokers::Tansu;
use pubjson_e2e::relay::{
    assert_no_duplicates, build_debezium_replica, build_replica, conninfo, create_workload_table,
    drop_kafka_duplicates, drop_kafka_duplicates_by_transaction, read_kafka, run_workload, seed,
    source_rows, wait_caught_up, Record, RelayProcess, Replica, Rows, Workload,
};
use pubjson_e2e::{scratch_dir, soak, wait_for, Place, SeededRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What happens to the relay while the workload runs.
#[derive(PartialEq)]
enum Faults {
    /// Stopped once with SIGTERM (a drained restart).
    Drained,
    /// Killed (SIGKILL) at random points, then PostgreSQL restarted
    /// immediately.
    Killed,
}

/// A workload into tansu through the relay, then the broker read back.
fn run_kafka(faults: Faults) {
    let cluster = Place::new("relay-kafka", 54391).take();
    let server = cluster.server();
    let db = "relay_kafka";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    let dir = scratch_dir("relay-kafka");
    let tansu = Tansu::start(&dir.join("tansu"));
    let config = format!(
        r#"
[source]
conninfo = "{conn} options='-c logical_decoding_work_mem=64kB'"
slot = "relay_kafka"
create_slot = true
[source.options]
streaming = "on"
[broker]
kind = "kafka"
[kafka]
brokers = "{bootstrap}"
delivery_timeout = "20s"
[relay]
reconnect_max = "2s"
"#,
        conn = conninfo(&server, db),
        bootstrap = tansu.bootstrap()
    );
    let mut relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    // The Debezium format's relay beside it (transaction records on: the
    // replica is rebuilt across partitions in commit order).
    let dbz_config = format!(
        r#"
[source]
conninfo = "{conn}"
slot = "relay_kafka_dbz"
create_slot = true
format = "debezium"
[source.options]
"topic.prefix" = "dbzk"
"schemas.enable" = "false"
"skipped.operations" = "none"
"provide.transaction.metadata" = "true"
[broker]
kind = "kafka"
[kafka]
brokers = "{bootstrap}"
delivery_timeout = "20s"
[relay]
reconnect_max = "2s"
"#,
        conn = conninfo(&server, db),
        bootstrap = tansu.bootstrap()
    );
    let mut dbz = RelayProcess::start(&dir.join("relay-dbz"), &dbz_config, &[], &[]);
    relay.wait_healthy(Duration::from_secs(120));
    dbz.wait_healthy(Duration::from_secs(120));
    let seed = seed();
    let stop = AtomicBool::new(false);
    let kills = if soak() { 30 } else { 5 };
    let stats = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            run_workload(
                &server,
                &Workload {
                    db,
                    table: "t",
                    seed,
                    large: 2000,
                    two_phase: true,
                    truncates: true,
                },
                &stop,
            )
        });
        let mut rng = SeededRng::new(seed ^ 0x6b61);
        if faults == Faults::Killed {
            for _ in 0..kills {
                std::thread::sleep(Duration::from_millis(200 + rng.below(1500)));
                relay.restart();
                std::thread::sleep(Duration::from_millis(rng.below(500)));
                dbz.restart();
            }
            relay.wait_healthy(Duration::from_secs(120));
            dbz.wait_healthy(Duration::from_secs(120));
            cluster.pg_ctl_restart("immediate");
            relay.wait_healthy(Duration::from_secs(120));
            dbz.wait_healthy(Duration::from_secs(120));
            // The broker unreachable: frozen (SIGSTOP), its connections open.
            tansu.freeze();
            std::thread::sleep(Duration::from_secs(if soak() { 30 } else { 10 }));
            tansu.thaw();
        } else {
            std::thread::sleep(Duration::from_millis(2000 + rng.below(2000)));
            for r in [&mut relay, &mut dbz] {
                r.stop();
            }
            std::thread::sleep(Duration::from_millis(500 + rng.below(1000)));
            relay.restart();
            dbz.restart();
        }
        relay.wait_healthy(Duration::from_secs(120));
        dbz.wait_healthy(Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(1000 + rng.below(2000)));
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("workload")
    });
    eprintln!("workload: {stats:?}");
    assert!(stats.large > 0 && stats.transactions > 50, "{stats:?}");
    let mut client = server.connect_retrying(db, Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_kafka", Duration::from_secs(180));
    wait_caught_up(&mut client, "relay_kafka_dbz", Duration::from_secs(180));
    let source = source_rows(&mut client, "t", &["id"]);
    assert!(!source.is_empty(), "nothing to compare");
    // The broker read until its contents match the table (bounded): what
    // a partition exposes can trail what it acknowledged for a moment.
    for (prefix, check) in [
        (
            "pubjson.relay_kafka.",
            check_kafka as fn(Vec<Record>, &Rows) -> Result<(), String>,
        ),
        ("dbzk.", check_kafka_debezium),
    ] {
        let mut attempt = 0;
        let started = Instant::now();
        loop {
            attempt += 1;
            let records = read_kafka(&tansu.bootstrap(), prefix);
            match check(records, &source) {
                Ok(()) => break,
                Err(e) if started.elapsed() < Duration::from_secs(60) => {
                    eprintln!("{prefix} read {attempt}: {e}");
                    std::thread::sleep(Duration::from_secs(2));
                }
                Err(e) => panic!("{prefix}: {e}"),
            }
        }
        if attempt > 1 {
            eprintln!("{prefix}: the broker matched the table at read {attempt}");
        }
    }
    for r in [&mut relay, &mut dbz] {
        wait_for("no unacknowledged events", Duration::from_secs(30), || {
            r.metric("pubjson_relay_unacknowledged_events") == Some(0.0)
        });
        r.stop();
    }
    pubjson_e2e::drop_slot(&mut client, "relay_kafka");
    pubjson_e2e::drop_slot(&mut client, "relay_kafka_dbz");
}

/// Inserts in small transactions, read back: every row on one partition
/// by its key, with its identity header, none missing.
#[test]
fn delivers_inserts_keyed_with_their_identity() {
    let server = pubjson_e2e::Server::main();
    let db = "relay_kafka_inserts";
    let mut client = server.fresh_database(db);
    client
        .batch_execute("CREATE TABLE \"Order Lines\" (id int PRIMARY KEY, v text)")
        .expect("table");
    client
        .batch_execute(
            "SELECT pg_create_logical_replication_slot('relay_kafka_inserts', 'pubjson')",
        )
        .expect("slot");
    let dir = scratch_dir("relay-kafka-inserts");
    let tansu = Tansu::start(&dir.join("tansu"));
    let config = format!(
        "[source]\nconninfo = \"{}\"\nslot = \"relay_kafka_inserts\"\n[broker]\nkind = \"kafka\"\n[kafka]\nbrokers = \"{}\"\n",
        conninfo(&server, db),
        tansu.bootstrap()
    );
    let mut relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    relay.wait_healthy(Duration::from_secs(120));
    for b in 0..50 {
        client
            .batch_execute(&format!(
                "INSERT INTO \"Order Lines\" SELECT g, 'v' || g FROM generate_series({}, {}) g",
                b * 100 + 1,
                b * 100 + 100
            ))
            .expect("insert");
    }
    wait_caught_up(&mut client, "relay_kafka_inserts", Duration::from_secs(120));
    // The table's name escaped into the topic.
    let topic = "pubjson.relay_kafka_inserts.public.Order-20Lines";
    let records = read_kafka(&tansu.bootstrap(), topic);
    assert_eq!(relay.metric("pubjson_relay_events_total"), Some(5000.0));
    let source = source_rows(&mut client, "\"Order Lines\"", &["id"]);
    assert_eq!(source.len(), 5000);
    let (kept, dropped) = drop_kafka_duplicates(records);
    assert_eq!(dropped, 0);
    assert_no_duplicates(&kept);
    let mut partitions = std::collections::BTreeSet::new();
    for r in &kept {
        let id = r.object["new"]["id"].as_i64().expect("id");
        assert_eq!(
            r.key.as_deref(),
            Some(format!("{{\"id\":{id}}}").as_str()),
            "{r:?}"
        );
        assert!(
            r.position().is_some() && r.relay.as_deref() == Some("relay_kafka_inserts"),
            "{r:?}"
        );
        partitions.insert(r.partition);
    }
    assert!(
        partitions.len() > 1,
        "keys spread over partitions: {partitions:?}"
    );
    let replica = build_replica(&kept, &|_| vec!["id".to_string()]);
    let got = replica
        .get("public.Order Lines")
        .cloned()
        .unwrap_or_default();
    let missing: Vec<_> = source
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(10)
        .collect();
    assert!(
        got == source,
        "{} of {} rows read back from {} records; missing {missing:?}",
        got.len(),
        source.len(),
        kept.len()
    );
    relay.stop();
    pubjson_e2e::drop_slot(&mut client, "relay_kafka_inserts");
}

#[test]
fn at_least_once_across_a_drained_restart() {
    run_kafka(Faults::Drained);
}

#[test]
fn at_least_once_through_relay_kills_a_restart_and_a_frozen_broker() {
    run_kafka(Faults::Killed);
}

/// The Debezium format's records, their duplicates dropped by its rule
/// (per partition and transaction), checked: no event twice, each key on
/// one partition, records without a key (truncates) on partition 0, every
/// transaction's `END` there, the replica rebuilt in commit order equal to
/// `source`.
fn check_kafka_debezium(records: Vec<Record>, source: &Rows) -> Result<(), String> {
    let total = records.len();
    let (kept, dropped) = drop_kafka_duplicates_by_transaction(records);
    eprintln!("Debezium: {total} records, {dropped} duplicates dropped by the rule");
    assert_no_duplicates(&kept);
    let mut partition_of: HashMap<(String, String), i32> = HashMap::new();
    for r in &kept {
        match &r.key {
            Some(k) => {
                let p = *partition_of
                    .entry((r.dest.clone(), k.clone()))
                    .or_insert(r.partition);
                assert_eq!(p, r.partition, "key {k} of {} on two partitions", r.dest);
            }
            None => assert_eq!(r.partition, 0, "a record without a key: {r:?}"),
        }
    }
    let truncates = kept.iter().filter(|r| r.op() == "t").count();
    let tombstones = kept.iter().filter(|r| r.tombstone).count();
    assert!(
        truncates > 0 && tombstones > 0,
        "truncates {truncates}, tombstones {tombstones}"
    );
    let mut replica = build_debezium_replica(&kept, &|_| vec!["id".to_string()]);
    let got = replica.remove("public.t").unwrap_or_default();
    if *source == got {
        return Ok(());
    }
    let missing: Vec<_> = source
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|k| !source.contains_key(*k))
        .take(5)
        .collect();
    Err(format!(
        "the Debezium replica differs from t ({} rows, replica {}): missing {missing:?}, extra {extra:?}",
        source.len(),
        got.len()
    ))
}

/// The records, their duplicates dropped by the rule, checked: no event
/// twice, each key on one partition, the replica equal to `source`.
fn check_kafka(records: Vec<Record>, source: &pubjson_e2e::relay::Rows) -> Result<(), String> {
    let total = records.len();
    let (kept, dropped) = drop_kafka_duplicates(records);
    eprintln!("{total} records, {dropped} duplicates dropped by the rule");
    assert_no_duplicates(&kept);
    // A key stays on one partition.
    let mut partition_of: HashMap<String, i32> = HashMap::new();
    for r in kept.iter().filter(|r| r.key.is_some()) {
        let p = *partition_of
            .entry(r.key.clone().unwrap_or_default())
            .or_insert(r.partition);
        assert_eq!(p, r.partition, "key {:?} on two partitions", r.key);
    }
    // Each partition's records replayed on their own (a truncate reaches
    // every partition), then put together.
    let mut by_partition: BTreeMap<(String, i32), Vec<Record>> = BTreeMap::new();
    for r in kept {
        by_partition
            .entry((r.dest.clone(), r.partition))
            .or_default()
            .push(r);
    }
    let mut replica = Replica::new();
    for records in by_partition.values() {
        for (table, rows) in build_replica(records, &|_| vec!["id".to_string()]) {
            replica.entry(table).or_default().extend(rows);
        }
    }
    let all: Vec<Record> = by_partition.values().flatten().cloned().collect();
    let got = replica.remove("public.t").unwrap_or_default();
    let missing: Vec<_> = source
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|k| !source.contains_key(*k))
        .take(5)
        .collect();
    let about = |k: &String| -> Vec<String> {
        let id: i64 = k
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .unwrap_or(-1);
        all.iter()
            .filter(|r| {
                r.object["new"]["id"].as_i64() == Some(id)
                    || r.object["old"]["id"].as_i64() == Some(id)
            })
            .map(|r| format!("[{}] {:?} {}", r.partition, r.event, r.object))
            .collect()
    };
    if missing.is_empty() && extra.is_empty() && *source == got {
        return Ok(());
    }
    Err(format!(
        "the replica differs from t ({} rows, replica {}): missing {missing:?}, extra {extra:?}; records of the first: {:#?}",
        source.len(),
        got.len(),
        missing.first().or(extra.first()).map(|k| about(k)).unwrap_or_default()
    ))
}

/// A Debezium format value as two decodings of the same WAL both write it:
/// without the event's own `ts_ms`/`ts_us`/`ts_ns` (when it was written).
fn without_write_time(mut value: serde_json::Value) -> serde_json::Value {
    let envelope = match value.get_mut("payload") {
        Some(p) if p.is_object() => p,
        _ => &mut value,
    };
    if let Some(o) = envelope.as_object_mut() {
        if o.contains_key("source") {
            for k in ["ts_ms", "ts_us", "ts_ns"] {
                o.remove(k);
            }
        }
    }
    value
}

/// The Debezium format's records reach Kafka and JetStream exactly as the
/// slot writes them (a third slot, copied from the relays' at the same
/// point, read with the same options): each line's `destination` is
/// Kafka's topic and, mapped, the NATS subject (names that NATS refuses as
/// they are: tables `.lead`, `tail.`, `x..y`); its key the record key
/// (NATS: `Pubjson-Key`), byte for byte, schemas included; its value the
/// payload; a null value a tombstone (Kafka: no value; NATS: empty, with
/// `Pubjson-Tombstone`); a record without a key (a keyless table, a
/// truncate) on partition 0; transaction records and messages on their
/// topics. Kafka keeps each key's records in order, JetStream all of them.
#[test]
fn debezium_records_reach_kafka_and_jetstream_as_the_slot_writes_them() {
    use pubjson_e2e::brokers::Nats;
    use pubjson_e2e::relay::read_jetstream;
    let server = pubjson_e2e::Server::main();
    let db = "relay_dbz_keys";
    let mut client = server.fresh_database(db);
    client
        .batch_execute(
            r#"CREATE TABLE "Order Lines" (id int PRIMARY KEY, v text);
               CREATE TABLE ".lead" (id int PRIMARY KEY);
               CREATE TABLE "tail." (id int PRIMARY KEY);
               CREATE TABLE "x..y" (a int, b int, PRIMARY KEY (a, b));
               CREATE TABLE "a.b" (id int PRIMARY KEY);
               CREATE TABLE nokey (v text);
               ALTER TABLE nokey REPLICA IDENTITY FULL;"#,
        )
        .expect("tables");
    for sql in [
        "SELECT pg_create_logical_replication_slot('relay_dbzk', 'pubjson')",
        "SELECT pg_copy_logical_replication_slot('relay_dbzk', 'relay_dbzn')",
        "SELECT pg_copy_logical_replication_slot('relay_dbzk', 'relay_dbzp')",
    ] {
        client.batch_execute(sql).expect("slots at one point");
    }
    client
        .batch_execute(
            r#"BEGIN;
               INSERT INTO "Order Lines" SELECT g, 'v' || g FROM generate_series(1, 40) g;
               INSERT INTO ".lead" VALUES (1);
               INSERT INTO "tail." VALUES (1);
               INSERT INTO "x..y" VALUES (1, 2);
               INSERT INTO "a.b" VALUES (1);
               INSERT INTO nokey VALUES ('a'), ('b');
               COMMIT;
               UPDATE "Order Lines" SET id = 100 WHERE id = 1;
               DELETE FROM "Order Lines" WHERE id = 2;
               UPDATE "Order Lines" SET v = 'again' WHERE id = 3;
               UPDATE nokey SET v = 'c' WHERE v = 'a';
               SELECT pg_logical_emit_message(false, 'note', 'outside');
               BEGIN;
               SELECT pg_logical_emit_message(true, 'note', 'inside');
               UPDATE "x..y" SET b = 3;
               COMMIT;
               TRUNCATE ".lead", nokey;"#,
        )
        .expect("workload");
    let options = r#""topic.prefix" = "dbt"
"provide.transaction.metadata" = "true"
"skipped.operations" = "none""#;
    let dir = scratch_dir("relay-dbz-keys");
    let tansu = Tansu::start(&dir.join("tansu"));
    let nats = Nats::start(&dir.join("nats"));
    let conn = conninfo(&server, db);
    let mut relays = [
        RelayProcess::start(
            &dir.join("kafka"),
            &format!(
                "[source]\nconninfo = \"{conn}\"\nslot = \"relay_dbzk\"\nformat = \"debezium\"\n[source.options]\n{options}\n[broker]\nkind = \"kafka\"\n[kafka]\nbrokers = \"{}\"\n",
                tansu.bootstrap()
            ),
            &[],
            &[],
        ),
        RelayProcess::start(
            &dir.join("nats"),
            &format!(
                "[source]\nconninfo = \"{conn}\"\nslot = \"relay_dbzn\"\n[source.options]\n{options}\n[broker]\nkind = \"nats\"\n[nats]\nurl = \"{}\"\nstream = \"DBT\"\n",
                nats.url()
            ),
            // The format from the command line.
            &["--format", "debezium"],
            &[],
        ),
    ];
    for r in &mut relays {
        r.wait_healthy(Duration::from_secs(120));
    }
    wait_caught_up(&mut client, "relay_dbzk", Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_dbzn", Duration::from_secs(60));
    // What the slot writes: (destination, key, value) as the lines hold them.
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_changes('relay_dbzp', NULL, NULL,
               'format-version', 'debezium', 'topic.prefix', 'dbt',
               'provide.transaction.metadata', 'true', 'skipped.operations', 'none')",
            &[],
        )
        .expect("peek");
    let mut expected = Vec::new();
    for row in &rows {
        for text in row.get::<_, &str>(0).split('\n') {
            let line: BTreeMap<&str, &serde_json::value::RawValue> =
                serde_json::from_str(text).expect("a Debezium line");
            let (destination, key, value) = (line["destination"], line["key"], line["value"]);
            let destination: String = serde_json::from_str(destination.get()).expect("topic");
            let key = (key.get() != "null").then(|| key.get().to_string());
            let value: serde_json::Value = serde_json::from_str(value.get()).expect("value");
            expected.push((destination, key, value));
        }
    }
    let topics: std::collections::BTreeSet<&str> =
        expected.iter().map(|(d, _, _)| d.as_str()).collect();
    for topic in [
        "dbt.public.Order_Lines",
        "dbt.public..lead",
        "dbt.public.tail.",
        "dbt.public.x..y",
        "dbt.public.a.b",
        "dbt.public.nokey",
        "dbt.transaction",
        "dbt.message",
    ] {
        assert!(topics.contains(topic), "{topic} among {topics:?}");
    }
    assert!(expected.len() > 60, "{} records", expected.len());
    assert!(expected.iter().any(|(_, _, v)| v.is_null()), "tombstones");

    // Kafka: per topic and key, the slot's records in its order.
    let group = |list: Vec<(String, Option<String>, serde_json::Value)>| {
        let mut by: BTreeMap<(String, Option<String>), Vec<serde_json::Value>> = BTreeMap::new();
        for (d, k, v) in list {
            by.entry((d, k)).or_default().push(without_write_time(v));
        }
        by
    };
    let records = read_kafka(&tansu.bootstrap(), "dbt.");
    for r in &records {
        assert_eq!(r.tombstone, r.raw.is_empty(), "{r:?}");
        if r.key.is_none() {
            assert_eq!(r.partition, 0, "without a key: partition 0: {r:?}");
        }
    }
    let got = group(
        records
            .iter()
            .map(|r| (r.dest.clone(), r.key.clone(), r.object.clone()))
            .collect(),
    );
    assert_eq!(got, group(expected.clone()), "Kafka's records");

    // JetStream: the same records in the slot's order, on subjects.
    let subject = |topic: &str| match topic {
        "dbt.public..lead" => "dbt.public.%.lead".to_string(),
        "dbt.public.tail." => "dbt.public.tail.%".to_string(),
        "dbt.public.x..y" => "dbt.public.x.%.y".to_string(),
        other => other.to_string(),
    };
    let messages = read_jetstream(&nats.url(), "DBT");
    assert_eq!(messages.len(), expected.len());
    for (m, (d, k, v)) in messages.iter().zip(&expected) {
        assert_eq!(m.dest, subject(d));
        assert_eq!(&m.key, k, "{m:?}");
        assert_eq!(m.tombstone, v.is_null(), "{m:?}");
        assert_eq!(m.raw.is_empty(), v.is_null(), "{m:?}");
        assert_eq!(
            without_write_time(m.object.clone()),
            without_write_time(v.clone())
        );
    }
    for r in &mut relays {
        r.stop();
    }
    for slot in ["relay_dbzk", "relay_dbzn", "relay_dbzp"] {
        pubjson_e2e::drop_slot(&mut client, slot);
    }
}
