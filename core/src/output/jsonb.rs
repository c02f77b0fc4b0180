//! `jsonb_out`'s text straight from jsonb's on-disk format, without an fmgr
//! call, an iterator and a palloc'd copy of every string (pure code).
//!
//! Layout (PostgreSQL's jsonb.h): a container is a 32-bit header (element
//! count in the low 28 bits, `0x10000000` raw scalar, `0x20000000` object,
//! `0x40000000` array), then one 32-bit JEntry per child (an object lists
//! its keys, then its values), then the children's data. A JEntry holds the
//! child's type in bits `0x70000000` and, in the low 28 bits, its length, or
//! its end offset when `0x80000000` is set (every 32nd child); a child starts
//! where the previous one ends. Numerics and nested containers start at the
//! next 4-byte boundary. A top-level scalar is a one-element array flagged
//! raw scalar, printed without brackets.
//!
//! `jsonb_out` (`JsonbToCString`) separates elements with `", "`, keys from
//! values with `": "`, escapes strings with `escape_json` and prints numbers
//! with `numeric_out`.

use super::numeric::{numeric_text, NumericKind};
use crate::text::json::{push_escaped_cstring, push_u_escape, utf8_sequence_len, SPECIAL};

const JB_CMASK: u32 = 0x0FFF_FFFF;
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FOBJECT: u32 = 0x2000_0000;
const JB_FARRAY: u32 = 0x4000_0000;

const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISNUMERIC: u32 = 0x1000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JENTRY_ISCONTAINER: u32 = 0x5000_0000;

/// Deeper documents are left to `jsonb_out` (which checks the stack depth).
const MAX_DEPTH: usize = 64;

/// Appends the text `jsonb_out` prints for the bytes after the varlena
/// header. Returns false, with `out` as it was, when the bytes are not a
/// jsonb this understands (the caller then uses the output function).
/// The tests' reference for the other two forms.
#[cfg(test)]
pub(crate) fn jsonb_text(body: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let ok = container(body, 0, Mode::Text, out).is_some();
    if !ok {
        out.truncate(start);
    }
    ok
}

/// Appends a jsonb value as compact JSON (no blanks between tokens):
/// `jsonb_text`'s document, for embedding in format 3. Returns false,
/// with `out` as it was, like `jsonb_text`.
pub fn jsonb_compact(body: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let ok = container(body, 0, Mode::Compact, out).is_some();
    if !ok {
        out.truncate(start);
    }
    ok
}

/// Appends what wal2json prints for a jsonb value: `jsonb_out`'s text as a
/// JSON string (`push_json_string` of `jsonb_text`), in one pass. Returns
/// false, with `out` as it was, like `jsonb_text`.
pub fn jsonb_json_string(body: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    out.push(b'"');
    let ok = container(body, 0, Mode::InJsonString, out).is_some();
    if ok {
        out.push(b'"');
    } else {
        out.truncate(start);
    }
    ok
}

/// Whether a jsonb document is the JSON `null` or an object with a member
/// named `key` at its root, read from the root's header and keys alone
/// (jsonb stores keys unescaped, so `"\u0024json"` is `$json` there). A
/// document this module cannot read is neither. This is what format 3's
/// wrapping of reserved documents asks, without scanning the written text.
pub fn jsonb_is_null_or_has_root_key(body: &[u8], key: &[u8]) -> bool {
    let Some(header) = read_u32(body, 0) else {
        return false;
    };
    let count = (header & JB_CMASK) as usize;
    if header & JB_FSCALAR != 0 {
        return count == 1
            && read_u32(body, 4).is_some_and(|e| e & JENTRY_TYPEMASK == JENTRY_ISNULL);
    }
    if header & JB_FOBJECT == 0 {
        return false;
    }
    // Keys come first in the data, in the order of their entries.
    let data = 4 + count * 2 * 4;
    let mut start = 0;
    for i in 0..count {
        let Some(entry) = read_u32(body, 4 + i * 4) else {
            return false;
        };
        let end = end_of(entry, start);
        if end.checked_sub(start) == Some(key.len())
            && body.get(data + start..data + end) == Some(key)
        {
            return true;
        }
        start = end;
    }
    false
}

/// Whether the text is written as it is or escaped into a JSON string.
/// Only strings differ: the rest of jsonb_out's text (brackets, `, `, `: `,
/// numbers, true/false/null) is ASCII that JSON strings keep as it is.
/// `Compact` is `Text` without the blanks after separators (format 3).
#[derive(Clone, Copy)]
enum Mode {
    /// `jsonb_out`'s text (`jsonb_text`, the tests' reference).
    #[cfg_attr(not(test), allow(dead_code))]
    Text,
    InJsonString,
    Compact,
}

impl Mode {
    /// Appends what separates two elements (each arm a constant-length
    /// copy, not a call to memcpy).
    fn push_element_separator(self, out: &mut Vec<u8>) {
        match self {
            Mode::Compact => out.push(b','),
            Mode::Text | Mode::InJsonString => out.extend_from_slice(b", "),
        }
    }

    /// Appends what separates a key from its value.
    fn push_key_separator(self, out: &mut Vec<u8>) {
        match self {
            Mode::Compact => out.push(b':'),
            Mode::Text | Mode::InJsonString => out.extend_from_slice(b": "),
        }
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn int_align(offset: usize) -> usize {
    (offset + 3) & !3
}

/// One container (`c` starts at its header and may run past its end).
fn container(c: &[u8], depth: usize, mode: Mode, out: &mut Vec<u8>) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let header = read_u32(c, 0)?;
    let count = (header & JB_CMASK) as usize;
    let is_object = header & JB_FOBJECT != 0;
    if !is_object && header & JB_FARRAY == 0 {
        return None;
    }
    let entries = if is_object { count * 2 } else { count };
    let base = 4 + entries * 4;
    let data = c.get(base..)?;
    let entry = |i: usize| read_u32(c, 4 + i * 4);

    if is_object {
        // Values follow the keys: the first value starts where the last key ends.
        let mut value_start = 0;
        for i in (0..count).rev() {
            let e = entry(i)?;
            value_start += (e & JENTRY_OFFLENMASK) as usize;
            if e & JENTRY_HAS_OFF != 0 {
                break;
            }
        }
        out.push(b'{');
        let mut key_start = 0;
        for i in 0..count {
            if i > 0 {
                mode.push_element_separator(out);
            }
            let key = entry(i)?;
            // jsonb's keys are strings; other bytes are not a jsonb
            // PostgreSQL wrote (and would not print as a JSON object).
            if key & JENTRY_TYPEMASK != JENTRY_ISSTRING {
                return None;
            }
            let key_end = end_of(key, key_start);
            scalar_or_container(key, data, key_start, key_end, depth, mode, out)?;
            mode.push_key_separator(out);
            let value = entry(count + i)?;
            let value_end = end_of(value, value_start);
            scalar_or_container(value, data, value_start, value_end, depth, mode, out)?;
            key_start = key_end;
            value_start = value_end;
        }
        out.push(b'}');
    } else {
        let raw_scalar = header & JB_FSCALAR != 0;
        if raw_scalar && count != 1 {
            return None;
        }
        if !raw_scalar {
            out.push(b'[');
        }
        let mut start = 0;
        for i in 0..count {
            if i > 0 {
                mode.push_element_separator(out);
            }
            let e = entry(i)?;
            let end = end_of(e, start);
            scalar_or_container(e, data, start, end, depth, mode, out)?;
            start = end;
        }
        if !raw_scalar {
            out.push(b']');
        }
    }
    Some(())
}

/// A child's end offset from its JEntry and its start.
fn end_of(entry: u32, start: usize) -> usize {
    let field = (entry & JENTRY_OFFLENMASK) as usize;
    if entry & JENTRY_HAS_OFF != 0 {
        field
    } else {
        start + field
    }
}

fn scalar_or_container(
    entry: u32,
    data: &[u8],
    start: usize,
    end: usize,
    depth: usize,
    mode: Mode,
    out: &mut Vec<u8>,
) -> Option<()> {
    match entry & JENTRY_TYPEMASK {
        JENTRY_ISSTRING => match mode {
            Mode::Text | Mode::Compact => push_escaped_cstring(out, data.get(start..end)?),
            Mode::InJsonString => escape_json_twice(out, data.get(start..end)?),
        },
        JENTRY_ISNUMERIC => {
            let numeric = data.get(int_align(start)..end)?;
            let body = varlena_body(numeric)?;
            if numeric_text(body, out)? == NumericKind::Special {
                // Not valid in jsonb; let jsonb_out decide.
                return None;
            }
        }
        JENTRY_ISBOOL_FALSE => out.extend_from_slice(b"false"),
        JENTRY_ISBOOL_TRUE => out.extend_from_slice(b"true"),
        JENTRY_ISNULL => out.extend_from_slice(b"null"),
        JENTRY_ISCONTAINER => container(data.get(int_align(start)..end)?, depth + 1, mode, out)?,
        _ => return None,
    }
    Some(())
}

/// The bytes after an inline, uncompressed varlena header (1 or 4 bytes,
/// little- or big-endian as the server stores them).
fn varlena_body(v: &[u8]) -> Option<&[u8]> {
    let first = *v.first()?;
    #[cfg(target_endian = "little")]
    let (short, external) = (first & 0x01 == 0x01, first == 0x01);
    #[cfg(target_endian = "big")]
    let (short, external) = (first & 0x80 == 0x80, first == 0x80);
    if external {
        return None;
    }
    let (header, size) = if short {
        #[cfg(target_endian = "little")]
        let size = (first >> 1) as usize;
        #[cfg(target_endian = "big")]
        let size = (first & 0x7F) as usize;
        (1, size)
    } else {
        let word = read_u32(v, 0)?;
        #[cfg(target_endian = "little")]
        let (compressed, size) = (word & 0x03 == 0x02, (word >> 2) as usize);
        #[cfg(target_endian = "big")]
        let (compressed, size) = (
            word & 0xC0000000 == 0x40000000,
            (word & 0x3FFF_FFFF) as usize,
        );
        if compressed {
            return None;
        }
        (4, size)
    };
    v.get(header..size)
}

/// `push_json_string`'s escaping (without the outer quotes) of what
/// [`push_escaped_cstring`] prints for `s`: `"` becomes `\\\"`, a newline `\\n`, and
/// bytes that are not UTF-8 `\u00XX` (escape_json keeps them as they are).
fn escape_json_twice(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 4);
    out.extend_from_slice(b"\\\"");
    let mut start = 0;
    let mut end = s.len();
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if !SPECIAL[b as usize] {
            i += 1;
            continue;
        }
        if b == 0 {
            // escape_json() prints a pnstrdup() copy, which ends at a NUL.
            end = i;
            break;
        }
        out.extend_from_slice(&s[start..i]);
        if b >= 0x80 {
            match utf8_sequence_len(&s[i..]) {
                Some(len) => {
                    out.extend_from_slice(&s[i..i + len]);
                    i += len;
                }
                None => {
                    push_u_escape(out, b);
                    i += 1;
                }
            }
            start = i;
            continue;
        }
        match b {
            b'"' => out.extend_from_slice(b"\\\\\\\""),
            b'\\' => out.extend_from_slice(b"\\\\\\\\"),
            0x08 => out.extend_from_slice(b"\\\\b"),
            0x0c => out.extend_from_slice(b"\\\\f"),
            b'\n' => out.extend_from_slice(b"\\\\n"),
            b'\r' => out.extend_from_slice(b"\\\\r"),
            b'\t' => out.extend_from_slice(b"\\\\t"),
            _ => {
                // escape_json's \u00XX, its backslash escaped.
                out.extend_from_slice(b"\\");
                push_u_escape(out, b);
            }
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&s[start..end]);
    out.extend_from_slice(b"\\\"");
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::text::json::json_string;
    use crate::text::json::tests::{bytes, text};
    use proptest::prelude::*;

    /// A JSON value to encode the way PostgreSQL's convertToJsonb does.
    #[derive(Debug, Clone)]
    pub(crate) enum V {
        Null,
        Bool(bool),
        /// Numeric body (after the varlena header) and its numeric_out text.
        Num(Vec<u8>, &'static str),
        Str(Vec<u8>),
        Arr(Vec<V>),
        Obj(Vec<(Vec<u8>, V)>),
    }

    fn pad(buf: &mut Vec<u8>) {
        while !buf.len().is_multiple_of(4) {
            buf.push(0);
        }
    }

    /// Appends a container (or, for a scalar, the raw-scalar array) to
    /// `buf`, which must be 4-byte aligned like PostgreSQL's buffer.
    pub(crate) fn encode(v: &V, buf: &mut Vec<u8>, offsets_every: usize) {
        let (header, children): (u32, Vec<V>) = match v {
            V::Arr(items) => (JB_FARRAY | items.len() as u32, items.clone()),
            V::Obj(pairs) => (
                JB_FOBJECT | pairs.len() as u32,
                pairs
                    .iter()
                    .map(|(k, _)| V::Str(k.clone()))
                    .chain(pairs.iter().map(|(_, v)| v.clone()))
                    .collect(),
            ),
            scalar => (JB_FARRAY | JB_FSCALAR | 1, vec![scalar.clone()]),
        };
        buf.extend_from_slice(&header.to_ne_bytes());
        let entries_at = buf.len();
        buf.resize(entries_at + 4 * children.len(), 0);
        let base = buf.len();
        for (i, child) in children.iter().enumerate() {
            let child_start = buf.len();
            let kind = match child {
                V::Null => JENTRY_ISNULL,
                V::Bool(false) => JENTRY_ISBOOL_FALSE,
                V::Bool(true) => JENTRY_ISBOOL_TRUE,
                V::Str(s) => {
                    buf.extend_from_slice(s);
                    JENTRY_ISSTRING
                }
                V::Num(body, _) => {
                    pad(buf);
                    let size = body.len() + 4;
                    buf.extend_from_slice(&((size as u32) << 2).to_ne_bytes());
                    buf.extend_from_slice(body);
                    JENTRY_ISNUMERIC
                }
                V::Arr(_) | V::Obj(_) => {
                    pad(buf);
                    encode(child, buf, offsets_every);
                    JENTRY_ISCONTAINER
                }
            };
            let e = if i % offsets_every == 0 && i > 0 {
                JENTRY_HAS_OFF | (buf.len() - base) as u32
            } else {
                (buf.len() - child_start) as u32
            };
            let at = entries_at + 4 * i;
            buf[at..at + 4].copy_from_slice(&(kind | e).to_ne_bytes());
        }
    }

    fn expected(v: &V) -> String {
        match v {
            V::Null => "null".into(),
            V::Bool(b) => b.to_string(),
            V::Num(_, t) => t.to_string(),
            V::Str(s) => {
                let mut out = Vec::new();
                push_escaped_cstring(&mut out, s);
                String::from_utf8_lossy(&out).into_owned()
            }
            V::Arr(items) => format!(
                "[{}]",
                items.iter().map(expected).collect::<Vec<_>>().join(", ")
            ),
            V::Obj(pairs) => format!(
                "{{{}}}",
                pairs
                    .iter()
                    .map(|(k, v)| format!("{}: {}", expected(&V::Str(k.clone())), expected(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn render(v: &V, offsets_every: usize) -> Option<String> {
        let mut buf = Vec::new();
        encode(v, &mut buf, offsets_every);
        let mut out = b"prefix".to_vec();
        let mut escaped = b"prefix".to_vec();
        let ok = jsonb_json_string(&buf, &mut escaped);
        if !jsonb_text(&buf, &mut out) {
            assert_eq!(out, b"prefix");
            assert_eq!(escaped, b"prefix");
            assert!(!ok);
            return None;
        }
        // The one-pass JSON string is the text's JSON string.
        assert!(ok);
        // The compact form is the same document without the blanks.
        let mut compact = Vec::new();
        assert!(jsonb_compact(&buf, &mut compact));
        assert!(compact.len() <= out.len() - 6);
        if let Ok(text_doc) = serde_json::from_slice::<serde_json::Value>(&out[6..]) {
            let compact_doc: serde_json::Value = serde_json::from_slice(&compact).unwrap();
            assert_eq!(compact_doc, text_doc);
        }
        assert_eq!(escaped[6..], json_string(&out[6..]));
        Some(String::from_utf8_lossy(&out[6..]).into_owned())
    }

    pub(crate) fn num(text: &'static str) -> V {
        // 1.50: short form, dscale 2, weight 0, digits [1, 5000].
        let body = match text {
            "1.50" => [0x8000u16 | (2 << 7), 1, 5000]
                .iter()
                .flat_map(|d| d.to_ne_bytes())
                .collect(),
            "-7" => [0x8000u16 | 0x2000, 7]
                .iter()
                .flat_map(|d| d.to_ne_bytes())
                .collect(),
            _ => [0x8000u16].iter().flat_map(|d| d.to_ne_bytes()).collect(),
        };
        V::Num(body, text)
    }

    #[test]
    fn an_object_key_that_is_not_a_string_is_refused() {
        // {null: null}: PostgreSQL never writes it, and it is not JSON.
        let buf: Vec<u8> = [JB_FOBJECT | 1, JENTRY_ISNULL, JENTRY_ISNULL]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let mut out = Vec::new();
        assert!(!jsonb_compact(&buf, &mut out));
        assert!(!jsonb_json_string(&buf, &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn prints_like_jsonb_out() {
        let doc = V::Obj(vec![
            (
                b"a".to_vec(),
                V::Arr(vec![num("1.50"), V::Str(b"x\"y".to_vec()), V::Null]),
            ),
            (b"bb".to_vec(), V::Obj(vec![])),
            (b"c\n".to_vec(), V::Arr(vec![])),
            (b"d".to_vec(), V::Bool(true)),
            (b"e".to_vec(), V::Obj(vec![(b"f".to_vec(), num("-7"))])),
        ]);
        assert_eq!(
            render(&doc, 32).unwrap(),
            r#"{"a": [1.50, "x\"y", null], "bb": {}, "c\n": [], "d": true, "e": {"f": -7}}"#
        );
        assert_eq!(
            render(&V::Str(b"s\x01\\".to_vec()), 32).unwrap(),
            r#""s\u0001\\""#
        );
        assert_eq!(render(&num("0"), 32).unwrap(), "0");
        assert_eq!(render(&V::Null, 32).unwrap(), "null");
        assert_eq!(render(&V::Bool(false), 32).unwrap(), "false");
        // pnstrdup stops at a NUL.
        assert_eq!(render(&V::Str(b"a\0b".to_vec()), 32).unwrap(), r#""a""#);
        // Bytes that are not UTF-8 (SQL_ASCII databases) and every control.
        let all: Vec<u8> = (1..=255).collect();
        render(&V::Str(all), 32).unwrap();
        render(&V::Str(b"\xe2\x82 \xe2\x82\xac \xff".to_vec()), 32).unwrap();
    }

    /// PostgreSQL's escape_json() loop over a pnstrdup() copy, byte by byte.
    fn escape_json_reference(s: &[u8]) -> Vec<u8> {
        let mut out = b"\"".to_vec();
        for &b in s.iter().take_while(|&&b| b != 0) {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                _ => out.push(b),
            }
        }
        out.push(b'"');
        out
    }

    proptest! {
        /// The plain run copied whole, then the rest escaped, is the
        /// byte-by-byte loop's string: controls, quotes, backslashes and
        /// NULs anywhere, after a plain run of any length.
        #[test]
        fn escape_json_is_postgresql_s_loop(
            plain in "[a-z\u{e9}]{0,40}",
            rest in proptest::collection::vec(
                prop_oneof![Just(0u8), 1u8..0x20, Just(b'"'), Just(b'\\'), any::<u8>()],
                0..12,
            ),
        ) {
            let mut s = plain.into_bytes();
            s.extend_from_slice(&rest);
            let mut out = b"before".to_vec();
            push_escaped_cstring(&mut out, &s);
            prop_assert_eq!(&out[..6], b"before");
            prop_assert_eq!(&out[6..], &escape_json_reference(&s)[..]);
        }
    }

    /// Any document: scalars of every kind, arrays and objects up to
    /// 20 entries, nested up to 5 levels.
    pub(crate) fn any_value() -> impl Strategy<Value = V> {
        let leaf = prop_oneof![
            Just(V::Null),
            any::<bool>().prop_map(V::Bool),
            proptest::sample::select(&["1.50", "-7", "0"][..]).prop_map(num),
            text(12).prop_map(|s| V::Str(s.into_bytes())),
            bytes(11).prop_map(V::Str),
        ];
        leaf.prop_recursive(4, 400, 20, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..20).prop_map(V::Arr),
                proptest::collection::vec((text(6).prop_map(String::into_bytes), inner), 0..20)
                    .prop_map(V::Obj),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn random_documents_with_offsets_and_lengths(v in any_value()) {
            let want = expected(&v);
            for every in [1, 3, 32] {
                let got = render(&v, every);
                prop_assert_eq!(got.as_deref(), Some(want.as_str()), "{:?}", v);
            }
        }
    }

    /// Any document; two objects in three get a `$json` member, which half
    /// the time is then nested one level down (and so not at the root).
    fn maybe_reserved() -> impl Strategy<Value = V> {
        (any_value(), any::<bool>(), 0usize..3).prop_map(|(v, nest, at)| {
            let reserved = (b"$json".to_vec(), V::Null);
            match v {
                V::Obj(mut pairs) if at < 2 => {
                    let at = at.min(pairs.len());
                    pairs.insert(at, reserved);
                    let obj = V::Obj(pairs);
                    if nest {
                        V::Obj(vec![(b"a".to_vec(), obj)])
                    } else {
                        obj
                    }
                }
                other => other,
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The binary check agrees with the check of the written document.
        #[test]
        fn root_key_check_agrees_with_the_written_document(v in maybe_reserved()) {
            for every in [1, 3, 32] {
                let mut buf = Vec::new();
                encode(&v, &mut buf, every);
                let mut doc = Vec::new();
                prop_assert!(jsonb_compact(&buf, &mut doc));
                let written = crate::output::v3::value::is_reserved_document(&doc, b'\\');
                prop_assert_eq!(jsonb_is_null_or_has_root_key(&buf, b"$json"), written, "{:?}", v);
            }
        }
    }

    #[test]
    fn root_key_check_reads_only_the_root() {
        let check = |v: &V| {
            let mut buf = Vec::new();
            encode(v, &mut buf, 32);
            jsonb_is_null_or_has_root_key(&buf, b"$json")
        };
        let member = |k: &[u8], v: V| (k.to_vec(), v);
        assert!(check(&V::Null));
        assert!(check(&V::Obj(vec![member(b"$json", num("0"))])));
        assert!(check(&V::Obj(vec![
            member(b"a", V::Null),
            member(b"$json", V::Null)
        ])));
        assert!(!check(&V::Arr(vec![V::Null])));
        assert!(!check(&V::Str(b"$json".to_vec())));
        assert!(!check(&V::Str(b"null".to_vec())));
        assert!(!check(&V::Obj(vec![member(b"$jso", V::Null)])));
        assert!(!check(&V::Obj(vec![member(b"$jsonx", V::Null)])));
        assert!(!check(&V::Obj(vec![member(
            b"a",
            V::Obj(vec![member(b"$json", V::Null)])
        )])));
        // A value (not a key) that reads `$json`.
        assert!(!check(&V::Obj(vec![member(
            b"a",
            V::Str(b"$json".to_vec())
        )])));
        // Bytes that are no jsonb.
        assert!(!jsonb_is_null_or_has_root_key(&[], b"$json"));
        assert!(!jsonb_is_null_or_has_root_key(
            &(JB_FOBJECT | 3).to_ne_bytes(),
            b"$json"
        ));
    }

    #[test]
    fn garbage_is_refused_without_output() {
        let mut out = b"x".to_vec();
        assert!(!jsonb_text(&[], &mut out));
        assert!(!jsonb_text(&[1, 2], &mut out));
        // Neither object nor array.
        assert!(!jsonb_text(&3u32.to_ne_bytes(), &mut out));
        // An array of 5 elements with no room for their entries.
        assert!(!jsonb_text(&(JB_FARRAY | 5).to_ne_bytes(), &mut out));
        // Truncating any valid document never panics.
        let mut buf = Vec::new();
        encode(
            &V::Obj(vec![(
                b"key".to_vec(),
                V::Arr(vec![num("1.50"), V::Str(b"s".to_vec())]),
            )]),
            &mut buf,
            1,
        );
        for len in 0..buf.len() {
            let _ = jsonb_text(&buf[..len], &mut out);
        }
        assert_eq!(out, b"x");
        // Nesting past the limit is left to jsonb_out.
        let mut deep = V::Arr(vec![]);
        for _ in 0..=MAX_DEPTH + 1 {
            deep = V::Arr(vec![deep]);
        }
        assert_eq!(render(&deep, 32), None);
    }
}
