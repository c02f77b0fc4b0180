//! Helpers of the pgoutput differential suite (`tests/publications.rs`).
//!
//! * a decoder of pgoutput's binary protocol, version 1 (what
//!   `pg_logical_slot_peek_binary_changes(slot, NULL, NULL, 'proto_version',
//!   '1', 'publication_names', ...)` returns: one message per row);
//! * a reader of pubjson's format-2 rows (serde_json, column values kept
//!   raw so that numbers stay the digits PostgreSQL printed);
//! * a reader of test_decoding rows (the raw change sequence, used to check
//!   that every change pubjson marks `"transformedfrom":"U"` comes from an
//!   UPDATE);
//! * both streams normalized to transactions of changes and compared;
//! * a scenario harness: its own database, slots created at the same point
//!   (one `pgoutput` slot, copies of it for the other plugins), everything
//!   dropped at the end, even when the test panics.

use crate::{db_err, truncate, DbErr, Server};
use postgres::types::FromSql;
use postgres::Client;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The normalized model
// ---------------------------------------------------------------------------

/// One column value as PostgreSQL text (`None`: NULL).
pub type Cols = Vec<(String, Option<String>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub transactional: bool,
    pub prefix: String,
    pub content: Vec<u8>,
}

/// The old row of an UPDATE or DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Old {
    /// pgoutput: `'K'` (key columns, others NULL) or `'O'` (REPLICA
    /// IDENTITY FULL); pubjson: `'J'` (its "identity").
    pub kind: char,
    pub cols: Cols,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// I, U, D, T or M.
    pub action: char,
    /// pubjson's `transformedfrom`: the action it was before.
    pub transformed: Option<String>,
    /// `schema.table` (empty for M).
    pub relation: String,
    /// The new row without the unchanged-TOAST columns.
    pub new: Option<Cols>,
    /// pgoutput: columns sent as 'u' (unchanged TOAST).
    pub unchanged: Vec<String>,
    pub old: Option<Old>,
    pub message: Option<Message>,
}

impl Change {
    fn bare(action: char, relation: String) -> Change {
        Change {
            action,
            relation,
            transformed: None,
            new: None,
            unchanged: Vec::new(),
            old: None,
            message: None,
        }
    }
}

fn show_cols(cols: &Cols) -> String {
    cols.iter()
        .map(|(n, v)| match v {
            Some(v) => format!("{n}={}", truncate(v, 40)),
            None => format!("{n}=NULL"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.action)?;
        if let Some(t) = &self.transformed {
            write!(f, "(from {t})")?;
        }
        if !self.relation.is_empty() {
            write!(f, " {}", self.relation)?;
        }
        if let Some(n) = &self.new {
            write!(f, " new[{}]", show_cols(n))?;
        }
        if !self.unchanged.is_empty() {
            write!(f, " unchanged-toast[{}]", self.unchanged.join(", "))?;
        }
        if let Some(o) = &self.old {
            write!(f, " old {}[{}]", o.kind, show_cols(&o.cols))?;
        }
        if let Some(m) = &self.message {
            write!(
                f,
                " transactional={} prefix={:?} content={:?}",
                m.transactional,
                m.prefix,
                truncate(&String::from_utf8_lossy(&m.content), 60)
            )?;
        }
        Ok(())
    }
}

/// A decoded transaction, or a change outside any (non-transactional message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Txn { xid: u32, changes: Vec<Change> },
    Loose(Change),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Txn { xid, changes } => {
                writeln!(f, "  BEGIN xid {xid}")?;
                for c in changes {
                    writeln!(f, "    {c}")?;
                }
                write!(f, "  COMMIT")
            }
            Item::Loose(c) => write!(f, "  (outside a transaction) {c}"),
        }
    }
}

pub fn show_items(items: &[Item], max_lines: usize) -> String {
    let text = items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max_lines {
        text
    } else {
        format!(
            "{}\n  … {} more lines",
            lines[..max_lines].join("\n"),
            lines.len() - max_lines
        )
    }
}

/// Pushes a change into the open transaction, or as a loose item.
fn push_change(items: &mut Vec<Item>, open: &mut Option<(u32, Vec<Change>)>, c: Change) {
    match open {
        Some((_, changes)) => changes.push(c),
        None => items.push(Item::Loose(c)),
    }
}

// ---------------------------------------------------------------------------
// pgoutput, protocol version 1
// ---------------------------------------------------------------------------

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.i..self.i + n)
            .ok_or_else(|| format!("message truncated at byte {} (wanted {n} more)", self.i))?;
        self.i += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn i16(&mut self) -> Result<i16, String> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
    fn cstr(&mut self) -> Result<String, String> {
        let rest = &self.b[self.i..];
        let end = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| "unterminated string".to_string())?;
        let s = String::from_utf8(rest[..end].to_vec()).map_err(|e| e.to_string())?;
        self.i += end + 1;
        Ok(s)
    }
    fn done(&self) -> Result<(), String> {
        if self.i == self.b.len() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected trailing bytes",
                self.b.len() - self.i
            ))
        }
    }
}

#[derive(Debug, Clone)]
struct RelInfo {
    name: String,
    columns: Vec<String>,
}

/// A tuple: (values of the sent columns, names of the 'u' columns).
fn read_tuple(r: &mut Reader, rel: &RelInfo) -> Result<(Cols, Vec<String>), String> {
    let n = r.i16()? as usize;
    if n != rel.columns.len() {
        return Err(format!(
            "tuple of {} has {n} columns, its R message {}",
            rel.name,
            rel.columns.len()
        ));
    }
    let mut cols = Vec::new();
    let mut unchanged = Vec::new();
    for name in &rel.columns {
        match r.u8()? {
            b'n' => cols.push((name.clone(), None)),
            b'u' => unchanged.push(name.clone()),
            b't' => {
                let len = r.i32()?;
                let bytes = r.take(len as usize)?;
                let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
                cols.push((name.clone(), Some(text)));
            }
            k => return Err(format!("unexpected column kind {:?}", k as char)),
        }
    }
    Ok((cols, unchanged))
}

/// Decodes the rows of `pg_logical_slot_peek_binary_changes` (proto_version 1).
pub fn decode_pgoutput(rows: &[Vec<u8>]) -> Result<Vec<Item>, String> {
    let mut rels: HashMap<u32, RelInfo> = HashMap::new();
    let mut items = Vec::new();
    let mut open: Option<(u32, Vec<Change>)> = None;
    for (n, row) in rows.iter().enumerate() {
        let mut r = Reader { b: row, i: 0 };
        let kind = r.u8()?;
        let ctx = |e: String| format!("pgoutput row {n} ({}): {e}", kind as char);
        let rel_of = |rels: &HashMap<u32, RelInfo>, oid: u32| {
            rels.get(&oid)
                .cloned()
                .ok_or_else(|| format!("relation {oid} used before its R message"))
        };
        match kind {
            b'B' => {
                r.u64().map_err(ctx)?; // final LSN
                r.u64().map_err(ctx)?; // commit time
                let xid = r.u32().map_err(ctx)?;
                if open.is_some() {
                    return Err(ctx("BEGIN inside a transaction".into()));
                }
                open = Some((xid, Vec::new()));
            }
            b'C' => {
                r.u8().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                let (xid, changes) = open
                    .take()
                    .ok_or_else(|| ctx("COMMIT outside a transaction".into()))?;
                items.push(Item::Txn { xid, changes });
            }
            b'O' => {
                r.u64().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
            }
            b'R' => {
                let oid = r.u32().map_err(ctx)?;
                let mut nsp = r.cstr().map_err(ctx)?;
                if nsp.is_empty() {
                    nsp = "pg_catalog".into();
                }
                let relname = r.cstr().map_err(ctx)?;
                r.u8().map_err(ctx)?; // replica identity
                let natts = r.i16().map_err(ctx)?;
                let mut columns = Vec::new();
                for _ in 0..natts {
                    r.u8().map_err(ctx)?; // flags
                    columns.push(r.cstr().map_err(ctx)?);
                    r.u32().map_err(ctx)?; // type
                    r.i32().map_err(ctx)?; // typmod
                }
                rels.insert(
                    oid,
                    RelInfo {
                        name: format!("{nsp}.{relname}"),
                        columns,
                    },
                );
            }
            b'Y' => {
                r.u32().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
            }
            b'I' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                if r.u8().map_err(ctx)? != b'N' {
                    return Err(ctx("INSERT without 'N'".into()));
                }
                let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                let mut c = Change::bare('I', rel.name.clone());
                c.new = Some(cols);
                c.unchanged = unchanged;
                push_change(&mut items, &mut open, c);
            }
            b'U' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                let mut c = Change::bare('U', rel.name.clone());
                let mut tag = r.u8().map_err(ctx)?;
                if tag == b'K' || tag == b'O' {
                    let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                    if !unchanged.is_empty() {
                        return Err(ctx(format!("unchanged TOAST in old tuple: {unchanged:?}")));
                    }
                    c.old = Some(Old {
                        kind: tag as char,
                        cols,
                    });
                    tag = r.u8().map_err(ctx)?;
                }
                if tag != b'N' {
                    return Err(ctx(format!("UPDATE: unexpected {:?}", tag as char)));
                }
                let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                c.new = Some(cols);
                c.unchanged = unchanged;
                push_change(&mut items, &mut open, c);
            }
            b'D' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                let tag = r.u8().map_err(ctx)?;
                if tag != b'K' && tag != b'O' {
                    return Err(ctx(format!("DELETE: unexpected {:?}", tag as char)));
                }
                let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                if !unchanged.is_empty() {
                    return Err(ctx(format!("unchanged TOAST in old tuple: {unchanged:?}")));
                }
                let mut c = Change::bare('D', rel.name.clone());
                c.old = Some(Old {
                    kind: tag as char,
                    cols,
                });
                push_change(&mut items, &mut open, c);
            }
            b'T' => {
                let n = r.u32().map_err(ctx)?;
                r.u8().map_err(ctx)?; // cascade / restart identity
                for _ in 0..n {
                    let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                    push_change(&mut items, &mut open, Change::bare('T', rel.name.clone()));
                }
            }
            b'M' => {
                let flags = r.u8().map_err(ctx)?;
                r.u64().map_err(ctx)?; // LSN
                let prefix = r.cstr().map_err(ctx)?;
                let len = r.i32().map_err(ctx)?;
                let content = r.take(len as usize).map_err(ctx)?.to_vec();
                let mut c = Change::bare('M', String::new());
                c.message = Some(Message {
                    transactional: flags & 1 != 0,
                    prefix,
                    content,
                });
                push_change(&mut items, &mut open, c);
            }
            k => return Err(ctx(format!("unexpected message type {:?}", k as char))),
        }
        r.done().map_err(ctx)?;
    }
    if let Some((xid, _)) = open {
        return Err(format!("pgoutput: transaction {xid} has no COMMIT"));
    }
    Ok(items)
}

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
// test_decoding: the raw change sequence per transaction
// ---------------------------------------------------------------------------

/// xid → raw change letters (I, U, D) of that transaction.
pub fn read_test_decoding(rows: &[String]) -> Result<HashMap<u32, Vec<char>>, String> {
    let mut out = HashMap::new();
    let mut open: Option<(u32, Vec<char>)> = None;
    for row in rows {
        if let Some(x) = row.strip_prefix("BEGIN ") {
            let xid = x.trim().parse::<u32>().map_err(|e| format!("{row}: {e}"))?;
            open = Some((xid, Vec::new()));
        } else if row.starts_with("COMMIT") {
            if let Some((xid, changes)) = open.take() {
                out.insert(xid, changes);
            }
        } else if let Some(rest) = row.strip_prefix("table ") {
            let idx = rest
                .find(": ")
                .ok_or_else(|| format!("unexpected test_decoding row {row}"))?;
            let action = rest[idx + 2..].split(':').next().unwrap_or("");
            let letter = match action {
                "INSERT" => 'I',
                "UPDATE" => 'U',
                "DELETE" => 'D',
                "TRUNCATE" => 'T',
                other => return Err(format!("unexpected test_decoding action {other}")),
            };
            if let Some((_, changes)) = open.as_mut() {
                changes.push(letter);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// test_decoding: whole rows, values kept
// ---------------------------------------------------------------------------

/// What follows an opening `quote` up to the closing one (a doubled
/// `quote` stands for one), and the rest after it; `None` when it is not
/// closed.
fn unquote(rest: &str, quote: char) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, ch)) = chars.next() {
        if ch != quote {
            out.push(ch);
        } else if rest[i + 1..].starts_with(quote) {
            out.push(quote);
            chars.next();
        } else {
            return Some((out, &rest[i + 1..]));
        }
    }
    None
}

/// An identifier as `quote_identifier` prints it (`"..."` with `""`
/// doubled, or bare up to one of `stops`); returns it and the rest.
fn td_ident<'a>(s: &'a str, stops: &[char]) -> Result<(String, &'a str), String> {
    if let Some(rest) = s.strip_prefix('"') {
        unquote(rest, '"').ok_or_else(|| format!("unterminated quoted identifier in {s:?}"))
    } else {
        let end = s.find(stops).unwrap_or(s.len());
        if end == 0 {
            return Err(format!("identifier expected at {s:?}"));
        }
        Ok((s[..end].to_string(), &s[end..]))
    }
}

/// `schema.table` as test_decoding prints it (quote_qualified_identifier).
fn td_relation(s: &str) -> Result<(String, &str), String> {
    let (schema, rest) = td_ident(s, &['.'])?;
    let rest = rest
        .strip_prefix('.')
        .ok_or_else(|| format!("'.' expected at {rest:?}"))?;
    let (table, rest) = td_ident(rest, &[':', ',', ' '])?;
    Ok((format!("{schema}.{table}"), rest))
}

/// One value of a tuple: `None` for null, `Some(None)` for an unchanged
/// TOAST datum, else its PostgreSQL text; returns the rest.
#[allow(clippy::type_complexity)]
fn td_value<'a>(s: &'a str, type_name: &str) -> Result<(Option<Option<String>>, &'a str), String> {
    let token_end = |s: &str| s.find(' ').unwrap_or(s.len());
    if let Some(rest) = s.strip_prefix('\'').or_else(|| s.strip_prefix("B'")) {
        let (text, rest) =
            unquote(rest, '\'').ok_or_else(|| format!("unterminated literal in {s:?}"))?;
        return Ok((Some(Some(text)), rest));
    }
    let end = token_end(s);
    let token = &s[..end];
    let value = match token {
        "null" => Some(None),
        "unchanged-toast-datum" => None,
        "true" if type_name == "boolean" => Some(Some("t".to_string())),
        "false" if type_name == "boolean" => Some(Some("f".to_string())),
        t if !t.is_empty() => Some(Some(t.to_string())),
        _ => return Err(format!("value expected at {s:?}")),
    };
    Ok((value, &s[end..]))
}

/// The new row of an INSERT or UPDATE from `body`, a tuple or
/// ` (no-tuple-data)` (then `c` has none).
fn td_new_row(c: &mut Change, body: &str) -> Result<(), String> {
    if body != " (no-tuple-data)" {
        let (cols, unchanged, _) = td_tuple(body)?;
        c.new = Some(cols);
        c.unchanged = unchanged;
    }
    Ok(())
}

/// A tuple ` name[type]:value ...` up to its end or ` new-tuple:`; returns
/// the columns, the unchanged-TOAST columns and the rest.
fn td_tuple(mut s: &str) -> Result<(Cols, Vec<String>, &str), String> {
    let mut cols = Vec::new();
    let mut unchanged = Vec::new();
    while let Some(rest) = s.strip_prefix(' ') {
        if rest.starts_with("new-tuple:") {
            return Ok((cols, unchanged, rest));
        }
        let (name, rest) = td_ident(rest, &['['])?;
        let rest = rest
            .strip_prefix('[')
            .ok_or_else(|| format!("'[' expected after column {name}"))?;
        let close = rest
            .find("]:")
            .ok_or_else(|| format!("type of column {name} not closed"))?;
        let type_name = &rest[..close];
        let (value, rest) = td_value(&rest[close + 2..], type_name)?;
        match value {
            Some(v) => cols.push((name, v)),
            None => unchanged.push(name),
        }
        s = rest;
    }
    if !s.is_empty() {
        return Err(format!("unexpected text {s:?}"));
    }
    Ok((cols, unchanged, s))
}

/// One `table ...` row: its changes (a TRUNCATE names several relations).
fn td_table_row(row: &str) -> Result<Vec<Change>, String> {
    let mut rest = row
        .strip_prefix("table ")
        .ok_or_else(|| "not a table row".to_string())?;
    let mut relations = Vec::new();
    loop {
        let (rel, r) = td_relation(rest)?;
        relations.push(rel);
        if let Some(r) = r.strip_prefix(", ") {
            rest = r;
        } else {
            rest = r
                .strip_prefix(": ")
                .ok_or_else(|| format!("': ' expected at {r:?}"))?;
            break;
        }
    }
    let colon = rest
        .find(':')
        .ok_or_else(|| "action without ':'".to_string())?;
    let (action, body) = (&rest[..colon], &rest[colon + 1..]);
    let no_data = body == " (no-tuple-data)";
    let one = |c: Change| Ok(vec![c]);
    match action {
        "INSERT" => {
            let mut c = Change::bare('I', relations[0].clone());
            td_new_row(&mut c, body)?;
            one(c)
        }
        "UPDATE" => {
            let mut c = Change::bare('U', relations[0].clone());
            let mut body = body;
            if let Some(old) = body.strip_prefix(" old-key:") {
                let (cols, _, rest) = td_tuple(old)?;
                c.old = Some(Old { kind: 'K', cols });
                body = rest
                    .strip_prefix("new-tuple:")
                    .ok_or_else(|| format!("new-tuple expected in {row}"))?;
            }
            td_new_row(&mut c, body)?;
            one(c)
        }
        "DELETE" => {
            let mut c = Change::bare('D', relations[0].clone());
            if !no_data {
                let (cols, _, _) = td_tuple(body)?;
                c.old = Some(Old { kind: 'K', cols });
            }
            one(c)
        }
        "TRUNCATE" => Ok(relations
            .into_iter()
            .map(|r| Change::bare('T', r))
            .collect()),
        a => Err(format!("unexpected action {a}")),
    }
}

/// The gid of `'gid', txid N` (PREPARE TRANSACTION, COMMIT / ROLLBACK
/// PREPARED).
fn td_gid(rest: &str) -> Result<String, String> {
    let (gid, _) = td_value(rest, "text")?;
    gid.flatten()
        .ok_or_else(|| format!("gid expected at {rest:?}"))
}

/// `message: transactional: 1 prefix: p, sz: 3 content:abc`.
fn td_message(row: &str) -> Result<Change, String> {
    let rest = row
        .strip_prefix("message: transactional: ")
        .ok_or_else(|| "not a message".to_string())?;
    let transactional = rest.starts_with('1');
    let rest = rest
        .get(1..)
        .and_then(|r| r.strip_prefix(" prefix: "))
        .ok_or_else(|| "prefix expected".to_string())?;
    let sz_at = rest
        .find(", sz: ")
        .ok_or_else(|| "sz expected".to_string())?;
    let prefix = rest[..sz_at].to_string();
    let rest = &rest[sz_at + 6..];
    let content_at = rest
        .find(" content:")
        .ok_or_else(|| "content expected".to_string())?;
    let size: usize = rest[..content_at].parse().map_err(|e| format!("sz: {e}"))?;
    let content = rest.as_bytes()[content_at + 9..].to_vec();
    if content.len() != size {
        return Err(format!("content of {} bytes, sz {size}", content.len()));
    }
    let mut c = Change::bare('M', String::new());
    c.message = Some(Message {
        transactional,
        prefix,
        content,
    });
    Ok(c)
}

/// Reads test_decoding's rows (`include-xids` on, no streaming; prepared
/// transactions as committed at COMMIT PREPARED) into transactions of changes with their values: PostgreSQL's
/// text of each value (booleans `t`/`f`), `None` for NULL; unchanged TOAST
/// values are left out of the row and named in `unchanged`; an old key or
/// old row is kind `'K'` (test_decoding leaves its NULLs out).
pub fn read_test_decoding_rows(rows: &[String]) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut open: Option<(u32, Vec<Change>)> = None;
    let mut prepared: HashMap<String, Item> = HashMap::new();
    for (n, row) in rows.iter().enumerate() {
        let ctx = |e: String| format!("test_decoding row {n} ({}): {e}", truncate(row, 200));
        if let Some(x) = row.strip_prefix("BEGIN ") {
            if open.is_some() {
                return Err(ctx("BEGIN inside a transaction".into()));
            }
            let xid = x.trim().parse::<u32>().map_err(|e| ctx(e.to_string()))?;
            open = Some((xid, Vec::new()));
        } else if let Some(x) = row.strip_prefix("COMMIT ") {
            let (xid, changes) = open
                .take()
                .ok_or_else(|| ctx("COMMIT outside a transaction".into()))?;
            let committed = x.split(' ').next().unwrap_or("");
            if committed != xid.to_string() {
                return Err(ctx(format!("COMMIT of {committed} closes {xid}")));
            }
            items.push(Item::Txn { xid, changes });
        } else if let Some(rest) = row.strip_prefix("PREPARE TRANSACTION ") {
            // Two-phase: read as committed at COMMIT PREPARED.
            let (xid, changes) = open
                .take()
                .ok_or_else(|| ctx("PREPARE outside a transaction".into()))?;
            prepared.insert(td_gid(rest).map_err(ctx)?, Item::Txn { xid, changes });
        } else if let Some(rest) = row.strip_prefix("COMMIT PREPARED ") {
            let gid = td_gid(rest).map_err(ctx)?;
            let txn = prepared
                .remove(&gid)
                .ok_or_else(|| ctx(format!("COMMIT PREPARED of {gid} without its PREPARE")))?;
            items.push(txn);
        } else if let Some(rest) = row.strip_prefix("ROLLBACK PREPARED ") {
            prepared.remove(&td_gid(rest).map_err(ctx)?);
        } else if row.starts_with("table ") {
            for c in td_table_row(row).map_err(ctx)? {
                push_change(&mut items, &mut open, c);
            }
        } else if row.starts_with("message: ") {
            let c = td_message(row).map_err(ctx)?;
            push_change(&mut items, &mut open, c);
        } else {
            return Err(ctx("unexpected row".into()));
        }
    }
    if let Some((xid, _)) = open {
        return Err(format!("test_decoding: transaction {xid} has no COMMIT"));
    }
    Ok(items)
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

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub txns: usize,
    pub changes: usize,
    pub transformed: usize,
    pub messages: usize,
}

fn sorted(cols: &Cols) -> BTreeMap<String, Option<String>> {
    cols.iter().cloned().collect()
}

fn non_null(cols: &Cols) -> BTreeMap<String, Option<String>> {
    cols.iter().filter(|(_, v)| v.is_some()).cloned().collect()
}

fn compare_old(pg: &Change, pj: &Change) -> Result<(), String> {
    let pj_identity = pj.old.as_ref().map(|o| sorted(&o.cols));
    match (&pg.old, pj_identity) {
        (Some(old), Some(identity)) => {
            // 'K': key columns only (the others are NULL); 'O': the whole row.
            let expected = if old.kind == 'K' {
                non_null(&old.cols)
            } else {
                sorted(&old.cols)
            };
            if expected != identity {
                return Err(format!(
                    "old row differs: pgoutput {} tuple {:?}, pubjson identity {:?}",
                    old.kind, expected, identity
                ));
            }
            Ok(())
        }
        (Some(old), None) => Err(format!(
            "pgoutput sends an old tuple ({}) but pubjson has no identity",
            old.kind
        )),
        (None, Some(identity)) => {
            // UPDATE without an old tuple (key unchanged): pubjson's identity
            // can only repeat the new row's key values.
            let new = sorted(pg.new.as_ref().unwrap_or(&Vec::new()));
            for (k, v) in &identity {
                if new.get(k) != Some(v) {
                    return Err(format!(
                        "pgoutput sends no old tuple; pubjson identity {k}={v:?} is not the new row's value {:?}",
                        new.get(k)
                    ));
                }
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

pub fn compare_change(pg: &Change, pj: &Change) -> Result<(), String> {
    if pg.action != pj.action {
        return Err(format!(
            "action differs: pgoutput {}, pubjson {}",
            pg.action, pj.action
        ));
    }
    if pg.relation != pj.relation {
        return Err(format!(
            "relation differs: pgoutput {}, pubjson {}",
            pg.relation, pj.relation
        ));
    }
    if let Some(t) = &pj.transformed {
        if t != "U" || !matches!(pj.action, 'I' | 'D') {
            return Err(format!(
                "pubjson marks a {} as transformed from {t:?}",
                pj.action
            ));
        }
    }
    match pg.action {
        'I' | 'U' => {
            let pg_new = pg.new.clone().unwrap_or_default();
            let Some(pj_new) = &pj.new else {
                return Err("pubjson has no \"columns\"".into());
            };
            if &pg_new != pj_new {
                return Err(format!(
                    "new row differs (pgoutput leaves out unchanged TOAST {:?}):\n      pgoutput [{}]\n      pubjson  [{}]",
                    pg.unchanged,
                    show_cols(&pg_new),
                    show_cols(pj_new)
                ));
            }
            if pg.action == 'U' {
                compare_old(pg, pj)?;
            }
        }
        'D' => compare_old(pg, pj)?,
        'T' => {}
        'M' => {
            if pg.message != pj.message {
                return Err("message differs".into());
            }
        }
        a => return Err(format!("unexpected action {a}")),
    }
    Ok(())
}

/// Runs of consecutive TRUNCATE changes in relation order, so that they
/// compare as sets (plugins list them in the order they like).
fn truncates_sorted(changes: &[Change]) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    let mut run: Vec<Change> = Vec::new();
    for c in changes {
        if c.action == 'T' {
            run.push(c.clone());
        } else {
            run.sort_by(|a, b| a.relation.cmp(&b.relation));
            out.append(&mut run);
            out.push(c.clone());
        }
    }
    run.sort_by(|a, b| a.relation.cmp(&b.relation));
    out.append(&mut run);
    out
}

/// Is every transformed change of pubjson an UPDATE in the raw stream
/// (pubjson's changes, mapped to the raw change they come from, must be a
/// subsequence of the raw changes of the transaction)?
fn check_against_raw(pj: &[Change], raw: &[char]) -> Result<(), String> {
    let mut it = raw.iter();
    for c in pj {
        let wanted = match (c.action, c.transformed.is_some()) {
            ('I', false) => 'I',
            ('D', false) => 'D',
            ('U', _) | ('I', true) | ('D', true) => 'U',
            _ => continue,
        };
        if !it.any(|&r| r == wanted) {
            return Err(format!(
                "pubjson change `{c}` needs a raw {wanted} in the transaction; raw changes: {}",
                raw.iter().collect::<String>()
            ));
        }
    }
    Ok(())
}

/// [`compare_change`] of one change of each side at `at`, counted in `stats`.
fn compare_counted(
    x: &Change,
    y: &Change,
    at: &str,
    stats: &mut Stats,
    dump: &dyn Fn() -> String,
) -> Result<(), String> {
    compare_change(x, y)
        .map_err(|e| format!("{at}: {e}\n    pgoutput: {x}\n    pubjson:  {y}{}", dump()))?;
    stats.changes += 1;
    if y.action == 'M' {
        stats.messages += 1;
    }
    Ok(())
}

/// Compares the pgoutput stream with the pubjson stream, transaction by
/// transaction; `raw` (test_decoding) checks the transformed changes.
pub fn compare_streams(
    pg: &[Item],
    pj: &[Item],
    raw: Option<&HashMap<u32, Vec<char>>>,
) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let dump = || {
        format!(
            "\n--- pgoutput ---\n{}\n--- pubjson ---\n{}",
            show_items(pg, 120),
            show_items(pj, 120)
        )
    };
    if pg.len() != pj.len() {
        let xids = |items: &[Item]| {
            items
                .iter()
                .map(|i| match i {
                    Item::Txn { xid, changes } => format!("{xid}({})", changes.len()),
                    Item::Loose(_) => "loose".to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(format!(
            "pgoutput has {} transactions/items [{}], pubjson {} [{}]{}",
            pg.len(),
            xids(pg),
            pj.len(),
            xids(pj),
            dump()
        ));
    }
    for (n, (a, b)) in pg.iter().zip(pj).enumerate() {
        match pair_items(n, ("pgoutput", a), ("pubjson", b)).map_err(|e| e + &dump())? {
            Paired::Txn(xa, ca, cb) => {
                for (k, (x, y)) in ca.iter().zip(&cb).enumerate() {
                    let at = format!("transaction {xa}, change {k}");
                    compare_counted(x, y, &at, &mut stats, &dump)?;
                    if y.transformed.is_some() {
                        stats.transformed += 1;
                    }
                }
                if let Some(raw) = raw {
                    let none = Vec::new();
                    check_against_raw(&cb, raw.get(&xa).unwrap_or(&none))
                        .map_err(|e| format!("transaction {xa}: {e}{}", dump()))?;
                }
                stats.txns += 1;
            }
            Paired::Loose(x, y) => {
                let at = format!("item {n} (outside a transaction)");
                compare_counted(x, y, &at, &mut stats, &dump)?;
            }
        }
    }
    Ok(stats)
}

/// Item `n` of two streams, paired ([`pair_items`]).
pub(crate) enum Paired<'a> {
    /// Both are transaction `xid`, with as many changes: their changes,
    /// runs of TRUNCATE sorted ([`truncates_sorted`]).
    Txn(u32, Vec<Change>, Vec<Change>),
    /// Both are a change outside a transaction.
    Loose(&'a Change, &'a Change),
}

/// Pairs item `n` of stream `a_name` with item `n` of stream `b_name`: an
/// error when one is a transaction and the other not, or when the
/// transactions' xids or numbers of changes differ.
pub(crate) fn pair_items<'a>(
    n: usize,
    (a_name, a): (&str, &'a Item),
    (b_name, b): (&str, &'a Item),
) -> Result<Paired<'a>, String> {
    match (a, b) {
        (
            Item::Txn {
                xid: xa,
                changes: ca,
            },
            Item::Txn {
                xid: xb,
                changes: cb,
            },
        ) => {
            if xa != xb {
                return Err(format!(
                    "item {n}: {a_name} has transaction {xa}, {b_name} {xb}"
                ));
            }
            if ca.len() != cb.len() {
                return Err(format!(
                    "item {n}: transaction {xa}: {a_name} has {} changes, {b_name} {}",
                    ca.len(),
                    cb.len()
                ));
            }
            Ok(Paired::Txn(*xa, truncates_sorted(ca), truncates_sorted(cb)))
        }
        (Item::Loose(x), Item::Loose(y)) => Ok(Paired::Loose(x, y)),
        _ => Err(format!(
            "item {n}: a transaction on one side, a change outside a transaction on the other"
        )),
    }
}

/// The xids of the transactions in a stream.
pub fn xids(items: &[Item]) -> Vec<u32> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Txn { xid, .. } => Some(*xid),
            Item::Loose(_) => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Scenario harness
// ---------------------------------------------------------------------------

/// The slots of one comparison, all at the same starting point.
#[derive(Debug, Clone)]
pub struct Slots {
    pub pgoutput: String,
    pub pubjson: String,
    pub raw: String,
}

/// What a pubjson peek returned, with its matching pgoutput peek.
pub struct Peeked {
    pub pgoutput: Result<Vec<Vec<u8>>, DbErr>,
    pub pubjson: Result<Vec<String>, DbErr>,
}

#[derive(Debug, Clone, Default)]
pub struct Check<'a> {
    /// `messages` passed to both plugins (None: not passed).
    pub messages: Option<bool>,
    /// upto_lsn of the peeks.
    pub upto: Option<&'a str>,
    /// pgoutput must send at least this many changes (the case is not vacuous).
    pub min_changes: usize,
    /// pubjson must mark exactly this many changes as transformed.
    pub transformed: Option<usize>,
}

/// One scenario: a database of its own (dropped and recreated at the start,
/// dropped at the end with its slots).
pub struct Scenario {
    pub name: String,
    pub dbname: String,
    pub db: Client,
    pub dec: Client,
    started: Instant,
    cases: usize,
    totals: Stats,
}

/// What a peek gave, for failure messages.
fn outcome<T>(peek: &Result<Vec<T>, DbErr>) -> String {
    match peek {
        Ok(rows) => format!("returns {} rows", rows.len()),
        Err(e) => e.to_string(),
    }
}

impl Scenario {
    /// `name`: lowercase ASCII; the database is `pubjson_pub_<name>`.
    pub fn new(name: &str) -> Scenario {
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        let dbname = format!("pubjson_pub_{name}");
        let server = Server::main();
        // Retried: the server may be restarting after a backend crash.
        let db = server.fresh_database(&dbname);
        Scenario {
            name: name.to_string(),
            db,
            dec: server.connect_retrying(&dbname, Duration::from_secs(20)),
            dbname,
            started: Instant::now(),
            cases: 0,
            totals: Stats::default(),
        }
    }

    /// The server's major version (15, 17, 18...).
    pub fn server_major(&mut self) -> i32 {
        let row = self
            .db
            .query_one(
                "select current_setting('server_version_num')::int / 10000",
                &[],
            )
            .unwrap_or_else(|e| panic!("[{}] server_version_num: {}", self.name, db_err(&e)));
        row.get(0)
    }

    pub fn try_exec(&mut self, sql: &str) -> Result<(), DbErr> {
        self.db.batch_execute(sql).map_err(|e| db_err(&e))
    }

    pub fn exec(&mut self, sql: &str) {
        if let Err(e) = self.try_exec(sql) {
            panic!("[{}] SQL failed: {e}\n  {}", self.name, truncate(sql, 2000));
        }
    }

    /// Runs each string as one transaction (a string of several statements
    /// without BEGIN is one transaction in the simple-query protocol).
    pub fn run(&mut self, transactions: &[&str]) {
        for t in transactions {
            self.exec(t);
        }
    }

    /// Runs `sql` in a transaction and returns its xid (assigned if needed).
    pub fn xact(&mut self, sql: &str, commit: bool) -> u32 {
        self.exec("begin");
        self.exec(sql);
        let xid: String = self
            .db
            .query_one("select txid_current()::text", &[])
            .unwrap_or_else(|e| panic!("txid_current: {}", db_err(&e)))
            .get(0);
        self.exec(if commit { "commit" } else { "rollback" });
        xid.parse::<u64>()
            .map(|x| (x & 0xffff_ffff) as u32)
            .unwrap_or_else(|e| panic!("xid {xid}: {e}"))
    }

    pub fn query_string(&mut self, sql: &str) -> String {
        self.db
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {}", db_err(&e)))
            .get(0)
    }

    /// The current WAL insert position.
    pub fn lsn(&mut self) -> String {
        self.query_string("select pg_current_wal_insert_lsn()::text")
    }

    /// Waits until the WAL written so far is flushed (decoding reads only
    /// flushed WAL; a non-transactional message is flushed asynchronously).
    pub fn flush(&mut self) {
        let target = self.lsn();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done: bool = self
                .db
                .query_one(
                    "select pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .unwrap_or_else(|e| panic!("pg_current_wal_flush_lsn: {}", db_err(&e)))
                .get(0);
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "WAL not flushed up to {target} after 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn slot_name(&self, tag: &str, suffix: &str) -> String {
        let name = format!("pjpub_{}_{tag}_{suffix}", self.name);
        assert!(name.len() < 64, "slot name {name} is too long");
        name
    }

    /// A pgoutput slot and, copied from it (same starting point), a pubjson
    /// slot and a test_decoding slot.
    pub fn create_slots(&mut self, tag: &str) -> Slots {
        let slots = Slots {
            pgoutput: self.slot_name(tag, "pgo"),
            pubjson: self.slot_name(tag, "pj"),
            raw: self.slot_name(tag, "td"),
        };
        self.db
            .execute(
                "select pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slots.pgoutput],
            )
            .unwrap_or_else(|e| panic!("creating slot {}: {}", slots.pgoutput, db_err(&e)));
        self.copy_slot(&slots.pgoutput, &slots.pubjson, "pubjson");
        self.copy_slot(&slots.pgoutput, &slots.raw, "test_decoding");
        slots
    }

    pub fn copy_slot(&mut self, from: &str, to: &str, plugin: &str) {
        self.db
            .execute(
                "select pg_copy_logical_replication_slot($1, $2, false, $3)",
                &[&from, &to, &plugin],
            )
            .unwrap_or_else(|e| panic!("copying slot {from} to {to}: {}", db_err(&e)));
    }

    pub fn peek_pgoutput(
        &mut self,
        slot: &str,
        pubs: &str,
        messages: Option<bool>,
        upto: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, DbErr> {
        let mut opts = vec![
            "proto_version".to_string(),
            "1".into(),
            "publication_names".into(),
            pubs.into(),
        ];
        if let Some(m) = messages {
            opts.push("messages".into());
            opts.push(m.to_string());
        }
        self.peek_data("pg_logical_slot_peek_binary_changes", slot, &opts, upto)
    }

    /// The `data` column of `function(slot, upto, NULL, VARIADIC opts)`.
    fn peek_data<T: for<'a> FromSql<'a>>(
        &mut self,
        function: &str,
        slot: &str,
        opts: &[String],
        upto: Option<&str>,
    ) -> Result<Vec<T>, DbErr> {
        let sql =
            format!("select data from {function}($1, $2::text::pg_lsn, NULL, VARIADIC $3::text[])");
        let rows = self
            .dec
            .query(&sql, &[&slot, &upto, &opts])
            .map_err(|e| db_err(&e))?;
        Ok(rows.iter().map(|r| r.get::<_, T>(0)).collect())
    }

    /// pubjson, format 2, without types, with xids, plus `extra` options.
    pub fn peek_pubjson(
        &mut self,
        slot: &str,
        pubs: &str,
        extra: &[(&str, &str)],
        upto: Option<&str>,
    ) -> Result<Vec<String>, DbErr> {
        let mut opts: Vec<String> = [
            "format-version",
            "2",
            "publication_names",
            pubs,
            "include-types",
            "0",
            "include-xids",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (k, v) in extra {
            opts.push(k.to_string());
            opts.push(v.to_string());
        }
        self.peek_text(slot, &opts, upto)
    }

    pub fn peek_text(
        &mut self,
        slot: &str,
        opts: &[String],
        upto: Option<&str>,
    ) -> Result<Vec<String>, DbErr> {
        self.peek_data("pg_logical_slot_peek_changes", slot, opts, upto)
    }

    pub fn peek_raw(&mut self, slot: &str, upto: Option<&str>) -> HashMap<u32, Vec<char>> {
        let opts: Vec<String> = ["include-xids", "1", "skip-empty-xacts", "0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let rows = self
            .peek_text(slot, &opts, upto)
            .unwrap_or_else(|e| panic!("test_decoding peek of {slot}: {e}"));
        read_test_decoding(&rows).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Peeks both plugins with the same publications.
    pub fn peek_both(&mut self, slots: &Slots, pubs: &str, c: &Check) -> Peeked {
        let pgoutput = self.peek_pgoutput(&slots.pgoutput, pubs, c.messages, c.upto);
        let extra: Vec<(&str, &str)> = match c.messages {
            Some(true) => vec![("messages", "true")],
            Some(false) => vec![("messages", "false")],
            None => vec![],
        };
        let pubjson = self.peek_pubjson(&slots.pubjson, pubs, &extra, c.upto);
        Peeked { pgoutput, pubjson }
    }

    /// Decodes with both plugins and compares; panics on any divergence.
    /// Returns the pgoutput and pubjson streams.
    pub fn check(&mut self, slots: &Slots, pubs: &str, c: Check) -> (Vec<Item>, Vec<Item>, Stats) {
        let label = format!(
            "[{}] publication_names={pubs:?}{}{}",
            self.name,
            c.messages
                .map(|m| format!(" messages={m}"))
                .unwrap_or_default(),
            c.upto.map(|u| format!(" upto={u}")).unwrap_or_default()
        );
        let peeked = self.peek_both(slots, pubs, &c);
        let (pg_rows, pj_rows) = match (peeked.pgoutput, peeked.pubjson) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{label}: pgoutput {}, pubjson {}", outcome(&a), outcome(&b)),
        };
        let pg = decode_pgoutput(&pg_rows).unwrap_or_else(|e| panic!("{label}: {e}"));
        let pj = read_pubjson(&pj_rows).unwrap_or_else(|e| panic!("{label}: {e}"));
        let raw = self.peek_raw(&slots.raw, c.upto);
        let stats = compare_streams(&pg, &pj, Some(&raw))
            .unwrap_or_else(|e| panic!("{label}: pubjson diverges from pgoutput: {e}"));
        println!(
            "{label}: {} transactions, {} changes compared ({} transformed, {} messages)",
            stats.txns, stats.changes, stats.transformed, stats.messages
        );
        if std::env::var_os("PUBJSON_PUB_SHOW").is_some() {
            println!("--- pgoutput ---\n{}", show_items(&pg, 400));
            println!("--- pubjson ---\n{}", show_items(&pj, 400));
        }
        assert!(
            stats.changes >= c.min_changes,
            "{label}: pgoutput sent {} changes, the scenario expects at least {}\n{}",
            stats.changes,
            c.min_changes,
            show_items(&pg, 60)
        );
        if let Some(t) = c.transformed {
            assert_eq!(
                stats.transformed,
                t,
                "{label}: pubjson marks {} changes as transformed from UPDATE, expected {t}\n{}",
                stats.transformed,
                show_items(&pj, 80)
            );
        }
        self.cases += 1;
        self.totals.txns += stats.txns;
        self.totals.changes += stats.changes;
        self.totals.transformed += stats.transformed;
        (pg, pj, stats)
    }

    /// Both plugins must fail with the same message; returns (pgoutput, pubjson).
    pub fn check_error(&mut self, slots: &Slots, pubs: &str, c: Check) -> (DbErr, DbErr) {
        let label = format!("[{}] publication_names={pubs:?}", self.name);
        let peeked = self.peek_both(slots, pubs, &c);
        let (pg, pj) = match (peeked.pgoutput, peeked.pubjson) {
            (Err(a), Err(b)) => (a, b),
            (a, b) => panic!(
                "{label}: both plugins should fail; pgoutput {}, pubjson {}",
                outcome(&a),
                outcome(&b)
            ),
        };
        assert_eq!(
            pg.message, pj.message,
            "{label}: error messages differ\n  pgoutput: {pg}\n  pubjson:  {pj}"
        );
        assert_eq!(
            pg.code, pj.code,
            "{label}: SQLSTATEs differ\n  pgoutput: {pg}\n  pubjson:  {pj}"
        );
        println!("{label}: both fail with {}: {}", pj.code, pj.message);
        self.cases += 1;
        (pg, pj)
    }

    /// Prints the scenario's totals.
    pub fn summary(&self) {
        println!(
            "[{}] {} comparisons, {} transactions and {} changes compared ({} transformed) in {:.2?}",
            self.name,
            self.cases,
            self.totals.txns,
            self.totals.changes,
            self.totals.transformed,
            self.started.elapsed()
        );
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        // Never panics: the server may be restarting after a crash.
        if let Err(e) = Server::main().drop_database(&self.dbname) {
            eprintln!("[{}] cleanup: {e}", self.name);
        }
    }
}

// ---------------------------------------------------------------------------
// Unit tests of the decoders (no server needed)
// ---------------------------------------------------------------------------

#[cfg(test)]
mod unit {
    use super::*;

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

    fn cols(pairs: &[(&str, Option<&str>)]) -> Cols {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.map(str::to_string)))
            .collect()
    }

    fn ins(rel: &str, new: &[(&str, Option<&str>)]) -> Change {
        let mut c = Change::bare('I', rel.into());
        c.new = Some(cols(new));
        c
    }

    fn del(rel: &str, kind: char, old: &[(&str, Option<&str>)]) -> Change {
        let mut c = Change::bare('D', rel.into());
        c.old = Some(Old {
            kind,
            cols: cols(old),
        });
        c
    }

    fn txn(xid: u32, changes: Vec<Change>) -> Vec<Item> {
        vec![Item::Txn { xid, changes }]
    }

    /// The comparison has teeth: each kind of divergence is reported.
    #[test]
    fn divergences_are_caught() {
        let pg = txn(7, vec![ins("public.t", &[("id", Some("1")), ("v", None)])]);
        assert!(compare_streams(&pg, &pg.clone(), None).is_ok());
        let bad = [
            // another value, a missing or extra column, another order
            txn(7, vec![ins("public.t", &[("id", Some("2")), ("v", None)])]),
            txn(7, vec![ins("public.t", &[("id", Some("1"))])]),
            txn(
                7,
                vec![ins(
                    "public.t",
                    &[("id", Some("1")), ("v", None), ("g", Some("2"))],
                )],
            ),
            txn(7, vec![ins("public.t", &[("v", None), ("id", Some("1"))])]),
            // another relation, xid, action; an extra transaction
            txn(7, vec![ins("public.u", &[("id", Some("1")), ("v", None)])]),
            txn(8, vec![ins("public.t", &[("id", Some("1")), ("v", None)])]),
            txn(7, vec![del("public.t", 'J', &[("id", Some("1"))])]),
            [
                pg.clone(),
                txn(9, vec![ins("public.t", &[("id", Some("3")), ("v", None)])]),
            ]
            .concat(),
        ];
        for b in &bad {
            assert!(compare_streams(&pg, b, None).is_err(), "not caught: {b:?}");
        }
        // Old rows: a key tuple against the identity, a FULL tuple with NULLs.
        let pg = txn(
            7,
            vec![del("public.t", 'K', &[("id", Some("1")), ("v", None)])],
        );
        let ok = txn(7, vec![del("public.t", 'J', &[("id", Some("1"))])]);
        assert!(compare_streams(&pg, &ok, None).is_ok());
        let wrong = txn(7, vec![del("public.t", 'J', &[("id", Some("2"))])]);
        assert!(compare_streams(&pg, &wrong, None).is_err());
        let pg = txn(
            7,
            vec![del("public.t", 'O', &[("id", Some("1")), ("v", None)])],
        );
        assert!(compare_streams(&pg, &ok, None).is_err());
        // A transformed change needs a raw UPDATE.
        let pg = txn(7, vec![ins("public.t", &[("id", Some("1"))])]);
        let mut t = ins("public.t", &[("id", Some("1"))]);
        t.transformed = Some("U".into());
        let pj = txn(7, vec![t]);
        let raw_insert: HashMap<u32, Vec<char>> = [(7, vec!['I'])].into_iter().collect();
        let raw_update: HashMap<u32, Vec<char>> = [(7, vec!['U'])].into_iter().collect();
        assert!(compare_streams(&pg, &pj, Some(&raw_insert)).is_err());
        assert!(compare_streams(&pg, &pj, Some(&raw_update)).is_ok());
        assert!(compare_streams(&pg, &pg.clone(), Some(&raw_update)).is_err());
        // Truncated relations compare as a set.
        let a = txn(
            7,
            vec![
                Change::bare('T', "public.a".into()),
                Change::bare('T', "public.b".into()),
            ],
        );
        let b = txn(
            7,
            vec![
                Change::bare('T', "public.b".into()),
                Change::bare('T', "public.a".into()),
            ],
        );
        assert!(compare_streams(&a, &b, None).is_ok());
        let c = txn(7, vec![Change::bare('T', "public.a".into())]);
        assert!(compare_streams(&a, &c, None).is_err());
    }

    #[test]
    fn pgoutput_messages() {
        // Captured from PostgreSQL 15: INSERT INTO t VALUES (2, 2) and a
        // DELETE with a key tuple.
        let hex = [
            "420000000004532f20000304a35d311acc0000063e",
            "52000046027075626c69630074006400020169640000000017ffffffff00760000000017ffffffff",
            "49000046024e0002740000000132740000000132",
            "43000000000004532f200000000004532f50000304a35d311acc",
            "420000000004532fe8000304a35d311cd20000063f",
            "44000046024b00027400000001326e",
            "43000000000004532fe80000000004533018000304a35d311cd2",
            "4d01000000000453305070000000000163",
        ];
        let rows: Vec<Vec<u8>> = hex
            .iter()
            .map(|h| {
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                    .collect()
            })
            .collect();
        let items = decode_pgoutput(&rows).expect("decodes");
        assert_eq!(items.len(), 3);
        let Item::Txn { xid, changes } = &items[0] else {
            panic!("not a transaction")
        };
        assert_eq!(*xid, 1598);
        assert_eq!(changes[0].relation, "public.t");
        assert_eq!(
            changes[0].new,
            Some(vec![
                ("id".into(), Some("2".into())),
                ("v".into(), Some("2".into()))
            ])
        );
        let Item::Txn { changes, .. } = &items[1] else {
            panic!("not a transaction")
        };
        assert_eq!(changes[0].action, 'D');
        assert_eq!(
            changes[0].old,
            Some(Old {
                kind: 'K',
                cols: vec![("id".into(), Some("2".into())), ("v".into(), None)]
            })
        );
        let Item::Loose(m) = &items[2] else {
            panic!("not loose")
        };
        assert_eq!(
            m.message,
            Some(Message {
                transactional: true,
                prefix: "p".into(),
                content: b"c".to_vec()
            })
        );
    }
}
