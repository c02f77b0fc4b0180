//! DDL events as Debezium's schema change events (pure code).
//!
//! Debezium's PostgreSQL connector writes no schema change events; its
//! other connectors (MySQL, SQL Server, Oracle, Db2) write them to the
//! `<topic.prefix>` topic, keyed by `{"databaseName": ...}`, with the value
//! Debezium 3.6's `EventDispatcher` builds (`source`, `ts_ms`,
//! `databaseName`, `schemaName`, `ddl`, `tableChanges`) and each table
//! change as `ConnectTableChangeSerializer` writes it (`type`, `id`,
//! `table`: `defaultCharsetName`, `primaryKeyColumnNames`, `columns`,
//! `comment`). The schemas are `SchemaFactory`'s, named for the
//! PostgreSQL connector (`io.debezium.connector.postgresql.SchemaChangeKey`,
//! `...SchemaChangeValue`).
//!
//! A table is described as the PostgreSQL connector describes it to
//! itself while it streams with `plugin.name=pgoutput`
//! (`PgOutputMessageDecoder.resolveRelationFromMetadata`): JDBC type and
//! native type of the type at the root of a domain, the type's name,
//! length and scale as the PostgreSQL JDBC driver (42.7.13, the one
//! Debezium 3.6 ships) reports them for the column's type modifier
//! ([`jdbc_type`], [`precision`], [`scale`], [`display_size`]), nullability
//! and default as the driver's column metadata gives them. docs/debezium.md
//! lists every field and every choice.

use crate::model::{ColumnMeta, RelationMeta, TypeFacts, UniqueIndex};
use crate::output::format::DdlTable;
use crate::protocol::ddl::{DdlEvent, DdlObject};
use crate::text::json::{push_i64, push_json_string};

/// `java.sql.Types` codes.
mod sql_types {
    pub const BIT: i32 = -7;
    pub const BIGINT: i32 = -5;
    pub const BINARY: i32 = -2;
    pub const CHAR: i32 = 1;
    pub const NUMERIC: i32 = 2;
    pub const INTEGER: i32 = 4;
    pub const SMALLINT: i32 = 5;
    pub const REAL: i32 = 7;
    pub const DOUBLE: i32 = 8;
    pub const VARCHAR: i32 = 12;
    pub const DATE: i32 = 91;
    pub const TIME: i32 = 92;
    pub const TIMESTAMP: i32 = 93;
    pub const OTHER: i32 = 1111;
    pub const DISTINCT: i32 = 2001;
    pub const STRUCT: i32 = 2002;
    pub const ARRAY: i32 = 2003;
    pub const REF_CURSOR: i32 = 2012;
    pub const SQLXML: i32 = 2009;
}

/// The JDBC type of a type, as Debezium's `TypeRegistry` takes it from the
/// driver: the driver's core types by name (`TypeInfoCache.types`, and
/// `uuid` and `xml`, which `PgConnection` adds), then arrays, composites,
/// domains, enums, and `OTHER` for everything else.
pub fn jdbc_type(t: &TypeFacts) -> i32 {
    use sql_types::*;
    match t.name.as_slice() {
        b"int2" => SMALLINT,
        b"int4" => INTEGER,
        b"oid" | b"int8" => BIGINT,
        b"money" | b"float8" => DOUBLE,
        b"numeric" => NUMERIC,
        b"float4" => REAL,
        b"char" | b"bpchar" => CHAR,
        b"varchar" | b"text" | b"name" => VARCHAR,
        b"bytea" => BINARY,
        b"bool" | b"bit" => BIT,
        b"date" => DATE,
        b"time" | b"timetz" => TIME,
        b"timestamp" | b"timestamptz" => TIMESTAMP,
        b"refcursor" => REF_CURSOR,
        b"xml" => SQLXML,
        b"varbit" | b"json" | b"jsonb" | b"point" | b"box" | b"uuid" => OTHER,
        // The core types' arrays by their `_` names, like any other array.
        _ if t.array_input => ARRAY,
        _ => match t.kind {
            b'c' => STRUCT,
            b'd' => DISTINCT,
            b'e' => VARCHAR,
            _ => OTHER,
        },
    }
}

/// PostgreSQL's OIDs the driver knows by number.
mod oid {
    pub const BOOL: u32 = 16;
    pub const CHAR: u32 = 18;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    pub const BYTEA: u32 = 17;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const BIT: u32 = 1560;
    pub const VARBIT: u32 = 1562;
    pub const NUMERIC: u32 = 1700;
}

/// The driver's `unknownLength` (its default): the length of a type it
/// cannot size.
const UNKNOWN_LENGTH: i32 = i32::MAX;

/// The driver's `convertArrayToBaseOid`: the arrays of its core types
/// (`uuid` and `xml` included) are measured as their elements.
fn array_element(type_oid: u32) -> u32 {
    match type_oid {
        1005 => 21,
        1007 => 23,
        1028 => 26,
        1016 => 20,
        791 => 790,
        1231 => 1700,
        1021 => 700,
        1022 => 701,
        1002 => 18,
        1014 => 1042,
        1015 => 1043,
        1563 => 1562,
        1009 => 25,
        1003 => 19,
        1001 => 17,
        1000 => 16,
        1561 => 1560,
        1182 => 1082,
        1183 => 1083,
        1270 => 1266,
        1115 => 1114,
        1185 => 1184,
        2201 => 1790,
        199 => 114,
        3807 => 3802,
        1017 => 600,
        1020 => 603,
        2951 => 2950,
        143 => 142,
        other => other,
    }
}

/// The driver's `TypeInfoCache.getPrecision` (Java's int arithmetic).
pub fn precision(type_oid: u32, typmod: i32) -> i32 {
    match array_element(type_oid) {
        oid::INT2 => 5,
        oid::OID | oid::INT4 => 10,
        oid::INT8 => 19,
        oid::FLOAT4 => 8,
        oid::FLOAT8 => 17,
        oid::NUMERIC if typmod == -1 => 0,
        oid::NUMERIC => (typmod.wrapping_sub(4) & (0xFFFF_0000u32 as i32)) >> 16,
        oid::CHAR | oid::BOOL => 1,
        oid::BPCHAR | oid::VARCHAR if typmod == -1 => UNKNOWN_LENGTH,
        oid::BPCHAR | oid::VARCHAR => typmod.wrapping_sub(4),
        oid::DATE | oid::TIME | oid::TIMETZ | oid::INTERVAL | oid::TIMESTAMP | oid::TIMESTAMPTZ => {
            display_size(type_oid, typmod)
        }
        oid::BIT => typmod,
        oid::VARBIT if typmod == -1 => UNKNOWN_LENGTH,
        oid::VARBIT => typmod,
        _ => UNKNOWN_LENGTH,
    }
}

/// The driver's `TypeInfoCache.getScale`.
pub fn scale(type_oid: u32, typmod: i32) -> i32 {
    match array_element(type_oid) {
        oid::FLOAT4 => 8,
        oid::FLOAT8 => 17,
        oid::NUMERIC if typmod == -1 => 0,
        oid::NUMERIC => typmod.wrapping_sub(4) & 0xFFFF,
        oid::TIME | oid::TIMETZ | oid::TIMESTAMP | oid::TIMESTAMPTZ if typmod == -1 => 6,
        oid::TIME | oid::TIMETZ | oid::TIMESTAMP | oid::TIMESTAMPTZ => typmod,
        oid::INTERVAL if typmod == -1 => 6,
        oid::INTERVAL => typmod & 0xFFFF,
        _ => 0,
    }
}

/// The driver's `TypeInfoCache.getDisplaySize`.
pub fn display_size(type_oid: u32, typmod: i32) -> i32 {
    let element = array_element(type_oid);
    match element {
        oid::INT2 => 6,
        oid::INT4 => 11,
        oid::OID => 10,
        oid::INT8 => 20,
        oid::FLOAT4 => 15,
        oid::FLOAT8 => 25,
        oid::CHAR | oid::BOOL => 1,
        oid::DATE => 13,
        oid::TIME | oid::TIMETZ | oid::TIMESTAMP | oid::TIMESTAMPTZ => {
            let seconds = match typmod {
                -1 => 6 + 1,
                0 => 0,
                // "Bizarrely SELECT '0:0:0.1'::time(1); returns 2 digits."
                1 => 2 + 1,
                n => n.wrapping_add(1),
            };
            match element {
                oid::TIME => 8 + seconds,
                oid::TIMETZ => 8 + seconds + 6,
                oid::TIMESTAMP => 13 + 1 + 8 + seconds,
                _ => 13 + 1 + 8 + seconds + 6,
            }
        }
        oid::INTERVAL => 49,
        oid::VARCHAR | oid::BPCHAR if typmod == -1 => UNKNOWN_LENGTH,
        oid::VARCHAR | oid::BPCHAR => typmod.wrapping_sub(4),
        oid::NUMERIC if typmod == -1 => 131_089,
        oid::NUMERIC => {
            let precision = (typmod.wrapping_sub(4) >> 16) & 0xFFFF;
            let scale = typmod.wrapping_sub(4) & 0xFFFF;
            1 + precision + i32::from(scale != 0)
        }
        oid::BIT => typmod,
        oid::VARBIT if typmod == -1 => UNKNOWN_LENGTH,
        oid::VARBIT => typmod,
        oid::TEXT | oid::BYTEA => UNKNOWN_LENGTH,
        _ => UNKNOWN_LENGTH,
    }
}

/// `PostgresType.getDefaultLength` of a type that is no domain.
fn default_length(type_oid: u32) -> i32 {
    match precision(type_oid, -1) {
        0 => display_size(type_oid, -1),
        size => size,
    }
}

/// How Debezium's PostgreSQL connector sizes a column: its length, its
/// scale and its type expression (`ColumnMetaData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSize {
    /// `None`: the driver's -1, Debezium's unset length.
    pub length: Option<i32>,
    pub scale: i32,
    /// The type's name, with `(length,scale)` unless both are the type's
    /// defaults.
    pub expression: Vec<u8>,
}

/// `ColumnMetaData`'s length, scale and type expression of a column of
/// type `declared` with modifier `typmod`; for a domain, its default
/// length and scale are its root type's under the domain's modifier
/// (`PostgresType.getDefaultLength` walking up to the root).
pub fn column_size(
    declared: &TypeFacts,
    typmod: i32,
    root: &TypeFacts,
    root_typmod: i32,
) -> ColumnSize {
    let (default_length, default_scale) = if declared.kind == b'd' {
        if root_typmod == -1 {
            (default_length(root.oid), scale(root.oid, -1))
        } else {
            let size = match precision(root.oid, root_typmod) {
                0 => display_size(root.oid, root_typmod),
                size => size,
            };
            (
                if size != 0 { size } else { UNKNOWN_LENGTH },
                scale(root.oid, root_typmod),
            )
        }
    } else {
        (default_length(declared.oid), scale(declared.oid, -1))
    };
    let (length, scale) = if typmod != -1 {
        (precision(declared.oid, typmod), scale(declared.oid, typmod))
    } else {
        (default_length, default_scale)
    };
    let mut expression = declared.name.clone();
    if !(length == default_length && scale == 0) {
        expression.extend_from_slice(format!("({length},{scale})").as_bytes());
    }
    ColumnSize {
        length: (length != -1).then_some(length),
        scale,
        expression,
    }
}

/// Whether Debezium keeps a column's default: its default value converter
/// knows the type (`PostgresDefaultValueConverter.supportConversion`,
/// asked with the declared type's name: a domain's own is unknown to it).
pub fn default_supported(declared: &TypeFacts) -> bool {
    declared.kind == b'e'
        || matches!(
            declared.name.as_slice(),
            b"bit"
                | b"varbit"
                | b"bool"
                | b"bpchar"
                | b"varchar"
                | b"text"
                | b"numeric"
                | b"float4"
                | b"float8"
                | b"int2"
                | b"int4"
                | b"int8"
                | b"json"
                | b"jsonb"
                | b"xml"
                | b"uuid"
                | b"date"
                | b"time"
                | b"timestamp"
                | b"timestamptz"
                | b"interval"
        )
}

/// The columns of Debezium's key of `rel`, in key order (indexes into
/// `rel.columns`): the primary key's, else those of the first unique
/// index all of whose columns are plain columns (a clustered one first,
/// then by name; `INCLUDE`d columns too), as the PostgreSQL connector reads
/// them through the JDBC driver (`readPrimaryKeyNames`, else
/// `readTableUniqueIndices` over `getIndexInfo`). Without the catalog's
/// indexes: the primary key's columns in column order.
pub fn key_columns(rel: &RelationMeta) -> Vec<usize> {
    let position = |attnum: &i16| rel.columns.iter().position(|c| c.attnum == *attnum);
    if rel.unique_indexes.is_empty() {
        return (0..rel.columns.len())
            .filter(|&i| rel.has_primary_key && rel.columns[i].in_primary_key)
            .collect();
    }
    if let Some(pk) = rel.unique_indexes.iter().find(|i| i.primary) {
        let keys = pk.key_columns.min(pk.attnums.len());
        return pk.attnums[..keys].iter().filter_map(position).collect();
    }
    let mut plain: Vec<&UniqueIndex> = rel
        .unique_indexes
        .iter()
        .filter(|i| i.attnums.iter().all(|&a| a > 0))
        .collect();
    plain.sort_by(|a, b| {
        b.clustered
            .cmp(&a.clustered)
            .then_with(|| a.name.cmp(&b.name))
    });
    plain
        .first()
        .map(|i| i.attnums.iter().filter_map(position).collect())
        .unwrap_or_default()
}

/// Whether a column may be null as Debezium sees it: the JDBC driver's
/// `NULLABLE`, which counts a domain's `NOT NULL`.
pub fn optional(column: &ColumnMeta) -> bool {
    let domain_not_null = column
        .details
        .as_deref()
        .is_some_and(|d| d.declared.kind == b'd' && d.type_not_null);
    !(column.not_null || domain_not_null)
}

/// `TableId.toDoubleQuotedString` of `schema.table`: each part in double
/// quotes, its quotes doubled (Debezium leaves a part that begins or ends
/// with a quote as it is).
pub fn table_id(schema: &[u8], table: &[u8]) -> Vec<u8> {
    let mut id = Vec::with_capacity(schema.len() + table.len() + 5);
    for (n, part) in [schema, table].into_iter().enumerate() {
        if n > 0 {
            id.push(b'.');
        }
        if part.is_empty() {
            id.extend_from_slice(b"\"\"");
        } else if part.first() != Some(&b'"') && part.last() != Some(&b'"') {
            id.push(b'"');
            for &b in part {
                if b == b'"' {
                    id.push(b'"');
                }
                id.push(b);
            }
            id.push(b'"');
        } else {
            id.extend_from_slice(part);
        }
    }
    id
}

/// One part of `pg_identify_object`'s identity: a name as
/// `quote_identifier` writes it, and what follows it.
fn identifier(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    if let Some(rest) = s.strip_prefix(b"\"") {
        let mut name = Vec::new();
        let mut i = 0;
        loop {
            match rest.get(i)? {
                b'"' if rest.get(i + 1) == Some(&b'"') => {
                    name.push(b'"');
                    i += 2;
                }
                b'"' => return Some((name, &rest[i + 1..])),
                &b => {
                    name.push(b);
                    i += 1;
                }
            }
        }
    }
    let end = s.iter().position(|&b| b == b'.').unwrap_or(s.len());
    (end > 0).then(|| (s[..end].to_vec(), &s[end..]))
}

/// The schema and name of a table in a `sql_drop` event: its identity,
/// `schema.name` with each part quoted where needed.
pub fn dropped_table(object: &DdlObject) -> Option<(Vec<u8>, Vec<u8>)> {
    let is_table = matches!(
        object.object_type.as_deref(),
        Some(b"table" | b"partitioned table")
    );
    if !is_table || object.classid != Some(1259) || object.subid.unwrap_or(0) != 0 {
        return None;
    }
    let (schema, rest) = identifier(object.identity.as_deref()?)?;
    let (table, rest) = identifier(rest.strip_prefix(b".")?)?;
    rest.is_empty().then_some((schema, table))
}

/// Whether the command created `rel` (rather than changing it): one of its
/// objects is the table, with a subcommand tag that creates it.
fn created(event: &DdlEvent, rel: &RelationMeta) -> bool {
    event.objects.iter().any(|o| {
        o.classid == Some(1259)
            && o.oid == Some(rel.relid)
            && o.subid.unwrap_or(0) == 0
            && matches!(
                o.tag.as_deref(),
                Some(b"CREATE TABLE" | b"CREATE TABLE AS" | b"SELECT INTO")
            )
    })
}

/// A table change of the event: CREATE or ALTER with the table's
/// description, or DROP with only its name.
pub enum TableChange<'a> {
    Described {
        create: bool,
        table: &'a DdlTable<'a>,
    },
    Dropped {
        schema: Vec<u8>,
        table: Vec<u8>,
    },
}

impl TableChange<'_> {
    pub fn schema(&self) -> &[u8] {
        match self {
            TableChange::Described { table, .. } => &table.rel.schema,
            TableChange::Dropped { schema, .. } => schema,
        }
    }

    pub fn table(&self) -> &[u8] {
        match self {
            TableChange::Described { table, .. } => &table.rel.table,
            TableChange::Dropped { table, .. } => table,
        }
    }
}

/// The event's table changes: each described table (created or changed),
/// or for a `sql_drop` event each dropped table.
pub fn table_changes<'a>(event: &DdlEvent, tables: &'a [DdlTable<'a>]) -> Vec<TableChange<'a>> {
    if event.is_drop() {
        return event
            .objects
            .iter()
            .filter_map(dropped_table)
            .map(|(schema, table)| TableChange::Dropped { schema, table })
            .collect();
    }
    tables
        .iter()
        .map(|t| TableChange::Described {
            create: created(event, t.rel),
            table: t,
        })
        .collect()
}

/// The names the event is about: the distinct schemas of its table
/// changes (else of its objects) and its tables' names, each joined by
/// `,` (as Debezium's Oracle connector names the tables of a DDL in its
/// `source` block). `None`: the event names no schema.
pub fn names(event: &DdlEvent, changes: &[TableChange<'_>]) -> (Option<Vec<u8>>, Vec<u8>) {
    let mut schemas: Vec<&[u8]> = Vec::new();
    for s in changes.iter().map(TableChange::schema) {
        if !schemas.contains(&s) {
            schemas.push(s);
        }
    }
    if schemas.is_empty() {
        for s in event.objects.iter().filter_map(|o| o.schema.as_deref()) {
            if !schemas.contains(&s) {
                schemas.push(s);
            }
        }
    }
    let schema = (!schemas.is_empty()).then(|| schemas.join(&b","[..]));
    let tables: Vec<&[u8]> = changes.iter().map(TableChange::table).collect();
    (schema, tables.join(&b","[..]))
}

fn push_nullable_string(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        Some(s) => push_json_string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// One column as `ConnectTableChangeSerializer` writes it (`position`: its
/// place among the described columns, from 1).
fn push_column(out: &mut Vec<u8>, column: &ColumnMeta, position: usize) {
    out.extend_from_slice(b"{\"name\":");
    out.extend_from_slice(&column.name_json);
    let Some(d) = column.details.as_deref() else {
        // The catalog reader fills the details for this format
        // (`column_details`); without them only the name, the type's
        // name, the place and nullability are known.
        out.extend_from_slice(b",\"jdbcType\":1111,\"nativeType\":null,\"typeName\":");
        out.extend_from_slice(&column.type_json);
        out.extend_from_slice(b",\"typeExpression\":");
        out.extend_from_slice(&column.type_json);
        out.extend_from_slice(
            b",\"charsetName\":null,\"length\":null,\"scale\":null,\"position\":",
        );
        push_i64(out, position as i64);
        out.extend_from_slice(b",\"optional\":");
        out.extend_from_slice(if column.not_null { b"false" } else { b"true" });
        out.extend_from_slice(b",\"autoIncremented\":false,\"generated\":false,\"comment\":null,\"defaultValueExpression\":null,\"enumValues\":null}");
        return;
    };
    let size = column_size(&d.declared, d.typmod, &d.root, d.root_typmod);
    out.extend_from_slice(b",\"jdbcType\":");
    push_i64(out, jdbc_type(&d.root).into());
    out.extend_from_slice(b",\"nativeType\":");
    // An OID as Java's int.
    push_i64(out, (d.root.oid as i32).into());
    out.extend_from_slice(b",\"typeName\":");
    push_json_string(out, &d.declared.name);
    out.extend_from_slice(b",\"typeExpression\":");
    push_json_string(out, &size.expression);
    out.extend_from_slice(b",\"charsetName\":null,\"length\":");
    match size.length {
        Some(length) => push_i64(out, length.into()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"scale\":");
    push_i64(out, size.scale.into());
    out.extend_from_slice(b",\"position\":");
    push_i64(out, position as i64);
    out.extend_from_slice(b",\"optional\":");
    out.extend_from_slice(if optional(column) { b"true" } else { b"false" });
    out.extend_from_slice(
        b",\"autoIncremented\":false,\"generated\":false,\"comment\":null,\"defaultValueExpression\":",
    );
    let default = d
        .default_expr
        .as_deref()
        .filter(|_| default_supported(&d.declared));
    push_nullable_string(out, default);
    out.extend_from_slice(b",\"enumValues\":null}");
}

/// A described table's `table` struct: its columns the consumer is shown,
/// its primary key's names among them in key order.
fn push_table(out: &mut Vec<u8>, t: &DdlTable<'_>) {
    let shown = || {
        t.rel
            .columns
            .iter()
            .zip(t.visible.iter().chain(std::iter::repeat(&true)))
            .filter(|(_, &v)| v)
            .map(|(c, _)| c)
    };
    // The key's columns among the shown ones (Debezium keeps those of the
    // relation message).
    let key: Vec<&ColumnMeta> = key_columns(t.rel)
        .into_iter()
        .filter(|&i| t.visible.get(i).copied().unwrap_or(true))
        .map(|i| &t.rel.columns[i])
        .collect();
    out.extend_from_slice(b"{\"defaultCharsetName\":null,\"primaryKeyColumnNames\":[");
    for (n, c) in key.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&c.name_json);
    }
    out.extend_from_slice(b"],\"columns\":[");
    for (n, c) in shown().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        push_column(out, c, n + 1);
    }
    out.extend_from_slice(b"],\"comment\":null}");
}

/// The `tableChanges` array.
pub fn push_table_changes(out: &mut Vec<u8>, changes: &[TableChange<'_>]) {
    out.push(b'[');
    for (n, change) in changes.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let kind: &[u8] = match change {
            TableChange::Described { create: true, .. } => b"CREATE",
            TableChange::Described { create: false, .. } => b"ALTER",
            TableChange::Dropped { .. } => b"DROP",
        };
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind);
        out.extend_from_slice(b"\",\"id\":");
        push_json_string(out, &table_id(change.schema(), change.table()));
        out.extend_from_slice(b",\"table\":");
        match change {
            TableChange::Described { table, .. } => push_table(out, table),
            TableChange::Dropped { .. } => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// `SchemaFactory.schemaHistoryConnectorKeySchema` for the PostgreSQL
/// connector.
pub const KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"databaseName"}],"optional":false,"name":"io.debezium.connector.postgresql.SchemaChangeKey","version":1}"#;

/// `schemaHistoryColumnSchema`.
const COLUMN_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"name"},{"type":"int32","optional":false,"field":"jdbcType"},{"type":"int32","optional":true,"field":"nativeType"},{"type":"string","optional":false,"field":"typeName"},{"type":"string","optional":true,"field":"typeExpression"},{"type":"string","optional":true,"field":"charsetName"},{"type":"int32","optional":true,"field":"length"},{"type":"int32","optional":true,"field":"scale"},{"type":"int32","optional":false,"field":"position"},{"type":"boolean","optional":true,"field":"optional"},{"type":"boolean","optional":true,"field":"autoIncremented"},{"type":"boolean","optional":true,"field":"generated"},{"type":"string","optional":true,"field":"comment"},{"type":"string","optional":true,"field":"defaultValueExpression"},{"type":"array","items":{"type":"string","optional":false},"optional":true,"field":"enumValues"}],"optional":false,"name":"io.debezium.connector.schema.Column","version":1}"#;

/// `schemaHistoryConnectorValueSchema` for the PostgreSQL connector: its
/// `source` block (the change events' own), the history record's fields,
/// `schemaHistoryChangeSchema` for the items of `tableChanges`.
pub fn value_schema(source_schema: &str) -> String {
    format!(
        r#"{{"type":"struct","fields":[{source_schema},{{"type":"int64","optional":false,"field":"ts_ms"}},{{"type":"string","optional":true,"field":"databaseName"}},{{"type":"string","optional":true,"field":"schemaName"}},{{"type":"string","optional":true,"field":"ddl"}},{{"type":"array","items":{{"type":"struct","fields":[{{"type":"string","optional":false,"field":"type"}},{{"type":"string","optional":false,"field":"id"}},{{"type":"struct","fields":[{{"type":"string","optional":true,"field":"defaultCharsetName"}},{{"type":"array","items":{{"type":"string","optional":false}},"optional":true,"field":"primaryKeyColumnNames"}},{{"type":"array","items":{COLUMN_SCHEMA},"optional":false,"field":"columns"}},{{"type":"string","optional":true,"field":"comment"}}],"optional":true,"name":"io.debezium.connector.schema.Table","version":1,"field":"table"}}],"optional":false,"name":"io.debezium.connector.schema.Change","version":1}},"optional":false,"field":"tableChanges"}}],"optional":false,"name":"io.debezium.connector.postgresql.SchemaChangeValue","version":1}}"#
    )
}

#[cfg(test)]
mod tests;
