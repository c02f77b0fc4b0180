//! Streaming through a real walsender with pg_recvlogical: stop and
//! restart without losing or repeating a change, and option values given
//! without an argument (`-o pretty-print`).

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
