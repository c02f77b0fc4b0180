//! docs/ddl.md's consumer algorithm, as code: a replica database whose
//! tables follow the source's through format 3's `R` and `DDL` objects
//! (created, renamed, moved, columns by attnum, NOT NULL, primary key,
//! dropped by `sql_drop`), and whose tables receive the `I` rows. Used by
//! the DDL suites (`tests/ddl.rs`, `tests/ddl_secrets.rs`).

use std::collections::BTreeMap;

use postgres::Client;
use serde_json::Value;

use crate::exec;

/// The replica's tables, by the source's relid.
#[derive(Default)]
pub struct SchemaReplica {
    tables: BTreeMap<u64, ReplicaTable>,
}

impl SchemaReplica {
    /// Applies one format 3 object to `replica`, as docs/ddl.md says.
    pub fn apply(&mut self, replica: &mut Client, o: &Value) {
        match o["action"].as_str().unwrap_or("") {
            "R" => apply_r(replica, &mut self.tables, o),
            "DDL" => {
                for r in o["relations"].as_array().into_iter().flatten() {
                    apply_r(replica, &mut self.tables, r);
                }
                if o["event"] == "sql_drop" {
                    // Step 3.
                    for dropped in o["objects"].as_array().into_iter().flatten() {
                        if dropped["type"] != "table" {
                            continue;
                        }
                        if let Some(t) = dropped["oid"]
                            .as_u64()
                            .and_then(|oid| self.tables.remove(&oid))
                        {
                            exec(
                                replica,
                                &format!(
                                    "DROP TABLE {}.{}",
                                    quote_ident(&t.schema),
                                    quote_ident(&t.table)
                                ),
                            );
                        }
                    }
                }
            }
            "I" => {
                let target = format!(
                    "{}.{}",
                    quote_ident(o["schema"].as_str().expect("schema")),
                    quote_ident(o["table"].as_str().expect("table"))
                );
                let row = o["new"].to_string().replace('\'', "''");
                exec(
                    replica,
                    &format!("INSERT INTO {target} SELECT * FROM json_populate_record(NULL::{target}, '{row}')"),
                );
            }
            _ => {}
        }
    }
}

/// What the replica remembers of one source table: its name there and the
/// last R object applied.
struct ReplicaTable {
    schema: String,
    table: String,
    r: Value,
}

pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The columns of an R object by attnum: (attnum, name, type, nullable).
fn r_columns(r: &Value) -> Vec<(i64, String, String, bool)> {
    r["columns"]
        .as_array()
        .expect("R columns")
        .iter()
        .map(|c| {
            (
                c["attnum"].as_i64().expect("attnum"),
                c["name"].as_str().expect("name").to_string(),
                c["type"].as_str().expect("type").to_string(),
                c["nullable"].as_bool().expect("nullable"),
            )
        })
        .collect()
}

/// The primary key an R object implies: the key columns under identity
/// `default`, in attnum order.
fn r_primary_key(r: &Value) -> Vec<String> {
    if r["identity"] != "default" {
        return Vec::new();
    }
    r["columns"]
        .as_array()
        .expect("R columns")
        .iter()
        .filter(|c| c["key"] == true)
        .map(|c| c["name"].as_str().expect("name").to_string())
        .collect()
}

/// Steps 1 and 2: an R object (standalone or in a DDL object's
/// relations) creates or brings in step the replica's table.
fn apply_r(replica: &mut Client, tables: &mut BTreeMap<u64, ReplicaTable>, r: &Value) {
    let relid = r["relid"].as_u64().expect("relid");
    let schema = r["schema"].as_str().expect("schema").to_string();
    let table = r["table"].as_str().expect("table").to_string();
    let columns = r_columns(r);
    let pk = r_primary_key(r);
    let Some(have) = tables.get_mut(&relid) else {
        // Step 1: create it.
        let mut defs: Vec<String> = columns
            .iter()
            .map(|(_, n, t, nullable)| {
                format!(
                    "{} {t}{}",
                    quote_ident(n),
                    if *nullable { "" } else { " NOT NULL" }
                )
            })
            .collect();
        if !pk.is_empty() {
            let keys: Vec<String> = pk.iter().map(|k| quote_ident(k)).collect();
            defs.push(format!("PRIMARY KEY ({})", keys.join(", ")));
        }
        exec(
            replica,
            &format!(
                "CREATE SCHEMA IF NOT EXISTS {s}; CREATE TABLE {s}.{t} ({})",
                defs.join(", "),
                s = quote_ident(&schema),
                t = quote_ident(&table)
            ),
        );
        tables.insert(
            relid,
            ReplicaTable {
                schema,
                table,
                r: r.clone(),
            },
        );
        return;
    };
    // Step 2: moved, renamed.
    if have.schema != schema {
        exec(
            replica,
            &format!(
                "CREATE SCHEMA IF NOT EXISTS {s}; ALTER TABLE {}.{} SET SCHEMA {s}",
                quote_ident(&have.schema),
                quote_ident(&have.table),
                s = quote_ident(&schema)
            ),
        );
        have.schema = schema.clone();
    }
    if have.table != table {
        exec(
            replica,
            &format!(
                "ALTER TABLE {}.{} RENAME TO {}",
                quote_ident(&have.schema),
                quote_ident(&have.table),
                quote_ident(&table)
            ),
        );
        have.table = table.clone();
    }
    let target = format!("{}.{}", quote_ident(&schema), quote_ident(&table));
    // Columns by attnum: dropped, renamed, retyped, NOT NULL, added.
    let old = r_columns(&have.r);
    for (attnum, name, _, _) in &old {
        if !columns.iter().any(|(a, ..)| a == attnum) {
            exec(
                replica,
                &format!("ALTER TABLE {target} DROP COLUMN {}", quote_ident(name)),
            );
        }
    }
    for (attnum, name, ty, nullable) in &columns {
        match old.iter().find(|(a, ..)| a == attnum) {
            Some((_, old_name, old_ty, old_nullable)) => {
                if old_name != name {
                    exec(
                        replica,
                        &format!(
                            "ALTER TABLE {target} RENAME COLUMN {} TO {}",
                            quote_ident(old_name),
                            quote_ident(name)
                        ),
                    );
                }
                let col = quote_ident(name);
                if old_ty != ty {
                    exec(
                        replica,
                        &format!("ALTER TABLE {target} ALTER COLUMN {col} TYPE {ty} USING {col}::text::{ty}"),
                    );
                }
                if old_nullable != nullable {
                    let how = if *nullable { "DROP" } else { "SET" };
                    exec(
                        replica,
                        &format!("ALTER TABLE {target} ALTER COLUMN {col} {how} NOT NULL"),
                    );
                }
            }
            None => exec(
                replica,
                &format!(
                    "ALTER TABLE {target} ADD COLUMN {} {ty}{}",
                    quote_ident(name),
                    if *nullable { "" } else { " NOT NULL" }
                ),
            ),
        }
    }
    // The primary key.
    if r_primary_key(&have.r) != pk {
        let existing: Vec<String> = replica
            .query(
                "select conname::text from pg_constraint where conrelid = $1::text::regclass and contype = 'p'",
                &[&target],
            )
            .expect("primary key")
            .iter()
            .map(|row| row.get(0))
            .collect();
        for name in existing {
            exec(
                replica,
                &format!(
                    "ALTER TABLE {target} DROP CONSTRAINT {}",
                    quote_ident(&name)
                ),
            );
        }
        if !pk.is_empty() {
            let keys: Vec<String> = pk.iter().map(|k| quote_ident(k)).collect();
            exec(
                replica,
                &format!("ALTER TABLE {target} ADD PRIMARY KEY ({})", keys.join(", ")),
            );
        }
    }
    have.r = r.clone();
}
