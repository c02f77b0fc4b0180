//! Differential tests: replica identities, key changes, TOAST and TRUNCATE.

use pubjson_e2e::{require_wal2json, TestDb};

#[test]
fn replica_identities() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair("replident", "
        create table e2e_replident.pk_default (id int primary key, v text, n int);
        create table e2e_replident.no_pk (a int, b text);
        create table e2e_replident.full_pk (id int primary key, v text, n numeric);
        alter table e2e_replident.full_pk replica identity full;
        create table e2e_replident.full_no_pk (a int, b text, c float8);
        alter table e2e_replident.full_no_pk replica identity full;
        create table e2e_replident.using_index (code int not null, id int primary key, v text);
        create unique index using_index_code on e2e_replident.using_index (code);
        alter table e2e_replident.using_index replica identity using index using_index_code;
        create table e2e_replident.using_index_no_pk (code int not null, v text);
        create unique index using_index_no_pk_code on e2e_replident.using_index_no_pk (code);
        alter table e2e_replident.using_index_no_pk replica identity using index using_index_no_pk_code;
        create table e2e_replident.nothing (id int primary key, v text);
        alter table e2e_replident.nothing replica identity nothing;
        create table e2e_replident.nothing_no_pk (a int, v text);
        alter table e2e_replident.nothing_no_pk replica identity nothing;
        create table e2e_replident.multi_pk (a int, b text, c int not null, v text, primary key (b, a));
        ");
    // (table, columns, first rows, more rows). The first column is an int key
    // (or the only identity); every unique column differs between the two
    // row sets.
    let tables = [
        (
            "pk_default",
            "id, v, n",
            "(1, 'one', 1), (2, 'two', null), (3, null, 3)",
            "(4, 'four', 4)",
        ),
        (
            "no_pk",
            "a, b",
            "(1, 'one'), (2, 'two'), (3, null)",
            "(4, 'four'), (4, 'four')",
        ),
        (
            "full_pk",
            "id, v, n",
            "(1, 'one', 1.5), (2, 'two', null), (3, null, 3)",
            "(4, 'four', 4)",
        ),
        (
            "full_no_pk",
            "a, b, c",
            "(1, 'one', 1.5), (2, 'two', null), (3, null, 'NaN')",
            "(4, 'four', 4), (4, 'four', 4)",
        ),
        (
            "using_index",
            "code, id, v",
            "(1, 1, 'one'), (2, 2, null), (3, 3, 'three')",
            "(4, 4, 'four')",
        ),
        (
            "using_index_no_pk",
            "code, v",
            "(1, 'one'), (2, null), (3, 'three')",
            "(4, 'four')",
        ),
        (
            "nothing",
            "id, v",
            "(1, 'one'), (2, null), (3, 'three')",
            "(4, 'four')",
        ),
        (
            "nothing_no_pk",
            "a, v",
            "(1, 'one'), (2, null), (3, 'three')",
            "(4, 'four')",
        ),
        (
            "multi_pk",
            "a, b, c, v",
            "(1, 'x', 10, 'one'), (2, 'x', 20, null), (3, 'y', 30, 'three')",
            "(4, 'x', 40, 'four')",
        ),
    ];
    for (table, columns, rows, more_rows) in tables {
        let cols: Vec<&str> = columns.split(", ").collect();
        let (key, second, last) = (cols[0], cols[1], cols[cols.len() - 1]);
        let t = format!("e2e_replident.{table}");
        db.run(&[
            &format!("insert into {t} ({columns}) values {rows}"),
            // An update that changes nothing but is logged.
            &format!("update {t} set {second} = {second} where {key} = 1"),
            // A non-key column changes.
            &format!(
                "update {t} set {last} = {} where {key} = 2",
                new_value(last)
            ),
            // The key changes.
            &format!("update {t} set {key} = {key} + 100 where {key} = 3"),
            &format!("delete from {t} where {key} = 1"),
            // Several changes in one transaction.
            &format!(
                "begin;
                 update {t} set {key} = {key} + 1000;
                 delete from {t} where {key} = 1002;
                 insert into {t} ({columns}) values {more_rows};
                 update {t} set {last} = {} where {key} = 4;
                 commit",
                new_value(last)
            ),
        ]);
    }
    db.run(&[
        // Part of a multi-column key changes.
        "update e2e_replident.multi_pk set b = 'z' where a = 1 and b = 'x'",
        "update e2e_replident.multi_pk set a = a * 7, c = c + 1 where b = 'y'",
        "delete from e2e_replident.multi_pk where b = 'z'",
    ]);
    db.compare_matrix_and_pk(
        &slots,
        "e2e_replident.pk_default,e2e_replident.no_pk,e2e_replident.multi_pk",
    );
}

/// The differential check of a test: `schema` (in the test schema `name`,
/// see `TestDb::with_slot_pair`), the `workload`, then what both plugins
/// wrote compared (`tables`: see `TestDb::compare_matrix_and_pk`).
fn compare_after(name: &str, schema: &str, workload: &[&str], tables: &str) {
    let (mut db, slots) = TestDb::with_slot_pair(name, schema);
    db.run(workload);
    db.compare_matrix_and_pk(&slots, tables);
}

/// An expression giving a new value to column `col` of the tables above.
fn new_value(col: &str) -> String {
    match col {
        "n" | "c" => format!("{col} * 2 + 1"),
        _ => format!("'changed \"' || coalesce({col}, 'null')"),
    }
}

#[test]
fn toast() {
    require_wal2json!();
    // > 100 kB of hex digits: stored out of line.
    let big = "(select string_agg(md5(i::text), '') from generate_series(1, 4000) i)";
    let big2 = "(select string_agg(md5((i * 7)::text), ' ') from generate_series(1, 3000) i)";
    compare_after(
        "toast",
        "
        create table e2e_toast.t (id int primary key, small int, big text, other text);
        create table e2e_toast.full_t (id int primary key, small int, big text);
        alter table e2e_toast.full_t replica identity full;
        create table e2e_toast.ext (id int primary key, small int, big text, b bytea);
        alter table e2e_toast.ext alter column big set storage external;
        alter table e2e_toast.ext alter column b set storage external;
        ",
        &[
            &format!("insert into e2e_toast.t values (1, 1, {big}, 'o'), (2, 2, {big2}, {big})"),
            &format!("insert into e2e_toast.full_t values (1, 1, {big})"),
            &format!(
                "insert into e2e_toast.ext values (1, 1, {big}, convert_to({big2}, 'UTF8')), (2, 2, 'short', null)"
            ),
            // Unchanged TOAST columns are omitted from the new tuple.
            "update e2e_toast.t set small = small + 10",
            "update e2e_toast.full_t set small = small + 10",
            "update e2e_toast.ext set small = small + 10",
            // The key changes too: the old key is logged, big is still unchanged.
            "update e2e_toast.t set id = id + 100, small = 0 where id = 1",
            // The toasted column itself changes.
            &format!("update e2e_toast.t set big = {big2} where id = 2"),
            &format!("update e2e_toast.full_t set big = left({big}, 5000)"),
            "update e2e_toast.ext set big = big || 'x', b = null where id = 1",
            // Deleting rows with toasted values.
            "delete from e2e_toast.t where id = 101",
            "delete from e2e_toast.full_t",
            "delete from e2e_toast.ext where id = 1",
        ],
        "e2e_toast.t,e2e_toast.ext",
    );
}

#[test]
fn truncate() {
    require_wal2json!();
    compare_after(
        "truncate",
        "
        create table e2e_truncate.a (id int primary key, v text);
        create table e2e_truncate.b (id int primary key, a_id int references e2e_truncate.a (id));
        create table e2e_truncate.c (id serial primary key);
        create table e2e_truncate.part (id int, k int, primary key (id, k)) partition by range (k);
        create table e2e_truncate.part_1 partition of e2e_truncate.part for values from (0) to (10);
        create table e2e_truncate.part_2 partition of e2e_truncate.part for values from (10) to (20);
        ",
        &[
            "insert into e2e_truncate.a values (1, 'x'), (2, 'y')",
            "insert into e2e_truncate.b values (1, 1)",
            "insert into e2e_truncate.c default values",
            "insert into e2e_truncate.part values (1, 1), (2, 15)",
            // Moves the row to the other partition: a DELETE and an INSERT.
            "update e2e_truncate.part set k = 12 where id = 1",
            "update e2e_truncate.part set id = 20 where id = 2",
            "truncate e2e_truncate.c",
            "truncate e2e_truncate.a, e2e_truncate.b",
            "insert into e2e_truncate.a values (3, 'z')",
            "insert into e2e_truncate.b values (3, 3)",
            "truncate e2e_truncate.a cascade",
            "truncate e2e_truncate.c restart identity",
            "truncate e2e_truncate.part",
            "truncate only e2e_truncate.part_2",
            "begin; insert into e2e_truncate.c default values; truncate e2e_truncate.c; insert into e2e_truncate.c default values; commit",
            "truncate e2e_truncate.a, e2e_truncate.b, e2e_truncate.c",
        ],
        "e2e_truncate.*",
    );
}

/// Old tuples written before ALTER TABLE: columns added since (with a
/// "fast" default, stored as attmissingval, or without one) and columns
/// dropped since, under FULL and DEFAULT identities.
#[test]
fn columns_added_and_dropped_before_the_change() {
    require_wal2json!();
    compare_after(
        "altered",
        "
        create table e2e_altered.full_t (id int, gone text, v text);
        alter table e2e_altered.full_t replica identity full;
        create table e2e_altered.pk_t (id int primary key, gone text, v text);
        insert into e2e_altered.full_t values (1, 'g1', 'a'), (2, 'g2', 'b'), (3, 'g3', 'c');
        insert into e2e_altered.pk_t values (1, 'g1', 'a'), (2, 'g2', 'b'), (3, 'g3', 'c');
        alter table e2e_altered.full_t drop column gone;
        alter table e2e_altered.pk_t drop column gone;
        alter table e2e_altered.full_t add column fast int default 5, add column fast_text text default 'dflt', add column plain int;
        alter table e2e_altered.pk_t add column fast int default 5, add column plain int;
        ",
        &[
            // Rows stored before the ALTERs.
            "update e2e_altered.full_t set v = 'a2' where id = 1",
            "delete from e2e_altered.full_t where id = 2",
            "update e2e_altered.pk_t set v = 'a2' where id = 1",
            "update e2e_altered.pk_t set id = 30 where id = 3",
            "delete from e2e_altered.pk_t where id = 2",
            // Rows stored after.
            "insert into e2e_altered.full_t (id, v) values (4, 'd')",
            "delete from e2e_altered.full_t where id = 4",
            "alter table e2e_altered.full_t alter column fast set default 6",
            "insert into e2e_altered.full_t (id, v) values (5, 'e')",
            "delete from e2e_altered.full_t",
        ],
        "e2e_altered.pk_t",
    );
}
