//! The differential check against wal2json: a `pubjson` slot and a
//! `wal2json` slot created at the same point (the second is a copy of the
//! first), a workload, and both peeked with the same options. pubjson with
//! `skip-empty-xacts=false` must equal wal2json row for row (lsn, xid,
//! data); pubjson with its defaults must equal wal2json minus its empty
//! transactions. Warnings raised while decoding are compared too.
//!
//! Creating a logical slot waits for every running transaction, so tests
//! are serialized: a process-wide mutex (threads of one test binary) plus a
//! PostgreSQL advisory lock (several test processes, e.g. under nextest).
//! They run in their own database (`pubjson_e2e`, created on first use) so
//! that other users of the cluster do not appear in the decoded streams,
//! each test in its own schema `e2e_<name>`, and every peek stops at the
//! LSN where the workload ended (`upto_lsn`).

use crate::env::pg_env;
use crate::server::{describe_error, lock, try_drop_slots, Conn, Server, Slots, RELEASE_TIMEOUT};
use crate::truncate;
use crate::wait::{retry, wait_for};
use postgres::Client;
use serde_json::Value;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Creates the test database once per process (and tolerates another
/// process doing it at the same time).
fn ensure_database() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = pg_env();
        let mut client = Server::main().connect_as(&env.maintenance_db, &env.user);
        let exists = client
            .query_opt(
                "select 1 from pg_database where datname = $1",
                &[&env.dbname],
            )
            .expect("pg_database")
            .is_some();
        if !exists {
            let sql = format!("create database \"{}\"", env.dbname.replace('"', "\"\""));
            match client.batch_execute(&sql) {
                Ok(()) => {}
                Err(e) if e.code() == Some(&postgres::error::SqlState::DUPLICATE_DATABASE) => {}
                Err(e) => panic!("{sql}: {}", describe_error(&e)),
            }
        }
    });
}

/// A connection to the test database (`$PUBJSON_E2E_DATABASE`) that keeps
/// the notices the server sends.
pub fn connect() -> Conn {
    ensure_database();
    connect_db(&pg_env().dbname)
}

/// A connection to database `dbname` of the test cluster (which must
/// exist) that keeps the notices the server sends.
pub fn connect_db(dbname: &str) -> Conn {
    Server::main().connect_keeping_notices(dbname, &pg_env().user)
}

/// Whether the server under test has wal2json. Debian 12 packages it for
/// PostgreSQL 15 only; for the 16, 17 and 18 that scripts/build-pg.sh
/// provides there is no wal2json the machine can install (Debian's source
/// tarball is not on the package mirror, it has no binary for 16, its
/// binaries for 17/18 need a newer glibc), so the differential tests
/// against it are skipped there; the comparisons with pgoutput still run.
/// Use [`require_wal2json!`](crate::require_wal2json).
pub fn wal2json_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    // LOAD fails when the library is missing or cannot be loaded (a binary
    // built for another glibc, say).
    *INSTALLED.get_or_init(|| connect().client.batch_execute("load 'wal2json'").is_ok())
}

/// First statement of a test that compares with wal2json: returns early
/// (noting the skip) when the server has no wal2json.
#[macro_export]
macro_rules! require_wal2json {
    () => {
        if !$crate::wal2json_installed() {
            $crate::note_skip(
                &$crate::env::current_test(module_path!()),
                "wal2json is not installed for this server",
            );
            return;
        }
    };
}

// ---------------------------------------------------------------------------
// Serialization
// ---------------------------------------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());
const ADVISORY_KEY: i64 = 0x0070_7562_6a73_6f6e; // "pubjson"

/// Held for the whole of a test that creates slots.
pub struct Serial {
    _guard: MutexGuard<'static, ()>,
    _lock_conn: Client,
}

pub fn serialize() -> Serial {
    let guard = lock(&SERIAL);
    let mut conn = connect();
    conn.client
        .execute("select pg_advisory_lock($1)", &[&ADVISORY_KEY])
        .unwrap_or_else(|e| panic!("pg_advisory_lock: {e}"));
    Serial {
        _guard: guard,
        _lock_conn: conn.client,
    }
}

// ---------------------------------------------------------------------------
// Rows, cases and JSON checks
// ---------------------------------------------------------------------------

/// One row of `pg_logical_slot_peek_changes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub lsn: String,
    pub xid: String,
    pub data: String,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} | {} | {}", self.lsn, self.xid, self.data)
    }
}

/// A named set of plugin options.
#[derive(Debug, Clone)]
pub struct Case {
    pub label: String,
    pub opts: Vec<(String, String)>,
}

pub fn case(label: &str, opts: &[(&str, &str)]) -> Case {
    Case {
        label: label.to_string(),
        opts: opts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "y" | "yes" | "on" => Some(true),
        "0" | "f" | "false" | "n" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Case {
    /// The same case with more options appended (later options win).
    pub fn with(&self, label_suffix: &str, extra: &[(&str, &str)]) -> Case {
        let mut c = self.clone();
        c.label = format!("{} {}", c.label, label_suffix);
        c.opts
            .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        c
    }

    /// The value of the last occurrence of an option.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn format(&self) -> u8 {
        self.get("format-version")
            .map_or(1, |v| v.trim().parse().unwrap_or(1))
    }

    /// Format 1 with write-in-chunks: rows are fragments of documents.
    pub fn chunked(&self) -> bool {
        self.format() == 1
            && self
                .get("write-in-chunks")
                .and_then(parse_bool)
                .unwrap_or(false)
    }

    /// `option=value ...` for messages.
    pub fn describe(&self) -> String {
        self.opts
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The options as the SQL `VARIADIC` literal, for reproduction recipes.
    pub fn sql_args(&self) -> String {
        self.opts
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(|s| format!("'{}'", s.replace('\'', "''")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn flatten(opts: &[(String, String)]) -> Vec<String> {
    opts.iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()])
        .collect()
}

/// Parses the output as JSON documents: one per row, except format 1 with
/// write-in-chunks, where a transaction's rows are concatenated first.
pub fn parse_documents(rows: &[Row], chunked: bool) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    if !chunked {
        for (i, r) in rows.iter().enumerate() {
            let v: Value = serde_json::from_str(&r.data).map_err(|e| {
                format!(
                    "row {i} is not valid JSON ({e}): {}",
                    truncate(&r.data, 400)
                )
            })?;
            docs.push(v);
        }
        return Ok(docs);
    }
    let mut buf = String::new();
    let mut start = 0;
    for (i, r) in rows.iter().enumerate() {
        if buf.is_empty() {
            start = i;
        }
        buf.push_str(&r.data);
        // A document ends with a closing chunk (`]}`), or is a single row
        // (a non-transactional message).
        if buf.len() == r.data.len() || r.data.trim_start().starts_with(']') {
            match serde_json::from_str::<Value>(&buf) {
                Ok(v) => {
                    docs.push(v);
                    buf.clear();
                }
                Err(e) if buf.len() != r.data.len() => {
                    return Err(format!(
                        "rows {start}..={i} do not concatenate to valid JSON ({e}): {}",
                        truncate(&buf, 400)
                    ))
                }
                Err(_) => {}
            }
        }
    }
    if !buf.is_empty() {
        return Err(format!(
            "rows {start}.. end with an unterminated document: {}",
            truncate(&buf, 400)
        ));
    }
    Ok(docs)
}

/// wal2json's rows without its empty transactions, i.e. what pubjson emits
/// with `skip-empty-xacts` (its default).
pub fn strip_empty_xacts(rows: &[Row], format: u8, chunked: bool) -> Vec<Row> {
    let action = |r: &Row| -> Option<String> {
        serde_json::from_str::<Value>(&r.data)
            .ok()?
            .get("action")?
            .as_str()
            .map(str::to_string)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let r = &rows[i];
        let next = rows.get(i + 1);
        let empty_pair = match (format, chunked) {
            (2, _) => next.is_some_and(|n| {
                action(r).as_deref() == Some("B") && action(n).as_deref() == Some("C")
            }),
            (_, true) => next.is_some_and(|n| {
                r.data.trim_end().ends_with('[') && n.data.trim_start().starts_with(']')
            }),
            _ => false,
        };
        if empty_pair {
            i += 2;
            continue;
        }
        let empty_doc = format == 1
            && !chunked
            && serde_json::from_str::<Value>(&r.data)
                .ok()
                .and_then(|v| v.get("change").and_then(Value::as_array).map(Vec::is_empty))
                .unwrap_or(false);
        if !empty_doc {
            out.push(r.clone());
        }
        i += 1;
    }
    out
}

/// Both texts around their first difference.
fn show_difference(a: &str, b: &str) -> (String, String) {
    let p = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let window = |s: &str| {
        let mut from = p.saturating_sub(120);
        while !s.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (p + 240).min(s.len());
        while !s.is_char_boundary(to) {
            to += 1;
        }
        format!(
            "{}{}{}   [first difference at byte {p} of {}]",
            if from > 0 { "…" } else { "" },
            &s[from..to],
            if to < s.len() { "…" } else { "" },
            s.len()
        )
    };
    (window(a), window(b))
}

/// `None` when equal, else a description of the first differing row.
pub fn diff_rows(
    expected_name: &str,
    expected: &[Row],
    actual_name: &str,
    actual: &[Row],
) -> Option<String> {
    if expected == actual {
        return None;
    }
    let i = expected
        .iter()
        .zip(actual)
        .take_while(|(e, a)| e == a)
        .count();
    let mut msg = format!(
        "{expected_name} has {} rows, {actual_name} has {}; first difference at row {i}:",
        expected.len(),
        actual.len()
    );
    match (expected.get(i), actual.get(i)) {
        (Some(e), Some(a)) => {
            let (de, da) = show_difference(&e.data, &a.data);
            msg += &format!(
                "\n    {expected_name}: {} | {} | {de}\n    {actual_name}: {} | {} | {da}",
                e.lsn, e.xid, a.lsn, a.xid
            );
        }
        (Some(e), None) => {
            msg += &format!(
                "\n    {expected_name}: {}\n    {actual_name}: (no row)",
                truncate(&e.to_string(), 600)
            )
        }
        (None, Some(a)) => {
            msg += &format!(
                "\n    {expected_name}: (no row)\n    {actual_name}: {}",
                truncate(&a.to_string(), 600)
            )
        }
        (None, None) => {}
    }
    Some(msg)
}

// ---------------------------------------------------------------------------
// The test database and slots
// ---------------------------------------------------------------------------

static SLOT_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// What a peek or get of a slot returned: its rows and the notices raised
/// while decoding.
pub type Decoded = Result<(Vec<Row>, Vec<String>), postgres::Error>;

/// A serialized test with its own schema (dropped and recreated at start).
pub struct TestDb {
    pub conn: Conn,
    pub name: String,
    pub schema: String,
    /// Where the workload ended ([`Self::flush_wal`]): peeks decode up to
    /// here (`upto_lsn`), so every peek of a case sees the same WAL.
    pub upto_lsn: Option<String>,
    // Dropped last: the lock outlives everything else in the test.
    _serial: Serial,
}

impl TestDb {
    /// `name` is short, lowercase ASCII; the schema is `e2e_<name>`.
    pub fn new(name: &str) -> TestDb {
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        let serial = serialize();
        let mut conn = connect();
        let schema = format!("e2e_{name}");
        // Leftover slots of an earlier, killed run of this test.
        let leftovers = format!("{schema}\\_%");
        try_drop_slots(
            &mut conn.client,
            Slots::NamedLike(&leftovers),
            RELEASE_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("dropping leftover slots: {e}"));
        let mut db = TestDb {
            conn,
            name: name.to_string(),
            schema: schema.clone(),
            upto_lsn: None,
            _serial: serial,
        };
        db.exec(&format!(
            "drop schema if exists {schema} cascade; create schema {schema}"
        ));
        db
    }

    /// [`Self::new`], then `ddl` (the tables of the test), then
    /// [`Self::create_slot_pair`]: the opening of most differential tests.
    pub fn with_slot_pair(name: &str, ddl: &str) -> (TestDb, SlotPair) {
        let mut db = TestDb::new(name);
        db.exec(ddl);
        let slots = db.create_slot_pair();
        (db, slots)
    }

    /// Runs SQL with the simple-query protocol. A string of several
    /// statements without BEGIN/COMMIT is one transaction.
    pub fn exec(&mut self, sql: &str) {
        if let Err(e) = self.conn.client.batch_execute(sql) {
            panic!(
                "SQL failed: {}\n  {}",
                describe_error(&e),
                truncate(sql, 2000)
            );
        }
    }

    /// Runs each string as its own transaction (or explicit transaction
    /// block), then makes sure all of it is flushed (see [`Self::flush_wal`]).
    pub fn run(&mut self, transactions: &[&str]) {
        for t in transactions {
            self.exec(t);
        }
        self.flush_wal();
    }

    /// Marks the end of the workload: waits until the WAL written so far is
    /// flushed, and makes later peeks decode up to here only. Decoding reads
    /// only flushed WAL, and a record written by a transaction without an
    /// xid (a non-transactional message in autocommit) is flushed
    /// asynchronously by the WAL writer; activity after the workload
    /// (autovacuum) must not make two peeks differ either.
    pub fn flush_wal(&mut self) {
        let target = self.query_one_string("select pg_current_wal_insert_lsn()::text");
        let client = &mut self.conn.client;
        wait_for(
            &format!("WAL flushed up to {target}"),
            Duration::from_secs(30),
            || {
                client
                    .query_one(
                        "select pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                        &[&target],
                    )
                    .map(|r| r.get::<_, bool>(0))
                    .unwrap_or_else(|e| panic!("pg_current_wal_flush_lsn: {}", describe_error(&e)))
            },
        );
        self.upto_lsn = Some(target);
    }

    pub fn query_one_string(&mut self, sql: &str) -> String {
        let row = self
            .conn
            .client
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
        row.get(0)
    }

    /// The server's major version (15, 17, 18...).
    pub fn server_major(&mut self) -> i32 {
        self.query_one_string("select (current_setting('server_version_num')::int / 10000)::text")
            .parse()
            .expect("server major")
    }

    /// A unique slot name for this test.
    pub fn slot_name(&self, suffix: &str) -> String {
        let n = SLOT_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}_{}_{n}_{suffix}", self.schema, std::process::id());
        assert!(name.len() < 64, "slot name {name} is too long");
        name
    }

    /// A `pubjson` slot and a `wal2json` slot copied from it, so both start
    /// at exactly the same point.
    pub fn create_slot_pair(&mut self) -> SlotPair {
        let pubjson = self.slot_name("pj");
        let wal2json = self.slot_name("w2j");
        let guard = SlotGuard {
            names: vec![pubjson.clone(), wal2json.clone()],
        };
        self.conn
            .client
            .execute(
                "select pg_create_logical_replication_slot($1, 'pubjson')",
                &[&pubjson],
            )
            .unwrap_or_else(|e| panic!("creating slot {pubjson}: {}", describe_error(&e)));
        self.conn
            .client
            .execute(
                "select pg_copy_logical_replication_slot($1, $2, false, 'wal2json')",
                &[&pubjson, &wal2json],
            )
            .unwrap_or_else(|e| {
                panic!(
                    "copying slot {pubjson} to {wal2json}: {}",
                    describe_error(&e)
                )
            });
        SlotPair {
            pubjson,
            wal2json,
            _guard: guard,
        }
    }

    /// One permanent slot for `plugin`, dropped when the guard goes.
    pub fn create_slot(&mut self, plugin: &str, suffix: &str) -> (String, SlotGuard) {
        let name = self.slot_name(suffix);
        let guard = SlotGuard {
            names: vec![name.clone()],
        };
        self.conn
            .client
            .execute(
                "select pg_create_logical_replication_slot($1, $2)",
                &[&name, &plugin],
            )
            .unwrap_or_else(|e| panic!("creating slot {name}: {}", describe_error(&e)));
        (name, guard)
    }

    /// `pg_logical_slot_peek_changes(slot, NULL, NULL, VARIADIC opts)` and
    /// the notices raised while decoding.
    pub fn peek(&mut self, slot: &str, opts: &[(String, String)]) -> Decoded {
        self.changes("peek", slot, opts)
    }

    /// Like [`Self::peek`] but consumes (`pg_logical_slot_get_changes`).
    pub fn get(&mut self, slot: &str, opts: &[(String, String)]) -> Decoded {
        self.changes("get", slot, opts)
    }

    fn changes(&mut self, how: &str, slot: &str, opts: &[(String, String)]) -> Decoded {
        self.conn.take_notices();
        let sql = format!(
            "select lsn::text, xid::text, data \
             from pg_logical_slot_{how}_changes($1, $2::text::pg_lsn, NULL, VARIADIC $3::text[])"
        );
        let rows = self
            .conn
            .client
            .query(&sql, &[&slot, &self.upto_lsn, &flatten(opts)])?;
        let rows = rows
            .iter()
            .map(|r| Row {
                lsn: r.get(0),
                xid: r.get(1),
                data: r.get(2),
            })
            .collect();
        Ok((rows, self.conn.take_notices()))
    }

    /// Peeks pubjson alone; panics on error.
    pub fn peek_ok(&mut self, slot: &str, c: &Case) -> Vec<Row> {
        match self.peek(slot, &c.opts) {
            Ok((rows, _)) => rows,
            Err(e) => panic!(
                "[{}] peek {slot} with {}: {}",
                c.label,
                c.describe(),
                describe_error(&e)
            ),
        }
    }

    /// The differential check for one case. Returns the number of rows
    /// compared with skip-empty-xacts=false and with pubjson's defaults.
    pub fn compare(&mut self, slots: &SlotPair, c: &Case) -> Result<(usize, usize), String> {
        let fail = |what: String| -> String {
            format!(
                "[{}] {} ({})\n  reproduce: select * from pg_logical_slot_peek_changes('<slot>', NULL, NULL, {})",
                c.label,
                what,
                c.describe(),
                c.sql_args()
            )
        };
        let (format, chunked) = (c.format(), c.chunked());

        let (w2j, w2j_notices) = self
            .peek(&slots.wal2json, &c.opts)
            .map_err(|e| fail(format!("wal2json failed: {}", describe_error(&e))))?;
        // The workloads must only make wal2json emit valid JSON (caveats aside).
        parse_documents(&w2j, chunked).map_err(|e| {
            fail(format!(
                "wal2json output is not valid JSON (fix the workload): {e}"
            ))
        })?;

        let full = c.with("", &[("skip-empty-xacts", "false")]);
        let (pj_full, pj_full_notices) = self.peek(&slots.pubjson, &full.opts).map_err(|e| {
            fail(format!(
                "pubjson (skip-empty-xacts=false) failed: {}",
                describe_error(&e)
            ))
        })?;
        if let Some(d) = diff_rows(
            "wal2json",
            &w2j,
            "pubjson(skip-empty-xacts=false)",
            &pj_full,
        ) {
            return Err(fail(d));
        }
        if w2j_notices != pj_full_notices {
            return Err(fail(format!(
                "notices differ\n    wal2json: {w2j_notices:?}\n    pubjson(skip-empty-xacts=false): {pj_full_notices:?}"
            )));
        }

        let (pj, pj_notices) = self
            .peek(&slots.pubjson, &c.opts)
            .map_err(|e| fail(format!("pubjson failed: {}", describe_error(&e))))?;
        let expected = strip_empty_xacts(&w2j, format, chunked);
        if let Some(d) = diff_rows("wal2json minus empty xacts", &expected, "pubjson", &pj) {
            return Err(fail(d));
        }
        if w2j_notices != pj_notices {
            return Err(fail(format!(
                "notices differ\n    wal2json: {w2j_notices:?}\n    pubjson: {pj_notices:?}"
            )));
        }
        parse_documents(&pj, chunked)
            .map_err(|e| fail(format!("pubjson output is not valid JSON: {e}")))?;
        // PUBJSON_E2E_SHOW=<part of a case label> prints that case's rows.
        if std::env::var("PUBJSON_E2E_SHOW").is_ok_and(|s| !s.is_empty() && c.label.contains(&s)) {
            for r in &pj_full {
                println!("    {r}");
            }
        }
        Ok((w2j.len(), pj.len()))
    }

    /// Runs [`Self::compare`] for every case, prints a line per case and
    /// panics at the end listing every mismatch.
    pub fn compare_all(&mut self, slots: &SlotPair, cases: &[Case]) {
        // Whatever ran since the last `run` belongs to the workload too.
        self.flush_wal();
        let mut failures = Vec::new();
        let (mut total_full, mut total_default) = (0, 0);
        for c in cases {
            match self.compare(slots, c) {
                Ok((n_full, n_default)) => {
                    total_full += n_full;
                    total_default += n_default;
                    println!(
                        "[{}] {:<60} ok: {n_full} rows equal, {n_default} with skip-empty-xacts",
                        self.name, c.label
                    );
                }
                Err(e) => {
                    println!("[{}] {:<60} MISMATCH", self.name, c.label);
                    failures.push(e);
                }
            }
        }
        println!(
            "[{}] {} cases: {} passed, {} failed; {total_full} + {total_default} rows compared",
            self.name,
            cases.len(),
            cases.len() - failures.len(),
            failures.len()
        );
        if !failures.is_empty() {
            panic!(
                "{} of {} cases differ between pubjson and wal2json:\n\n{}",
                failures.len(),
                cases.len(),
                failures.join("\n\n")
            );
        }
    }
}

impl TestDb {
    /// [`Self::compare_all`] over the whole [`option_matrix`] plus the
    /// format 1 `include-pk` cases restricted to `add_tables`.
    pub fn compare_matrix_and_pk(&mut self, slots: &SlotPair, add_tables: &str) {
        let mut cases = option_matrix();
        cases.extend(v1_include_pk_cases(add_tables));
        self.compare_all(slots, &cases);
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Best effort; keep the schema of a failed test for inspection.
        if !std::thread::panicking() {
            let _ = self
                .conn
                .client
                .batch_execute(&format!("drop schema if exists {} cascade", self.schema));
        }
    }
}

/// Drops its slots when it goes out of scope, even when the test panics.
pub struct SlotGuard {
    pub names: Vec<String>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        // A fresh connection: the test's own may be mid-failure. Retried:
        // after a server crash the cluster is in recovery for a moment.
        // (Leftovers are also dropped when the test next starts.)
        let env = pg_env();
        let mut client = match retry(Duration::from_secs(15), || {
            Server::main().try_connect(&env.dbname, &env.user)
        }) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("could not connect to drop slots {:?}: {e}", self.names);
                return;
            }
        };
        for name in &self.names {
            // Bounded: a failing test may be unwinding.
            if let Err(e) = try_drop_slots(&mut client, Slots::Named(name), Duration::from_secs(10))
            {
                eprintln!("could not drop slot {name}: {e}");
            }
        }
    }
}

/// A pubjson slot and a wal2json slot starting at the same LSN.
pub struct SlotPair {
    pub pubjson: String,
    pub wal2json: String,
    _guard: SlotGuard,
}

// ---------------------------------------------------------------------------
// Option matrix
// ---------------------------------------------------------------------------

/// The options every workload is compared under (formats 1 and 2).
pub fn option_matrix() -> Vec<Case> {
    let mut cases = Vec::new();
    for fv in ["1", "2"] {
        let c = |label: &str, extra: &[(&str, &str)]| {
            let mut opts = vec![("format-version", fv)];
            opts.extend_from_slice(extra);
            case(&format!("v{fv} {label}"), &opts)
        };
        // A label of `name` (value 1) and `name=value` words is its options.
        let o = |label: &str| {
            let opts: Vec<(&str, &str)> = label
                .split(' ')
                .map(|word| word.split_once('=').unwrap_or((word, "1")))
                .collect();
            c(label, &opts)
        };
        cases.extend([
            c("defaults", &[]),
            o("include-xids"),
            o("include-timestamp"),
            o("include-lsn"),
            o("include-origin"),
            o("include-schemas=0"),
            o("include-types=0"),
            o("include-typmod=0"),
            o("include-type-oids"),
            o("include-type-oids include-types=0"),
            o("include-domain-data-type"),
            o("include-domain-data-type include-typmod=0"),
            o("include-domain-data-type include-type-oids"),
            o("include-column-positions"),
            o("include-not-null"),
            o("include-not-null include-types=0"),
            o("include-default"),
            o("pretty-print"),
            o("actions=insert,delete"),
            o("actions=truncate"),
            c("actions=''", &[("actions", "")]),
            c(
                "actions=' update , truncate '",
                &[("actions", " update , truncate ")],
            ),
            c(
                "boolean spellings",
                &[
                    ("include-xids", "on"),
                    ("include-lsn", "yes"),
                    ("include-schemas", "OFF"),
                ],
            ),
            c(
                "later option wins",
                &[
                    ("include-xids", "1"),
                    ("include-xids", "0"),
                    ("include-types", "f"),
                    ("include-types", "t"),
                ],
            ),
        ]);
    }
    cases.extend([
        case(
            "v1 write-in-chunks",
            &[("format-version", "1"), ("write-in-chunks", "1")],
        ),
        case(
            "v1 write-in-chunks pretty-print",
            &[
                ("format-version", "1"),
                ("write-in-chunks", "1"),
                ("pretty-print", "1"),
            ],
        ),
        case(
            "v1 write-in-chunks include-xids include-lsn include-timestamp",
            &[
                ("write-in-chunks", "1"),
                ("include-xids", "1"),
                ("include-lsn", "1"),
                ("include-timestamp", "1"),
            ],
        ),
        case(
            "v1 write-in-chunks actions=insert",
            &[("write-in-chunks", "1"), ("actions", "insert")],
        ),
        case(
            "v1 many options",
            &[
                ("format-version", "1"),
                ("include-xids", "1"),
                ("include-timestamp", "1"),
                ("include-lsn", "1"),
                ("include-origin", "1"),
                ("include-type-oids", "1"),
                ("include-typmod", "0"),
                ("include-domain-data-type", "1"),
                ("include-column-positions", "1"),
                ("include-not-null", "1"),
                ("include-default", "1"),
                ("pretty-print", "1"),
                ("actions", "insert,update,delete,truncate"),
                ("filter-msg-prefixes", "nope"),
            ],
        ),
        case(
            "v1 many options write-in-chunks",
            &[
                ("include-xids", "1"),
                ("include-timestamp", "1"),
                ("include-type-oids", "1"),
                ("include-column-positions", "1"),
                ("include-not-null", "1"),
                ("include-default", "1"),
                ("pretty-print", "1"),
                ("write-in-chunks", "1"),
            ],
        ),
        case(
            "v2 include-transaction=0",
            &[("format-version", "2"), ("include-transaction", "0")],
        ),
        case(
            "v2 include-pk",
            &[("format-version", "2"), ("include-pk", "1")],
        ),
        case(
            "v2 include-pk include-types=0 include-type-oids",
            &[
                ("format-version", "2"),
                ("include-pk", "1"),
                ("include-types", "0"),
                ("include-type-oids", "1"),
            ],
        ),
        case(
            "v2 write-in-chunks (ignored)",
            &[("format-version", "2"), ("write-in-chunks", "1")],
        ),
        case(
            "v2 many options",
            &[
                ("format-version", "2"),
                ("include-xids", "1"),
                ("include-timestamp", "1"),
                ("include-lsn", "1"),
                ("include-origin", "1"),
                ("include-type-oids", "1"),
                ("include-domain-data-type", "1"),
                ("include-column-positions", "1"),
                ("include-not-null", "1"),
                ("include-default", "1"),
                ("include-pk", "1"),
                ("pretty-print", "1"),
                ("actions", "insert,update,delete,truncate"),
                ("filter-tables", "nosuch.table"),
            ],
        ),
        case(
            "v2 many options include-transaction=0",
            &[
                ("format-version", "2"),
                ("include-transaction", "0"),
                ("include-xids", "1"),
                ("include-timestamp", "1"),
                ("include-lsn", "1"),
                ("include-typmod", "0"),
                ("include-pk", "1"),
                ("include-schemas", "0"),
            ],
        ),
    ]);
    cases
}

/// Format 1 `include-pk`, restricted to what wal2json 2.5 and 2.6 agree on:
/// no DELETE (2.5 crashes) and only tables with REPLICA IDENTITY DEFAULT
/// (`add_tables`, in add-tables syntax).
pub fn v1_include_pk_cases(add_tables: &str) -> Vec<Case> {
    vec![
        case(
            "v1 include-pk (insert,update; identity default tables)",
            &[
                ("format-version", "1"),
                ("include-pk", "1"),
                ("actions", "insert,update,truncate"),
                ("add-tables", add_tables),
            ],
        ),
        case(
            "v1 include-pk pretty-print include-types=0 (insert,update; identity default tables)",
            &[
                ("include-pk", "1"),
                ("pretty-print", "1"),
                ("include-types", "0"),
                ("actions", "insert,update"),
                ("add-tables", add_tables),
            ],
        ),
        case(
            "v1 include-pk write-in-chunks (insert,update; identity default tables)",
            &[
                ("include-pk", "1"),
                ("write-in-chunks", "1"),
                ("actions", "update,insert"),
                ("add-tables", add_tables),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    //! The harness itself (no database needed).
    use super::*;

    fn rows(data: &[&str]) -> Vec<Row> {
        data.iter()
            .enumerate()
            .map(|(i, d)| Row {
                lsn: format!("0/{i}"),
                xid: "1".into(),
                data: d.to_string(),
            })
            .collect()
    }

    #[test]
    fn strips_empty_transactions_in_every_format() {
        let v2 = rows(&[
            r#"{"action":"B"}"#,
            r#"{"action":"C"}"#,
            r#"{"action":"B"}"#,
            r#"{"action":"M"}"#,
            r#"{"action":"C"}"#,
        ]);
        assert_eq!(strip_empty_xacts(&v2, 2, false), v2[2..].to_vec());
        let v1 = rows(&[
            r#"{"change":[]}"#,
            r#"{"xid":5,"change":[{"kind":"message"}]}"#,
            "{\n\t\"change\": [\n\t]\n}",
        ]);
        assert_eq!(strip_empty_xacts(&v1, 1, false), v1[1..2].to_vec());
        let chunks = rows(&[
            r#"{"xid":1,"change":["#,
            "]}",
            r#"{"change":["#,
            r#"{"kind":"insert"}"#,
            "]}",
        ]);
        assert_eq!(strip_empty_xacts(&chunks, 1, true), chunks[2..].to_vec());
        let pretty_chunks = rows(&["{\n\t\"change\": [", "\t]\n}"]);
        assert!(strip_empty_xacts(&pretty_chunks, 1, true).is_empty());
    }

    #[test]
    fn reassembles_chunked_documents() {
        let chunks = rows(&[
            r#"{"change":["#,
            r#"{"a":1}"#,
            r#",{"a":2}"#,
            "]}",
            r#"{"change":[{"m":1}]}"#,
        ]);
        let docs = parse_documents(&chunks, true).expect("valid");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["change"][1]["a"], 2);
        assert!(parse_documents(&rows(&[r#"{"change":["#, r#",{"a":1}"#, "]}"]), true).is_err());
        assert!(parse_documents(&rows(&[r#"{"change":["#]), true).is_err());
        assert!(parse_documents(&rows(&[r#"{"a":"b"c"}"#]), false).is_err());
    }

    #[test]
    fn any_difference_is_reported() {
        let a = rows(&[r#"{"action":"B"}"#, r#"{"a":1.50}"#]);
        assert_eq!(diff_rows("x", &a, "y", &a), None);
        let mut b = a.clone();
        b[1].data = r#"{"a":1.5}"#.into();
        assert!(diff_rows("x", &a, "y", &b)
            .expect("differs")
            .contains("first difference at row 1"));
        let mut c = a.clone();
        c[0].lsn = "0/9".into();
        assert!(diff_rows("x", &a, "y", &c).is_some());
        assert!(diff_rows("x", &a, "y", &a[..1]).is_some());
    }

    #[test]
    fn case_options() {
        let c = case(
            "c",
            &[
                ("format-version", "2"),
                ("write-in-chunks", "1"),
                ("format-version", "1"),
            ],
        );
        assert_eq!((c.format(), c.chunked()), (1, true));
        assert_eq!(
            c.sql_args(),
            "'format-version', '2', 'write-in-chunks', '1', 'format-version', '1'"
        );
        assert!(!case("d", &[("format-version", "2"), ("write-in-chunks", "on")]).chunked());
    }
}
