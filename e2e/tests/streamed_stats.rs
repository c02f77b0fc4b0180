//! Statistics of streamed transactions are per transaction: with
//! `streaming` on, blocks of several open transactions interleave in the
//! output (and a committed transaction can be replayed between two blocks
//! of another), yet `worst_transactions()` and `decoding_stats()` report
//! each transaction's own changes and bytes. Checked through
//! `pg_logical_slot_get_changes` and through a walsender (`pg_recvlogical`).
//!
//! The bytes a transaction is charged are the output written for it, as
//! docs/sql-functions.md says: through SQL the `data` of its rows, through
//! a walsender the messages `pg_recvlogical` writes one per line. A
//! streamed transaction's are its blocks (`S`, its changes, `E`), the `A`
//! of its aborted subtransactions and its `C`; a committed one's its `B`,
//! changes and `C`. An aborted streamed transaction is not listed.

use std::collections::HashMap;
use std::time::Duration;

use postgres::Client;
use pubjson_e2e::{complete_lines, exec, scratch_dir, wait_for, RecvLogical, Server};
use serde_json::Value;

const DB: &str = "e2e_streamed_stats";
const SQL_SLOT: &str = "e2e_streamed_stats_sql";
const RECV_SLOT: &str = "e2e_streamed_stats_recv";
const OPTIONS: [(&str, &str); 3] = [
    ("format-version", "2"),
    ("streaming", "on"),
    ("include-xids", "1"),
];

/// Where [`shares`] puts output that belongs to no transaction.
const OUTSIDE: i64 = -1;

/// One transaction's share of the output.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Share {
    /// I/U/D/T/M objects.
    changes: i64,
    /// Bytes of every object written for it.
    bytes: i64,
    /// Streamed blocks (`S` objects).
    blocks: i64,
    /// Changes of its subtransactions that aborted (`A` with a `subxid` of
    /// its own), and those `A` objects.
    aborted_sub_changes: i64,
    sub_aborts: i64,
}

/// What the output says about each top-level transaction, and the xids of
/// the `S`/`B` objects in output order.
fn shares(lines: &[String]) -> (HashMap<i64, Share>, Vec<(String, i64)>) {
    let mut shares: HashMap<i64, Share> = HashMap::new();
    let mut order = Vec::new();
    // Streamed changes per (top-level xid, own xid), for subtransaction aborts.
    let mut by_subxid: HashMap<(i64, i64), i64> = HashMap::new();
    let (mut block, mut txn): (Option<i64>, Option<i64>) = (None, None);
    for line in lines {
        let obj: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let action = obj["action"].as_str().expect("action").to_string();
        let xid = obj["xid"].as_i64();
        let owner = match action.as_str() {
            "S" => {
                assert_eq!(block, None, "S inside a block: {line}");
                block = xid;
                order.push((action.clone(), xid.expect("S has an xid")));
                xid
            }
            "E" => {
                assert_eq!(block, xid, "E of another block: {line}");
                block = None;
                xid
            }
            "B" => {
                assert_eq!((block, txn), (None, None), "B inside another: {line}");
                txn = xid;
                order.push((action.clone(), xid.expect("B has an xid")));
                xid
            }
            "C" => {
                if obj["streamed"] != Value::Bool(true) {
                    assert_eq!(txn, xid, "C of another transaction: {line}");
                    txn = None;
                }
                xid
            }
            // A message outside any transaction (written at once, between
            // blocks): no transaction's; its bytes are the slot's only.
            "M" if obj["transactional"] == Value::Bool(false) => Some(OUTSIDE),
            "A" => {
                let subxid = obj["subxid"].as_i64().expect("subxid");
                if Some(subxid) != xid {
                    let top = xid.expect("A has an xid");
                    let share = shares.entry(top).or_default();
                    share.sub_aborts += 1;
                    share.aborted_sub_changes += by_subxid.remove(&(top, subxid)).unwrap_or(0);
                }
                xid
            }
            _ => {
                if let (Some(top), Some(own)) = (block, xid) {
                    *by_subxid.entry((top, own)).or_default() += 1;
                }
                block.or(txn)
            }
        };
        let owner = owner.unwrap_or_else(|| panic!("output outside a transaction: {line}"));
        let share = shares.entry(owner).or_default();
        share.bytes += line.len() as i64;
        match action.as_str() {
            "I" | "U" | "D" | "T" | "M" => share.changes += 1,
            "S" => share.blocks += 1,
            _ => {}
        }
    }
    (shares, order)
}

fn xid_of(session: &mut Client) -> i64 {
    session
        .query_one("select (txid_current() % 4294967296)::bigint", &[])
        .expect("txid_current")
        .get(0)
}

struct Xids {
    a: i64,
    b: i64,
    c: i64,
    d: i64,
}

/// A inserts 5,000 rows, B 3,000, A 5,000 more (in a subtransaction),
/// B 3,000 more in a subtransaction that it rolls back (streamed before,
/// since B is the largest then), C commits one row, D inserts 3,000 and
/// rolls back, then B and A commit. A and B are open at once in sessions of
/// their own.
fn workload(server: &Server) -> Xids {
    let mut a = server.connect(DB);
    let mut b = server.connect(DB);
    let mut c = server.connect(DB);
    let insert = |s: &mut Client, from: i64, to: i64| {
        exec(
            s,
            &format!(
                "insert into t select g, repeat('x', 40) from generate_series({from}, {to}) g"
            ),
        )
    };
    exec(&mut a, "begin");
    insert(&mut a, 1, 5_000);
    let xa = xid_of(&mut a);
    exec(&mut b, "begin");
    insert(&mut b, 100_001, 103_000);
    let xb = xid_of(&mut b);
    exec(&mut a, "savepoint s");
    insert(&mut a, 5_001, 10_000);
    exec(&mut a, "release savepoint s");
    // Between blocks of A and B: written at once, part of no transaction.
    exec(
        &mut c,
        "select pg_logical_emit_message(false, 'stats', 'outside')",
    );
    exec(&mut b, "savepoint s");
    insert(&mut b, 103_001, 106_000);
    exec(&mut b, "rollback to savepoint s");
    insert(&mut c, 200_001, 200_001);
    let xc: i64 = c
        .query_one("select (xmin::text::bigint) from t where id = 200001", &[])
        .expect("C's xid")
        .get(0);
    exec(&mut c, "begin");
    insert(&mut c, 300_001, 303_000);
    let xd = xid_of(&mut c);
    exec(&mut c, "rollback");
    exec(&mut b, "commit");
    exec(&mut a, "commit");
    Xids {
        a: xa,
        b: xb,
        c: xc,
        d: xd,
    }
}

/// The slot's `worst_transactions()` rows: xid -> (changes, bytes, streamed).
fn worst(db: &mut Client, slot: &str) -> HashMap<i64, (i64, i64, bool)> {
    db.query(
        "select xid, changes, bytes, streamed from pubjson.worst_transactions() where slot_name = $1",
        &[&slot],
    )
    .expect("worst_transactions")
    .iter()
    .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
    .collect()
}

/// Checks the output's interleaving and the statistics of `slot` against it.
fn check(db: &mut Client, slot: &str, lines: &[String], x: &Xids) {
    let (shares, order) = shares(lines);
    let share = |xid: i64| shares.get(&xid).copied().unwrap_or_default();
    // The case the statistics got wrong: blocks of A and B interleave, and
    // C is replayed between blocks of A.
    let position = |action: &str, xid: i64| {
        order
            .iter()
            .position(|(a, x)| a == action && *x == xid)
            .unwrap_or_else(|| panic!("no {action} of {xid} in {order:?}"))
    };
    let first_a = position("S", x.a);
    let first_b = position("S", x.b);
    let c_begin = position("B", x.c);
    let last_a = order.iter().rposition(|(a, xid)| a == "S" && *xid == x.a);
    assert!(
        first_a < first_b && first_b < last_a.unwrap() && first_a < c_begin,
        "blocks do not interleave as expected: {order:?}"
    );
    assert!(share(x.a).blocks >= 2, "A streamed in one block: {order:?}");
    assert!(share(x.b).blocks >= 1, "B was not streamed: {order:?}");
    assert_eq!(share(x.a).changes, 10_000);
    // B's aborted subtransaction: streamed, then its `A`; its changes were
    // decoded and sent, so they count.
    let b = share(x.b);
    assert!(
        b.sub_aborts == 1 && b.aborted_sub_changes > 0,
        "B's subtransaction was not streamed and aborted: {b:?}"
    );
    assert_eq!(b.changes - b.aborted_sub_changes, 3_000);
    assert_eq!(share(x.c).changes, 1);
    assert_eq!(share(OUTSIDE).changes, 1, "the non-transactional message");

    let worst = worst(db, slot);
    for (name, xid, streamed) in [("A", x.a, true), ("B", x.b, true), ("C", x.c, false)] {
        let s = share(xid);
        assert_eq!(
            worst.get(&xid).copied(),
            Some((s.changes, s.bytes, streamed)),
            "{slot}: transaction {name} ({xid}): (changes, bytes, streamed) in worst_transactions(); all: {worst:?}"
        );
    }
    assert!(
        !worst.contains_key(&x.d),
        "{slot}: the aborted transaction D ({}) is listed: {worst:?}",
        x.d
    );
    let row = db
        .query_one(
            "select largest_txn_xid, largest_txn_changes, largest_txn_bytes, largest_txn_streamed,
                    bytes_emitted, changes_emitted, streamed_txns
               from pubjson.decoding_stats() where slot_name = $1",
            &[&slot],
        )
        .expect("decoding_stats");
    let total_bytes: i64 = shares.values().map(|s| s.bytes).sum();
    let total_changes: i64 = shares.values().map(|s| s.changes).sum();
    let largest = share(x.a);
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            row.get::<_, bool>(3),
            row.get::<_, i64>(4),
            row.get::<_, i64>(5),
            row.get::<_, i64>(6),
        ),
        (
            x.a,
            10_000,
            largest.bytes,
            true,
            total_bytes,
            total_changes,
            2
        ),
        "{slot}: (largest_txn_xid, largest_txn_changes, largest_txn_bytes, largest_txn_streamed, \
         bytes_emitted, changes_emitted, streamed_txns)"
    );
}

#[test]
fn streamed_transactions_are_counted_per_transaction() {
    let server = Server::main();
    let mut db = server.fresh_database_with_pubjson(DB);
    exec(
        &mut db,
        // No autovacuum: its ANALYZE would be a transaction to decode.
        "create table t (id int primary key, v text) with (autovacuum_enabled = false);
         alter database e2e_streamed_stats set logical_decoding_work_mem = '64kB'",
    );
    for slot in [SQL_SLOT, RECV_SLOT] {
        db.execute(
            "select pg_create_logical_replication_slot($1, 'pubjson')",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("create {slot}: {e}"));
    }
    let x = workload(&server);

    // SQL: the decoding session streams past 64kB.
    let mut decoder = server.connect(DB);
    exec(&mut decoder, "set logical_decoding_work_mem = '64kB'");
    let options: Vec<String> = OPTIONS
        .iter()
        .map(|(k, v)| format!("'{k}', '{v}'"))
        .collect();
    let lines: Vec<String> = decoder
        .query(
            &format!(
                "select data from pg_logical_slot_get_changes($1, null, null, {})",
                options.join(", ")
            ),
            &[&SQL_SLOT],
        )
        .expect("get_changes")
        .iter()
        .map(|r| r.get(0))
        .collect();
    check(&mut db, SQL_SLOT, &lines, &x);

    // A walsender: the database's setting applies to its session too.
    let file = scratch_dir("streamed_stats").join("recv.out");
    let opts: Vec<(&str, Option<&str>)> = OPTIONS.iter().map(|(k, v)| (*k, Some(*v))).collect();
    let mut recv = RecvLogical::start_in(DB, RECV_SLOT, &file, &opts, &[]);
    let a_commit = format!("{{\"action\":\"C\",\"xid\":{},\"streamed\":true", x.a);
    recv.wait_received(&a_commit, Duration::from_secs(120));
    // The statistics are published after the commit's output is sent.
    wait_for(
        "A in the walsender slot's worst_transactions()",
        Duration::from_secs(30),
        || worst(&mut db, RECV_SLOT).contains_key(&x.a),
    );
    recv.stop();
    let lines = complete_lines(&file);
    check(&mut db, RECV_SLOT, &lines, &x);

    drop((db, decoder));
    server.drop_database(DB).unwrap_or_else(|e| panic!("{e}"));
}
