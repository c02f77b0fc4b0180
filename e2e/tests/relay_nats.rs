//! pubjson-relay into NATS JetStream (a real nats-server with file
//! storage): exactly once through relay kills, broker restarts, an
//! immediate PostgreSQL restart and a frozen broker, the replica read back
//! from the stream equal to the table, in format 3 and (a second relay on
//! the same workload and faults) in the Debezium format; an idle slot's
//! WAL released; bad configurations refused; SIGTERM drains; the
//! unreachable broker waited for; two relays on disjoint row filters.
//! docs/relay.md describes the guarantee these tests prove.

use pubjson_e2e::brokers::Nats;
use pubjson_e2e::relay::{
    assert_no_duplicates, build_debezium_replica, build_replica, conninfo, create_jetstream_stream,
    create_workload_table, read_jetstream, run_relay, run_workload, seed, source_rows,
    wait_caught_up, Record, RelayProcess, Replica, Workload,
};
use pubjson_e2e::{scratch_dir, soak, wait_for, Place, SeededRng, Server};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn nats_config(server: &Server, db: &str, slot: &str, url: &str, extra: &str) -> String {
    format!(
        r#"
[source]
conninfo = "{conn}"
slot = "{slot}"
create_slot = true
{extra}
[broker]
kind = "nats"
[nats]
url = "{url}"
ack_timeout = "10s"
[topics]
transactions = "pubjson.{{database}}.tx"
[relay]
reconnect_max = "2s"
"#,
        conn = conninfo(server, db)
    )
}

/// A relay of the Debezium format (schemas and transaction records off,
/// as Debezium's defaults; truncates on) into stream `stream`, topics
/// under `prefix`.
fn debezium_config(
    server: &Server,
    db: &str,
    slot: &str,
    url: &str,
    stream: &str,
    prefix: &str,
) -> String {
    format!(
        r#"
[source]
conninfo = "{conn}"
slot = "{slot}"
create_slot = true
format = "debezium"
[source.options]
"topic.prefix" = "{prefix}"
"schemas.enable" = "false"
"skipped.operations" = "none"
[broker]
kind = "nats"
[nats]
url = "{url}"
stream = "{stream}"
ack_timeout = "10s"
[relay]
reconnect_max = "2s"
"#,
        conn = conninfo(server, db)
    )
}

/// The Debezium format's events in the stream in commit order: each
/// transaction's together, in position order, and the transactions in
/// the order of the last commit their `source.sequence` names.
fn assert_debezium_commit_order(records: &[Record]) {
    let mut transactions = std::collections::HashSet::new();
    let (mut xid, mut position, mut last_commit) = (None, None, None);
    for r in records {
        if r.xid != xid {
            if let Some(x) = &r.xid {
                assert!(
                    transactions.insert(x.clone()),
                    "transaction {x} in two places: {r:?}"
                );
            }
            xid = r.xid.clone();
            position = None;
        }
        let p = r.position().unwrap_or_else(|| panic!("no identity: {r:?}"));
        assert!(position < Some(p), "{r:?} after {position:?}");
        position = Some(p);
        let sequence = r.envelope()["source"]["sequence"].as_str().map(|s| {
            let pair: Vec<Option<String>> = serde_json::from_str(s).expect("sequence");
            pair[0].as_ref().map(|c| c.parse::<u64>().expect("LSN"))
        });
        if let Some(Some(commit)) = sequence {
            assert!(
                last_commit <= Some(commit),
                "{r:?} after commit {last_commit:?}"
            );
            last_commit = Some(commit);
        }
    }
}

fn key_id(_: &str) -> Vec<String> {
    vec!["id".to_string()]
}

/// The committed events of the stream are in strictly increasing
/// `(lsn, index)` order: commit order, and no event twice.
fn assert_commit_order(records: &[pubjson_e2e::relay::Record]) {
    let mut last = None;
    for r in records {
        if let Some(p) = r.position() {
            assert!(
                last < Some(p),
                "event {:?} after {:?}: {r:?}",
                r.event,
                last
            );
            last = Some(p);
        }
    }
}

fn compare(replica: &Replica, table: &str, client: &mut postgres::Client) {
    let source = source_rows(client, table, &["id"]);
    let empty = Default::default();
    let got = replica.get(&format!("public.{table}")).unwrap_or(&empty);
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
    let differ: Vec<_> = source
        .iter()
        .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
        .take(3)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "the replica differs from {table} ({} rows, replica {}): missing {missing:?}, extra {extra:?}, different {differ:?}",
        source.len(),
        got.len()
    );
    assert!(
        !source.is_empty(),
        "the workload left {table} empty: nothing compared"
    );
}

/// The slot's WAL is released once the relay has caught up: the retained
/// WAL falls under 16 MB (a running-xacts record moves restart_lsn on).
fn wait_wal_released(client: &mut postgres::Client, slot: &str) {
    wait_for(
        "the slot's retained WAL under 16 MB",
        Duration::from_secs(120),
        || {
            let _ = client.batch_execute("CHECKPOINT");
            client
            .query_one(
                "SELECT pg_current_wal_lsn() - restart_lsn < 16 * 1024 * 1024 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
        },
    );
}

#[test]
fn exactly_once_through_kills_restarts_and_a_frozen_broker() {
    let cluster = Place::new("relay-nats", 54390).take();
    let server = cluster.server();
    let db = "relay_nats";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    let dir = scratch_dir("relay-nats");
    let mut nats = Nats::start(&dir.join("nats"));
    // Streaming at 64 kB and two-phase decoding: large transactions are
    // streamed, prepared ones sent at PREPARE.
    let config = nats_config(
        &server,
        db,
        "relay_nats",
        &nats.url(),
        "two_phase = true\n[source.options]\nstreaming = \"on\"\ntwo_phase = \"on\"",
    )
    .replace(
        "dbname=relay_nats",
        "dbname=relay_nats options='-c logical_decoding_work_mem=64kB'",
    );
    let mut relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    // The Debezium format's relay beside it, through the same faults.
    let dbz_config = debezium_config(&server, db, "relay_nats_dbz", &nats.url(), "DBZ", "dbz");
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
                    large: 3000,
                    two_phase: true,
                    truncates: true,
                },
                &stop,
            )
        });
        let mut rng = SeededRng::new(seed ^ 0x5eed);
        // kill -9 at random points: mid-transaction, mid-batch, between an
        // acknowledgement and the confirmation.
        for _ in 0..kills {
            std::thread::sleep(Duration::from_millis(200 + rng.below(1500)));
            relay.restart();
            std::thread::sleep(Duration::from_millis(rng.below(500)));
            dbz.restart();
        }
        relay.wait_healthy(Duration::from_secs(120));
        dbz.wait_healthy(Duration::from_secs(120));
        // The broker restarts (JetStream keeps its file store).
        nats.restart();
        std::thread::sleep(Duration::from_millis(500 + rng.below(1000)));
        // PostgreSQL restarts without a checkpoint.
        cluster.pg_ctl_restart("immediate");
        relay.wait_healthy(Duration::from_secs(120));
        dbz.wait_healthy(Duration::from_secs(120));
        // The broker unreachable for 30 s: frozen, its connections open.
        nats.freeze();
        let frozen = Instant::now();
        wait_for(
            "the relays to report the frozen broker",
            Duration::from_secs(60),
            || {
                [&relay, &dbz]
                    .iter()
                    .all(|r| r.get("/health").is_some_and(|(code, _)| code == 503))
            },
        );
        std::thread::sleep(Duration::from_secs(30).saturating_sub(frozen.elapsed()));
        nats.thaw();
        relay.wait_healthy(Duration::from_secs(120));
        dbz.wait_healthy(Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(1000 + rng.below(2000)));
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("workload")
    });
    eprintln!("workload: {stats:?}");
    assert!(
        stats.large > 0 && stats.prepared > 0 && stats.transactions > 50,
        "{stats:?}"
    );
    let mut client = server.connect_retrying(db, Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_nats", Duration::from_secs(180));
    wait_caught_up(&mut client, "relay_nats_dbz", Duration::from_secs(180));
    let records = read_jetstream(&nats.url(), "PUBJSON");
    assert_no_duplicates(&records);
    assert_commit_order(&records);
    compare(&build_replica(&records, &key_id), "t", &mut client);
    // The Debezium format: every event once, in commit order, the table
    // rebuilt from before/after (truncates included).
    let dbz_records = read_jetstream(&nats.url(), "DBZ");
    assert_no_duplicates(&dbz_records);
    assert_debezium_commit_order(&dbz_records);
    assert!(
        dbz_records.iter().any(|r| r.op() == "t") && dbz_records.iter().any(|r| r.tombstone),
        "truncates and tombstones in the stream"
    );
    compare(
        &build_debezium_replica(&dbz_records, &key_id),
        "t",
        &mut client,
    );
    // Every event the stream holds was counted once by the last relay or
    // an earlier one; none is waiting.
    for r in [&relay, &dbz] {
        assert_eq!(r.metric("pubjson_relay_unacknowledged_events"), Some(0.0));
    }
    wait_wal_released(&mut client, "relay_nats");
    wait_wal_released(&mut client, "relay_nats_dbz");
    for r in [&mut relay, &mut dbz] {
        r.stop();
    }
    pubjson_e2e::drop_slot(&mut client, "relay_nats");
    pubjson_e2e::drop_slot(&mut client, "relay_nats_dbz");
}

#[test]
fn an_idle_slot_holds_no_wal_while_another_database_writes_100_mb() {
    let server = Server::main();
    let db = "relay_idle";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    client
        .batch_execute("CREATE PUBLICATION relay_idle_pub FOR TABLE t WHERE (id < 0)")
        .expect("publication");
    let dir = scratch_dir("relay-idle");
    let nats = Nats::start(&dir.join("nats"));
    // Filtered: the publication's row filter passes nothing of t.
    let config = nats_config(
        &server,
        db,
        "relay_idle",
        &nats.url(),
        "[source.options]\npublication_names = \"relay_idle_pub\"",
    );
    let mut relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    relay.wait_healthy(Duration::from_secs(60));
    client
        .batch_execute("INSERT INTO t SELECT g, 0, 'filtered', 'x' FROM generate_series(1, 1000) g")
        .expect("insert");
    // A slot nobody reads, for comparison.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('relay_idle_unread', 'pubjson')")
        .expect("slot");
    let mut other = server.fresh_database("relay_idle_other");
    other
        .batch_execute(
            "CREATE TABLE w (id int, pad text);
             INSERT INTO w SELECT g, repeat('w', 1000) FROM generate_series(1, 100000) g;",
        )
        .expect("100 MB of WAL");
    let retained = |c: &mut postgres::Client, slot: &str| -> i64 {
        c.query_one(
            "SELECT (pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .expect("retained WAL")
        .get(0)
    };
    assert!(retained(&mut client, "relay_idle_unread") > 100_000_000);
    wait_caught_up(&mut client, "relay_idle", Duration::from_secs(120));
    wait_wal_released(&mut client, "relay_idle");
    assert!(read_jetstream(&nats.url(), "PUBJSON")
        .iter()
        .all(|r| r.action() != "I"));
    relay.stop();
    pubjson_e2e::drop_slot(&mut client, "relay_idle_unread");
    pubjson_e2e::drop_slot(&mut client, "relay_idle");
}

#[test]
fn refuses_bad_configuration_with_clear_messages() {
    let server = Server::main();
    let db = "relay_conf";
    let mut client = server.fresh_database(db);
    client
        .batch_execute(
            "SELECT pg_create_logical_replication_slot('relay_conf_td', 'test_decoding');
             DROP ROLE IF EXISTS relay_norepl; CREATE ROLE relay_norepl LOGIN;",
        )
        .expect("setup");
    let conn = conninfo(&server, db);
    let dir = scratch_dir("relay-conf");
    let nats = Nats::start(&dir.join("nats"));
    let url = nats.url();
    let t = Duration::from_secs(60);
    let base = |slot: &str| {
        vec![
            "--source".to_string(),
            conn.clone(),
            "--slot".into(),
            slot.into(),
            "--nats-url".into(),
            url.clone(),
        ]
    };
    let run = |extra: &[&str], slot: &str| {
        let mut args = base(slot);
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        run_relay(&refs, &[], t)
    };
    let (code, out) = run(&["--broker", "rabbitmq"], "relay_conf_x");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("unknown broker \"rabbitmq\""), "{out}");
    let (code, out) = run(&["--broker", "nats"], "relay_conf_missing");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("replication slot \"relay_conf_missing\" does not exist"),
        "{out}"
    );
    let (code, out) = run(&["--broker", "nats"], "relay_conf_td");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("uses the output plugin \"test_decoding\", not pubjson"),
        "{out}"
    );
    let no_repl = conn.replace("user=postgres", "user=relay_norepl");
    let (code, out) = run_relay(
        &[
            "--source",
            &no_repl,
            "--slot",
            "relay_conf_x",
            "--broker",
            "nats",
            "--nats-url",
            &url,
        ],
        &[],
        t,
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("42501") && out.contains("REPLICATION"),
        "{out}"
    );
    let (code, out) = run(
        &["--broker", "nats", "-o", "format-version=2"],
        "relay_conf_td",
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("format-version"), "{out}");
    let (code, out) = run_relay(&["--slot", "Bad-Name", "--broker", "nats"], &[], t);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("slot name \"Bad-Name\" is invalid"), "{out}");
    // The Debezium format names its topics after topic.prefix: required.
    let (code, out) = run(
        &["--broker", "nats", "--format", "debezium"],
        "relay_conf_x",
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("needs topic.prefix"), "{out}");
    // A plugin option pubjson refuses: PostgreSQL's error, with its SQLSTATE.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('relay_conf_ok', 'pubjson')")
        .expect("slot");
    let (code, out) = run(
        &["--broker", "nats", "-o", "include-xids=1"],
        "relay_conf_ok",
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("22023") && out.contains("include-xids"),
        "{out}"
    );
    for line in out.lines() {
        assert!(!line.contains("panicked"), "{out}");
    }
    // A stream that exists but does not store the relay's subjects: found
    // at the first publish (a restarted server's streams are not loaded
    // yet for a moment: that is waited for, this is not).
    create_jetstream_stream(&url, "NARROW", &["narrow.>"]);
    client
        .batch_execute("CREATE TABLE conf_t (id int PRIMARY KEY); INSERT INTO conf_t VALUES (1)")
        .expect("a change");
    let (code, out) = run(
        &[
            "--broker",
            "nats",
            "--nats-stream",
            "NARROW",
            "--topic",
            "other.{schema}.{table}",
        ],
        "relay_conf_ok",
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("JetStream stream NARROW does not store subject other.public.conf_t"),
        "{out}"
    );
    pubjson_e2e::drop_slot(&mut client, "relay_conf_td");
    pubjson_e2e::drop_slot(&mut client, "relay_conf_ok");
}

#[test]
fn waits_for_an_unreachable_broker_then_delivers() {
    let server = Server::main();
    let db = "relay_wait";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    let dir = scratch_dir("relay-wait");
    // A port nothing listens on yet.
    let port = pubjson_e2e::brokers::free_port();
    let url = format!("nats://127.0.0.1:{port}");
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('relay_wait', 'pubjson')")
        .expect("slot");
    let config = nats_config(&server, db, "relay_wait", &url, "");
    let relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    wait_for(
        "the relay to retry the broker",
        Duration::from_secs(60),
        || {
            relay
                .metric("pubjson_relay_reconnects_total")
                .unwrap_or(0.0)
                >= 2.0
        },
    );
    let (code, body) = relay.get("/health").expect("health endpoint");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cannot connect to NATS"), "{body}");
    client
        .batch_execute("INSERT INTO t VALUES (1, 1, 'before', 'x')")
        .expect("insert");
    // The broker comes up on that port.
    let _nats = Nats::start_at(&dir.join("nats"), port);
    let mut relay = relay;
    relay.wait_healthy(Duration::from_secs(60));
    client
        .batch_execute("INSERT INTO t VALUES (2, 1, 'after', 'x')")
        .expect("insert");
    wait_caught_up(&mut client, "relay_wait", Duration::from_secs(60));
    let records = read_jetstream(&url, "PUBJSON");
    compare(&build_replica(&records, &key_id), "t", &mut client);
    relay.stop();
    pubjson_e2e::drop_slot(&mut client, "relay_wait");
}

#[test]
fn sigterm_drains_and_confirms_what_the_broker_holds() {
    let server = Server::main();
    let db = "relay_term";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    let dir = scratch_dir("relay-term");
    let nats = Nats::start(&dir.join("nats"));
    let config = nats_config(&server, db, "relay_term", &nats.url(), "");
    let mut relay = RelayProcess::start(&dir.join("relay"), &config, &[], &[]);
    relay.wait_healthy(Duration::from_secs(60));
    let stop = AtomicBool::new(false);
    let confirmed = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut c = server.connect(db);
            for i in 0..200 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                c.batch_execute(&format!(
                    "INSERT INTO t SELECT g, 0, 'v', 'x' FROM generate_series({}, {}) g",
                    i * 1000 + 1,
                    i * 1000 + 1000
                ))
                .expect("insert");
            }
        });
        // Terminated while events are in flight.
        wait_for("events flowing", Duration::from_secs(60), || {
            relay.metric("pubjson_relay_events_total").unwrap_or(0.0) > 5000.0
        });
        relay.stop();
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        let confirmed: String = client
            .query_one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'relay_term'", &[])
            .expect("slot")
            .get(0);
        pubjson_e2e::lsn(&confirmed)
    });
    assert!(
        relay.log_text().contains("confirmed"),
        "{}",
        relay.log_text()
    );
    // The drain confirmed every transaction whose end the broker holds.
    let records = read_jetstream(&nats.url(), "PUBJSON");
    let last_end = records
        .iter()
        .filter(|r| r.action() == "C")
        .map(|r| pubjson_e2e::lsn(r.object["nextlsn"].as_str().expect("nextlsn")))
        .max()
        .expect("a transaction reached the broker");
    assert!(
        confirmed >= last_end,
        "the slot confirmed {confirmed:X}, before the end of the last transaction in the stream {last_end:X}"
    );
    // A new relay goes on from there: the table arrives whole.
    let mut relay = RelayProcess::start(&dir.join("relay2"), &config, &[], &[]);
    relay.wait_healthy(Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_term", Duration::from_secs(120));
    let records = read_jetstream(&nats.url(), "PUBJSON");
    assert_no_duplicates(&records);
    compare(&build_replica(&records, &key_id), "t", &mut client);
    relay.stop();
    pubjson_e2e::drop_slot(&mut client, "relay_term");
}

#[test]
fn two_relays_on_disjoint_row_filters_make_the_whole_table() {
    let server = Server::main();
    let db = "relay_scale";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    client
        .batch_execute(
            "CREATE PUBLICATION relay_even FOR TABLE t WHERE (id % 2 = 0);
             CREATE PUBLICATION relay_odd FOR TABLE t WHERE (id % 2 <> 0);",
        )
        .expect("publications");
    let dir = scratch_dir("relay-scale");
    let nats = Nats::start(&dir.join("nats"));
    let mut relays: Vec<RelayProcess> = [("relay_even", "relay_even"), ("relay_odd", "relay_odd")]
        .iter()
        .map(|(slot, publication)| {
            let config = nats_config(
                &server,
                db,
                slot,
                &nats.url(),
                &format!("[source.options]\npublication_names = \"{publication}\""),
            );
            RelayProcess::start(&dir.join(slot), &config, &[], &[])
        })
        .collect();
    for r in &mut relays {
        r.wait_healthy(Duration::from_secs(60));
    }
    let stop = AtomicBool::new(false);
    let seed = seed();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            run_workload(
                &server,
                &Workload {
                    db,
                    table: "t",
                    seed,
                    large: 500,
                    two_phase: false,
                    truncates: false,
                },
                &stop,
            )
        });
        std::thread::sleep(Duration::from_secs(8));
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("workload")
    });
    for slot in ["relay_even", "relay_odd"] {
        wait_caught_up(&mut client, slot, Duration::from_secs(120));
    }
    let records = read_jetstream(&nats.url(), "PUBJSON");
    assert_no_duplicates(&records);
    let by = |relay: &str| {
        records
            .iter()
            .filter(|r| r.relay.as_deref() == Some(relay))
            .count()
    };
    assert!(
        by("relay_even") > 0 && by("relay_odd") > 0,
        "both relays published"
    );
    // Each relay's changes are its half; their union is the table.
    for r in &records {
        if let (Some(relay), Some(id)) = (
            r.relay.as_deref(),
            r.object["new"]["id"]
                .as_i64()
                .or(r.object["old"]["id"].as_i64()),
        ) {
            assert_eq!(relay == "relay_even", id % 2 == 0, "{r:?}");
        }
    }
    compare(&build_replica(&records, &key_id), "t", &mut client);
    for mut r in relays {
        r.stop();
    }
    pubjson_e2e::drop_slot(&mut client, "relay_even");
    pubjson_e2e::drop_slot(&mut client, "relay_odd");
}

/// A relay that starts after JetStream's de-duplication window has passed
/// reads where its events end in the stream and does not send them again:
/// a second relay with the same id on a copy of the slot (so that it
/// streams everything from the start again) leaves out every event the
/// first stored and sends the rest once, in both formats.
#[test]
fn after_the_duplicate_window_a_restart_leaves_out_what_the_stream_holds() {
    let server = Server::main();
    let db = "relay_gap";
    let mut client = server.fresh_database(db);
    create_workload_table(&mut client, "t");
    for (a, b) in [
        ("relay_gap_a", "relay_gap_b"),
        ("relay_gapd_a", "relay_gapd_b"),
    ] {
        client
            .batch_execute(&format!(
                "SELECT pg_create_logical_replication_slot('{a}', 'pubjson');
                 SELECT pg_copy_logical_replication_slot('{a}', '{b}');"
            ))
            .expect("slots");
    }
    let dir = scratch_dir("relay-gap");
    let nats = Nats::start(&dir.join("nats"));
    // A window of 1 s: waiting it out is the outage.
    let windowed = |config: String, id: &str| {
        config
            .replace(
                "ack_timeout = \"10s\"",
                "ack_timeout = \"10s\"\nduplicate_window = \"1s\"",
            )
            .replace("[relay]\n", &format!("[relay]\nid = \"{id}\"\n"))
    };
    let v3 = |slot: &str| windowed(nats_config(&server, db, slot, &nats.url(), ""), "gap3");
    let dbz = |slot: &str| {
        windowed(
            debezium_config(&server, db, slot, &nats.url(), "DBZ", "gap"),
            "gapdbz",
        )
    };
    let write = |c: &mut postgres::Client, from: i32, n: i32| {
        for i in from..from + n {
            c.batch_execute(&format!(
                "BEGIN;
                 INSERT INTO t VALUES ({i}, 0, 'v', 'x'), ({j}, 1, 'w', 'y');
                 UPDATE t SET v = 'u' WHERE id = {i};
                 UPDATE t SET id = {k} WHERE id = {j};
                 DELETE FROM t WHERE id = {i} AND {i} % 3 = 0;
                 COMMIT;",
                j = i + 10_000,
                k = i + 20_000
            ))
            .expect("transaction");
        }
    };
    let mut first = [
        RelayProcess::start(&dir.join("a3"), &v3("relay_gap_a"), &[], &[]),
        RelayProcess::start(&dir.join("adbz"), &dbz("relay_gapd_a"), &[], &[]),
    ];
    for r in &mut first {
        r.wait_healthy(Duration::from_secs(60));
    }
    write(&mut client, 1, 30);
    wait_caught_up(&mut client, "relay_gap_a", Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_gapd_a", Duration::from_secs(60));
    for r in &mut first {
        r.stop();
    }
    let stored = [
        read_jetstream(&nats.url(), "PUBJSON").len(),
        read_jetstream(&nats.url(), "DBZ").len(),
    ];
    assert!(stored[0] > 100 && stored[1] > 100, "{stored:?}");
    write(&mut client, 31, 10);
    // Past the window: message ids no longer keep copies out.
    std::thread::sleep(Duration::from_millis(1500));
    let mut second = [
        RelayProcess::start(&dir.join("b3"), &v3("relay_gap_b"), &[], &[]),
        RelayProcess::start(&dir.join("bdbz"), &dbz("relay_gapd_b"), &[], &[]),
    ];
    for r in &mut second {
        r.wait_healthy(Duration::from_secs(60));
    }
    wait_caught_up(&mut client, "relay_gap_b", Duration::from_secs(60));
    wait_caught_up(&mut client, "relay_gapd_b", Duration::from_secs(60));
    for (r, n) in second.iter_mut().zip(stored) {
        assert!(
            r.log_text().contains("not sending them again"),
            "{}",
            r.log_text()
        );
        assert_eq!(
            r.metric("pubjson_relay_skipped_events_total"),
            Some(n as f64),
            "every event the first relay stored left out"
        );
        r.stop();
    }
    let records = read_jetstream(&nats.url(), "PUBJSON");
    assert_no_duplicates(&records);
    assert_commit_order(&records);
    compare(&build_replica(&records, &key_id), "t", &mut client);
    let records = read_jetstream(&nats.url(), "DBZ");
    assert_no_duplicates(&records);
    assert_debezium_commit_order(&records);
    compare(&build_debezium_replica(&records, &key_id), "t", &mut client);
    for slot in ["relay_gap_a", "relay_gap_b", "relay_gapd_a", "relay_gapd_b"] {
        pubjson_e2e::drop_slot(&mut client, slot);
    }
}
