//! Streaming through a real walsender with pg_recvlogical: stop and
//! restart without losing or repeating a change, option values given
//! without an argument (`-o pretty-print`), and a wal2json consumer's
//! switch to a pubjson slot (docs/compatibility.md).

use pubjson_e2e::{complete_lines, require_wal2json, scratch_dir, wait_for, RecvLogical, TestDb};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

fn count_commits(lines: &[String]) -> usize {
    lines
        .iter()
        .filter(|l| l.starts_with(r#"{"action":"C""#))
        .count()
}

/// Transactions `first..=last`: transaction k inserts ids 10k+1 .. 10k+(k%3+1).
fn run_transactions(db: &mut TestDb, first: i32, last: i32) {
    for k in first..=last {
        if k % 7 == 0 {
            // Neither decodes to anything: an aborted transaction and DDL
            // (an empty transaction, skipped by pubjson's default).
            db.exec(&format!(
                "begin; insert into e2e_recv.t values ({}, 'aborted'); rollback",
                10 * k + 9
            ));
            db.exec(&format!("create table e2e_recv.ddl_{k} (a int)"));
        }
        let rows: Vec<String> = (1..=(k % 3 + 1))
            .map(|j| format!("({}, 'txn {k}')", 10 * k + j))
            .collect();
        db.exec(&format!(
            "insert into e2e_recv.t values {}",
            rows.join(", ")
        ));
    }
}

/// pg_recvlogical 15 does not confirm what it wrote when it gets SIGINT
/// (it confirms every `-s` seconds): wait until the slot's confirmed
/// position reaches the end of the last transaction in the file (the
/// "nextlsn" of its C line, which include-lsn adds) before stopping it.
fn wait_until_confirmed(db: &mut TestDb, slot: &str, lines: &[String]) {
    let last_commit: Value = serde_json::from_str(lines.last().expect("no lines")).expect("JSON");
    assert_eq!(last_commit["action"], "C", "the last line is not a commit");
    let end = last_commit["nextlsn"]
        .as_str()
        .expect("nextlsn")
        .to_string();
    let client = &mut db.conn.client;
    wait_for(
        &format!("slot {slot} confirmed up to {end}"),
        TIMEOUT,
        || {
            client
            .query_one(
                "select confirmed_flush_lsn >= $2::text::pg_lsn from pg_replication_slots where slot_name = $1",
                &[&slot, &end],
            )
            .expect("pg_replication_slots")
            .get(0)
        },
    );
}

/// pg_recvlogical streams `slot` into `file` while transactions `first` to
/// `last` run; once the file has `commits` commits (those run before it
/// started and not yet confirmed count too) and the slot has confirmed
/// them, it is stopped and must have exited cleanly.
fn stream_part(
    db: &mut TestDb,
    (slot, file): (&str, &Path),
    opts: &[(&str, Option<&str>)],
    (first, last): (i32, i32),
    commits: usize,
    part: &str,
) {
    let mut rl = RecvLogical::start(slot, file, opts, &[]);
    run_transactions(db, first, last);
    wait_for(&format!("{commits} commits in {part}"), TIMEOUT, || {
        count_commits(&complete_lines(file)) == commits
    });
    wait_until_confirmed(db, slot, &complete_lines(file));
    assert!(
        rl.stop().success(),
        "pg_recvlogical failed: {}",
        rl.stderr()
    );
}

#[test]
fn stop_and_restart_loses_and_repeats_nothing() {
    let mut db = TestDb::new("recv");
    db.exec("create table e2e_recv.t (id int primary key, v text)");
    let (slot, _slot_guard) = db.create_slot("pubjson", "pj");
    let dir = scratch_dir("recv");
    let opts = [
        ("format-version", Some("2")),
        ("include-xids", None),
        ("include-lsn", None),
    ];

    // Phase 1: streaming while the transactions run.
    let file1 = dir.join("part1.jsonl");
    stream_part(&mut db, (&slot, &file1), &opts, (1, 20), 20, "part 1");

    // Phase 2: transactions while nobody streams, then a restart from the
    // confirmed position while more run.
    run_transactions(&mut db, 21, 35);
    let file2 = dir.join("part2.jsonl");
    stream_part(&mut db, (&slot, &file2), &opts, (36, 50), 30, "part 2");

    let (part1, part2) = (complete_lines(&file1), complete_lines(&file2));
    assert_eq!(
        std::fs::read_to_string(&file1).expect("read part 1").len(),
        part1.iter().map(|l| l.len() + 1).sum::<usize>(),
        "part 1 ends with an unterminated line"
    );

    // Walk the union: B, then changes, then C, with one xid per transaction.
    let mut decoded: Vec<(i32, String)> = Vec::new();
    let mut xids: Vec<u64> = Vec::new();
    let mut open: Option<u64> = None;
    for (n, line) in part1.iter().chain(&part2).enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {n} is not JSON ({e}): {line}"));
        let xid = v["xid"]
            .as_u64()
            .unwrap_or_else(|| panic!("line {n} has no xid: {line}"));
        match (v["action"].as_str(), open) {
            (Some("B"), None) => open = Some(xid),
            (Some("I"), Some(x)) if x == xid => {
                assert_eq!(v["table"], "t", "line {n}");
                decoded.push((
                    v["columns"][0]["value"].as_i64().expect("id") as i32,
                    v["columns"][1]["value"].as_str().expect("v").to_string(),
                ));
            }
            (Some("C"), Some(x)) if x == xid => {
                xids.push(xid);
                open = None;
            }
            _ => panic!("unexpected line {n} (open transaction: {open:?}): {line}"),
        }
    }
    assert_eq!(open, None, "the stream ends inside a transaction");
    assert_eq!(xids.len(), 50, "committed transactions decoded");
    assert!(
        xids.windows(2).all(|w| w[0] < w[1]),
        "transactions out of order or repeated: {xids:?}"
    );

    let table: Vec<(i32, String)> = db
        .conn
        .client
        .query("select id, v from e2e_recv.t order by id", &[])
        .expect("select")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        decoded, table,
        "decoded inserts (in stream order) differ from the table (in id order)"
    );
    assert_eq!(
        table.len(),
        (1..=50).map(|k| k % 3 + 1).sum::<i32>() as usize
    );
    println!(
        "[recv] {} + {} lines, 50 transactions, {} rows: nothing lost or repeated across the restart",
        part1.len(),
        part2.len(),
        decoded.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Splits a file of pretty-printed documents (each message followed by a
/// newline) into the documents' texts, checking each parses.
fn documents(text: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut start = 0;
    while let Some(v) = stream.next() {
        v.unwrap_or_else(|e| panic!("not a stream of JSON documents ({e}): {text}"));
        let end = stream.byte_offset();
        docs.push(text[start..end].trim_start_matches('\n').to_string());
        start = end;
    }
    assert_eq!(text[start..].trim(), "", "trailing garbage");
    docs
}

#[test]
fn option_without_value_means_true() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "recvpretty",
        "create table e2e_recvpretty.t (id int primary key, v text)",
    );
    db.run(&[
        "insert into e2e_recvpretty.t values (1, 'a'), (2, 'tab\there')",
        "update e2e_recvpretty.t set v = 'b' where id = 1",
        "begin; delete from e2e_recvpretty.t where id = 2; select pg_logical_emit_message(true, 'p', 'm'); commit",
    ]);
    // Stop at the last decoded row (the delete's commit).
    let endpos = db.query_one_string(&format!(
        "select max(lsn)::text from pg_logical_slot_peek_changes('{}', NULL, NULL)",
        slots.pubjson
    ));
    let dir = scratch_dir("recvpretty");
    let mut texts = Vec::new();
    for (slot, name) in [(&slots.pubjson, "pubjson"), (&slots.wal2json, "wal2json")] {
        let file = dir.join(format!("{name}.json"));
        let mut rl = RecvLogical::start(slot, &file, &[("pretty-print", None)], &["-E", &endpos]);
        let status = rl.wait_exit(TIMEOUT);
        assert!(
            status.success(),
            "pg_recvlogical ({name}) failed: {}",
            rl.stderr()
        );
        texts.push(std::fs::read_to_string(&file).expect("read output"));
    }
    let pubjson = documents(&texts[0]);
    // wal2json's empty transactions (if any happened meanwhile) aside.
    let wal2json: Vec<String> = documents(&texts[1])
        .into_iter()
        .filter(|d| {
            serde_json::from_str::<Value>(d)
                .map(|v| v["change"] != Value::Array(vec![]))
                .unwrap_or(true)
        })
        .collect();
    assert_eq!(pubjson.len(), 3, "documents: {pubjson:#?}");
    assert_eq!(
        pubjson, wal2json,
        "pubjson and wal2json differ with -o pretty-print"
    );
    assert!(
        pubjson[0].starts_with("{\n\t\"change\": [\n\t\t{\n\t\t\t\"kind\": \"insert\",\n\t\t\t\"schema\": \"e2e_recvpretty\",\n"),
        "not pretty-printed: {}",
        pubjson[0]
    );
    println!(
        "[recvpretty] -o pretty-print: {} pretty-printed documents, identical to wal2json's",
        pubjson.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One transaction of a format 2 stream with `include-lsn`: its commit LSN
/// and the ids it inserted (none for an empty transaction).
fn transactions_of(lines: &[String]) -> Vec<(u64, Vec<i64>)> {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["action"].as_str() {
            Some("B") => ids.clear(),
            Some("I") => ids.push(v["columns"][0]["value"].as_i64().expect("id")),
            Some("C") => out.push((
                pubjson_e2e::lsn(v["lsn"].as_str().expect("lsn")),
                std::mem::take(&mut ids),
            )),
            _ => panic!("unexpected line {line}"),
        }
    }
    out
}

/// docs/compatibility.md's switch from wal2json, with writers writing
/// throughout: a consumer of a wal2json slot gets a pubjson slot created
/// beside it, reads the old slot until its confirmed position passes the
/// new slot's creation LSN, then goes on with the new slot, skipping what
/// it applied already by commit LSN. Every committed row is applied
/// exactly once; the transactions applied twice otherwise are exactly the
/// old slot's from the cut-over point on; wal2json's empty transactions
/// (DDL) have no counterpart in pubjson's stream.
#[test]
fn a_wal2json_consumer_switches_slots_without_a_gap_or_a_duplicate() {
    require_wal2json!();
    let mut db = TestDb::new("switch");
    db.exec("create table e2e_switch.t (id int primary key)");
    let (old_slot, _old_guard) = db.create_slot("wal2json", "w2j");
    let dir = scratch_dir("switch");
    let opts = [("format-version", Some("2")), ("include-lsn", Some("1"))];

    // Writers: one row per transaction, now and then a CREATE TABLE (an
    // empty transaction), until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let writer = {
        let (stop, committed) = (stop.clone(), committed.clone());
        let dbname = pubjson_e2e::pg_env().dbname;
        std::thread::spawn(move || {
            let mut c = pubjson_e2e::Server::main().connect(&dbname);
            let mut k = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                k += 1;
                pubjson_e2e::exec(&mut c, &format!("insert into e2e_switch.t values ({k})"));
                if k % 10 == 0 {
                    pubjson_e2e::exec(&mut c, &format!("create table e2e_switch.ddl_{k} (a int)"));
                }
                committed.store(k, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let written = |n: i64| {
        wait_for(&format!("{n} transactions written"), TIMEOUT, || {
            committed.load(std::sync::atomic::Ordering::SeqCst) >= n
        })
    };

    // The consumer on the old slot, then the new slot beside it.
    let old_file = dir.join("wal2json.jsonl");
    let mut old = RecvLogical::start(&old_slot, &old_file, &opts, &[]);
    written(30);
    let (new_slot, _new_guard) = db.create_slot("pubjson", "pj");
    let cutover: String = db
        .conn
        .client
        .query_one(
            "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = $1",
            &[&new_slot],
        )
        .expect("the new slot")
        .get(0);
    let cutover_lsn = pubjson_e2e::lsn(&cutover);
    // The old consumer reads on until its slot has passed the point.
    let client = &mut db.conn.client;
    wait_for(
        &format!("{old_slot} confirmed past {cutover}"),
        TIMEOUT,
        || {
            client
            .query_one(
                "select confirmed_flush_lsn >= $2::text::pg_lsn from pg_replication_slots where slot_name = $1",
                &[&old_slot, &cutover],
            )
            .expect("pg_replication_slots")
            .get(0)
        },
    );
    assert!(
        old.stop().success(),
        "pg_recvlogical failed: {}",
        old.stderr()
    );

    // The consumer goes on with the new slot while the writers write.
    let new_file = dir.join("pubjson.jsonl");
    let mut new = RecvLogical::start(&new_slot, &new_file, &opts, &[]);
    let so_far = committed.load(std::sync::atomic::Ordering::SeqCst);
    written(so_far + 30);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().expect("writer");
    let last = committed.load(std::sync::atomic::Ordering::SeqCst);
    wait_for(&format!("row {last} received"), TIMEOUT, || {
        transactions_of(&complete_lines(&new_file))
            .iter()
            .any(|(_, ids)| ids.contains(&last))
    });
    assert!(
        new.stop().success(),
        "pg_recvlogical failed: {}",
        new.stderr()
    );

    // The consumer: the old stream, then the new one, skipping a
    // transaction whose commit LSN is not greater than the last applied.
    let old_txns = transactions_of(&complete_lines(&old_file));
    let new_txns = transactions_of(&complete_lines(&new_file));
    let mut applied_lsn = 0u64;
    let mut applied: Vec<i64> = Vec::new();
    let mut skipped = Vec::new();
    for (commit, ids) in old_txns.iter().chain(&new_txns) {
        if *commit <= applied_lsn {
            skipped.push(*commit);
            continue;
        }
        applied_lsn = *commit;
        applied.extend(ids);
    }
    let table: Vec<i64> = db
        .conn
        .client
        .query("select id::int8 from e2e_switch.t order by id", &[])
        .expect("select")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(table.len() as i64, last);
    let mut sorted = applied.clone();
    sorted.sort();
    assert!(
        sorted == table,
        "every row applied exactly once: {} applied, {} in the table",
        sorted.len(),
        table.len()
    );
    // Skipped: the old slot's transactions from the cut-over point on (its
    // empty ones have no counterpart to skip).
    let after_cutover: Vec<u64> = old_txns
        .iter()
        .filter(|(commit, ids)| *commit >= cutover_lsn && !ids.is_empty())
        .map(|(commit, _)| *commit)
        .collect();
    assert!(
        !after_cutover.is_empty(),
        "the old slot went past the point"
    );
    assert!(
        skipped == after_cutover,
        "skipped {} transactions, the old slot had {} from the point on; first difference at {:?}",
        skipped.len(),
        after_cutover.len(),
        skipped.iter().zip(&after_cutover).position(|(a, b)| a != b)
    );
    assert!(
        new_txns.iter().all(|(commit, _)| *commit >= cutover_lsn),
        "the new slot starts at its creation point"
    );
    assert!(
        old_txns.iter().any(|(_, ids)| ids.is_empty())
            && new_txns.iter().all(|(_, ids)| !ids.is_empty()),
        "wal2json's empty transactions, none from pubjson"
    );
    println!(
        "[switch] {} transactions from wal2json, {} from pubjson, {} skipped, {} rows once each",
        old_txns.len(),
        new_txns.len(),
        skipped.len(),
        applied.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
