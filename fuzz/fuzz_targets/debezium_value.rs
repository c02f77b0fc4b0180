//! The Debezium format's value encoder: for every kind of column, every
//! setting and any input (binary forms and output function texts alike),
//! what it writes is JSON, also through the ASCII rewrite of non-UTF-8
//! databases; where it writes nothing the caller writes null.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::model::Value;
use pubjson_core::options::{
    BinaryMode, DebeziumOptions, DecimalMode, HstoreMode, IntervalMode, TimePrecisionMode,
};
use pubjson_core::output::debezium::column::{push_value, Kind};
use pubjson_core::text::encoding::push_ascii_json;
use pubjson_fuzz::{word, Latin1};

fuzz_target!(|data: &[u8]| {
    let [kind_byte, mode_byte, value_byte, rest @ ..] = data else {
        return;
    };
    let n = word(rest);
    let small = (n & 7) as u32;
    let kind = match kind_byte % 24 {
        0 => Kind::Int32,
        1 => Kind::Float64,
        2 => Kind::Bool,
        3 => Kind::Numeric {
            precision: Some(10),
            scale: Some(small),
        },
        4 => Kind::Numeric {
            precision: None,
            scale: None,
        },
        5 => Kind::Money,
        6 => Kind::Text,
        7 => Kind::Bytea,
        8 => Kind::Uuid,
        9 => Kind::Jsonb,
        10 => Kind::Date,
        11 => Kind::Time { precision: small },
        12 => Kind::TimeTz,
        13 => Kind::Timestamp { precision: small },
        14 => Kind::TimestampTz { precision: small },
        15 => Kind::Interval,
        16 => Kind::BitBool,
        17 => Kind::Bits {
            length: Some(small),
        },
        18 => Kind::Point,
        19 => Kind::Hstore,
        20 => Kind::Unknown { java_numbers: true },
        21 => Kind::Unknown {
            java_numbers: false,
        },
        22 => Kind::Array(Box::new(Kind::Int32)),
        _ => Kind::UserDefined,
    };
    let opts = DebeziumOptions {
        decimal_handling_mode: [
            DecimalMode::Precise,
            DecimalMode::Double,
            DecimalMode::String,
        ][(mode_byte % 3) as usize],
        time_precision_mode: [
            TimePrecisionMode::Adaptive,
            TimePrecisionMode::AdaptiveTimeMicroseconds,
            TimePrecisionMode::Connect,
        ][(mode_byte / 3 % 3) as usize],
        binary_handling_mode: [
            BinaryMode::Bytes,
            BinaryMode::Base64,
            BinaryMode::Base64UrlSafe,
            BinaryMode::Hex,
        ][(mode_byte / 9 % 4) as usize],
        interval_handling_mode: [IntervalMode::Numeric, IntervalMode::String]
            [(mode_byte / 36 % 2) as usize],
        hstore_handling_mode: [HstoreMode::Json, HstoreMode::Map][(mode_byte / 72 % 2) as usize],
        ..DebeziumOptions::default()
    };
    let value = match value_byte % 12 {
        0 => Value::Int(n),
        1 => Value::Bool(n & 1 == 1),
        2 => Value::Float(rest),
        3 => Value::Numeric(rest),
        4 => Value::Text(rest),
        5 => Value::Jsonb(rest),
        6 => Value::Bytea(rest),
        7 => Value::Timestamp(n),
        8 => Value::TimestampTz(n),
        9 => Value::Date(n as i32),
        10 => Value::Interval {
            months: n as i32,
            days: (n >> 32) as i32,
            micros: word(rest.get(8..).unwrap_or(&[])),
        },
        _ => Value::OutputText(rest),
    };
    let text = || rest.to_vec();
    let mut out = Vec::new();
    if !push_value(&mut out, &kind, value, &text, &opts) {
        return;
    }
    // A float's text is trusted to be float8out's: only JSON is checked
    // where the encoder builds the text itself.
    if matches!(value, Value::Float(_)) {
        return;
    }
    serde_json::from_slice::<serde_json::Value>(&out)
        .unwrap_or_else(|e| panic!("{kind:?} {value:?}: {e}: {}", String::from_utf8_lossy(&out)));
    let mut ascii = Vec::new();
    push_ascii_json(&mut ascii, &out, &mut Latin1, &mut Vec::new());
    assert!(ascii.is_ascii());
    serde_json::from_slice::<serde_json::Value>(&ascii).expect("JSON after the ASCII rewrite");
});
