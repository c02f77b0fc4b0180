//! Differential tests: transaction shapes (savepoints, aborts, empty and
//! interleaved transactions, many changes, logical messages).

use pubjson_e2e::{case, connect, option_matrix, require_wal2json, TestDb};

#[test]
fn transaction_shapes() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "xact",
        "create table e2e_xact.t (id int primary key, v text);
         create table e2e_xact.side (id int primary key);",
    );
    db.run(&[
        // Savepoints: rolled-back changes are absent.
        "begin;
         insert into e2e_xact.t values (1, 'kept');
         savepoint s1;
         insert into e2e_xact.t values (2, 'rolled back');
         update e2e_xact.t set v = 'rolled back too' where id = 1;
         rollback to s1;
         insert into e2e_xact.t values (3, 'after rollback to');
         savepoint s2;
         insert into e2e_xact.t values (4, 'released');
         savepoint s3;
         update e2e_xact.t set v = 'nested' where id = 4;
         release s2;
         commit",
        // Changes made only in subtransactions.
        "begin;
         savepoint a; insert into e2e_xact.t values (5, 'sub'); release a;
         savepoint b; delete from e2e_xact.t where id = 5; rollback to b;
         commit",
        // An aborted transaction is absent, even with a transactional message.
        "begin;
         insert into e2e_xact.t values (10, 'aborted');
         select pg_logical_emit_message(true, 'm', 'aborted message');
         rollback",
        // A statement that fails inside a PL/pgSQL exception block: its
        // subtransaction is rolled back.
        "do $$ begin
             insert into e2e_xact.t values (11, 'rolled back by the exception');
             insert into e2e_xact.t values (11, 'duplicate');
         exception when unique_violation then
             insert into e2e_xact.t values (14, 'handler');
         end $$",
        "insert into e2e_xact.side values (1)",
        // A non-transactional message survives the abort of its transaction.
        // (It follows a single-change transaction: wal2json 2.5 prints a
        // stray comma in format 1 after one with several changes.)
        "begin;
         insert into e2e_xact.t values (12, 'aborted');
         select pg_logical_emit_message(false, 'm', 'non-transactional in an aborted transaction');
         rollback",
        // Empty transactions: an xid but no decodable change.
        "select txid_current()",
        "create table e2e_xact.ddl (a int)",
        // Temporary and unlogged tables are not decoded.
        "begin; create temp table tmp (a int); insert into tmp values (1); commit",
        "create unlogged table e2e_xact.unlogged (a int)",
        "insert into e2e_xact.unlogged values (1)",
        "begin; insert into e2e_xact.unlogged values (2); insert into e2e_xact.t values (15, 'with unlogged'); commit",
        "begin; insert into e2e_xact.t values (13, 'x'); savepoint s; delete from e2e_xact.t where id = 13; rollback to s; rollback",
        // Only a transactional message.
        "select pg_logical_emit_message(true, 'm', 'alone')",
        // Many changes in one transaction: format 1 separators.
        "begin;
         select pg_logical_emit_message(true, 'm', 'first');
         insert into e2e_xact.t select i, 'bulk ' || i from generate_series(100, 160) i;
         update e2e_xact.t set v = v || '!' where id between 100 and 110;
         select pg_logical_emit_message(true, 'm', 'middle');
         delete from e2e_xact.t where id between 150 and 155;
         insert into e2e_xact.side values (2);
         truncate e2e_xact.side;
         insert into e2e_xact.side values (3);
         select pg_logical_emit_message(true, 'm', 'last');
         commit",
        // Only a table that some cases filter out.
        "insert into e2e_xact.side values (4)",
        "select pg_logical_emit_message(false, 'm', 'non-transactional outside a transaction')",
    ]);

    // Interleaved transactions from two sessions are decoded in commit order.
    let mut other = connect();
    db.exec("begin; insert into e2e_xact.t values (200, 'first begun, last committed')");
    other
        .client
        .batch_execute(
            "begin; insert into e2e_xact.t values (201, 'second begun, first committed'); commit",
        )
        .expect("other session");
    db.exec("update e2e_xact.t set v = 'still first' where id = 200; commit");
    drop(other);

    let mut cases = option_matrix();
    for fv in ["1", "2"] {
        cases.push(case(
            &format!("v{fv} filter-tables side"),
            &[("format-version", fv), ("filter-tables", "e2e_xact.side")],
        ));
        cases.push(case(
            &format!("v{fv} add-tables side include-xids"),
            &[
                ("format-version", fv),
                ("add-tables", "e2e_xact.side"),
                ("include-xids", "1"),
            ],
        ));
    }
    cases.push(case(
        "v1 chunks filter-tables side",
        &[
            ("write-in-chunks", "1"),
            ("filter-tables", "e2e_xact.side"),
            ("include-xids", "1"),
        ],
    ));
    db.compare_all(&slots, &cases);
}
