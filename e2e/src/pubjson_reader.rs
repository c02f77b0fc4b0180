//! Readers of pubjson's format-2 and format-3 rows into the
//! [`crate::change_stream`] form (serde_json, column values kept raw so
//! that numbers stay the digits PostgreSQL printed); streamed blocks are
//! put back together and prepared transactions read as committed.

use crate::change_stream::{push_change, Change, Cols, Item, Message, Old};
use crate::truncate;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;

// ---------------------------------------------------------------------------
// pubjson, format 2
// ---------------------------------------------------------------------------

/// Streamed blocks of pubjson's formats 2 and 3 (`S` … `E`, `A`, `C` with
/// `"streamed":true`) put back together: each streamed transaction becomes
/// the transaction it committed as, without what its aborts undid.
/// Two-phase events are read as the transaction committed: the changes
/// of `B` … `P` are kept under their gid and come out at `CP` (nothing at
/// `RP`), so a stream compares with a plugin that decodes at COMMIT
/// PREPARED.
#[derive(Default)]
struct Streams {
    current: Option<u32>,
    buffers: HashMap<u32, Vec<(u32, Change)>>,
    prepared: HashMap<String, Item>,
}

impl Streams {
    fn start(&mut self, xid: u32, first: bool) {
        if first || !self.buffers.contains_key(&xid) {
            self.buffers.insert(xid, Vec::new());
        }
        self.current = Some(xid);
    }

    /// Keeps `c` (of subtransaction `sub`) when a block is open; gives it
    /// back otherwise.
    fn take(&mut self, sub: Option<u32>, c: Change) -> Option<Change> {
        match self.current {
            Some(x) => {
                self.buffers
                    .entry(x)
                    .or_default()
                    .push((sub.unwrap_or(x), c));
                None
            }
            None => Some(c),
        }
    }

    fn abort(&mut self, xid: u32, sub: u32) {
        if sub == xid {
            self.buffers.remove(&xid);
        } else if let Some(b) = self.buffers.get_mut(&xid) {
            b.retain(|(s, _)| *s != sub);
        }
    }

    fn commit(&mut self, xid: u32) -> Result<Item, String> {
        let changes = self
            .buffers
            .remove(&xid)
            .ok_or_else(|| format!("streamed commit of {xid}, which was not streamed"))?;
        Ok(Item::Txn {
            xid,
            changes: changes.into_iter().map(|(_, c)| c).collect(),
        })
    }

    /// `S`, `E`, `A`, a streamed `C`, `P`, `CP` and `RP`: handled here
    /// (true), or not. `open` is the transaction a `P` ends.
    fn object(
        &mut self,
        action: &str,
        field: &dyn Fn(&str) -> Option<Value>,
        items: &mut Vec<Item>,
        open: &mut Option<(u32, Vec<Change>)>,
    ) -> Result<bool, String> {
        let gid = || {
            field("gid")
                .and_then(|g| g.as_str().map(str::to_string))
                .ok_or_else(|| format!("{action} without gid"))
        };
        let xid = || {
            field("xid")
                .and_then(|x| x.as_u64())
                .map(|x| x as u32)
                .ok_or_else(|| format!("{action} without xid"))
        };
        match action {
            "S" => {
                let first = field("first").and_then(|f| f.as_bool()).unwrap_or(false);
                self.start(xid()?, first);
            }
            "E" => self.current = None,
            "A" => {
                let sub = field("subxid")
                    .and_then(|x| x.as_u64())
                    .ok_or_else(|| "A without subxid".to_string())?;
                self.abort(xid()?, sub as u32);
            }
            "C" if field("streamed").and_then(|s| s.as_bool()) == Some(true) => {
                items.push(self.commit(xid()?)?);
            }
            "P" => {
                let txn = if field("streamed").and_then(|s| s.as_bool()) == Some(true) {
                    self.commit(xid()?)?
                } else {
                    let (xid, changes) = open
                        .take()
                        .ok_or_else(|| "PREPARE outside a transaction".to_string())?;
                    Item::Txn { xid, changes }
                };
                self.prepared.insert(gid()?, txn);
            }
            "CP" => {
                let gid = gid()?;
                let txn = self.prepared.remove(&gid).ok_or_else(|| {
                    format!("COMMIT PREPARED of {gid}, whose PREPARE this stream lacks")
                })?;
                items.push(txn);
            }
            "RP" => {
                self.prepared.remove(&gid()?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The (sub)transaction of a change inside a block.
    fn sub(field: &dyn Fn(&str) -> Option<Value>) -> Option<u32> {
        field("xid").and_then(|x| x.as_u64()).map(|x| x as u32)
    }
}

/// A JSON value as PostgreSQL text: string → content, number → its digits
/// as written, true/false → t/f, null → NULL.
fn pg_text(v: &RawValue) -> Result<Option<String>, String> {
    let text = v.get();
    match text.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b't') => Ok(Some("t".into())),
        Some(b'f') => Ok(Some("f".into())),
        Some(b'"') => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| e.to_string()),
        // serde_json has checked it is a number.
        Some(b'-' | b'0'..=b'9') => Ok(Some(text.to_string())),
        _ => Err(format!("unexpected column value {text}")),
    }
}

/// A `columns` or `identity` array: names and values.
fn read_cols(v: &RawValue) -> Result<Cols, String> {
    let items: Vec<HashMap<String, Box<RawValue>>> = serde_json::from_str(v.get())
        .map_err(|e| format!("columns/identity is not an array of objects: {e}"))?;
    items
        .iter()
        .map(|c| {
            let name: String = c
                .get("name")
                .and_then(|n| serde_json::from_str(n.get()).ok())
                .ok_or_else(|| format!("column without a name: {c:?}"))?;
            let value = c
                .get("value")
                .ok_or_else(|| format!("column {name} without a value"))?;
            Ok((name, pg_text(value)?))
        })
        .collect()
}

/// One JSON object of a format-2 or format-3 stream, its members raw
/// (column values stay as printed; the rest is parsed when asked for).
struct Object<'a> {
    /// The stream's name, the row's number and text, for errors.
    what: &'a str,
    n: usize,
    row: &'a str,
    raw: HashMap<String, Box<RawValue>>,
}

impl Object<'_> {
    /// Error `e`, said of this row.
    fn ctx(&self, e: String) -> String {
        format!(
            "{} row {} ({}): {e}",
            self.what,
            self.n,
            truncate(self.row, 200)
        )
    }

    fn field(&self, key: &str) -> Option<Value> {
        self.raw
            .get(key)
            .and_then(|v| serde_json::from_str(v.get()).ok())
    }

    fn string(&self, key: &str) -> Option<String> {
        self.field(key).and_then(|v| v.as_str().map(str::to_string))
    }

    /// The string `key`, or error `missing`.
    fn required(&self, key: &str, missing: &str) -> Result<String, String> {
        self.string(key).ok_or_else(|| self.ctx(missing.into()))
    }

    /// A change's `schema.table`.
    fn relation(&self) -> Result<String, String> {
        let schema = self.required("schema", "no schema")?;
        let table = self.required("table", "no table")?;
        Ok(format!("{schema}.{table}"))
    }
}

/// What a reader of format 2 or 3 has read so far.
#[derive(Default)]
struct Reading {
    items: Vec<Item>,
    open: Option<(u32, Vec<Change>)>,
    streams: Streams,
}

impl Reading {
    /// `B`: transaction `xid` opens.
    fn begin(&mut self, o: &Object, xid: u32) -> Result<(), String> {
        if self.open.is_some() {
            return Err(o.ctx("BEGIN inside a transaction".into()));
        }
        self.open = Some((xid, Vec::new()));
        Ok(())
    }

    /// `C`: the open transaction ends; its xid and changes.
    fn commit(&mut self, o: &Object) -> Result<(u32, Vec<Change>), String> {
        self.open
            .take()
            .ok_or_else(|| o.ctx("COMMIT outside a transaction".into()))
    }

    /// A change, kept in its streamed block, its transaction or alone.
    fn change(&mut self, o: &Object, c: Change) {
        if let Some(c) = self.streams.take(Streams::sub(&|k| o.field(k)), c) {
            push_change(&mut self.items, &mut self.open, c);
        }
    }
}

/// Reads the rows of format 2 or 3 (`what` names the stream in errors):
/// streamed blocks and two-phase events ([`Streams`]), `T` and `M` here;
/// any other action by `action`, which returns false for one it does not
/// know.
fn read_objects(
    what: &str,
    rows: &[String],
    mut action: impl FnMut(&str, &Object, &mut Reading) -> Result<bool, String>,
) -> Result<Vec<Item>, String> {
    let mut r = Reading::default();
    for (n, row) in rows.iter().enumerate() {
        let mut o = Object {
            what,
            n,
            row,
            raw: HashMap::new(),
        };
        o.raw = serde_json::from_str(row).map_err(|e| o.ctx(e.to_string()))?;
        let name = o.required("action", "no action")?;
        if r.streams
            .object(&name, &|k| o.field(k), &mut r.items, &mut r.open)
            .map_err(|e| o.ctx(e))?
        {
            continue;
        }
        match name.as_str() {
            "T" => {
                let c = Change::bare('T', o.relation()?);
                r.change(&o, c);
            }
            "M" => {
                let transactional = o
                    .field("transactional")
                    .and_then(|t| t.as_bool())
                    .ok_or_else(|| o.ctx("message without transactional".into()))?;
                let prefix = o.required("prefix", "message without prefix")?;
                let content = o.required("content", "message without content")?;
                let mut c = Change::bare('M', String::new());
                c.message = Some(Message {
                    transactional,
                    prefix,
                    content: content.into_bytes(),
                });
                r.change(&o, c);
            }
            a => {
                if !action(a, &o, &mut r)? {
                    return Err(o.ctx(format!("unexpected action {a:?}")));
                }
            }
        }
    }
    if let Some((xid, _)) = r.open {
        return Err(format!("{what}: transaction {xid} has no COMMIT"));
    }
    Ok(r.items)
}

/// Reads the rows of `pg_logical_slot_peek_changes` with format-version 2
/// (and include-xids); streamed blocks are put back together.
pub fn read_pubjson(rows: &[String]) -> Result<Vec<Item>, String> {
    read_objects("pubjson", rows, |action, o, r| {
        let ctx = |e: String| o.ctx(e);
        match action {
            "B" => {
                let xid = match o.raw.get("xid").map(|x| x.get()) {
                    Some(x) if x.starts_with(|c: char| c.is_ascii_digit()) => {
                        x.parse::<u32>().map_err(|e| ctx(e.to_string()))?
                    }
                    _ => return Err(ctx("BEGIN without xid (include-xids)".into())),
                };
                r.begin(o, xid)?;
            }
            "C" => {
                let (xid, changes) = r.commit(o)?;
                r.items.push(Item::Txn { xid, changes });
            }
            "I" | "U" | "D" => {
                let mut c = Change::bare(action.chars().next().unwrap_or('?'), o.relation()?);
                if o.raw.contains_key("transformedfrom") {
                    c.transformed = Some(
                        o.string("transformedfrom")
                            .ok_or_else(|| ctx("transformedfrom is not a string".into()))?,
                    );
                }
                if let Some(cols) = o.raw.get("columns") {
                    c.new = Some(read_cols(cols).map_err(ctx)?);
                }
                if let Some(id) = o.raw.get("identity") {
                    c.old = Some(Old {
                        kind: 'J',
                        cols: read_cols(id).map_err(ctx)?,
                    });
                }
                r.change(o, c);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })
}

// ---------------------------------------------------------------------------
// pubjson, format 3
// ---------------------------------------------------------------------------

/// A format-3 value as PostgreSQL text where the two agree: strings,
/// numbers (their digits), booleans (`t`/`f`), NULL. Arrays and objects
/// (arrays, json) keep their JSON text, and timestamps, intervals and bytea
/// have forms of their own: compared with another plugin's text they
/// differ, loudly.
fn f3_text(v: &RawValue) -> Result<Option<String>, String> {
    match v.get().as_bytes().first() {
        Some(b'[' | b'{') => Ok(Some(v.get().to_string())),
        _ => pg_text(v),
    }
}

/// A format-3 row (`new` or `old`), its columns in the order of the
/// relation's `R` object.
fn f3_row(v: &RawValue, order: &[String]) -> Result<Cols, String> {
    let map: HashMap<String, Box<RawValue>> =
        serde_json::from_str(v.get()).map_err(|e| format!("row is not an object: {e}"))?;
    if let Some(extra) = map.keys().find(|k| !order.contains(k)) {
        return Err(format!("column {extra} is not in the relation's R object"));
    }
    order
        .iter()
        .filter_map(|name| map.get(name).map(|v| (name, v)))
        .map(|(name, v)| Ok((name.clone(), f3_text(v)?)))
        .collect()
}

/// Reads format-3 rows (streamed blocks put back together, prepared
/// transactions as committed at `CP`) into transactions of changes: values
/// as [`f3_text`] gives them, columns in the order of the `R` objects,
/// `unchanged` kept, the old row kind `'O'` under REPLICA IDENTITY FULL and
/// `'K'` otherwise.
pub fn read_format3(rows: &[String]) -> Result<Vec<Item>, String> {
    let rows = &crate::message_lines(rows)[..];
    // relid -> (schema.table, column names by attnum, identity)
    let mut rels: HashMap<u64, (String, Vec<String>, String)> = HashMap::new();
    read_objects("format 3", rows, |action, o, r| {
        let ctx = |e: String| o.ctx(e);
        let field = |key: &str| o.field(key);
        match action {
            "B" => {
                let xid = field("xid")
                    .and_then(|x| x.as_u64())
                    .ok_or_else(|| ctx("BEGIN without xid".into()))?;
                r.begin(o, xid as u32)?;
            }
            "C" => {
                let (xid, changes) = r.commit(o)?;
                let count = field("changes").and_then(|c| c.as_u64());
                if count != Some(changes.len() as u64) {
                    return Err(ctx(format!(
                        "C counts {count:?} changes, the transaction has {}",
                        changes.len()
                    )));
                }
                r.items.push(Item::Txn { xid, changes });
            }
            "R" => {
                let relid = field("relid")
                    .and_then(|r| r.as_u64())
                    .ok_or_else(|| ctx("R without relid".into()))?;
                let mut columns: Vec<(i64, String)> = field("columns")
                    .and_then(|c| c.as_array().cloned())
                    .ok_or_else(|| ctx("R without columns".into()))?
                    .iter()
                    .map(|c| Some((c["attnum"].as_i64()?, c["name"].as_str()?.to_string())))
                    .collect::<Option<_>>()
                    .ok_or_else(|| ctx("R column without attnum or name".into()))?;
                columns.sort();
                let identity = o.string("identity").unwrap_or_default();
                rels.insert(
                    relid,
                    (
                        o.relation()?,
                        columns.into_iter().map(|(_, n)| n).collect(),
                        identity,
                    ),
                );
            }
            "I" | "U" | "D" => {
                let relid = field("relid")
                    .and_then(|r| r.as_u64())
                    .ok_or_else(|| ctx("change without relid".into()))?;
                let (name, order, identity) = rels
                    .get(&relid)
                    .ok_or_else(|| ctx(format!("relation {relid} used before its R object")))?;
                if *name != o.relation()? {
                    return Err(ctx(format!("relid {relid} is {name} in its R object")));
                }
                let mut c = Change::bare(action.chars().next().unwrap_or('?'), name.clone());
                c.transformed = o.string("transformedfrom");
                if let Some(new) = o.raw.get("new") {
                    c.new = Some(f3_row(new, order).map_err(ctx)?);
                }
                if let Some(old) = o.raw.get("old") {
                    c.old = Some(Old {
                        kind: if identity == "full" { 'O' } else { 'K' },
                        cols: f3_row(old, order).map_err(ctx)?,
                    });
                }
                if let Some(u) = field("unchanged") {
                    c.unchanged = u
                        .as_array()
                        .and_then(|a| a.iter().map(|n| n.as_str().map(str::to_string)).collect())
                        .ok_or_else(|| ctx("unchanged is not an array of names".into()))?;
                }
                r.change(o, c);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::change_stream::cols;

    #[test]
    fn json_numbers_stay_text() {
        let read = |json: &str| {
            read_cols(&serde_json::from_str::<Box<RawValue>>(json).expect("valid JSON"))
        };
        assert_eq!(
            read(
                r#"[{"name":"a","value":12.50}, {"name":"b","value":"x\u00e9\ud83d\ude00\u0000"},
                    {"name":"c","value":true}, {"name":"d","value":null},
                    {"name":"e","value": -1e5 }]"#
            ),
            Ok(cols(&[
                ("a", Some("12.50")),
                ("b", Some("xé😀\0")),
                ("c", Some("t")),
                ("d", None),
                ("e", Some("-1e5")),
            ]))
        );
        assert!(read(r#"[{"name":"a","value":[1]}]"#).is_err());
        assert!(read_pubjson(&[r#"{"action":"B","xid":1"#.to_string()]).is_err());
    }
}
