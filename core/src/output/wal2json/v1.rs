//! wal2json's format 1: one JSON document per transaction, its
//! `columnnames`/`columntypes`/`columnvalues` arrays built side by side
//! (wal2json 2.6, byte for byte), and the framing and flush policy of that
//! document around pubjson's decoding events.

use std::cell::RefCell;

use super::{push_read_value, selected, Selection};
use crate::model::{
    Cell, CellValue, ChangeHeader, ChangeKind, ColumnMeta, EncodeError, RelationMeta,
    ReplicaIdentity, TupleValues, TxnInfo, ValueReads,
};
use crate::options::Options;
use crate::output::control;
use crate::output::format::{
    shrink_after_transaction, ChangeContext, FormatEvents, OutputFormat, PreparedTxn, Sink,
    TypeName, TypeRendering, FLUSH_BYTES,
};
use crate::text::encoding::message_name;
use crate::text::json::{push_i64, push_json_string, push_lsn, push_u64};

fn kind_name(kind: ChangeKind) -> &'static [u8] {
    match kind {
        ChangeKind::Insert => b"insert",
        ChangeKind::Update => b"update",
        ChangeKind::Delete => b"delete",
    }
}

/// Format 1's arrays before the values when every selected column is
/// printed, rendered on first use per relation (see `Format1::v1_tuple`).
#[derive(Debug, Default)]
pub struct Rendered(RefCell<Vec<(V1Key, Vec<u8>)>>);

/// What format 1's arrays before the values depend on, besides the columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1Key {
    selection: Selection,
    replident: bool,
    has_primary_key: bool,
    has_identity_index: bool,
    pretty_print: bool,
    types: bool,
    type_oids: bool,
    positions: bool,
    not_null: bool,
    defaults: bool,
}

impl V1Key {
    fn new(o: &Options, rel: &RelationMeta, selection: Selection, replident: bool) -> Self {
        V1Key {
            selection,
            replident,
            has_primary_key: rel.has_primary_key,
            has_identity_index: rel.has_identity_index,
            pretty_print: o.pretty_print,
            types: o.include_types,
            type_oids: o.include_type_oids,
            positions: o.include_column_positions,
            not_null: o.include_not_null,
            defaults: o.include_default,
        }
    }
}

/// Appends pretty-print whitespace (`ht`, `nl`, `sp`): empty without
/// pretty-print, the default, where the test spares a copy call per
/// separator.
#[inline]
fn push_ws(out: &mut Vec<u8>, ws: &[u8]) {
    if !ws.is_empty() {
        out.extend_from_slice(ws);
    }
}

/// Format 1 for one decoding session's options.
pub struct Format1 {
    opts: Options,
    ht: &'static [u8],
    nl: &'static [u8],
    sp: &'static [u8],
    /// Elements in the current document's `change` array so far.
    nr_changes: u64,
}

impl Format1 {
    pub fn new(opts: &Options) -> Self {
        let (ht, nl, sp): (&[u8], &[u8], &[u8]) = if opts.pretty_print {
            (b"\t", b"\n", b" ")
        } else {
            (b"", b"", b"")
        };
        Format1 {
            opts: opts.clone(),
            ht,
            nl,
            sp,
            nr_changes: 0,
        }
    }

    #[inline(always)]
    fn tabs(&self, out: &mut Vec<u8>, n: usize) {
        for _ in 0..n {
            push_ws(out, self.ht);
        }
    }

    /// `<tabs>"key":<sp>` as format 1 prints object keys. Inlined: the
    /// keys are literals, copied without a call.
    #[inline(always)]
    fn v1_key(&self, out: &mut Vec<u8>, tabs: usize, key: &[u8]) {
        self.tabs(out, tabs);
        out.push(b'"');
        out.extend_from_slice(key);
        out.extend_from_slice(b"\":");
        push_ws(out, self.sp);
    }

    /// The opening of a format-1 transaction document, up to `"change":[`.
    pub fn v1_begin(&self, out: &mut Vec<u8>, txn: &TxnInfo) {
        let o = &self.opts;
        out.push(b'{');
        push_ws(out, self.nl);
        if o.include_xids {
            self.v1_key(out, 1, b"xid");
            push_u64(out, txn.xid as u64);
            out.push(b',');
            push_ws(out, self.nl);
        }
        if o.include_lsn {
            self.v1_key(out, 1, b"nextlsn");
            out.push(b'"');
            push_lsn(out, txn.end_lsn);
            out.extend_from_slice(b"\",");
            push_ws(out, self.nl);
        }
        if o.include_timestamp {
            self.v1_key(out, 1, b"timestamp");
            out.push(b'"');
            out.extend_from_slice(&txn.timestamp);
            out.extend_from_slice(b"\",");
            push_ws(out, self.nl);
        }
        if o.include_origin {
            self.v1_key(out, 1, b"origin");
            push_u64(out, txn.origin as u64);
            out.push(b',');
            push_ws(out, self.nl);
        }
        self.v1_key(out, 1, b"change");
        out.push(b'[');
    }

    /// The closing of a format-1 transaction document.
    pub fn v1_commit(&self, out: &mut Vec<u8>) {
        if !self.opts.write_in_chunks {
            push_ws(out, self.nl);
        }
        push_ws(out, self.ht);
        out.push(b']');
        push_ws(out, self.nl);
        out.push(b'}');
    }

    /// Starts one element of the `change` array; `nr_changes` counts it already.
    fn v1_element_start(&self, out: &mut Vec<u8>, nr_changes: u64) {
        if !self.opts.write_in_chunks {
            push_ws(out, self.nl);
        }
        self.tabs(out, 2);
        if nr_changes > 1 {
            out.push(b',');
        }
        out.push(b'{');
        push_ws(out, self.nl);
    }

    /// Checks wal2json's reasons to skip a format-1 change.
    pub fn v1_skip_reason(
        &self,
        kind: ChangeKind,
        rel: &RelationMeta,
        has_new: bool,
        has_old: bool,
    ) -> Option<String> {
        let table = message_name(&rel.table, rel.server_encoding);
        if kind != ChangeKind::Insert
            && !rel.has_identity_index
            && rel.identity != ReplicaIdentity::Full
        {
            return Some(format!(
                "table \"{table}\" without primary key or replica identity is nothing"
            ));
        }
        let missing = match kind {
            ChangeKind::Insert | ChangeKind::Update => !has_new,
            ChangeKind::Delete => !has_old,
        };
        missing.then(|| format!("no tuple data for {} in table \"{table}\"", kind.command()))
    }

    /// Appends one INSERT/UPDATE/DELETE element to a format-1 document.
    /// The caller has already checked [`Self::v1_skip_reason`].
    #[allow(clippy::too_many_arguments)]
    pub fn v1_change(
        &self,
        out: &mut Vec<u8>,
        nr_changes: u64,
        header: &ChangeHeader,
        rel: &RelationMeta,
        cache: &Rendered,
        new: Option<&dyn TupleValues>,
        old: Option<&dyn TupleValues>,
    ) -> Result<(), EncodeError> {
        let o = &self.opts;
        let kind = header.kind;
        self.v1_element_start(out, nr_changes);
        self.v1_key(out, 3, b"kind");
        out.push(b'"');
        out.extend_from_slice(kind_name(kind));
        out.extend_from_slice(b"\",");
        push_ws(out, self.nl);
        if let Some(original) = header.transformed_from {
            self.v1_key(out, 3, b"transformedfrom");
            out.push(b'"');
            out.extend_from_slice(kind_name(original));
            out.extend_from_slice(b"\",");
            push_ws(out, self.nl);
        }
        if let Some(xid) = header.stream_xid {
            self.v1_key(out, 3, b"xid");
            push_u64(out, xid as u64);
            out.push(b',');
            push_ws(out, self.nl);
        }
        if o.include_schemas {
            self.v1_key(out, 3, b"schema");
            out.extend_from_slice(&rel.schema_json);
            out.push(b',');
            push_ws(out, self.nl);
        }
        self.v1_key(out, 3, b"table");
        out.extend_from_slice(&rel.table_json);
        out.push(b',');
        push_ws(out, self.nl);

        let with_pk = o.include_pk && rel.has_primary_key;
        match kind {
            ChangeKind::Insert => {
                if let Some(new) = new {
                    self.v1_tuple(out, rel, cache, new, Selection::All, false, with_pk)?;
                    if with_pk {
                        self.v1_pk(out, rel, false);
                    }
                }
            }
            ChangeKind::Update => {
                if let Some(new) = new {
                    self.v1_tuple(out, rel, cache, new, Selection::All, false, true)?;
                    if with_pk {
                        self.v1_pk(out, rel, true);
                    }
                    match old {
                        Some(old) => {
                            self.v1_tuple(out, rel, cache, old, Selection::All, true, false)?
                        }
                        None => self.v1_tuple(
                            out,
                            rel,
                            cache,
                            new,
                            Selection::IdentityKey,
                            true,
                            false,
                        )?,
                    }
                }
            }
            ChangeKind::Delete => {
                if let Some(old) = old {
                    if with_pk {
                        self.v1_pk(out, rel, true);
                    }
                    self.v1_tuple(out, rel, cache, old, Selection::IdentityKey, true, false)?;
                }
            }
        }
        self.tabs(out, 2);
        out.push(b'}');
        Ok(())
    }

    /// wal2json's `tuple_to_stringinfo`: the column arrays of a new tuple, or
    /// the `oldkeys` object of an identity (`replident`).
    ///
    /// wal2json builds the arrays side by side in scratch buffers; this
    /// writes them one after the other straight into `out`, one pass over
    /// the columns per array, which gives the same bytes without allocating.
    /// The arrays before the values depend only on which columns are
    /// printed: when that is every selected column (no unchanged TOAST
    /// value, no NULL in an identity), they are the same for every change
    /// of the relation and copied from a rendering cached beside it.
    #[allow(clippy::too_many_arguments)]
    fn v1_tuple(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        cache: &Rendered,
        tuple: &dyn TupleValues,
        selection: Selection,
        replident: bool,
        addcomma: bool,
    ) -> Result<(), EncodeError> {
        let o = &self.opts;
        // The columns every array lists: nulls are left out of identities,
        // unchanged TOAST values (not in the WAL) out of everything.
        let printed = |tuple: &dyn TupleValues, col: &ColumnMeta| {
            selected(rel, col, selection)
                && match tuple.cell(col) {
                    Cell::Hidden | Cell::UnchangedToast => false,
                    Cell::Null => !replident,
                    Cell::Value => true,
                }
        };
        let every_selected = |col: &ColumnMeta| selected(rel, col, selection);
        let all_printed = rel
            .columns
            .iter()
            .all(|c| !every_selected(c) || printed(&*tuple, c));
        if all_printed {
            let key = V1Key::new(o, rel, selection, replident);
            let mut cache = cache.0.borrow_mut();
            match cache.iter().find(|(k, _)| *k == key) {
                Some((_, arrays)) => out.extend_from_slice(arrays),
                None => {
                    let mut arrays = Vec::new();
                    self.v1_arrays(&mut arrays, rel, &every_selected, replident);
                    out.extend_from_slice(&arrays);
                    cache.push((key, arrays));
                }
            }
        } else {
            self.v1_arrays(out, rel, &|c| printed(&*tuple, c), replident);
        }

        let depth = if replident { 4 } else { 3 };
        let key = |s: &'static [u8], k: &'static [u8]| if replident { k } else { s };
        let separator = |out: &mut Vec<u8>, first: &mut bool| {
            if !*first {
                out.push(b',');
                push_ws(out, self.sp);
            }
            *first = false;
        };
        self.v1_key(out, depth, key(b"columnvalues", b"keyvalues"));
        out.push(b'[');
        let mut first = true;
        for col in &rel.columns {
            if !selected(rel, col, selection) {
                continue;
            }
            // `printed`, with the column read once.
            let read = tuple.read(col);
            match &read {
                CellValue::Hidden | CellValue::UnchangedToast => continue,
                CellValue::Null if replident => continue,
                CellValue::Null => {
                    separator(out, &mut first);
                    out.extend_from_slice(b"null");
                }
                CellValue::Value(value) => {
                    separator(out, &mut first);
                    push_read_value(out, value, tuple, col, o.numeric_data_types_as_string)?;
                }
            }
        }
        out.push(b']');
        if replident {
            push_ws(out, self.nl);
            self.tabs(out, 3);
            out.push(b'}');
        } else if addcomma {
            out.push(b',');
        }
        push_ws(out, self.nl);
        Ok(())
    }

    /// The arrays of [`Self::v1_tuple`] before the values (and the opening
    /// of `oldkeys`), listing the columns `printed` accepts.
    fn v1_arrays(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        printed: &dyn Fn(&ColumnMeta) -> bool,
        replident: bool,
    ) {
        let o = &self.opts;
        let depth = if replident { 4 } else { 3 };
        let key = |s: &'static [u8], k: &'static [u8]| if replident { k } else { s };
        let separator = |out: &mut Vec<u8>, first: &mut bool| {
            if !*first {
                out.push(b',');
                push_ws(out, self.sp);
            }
            *first = false;
        };
        // One array of per-column facts that need no tuple value.
        let array = |out: &mut Vec<u8>,
                     tabs: usize,
                     name: &[u8],
                     item: &dyn Fn(&mut Vec<u8>, &ColumnMeta)| {
            self.v1_key(out, tabs, name);
            out.push(b'[');
            let mut first = true;
            for col in rel.columns.iter().filter(|c| printed(c)) {
                separator(out, &mut first);
                item(out, col);
            }
            out.extend_from_slice(b"],");
            push_ws(out, self.nl);
        };

        if replident {
            self.v1_key(out, 3, b"oldkeys");
            out.push(b'{');
            push_ws(out, self.nl);
        }
        array(out, depth, key(b"columnnames", b"keynames"), &|out, c| {
            out.extend_from_slice(&c.name_json)
        });
        if o.include_types {
            array(out, depth, key(b"columntypes", b"keytypes"), &|out, c| {
                out.extend_from_slice(&c.type_json)
            });
        }
        if o.include_type_oids {
            array(
                out,
                depth,
                key(b"columntypeoids", b"keytypeoids"),
                &|out, c| out.extend_from_slice(&c.type_oid_text),
            );
        }
        if !replident {
            if o.include_column_positions {
                array(out, 3, b"columnpositions", &|out, c| {
                    push_i64(out, c.attnum as i64)
                });
            }
            if o.include_not_null {
                if o.include_types {
                    array(out, 3, b"columnoptionals", &|out, c| {
                        out.extend_from_slice(if c.not_null { b"false" } else { b"true" })
                    });
                } else {
                    // wal2json fills this array only while printing types.
                    self.v1_key(out, 3, b"columnoptionals");
                    out.extend_from_slice(b"[],");
                    push_ws(out, self.nl);
                }
            }
            if o.include_default {
                array(out, 3, b"columndefaults", &|out, c| match &c.default_json {
                    Some(d) => out.extend_from_slice(d),
                    None => out.extend_from_slice(b"null"),
                });
            }
        }
    }

    /// wal2json's `pk_to_stringinfo`: the `pk` object (names and types only).
    fn v1_pk(&self, out: &mut Vec<u8>, rel: &RelationMeta, addcomma: bool) {
        let o = &self.opts;
        self.v1_key(out, 3, b"pk");
        out.push(b'{');
        push_ws(out, self.nl);
        let mut types = Vec::new();
        self.v1_key(out, 4, b"pknames");
        out.push(b'[');
        self.v1_key(&mut types, 4, b"pktypes");
        types.push(b'[');
        let mut first = true;
        for col in rel
            .columns
            .iter()
            .filter(|c| selected(rel, c, Selection::PrimaryKey))
        {
            if !first {
                out.push(b',');
                push_ws(out, self.sp);
            }
            out.extend_from_slice(&col.name_json);
            if o.include_types {
                if !first {
                    types.push(b',');
                    push_ws(&mut types, self.sp);
                }
                types.extend_from_slice(&col.type_json);
            }
            first = false;
        }
        out.extend_from_slice(b"],");
        push_ws(out, self.nl);
        out.extend_from_slice(&types);
        out.push(b']');
        push_ws(out, self.nl);
        self.tabs(out, 3);
        out.push(b'}');
        if addcomma {
            out.push(b',');
        }
        push_ws(out, self.nl);
    }

    /// A logical decoding message in format 1. Transactional messages are an
    /// element of the transaction's `change` array (`nr_changes` counts it);
    /// non-transactional ones are a document of their own.
    pub fn v1_message(
        &self,
        out: &mut Vec<u8>,
        nr_changes: u64,
        transactional: bool,
        stream_xid: Option<u32>,
        prefix: &[u8],
        content: &[u8],
    ) {
        if transactional && !self.opts.write_in_chunks {
            push_ws(out, self.nl);
        }
        if !transactional {
            out.push(b'{');
            push_ws(out, self.nl);
            self.v1_key(out, 1, b"change");
            out.push(b'[');
            push_ws(out, self.nl);
        }
        self.tabs(out, 2);
        if transactional && nr_changes > 1 {
            out.push(b',');
        }
        out.push(b'{');
        push_ws(out, self.nl);
        self.v1_key(out, 3, b"kind");
        out.extend_from_slice(b"\"message\",");
        push_ws(out, self.nl);
        self.v1_key(out, 3, b"transactional");
        out.extend_from_slice(if transactional { b"true," } else { b"false," });
        push_ws(out, self.nl);
        if let Some(xid) = stream_xid {
            self.v1_key(out, 3, b"xid");
            push_u64(out, xid as u64);
            out.push(b',');
            push_ws(out, self.nl);
        }
        self.v1_key(out, 3, b"prefix");
        push_json_string(out, prefix);
        out.push(b',');
        push_ws(out, self.nl);
        self.v1_key(out, 3, b"content");
        push_json_string(out, content);
        push_ws(out, self.nl);
        self.tabs(out, 2);
        out.push(b'}');
        if !transactional {
            push_ws(out, self.nl);
            self.tabs(out, 1);
            out.push(b']');
            push_ws(out, self.nl);
            out.push(b'}');
        }
    }
}

/// The document framing and flush policy: a transaction (or a streamed
/// block) is one document, written at its end, or piece by piece with
/// write-in-chunks, or when it passes [`FLUSH_BYTES`].
impl OutputFormat for Format1 {
    fn type_rendering(&self) -> TypeRendering {
        TypeRendering {
            name: if self.opts.include_typmod {
                TypeName::WithTypmod
            } else {
                TypeName::Plain
            },
            // Format 1 classifies (and prints the OID of) the domain's base
            // type when include-domain-data-type applies.
            classify_domain_base: true,
            signed_oid: false,
            reads: ValueReads::AsText,
            column_details: false,
        }
    }

    fn begin(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, first_lsn: u64) {
        self.nr_changes = 0;
        self.v1_begin(sink.buf(), txn);
        if self.opts.write_in_chunks {
            // The BEGIN chunk carries the transaction's first LSN, as it
            // would without deferral.
            sink.write_at(first_lsn);
        }
    }

    fn commit(&mut self, sink: &mut dyn Sink, _txn: &TxnInfo, _commit_lsn: u64, _changes: u64) {
        self.v1_commit(sink.buf());
        sink.write(true);
        // Do not keep a huge buffer around after a big transaction.
        shrink_after_transaction(sink.buf());
    }

    fn skip_reason(
        &self,
        kind: ChangeKind,
        rel: &RelationMeta,
        has_new: bool,
        has_old: bool,
    ) -> Option<String> {
        self.v1_skip_reason(kind, rel, has_new, has_old)
    }

    fn change(
        &mut self,
        sink: &mut dyn Sink,
        c: &ChangeContext<'_>,
    ) -> Result<Option<String>, EncodeError> {
        let cache = c.render.get::<Rendered>();
        // Counted once written: an interrupted change is not in the array.
        let nr_changes = self.nr_changes + 1;
        self.v1_change(
            sink.buf(),
            nr_changes,
            c.header,
            c.rel,
            &cache,
            c.new,
            c.old,
        )?;
        self.nr_changes = nr_changes;
        if self.opts.write_in_chunks || sink.buf().len() >= FLUSH_BYTES {
            sink.write(self.opts.write_in_chunks);
        }
        Ok(None)
    }

    /// wal2json's format 1 has no truncate element.
    fn events(&self) -> FormatEvents {
        // wal2json's bytes: format 1 has no object for a truncate, nor for
        // backfilled rows or DDL (DDL capture's messages stay messages).
        FormatEvents {
            truncate: false,
            ..FormatEvents::default()
        }
    }

    fn truncate(
        &mut self,
        _sink: &mut dyn Sink,
        _txn: &TxnInfo,
        _stream_xid: Option<u32>,
        _lsn: u64,
        _rel: &RelationMeta,
    ) {
    }

    fn message(
        &mut self,
        sink: &mut dyn Sink,
        _txn: &TxnInfo,
        transactional: bool,
        stream_xid: Option<u32>,
        _lsn: u64,
        prefix: &[u8],
        content: &[u8],
    ) {
        if transactional {
            self.nr_changes += 1;
        }
        self.v1_message(
            sink.buf(),
            self.nr_changes,
            transactional,
            stream_xid,
            prefix,
            content,
        );
        if self.opts.write_in_chunks || !transactional {
            sink.write(true);
        }
    }

    /// A block is one document: the `S` object with a `change` array.
    fn stream_start(&mut self, sink: &mut dyn Sink, xid: u32, first: bool) {
        self.nr_changes = 0;
        control::stream_start_open(sink.buf(), xid, first);
        sink.buf().extend_from_slice(b",\"change\":[");
        if self.opts.write_in_chunks {
            sink.write(true);
        }
    }

    fn stream_stop(&mut self, sink: &mut dyn Sink, _xid: u32) {
        self.v1_commit(sink.buf());
        sink.write(true);
    }

    /// The transaction's document ends before its `P` object.
    fn prepare(&mut self, sink: &mut dyn Sink, txn: &PreparedTxn, lsn: u64, streamed: bool) {
        if !streamed {
            self.v1_commit(sink.buf());
            sink.write(true);
        }
        self.two_phase(sink, control::TwoPhaseEvent::Prepare { streamed }, txn, lsn);
    }
}
