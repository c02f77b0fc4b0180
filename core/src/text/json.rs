//! JSON building blocks: a byte buffer and PostgreSQL-compatible string escaping.
//!
//! Pure code: no PostgreSQL calls, unit-tested with plain `cargo test`.
//! The escaping is byte-for-byte what PostgreSQL's `escape_json()` produces
//! (which is what wal2json uses), so pubjson's output matches wal2json's.

/// What the escaper must look at: control characters, `"` and `\` (which
/// `escape_json` rewrites) and non-ASCII bytes (checked to be valid UTF-8).
const fn special_table() -> [bool; 256] {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    let mut i = 0x80;
    while i < 0x100 {
        table[i] = true;
        i += 1;
    }
    table
}
pub(crate) static SPECIAL: [bool; 256] = special_table();

/// Nonzero exactly when some byte of `word` is [`SPECIAL`]: below 0x20,
/// `"`, `\` or 0x80 and above (the classic word tests for "has a zero
/// byte" and "has a byte less than", OR-ed; which bits are set says
/// nothing more).
fn special_bits(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v;
    (word
        | (word.wrapping_sub(ONES * 0x20) & !word)
        | zero_bytes(word ^ (ONES * b'"' as u64))
        | zero_bytes(word ^ (ONES * b'\\' as u64)))
        & HIGH
}

/// Whether any of the eight bytes of `word` is [`SPECIAL`].
fn has_special_byte(word: u64) -> bool {
    special_bits(word) != 0
}

/// Whether any byte of `block` (a multiple of eight bytes) is [`SPECIAL`].
fn block_has_special_byte(block: &[u8]) -> bool {
    let mut bits = 0;
    for chunk in block.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        bits |= special_bits(u64::from_le_bytes(word));
    }
    bits != 0
}

/// Bytes that `escape_json` itself rewrites (ASCII only).
pub(crate) fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `\uXXXX` for a UTF-16 code unit (the general form of [`push_u_escape`],
/// which the escaper's hot loop keeps for single bytes).
pub(crate) fn push_u16_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(unit >> 12) as usize],
        HEX[(unit >> 8 & 0xf) as usize],
        HEX[(unit >> 4 & 0xf) as usize],
        HEX[(unit & 0xf) as usize],
    ]);
}

pub(crate) fn push_u_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        b'0',
        b'0',
        HEX[(b >> 4) as usize],
        HEX[(b & 0xf) as usize],
    ]);
}

/// Appends the escape `escape_json` writes for a byte it rewrites
/// ([`needs_escape`]): `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, or `\u00XX`.
fn push_escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => push_u_escape(out, b),
    }
}

/// Length of the valid UTF-8 sequence starting at `s[0]` (a non-ASCII
/// byte), or `None` when it is not one.
pub(crate) fn utf8_sequence_len(s: &[u8]) -> Option<usize> {
    let len = match s[0] {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let seq = s.get(..len)?;
    std::str::from_utf8(seq).ok().map(|_| len)
}

/// Appends `s` as a JSON string literal (with the surrounding quotes).
///
/// Runs of plain bytes are copied in one `extend_from_slice`; the bytes
/// PostgreSQL's `escape_json` rewrites are rewritten the same way, so valid
/// UTF-8 text comes out exactly as wal2json prints it. Bytes that are not
/// valid UTF-8 (message contents are arbitrary bytes; SQL_ASCII and other
/// non-UTF-8 databases hand out their own bytes) become `\u00XX`, their
/// Latin-1 reading, where wal2json would emit invalid JSON. A NUL byte
/// becomes `\u0000` (only message contents can carry one; wal2json truncates).
pub fn push_json_string(out: &mut Vec<u8>, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < s.len() {
        // Long runs of plain bytes 32 at a time, with one branch...
        if let Some(block) = s.get(i..i + 32) {
            if !block_has_special_byte(block) {
                i += 32;
                continue;
            }
        }
        // ...then eight at a time (most text has nothing to escape)...
        if let Some(chunk) = s.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if !has_special_byte(u64::from_le_bytes(word)) {
                i += 8;
                continue;
            }
        }
        // ...otherwise those eight (or the last few) one by one.
        let word_end = (i + 8).min(s.len());
        while i < word_end {
            let b = s[i];
            if !SPECIAL[b as usize] {
                i += 1;
                continue;
            }
            if b >= 0x80 {
                if let Some(len) = utf8_sequence_len(&s[i..]) {
                    i += len;
                    continue;
                }
                out.extend_from_slice(&s[start..i]);
                push_u_escape(out, b);
                i += 1;
                start = i;
                continue;
            }
            out.extend_from_slice(&s[start..i]);
            push_escape(out, b);
            i += 1;
            start = i;
        }
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}

/// Appends `s` as a JSON string the way PostgreSQL's `escape_json` writes
/// it (`json_build_object` and friends): only `"`, `\\` and ASCII control
/// characters are escaped; every other byte, whatever the server's
/// encoding, stays as it is. For text that PostgreSQL itself will read back
/// as JSON in the server's encoding (DDL capture's messages), where
/// [`push_json_string`]'s reading of non-UTF-8 bytes would change them.
pub fn push_escaped_text(out: &mut Vec<u8>, s: &[u8]) {
    escape_text(out, s, Nul::Escaped);
}

/// [`push_escaped_text`] of what comes before the first NUL: `escape_json`
/// of a `pnstrdup()` copy, which is how `jsonb_out` prints a string.
pub fn push_escaped_cstring(out: &mut Vec<u8>, s: &[u8]) {
    escape_text(out, s, Nul::Ends);
}

/// What a NUL byte is to [`escape_text`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nul {
    /// A control character like the others (`\u0000`).
    Escaped,
    /// The end of the string.
    Ends,
}

#[inline(always)]
fn escape_text(out: &mut Vec<u8>, s: &[u8], nul: Nul) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut start = 0;
    // Each run of bytes kept as they are is found with one scan and copied
    // whole (most strings are one run).
    while let Some(run) = s[start..].iter().position(|&b| needs_escape(b)) {
        let i = start + run;
        out.extend_from_slice(&s[start..i]);
        if nul == Nul::Ends && s[i] == 0 {
            out.push(b'"');
            return;
        }
        push_escape(out, s[i]);
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}

/// Returns `s` rendered as a JSON string literal.
pub fn json_string(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

/// "00" to "99": two digits with one table lookup.
pub(crate) const DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut pairs = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        pairs[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    pairs
};

/// Appends the decimal form of an unsigned integer.
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    // Most numbers in a change are small: no buffer, no memcpy call.
    if v < 10 {
        out.push(b'0' + v as u8);
        return;
    }
    if v < 100 {
        out.extend_from_slice(&DIGIT_PAIRS[v as usize]);
        return;
    }
    // The digit count without a division per digit.
    let len = v.ilog10() as usize + 1;
    // Room for the digits (a constant, written with a few vector stores),
    // then the pairs stored in place from the back. Not built in a buffer
    // and copied: wide loads of bytes just stored in pairs stall.
    let start = out.len();
    out.extend_from_slice(&[0u8; 20]);
    out.truncate(start + len);
    let digits = &mut out[start..];
    let mut i = len;
    // Eight digits at a time in 32-bit arithmetic (cheaper than 64-bit
    // division), then pairs.
    while v >= 100_000_000 {
        let mut low = (v % 100_000_000) as u32;
        v /= 100_000_000;
        for _ in 0..4 {
            i -= 2;
            digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[(low % 100) as usize]);
            low /= 100;
        }
    }
    let mut v = v as u32;
    while v >= 100 {
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[(v % 100) as usize]);
        v /= 100;
    }
    if v >= 10 {
        digits[..2].copy_from_slice(&DIGIT_PAIRS[v as usize]);
    } else {
        digits[0] = b'0' + v as u8;
    }
}

/// Appends the decimal form of a signed integer.
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Appends `v` as a JSON number, or as a JSON string of its digits when
/// `quoted` (both formats' numbers-as-strings options).
pub fn push_int(out: &mut Vec<u8>, v: i64, quoted: bool) {
    if quoted {
        out.push(b'"');
        push_i64(out, v);
        out.push(b'"');
    } else {
        push_i64(out, v);
    }
}

/// Appends an LSN as PostgreSQL prints it (`%X/%X`), without quotes.
pub fn push_lsn(out: &mut Vec<u8>, lsn: u64) {
    push_hex_upper(out, (lsn >> 32) as u32);
    out.push(b'/');
    push_hex_upper(out, lsn as u32);
}

fn push_hex_upper(out: &mut Vec<u8>, v: u32) {
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    let mut buf = [0u8; 8];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = UPPER[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// How wal2json classifies a numeric type's text output.
#[derive(Debug, PartialEq, Eq)]
pub enum NumberText {
    /// Digits, signs, exponent and point only: emitted unquoted.
    Plain,
    /// NaN, Infinity or -Infinity (any case): not a JSON number.
    Special,
    /// Anything else: wal2json raises "... is not a number".
    Invalid,
}

/// Classifies the output of int2/int4/int8/oid/float4/float8/numeric
/// as wal2json does (`strspn(s, "0123456789+-eE.")` and case-insensitive
/// prefix checks for NaN/Infinity), except that text of those characters
/// that is not a JSON number (which wal2json would print as it is, and
/// which no such output function prints) is `Invalid` too.
pub fn classify_number(s: &[u8]) -> NumberText {
    fn starts_with_ci(s: &[u8], prefix: &[u8]) -> bool {
        s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
    }
    if starts_with_ci(s, b"NaN")
        || starts_with_ci(s, b"Infinity")
        || starts_with_ci(s, b"-Infinity")
    {
        return NumberText::Special;
    }
    if is_json_number(s) {
        NumberText::Plain
    } else {
        NumberText::Invalid
    }
}

/// RFC 8259's number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(s: &[u8]) -> bool {
    fn digits(s: &[u8], i: &mut usize) -> usize {
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    }
    let mut i = usize::from(s.first() == Some(&b'-'));
    match s.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(s, &mut i);
        }
        _ => return false,
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        if digits(s, &mut i) == 0 {
            return false;
        }
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(s, &mut i) == 0 {
            return false;
        }
    }
    i == s.len()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn esc(s: &[u8]) -> String {
        String::from_utf8(json_string(s)).unwrap()
    }

    fn escaped_text(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_escaped_text(&mut out, s);
        out
    }

    #[test]
    fn escaped_text_is_escape_json() {
        assert_eq!(escaped_text(b""), b"\"\"");
        assert_eq!(
            escaped_text(b"a\"b\\c\nd\re\tf\x08g\x0ch\x01i\x1f"),
            b"\"a\\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u001f\"".to_vec()
        );
        // A NUL is a control character here (push_escaped_cstring ends at it).
        assert_eq!(escaped_text(b"a\0b"), b"\"a\\u0000b\"".to_vec());
        // Bytes of other encodings (LATIN1 0xE9, EUC_JP 0xA4 0xA2) and
        // invalid UTF-8 stay as they are.
        assert_eq!(
            escaped_text(b"\xe9\xa4\xa2/"),
            b"\"\xe9\xa4\xa2/\"".to_vec()
        );
    }

    proptest! {
        #[test]
        fn escaped_text_of_utf8_is_json_that_reads_back(s in text(64)) {
            let out = escaped_text(s.as_bytes());
            let back: String = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(back, s);
        }
    }

    /// Text mixing ASCII, control characters, quotes, backslashes and
    /// multi-byte characters, up to `max_len` characters.
    pub(crate) fn text(max_len: usize) -> impl Strategy<Value = String> {
        const SPECIAL: &[char] = &[
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{1}', '\u{1f}', '\u{7f}', '/', 'é',
            '€', '𝄞', '\u{2028}',
        ];
        let ch = prop_oneof![
            proptest::sample::select(SPECIAL),
            (0u8..0x80).prop_map(char::from),
            (0x20u8..0x7f).prop_map(char::from),
        ];
        proptest::collection::vec(ch, 0..=max_len).prop_map(String::from_iter)
    }

    /// Any bytes, up to `max_len` of them (not always UTF-8).
    pub(crate) fn bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..=max_len)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200_000))]

        #[test]
        fn word_test_agrees_with_the_table(raw in any::<u64>(), fold in any::<u64>()) {
            // Mostly plain ASCII, so both answers get exercised: three bytes
            // in four (by `fold`) are folded into 0x20..0x7f.
            let mut word = raw.to_le_bytes();
            for (b, f) in word.iter_mut().zip(fold.to_le_bytes()) {
                if f % 4 != 0 {
                    *b = 0x20 + (*b % 0x5f);
                }
            }
            let expected = word.iter().any(|&b| SPECIAL[b as usize]);
            prop_assert_eq!(has_special_byte(u64::from_le_bytes(word)), expected, "{:?}", word);
        }
    }

    #[test]
    fn escapes_like_postgres_escape_json() {
        assert_eq!(esc(b"plain"), "\"plain\"");
        assert_eq!(esc(b""), "\"\"");
        assert_eq!(esc(b"a\"b"), "\"a\\\"b\"");
        assert_eq!(esc(b"back\\slash"), "\"back\\\\slash\"");
        assert_eq!(esc(b"\x08\x0c\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
        assert_eq!(esc(b"\x01\x1f"), "\"\\u0001\\u001f\"");
        assert_eq!(esc(b"\x00"), "\"\\u0000\"");
        // DEL and non-ASCII bytes pass through untouched, as in PostgreSQL.
        assert_eq!(esc(b"\x7f"), "\"\x7f\"");
        assert_eq!(esc("ção €".as_bytes()), "\"ção €\"");
        assert_eq!(esc(b"/"), "\"/\"");
    }

    #[test]
    fn invalid_utf8_bytes_become_latin1_escapes() {
        assert_eq!(esc(b"\xff"), "\"\\u00ff\"");
        assert_eq!(esc(b"a\xe9b"), "\"a\\u00e9b\"");
        // A valid sequence stays as it is, a broken one is escaped byte by byte.
        assert_eq!(esc("é".as_bytes()), "\"é\"");
        assert_eq!(esc(b"\xc3"), "\"\\u00c3\"");
        assert_eq!(esc(b"\xe2\x82"), "\"\\u00e2\\u0082\"");
        // UTF-16 surrogates and overlong forms are not UTF-8.
        assert_eq!(esc(b"\xed\xa0\x80"), "\"\\u00ed\\u00a0\\u0080\"");
        assert_eq!(esc(b"\xc0\xaf"), "\"\\u00c0\\u00af\"");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Every possible byte string parses as JSON.
        #[test]
        fn every_byte_string_escapes_to_json(bytes in bytes(11)) {
            let out = json_string(&bytes);
            let parsed: String = serde_json::from_slice(&out).map_err(|e| {
                TestCaseError::fail(format!("{e}: {bytes:?} -> {:?}", String::from_utf8_lossy(&out)))
            })?;
            if let Ok(text) = std::str::from_utf8(&bytes) {
                prop_assert_eq!(parsed, text);
            }
        }
    }

    #[test]
    fn escaped_output_is_valid_json_for_every_byte() {
        for b in 0u8..0x80 {
            let s = [b'x', b, b'y'];
            let out = json_string(&s);
            // serde_json also refuses raw control characters and stray quotes.
            let parsed: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(parsed.as_bytes(), &s, "byte {b:#x}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn every_escaped_string_round_trips_through_a_json_parser(s in text(40)) {
            let out = json_string(s.as_bytes());
            let parsed: String = serde_json::from_slice(&out)
                .map_err(|e| TestCaseError::fail(format!("{e}: {:?}", String::from_utf8_lossy(&out))))?;
            prop_assert_eq!(&parsed, &s);
        }
    }

    #[test]
    fn integers_match_std_formatting() {
        let mut out = Vec::new();
        let edges = (0..20).flat_map(|k| {
            let p = 10u64.pow(k);
            [p - 1, p, p + 1]
        });
        for v in [0u64, 9, 10, 99, 100, 999, 1000, 99_999, u64::MAX]
            .into_iter()
            .chain(edges)
        {
            out.clear();
            push_u64(&mut out, v);
            assert_eq!(String::from_utf8(out.clone()).unwrap(), v.to_string());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        #[test]
        fn every_integer_matches_std_formatting(
            // Every magnitude: shifting spreads the values over all lengths.
            v in (any::<i64>(), 0u32..64).prop_map(|(v, shift)| v >> shift)
        ) {
            let mut out = Vec::new();
            push_i64(&mut out, v);
            prop_assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
    }

    #[test]
    fn integers_and_lsns() {
        let mut v = Vec::new();
        push_u64(&mut v, 0);
        v.push(b' ');
        push_u64(&mut v, u64::MAX);
        v.push(b' ');
        push_i64(&mut v, i64::MIN);
        v.push(b' ');
        push_i64(&mut v, -7);
        v.push(b' ');
        push_lsn(&mut v, 0x0000_0001_0A2B_3C4D);
        v.push(b' ');
        push_lsn(&mut v, 0);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "0 18446744073709551615 -9223372036854775808 -7 1/A2B3C4D 0/0"
        );
    }

    #[test]
    fn number_classification_matches_wal2json() {
        assert_eq!(classify_number(b"42"), NumberText::Plain);
        assert_eq!(classify_number(b"-1.5e+100"), NumberText::Plain);
        assert_eq!(classify_number(b"1E-05"), NumberText::Plain);
        assert_eq!(classify_number(b"NaN"), NumberText::Special);
        assert_eq!(classify_number(b"nan"), NumberText::Special);
        assert_eq!(classify_number(b"Infinity"), NumberText::Special);
        assert_eq!(classify_number(b"-Infinity"), NumberText::Special);
        assert_eq!(classify_number(b"-inf"), NumberText::Invalid);
        assert_eq!(classify_number(b"12 3"), NumberText::Invalid);
        assert_eq!(classify_number(b"0x1f"), NumberText::Invalid);
        // wal2json's characters, but no JSON number: refused, not printed.
        for text in [
            &b""[..],
            b"+5",
            b"1.",
            b".5",
            b"01",
            b"1e",
            b"1e+",
            b"--1",
            b"-",
            b"1-2",
        ] {
            assert_eq!(classify_number(text), NumberText::Invalid, "{text:?}");
        }
        for text in [
            &b"0"[..],
            b"-0",
            b"0.5",
            b"10",
            b"1e5",
            b"2.5E-3",
            b"1.7976931348623157e+308",
        ] {
            assert_eq!(classify_number(text), NumberText::Plain, "{text:?}");
        }
    }
}
