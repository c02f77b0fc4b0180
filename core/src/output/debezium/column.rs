//! Debezium's mapping of PostgreSQL's types (pure code): which Kafka
//! Connect schema a column gets ([`push_field_schema`]) and what its
//! values become ([`push_value`]), under the session's settings
//! (`decimal.handling.mode`, `time.precision.mode`,
//! `binary.handling.mode`, `interval.handling.mode`,
//! `hstore.handling.mode`, `include.unknown.datatypes`).
//!
//! A column's type is read from what the catalog reader describes: its
//! name with modifiers as `format_type` prints it (`numeric(10,2)`,
//! `timestamp(3) with time zone`, `integer[]`), a domain's base type, and
//! the type's OID (built-in or not). docs/debezium.md lists the mapping
//! and where it differs from Debezium 3.6's.

use crate::model::{ArrayValues, ColumnMeta, Value};
use crate::options::{
    BinaryMode, DebeziumOptions, DecimalMode, HstoreMode, IntervalMode, TimePrecisionMode,
};
use crate::output::datetime::push_iso8601_timestamp;
use crate::output::jsonb::jsonb_json_string;
use crate::output::numeric::{numeric_text, numeric_unscaled};
use crate::text::json::{push_i64, push_json_string, DIGIT_PAIRS};

/// Lends `f` a buffer kept between calls (cleared): a value's digits,
/// read and rewritten, without an allocation per value.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let r = f(&mut buf);
            // A huge value does not keep its memory.
            if buf.capacity() > 4096 {
                *buf = Vec::new();
            }
            r
        }
        // Lent already (not reentrant today): a buffer of its own.
        Err(_) => f(&mut Vec::new()),
    })
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
pub const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days between 1970-01-01 and 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;
/// Debezium's microseconds per month of an interval (30.4375 days).
const MICROS_PER_MONTH: i64 = 2_629_800_000_000;
const MICROS_PER_DAY: i64 = 86_400_000_000;
/// PostgreSQL's first OID of user-defined objects.
const FIRST_NORMAL_OID: u32 = 16384;

/// What Debezium makes of a column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Int16,
    Int32,
    /// int8, oid.
    Int64,
    Float32,
    Float64,
    Bool,
    /// numeric with its typmod's precision and scale; `None`: no typmod
    /// (Debezium's variable-scale decimal).
    Numeric {
        precision: Option<u32>,
        scale: Option<u32>,
    },
    /// money: a decimal of scale 2.
    Money,
    /// text, varchar, bpchar, name, "char", inet, cidr, macaddr(8), ranges:
    /// the output function's text.
    Text,
    Bytea,
    Uuid,
    Json,
    Jsonb,
    Xml,
    Date,
    /// time(p) (p = 6 without a modifier).
    Time {
        precision: u32,
    },
    TimeTz,
    Timestamp {
        precision: u32,
    },
    TimestampTz {
        precision: u32,
    },
    Interval,
    /// bit(1): a boolean.
    BitBool,
    /// bit(n > 1), bit varying(n): Debezium's `Bits` (`None`: no length).
    Bits {
        length: Option<u32>,
    },
    Point,
    Tsvector,
    Hstore,
    /// A type Debezium has no converter for: with
    /// `include.unknown.datatypes` bytes of its text (the geometric types
    /// as the JDBC driver prints them: `java_numbers`), else left out.
    Unknown {
        java_numbers: bool,
    },
    /// A type of the database's own (an enum, a composite, an extension's
    /// type other than hstore): its text.
    UserDefined,
    Array(Box<Kind>),
}

/// A JSON string's content (type names are JSON strings in the column
/// description).
fn unquote(json: &[u8]) -> Vec<u8> {
    let inner = json
        .strip_prefix(b"\"")
        .and_then(|s| s.strip_suffix(b"\""))
        .unwrap_or(json);
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'\\' && i + 1 < inner.len() {
            out.push(inner[i + 1]);
            i += 2;
        } else {
            out.push(inner[i]);
            i += 1;
        }
    }
    out
}

/// `format_type`'s name split into the name without its modifiers and the
/// modifiers: `timestamp(3) with time zone` is (`timestamp with time
/// zone`, [3]).
fn split_modifiers(name: &[u8]) -> (Vec<u8>, Vec<u32>) {
    let Some(open) = name.iter().position(|&b| b == b'(') else {
        return (name.to_vec(), Vec::new());
    };
    let Some(close) = name[open..].iter().position(|&b| b == b')') else {
        return (name.to_vec(), Vec::new());
    };
    let inside = &name[open + 1..open + close];
    let modifiers = inside
        .split(|&b| b == b',')
        .filter_map(|m| std::str::from_utf8(m).ok()?.trim().parse().ok())
        .collect();
    let mut base = name[..open].to_vec();
    base.extend_from_slice(&name[open + close + 1..]);
    (base, modifiers)
}

/// The kind of a (non-array) type named `base` with `modifiers`; `oid`:
/// whether it is built in.
fn scalar_kind(base: &[u8], modifiers: &[u32], builtin: bool) -> Kind {
    let first = modifiers.first().copied();
    match base {
        b"smallint" => Kind::Int16,
        b"integer" => Kind::Int32,
        b"bigint" | b"oid" => Kind::Int64,
        b"real" => Kind::Float32,
        b"double precision" => Kind::Float64,
        b"boolean" => Kind::Bool,
        b"numeric" => Kind::Numeric {
            precision: first,
            scale: first.map(|_| modifiers.get(1).copied().unwrap_or(0)),
        },
        b"money" => Kind::Money,
        b"text" | b"character varying" | b"character" | b"bpchar" | b"name" | b"\"char\""
        | b"char" | b"inet" | b"cidr" | b"macaddr" | b"macaddr8" | b"int4range" | b"int8range"
        | b"numrange" | b"tsrange" | b"tstzrange" | b"daterange" => Kind::Text,
        b"bytea" => Kind::Bytea,
        b"uuid" => Kind::Uuid,
        b"json" => Kind::Json,
        b"jsonb" => Kind::Jsonb,
        b"xml" => Kind::Xml,
        b"date" => Kind::Date,
        b"time without time zone" => Kind::Time {
            precision: first.unwrap_or(6),
        },
        b"time with time zone" => Kind::TimeTz,
        b"timestamp without time zone" => Kind::Timestamp {
            precision: first.unwrap_or(6),
        },
        b"timestamp with time zone" => Kind::TimestampTz {
            precision: first.unwrap_or(6),
        },
        b"bit" if first.unwrap_or(1) == 1 => Kind::BitBool,
        b"bit" => Kind::Bits { length: first },
        b"bit varying" => Kind::Bits { length: first },
        b"point" => Kind::Point,
        b"line" | b"lseg" | b"box" | b"path" | b"polygon" | b"circle" => {
            Kind::Unknown { java_numbers: true }
        }
        b"tsvector" => Kind::Tsvector,
        _ if base.starts_with(b"interval") => Kind::Interval,
        _ if base == b"hstore" || base.ends_with(b".hstore") => Kind::Hstore,
        _ if builtin => Kind::Unknown {
            java_numbers: false,
        },
        _ => Kind::UserDefined,
    }
}

/// What Debezium makes of `column`'s type (a domain: of its base type).
pub fn kind_of(column: &ColumnMeta) -> Kind {
    let (name_json, oid) = match &column.domain_base {
        Some((name, oid)) => (name.as_slice(), *oid),
        None => (
            column.type_json.as_slice(),
            std::str::from_utf8(&column.type_oid_text)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map_or(0, |v| v as u32),
        ),
    };
    let mut name = unquote(name_json);
    let mut dims = 0;
    while let Some(stripped) = name.strip_suffix(b"[]") {
        name = stripped.to_vec();
        dims += 1;
    }
    let (base, modifiers) = split_modifiers(&name);
    // Built-in types (and arrays of them) have OIDs below the user's.
    let element = scalar_kind(&base, &modifiers, oid < FIRST_NORMAL_OID);
    if dims > 0 {
        Kind::Array(Box::new(element))
    } else {
        element
    }
}

/// Whether a column of this kind is in Debezium's events at all.
pub fn is_included(kind: &Kind, opts: &DebeziumOptions) -> bool {
    match kind {
        Kind::Unknown { .. } => opts.include_unknown_datatypes,
        Kind::Array(element) => is_included(element, opts),
        _ => true,
    }
}

/// `{"type":...,"optional":...,...}` without `field` and its closing
/// brace: the caller adds them.
fn push_schema_open(out: &mut Vec<u8>, kind: &Kind, opts: &DebeziumOptions, optional: bool) {
    let simple = |out: &mut Vec<u8>, ty: &str, name: Option<&str>| {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(ty.as_bytes());
        out.extend_from_slice(b"\",\"optional\":");
        out.extend_from_slice(if optional { b"true" } else { b"false" });
        if let Some(name) = name {
            out.extend_from_slice(b",\"name\":\"");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\",\"version\":1");
        }
    };
    let decimal = |out: &mut Vec<u8>, params: &str| {
        simple(out, "bytes", Some("org.apache.kafka.connect.data.Decimal"));
        out.extend_from_slice(b",\"parameters\":{");
        out.extend_from_slice(params.as_bytes());
        out.push(b'}');
    };
    let connect = opts.time_precision_mode == TimePrecisionMode::Connect;
    match kind {
        Kind::Int16 => simple(out, "int16", None),
        Kind::Int32 => simple(out, "int32", None),
        Kind::Int64 => simple(out, "int64", None),
        Kind::Float32 => simple(out, "float", None),
        Kind::Float64 => simple(out, "double", None),
        Kind::Bool | Kind::BitBool => simple(out, "boolean", None),
        Kind::Numeric { precision, scale } => match opts.decimal_handling_mode {
            DecimalMode::Double => simple(out, "double", None),
            DecimalMode::String => simple(out, "string", None),
            DecimalMode::Precise => match (precision, scale) {
                (Some(p), Some(s)) => {
                    decimal(
                        out,
                        &format!("\"scale\":\"{s}\",\"connect.decimal.precision\":\"{p}\""),
                    );
                }
                _ => {
                    out.extend_from_slice(
                        b"{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},{\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}],\"optional\":",
                    );
                    out.extend_from_slice(if optional { b"true" } else { b"false" });
                    out.extend_from_slice(
                        b",\"name\":\"io.debezium.data.VariableScaleDecimal\",\"version\":1,\"doc\":\"Variable scaled decimal\"",
                    );
                }
            },
        },
        Kind::Money => match opts.decimal_handling_mode {
            DecimalMode::Double => simple(out, "double", None),
            DecimalMode::String => simple(out, "string", None),
            DecimalMode::Precise => decimal(out, "\"scale\":\"2\""),
        },
        Kind::Text | Kind::UserDefined => simple(out, "string", None),
        Kind::Bytea => match opts.binary_handling_mode {
            BinaryMode::Bytes => simple(out, "bytes", None),
            _ => simple(out, "string", None),
        },
        Kind::Uuid => simple(out, "string", Some("io.debezium.data.Uuid")),
        Kind::Json | Kind::Jsonb => simple(out, "string", Some("io.debezium.data.Json")),
        Kind::Xml => simple(out, "string", Some("io.debezium.data.Xml")),
        Kind::Date if connect => simple(out, "int32", Some("org.apache.kafka.connect.data.Date")),
        Kind::Date => simple(out, "int32", Some("io.debezium.time.Date")),
        Kind::Time { precision } => match opts.time_precision_mode {
            TimePrecisionMode::Connect => {
                simple(out, "int32", Some("org.apache.kafka.connect.data.Time"))
            }
            TimePrecisionMode::Adaptive if *precision <= 3 => {
                simple(out, "int32", Some("io.debezium.time.Time"))
            }
            _ => simple(out, "int64", Some("io.debezium.time.MicroTime")),
        },
        Kind::TimeTz => simple(out, "string", Some("io.debezium.time.ZonedTime")),
        Kind::Timestamp { precision } => match opts.time_precision_mode {
            TimePrecisionMode::Connect => simple(
                out,
                "int64",
                Some("org.apache.kafka.connect.data.Timestamp"),
            ),
            _ if *precision <= 3 => simple(out, "int64", Some("io.debezium.time.Timestamp")),
            _ => simple(out, "int64", Some("io.debezium.time.MicroTimestamp")),
        },
        Kind::TimestampTz { .. } => simple(out, "string", Some("io.debezium.time.ZonedTimestamp")),
        Kind::Interval => match opts.interval_handling_mode {
            IntervalMode::Numeric => simple(out, "int64", Some("io.debezium.time.MicroDuration")),
            IntervalMode::String => simple(out, "string", Some("io.debezium.time.Interval")),
        },
        Kind::Bits { length } => {
            simple(out, "bytes", Some("io.debezium.data.Bits"));
            out.extend_from_slice(b",\"parameters\":{\"length\":\"");
            push_i64(out, length.unwrap_or(i32::MAX as u32) as i64);
            out.extend_from_slice(b"\"}");
        }
        Kind::Point => {
            out.extend_from_slice(
                b"{\"type\":\"struct\",\"fields\":[{\"type\":\"double\",\"optional\":false,\"field\":\"x\"},{\"type\":\"double\",\"optional\":false,\"field\":\"y\"},{\"type\":\"bytes\",\"optional\":true,\"field\":\"wkb\"},{\"type\":\"int32\",\"optional\":true,\"field\":\"srid\"}],\"optional\":",
            );
            out.extend_from_slice(if optional { b"true" } else { b"false" });
            out.extend_from_slice(
                b",\"name\":\"io.debezium.data.geometry.Point\",\"version\":1,\"doc\":\"Geometry (POINT)\"",
            );
        }
        Kind::Tsvector => simple(out, "string", Some("io.debezium.data.Tsvector")),
        Kind::Hstore => match opts.hstore_handling_mode {
            HstoreMode::Json => simple(out, "string", Some("io.debezium.data.Json")),
            HstoreMode::Map => {
                out.extend_from_slice(
                    b"{\"type\":\"map\",\"keys\":{\"type\":\"string\",\"optional\":false},\"values\":{\"type\":\"string\",\"optional\":true},\"optional\":",
                );
                out.extend_from_slice(if optional { b"true" } else { b"false" });
            }
        },
        Kind::Unknown { .. } => simple(out, "bytes", None),
        Kind::Array(element) => {
            out.extend_from_slice(b"{\"type\":\"array\",\"items\":");
            push_schema_open(out, element, opts, true);
            out.extend_from_slice(b"},\"optional\":");
            out.extend_from_slice(if optional { b"true" } else { b"false" });
        }
    }
}

/// A struct field's schema: `{"type":...,"optional":...,"field":NAME}`.
pub fn push_field_schema(
    out: &mut Vec<u8>,
    kind: &Kind,
    opts: &DebeziumOptions,
    optional: bool,
    name_json: &[u8],
) {
    push_schema_open(out, kind, opts, optional);
    out.extend_from_slice(b",\"field\":");
    out.extend_from_slice(name_json);
    out.push(b'}');
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytes` in base64 (RFC 4648, padded) with `alphabet`, as a JSON string.
pub fn push_base64_with(out: &mut Vec<u8>, bytes: &[u8], alphabet: &[u8; 64]) {
    out.reserve(bytes.len().div_ceil(3) * 4 + 2);
    out.push(b'"');
    for chunk in bytes.chunks(3) {
        let n = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        out.push(alphabet[(n >> 18) as usize & 63]);
        out.push(alphabet[(n >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            alphabet[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            alphabet[n as usize & 63]
        } else {
            b'='
        });
    }
    out.push(b'"');
}

/// Kafka Connect's JSON of a `bytes` value: base64.
pub fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    push_base64_with(out, bytes, BASE64);
}

/// A bytea value under `binary.handling.mode`.
fn push_binary(out: &mut Vec<u8>, bytes: &[u8], mode: BinaryMode) {
    match mode {
        BinaryMode::Bytes | BinaryMode::Base64 => push_base64_with(out, bytes, BASE64),
        BinaryMode::Base64UrlSafe => push_base64_with(out, bytes, BASE64_URL),
        BinaryMode::Hex => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push(b'"');
            for b in bytes {
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
            out.push(b'"');
        }
    }
}

/// A decimal number's text (`-12.345`) as Java's
/// `BigInteger.toByteArray()` of its unscaled value at `scale` (big
/// endian two's complement, fewest bytes): Kafka Connect's `Decimal`.
/// `None` if the text is not a finite decimal or has more fraction digits
/// than `scale`.
pub fn unscaled_bytes(text: &[u8], scale: usize) -> Option<Vec<u8>> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    let (int_part, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], &digits[dot + 1..]),
        None => (digits, &[][..]),
    };
    if frac.len() > scale
        || int_part.is_empty() && frac.is_empty()
        || !int_part.iter().chain(frac).all(u8::is_ascii_digit)
    {
        return None;
    }
    // Magnitude in base 2^32, little-endian limbs.
    let mut limbs: Vec<u32> = Vec::new();
    let padding = std::iter::repeat_n(&b'0', scale - frac.len());
    for &d in int_part.iter().chain(frac).chain(padding) {
        let mut carry = (d - b'0') as u64;
        for limb in limbs.iter_mut() {
            let v = *limb as u64 * 10 + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let mut magnitude: Vec<u8> = limbs.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    let leading = magnitude.iter().take_while(|&&b| b == 0).count();
    magnitude.drain(..leading);
    if magnitude.is_empty() {
        return Some(vec![0]);
    }
    if !negative {
        if magnitude[0] & 0x80 != 0 {
            magnitude.insert(0, 0);
        }
        return Some(magnitude);
    }
    // Two's complement: invert and add one.
    let mut carry = true;
    for b in magnitude.iter_mut().rev() {
        *b = !*b;
        if carry {
            let (v, overflow) = b.overflowing_add(1);
            *b = v;
            carry = overflow;
        }
    }
    if magnitude[0] & 0x80 == 0 {
        magnitude.insert(0, 0xFF);
    }
    // -2^(8n-1) has one byte too many: 0xFF 0x80 ... is 0x80 ....
    while magnitude.len() > 1 && magnitude[0] == 0xFF && magnitude[1] & 0x80 != 0 {
        magnitude.remove(0);
    }
    Some(magnitude)
}

/// [`unscaled_bytes`] in base64; through an i128 when the digits fit
/// (nearly always: 38 of them), without allocating.
pub fn push_unscaled(out: &mut Vec<u8>, text: &[u8], scale: usize) -> bool {
    if let Some(v) = unscaled_i128(text, scale) {
        push_i128_bytes(out, v);
        return true;
    }
    match unscaled_bytes(text, scale) {
        Some(bytes) => {
            push_bytes(out, &bytes);
            true
        }
        None => false,
    }
}

/// The unscaled value of a decimal text at `scale` as an i128, `None`
/// when it does not fit (or is not a decimal: [`unscaled_bytes`] decides).
fn unscaled_i128(text: &[u8], scale: usize) -> Option<i128> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    let mut v: i128 = 0;
    let mut fraction = None;
    let mut count = 0;
    for &b in digits {
        if b == b'.' && fraction.is_none() {
            fraction = Some(0);
            continue;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((b - b'0') as i128)?;
        count += 1;
        if let Some(f) = fraction.as_mut() {
            *f += 1;
        }
    }
    let fraction = fraction.unwrap_or(0);
    if count == 0 || fraction > scale {
        return None;
    }
    for _ in fraction..scale {
        v = v.checked_mul(10)?;
    }
    Some(if negative { -v } else { v })
}

/// The number of fraction digits of a decimal text.
fn fraction_digits(text: &[u8]) -> usize {
    text.iter()
        .position(|&b| b == b'.')
        .map_or(0, |dot| text.len() - dot - 1)
}

/// A decimal's text under `decimal.handling.mode`; `scale`: the column's
/// (None: the value's own, Debezium's variable-scale struct). Returns
/// false (nothing written) where Debezium writes null: NaN and the
/// infinities in precise mode.
fn push_decimal(out: &mut Vec<u8>, text: &[u8], scale: Option<u32>, mode: DecimalMode) -> bool {
    let special = matches!(text, b"NaN" | b"Infinity" | b"-Infinity");
    match mode {
        // Debezium writes the specials by its Java enum's names.
        DecimalMode::String => push_json_string(
            out,
            match text {
                b"NaN" => b"NAN",
                b"Infinity" => b"POSITIVE_INFINITY",
                b"-Infinity" => b"NEGATIVE_INFINITY",
                _ => text,
            },
        ),
        DecimalMode::Double => {
            if special {
                push_json_string(out, text);
            } else {
                let Some(v) = std::str::from_utf8(text)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                else {
                    return false;
                };
                push_double(out, v);
            }
        }
        DecimalMode::Precise => {
            if special {
                return false;
            }
            match scale {
                Some(scale) => {
                    if !push_unscaled(out, text, scale as usize) {
                        return false;
                    }
                }
                None => {
                    let scale = fraction_digits(text);
                    let start = out.len();
                    out.extend_from_slice(b"{\"scale\":");
                    push_i64(out, scale as i64);
                    out.extend_from_slice(b",\"value\":");
                    if !push_unscaled(out, text, scale) {
                        out.truncate(start);
                        return false;
                    }
                    out.push(b'}');
                }
            }
        }
    }
    true
}

/// A finite numeric in `precise` mode straight from its stored digits:
/// the unscaled value's bytes at the column's scale, or Debezium's
/// variable-scale struct at its own (what [`push_decimal`] writes from the
/// text). False, writing nothing, where that needs the text (a special
/// value, more fraction digits than the scale, more than 38 digits).
fn push_numeric_unscaled(out: &mut Vec<u8>, body: &[u8], scale: Option<u32>) -> bool {
    let Some((v, at)) = numeric_unscaled(body, scale.map(|s| s as usize)) else {
        return false;
    };
    match scale {
        Some(_) => push_i128_bytes(out, v),
        None => {
            out.extend_from_slice(b"{\"scale\":");
            push_i64(out, at as i64);
            out.extend_from_slice(b",\"value\":");
            push_i128_bytes(out, v);
            out.push(b'}');
        }
    }
    true
}

/// An i128 as Java's `BigInteger.toByteArray()` (the fewest big-endian
/// two's-complement bytes), in base64.
fn push_i128_bytes(out: &mut Vec<u8>, v: i128) {
    // The bits that only repeat the sign, then one sign bit at least.
    let repeated = if v < 0 {
        (!v).leading_zeros()
    } else {
        v.leading_zeros()
    } as usize;
    let len = ((128 - repeated) / 8 + 1).min(16);
    push_bytes(out, &v.to_be_bytes()[16 - len..]);
}

/// A finite double as a JSON number (Rust's shortest digits; `1.0`, not
/// `1`, as Java writes a double); NaN and the infinities as Jackson
/// writes them, strings.
pub fn push_double(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else {
        out.extend_from_slice(format!("{v:?}").as_bytes());
    }
}

/// Java's `Double.toString(v)` for a finite double (what the JDBC driver's
/// geometric objects print): plain from 10^-3 to below 10^7 with at least
/// one fraction digit, else `d.dddE[-]n`. Digits: the shortest that read
/// back as `v` (Java 19+; Java 17 sometimes prints one more).
pub fn java_double(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let abs = v.abs();
    if (1e-3..1e7).contains(&abs) {
        let s = format!("{v:?}");
        if s.contains('e') {
            // Debug chose exponent form for a value in range: write plain.
            return format!("{v}");
        }
        return s;
    }
    let sci = format!("{v:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let mantissa = if mantissa.contains('.') {
        mantissa.to_owned()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}E{exponent}")
}

/// `text` with every number rewritten as [`java_double`] (a geometric
/// value's text as the JDBC driver's object prints it).
fn java_numbers(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        let starts_number =
            b.is_ascii_digit() || b == b'-' && text.get(i + 1).is_some_and(u8::is_ascii_digit);
        if !starts_number {
            out.push(b);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < text.len()
            && (text[i].is_ascii_digit()
                || matches!(text[i], b'.' | b'e' | b'E')
                || matches!(text[i], b'+' | b'-') && matches!(text[i - 1], b'e' | b'E'))
        {
            i += 1;
        }
        let number = std::str::from_utf8(&text[start..i])
            .ok()
            .and_then(|s| s.parse::<f64>().ok());
        match number {
            Some(v) => out.extend_from_slice(java_double(v).as_bytes()),
            None => out.extend_from_slice(&text[start..i]),
        }
    }
    out
}

/// `HH:MM:SS[.ffffff]` as microseconds since midnight.
pub fn parse_time(text: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(text).ok()?;
    let mut parts = s.splitn(3, ':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let sec = parts.next()?;
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let s: i64 = whole.parse().ok()?;
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().ok()?
    };
    h.checked_mul(60)?
        .checked_add(m)?
        .checked_mul(60)?
        .checked_add(s)?
        .checked_mul(1_000_000)?
        .checked_add(micros)
}

/// timetz's text (`13:14:15.5+02`, `10:00:00-03:30`) as Debezium's
/// ZonedTime: converted to UTC, `HH:MM:SS[.f]Z` (fraction without
/// trailing zeros, as `DateTimeFormatter.ISO_OFFSET_TIME` prints it).
pub fn push_zoned_time(out: &mut Vec<u8>, text: &[u8]) -> bool {
    let Some(sign_at) = text.iter().rposition(|&b| b == b'+' || b == b'-') else {
        return false;
    };
    let Some(local) = parse_time(&text[..sign_at]) else {
        return false;
    };
    let Ok(zone) = std::str::from_utf8(&text[sign_at + 1..]) else {
        return false;
    };
    let mut offset = 0i64;
    for (i, part) in zone.split(':').enumerate() {
        // PostgreSQL's offsets are within ±15:59:59.
        let Some(v) = part.parse::<i64>().ok().filter(|v| (0..100).contains(v)) else {
            return false;
        };
        offset += v * [3600, 60, 1].get(i).copied().unwrap_or(0);
    }
    if text[sign_at] == b'-' {
        offset = -offset;
    }
    let Some(utc) = local.checked_sub(offset * 1_000_000) else {
        return false;
    };
    let utc = utc.rem_euclid(MICROS_PER_DAY);
    let secs = utc / 1_000_000;
    let micros = utc % 1_000_000;
    out.extend_from_slice(
        format!(
            "\"{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
        .as_bytes(),
    );
    if micros != 0 {
        let frac = format!("{micros:06}");
        out.push(b'.');
        out.extend_from_slice(frac.trim_end_matches('0').as_bytes());
    }
    out.extend_from_slice(b"Z\"");
    true
}

/// A timestamptz (microseconds since 2000-01-01 UTC) as Debezium's
/// ZonedTimestamp: `2026-03-04T12:14:15.654321Z` with `precision` fraction
/// digits; the infinities as `"infinity"` and `"-infinity"`.
fn push_zoned_timestamp(out: &mut Vec<u8>, ts: i64, precision: u32) -> bool {
    if ts == i64::MAX || ts == i64::MIN {
        out.extend_from_slice(if ts == i64::MAX {
            b"\"infinity\""
        } else {
            b"\"-infinity\""
        });
        return true;
    }
    let start = out.len();
    out.push(b'"');
    // The whole seconds, then the fraction cut to the precision (beyond
    // PostgreSQL's range nothing is written).
    let Some(whole) = ts.checked_sub(ts.rem_euclid(1_000_000)) else {
        out.truncate(start);
        return false;
    };
    if !push_iso8601_timestamp(out, whole, true) {
        out.truncate(start);
        return false;
    }
    // "...:SSZ": put the fraction before the Z.
    out.pop();
    if precision > 0 {
        let micros = (ts - whole) as usize;
        let pairs = [micros / 10000, micros / 100 % 100, micros % 100];
        let mut frac = [b'.'; 7];
        for (n, pair) in pairs.into_iter().enumerate() {
            frac[1 + 2 * n..3 + 2 * n].copy_from_slice(&DIGIT_PAIRS[pair]);
        }
        out.extend_from_slice(&frac[..1 + precision.min(6) as usize]);
    }
    out.extend_from_slice(b"Z\"");
    true
}

/// money's text (`$1,234.56`, `-$5.00`, `($5.00)`) as a decimal text.
fn money_decimal(text: &[u8]) -> Vec<u8> {
    let negative = text.contains(&b'-') || text.contains(&b'(');
    let mut out = Vec::with_capacity(text.len());
    if negative {
        out.push(b'-');
    }
    out.extend(
        text.iter()
            .copied()
            .filter(|b| b.is_ascii_digit() || *b == b'.'),
    );
    out
}

/// A bit string's text (`1010`) as Debezium's Bits: the bits read as a
/// number, its bytes little-endian without high zero bytes
/// (`java.util.BitSet.toByteArray`).
fn bits_bytes(text: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; text.len().div_ceil(8)];
    for (i, &b) in text.iter().rev().enumerate() {
        if b == b'1' {
            bytes[i / 8] |= 1 << (i % 8);
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// A point's text `(x,y)` as Debezium's Point struct (with its WKB).
fn push_point(out: &mut Vec<u8>, text: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(text) else {
        return false;
    };
    let inner = s.trim().trim_start_matches('(').trim_end_matches(')');
    let Some((x, y)) = inner.split_once(',') else {
        return false;
    };
    let (Ok(x), Ok(y)) = (x.trim().parse::<f64>(), y.trim().parse::<f64>()) else {
        return false;
    };
    let mut wkb = vec![1u8, 1, 0, 0, 0];
    wkb.extend_from_slice(&x.to_le_bytes());
    wkb.extend_from_slice(&y.to_le_bytes());
    out.extend_from_slice(b"{\"x\":");
    push_double(out, x);
    out.extend_from_slice(b",\"y\":");
    push_double(out, y);
    out.extend_from_slice(b",\"wkb\":");
    push_bytes(out, &wkb);
    out.extend_from_slice(b",\"srid\":null}");
    true
}

/// One key of an hstore value and its value (`None`: NULL).
pub type HstorePair = (Vec<u8>, Option<Vec<u8>>);

/// hstore's text (`"a"=>"1", "b"=>NULL`) as its pairs.
pub fn hstore_pairs(text: &[u8]) -> Option<Vec<HstorePair>> {
    fn quoted(text: &[u8], i: &mut usize) -> Option<Vec<u8>> {
        if text.get(*i) != Some(&b'"') {
            return None;
        }
        *i += 1;
        let mut s = Vec::new();
        loop {
            match *text.get(*i)? {
                b'"' => {
                    *i += 1;
                    return Some(s);
                }
                b'\\' => {
                    s.push(*text.get(*i + 1)?);
                    *i += 2;
                }
                b => {
                    s.push(b);
                    *i += 1;
                }
            }
        }
    }
    let mut pairs = Vec::new();
    let mut i = 0;
    let skip_blanks = |i: &mut usize| {
        while text
            .get(*i)
            .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
        {
            *i += 1;
        }
    };
    skip_blanks(&mut i);
    while i < text.len() {
        let key = quoted(text, &mut i)?;
        if text.get(i..i + 2) != Some(b"=>") {
            return None;
        }
        i += 2;
        let value = if text.get(i..i + 4) == Some(b"NULL") {
            i += 4;
            None
        } else {
            Some(quoted(text, &mut i)?)
        };
        pairs.push((key, value));
        skip_blanks(&mut i);
    }
    Some(pairs)
}

/// An hstore value as a JSON object (`{"a":"1","b":null}`), its strings
/// written by `string`.
fn push_hstore_object(out: &mut Vec<u8>, pairs: &[HstorePair], string: fn(&mut Vec<u8>, &[u8])) {
    out.push(b'{');
    for (n, (k, v)) in pairs.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        string(out, k);
        out.push(b':');
        match v {
            Some(v) => string(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b'}');
}

/// A JSON string whose bytes outside ASCII stay as they are: for JSON
/// text that is itself written as a JSON string, whose own escaping then
/// turns them into `\u00XX` where they are not UTF-8 (and the rewrite of
/// non-UTF-8 databases into their characters: one level of escapes only).
fn push_json_string_raw(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1F => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// The interval as Debezium's ISO 8601 string (`interval.handling.mode`
/// string): `P<y>Y<m>M<d>DT<h>H<m>M<s>S`, every part written.
fn push_interval_string(out: &mut Vec<u8>, months: i32, days: i32, micros: i64) {
    let years = months / 12;
    let months = months % 12;
    let hours = micros / 3_600_000_000;
    let minutes = micros / 60_000_000 % 60;
    let seconds = micros % 60_000_000;
    let mut secs = format!("{}", seconds / 1_000_000);
    let frac = (seconds % 1_000_000).abs();
    if seconds < 0 && seconds > -1_000_000 {
        secs = "-0".to_owned();
    }
    if frac != 0 {
        secs.push('.');
        secs.push_str(format!("{frac:06}").trim_end_matches('0'));
    }
    out.extend_from_slice(
        format!("\"P{years}Y{months}M{days}DT{hours}H{minutes}M{secs}S\"").as_bytes(),
    );
}

/// Appends a non-null value of a column of `kind` as Debezium writes it;
/// `text`: the value's output function text (for values read as text and
/// fallbacks). Returns false (nothing written) where Debezium writes null.
pub fn push_value(
    out: &mut Vec<u8>,
    kind: &Kind,
    value: Value<'_>,
    text: &dyn Fn() -> Vec<u8>,
    opts: &DebeziumOptions,
) -> bool {
    let time_mode = opts.time_precision_mode;
    match (kind, value) {
        (Kind::Int16 | Kind::Int32 | Kind::Int64, Value::Int(v)) => push_i64(out, v),
        (Kind::Float32 | Kind::Float64, Value::Float(t)) => match t {
            b"NaN" | b"Infinity" | b"-Infinity" => push_json_string(out, t),
            _ => out.extend_from_slice(t),
        },
        (Kind::Bool, Value::Bool(b)) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        (Kind::Numeric { scale, .. }, Value::Numeric(body))
            if opts.decimal_handling_mode == DecimalMode::Precise
                && push_numeric_unscaled(out, body, *scale) => {}
        (Kind::Numeric { scale, .. }, Value::Numeric(body)) => {
            return with_scratch(|digits| {
                if numeric_text(body, digits).is_none() {
                    *digits = text();
                }
                push_decimal(out, digits, *scale, opts.decimal_handling_mode)
            });
        }
        (Kind::Money, _) => {
            let digits = money_decimal(&text());
            return push_decimal(out, &digits, Some(2), opts.decimal_handling_mode);
        }
        (Kind::Bytea, Value::Bytea(bytes)) => push_binary(out, bytes, opts.binary_handling_mode),
        (Kind::Jsonb, Value::Jsonb(body)) => {
            // Its text as a JSON string, in one pass.
            if !jsonb_json_string(body, out) {
                push_json_string(out, &text());
            }
        }
        (Kind::Date, Value::Date(days)) => {
            // The infinities: the int32's ends (Debezium writes numbers
            // that mean nothing).
            let v = match days {
                i32::MAX | i32::MIN => days,
                _ => days.saturating_add(PG_EPOCH_DAYS),
            };
            push_i64(out, v as i64);
        }
        (Kind::Time { precision }, _) => {
            let Some(micros) = parse_time(&text()) else {
                return false;
            };
            let millis = matches!(time_mode, TimePrecisionMode::Connect)
                || matches!(time_mode, TimePrecisionMode::Adaptive) && *precision <= 3;
            push_i64(out, if millis { micros / 1000 } else { micros });
        }
        (Kind::TimeTz, _) => return push_zoned_time(out, &text()),
        (Kind::Timestamp { precision }, Value::Timestamp(ts)) => {
            let millis = matches!(time_mode, TimePrecisionMode::Connect) || *precision <= 3;
            let v = match ts {
                i64::MAX | i64::MIN => ts,
                _ => {
                    let unix = ts.saturating_add(PG_EPOCH_MICROS);
                    if millis {
                        unix.div_euclid(1000)
                    } else {
                        unix
                    }
                }
            };
            push_i64(out, v);
        }
        (Kind::TimestampTz { precision }, Value::TimestampTz(ts)) => {
            return push_zoned_timestamp(out, ts, *precision)
        }
        (
            Kind::Interval,
            Value::Interval {
                months,
                days,
                micros,
            },
        ) => match opts.interval_handling_mode {
            // Saturating: PostgreSQL 17's infinite intervals (every field
            // at its end) are the int64's ends.
            IntervalMode::Numeric => push_i64(
                out,
                (months as i64)
                    .saturating_mul(MICROS_PER_MONTH)
                    .saturating_add((days as i64).saturating_mul(MICROS_PER_DAY))
                    .saturating_add(micros),
            ),
            IntervalMode::String => push_interval_string(out, months, days, micros),
        },
        (Kind::BitBool, _) => {
            out.extend_from_slice(if text() == b"1" { b"true" } else { b"false" })
        }
        (Kind::Bits { .. }, _) => push_bytes(out, &bits_bytes(&text())),
        (Kind::Point, _) => return push_point(out, &text()),
        (Kind::Hstore, _) => {
            let Some(pairs) = hstore_pairs(&text()) else {
                return false;
            };
            match opts.hstore_handling_mode {
                HstoreMode::Map => push_hstore_object(out, &pairs, push_json_string),
                HstoreMode::Json => {
                    let mut doc = Vec::new();
                    push_hstore_object(&mut doc, &pairs, push_json_string_raw);
                    push_json_string(out, &doc);
                }
            }
        }
        (Kind::Unknown { java_numbers: true }, _) => push_bytes(out, &java_numbers(&text())),
        (Kind::Unknown { .. }, _) => push_bytes(out, &text()),
        (Kind::Array(element), Value::Array(array)) => {
            let mut written = None;
            array.read(&mut |elements| {
                written = Some(push_elements(out, element, elements, opts));
            });
            return written.unwrap_or(false);
        }
        (
            Kind::Text | Kind::UserDefined | Kind::Uuid | Kind::Json | Kind::Xml | Kind::Tsvector,
            Value::Text(t) | Value::Json(t) | Value::OutputText(t),
        ) => push_json_string(out, t),
        // A value read in another form than expected: its text.
        _ => push_json_string(out, &text()),
    }
    true
}

/// A one-dimensional array's elements (Debezium has no other arrays:
/// several dimensions, or an element it writes as null, make the whole
/// value null).
fn push_elements(
    out: &mut Vec<u8>,
    element: &Kind,
    elements: &dyn ArrayValues,
    opts: &DebeziumOptions,
) -> bool {
    let dims = elements.dims();
    if dims.len() > 1 {
        return false;
    }
    let start = out.len();
    out.push(b'[');
    for i in 0..dims.first().copied().unwrap_or(0) {
        if i > 0 {
            out.push(b',');
        }
        match elements.element(i) {
            None => out.extend_from_slice(b"null"),
            Some(value) => {
                let text = || elements.element_text(i).to_vec();
                if !push_value(out, element, value, &text, opts) {
                    out.truncate(start);
                    return false;
                }
            }
        }
    }
    out.push(b']');
    true
}

/// What Debezium writes for an unchanged TOAST value of a column of
/// `kind`: `unavailable.value.placeholder` as the type's JSON (text as a
/// string, bytes as their base64, an integer array as the placeholder's
/// bytes, one number each).
pub fn push_unavailable(out: &mut Vec<u8>, kind: &Kind, opts: &DebeziumOptions) {
    let placeholder = &opts.unavailable_value_placeholder;
    match kind {
        Kind::Bytea => push_binary(out, placeholder, opts.binary_handling_mode),
        Kind::Bits { .. } | Kind::Unknown { .. } => push_bytes(out, placeholder),
        Kind::Hstore if opts.hstore_handling_mode == HstoreMode::Map => {
            out.extend_from_slice(b"{}")
        }
        Kind::Array(element) => match **element {
            Kind::Int16 | Kind::Int32 | Kind::Int64 => {
                out.push(b'[');
                for (i, b) in placeholder.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    push_i64(out, *b as i64);
                }
                out.push(b']');
            }
            _ => {
                out.push(b'[');
                push_json_string(out, placeholder);
                out.push(b']');
            }
        },
        _ => push_json_string(out, placeholder),
    }
}
