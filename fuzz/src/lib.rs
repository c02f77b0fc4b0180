//! What the fuzz targets share: a stand-in for a non-UTF-8 server encoding
//! and a way to read a number out of the fuzzer's bytes.

use pubjson_core::text::encoding::ToUtf8;

/// LATIN1 to UTF-8, as the server's conversion does it: every byte is the
/// code point of its value. Serves the ASCII rewrite of non-UTF-8 databases.
pub struct Latin1;

impl ToUtf8 for Latin1 {
    fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(
            src.iter()
                .map(|&b| b as char)
                .collect::<String>()
                .as_bytes(),
        );
        src.len()
    }
}

/// The first 8 bytes (fewer are padded with zeros) as a little-endian
/// integer.
pub fn word(bytes: &[u8]) -> i64 {
    let mut w = [0u8; 8];
    for (d, s) in w.iter_mut().zip(bytes) {
        *d = *s;
    }
    i64::from_le_bytes(w)
}
