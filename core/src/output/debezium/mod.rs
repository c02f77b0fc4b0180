//! `format-version` `debezium`: Debezium's change events, written by
//! pubjson (pure code). Each output line is one Kafka record as Debezium's
//! PostgreSQL connector (3.6, `plugin.name=pgoutput`) and Kafka Connect's
//! `JsonConverter` would produce it:
//!
//! ```text
//! {"destination":TOPIC,"key":KEY,"value":VALUE}
//! ```
//!
//! TOPIC is `<topic.prefix>.<schema>.<table>` for a table's events,
//! `<topic.prefix>.transaction` for transaction metadata and
//! `<topic.prefix>.message` for logical decoding messages. KEY and VALUE
//! are the converter's JSON: `{"schema":...,"payload":...}` with
//! `schemas.enable` (the default), the payload alone without, `null` for a
//! null key (a table without a primary key, a truncate) or value (the
//! tombstone after a delete).
//!
//! | event | value |
//! |---|---|
//! | change | `before`, `after`, `source`, `transaction`, `op` (`c`, `u`, `d`, `r` for a backfilled row, `t`), `ts_ms`/`ts_us`/`ts_ns` |
//! | message | `op` `m`, `ts_ms`, `source`, `transaction`, `message` (`prefix`, `content` in base64) |
//! | BEGIN/END | `status`, `id`, `event_count`, `data_collections`, `ts_ms` (`provide.transaction.metadata`) |
//! | DDL event | on `<topic.prefix>`: `source`, `ts_ms`, `databaseName`, `schemaName`, `ddl`, `tableChanges` (`schema_change.rs`) |
//!
//! Values follow Debezium's type mapping (`column.rs`). Records share an
//! output message, one per line, as format 3's objects do (`batch-bytes`).
//! docs/debezium.md is the user's description, with every difference
//! from Debezium's own events.

pub mod column;
pub mod schema_change;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use crate::model::{
    BackfillMarker, CellValue, ChangeKind, ChangeSource, EncodeError, RelationMeta,
    ReplicaIdentity, TupleValues, TxnInfo, ValueReads,
};
use crate::options::{DebeziumOptions, Options, PrefixPatterns};
use crate::output::control::TwoPhaseEvent;
use crate::output::format::{
    shrink_after_transaction, ChangeContext, DdlTable, FormatEvents, OutputFormat, PreparedTxn,
    Sink, StreamedCommit, TypeName, TypeRendering,
};
use crate::protocol::ddl::DdlEvent;
use crate::text::json::{push_i64, push_json_string, push_u64};
use column::{push_field_schema, Kind, PG_EPOCH_MICROS};

/// `source.version`: pubjson's, not Debezium's.
pub const SOURCE_VERSION: &str = concat!("pubjson-", env!("CARGO_PKG_VERSION"));

/// The current time, microseconds since 1970-01-01 UTC: the events' own
/// `ts_ms`/`ts_us`/`ts_ns` (when the event was made, as Debezium's are).
pub type Clock = fn() -> i64;

fn system_clock() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A column as the events carry it.
struct ColumnPlan {
    index: usize,
    kind: Kind,
}

/// What the format renders once per relation.
#[derive(Default)]
pub struct DebeziumRender {
    /// Made for the published columns of the relation's rows (a
    /// publication's column list), made again if they change.
    table: RefCell<Option<Rc<TableRender>>>,
}

struct TableRender {
    /// Which of the relation's columns it was made for.
    visible: Vec<bool>,
    /// `{"destination":"<prefix>.<schema>.<table>","key":`.
    head: Vec<u8>,
    /// The columns in the events (unknown types may be left out).
    columns: Vec<ColumnPlan>,
    /// `,"name":` per column of `columns`.
    keys: Vec<Vec<u8>>,
    /// Indexes into `columns` of the primary key's columns; empty: no key.
    key_columns: Vec<usize>,
    /// `{"schema":KEY_SCHEMA,"payload":` (schemas on) or empty.
    key_open: Vec<u8>,
    /// `{"schema":ENVELOPE,"payload":` (schemas on) or empty.
    value_open: Vec<u8>,
    /// `"schema.table"` as a JSON string: the data collection.
    collection: Vec<u8>,
    /// `,"schema":"s","table":"t"` of the source block.
    source_table: Vec<u8>,
}

/// The topic-name rule of Debezium's naming strategy: every character
/// that Kafka does not allow in a topic name becomes `_` (one per
/// character: a UTF-8 sequence is one; in other encodings every byte
/// outside ASCII is taken for a character, right for the single-byte
/// ones).
fn topic_name(parts: &[&[u8]]) -> Vec<u8> {
    let mut name = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            name.push(b'.');
        }
        let mut in_sequence = false;
        for &b in part.iter() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                name.push(b);
                in_sequence = false;
            } else if !(in_sequence && (0x80..0xC0).contains(&b)) {
                name.push(b'_');
                in_sequence = b >= 0xC0 && std::str::from_utf8(part).is_ok();
            }
        }
    }
    name
}

fn push_topic_name(out: &mut Vec<u8>, parts: &[&[u8]]) {
    push_json_string(out, &topic_name(parts));
}

/// `<prefix>.<schema>.<table>.<suffix>` as a JSON string: Debezium names
/// a table's schemas after its topic.
fn push_schema_name(out: &mut Vec<u8>, prefix: &[u8], rel: &RelationMeta, suffix: &[u8]) {
    let mut name = topic_name(&[prefix, &rel.schema, &rel.table]);
    name.push(b'.');
    name.extend_from_slice(suffix);
    push_json_string(out, &name);
}

const SOURCE_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"},{"type":"string","optional":true,"field":"origin"},{"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}"#;

const BLOCK_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}"#;

const TXN_KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataKey","version":1}"#;

const TXN_VALUE_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"status"},{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"event_count"},{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"data_collection"},{"type":"int64","optional":false,"field":"event_count"}],"optional":true,"name":"event.collection","version":1},"optional":true,"field":"data_collections"},{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataValue","version":1}"#;

const MESSAGE_KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":true,"field":"prefix"}],"optional":false,"name":"io.debezium.connector.postgresql.MessageKey","version":1}"#;

fn message_value_schema() -> String {
    format!(
        r#"{{"type":"struct","fields":[{{"type":"string","optional":false,"field":"op"}},{{"type":"int64","optional":true,"field":"ts_ms"}},{SOURCE_SCHEMA},{BLOCK_SCHEMA},{{"type":"struct","fields":[{{"type":"string","optional":true,"field":"prefix"}},{{"type":"bytes","optional":true,"field":"content"}}],"optional":false,"name":"io.debezium.connector.postgresql.Message","version":1,"field":"message"}}],"optional":false,"name":"io.debezium.connector.postgresql.MessageValue","version":1}}"#
    )
}

impl TableRender {
    /// The rendering of `rel`'s columns that `visible` publishes (Debezium
    /// writes only those, in schemas and rows alike).
    fn new(rel: &RelationMeta, opts: &DebeziumOptions, visible: Vec<bool>) -> Self {
        let prefix = opts.topic_prefix.as_deref().unwrap_or_default();
        let mut head = b"{\"destination\":".to_vec();
        push_topic_name(&mut head, &[prefix, &rel.schema, &rel.table]);
        head.extend_from_slice(b",\"key\":");
        let columns: Vec<ColumnPlan> = rel
            .columns
            .iter()
            .enumerate()
            .map(|(index, c)| ColumnPlan {
                index,
                kind: column::kind_of(c),
            })
            .filter(|p| visible[p.index] && column::is_included(&p.kind, opts))
            .collect();
        let keys = columns
            .iter()
            .map(|p| {
                let mut key = b",".to_vec();
                key.extend_from_slice(&rel.columns[p.index].name_json);
                key.push(b':');
                key
            })
            .collect();
        // Debezium's key, in its order, among the columns of the events.
        let key_columns: Vec<usize> = schema_change::key_columns(rel)
            .into_iter()
            .filter_map(|c| columns.iter().position(|p| p.index == c))
            .collect();
        let field = |out: &mut Vec<u8>, p: &ColumnPlan| {
            let col = &rel.columns[p.index];
            push_field_schema(
                out,
                &p.kind,
                opts,
                schema_change::optional(col),
                &col.name_json,
            );
        };
        let mut key_open = Vec::new();
        let mut value_open = Vec::new();
        if opts.schemas_enable {
            key_open.extend_from_slice(b"{\"schema\":{\"type\":\"struct\",\"fields\":[");
            for (n, &i) in key_columns.iter().enumerate() {
                if n > 0 {
                    key_open.push(b',');
                }
                field(&mut key_open, &columns[i]);
            }
            key_open.extend_from_slice(b"],\"optional\":false,\"name\":");
            push_schema_name(&mut key_open, prefix, rel, b"Key");
            key_open.extend_from_slice(b"},\"payload\":");

            let mut row = b"{\"type\":\"struct\",\"fields\":[".to_vec();
            for (n, p) in columns.iter().enumerate() {
                if n > 0 {
                    row.push(b',');
                }
                field(&mut row, p);
            }
            row.extend_from_slice(b"],\"optional\":true,\"name\":");
            push_schema_name(&mut row, prefix, rel, b"Value");
            value_open.extend_from_slice(b"{\"schema\":{\"type\":\"struct\",\"fields\":[");
            for member in [&b"before"[..], b"after"] {
                value_open.extend_from_slice(&row);
                value_open.extend_from_slice(b",\"field\":\"");
                value_open.extend_from_slice(member);
                value_open.extend_from_slice(b"\"},");
            }
            value_open.extend_from_slice(SOURCE_SCHEMA.as_bytes());
            value_open.push(b',');
            value_open.extend_from_slice(BLOCK_SCHEMA.as_bytes());
            value_open.extend_from_slice(
                br#",{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}],"optional":false,"name":"#,
            );
            push_schema_name(&mut value_open, prefix, rel, b"Envelope");
            value_open.extend_from_slice(b",\"version\":2},\"payload\":");
        }
        let mut qualified = rel.schema.clone();
        qualified.push(b'.');
        qualified.extend_from_slice(&rel.table);
        let mut collection = Vec::new();
        push_json_string(&mut collection, &qualified);
        let mut source_table = b",\"schema\":".to_vec();
        source_table.extend_from_slice(&rel.schema_json);
        source_table.extend_from_slice(b",\"table\":");
        source_table.extend_from_slice(&rel.table_json);
        TableRender {
            visible,
            head,
            columns,
            keys,
            key_columns,
            key_open,
            value_open,
            collection,
            source_table,
        }
    }
}

/// The transaction being written.
struct OpenTxn {
    xid: u32,
    /// Commit time, microseconds since 2000-01-01 UTC.
    commit_time: i64,
    /// The BEGIN record is written (at the first event, whose LSN it
    /// carries, as Debezium's does).
    begun: bool,
    events: u64,
    /// Events per data collection (JSON string), in order of appearance.
    collections: Vec<(Vec<u8>, u64)>,
}

/// Where an event's `source` block comes from.
struct SourceFacts<'a> {
    txid: Option<u32>,
    /// Microseconds since 2000-01-01 UTC.
    time: i64,
    lsn: u64,
    /// `,"schema":..,"table":..` or empty names (a message).
    table: &'a [u8],
    /// A backfilled row: `snapshot` `incremental`, else `false`.
    incremental: bool,
}

/// `,"ts_ms":..,"ts_us":..,"ts_ns":..` of `micros` since 1970 (`all`:
/// else `ts_ms` alone). The three are one number: its digits are
/// formatted once, then cut (milliseconds) or extended (nanoseconds).
fn push_times(out: &mut Vec<u8>, micros: i64, all: bool) {
    out.extend_from_slice(b",\"ts_ms\":");
    if !(1000..=i64::MAX / 1000).contains(&micros) {
        push_i64(out, micros.div_euclid(1000));
        if all {
            out.extend_from_slice(b",\"ts_us\":");
            push_i64(out, micros);
            out.extend_from_slice(b",\"ts_ns\":");
            push_i64(out, micros.saturating_mul(1000));
        }
        return;
    }
    let start = out.len();
    push_u64(out, micros as u64);
    let mut digits = [0u8; 20];
    let len = out.len() - start;
    digits[..len].copy_from_slice(&out[start..]);
    out.truncate(out.len() - 3);
    if all {
        out.extend_from_slice(b",\"ts_us\":");
        out.extend_from_slice(&digits[..len]);
        out.extend_from_slice(b",\"ts_ns\":");
        out.extend_from_slice(&digits[..len]);
        out.extend_from_slice(b"000");
    }
}

/// What a `source` block holds but its event's own LSN and table, as bytes
/// ready to copy: the same for every event of a transaction.
#[derive(Default)]
struct SourceCache {
    /// What it was made for: transaction id, commit time, previous commit
    /// and whether `snapshot` is `incremental`; `None`: not made yet.
    made_for: Option<(Option<u32>, i64, Option<u64>, bool)>,
    /// `"source":{"version":...,"sequence":"[<previous>,\"`
    head: Vec<u8>,
    /// `\"]","ts_us":..,"ts_ns":..`
    times: Vec<u8>,
    /// `,"txId":..,"lsn":`
    txid: Vec<u8>,
}

/// The Debezium format for one decoding session's options.
pub struct FormatDebezium {
    opts: DebeziumOptions,
    batch_bytes: usize,
    clock: Clock,
    txn: Option<OpenTxn>,
    /// The position of the last commit (or non-transactional message)
    /// written: `source.sequence`'s first element.
    last_commit_lsn: Option<u64>,
    /// Its time (a non-transactional message's `source.ts_ms`).
    last_commit_time: i64,
    /// The `source` block's bytes that stay the same from one event to the
    /// next (made again when what they show changes).
    source_cache: RefCell<SourceCache>,
    /// `,"ts_ms":..,"ts_us":..,"ts_ns":..` of the change events in the
    /// batch being filled: one clock reading per output message, taken
    /// when its first change is written (reading and formatting the time
    /// per event was 4% of the instructions of a peek of the benchmark's
    /// mixed workload).
    batch_time: Vec<u8>,
    /// `"<prefix>.transaction"`, `"<prefix>.message"` as JSON strings.
    txn_topic: Vec<u8>,
    message_topic: Vec<u8>,
    message_schema: String,
    /// `"<prefix>"` as a JSON string: the schema change topic.
    schema_change_topic: Vec<u8>,
    schema_change_schema: String,
    /// Scratch buffers for a change's rendered key.
    new_key: Vec<u8>,
    old_key: Vec<u8>,
    /// `message.prefix.include.list` (true) or `exclude.list` (false).
    message_filter: Option<(bool, PrefixPatterns)>,
}

impl FormatDebezium {
    pub fn new(opts: &Options) -> Self {
        Self::with_clock(opts, system_clock)
    }

    pub fn with_clock(opts: &Options, clock: Clock) -> Self {
        let dbz = opts.debezium.clone();
        let prefix = dbz.topic_prefix.clone().unwrap_or_default();
        let mut txn_topic = Vec::new();
        push_topic_name(&mut txn_topic, &[&prefix, b"transaction"]);
        let mut message_topic = Vec::new();
        push_topic_name(&mut message_topic, &[&prefix, b"message"]);
        let mut schema_change_topic = Vec::new();
        push_topic_name(&mut schema_change_topic, &[&prefix]);
        FormatDebezium {
            batch_bytes: opts.batching.bytes(),
            clock,
            txn: None,
            last_commit_lsn: None,
            last_commit_time: 0,
            source_cache: RefCell::new(SourceCache::default()),
            batch_time: Vec::new(),
            txn_topic,
            message_topic,
            message_schema: message_value_schema(),
            schema_change_topic,
            schema_change_schema: schema_change::value_schema(SOURCE_SCHEMA),
            new_key: Vec::new(),
            old_key: Vec::new(),
            // Checked when the options were parsed.
            message_filter: match (
                &dbz.message_prefix_include_list,
                &dbz.message_prefix_exclude_list,
            ) {
                (Some(list), _) => PrefixPatterns::parse(list).ok().map(|p| (true, p)),
                (None, Some(list)) => PrefixPatterns::parse(list).ok().map(|p| (false, p)),
                (None, None) => None,
            },
            opts: dbz,
        }
    }

    /// A record is complete in the buffer: handed over at a boundary or
    /// when the batch is full, else the next one goes on the next line.
    fn end_record(&self, sink: &mut dyn Sink, boundary: bool) {
        if boundary || sink.buf().len() >= self.batch_bytes {
            sink.write(true);
        } else {
            sink.buf().push(b'\n');
        }
    }

    /// `,"ts_ms":..` of now, as in a message's value.
    fn push_now_ms(&self, out: &mut Vec<u8>) {
        push_times(out, (self.clock)(), false);
    }

    /// `"source":{...}`: the cached bytes of the transaction, the event's
    /// LSN (formatted once, written twice) and table. Returns where the
    /// LSN's digits are in `out`, for the `transaction` block's id.
    fn push_source(&self, out: &mut Vec<u8>, facts: &SourceFacts<'_>) -> Range<usize> {
        let mut cache = self.source_cache.borrow_mut();
        let key = (
            facts.txid,
            facts.time,
            self.last_commit_lsn,
            facts.incremental,
        );
        if cache.made_for != Some(key) {
            self.make_source_cache(&mut cache, facts);
            cache.made_for = Some(key);
        }
        out.extend_from_slice(&cache.head);
        let start = out.len();
        push_u64(out, facts.lsn);
        let lsn = start..out.len();
        out.extend_from_slice(&cache.times);
        out.extend_from_slice(facts.table);
        out.extend_from_slice(&cache.txid);
        out.extend_from_within(lsn.clone());
        out.extend_from_slice(b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null}");
        lsn
    }

    fn make_source_cache(&self, cache: &mut SourceCache, facts: &SourceFacts<'_>) {
        let unix = facts.time.saturating_add(PG_EPOCH_MICROS);
        let head = &mut cache.head;
        head.clear();
        head.extend_from_slice(b"\"source\":{\"version\":\"");
        head.extend_from_slice(SOURCE_VERSION.as_bytes());
        head.extend_from_slice(b"\",\"connector\":\"postgresql\",\"name\":");
        push_json_string(head, self.opts.topic_prefix.as_deref().unwrap_or_default());
        head.extend_from_slice(b",\"ts_ms\":");
        push_i64(head, unix.div_euclid(1000));
        head.extend_from_slice(b",\"snapshot\":\"");
        head.extend_from_slice(if facts.incremental {
            b"incremental"
        } else {
            b"false"
        });
        head.extend_from_slice(b"\",\"db\":");
        push_json_string(head, &self.opts.database);
        head.extend_from_slice(b",\"sequence\":\"[");
        match self.last_commit_lsn {
            Some(lsn) => {
                head.extend_from_slice(b"\\\"");
                push_u64(head, lsn);
                head.extend_from_slice(b"\\\"");
            }
            None => head.extend_from_slice(b"null"),
        }
        head.extend_from_slice(b",\\\"");
        let times = &mut cache.times;
        times.clear();
        times.extend_from_slice(b"\\\"]\",\"ts_us\":");
        push_i64(times, unix);
        times.extend_from_slice(b",\"ts_ns\":");
        push_i64(times, unix.saturating_mul(1000));
        let txid = &mut cache.txid;
        txid.clear();
        txid.extend_from_slice(b",\"txId\":");
        match facts.txid {
            Some(xid) => push_u64(txid, xid as u64),
            None => txid.extend_from_slice(b"null"),
        }
        txid.extend_from_slice(b",\"lsn\":");
    }

    /// `"xid:lsn"` as a JSON string: Debezium's transaction id (the LSN
    /// is the event's own, written by `push_lsn`).
    fn push_txn_id(out: &mut Vec<u8>, xid: u32, push_lsn: impl FnOnce(&mut Vec<u8>)) {
        out.push(b'"');
        push_u64(out, xid as u64);
        out.push(b':');
        push_lsn(out);
        out.push(b'"');
    }

    /// A BEGIN or END record (`provide.transaction.metadata`).
    fn transaction_record(&self, out: &mut Vec<u8>, txn: &OpenTxn, lsn: u64, end: bool) {
        out.extend_from_slice(b"{\"destination\":");
        out.extend_from_slice(&self.txn_topic);
        out.extend_from_slice(b",\"key\":");
        let schemas = self.opts.schemas_enable;
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(TXN_KEY_SCHEMA.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(b"{\"id\":");
        Self::push_txn_id(out, txn.xid, |out| push_u64(out, lsn));
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.extend_from_slice(b",\"value\":");
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(TXN_VALUE_SCHEMA.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(if end {
            b"{\"status\":\"END\",\"id\":"
        } else {
            b"{\"status\":\"BEGIN\",\"id\":"
        });
        Self::push_txn_id(out, txn.xid, |out| push_u64(out, lsn));
        if end {
            out.extend_from_slice(b",\"event_count\":");
            push_u64(out, txn.events);
            out.extend_from_slice(b",\"data_collections\":[");
            for (n, (collection, count)) in txn.collections.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"data_collection\":");
                out.extend_from_slice(collection);
                out.extend_from_slice(b",\"event_count\":");
                push_u64(out, *count);
                out.push(b'}');
            }
            out.push(b']');
        } else {
            out.extend_from_slice(b",\"event_count\":null,\"data_collections\":null");
        }
        out.extend_from_slice(b",\"ts_ms\":");
        push_i64(
            out,
            txn.commit_time
                .saturating_add(PG_EPOCH_MICROS)
                .div_euclid(1000),
        );
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.push(b'}');
    }

    /// An event Debezium leaves out (`skipped.operations`): it still opens
    /// the transaction (its BEGIN record), uncounted, as Debezium's
    /// transaction monitor sees the event before it is skipped.
    fn skipped_event(&mut self, sink: &mut dyn Sink, lsn: u64) {
        let Some(mut txn) = self.txn.take() else {
            return;
        };
        if self.opts.provide_transaction_metadata && !txn.begun {
            self.transaction_record(sink.buf(), &txn, lsn, false);
            self.end_record(sink, false);
        }
        txn.begun = true;
        self.txn = Some(txn);
    }

    /// Counts an event of `collection` in the open transaction (its BEGIN
    /// written first, if not yet) and returns its `"transaction"` block's
    /// facts: `(xid, total_order, data_collection_order)`, `None` for
    /// `null` (no transaction metadata, or no transaction).
    fn count_event(
        &mut self,
        sink: &mut dyn Sink,
        collection: &[u8],
        lsn: u64,
    ) -> Option<(u32, u64, u64)> {
        let metadata = self.opts.provide_transaction_metadata;
        let txn = self.txn.as_mut()?;
        if metadata && !txn.begun {
            let txn = self.txn.take()?;
            self.transaction_record(sink.buf(), &txn, lsn, false);
            self.txn = Some(txn);
            self.end_record(sink, false);
        }
        let txn = self.txn.as_mut()?;
        txn.begun = true;
        txn.events += 1;
        let order = match txn.collections.iter_mut().find(|(c, _)| c == collection) {
            Some((_, count)) => {
                *count += 1;
                *count
            }
            None => {
                txn.collections.push((collection.to_vec(), 1));
                1
            }
        };
        metadata.then_some((txn.xid, txn.events, order))
    }

    /// `"transaction":...` of an event ([`Self::count_event`]) whose
    /// LSN's digits are at `lsn` in `out` (written by [`Self::push_source`]).
    fn push_block(out: &mut Vec<u8>, block: Option<(u32, u64, u64)>, lsn: Range<usize>) {
        match block {
            Some((xid, total, order)) => {
                out.extend_from_slice(b"\"transaction\":{\"id\":");
                Self::push_txn_id(out, xid, |out| out.extend_from_within(lsn));
                out.extend_from_slice(b",\"total_order\":");
                push_u64(out, total);
                out.extend_from_slice(b",\"data_collection_order\":");
                push_u64(out, order);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"\"transaction\":null"),
        }
    }

    /// Writes a table's row as a JSON object: every column of the plan,
    /// an unchanged TOAST value taken from `complete_from` (the old row
    /// under REPLICA IDENTITY FULL) or written as the placeholder.
    fn push_row(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        table: &TableRender,
        row: &dyn TupleValues,
        complete_from: Option<&dyn TupleValues>,
        only: Option<&[usize]>,
    ) {
        out.push(b'{');
        let mut first = true;
        let count = only.map_or(table.columns.len(), <[usize]>::len);
        for n in 0..count {
            let i = only.map_or(n, |indexes| indexes[n]);
            let plan = &table.columns[i];
            let col = &rel.columns[plan.index];
            // One call per column: whether it is published, null, an
            // unchanged TOAST value, and its value.
            let cell = match row.read(col) {
                CellValue::Hidden => continue,
                CellValue::UnchangedToast => match complete_from.map(|old| old.read(col)) {
                    Some(CellValue::Value(v)) => (CellValue::Value(v), complete_from),
                    _ => (CellValue::UnchangedToast, None),
                },
                cell => (cell, Some(row)),
            };
            // The first column's without its comma.
            out.extend_from_slice(&table.keys[i][first as usize..]);
            first = false;
            match cell {
                (CellValue::Value(value), Some(source)) => {
                    let text = || source.text(col).to_vec();
                    if !column::push_value(out, &plan.kind, value, &text, &self.opts) {
                        out.extend_from_slice(b"null");
                    }
                }
                (CellValue::UnchangedToast, _) => {
                    column::push_unavailable(out, &plan.kind, &self.opts)
                }
                _ => out.extend_from_slice(b"null"),
            }
        }
        out.push(b'}');
    }

    /// The key's payload (`{"id":1}`) of `row`, empty for a table without
    /// a primary key.
    fn push_key_payload(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        table: &TableRender,
        row: &dyn TupleValues,
    ) {
        if !table.key_columns.is_empty() {
            self.push_row(out, rel, table, row, None, Some(&table.key_columns));
        }
    }

    /// `{"destination":...,"key":KEY` of a table's record: `null` for a
    /// table without a key, else the key payload `key` (with schemas, in
    /// its `{"schema":...,"payload":` envelope).
    #[inline]
    fn push_record_head(out: &mut Vec<u8>, table: &TableRender, key: &[u8], schemas: bool) {
        out.extend_from_slice(&table.head);
        if key.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            out.extend_from_slice(&table.key_open);
            out.extend_from_slice(key);
            if schemas {
                out.push(b'}');
            }
        }
    }

    /// One change record of a table (and its tombstone after a delete).
    #[allow(clippy::too_many_arguments)]
    fn change_record(
        &mut self,
        sink: &mut dyn Sink,
        rel: &RelationMeta,
        table: &TableRender,
        op: u8,
        key: &[u8],
        before: Option<(&dyn TupleValues, Option<&dyn TupleValues>)>,
        after: Option<(&dyn TupleValues, Option<&dyn TupleValues>)>,
        facts: SourceFacts<'_>,
    ) {
        if sink.buf().is_empty() || self.batch_time.is_empty() {
            self.batch_time.clear();
            push_times(&mut self.batch_time, (self.clock)(), true);
        }
        let block = self.count_event(sink, &table.collection, facts.lsn);
        let schemas = self.opts.schemas_enable;
        let out = sink.buf();
        Self::push_record_head(out, table, key, schemas);
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&table.value_open);
        out.extend_from_slice(b"{\"before\":");
        match before {
            Some((row, complete)) => self.push_row(out, rel, table, row, complete, None),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"after\":");
        match after {
            Some((row, complete)) => self.push_row(out, rel, table, row, complete, None),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b',');
        let lsn = self.push_source(out, &facts);
        out.push(b',');
        Self::push_block(out, block, lsn);
        out.extend_from_slice(b",\"op\":\"");
        out.push(op);
        out.push(b'"');
        out.extend_from_slice(&self.batch_time);
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.push(b'}');
        self.end_record(sink, false);
        if op == b'd' && self.opts.tombstones_on_delete {
            let out = sink.buf();
            Self::push_record_head(out, table, key, schemas);
            out.extend_from_slice(b",\"value\":null}");
            self.end_record(sink, false);
        }
    }
}

impl OutputFormat for FormatDebezium {
    fn type_rendering(&self) -> TypeRendering {
        TypeRendering {
            name: TypeName::WithTypmod,
            classify_domain_base: false,
            signed_oid: false,
            reads: ValueReads::Typed,
            column_details: true,
        }
    }

    fn events(&self) -> FormatEvents {
        FormatEvents {
            // Also when skipped: a skipped truncate still opens its
            // transaction's BEGIN record (see `skipped_event`).
            truncate: true,
            // Backfilled rows are `op` `r` (the markers write nothing).
            backfill: true,
            // As schema change events, the shape of Debezium's other
            // connectors (its PostgreSQL connector has none); without
            // them a capture message is an ordinary message, as in
            // formats 1 and 2.
            ddl: self.opts.include_schema_changes,
        }
    }

    fn wants_database_name(&self) -> bool {
        self.opts.database.is_empty()
    }

    fn database_name(&mut self, name: &[u8]) {
        self.opts.database = name.to_vec();
    }

    fn begin(&mut self, _sink: &mut dyn Sink, txn: &TxnInfo, _first_lsn: u64) {
        // Written with the first event (Debezium's BEGIN carries its LSN).
        self.txn = Some(OpenTxn {
            xid: txn.xid,
            commit_time: txn.commit_time,
            begun: false,
            events: 0,
            collections: Vec::new(),
        });
    }

    fn commit(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, _commit_lsn: u64, _changes: u64) {
        if let Some(open) = self.txn.take() {
            if open.begun && self.opts.provide_transaction_metadata {
                self.transaction_record(sink.buf(), &open, txn.end_lsn, true);
                self.end_record(sink, false);
            }
        }
        self.last_commit_lsn = Some(txn.end_lsn);
        self.last_commit_time = txn.commit_time;
        // Whatever the batch holds goes now: the consumer waits for it.
        if !sink.buf().is_empty() {
            if sink.buf().last() == Some(&b'\n') {
                sink.buf().pop();
            }
            sink.write(true);
        }
        shrink_after_transaction(sink.buf());
    }

    fn change(
        &mut self,
        sink: &mut dyn Sink,
        c: &ChangeContext<'_>,
    ) -> Result<Option<String>, EncodeError> {
        let render = c.render.get::<DebeziumRender>();
        let rel = c.rel;
        let Some(row) = c.new.or(c.old) else {
            return Ok(None);
        };
        let mut cached = render.table.borrow_mut();
        let current = matches!(&*cached, Some(t)
            if rel.columns.iter().zip(&t.visible).all(|(col, &shown)| row.is_visible(col) == shown));
        if !current {
            let visible = rel.columns.iter().map(|col| row.is_visible(col)).collect();
            *cached = Some(Rc::new(TableRender::new(rel, &self.opts, visible)));
        }
        let Some(table) = cached.clone() else {
            return Ok(None);
        };
        drop(cached);
        let table = &*table;
        let backfill = c.header.source == ChangeSource::Backfill;
        let skipped = self.opts.skipped_operations;
        let facts = || SourceFacts {
            txid: Some(c.txn.xid),
            time: c.txn.commit_time,
            lsn: c.lsn,
            table: &table.source_table,
            incremental: backfill,
        };
        let old_complete = rel.identity == ReplicaIdentity::Full;
        let mut new_key = std::mem::take(&mut self.new_key);
        let mut old_key = std::mem::take(&mut self.old_key);
        new_key.clear();
        old_key.clear();
        match (c.header.kind, c.new, c.old) {
            (ChangeKind::Insert, Some(new), _) => {
                let op = if backfill { b'r' } else { b'c' };
                if backfill || !skipped.create {
                    self.push_key_payload(&mut new_key, rel, table, new);
                    let after = Some((new, None));
                    self.change_record(sink, rel, table, op, &new_key, None, after, facts());
                } else {
                    self.skipped_event(sink, c.lsn);
                }
            }
            (ChangeKind::Update, Some(new), old) => {
                self.push_key_payload(&mut new_key, rel, table, new);
                if let Some(old) = old {
                    self.push_key_payload(&mut old_key, rel, table, old);
                }
                let complete = old.filter(|_| old_complete);
                let after = Some((new, complete));
                match old {
                    Some(old) if !table.key_columns.is_empty() && old_key != new_key => {
                        // The key changed: a delete (and its tombstone) of
                        // the old key, then a create, as Debezium writes it.
                        if skipped.delete {
                            self.skipped_event(sink, c.lsn);
                        } else {
                            let before = Some((old, None));
                            self.change_record(
                                sink,
                                rel,
                                table,
                                b'd',
                                &old_key,
                                before,
                                None,
                                facts(),
                            );
                        }
                        if skipped.create {
                            self.skipped_event(sink, c.lsn);
                        } else {
                            self.change_record(
                                sink,
                                rel,
                                table,
                                b'c',
                                &new_key,
                                None,
                                after,
                                facts(),
                            );
                        }
                    }
                    _ if skipped.update => self.skipped_event(sink, c.lsn),
                    _ => {
                        let before = complete.map(|old| (old, None));
                        self.change_record(
                            sink,
                            rel,
                            table,
                            b'u',
                            &new_key,
                            before,
                            after,
                            facts(),
                        );
                    }
                }
            }
            (ChangeKind::Delete, _, Some(old)) => {
                if skipped.delete {
                    self.skipped_event(sink, c.lsn);
                } else {
                    self.push_key_payload(&mut old_key, rel, table, old);
                    let before = Some((old, None));
                    self.change_record(sink, rel, table, b'd', &old_key, before, None, facts());
                }
            }
            _ => {}
        }
        self.new_key = new_key;
        self.old_key = old_key;
        Ok(None)
    }

    fn truncate(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        _stream_xid: Option<u32>,
        lsn: u64,
        rel: &RelationMeta,
    ) {
        if self.opts.skipped_operations.truncate {
            self.skipped_event(sink, lsn);
            return;
        }
        let table = TableRender::new(rel, &self.opts, vec![true; rel.columns.len()]);
        let facts = SourceFacts {
            txid: Some(txn.xid),
            time: txn.commit_time,
            lsn,
            table: &table.source_table,
            incremental: false,
        };
        self.change_record(sink, rel, &table, b't', b"", None, None, facts);
    }

    fn message(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        transactional: bool,
        _stream_xid: Option<u32>,
        lsn: u64,
        prefix: &[u8],
        content: &[u8],
    ) {
        if let Some((include, patterns)) = &self.message_filter {
            if patterns.matches(prefix) != *include {
                // Left out, as Debezium's filter does after its transaction
                // monitor has seen it.
                if transactional {
                    self.skipped_event(sink, lsn);
                }
                return;
            }
        }
        if !transactional {
            // Debezium takes a message outside a transaction as one that
            // commits at its own position, with the last commit's time.
            self.last_commit_lsn = Some(lsn);
        }
        let collection = self.message_topic.clone();
        let block = if transactional {
            self.count_event(sink, &collection, lsn)
        } else {
            None
        };
        let facts = SourceFacts {
            txid: transactional.then_some(txn.xid),
            time: if transactional {
                txn.commit_time
            } else {
                self.last_commit_time
            },
            lsn,
            table: b",\"schema\":\"\",\"table\":\"\"",
            incremental: false,
        };
        let schemas = self.opts.schemas_enable;
        let out = sink.buf();
        out.extend_from_slice(b"{\"destination\":");
        out.extend_from_slice(&self.message_topic);
        out.extend_from_slice(b",\"key\":");
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(MESSAGE_KEY_SCHEMA.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(b"{\"prefix\":");
        push_json_string(out, prefix);
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.extend_from_slice(b",\"value\":");
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(self.message_schema.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(b"{\"op\":\"m\"");
        self.push_now_ms(out);
        out.push(b',');
        let lsn = self.push_source(out, &facts);
        out.push(b',');
        Self::push_block(out, block, lsn);
        out.extend_from_slice(b",\"message\":{\"prefix\":");
        push_json_string(out, prefix);
        out.extend_from_slice(b",\"content\":");
        column::push_bytes(out, content);
        out.extend_from_slice(b"}}");
        if schemas {
            out.push(b'}');
        }
        out.push(b'}');
        self.end_record(sink, !transactional);
    }

    /// A schema change event on the `<topic.prefix>` topic. It belongs to
    /// its transaction (its `source` has the transaction's id and commit
    /// time; with transaction metadata it opens the `BEGIN` record) but is
    /// not one of its data events: Debezium counts only those
    /// (`event_count`), and the value has no `transaction` block.
    fn ddl(
        &mut self,
        sink: &mut dyn Sink,
        _stream_xid: Option<u32>,
        lsn: u64,
        event: &DdlEvent,
        tables: &[DdlTable<'_>],
    ) {
        self.skipped_event(sink, lsn);
        let changes = schema_change::table_changes(event, tables);
        let (schema, table_names) = schema_change::names(event, &changes);
        let mut source_table = b",\"schema\":".to_vec();
        push_json_string(&mut source_table, schema.as_deref().unwrap_or_default());
        source_table.extend_from_slice(b",\"table\":");
        push_json_string(&mut source_table, &table_names);
        let (txid, time) = match &self.txn {
            Some(txn) => (Some(txn.xid), txn.commit_time),
            None => (None, self.last_commit_time),
        };
        let facts = SourceFacts {
            txid,
            time,
            lsn,
            table: &source_table,
            incremental: false,
        };
        let schemas = self.opts.schemas_enable;
        let out = sink.buf();
        out.extend_from_slice(b"{\"destination\":");
        out.extend_from_slice(&self.schema_change_topic);
        out.extend_from_slice(b",\"key\":");
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(schema_change::KEY_SCHEMA.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.extend_from_slice(b"{\"databaseName\":");
        push_json_string(out, &self.opts.database);
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.extend_from_slice(b",\"value\":");
        if schemas {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(self.schema_change_schema.as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        out.push(b'{');
        self.push_source(out, &facts);
        out.extend_from_slice(b",\"ts_ms\":");
        push_i64(out, (self.clock)().div_euclid(1000));
        out.extend_from_slice(b",\"databaseName\":");
        push_json_string(out, &self.opts.database);
        out.extend_from_slice(b",\"schemaName\":");
        match &schema {
            Some(schema) => push_json_string(out, schema),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"ddl\":");
        match &event.command {
            Some(command) => push_json_string(out, command),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"tableChanges\":");
        schema_change::push_table_changes(out, &changes);
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        out.push(b'}');
        self.end_record(sink, false);
    }

    /// Debezium marks an incremental snapshot's window in its signalling
    /// table, not in the events: nothing is written.
    fn backfill_marker(
        &mut self,
        _sink: &mut dyn Sink,
        _stream_xid: Option<u32>,
        _rel: &RelationMeta,
        _marker: BackfillMarker,
    ) {
    }

    // Streaming and two-phase decoding are refused with this format
    // (options.rs): a streamed or prepared transaction could still abort,
    // and Debezium's events cannot take a change back.
    fn stream_start(&mut self, _sink: &mut dyn Sink, _xid: u32, _first: bool) {}

    fn stream_stop(&mut self, _sink: &mut dyn Sink, _xid: u32) {}

    fn stream_abort(&mut self, _sink: &mut dyn Sink, _xid: u32, _subxid: u32, _lsn: u64) {}

    fn stream_commit(&mut self, _sink: &mut dyn Sink, _commit: &StreamedCommit) {}

    fn two_phase(
        &mut self,
        _sink: &mut dyn Sink,
        _event: TwoPhaseEvent,
        _txn: &PreparedTxn,
        _lsn: u64,
    ) {
    }
}
