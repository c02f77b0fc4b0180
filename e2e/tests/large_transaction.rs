//! One transaction of 3,000,000 narrow rows decoded through pg_recvlogical
//! in format 2 and in format 1. In format 1 the transaction is a single
//! ~360 MB document, which pubjson writes in pieces of about 16 MB (split
//! between changes; each piece is a line in pg_recvlogical's file), so that
//! it never reaches PostgreSQL's 1 GB limit: the lines concatenated must
//! parse as one document holding every change.

use pubjson_e2e::{scratch_dir, wait_for, RecvLogical, TestDb};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

const ROWS: usize = 3_000_000;
const TIMEOUT: Duration = Duration::from_secs(600);
const PIECE: usize = 16 * 1024 * 1024;

/// The last `n` bytes of a file (lossy), or "" if it does not exist yet.
fn tail(path: &Path, n: u64) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(n)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Streams the slot in `format` until the marker transaction (committed
/// after the big one) has been written, then stops pg_recvlogical.
fn receive(slot: &str, file: &Path, format: &str) -> Duration {
    let marker_tail = match format {
        "1" => format!("{{\"change\":[{}]}}\n", v1_insert("marker", 1)),
        _ => format!("{}\n{{\"action\":\"C\"}}\n", v2_insert("marker", 1)),
    };
    let started = Instant::now();
    let mut rl = RecvLogical::start(slot, file, &[("format-version", Some(format))], &[]);
    wait_for(
        &format!("the marker transaction in {}", file.display()),
        TIMEOUT,
        || {
            assert!(rl.running(), "pg_recvlogical exited: {}", rl.stderr());
            tail(file, 4096).ends_with(&marker_tail)
        },
    );
    let elapsed = started.elapsed();
    assert!(
        rl.stop().success(),
        "pg_recvlogical failed: {}",
        rl.stderr()
    );
    elapsed
}

fn v2_insert(table: &str, id: usize) -> String {
    format!(
        r#"{{"action":"I","schema":"e2e_big","table":"{table}","columns":[{{"name":"id","type":"integer","value":{id}}}]}}"#
    )
}

fn v1_insert(table: &str, id: usize) -> String {
    format!(
        r#"{{"kind":"insert","schema":"e2e_big","table":"{table}","columnnames":["id"],"columntypes":["integer"],"columnvalues":[{id}]}}"#
    )
}

#[test]
fn three_million_rows_in_one_transaction() {
    let test_started = Instant::now();
    let mut db = TestDb::new("big");
    db.exec("create table e2e_big.t (id int); create table e2e_big.marker (id int)");
    let (slot2, _guard2) = db.create_slot("pubjson", "v2");
    let (slot1, _guard1) = db.create_slot("pubjson", "v1");
    let t = Instant::now();
    db.exec(&format!(
        "insert into e2e_big.t select generate_series(1, {ROWS})"
    ));
    db.exec("insert into e2e_big.marker values (1)");
    println!(
        "[big] inserted {ROWS} rows in one transaction in {:?}",
        t.elapsed()
    );
    let dir = scratch_dir("big");

    // Format 2: one line per change.
    let file2 = dir.join("v2.jsonl");
    let took = receive(&slot2, &file2, "2");
    let t = Instant::now();
    let mut lines = std::io::BufReader::new(std::fs::File::open(&file2).expect("open"))
        .lines()
        .map(|l| l.expect("read line"));
    assert_eq!(lines.next().as_deref(), Some(r#"{"action":"B"}"#));
    let mut count = 0;
    let mut last = String::new();
    for line in lines.by_ref() {
        if line == r#"{"action":"C"}"# {
            break;
        }
        count += 1;
        if line != v2_insert("t", count) {
            panic!("format 2 change {count} is {line}");
        }
        if count == 1 {
            let v: Value = serde_json::from_str(&line).expect("first change is JSON");
            assert_eq!(v["columns"][0]["value"], 1);
        }
        last = line;
    }
    assert_eq!(count, ROWS, "format 2 changes");
    let v: Value = serde_json::from_str(&last).expect("last change is JSON");
    assert_eq!(
        (
            v["action"].as_str(),
            v["table"].as_str(),
            v["columns"][0]["value"].as_u64()
        ),
        (Some("I"), Some("t"), Some(ROWS as u64))
    );
    let rest: Vec<String> = lines.collect();
    assert_eq!(
        rest,
        [
            r#"{"action":"B"}"#.to_string(),
            v2_insert("marker", 1),
            r#"{"action":"C"}"#.to_string()
        ]
    );
    let size2 = std::fs::metadata(&file2).expect("size").len();
    std::fs::remove_file(&file2).expect("remove");
    println!(
        "[big] format 2: {count} changes, {size2} bytes, streamed in {took:?}, checked in {:?}",
        t.elapsed()
    );

    // Format 1: one document, in pieces.
    let file1 = dir.join("v1.json");
    let took = receive(&slot1, &file1, "1");
    let t = Instant::now();
    let text = std::fs::read_to_string(&file1).expect("read");
    let mut pieces: Vec<&str> = text
        .strip_suffix('\n')
        .expect("ends with a newline")
        .split('\n')
        .collect();
    let marker = pieces.pop().expect("marker document");
    assert_eq!(
        marker,
        format!(r#"{{"change":[{}]}}"#, v1_insert("marker", 1))
    );
    let sizes: Vec<usize> = pieces.iter().map(|p| p.len()).collect();
    let document = pieces.concat();
    drop(pieces);
    drop(text);
    assert!(
        document.len() > PIECE,
        "the document is only {} bytes",
        document.len()
    );
    assert!(
        sizes.len() > 1,
        "a {} byte document came as one message",
        document.len()
    );
    for (i, size) in sizes.iter().enumerate() {
        assert!(*size < PIECE + 4096, "piece {i} has {size} bytes");
        assert!(
            i + 1 == sizes.len() || *size >= PIECE,
            "piece {i} has only {size} bytes"
        );
    }
    let parsed: HashMap<String, Vec<&RawValue>> = serde_json::from_str(&document)
        .unwrap_or_else(|e| panic!("the reassembled format 1 document is not valid JSON: {e}"));
    assert_eq!(parsed.keys().collect::<Vec<_>>(), ["change"]);
    let changes = &parsed["change"];
    assert_eq!(changes.len(), ROWS, "format 1 changes");
    for (i, c) in changes.iter().enumerate() {
        if c.get() != v1_insert("t", i + 1) {
            panic!("format 1 change {} is {}", i + 1, c.get());
        }
    }
    let first: Value = serde_json::from_str(changes[0].get()).expect("JSON");
    let last: Value = serde_json::from_str(changes[ROWS - 1].get()).expect("JSON");
    assert_eq!(
        (first["kind"].as_str(), first["columnvalues"][0].as_u64()),
        (Some("insert"), Some(1))
    );
    assert_eq!(
        (last["kind"].as_str(), last["columnvalues"][0].as_u64()),
        (Some("insert"), Some(ROWS as u64))
    );
    println!(
        "[big] format 1: {} changes in one {} byte document written as {} pieces {:?}, streamed in {took:?}, checked in {:?}",
        changes.len(),
        document.len(),
        sizes.len(),
        sizes,
        t.elapsed()
    );
    drop(parsed);
    drop(document);
    let _ = std::fs::remove_dir_all(&dir);
    println!("[big] total {:?}", test_started.elapsed());
}
