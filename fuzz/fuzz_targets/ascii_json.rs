//! push_ascii_json (non-UTF-8 databases): the rewrite of an encoded string is
//! pure ASCII and decodes to the database text's characters.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::text::encoding::{push_ascii_json, ToUtf8};
use pubjson_core::text::json::json_string;
use pubjson_fuzz::Latin1;

/// LATIN1: every byte is the code point of the same number.
/// A double-byte encoding (EUC-like): pairs of bytes in A1..FE map to CJK
/// characters (some beyond the BMP); anything else stops the conversion.
struct Pairs;
impl ToUtf8 for Pairs {
    fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize {
        let mut i = 0;
        while let Some(&[a, b]) = src.get(i..i + 2) {
            if !(0xa1..=0xfe).contains(&a) || !(0xa1..=0xfe).contains(&b) {
                break;
            }
            let code = 0x4e00 + (a as u32 - 0xa1) * 94 + (b as u32 - 0xa1);
            let c = if a >= 0xf0 {
                char::from_u32(0x20000 + code - 0x4e00)
            } else {
                char::from_u32(code)
            };
            out.extend_from_slice(c.expect("a character").to_string().as_bytes());
            i += 2;
        }
        i
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, text)) = data.split_first() else {
        return;
    };
    let message = json_string(text);
    let mut out = Vec::new();
    if mode % 2 == 0 {
        push_ascii_json(&mut out, &message, &mut Latin1, &mut Vec::new());
        assert!(out.is_ascii());
        let parsed: String = serde_json::from_slice(&out).expect("a JSON string");
        let expected: String = text.iter().map(|&b| b as char).collect();
        assert_eq!(parsed, expected);
    } else {
        push_ascii_json(&mut out, &message, &mut Pairs, &mut Vec::new());
        assert!(out.is_ascii());
        let _: String = serde_json::from_slice(&out).expect("a JSON string");
    }
});
