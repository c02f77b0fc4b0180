//! wal2json's two output formats, byte for byte: format 1 (`v1.rs`, one
//! JSON document per transaction) and format 2 (`v2.rs`, one JSON object
//! per change), following wal2json 2.6.
//!
//! Pure code: everything PostgreSQL-specific reaches these modules already
//! rendered (names escaped, type names formatted) or behind the
//! [`TupleValues`](crate::model::TupleValues) trait, so every layout rule is
//! unit-tested without a server. This module holds what both formats share:
//! wal2json's value encoding and which columns a section prints.

pub mod v1;
pub mod v2;

#[cfg(test)]
mod tests;

use crate::model::{ColumnMeta, EncodeError, RelationMeta, ValueKind};
use crate::output::encoding::message_name;
use crate::output::json::{classify_number, push_json_string, NumberText};

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

/// `"schema"."table"`, as wal2json's format-2 warnings name a table.
pub(crate) fn qualified_name(rel: &RelationMeta) -> String {
    format!(
        "\"{}\".\"{}\"",
        message_name(&rel.schema, rel.server_encoding),
        message_name(&rel.table, rel.server_encoding)
    )
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
