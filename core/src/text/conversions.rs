//! PostgreSQL's conversion functions from server encodings to UTF-8.
//!
//! The end-to-end encodings suite checks it against `pg_conversion` on
//! every server version.

/// A PostgreSQL function converting a server encoding to UTF-8: the
/// default conversion `pg_conversion` lists (checked against the catalog by
/// the end-to-end tests), found by library and symbol so it can be loaded
/// outside a transaction (a walsender decodes non-transactional messages
/// without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversionRoutine {
    /// As in `pg_proc.probin`.
    pub library: &'static str,
    /// As in `pg_proc.prosrc`.
    pub symbol: &'static str,
}

/// The default conversion from `encoding` (PostgreSQL's name for a server
/// encoding) to UTF-8; `None` for UTF8, SQL_ASCII and MULE_INTERNAL (which
/// PostgreSQL cannot convert to UTF-8).
pub fn to_utf8_routine(encoding: &str) -> Option<ConversionRoutine> {
    let (library, symbol) = match encoding {
        "EUC_JP" => ("$libdir/utf8_and_euc_jp", "euc_jp_to_utf8"),
        "EUC_CN" => ("$libdir/utf8_and_euc_cn", "euc_cn_to_utf8"),
        "EUC_KR" => ("$libdir/utf8_and_euc_kr", "euc_kr_to_utf8"),
        "EUC_TW" => ("$libdir/utf8_and_euc_tw", "euc_tw_to_utf8"),
        "EUC_JIS_2004" => ("$libdir/utf8_and_euc2004", "euc_jis_2004_to_utf8"),
        "LATIN1" => ("$libdir/utf8_and_iso8859_1", "iso8859_1_to_utf8"),
        "LATIN2" | "LATIN3" | "LATIN4" | "LATIN5" | "LATIN6" | "LATIN7" | "LATIN8" | "LATIN9"
        | "LATIN10" | "ISO_8859_5" | "ISO_8859_6" | "ISO_8859_7" | "ISO_8859_8" => {
            ("$libdir/utf8_and_iso8859", "iso8859_to_utf8")
        }
        "WIN866" | "WIN874" | "WIN1250" | "WIN1251" | "WIN1252" | "WIN1253" | "WIN1254"
        | "WIN1255" | "WIN1256" | "WIN1257" | "WIN1258" => ("$libdir/utf8_and_win", "win_to_utf8"),
        "KOI8R" => ("$libdir/utf8_and_cyrillic", "koi8r_to_utf8"),
        "KOI8U" => ("$libdir/utf8_and_cyrillic", "koi8u_to_utf8"),
        _ => return None,
    };
    Some(ConversionRoutine { library, symbol })
}
