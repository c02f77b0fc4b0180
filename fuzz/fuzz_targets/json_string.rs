//! push_json_string: any bytes give one JSON string; valid UTF-8 comes back
//! as it was (wal2json's escapes), other bytes as their Latin-1 reading.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::text::json::push_json_string;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    push_json_string(&mut out, data);
    let parsed: String = serde_json::from_slice(&out).expect("a JSON string");
    match std::str::from_utf8(data) {
        Ok(text) => assert_eq!(parsed, text),
        // Every byte outside the valid runs is one U+00XX character.
        Err(_) => assert!(parsed.chars().count() <= data.len()),
    }
});
