//! Output plugin options: wal2json's full set plus pubjson's own.
//!
//! Pure code (no PostgreSQL calls): the startup callback turns the DefElem
//! list into `(name, value)` pairs and calls [`Options::parse`]; any error is
//! raised there, before a byte is written, so a bad option never advances or
//! damages the slot. Names, defaults, accepted spellings and error texts are
//! wal2json 2.6's, so a consumer can switch plugins by changing the name only.

use std::fmt;

/// The SQLSTATE class of an option error (PostgreSQL's codes, as wal2json uses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionErrorKind {
    /// 22023 `invalid_parameter_value`.
    InvalidParameterValue,
    /// 42602 `invalid_name`.
    InvalidName,
    /// 0A000 `feature_not_supported`.
    FeatureNotSupported,
    /// 42601 `syntax_error`.
    SyntaxError,
}

/// Options that come from pgoutput and, as there, may not be repeated.
const PGOUTPUT_OPTIONS: &[&str] = &[
    "publication_names",
    "messages",
    "origin",
    "streaming",
    "two_phase",
];

/// wal2json's options that only shape its layout. Format 3 has a layout of
/// its own (xids, LSNs, commit times and schemas always; column types, keys
/// and nullability in R objects) and rejects them rather than ignore them.
/// (`include-origin` and `numeric-data-types-as-string` apply to format 3.)
pub const WAL2JSON_LAYOUT_OPTIONS: &[&str] = &[
    "include-transaction",
    "include-xids",
    "include-timestamp",
    "include-lsn",
    "include-schemas",
    "include-types",
    "include-type-oids",
    "include-typmod",
    "include-domain-data-type",
    "include-column-positions",
    "include-not-null",
    "include-default",
    "include-pk",
    "pretty-print",
    "write-in-chunks",
];

/// `streaming = parallel` exists from PostgreSQL 16 on.
const STREAMING_PARALLEL: bool = !cfg!(feature = "pg15");

/// pgoutput 17+ accepts an empty `publication_names` (nothing is
/// published); 15 and 16 reject it as missing.
const EMPTY_PUBLICATION_NAMES_OK: bool = !cfg!(any(feature = "pg15", feature = "pg16"));

/// PostgreSQL's identifier length limit (NAMEDATALEN - 1).
const MAX_IDENTIFIER_BYTES: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub kind: OptionErrorKind,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl OptionError {
    fn new(kind: OptionErrorKind, message: String) -> Self {
        OptionError {
            kind,
            message,
            hint: None,
        }
    }

    fn bad_value(kind: OptionErrorKind, value: &[u8], name: &str) -> Self {
        Self::new(
            kind,
            format!(
                "could not parse value \"{}\" for parameter \"{}\"",
                String::from_utf8_lossy(value),
                name
            ),
        )
    }
}

/// Which change kinds are emitted (`actions` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actions {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

/// One entry of `add-tables` / `filter-tables`: `schema.table`, either part `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSelector {
    pub schema: Vec<u8>,
    pub table: Vec<u8>,
    pub all_schemas: bool,
    pub all_tables: bool,
}

impl TableSelector {
    pub fn matches(&self, schema: &[u8], table: &[u8]) -> bool {
        (self.all_schemas || self.schema == schema) && (self.all_tables || self.table == table)
    }
}

/// pgoutput's `origin` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginFilter {
    /// Emit changes whatever their origin (the default).
    Any,
    /// Skip changes that arrived through replication (a non-zero origin).
    None,
}

/// Format 3's `batch-bytes`: how many objects one output message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// One object per message (`batch-bytes` 0).
    Off,
    /// Objects share a message, one per line, until it holds at least this
    /// many bytes (or the consumer would otherwise wait: see format 3).
    UpTo(usize),
}

/// `batch-bytes` when not given, on both interfaces (docs/options.md): a
/// message costs a walsender a protocol frame, a flush attempt and a
/// client read, and the SQL functions a result row.
pub const DEFAULT_BATCH_BYTES: usize = 64 * 1024;
/// The largest `batch-bytes` (format 1's chunk size: a message never grows
/// towards PostgreSQL's 1 GB limit).
pub const MAX_BATCH_BYTES: i64 = 16 * 1024 * 1024;

impl Batching {
    /// The byte bound of a batch; 0: no batching.
    pub fn bytes(self) -> usize {
        match self {
            Batching::UpTo(bytes) => bytes,
            Batching::Off => 0,
        }
    }
}

/// `format-version` `debezium`: Debezium's change events
/// (`output::debezium`). Stored beside the numbered formats.
pub const FORMAT_DEBEZIUM: u8 = 100;

/// Debezium's `decimal.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalMode {
    Precise,
    Double,
    String,
}

/// Debezium's `time.precision.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimePrecisionMode {
    Adaptive,
    AdaptiveTimeMicroseconds,
    Connect,
}

/// Debezium's `binary.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryMode {
    Bytes,
    Base64,
    Base64UrlSafe,
    Hex,
}

/// Debezium's `interval.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntervalMode {
    Numeric,
    String,
}

/// Debezium's `hstore.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HstoreMode {
    Json,
    Map,
}

/// Debezium's `skipped.operations`: which change events are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedOperations {
    pub create: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

/// The settings of `format-version` `debezium`, under Debezium's own names
/// (docs/debezium.md). Given with another format they are an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebeziumOptions {
    /// `topic.prefix`: required, as in Debezium.
    pub topic_prefix: Option<Vec<u8>>,
    /// `schemas.enable`: Kafka Connect's JsonConverter envelope
    /// (`schema` + `payload`) for key and value; on by default, as there.
    pub schemas_enable: bool,
    pub decimal_handling_mode: DecimalMode,
    pub time_precision_mode: TimePrecisionMode,
    pub binary_handling_mode: BinaryMode,
    pub interval_handling_mode: IntervalMode,
    pub hstore_handling_mode: HstoreMode,
    /// `unavailable.value.placeholder`: what an unchanged TOAST value is.
    pub unavailable_value_placeholder: Vec<u8>,
    pub include_unknown_datatypes: bool,
    pub tombstones_on_delete: bool,
    pub skipped_operations: SkippedOperations,
    pub provide_transaction_metadata: bool,
    /// `include.schema.changes` (Debezium's, of its connectors that write
    /// schema change events): DDL capture's events as schema change
    /// events on the `<topic.prefix>` topic. On by default, as there.
    pub include_schema_changes: bool,
    /// The database's name (`source.db`): set by the plugin at startup,
    /// not an option.
    pub database: Vec<u8>,
    /// `message.prefix.include.list` / `exclude.list`: Debezium's lists of
    /// regular expressions (checked when parsed; see [`PrefixPatterns`]).
    pub message_prefix_include_list: Option<String>,
    pub message_prefix_exclude_list: Option<String>,
}

/// A `message.prefix.*.list` compiled as Debezium reads it: regular
/// expressions separated by commas (`\,` is a comma inside one), each
/// matching a whole prefix, case-insensitively (Java's
/// `Pattern.CASE_INSENSITIVE`; the syntax is the `regex` crate's, which
/// has no look-around or backreferences).
#[derive(Debug, Clone)]
pub struct PrefixPatterns(Vec<regex::Regex>);

impl PrefixPatterns {
    pub fn parse(list: &str) -> Result<PrefixPatterns, String> {
        let mut items = Vec::new();
        let mut current = String::new();
        let mut chars = list.chars().peekable();
        while let Some(ch) = chars.next() {
            match ch {
                '\\' if chars.peek() == Some(&',') => {
                    current.push(',');
                    chars.next();
                }
                ',' => items.push(std::mem::take(&mut current)),
                _ => current.push(ch),
            }
        }
        items.push(current);
        let mut patterns = Vec::new();
        for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
            let regex = regex::RegexBuilder::new(&format!("^(?:{item})$"))
                .case_insensitive(true)
                .build()
                .map_err(|e| format!("{item}: {e}"))?;
            patterns.push(regex);
        }
        Ok(PrefixPatterns(patterns))
    }

    /// Whether one of the expressions matches the whole prefix (in the
    /// database's encoding: bytes outside UTF-8 as U+FFFD).
    pub fn matches(&self, prefix: &[u8]) -> bool {
        let text = String::from_utf8_lossy(prefix);
        self.0.iter().any(|r| r.is_match(&text))
    }
}

impl Default for DebeziumOptions {
    fn default() -> Self {
        DebeziumOptions {
            topic_prefix: None,
            schemas_enable: true,
            decimal_handling_mode: DecimalMode::Precise,
            time_precision_mode: TimePrecisionMode::Adaptive,
            binary_handling_mode: BinaryMode::Bytes,
            interval_handling_mode: IntervalMode::Numeric,
            hstore_handling_mode: HstoreMode::Json,
            unavailable_value_placeholder: b"__debezium_unavailable_value".to_vec(),
            include_unknown_datatypes: false,
            tombstones_on_delete: true,
            // Debezium's default: truncates are left out.
            skipped_operations: SkippedOperations {
                create: false,
                update: false,
                delete: false,
                truncate: true,
            },
            provide_transaction_metadata: false,
            include_schema_changes: true,
            database: Vec::new(),
            message_prefix_include_list: None,
            message_prefix_exclude_list: None,
        }
    }
}

/// Debezium connector properties that pubjson takes under other names:
/// named in the error's hint.
const DEBEZIUM_PROPERTIES_ELSEWHERE: &[(&str, &str)] = &[
    (
        "table.include.list",
        "the publication's tables (publication_names) or add-tables",
    ),
    (
        "table.exclude.list",
        "the publication's tables (publication_names) or filter-tables",
    ),
    ("column.include.list", "a publication's column list"),
    ("column.exclude.list", "a publication's column list"),
    ("publication.name", "publication_names"),
    ("slot.name", "the slot your client reads"),
    (
        "plugin.name",
        "the output plugin pubjson with format-version debezium",
    ),
    ("snapshot.mode", "CALL pubjson.backfill(table)"),
    ("converter.schemas.enable", "schemas.enable"),
    ("key.converter.schemas.enable", "schemas.enable"),
    ("value.converter.schemas.enable", "schemas.enable"),
];

/// The options of `format-version` `debezium` (Debezium's names).
pub const DEBEZIUM_OPTIONS: &[&str] = &[
    "topic.prefix",
    "schemas.enable",
    "decimal.handling.mode",
    "time.precision.mode",
    "binary.handling.mode",
    "interval.handling.mode",
    "hstore.handling.mode",
    "unavailable.value.placeholder",
    "include.unknown.datatypes",
    "tombstones.on.delete",
    "skipped.operations",
    "provide.transaction.metadata",
    "include.schema.changes",
    "message.prefix.include.list",
    "message.prefix.exclude.list",
];

/// Everything the consumer asked for. Field names follow the option names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub format_version: u8,
    pub include_transaction: bool,
    pub include_xids: bool,
    pub include_timestamp: bool,
    pub include_origin: bool,
    pub include_schemas: bool,
    pub include_types: bool,
    pub include_type_oids: bool,
    pub include_typmod: bool,
    pub include_domain_data_type: bool,
    pub include_column_positions: bool,
    pub include_not_null: bool,
    pub include_default: bool,
    pub include_pk: bool,
    pub include_lsn: bool,
    pub pretty_print: bool,
    pub write_in_chunks: bool,
    pub numeric_data_types_as_string: bool,
    pub actions: Actions,
    pub filter_origins: Vec<u32>,
    pub filter_tables: Vec<TableSelector>,
    pub add_tables: Vec<TableSelector>,
    pub filter_msg_prefixes: Vec<Vec<u8>>,
    pub add_msg_prefixes: Vec<Vec<u8>>,
    /// pubjson: emit nothing for a transaction none of whose changes is emitted.
    pub skip_empty_xacts: bool,
    /// pgoutput: publications whose rules decide what is emitted.
    pub publication_names: Option<Vec<Vec<u8>>>,
    /// pgoutput: emit logical decoding messages (default: on without
    /// publication_names, as wal2json; off with them, as pgoutput).
    pub messages: Option<bool>,
    /// pgoutput: `origin` = any | none.
    pub origin: OriginFilter,
    /// pgoutput: stream in-progress transactions.
    pub streaming: bool,
    /// pgoutput: decode prepared transactions at PREPARE time.
    pub two_phase: bool,
    /// pubjson, format 3 and debezium: objects per output message.
    pub batching: Batching,
    /// `format-version` `debezium`'s settings.
    pub debezium: DebeziumOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            format_version: 1,
            include_transaction: true,
            include_xids: false,
            include_timestamp: false,
            include_origin: false,
            include_schemas: true,
            include_types: true,
            include_type_oids: false,
            include_typmod: true,
            include_domain_data_type: false,
            include_column_positions: false,
            include_not_null: false,
            include_default: false,
            include_pk: false,
            include_lsn: false,
            pretty_print: false,
            write_in_chunks: false,
            numeric_data_types_as_string: false,
            actions: Actions {
                insert: true,
                update: true,
                delete: true,
                truncate: true,
            },
            filter_origins: Vec::new(),
            filter_tables: Vec::new(),
            add_tables: vec![TableSelector {
                schema: Vec::new(),
                table: Vec::new(),
                all_schemas: true,
                all_tables: true,
            }],
            filter_msg_prefixes: Vec::new(),
            add_msg_prefixes: Vec::new(),
            skip_empty_xacts: true,
            publication_names: None,
            messages: None,
            origin: OriginFilter::Any,
            streaming: false,
            two_phase: false,
            batching: Batching::UpTo(DEFAULT_BATCH_BYTES),
            debezium: DebeziumOptions::default(),
        }
    }
}

/// Highest and lowest `format-version` understood.
pub const MAX_FORMAT_VERSION: i64 = 3;
pub const MIN_FORMAT_VERSION: i64 = 1;
/// What a `format-version` without a value means.
const WAL2JSON_MAX_FORMAT_VERSION: i64 = 2;

impl Options {
    /// Parses the options in the order given; later ones override earlier
    /// ones, as in wal2json. A missing value (`-o name` in pg_recvlogical)
    /// means true for booleans.
    pub fn parse<'a, I>(options: I) -> Result<Options, OptionError>
    where
        I: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    {
        let mut o = Options::default();
        let mut seen_pgoutput_options: Vec<&str> = Vec::new();
        let mut layout_option = None;
        let mut batch_option = false;
        let mut debezium_option = None;
        for (name, value) in options {
            batch_option |= name == "batch-bytes";
            if debezium_option.is_none() && DEBEZIUM_OPTIONS.contains(&name) {
                debezium_option = Some(name);
            }
            if layout_option.is_none() && WAL2JSON_LAYOUT_OPTIONS.contains(&name) {
                layout_option = Some(name);
            }
            // pgoutput's own options may be given once, as in pgoutput.
            if PGOUTPUT_OPTIONS.contains(&name) {
                if seen_pgoutput_options.contains(&name) {
                    return Err(OptionError::new(
                        OptionErrorKind::SyntaxError,
                        "conflicting or redundant options".to_owned(),
                    ));
                }
                seen_pgoutput_options.push(name);
            }
            o.apply(name, value)?;
        }
        // Checked at the end: format-version may come after the option.
        if o.format_version == FORMAT_DEBEZIUM {
            o.check_debezium(layout_option)?;
        } else if let Some(name) = debezium_option {
            let mut err = OptionError::new(
                OptionErrorKind::InvalidParameterValue,
                format!(
                    "option \"{name}\" does not apply to format-version {}",
                    o.format_version
                ),
            );
            err.hint = Some("Debezium's settings apply to format-version debezium.".to_owned());
            return Err(err);
        }
        if let (3, Some(name)) = (o.format_version, layout_option) {
            let mut err = OptionError::new(
                OptionErrorKind::InvalidParameterValue,
                format!("option \"{name}\" does not apply to format-version 3"),
            );
            err.hint = Some(
                "Format 3 always includes xids, LSNs, commit times and schemas; R objects describe column types, keys and nullability."
                    .to_owned(),
            );
            return Err(err);
        }
        if batch_option && o.format_version != 3 && o.format_version != FORMAT_DEBEZIUM {
            let mut err = OptionError::new(
                OptionErrorKind::InvalidParameterValue,
                format!(
                    "option \"batch-bytes\" does not apply to format-version {}",
                    o.format_version
                ),
            );
            err.hint = Some(
                "Format 1 writes a transaction per message and format 2 a change per message, as wal2json does."
                    .to_owned(),
            );
            return Err(err);
        }
        Ok(o)
    }

    /// What `format-version` `debezium` requires of the other options.
    fn check_debezium(&self, layout_option: Option<&str>) -> Result<(), OptionError> {
        use OptionErrorKind::InvalidParameterValue;
        let refuse = |name: &str, hint: &str| {
            let mut err = OptionError::new(
                InvalidParameterValue,
                format!("option \"{name}\" does not apply to format-version debezium"),
            );
            err.hint = Some(hint.to_owned());
            Err(err)
        };
        if let Some(name) = layout_option {
            return refuse(
                name,
                "Debezium's envelope always has the transaction, the LSN, the commit time and the schema; schemas.enable adds the column types.",
            );
        }
        if self.include_origin || self.numeric_data_types_as_string {
            let name = if self.include_origin {
                "include-origin"
            } else {
                "numeric-data-types-as-string"
            };
            return refuse(
                name,
                "Debezium's settings decide how values are written (decimal.handling.mode).",
            );
        }
        if self.streaming || self.two_phase {
            let name = if self.streaming {
                "streaming"
            } else {
                "two_phase"
            };
            return refuse(
                name,
                "Debezium's events cannot take back a change: transactions are delivered at COMMIT.",
            );
        }
        if self.debezium.message_prefix_include_list.is_some()
            && self.debezium.message_prefix_exclude_list.is_some()
        {
            return refuse(
                "message.prefix.exclude.list",
                "message.prefix.include.list and message.prefix.exclude.list cannot be used together, as in Debezium.",
            );
        }
        if self.debezium.topic_prefix.is_none() {
            let mut err = OptionError::new(
                InvalidParameterValue,
                "format-version debezium requires the option \"topic.prefix\"".to_owned(),
            );
            err.hint =
                Some("Give Debezium's topic.prefix, e.g. -o topic.prefix=dbserver1.".to_owned());
            return Err(err);
        }
        Ok(())
    }

    /// Whether logical decoding messages are emitted.
    pub fn messages_enabled(&self) -> bool {
        // Debezium's connector asks pgoutput for messages.
        self.messages
            .unwrap_or(self.publication_names.is_none() || self.format_version == FORMAT_DEBEZIUM)
    }

    fn apply(&mut self, name: &str, value: Option<&[u8]>) -> Result<(), OptionError> {
        use OptionErrorKind::*;
        let flag = match name {
            "include-transaction" => Some(&mut self.include_transaction),
            "include-xids" => Some(&mut self.include_xids),
            "include-timestamp" => Some(&mut self.include_timestamp),
            "include-pk" => Some(&mut self.include_pk),
            "include-origin" => Some(&mut self.include_origin),
            "include-schemas" => Some(&mut self.include_schemas),
            "include-types" => Some(&mut self.include_types),
            "include-type-oids" => Some(&mut self.include_type_oids),
            "include-typmod" => Some(&mut self.include_typmod),
            "include-domain-data-type" => Some(&mut self.include_domain_data_type),
            "include-column-positions" => Some(&mut self.include_column_positions),
            "include-not-null" => Some(&mut self.include_not_null),
            "include-default" => Some(&mut self.include_default),
            "numeric-data-types-as-string" => Some(&mut self.numeric_data_types_as_string),
            "pretty-print" => Some(&mut self.pretty_print),
            "write-in-chunks" => Some(&mut self.write_in_chunks),
            "include-lsn" => Some(&mut self.include_lsn),
            "skip-empty-xacts" => Some(&mut self.skip_empty_xacts),
            "streaming" => Some(&mut self.streaming),
            "two_phase" => Some(&mut self.two_phase),
            _ => None,
        };
        if let Some(flag) = flag {
            *flag = match value {
                None => true,
                // pgoutput 16+ also takes `parallel` (the subscriber applies
                // streamed blocks in parallel workers): for a JSON consumer
                // that is plain streaming.
                Some(v)
                    if name == "streaming"
                        && STREAMING_PARALLEL
                        && v.eq_ignore_ascii_case(b"parallel") =>
                {
                    true
                }
                Some(v) => parse_bool(v)
                    .ok_or_else(|| OptionError::bad_value(InvalidParameterValue, v, name))?,
            };
            return Ok(());
        }

        if DEBEZIUM_OPTIONS.contains(&name) {
            return self.debezium.apply(name, value);
        }
        match name {
            "include-unchanged-toast" => Err(OptionError::new(
                InvalidName,
                format!("parameter \"{name}\" was deprecated"),
            )),
            "actions" => {
                let Some(v) = value else { return Ok(()) };
                let list =
                    split_list(v).ok_or_else(|| OptionError::bad_value(InvalidName, v, name))?;
                let mut actions = Actions {
                    insert: false,
                    update: false,
                    delete: false,
                    truncate: false,
                };
                for action in list {
                    match action.as_slice() {
                        b"insert" => actions.insert = true,
                        b"update" => actions.update = true,
                        b"delete" => actions.delete = true,
                        b"truncate" => actions.truncate = true,
                        other => {
                            return Err(OptionError::bad_value(InvalidParameterValue, other, name))
                        }
                    }
                }
                self.actions = actions;
                Ok(())
            }
            "filter-origins" => {
                self.filter_origins = match value {
                    None => Vec::new(),
                    Some(v) => split_oid_list(v)
                        .ok_or_else(|| OptionError::bad_value(InvalidName, v, name))?,
                };
                Ok(())
            }
            "filter-tables" => {
                match value {
                    None => self.filter_tables.clear(),
                    // wal2json appends to the list when the option is repeated.
                    Some(v) => self.filter_tables.extend(
                        parse_table_list(v)
                            .ok_or_else(|| OptionError::bad_value(InvalidName, v, name))?,
                    ),
                }
                Ok(())
            }
            "add-tables" => {
                // Giving add-tables at all drops the default "every table".
                self.add_tables = match value {
                    None => Vec::new(),
                    Some(v) => parse_table_list(v)
                        .ok_or_else(|| OptionError::bad_value(InvalidName, v, name))?,
                };
                Ok(())
            }
            "filter-msg-prefixes" | "add-msg-prefixes" => {
                let list = match value {
                    None => Vec::new(),
                    Some(v) => {
                        split_list(v).ok_or_else(|| OptionError::bad_value(InvalidName, v, name))?
                    }
                };
                if name == "filter-msg-prefixes" {
                    self.filter_msg_prefixes = list;
                } else {
                    self.add_msg_prefixes = list;
                }
                Ok(())
            }
            "publication_names" => {
                let Some(v) = value else {
                    return Err(OptionError::new(
                        InvalidParameterValue,
                        "publication_names parameter missing".to_owned(),
                    ));
                };
                let names = split_identifiers(v).ok_or_else(|| {
                    OptionError::new(InvalidName, "invalid publication_names syntax".to_owned())
                })?;
                if names.is_empty() && !EMPTY_PUBLICATION_NAMES_OK {
                    return Err(OptionError::new(
                        InvalidParameterValue,
                        "publication_names parameter missing".to_owned(),
                    ));
                }
                self.publication_names = Some(names);
                Ok(())
            }
            "messages" => {
                self.messages = Some(match value {
                    None => true,
                    Some(v) => parse_bool(v)
                        .ok_or_else(|| OptionError::bad_value(InvalidParameterValue, v, name))?,
                });
                Ok(())
            }
            "origin" => {
                let v = value.unwrap_or_default();
                self.origin = if v.eq_ignore_ascii_case(b"any") {
                    OriginFilter::Any
                } else if v.eq_ignore_ascii_case(b"none") {
                    OriginFilter::None
                } else {
                    return Err(OptionError::new(
                        InvalidParameterValue,
                        format!(
                            "unrecognized origin value: \"{}\"",
                            String::from_utf8_lossy(v)
                        ),
                    ));
                };
                Ok(())
            }
            "batch-bytes" => {
                let bytes = match value {
                    None => None,
                    Some(v) => parse_int(v),
                }
                .filter(|b| (0..=MAX_BATCH_BYTES).contains(b));
                let Some(bytes) = bytes else {
                    let mut err = OptionError::bad_value(
                        InvalidParameterValue,
                        value.unwrap_or(b"(null)"),
                        name,
                    );
                    err.hint = Some(format!(
                        "batch-bytes is a number of bytes between 0 (one object per message) and {MAX_BATCH_BYTES}."
                    ));
                    return Err(err);
                };
                self.batching = match bytes {
                    0 => Batching::Off,
                    n => Batching::UpTo(n as usize),
                };
                Ok(())
            }
            "format-version" if value.is_some_and(|v| v.eq_ignore_ascii_case(b"debezium")) => {
                self.format_version = FORMAT_DEBEZIUM;
                Ok(())
            }
            "format-version" => {
                let version = match value {
                    // wal2json's highest format, as before format 3 existed.
                    None => WAL2JSON_MAX_FORMAT_VERSION,
                    Some(v) => parse_int(v)
                        .ok_or_else(|| OptionError::bad_value(InvalidParameterValue, v, name))?,
                };
                if version > MAX_FORMAT_VERSION {
                    return Err(OptionError::new(
                        FeatureNotSupported,
                        format!(
                            "client sent format_version={version} but we only support format {MAX_FORMAT_VERSION} or lower"
                        ),
                    ));
                }
                if version < MIN_FORMAT_VERSION {
                    return Err(OptionError::new(
                        FeatureNotSupported,
                        format!(
                            "client sent format_version={version} but we only support format {MIN_FORMAT_VERSION} or higher"
                        ),
                    ));
                }
                self.format_version = version as u8;
                Ok(())
            }
            _ => {
                let shown = match value {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None => "(null)".to_owned(),
                };
                let mut err = OptionError::new(
                    InvalidParameterValue,
                    format!("option \"{name}\" = \"{shown}\" is unknown"),
                );
                err.hint = Some(
                    match DEBEZIUM_PROPERTIES_ELSEWHERE
                        .iter()
                        .find(|(n, _)| *n == name)
                    {
                        Some((_, instead)) => format!(
                            "Debezium's {name} is {instead} with pubjson (docs/debezium.md)."
                        ),
                        None => {
                            "See the options reference, docs/options.md in pubjson's documentation."
                                .to_owned()
                        }
                    },
                );
                Err(err)
            }
        }
    }

    /// True when a message with this prefix passes filter-msg-prefixes and add-msg-prefixes.
    pub fn message_prefix_wanted(&self, prefix: &[u8]) -> bool {
        if self.filter_msg_prefixes.iter().any(|p| p == prefix) {
            return false;
        }
        self.add_msg_prefixes.is_empty() || self.add_msg_prefixes.iter().any(|p| p == prefix)
    }

    /// True when a table passes filter-tables and add-tables.
    pub fn table_wanted(&self, schema: &[u8], table: &[u8]) -> bool {
        !self.filter_tables.iter().any(|t| t.matches(schema, table))
            && self.add_tables.iter().any(|t| t.matches(schema, table))
    }
}

impl DebeziumOptions {
    fn apply(&mut self, name: &str, value: Option<&[u8]>) -> Result<(), OptionError> {
        use OptionErrorKind::InvalidParameterValue;
        let bad = |v: &[u8], hint: &str| {
            let mut err = OptionError::bad_value(InvalidParameterValue, v, name);
            err.hint = Some(hint.to_owned());
            err
        };
        let flag = match name {
            "schemas.enable" => Some(&mut self.schemas_enable),
            "include.unknown.datatypes" => Some(&mut self.include_unknown_datatypes),
            "tombstones.on.delete" => Some(&mut self.tombstones_on_delete),
            "provide.transaction.metadata" => Some(&mut self.provide_transaction_metadata),
            "include.schema.changes" => Some(&mut self.include_schema_changes),
            _ => None,
        };
        if let Some(flag) = flag {
            *flag = match value {
                None => true,
                Some(v) => parse_bool(v)
                    .ok_or_else(|| OptionError::bad_value(InvalidParameterValue, v, name))?,
            };
            return Ok(());
        }
        let v = value.unwrap_or(b"");
        let lower = v.to_ascii_lowercase();
        match name {
            "topic.prefix" => {
                // Debezium's rule for topic names: letters, digits, '.', '_', '-'.
                let valid = !v.is_empty()
                    && v.iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                if !valid {
                    return Err(bad(
                        v,
                        "A topic prefix is letters, digits, '.', '_' and '-' (Kafka's topic names).",
                    ));
                }
                self.topic_prefix = Some(v.to_vec());
            }
            "decimal.handling.mode" => {
                self.decimal_handling_mode = match lower.as_slice() {
                    b"precise" => DecimalMode::Precise,
                    b"double" => DecimalMode::Double,
                    b"string" => DecimalMode::String,
                    _ => return Err(bad(v, "One of precise, double, string.")),
                }
            }
            "time.precision.mode" => {
                self.time_precision_mode = match lower.as_slice() {
                    b"adaptive" => TimePrecisionMode::Adaptive,
                    b"adaptive_time_microseconds" => TimePrecisionMode::AdaptiveTimeMicroseconds,
                    b"connect" => TimePrecisionMode::Connect,
                    _ => {
                        return Err(bad(
                            v,
                            "One of adaptive, adaptive_time_microseconds, connect.",
                        ))
                    }
                }
            }
            "binary.handling.mode" => {
                self.binary_handling_mode = match lower.as_slice() {
                    b"bytes" => BinaryMode::Bytes,
                    b"base64" => BinaryMode::Base64,
                    b"base64-url-safe" => BinaryMode::Base64UrlSafe,
                    b"hex" => BinaryMode::Hex,
                    _ => return Err(bad(v, "One of bytes, base64, base64-url-safe, hex.")),
                }
            }
            "interval.handling.mode" => {
                self.interval_handling_mode = match lower.as_slice() {
                    b"numeric" => IntervalMode::Numeric,
                    b"string" => IntervalMode::String,
                    _ => return Err(bad(v, "One of numeric, string.")),
                }
            }
            "hstore.handling.mode" => {
                self.hstore_handling_mode = match lower.as_slice() {
                    b"json" => HstoreMode::Json,
                    b"map" => HstoreMode::Map,
                    _ => return Err(bad(v, "One of json, map.")),
                }
            }
            "message.prefix.include.list" | "message.prefix.exclude.list" => {
                let list = String::from_utf8_lossy(v).into_owned();
                if let Err(e) = PrefixPatterns::parse(&list) {
                    return Err(bad(
                        v,
                        &format!("A list of regular expressions separated by commas: {e}"),
                    ));
                }
                if name == "message.prefix.include.list" {
                    self.message_prefix_include_list = Some(list);
                } else {
                    self.message_prefix_exclude_list = Some(list);
                }
            }
            "unavailable.value.placeholder" => {
                self.unavailable_value_placeholder = v.to_vec();
            }
            "skipped.operations" => {
                let mut skipped = SkippedOperations {
                    create: false,
                    update: false,
                    delete: false,
                    truncate: false,
                };
                let list = split_list(v).ok_or_else(|| bad(v, "A list of c, u, d, t, or none."))?;
                for op in &list {
                    match op.to_ascii_lowercase().as_slice() {
                        b"c" => skipped.create = true,
                        b"u" => skipped.update = true,
                        b"d" => skipped.delete = true,
                        b"t" => skipped.truncate = true,
                        b"none" if list.len() == 1 => {}
                        _ => return Err(bad(v, "A list of c, u, d, t, or none.")),
                    }
                }
                self.skipped_operations = skipped;
            }
            _ => {
                return Err(OptionError::new(
                    InvalidParameterValue,
                    format!("option \"{name}\" is unknown"),
                ))
            }
        }
        Ok(())
    }
}

/// PostgreSQL's `parse_bool`: case-insensitive prefixes of true/false/yes/no,
/// "on"/"off" (at least two letters), "1"/"0". No surrounding whitespace.
pub fn parse_bool(value: &[u8]) -> Option<bool> {
    let prefix_of = |word: &[u8], min: usize| {
        value.len() >= min
            && value.len() <= word.len()
            && word[..value.len()].eq_ignore_ascii_case(value)
    };
    match value.first()?.to_ascii_lowercase() {
        b't' if prefix_of(b"true", 1) => Some(true),
        b'f' if prefix_of(b"false", 1) => Some(false),
        b'y' if prefix_of(b"yes", 1) => Some(true),
        b'n' if prefix_of(b"no", 1) => Some(false),
        b'o' if prefix_of(b"on", 2) => Some(true),
        b'o' if prefix_of(b"off", 2) => Some(false),
        b'1' if value.len() == 1 => Some(true),
        b'0' if value.len() == 1 => Some(false),
        _ => None,
    }
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// PostgreSQL's GUC `parse_int` without units: `strtol(s, 0)` (decimal,
/// 0x hex, 0 octal), a float fallback rounded to nearest-even for "1.5"/"2e0",
/// surrounding whitespace allowed.
pub fn parse_int(value: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(value).ok()?;
    let t = s.trim_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
    if t.is_empty() {
        return None;
    }
    let (negative, digits) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let parsed = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()
    } else if digits.len() > 1
        && digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        i64::from_str_radix(&digits[1..], 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse::<i64>().ok()
    } else {
        None
    };
    let v = match parsed {
        Some(v) => {
            if negative {
                -v
            } else {
                v
            }
        }
        None => {
            // "1.5", "2e0": PostgreSQL retries as a double and rounds.
            if !t.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                return None;
            }
            let d: f64 = t.parse().ok()?;
            if !d.is_finite() {
                return None;
            }
            let r = d.round_ties_even();
            if r < i32::MIN as f64 || r > i32::MAX as f64 {
                return None;
            }
            r as i64
        }
    };
    // GUC integers are int32.
    if v < i32::MIN as i64 || v > i32::MAX as i64 {
        return None;
    }
    Some(v)
}

/// PostgreSQL's `SplitIdentifierString` with a comma: identifiers separated
/// by commas, unquoted ones folded to lower case, `"quoted"` ones kept as
/// they are (`""` is a quote), all truncated to 63 bytes. `None` on bad syntax.
/// Names stay bytes: they are in the database encoding.
pub fn split_identifiers(raw: &[u8]) -> Option<Vec<Vec<u8>>> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c);
    let mut names = Vec::new();
    let mut i = 0;
    while i < raw.len() && is_space(raw[i]) {
        i += 1;
    }
    if i == raw.len() {
        return Some(names);
    }
    loop {
        let mut name = Vec::new();
        if raw[i] == b'"' {
            i += 1;
            loop {
                if i == raw.len() {
                    return None; // unterminated quote
                }
                if raw[i] == b'"' {
                    if raw.get(i + 1) == Some(&b'"') {
                        name.push(b'"');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                name.push(raw[i]);
                i += 1;
            }
            if name.is_empty() {
                return None; // empty quoted name
            }
        } else {
            while i < raw.len() && raw[i] != b',' && !is_space(raw[i]) {
                name.push(raw[i].to_ascii_lowercase());
                i += 1;
            }
            if name.is_empty() {
                return None;
            }
        }
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        name.truncate(MAX_IDENTIFIER_BYTES);
        names.push(name);
        if i == raw.len() {
            return Some(names);
        }
        if raw[i] != b',' {
            return None;
        }
        i += 1;
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        if i == raw.len() {
            return None; // trailing separator
        }
    }
}

/// wal2json's `split_string_to_list`: comma-separated names, whitespace
/// around them ignored, a backslash protects the next byte from being read
/// as a separator (and is kept). Empty input is an empty list; an empty
/// element or a space inside a name is an error.
pub fn split_list(raw: &[u8]) -> Option<Vec<Vec<u8>>> {
    split_tokens(raw, false)
}

fn split_tokens(raw: &[u8], allow_empty: bool) -> Option<Vec<Vec<u8>>> {
    let mut items = Vec::new();
    let mut i = 0;
    while i < raw.len() && is_c_space(raw[i]) {
        i += 1;
    }
    if i == raw.len() {
        return Some(items);
    }
    loop {
        let start = i;
        while i < raw.len() && raw[i] != b',' && !is_c_space(raw[i]) {
            if raw[i] == b'\\' {
                i += 1;
                if i == raw.len() {
                    // A trailing backslash escapes nothing (wal2json reads past the end).
                    return None;
                }
            }
            i += 1;
        }
        let end = i;
        if start == end && !allow_empty {
            return None;
        }
        while i < raw.len() && is_c_space(raw[i]) {
            i += 1;
        }
        items.push(raw[start..end].to_vec());
        if i == raw.len() {
            return Some(items);
        }
        if raw[i] != b',' {
            return None;
        }
        i += 1;
        while i < raw.len() && is_c_space(raw[i]) {
            i += 1;
        }
    }
}

/// wal2json's `split_string_to_oid_list`: like [`split_list`], each element
/// read with C `atoi` (so junk reads as 0, as in wal2json).
pub fn split_oid_list(raw: &[u8]) -> Option<Vec<u32>> {
    Some(
        split_tokens(raw, true)?
            .iter()
            .map(|t| atoi(t) as u32)
            .collect(),
    )
}

fn atoi(s: &[u8]) -> i32 {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let mut v: i64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = (v * 10 + (s[i] - b'0') as i64) % (1 << 32);
        i += 1;
    }
    let v = if negative { -v } else { v };
    v as i32
}

/// wal2json's `add-tables`/`filter-tables` syntax: `schema.table` items,
/// comma-separated; `*` for every schema (`*.t`) or every table (`s.*`); a
/// backslash makes the next character literal (`a\.b.c` is schema "a.b",
/// `s.\*` is the table named "*").
pub fn parse_table_list(raw: &[u8]) -> Option<Vec<TableSelector>> {
    split_list(raw)?
        .iter()
        .map(|item| parse_table_item(item))
        .collect()
}

fn parse_table_item(item: &[u8]) -> Option<TableSelector> {
    let all_schemas = item.len() >= 2 && item[0] == b'*' && item[1] == b'.';
    let mut schema = Vec::new();
    let mut i = 0;
    while i < item.len() && item[i] != b'.' {
        if item[i] == b'\\' {
            i += 1;
            if i == item.len() {
                return None;
            }
        }
        schema.push(item[i]);
        i += 1;
    }
    if i == item.len() {
        // No separator: the schema is mandatory.
        return None;
    }
    i += 1;
    let rest = &item[i..];
    let all_tables = rest == b"*";
    let mut table = Vec::new();
    let mut j = 0;
    while j < rest.len() {
        if rest[j] == b'\\' {
            j += 1;
            if j == rest.len() {
                return None;
            }
        }
        table.push(rest[j]);
        j += 1;
    }
    Some(TableSelector {
        schema,
        table,
        all_schemas,
        all_tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(opts: &[(&str, Option<&str>)]) -> Result<Options, OptionError> {
        Options::parse(opts.iter().map(|(n, v)| (*n, v.map(|s| s.as_bytes()))))
    }

    #[test]
    fn defaults_are_wal2json_defaults() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.format_version, 1);
        assert!(o.include_transaction && o.include_schemas && o.include_types && o.include_typmod);
        assert!(!o.include_xids && !o.include_timestamp && !o.include_lsn && !o.include_pk);
        assert!(o.actions.insert && o.actions.update && o.actions.delete && o.actions.truncate);
        assert!(o.table_wanted(b"public", b"t"));
        assert!(o.skip_empty_xacts);
    }

    #[test]
    fn booleans_accept_postgres_spellings_and_null() {
        for v in ["1", "t", "TRUE", "tr", "y", "yes", "on", "On"] {
            assert!(
                parse(&[("include-xids", Some(v))]).unwrap().include_xids,
                "{v}"
            );
        }
        for v in ["0", "f", "false", "n", "no", "off", "of"] {
            assert!(
                !parse(&[("include-schemas", Some(v))])
                    .unwrap()
                    .include_schemas,
                "{v}"
            );
        }
        assert!(parse(&[("include-lsn", None)]).unwrap().include_lsn);
        for v in ["", "2", "o", "truex", " true", "yess", "10"] {
            let e = parse(&[("pretty-print", Some(v))]).unwrap_err();
            assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
            assert_eq!(
                e.message,
                format!("could not parse value \"{v}\" for parameter \"pretty-print\"")
            );
        }
    }

    #[test]
    fn unknown_and_deprecated_options() {
        let e = parse(&[("x", Some("y"))]).unwrap_err();
        assert_eq!(e.message, "option \"x\" = \"y\" is unknown");
        assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
        let e = parse(&[("x", None)]).unwrap_err();
        assert_eq!(e.message, "option \"x\" = \"(null)\" is unknown");
        let e = parse(&[("include-unchanged-toast", Some("1"))]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::InvalidName);
        assert_eq!(
            e.message,
            "parameter \"include-unchanged-toast\" was deprecated"
        );
    }

    #[test]
    fn format_version() {
        assert_eq!(
            parse(&[("format-version", Some("2"))])
                .unwrap()
                .format_version,
            2
        );
        assert_eq!(
            parse(&[("format-version", None)]).unwrap().format_version,
            2
        );
        assert_eq!(
            parse(&[("format-version", Some(" 1 "))])
                .unwrap()
                .format_version,
            1
        );
        assert_eq!(
            parse(&[("format-version", Some("0x2"))])
                .unwrap()
                .format_version,
            2
        );
        assert_eq!(
            parse(&[("format-version", Some("1.5"))])
                .unwrap()
                .format_version,
            2
        );
        let e = parse(&[("format-version", Some("4"))]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::FeatureNotSupported);
        assert_eq!(
            e.message,
            "client sent format_version=4 but we only support format 3 or lower"
        );
        assert_eq!(
            parse(&[("format-version", Some("3"))])
                .unwrap()
                .format_version,
            3
        );
        let e = parse(&[("format-version", Some("0"))]).unwrap_err();
        assert_eq!(
            e.message,
            "client sent format_version=0 but we only support format 1 or higher"
        );
        let e = parse(&[("format-version", Some("two"))]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
        assert!(parse(&[("format-version", Some("99999999999"))]).is_err());
    }

    #[test]
    fn batch_bytes_is_format_3_s_and_bounded() {
        let batching = |v: &str| {
            parse(&[("format-version", Some("3")), ("batch-bytes", Some(v))]).map(|o| o.batching)
        };
        assert_eq!(batching("0"), Ok(Batching::Off));
        assert_eq!(batching("1"), Ok(Batching::UpTo(1)));
        assert_eq!(batching("65536"), Ok(Batching::UpTo(65536)));
        assert_eq!(
            batching("16777216"),
            Ok(Batching::UpTo(MAX_BATCH_BYTES as usize))
        );
        for bad in ["-1", "16777217", "64kB", "", "x"] {
            let e = batching(bad).unwrap_err();
            assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue, "{bad}");
            assert_eq!(
                e.message,
                format!("could not parse value \"{bad}\" for parameter \"batch-bytes\"")
            );
            assert!(e.hint.as_deref().unwrap().contains("16777216"));
        }
        // No value: there is no sensible boolean reading of a byte count.
        let e = parse(&[("format-version", Some("3")), ("batch-bytes", None)]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
        // Checked at the end, as the layout options: any order.
        let o = parse(&[("batch-bytes", Some("100")), ("format-version", Some("3"))]).unwrap();
        assert_eq!(o.batching, Batching::UpTo(100));
        for version in ["1", "2"] {
            for opts in [
                [
                    ("format-version", Some(version)),
                    ("batch-bytes", Some("0")),
                ],
                [
                    ("batch-bytes", Some("10")),
                    ("format-version", Some(version)),
                ],
            ] {
                let e = parse(&opts).unwrap_err();
                assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
                assert_eq!(
                    e.message,
                    format!("option \"batch-bytes\" does not apply to format-version {version}")
                );
            }
        }
    }

    #[test]
    fn batching_defaults_to_64_kb() {
        let default = parse(&[("format-version", Some("3"))]).unwrap().batching;
        assert_eq!(default, Batching::UpTo(64 * 1024));
        assert_eq!(default.bytes(), DEFAULT_BATCH_BYTES);
        assert_eq!(Batching::UpTo(10).bytes(), 10);
        assert_eq!(Batching::Off.bytes(), 0);
    }

    #[test]
    fn format_3_rejects_wal2json_layout_options_in_any_order() {
        for &name in WAL2JSON_LAYOUT_OPTIONS {
            for opts in [
                [("format-version", Some("3")), (name, Some("1"))],
                [(name, Some("0")), ("format-version", Some("3"))],
            ] {
                let e = parse(&opts).unwrap_err();
                assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
                assert_eq!(
                    e.message,
                    format!("option \"{name}\" does not apply to format-version 3")
                );
                assert!(e.hint.is_some());
            }
            // Formats 1 and 2 take them as before.
            assert!(parse(&[("format-version", Some("2")), (name, Some("1"))]).is_ok());
        }
        let o = parse(&[
            ("format-version", Some("3")),
            ("include-origin", Some("1")),
            ("numeric-data-types-as-string", Some("1")),
            ("add-tables", Some("public.t")),
            ("actions", Some("insert")),
            ("skip-empty-xacts", Some("0")),
        ])
        .unwrap();
        assert!(o.include_origin && o.numeric_data_types_as_string && !o.skip_empty_xacts);
    }

    #[test]
    fn actions() {
        let o = parse(&[("actions", Some(" insert , delete"))]).unwrap();
        assert_eq!(
            o.actions,
            Actions {
                insert: true,
                update: false,
                delete: true,
                truncate: false
            }
        );
        let o = parse(&[("actions", Some(""))]).unwrap();
        assert_eq!(
            o.actions,
            Actions {
                insert: false,
                update: false,
                delete: false,
                truncate: false
            }
        );
        let e = parse(&[("actions", Some("insert,upsert"))]).unwrap_err();
        assert_eq!(
            e.message,
            "could not parse value \"upsert\" for parameter \"actions\""
        );
        assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
        let e = parse(&[("actions", Some("insert,,delete"))]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::InvalidName);
        let e = parse(&[("actions", Some("insert delete"))]).unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::InvalidName);
    }

    #[test]
    fn table_lists() {
        let o = parse(&[("add-tables", Some("public.a, *.b, s.*, x\\.y.z\\,w, q.\\*"))]).unwrap();
        assert!(o.table_wanted(b"public", b"a"));
        assert!(!o.table_wanted(b"public", b"c"));
        assert!(o.table_wanted(b"any", b"b"));
        assert!(o.table_wanted(b"s", b"whatever"));
        assert!(o.table_wanted(b"x.y", b"z,w"));
        assert!(o.table_wanted(b"q", b"*"));
        assert!(!o.table_wanted(b"q", b"other"));

        let o = parse(&[
            ("filter-tables", Some("public.a")),
            ("filter-tables", Some("*.b")),
        ])
        .unwrap();
        assert!(!o.table_wanted(b"public", b"a"));
        assert!(!o.table_wanted(b"x", b"b"));
        assert!(o.table_wanted(b"public", b"c"));

        // add-tables given but empty: nothing is added.
        let o = parse(&[("add-tables", Some(""))]).unwrap();
        assert!(!o.table_wanted(b"public", b"a"));

        for bad in ["nodot", "a.b,", "a.b c.d", "a\\", ",a.b"] {
            let e = parse(&[("add-tables", Some(bad))]).unwrap_err();
            assert_eq!(e.kind, OptionErrorKind::InvalidName, "{bad}");
        }
    }

    #[test]
    fn message_prefixes_and_origins() {
        let o = parse(&[
            ("filter-msg-prefixes", Some("a,b")),
            ("add-msg-prefixes", Some("c, a")),
        ])
        .unwrap();
        assert!(!o.message_prefix_wanted(b"a"));
        assert!(o.message_prefix_wanted(b"c"));
        assert!(!o.message_prefix_wanted(b"d"));
        let o = parse(&[("filter-origins", Some("1, 22,x"))]).unwrap();
        assert_eq!(o.filter_origins, vec![1, 22, 0]);
        // Backslashes stay in prefixes, as in wal2json.
        let o = parse(&[("add-msg-prefixes", Some("a\\,b"))]).unwrap();
        assert_eq!(o.add_msg_prefixes, vec![b"a\\,b".to_vec()]);
    }

    #[test]
    fn pgoutput_options() {
        let o = parse(&[("publication_names", Some(" pub_a, \"Pub B\",PUB_C "))]).unwrap();
        assert_eq!(
            o.publication_names,
            Some(vec![
                b"pub_a".to_vec(),
                b"Pub B".to_vec(),
                b"pub_c".to_vec()
            ])
        );
        assert!(!o.messages_enabled());
        assert!(parse(&[]).unwrap().messages_enabled());
        let o = parse(&[("publication_names", Some("p")), ("messages", Some("on"))]).unwrap();
        assert!(o.messages_enabled());
        for bad in ["a,,b", "a b", "\"unterminated", "a,", "\"\""] {
            let e = parse(&[("publication_names", Some(bad))]).unwrap_err();
            assert_eq!(e.kind, OptionErrorKind::InvalidName, "{bad}");
            assert_eq!(e.message, "invalid publication_names syntax");
        }
        // `streaming = parallel` is pgoutput 16+'s; not a boolean on 15.
        let parallel = parse(&[("streaming", Some("parallel"))]);
        if cfg!(feature = "pg15") {
            assert_eq!(
                parallel.unwrap_err().kind,
                OptionErrorKind::InvalidParameterValue
            );
        } else {
            assert!(parallel.unwrap().streaming);
        }
        let empty = parse(&[("publication_names", Some(" "))]);
        if EMPTY_PUBLICATION_NAMES_OK {
            assert_eq!(empty.unwrap().publication_names, Some(vec![]));
        } else {
            let e = empty.unwrap_err();
            assert_eq!(e.kind, OptionErrorKind::InvalidParameterValue);
            assert_eq!(e.message, "publication_names parameter missing");
        }
        let e = parse(&[
            ("publication_names", Some("a")),
            ("publication_names", Some("b")),
        ])
        .unwrap_err();
        assert_eq!(e.kind, OptionErrorKind::SyntaxError);
        assert_eq!(e.message, "conflicting or redundant options");
        assert_eq!(
            parse(&[("origin", Some("NONE"))]).unwrap().origin,
            OriginFilter::None
        );
        assert_eq!(
            parse(&[("origin", Some("any"))]).unwrap().origin,
            OriginFilter::Any
        );
        let e = parse(&[("origin", Some("local"))]).unwrap_err();
        assert_eq!(e.message, "unrecognized origin value: \"local\"");
        let long = "x".repeat(70);
        let o = parse(&[("publication_names", Some(long.as_str()))]).unwrap();
        assert_eq!(o.publication_names.unwrap()[0].len(), 63);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Arbitrary option values never panic: they parse or give an error.
        #[test]
        fn arbitrary_values_never_panic(
            name in proptest::sample::select(&[
                "add-tables",
                "filter-tables",
                "actions",
                "filter-msg-prefixes",
                "format-version",
                "filter-origins",
                "publication_names",
                "origin",
                "include-xids",
                "messages",
            ][..]),
            text in crate::text::json::tests::text(12),
            not_utf8 in proptest::bool::weighted(0.25),
        ) {
            let mut value = text.into_bytes();
            if not_utf8 {
                value.push(0xff);
            }
            let _ = Options::parse([(name, Some(value.as_slice()))]);
            let _ = parse_table_list(&value);
            let _ = split_identifiers(&value);
        }
    }

    #[test]
    fn parse_int_matches_guc_rules() {
        assert_eq!(parse_int(b"010"), Some(8));
        assert_eq!(parse_int(b"-3"), Some(-3));
        assert_eq!(parse_int(b"2.5"), Some(2));
        assert_eq!(parse_int(b"3.5"), Some(4));
        assert_eq!(parse_int(b"1e1"), Some(10));
        assert_eq!(parse_int(b"1 2"), None);
        assert_eq!(parse_int(b""), None);
        assert_eq!(parse_int(b"2kB"), None);
    }
}
