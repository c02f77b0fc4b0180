//! The numeric reader on arbitrary bytes: never panics; a finite value is a
//! JSON number, a special one NaN or an infinity.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::output::numeric::{numeric_text, NumericKind};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    match numeric_text(data, &mut out) {
        None => assert!(out.is_empty()),
        Some(NumericKind::Finite) => {
            let value: serde_json::Value = serde_json::from_slice(&out).expect("a number");
            assert!(value.is_number(), "{:?}", String::from_utf8_lossy(&out));
        }
        Some(NumericKind::Special) => {
            assert!(
                matches!(&out[..], b"NaN" | b"Infinity" | b"-Infinity"),
                "{out:?}"
            )
        }
    }
});
