//! docs/debezium.md's consumer of schema change events, as code: a replica
//! database whose tables follow the source's through the `debezium`
//! format's records on the `<topic.prefix>` topic (`tableChanges`: CREATE,
//! ALTER, DROP; columns by name, their PostgreSQL types from `typeName`,
//! `length` and `scale`, NOT NULL from `optional`, the primary key from
//! `primaryKeyColumnNames`). Used by the Debezium suite
//! (`tests/debezium.rs`).

use std::collections::BTreeMap;

use postgres::Client;
use serde_json::Value;

use crate::ddl_replica::quote_ident;
use crate::exec;

/// A column as the replica declares it: name, type, NOT NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaColumn {
    pub name: String,
    pub sql_type: String,
    pub not_null: bool,
}

/// The PostgreSQL type of a column of a table change (docs/debezium.md,
/// "Schema change events"): `typeName`, an array when it begins with `_`,
/// with the modifier `length` and `scale` stand for when
/// `typeExpression` says the column has one.
pub fn sql_type(column: &Value) -> String {
    let name = column["typeName"].as_str().expect("typeName");
    let expression = column["typeExpression"].as_str().unwrap_or(name);
    let length = column["length"].as_i64();
    let scale = column["scale"].as_i64().unwrap_or(0);
    let (element, array) = match name.strip_prefix('_') {
        Some(element) => (element, "[]"),
        None => (name, ""),
    };
    let modified = expression != name;
    let modifier = match element {
        "varchar" | "bpchar" | "bit" | "varbit" if modified => {
            length.map(|l| format!("({l})")).unwrap_or_default()
        }
        "numeric" if modified => format!("({},{scale})", length.unwrap_or(0)),
        // 6 is the default precision: no modifier; an interval's fields
        // are not carried (its scale is then 65535).
        "time" | "timetz" | "timestamp" | "timestamptz" | "interval" if modified && scale < 6 => {
            format!("({scale})")
        }
        _ => String::new(),
    };
    // `typName` is `pg_type.typname`: quoted, it is that type (`"char"`
    // is not `char`); but an interval's precision is only an interval's
    // in SQL's own syntax (`"interval"(2)` is `interval month`).
    let name = if element == "interval" {
        element.to_owned()
    } else {
        quote_ident(element)
    };
    format!("{name}{modifier}{array}")
}

fn columns(table: &Value) -> Vec<ReplicaColumn> {
    table["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| ReplicaColumn {
            name: c["name"].as_str().expect("name").to_owned(),
            sql_type: sql_type(c),
            not_null: c["optional"] == false,
        })
        .collect()
}

fn primary_key(table: &Value) -> Vec<String> {
    table["primaryKeyColumnNames"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| k.as_str().expect("key name").to_owned())
        .collect()
}

/// The schema and table of Debezium's table id, `"schema"."table"`
/// (each part in double quotes, its quotes doubled).
pub fn id_parts(id: &str) -> (String, String) {
    let mut parts = Vec::new();
    let mut rest = id;
    while let Some(quoted) = rest.strip_prefix('"') {
        let mut part = String::new();
        let mut chars = quoted.char_indices().peekable();
        let end = loop {
            let (i, ch) = chars.next().unwrap_or_else(|| panic!("a table id: {id}"));
            if ch == '"' {
                if chars.peek().map(|(_, c)| *c) == Some('"') {
                    chars.next();
                    part.push('"');
                    continue;
                }
                break i + 1;
            }
            part.push(ch);
        };
        parts.push(part);
        rest = quoted[end..].strip_prefix('.').unwrap_or(&quoted[end..]);
    }
    match <[String; 2]>::try_from(parts) {
        Ok([schema, table]) if rest.is_empty() => (schema, table),
        _ => panic!("a table id: {id}"),
    }
}

/// Debezium's table id as the replica names the table.
fn target(id: &str) -> String {
    let (schema, table) = id_parts(id);
    format!("{}.{}", quote_ident(&schema), quote_ident(&table))
}

/// The replica's tables, by Debezium's table id.
#[derive(Default)]
pub struct SchemaChangeReplica {
    tables: BTreeMap<String, (Vec<ReplicaColumn>, Vec<String>)>,
}

impl SchemaChangeReplica {
    /// Applies one record of the `debezium` format: a schema change event
    /// (its destination is the topic prefix) changes the replica; other
    /// records are rows, which this consumer leaves alone.
    pub fn apply(&mut self, replica: &mut Client, topic_prefix: &str, record: &Value) {
        if record["destination"] != topic_prefix {
            return;
        }
        let value = &record["value"];
        let payload = value.get("payload").unwrap_or(value);
        for change in payload["tableChanges"].as_array().expect("tableChanges") {
            let id = change["id"].as_str().expect("id");
            match change["type"].as_str().expect("type") {
                "DROP" => {
                    if self.tables.remove(id).is_some() {
                        exec(replica, &format!("DROP TABLE {}", target(id)));
                    }
                }
                _ => self.create_or_alter(replica, id, &change["table"]),
            }
        }
    }

    fn create_or_alter(&mut self, replica: &mut Client, id: &str, table: &Value) {
        let new = columns(table);
        let key = primary_key(table);
        let t = target(id);
        let Some((old, old_key)) = self.tables.get(id) else {
            // CREATE, or an ALTER of a table the replica does not have.
            let mut defs: Vec<String> = new
                .iter()
                .map(|c| {
                    format!(
                        "{} {}{}",
                        quote_ident(&c.name),
                        c.sql_type,
                        if c.not_null { " NOT NULL" } else { "" }
                    )
                })
                .collect();
            if !key.is_empty() {
                let k: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
                defs.push(format!("PRIMARY KEY ({})", k.join(", ")));
            }
            let schema = quote_ident(&id_parts(id).0);
            exec(
                replica,
                &format!(
                    "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE {t} ({})",
                    defs.join(", ")
                ),
            );
            self.tables.insert(id.to_owned(), (new, key));
            return;
        };
        // Columns by name: dropped, retyped, NOT NULL set or dropped, added.
        for c in old {
            if !new.iter().any(|n| n.name == c.name) {
                exec(
                    replica,
                    &format!("ALTER TABLE {t} DROP COLUMN {}", quote_ident(&c.name)),
                );
            }
        }
        for c in &new {
            let name = quote_ident(&c.name);
            match old.iter().find(|o| o.name == c.name) {
                Some(o) => {
                    if o.sql_type != c.sql_type {
                        exec(
                            replica,
                            &format!(
                                "ALTER TABLE {t} ALTER COLUMN {name} TYPE {ty} USING {name}::text::{ty}",
                                ty = c.sql_type
                            ),
                        );
                    }
                    if o.not_null != c.not_null {
                        let how = if c.not_null { "SET" } else { "DROP" };
                        exec(
                            replica,
                            &format!("ALTER TABLE {t} ALTER COLUMN {name} {how} NOT NULL"),
                        );
                    }
                }
                None => exec(
                    replica,
                    &format!(
                        "ALTER TABLE {t} ADD COLUMN {name} {}{}",
                        c.sql_type,
                        if c.not_null { " NOT NULL" } else { "" }
                    ),
                ),
            }
        }
        if *old_key != key {
            let existing: Vec<String> = replica
                .query(
                    "select conname::text from pg_constraint where conrelid = $1::text::regclass and contype = 'p'",
                    &[&t],
                )
                .expect("primary key")
                .iter()
                .map(|row| row.get(0))
                .collect();
            for name in existing {
                exec(
                    replica,
                    &format!("ALTER TABLE {t} DROP CONSTRAINT {}", quote_ident(&name)),
                );
            }
            if !key.is_empty() {
                let k: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
                exec(
                    replica,
                    &format!("ALTER TABLE {t} ADD PRIMARY KEY ({})", k.join(", ")),
                );
            }
        }
        self.tables.insert(id.to_owned(), (new, key));
    }
}
