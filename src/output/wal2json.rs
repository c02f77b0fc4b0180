//! wal2json's two output formats, byte for byte.
//!
//! Pure code: everything PostgreSQL-specific reaches this module already
//! rendered (names escaped, type names formatted) or behind the [`TupleValues`]
//! trait, so every layout rule is unit-tested without a server. The layout
//! follows wal2json 2.6: format 1 is one JSON document per transaction (its
//! `columnnames`/`columntypes`/`columnvalues` arrays built side by side),
//! format 2 one JSON object per change.

use std::cell::{OnceCell, RefCell};

use super::encoding::{message_name, ServerEncoding};
use super::json::{classify_number, push_i64, push_json_string, push_lsn, push_u64, NumberText};
use crate::plugin::options::Options;

/// The JSON type tag wal2json derives from a column's type OID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// int2, int4, int8, oid, float4, float8, numeric: unquoted numbers.
    Number,
    /// bool: `true` / `false`.
    Bool,
    /// bytea: the hex digits without the leading `\x`.
    Bytea,
    /// Everything else: a JSON string of the type's text output.
    Text,
}

/// One live column (not dropped, not a system column), in attribute order.
#[derive(Debug, Clone)]
pub struct ColumnMeta {
    /// Index of the attribute in the tuple descriptor.
    pub attr_index: usize,
    /// `attnum`, for `include-column-positions`.
    pub attnum: i16,
    /// The column name as a JSON string.
    pub name_json: Vec<u8>,
    /// The type name as wal2json prints it for the active options, as JSON.
    pub type_json: Vec<u8>,
    /// The type OID as wal2json prints it (`%u` in format 1, `%d` in format 2).
    pub type_oid_text: Vec<u8>,
    /// How the value is encoded.
    pub kind: ValueKind,
    /// `attnotnull`.
    pub not_null: bool,
    /// The default expression as JSON (`"nextval(...)"`), or `None` for null.
    pub default_json: Option<Vec<u8>>,
    /// Member of the primary key.
    pub in_primary_key: bool,
    /// Member of the replica identity index.
    pub in_identity_key: bool,
    /// Variable-length type (`attlen = -1`): may hold an unchanged TOAST pointer.
    pub is_varlena: bool,
}

/// What pubjson knows about a relation, rendered once and cached.
#[derive(Debug, Clone)]
pub struct RelationMeta {
    pub schema: Vec<u8>,
    pub table: Vec<u8>,
    /// How `schema` and `table` may appear in a warning (see
    /// [`message_name`]).
    pub server_encoding: ServerEncoding,
    pub schema_json: Vec<u8>,
    pub table_json: Vec<u8>,
    pub columns: Vec<ColumnMeta>,
    /// The relation has a primary key (`rd_pkindex`).
    pub has_primary_key: bool,
    /// The relation has a replica identity index (`rd_replidindex`).
    pub has_identity_index: bool,
    /// `REPLICA IDENTITY FULL`.
    pub identity_full: bool,
    /// Format 2's per-column pieces, rendered on first use (see [`V2Column`]).
    pub v2_columns: OnceCell<(V2Layout, Vec<V2Column>)>,
    /// Format 1's arrays before the values when every selected column is
    /// printed, rendered on first use (see `Wal2JsonFormat::v1_tuple`).
    pub v1_arrays: RefCell<Vec<(V1Key, Vec<u8>)>>,
}

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

/// An error while rendering a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A numeric type printed something that is not a number.
    NotANumber(String),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::NotANumber(s) => write!(f, "{s} is not a number"),
        }
    }
}

/// The values of one tuple, indexed like [`RelationMeta::columns`].
pub trait TupleValues {
    /// False for columns a publication's column list leaves out.
    fn is_visible(&self, _column: &ColumnMeta) -> bool {
        true
    }
    fn is_null(&self, column: &ColumnMeta) -> bool;
    /// An unchanged TOAST value that logical decoding does not carry.
    fn is_unchanged_toast(&self, column: &ColumnMeta) -> bool;
    /// The three questions above in one call (format 2 asks them for
    /// every column of every change).
    fn cell(&self, column: &ColumnMeta) -> Cell {
        if !self.is_visible(column) {
            Cell::Hidden
        } else if self.is_null(column) {
            Cell::Null
        } else if column.is_varlena && self.is_unchanged_toast(column) {
            Cell::UnchangedToast
        } else {
            Cell::Value
        }
    }
    /// Appends the JSON encoding of a non-null value.
    fn write_value(
        &mut self,
        column: &ColumnMeta,
        numbers_as_strings: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError>;
}

/// What a tuple holds for one column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// Left out by a publication's column list.
    Hidden,
    Null,
    /// An unchanged TOAST value, not in the WAL.
    UnchangedToast,
    Value,
}

/// Encodes a value's text output the way wal2json does.
pub fn push_text_value(
    out: &mut Vec<u8>,
    kind: ValueKind,
    text: &[u8],
    numbers_as_strings: bool,
) -> Result<(), EncodeError> {
    match kind {
        ValueKind::Number => match classify_number(text) {
            NumberText::Invalid => {
                return Err(EncodeError::NotANumber(
                    String::from_utf8_lossy(text).into_owned(),
                ))
            }
            _ if numbers_as_strings => push_json_string(out, text),
            NumberText::Special => out.extend_from_slice(b"null"),
            NumberText::Plain => out.extend_from_slice(text),
        },
        ValueKind::Bool => {
            out.extend_from_slice(if text == b"t" { b"true" } else { b"false" });
        }
        // "\x54617069727573": wal2json starts after the "\x".
        ValueKind::Bytea => push_json_string(out, text.get(2..).unwrap_or(&[])),
        ValueKind::Text => push_json_string(out, text),
    }
    Ok(())
}

/// Transaction facts printed by begin/commit/change/message objects.
#[derive(Debug, Clone, Default)]
pub struct TxnInfo {
    pub xid: u32,
    pub origin: u16,
    /// Commit time as `timestamptz_to_str` prints it (only filled when asked for).
    pub timestamp: Vec<u8>,
    /// `txn->final_lsn`: the commit record's LSN.
    pub final_lsn: u64,
    /// `txn->end_lsn`: end of the commit record, where a consumer restarts.
    pub end_lsn: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

impl ChangeKind {
    fn v1_name(self) -> &'static [u8] {
        match self {
            ChangeKind::Insert => b"insert",
            ChangeKind::Update => b"update",
            ChangeKind::Delete => b"delete",
        }
    }
    fn v2_action(self) -> &'static [u8] {
        match self {
            ChangeKind::Insert => b"\"action\":\"I\"",
            ChangeKind::Update => b"\"action\":\"U\"",
            ChangeKind::Delete => b"\"action\":\"D\"",
        }
    }
    fn v2_letter(self) -> u8 {
        match self {
            ChangeKind::Insert => b'I',
            ChangeKind::Update => b'U',
            ChangeKind::Delete => b'D',
        }
    }
    fn upper(self) -> &'static str {
        match self {
            ChangeKind::Insert => "INSERT",
            ChangeKind::Update => "UPDATE",
            ChangeKind::Delete => "DELETE",
        }
    }
}

/// What kind of change an object reports, beyond its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeHeader {
    pub kind: ChangeKind,
    /// Set when a publication row filter turned an UPDATE into this kind.
    pub transformed_from: Option<ChangeKind>,
    /// In a streamed block: the (sub)transaction the change belongs to,
    /// always printed so a consumer can discard an aborted subtransaction.
    pub stream_xid: Option<u32>,
}

impl ChangeHeader {
    pub fn plain(kind: ChangeKind) -> Self {
        ChangeHeader {
            kind,
            transformed_from: None,
            stream_xid: None,
        }
    }
}

/// `"schema"."table"`, as wal2json's format-2 warnings name a table.
fn qualified_name(rel: &RelationMeta) -> String {
    format!(
        "\"{}\".\"{}\"",
        message_name(&rel.schema, rel.server_encoding),
        message_name(&rel.table, rel.server_encoding)
    )
}

/// Which columns of a tuple a section prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selection {
    All,
    PrimaryKey,
    IdentityKey,
}

fn selected(rel: &RelationMeta, col: &ColumnMeta, selection: Selection) -> bool {
    match selection {
        Selection::All => true,
        // RelationGetIndexAttrBitmap() is NULL without an index: every column.
        Selection::PrimaryKey => !rel.has_primary_key || col.in_primary_key,
        Selection::IdentityKey => !rel.has_identity_index || col.in_identity_key,
    }
}

/// The formatter for one decoding session's options.
pub struct Wal2JsonFormat<'o> {
    opts: &'o Options,
    ht: &'static [u8],
    nl: &'static [u8],
    sp: &'static [u8],
}

impl<'o> Wal2JsonFormat<'o> {
    pub fn new(opts: &'o Options) -> Self {
        let (ht, nl, sp): (&[u8], &[u8], &[u8]) = if opts.pretty_print {
            (b"\t", b"\n", b" ")
        } else {
            (b"", b"", b"")
        };
        Wal2JsonFormat { opts, ht, nl, sp }
    }

    fn tabs(&self, out: &mut Vec<u8>, n: usize) {
        for _ in 0..n {
            out.extend_from_slice(self.ht);
        }
    }

    /// `<tabs>"key":<sp>` as format 1 prints object keys.
    fn v1_key(&self, out: &mut Vec<u8>, tabs: usize, key: &[u8]) {
        self.tabs(out, tabs);
        out.push(b'"');
        out.extend_from_slice(key);
        out.extend_from_slice(b"\":");
        out.extend_from_slice(self.sp);
    }

    // ---------------------------------------------------------------- format 1

    /// The opening of a format-1 transaction document, up to `"change":[`.
    pub fn v1_begin(&self, out: &mut Vec<u8>, txn: &TxnInfo) {
        let o = self.opts;
        out.push(b'{');
        out.extend_from_slice(self.nl);
        if o.include_xids {
            self.v1_key(out, 1, b"xid");
            push_u64(out, txn.xid as u64);
            out.push(b',');
            out.extend_from_slice(self.nl);
        }
        if o.include_lsn {
            self.v1_key(out, 1, b"nextlsn");
            out.push(b'"');
            push_lsn(out, txn.end_lsn);
            out.extend_from_slice(b"\",");
            out.extend_from_slice(self.nl);
        }
        if o.include_timestamp {
            self.v1_key(out, 1, b"timestamp");
            out.push(b'"');
            out.extend_from_slice(&txn.timestamp);
            out.extend_from_slice(b"\",");
            out.extend_from_slice(self.nl);
        }
        if o.include_origin {
            self.v1_key(out, 1, b"origin");
            push_u64(out, txn.origin as u64);
            out.push(b',');
            out.extend_from_slice(self.nl);
        }
        self.v1_key(out, 1, b"change");
        out.push(b'[');
    }

    /// The closing of a format-1 transaction document.
    pub fn v1_commit(&self, out: &mut Vec<u8>) {
        if !self.opts.write_in_chunks {
            out.extend_from_slice(self.nl);
        }
        out.extend_from_slice(self.ht);
        out.push(b']');
        out.extend_from_slice(self.nl);
        out.push(b'}');
    }

    /// Starts one element of the `change` array; `nr_changes` counts it already.
    fn v1_element_start(&self, out: &mut Vec<u8>, nr_changes: u64) {
        if !self.opts.write_in_chunks {
            out.extend_from_slice(self.nl);
        }
        self.tabs(out, 2);
        if nr_changes > 1 {
            out.push(b',');
        }
        out.push(b'{');
        out.extend_from_slice(self.nl);
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
        if kind != ChangeKind::Insert && !rel.has_identity_index && !rel.identity_full {
            return Some(format!(
                "table \"{table}\" without primary key or replica identity is nothing"
            ));
        }
        let missing = match kind {
            ChangeKind::Insert | ChangeKind::Update => !has_new,
            ChangeKind::Delete => !has_old,
        };
        missing.then(|| format!("no tuple data for {} in table \"{table}\"", kind.upper()))
    }

    /// Appends one INSERT/UPDATE/DELETE element to a format-1 document.
    /// The caller has already checked [`Self::v1_skip_reason`].
    pub fn v1_change(
        &self,
        out: &mut Vec<u8>,
        nr_changes: u64,
        header: &ChangeHeader,
        rel: &RelationMeta,
        new: Option<&mut dyn TupleValues>,
        old: Option<&mut dyn TupleValues>,
    ) -> Result<(), EncodeError> {
        let o = self.opts;
        let kind = header.kind;
        self.v1_element_start(out, nr_changes);
        self.v1_key(out, 3, b"kind");
        out.push(b'"');
        out.extend_from_slice(kind.v1_name());
        out.extend_from_slice(b"\",");
        out.extend_from_slice(self.nl);
        if let Some(original) = header.transformed_from {
            self.v1_key(out, 3, b"transformedfrom");
            out.push(b'"');
            out.extend_from_slice(original.v1_name());
            out.extend_from_slice(b"\",");
            out.extend_from_slice(self.nl);
        }
        if let Some(xid) = header.stream_xid {
            self.v1_key(out, 3, b"xid");
            push_u64(out, xid as u64);
            out.push(b',');
            out.extend_from_slice(self.nl);
        }
        if o.include_schemas {
            self.v1_key(out, 3, b"schema");
            out.extend_from_slice(&rel.schema_json);
            out.push(b',');
            out.extend_from_slice(self.nl);
        }
        self.v1_key(out, 3, b"table");
        out.extend_from_slice(&rel.table_json);
        out.push(b',');
        out.extend_from_slice(self.nl);

        let with_pk = o.include_pk && rel.has_primary_key;
        match kind {
            ChangeKind::Insert => {
                if let Some(new) = new {
                    self.v1_tuple(out, rel, new, Selection::All, false, with_pk)?;
                    if with_pk {
                        self.v1_pk(out, rel, false);
                    }
                }
            }
            ChangeKind::Update => {
                if let Some(new) = new {
                    self.v1_tuple(out, rel, &mut *new, Selection::All, false, true)?;
                    if with_pk {
                        self.v1_pk(out, rel, true);
                    }
                    match old {
                        Some(old) => self.v1_tuple(out, rel, old, Selection::All, true, false)?,
                        None => {
                            self.v1_tuple(out, rel, new, Selection::IdentityKey, true, false)?
                        }
                    }
                }
            }
            ChangeKind::Delete => {
                if let Some(old) = old {
                    if with_pk {
                        self.v1_pk(out, rel, true);
                    }
                    self.v1_tuple(out, rel, old, Selection::IdentityKey, true, false)?;
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
    /// of the relation and copied from a rendering cached in the relation.
    fn v1_tuple(
        &self,
        out: &mut Vec<u8>,
        rel: &RelationMeta,
        tuple: &mut dyn TupleValues,
        selection: Selection,
        replident: bool,
        addcomma: bool,
    ) -> Result<(), EncodeError> {
        let o = self.opts;
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
            let mut cache = rel.v1_arrays.borrow_mut();
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
                out.extend_from_slice(self.sp);
            }
            *first = false;
        };
        self.v1_key(out, depth, key(b"columnvalues", b"keyvalues"));
        out.push(b'[');
        let mut first = true;
        for col in &rel.columns {
            if !printed(&*tuple, col) {
                continue;
            }
            separator(out, &mut first);
            if tuple.is_null(col) {
                out.extend_from_slice(b"null");
            } else {
                tuple.write_value(col, o.numeric_data_types_as_string, out)?;
            }
        }
        out.push(b']');
        if replident {
            out.extend_from_slice(self.nl);
            self.tabs(out, 3);
            out.push(b'}');
        } else if addcomma {
            out.push(b',');
        }
        out.extend_from_slice(self.nl);
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
        let o = self.opts;
        let depth = if replident { 4 } else { 3 };
        let key = |s: &'static [u8], k: &'static [u8]| if replident { k } else { s };
        let separator = |out: &mut Vec<u8>, first: &mut bool| {
            if !*first {
                out.push(b',');
                out.extend_from_slice(self.sp);
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
            out.extend_from_slice(self.nl);
        };

        if replident {
            self.v1_key(out, 3, b"oldkeys");
            out.push(b'{');
            out.extend_from_slice(self.nl);
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
                    out.extend_from_slice(self.nl);
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
        let o = self.opts;
        self.v1_key(out, 3, b"pk");
        out.push(b'{');
        out.extend_from_slice(self.nl);
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
                out.extend_from_slice(self.sp);
            }
            out.extend_from_slice(&col.name_json);
            if o.include_types {
                if !first {
                    types.push(b',');
                    types.extend_from_slice(self.sp);
                }
                types.extend_from_slice(&col.type_json);
            }
            first = false;
        }
        out.extend_from_slice(b"],");
        out.extend_from_slice(self.nl);
        out.extend_from_slice(&types);
        out.push(b']');
        out.extend_from_slice(self.nl);
        self.tabs(out, 3);
        out.push(b'}');
        if addcomma {
            out.push(b',');
        }
        out.extend_from_slice(self.nl);
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
            out.extend_from_slice(self.nl);
        }
        if !transactional {
            out.push(b'{');
            out.extend_from_slice(self.nl);
            self.v1_key(out, 1, b"change");
            out.push(b'[');
            out.extend_from_slice(self.nl);
        }
        self.tabs(out, 2);
        if transactional && nr_changes > 1 {
            out.push(b',');
        }
        out.push(b'{');
        out.extend_from_slice(self.nl);
        self.v1_key(out, 3, b"kind");
        out.extend_from_slice(b"\"message\",");
        out.extend_from_slice(self.nl);
        self.v1_key(out, 3, b"transactional");
        out.extend_from_slice(if transactional { b"true," } else { b"false," });
        out.extend_from_slice(self.nl);
        if let Some(xid) = stream_xid {
            self.v1_key(out, 3, b"xid");
            push_u64(out, xid as u64);
            out.push(b',');
            out.extend_from_slice(self.nl);
        }
        self.v1_key(out, 3, b"prefix");
        push_json_string(out, prefix);
        out.push(b',');
        out.extend_from_slice(self.nl);
        self.v1_key(out, 3, b"content");
        push_json_string(out, content);
        out.extend_from_slice(self.nl);
        self.tabs(out, 2);
        out.push(b'}');
        if !transactional {
            out.extend_from_slice(self.nl);
            self.tabs(out, 1);
            out.push(b']');
            out.extend_from_slice(self.nl);
            out.push(b'}');
        }
    }

    // ---------------------------------------------------------------- format 2

    fn v2_txn_fields(&self, out: &mut Vec<u8>, txn: &TxnInfo) {
        let o = self.opts;
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
        let no_identity = !rel.has_identity_index && !rel.identity_full;
        let what = match kind {
            ChangeKind::Insert | ChangeKind::Update if !has_new => "no tuple data for",
            ChangeKind::Update | ChangeKind::Delete if !has_old && no_identity => {
                "no tuple identifier for"
            }
            _ => return None,
        };
        Some(format!(
            "{what} {} in table {}",
            kind.upper(),
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
        mut new: Option<&mut dyn TupleValues>,
        mut old: Option<&mut dyn TupleValues>,
    ) -> Result<Option<String>, EncodeError> {
        let o = self.opts;
        let kind = header.kind;
        out.push(b'{');
        out.extend_from_slice(kind.v2_action());
        if let Some(original) = header.transformed_from {
            out.extend_from_slice(b",\"transformedfrom\":\"");
            out.push(original.v2_letter());
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

        if let Some(new) = new.as_deref_mut() {
            out.extend_from_slice(b",\"columns\":[");
            self.v2_tuple(out, rel, new, V2Section::Columns)?;
            out.push(b']');
        }
        let mut warning = None;
        if let Some(old) = old.as_deref_mut() {
            out.extend_from_slice(b",\"identity\":[");
            self.v2_tuple(out, rel, old, V2Section::Identity)?;
            out.push(b']');
        } else if kind == ChangeKind::Update {
            match new.as_deref_mut() {
                Some(new) if rel.has_primary_key || rel.has_identity_index => {
                    out.extend_from_slice(b",\"identity\":[");
                    self.v2_tuple(out, rel, new, V2Section::Identity)?;
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
                    self.v2_tuple(out, rel, old, V2Section::PrimaryKey)?;
                } else if let Some(new) = new {
                    self.v2_tuple(out, rel, new, V2Section::PrimaryKey)?;
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
        tuple: &mut dyn TupleValues,
        section: V2Section,
    ) -> Result<(), EncodeError> {
        let layout = V2Layout::of(self.opts);
        let rendered;
        let pieces = match rel.v2_columns.get_or_init(|| {
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
            let is_null = match tuple.cell(col) {
                Cell::Hidden | Cell::UnchangedToast => continue,
                Cell::Null => true,
                Cell::Value => false,
            };
            if section == V2Section::PrimaryKey {
                out.extend_from_slice(&piece.head[skip..]);
                out.push(b'}');
                skip = 0;
                continue;
            }
            out.extend_from_slice(&piece.value_head[skip..]);
            skip = 0;
            if is_null {
                out.extend_from_slice(b"null");
            } else {
                tuple.write_value(col, numbers_as_strings, out)?;
            }
            if section == V2Section::Columns {
                out.extend_from_slice(&piece.change_tail);
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
        let o = self.opts;
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
        let o = self.opts;
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum V2Section {
    Columns,
    Identity,
    PrimaryKey,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::json::json_string;

    /// A tuple of literal text values; `None` is NULL, `Some("<toast>")` an unchanged TOAST value.
    struct Literal(Vec<Option<&'static str>>);

    impl TupleValues for Literal {
        fn is_null(&self, c: &ColumnMeta) -> bool {
            self.0[c.attr_index].is_none()
        }
        fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
            self.0[c.attr_index] == Some("<toast>")
        }
        fn write_value(
            &mut self,
            c: &ColumnMeta,
            s: bool,
            out: &mut Vec<u8>,
        ) -> Result<(), EncodeError> {
            push_text_value(
                out,
                c.kind,
                self.0[c.attr_index].unwrap_or_default().as_bytes(),
                s,
            )
        }
    }

    fn column(i: usize, name: &str, ty: &str, kind: ValueKind, pk: bool) -> ColumnMeta {
        ColumnMeta {
            attr_index: i,
            attnum: i as i16 + 1,
            name_json: json_string(name.as_bytes()),
            type_json: json_string(ty.as_bytes()),
            type_oid_text: b"23".to_vec(),
            kind,
            not_null: pk,
            default_json: None,
            in_primary_key: pk,
            in_identity_key: pk,
            is_varlena: kind == ValueKind::Text,
        }
    }

    fn relation() -> RelationMeta {
        RelationMeta {
            schema: b"public".to_vec(),
            table: b"t".to_vec(),
            server_encoding: ServerEncoding::Utf8,
            schema_json: json_string(b"public"),
            table_json: json_string(b"t"),
            columns: vec![
                column(0, "id", "integer", ValueKind::Number, true),
                column(1, "name", "text", ValueKind::Text, false),
                column(2, "ok", "boolean", ValueKind::Bool, false),
            ],
            has_primary_key: true,
            has_identity_index: true,
            identity_full: false,
            v2_columns: OnceCell::new(),
            v1_arrays: RefCell::default(),
        }
    }

    fn s(v: &[u8]) -> &str {
        std::str::from_utf8(v).unwrap()
    }

    #[test]
    fn v2_insert_default_options() {
        let opts = Options {
            format_version: 2,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        let mut new = Literal(vec![Some("1"), Some("a\"b"), Some("t")]);
        let r = f
            .v2_change(
                &mut out,
                &TxnInfo::default(),
                0,
                &ChangeHeader::plain(ChangeKind::Insert),
                &relation(),
                Some(&mut new),
                None,
            )
            .unwrap();
        assert_eq!(r, None);
        assert_eq!(
            s(&out),
            r#"{"action":"I","schema":"public","table":"t","columns":[{"name":"id","type":"integer","value":1},{"name":"name","type":"text","value":"a\"b"},{"name":"ok","type":"boolean","value":true}]}"#
        );
    }

    #[test]
    fn v2_update_identity_from_new_tuple_and_pk() {
        let opts = Options {
            format_version: 2,
            include_pk: true,
            include_types: false,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        let mut new = Literal(vec![Some("1"), Some("<toast>"), None]);
        f.v2_change(
            &mut out,
            &TxnInfo::default(),
            0,
            &ChangeHeader::plain(ChangeKind::Update),
            &relation(),
            Some(&mut new),
            None,
        )
        .unwrap();
        assert_eq!(
            s(&out),
            r#"{"action":"U","schema":"public","table":"t","columns":[{"name":"id","value":1},{"name":"ok","value":null}],"identity":[{"name":"id","value":1}],"pk":[{"name":"id"}]}"#
        );
    }

    #[test]
    fn v2_delete_without_identity_is_skipped_with_warning() {
        let opts = Options {
            format_version: 2,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut rel = relation();
        rel.has_identity_index = false;
        rel.has_primary_key = false;
        assert_eq!(
            f.v2_skip_reason(ChangeKind::Delete, &rel, false, false)
                .unwrap(),
            "no tuple identifier for DELETE in table \"public\".\"t\""
        );
        assert_eq!(
            f.v2_skip_reason(ChangeKind::Update, &rel, false, false)
                .unwrap(),
            "no tuple data for UPDATE in table \"public\".\"t\""
        );
        assert_eq!(
            f.v2_skip_reason(ChangeKind::Insert, &rel, true, false),
            None
        );
    }

    #[test]
    fn v2_transaction_and_message_fields() {
        let opts = Options {
            format_version: 2,
            include_xids: true,
            include_timestamp: true,
            include_lsn: true,
            include_origin: true,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let txn = TxnInfo {
            xid: 7,
            origin: 0,
            timestamp: b"2024-01-01 00:00:00+00".to_vec(),
            final_lsn: 0x10,
            end_lsn: 0x1_0000_0020,
        };
        let mut out = Vec::new();
        f.v2_begin(&mut out, &txn);
        out.push(b'\n');
        f.v2_commit(&mut out, &txn, 0x10);
        out.push(b'\n');
        f.v2_message(&mut out, None, None, 0x30, b"p", b"c\0d");
        assert_eq!(
            s(&out),
            "{\"action\":\"B\",\"xid\":7,\"timestamp\":\"2024-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"1/20\"}\n\
             {\"action\":\"C\",\"xid\":7,\"timestamp\":\"2024-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"1/20\"}\n\
             {\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"origin\":null,\"lsn\":\"0/30\",\"transactional\":false,\"prefix\":\"p\",\"content\":\"c\\u0000d\"}"
        );
    }

    #[test]
    fn v1_cached_arrays_match_fresh_rendering() {
        // One relation reused across changes (arrays cached once every
        // column is printed) against a fresh relation per change.
        let tuples: Vec<Vec<Option<&'static str>>> = vec![
            vec![Some("1"), Some("a"), Some("t")],
            vec![Some("2"), Some("<toast>"), Some("f")],
            vec![Some("3"), None, None],
            vec![None, Some("b"), Some("t")],
            vec![Some("4"), Some("c"), Some("f")],
        ];
        for pretty in [false, true] {
            let opts = Options {
                pretty_print: pretty,
                include_pk: true,
                include_type_oids: true,
                include_not_null: true,
                include_default: true,
                include_column_positions: true,
                ..Options::default()
            };
            let f = Wal2JsonFormat::new(&opts);
            let shared = relation();
            for (i, values) in tuples.iter().chain(tuples.iter()).enumerate() {
                for kind in [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete] {
                    let render = |rel: &RelationMeta| {
                        let mut out = Vec::new();
                        let mut new = Literal(values.clone());
                        let mut old = Literal(values.clone());
                        let (new, old): (
                            Option<&mut dyn TupleValues>,
                            Option<&mut dyn TupleValues>,
                        ) = match kind {
                            ChangeKind::Insert => (Some(&mut new), None),
                            ChangeKind::Update => (Some(&mut new), Some(&mut old)),
                            ChangeKind::Delete => (None, Some(&mut old)),
                        };
                        f.v1_change(
                            &mut out,
                            i as u64 + 1,
                            &ChangeHeader::plain(kind),
                            rel,
                            new,
                            old,
                        )
                        .unwrap();
                        out
                    };
                    assert_eq!(render(&shared), render(&relation()), "{kind:?} {values:?}");
                }
            }
        }
    }

    #[test]
    fn v1_document_plain_and_pretty() {
        for pretty in [false, true] {
            let opts = Options {
                pretty_print: pretty,
                include_pk: true,
                ..Options::default()
            };
            let f = Wal2JsonFormat::new(&opts);
            let mut out = Vec::new();
            f.v1_begin(&mut out, &TxnInfo::default());
            let mut new = Literal(vec![Some("2"), None, Some("f")]);
            f.v1_change(
                &mut out,
                1,
                &ChangeHeader::plain(ChangeKind::Insert),
                &relation(),
                Some(&mut new),
                None,
            )
            .unwrap();
            let mut old = Literal(vec![Some("2"), None, None]);
            f.v1_change(
                &mut out,
                2,
                &ChangeHeader::plain(ChangeKind::Delete),
                &relation(),
                None,
                Some(&mut old),
            )
            .unwrap();
            f.v1_commit(&mut out);
            let expected = if pretty {
                "{\n\t\"change\": [\n\t\t{\n\t\t\t\"kind\": \"insert\",\n\t\t\t\"schema\": \"public\",\n\t\t\t\"table\": \"t\",\n\
                 \t\t\t\"columnnames\": [\"id\", \"name\", \"ok\"],\n\t\t\t\"columntypes\": [\"integer\", \"text\", \"boolean\"],\n\
                 \t\t\t\"columnvalues\": [2, null, false],\n\t\t\t\"pk\": {\n\t\t\t\t\"pknames\": [\"id\"],\n\t\t\t\t\"pktypes\": [\"integer\"]\n\t\t\t}\n\t\t}\n\
                 \t\t,{\n\t\t\t\"kind\": \"delete\",\n\t\t\t\"schema\": \"public\",\n\t\t\t\"table\": \"t\",\n\
                 \t\t\t\"pk\": {\n\t\t\t\t\"pknames\": [\"id\"],\n\t\t\t\t\"pktypes\": [\"integer\"]\n\t\t\t},\n\
                 \t\t\t\"oldkeys\": {\n\t\t\t\t\"keynames\": [\"id\"],\n\t\t\t\t\"keytypes\": [\"integer\"],\n\t\t\t\t\"keyvalues\": [2]\n\t\t\t}\n\t\t}\n\t]\n}"
            } else {
                "{\"change\":[{\"kind\":\"insert\",\"schema\":\"public\",\"table\":\"t\",\"columnnames\":[\"id\",\"name\",\"ok\"],\
                 \"columntypes\":[\"integer\",\"text\",\"boolean\"],\"columnvalues\":[2,null,false],\"pk\":{\"pknames\":[\"id\"],\"pktypes\":[\"integer\"]}}\
                 ,{\"kind\":\"delete\",\"schema\":\"public\",\"table\":\"t\",\"pk\":{\"pknames\":[\"id\"],\"pktypes\":[\"integer\"]},\
                 \"oldkeys\":{\"keynames\":[\"id\"],\"keytypes\":[\"integer\"],\"keyvalues\":[2]}}]}"
            };
            assert_eq!(s(&out), expected, "pretty={pretty}");
        }
    }

    /// A tuple whose second column a column list hides.
    struct Masked(Literal);
    impl TupleValues for Masked {
        fn is_visible(&self, c: &ColumnMeta) -> bool {
            c.attr_index != 1
        }
        fn is_null(&self, c: &ColumnMeta) -> bool {
            self.0.is_null(c)
        }
        fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
            self.0.is_unchanged_toast(c)
        }
        fn write_value(
            &mut self,
            c: &ColumnMeta,
            s: bool,
            out: &mut Vec<u8>,
        ) -> Result<(), EncodeError> {
            self.0.write_value(c, s, out)
        }
    }

    #[test]
    fn transformed_changes_are_marked_and_column_lists_apply() {
        let opts = Options {
            format_version: 2,
            include_types: false,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        let mut new = Masked(Literal(vec![Some("1"), Some("hidden"), Some("t")]));
        f.v2_change(
            &mut out,
            &TxnInfo::default(),
            0,
            &ChangeHeader {
                kind: ChangeKind::Insert,
                transformed_from: Some(ChangeKind::Update),
                stream_xid: Some(12),
            },
            &relation(),
            Some(&mut new),
            None,
        )
        .unwrap();
        assert_eq!(
            s(&out),
            r#"{"action":"I","transformedfrom":"U","xid":12,"schema":"public","table":"t","columns":[{"name":"id","value":1},{"name":"ok","value":true}]}"#
        );
        let opts = Options {
            include_types: false,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        let mut old = Masked(Literal(vec![Some("1"), Some("hidden"), Some("t")]));
        f.v1_change(
            &mut out,
            1,
            &ChangeHeader {
                kind: ChangeKind::Delete,
                transformed_from: Some(ChangeKind::Update),
                stream_xid: Some(12),
            },
            &relation(),
            None,
            Some(&mut old),
        )
        .unwrap();
        assert_eq!(
            s(&out),
            r#"{"kind":"delete","transformedfrom":"update","xid":12,"schema":"public","table":"t","oldkeys":{"keynames":["id"],"keyvalues":[1]}}"#
        );
    }

    #[test]
    fn v1_not_null_without_types_is_an_empty_array() {
        let opts = Options {
            include_types: false,
            include_not_null: true,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        let mut new = Literal(vec![Some("1"), None, Some("t")]);
        f.v1_change(
            &mut out,
            1,
            &ChangeHeader::plain(ChangeKind::Insert),
            &relation(),
            Some(&mut new),
            None,
        )
        .unwrap();
        assert_eq!(
            s(&out),
            r#"{"kind":"insert","schema":"public","table":"t","columnnames":["id","name","ok"],"columnoptionals":[],"columnvalues":[1,null,true]}"#
        );
        let opts = Options {
            include_not_null: true,
            include_column_positions: true,
            ..Options::default()
        };
        let f = Wal2JsonFormat::new(&opts);
        let mut out = Vec::new();
        f.v1_change(
            &mut out,
            1,
            &ChangeHeader::plain(ChangeKind::Insert),
            &relation(),
            Some(&mut new),
            None,
        )
        .unwrap();
        assert_eq!(
            s(&out),
            r#"{"kind":"insert","schema":"public","table":"t","columnnames":["id","name","ok"],"columntypes":["integer","text","boolean"],"columnpositions":[1,2,3],"columnoptionals":[false,true,true],"columnvalues":[1,null,true]}"#
        );
    }

    /// Random relations and values, every option combination: the output
    /// always parses as JSON and carries the values unchanged.
    #[test]
    fn random_rows_always_give_valid_json() {
        use crate::output::json::tests::Rng;
        let mut rng = Rng(0xC0FFEE);
        for round in 0..3_000 {
            let ncols = 1 + rng.below(5) as usize;
            let names: Vec<String> = (0..ncols).map(|_| rng.string(8)).collect();
            let values: Vec<Option<&'static str>> = (0..ncols)
                .map(|_| match rng.below(4) {
                    0 => None,
                    _ => Some(Box::leak(rng.string(20).into_boxed_str()) as &'static str),
                })
                .collect();
            let mut rel = relation();
            rel.schema = rng.string(6).into_bytes();
            rel.table = rng.string(6).into_bytes();
            rel.schema_json = json_string(&rel.schema);
            rel.table_json = json_string(&rel.table);
            rel.columns = names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let mut c = column(i, n, &rng.string(6), ValueKind::Text, i == 0);
                    c.default_json =
                        (rng.below(2) == 0).then(|| json_string(rng.string(6).as_bytes()));
                    c
                })
                .collect();
            let opts = Options {
                format_version: 1 + (round % 2) as u8,
                pretty_print: rng.below(2) == 0,
                include_xids: rng.below(2) == 0,
                include_lsn: rng.below(2) == 0,
                include_pk: rng.below(2) == 0,
                include_types: rng.below(2) == 0,
                include_type_oids: rng.below(2) == 0,
                include_not_null: rng.below(2) == 0,
                include_default: rng.below(2) == 0,
                include_column_positions: rng.below(2) == 0,
                include_schemas: rng.below(2) == 0,
                ..Options::default()
            };
            let f = Wal2JsonFormat::new(&opts);
            let kind =
                [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete][rng.below(3) as usize];
            let mut new = Literal(values.clone());
            let mut old = Literal(values.clone());
            let header = ChangeHeader::plain(kind);
            let mut out = Vec::new();
            let (new_arg, old_arg): (Option<&mut dyn TupleValues>, Option<&mut dyn TupleValues>) =
                match kind {
                    ChangeKind::Insert => (Some(&mut new), None),
                    ChangeKind::Update => (Some(&mut new), Some(&mut old)),
                    ChangeKind::Delete => (None, Some(&mut old)),
                };
            if opts.format_version == 1 {
                f.v1_begin(&mut out, &TxnInfo::default());
                f.v1_change(&mut out, 1, &header, &rel, new_arg, old_arg)
                    .unwrap();
                f.v1_message(
                    &mut out,
                    2,
                    true,
                    None,
                    rng.string(5).as_bytes(),
                    rng.string(10).as_bytes(),
                );
                f.v1_commit(&mut out);
            } else {
                f.v2_change(
                    &mut out,
                    &TxnInfo::default(),
                    0,
                    &header,
                    &rel,
                    new_arg,
                    old_arg,
                )
                .unwrap();
            }
            let doc: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
                panic!("round {round}: {e}\n{}", String::from_utf8_lossy(&out))
            });
            // The first column's value comes back as written.
            if opts.format_version == 2 && kind != ChangeKind::Delete {
                let first = &doc["columns"][0];
                assert_eq!(first["name"].as_str(), Some(names[0].as_str()));
                assert_eq!(first["value"].as_str(), values[0]);
            }
        }
    }

    #[test]
    fn v1_skip_reasons() {
        let opts = Options::default();
        let f = Wal2JsonFormat::new(&opts);
        let mut rel = relation();
        assert_eq!(
            f.v1_skip_reason(ChangeKind::Insert, &rel, false, false)
                .unwrap(),
            "no tuple data for INSERT in table \"t\""
        );
        rel.has_identity_index = false;
        assert_eq!(
            f.v1_skip_reason(ChangeKind::Update, &rel, true, false)
                .unwrap(),
            "table \"t\" without primary key or replica identity is nothing"
        );
        rel.identity_full = true;
        assert_eq!(
            f.v1_skip_reason(ChangeKind::Delete, &rel, false, true),
            None
        );
    }

    #[test]
    fn numbers_follow_wal2json_rules() {
        let mut out = Vec::new();
        push_text_value(&mut out, ValueKind::Number, b"NaN", false).unwrap();
        out.push(b' ');
        push_text_value(&mut out, ValueKind::Number, b"-Infinity", true).unwrap();
        out.push(b' ');
        push_text_value(&mut out, ValueKind::Number, b"1.50", true).unwrap();
        out.push(b' ');
        push_text_value(&mut out, ValueKind::Bytea, b"\\xdead", false).unwrap();
        assert_eq!(s(&out), "null \"-Infinity\" \"1.50\" \"dead\"");
        assert_eq!(
            push_text_value(&mut out, ValueKind::Number, b"abc", false),
            Err(EncodeError::NotANumber("abc".into()))
        );
    }
}
