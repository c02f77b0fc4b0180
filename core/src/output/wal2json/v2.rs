//! wal2json's format 2: one JSON object per change (wal2json 2.6, byte for
//! byte), and its framing: every object is one output message.

use std::cell::OnceCell;

use super::{push_read_value, selected, Selection};
use crate::model::{
    Cell, CellValue, ChangeHeader, ChangeKind, ColumnMeta, EncodeError, RelationMeta,
    ReplicaIdentity, TupleValues, TxnInfo, ValueReads,
};
use crate::options::Options;
use crate::output::control;
use crate::output::format::{
    shrink_after_transaction, ChangeContext, FormatEvents, OutputFormat, Sink, TypeName,
    TypeRendering,
};
use crate::text::encoding::qualified_name;
use crate::text::json::{push_i64, push_json_string, push_lsn, push_u64};

fn action(kind: ChangeKind) -> &'static [u8] {
    match kind {
        ChangeKind::Insert => b"\"action\":\"I\"",
        ChangeKind::Update => b"\"action\":\"U\"",
        ChangeKind::Delete => b"\"action\":\"D\"",
    }
}

fn letter(kind: ChangeKind) -> u8 {
    match kind {
        ChangeKind::Insert => b'I',
        ChangeKind::Update => b'U',
        ChangeKind::Delete => b'D',
    }
}

/// Format 2's per-column pieces, rendered on first use per relation (see
/// [`V2Column`]).
#[derive(Debug, Default)]
pub struct Rendered(OnceCell<(V2Layout, Vec<V2Column>)>);

/// The options that shape format 2's per-column pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V2Layout {
    types: bool,
    type_oids: bool,
    not_null: bool,
    positions: bool,
    defaults: bool,
}

impl V2Layout {
    fn of(o: &Options) -> Self {
        V2Layout {
            types: o.include_types,
            type_oids: o.include_type_oids,
            not_null: o.include_not_null,
            positions: o.include_column_positions,
            defaults: o.include_default,
        }
    }
}

/// Everything format 2 prints about a column around its value, rendered
/// once per relation: a change then copies two pieces per column instead of
/// assembling names, types and options value by value.
#[derive(Debug, Clone)]
pub struct V2Column {
    /// `,{"name":...[,"type":...][,"typeoid":...]`: the separator and the
    /// fields before the value (the first column skips the comma), as a
    /// pk element prints them.
    head: Vec<u8>,
    /// `head` and `,"value":`, as columns and identity elements print them.
    value_head: Vec<u8>,
    /// `,"optional":...,"position":...,"default":...}`: the rest of a
    /// `columns` element (identity and pk elements just close with `}`).
    change_tail: Vec<u8>,
}

impl V2Column {
    fn render(col: &ColumnMeta, layout: V2Layout) -> Self {
        let mut head = b",{\"name\":".to_vec();
        head.extend_from_slice(&col.name_json);
        if layout.types {
            head.extend_from_slice(b",\"type\":");
            head.extend_from_slice(&col.type_json);
        }
        if layout.type_oids {
            head.extend_from_slice(b",\"typeoid\":");
            head.extend_from_slice(&col.type_oid_text);
        }
        let mut change_tail = Vec::new();
        if layout.not_null {
            change_tail.extend_from_slice(if col.not_null {
                b",\"optional\":false"
            } else {
                b",\"optional\":true"
            });
        }
        if layout.positions {
            change_tail.extend_from_slice(b",\"position\":");
            push_i64(&mut change_tail, col.attnum as i64);
        }
        if layout.defaults {
            change_tail.extend_from_slice(b",\"default\":");
            match &col.default_json {
                Some(d) => change_tail.extend_from_slice(d),
                None => change_tail.extend_from_slice(b"null"),
            }
        }
        change_tail.push(b'}');
        let mut value_head = head.clone();
        value_head.extend_from_slice(b",\"value\":");
        V2Column {
            head,
            value_head,
            change_tail,
        }
    }
}

/// Format 2 for one decoding session's options.
pub struct Format2 {
    opts: Options,
    /// The options' shape of the per-column pieces.
    layout: V2Layout,
}

impl Format2 {
    pub fn new(opts: &Options) -> Self {
        Format2 {
            opts: opts.clone(),
            layout: V2Layout::of(opts),
        }
    }

    fn v2_txn_fields(&self, out: &mut Vec<u8>, txn: &TxnInfo) {
        let o = &self.opts;
        if o.include_xids {
            out.extend_from_slice(b",\"xid\":");
            push_u64(out, txn.xid as u64);
        }
        if o.include_timestamp {
            out.extend_from_slice(b",\"timestamp\":\"");
            out.extend_from_slice(&txn.timestamp);
            out.push(b'"');
        }
        if o.include_origin {
            out.extend_from_slice(b",\"origin\":");
            push_u64(out, txn.origin as u64);
        }
    }

    /// Transaction fields of a change, message or truncate object; in a
    /// streamed block the (sub)transaction id is always printed and the
    /// commit timestamp, not known yet, never.
    fn v2_event_fields(&self, out: &mut Vec<u8>, txn: &TxnInfo, stream_xid: Option<u32>) {
        match stream_xid {
            None => self.v2_txn_fields(out, txn),
            Some(xid) => {
                out.extend_from_slice(b",\"xid\":");
                push_u64(out, xid as u64);
                if self.opts.include_origin {
                    out.extend_from_slice(b",\"origin\":");
                    push_u64(out, txn.origin as u64);
                }
            }
        }
    }

    fn v2_lsn(out: &mut Vec<u8>, key: &[u8], lsn: u64) {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(key);
        out.extend_from_slice(b"\":\"");
        push_lsn(out, lsn);
        out.push(b'"');
    }

    /// `{"action":"B",...}`; the caller skips it without include-transaction.
    pub fn v2_begin(&self, out: &mut Vec<u8>, txn: &TxnInfo) {
        out.extend_from_slice(b"{\"action\":\"B\"");
        self.v2_txn_fields(out, txn);
        if self.opts.include_lsn {
            Self::v2_lsn(out, b"lsn", txn.final_lsn);
            Self::v2_lsn(out, b"nextlsn", txn.end_lsn);
        }
        out.push(b'}');
    }

    /// `{"action":"C",...}`; the caller skips it without include-transaction.
    pub fn v2_commit(&self, out: &mut Vec<u8>, txn: &TxnInfo, commit_lsn: u64) {
        out.extend_from_slice(b"{\"action\":\"C\"");
        self.v2_txn_fields(out, txn);
        if self.opts.include_lsn {
            Self::v2_lsn(out, b"lsn", commit_lsn);
            Self::v2_lsn(out, b"nextlsn", txn.end_lsn);
        }
        out.push(b'}');
    }

    /// Checks wal2json's reasons to skip a format-2 change.
    pub fn v2_skip_reason(
        &self,
        kind: ChangeKind,
        rel: &RelationMeta,
        has_new: bool,
        has_old: bool,
    ) -> Option<String> {
        let no_identity = !rel.has_identity_index && rel.identity != ReplicaIdentity::Full;
        let what = match kind {
            ChangeKind::Insert | ChangeKind::Update if !has_new => "no tuple data for",
            ChangeKind::Update | ChangeKind::Delete if !has_old && no_identity => {
                "no tuple identifier for"
            }
            _ => return None,
        };
        Some(format!(
            "{what} {} in table {}",
            kind.command(),
            qualified_name(rel)
        ))
    }

    /// One INSERT/UPDATE/DELETE object in format 2; the caller has already
    /// checked [`Self::v2_skip_reason`]. Returns the WARNING wal2json also
    /// raises for an UPDATE/DELETE whose old row cannot be shown.
    #[allow(clippy::too_many_arguments)]
    pub fn v2_change(
        &self,
        out: &mut Vec<u8>,
        txn: &TxnInfo,
        lsn: u64,
        header: &ChangeHeader,
        rel: &RelationMeta,
        cache: &Rendered,
        new: Option<&dyn TupleValues>,
        old: Option<&dyn TupleValues>,
    ) -> Result<Option<String>, EncodeError> {
        let o = &self.opts;
        let kind = header.kind;
        out.push(b'{');
        out.extend_from_slice(action(kind));
        if let Some(original) = header.transformed_from {
            out.extend_from_slice(b",\"transformedfrom\":\"");
            out.push(letter(original));
            out.push(b'"');
        }
        self.v2_event_fields(out, txn, header.stream_xid);
        if o.include_lsn {
            Self::v2_lsn(out, b"lsn", lsn);
        }
        if o.include_schemas {
            out.extend_from_slice(b",\"schema\":");
            out.extend_from_slice(&rel.schema_json);
        }
        out.extend_from_slice(b",\"table\":");
        out.extend_from_slice(&rel.table_json);

        if let Some(new) = new {
            out.extend_from_slice(b",\"columns\":[");
            self.v2_tuple(out, rel, cache, new, V2Section::Columns)?;
            out.push(b']');
        }
        let mut warning = None;
        if let Some(old) = old {
            out.extend_from_slice(b",\"identity\":[");
            self.v2_tuple(out, rel, cache, old, V2Section::Identity)?;
            out.push(b']');
        } else if kind == ChangeKind::Update {
            match new {
                Some(new) if rel.has_primary_key || rel.has_identity_index => {
                    out.extend_from_slice(b",\"identity\":[");
                    self.v2_tuple(out, rel, cache, new, V2Section::Identity)?;
                    out.push(b']');
                }
                _ => {
                    warning = Some(format!(
                        "no old tuple data for UPDATE in table {}",
                        qualified_name(rel)
                    ))
                }
            }
        } else if kind == ChangeKind::Delete {
            warning = Some(format!(
                "no old tuple data for DELETE in table {}",
                qualified_name(rel)
            ));
        }
        if o.include_pk {
            out.extend_from_slice(b",\"pk\":[");
            if rel.has_primary_key {
                if let Some(old) = old {
                    self.v2_tuple(out, rel, cache, old, V2Section::PrimaryKey)?;
                } else if let Some(new) = new {
                    self.v2_tuple(out, rel, cache, new, V2Section::PrimaryKey)?;
                }
            }
            out.push(b']');
        }
        out.push(b'}');
        Ok(warning)
    }

    fn v2_tuple(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        cache: &Rendered,
        tuple: &dyn TupleValues,
        section: V2Section,
    ) -> Result<(), EncodeError> {
        let layout = self.layout;
        let rendered;
        let pieces = match cache.0.get_or_init(|| {
            let pieces = rel.columns.iter().map(|c| V2Column::render(c, layout));
            (layout, pieces.collect())
        }) {
            (cached, pieces) if *cached == layout => pieces,
            // Only a test formats one relation with several option sets.
            _ => {
                rendered = rel
                    .columns
                    .iter()
                    .map(|c| V2Column::render(c, layout))
                    .collect::<Vec<_>>();
                &rendered
            }
        };
        let selection = match section {
            V2Section::Columns => Selection::All,
            V2Section::Identity => Selection::IdentityKey,
            V2Section::PrimaryKey => Selection::PrimaryKey,
        };
        let numbers_as_strings = self.opts.numeric_data_types_as_string;
        // The first element skips its piece's leading comma.
        let mut skip = 1;
        for (col, piece) in rel.columns.iter().zip(pieces) {
            if !selected(rel, col, selection) {
                continue;
            }
            if section == V2Section::PrimaryKey {
                if let Cell::Hidden | Cell::UnchangedToast = tuple.cell(col) {
                    continue;
                }
                out.extend_from_slice(&piece.head[skip..]);
                out.push(b'}');
                skip = 0;
                continue;
            }
            let read = tuple.read(col);
            let value = match &read {
                CellValue::Hidden | CellValue::UnchangedToast => continue,
                CellValue::Null => None,
                CellValue::Value(value) => Some(value),
            };
            out.extend_from_slice(&piece.value_head[skip..]);
            skip = 0;
            match value {
                None => out.extend_from_slice(b"null"),
                Some(value) => push_read_value(out, value, tuple, col, numbers_as_strings)?,
            }
            if section == V2Section::Columns {
                match piece.change_tail[..] {
                    // `}` alone (the default options): no copy call.
                    [close] => out.push(close),
                    ref tail => out.extend_from_slice(tail),
                }
            } else {
                out.push(b'}');
            }
        }
        Ok(())
    }

    /// A logical decoding message in format 2 (`txn` is `None` outside a transaction).
    pub fn v2_message(
        &self,
        out: &mut Vec<u8>,
        txn: Option<&TxnInfo>,
        stream_xid: Option<u32>,
        lsn: u64,
        prefix: &[u8],
        content: &[u8],
    ) {
        let o = &self.opts;
        out.extend_from_slice(b"{\"action\":\"M\"");
        match txn {
            Some(txn) => self.v2_event_fields(out, txn, stream_xid),
            None => {
                if o.include_xids {
                    out.extend_from_slice(b",\"xid\":null");
                }
                if o.include_timestamp {
                    out.extend_from_slice(b",\"timestamp\":null");
                }
                if o.include_origin {
                    out.extend_from_slice(b",\"origin\":null");
                }
            }
        }
        if o.include_lsn {
            Self::v2_lsn(out, b"lsn", lsn);
        }
        out.extend_from_slice(if txn.is_some() {
            b",\"transactional\":true"
        } else {
            b",\"transactional\":false"
        });
        out.extend_from_slice(b",\"prefix\":");
        push_json_string(out, prefix);
        out.extend_from_slice(b",\"content\":");
        push_json_string(out, content);
        out.push(b'}');
    }

    /// One truncated relation in format 2.
    pub fn v2_truncate(
        &self,
        out: &mut Vec<u8>,
        txn: &TxnInfo,
        stream_xid: Option<u32>,
        lsn: u64,
        rel: &RelationMeta,
    ) {
        let o = &self.opts;
        out.extend_from_slice(b"{\"action\":\"T\"");
        self.v2_event_fields(out, txn, stream_xid);
        if o.include_lsn {
            Self::v2_lsn(out, b"lsn", lsn);
        }
        if o.include_schemas {
            out.extend_from_slice(b",\"schema\":");
            out.extend_from_slice(&rel.schema_json);
        }
        out.extend_from_slice(b",\"table\":");
        out.extend_from_slice(&rel.table_json);
        out.push(b'}');
    }
}

/// Every object is one output message, written as soon as it is complete.
impl OutputFormat for Format2 {
    fn type_rendering(&self) -> TypeRendering {
        TypeRendering {
            name: TypeName::WithTypmod,
            classify_domain_base: false,
            signed_oid: true,
            reads: ValueReads::AsText,
            column_details: false,
        }
    }

    fn begin(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, first_lsn: u64) {
        if self.opts.include_transaction {
            self.v2_begin(sink.buf(), txn);
            sink.write_at(first_lsn);
        }
    }

    fn commit(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, commit_lsn: u64, _changes: u64) {
        if self.opts.include_transaction {
            self.v2_commit(sink.buf(), txn, commit_lsn);
            sink.write(true);
        }
        shrink_after_transaction(sink.buf());
    }

    fn skip_reason(
        &self,
        kind: ChangeKind,
        rel: &RelationMeta,
        has_new: bool,
        has_old: bool,
    ) -> Option<String> {
        self.v2_skip_reason(kind, rel, has_new, has_old)
    }

    fn change(
        &mut self,
        sink: &mut dyn Sink,
        c: &ChangeContext<'_>,
    ) -> Result<Option<String>, EncodeError> {
        let cache = c.render.get::<Rendered>();
        let warning = self.v2_change(
            sink.buf(),
            c.txn,
            c.lsn,
            c.header,
            c.rel,
            &cache,
            c.new,
            c.old,
        )?;
        sink.write(true);
        Ok(warning)
    }

    fn events(&self) -> FormatEvents {
        // wal2json's bytes: format 2 has an object per truncated table; no backfill, no DDL
        // objects (DDL capture's messages stay messages).
        FormatEvents {
            truncate: true,
            ..FormatEvents::default()
        }
    }

    fn truncate(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        stream_xid: Option<u32>,
        lsn: u64,
        rel: &RelationMeta,
    ) {
        self.v2_truncate(sink.buf(), txn, stream_xid, lsn, rel);
        sink.write(true);
    }

    fn message(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        transactional: bool,
        stream_xid: Option<u32>,
        lsn: u64,
        prefix: &[u8],
        content: &[u8],
    ) {
        let txn = transactional.then_some(txn);
        self.v2_message(sink.buf(), txn, stream_xid, lsn, prefix, content);
        sink.write(true);
    }

    fn stream_start(&mut self, sink: &mut dyn Sink, xid: u32, first: bool) {
        control::stream_start_open(sink.buf(), xid, first);
        sink.buf().push(b'}');
        sink.write(true);
    }

    fn stream_stop(&mut self, sink: &mut dyn Sink, xid: u32) {
        control::stream_stop(sink.buf(), xid);
        sink.write(true);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum V2Section {
    Columns,
    Identity,
    PrimaryKey,
}
