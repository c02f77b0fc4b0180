//! The pieces of a schema change event: the JDBC driver's sizes and
//! types, Debezium's column sizes and type expressions, table ids, the
//! identities of dropped tables, and `tableChanges` byte by byte. Whole
//! records are in `debezium/tests.rs`; e2e/tests/debezium.rs compares
//! every column with Debezium 3.6's own classes over a real catalog.

use super::*;
use crate::model::{ColumnDetails, ValueKind};
use crate::protocol::ddl::parse;
use crate::text::encoding::ServerEncoding;
use crate::text::json::json_string;
use serde_json::{json, Value as Json};

fn facts(oid: u32, name: &str, kind: u8, array: bool) -> TypeFacts {
    TypeFacts {
        oid,
        name: name.as_bytes().to_vec(),
        kind,
        array_input: array,
    }
}

fn base(oid: u32, name: &str) -> TypeFacts {
    facts(oid, name, b'b', false)
}

/// `numeric(p,s)`'s typmod.
fn numeric_typmod(p: i32, s: i32) -> i32 {
    ((p << 16) | (s & 0x7ff)) + 4
}

#[test]
fn driver_precision_scale_and_display_size() {
    // (oid, typmod, precision, scale, display size), from pgjdbc 42.7.13's
    // TypeInfoCache.
    let max = i32::MAX;
    let cases: &[(u32, i32, i32, i32, i32)] = &[
        (21, -1, 5, 0, 6),
        (23, -1, 10, 0, 11),
        (26, -1, 10, 0, 10),
        (20, -1, 19, 0, 20),
        (700, -1, 8, 8, 15),
        (701, -1, 17, 17, 25),
        (1700, -1, 0, 0, 131_089),
        (1700, numeric_typmod(10, 2), 10, 2, 12),
        (1700, numeric_typmod(5, 0), 5, 0, 6),
        // A negative scale (PostgreSQL 15+) as the driver reads it.
        (1700, numeric_typmod(5, -2), 5, 2046, 7),
        (18, -1, 1, 0, 1),
        (16, -1, 1, 0, 1),
        (1042, -1, max, 0, max),
        (1042, 9, 5, 0, 5),
        (1043, 14, 10, 0, 10),
        (1043, -1, max, 0, max),
        (1082, -1, 13, 0, 13),
        (1083, -1, 15, 6, 15),
        (1083, 0, 8, 0, 8),
        (1083, 1, 11, 1, 11),
        (1083, 3, 12, 3, 12),
        (1266, -1, 21, 6, 21),
        (1114, -1, 29, 6, 29),
        (1114, 3, 26, 3, 26),
        (1184, -1, 35, 6, 35),
        (1184, 0, 28, 0, 28),
        (1186, -1, 49, 6, 49),
        // interval day: its range in the high half, no precision (0xFFFF).
        (1186, (8 << 16) | 0xFFFF, 49, 0xFFFF, 49),
        (1186, (0x7FFF << 16) | 3, 49, 3, 49),
        (1560, 1, 1, 0, 1),
        (1560, 4, 4, 0, 4),
        (1562, -1, max, 0, max),
        (1562, 8, 8, 0, 8),
        (25, -1, max, 0, max),
        (17, -1, max, 0, max),
        (2950, -1, max, 0, max),
        (3802, -1, max, 0, max),
        // The core types' arrays are their elements'.
        (1007, -1, 10, 0, 11),
        (1015, 14, 10, 0, 10),
        (1231, numeric_typmod(8, 3), 8, 3, 10),
        (1185, -1, 35, 6, 35),
        // Other arrays (interval[]) are not.
        (2951, -1, max, 0, max),
        (1187, -1, max, 0, max),
    ];
    for &(oid, typmod, p, s, d) in cases {
        assert_eq!(precision(oid, typmod), p, "precision of {oid}/{typmod}");
        assert_eq!(scale(oid, typmod), s, "scale of {oid}/{typmod}");
        assert_eq!(
            display_size(oid, typmod),
            d,
            "display size of {oid}/{typmod}"
        );
    }
}

#[test]
fn jdbc_types_as_debeziums_registry_takes_them() {
    let cases: &[(TypeFacts, i32)] = &[
        (base(21, "int2"), 5),
        (base(23, "int4"), 4),
        (base(20, "int8"), -5),
        (base(26, "oid"), -5),
        (base(790, "money"), 8),
        (base(1700, "numeric"), 2),
        (base(700, "float4"), 7),
        (base(701, "float8"), 8),
        (base(18, "char"), 1),
        (base(1042, "bpchar"), 1),
        (base(1043, "varchar"), 12),
        (base(25, "text"), 12),
        (base(19, "name"), 12),
        (base(17, "bytea"), -2),
        (base(16, "bool"), -7),
        (base(1560, "bit"), -7),
        (base(1562, "varbit"), 1111),
        (base(1082, "date"), 91),
        (base(1083, "time"), 92),
        (base(1266, "timetz"), 92),
        (base(1114, "timestamp"), 93),
        (base(1184, "timestamptz"), 93),
        (base(1790, "refcursor"), 2012),
        (base(114, "json"), 1111),
        (base(3802, "jsonb"), 1111),
        (base(600, "point"), 1111),
        (base(603, "box"), 1111),
        (base(2950, "uuid"), 1111),
        (base(142, "xml"), 2009),
        (facts(143, "_xml", b'b', true), 2003),
        (base(1186, "interval"), 1111),
        (base(869, "inet"), 1111),
        (facts(3904, "int4range", b'r', false), 1111),
        (facts(1007, "_int4", b'b', true), 2003),
        (facts(2951, "_uuid", b'b', true), 2003),
        (facts(16500, "hstore", b'b', false), 1111),
        (facts(16600, "mood", b'e', false), 12),
        (facts(16601, "_mood", b'b', true), 2003),
        (facts(16700, "pair", b'c', false), 2002),
        (facts(16800, "posint", b'd', false), 2001),
        // int2vector's input is not array_in.
        (base(22, "int2vector"), 1111),
    ];
    for (t, code) in cases {
        assert_eq!(jdbc_type(t), *code, "{}", String::from_utf8_lossy(&t.name));
    }
}

#[test]
fn column_sizes_and_type_expressions() {
    let size = |declared: &TypeFacts, typmod: i32| column_size(declared, typmod, declared, typmod);
    let expr = |s: &ColumnSize| String::from_utf8(s.expression.clone()).unwrap();
    let cases: &[(TypeFacts, i32, Option<i32>, i32, &str)] = &[
        (base(23, "int4"), -1, Some(10), 0, "int4"),
        (base(20, "int8"), -1, Some(19), 0, "int8"),
        (base(25, "text"), -1, Some(i32::MAX), 0, "text"),
        (base(16, "bool"), -1, Some(1), 0, "bool"),
        // float's default scale is not 0: its expression always has one.
        (base(701, "float8"), -1, Some(17), 17, "float8(17,17)"),
        (base(1043, "varchar"), 14, Some(10), 0, "varchar(10,0)"),
        (base(1043, "varchar"), -1, Some(i32::MAX), 0, "varchar"),
        (base(1042, "bpchar"), 5, Some(1), 0, "bpchar(1,0)"),
        (
            base(1700, "numeric"),
            numeric_typmod(10, 2),
            Some(10),
            2,
            "numeric(10,2)",
        ),
        (
            base(1700, "numeric"),
            numeric_typmod(10, 0),
            Some(10),
            0,
            "numeric(10,0)",
        ),
        (base(1700, "numeric"), -1, Some(131_089), 0, "numeric"),
        (base(1114, "timestamp"), -1, Some(29), 6, "timestamp(29,6)"),
        (base(1114, "timestamp"), 3, Some(26), 3, "timestamp(26,3)"),
        (
            base(1184, "timestamptz"),
            0,
            Some(28),
            0,
            "timestamptz(28,0)",
        ),
        (
            base(1186, "interval"),
            (8 << 16) | 0xFFFF,
            Some(49),
            65535,
            "interval(49,65535)",
        ),
        (base(1560, "bit"), 4, Some(4), 0, "bit(4,0)"),
        // A bit without a modifier (only a domain or an array can have
        // one): the driver's -1, Debezium's unset length.
        (base(1560, "bit"), -1, None, 0, "bit"),
        (facts(1007, "_int4", b'b', true), -1, Some(10), 0, "_int4"),
        (
            facts(1015, "_varchar", b'b', true),
            14,
            Some(10),
            0,
            "_varchar(10,0)",
        ),
        (
            facts(2951, "_uuid", b'b', true),
            -1,
            Some(i32::MAX),
            0,
            "_uuid",
        ),
        (
            facts(16600, "mood", b'e', false),
            -1,
            Some(i32::MAX),
            0,
            "mood",
        ),
    ];
    for (t, typmod, length, scale, expression) in cases {
        let s = size(t, *typmod);
        assert_eq!(s.length, *length, "{expression}");
        assert_eq!(s.scale, *scale, "{expression}");
        assert_eq!(expr(&s), *expression);
    }
    // Domains: the root's sizes under the domain's modifier; the
    // expression has them only where the scale is not 0.
    let domain = facts(16800, "code", b'd', false);
    let s = column_size(&domain, -1, &base(1043, "varchar"), 14);
    assert_eq!((s.length, s.scale, expr(&s)), (Some(10), 0, "code".into()));
    let s = column_size(&domain, -1, &base(1700, "numeric"), numeric_typmod(8, 2));
    assert_eq!(
        (s.length, s.scale, expr(&s)),
        (Some(8), 2, "code(8,2)".into())
    );
    let s = column_size(&domain, -1, &base(23, "int4"), -1);
    assert_eq!((s.length, s.scale, expr(&s)), (Some(10), 0, "code".into()));
    let s = column_size(&domain, -1, &base(1114, "timestamp"), -1);
    assert_eq!(
        (s.length, s.scale, expr(&s)),
        (Some(29), 6, "code(29,6)".into())
    );
    let s = column_size(&domain, -1, &base(1700, "numeric"), -1);
    assert_eq!(
        (s.length, s.scale, expr(&s)),
        (Some(131_089), 0, "code".into())
    );
}

#[test]
fn defaults_debezium_keeps() {
    for name in [
        "int4",
        "int8",
        "text",
        "varchar",
        "numeric",
        "timestamptz",
        "uuid",
        "jsonb",
        "bool",
        "interval",
    ] {
        assert!(default_supported(&base(0, name)), "{name}");
    }
    for name in [
        "bytea", "money", "timetz", "inet", "name", "char", "_int4", "point",
    ] {
        assert!(!default_supported(&base(0, name)), "{name}");
    }
    assert!(default_supported(&facts(16600, "mood", b'e', false)));
    assert!(!default_supported(&facts(16800, "posint", b'd', false)));
}

#[test]
fn table_ids_are_double_quoted() {
    let id = |s: &str, t: &str| String::from_utf8(table_id(s.as_bytes(), t.as_bytes())).unwrap();
    assert_eq!(id("public", "t"), r#""public"."t""#);
    assert_eq!(id("my schema", "We\"ird"), r#""my schema"."We""ird""#);
    assert_eq!(id("s", ""), "\"s\".\"\"");
    // Debezium's quirk: a part that begins or ends with a quote is kept.
    assert_eq!(id("s", "\"q"), "\"s\".\"q");
    assert_eq!(id("s", "q\""), "\"s\".q\"");
}

fn object(kind: &str, identity: &str) -> DdlObject {
    DdlObject {
        object_type: Some(kind.as_bytes().to_vec()),
        schema: Some(b"s".to_vec()),
        identity: Some(identity.as_bytes().to_vec()),
        oid: Some(16390),
        classid: Some(1259),
        subid: Some(0),
        tag: None,
    }
}

#[test]
fn dropped_tables_from_identities() {
    let drop = |o: DdlObject| {
        dropped_table(&o)
            .map(|(s, t)| (String::from_utf8(s).unwrap(), String::from_utf8(t).unwrap()))
    };
    let pair = |s: &str, t: &str| Some((s.to_owned(), t.to_owned()));
    assert_eq!(drop(object("table", "public.t")), pair("public", "t"));
    assert_eq!(
        drop(object("partitioned table", "\"My S\".\"a.b\"\"c\"")),
        pair("My S", "a.b\"c")
    );
    assert_eq!(drop(object("table", "s.\"T\"")), pair("s", "T"));
    // Not a table, a column, or not an identity.
    assert_eq!(drop(object("index", "public.t_pkey")), None);
    let mut column = object("table", "public.t");
    column.subid = Some(2);
    assert_eq!(drop(column), None);
    let mut elsewhere = object("table", "public.t");
    elsewhere.classid = Some(1247);
    assert_eq!(drop(elsewhere), None);
    for bad in ["t", "\"unterminated.t", "s.t.u", ".t", "s.", "\"s\"x.t"] {
        assert_eq!(drop(object("table", bad)), None, "{bad}");
    }
}

fn details(declared: TypeFacts, typmod: i32, default: Option<&str>) -> ColumnDetails {
    ColumnDetails {
        typmod,
        root: declared.clone(),
        declared,
        root_typmod: typmod,
        type_not_null: false,
        default_expr: default.map(|d| d.as_bytes().to_vec()),
    }
}

fn index(name: &str, primary: bool, attnums: &[i16]) -> UniqueIndex {
    UniqueIndex {
        name: name.as_bytes().to_vec(),
        primary,
        clustered: false,
        attnums: attnums.to_vec(),
        key_columns: attnums.len(),
    }
}

fn column(i: usize, name: &str, not_null: bool, d: ColumnDetails) -> ColumnMeta {
    ColumnMeta {
        attr_index: i,
        attnum: i as i16 + 1,
        name_json: json_string(name.as_bytes()),
        type_json: json_string(&d.declared.name),
        type_oid_text: d.declared.oid.to_string().into_bytes(),
        kind: ValueKind::Text,
        not_null,
        default_json: None,
        in_primary_key: false,
        in_identity_key: false,
        is_varlena: false,
        domain_base: None,
        attlen: -1,
        byval: false,
        details: Some(Box::new(d)),
    }
}

/// `orders (region int, id int, note varchar(20) default 'x', amount
/// numeric(10,2), code posint NOT NULL-domain, PRIMARY KEY (id, region))`.
fn orders() -> RelationMeta {
    let mut code = details(facts(16800, "posint", b'd', false), -1, Some("1"));
    code.root = base(23, "int4");
    code.type_not_null = true;
    RelationMeta {
        relid: 16384,
        schema: b"public".to_vec(),
        table: b"orders".to_vec(),
        server_encoding: ServerEncoding::Utf8,
        schema_json: json_string(b"public"),
        table_json: json_string(b"orders"),
        columns: vec![
            column(0, "region", true, details(base(23, "int4"), -1, None)),
            column(
                1,
                "id",
                true,
                details(
                    base(23, "int4"),
                    -1,
                    Some("nextval('orders_id_seq'::regclass)"),
                ),
            ),
            column(
                2,
                "note",
                false,
                details(base(1043, "varchar"), 24, Some("'x'::character varying")),
            ),
            column(
                3,
                "amount",
                false,
                details(base(1700, "numeric"), numeric_typmod(10, 2), None),
            ),
            column(4, "code", false, code),
        ],
        has_primary_key: true,
        has_identity_index: true,
        identity: crate::model::ReplicaIdentity::Default,
        unique_indexes: vec![index("orders_pkey", true, &[2, 1])],
    }
}

const CREATE_ORDERS: &[u8] = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE TABLE orders (...)","role":"r","search_path":"public","objects":[{"type":"sequence","schema":"public","identity":"public.orders_id_seq","oid":"16383","classid":"1259","subid":0,"tag":"CREATE SEQUENCE"},{"type":"table","schema":"public","identity":"public.orders","oid":"16384","classid":"1259","subid":0,"tag":"CREATE TABLE"}],"relations":[16384]}"#;

#[test]
fn table_changes_byte_by_byte() {
    let rel = orders();
    let visible = vec![true; rel.columns.len()];
    let tables = [DdlTable {
        rel: &rel,
        visible: &visible,
    }];
    let event = parse(CREATE_ORDERS).expect("a capture message");
    let changes = table_changes(&event, &tables);
    let mut out = Vec::new();
    push_table_changes(&mut out, &changes);
    let expected = concat!(
        r#"[{"type":"CREATE","id":"\"public\".\"orders\"","table":{"defaultCharsetName":null,"primaryKeyColumnNames":["id","region"],"columns":["#,
        r#"{"name":"region","jdbcType":4,"nativeType":23,"typeName":"int4","typeExpression":"int4","charsetName":null,"length":10,"scale":0,"position":1,"optional":false,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":null},"#,
        r#"{"name":"id","jdbcType":4,"nativeType":23,"typeName":"int4","typeExpression":"int4","charsetName":null,"length":10,"scale":0,"position":2,"optional":false,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":"nextval('orders_id_seq'::regclass)","enumValues":null},"#,
        r#"{"name":"note","jdbcType":12,"nativeType":1043,"typeName":"varchar","typeExpression":"varchar(20,0)","charsetName":null,"length":20,"scale":0,"position":3,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":"'x'::character varying","enumValues":null},"#,
        r#"{"name":"amount","jdbcType":2,"nativeType":1700,"typeName":"numeric","typeExpression":"numeric(10,2)","charsetName":null,"length":10,"scale":2,"position":4,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":null},"#,
        r#"{"name":"code","jdbcType":4,"nativeType":23,"typeName":"posint","typeExpression":"posint","charsetName":null,"length":10,"scale":0,"position":5,"optional":false,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":null}"#,
        r#"],"comment":null}}]"#
    );
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(
        names(&event, &changes),
        (Some(b"public".to_vec()), b"orders".to_vec())
    );

    // A column list hiding `note` and the key's `region`: positions count
    // the shown columns, the key names only shown ones.
    let visible = [false, true, false, true, true];
    let tables = [DdlTable {
        rel: &rel,
        visible: &visible,
    }];
    let alter = br#"{"event":"ddl_command_end","tag":"ALTER TABLE","command":"ALTER TABLE orders ADD c int","role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.orders","oid":"16384","classid":"1259","subid":0,"tag":"ALTER TABLE"}],"relations":[16384]}"#;
    let event = parse(alter).expect("a capture message");
    let mut out = Vec::new();
    push_table_changes(&mut out, &table_changes(&event, &tables));
    let v: Json = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(v[0]["type"], "ALTER");
    assert_eq!(v[0]["table"]["primaryKeyColumnNames"], json!(["id"]));
    let columns = v[0]["table"]["columns"].as_array().unwrap();
    let shown: Vec<(&str, i64)> = columns
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["position"].as_i64().unwrap()))
        .collect();
    assert_eq!(shown, [("id", 1), ("amount", 2), ("code", 3)]);
}

#[test]
fn drops_name_the_dropped_tables_without_a_description() {
    let drop = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"DROP TABLE p, other.\"Q\"","role":"r","search_path":"public","objects":[{"type":"partitioned table","schema":"public","identity":"public.p","oid":"16400","classid":"1259","subid":0},{"type":"table","schema":"public","identity":"public.p_1","oid":"16405","classid":"1259","subid":0},{"type":"index","schema":"public","identity":"public.p_pkey","oid":"16403","classid":"1259","subid":0},{"type":"type","schema":"public","identity":"public.p","oid":"16402","classid":"1247","subid":0},{"type":"table","schema":"other","identity":"other.\"Q\"","oid":"16410","classid":"1259","subid":0}],"relations":[],"publications":[]}"#;
    let event = parse(drop).expect("a drop");
    let changes = table_changes(&event, &[]);
    let mut out = Vec::new();
    push_table_changes(&mut out, &changes);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"[{"type":"DROP","id":"\"public\".\"p\"","table":null},{"type":"DROP","id":"\"public\".\"p_1\"","table":null},{"type":"DROP","id":"\"other\".\"Q\"","table":null}]"#
    );
    assert_eq!(
        names(&event, &changes),
        (Some(b"public,other".to_vec()), b"p,p_1,Q".to_vec())
    );
}

#[test]
fn events_without_tables_name_their_objects_schema() {
    let function = br#"{"event":"ddl_command_end","tag":"CREATE FUNCTION","command":"CREATE FUNCTION f() ...","role":"r","search_path":"public","objects":[{"type":"function","schema":"lib","identity":"lib.f()","oid":"16420","classid":"1255","subid":0,"tag":"CREATE FUNCTION"}],"relations":[]}"#;
    let event = parse(function).expect("an event");
    let changes = table_changes(&event, &[]);
    assert!(changes.is_empty());
    assert_eq!(names(&event, &changes), (Some(b"lib".to_vec()), Vec::new()));
    let grant = br#"{"event":"ddl_command_end","tag":"GRANT","command":"GRANT ...","role":"r","search_path":"public","objects":[{"type":null,"schema":null,"identity":null,"oid":null,"classid":null,"subid":null,"tag":"GRANT"}],"relations":[]}"#;
    let event = parse(grant).expect("an event");
    assert_eq!(names(&event, &[]), (None, Vec::new()));
    let mut out = Vec::new();
    push_table_changes(&mut out, &[]);
    assert_eq!(out, b"[]");
}

#[test]
fn the_value_schema_is_debeziums() {
    let source = r#"{"type":"struct","fields":[],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}"#;
    let schema: Json = serde_json::from_str(&value_schema(source)).expect("JSON");
    let names: Vec<&str> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "source",
            "ts_ms",
            "databaseName",
            "schemaName",
            "ddl",
            "tableChanges"
        ]
    );
    assert_eq!(
        schema["name"],
        "io.debezium.connector.postgresql.SchemaChangeValue"
    );
    assert_eq!(
        schema["fields"][1],
        json!({"type":"int64","optional":false,"field":"ts_ms"})
    );
    let change = &schema["fields"][5]["items"];
    assert_eq!(change["name"], "io.debezium.connector.schema.Change");
    let table = &change["fields"][2];
    assert_eq!(table["name"], "io.debezium.connector.schema.Table");
    assert_eq!(table["optional"], true);
    let column = &table["fields"][2]["items"];
    assert_eq!(column["name"], "io.debezium.connector.schema.Column");
    let fields: Vec<(&str, &str, bool)> = column["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap(),
                f["type"].as_str().unwrap(),
                f["optional"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("name", "string", false),
            ("jdbcType", "int32", false),
            ("nativeType", "int32", true),
            ("typeName", "string", false),
            ("typeExpression", "string", true),
            ("charsetName", "string", true),
            ("length", "int32", true),
            ("scale", "int32", true),
            ("position", "int32", false),
            ("optional", "boolean", true),
            ("autoIncremented", "boolean", true),
            ("generated", "boolean", true),
            ("comment", "string", true),
            ("defaultValueExpression", "string", true),
            ("enumValues", "array", true),
        ]
    );
    let key: Json = serde_json::from_str(KEY_SCHEMA).expect("JSON");
    assert_eq!(
        key,
        json!({"type":"struct","fields":[{"type":"string","optional":false,"field":"databaseName"}],
               "optional":false,"name":"io.debezium.connector.postgresql.SchemaChangeKey","version":1})
    );
}

proptest::proptest! {
    /// Whatever the names, the type's name and the default hold, the
    /// table changes are JSON with the same strings, and the id reads
    /// back as Debezium quoted it.
    #[test]
    fn any_names_round_trip(
        schema in "[^\"]{1,12}",
        table in proptest::prelude::any::<String>(),
        name in proptest::prelude::any::<String>(),
        type_name in proptest::prelude::any::<String>(),
        default in proptest::prelude::any::<String>(),
        typmod in -1i32..100_000,
    ) {
        let mut rel = orders();
        rel.schema = schema.as_bytes().to_vec();
        rel.table = table.as_bytes().to_vec();
        let mut d = details(facts(16900, "x", b'e', false), typmod, Some(&default));
        d.declared.name = type_name.as_bytes().to_vec();
        rel.columns = vec![column(0, &name, false, d)];
        let visible = [true];
        let tables = [DdlTable { rel: &rel, visible: &visible }];
        let event = parse(CREATE_ORDERS).expect("a capture message");
        let mut out = Vec::new();
        push_table_changes(&mut out, &table_changes(&event, &tables));
        let v: Json = serde_json::from_slice(&out).expect("valid JSON");
        let c = &v[0]["table"]["columns"][0];
        proptest::prop_assert_eq!(c["name"].as_str(), Some(name.as_str()));
        proptest::prop_assert_eq!(c["typeName"].as_str(), Some(type_name.as_str()));
        proptest::prop_assert_eq!(c["defaultValueExpression"].as_str(), Some(default.as_str()));
        let id = v[0]["id"].as_str().unwrap();
        let quoted = |p: &str| {
            if p.is_empty() {
                "\"\"".to_owned()
            } else if p.starts_with('"') || p.ends_with('"') {
                p.to_owned()
            } else {
                format!("\"{}\"", p.replace('"', "\"\""))
            }
        };
        proptest::prop_assert_eq!(id, format!("{}.{}", quoted(&schema), quoted(&table)));
    }
}

#[test]
fn debeziums_key_primary_key_in_key_order_else_the_first_plain_unique_index() {
    let mut rel = orders();
    let names = |rel: &RelationMeta| -> Vec<String> {
        key_columns(rel)
            .iter()
            .map(|&i| String::from_utf8(rel.columns[i].name_json.clone()).unwrap())
            .collect()
    };
    // PRIMARY KEY (id, region): key order, not column order.
    assert_eq!(names(&rel), ["\"id\"", "\"region\""]);
    // A primary key's INCLUDE columns are not in it.
    rel.unique_indexes = vec![UniqueIndex {
        key_columns: 1,
        ..index("orders_pkey", true, &[2, 3])
    }];
    assert_eq!(names(&rel), ["\"id\""]);
    // No primary key: the first unique index by name whose columns are
    // all plain (an expression is 0), INCLUDE columns with it.
    rel.unique_indexes = vec![
        index("z_first_clustered_no", false, &[5]),
        index("a_expression", false, &[1, 0]),
        UniqueIndex {
            key_columns: 1,
            ..index("b_note_amount", false, &[3, 4])
        },
    ];
    assert_eq!(names(&rel), ["\"note\"", "\"amount\""]);
    // A clustered one comes first.
    rel.unique_indexes[0].clustered = true;
    assert_eq!(names(&rel), ["\"code\""]);
    // None usable: no key.
    rel.unique_indexes = vec![index("only_expression", false, &[0])];
    assert!(key_columns(&rel).is_empty());
}

#[test]
fn a_domains_not_null_makes_a_column_required() {
    let rel = orders();
    let optional_of: Vec<bool> = rel.columns.iter().map(optional).collect();
    // region, id NOT NULL; note, amount nullable; code of a NOT NULL domain.
    assert_eq!(optional_of, [false, false, true, true, false]);
}
