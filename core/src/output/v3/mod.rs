//! Format 3: pubjson's own JSON format (pure code). One object per output
//! message; rows are JSON objects keyed by column name with typed values
//! (`value.rs`); `R` objects describe a relation before its first change
//! in a decoding session and again whenever what they describe changed;
//! unchanged TOAST values are listed, not dropped; `C` counts the change
//! objects of its transaction. docs/format3.md is the user's description.
//!
//! | action | fields |
//! |---|---|
//! | `B` | `xid`, `lsn` (commit), `timestamp` [, `origin`] |
//! | `C` | `xid`, `lsn`, `nextlsn`, `timestamp`, `changes` [, `streamed`] |
//! | `R` | `relid`, `schema`, `table`, `identity`, `columns` (`name`, `attnum`, `type`, `typeoid` [, `basetype`, `basetypeoid`], `key`, `nullable`) |
//! | `I`/`U`/`D` | [`xid` in a streamed block,] [`transformedfrom`,] `relid`, `schema`, `table`, `new`, `old`, `unchanged`, `changed` |
//! | `F` | as `I` (a backfilled row: `pubjson.backfill()`) |
//! | `FS`/`FE` | [`xid`,] `relid`, `schema`, `table`; `FE` adds `rows` (a relation's backfill starts, ends) |
//! | `T` | [`xid`,] `relid`, `schema`, `table` |
//! | `M` | [`xid`,] `transactional`, `lsn`, `prefix`, `content` |
//! | `DDL` | see `ddl.rs` (a DDL capture message) |
//! | `S`/`E`/`A` | as in formats 1 and 2 |
//! | `P`/`CP`/`RP` | as in formats 1 and 2, `timestamp` in ISO 8601; `P` adds `changes` |

pub mod ddl;
pub mod value;

#[cfg(test)]
mod tests;

use std::cell::{Cell as StdCell, OnceCell, RefCell};
use std::collections::HashMap;

use crate::model::{
    BackfillMarker, Cell, ChangeKind, ChangeSource, ColumnMeta, EncodeError, RelationMeta,
    ReplicaIdentity, ServerEncoding, TupleValues, TxnInfo, ValueReads,
};
use crate::options::Options;
use crate::output::control::{self, TwoPhaseEvent};
use crate::output::datetime::push_iso8601_timestamp;
use crate::output::format::{
    shrink_after_transaction, ChangeContext, DdlTable, FormatEvents, OutputFormat, PreparedTxn,
    Sink, StreamedCommit, TypeName, TypeRendering,
};
use crate::protocol::ddl::DdlEvent;
use crate::text::json::{push_i64, push_json_string, push_lsn, push_u64};

/// What format 3 renders once per relation (see [`RelationRender`]).
#[derive(Default)]
pub struct V3Render {
    /// `"name":` per column, in column order.
    keys: OnceCell<Vec<Vec<u8>>>,
    /// `,"relid":N,"schema":"s","table":"t"`.
    head: OnceCell<Vec<u8>>,
    /// The R object for the published columns it was made for.
    description: RefCell<Option<(Vec<bool>, Vec<u8>)>>,
    /// The session's consumer has this relation's current R object, as of
    /// the format's `epoch` this holds (0: never).
    announced: StdCell<u64>,
}

/// Format 3 for one decoding session's options.
pub struct Format3 {
    /// Objects share an output message, one per line, until it holds this
    /// many bytes; 0: one object per message.
    batch_bytes: usize,
    include_origin: bool,
    numbers_as_strings: bool,
    /// The last R object written per relation OID in this session.
    described: HashMap<u32, Vec<u8>>,
    /// Bumped when an interrupted item may have taken back an R object:
    /// every relation is then described again before its next change.
    epoch: u64,
    /// Scratch: published columns of the current change.
    visible: Vec<bool>,
    /// Scratch: where each column's value is in the output (new, old),
    /// for an UPDATE whose old row is complete; empty otherwise.
    spans: Vec<(Span, Span)>,
    /// Scratch: the R object of the current change.
    r_object: Vec<u8>,
}

type Span = Option<(usize, usize)>;

impl Format3 {
    pub fn new(opts: &Options) -> Self {
        Format3 {
            batch_bytes: opts.batching.bytes(),
            include_origin: opts.include_origin,
            numbers_as_strings: opts.numeric_data_types_as_string,
            described: HashMap::new(),
            epoch: 1,
            visible: Vec::new(),
            spans: Vec::new(),
            r_object: Vec::new(),
        }
    }
}

/// What follows an object that is complete in the sink's buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ObjectEnd {
    /// More of the same transaction or streamed block follows: the object
    /// may wait in the batch.
    Within,
    /// The consumer would wait for what comes next (a commit, the end of a
    /// streamed block, a prepare, a message outside a transaction): the
    /// batch is handed over now, so batching never delays output.
    Boundary,
}

impl Format3 {
    /// Hands the buffer over as one message when `end` is a boundary or the
    /// batch is full; otherwise starts the object's line. JSON holds no raw
    /// newline, so a message is one object per line, never a split object.
    fn end_object(&self, sink: &mut dyn Sink, end: ObjectEnd) {
        if end == ObjectEnd::Boundary || sink.buf().len() >= self.batch_bytes {
            sink.write(true);
        } else {
            sink.buf().push(b'\n');
        }
    }
}

fn field_lsn(out: &mut Vec<u8>, key: &[u8], lsn: u64) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    if lsn == 0 {
        out.extend_from_slice(b"null");
    } else {
        out.push(b'"');
        push_lsn(out, lsn);
        out.push(b'"');
    }
}

/// `,"timestamp":"2026-12-02T11:12:50.120197Z"`.
fn field_timestamp(out: &mut Vec<u8>, time: i64) {
    out.extend_from_slice(b",\"timestamp\":\"");
    // Commit times are always in range; an impossible one is left empty.
    push_iso8601_timestamp(out, time, true);
    out.push(b'"');
}

fn field_u64(out: &mut Vec<u8>, key: &[u8], v: u64) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    push_u64(out, v);
}

fn letter(kind: ChangeKind) -> u8 {
    match kind {
        ChangeKind::Insert => b'I',
        ChangeKind::Update => b'U',
        ChangeKind::Delete => b'D',
    }
}

fn identity_name(identity: ReplicaIdentity) -> &'static [u8] {
    match identity {
        ReplicaIdentity::Default => b"default",
        ReplicaIdentity::Nothing => b"nothing",
        ReplicaIdentity::Full => b"full",
        ReplicaIdentity::Index => b"index",
    }
}

/// `,"relid":N,"schema":"s","table":"t"`.
fn relation_head(rel: &RelationMeta) -> Vec<u8> {
    let mut head = Vec::new();
    field_u64(&mut head, b"relid", rel.relid as u64);
    head.extend_from_slice(b",\"schema\":");
    head.extend_from_slice(&rel.schema_json);
    head.extend_from_slice(b",\"table\":");
    head.extend_from_slice(&rel.table_json);
    head
}

/// Whether a column belongs to the replica identity (pgoutput's key flag:
/// every column under FULL).
fn is_key(rel: &RelationMeta, col: &ColumnMeta) -> bool {
    match rel.identity {
        ReplicaIdentity::Full => true,
        ReplicaIdentity::Nothing => false,
        ReplicaIdentity::Default | ReplicaIdentity::Index => col.in_identity_key,
    }
}

/// The R object describing `rel`'s columns that `visible` publishes.
pub fn relation_object(out: &mut Vec<u8>, rel: &RelationMeta, visible: &[bool]) {
    out.extend_from_slice(b"{\"action\":\"R\"");
    out.extend_from_slice(&relation_head(rel));
    out.extend_from_slice(b",\"identity\":\"");
    out.extend_from_slice(identity_name(rel.identity));
    out.extend_from_slice(b"\",\"columns\":[");
    let mut first = true;
    for (col, _) in rel.columns.iter().zip(visible).filter(|(_, v)| **v) {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(b"{\"name\":");
        out.extend_from_slice(&col.name_json);
        out.extend_from_slice(b",\"attnum\":");
        push_i64(out, col.attnum as i64);
        out.extend_from_slice(b",\"type\":");
        out.extend_from_slice(&col.type_json);
        out.extend_from_slice(b",\"typeoid\":");
        out.extend_from_slice(&col.type_oid_text);
        if let Some((base_json, base_oid)) = &col.domain_base {
            out.extend_from_slice(b",\"basetype\":");
            out.extend_from_slice(base_json);
            out.extend_from_slice(b",\"basetypeoid\":");
            push_u64(out, *base_oid as u64);
        }
        out.extend_from_slice(if is_key(rel, col) {
            b",\"key\":true"
        } else {
            b",\"key\":false"
        });
        out.extend_from_slice(if col.not_null {
            b",\"nullable\":false}"
        } else {
            b",\"nullable\":true}"
        });
    }
    out.extend_from_slice(b"]}");
}

/// Where a row object's value comes from.
#[derive(Clone, Copy)]
enum Source {
    Null,
    Row,
    /// An unchanged TOAST value, from the complete old row.
    OldRow,
}

/// Which columns a row object holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RowPart {
    /// Every published column (`new`; `old` under REPLICA IDENTITY FULL).
    Whole,
    /// The replica identity's columns (`old` otherwise).
    Identity,
}

fn in_part(rel: &RelationMeta, col: &ColumnMeta, part: RowPart) -> bool {
    match part {
        RowPart::Whole => true,
        // Without an identity index every column the old tuple has.
        RowPart::Identity => !rel.has_identity_index || col.in_identity_key,
    }
}

impl Format3 {
    /// Writes the R object first if the consumer does not have the
    /// relation's current description.
    fn announce(
        &mut self,
        sink: &mut dyn Sink,
        rel: &RelationMeta,
        render: &V3Render,
        row: &dyn TupleValues,
    ) {
        let mut description = render.description.borrow_mut();
        // Asked per column without collecting: nearly always the same.
        let current = matches!(&*description, Some((mask, _))
            if mask.len() == rel.columns.len()
                && rel.columns.iter().zip(mask).all(|(c, &shown)| row.is_visible(c) == shown));
        if !current {
            self.visible.clear();
            self.visible
                .extend(rel.columns.iter().map(|c| row.is_visible(c)));
            self.r_object.clear();
            relation_object(&mut self.r_object, rel, &self.visible);
            *description = Some((self.visible.clone(), std::mem::take(&mut self.r_object)));
            render.announced.set(0);
        }
        if render.announced.get() == self.epoch {
            return;
        }
        let Some((_, object)) = &*description else {
            return;
        };
        // A rebuilt cache entry (any invalidation) describes the relation
        // anew: only a description that differs from the last one sent is
        // written.
        if self.described.get(&rel.relid) != Some(object) {
            sink.buf().extend_from_slice(object);
            self.end_object(sink, ObjectEnd::Within);
            self.described.insert(rel.relid, object.clone());
        }
        render.announced.set(self.epoch);
    }

    /// Writes the `new` and `old` members.
    #[allow(clippy::too_many_arguments)]
    fn rows<'n, 'o>(
        &mut self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        keys: &[Vec<u8>],
        new: Option<&(dyn TupleValues + 'n)>,
        old: Option<&(dyn TupleValues + 'o)>,
        old_complete: bool,
        unchanged: &mut Vec<usize>,
    ) -> Result<(), EncodeError> {
        if let Some(new) = new {
            out.extend_from_slice(b",\"new\":");
            let complete_from = match old {
                Some(old) if old_complete => Some(old),
                _ => None,
            };
            self.row(
                out,
                rel,
                keys,
                new,
                complete_from,
                RowPart::Whole,
                true,
                unchanged,
            )?;
        }
        if let Some(old) = old {
            out.extend_from_slice(b",\"old\":");
            let part = if old_complete {
                RowPart::Whole
            } else {
                RowPart::Identity
            };
            // The old row's unchanged TOAST values (never an identity
            // column's) are not reported: the new row's are.
            let mut ignored = Vec::new();
            self.row(out, rel, keys, old, None, part, false, &mut ignored)?;
        }
        Ok(())
    }

    /// Writes one row object; records each column's value span.
    #[allow(clippy::too_many_arguments)]
    fn row<'r, 'o>(
        &mut self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        keys: &[Vec<u8>],
        row: &(dyn TupleValues + 'r),
        complete_from: Option<&(dyn TupleValues + 'o)>,
        part: RowPart,
        is_new: bool,
        unchanged: &mut Vec<usize>,
    ) -> Result<(), EncodeError> {
        out.push(b'{');
        let mut first = true;
        for (i, (col, key)) in rel.columns.iter().zip(keys).enumerate() {
            if !in_part(rel, col, part) {
                continue;
            }
            let source = match row.cell(col) {
                Cell::Hidden => continue,
                Cell::Null => Source::Null,
                Cell::Value => Source::Row,
                Cell::UnchangedToast => match complete_from {
                    Some(old) if old.cell(col) == Cell::Value => Source::OldRow,
                    _ => {
                        unchanged.push(i);
                        continue;
                    }
                },
            };
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            let start = out.len();
            let style = value::Style {
                numbers_as_strings: self.numbers_as_strings,
                ascii: rel.server_encoding == ServerEncoding::Other,
            };
            match (source, complete_from) {
                (Source::Null, _) => out.extend_from_slice(b"null"),
                (Source::OldRow, Some(old)) => value::push_column(out, old, col, style),
                _ => value::push_column(out, row, col, style),
            }
            // Kept only for an UPDATE's `changed` list (see `change`).
            if let Some(spans) = self.spans.get_mut(i) {
                let span = Some((start, out.len()));
                if is_new {
                    spans.0 = span;
                } else {
                    spans.1 = span;
                }
            }
        }
        out.push(b'}');
        Ok(())
    }
}

/// Whether an UPDATE changed a column both rows have, by value: two NULLs
/// are the same, a NULL and a value differ (even the JSON `null`), and
/// two values are compared as stored (two json texts that render alike
/// can differ). Only values whose stored form cannot be read are compared
/// as rendered. An unchanged TOAST value is the old row's.
fn value_changed(
    col: &ColumnMeta,
    new: &dyn TupleValues,
    old: &dyn TupleValues,
    rendered_differ: impl FnOnce() -> bool,
) -> bool {
    match (new.cell(col), old.cell(col)) {
        (Cell::UnchangedToast, _) => false,
        (Cell::Null, Cell::Null) => false,
        (Cell::Null, _) | (_, Cell::Null) => true,
        _ => match (new.image(col), old.image(col)) {
            (Some(n), Some(o)) => n != o,
            _ => rendered_differ(),
        },
    }
}

fn column_list(out: &mut Vec<u8>, key: &[u8], rel: &RelationMeta, columns: &[usize]) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":[");
    for (n, &i) in columns.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&rel.columns[i].name_json);
    }
    out.push(b']');
}

/// Every object is written as soon as it is complete: as one output message,
/// or, with batching, as a line of a message handed over when it is full or
/// at the next boundary (see [`ObjectEnd`]).
impl OutputFormat for Format3 {
    fn type_rendering(&self) -> TypeRendering {
        TypeRendering {
            name: TypeName::WithTypmod,
            classify_domain_base: false,
            signed_oid: false,
            reads: ValueReads::Typed,
            column_details: false,
        }
    }

    fn item_interrupted(&mut self) {
        self.epoch += 1;
        self.described.clear();
    }

    fn begin(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, first_lsn: u64) {
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"B\"");
        field_u64(out, b"xid", txn.xid as u64);
        field_lsn(out, b"lsn", txn.final_lsn);
        field_timestamp(out, txn.commit_time);
        if self.include_origin {
            field_u64(out, b"origin", txn.origin as u64);
        }
        out.push(b'}');
        if self.batch_bytes == 0 {
            sink.write_at(first_lsn);
        } else {
            // The batch's message is reported where it is handed over.
            self.end_object(sink, ObjectEnd::Within);
        }
    }

    fn commit(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, commit_lsn: u64, changes: u64) {
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"C\"");
        field_u64(out, b"xid", txn.xid as u64);
        field_lsn(out, b"lsn", commit_lsn);
        field_lsn(out, b"nextlsn", txn.end_lsn);
        field_timestamp(out, txn.commit_time);
        field_u64(out, b"changes", changes);
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Boundary);
        shrink_after_transaction(sink.buf());
    }

    fn change(
        &mut self,
        sink: &mut dyn Sink,
        c: &ChangeContext<'_>,
    ) -> Result<Option<String>, EncodeError> {
        let (header, rel, new, old) = (c.header, c.rel, c.new, c.old);
        let render = c.render.get::<V3Render>();
        if let Some(row) = new.or(old) {
            self.announce(sink, rel, &render, row);
        }
        let keys = render.keys.get_or_init(|| {
            rel.columns
                .iter()
                .map(|c| {
                    let mut key = c.name_json.clone();
                    key.push(b':');
                    key
                })
                .collect()
        });
        let head = render.head.get_or_init(|| relation_head(rel));
        // The old row is complete under REPLICA IDENTITY FULL: it completes
        // unchanged TOAST values and tells which columns changed (compared
        // through the values' spans, kept for that case alone).
        let old_complete = rel.identity == ReplicaIdentity::Full && old.is_some();
        let list_changed = header.kind == ChangeKind::Update && old_complete && new.is_some();
        self.spans.clear();
        if list_changed {
            self.spans.resize(rel.columns.len(), (None, None));
        }

        // Written in place: an ERROR that PostgreSQL catches mid-object
        // leaves the objects before it (see `OutputFormat::item_interrupted`).
        let out = sink.buf();
        // Objects of the batch before this one stay if it fails.
        let start = out.len();
        out.extend_from_slice(b"{\"action\":\"");
        out.push(match header.source {
            ChangeSource::Wal => letter(header.kind),
            ChangeSource::Backfill => b'F',
        });
        out.push(b'"');
        if let Some(xid) = header.stream_xid {
            field_u64(out, b"xid", xid as u64);
        }
        if let Some(original) = header.transformed_from {
            out.extend_from_slice(b",\"transformedfrom\":\"");
            out.push(letter(original));
            out.push(b'"');
        }
        out.extend_from_slice(head);
        let mut unchanged = Vec::new();
        let result = self.rows(out, rel, keys, new, old, old_complete, &mut unchanged);
        if let Err(e) = result {
            out.truncate(start);
            return Err(e);
        }
        if !unchanged.is_empty() {
            column_list(out, b"unchanged", rel, &unchanged);
        }
        if let (true, Some(new), Some(old)) = (list_changed, new, old) {
            let changed: Vec<usize> = self
                .spans
                .iter()
                .enumerate()
                .filter(|(i, (n, o))| match (n, o) {
                    (Some(n), Some(o)) => {
                        let rendered_differ = || out[n.0..n.1] != out[o.0..o.1];
                        value_changed(&rel.columns[*i], new, old, rendered_differ)
                    }
                    (None, None) => false,
                    _ => true,
                })
                .map(|(i, _)| i)
                .collect();
            column_list(out, b"changed", rel, &changed);
        }
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Within);
        Ok(None)
    }

    fn events(&self) -> FormatEvents {
        FormatEvents {
            truncate: true,
            backfill: true,
            ddl: true,
        }
    }

    fn truncate(
        &mut self,
        sink: &mut dyn Sink,
        _txn: &TxnInfo,
        stream_xid: Option<u32>,
        _lsn: u64,
        rel: &RelationMeta,
    ) {
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"T\"");
        if let Some(xid) = stream_xid {
            field_u64(out, b"xid", xid as u64);
        }
        out.extend_from_slice(&relation_head(rel));
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Within);
    }

    fn message(
        &mut self,
        sink: &mut dyn Sink,
        _txn: &TxnInfo,
        transactional: bool,
        stream_xid: Option<u32>,
        lsn: u64,
        prefix: &[u8],
        content: &[u8],
    ) {
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"M\"");
        if let Some(xid) = stream_xid {
            field_u64(out, b"xid", xid as u64);
        }
        out.extend_from_slice(if transactional {
            b",\"transactional\":true"
        } else {
            b",\"transactional\":false"
        });
        field_lsn(out, b"lsn", lsn);
        out.extend_from_slice(b",\"prefix\":");
        push_json_string(out, prefix);
        out.extend_from_slice(b",\"content\":");
        push_json_string(out, content);
        out.push(b'}');
        let end = if transactional {
            ObjectEnd::Within
        } else {
            ObjectEnd::Boundary
        };
        self.end_object(sink, end);
    }

    fn backfill_marker(
        &mut self,
        sink: &mut dyn Sink,
        stream_xid: Option<u32>,
        rel: &RelationMeta,
        marker: BackfillMarker,
    ) {
        let out = sink.buf();
        out.extend_from_slice(match marker {
            BackfillMarker::Start => b"{\"action\":\"FS\"",
            BackfillMarker::End { .. } => b"{\"action\":\"FE\"",
        });
        if let Some(xid) = stream_xid {
            field_u64(out, b"xid", xid as u64);
        }
        out.extend_from_slice(&relation_head(rel));
        if let BackfillMarker::End { rows } = marker {
            field_u64(out, b"rows", rows);
        }
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Within);
    }

    fn stream_start(&mut self, sink: &mut dyn Sink, xid: u32, first: bool) {
        control::stream_start_open(sink.buf(), xid, first);
        sink.buf().push(b'}');
        self.end_object(sink, ObjectEnd::Within);
    }

    fn stream_stop(&mut self, sink: &mut dyn Sink, xid: u32) {
        control::stream_stop(sink.buf(), xid);
        self.end_object(sink, ObjectEnd::Boundary);
    }

    fn stream_abort(&mut self, sink: &mut dyn Sink, xid: u32, subxid: u32, lsn: u64) {
        control::stream_abort(sink.buf(), xid, subxid, lsn);
        self.end_object(sink, ObjectEnd::Boundary);
    }

    fn stream_commit(&mut self, sink: &mut dyn Sink, commit: &StreamedCommit) {
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"C\"");
        field_u64(out, b"xid", commit.xid as u64);
        out.extend_from_slice(b",\"streamed\":true");
        field_lsn(out, b"lsn", commit.commit_lsn);
        field_lsn(out, b"nextlsn", commit.end_lsn);
        field_timestamp(out, commit.commit_time);
        field_u64(out, b"changes", commit.changes);
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Boundary);
    }

    fn two_phase(
        &mut self,
        sink: &mut dyn Sink,
        event: TwoPhaseEvent,
        txn: &PreparedTxn,
        lsn: u64,
    ) {
        let action: &[u8] = match event {
            TwoPhaseEvent::Prepare { .. } => b"P",
            TwoPhaseEvent::CommitPrepared => b"CP",
            TwoPhaseEvent::RollbackPrepared => b"RP",
        };
        let changes = matches!(event, TwoPhaseEvent::Prepare { .. }).then_some(txn.changes);
        let out = sink.buf();
        out.extend_from_slice(b"{\"action\":\"");
        out.extend_from_slice(action);
        out.push(b'"');
        field_u64(out, b"xid", txn.xid as u64);
        out.extend_from_slice(b",\"gid\":");
        push_json_string(out, txn.gid);
        field_lsn(out, b"lsn", lsn);
        field_lsn(out, b"nextlsn", txn.end_lsn);
        field_timestamp(out, txn.time);
        if let TwoPhaseEvent::Prepare { streamed } = event {
            out.extend_from_slice(if streamed {
                b",\"streamed\":true"
            } else {
                b",\"streamed\":false"
            });
        }
        if let Some(changes) = changes {
            field_u64(out, b"changes", changes);
        }
        out.push(b'}');
        self.end_object(sink, ObjectEnd::Boundary);
    }

    fn ddl(
        &mut self,
        sink: &mut dyn Sink,
        stream_xid: Option<u32>,
        lsn: u64,
        event: &DdlEvent,
        tables: &[DdlTable<'_>],
    ) {
        let descriptions: Vec<Vec<u8>> = tables
            .iter()
            .map(|t| {
                let mut object = Vec::new();
                relation_object(&mut object, t.rel, t.visible);
                object
            })
            .collect();
        ddl::ddl_object(sink.buf(), event, stream_xid, lsn, &descriptions);
        self.end_object(sink, ObjectEnd::Within);
    }
}
