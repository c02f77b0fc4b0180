//! wal2json's two output formats, byte for byte: format 1 (`v1.rs`, one
//! JSON document per transaction) and format 2 (`v2.rs`, one JSON object
//! per change), following wal2json 2.6.
//!
//! Pure code: everything PostgreSQL-specific reaches these modules already
//! rendered (names escaped, type names formatted) or as the
//! [`Value`]s of a [`TupleValues`], so every layout rule is unit-tested
//! without a server. This module holds what both formats share:
//! wal2json's value encoding and which columns a section prints.

pub mod v1;
pub mod v2;

#[cfg(test)]
mod tests;

use crate::model::{ColumnMeta, EncodeError, RelationMeta, TupleValues, Value, ValueKind};
use crate::output::datetime::push_iso_timestamp;
use crate::output::jsonb::jsonb_json_string;
use crate::output::numeric::{numeric_text, NumericKind};
use crate::text::json::{classify_number, push_int, push_json_string, NumberText};

/// Appends a non-null value of `tuple` as wal2json writes it: its output
/// function's text encoded by the column's [`ValueKind`]
/// ([`push_text_value`]). The binary forms the session reads
/// ([`ValueReads::AsText`](crate::model::ValueReads)) are printed here
/// exactly as int2out/int4out/int8out/oidout/boolout/textout/numeric_out/
/// jsonb_out/timestamp_out would, without an fmgr call and a palloc'd
/// string; where one cannot be read, the output function's text is used.
pub fn push_value(
    out: &mut Vec<u8>,
    tuple: &dyn TupleValues,
    column: &ColumnMeta,
    numbers_as_strings: bool,
) -> Result<(), EncodeError> {
    push_read_value(out, &tuple.value(column), tuple, column, numbers_as_strings)
}

/// [`push_value`] of a `value` already read from `tuple` (whose text the
/// value's fallback reads). By reference: a copy of a [`Value`] the callee
/// just returned stalls on store forwarding. Inlined into the formats'
/// value loops, which call it for every value.
#[inline(always)]
pub fn push_read_value(
    out: &mut Vec<u8>,
    value: &Value<'_>,
    tuple: &dyn TupleValues,
    column: &ColumnMeta,
    numbers_as_strings: bool,
) -> Result<(), EncodeError> {
    let text = |out: &mut Vec<u8>| {
        push_text_value(out, column.kind, tuple.text(column), numbers_as_strings)
    };
    match *value {
        Value::Int(v) if column.kind == ValueKind::Number => push_int(out, v, numbers_as_strings),
        Value::Bool(b) if column.kind == ValueKind::Bool => {
            out.extend_from_slice(if b { b"true" } else { b"false" })
        }
        Value::Text(bytes) if column.kind == ValueKind::Text => push_json_string(out, bytes),
        Value::Numeric(body) if column.kind == ValueKind::Number => {
            // Written in place; wal2json's rules then quote it or turn
            // NaN/Infinity into null.
            let start = out.len();
            if numbers_as_strings {
                out.push(b'"');
            }
            match numeric_text(body, out) {
                None => {
                    out.truncate(start);
                    text(out)?;
                }
                Some(_) if numbers_as_strings => out.push(b'"'),
                Some(NumericKind::Special) => {
                    out.truncate(start);
                    out.extend_from_slice(b"null");
                }
                Some(NumericKind::Finite) => {}
            }
        }
        Value::Jsonb(body) if column.kind == ValueKind::Text => {
            if !jsonb_json_string(body, out) {
                text(out)?;
            }
        }
        Value::Timestamp(ts) if column.kind == ValueKind::Text => {
            if !push_quoted_timestamp(out, ts, false) {
                text(out)?;
            }
        }
        Value::TimestampTz(ts) if column.kind == ValueKind::Text => {
            if !push_quoted_timestamp(out, ts, true) {
                text(out)?;
            }
        }
        Value::OutputText(t) | Value::Float(t) => {
            push_text_value(out, column.kind, t, numbers_as_strings)?
        }
        // Everything else (a binary form wal2json does not print itself):
        // the output function's text.
        _ => text(out)?,
    }
    Ok(())
}

/// timestamp_out's (timestamptz_out's in UTC) ISO text as a JSON string;
/// false, with `out` as it was, when it does not print it.
fn push_quoted_timestamp(out: &mut Vec<u8>, ts: i64, utc: bool) -> bool {
    out.push(b'"');
    if push_iso_timestamp(out, ts, utc) {
        out.push(b'"');
        true
    } else {
        out.pop();
        false
    }
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

/// Which columns of a tuple a section prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Selection {
    All,
    PrimaryKey,
    IdentityKey,
}

pub(crate) fn selected(rel: &RelationMeta, col: &ColumnMeta, selection: Selection) -> bool {
    match selection {
        Selection::All => true,
        // RelationGetIndexAttrBitmap() is NULL without an index: every column.
        Selection::PrimaryKey => !rel.has_primary_key || col.in_primary_key,
        Selection::IdentityKey => !rel.has_identity_index || col.in_identity_key,
    }
}
