//! Format 3 (docs/format3.md) read into broker events: one event per
//! object, the objects of a message split at `\n`, each published as it
//! is (a slice of the message, not re-encoded).
//!
//! Identities: a transaction decoded at its end (`B` … `C`/`P`) numbers
//! its objects from 0 (`B`) under the LSN its `B` carries, which is its
//! commit (or prepare) record's: the same in every session, whatever the
//! batching. `R` objects are not numbered (a session sends them when it
//! needs to). Changes of a streamed transaction are numbered per
//! subtransaction from the block marked `first`.

use super::{lines, parse_lsn, Boundary, Dest, Event, EventId, Format, FormatError, TableName};
use bytes::{BufMut, Bytes, BytesMut};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::SystemTime;

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    relid: Option<u32>,
    #[serde(borrow)]
    schema: Option<Cow<'a, str>>,
    #[serde(borrow)]
    table: Option<Cow<'a, str>>,
    xid: Option<u32>,
    subxid: Option<u32>,
    #[serde(borrow)]
    lsn: Option<Cow<'a, str>>,
    #[serde(borrow)]
    nextlsn: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    first: Option<bool>,
    streamed: Option<bool>,
    transactional: Option<bool>,
    #[serde(borrow)]
    new: Option<&'a RawValue>,
    #[serde(borrow)]
    old: Option<&'a RawValue>,
    #[serde(borrow)]
    columns: Option<Vec<Column<'a>>>,
}

#[derive(Deserialize)]
struct Column<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    key: bool,
}

struct Relation {
    /// The key columns' names, in the relation's order.
    key: Vec<String>,
    /// The same as JSON strings, as the record key writes them.
    key_json: Vec<String>,
}

struct OpenTxn {
    lsn: u64,
    next_index: u32,
}

pub struct Format3 {
    keys: bool,
    relations: HashMap<u32, Relation>,
    txn: Option<OpenTxn>,
    /// The top-level xid of the streamed block being read (`S` … `E`).
    block: Option<u32>,
    /// Changes counted per (top-level xid, subtransaction) of streamed
    /// transactions.
    streamed_seq: HashMap<(u32, u32), u32>,
    /// The changes of each streamed transaction still running, with their
    /// subtransaction: published when it ends (C or P), so that the broker
    /// holds only what committed (or was prepared).
    streams: HashMap<u32, Vec<(u32, Event)>>,
}

impl Format3 {
    /// `keys`: compute each change's record key (Kafka's).
    pub fn new(keys: bool) -> Format3 {
        Format3 {
            keys,
            relations: HashMap::new(),
            txn: None,
            block: None,
            streamed_seq: HashMap::new(),
            streams: HashMap::new(),
        }
    }
}

/// The index of a transaction's end: a `C` follows its changes
/// (`after_changes`); a `P` is the last index there is. A prepared
/// transaction rolled back before its PREPARE was decoded shows fewer
/// changes (pubjson writes none of them, an earlier session may have
/// written them all), and its `P` must be the same event either way.
pub const PREPARE_INDEX: u32 = u32::MAX;

fn end_index(action: &str, after_changes: u32) -> u32 {
    if action == "P" {
        PREPARE_INDEX
    } else {
        after_changes
    }
}

fn bad(what: &str, line: &[u8]) -> FormatError {
    let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    FormatError(format!("format 3 object {what}: {shown}"))
}

fn lsn_field(
    o: &Object<'_>,
    field: Option<&Cow<'_, str>>,
    what: &str,
    line: &[u8],
) -> Result<u64, FormatError> {
    let _ = o;
    field
        .and_then(|s| parse_lsn(s))
        .ok_or_else(|| bad(&format!("without a valid {what}"), line))
}

fn commit_time(o: &Object<'_>) -> Option<SystemTime> {
    o.timestamp
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok())
}

/// The record key: the key columns' values from `row`, as a JSON object in
/// the relation's column order (each value as the plugin wrote it).
fn record_key(rel: &Relation, row: &RawValue) -> Option<Bytes> {
    if rel.key.is_empty() {
        return None;
    }
    // Only the key columns' values are kept: the row is read once, its
    // other values skipped, without a map of every column (4% of
    // the relay's CPU into Kafka was that map and its hashing).
    let mut de = serde_json::Deserializer::from_str(row.get());
    let values = de.deserialize_map(KeyValues(&rel.key)).ok()?;
    let mut out = BytesMut::with_capacity(64);
    out.put_u8(b'{');
    for (i, (name, value)) in rel.key_json.iter().zip(&values).enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(name.as_bytes());
        out.put_u8(b':');
        out.put_slice(value.map_or("null", |v| v.get()).as_bytes());
    }
    out.put_u8(b'}');
    Some(out.freeze())
}

/// Reads a row object into the values of the named columns, in their
/// order (`None`: the row does not have it).
struct KeyValues<'k>(&'k [String]);

impl<'de> Visitor<'de> for KeyValues<'_> {
    type Value = Vec<Option<&'de RawValue>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut values = vec![None; self.0.len()];
        while let Some(ColumnName(name)) = map.next_key()? {
            match self.0.iter().position(|k| *k == name) {
                Some(i) => values[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(values)
    }
}

/// A column name, borrowed from the row unless it has escapes.
struct ColumnName<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for ColumnName<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = ColumnName<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a column name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ColumnName(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ColumnName(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Name)
    }
}

impl Format3 {
    fn object(
        &mut self,
        payload: &Bytes,
        start: usize,
        end: usize,
        out: &mut Vec<Event>,
    ) -> Result<(), FormatError> {
        let line = &payload[start..end];
        let o: Object<'_> = serde_json::from_slice(line)
            .map_err(|e| bad(&format!("is not valid JSON ({e})"), line))?;
        let slice = payload.slice(start..end);
        let table = || -> Option<TableName> {
            Some(TableName {
                schema: o.schema.as_deref()?.to_string(),
                table: o.table.as_deref()?.to_string(),
            })
        };
        let mut ev = Event {
            dest: Dest::Transactions,
            payload: slice,
            tombstone: false,
            id: EventId::None,
            key: None,
            xid: o.xid,
            all_partitions: false,
            boundary: None,
            action: "?",
            after: None,
        };
        let action = o.action.as_ref();
        match action {
            "R" => {
                let relid = o.relid.ok_or_else(|| bad("R without relid", line))?;
                let key: Vec<String> = o
                    .columns
                    .as_ref()
                    .map(|cols| {
                        cols.iter()
                            .filter(|c| c.key)
                            .map(|c| c.name.to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                table().ok_or_else(|| bad("R without schema or table", line))?;
                let key_json = key
                    .iter()
                    .map(|name| serde_json::Value::from(name.as_str()).to_string())
                    .collect();
                self.relations.insert(relid, Relation { key, key_json });
                ev.dest = Dest::Relations;
                ev.action = "R";
            }
            "B" => {
                let lsn = lsn_field(&o, o.lsn.as_ref(), "lsn", line)?;
                self.txn = Some(OpenTxn { lsn, next_index: 1 });
                ev.id = EventId::Committed { lsn, index: 0 };
                ev.action = "B";
            }
            "C" | "P" if o.streamed == Some(true) && self.txn.is_none() => {
                // The end of a streamed transaction (outside B … C).
                let lsn = lsn_field(&o, o.lsn.as_ref(), "lsn", line)?;
                let next = lsn_field(&o, o.nextlsn.as_ref(), "nextlsn", line)?;
                let xid = o.xid.ok_or_else(|| bad("streamed end without xid", line))?;
                self.streamed_seq.retain(|(top, _), _| *top != xid);
                // The buffered changes, numbered from 1 under the end's LSN,
                // then the end itself.
                let mut index = 1;
                for (_, mut change) in self.streams.remove(&xid).unwrap_or_default() {
                    change.id = EventId::Committed { lsn, index };
                    index += 1;
                    out.push(change);
                }
                ev.id = EventId::Committed {
                    lsn,
                    index: end_index(action, index),
                };
                ev.boundary = Some(Boundary {
                    lsn: next,
                    commit_time: commit_time(&o),
                });
                ev.action = if action == "C" { "C" } else { "P" };
            }
            "C" | "P" => {
                let txn = self
                    .txn
                    .take()
                    .ok_or_else(|| bad(&format!("{action} outside a transaction"), line))?;
                let next = lsn_field(&o, o.nextlsn.as_ref(), "nextlsn", line)?;
                ev.id = EventId::Committed {
                    lsn: txn.lsn,
                    index: end_index(action, txn.next_index),
                };
                ev.boundary = Some(Boundary {
                    lsn: next,
                    commit_time: commit_time(&o),
                });
                ev.action = if action == "C" { "C" } else { "P" };
            }
            "CP" | "RP" => {
                let lsn = lsn_field(&o, o.lsn.as_ref(), "lsn", line)?;
                let next = lsn_field(&o, o.nextlsn.as_ref(), "nextlsn", line)?;
                if let Some(xid) = o.xid {
                    self.streamed_seq.retain(|(top, _), _| *top != xid);
                }
                ev.id = EventId::Committed { lsn, index: 0 };
                ev.boundary = Some(Boundary {
                    lsn: next,
                    commit_time: commit_time(&o),
                });
                ev.action = if action == "CP" { "CP" } else { "RP" };
            }
            "S" => {
                let xid = o.xid.ok_or_else(|| bad("S without xid", line))?;
                if o.first == Some(true) {
                    // Streamed again from its start (a new session).
                    self.streamed_seq.retain(|(top, _), _| *top != xid);
                    self.streams.remove(&xid);
                }
                self.block = Some(xid);
                // Session framing only: not published.
                return Ok(());
            }
            "E" => {
                self.block = None;
                return Ok(());
            }
            "A" => {
                let xid = o.xid.ok_or_else(|| bad("A without xid", line))?;
                let subxid = o.subxid.unwrap_or(xid);
                if subxid == xid {
                    self.streamed_seq.retain(|(top, _), _| *top != xid);
                    self.streams.remove(&xid);
                } else if let Some(buffer) = self.streams.get_mut(&xid) {
                    buffer.retain(|(sub, _)| *sub != subxid);
                }
                // Nothing of it was published: nothing to publish.
                return Ok(());
            }
            "M" if o.transactional != Some(true) => {
                // A message outside any transaction.
                let lsn = lsn_field(&o, o.lsn.as_ref(), "lsn", line)?;
                ev.dest = Dest::Messages;
                ev.id = EventId::Committed { lsn, index: 0 };
                ev.action = "M";
            }
            _ => {
                // A change, a transactional message, DDL, backfill, or an
                // object of a newer format version: part of its
                // transaction.
                let (dest, static_action) = match action {
                    "I" | "U" | "D" | "T" | "F" | "FS" | "FE" => (
                        Dest::Table(
                            table().ok_or_else(|| bad("change without schema or table", line))?,
                        ),
                        match action {
                            "I" => "I",
                            "U" => "U",
                            "D" => "D",
                            "T" => "T",
                            "F" => "F",
                            "FS" => "FS",
                            _ => "FE",
                        },
                    ),
                    "M" => (Dest::Messages, "M"),
                    "DDL" => (Dest::Ddl, "DDL"),
                    _ => (
                        table().map(Dest::Table).unwrap_or(Dest::Transactions),
                        "other",
                    ),
                };
                ev.dest = dest;
                ev.action = static_action;
                ev.all_partitions = matches!(static_action, "T" | "FS" | "FE");
                if let Some(top) = self.block {
                    let subxid = o.xid.unwrap_or(top);
                    let seq = self.streamed_seq.entry((top, subxid)).or_insert(0);
                    ev.id = EventId::Streamed {
                        xid: top,
                        subxid,
                        seq: *seq,
                    };
                    *seq += 1;
                } else if let Some(txn) = self.txn.as_mut() {
                    ev.id = EventId::Committed {
                        lsn: txn.lsn,
                        index: txn.next_index,
                    };
                    txn.next_index += 1;
                } else {
                    return Err(bad("outside a transaction", line));
                }
                if self.keys && matches!(static_action, "I" | "U" | "D" | "F") {
                    let row = if static_action == "D" {
                        o.old
                    } else {
                        o.new.or(o.old)
                    };
                    if let (Some(rel), Some(row)) =
                        (o.relid.and_then(|r| self.relations.get(&r)), row)
                    {
                        ev.key = record_key(rel, row);
                    }
                }
                if let EventId::Streamed { xid, subxid, .. } = ev.id {
                    self.streams.entry(xid).or_default().push((subxid, ev));
                    return Ok(());
                }
            }
        }
        out.push(ev);
        Ok(())
    }
}

impl Format for Format3 {
    fn plugin_options(
        &self,
        user: &[(String, String)],
    ) -> Result<Vec<(String, String)>, FormatError> {
        let mut opts = Vec::with_capacity(user.len() + 1);
        let mut has_version = false;
        for (k, v) in user {
            if k == "format-version" {
                if v != "3" {
                    return Err(FormatError(format!(
                        "the relay reads format-version 3 here; option format-version={v} is not supported (the relay's format setting picks 3 or debezium)"
                    )));
                }
                has_version = true;
            }
            opts.push((k.clone(), v.clone()));
        }
        if !has_version {
            opts.insert(0, ("format-version".to_string(), "3".to_string()));
        }
        Ok(opts)
    }

    fn session_start(&mut self) {
        self.relations.clear();
        self.txn = None;
        self.block = None;
        // A new session streams every running transaction again from its
        // start (format 3's rule 1).
        self.streams.clear();
        self.streamed_seq.clear();
    }

    fn message(
        &mut self,
        _lsn: u64,
        payload: &Bytes,
        out: &mut Vec<Event>,
    ) -> Result<(), FormatError> {
        for (start, end) in lines(payload) {
            self.object(payload, start, end, out)?;
        }
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        self.txn.is_some() || self.block.is_some()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(f: &mut Format3, msgs: &[&str]) -> Vec<Event> {
        let mut out = Vec::new();
        for m in msgs {
            f.message(0, &Bytes::copy_from_slice(m.as_bytes()), &mut out)
                .unwrap();
        }
        out
    }

    const R: &str = r#"{"action":"R","relid":5,"schema":"public","table":"t","identity":"default","columns":[{"name":"id","attnum":1,"type":"integer","typeoid":23,"key":true,"nullable":false},{"name":"v","attnum":2,"type":"text","typeoid":25,"key":false,"nullable":true}]}"#;

    #[test]
    fn a_batched_transaction_numbered_from_its_commit_lsn() {
        let mut f = Format3::new(true);
        let msg = format!(
            "{}\n{}\n{}\n{}\n{}",
            r#"{"action":"B","xid":9,"lsn":"0/100","timestamp":"2026-12-03T05:08:36.757186Z"}"#,
            R,
            r#"{"action":"I","relid":5,"schema":"public","table":"t","new":{"id":1,"v":"a\"b"}}"#,
            r#"{"action":"D","relid":5,"schema":"public","table":"t","old":{"id":1}}"#,
            r#"{"action":"C","xid":9,"lsn":"0/100","nextlsn":"0/130","timestamp":"2026-12-03T05:08:36.757186Z","changes":2}"#
        );
        assert!(!f.in_transaction());
        let evs = run(&mut f, &[&msg]);
        let ids: Vec<_> = evs.iter().map(|e| (e.action, e.id)).collect();
        assert_eq!(
            ids,
            vec![
                (
                    "B",
                    EventId::Committed {
                        lsn: 0x100,
                        index: 0
                    }
                ),
                ("R", EventId::None),
                (
                    "I",
                    EventId::Committed {
                        lsn: 0x100,
                        index: 1
                    }
                ),
                (
                    "D",
                    EventId::Committed {
                        lsn: 0x100,
                        index: 2
                    }
                ),
                (
                    "C",
                    EventId::Committed {
                        lsn: 0x100,
                        index: 3
                    }
                ),
            ]
        );
        assert_eq!(
            &evs[2].payload[..],
            br#"{"action":"I","relid":5,"schema":"public","table":"t","new":{"id":1,"v":"a\"b"}}"#
        );
        assert_eq!(evs[2].key.as_deref(), Some(&br#"{"id":1}"#[..]));
        assert_eq!(evs[3].key.as_deref(), Some(&br#"{"id":1}"#[..]));
        assert_eq!(
            evs[2].dest,
            Dest::Table(TableName {
                schema: "public".into(),
                table: "t".into()
            })
        );
        assert_eq!(evs[4].boundary.unwrap().lsn, 0x130);
        assert!(evs[4].boundary.unwrap().commit_time.is_some());
        assert!(evs[..4].iter().all(|e| e.boundary.is_none()));
        assert!(!f.in_transaction());
    }

    #[test]
    fn messages_cut_mid_transaction_give_the_same_events() {
        let objs = [
            r#"{"action":"B","xid":9,"lsn":"0/100","timestamp":"2026-12-03T05:08:36Z"}"#,
            R,
            r#"{"action":"I","relid":5,"schema":"public","table":"t","new":{"id":1,"v":null}}"#,
            r#"{"action":"T","relid":5,"schema":"public","table":"t"}"#,
            r#"{"action":"M","transactional":true,"lsn":"0/110","prefix":"p","content":"x"}"#,
            r#"{"action":"C","xid":9,"lsn":"0/100","nextlsn":"0/130","timestamp":"2026-12-03T05:08:36Z","changes":3}"#,
        ];
        let whole = run(&mut Format3::new(false), &[&objs.join("\n")]);
        let mut f = Format3::new(false);
        let single = run(&mut f, &objs);
        let key = |e: &Event| {
            (
                e.action,
                e.id,
                e.payload.clone(),
                e.dest.clone(),
                e.all_partitions,
            )
        };
        assert_eq!(
            whole.iter().map(key).collect::<Vec<_>>(),
            single.iter().map(key).collect::<Vec<_>>()
        );
        assert!(single[3].all_partitions);
        assert_eq!(single[4].dest, Dest::Messages);
        assert!(single[2].key.is_none(), "keys only when asked for");
    }

    #[test]
    fn streamed_transactions_published_whole_at_their_end() {
        let mut f = Format3::new(false);
        let s1 = [
            r#"{"action":"S","xid":7,"first":true}"#,
            R,
            r#"{"action":"I","xid":7,"relid":5,"schema":"public","table":"t","new":{"id":1}}"#,
            r#"{"action":"I","xid":8,"relid":5,"schema":"public","table":"t","new":{"id":2}}"#,
            r#"{"action":"E","xid":7}"#,
        ];
        let evs = run(&mut f, &s1);
        assert_eq!(
            evs.iter().map(|e| e.action).collect::<Vec<_>>(),
            vec!["R"],
            "changes held back"
        );
        run(
            &mut f,
            &[
                r#"{"action":"S","xid":7,"first":false}"#,
                r#"{"action":"I","xid":9,"relid":5,"schema":"public","table":"t","new":{"id":3}}"#,
            ],
        );
        assert!(f.in_transaction());
        run(&mut f, &[r#"{"action":"E","xid":7}"#]);
        assert!(
            !f.in_transaction(),
            "a keepalive may be confirmed between blocks"
        );
        // A new session streams it again from the start: nothing twice.
        f.session_start();
        run(&mut f, &s1);
        run(
            &mut f,
            &[
                r#"{"action":"S","xid":7,"first":false}"#,
                r#"{"action":"I","xid":9,"relid":5,"schema":"public","table":"t","new":{"id":3}}"#,
                r#"{"action":"E","xid":7}"#,
            ],
        );
        let evs = run(
            &mut f,
            &[
                r#"{"action":"A","xid":7,"subxid":8,"lsn":"0/200"}"#,
                r#"{"action":"C","xid":7,"streamed":true,"lsn":"0/300","nextlsn":"0/330","timestamp":"2026-12-03T05:08:36Z","changes":3}"#,
            ],
        );
        let got: Vec<_> = evs
            .iter()
            .map(|e| (e.action, e.id, e.boundary.map(|b| b.lsn)))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "I",
                    EventId::Committed {
                        lsn: 0x300,
                        index: 1
                    },
                    None
                ),
                (
                    "I",
                    EventId::Committed {
                        lsn: 0x300,
                        index: 2
                    },
                    None
                ),
                (
                    "C",
                    EventId::Committed {
                        lsn: 0x300,
                        index: 3
                    },
                    Some(0x330)
                ),
            ]
        );
        assert!(evs[1].payload.ends_with(br#"{"id":3}}"#));
        // A whole transaction aborted: nothing published.
        run(&mut f, &s1);
        assert!(run(
            &mut f,
            &[r#"{"action":"A","xid":7,"subxid":7,"lsn":"0/400"}"#]
        )
        .is_empty());
        assert!(f.streams.is_empty());
    }

    #[test]
    fn two_phase_and_standalone_messages() {
        let mut f = Format3::new(false);
        let evs = run(
            &mut f,
            &[
                r#"{"action":"B","xid":3,"lsn":"0/500","timestamp":"2026-12-03T05:08:36Z"}"#,
                r#"{"action":"I","relid":5,"schema":"public","table":"t","new":{"id":1}}"#,
                r#"{"action":"P","xid":3,"gid":"g","lsn":"0/500","nextlsn":"0/540","timestamp":"2026-12-03T05:08:36Z","streamed":false,"changes":1}"#,
                r#"{"action":"CP","xid":3,"gid":"g","lsn":"0/600","nextlsn":"0/640","timestamp":"2026-12-03T05:08:36Z"}"#,
                r#"{"action":"M","transactional":false,"lsn":"0/700","prefix":"p","content":"x"}"#,
            ],
        );
        let prepare = EventId::Committed {
            lsn: 0x500,
            index: PREPARE_INDEX,
        };
        assert_eq!(evs[2].id, prepare);
        assert_eq!(evs[2].boundary.unwrap().lsn, 0x540);
        // Decoded again after its ROLLBACK PREPARED (a new session): no
        // changes, the same P; streamed, the same too.
        f.session_start();
        let again = run(
            &mut f,
            &[
                r#"{"action":"B","xid":3,"lsn":"0/500","timestamp":"2026-12-03T05:08:36Z"}"#,
                r#"{"action":"P","xid":3,"gid":"g","lsn":"0/500","nextlsn":"0/540","timestamp":"2026-12-03T05:08:36Z","streamed":false,"changes":0}"#,
            ],
        );
        assert_eq!(again[1].id, prepare);
        f.session_start();
        let streamed = run(
            &mut f,
            &[
                r#"{"action":"S","xid":3,"first":true}"#,
                r#"{"action":"I","xid":3,"relid":5,"schema":"public","table":"t","new":{"id":1}}"#,
                r#"{"action":"E","xid":3}"#,
                r#"{"action":"P","xid":3,"gid":"g","lsn":"0/500","nextlsn":"0/540","timestamp":"2026-12-03T05:08:36Z","streamed":true,"changes":1}"#,
            ],
        );
        assert_eq!(
            streamed.iter().map(|e| e.id).collect::<Vec<_>>(),
            [
                EventId::Committed {
                    lsn: 0x500,
                    index: 1
                },
                prepare
            ]
        );
        assert_eq!(
            evs[3].id,
            EventId::Committed {
                lsn: 0x600,
                index: 0
            }
        );
        assert_eq!(
            evs[4].id,
            EventId::Committed {
                lsn: 0x700,
                index: 0
            }
        );
        assert_eq!(evs[4].dest, Dest::Messages);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut f = Format3::new(true);
        let mut out = Vec::new();
        for text in [
            "not json",
            r#"{"action":"C","xid":1,"lsn":"0/1","nextlsn":"0/2"}"#,
            r#"{"action":"B","xid":1}"#,
            r#"{"action":"I","relid":5,"schema":"public","table":"t","new":{}}"#,
        ] {
            f.session_start();
            assert!(
                f.message(0, &Bytes::from(text), &mut out).is_err(),
                "{text}"
            );
        }
        assert_eq!(
            f.plugin_options(&[("streaming".into(), "on".into())])
                .unwrap()[0],
            ("format-version".into(), "3".into())
        );
        assert!(f
            .plugin_options(&[("format-version".into(), "2".into())])
            .is_err());
    }

    #[test]
    fn keys_of_several_columns_in_relation_order() {
        let mut f = Format3::new(true);
        let r = r#"{"action":"R","relid":1,"schema":"s","table":"x","identity":"default","columns":[{"name":"b","key":true},{"name":"v","key":false},{"name":"a \"q\"","key":true}]}"#;
        let evs = run(
            &mut f,
            &[
                r#"{"action":"B","xid":1,"lsn":"0/1","timestamp":"2026-12-03T05:08:36Z"}"#,
                r,
                r#"{"action":"U","relid":1,"schema":"s","table":"x","new":{"a \"q\"":[1,2],"v":1,"b":"z"}}"#,
            ],
        );
        assert_eq!(
            evs[2].key.as_deref(),
            Some(&br#"{"b":"z","a \"q\"":[1,2]}"#[..])
        );
        // Names written with escapes, values of other columns of every
        // JSON type skipped, a key column the row does not have as null.
        let evs = run(
            &mut f,
            &[
                r#"{"action":"B","xid":2,"lsn":"0/2","timestamp":"2026-12-03T05:08:36Z"}"#,
                r#"{"action":"U","relid":1,"schema":"s","table":"x","new":{"v":{"b":[1,{"b":2}],"s":"}\""},"\u0062":"\u00e9","w":null}}"#,
            ],
        );
        assert_eq!(
            evs[1].key.as_deref(),
            Some(&br#"{"b":"\u00e9","a \"q\"":null}"#[..])
        );
    }
}
