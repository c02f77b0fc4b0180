//! Type names in wal2json's `"types"` / `"type"` fields (pure code).

use super::encoding::ServerEncoding;
use super::json::{json_string, needs_escape};

/// [`type_name_json_in`] in a UTF-8 database (the tests' shorthand).
#[cfg(test)]
pub(crate) fn type_name_json(type_name: &[u8]) -> Vec<u8> {
    type_name_json_in(type_name, ServerEncoding::Utf8)
}

/// Renders a type name the way wal2json does, but always as valid JSON.
///
/// `format_type()` already double-quotes identifiers that need it
/// (`"MyType"`); wal2json then emits such a name as it is instead of escaping
/// it. pubjson does the same whenever that raw form is a valid JSON string
/// (so the bytes match wal2json's), and escapes the whole name otherwise
/// (`"My""Type"`, `"S".t`, `"T"[]`), where wal2json would emit invalid JSON.
/// Outside UTF-8 and SQL_ASCII, non-ASCII bytes in the raw form are left to
/// the conversion of the finished output (`encoding::push_ascii_json`), so
/// a name prints the same way in every encoding.
pub fn type_name_json_in(type_name: &[u8], encoding: ServerEncoding) -> Vec<u8> {
    if is_plain_quoted(type_name, encoding) {
        type_name.to_vec()
    } else {
        json_string(type_name)
    }
}

/// True for `"..."` whose inside needs no JSON escaping at all.
fn is_plain_quoted(s: &[u8], encoding: ServerEncoding) -> bool {
    s.len() >= 2
        && s[0] == b'"'
        && s[s.len() - 1] == b'"'
        && (encoding == ServerEncoding::Other || std::str::from_utf8(s).is_ok())
        && !s[1..s.len() - 1].iter().any(|&b| needs_escape(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::json::tests::text;
    use proptest::prelude::*;

    #[test]
    fn type_names_stay_valid_json() {
        let t = |s: &str| String::from_utf8(type_name_json(s.as_bytes())).unwrap();
        assert_eq!(t("integer"), "\"integer\"");
        assert_eq!(t("character varying(10)"), "\"character varying(10)\"");
        assert_eq!(t("\"MyType\""), "\"MyType\"");
        assert_eq!(t("\"MyType\"[]"), "\"\\\"MyType\\\"[]\"");
        assert_eq!(t("\"My\"\"Type\""), "\"\\\"My\\\"\\\"Type\\\"\"");
        assert_eq!(t("\"S\".t"), "\"\\\"S\\\".t\"");
        assert_eq!(t("\""), "\"\\\"\"");
        assert_eq!(t("\"a\\b\""), "\"\\\"a\\\\b\\\"\"");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn every_type_name_is_valid_json(s in text(40)) {
            let typed = type_name_json(s.as_bytes());
            let parsed: String = serde_json::from_slice(&typed)
                .map_err(|e| TestCaseError::fail(format!("{e}: {s:?}")))?;
            // Either the raw quoted form (its inside) or the whole name.
            prop_assert!(parsed == s || format!("\"{parsed}\"") == s, "{:?}", s);
        }
    }
}
