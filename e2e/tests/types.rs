//! Differential tests: values of many data types, NULLs, defaults,
//! generated and dropped columns, and identifiers that need quoting.

use pubjson_e2e::{option_matrix, require_wal2json, TestDb};

#[test]
fn data_types() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "types",
        r#"
        drop type if exists public."E2eTypesMood" cascade;
        create type public."E2eTypesMood" as enum ('calm', 'tense');
        create type e2e_types.mood as enum ('sad', 'ok', 'happy "quoted"');
        create type e2e_types.pair as (a int, b text);
        create domain e2e_types.posint as int check (value > 0);
        create domain e2e_types.shorttext as varchar(12) check (value <> 'bad');
        create domain e2e_types.money2 as numeric(10,2);
        create table e2e_types.t (
            id int primary key,
            i2 int2, i4 int4, i8 int8, o oid,
            f4 float4, f8 float8,
            n numeric, n52 numeric(5,2),
            b bool, by bytea,
            tx text, vc varchar(10), ch char(5), qc "char",
            d date, ts timestamp, ts3 timestamp(3), tstz timestamptz, tm time, tmtz timetz, iv interval,
            u uuid, j json, jb jsonb, ip inet, cidr_ cidr, mac macaddr, m money,
            bits bit(3), vb varbit,
            ia int[], ta text[], na numeric[], ia2 int[][],
            comp e2e_types.pair, mo e2e_types.mood, mo_arr e2e_types.mood[], qm public."E2eTypesMood", qma public."E2eTypesMood"[],
            r int4range, tr tstzrange,
            dp e2e_types.posint, dt e2e_types.shorttext, dm e2e_types.money2,
            pt point, tsv tsvector, x xml, nm name, reg regclass, l pg_lsn
        );
        "#,
    );
    db.run(&[
        // Ordinary values.
        r#"insert into e2e_types.t values (
            1, 32767, 2147483647, 9223372036854775807, 4294967295,
            3.40282e38, 1e300,
            123456789012345678901234567890.123456789, 1.50,
            true, '\x00ff10'::bytea,
            'plain', 'varchar10!', 'ab', 'x',
            '2024-02-29', '2024-02-29 13:14:15.123456', '2024-02-29 13:14:15.123456', '2024-02-29 13:14:15.5+02', '23:59:59.999999', '12:00+05:30', '1 year 2 mons 3 days 04:05:06.789',
            'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50, "x\"y"],  "b" : null}', '{"b": null, "a": [1, 2.50, "x\"y"]}',
            '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '1234.56',
            B'101', B'1101',
            '{1,2,3}', '{"a b","q\"uote",NULL,"NULL","back\\slash",""}', '{1.5,NaN,-0}', '{{1,2},{3,4}}',
            row(7, 'seven "7"'), 'happy "quoted"', '{sad,ok}', 'calm', '{calm,tense}',
            '[1,10)', '[2024-01-01 00:00+00,2024-01-02 00:00+00)',
            5, 'short', 12.345,
            '(1.5,-2)', 'a fat cat sat', '<a href="x">t</a>', 'nm', 'pg_class', '16/B374D848'
        )"#,
        // Special numbers.
        "insert into e2e_types.t (id, f4, f8, n, i2, i8) values (2, 'NaN', 'NaN', 'NaN', -32768, -9223372036854775808)",
        "insert into e2e_types.t (id, f4, f8, n) values (3, 'Infinity', 'Infinity', 'Infinity')",
        "insert into e2e_types.t (id, f4, f8, n) values (4, '-Infinity', '-Infinity', '-Infinity')",
        "insert into e2e_types.t (id, f4, f8, n, n52) values (5, '-0', '-0', '-0', '-0.00')",
        "insert into e2e_types.t (id, f4, f8, n, n52) values (6, 0.1, 0.1, 1.500, 999.99)",
        "insert into e2e_types.t (id, f4, f8, n) values (7, 1e-45, 4.9e-324, 0.000000000000000000000000000001)",
        "insert into e2e_types.t (id, f4, f8, n) values (8, 1.17549435e-38, 2.2250738585072014e-308, 1e20)",
        // Text needing every kind of escape.
        r#"insert into e2e_types.t (id, tx, vc, ch, ta) values (
            9,
            'quote " apostrophe '' backslash \ slash / newline ' || chr(10) || 'cr ' || chr(13) || 'tab ' || chr(9)
              || 'ctl ' || chr(1) || chr(8) || chr(12) || chr(27) || chr(31) || ' del ' || chr(127)
              || ' unicode é ü 日本語 😀 ' || chr(8232) || chr(8233) || ' \u0000 literal',
            'é"\' || chr(10),
            'a"b',
            array['x"y', 'new' || chr(10) || 'line', 'tab' || chr(9), null, 'NULL', '{}', '\']
        )"#,
        // All NULLs (except the key).
        "insert into e2e_types.t (id) values (10)",
        // Empty values.
        "insert into e2e_types.t (id, tx, vc, ch, by, ia, ta, j, jb, dt) values (11, '', '', '', '', '{}', '{}', '\"\"', '{}', '')",
        // Several changes in one transaction.
        "begin;
         update e2e_types.t set tx = 'updated \"' || tx, n = n * 2, f8 = f8 / 3 where id in (1, 6, 9);
         update e2e_types.t set ia = ia || 4, ta = null, mo = 'sad', r = 'empty' where id = 1;
         delete from e2e_types.t where id in (2, 11);
         commit",
        "update e2e_types.t set id = 100 where id = 10",
        "delete from e2e_types.t where id = 3",
        // An empty transaction (DDL only) in the middle.
        "create table e2e_types.ddl_only (a int)",
    ]);
    db.compare_matrix_and_pk(&slots, "e2e_types.*");
}

#[test]
fn defaults_generated_and_dropped_columns() {
    require_wal2json!();
    let mut db = TestDb::new("defaults");
    db.exec(
        r#"
        create sequence e2e_defaults.seq;
        create table e2e_defaults.t (
            id serial primary key,
            k int default 42 not null,
            created timestamptz default now(),
            note text default 'it''s here' not null,
            dropped_me int,
            g int generated always as (k * 2) stored,
            via_seq bigint default nextval('e2e_defaults.seq'),
            expr numeric default (1.5 + 2) * 3,
            arr int[] default '{1,2}',
            later text
        );
        alter table e2e_defaults.t drop column dropped_me;
        alter table e2e_defaults.t add column added_after int default 7;
        create table e2e_defaults.nopk (a int default 1, b text not null default 'b');
        "#,
    );
    if db.server_major() >= 18 {
        // Virtual generated columns (18): NULL in the heap tuple.
        db.exec("alter table e2e_defaults.t add column v int generated always as (k * 3) virtual");
    }
    let slots = db.create_slot_pair();
    db.run(&[
        "insert into e2e_defaults.t default values",
        "insert into e2e_defaults.t (k, note, later) values (1, 'n', 'l'), (2, 'm', null)",
        "update e2e_defaults.t set k = k + 10, later = 'x' where id = 2",
        "alter table e2e_defaults.t drop column later",
        "insert into e2e_defaults.t (k) values (5)",
        "update e2e_defaults.t set k = 0 where id = 1",
        "delete from e2e_defaults.t where id = 3",
        "insert into e2e_defaults.nopk default values",
        "insert into e2e_defaults.nopk (a, b) values (null, 'x')",
    ]);
    db.compare_matrix_and_pk(&slots, "e2e_defaults.*");
}

#[test]
fn identifiers_needing_quotes() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "ident",
        r#"
        drop schema if exists "My Schema" cascade;
        create schema "My Schema";
        create table "My Schema"."Odd ""Name""" (
            "Id" int primary key,
            "col with space" text,
            "quo""te" text,
            "back\slash" int,
            "tab	char" int,
            "ünï" text,
            "UPPER" text
        );
        create table e2e_ident."dot.and,comma" (id int primary key, "a.b" text);
        create table e2e_ident."select" ("from" int primary key, "where" text);
        "#,
    );
    db.run(&[
        r#"insert into "My Schema"."Odd ""Name""" values (1, 's p', 'q"t', 3, 4, 'ü', 'U')"#,
        r#"insert into e2e_ident."dot.and,comma" values (1, 'x')"#,
        r#"insert into e2e_ident."select" values (1, 'w')"#,
        r#"begin;
           update "My Schema"."Odd ""Name""" set "col with space" = 'changed', "Id" = 2 where "Id" = 1;
           update e2e_ident."dot.and,comma" set "a.b" = 'y';
           delete from e2e_ident."select";
           commit"#,
        r#"delete from "My Schema"."Odd ""Name""""#,
        r#"truncate "My Schema"."Odd ""Name""", e2e_ident."dot.and,comma""#,
    ]);
    db.compare_matrix_and_pk(&slots, r#"My\ Schema.*,e2e_ident.*"#);
    db.exec(r#"drop schema "My Schema" cascade"#);
}

#[test]
fn domains() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "domains",
        r#"
        create domain e2e_domains.dbool as bool;
        create domain e2e_domains.di2 as int2;
        create domain e2e_domains.di8 as int8 check (value <> 0);
        create domain e2e_domains.doid as oid;
        create domain e2e_domains.df4 as float4;
        create domain e2e_domains.df8 as float8;
        create domain e2e_domains.dnum as numeric(7,3);
        create domain e2e_domains.dtext as text check (value <> '');
        create domain e2e_domains.dvc as varchar(5);
        create domain e2e_domains.dchar as char(4);
        create domain e2e_domains.dint_arr as int[];
        create domain e2e_domains.djson as jsonb;
        create domain e2e_domains.dd as e2e_domains.di8 check (value < 1000);
        create domain "e2e_domains"."Quoted Dom" as int;
        create table e2e_domains.t (
            id e2e_domains.di8 primary key,
            b e2e_domains.dbool, i2 e2e_domains.di2, o e2e_domains.doid,
            f4 e2e_domains.df4, f8 e2e_domains.df8, n e2e_domains.dnum,
            tx e2e_domains.dtext, vc e2e_domains.dvc, ch e2e_domains.dchar,
            ia e2e_domains.dint_arr, j e2e_domains.djson, dd e2e_domains.dd,
            q "e2e_domains"."Quoted Dom",
            arr_of_dom e2e_domains.dbool[], arr_of_num e2e_domains.dnum[]
        );
        "#,
    );
    db.run(&[
        r#"insert into e2e_domains.t values
            (1, true, -3, 42, 1.5, 'NaN', 1234.5, 'x "y"', 'abc', 'ab', '{1,NULL}', '{"k": [1, 2]}', 999, 7, '{t,f,NULL}', '{1.5,NaN}'),
            (2, false, null, null, '-Infinity', 1e300, 'NaN', 'z', null, null, null, 'null', null, null, null, null)"#,
        "update e2e_domains.t set f8 = f8 * 2, b = not b, id = id + 10",
        "delete from e2e_domains.t where id = 12",
    ]);
    db.compare_matrix_and_pk(&slots, "e2e_domains.*");
}

/// Values are printed by the types' output functions, which read the
/// decoding session's settings: both plugins must follow them.
#[test]
fn session_settings() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair("settings", "create table e2e_settings.t (id int primary key, f4 float4, f8 float8, d date, ts timestamp, tstz timestamptz,
                                      iv interval, by bytea, m money, n numeric, ta timestamptz[])");
    db.run(&[
        r"insert into e2e_settings.t values
            (1, 0.1, 0.1, '2024-02-29', '2024-02-29 13:14:15.5', '2024-02-29 13:14:15.5+02', '-1 year 2 days 03:04:05.6',
             '\x00015c27ff', 12.34, 1.10, '{2024-01-01 00:00:00+00}'),
            (2, 3.3333333, 1.0/3, 'infinity', '-infinity', 'epoch', '1 mon', 'ab', -0.5, 1e-20, null),
            (3, 1, 2, '0044-03-15 BC', '0044-03-15 12:00:00.000001 BC', '12345-06-07 08:09:10.12+00', '0', 'xyz', 0, 0.000100, '{infinity,-infinity}'),
            (4, 1, 2, '1999-12-31', '1999-12-31 23:59:59.999999', '1970-01-01 00:00:00.1-05', '0', 'abc', 0, -0, '{1999-12-31 23:59:59.99+00}')",
    ]);
    let defaults = option_matrix()
        .into_iter()
        .filter(|c| c.label.ends_with(" defaults"))
        .collect::<Vec<_>>();
    for settings in [
        // The defaults (DateStyle ISO, time zone UTC) use pubjson's own
        // timestamp and numeric formatting.
        "reset all",
        "set extra_float_digits = 0",
        "set extra_float_digits = -15",
        "set datestyle = 'SQL, DMY'",
        "set datestyle = 'German'",
        "set intervalstyle = 'iso_8601'",
        "set intervalstyle = 'sql_standard'",
        "set bytea_output = 'escape'",
        "set timezone = 'America/St_Johns'",
        "set lc_monetary = 'C'",
    ] {
        println!("[settings] {settings}");
        db.exec(settings);
        db.compare_all(&slots, &defaults);
        db.exec("reset all");
    }
}
