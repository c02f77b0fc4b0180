//! Format 3's value encoder: every value it writes is JSON (also through the
//! ASCII rewrite of non-UTF-8 databases); it refuses only binary forms it
//! cannot read. json text that is not JSON (which PostgreSQL's json input
//! refuses) is only required not to panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::model::Value;
use pubjson_core::output::v3::value::{push_value, Style};
use pubjson_core::text::encoding::push_ascii_json;
use pubjson_fuzz::{word, Latin1};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let n = word(rest);
    let value = match selector % 13 {
        0 => Value::Int(n),
        1 => Value::Bool(n & 1 == 1),
        2 => Value::Float(rest),
        3 => Value::Numeric(rest),
        4 => Value::Text(rest),
        5 => Value::Json(rest),
        6 => Value::Jsonb(rest),
        7 => Value::Bytea(rest),
        8 => Value::Timestamp(n),
        9 => Value::TimestampTz(n),
        10 => Value::Date(n as i32),
        11 => Value::Interval {
            months: n as i32,
            days: (n >> 32) as i32,
            micros: word(rest.get(8..).unwrap_or(&[])),
        },
        _ => Value::OutputText(rest),
    };
    let json_input_ok =
        !matches!(value, Value::Json(t) if serde_json::from_slice::<serde_json::Value>(t).is_err());
    for ascii in [false, true] {
        let style = Style {
            numbers_as_strings: selector & 0x80 != 0,
            ascii,
        };
        let mut out = Vec::new();
        if push_value(&mut out, value, style).is_err() {
            continue;
        }
        if !json_input_ok {
            // json text that is not JSON (PostgreSQL's json input would
            // have refused it): written as it came.
            continue;
        }
        if !ascii && std::str::from_utf8(&out).is_err() {
            // Raw bytes only come from stored json/jsonb strings (valid
            // UTF-8 in a UTF-8 database; rewritten elsewhere).
            assert!(
                matches!(value, Value::Json(_) | Value::Jsonb(_)),
                "{value:?}"
            );
            continue;
        }
        let doc = if ascii {
            let mut rewritten = Vec::new();
            push_ascii_json(&mut rewritten, &out, &mut Latin1, &mut Vec::new());
            assert!(rewritten.is_ascii());
            rewritten
        } else {
            out
        };
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&doc) {
            panic!(
                "{value:?} ascii={ascii}: {e}: {:?}",
                String::from_utf8_lossy(&doc)
            );
        }
    }
});
