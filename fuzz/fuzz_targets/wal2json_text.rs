//! wal2json's encoding of an output function's text by value kind: JSON
//! whenever it succeeds; a number column's text that is not a number is
//! refused (an ERROR), never written.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::model::ValueKind;
use pubjson_core::output::wal2json::push_text_value;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let kind = match selector % 4 {
        0 => ValueKind::Number,
        1 => ValueKind::Bool,
        2 => ValueKind::Bytea,
        _ => ValueKind::Text,
    };
    let mut out = Vec::new();
    if push_text_value(&mut out, kind, text, selector & 0x80 != 0).is_ok() {
        let _: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    }
});
