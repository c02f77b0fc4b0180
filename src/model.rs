//! The relation and change model every format renders and the decoding
//! core fills in: relations and their columns, the kinds of change, the
//! transaction facts, and the values of a tuple behind [`TupleValues`].
//!
//! Pure code: no PostgreSQL calls. PostgreSQL's side (`pg/relation.rs`,
//! `pg/tuple.rs`) builds these values; the formats (`output/`) only read them.

use crate::output::encoding::ServerEncoding;

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
    /// [`message_name`](crate::output::encoding::message_name)).
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
    /// The replica identity setting.
    pub identity: ReplicaIdentity,
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
    /// The stored form of a non-null value, `None` when it cannot be read
    /// (an unchanged TOAST value; by default).
    fn image(&self, _column: &ColumnMeta) -> Option<Image<'_>> {
        None
    }
    /// Appends format 3's typed JSON of a non-null value
    /// (`output::v3::value`); by default wal2json's encoding.
    fn write_typed(
        &mut self,
        column: &ColumnMeta,
        numbers_as_strings: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.write_value(column, numbers_as_strings, out)
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
}

impl ChangeHeader {
    pub fn plain(kind: ChangeKind) -> Self {
        Self::plain_in(kind, None)
    }

    /// A change as decoded, in a streamed block when `stream_xid` is set.
    pub fn plain_in(kind: ChangeKind, stream_xid: Option<u32>) -> Self {
        ChangeHeader {
            kind,
            transformed_from: None,
            stream_xid,
        }
    }
}
