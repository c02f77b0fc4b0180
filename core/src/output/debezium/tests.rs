//! The Debezium format byte by byte: the type mapping's pieces (decimals,
//! times, bits, hstore, geometric text), the schemas, and whole records
//! (every one parsed with serde_json) for inserts, updates (also of the
//! key), deletes with tombstones, transaction metadata, skipped
//! operations, truncates, messages and batching. The values themselves
//! are compared with Debezium 3.6's by the e2e differential
//! (e2e/tests/debezium.rs).

use super::column::{
    hstore_pairs, java_double, kind_of, parse_time, push_field_schema, push_value, push_zoned_time,
    unscaled_bytes, Kind,
};
use super::*;
use crate::model::{ChangeHeader, ColumnMeta, Value, ValueKind};
use crate::options::{
    Batching, BinaryMode, DecimalMode, HstoreMode, IntervalMode, OptionErrorKind, TimePrecisionMode,
};
use crate::output::format::{DdlTable, RelationRender};
use crate::text::encoding::ServerEncoding;
use crate::text::json::json_string;
use proptest::prelude::*;
use serde_json::{json, Value as Json};

fn opts() -> DebeziumOptions {
    DebeziumOptions {
        topic_prefix: Some(b"dbz".to_vec()),
        database: b"db".to_vec(),
        ..DebeziumOptions::default()
    }
}

fn value_with(kind: &Kind, v: Value<'_>, text: &[u8], o: &DebeziumOptions) -> String {
    let mut out = Vec::new();
    let text = || text.to_vec();
    if !push_value(&mut out, kind, v, &text, o) {
        return "<null>".to_owned();
    }
    String::from_utf8(out).unwrap()
}

fn value(kind: &Kind, v: Value<'_>, text: &[u8]) -> String {
    value_with(kind, v, text, &opts())
}

fn numeric(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

#[test]
fn unscaled_bytes_are_javas_big_integer_bytes() {
    let cases: &[(&str, usize, &[u8])] = &[
        ("12.34", 2, &[0x04, 0xD2]),
        ("12345", 0, &[0x30, 0x39]),
        ("-0.00001", 5, &[0xFF]),
        ("0", 0, &[0x00]),
        ("0.00", 2, &[0x00]),
        ("128", 0, &[0x00, 0x80]),
        ("-128", 0, &[0x80]),
        ("-129", 0, &[0xFF, 0x7F]),
        ("255", 0, &[0x00, 0xFF]),
        ("-256", 0, &[0xFF, 0x00]),
        ("1.5", 3, &[0x05, 0xDC]),
        ("-92233720368547758.08", 2, &[0x80, 0, 0, 0, 0, 0, 0, 0]),
    ];
    for (text, scale, bytes) in cases {
        assert_eq!(
            unscaled_bytes(text.as_bytes(), *scale).as_deref(),
            Some(*bytes),
            "{text} at scale {scale}"
        );
    }
    // More fraction digits than the scale, or not a decimal.
    assert_eq!(unscaled_bytes(b"1.234", 2), None);
    assert_eq!(unscaled_bytes(b"NaN", 0), None);
    assert_eq!(unscaled_bytes(b"", 0), None);
    assert_eq!(unscaled_bytes(b"-", 0), None);
}

proptest! {
    /// Any i128 at any scale: the bytes are its minimal two's complement.
    #[test]
    fn unscaled_bytes_round_trip(v in any::<i128>(), scale in 0usize..12) {
        let digits = v.unsigned_abs().to_string();
        let text = if scale == 0 {
            digits.clone()
        } else {
            let padded = format!("{digits:0>width$}", width = scale + 1);
            let (int, frac) = padded.split_at(padded.len() - scale);
            format!("{int}.{frac}")
        };
        let text = if v < 0 { format!("-{text}") } else { text };
        let bytes = unscaled_bytes(text.as_bytes(), scale).unwrap();
        // Sign-extend back to an i128.
        let mut full = [if bytes[0] & 0x80 != 0 { 0xFF } else { 0 }; 16];
        prop_assert!(bytes.len() <= 17);
        let take = bytes.len().min(16);
        full[16 - take..].copy_from_slice(&bytes[bytes.len() - take..]);
        prop_assert_eq!(i128::from_be_bytes(full), v);
        // Fewest bytes: the first byte is not a redundant sign byte.
        if bytes.len() > 1 {
            let redundant = (bytes[0] == 0 && bytes[1] & 0x80 == 0)
                || (bytes[0] == 0xFF && bytes[1] & 0x80 != 0);
            prop_assert!(!redundant, "{:?}", bytes);
        }
    }

    /// The i128 fast path writes what the general conversion writes.
    #[test]
    fn unscaled_fast_path_agrees(v in any::<i64>(), scale in 0usize..8, extra in 0usize..3) {
        let digits = v.unsigned_abs().to_string();
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        let sign = if v < 0 { "-" } else { "" };
        let text = if scale == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") };
        let mut fast = Vec::new();
        prop_assert!(column::push_unscaled(&mut fast, text.as_bytes(), scale + extra));
        let mut general = Vec::new();
        column::push_bytes(&mut general, &unscaled_bytes(text.as_bytes(), scale + extra).unwrap());
        prop_assert_eq!(fast, general);
    }

    /// Every value written is JSON, whatever the text.
    #[test]
    fn text_values_are_json(text in proptest::collection::vec(any::<u8>(), 0..40)) {
        for kind in [Kind::Text, Kind::TimeTz, Kind::Hstore, Kind::Bits { length: None },
                     Kind::Point, Kind::Unknown { java_numbers: true }, Kind::Money,
                     Kind::Time { precision: 6 }] {
            let mut out = Vec::new();
            let t = || text.clone();
            if push_value(&mut out, &kind, Value::OutputText(&text), &t, &opts()) {
                serde_json::from_slice::<Json>(&out)
                    .unwrap_or_else(|e| panic!("{kind:?} {e}: {}", String::from_utf8_lossy(&out)));
            }
        }
    }
}

#[test]
fn decimals_in_every_mode() {
    let n1234 = numeric(&[0x8000 | (2 << 7), 12, 3400]);
    let fixed = Kind::Numeric {
        precision: Some(10),
        scale: Some(2),
    };
    let variable = Kind::Numeric {
        precision: None,
        scale: None,
    };
    assert_eq!(value(&fixed, Value::Numeric(&n1234), b""), r#""BNI=""#);
    assert_eq!(
        value(&variable, Value::Numeric(&n1234), b""),
        r#"{"scale":2,"value":"BNI="}"#
    );
    let nan = numeric(&[0xC000]);
    assert_eq!(value(&fixed, Value::Numeric(&nan), b"NaN"), "<null>");
    let mut o = opts();
    o.decimal_handling_mode = DecimalMode::Double;
    assert_eq!(value_with(&fixed, Value::Numeric(&n1234), b"", &o), "12.34");
    assert_eq!(
        value_with(&fixed, Value::Numeric(&nan), b"", &o),
        r#""NaN""#
    );
    o.decimal_handling_mode = DecimalMode::String;
    assert_eq!(
        value_with(&fixed, Value::Numeric(&n1234), b"", &o),
        r#""12.34""#
    );
    assert_eq!(
        value_with(&fixed, Value::Numeric(&nan), b"", &o),
        r#""NAN""#
    );
    let infinity = numeric(&[0xD000]);
    assert_eq!(
        value_with(&fixed, Value::Numeric(&infinity), b"", &o),
        r#""POSITIVE_INFINITY""#
    );
    // money from its text, in every locale's signs.
    assert_eq!(
        value(&Kind::Money, Value::OutputText(b"$1,234.56"), b"$1,234.56"),
        r#""AeJA""#
    );
    assert_eq!(
        value(&Kind::Money, Value::OutputText(b"-$5.00"), b"-$5.00"),
        r#""/gw=""#
    );
    assert_eq!(
        value(&Kind::Money, Value::OutputText(b"($5.00)"), b"($5.00)"),
        r#""/gw=""#
    );
}

#[test]
fn java_doubles() {
    for (v, s) in [
        (1.0, "1.0"),
        (-2.5, "-2.5"),
        (0.001, "0.001"),
        (1e7, "1.0E7"),
        (1.5e20, "1.5E20"),
        (1e-4, "1.0E-4"),
        (123.456, "123.456"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (9999999.0, "9999999.0"),
    ] {
        assert_eq!(java_double(v), s, "{v}");
    }
    // The geometric types' text as the JDBC driver prints them.
    let line = Kind::Unknown { java_numbers: true };
    let mut out = Vec::new();
    let t = || b"{1,-2.5,3e10}".to_vec();
    assert!(push_value(
        &mut out,
        &line,
        Value::OutputText(b""),
        &t,
        &opts()
    ));
    // base64 of "{1.0,-2.5,3.0E10}"
    assert_eq!(out, br#""ezEuMCwtMi41LDMuMEUxMH0=""#);
}

#[test]
fn times_and_zones() {
    assert_eq!(parse_time(b"13:14:15.123456"), Some(47_655_123_456));
    assert_eq!(parse_time(b"24:00:00"), Some(86_400_000_000));
    assert_eq!(parse_time(b"00:00:00.5"), Some(500_000));
    assert_eq!(parse_time(b"1:2"), None);
    let zoned = |t: &[u8]| {
        let mut out = Vec::new();
        assert!(
            push_zoned_time(&mut out, t),
            "{}",
            String::from_utf8_lossy(t)
        );
        String::from_utf8(out).unwrap()
    };
    assert_eq!(zoned(b"13:14:15.5+02"), r#""11:14:15.5Z""#);
    assert_eq!(zoned(b"00:00:00-05:30"), r#""05:30:00Z""#);
    assert_eq!(zoned(b"23:59:59.999999+14"), r#""09:59:59.999999Z""#);
    assert_eq!(zoned(b"10:00:00+00"), r#""10:00:00Z""#);
    // time(p): milliseconds up to 3 digits (adaptive), else microseconds.
    let t = b"13:14:15.123456";
    assert_eq!(
        value(&Kind::Time { precision: 6 }, Value::OutputText(t), t),
        "47655123456"
    );
    assert_eq!(
        value(&Kind::Time { precision: 3 }, Value::OutputText(t), t),
        "47655123"
    );
    let mut o = opts();
    o.time_precision_mode = TimePrecisionMode::AdaptiveTimeMicroseconds;
    assert_eq!(
        value_with(&Kind::Time { precision: 3 }, Value::OutputText(t), t, &o),
        "47655123456"
    );
    o.time_precision_mode = TimePrecisionMode::Connect;
    assert_eq!(
        value_with(&Kind::Time { precision: 6 }, Value::OutputText(t), t, &o),
        "47655123"
    );
    // Timestamps: microseconds or milliseconds since 1970; the infinities
    // at the int64's ends.
    let ts = 825_945_255_654_321; // 2026-03-04 13:14:15.654321
    let micro = Kind::Timestamp { precision: 6 };
    let milli = Kind::Timestamp { precision: 3 };
    assert_eq!(value(&micro, Value::Timestamp(ts), b""), "1772630055654321");
    assert_eq!(value(&milli, Value::Timestamp(ts), b""), "1772630055654");
    assert_eq!(
        value(&micro, Value::Timestamp(i64::MAX), b""),
        i64::MAX.to_string()
    );
    assert_eq!(
        value(&milli, Value::Timestamp(i64::MIN), b""),
        i64::MIN.to_string()
    );
    // Before 1970, milliseconds round down.
    assert_eq!(
        value(&milli, Value::Timestamp(-946_684_800_000_001), b""),
        "-1"
    );
    // timestamptz: as many fraction digits as the column's precision.
    for (p, s) in [
        (6, "2026-03-04T13:14:15.654321Z"),
        (3, "2026-03-04T13:14:15.654Z"),
        (0, "2026-03-04T13:14:15Z"),
    ] {
        assert_eq!(
            value(
                &Kind::TimestampTz { precision: p },
                Value::TimestampTz(ts),
                b""
            ),
            format!("\"{s}\"")
        );
    }
    let tz = Kind::TimestampTz { precision: 6 };
    assert_eq!(
        value(&tz, Value::TimestampTz(i64::MAX), b""),
        r#""infinity""#
    );
    assert_eq!(
        value(&tz, Value::TimestampTz(i64::MIN), b""),
        r#""-infinity""#
    );
    // 1969-12-31 23:59:59.5 UTC
    assert_eq!(
        value(&tz, Value::TimestampTz(-946_684_800_500_000), b""),
        r#""1969-12-31T23:59:59.500000Z""#
    );
    // Dates: days since 1970; the infinities at the int32's ends.
    assert_eq!(value(&Kind::Date, Value::Date(9559), b""), "20516");
    assert_eq!(
        value(&Kind::Date, Value::Date(i32::MAX), b""),
        i32::MAX.to_string()
    );
    assert_eq!(
        value(&Kind::Date, Value::Date(i32::MIN), b""),
        i32::MIN.to_string()
    );
}

#[test]
fn intervals() {
    let iv = Value::Interval {
        months: 14,
        days: 3,
        micros: 14_706_789_000,
    };
    assert_eq!(value(&Kind::Interval, iv, b""), "37091106789000");
    let mut o = opts();
    o.interval_handling_mode = IntervalMode::String;
    assert_eq!(
        value_with(&Kind::Interval, iv, b"", &o),
        r#""P1Y2M3DT4H5M6.789S""#
    );
    let negative = Value::Interval {
        months: -1,
        days: 2,
        micros: -1_000_000,
    };
    assert_eq!(value(&Kind::Interval, negative, b""), "-2457001000000");
    // PostgreSQL 17's infinite intervals: the int64's ends.
    let infinite = Value::Interval {
        months: i32::MAX,
        days: i32::MAX,
        micros: i64::MAX,
    };
    assert_eq!(value(&Kind::Interval, infinite, b""), i64::MAX.to_string());
    let minus = Value::Interval {
        months: i32::MIN,
        days: i32::MIN,
        micros: i64::MIN,
    };
    assert_eq!(value(&Kind::Interval, minus, b""), i64::MIN.to_string());
    assert_eq!(
        value_with(&Kind::Interval, negative, b"", &o),
        r#""P0Y-1M2DT0H0M-1S""#
    );
}

#[test]
fn bits_points_hstore() {
    let bits = Kind::Bits { length: Some(16) };
    let v = |k: &Kind, t: &[u8]| value(k, Value::OutputText(t), t);
    assert_eq!(v(&bits, b"1010"), r#""Cg==""#);
    assert_eq!(v(&bits, b"0000"), r#""""#);
    assert_eq!(v(&bits, b"1000000100000010"), r#""AoE=""#);
    assert_eq!(v(&Kind::BitBool, b"1"), "true");
    assert_eq!(v(&Kind::BitBool, b"0"), "false");
    assert_eq!(
        v(&Kind::Point, b"(1,2)"),
        r#"{"x":1.0,"y":2.0,"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA","srid":null}"#
    );
    assert_eq!(v(&Kind::Point, b"nonsense"), "<null>");
    assert_eq!(
        hstore_pairs(br#""a"=>"1", "b"=>NULL, "c d"=>"e\"f""#),
        Some(vec![
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"b".to_vec(), None),
            (b"c d".to_vec(), Some(b"e\"f".to_vec())),
        ])
    );
    assert_eq!(hstore_pairs(b""), Some(vec![]));
    // Text outside ASCII gets one level of escapes (a LATIN1 byte: the
    // outer string's \u00e9, which the non-UTF-8 rewrite converts), UTF-8
    // stays as it is.
    let latin1 = b"\"k\xe9\"=>\"\xe9\"";
    assert_eq!(
        v(&Kind::Hstore, latin1),
        "\"{\\\"k\\u00e9\\\":\\\"\\u00e9\\\"}\""
    );
    let utf8 = "\"k\u{e9}\"=>\"v\"".as_bytes();
    assert_eq!(v(&Kind::Hstore, utf8), "\"{\\\"k\u{e9}\\\":\\\"v\\\"}\"");
    assert_eq!(hstore_pairs(b"\"a\"=>"), None);
    let h = br#""a"=>"1", "b"=>NULL"#;
    assert_eq!(v(&Kind::Hstore, h), r#""{\"a\":\"1\",\"b\":null}""#);
    let mut o = opts();
    o.hstore_handling_mode = HstoreMode::Map;
    assert_eq!(
        value_with(&Kind::Hstore, Value::OutputText(h), h, &o),
        r#"{"a":"1","b":null}"#
    );
}

#[test]
fn binary_modes() {
    let bytes = Value::Bytea(b"\x00\xff\xfe?");
    let mut o = opts();
    assert_eq!(value_with(&Kind::Bytea, bytes, b"", &o), r#""AP/+Pw==""#);
    o.binary_handling_mode = BinaryMode::Base64UrlSafe;
    assert_eq!(value_with(&Kind::Bytea, bytes, b"", &o), r#""AP_-Pw==""#);
    o.binary_handling_mode = BinaryMode::Hex;
    assert_eq!(value_with(&Kind::Bytea, bytes, b"", &o), r#""00fffe3f""#);
}

fn col(i: usize, name: &str, ty: &str, oid: u32, key: bool) -> ColumnMeta {
    ColumnMeta {
        attr_index: i,
        attnum: i as i16 + 1,
        name_json: json_string(name.as_bytes()),
        type_json: json_string(ty.as_bytes()),
        type_oid_text: oid.to_string().into_bytes(),
        kind: ValueKind::Text,
        not_null: key,
        default_json: None,
        in_primary_key: key,
        in_identity_key: key,
        is_varlena: true,
        domain_base: None,
        attlen: -1,
        byval: false,
        details: None,
    }
}

#[test]
fn kinds_from_type_names() {
    let kind = |ty: &str, oid: u32| kind_of(&col(0, "c", ty, oid, false));
    assert_eq!(kind("integer", 23), Kind::Int32);
    assert_eq!(
        kind("numeric(10,2)", 1700),
        Kind::Numeric {
            precision: Some(10),
            scale: Some(2)
        }
    );
    assert_eq!(
        kind("numeric", 1700),
        Kind::Numeric {
            precision: None,
            scale: None
        }
    );
    assert_eq!(
        kind("timestamp(3) with time zone", 1184),
        Kind::TimestampTz { precision: 3 }
    );
    assert_eq!(
        kind("time without time zone", 1083),
        Kind::Time { precision: 6 }
    );
    assert_eq!(kind("bit(1)", 1560), Kind::BitBool);
    assert_eq!(kind("bit(4)", 1560), Kind::Bits { length: Some(4) });
    assert_eq!(kind("bit varying", 1562), Kind::Bits { length: None });
    assert_eq!(kind("interval year to month", 1186), Kind::Interval);
    assert_eq!(kind("integer[]", 1007), Kind::Array(Box::new(Kind::Int32)));
    assert_eq!(kind("\"char\"", 18), Kind::Text);
    assert_eq!(kind("public.hstore", 16500), Kind::Hstore);
    assert_eq!(kind("mood", 16600), Kind::UserDefined);
    assert_eq!(
        kind("tsquery", 3615),
        Kind::Unknown {
            java_numbers: false
        }
    );
    assert_eq!(kind("polygon", 604), Kind::Unknown { java_numbers: true });
    // A domain: its base type.
    let mut domain = col(0, "c", "posint", 16700, false);
    domain.domain_base = Some((json_string(b"integer"), 23));
    assert_eq!(kind_of(&domain), Kind::Int32);
    assert!(!column::is_included(
        &Kind::Unknown {
            java_numbers: false
        },
        &opts()
    ));
    let mut o = opts();
    o.include_unknown_datatypes = true;
    assert!(column::is_included(
        &Kind::Unknown {
            java_numbers: false
        },
        &o
    ));
}

#[test]
fn field_schemas() {
    let schema = |kind: &Kind, o: &DebeziumOptions| {
        let mut out = Vec::new();
        push_field_schema(&mut out, kind, o, true, b"\"c\"");
        serde_json::from_slice::<Json>(&out).unwrap()
    };
    let o = opts();
    assert_eq!(
        schema(
            &Kind::Numeric {
                precision: Some(10),
                scale: Some(2)
            },
            &o
        ),
        json!({"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,
               "parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"c"})
    );
    assert_eq!(
        schema(&Kind::Array(Box::new(Kind::Date)), &o),
        json!({"type":"array","items":{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1},
               "optional":true,"field":"c"})
    );
    assert_eq!(
        schema(&Kind::Bits { length: None }, &o),
        json!({"type":"bytes","optional":true,"name":"io.debezium.data.Bits","version":1,
               "parameters":{"length":"2147483647"},"field":"c"})
    );
    let mut c = opts();
    c.time_precision_mode = TimePrecisionMode::Connect;
    assert_eq!(
        schema(&Kind::Timestamp { precision: 6 }, &c),
        json!({"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"c"})
    );
    let mut h = opts();
    h.hstore_handling_mode = HstoreMode::Map;
    assert_eq!(
        schema(&Kind::Hstore, &h),
        json!({"type":"map","keys":{"type":"string","optional":false},"values":{"type":"string","optional":true},
               "optional":true,"field":"c"})
    );
}

// ------------------------------------------------------------- records

/// A test row: one cell per column.
#[derive(Clone)]
enum C {
    /// Left out by a publication's column list.
    Hidden,
    Null,
    Toast,
    Int(i64),
    Text(&'static str),
}

struct Row(Vec<C>);

impl TupleValues for Row {
    fn is_visible(&self, c: &ColumnMeta) -> bool {
        !matches!(self.0[c.attr_index], C::Hidden)
    }
    fn is_null(&self, c: &ColumnMeta) -> bool {
        matches!(self.0[c.attr_index], C::Null)
    }
    fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
        matches!(self.0[c.attr_index], C::Toast)
    }
    fn value<'a>(&'a self, c: &'a ColumnMeta) -> Value<'a> {
        match &self.0[c.attr_index] {
            C::Int(i) => Value::Int(*i),
            C::Text(t) => Value::Text(t.as_bytes()),
            C::Null | C::Toast | C::Hidden => Value::OutputText(b""),
        }
    }
    fn text(&self, _: &ColumnMeta) -> &[u8] {
        b""
    }
}

fn relation(identity: ReplicaIdentity, keyed: bool) -> RelationMeta {
    RelationMeta {
        relid: 16384,
        schema: b"public".to_vec(),
        table: b"t".to_vec(),
        server_encoding: ServerEncoding::Utf8,
        schema_json: json_string(b"public"),
        table_json: json_string(b"t"),
        columns: vec![
            col(0, "id", "integer", 23, keyed),
            col(1, "name", "text", 25, false),
        ],
        has_primary_key: keyed,
        has_identity_index: keyed,
        identity,
        unique_indexes: Vec::new(),
    }
}

fn clock() -> i64 {
    1_800_000_000_123_456
}

fn format(configure: impl FnOnce(&mut Options)) -> FormatDebezium {
    format_with_clock(clock, configure)
}

fn format_with_clock(clock: Clock, configure: impl FnOnce(&mut Options)) -> FormatDebezium {
    let mut o = Options {
        format_version: crate::options::FORMAT_DEBEZIUM,
        batching: Batching::Off,
        ..Options::default()
    };
    o.debezium = opts();
    configure(&mut o);
    FormatDebezium::with_clock(&o, clock)
}

/// A sink keeping every output message.
#[derive(Default)]
struct Messages {
    buf: Vec<u8>,
    written: Vec<String>,
}

impl Sink for Messages {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    fn write(&mut self, last: bool) {
        assert!(last);
        self.written
            .push(String::from_utf8(std::mem::take(&mut self.buf)).unwrap());
    }
    fn write_at(&mut self, _lsn: u64) {
        self.write(true);
    }
}

impl Messages {
    /// Every line of every message as JSON (each is one record).
    fn records(&self) -> Vec<Json> {
        self.written
            .iter()
            .flat_map(|m| m.split('\n'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

fn txn() -> TxnInfo {
    TxnInfo {
        xid: 740,
        origin: 0,
        timestamp: Vec::new(),
        // 2026-03-04 13:14:15.654321 UTC
        commit_time: 825_945_255_654_321,
        final_lsn: 0x16B_3748,
        end_lsn: 0x16B_3778,
    }
}

#[allow(clippy::too_many_arguments)]
fn change(
    f: &mut FormatDebezium,
    sink: &mut Messages,
    rel: &RelationMeta,
    render: &RelationRender,
    kind: ChangeKind,
    lsn: u64,
    new: Option<&Row>,
    old: Option<&Row>,
) {
    let header = ChangeHeader::plain(kind);
    let t = txn();
    let c = ChangeContext {
        txn: &t,
        lsn,
        header: &header,
        rel,
        render,
        new: new.map(|r| r as &dyn TupleValues),
        old: old.map(|r| r as &dyn TupleValues),
    };
    assert_eq!(f.change(sink, &c).unwrap(), None);
}

fn source(lsn: u64, sequence: &str, table: &str) -> Json {
    json!({"version": SOURCE_VERSION, "connector": "postgresql", "name": "dbz",
           "ts_ms": 1772630055654i64, "snapshot": "false", "db": "db", "sequence": sequence,
           "ts_us": 1772630055654321i64, "ts_ns": 1772630055654321000i64,
           "schema": if table.is_empty() { "" } else { "public" }, "table": table,
           "txId": 740, "lsn": lsn, "xmin": null, "origin": null, "origin_lsn": null})
}

#[test]
fn insert_update_delete_without_schemas() {
    let mut f = format(|o| o.debezium.schemas_enable = false);
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 100);
    let row = Row(vec![C::Int(1), C::Text("a \"q\"")]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        100,
        Some(&row),
        None,
    );
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Update,
        200,
        Some(&row),
        None,
    );
    let key = Row(vec![C::Int(1), C::Null]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Delete,
        300,
        None,
        Some(&key),
    );
    f.commit(&mut sink, &txn(), 0x16B_3748, 3);
    let records = sink.records();
    let now = json!({"ts_ms": 1800000000123i64, "ts_us": 1800000000123456i64, "ts_ns": 1800000000123456000i64});
    let envelope = |before: Json, after: Json, lsn: u64, op: &str| {
        let mut v = json!({"before": before, "after": after,
                           "source": source(lsn, &format!("[null,\"{lsn}\"]"), "t"),
                           "transaction": null, "op": op});
        for (k, x) in now.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    assert_eq!(
        records,
        vec![
            json!({"destination": "dbz.public.t", "key": {"id": 1},
                   "value": envelope(Json::Null, json!({"id": 1, "name": "a \"q\""}), 100, "c")}),
            json!({"destination": "dbz.public.t", "key": {"id": 1},
                   "value": envelope(Json::Null, json!({"id": 1, "name": "a \"q\""}), 200, "u")}),
            json!({"destination": "dbz.public.t", "key": {"id": 1},
                   "value": envelope(json!({"id": 1, "name": null}), Json::Null, 300, "d")}),
            json!({"destination": "dbz.public.t", "key": {"id": 1}, "value": null}),
        ]
    );
    // One message per record (batch-bytes 0).
    assert_eq!(sink.written.len(), 4);
    // The next transaction's sequence starts at this one's end.
    f.begin(&mut sink, &txn(), 400);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        400,
        Some(&row),
        None,
    );
    let last = sink.records().pop().unwrap();
    assert_eq!(
        last["value"]["source"]["sequence"],
        json!(format!("[\"{}\",\"400\"]", 0x16B_3778))
    );
}

#[test]
fn schemas_wrap_key_and_value() {
    let mut f = format(|_| {});
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 100);
    let row = Row(vec![C::Int(1), C::Text("a")]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        100,
        Some(&row),
        None,
    );
    let r = &sink.records()[0];
    assert_eq!(
        r["key"],
        json!({"schema": {"type": "struct", "fields": [{"type": "int32", "optional": false, "field": "id"}],
                          "optional": false, "name": "dbz.public.t.Key"},
               "payload": {"id": 1}})
    );
    let schema = &r["value"]["schema"];
    assert_eq!(schema["name"], "dbz.public.t.Envelope");
    assert_eq!(schema["version"], 2);
    let row_schema = json!({"type": "struct", "fields": [
        {"type": "int32", "optional": false, "field": "id"},
        {"type": "string", "optional": true, "field": "name"}],
        "optional": true, "name": "dbz.public.t.Value"});
    let mut before = row_schema.clone();
    before["field"] = json!("before");
    assert_eq!(schema["fields"][0], before);
    let names: Vec<&str> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "before",
            "after",
            "source",
            "transaction",
            "op",
            "ts_ms",
            "ts_us",
            "ts_ns"
        ]
    );
    assert_eq!(
        r["value"]["payload"]["after"],
        json!({"id": 1, "name": "a"})
    );
}

#[test]
fn column_lists_leave_columns_out_of_schemas_and_rows() {
    let mut f = format(|_| {});
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 100);
    let row = Row(vec![C::Int(1), C::Hidden]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        100,
        Some(&row),
        None,
    );
    // The same relation without the column list: the column is back.
    let row = Row(vec![C::Int(2), C::Text("b")]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        200,
        Some(&row),
        None,
    );
    let records = sink.records();
    let fields = |r: &Json| {
        r["value"]["schema"]["fields"][1]["fields"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(fields(&records[0]), 1);
    assert_eq!(records[0]["value"]["payload"]["after"], json!({"id": 1}));
    assert_eq!(fields(&records[1]), 2);
    assert_eq!(
        records[1]["value"]["payload"]["after"],
        json!({"id": 2, "name": "b"})
    );
}

#[test]
fn key_change_is_delete_tombstone_create_and_metadata_counts_them() {
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.debezium.provide_transaction_metadata = true;
    });
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 50);
    let new = Row(vec![C::Int(5), C::Toast]);
    let old = Row(vec![C::Int(1), C::Null]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Update,
        100,
        Some(&new),
        Some(&old),
    );
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    let records = sink.records();
    let kinds: Vec<(String, Json)> = records
        .iter()
        .map(|r| {
            (
                r["destination"].as_str().unwrap().to_owned(),
                r["value"]["op"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("dbz.transaction".to_owned(), Json::Null),
            ("dbz.public.t".to_owned(), json!("d")),
            ("dbz.public.t".to_owned(), Json::Null),
            ("dbz.public.t".to_owned(), json!("c")),
            ("dbz.transaction".to_owned(), Json::Null),
        ]
    );
    assert_eq!(
        records[0],
        json!({"destination": "dbz.transaction", "key": {"id": "740:100"},
               "value": {"status": "BEGIN", "id": "740:100", "event_count": null,
                         "data_collections": null, "ts_ms": 1772630055654i64}})
    );
    assert_eq!(records[1]["key"], json!({"id": 1}));
    assert_eq!(
        records[1]["value"]["before"],
        json!({"id": 1, "name": null})
    );
    assert_eq!(
        records[2],
        json!({"destination": "dbz.public.t", "key": {"id": 1}, "value": null})
    );
    assert_eq!(records[3]["key"], json!({"id": 5}));
    // An unchanged TOAST value without the old row: the placeholder.
    assert_eq!(
        records[3]["value"]["after"],
        json!({"id": 5, "name": "__debezium_unavailable_value"})
    );
    assert_eq!(
        records[3]["value"]["transaction"],
        json!({"id": "740:100", "total_order": 2, "data_collection_order": 2})
    );
    assert_eq!(
        records[4]["value"],
        json!({"status": "END", "id": format!("740:{}", 0x16B_3778), "event_count": 2,
               "data_collections": [{"data_collection": "public.t", "event_count": 2}],
               "ts_ms": 1772630055654i64})
    );
}

#[test]
fn full_identity_completes_toast_and_keyless_tables_have_null_keys() {
    let mut f = format(|o| o.debezium.schemas_enable = false);
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Full, false);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 50);
    let new = Row(vec![C::Int(2), C::Toast]);
    let old = Row(vec![C::Int(1), C::Text("big")]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Update,
        100,
        Some(&new),
        Some(&old),
    );
    let r = &sink.records()[0];
    assert_eq!(r["key"], Json::Null);
    assert_eq!(r["value"]["op"], "u");
    assert_eq!(r["value"]["before"], json!({"id": 1, "name": "big"}));
    assert_eq!(r["value"]["after"], json!({"id": 2, "name": "big"}));
}

#[test]
fn skipped_operations_truncates_and_messages() {
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.debezium.provide_transaction_metadata = true;
        o.debezium.tombstones_on_delete = false;
        o.debezium.skipped_operations.create = true;
    });
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 50);
    let row = Row(vec![C::Int(1), C::Text("a")]);
    // Skipped, but it opens the transaction.
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        100,
        Some(&row),
        None,
    );
    // Truncates are skipped by default, too.
    f.truncate(&mut sink, &txn(), None, 150, &rel);
    f.message(&mut sink, &txn(), true, None, 200, b"p", b"\x00hi");
    f.commit(&mut sink, &txn(), 0x16B_3748, 3);
    f.message(&mut sink, &txn(), false, None, 0x20_0000, b"q", b"x");
    let records = sink.records();
    assert_eq!(records.len(), 4);
    assert_eq!(records[0]["value"]["id"], "740:100");
    assert_eq!(
        records[1],
        json!({"destination": "dbz.message", "key": {"prefix": "p"},
               "value": {"op": "m", "ts_ms": 1800000000123i64, "source": source(200, "[null,\"200\"]", ""),
                         "transaction": {"id": "740:200", "total_order": 1, "data_collection_order": 1},
                         "message": {"prefix": "p", "content": "AGhp"}}})
    );
    assert_eq!(records[2]["value"]["event_count"], 1);
    assert_eq!(
        records[2]["value"]["data_collections"],
        json!([{"data_collection": "dbz.message", "event_count": 1}])
    );
    // Outside a transaction: no txId, the last commit's time, and its own
    // position as the last commit.
    let outside = &records[3]["value"];
    assert_eq!(outside["transaction"], Json::Null);
    assert_eq!(outside["source"]["txId"], Json::Null);
    assert_eq!(outside["source"]["ts_us"], 1772630055654321i64);
    assert_eq!(outside["source"]["sequence"], "[\"2097152\",\"2097152\"]");

    // With truncates published: `t`, no key, no rows.
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.debezium.skipped_operations.truncate = false;
    });
    let mut sink = Messages::default();
    f.begin(&mut sink, &txn(), 50);
    f.truncate(&mut sink, &txn(), None, 150, &rel);
    let r = &sink.records()[0];
    assert_eq!(r["key"], Json::Null);
    assert_eq!(
        (
            &r["value"]["op"],
            &r["value"]["before"],
            &r["value"]["after"]
        ),
        (&json!("t"), &Json::Null, &Json::Null)
    );
}

/// `relation()` as the catalog reader describes it for this format.
fn described(keyed: bool) -> RelationMeta {
    use crate::model::{ColumnDetails, TypeFacts};
    let mut rel = relation(ReplicaIdentity::Default, keyed);
    for (c, (oid, name)) in rel.columns.iter_mut().zip([(23, "int4"), (25, "text")]) {
        let facts = TypeFacts {
            oid,
            name: name.as_bytes().to_vec(),
            kind: b'b',
            array_input: false,
        };
        c.details = Some(Box::new(ColumnDetails {
            typmod: -1,
            declared: facts.clone(),
            root: facts,
            root_typmod: -1,
            type_not_null: false,
            default_expr: (name == "text").then(|| b"'n/a'::text".to_vec()),
        }));
    }
    if keyed {
        rel.unique_indexes = vec![crate::model::UniqueIndex {
            name: b"t_pkey".to_vec(),
            primary: true,
            clustered: false,
            attnums: vec![1],
            key_columns: 1,
        }];
    }
    rel
}

const CREATE_T: &[u8] = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE TABLE t (id int PRIMARY KEY, name text DEFAULT 'n/a')","role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.t","oid":"16384","classid":"1259","subid":0,"tag":"CREATE TABLE"},{"type":"index","schema":"public","identity":"public.t_pkey","oid":"16387","classid":"1259","subid":0,"tag":"CREATE INDEX"}],"relations":[16384]}"#;

const T_COLUMNS: &str = r#"[{"name":"id","jdbcType":4,"nativeType":23,"typeName":"int4","typeExpression":"int4","charsetName":null,"length":10,"scale":0,"position":1,"optional":false,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":null,"enumValues":null},{"name":"name","jdbcType":12,"nativeType":25,"typeName":"text","typeExpression":"text","charsetName":null,"length":2147483647,"scale":0,"position":2,"optional":true,"autoIncremented":false,"generated":false,"comment":null,"defaultValueExpression":"'n/a'::text","enumValues":null}]"#;

#[test]
fn ddl_events_are_schema_change_records() {
    let mut f = format(|o| o.debezium.schemas_enable = false);
    // include.schema.changes, on by default.
    assert!(f.events().ddl);
    let mut sink = Messages::default();
    let rel = described(true);
    let visible = [true, true];
    let tables = [DdlTable {
        rel: &rel,
        visible: &visible,
    }];
    let event = crate::protocol::ddl::parse(CREATE_T).expect("a capture message");
    f.begin(&mut sink, &txn(), 100);
    f.ddl(&mut sink, None, 100, &event, &tables);
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    assert_eq!(sink.written.len(), 1);
    let expected = format!(
        concat!(
            r#"{{"destination":"dbz","key":{{"databaseName":"db"}},"value":{{"source":{{"version":"{version}","connector":"postgresql","name":"dbz","ts_ms":1772630055654,"snapshot":"false","db":"db","sequence":"[null,\"100\"]","ts_us":1772630055654321,"ts_ns":1772630055654321000,"schema":"public","table":"t","txId":740,"lsn":100,"xmin":null,"origin":null,"origin_lsn":null}},"#,
            r#""ts_ms":1800000000123,"databaseName":"db","schemaName":"public","ddl":"CREATE TABLE t (id int PRIMARY KEY, name text DEFAULT 'n/a')","#,
            r#""tableChanges":[{{"type":"CREATE","id":"\"public\".\"t\"","table":{{"defaultCharsetName":null,"primaryKeyColumnNames":["id"],"columns":{columns},"comment":null}}}}]}}}}"#
        ),
        version = SOURCE_VERSION,
        columns = T_COLUMNS
    );
    assert_eq!(sink.written[0], expected);

    // With schemas: the converter's envelope around the same key and
    // payload, Debezium's schemas named for the PostgreSQL connector.
    let mut f = format(|_| {});
    let mut sink = Messages::default();
    f.begin(&mut sink, &txn(), 100);
    f.ddl(&mut sink, None, 100, &event, &tables);
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    let payload_start = expected.find(r#""value":"#).unwrap() + 8;
    let with_schemas = format!(
        r#"{{"destination":"dbz","key":{{"schema":{key},"payload":{{"databaseName":"db"}}}},"value":{{"schema":{value},"payload":{payload}}}"#,
        key = schema_change::KEY_SCHEMA,
        value = schema_change::value_schema(SOURCE_SCHEMA),
        payload = &expected[payload_start..expected.len() - 1],
    );
    assert_eq!(sink.written[0], format!("{with_schemas}}}"));
    let r = &sink.records()[0];
    assert_eq!(
        r["value"]["schema"]["fields"][0]["name"],
        "io.debezium.connector.postgresql.Source"
    );
}

#[test]
fn ddl_events_open_transactions_uncounted_and_drops_have_no_table() {
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.debezium.provide_transaction_metadata = true;
    });
    let mut sink = Messages::default();
    let rel = described(true);
    let render = RelationRender::default();
    let visible = [true, true];
    let tables = [DdlTable {
        rel: &rel,
        visible: &visible,
    }];
    let alter = br#"{"event":"ddl_command_end","tag":"ALTER TABLE","command":null,"command_redacted":true,"role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.t","oid":"16384","classid":"1259","subid":0,"tag":"ALTER TABLE"}],"relations":[16384]}"#;
    let event = crate::protocol::ddl::parse(alter).expect("a capture message");
    f.begin(&mut sink, &txn(), 100);
    f.ddl(&mut sink, None, 100, &event, &tables);
    let row = Row(vec![C::Int(1), C::Text("a")]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeKind::Insert,
        200,
        Some(&row),
        None,
    );
    let drop = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"DROP TABLE t","role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.t","oid":"16384","classid":"1259","subid":0}],"relations":[],"publications":[]}"#;
    let event = crate::protocol::ddl::parse(drop).expect("a drop");
    f.ddl(&mut sink, None, 300, &event, &[]);
    f.commit(&mut sink, &txn(), 0x16B_3748, 3);
    let records = sink.records();
    let destinations: Vec<&str> = records
        .iter()
        .map(|r| r["destination"].as_str().unwrap())
        .collect();
    assert_eq!(
        destinations,
        [
            "dbz.transaction",
            "dbz",
            "dbz.public.t",
            "dbz",
            "dbz.transaction"
        ]
    );
    // BEGIN carries the DDL event's LSN; the DDL event is not counted.
    assert_eq!(records[0]["value"]["id"], "740:100");
    let ddl = &records[1]["value"];
    assert_eq!(ddl["ddl"], Json::Null);
    assert_eq!(ddl["tableChanges"][0]["type"], "ALTER");
    assert!(ddl.get("transaction").is_none());
    assert_eq!(
        records[2]["value"]["transaction"],
        json!({"id": "740:200", "total_order": 1, "data_collection_order": 1})
    );
    assert_eq!(
        records[3]["value"]["tableChanges"],
        json!([{"type": "DROP", "id": "\"public\".\"t\"", "table": null}])
    );
    assert_eq!(records[3]["value"]["source"]["lsn"], 300);
    assert_eq!(records[3]["value"]["source"]["sequence"], "[null,\"300\"]");
    assert_eq!(records[4]["value"]["event_count"], 1);

    // A transaction with only a DDL event still has its BEGIN and END.
    f.begin(&mut sink, &txn(), 400);
    f.ddl(&mut sink, None, 400, &event, &[]);
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    let records = sink.records();
    let end = &records[records.len() - 1]["value"];
    assert_eq!(
        (&end["status"], &end["event_count"]),
        (&json!("END"), &json!(0))
    );
}

#[test]
fn times_are_one_number_cut_and_extended() {
    for micros in [
        i64::MIN,
        -1_500,
        -1,
        0,
        999,
        1000,
        1001,
        123_456,
        1_800_000_000_123_456,
        i64::MAX / 1000,
        i64::MAX / 1000 + 1,
        i64::MAX,
    ] {
        let mut out = Vec::new();
        push_times(&mut out, micros, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                ",\"ts_ms\":{},\"ts_us\":{micros},\"ts_ns\":{}",
                micros.div_euclid(1000),
                micros.saturating_mul(1000)
            ),
            "{micros}"
        );
        let mut out = Vec::new();
        push_times(&mut out, micros, false);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(",\"ts_ms\":{}", micros.div_euclid(1000))
        );
    }
}

#[test]
fn batches_hold_a_transaction_per_message() {
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.batching = Batching::UpTo(64 * 1024);
    });
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 50);
    let row = Row(vec![C::Int(1), C::Text("a")]);
    for lsn in [100, 200, 300] {
        change(
            &mut f,
            &mut sink,
            &rel,
            &render,
            ChangeKind::Insert,
            lsn,
            Some(&row),
            None,
        );
    }
    assert!(sink.written.is_empty());
    f.commit(&mut sink, &txn(), 0x16B_3748, 3);
    assert_eq!(sink.written.len(), 1);
    assert_eq!(sink.records().len(), 3);
    assert!(!sink.written[0].ends_with('\n'));
}

#[test]
fn topic_names_follow_debeziums_rule() {
    assert_eq!(
        topic_name(&[b"dbz", b"public", b"t a\xc3\xa9"]),
        b"dbz.public.t_a_"
    );
    assert_eq!(topic_name(&[b"dbz", b"s-1", b"T_2"]), b"dbz.s-1.T_2");
    // LATIN1's é is one byte, one character.
    assert_eq!(topic_name(&[b"x", b"\xe9t\xe9"]), b"x._t_");
}

#[test]
fn options_under_debeziums_names() {
    let parse =
        |opts: &[(&str, &str)]| Options::parse(opts.iter().map(|(n, v)| (*n, Some(v.as_bytes()))));
    let o = parse(&[("format-version", "debezium"), ("topic.prefix", "srv1")]).unwrap();
    assert_eq!(o.format_version, crate::options::FORMAT_DEBEZIUM);
    assert_eq!(o.debezium.topic_prefix.as_deref(), Some(&b"srv1"[..]));
    assert!(o.debezium.schemas_enable);
    assert!(o.debezium.skipped_operations.truncate);
    assert!(o.messages_enabled());
    let o = parse(&[
        ("format-version", "debezium"),
        ("topic.prefix", "srv1"),
        ("decimal.handling.mode", "STRING"),
        ("time.precision.mode", "connect"),
        ("binary.handling.mode", "hex"),
        ("interval.handling.mode", "string"),
        ("hstore.handling.mode", "map"),
        ("skipped.operations", "c, d"),
        ("schemas.enable", "off"),
        ("tombstones.on.delete", "false"),
        ("provide.transaction.metadata", "true"),
        ("include.unknown.datatypes", "on"),
        ("unavailable.value.placeholder", "?"),
        ("include.schema.changes", "false"),
        ("batch-bytes", "0"),
    ])
    .unwrap();
    let d = &o.debezium;
    assert_eq!(d.decimal_handling_mode, DecimalMode::String);
    assert_eq!(d.time_precision_mode, TimePrecisionMode::Connect);
    assert_eq!(d.binary_handling_mode, BinaryMode::Hex);
    assert_eq!(d.interval_handling_mode, IntervalMode::String);
    assert_eq!(d.hstore_handling_mode, HstoreMode::Map);
    assert_eq!(
        (
            d.skipped_operations.create,
            d.skipped_operations.update,
            d.skipped_operations.delete,
            d.skipped_operations.truncate
        ),
        (true, false, true, false)
    );
    assert!(!d.schemas_enable && !d.tombstones_on_delete);
    assert!(d.provide_transaction_metadata && d.include_unknown_datatypes);
    assert!(!d.include_schema_changes);
    assert!(!FormatDebezium::new(&o).events().ddl);
    assert_eq!(d.unavailable_value_placeholder, b"?");
    assert_eq!(o.batching, Batching::Off);

    // Errors: 22023, with the option named.
    for (opts, message) in [
        (
            &[("format-version", "debezium")][..],
            "requires the option \"topic.prefix\"",
        ),
        (
            &[("format-version", "debezium"), ("topic.prefix", "a b")][..],
            "\"a b\" for parameter \"topic.prefix\"",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("decimal.handling.mode", "exact"),
            ][..],
            "\"exact\"",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("skipped.operations", "c,x"),
            ][..],
            "\"c,x\"",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("skipped.operations", "none,c"),
            ][..],
            "\"none,c\"",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("include-xids", "1"),
            ][..],
            "\"include-xids\" does not apply",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("streaming", "1"),
            ][..],
            "\"streaming\" does not apply",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("two_phase", "1"),
            ][..],
            "\"two_phase\" does not apply",
        ),
        (
            &[
                ("format-version", "debezium"),
                ("topic.prefix", "x"),
                ("numeric-data-types-as-string", "1"),
            ][..],
            "does not apply",
        ),
        (
            &[("format-version", "3"), ("topic.prefix", "x")][..],
            "\"topic.prefix\" does not apply to format-version 3",
        ),
        (
            &[("topic.prefix", "x")][..],
            "\"topic.prefix\" does not apply to format-version 1",
        ),
    ] {
        let err = parse(opts).unwrap_err();
        assert_eq!(err.kind, OptionErrorKind::InvalidParameterValue, "{opts:?}");
        assert!(err.message.contains(message), "{opts:?}: {}", err.message);
    }
    // Debezium's properties that are other options here name them.
    let err = parse(&[
        ("format-version", "debezium"),
        ("table.include.list", "a.*"),
    ])
    .unwrap_err();
    assert_eq!(err.kind, OptionErrorKind::InvalidParameterValue);
    assert_eq!(
        err.hint.as_deref(),
        Some("Debezium's table.include.list is the publication's tables (publication_names) or add-tables with pubjson (docs/debezium.md).")
    );
    // Message prefix lists: regular expressions, not both.
    for (list, message) in [
        (
            "message.prefix.include.list",
            "\"a(\" for parameter \"message.prefix.include.list\"",
        ),
        (
            "message.prefix.exclude.list",
            "\"a(\" for parameter \"message.prefix.exclude.list\"",
        ),
    ] {
        let err = parse(&[
            ("format-version", "debezium"),
            ("topic.prefix", "x"),
            (list, "a("),
        ])
        .unwrap_err();
        assert_eq!(err.kind, OptionErrorKind::InvalidParameterValue);
        assert!(err.message.contains(message), "{}", err.message);
    }
    let err = parse(&[
        ("format-version", "debezium"),
        ("topic.prefix", "x"),
        ("message.prefix.include.list", "a"),
        ("message.prefix.exclude.list", "b"),
    ])
    .unwrap_err();
    assert!(
        err.message
            .contains("\"message.prefix.exclude.list\" does not apply"),
        "{}",
        err.message
    );
}

#[test]
fn message_prefix_patterns_match_whole_prefixes_ignoring_case() {
    let p = crate::options::PrefixPatterns::parse(r"app\..*, oth.r,a\,b").unwrap();
    for (prefix, matches) in [
        (&b"app.one"[..], true),
        (b"App.One", true),
        (b"appXy", false),
        (b"other", true),
        (b"others", false),
        (b"a,b", true),
        (b"\xff", false),
    ] {
        assert_eq!(
            p.matches(prefix),
            matches,
            "{}",
            String::from_utf8_lossy(prefix)
        );
    }
    // Transactional messages left out still open the transaction (BEGIN
    // and END with no events), as in Debezium; one outside is dropped.
    let mut f = format(|o| {
        o.debezium.schemas_enable = false;
        o.debezium.provide_transaction_metadata = true;
        o.debezium.message_prefix_exclude_list = Some("app.*".to_owned());
    });
    let mut sink = Messages::default();
    f.begin(&mut sink, &txn(), 50);
    f.message(&mut sink, &txn(), true, None, 200, b"App.x", b"x");
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    f.message(&mut sink, &txn(), false, None, 300, b"app", b"x");
    f.message(&mut sink, &txn(), false, None, 400, b"kept", b"x");
    let records = sink.records();
    let statuses: Vec<(&Json, &Json)> = records
        .iter()
        .map(|r| (&r["destination"], &r["value"]["event_count"]))
        .collect();
    assert_eq!(
        statuses,
        [
            (&json!("dbz.transaction"), &Json::Null),
            (&json!("dbz.transaction"), &json!(0)),
            (&json!("dbz.message"), &Json::Null),
        ]
    );
}

thread_local! {
    static TICKS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// A clock one microsecond further at each reading.
fn ticking_clock() -> i64 {
    TICKS.with(|t| {
        t.set(t.get() + 1);
        1_800_000_000_000_000 + t.get()
    })
}

#[test]
fn change_events_of_one_output_message_share_one_clock_reading() {
    let mut f = format_with_clock(ticking_clock, |o| {
        o.debezium.schemas_enable = false;
        // Room for two events per message, not three.
        o.batching = Batching::UpTo(700);
    });
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default, true);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 100);
    for (i, lsn) in [100, 200, 300, 400, 500].into_iter().enumerate() {
        let row = Row(vec![C::Int(i as i64), C::Text("x")]);
        change(
            &mut f,
            &mut sink,
            &rel,
            &render,
            ChangeKind::Insert,
            lsn,
            Some(&row),
            None,
        );
    }
    f.commit(&mut sink, &txn(), 600, 5);
    let times: Vec<Vec<i64>> = sink
        .written
        .iter()
        .map(|m| {
            m.split('\n')
                .map(|line| {
                    serde_json::from_str::<Json>(line).unwrap()["value"]["ts_us"]
                        .as_i64()
                        .unwrap()
                })
                .collect()
        })
        .collect();
    assert_eq!(
        times.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![2, 2, 1]
    );
    for (m, message) in times.iter().enumerate() {
        // One reading per message, a later one for each next message.
        assert!(message.iter().all(|&t| t == message[0]), "{times:?}");
        if m > 0 {
            assert!(message[0] > times[m - 1][0], "{times:?}");
        }
    }
}
