//! The relation and change model every format renders and the decoding
//! core fills in: relations and their columns, the kinds of change, the
//! transaction facts, and the values of a tuple behind [`TupleValues`].
//!
//! Pure code: no PostgreSQL calls, and nothing from the layers above.
//! PostgreSQL's side (`pg/relation.rs`, `pg/tuple.rs`) builds these values;
//! the formats (`output/`) only read them and encode the [`Value`]s of a
//! tuple each their own way.

use std::any::Any;
use std::cell::OnceCell;

/// How the database's text becomes output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEncoding {
    /// UTF-8: bytes are copied (wal2json's output).
    Utf8,
    /// SQL_ASCII declares no encoding: bytes that form UTF-8 are copied,
    /// the others written as their Latin-1 reading (`\u00XX`).
    SqlAscii,
    /// Any other encoding: converted to UTF-8, written as `\uXXXX`.
    Other,
}

/// How the catalog reader names, classifies and reads a column's type for
/// the session's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeRendering {
    pub name: TypeName,
    /// With include-domain-data-type, a domain's values are classified (and
    /// its OID printed) as its base type's.
    pub classify_domain_base: bool,
    /// The type OID is printed as a signed integer (`%d`).
    pub signed_oid: bool,
    /// Which values the format takes in their binary form.
    pub reads: ValueReads,
    /// The catalog reader also fills [`ColumnMeta::details`] (the Debezium
    /// format's schema change events describe each column as Debezium's
    /// PostgreSQL connector does).
    pub column_details: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeName {
    /// `format_type_extended` with the column's typmod: `character varying(10)`.
    WithTypmod,
    /// `pg_type.typname`: `varchar`.
    Plain,
}

/// Which values of a tuple arrive in their binary form ([`Value`]); every
/// other value arrives as its output function's text
/// ([`Value::OutputText`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueReads {
    /// Only where the binary form prints exactly as the output function
    /// would in this session (wal2json's formats print output function
    /// text): int2, int4, int8, oid, bool, text types, numeric, jsonb, and
    /// timestamp (timestamptz) when DateStyle is ISO (and the time zone
    /// UTC). Types are taken as they are, a domain through its own output.
    AsText,
    /// Every type with a binary reading ([`Value`]'s cases), domains as
    /// their base type, arrays element by element (format 3).
    Typed,
}

/// How a column's values are encoded, derived from its type OID (wal2json's
/// rules).
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
    /// The type name as the format prints it for the active options, as JSON.
    pub type_json: Vec<u8>,
    /// The type OID as the format prints it (`%u` in format 1, `%d` in format 2).
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
    /// For a domain column (with type names): its base type (the first
    /// that is not a domain) as a JSON string with its modifier, and its OID.
    pub domain_base: Option<(Vec<u8>, u32)>,
    /// `attlen` and `attbyval`: how a value is stored (see [`Image`]).
    pub attlen: i16,
    pub byval: bool,
    /// More of the catalog, for a format whose [`TypeRendering`] asks
    /// (`column_details`); `None` otherwise.
    pub details: Option<Box<ColumnDetails>>,
}

/// A type as the catalog describes it (`pg_type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeFacts {
    pub oid: u32,
    /// `typname`, unqualified, in the server's encoding.
    pub name: Vec<u8>,
    /// `typtype`: `b` base, `c` composite, `d` domain, `e` enum, `p`
    /// pseudo, `r` range, `m` multirange.
    pub kind: u8,
    /// Its input function is `array_in` (an array type).
    pub array_input: bool,
}

/// What the catalog says of a column beyond what its values need: its
/// type as declared, the type at the root of a domain, its default. Read
/// once per relation, only for a format that asks
/// ([`TypeRendering::column_details`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDetails {
    /// `atttypmod`.
    pub typmod: i32,
    /// The column's type (a domain itself, for a domain column).
    pub declared: TypeFacts,
    /// The first type under the domains (`getBaseTypeAndTypmod`), the
    /// declared type when it is no domain.
    pub root: TypeFacts,
    /// The typmod the domains apply to `root` (`typmod` without domains).
    pub root_typmod: i32,
    /// The declared type's `typnotnull` (a domain's `NOT NULL`).
    pub type_not_null: bool,
    /// `pg_get_expr(adbin)`: the default's expression (a stored generated
    /// column's generation expression), in the server's encoding.
    pub default_expr: Option<Vec<u8>>,
}

/// A unique index of a relation (its primary key's included), as the
/// catalog describes it: read only for a format that asks
/// ([`TypeRendering::column_details`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueIndex {
    /// The index's name, in the server's encoding.
    pub name: Vec<u8>,
    pub primary: bool,
    /// `indisclustered`.
    pub clustered: bool,
    /// The attribute numbers of its columns in index order, the key
    /// columns first (`indkey`): 0 for an expression.
    pub attnums: Vec<i16>,
    /// How many of them are key columns (`indnkeyatts`; the others are
    /// `INCLUDE`d).
    pub key_columns: usize,
}

/// A non-null value as stored, for telling whether two values of a column
/// are the same (what `datum_image_eq` compares): equal images, same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Image<'a> {
    /// A pass-by-value datum.
    Word(u64),
    /// A pass-by-reference value's bytes (a varlena's data, detoasted).
    Bytes(&'a [u8]),
}

/// `pg_class.relreplident`: which old values a change's WAL record keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// The primary key's columns (none without a primary key).
    Default,
    Nothing,
    /// Every column.
    Full,
    /// The columns of a chosen unique index.
    Index,
}

/// What pubjson knows about a relation, read from the catalogs once and
/// cached (what a format renders from it is cached beside it, see
/// `output::format::RelationRender`).
#[derive(Debug, Clone)]
pub struct RelationMeta {
    /// The relation's OID.
    pub relid: u32,
    pub schema: Vec<u8>,
    pub table: Vec<u8>,
    /// How `schema` and `table` may appear in a warning (see
    /// `text::encoding::message_name`), and how embedded JSON text is
    /// written.
    pub server_encoding: ServerEncoding,
    pub schema_json: Vec<u8>,
    pub table_json: Vec<u8>,
    pub columns: Vec<ColumnMeta>,
    /// The relation has a primary key (`rd_pkindex`).
    pub has_primary_key: bool,
    /// The relation has a replica identity index (`rd_replidindex`).
    pub has_identity_index: bool,
    /// The replica identity setting.
    pub identity: ReplicaIdentity,
    /// Its unique indexes, for a format whose [`TypeRendering`] asks
    /// (`column_details`); empty otherwise.
    pub unique_indexes: Vec<UniqueIndex>,
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
    /// A non-null value, read as the session's [`ValueReads`] say.
    fn value<'a>(&'a self, column: &'a ColumnMeta) -> Value<'a>;
    /// [`cell`](Self::cell) and, for a value, [`value`](Self::value) in one
    /// call: what the formats' value loops ask of every column of every
    /// change.
    fn read<'a>(&'a self, column: &'a ColumnMeta) -> CellValue<'a> {
        match self.cell(column) {
            Cell::Hidden => CellValue::Hidden,
            Cell::Null => CellValue::Null,
            Cell::UnchangedToast => CellValue::UnchangedToast,
            Cell::Value => CellValue::Value(self.value(column)),
        }
    }
    /// The output function's text of a non-null value: what a format
    /// writes when it does not print a binary form itself, or when that
    /// form could not be read.
    fn text(&self, column: &ColumnMeta) -> &[u8];
    /// The elements of a non-null array value ([`Value::Array`]), lent to
    /// `visit`; by default there are none (`visit` is not called).
    fn read_array(&self, _column: &ColumnMeta, _visit: &mut dyn FnMut(&dyn ArrayValues)) {}
    /// The stored form of a non-null value, `None` when it cannot be read
    /// (an unchanged TOAST value; by default).
    fn image(&self, _column: &ColumnMeta) -> Option<Image<'_>> {
        None
    }
}

/// A non-null value as PostgreSQL's side read it. Binary forms where they
/// are cheap; a type without one arrives as its output function's text,
/// borrowed, not copied ([`Value::OutputText`]).
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// int2, int4, int8, oid.
    Int(i64),
    Bool(bool),
    /// float4, float8: the output function's digits.
    Float(&'a [u8]),
    /// numeric's bytes after the varlena header.
    Numeric(&'a [u8]),
    /// text, varchar, bpchar: the bytes, which are also the output
    /// function's text.
    Text(&'a [u8]),
    /// json's text (a JSON document, as json's input function checked).
    Json(&'a [u8]),
    /// jsonb's bytes after the varlena header.
    Jsonb(&'a [u8]),
    Bytea(&'a [u8]),
    /// Microseconds since 2000-01-01 00:00.
    Timestamp(i64),
    /// Microseconds since 2000-01-01 00:00 UTC.
    TimestampTz(i64),
    /// Days since 2000-01-01.
    Date(i32),
    /// An interval as stored: months, days, microseconds.
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    /// An array: its elements are read on request ([`ArrayRef::read`]).
    Array(ArrayRef<'a>),
    /// Any other type (or any type the session's [`ValueReads`] leave
    /// out): it needs its output function's text, which this is.
    OutputText(&'a [u8]),
}

/// An array value of a tuple's column, its elements not read yet.
#[derive(Clone, Copy)]
pub struct ArrayRef<'a> {
    tuple: &'a dyn TupleValues,
    column: &'a ColumnMeta,
}

impl<'a> ArrayRef<'a> {
    pub fn new(tuple: &'a dyn TupleValues, column: &'a ColumnMeta) -> Self {
        ArrayRef { tuple, column }
    }

    /// Lends the array's elements to `visit`.
    pub fn read(&self, visit: &mut dyn FnMut(&dyn ArrayValues)) {
        self.tuple.read_array(self.column, visit);
    }

    /// The whole array's output function text (which shows its bounds).
    pub fn text(&self) -> &'a [u8] {
        self.tuple.text(self.column)
    }
}

impl std::fmt::Debug for ArrayRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArrayRef")
    }
}

/// The elements of one array value, in storage order (row-major).
pub trait ArrayValues {
    /// The dimensions, outermost first (none for an empty array).
    fn dims(&self) -> &[usize];
    /// Every lower bound is 1 (the elements alone describe the array).
    fn default_bounds(&self) -> bool;
    /// The `i`-th element, `None` for NULL. Never [`Value::Array`].
    fn element(&self, i: usize) -> Option<Value<'_>>;
    /// The `i`-th (non-null) element's output function text.
    fn element_text(&self, i: usize) -> &[u8];
}

/// What a format renders once per relation and reuses for its changes. It
/// lives in the relation cache beside the relation's [`RelationMeta`] and is
/// dropped with it when the relation's definition changes. Each format keeps
/// a type of its own in it ([`RelationRender::get`]).
#[derive(Default)]
pub struct RelationRender(OnceCell<Box<dyn Any>>);

impl RelationRender {
    /// The format's rendering cache `T` for this relation, made on first
    /// use. A session has one format, so one `T`; a fresh `T` for this
    /// change alone if the relation was rendered with another type first
    /// (only tests mix formats).
    pub fn get<T: Default + 'static>(&self) -> Rendering<'_, T> {
        match self
            .0
            .get_or_init(|| Box::new(T::default()))
            .downcast_ref::<T>()
        {
            Some(cached) => Rendering::Cached(cached),
            None => Rendering::Fresh(Box::default()),
        }
    }
}

/// A format's rendering cache for one change ([`RelationRender::get`]).
pub enum Rendering<'a, T> {
    Cached(&'a T),
    /// Boxed: the common case stays two words, whatever `T`'s size.
    Fresh(Box<T>),
}

impl<T> std::ops::Deref for Rendering<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Rendering::Cached(t) => t,
            Rendering::Fresh(t) => t,
        }
    }
}

impl std::fmt::Debug for RelationRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelationRender")
    }
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

/// What a tuple holds for one column, with its value ([`Cell`] and
/// [`Value`] in one).
#[derive(Debug, Clone, Copy)]
pub enum CellValue<'a> {
    Hidden,
    Null,
    UnchangedToast,
    Value(Value<'a>),
}

/// Transaction facts printed by begin/commit/change/message objects.
#[derive(Debug, Clone, Default)]
pub struct TxnInfo {
    pub xid: u32,
    pub origin: u16,
    /// Commit time as `timestamptz_to_str` prints it (only filled when asked for).
    pub timestamp: Vec<u8>,
    /// Commit time (microseconds since 2000-01-01 UTC).
    pub commit_time: i64,
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
    /// The SQL command, as warnings name it.
    pub fn command(self) -> &'static str {
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
    pub source: ChangeSource,
}

/// Where a change's row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeSource {
    /// The WAL record of an INSERT, UPDATE or DELETE.
    Wal,
    /// A chunk of `pubjson.backfill()`: the row as it is at this point of
    /// the stream (an INSERT's rules; format 3's `F`).
    Backfill,
}

/// A backfill's begin or end, as a format marks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillMarker {
    Start,
    /// `rows`: the rows the backfill read from the relation.
    End {
        rows: u64,
    },
}

impl ChangeHeader {
    #[cfg(test)]
    pub fn plain(kind: ChangeKind) -> Self {
        Self::plain_in(kind, None)
    }

    /// A change as decoded, in a streamed block when `stream_xid` is set.
    #[cfg(test)]
    pub fn plain_in(kind: ChangeKind, stream_xid: Option<u32>) -> Self {
        ChangeHeader {
            kind,
            transformed_from: None,
            stream_xid,
            source: ChangeSource::Wal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RelationRender, Rendering};
    use std::cell::Cell;

    #[derive(Default)]
    struct Counter(Cell<u32>);

    #[test]
    fn a_relations_rendering_is_made_once_and_kept() {
        let render = RelationRender::default();
        render.get::<Counter>().0.set(7);
        assert!(matches!(render.get::<Counter>(), Rendering::Cached(_)));
        assert_eq!(render.get::<Counter>().0.get(), 7);
        // Another format's type (tests only) gets a fresh one each time,
        // and the first type's cache stays.
        let other = render.get::<String>();
        assert!(matches!(other, Rendering::Fresh(_)));
        assert!(other.is_empty());
        assert_eq!(render.get::<Counter>().0.get(), 7);
    }
}
