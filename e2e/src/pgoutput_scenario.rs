//! The scenario harness of the pgoutput differential suite
//! (`tests/publications.rs`): its own database, slots created at the same
//! point (one `pgoutput` slot, copies of it for the other plugins), both
//! plugins peeked with the same publications, decoded and compared
//! ([`crate::stream_comparison`]), everything dropped at the end, even when
//! the test panics.

use crate::change_stream::{show_items, Item};
use crate::pgoutput_proto::decode_pgoutput;
use crate::pubjson_reader::read_pubjson;
use crate::stream_comparison::{compare_streams, Stats};
use crate::test_decoding_reader::read_test_decoding;
use crate::{db_err, truncate, wait_for, DbErr, Server};
use postgres::types::FromSql;
use postgres::Client;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The slots of one comparison, all at the same starting point.
#[derive(Debug, Clone)]
pub struct Slots {
    pub pgoutput: String,
    pub pubjson: String,
    pub raw: String,
}

/// What a pubjson peek returned, with its matching pgoutput peek.
pub struct Peeked {
    pub pgoutput: Result<Vec<Vec<u8>>, DbErr>,
    pub pubjson: Result<Vec<String>, DbErr>,
}

#[derive(Debug, Clone, Default)]
pub struct Check<'a> {
    /// `messages` passed to both plugins (None: not passed).
    pub messages: Option<bool>,
    /// upto_lsn of the peeks.
    pub upto: Option<&'a str>,
    /// pgoutput must send at least this many changes (the case is not vacuous).
    pub min_changes: usize,
    /// pubjson must mark exactly this many changes as transformed.
    pub transformed: Option<usize>,
}

/// One scenario: a database of its own (dropped and recreated at the start,
/// dropped at the end with its slots).
pub struct Scenario {
    pub name: String,
    pub dbname: String,
    pub db: Client,
    pub dec: Client,
    started: Instant,
    cases: usize,
    totals: Stats,
}

/// What a peek gave, for failure messages.
fn outcome<T>(peek: &Result<Vec<T>, DbErr>) -> String {
    match peek {
        Ok(rows) => format!("returns {} rows", rows.len()),
        Err(e) => e.to_string(),
    }
}

impl Scenario {
    /// `name`: lowercase ASCII; the database is `pubjson_pub_<name>`.
    pub fn new(name: &str) -> Scenario {
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        let dbname = format!("pubjson_pub_{name}");
        let server = Server::main();
        // Retried: the server may be restarting after a backend crash.
        let db = server.fresh_database(&dbname);
        Scenario {
            name: name.to_string(),
            db,
            dec: server.connect_retrying(&dbname, Duration::from_secs(20)),
            dbname,
            started: Instant::now(),
            cases: 0,
            totals: Stats::default(),
        }
    }

    /// The server's major version (15, 17, 18...).
    pub fn server_major(&mut self) -> i32 {
        let row = self
            .db
            .query_one(
                "select current_setting('server_version_num')::int / 10000",
                &[],
            )
            .unwrap_or_else(|e| panic!("[{}] server_version_num: {}", self.name, db_err(&e)));
        row.get(0)
    }

    pub fn try_exec(&mut self, sql: &str) -> Result<(), DbErr> {
        self.db.batch_execute(sql).map_err(|e| db_err(&e))
    }

    pub fn exec(&mut self, sql: &str) {
        if let Err(e) = self.try_exec(sql) {
            panic!("[{}] SQL failed: {e}\n  {}", self.name, truncate(sql, 2000));
        }
    }

    /// Runs each string as one transaction (a string of several statements
    /// without BEGIN is one transaction in the simple-query protocol).
    pub fn run(&mut self, transactions: &[&str]) {
        for t in transactions {
            self.exec(t);
        }
    }

    /// Runs `sql` in a transaction and returns its xid (assigned if needed).
    pub fn xact(&mut self, sql: &str, commit: bool) -> u32 {
        self.exec("begin");
        self.exec(sql);
        let xid: String = self
            .db
            .query_one("select txid_current()::text", &[])
            .unwrap_or_else(|e| panic!("txid_current: {}", db_err(&e)))
            .get(0);
        self.exec(if commit { "commit" } else { "rollback" });
        xid.parse::<u64>()
            .map(|x| (x & 0xffff_ffff) as u32)
            .unwrap_or_else(|e| panic!("xid {xid}: {e}"))
    }

    pub fn query_string(&mut self, sql: &str) -> String {
        self.db
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {}", db_err(&e)))
            .get(0)
    }

    /// The current WAL insert position.
    pub fn lsn(&mut self) -> String {
        self.query_string("select pg_current_wal_insert_lsn()::text")
    }

    /// Waits until the WAL written so far is flushed (decoding reads only
    /// flushed WAL; a non-transactional message is flushed asynchronously).
    pub fn flush(&mut self) {
        let target = self.lsn();
        let db = &mut self.db;
        wait_for(
            &format!("WAL flushed up to {target}"),
            Duration::from_secs(30),
            || {
                db.query_one(
                    "select pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .unwrap_or_else(|e| panic!("pg_current_wal_flush_lsn: {}", db_err(&e)))
                .get(0)
            },
        );
    }

    fn slot_name(&self, tag: &str, suffix: &str) -> String {
        let name = format!("pjpub_{}_{tag}_{suffix}", self.name);
        assert!(name.len() < 64, "slot name {name} is too long");
        name
    }

    /// A pgoutput slot and, copied from it (same starting point), a pubjson
    /// slot and a test_decoding slot.
    pub fn create_slots(&mut self, tag: &str) -> Slots {
        let slots = Slots {
            pgoutput: self.slot_name(tag, "pgo"),
            pubjson: self.slot_name(tag, "pj"),
            raw: self.slot_name(tag, "td"),
        };
        self.db
            .execute(
                "select pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slots.pgoutput],
            )
            .unwrap_or_else(|e| panic!("creating slot {}: {}", slots.pgoutput, db_err(&e)));
        self.copy_slot(&slots.pgoutput, &slots.pubjson, "pubjson");
        self.copy_slot(&slots.pgoutput, &slots.raw, "test_decoding");
        slots
    }

    pub fn copy_slot(&mut self, from: &str, to: &str, plugin: &str) {
        self.db
            .execute(
                "select pg_copy_logical_replication_slot($1, $2, false, $3)",
                &[&from, &to, &plugin],
            )
            .unwrap_or_else(|e| panic!("copying slot {from} to {to}: {}", db_err(&e)));
    }

    pub fn peek_pgoutput(
        &mut self,
        slot: &str,
        pubs: &str,
        messages: Option<bool>,
        upto: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, DbErr> {
        let mut opts = vec![
            "proto_version".to_string(),
            "1".into(),
            "publication_names".into(),
            pubs.into(),
        ];
        if let Some(m) = messages {
            opts.push("messages".into());
            opts.push(m.to_string());
        }
        self.peek_data("pg_logical_slot_peek_binary_changes", slot, &opts, upto)
    }

    /// The `data` column of `function(slot, upto, NULL, VARIADIC opts)`.
    fn peek_data<T: for<'a> FromSql<'a>>(
        &mut self,
        function: &str,
        slot: &str,
        opts: &[String],
        upto: Option<&str>,
    ) -> Result<Vec<T>, DbErr> {
        let sql =
            format!("select data from {function}($1, $2::text::pg_lsn, NULL, VARIADIC $3::text[])");
        let rows = self
            .dec
            .query(&sql, &[&slot, &upto, &opts])
            .map_err(|e| db_err(&e))?;
        Ok(rows.iter().map(|r| r.get::<_, T>(0)).collect())
    }

    /// pubjson, format 2, without types, with xids, plus `extra` options.
    pub fn peek_pubjson(
        &mut self,
        slot: &str,
        pubs: &str,
        extra: &[(&str, &str)],
        upto: Option<&str>,
    ) -> Result<Vec<String>, DbErr> {
        let mut opts: Vec<String> = [
            "format-version",
            "2",
            "publication_names",
            pubs,
            "include-types",
            "0",
            "include-xids",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (k, v) in extra {
            opts.push(k.to_string());
            opts.push(v.to_string());
        }
        self.peek_text(slot, &opts, upto)
    }

    pub fn peek_text(
        &mut self,
        slot: &str,
        opts: &[String],
        upto: Option<&str>,
    ) -> Result<Vec<String>, DbErr> {
        self.peek_data("pg_logical_slot_peek_changes", slot, opts, upto)
    }

    pub fn peek_raw(&mut self, slot: &str, upto: Option<&str>) -> HashMap<u32, Vec<char>> {
        let opts: Vec<String> = ["include-xids", "1", "skip-empty-xacts", "0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let rows = self
            .peek_text(slot, &opts, upto)
            .unwrap_or_else(|e| panic!("test_decoding peek of {slot}: {e}"));
        read_test_decoding(&rows).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Peeks both plugins with the same publications.
    pub fn peek_both(&mut self, slots: &Slots, pubs: &str, c: &Check) -> Peeked {
        let pgoutput = self.peek_pgoutput(&slots.pgoutput, pubs, c.messages, c.upto);
        let extra: Vec<(&str, &str)> = match c.messages {
            Some(true) => vec![("messages", "true")],
            Some(false) => vec![("messages", "false")],
            None => vec![],
        };
        let pubjson = self.peek_pubjson(&slots.pubjson, pubs, &extra, c.upto);
        Peeked { pgoutput, pubjson }
    }

    /// Decodes with both plugins and compares; panics on any divergence.
    /// Returns the pgoutput and pubjson streams.
    pub fn check(&mut self, slots: &Slots, pubs: &str, c: Check) -> (Vec<Item>, Vec<Item>, Stats) {
        let label = format!(
            "[{}] publication_names={pubs:?}{}{}",
            self.name,
            c.messages
                .map(|m| format!(" messages={m}"))
                .unwrap_or_default(),
            c.upto.map(|u| format!(" upto={u}")).unwrap_or_default()
        );
        let peeked = self.peek_both(slots, pubs, &c);
        let (pg_rows, pj_rows) = match (peeked.pgoutput, peeked.pubjson) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{label}: pgoutput {}, pubjson {}", outcome(&a), outcome(&b)),
        };
        let pg = decode_pgoutput(&pg_rows).unwrap_or_else(|e| panic!("{label}: {e}"));
        let pj = read_pubjson(&pj_rows).unwrap_or_else(|e| panic!("{label}: {e}"));
        let raw = self.peek_raw(&slots.raw, c.upto);
        let stats = compare_streams(&pg, &pj, Some(&raw))
            .unwrap_or_else(|e| panic!("{label}: pubjson diverges from pgoutput: {e}"));
        println!(
            "{label}: {} transactions, {} changes compared ({} transformed, {} messages)",
            stats.txns, stats.changes, stats.transformed, stats.messages
        );
        if std::env::var_os("PUBJSON_PUB_SHOW").is_some() {
            println!("--- pgoutput ---\n{}", show_items(&pg, 400));
            println!("--- pubjson ---\n{}", show_items(&pj, 400));
        }
        assert!(
            stats.changes >= c.min_changes,
            "{label}: pgoutput sent {} changes, the scenario expects at least {}\n{}",
            stats.changes,
            c.min_changes,
            show_items(&pg, 60)
        );
        if let Some(t) = c.transformed {
            assert_eq!(
                stats.transformed,
                t,
                "{label}: pubjson marks {} changes as transformed from UPDATE, expected {t}\n{}",
                stats.transformed,
                show_items(&pj, 80)
            );
        }
        self.cases += 1;
        self.totals.txns += stats.txns;
        self.totals.changes += stats.changes;
        self.totals.transformed += stats.transformed;
        (pg, pj, stats)
    }

    /// Both plugins must fail with the same message; returns (pgoutput, pubjson).
    pub fn check_error(&mut self, slots: &Slots, pubs: &str, c: Check) -> (DbErr, DbErr) {
        let label = format!("[{}] publication_names={pubs:?}", self.name);
        let peeked = self.peek_both(slots, pubs, &c);
        let (pg, pj) = match (peeked.pgoutput, peeked.pubjson) {
            (Err(a), Err(b)) => (a, b),
            (a, b) => panic!(
                "{label}: both plugins should fail; pgoutput {}, pubjson {}",
                outcome(&a),
                outcome(&b)
            ),
        };
        assert_eq!(
            pg.message, pj.message,
            "{label}: error messages differ\n  pgoutput: {pg}\n  pubjson:  {pj}"
        );
        assert_eq!(
            pg.code, pj.code,
            "{label}: SQLSTATEs differ\n  pgoutput: {pg}\n  pubjson:  {pj}"
        );
        println!("{label}: both fail with {}: {}", pj.code, pj.message);
        self.cases += 1;
        (pg, pj)
    }

    /// Prints the scenario's totals.
    pub fn summary(&self) {
        println!(
            "[{}] {} comparisons, {} transactions and {} changes compared ({} transformed) in {:.2?}",
            self.name,
            self.cases,
            self.totals.txns,
            self.totals.changes,
            self.totals.transformed,
            self.started.elapsed()
        );
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        // Never panics: the server may be restarting after a crash.
        if let Err(e) = Server::main().drop_database(&self.dbname) {
            eprintln!("[{}] cleanup: {e}", self.name);
        }
    }
}
