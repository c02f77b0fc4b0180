//! pgoutput differential suite: pubjson applies publications
//! (`publication_names`) exactly as pgoutput does.
//!
//! Each scenario creates, at the same point of the WAL, a `pgoutput` slot
//! and copies of it for `pubjson` and `test_decoding`, runs a workload and
//! decodes the same WAL with both plugins:
//!
//! * pgoutput: `pg_logical_slot_peek_binary_changes(..., 'proto_version',
//!   '1', 'publication_names', P)`, decoded by `pubjson_e2e::pgoutput_proto`;
//! * pubjson: `pg_logical_slot_peek_changes(..., 'format-version', '2',
//!   'publication_names', P, 'include-types', '0', 'include-xids', '1')`.
//!
//! Transactions (same xids), changes (action, relation, new row by column
//! name and order, old row against the replica identity), truncates (as
//! sets) and messages must agree; every change pubjson marks
//! `"transformedfrom":"U"` must come from an UPDATE of the raw stream
//! (test_decoding). Errors (missing publication, conflicting column lists,
//! a failing row filter) must have the same message and SQLSTATE.
//!
//! Needs the test cluster: `eval "$(scripts/cluster.sh env)"`. Scenarios
//! run one at a time (a process-wide mutex plus an advisory lock), each in
//! its own database `pubjson_pub_<scenario>`, dropped at the end.
//! `--nocapture` prints the counts of every comparison;
//! `PUBJSON_PUB_SHOW=1` also prints both decoded streams.

use pubjson_e2e::change_stream::{xids, Item};
use pubjson_e2e::pgoutput_proto::decode_pgoutput;
use pubjson_e2e::pgoutput_scenario::{Check, Scenario};
use pubjson_e2e::pubjson_reader::read_pubjson;
use pubjson_e2e::{
    complete_lines, db_err, scratch_dir, serialize, wait_slot_released, RecvLogical, Server,
};
use std::time::{Duration, Instant};

fn at_least(min_changes: usize) -> Check<'static> {
    Check {
        min_changes,
        ..Check::default()
    }
}

fn with_transformed(min_changes: usize, transformed: usize) -> Check<'static> {
    Check {
        min_changes,
        transformed: Some(transformed),
        ..Check::default()
    }
}

// ---------------------------------------------------------------------------
// 1. Published actions
// ---------------------------------------------------------------------------

#[test]
fn publish_actions() {
    let _serial = serialize();
    let mut sc = Scenario::new("actions");
    sc.exec(
        "create table t1 (id int primary key, v text);
         create table t2 (id int primary key, v text);
         create table t3 (id int primary key, v text);
         create table t4 (id int primary key, v text);
         create publication p_ins for table t1, t2 with (publish = 'insert');
         create publication p_upd_del for table t1, t3 with (publish = 'update, delete');
         create publication p_trunc for table t1, t2, t3 with (publish = 'truncate');
         create publication p_upd for table t2 with (publish = 'update');",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into t1 values (1, 'a'), (2, 'b'), (3, 'c');
         insert into t2 values (1, 'a'), (2, 'b'), (3, 'c');
         insert into t3 values (1, 'a'), (2, 'b'), (3, 'c');
         insert into t4 values (1, 'a'), (2, 'b'), (3, 'c')",
        "update t1 set v = v || '!' where id <= 2;
         update t2 set v = 'x' where id = 1;
         update t3 set id = id + 10 where id = 1;
         update t4 set v = 'unpublished'",
        "delete from t1 where id = 3;
         delete from t2 where id = 2;
         delete from t3 where id = 2;
         delete from t4 where id = 1",
        "begin;
         insert into t1 values (10, 'mixed');
         update t2 set v = 'y';
         delete from t3 where id = 3;
         truncate t4;
         commit",
        "truncate t1, t2",
        "truncate t3, t4",
        "insert into t1 values (20, 'after truncate'); insert into t3 values (20, 'after')",
        "update t1 set v = 'last' where id = 20; delete from t3 where id = 20",
    ]);
    sc.flush();
    for (pubs, min) in [
        ("p_ins", 8),
        ("p_upd_del", 8),
        ("p_trunc", 3),
        ("p_upd", 3),
        ("p_ins,p_upd_del", 16),
        ("p_ins,p_upd", 11),
        ("p_upd_del,p_trunc", 11),
        ("p_ins,p_upd_del,p_trunc,p_upd", 22),
    ] {
        sc.check(&slots, pubs, at_least(min));
    }
    sc.summary();
}

// ---------------------------------------------------------------------------
// 2. FOR ALL TABLES, FOR TABLES IN SCHEMA, unions
// ---------------------------------------------------------------------------

#[test]
fn all_tables_and_schemas() {
    let _serial = serialize();
    let mut sc = Scenario::new("schemas");
    sc.exec(
        "create schema s1; create schema s2;
         create type mood as enum ('sad', 'ok', 'happy');
         create table s1.a (id int primary key, m mood, v text);
         create table s2.b (id int primary key, v text);
         create table public.c (id int primary key, v text);
         create table public.d (id int primary key, v text);
         create publication p_all for all tables;
         create publication p_s1 for tables in schema s1;
         create publication p_s2_ins for tables in schema s2 with (publish = 'insert');
         create publication p_c for table public.c;
         create publication p_mixed for table public.d, tables in schema s2;",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into s1.a values (1, 'happy', 'a1'), (2, 'sad', 'a2');
         insert into s2.b values (1, 'b1'), (2, 'b2');
         insert into public.c values (1, 'c1'), (2, 'c2');
         insert into public.d values (1, 'd1'), (2, 'd2')",
        "update s1.a set m = 'ok' where id = 1;
         update s2.b set v = 'b1!' where id = 1;
         update public.c set id = 3 where id = 2;
         update public.d set v = 'd2!' where id = 2",
        // A table created in a published schema, written in the same
        // transaction and in the next one.
        "begin;
         create table s1.new_t (id int primary key, v text);
         insert into s1.new_t values (1, 'same transaction');
         commit",
        "insert into s1.new_t values (2, 'next transaction')",
        // A table moved into a published schema.
        "alter table public.d set schema s1",
        "insert into s1.d values (3, 'moved'); update s1.d set v = 'moved!' where id = 1",
        "delete from s1.a where id = 2; delete from s2.b where id = 2; delete from public.c where id = 1",
        "truncate s1.a, s2.b, public.c",
    ]);
    sc.flush();
    for (pubs, min) in [
        ("p_all", 22),
        ("p_s1", 9),
        ("p_s2_ins", 2),
        ("p_c", 5),
        ("p_s1,p_c", 14),
        ("p_s1,p_s2_ins,p_c", 16),
        ("p_all,p_s2_ins", 22),
        ("p_mixed", 10),
        ("p_mixed,p_s1", 17),
    ] {
        sc.check(&slots, pubs, at_least(min));
    }
    sc.summary();
}

// ---------------------------------------------------------------------------
// 3. Row filters
// ---------------------------------------------------------------------------

#[test]
fn row_filters() {
    let _serial = serialize();
    let mut sc = Scenario::new("rowfilter");
    sc.exec(
        "create table rf_def (id int primary key, v int, note text);
         create table rf_full (id int primary key, v int, note text);
         alter table rf_full replica identity full;
         create table rf_or (id int primary key, v int);
         alter table rf_or replica identity full;
         create table rf_act (id int primary key, v int);
         create table rf_idx (id int primary key, code int not null, v int);
         create unique index rf_idx_code on rf_idx (code);
         alter table rf_idx replica identity using index rf_idx_code;
         create publication p_id for table rf_def where (id > 10);
         create publication p_v for table rf_full where (v > 10);
         create publication p_note for table rf_full where (note like 'keep%');
         create publication p_or_lo for table rf_or where (v < 0);
         create publication p_or_hi for table rf_or where (v > 100);
         create publication p_alltab for all tables;
         create publication p_act_ins for table rf_act where (v > 10) with (publish = 'insert');
         create publication p_act_upd for table rf_act with (publish = 'update');
         create publication p_act_ins2 for table rf_act where (id > 100) with (publish = 'insert');
         create publication p_code for table rf_idx where (code > 10);",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into rf_def values (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (15, 15, 'd'),
                                   (20, 20, 'e'), (30, 30, 'f'), (40, 40, 'g');
         insert into rf_full values (1, 5, 'keep a'), (2, 15, 'drop b'), (3, 20, 'keep c'),
                                    (4, 1, 'drop d'), (5, null, 'keep e'), (6, 50, null), (7, null, null);
         insert into rf_or values (1, -5), (2, 50), (3, 200), (4, 0);
         insert into rf_act values (1, 5), (2, 50), (101, 1)",
        // REPLICA IDENTITY DEFAULT, filter on the key: the four cases and
        // updates that leave the key alone (only the new row is tested).
        "update rf_def set id = 11 where id = 1;  -- old no, new yes: INSERT
         update rf_def set id = 4 where id = 15;  -- old yes, new no: DELETE
         update rf_def set id = 21 where id = 20; -- both: UPDATE
         update rf_def set id = 5 where id = 2;   -- neither
         update rf_def set v = 31 where id = 30;  -- key unchanged, new matches
         update rf_def set v = 4 where id = 3;    -- key unchanged, new does not match",
        // REPLICA IDENTITY FULL, filter on a non-key column, NULL results.
        "update rf_full set v = 16 where id = 1;   -- 5 -> 16: INSERT
         update rf_full set v = 6 where id = 2;    -- 15 -> 6: DELETE
         update rf_full set v = 21 where id = 3;   -- 20 -> 21: UPDATE
         update rf_full set v = 2 where id = 4;    -- 1 -> 2: nothing
         update rf_full set v = 11 where id = 5;   -- NULL -> 11: INSERT
         update rf_full set v = null where id = 6; -- 50 -> NULL: DELETE
         update rf_full set note = 'x' where id = 7; -- NULL -> NULL: nothing
         update rf_full set id = 8 where id = 3;   -- key change, 21 both: UPDATE",
        "update rf_full set note = 'keep now' where id = 2; -- p_note: INSERT
         update rf_full set note = 'gone' where id = 1",    // p_note: DELETE
        // Two publications, two filters, OR-ed.
        "update rf_or set v = 150 where id = 2; -- lo: -/-, hi: -/+
         update rf_or set v = -1 where id = 3;  -- lo: -/+, hi: +/-
         update rf_or set v = 10 where id = 1;  -- lo: +/-, hi: -/-
         delete from rf_or where id = 4;
         delete from rf_or where id = 2",
        "delete from rf_def where id in (11, 4, 21, 5, 30, 3);
         delete from rf_full where id in (1, 2, 8, 4, 5, 6, 7)",
        // Filters per action.
        "insert into rf_act values (3, 11), (4, 10), (102, 0);
         update rf_act set v = 0 where id = 2;
         update rf_act set id = 200 where id = 1;
         delete from rf_act where id = 3",
        // REPLICA IDENTITY USING INDEX, filter on the index column.
        "insert into rf_idx values (1, 5, 1), (2, 15, 2), (3, 20, 3), (4, 1, 4)",
        "update rf_idx set code = 16 where id = 1; -- INSERT
         update rf_idx set code = 6 where id = 2;  -- DELETE
         update rf_idx set code = 21 where id = 3; -- UPDATE
         update rf_idx set v = 40 where id = 3;    -- code unchanged: UPDATE
         update rf_idx set v = 41 where id = 4;    -- code unchanged, no match
         update rf_idx set id = 30 where id = 3",  // key of the table, not of the identity
        "delete from rf_idx",
    ]);
    sc.flush();
    sc.check(&slots, "p_id", with_transformed(11, 2));
    sc.check(&slots, "p_v", with_transformed(13, 4));
    sc.check(&slots, "p_note", with_transformed(12, 2));
    sc.check(&slots, "p_v,p_note", with_transformed(17, 3));
    sc.check(&slots, "p_or_lo", with_transformed(3, 2));
    sc.check(&slots, "p_or_hi", with_transformed(4, 2));
    sc.check(&slots, "p_or_lo,p_or_hi", with_transformed(6, 2));
    // A FOR ALL TABLES publication cancels the filters.
    sc.check(&slots, "p_v,p_alltab", with_transformed(75, 0));
    sc.check(&slots, "p_id,p_alltab", with_transformed(75, 0));
    sc.check(&slots, "p_alltab", with_transformed(75, 0));
    // Filters per action: filtered inserts, unfiltered updates.
    sc.check(&slots, "p_act_ins,p_act_upd", with_transformed(4, 0));
    sc.check(
        &slots,
        "p_act_ins,p_act_ins2,p_act_upd",
        with_transformed(6, 0),
    );
    sc.check(&slots, "p_act_ins2", with_transformed(2, 0));
    sc.check(&slots, "p_code", with_transformed(7, 2));
    sc.summary();
}

// ---------------------------------------------------------------------------
// 4. TOAST and row filters
// ---------------------------------------------------------------------------

fn big(seed: &str) -> String {
    // 4000 md5 digests: 128,000 characters, stored out of line.
    format!("(select string_agg(md5(i::text || '{seed}'), '') from generate_series(1, 4000) i)")
}

#[test]
fn toast_and_row_filters() {
    let _serial = serialize();
    let mut sc = Scenario::new("toast");
    sc.exec(
        "create table tt (id int primary key, flag int, big text);
         alter table tt alter column big set storage external;
         alter table tt replica identity full;
         create table tk (id int primary key, note text, big text);
         alter table tk alter column big set storage external;
         create publication p_tt for table tt where (flag > 0);
         create publication p_tt_all for table tt;
         create publication p_tk for table tk where (id > 10);",
    );
    let slots = sc.create_slots("a");
    let inserts = format!(
        "insert into tt values (1, 1, {}), (2, 0, {}), (3, 1, {});
         insert into tk values (5, 'a', {}), (20, 'b', {}), (30, 'c', {})",
        big("t1"),
        big("t2"),
        big("t3"),
        big("k1"),
        big("k2"),
        big("k3")
    );
    sc.run(&[
        &inserts,
        // FULL, filter on flag; the TOAST column is left unchanged.
        "update tt set flag = 2 where id = 1", // both match: UPDATE, big unchanged
        "update tt set flag = 1 where id = 2", // INSERT: big taken from the old row
        "update tt set flag = 0 where id = 1", // DELETE with the whole old row
        "update tt set big = big || 'x' where id = 3", // big changed
        "update tt set id = 4 where id = 3",   // key change, big unchanged
        // DEFAULT, filter on the key.
        "update tk set id = 15 where id = 5", // INSERT, big unchanged ('u')
        "update tk set id = 25 where id = 20", // UPDATE with old key
        "update tk set note = 'n' where id = 25", // UPDATE without old key
        "update tk set id = 3 where id = 15", // DELETE
        "update tk set big = 'small now' where id = 30",
        "delete from tt where id = 2; delete from tk where id = 25",
    ]);
    sc.flush();
    sc.check(&slots, "p_tt", with_transformed(8, 2));
    sc.check(&slots, "p_tt_all", with_transformed(9, 0));
    sc.check(&slots, "p_tk", with_transformed(8, 2));
    sc.check(&slots, "p_tt,p_tk", with_transformed(16, 4));
    sc.check(&slots, "p_tt,p_tt_all,p_tk", with_transformed(17, 2));
    sc.summary();
}

// ---------------------------------------------------------------------------
// 5. Column lists and generated columns
// ---------------------------------------------------------------------------

#[test]
fn column_lists() {
    let _serial = serialize();
    let mut sc = Scenario::new("collist");
    // 18 refuses UPDATE/DELETE on a table whose replica identity holds a
    // generated column its publications do not publish.
    let gencols = if sc.server_major() >= 18 {
        " with (publish_generated_columns = stored)"
    } else {
        ""
    };
    sc.exec(&format!(
        "create table cl (id int primary key, a text, b text, c int);
         create publication p_cl for table cl (id, a);
         create publication p_cl_same for table cl (a, id);
         create table gen (id int primary key, a int, g int generated always as (a * 2) stored, z text);
         create publication p_gen for table gen;
         create table genf (id int primary key, a int, g int generated always as (a + 1) stored);
         alter table genf replica identity full;
         create publication p_genf for table genf{gencols};
         create table clf (id int primary key, a text, b text);
         create publication p_clf for table clf (id, b) where (id > 5);
         create table t (id int primary key, a text, b text);
         create publication p_ta for table t (id, a);
         create publication p_tb for table t (id, b);
         create table tdrop (id int primary key, junk int, a text);
         alter table tdrop drop column junk;
         create publication p_tdrop_list for table tdrop (id, a);
         create publication p_tdrop_nolist for table tdrop;
         create publication p_tall for all tables{gencols};"
    ));
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into cl values (1, 'a1', 'b1', 1), (2, 'a2', 'b2', 2);
         insert into gen (id, a, z) values (1, 10, 'z');
         insert into genf (id, a) values (1, 5);
         insert into clf values (1, 'a', 'b'), (10, 'a', 'b')",
        "update cl set b = 'b1x' where id = 1;
         update cl set id = 3 where id = 2;
         update gen set a = 11;
         update genf set a = 6;
         update clf set id = 6 where id = 1;
         update clf set a = 'changed' where id = 10",
        "delete from cl where id = 1; delete from gen; delete from genf; delete from clf where id = 6",
        "insert into t values (1, 'a', 'b'); update t set b = 'bb'; delete from t",
        "insert into tdrop values (1, 'a'); update tdrop set a = 'aa'; delete from tdrop",
    ]);
    sc.flush();
    sc.check(&slots, "p_cl", at_least(5));
    sc.check(&slots, "p_cl,p_cl_same", at_least(5));
    sc.check(&slots, "p_gen", at_least(3));
    sc.check(&slots, "p_genf", at_least(3));
    sc.check(&slots, "p_clf", with_transformed(4, 1));
    sc.check(&slots, "p_ta", at_least(3));
    sc.check(&slots, "p_tb", at_least(3));
    sc.check(&slots, "p_tdrop_list", at_least(3));
    sc.check(&slots, "p_tdrop_nolist", at_least(3));
    sc.check(&slots, "p_tall", at_least(22));
    // Different column lists for one table: both plugins refuse.
    let (_, e) = sc.check_error(&slots, "p_ta,p_tb", Check::default());
    assert_eq!(
        e.message,
        "cannot use different column lists for table \"public.t\" in different publications"
    );
    assert_eq!(e.code, "0A000");
    let (_, e) = sc.check_error(&slots, "p_tall,p_ta", Check::default());
    assert_eq!(
        e.message,
        "cannot use different column lists for table \"public.t\" in different publications"
    );
    // A list naming every live column of a table with a dropped column:
    // still a list on 15 (it compares with the number of attributes), "all
    // columns" from 16 on (live attributes).
    if sc.server_major() == 15 {
        let (_, e) = sc.check_error(&slots, "p_tdrop_list,p_tdrop_nolist", Check::default());
        assert_eq!(e.code, "0A000");
    } else {
        sc.check(&slots, "p_tdrop_list,p_tdrop_nolist", at_least(3));
    }
    sc.check_error(&slots, "p_cl,p_tall", Check::default());
    sc.summary();
}

// ---------------------------------------------------------------------------
// 5b. Generated columns on PostgreSQL 18 (publish_generated_columns)
// ---------------------------------------------------------------------------

#[test]
fn generated_columns_18() {
    let _serial = serialize();
    let mut sc = Scenario::new("gencols18");
    pubjson_e2e::require_major!(
        sc.server_major(),
        18,
        "publish_generated_columns is new in PostgreSQL 18"
    );
    sc.exec(
        "create table g (id int primary key, a int,
                         s int generated always as (a * 2) stored,
                         v int generated always as (a * 3) virtual, z text);
         create table h (id int primary key, a int, s int generated always as (a + 1) stored);
         create publication p_none for table g, h;
         create publication p_stored for table g, h with (publish_generated_columns = stored);
         create publication p_stored2 for table g with (publish_generated_columns = stored);
         create publication p_list for table g (id, a, s);
         create publication p_list_all for table g (id, a, s, z);
         create publication p_all_stored for all tables with (publish_generated_columns = stored);",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into g (id, a, z) values (1, 10, 'z'), (2, 20, 'y'); insert into h (id, a) values (1, 1)",
        "update g set a = 11 where id = 1; update h set a = 2",
        "delete from g where id = 2; delete from h",
    ]);
    sc.flush();
    // Stored generated columns only with the option or a list naming them;
    // virtual ones never.
    sc.check(&slots, "p_none", at_least(7));
    sc.check(&slots, "p_stored", at_least(7));
    sc.check(&slots, "p_list", at_least(4));
    sc.check(&slots, "p_all_stored", at_least(7));
    sc.check(&slots, "p_stored,p_stored2", at_least(7));
    // A list equal to what the option publishes agrees with it.
    sc.check(&slots, "p_list_all,p_stored", at_least(7));
    let (_, e) = sc.check_error(&slots, "p_none,p_stored", Check::default());
    assert_eq!(
        (e.message.as_str(), e.code.as_str()),
        (
            "cannot use different values of publish_generated_columns for table \"public.g\" in different publications",
            "0A000"
        )
    );
    let (_, e) = sc.check_error(&slots, "p_list,p_stored", Check::default());
    assert_eq!(
        (e.message.as_str(), e.code.as_str()),
        (
            "cannot use different column lists for table \"public.g\" in different publications",
            "0A000"
        )
    );
    sc.summary();
}

// ---------------------------------------------------------------------------
// 6. Partitions
// ---------------------------------------------------------------------------

#[test]
fn partitions() {
    let _serial = serialize();
    let mut sc = Scenario::new("partitions");
    sc.exec(
        "create table pt (id int not null, region text not null, v int, note text,
                          primary key (id, region)) partition by list (region);
         create table pt_a partition of pt for values in ('a');
         -- created separately, other column order, then attached
         create table pt_b (note text, v int, region text not null, id int not null);
         alter table pt attach partition pt_b for values in ('b');
         -- a sub-partitioned partition whose leaf has a dropped column
         create table pt_c partition of pt for values in ('c') partition by range (id);
         create table pt_c1 (junk int, id int not null, region text not null, v int, note text);
         alter table pt_c1 drop column junk;
         alter table pt_c attach partition pt_c1 for values from (0) to (1000);
         create publication p_leaf for table pt;
         create publication p_leaf_ins for table pt with (publish = 'insert');
         create publication p_root for table pt with (publish_via_partition_root = true);
         create publication p_rootf for table pt where (id > 10) with (publish_via_partition_root = true);
         create publication p_pta for table pt_a;
         create publication p_ptc_root for table pt_c with (publish_via_partition_root = true);
         create publication p_all_root for all tables with (publish_via_partition_root = true);
         -- column lists through the root and on a partition
         create publication p_root_cols for table pt (id, region, v)
             with (publish_via_partition_root = true);
         create publication p_ptb_cols for table pt_b (id, region, note);
         -- a row filter on a partition (its key: pt_a's replica identity)
         create publication p_pta_f for table pt_a where (id > 10);
         -- switched to publish_via_partition_root mid-stream
         create publication p_switch for table pt;",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into pt values (1, 'a', 1, 'x'), (20, 'a', 20, 'y'), (2, 'b', 2, 'x'),
                               (30, 'b', 30, 'y'), (3, 'c', 3, 'z'), (40, 'c', 40, 'z')",
        "update pt set v = v + 1 where id in (1, 2, 3)",
        "update pt set id = 120 where id = 20", // key change inside pt_a
        "update pt set region = 'b' where id = 1", // moves pt_a -> pt_b
        "update pt set id = 15 where id = 2",   // p_rootf: INSERT
        "update pt set id = 5 where id = 30",   // p_rootf: DELETE
        "update pt set id = 50 where id = 3",   // pt_c1; p_rootf: INSERT
        "delete from pt where id = 40",
        "insert into pt_b (id, region, v, note) values (60, 'b', 60, 'direct')",
        "truncate pt_a",
        "insert into pt values (70, 'a', 7, 'after'), (71, 'c', 71, 'after')",
        "alter publication p_switch set (publish_via_partition_root = true)",
        "update pt set v = 72 where id = 70; insert into pt values (73, 'b', 73, 'switched')",
        "truncate pt",
        "insert into pt values (80, 'c', 8, 'end'), (81, 'b', 81, 'end')",
    ]);
    sc.flush();
    sc.check(&slots, "p_leaf", at_least(25));
    sc.check(&slots, "p_leaf_ins", at_least(12));
    sc.check(&slots, "p_root", at_least(22));
    sc.check(&slots, "p_rootf", with_transformed(14, 3));
    sc.check(&slots, "p_pta", at_least(8));
    sc.check(&slots, "p_root,p_pta", at_least(22));
    sc.check(&slots, "p_leaf,p_pta", at_least(25));
    sc.check(&slots, "p_rootf,p_pta", with_transformed(14, 3));
    sc.check(&slots, "p_ptc_root", at_least(8));
    sc.check(&slots, "p_ptc_root,p_root", at_least(22));
    sc.check(&slots, "p_ptc_root,p_leaf", at_least(25));
    sc.check(&slots, "p_all_root", at_least(22));
    sc.check(&slots, "p_leaf_ins,p_root", at_least(22));
    sc.check(&slots, "p_root_cols", at_least(22));
    sc.check(&slots, "p_ptb_cols", at_least(5));
    // A partition's column list against its parent's "all columns".
    sc.check_error(&slots, "p_ptb_cols,p_leaf_ins", Check::default());
    sc.check(&slots, "p_pta_f", with_transformed(1, 0));
    sc.check(&slots, "p_pta_f,p_rootf", with_transformed(10, 3));
    sc.check(&slots, "p_switch", at_least(25));
    // With the root option the changes are the parent's, in its column
    // order; without it, the partitions'.
    let (pg, _, _) = sc.check(&slots, "p_root", Check::default());
    let rels = relations(&pg);
    assert!(
        rels.iter().all(|r| r == "public.pt"),
        "p_root publishes through the root only: {rels:?}"
    );
    let (pg, _, _) = sc.check(&slots, "p_leaf", Check::default());
    let rels = relations(&pg);
    for leaf in ["public.pt_a", "public.pt_b", "public.pt_c1"] {
        assert!(
            rels.iter().any(|r| r == leaf),
            "p_leaf: no change of {leaf}"
        );
    }
    sc.summary();
}

fn relations(items: &[Item]) -> Vec<String> {
    let mut out = Vec::new();
    for item in items {
        let changes = match item {
            Item::Txn { changes, .. } => changes.clone(),
            Item::Loose(c) => vec![c.clone()],
        };
        for c in changes {
            if !c.relation.is_empty() && !out.contains(&c.relation) {
                out.push(c.relation);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// 7. Subtransactions, aborts, unpublished transactions
// ---------------------------------------------------------------------------

#[test]
fn subtransactions() {
    let _serial = serialize();
    let mut sc = Scenario::new("subxact");
    sc.exec(
        "create table s (id int primary key, v text);
         create table u (id int primary key, v text);
         create publication p_s for table s;
         create publication p_u_ins for table u with (publish = 'insert');",
    );
    let slots = sc.create_slots("a");
    let kept = sc.xact(
        "insert into s values (1, 'kept');
         savepoint a;
         insert into s values (2, 'rolled back');
         update s set v = 'rolled back too' where id = 1;
         rollback to a;
         insert into s values (3, 'after rollback to');
         savepoint b;
         insert into s values (4, 'released');
         savepoint c;
         update s set v = 'nested' where id = 4;
         release b",
        true,
    );
    let sub_only = sc.xact(
        "savepoint x; insert into s values (5, 'sub'); release x;
         savepoint y; delete from s where id = 5; rollback to y;
         insert into u values (1, 'unpublished')",
        true,
    );
    let aborted = sc.xact(
        "insert into s values (10, 'aborted');
         savepoint q; insert into s values (11, 'aborted sub'); release q",
        false,
    );
    let unpublished = sc.xact(
        "insert into u values (2, 'x'); update u set v = 'y' where id = 2; delete from u where id = 1",
        true,
    );
    let rolled_back_sub = sc.xact(
        "update u set v = 'z' where id = 2;
         savepoint z; insert into s values (20, 'rolled back'); rollback to z",
        true,
    );
    sc.run(&[
        "do $$ begin
             insert into s values (12, 'rolled back by the exception');
             insert into s values (12, 'duplicate');
         exception when unique_violation then
             insert into s values (14, 'handler');
         end $$",
        "insert into s values (30, 'last')",
    ]);
    sc.flush();
    let (pg, pj, _) = sc.check(&slots, "p_s", at_least(7));
    for (what, xid) in [
        ("aborted", aborted),
        ("unpublished", unpublished),
        ("rolled-back subtransaction", rolled_back_sub),
    ] {
        assert!(
            !xids(&pg).contains(&xid) && !xids(&pj).contains(&xid),
            "the {what} transaction {xid} must produce nothing"
        );
    }
    for xid in [kept, sub_only] {
        assert!(xids(&pg).contains(&xid), "transaction {xid} is published");
    }
    // With a publication of u's inserts, the unpublished transaction shows up
    // as its INSERT only.
    let (pg, _, _) = sc.check(&slots, "p_s,p_u_ins", at_least(9));
    assert!(xids(&pg).contains(&unpublished));
    assert!(!xids(&pg).contains(&rolled_back_sub));
    sc.summary();
}

// ---------------------------------------------------------------------------
// 8. ALTER PUBLICATION and ALTER TABLE mid-stream, DROP PUBLICATION
// ---------------------------------------------------------------------------

#[test]
fn alter_publication_mid_stream() {
    let _serial = serialize();
    let mut sc = Scenario::new("alterpub");
    sc.exec(
        "create table m1 (id int primary key, v int, w text);
         create table m2 (id int primary key, v int);
         create table m3 (id int primary key, v int);
         create publication pa for table m1;
         create publication pb for table m2 with (publish = 'insert');",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "insert into m1 values (1, 1, 'a'), (2, 20, 'b'); insert into m2 values (1, 1); insert into m3 values (1, 1)",
        "alter publication pa add table m2",
        "insert into m2 values (2, 2); update m2 set v = 3 where id = 1; delete from m2 where id = 2",
        "alter publication pa drop table m1",
        "insert into m1 values (3, 3, 'c'); update m1 set v = 30 where id = 1",
        "alter table m1 replica identity full",
        "alter publication pa set table m1 where (v > 10)",
        "insert into m1 values (4, 5, 'd'), (5, 50, 'e');
         update m1 set v = 40 where id = 4;
         update m1 set v = 1 where id = 2;
         update m2 set v = 9",
        "alter publication pa set (publish = 'insert')",
        "insert into m1 values (6, 60, 'f'); update m1 set v = 61 where id = 6; delete from m1 where id = 5",
        "alter table m1 add column x int",
        "insert into m1 values (7, 70, 'g', 7)",
        "alter table m1 drop column w",
        "insert into m1 values (8, 80, 8)",
        // Catalog changes and changes in one transaction.
        "begin;
         alter publication pa set (publish = 'insert, update, delete');
         update m1 set v = 81 where id = 8;
         insert into m1 values (9, 90, 9);
         commit",
        "begin;
         insert into m1 values (10, 100, 10);
         alter publication pa add table m3;
         insert into m3 values (2, 2);
         commit",
        "begin;
         insert into m2 values (3, 3);
         alter publication pb set (publish = 'insert, delete');
         delete from m2 where id = 3;
         commit",
    ]);
    sc.flush();
    let before_drop = sc.lsn();
    sc.run(&[
        "drop publication pb",
        "insert into m1 values (11, 110, 11); insert into m2 values (4, 4)",
    ]);
    sc.flush();
    let upto = Check {
        upto: Some(&before_drop),
        min_changes: 15,
        ..Check::default()
    };
    sc.check(
        &slots,
        "pa",
        Check {
            transformed: Some(2),
            ..upto.clone()
        },
    );
    sc.check(
        &slots,
        "pb",
        Check {
            min_changes: 4,
            ..upto.clone()
        },
    );
    sc.check(
        &slots,
        "pa,pb",
        Check {
            min_changes: 18,
            ..upto.clone()
        },
    );
    // pa still exists: the whole stream decodes.
    sc.check(&slots, "pa", with_transformed(16, 2));
    // pb was dropped: both fail at the first change decoded after the drop
    // (18: both skip it from there on, with a WARNING).
    for pubs in ["pb", "pa,pb"] {
        if sc.server_major() >= 18 {
            sc.check(&slots, pubs, Check::default());
            continue;
        }
        let (_, e) = sc.check_error(&slots, pubs, Check::default());
        assert_eq!(e.message, "publication \"pb\" does not exist");
        assert_eq!(e.code, "42704");
    }
    sc.summary();
}

// ---------------------------------------------------------------------------
// 9. Logical decoding messages
// ---------------------------------------------------------------------------

#[test]
fn messages() {
    let _serial = serialize();
    let mut sc = Scenario::new("messages");
    sc.exec(
        "create table mt (id int primary key, v text);
         create table mu (id int primary key);
         create publication p_m for table mt;",
    );
    let slots = sc.create_slots("a");
    sc.run(&[
        "begin; insert into mt values (1, 'one'); select pg_logical_emit_message(true, 'p', 'c'); commit",
        "select pg_logical_emit_message(true, 'alone', 'only a message')",
        "select pg_logical_emit_message(false, 'nt', 'non-transactional')",
        "begin;
         insert into mt values (2, 'two');
         select pg_logical_emit_message(false, 'nt2', 'non-transactional inside');
         select pg_logical_emit_message(true, 'tx', 'ünïcödé ☃ \"quoted\" \\ back');
         commit",
        "begin;
         insert into mt values (3, 'aborted');
         select pg_logical_emit_message(true, 'ab', 'aborted');
         select pg_logical_emit_message(false, 'nt3', 'survives the abort');
         rollback",
        "begin; insert into mu values (1); select pg_logical_emit_message(true, 'unpub', 'with an unpublished change'); commit",
        "select pg_logical_emit_message(true, 'bin', '\\x610062'::bytea)",
        "select pg_logical_emit_message(true, 'empty', '')",
        "insert into mt values (4, 'four')",
    ]);
    sc.flush();
    // pubjson leaves messages out by default with publication_names, as pgoutput.
    let (_, _, s) = sc.check(&slots, "p_m", at_least(3));
    assert_eq!(s.messages, 0);
    let off = Check {
        messages: Some(false),
        min_changes: 3,
        ..Check::default()
    };
    let (_, _, s) = sc.check(&slots, "p_m", off);
    assert_eq!(s.messages, 0);
    let on = Check {
        messages: Some(true),
        min_changes: 12,
        ..Check::default()
    };
    let (_, _, s) = sc.check(&slots, "p_m", on);
    assert_eq!(s.messages, 9, "nine messages survive");
    sc.summary();
}

// ---------------------------------------------------------------------------
// 10. A publication that does not exist; bad publication_names
// ---------------------------------------------------------------------------

#[test]
fn missing_publication() {
    let _serial = serialize();
    let mut sc = Scenario::new("missing");
    sc.exec(
        "create table t (id int primary key, v text);
         create publication p for table t;",
    );
    let slots = sc.create_slots("a");
    // Nothing decoded yet: the publications are looked up lazily.
    let (_, _, s) = sc.check(&slots, "nope", Check::default());
    assert_eq!(s.changes, 0);
    sc.run(&["insert into t values (1, 'a')", "update t set v = 'b'"]);
    sc.flush();
    if sc.server_major() >= 18 {
        // 18 skips a missing publication with a WARNING.
        let (_, _, s) = sc.check(&slots, "nope", Check::default());
        assert_eq!(s.changes, 0);
        sc.check(&slots, "p,nope", at_least(2));
        sc.check(&slots, "nope,p", at_least(2));
    } else {
        for pubs in ["nope", "p,nope", "nope,p"] {
            let (pg, pj) = sc.check_error(&slots, pubs, Check::default());
            assert_eq!(pj.message, "publication \"nope\" does not exist");
            assert_eq!(pj.code, "42704", "pubjson: {pj}; pgoutput: {pg}");
        }
        // Same session, valid names: the slot still works.
        sc.check(&slots, "p", at_least(2));
        sc.check_error(&slots, "nope", Check::default());
    }
    sc.check(&slots, "p", at_least(2));
    // Option errors, raised before anything is decoded.
    let (_, e) = sc.check_error(&slots, "\"unterminated", Check::default());
    assert_eq!(
        (e.message.as_str(), e.code.as_str()),
        ("invalid publication_names syntax", "42602")
    );
    // An empty list: an error on 15 and 16, "publish nothing" from 17 on.
    if sc.server_major() <= 16 {
        let (_, e) = sc.check_error(&slots, "", Check::default());
        assert_eq!(
            (e.message.as_str(), e.code.as_str()),
            ("publication_names parameter missing", "22023")
        );
    } else {
        let (_, _, s) = sc.check(&slots, "", Check::default());
        assert_eq!(s.changes, 0);
    }
    sc.check(&slots, "p", at_least(2));
    sc.summary();
}

// ---------------------------------------------------------------------------
// 11. A row filter failing at decode time
// ---------------------------------------------------------------------------

#[test]
fn row_filter_error() {
    let _serial = serialize();
    let mut sc = Scenario::new("filtererror");
    sc.exec(
        "create table t (id int primary key, v int);
         create table other (id int primary key);
         create publication p for table t where (10 / v > 1);
         create publication p_other for table other;",
    );
    let slots = sc.create_slots("a");
    sc.run(&["insert into t values (1, 5)", "insert into t values (2, 0)"]);
    sc.flush();
    let after_bad = sc.lsn();
    sc.run(&[
        "insert into t values (3, 1), (4, 2); insert into other values (1)",
        "insert into other values (2)",
    ]);
    sc.flush();
    let context = "While evaluating the row filter of publication \"p\" on table \"public.t\".";
    for attempt in 1..=2 {
        let (pg, pj) = sc.check_error(&slots, "p", Check::default());
        assert!(
            pj.message.contains("division by zero"),
            "attempt {attempt}: {pj}"
        );
        assert_eq!(pj.code, "22012");
        assert!(
            pj.detail.contains(context),
            "attempt {attempt}: pubjson's DETAIL must name the filter ({context}): {pj}\npgoutput: {pg}"
        );
    }
    // Another publication in the same session, then the failing one again.
    sc.check(&slots, "p_other", at_least(2));
    sc.check_error(&slots, "p", Check::default());
    sc.check_error(&slots, "p,p_other", Check::default());
    // Past the failing change, decoding goes on. (A backend whose peek
    // failed releases its slot after it has sent the error.)
    for slot in [&slots.pgoutput, &slots.pubjson, &slots.raw] {
        wait_slot_released(&mut sc.db, slot);
        sc.db
            .execute(
                "select pg_replication_slot_advance($1, $2::text::pg_lsn)",
                &[slot, &after_bad],
            )
            .unwrap_or_else(|e| panic!("advancing {slot}: {}", db_err(&e)));
    }
    let (pg, _, _) = sc.check(&slots, "p", at_least(1));
    assert_eq!(pg.len(), 1, "only the transaction after the failing one");
    sc.check(&slots, "p,p_other", at_least(3));
    sc.summary();
}

// ---------------------------------------------------------------------------
// 12. Through a walsender: pg_recvlogical
// ---------------------------------------------------------------------------

#[test]
fn pg_recvlogical_stream() {
    let _serial = serialize();
    let mut sc = Scenario::new("recvlogical");
    sc.exec(
        "create table r (id int primary key, v int, note text);
         alter table r replica identity full;
         create table r2 (id int primary key, v text);
         create publication p for table r where (v > 10), r2;",
    );
    let slots = sc.create_slots("a");
    let streamed = format!("{}_stream", slots.pubjson);
    sc.copy_slot(&slots.pgoutput, &streamed, "pubjson");
    sc.run(&[
        "insert into r values (1, 5, 'a'), (2, 15, 'b'), (3, 20, 'c'); insert into r2 values (1, 'x')",
        "update r set v = 11 where id = 1",
        "update r set v = 1 where id = 2",
        "update r set note = 'cc' where id = 3",
        "begin; insert into r2 values (2, 'y'); savepoint s; insert into r2 values (3, 'z'); rollback to s; commit",
        "insert into r values (4, 1, 'unpublished')",
        "truncate r2",
        "delete from r where id in (1, 3)",
    ]);
    sc.flush();
    sc.check(&slots, "p", with_transformed(8, 2));

    let opts: Vec<String> = [
        "format-version",
        "2",
        "publication_names",
        "p",
        "include-xids",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let expected = sc
        .peek_text(&slots.pubjson, &opts, None)
        .unwrap_or_else(|e| panic!("peek: {e}"));
    let commits = expected
        .iter()
        .filter(|l| l.starts_with("{\"action\":\"C\""))
        .count();
    assert!(
        commits >= 5,
        "the workload publishes {commits} transactions"
    );

    let dir = scratch_dir("publications");
    let file = dir.join("stream.json");
    let started = Instant::now();
    let mut recv = RecvLogical::start_on(
        &Server::main(),
        ("postgres", &sc.dbname),
        &streamed,
        &file,
        &["format-version=2", "publication_names=p", "include-xids"],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = complete_lines(&file)
            .iter()
            .filter(|l| l.starts_with("{\"action\":\"C\""))
            .count();
        if got >= commits {
            break;
        }
        assert!(
            recv.running(),
            "pg_recvlogical exited early: {}",
            recv.stderr()
        );
        assert!(
            Instant::now() < deadline,
            "pg_recvlogical wrote {got} of {commits} commits in 30 s; stderr: {}",
            recv.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    recv.interrupt();
    assert!(
        recv.try_wait_exit(Duration::from_secs(15)).is_some(),
        "pg_recvlogical ignores SIGINT"
    );
    let streamed_lines = complete_lines(&file);
    assert_eq!(
        streamed_lines, expected,
        "pg_recvlogical's stream differs from pg_logical_slot_peek_changes"
    );
    // And the walsender's stream agrees with pgoutput too.
    let pg = sc
        .peek_pgoutput(&slots.pgoutput, "p", None, None)
        .unwrap_or_else(|e| panic!("pgoutput: {e}"));
    let pg = decode_pgoutput(&pg).unwrap_or_else(|e| panic!("{e}"));
    let pj = read_pubjson(&streamed_lines).unwrap_or_else(|e| panic!("{e}"));
    let stats = pubjson_e2e::stream_comparison::compare_streams(&pg, &pj, None)
        .unwrap_or_else(|e| panic!("pg_recvlogical stream diverges from pgoutput: {e}"));
    println!(
        "[recvlogical] {} lines through pg_recvlogical in {:.2?}; {} transactions, {} changes compared",
        streamed_lines.len(),
        started.elapsed(),
        stats.txns,
        stats.changes
    );
    let _ = std::fs::remove_dir_all(&dir);
    sc.summary();
}

/// With `publish_via_partition_root`, `add-tables` / `filter-tables` apply
/// to the name a partition's rows are published under, the root's, as it
/// is now: renaming the root changes which rows a consumer gets, in the
/// same decoding session (the partition's cached decision goes with the
/// root's).
#[test]
fn table_options_follow_a_renamed_root() {
    let (_db, mut c) = pubjson_e2e::suite_database("pubjson_pub_", "renamed_root");
    pubjson_e2e::exec(
        &mut c,
        "create table root (id int primary key, v text) partition by range (id);
         create table part1 partition of root for values from (0) to (1000);
         create publication p for table root with (publish_via_partition_root);",
    );
    pubjson_e2e::pubjson_slot(&mut c, "pub_renamed_root");
    pubjson_e2e::exec(&mut c, "insert into root values (1, 'as root')");
    pubjson_e2e::exec(&mut c, "alter table root rename to renamed");
    pubjson_e2e::exec(&mut c, "insert into renamed values (2, 'as renamed')");
    pubjson_e2e::exec(&mut c, "alter table renamed rename to root");
    pubjson_e2e::exec(&mut c, "insert into root values (3, 'as root again')");
    let mut rows = |filter: &[&str]| -> Vec<(String, i64)> {
        let mut opts = vec!["publication_names", "p", "batch-bytes", "0"];
        opts.extend_from_slice(filter);
        pubjson_e2e::json_lines(&pubjson_e2e::peek_texts(
            &mut c,
            "pub_renamed_root",
            &[&["format-version", "3"][..], &opts[..]].concat(),
        ))
        .into_iter()
        .filter(|o| o["action"] == "I")
        .map(|o| {
            (
                o["table"].as_str().unwrap_or("?").to_string(),
                o["new"]["id"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
    };
    let all = rows(&[]);
    assert_eq!(
        all,
        [
            ("root".into(), 1),
            ("renamed".into(), 2),
            ("root".into(), 3)
        ],
        "rows under the root's name at each point"
    );
    // The partition's own name is never the published one.
    assert_eq!(rows(&["add-tables", "public.part1"]), []);
    assert_eq!(
        rows(&["add-tables", "public.renamed"]),
        [("renamed".into(), 2)]
    );
    assert_eq!(
        rows(&["filter-tables", "public.renamed"]),
        [("root".into(), 1), ("root".into(), 3)]
    );
    pubjson_e2e::drop_slot(&mut c, "pub_renamed_root");
}
