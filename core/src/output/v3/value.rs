//! Format 3's typed values (pure code): what a column's value becomes in a
//! row object, given what PostgreSQL's side read from the datum
//! ([`Value`]). Binary forms are used where they are cheap (integers,
//! numeric, jsonb, timestamps, dates, bytea); the rest arrives as text.
//!
//! | type | JSON |
//! |---|---|
//! | int2, int4, int8, oid | number |
//! | float4, float8, numeric | number with PostgreSQL's digits; `"NaN"`, `"Infinity"`, `"-Infinity"` as strings |
//! | bool | `true` / `false` |
//! | json | the document, embedded (blanks between tokens removed) |
//! | jsonb | the document, embedded, compact |
//! | arrays | JSON arrays, nested per dimension, `null` elements; non-default lower bounds: the text form as a string |
//! | timestamptz | `"2026-12-02T11:12:50.120197Z"` (UTC) |
//! | timestamp | `"2026-12-02T11:12:50.120197"` |
//! | date | `"2026-12-02"` |
//! | interval | ISO 8601 duration `"P1Y2M3DT4H5M6.5S"` (IntervalStyle `iso_8601`) |
//! | bytea | base64 (RFC 4648, with padding) string |
//! | anything else | its output function's text as a string |
//!
//! A json or jsonb document that is the JSON `null`, or an object with a
//! member named `$json`, is written wrapped as `{"$json":document}` (in
//! columns and array elements alike): SQL NULL is `null`, and a consumer
//! unwraps every json/jsonb value that is an object with a `$json` member.
//!
//! Timestamps, dates and intervals ignore DateStyle, TimeZone and
//! IntervalStyle; BC years are
//! astronomical (`0000` is 1 BC, then `-000001`); the infinities are the
//! strings `"infinity"` and `"-infinity"`.

use crate::model::{ArrayValues, ColumnMeta, TupleValues, Value};
use crate::output::datetime::{push_iso8601_date, push_iso8601_interval, push_iso8601_timestamp};
use crate::output::jsonb::{jsonb_compact, jsonb_is_null_or_has_root_key};
use crate::output::numeric::{numeric_text, NumericKind};
use crate::text::encoding::VALUE_BACKSLASH;
use crate::text::json::{push_int, push_json_string};

/// How values are written for a session and relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// numeric-data-types-as-string: numbers are quoted.
    pub numbers_as_strings: bool,
    /// The output is rewritten to ASCII
    /// ([`push_ascii_json`](crate::text::encoding::push_ascii_json)):
    /// json text is written with every backslash as [`VALUE_BACKSLASH`],
    /// so that none of the document's own escapes (`\u00b0`) can be taken
    /// for a database byte the encoders escaped.
    pub ascii: bool,
}

/// The binary form could not be read: the caller writes the output
/// function's text instead ([`push_text_fallback`]). Nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsText;

/// Appends a non-null value of `tuple` as format 3 writes it; where its
/// binary form cannot be read, its output function's text.
pub fn push_column(out: &mut Vec<u8>, tuple: &dyn TupleValues, column: &ColumnMeta, style: Style) {
    let value = tuple.value(column);
    if push_value(out, value, style).is_err() {
        push_text_fallback(out, value, tuple.text(column), style);
    }
}

/// The output function's `text` of `value`, whose binary form was not
/// readable: a number's digits for numeric, the document for jsonb, a
/// string otherwise.
pub fn push_text_fallback(out: &mut Vec<u8>, value: Value<'_>, text: &[u8], style: Style) {
    let fallback = match value {
        Value::Numeric(_) => Value::Float(text),
        Value::Jsonb(_) => Value::Json(text),
        _ => Value::Text(text),
    };
    // Text forms are always written.
    let _ = push_value(out, fallback, style);
}

/// Appends `value` as format 3 writes it.
pub fn push_value(out: &mut Vec<u8>, value: Value<'_>, style: Style) -> Result<(), NeedsText> {
    let numbers_as_strings = style.numbers_as_strings;
    match value {
        Value::Int(v) => push_int(out, v, numbers_as_strings),
        Value::Float(text) => push_number_text(out, text, numbers_as_strings),
        Value::Numeric(body) => {
            // Written bare, then quoted in the rarer cases that need it.
            let start = out.len();
            match numeric_text(body, out) {
                None => return Err(NeedsText),
                Some(NumericKind::Finite) if !numbers_as_strings => {}
                Some(_) => {
                    out.insert(start, b'"');
                    out.push(b'"');
                }
            }
        }
        Value::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        Value::Text(text) | Value::OutputText(text) => push_json_string(out, text),
        Value::Json(text) if style.ascii => {
            let start = out.len();
            push_compact_json(out, text);
            mark_backslashes(&mut out[start..]);
            wrap_reserved_document(out, start, VALUE_BACKSLASH);
        }
        Value::Json(text) => {
            let start = out.len();
            push_compact_json(out, text);
            wrap_reserved_document(out, start, b'\\');
        }
        Value::Jsonb(body) => {
            let start = out.len();
            if !jsonb_compact(body, out) {
                return Err(NeedsText);
            }
            // The binary form answers without a scan of the written text.
            if jsonb_is_null_or_has_root_key(body, WRAPPER_KEY) {
                wrap_document(out, start);
            }
        }
        Value::Bytea(bytes) => push_base64(out, bytes),
        Value::Timestamp(ts) | Value::TimestampTz(ts) => {
            let utc = matches!(value, Value::TimestampTz(_));
            out.push(b'"');
            if !push_iso8601_timestamp(out, ts, utc) {
                out.pop();
                return Err(NeedsText);
            }
            out.push(b'"');
        }
        Value::Interval {
            months,
            days,
            micros,
        } => {
            out.push(b'"');
            push_iso8601_interval(out, months, days, micros);
            out.push(b'"');
        }
        Value::Date(days) => {
            out.push(b'"');
            if !push_iso8601_date(out, days) {
                out.pop();
                return Err(NeedsText);
            }
            out.push(b'"');
        }
        Value::Array(array) => {
            // With lower bounds other than 1, the text form (which shows
            // them) as a string: the caller's fallback.
            let mut written = false;
            array.read(&mut |elements| {
                if elements.default_bounds() {
                    push_elements(out, elements, style);
                    written = true;
                }
            });
            if !written {
                return Err(NeedsText);
            }
        }
    }
    Ok(())
}

/// An array's elements as nested JSON arrays, `null` for NULL.
fn push_elements(out: &mut Vec<u8>, elements: &dyn ArrayValues, style: Style) {
    let _ = push_array(out, elements.dims(), |out, i| -> Result<(), ()> {
        match elements.element(i) {
            Some(value) => {
                if push_value(out, value, style).is_err() {
                    push_text_fallback(out, value, elements.element_text(i), style);
                }
            }
            None => out.extend_from_slice(b"null"),
        }
        Ok(())
    });
}

/// Whether `s` is a number in JSON's grammar
/// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
pub fn is_json_number(s: &[u8]) -> bool {
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if s.first() == Some(&b'-') {
        i += 1;
    }
    match s.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == s.len()
}

/// A number's text: unquoted when JSON can carry it, a string otherwise
/// (NaN, Infinity, -Infinity, or anything unexpected).
fn push_number_text(out: &mut Vec<u8>, text: &[u8], numbers_as_strings: bool) {
    if !numbers_as_strings && is_json_number(text) {
        out.extend_from_slice(text);
    } else {
        push_json_string(out, text);
    }
}

/// Copies a JSON document without the blanks between its tokens: one
/// output message stays one line (pg_recvlogical separates messages with
/// newlines) and takes fewer bytes. Strings are copied as they are.
pub fn push_compact_json(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.extend_from_slice(&text[start..i]);
            start = i + 1;
        }
    }
    out.extend_from_slice(&text[start..]);
}

/// The member that wraps a json or jsonb document (see
/// [`wrap_reserved_document`]).
pub const WRAPPER_KEY: &[u8] = b"$json";

/// Wraps the document written at `out[start..]` as `{"$json":document}`
/// when it is the JSON `null` (which would read as SQL NULL) or an object
/// with a member named `$json` (which would read as a wrapper). Every
/// other document is written as it is. `backslash` is what the document's
/// backslashes were written as.
pub fn wrap_reserved_document(out: &mut Vec<u8>, start: usize, backslash: u8) {
    if is_reserved_document(&out[start..], backslash) {
        wrap_document(out, start);
    }
}

/// What opens a wrapped document: `{"` [`WRAPPER_KEY`] `":`.
pub(super) const WRAPPER_OPEN: &[u8] = b"{\"$json\":";

/// Wraps the document written at `out[start..]` as `{"$json":document}`.
fn wrap_document(out: &mut Vec<u8>, start: usize) {
    out.splice(start..start, WRAPPER_OPEN.iter().copied());
    out.push(b'}');
}

/// Whether a compact document must be wrapped (see
/// [`wrap_reserved_document`]).
pub fn is_reserved_document(doc: &[u8], backslash: u8) -> bool {
    if doc == b"null" {
        return true;
    }
    if doc.first() != Some(&b'{') {
        return false;
    }
    // Depth 1 is the document's own object: a string right after its `{`
    // or one of its `,` is a member name.
    let mut depth = 0usize;
    let mut expect_key = false;
    let mut i = 0;
    while i < doc.len() {
        match doc[i] {
            b'"' => {
                let name_start = i + 1;
                let mut j = name_start;
                while j < doc.len() && doc[j] != b'"' {
                    if doc[j] == backslash {
                        j += 1;
                    }
                    j += 1;
                }
                let end = j.min(doc.len());
                if depth == 1 && expect_key && is_wrapper_key(&doc[name_start..end], backslash) {
                    return true;
                }
                expect_key = false;
                i = end + 1;
                continue;
            }
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => expect_key = depth == 1,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Whether a member name's string content (between the quotes, escapes
/// as they are) means [`WRAPPER_KEY`].
fn is_wrapper_key(raw: &[u8], backslash: u8) -> bool {
    // Compared character by character as the escapes are read: no copy.
    let mut matched = 0;
    let mut i = 0;
    while i < raw.len() {
        if matched >= WRAPPER_KEY.len() {
            return false;
        }
        let b = raw[i];
        if b != backslash {
            if b != WRAPPER_KEY[matched] {
                return false;
            }
            matched += 1;
            i += 1;
            continue;
        }
        let c = match raw.get(i + 1) {
            Some(b'u') => {
                let Some(hex) = raw.get(i + 2..i + 6) else {
                    return false;
                };
                let Some(unit) = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                else {
                    return false;
                };
                i += 6;
                match u8::try_from(unit) {
                    Ok(c) if c.is_ascii() => c,
                    _ => return false,
                }
            }
            Some(&c) => {
                i += 2;
                match c {
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    // `"`, `\\`, `/`.
                    _ => c,
                }
            }
            None => return false,
        };
        if c != WRAPPER_KEY[matched] {
            return false;
        }
        matched += 1;
    }
    matched == WRAPPER_KEY.len()
}

/// Replaces every backslash of a JSON document by
/// [`VALUE_BACKSLASH`](crate::text::encoding::VALUE_BACKSLASH). In JSON
/// a backslash only occurs inside a string, where it starts an escape (or
/// is the second character of `\\`): every one of them is the document's.
pub fn mark_backslashes(doc: &mut [u8]) {
    for b in doc.iter_mut().filter(|b| **b == b'\\') {
        *b = crate::text::encoding::VALUE_BACKSLASH;
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` as a base64 string (RFC 4648 standard alphabet, padded).
pub fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len().div_ceil(3) * 4 + 2);
    out.push(b'"');
    let mut chunks = bytes.chunks_exact(3);
    for c in &mut chunks {
        let n = (c[0] as u32) << 16 | (c[1] as u32) << 8 | c[2] as u32;
        out.extend_from_slice(&[
            BASE64[(n >> 18) as usize & 63],
            BASE64[(n >> 12) as usize & 63],
            BASE64[(n >> 6) as usize & 63],
            BASE64[n as usize & 63],
        ]);
    }
    match *chunks.remainder() {
        [a] => {
            let n = (a as u32) << 16;
            out.extend_from_slice(&[
                BASE64[(n >> 18) as usize & 63],
                BASE64[(n >> 12) as usize & 63],
                b'=',
                b'=',
            ]);
        }
        [a, b] => {
            let n = (a as u32) << 16 | (b as u32) << 8;
            out.extend_from_slice(&[
                BASE64[(n >> 18) as usize & 63],
                BASE64[(n >> 12) as usize & 63],
                BASE64[(n >> 6) as usize & 63],
                b'=',
            ]);
        }
        _ => {}
    }
    out.push(b'"');
}

/// Appends an array with dimensions `dims` (outermost first) as nested
/// JSON arrays; `element(out, i)` writes the `i`-th element in storage
/// order (row-major). No dimensions: `[]`.
pub fn push_array<E>(
    out: &mut Vec<u8>,
    dims: &[usize],
    mut element: impl FnMut(&mut Vec<u8>, usize) -> Result<(), E>,
) -> Result<(), E> {
    if dims.is_empty() || dims.contains(&0) {
        out.extend_from_slice(b"[]");
        return Ok(());
    }
    let mut next = 0;
    nest(out, dims, &mut next, &mut element)
}

fn nest<E>(
    out: &mut Vec<u8>,
    dims: &[usize],
    next: &mut usize,
    element: &mut impl FnMut(&mut Vec<u8>, usize) -> Result<(), E>,
) -> Result<(), E> {
    out.push(b'[');
    for i in 0..dims[0] {
        if i > 0 {
            out.push(b',');
        }
        if dims.len() == 1 {
            element(out, *next)?;
            *next += 1;
        } else {
            nest(out, &dims[1..], next, element)?;
        }
    }
    out.push(b']');
    Ok(())
}
