//! Output in databases whose encoding is not UTF-8 (pure code).
//!
//! The encoders write text bytes as they come from the database: runs that
//! happen to be valid UTF-8 are copied, every other non-ASCII byte becomes
//! `\u00XX` (see [`json::push_json_string`](super::json::push_json_string)).
//! In a UTF-8 database that is exactly wal2json's output. In a LATIN1 or
//! EUC_JP database it is wrong both ways: bytes that look like UTF-8 are
//! misread (`Ã©` arrives as `é`), the others arrive as Latin-1, and raw
//! EUC_JP bytes next to a backslash are not even valid text in the database
//! encoding, so the SQL functions fail after the slot moved.
//!
//! [`push_ascii_json`] repairs a finished message: it recovers the
//! database's bytes (a raw byte or a `\u00XX` escape with XX >= 0x80: the
//! encoders escape nothing else that way, since a backslash in text is
//! written `\\`), converts each run of non-ASCII bytes to UTF-8 with
//! PostgreSQL's own conversion routine (a [`ToUtf8`]) and writes every
//! non-ASCII character as `\uXXXX` (a surrogate pair above U+FFFF). The
//! result is pure ASCII: valid in every server encoding (the SQL
//! functions) and JSON that decodes to the right characters (a walsender
//! sends the bytes as they are). In every server encoding, all bytes of a
//! multibyte character are >= 0x80, so ASCII bytes always end a run.
//!
//! JSON text embedded as it is (format 3's `json` values) has escapes of
//! its own, and a user's `\u00b0` is the character U+00B0, not a database
//! byte. Such text is written with [`VALUE_BACKSLASH`] instead of each of
//! its backslashes (format 3's json values, `v3::value::push_value`):
//! that byte is never in what the encoders write otherwise (database text
//! holds no NUL, and the encoders escape one as `\u0000`), so the rewrite
//! turns it back into a backslash and never reads what follows as an
//! escaped byte. A backslash in the message is always the encoders'.

pub use super::conversions::{to_utf8_routine, ConversionRoutine};
use super::json::{push_u16_escape, push_u_escape};

/// What a backslash of embedded JSON text is written as before the ASCII
/// rewrite (see the module comment): NUL, which the encoders never write.
pub const VALUE_BACKSLASH: u8 = 0;

pub use crate::model::ServerEncoding;

/// Converts text in the server encoding to UTF-8.
pub trait ToUtf8 {
    /// Appends the UTF-8 form of the longest convertible prefix of `src`
    /// (non-ASCII bytes only) to `out` and returns that prefix's length:
    /// less than `src.len()` when `src[returned]` starts a sequence that is
    /// invalid or has no UTF-8 equivalent.
    fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize;
}

/// Appends `message` (complete output of the encoders) to `out` as pure
/// ASCII, converting its text with `converter` (see the module comment).
/// A byte the converter cannot take is written as `\u00XX`, its Latin-1
/// reading, as in SQL_ASCII: nothing is dropped and the output stays JSON.
pub fn push_ascii_json(
    out: &mut Vec<u8>,
    message: &[u8],
    converter: &mut impl ToUtf8,
    scratch: &mut Vec<u8>,
) {
    out.reserve(message.len());
    // The database's bytes of the current non-ASCII run.
    let mut run: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < message.len() {
        let b = message[i];
        if b >= 0x80 {
            run.push(b);
            i += 1;
            continue;
        }
        if b == b'\\' {
            if let Some(byte) = escaped_high_byte(&message[i..]) {
                run.push(byte);
                i += 6;
                continue;
            }
        }
        flush_run(out, &mut run, converter, scratch);
        if b == VALUE_BACKSLASH {
            // A value's own backslash: what follows is its escape, ASCII.
            out.push(b'\\');
            i += 1;
            continue;
        }
        // An escape other than `\u00XX` (XX >= 0x80) is copied whole, so
        // its second character is never taken for the start of another.
        let len = if b == b'\\' { 2 } else { 1 };
        let end = (i + len).min(message.len());
        out.extend_from_slice(&message[i..end]);
        i = end;
    }
    flush_run(out, &mut run, converter, scratch);
}

/// The byte XX of a `\u00XX` escape at the start of `s` when XX >= 0x80.
fn escaped_high_byte(s: &[u8]) -> Option<u8> {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    match s.get(..6)? {
        [b'\\', b'u', b'0', b'0', hi, lo] => {
            let byte = hex(*hi)? << 4 | hex(*lo)?;
            (byte >= 0x80).then_some(byte)
        }
        _ => None,
    }
}

/// Converts and writes the bytes of `run`, then empties it.
fn flush_run(
    out: &mut Vec<u8>,
    run: &mut Vec<u8>,
    converter: &mut impl ToUtf8,
    scratch: &mut Vec<u8>,
) {
    let mut rest = &run[..];
    while !rest.is_empty() {
        scratch.clear();
        let converted = converter.convert(rest, scratch).min(rest.len());
        push_utf8_as_escapes(out, scratch);
        rest = &rest[converted..];
        if let Some((&bad, after)) = rest.split_first() {
            push_u_escape(out, bad);
            rest = after;
        }
    }
    run.clear();
}

/// Writes UTF-8 text as `\uXXXX` escapes (ASCII as itself, though a
/// conversion of non-ASCII bytes yields none); bytes that are not UTF-8
/// (a converter's fault) as `\u00XX`.
fn push_utf8_as_escapes(out: &mut Vec<u8>, utf8: &[u8]) {
    for chunk in utf8.utf8_chunks() {
        for c in chunk.valid().chars() {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                push_u16_escape(out, *unit);
            }
        }
        for &b in chunk.invalid() {
            push_u_escape(out, b);
        }
    }
}

/// `"schema"."table"`, as warnings name a table (wal2json's format 2
/// and format 3).
pub fn qualified_name(rel: &crate::model::RelationMeta) -> String {
    format!(
        "\"{}\".\"{}\"",
        message_name(&rel.schema, rel.server_encoding),
        message_name(&rel.table, rel.server_encoding)
    )
}

/// A name (of a table, schema, publication) for a server message: PostgreSQL
/// reads message text in the server encoding, so outside UTF-8 databases
/// only ASCII is safe there: every other byte is written `\xNN`.
pub fn message_name(name: &[u8], encoding: ServerEncoding) -> String {
    match encoding {
        ServerEncoding::Utf8 => String::from_utf8_lossy(name).into_owned(),
        ServerEncoding::SqlAscii | ServerEncoding::Other => {
            let mut s = String::with_capacity(name.len());
            for &b in name {
                if b.is_ascii() {
                    s.push(b as char);
                } else {
                    s.push_str(&format!("\\x{b:02x}"));
                }
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Value;
    use crate::output::v3::value::{push_value, Style};
    use crate::text::json::json_string;

    /// Format 3's values in a database whose output is rewritten to ASCII.
    const ASCII: Style = Style {
        numbers_as_strings: false,
        ascii: true,
    };

    /// LATIN1: every byte is the code point of the same number.
    struct Latin1;
    impl ToUtf8 for Latin1 {
        fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize {
            let text: String = src.iter().map(|&b| b as char).collect();
            out.extend_from_slice(text.as_bytes());
            src.len()
        }
    }

    /// A two-character EUC_JP table (`日` A4FC... simplified): pairs of bytes
    /// in A1..FE map to fixed characters; anything else stops conversion.
    struct TinyEucJp;
    impl ToUtf8 for TinyEucJp {
        fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize {
            let mut i = 0;
            while let Some(pair) = src.get(i..i + 2) {
                let c = match pair {
                    [0xc6, 0xfc] => '日',
                    [0xcb, 0xdc] => '本',
                    [0xe4, 0xa1] => '筺',
                    [0xa1, 0xa1] => '\u{3000}',
                    [0xa1, 0xa2] => '𠀋', // stands in for a character beyond the BMP
                    _ => break,
                };
                out.extend_from_slice(c.to_string().as_bytes());
                i += 2;
            }
            i
        }
    }

    fn ascii(message: &[u8], converter: &mut impl ToUtf8) -> String {
        let mut out = Vec::new();
        push_ascii_json(&mut out, message, converter, &mut Vec::new());
        assert!(out.is_ascii(), "{out:?}");
        String::from_utf8(out).unwrap()
    }

    /// What a JSON parser reads from the ASCII output of an encoded string.
    fn round_trip(text: &[u8], converter: &mut impl ToUtf8) -> String {
        let json = ascii(&json_string(text), converter);
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn latin1_bytes_become_their_characters() {
        // é (E9) is not UTF-8: the encoder wrote \u00e9; Ã© (C3 A9) looks
        // like UTF-8 and was copied: both are read as LATIN1.
        assert_eq!(round_trip(b"t\xe9", &mut Latin1), "té");
        assert_eq!(round_trip(b"\xc3\xa9", &mut Latin1), "Ã©");
        assert_eq!(
            ascii(&json_string(b"\xc3\xa9"), &mut Latin1),
            "\"\\u00c3\\u00a9\""
        );
    }

    #[test]
    fn euc_jp_runs_are_converted_whole() {
        assert_eq!(round_trip(b"\xc6\xfc\xcb\xdc", &mut TinyEucJp), "日本");
        // The issue's text: E4 A1 looks like the start of UTF-8, A1 A1 not.
        assert_eq!(
            round_trip(b"\xe4\xa1\xa1\xa1", &mut TinyEucJp),
            "筺\u{3000}"
        );
        assert_eq!(
            ascii(&json_string(b"a\xc6\xfc\"b"), &mut TinyEucJp),
            "\"a\\u65e5\\\"b\""
        );
    }

    #[test]
    fn characters_beyond_the_bmp_become_surrogate_pairs() {
        assert_eq!(
            ascii(&json_string(b"\xa1\xa2"), &mut TinyEucJp),
            "\"\\ud840\\udc0b\""
        );
        assert_eq!(round_trip(b"\xa1\xa2", &mut TinyEucJp), "𠀋");
    }

    #[test]
    fn unconvertible_bytes_are_kept_as_latin1_and_the_rest_converted() {
        // C6 alone (cut short by an ASCII byte) and FF are invalid.
        assert_eq!(
            round_trip(b"\xc6x\xff\xc6\xfc", &mut TinyEucJp),
            "\u{c6}x\u{ff}日"
        );
        assert_eq!(round_trip(b"\xc6\xfc\xc6", &mut TinyEucJp), "日\u{c6}");
    }

    #[test]
    fn ascii_escapes_are_left_alone() {
        // A backslash in text is \\ (never the start of \u00XX), control
        // characters stay \u00XX below 0x80, other escapes pass through.
        for text in [
            &b"\\u00e9"[..],
            b"\\\\u00e9",
            b"\x01\x1f\n\t\"",
            b"\\",
            b"",
            b"plain",
        ] {
            let encoded = json_string(text);
            assert_eq!(ascii(&encoded, &mut Latin1).as_bytes(), &encoded[..]);
        }
    }

    #[test]
    fn whole_messages_keep_their_structure() {
        let message = b"{\"a\":\"\xe9\",\"b\":[1,\"\\u00ff\"],\"c\":\"\\\\u00e9\"}";
        let out = ascii(message, &mut Latin1);
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["a"], "é");
        assert_eq!(value["b"][1], "ÿ");
        assert_eq!(value["c"], "\\u00e9");
    }

    #[test]
    fn every_latin1_string_round_trips() {
        // All bytes, in windows of three, through the encoder and back.
        for a in 0u8..=255 {
            for b in [0u8, b'\\', b'"', 0x7f, 0x80, 0xa9, 0xc3, 0xff] {
                let text = [a, b, a];
                let expected: String = text.iter().map(|&b| b as char).collect();
                assert_eq!(round_trip(&text, &mut Latin1), expected, "{text:?}");
            }
        }
    }

    /// What a JSON parser reads from the ASCII output of a message that
    /// embeds `doc` (json text in the database encoding) as format 3 does.
    fn embedded(doc: &[u8], converter: &mut impl ToUtf8) -> serde_json::Value {
        let mut message = b"{\"t\":".to_vec();
        message.extend_from_slice(&json_string(b"\xc6\xfc\xe9"));
        message.extend_from_slice(b",\"j\":");
        push_value(&mut message, Value::Json(doc), ASCII).unwrap();
        message.push(b'}');
        let out = ascii(&message, converter);
        let mut value: serde_json::Value = serde_json::from_str(&out).unwrap();
        value["j"].take()
    }

    #[test]
    fn escapes_of_embedded_json_are_not_database_bytes() {
        // The issue's EUC_KR case: \u00b0\u00a1 is "°¡", not the bytes B0 A1
        // (and \u00a1\u00a1 not the bytes of U+3000).
        assert_eq!(
            embedded(
                br#"{"k":"\u00b0\u00a1","l":"\u00a1\u00a1"}"#,
                &mut TinyEucJp
            ),
            serde_json::json!({"k": "°¡", "l": "¡¡"})
        );
        // Next to a database character, upper-case, and after \\.
        assert_eq!(
            embedded(
                b"[\"\\u00a4\xc6\xfc\",\"\\u00C6\\u00FC\",\"\\\\u00e9\"]",
                &mut TinyEucJp
            ),
            serde_json::json!(["¤日", "Æü", "\\u00e9"])
        );
        assert_eq!(
            embedded(br#""\u0080\u00ff\ud83d\ude00\"\/""#, &mut Latin1),
            serde_json::json!("\u{80}\u{ff}😀\"/")
        );
        // The marker never reaches the output.
        let mut message = Vec::new();
        push_value(&mut message, Value::Json(br#"["\\","\u00e9"]"#), ASCII).unwrap();
        assert!(!message.contains(&b'\\'));
        assert_eq!(ascii(&message, &mut Latin1), r#"["\\","\u00e9"]"#);
    }

    #[test]
    fn every_escape_of_the_bmp_means_its_character() {
        // Every code point as an escape (lower and upper case hex, twice), between
        // database characters, and every character beyond the BMP as a
        // surrogate pair: what serde_json reads from the document itself.
        let mut doc = b"[".to_vec();
        let mut expected = Vec::new();
        for cp in (0u32..=0xffff).filter(|cp| !(0xd800..0xe000).contains(cp)) {
            for escape in [format!("\\u{cp:04x}"), format!("\\u{cp:04X}")] {
                if doc.len() > 1 {
                    doc.push(b',');
                }
                doc.extend_from_slice(b"\"\xc6\xfc");
                doc.extend_from_slice(escape.repeat(2).as_bytes());
                doc.extend_from_slice(b"\xcb\xdc\"");
                let c = char::from_u32(cp).unwrap();
                expected.push(serde_json::Value::String(format!("日{c}{c}本")));
            }
        }
        for c in ['\u{10000}', '😀', '\u{10ffff}'] {
            let mut units = [0u16; 2];
            let pair: String = c
                .encode_utf16(&mut units)
                .iter()
                .map(|u| format!("\\u{u:04x}"))
                .collect();
            doc.extend_from_slice(format!(",\"{pair}\"").as_bytes());
            expected.push(serde_json::Value::String(c.to_string()));
        }
        doc.push(b']');
        assert_eq!(
            embedded(&doc, &mut TinyEucJp),
            serde_json::Value::Array(expected)
        );
    }

    #[test]
    fn routines_cover_the_server_encodings() {
        assert_eq!(to_utf8_routine("UTF8"), None);
        assert_eq!(to_utf8_routine("SQL_ASCII"), None);
        assert_eq!(to_utf8_routine("MULE_INTERNAL"), None);
        assert_eq!(
            to_utf8_routine("EUC_JP"),
            Some(ConversionRoutine {
                library: "$libdir/utf8_and_euc_jp",
                symbol: "euc_jp_to_utf8"
            })
        );
        assert_eq!(to_utf8_routine("WIN1252").unwrap().symbol, "win_to_utf8");
    }

    #[test]
    fn message_names_are_ascii_outside_utf8() {
        assert_eq!(message_name("té".as_bytes(), ServerEncoding::Utf8), "té");
        assert_eq!(message_name(b"t\xe9", ServerEncoding::Other), "t\\xe9");
        assert_eq!(
            message_name(b"\xc3\xa9", ServerEncoding::SqlAscii),
            "\\xc3\\xa9"
        );
    }
}
