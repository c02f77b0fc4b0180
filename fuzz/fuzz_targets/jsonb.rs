//! The jsonb reader on arbitrary bytes: never panics; what it accepts is
//! written as valid JSON: format 3's compact document (its strings' bytes
//! as stored: JSON once they are UTF-8, as in a UTF-8 database, or after
//! the ASCII rewrite of other databases), wal2json's string always.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::output::jsonb::{jsonb_compact, jsonb_json_string};
use pubjson_core::text::encoding::push_ascii_json;
use pubjson_fuzz::Latin1;

fn assert_json(doc: &[u8]) {
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(doc) {
        panic!("{e}: {:?}", String::from_utf8_lossy(doc));
    }
}

fuzz_target!(|data: &[u8]| {
    let mut out = b"x".to_vec();
    if jsonb_compact(data, &mut out) {
        let doc = &out[1..];
        if std::str::from_utf8(doc).is_ok() {
            assert_json(doc);
        }
        let mut ascii = Vec::new();
        push_ascii_json(&mut ascii, doc, &mut Latin1, &mut Vec::new());
        assert!(ascii.is_ascii());
        assert_json(&ascii);
    } else {
        assert_eq!(out, b"x", "nothing written on failure");
    }
    let mut out = Vec::new();
    if jsonb_json_string(data, &mut out) {
        let text: String = serde_json::from_slice(&out).expect("a JSON string");
        let _: serde_json::Value = serde_json::from_str(&text).expect("JSON inside");
    } else {
        assert!(out.is_empty());
    }
});
