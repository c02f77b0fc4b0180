//! The option parser on arbitrary name/value lists: an option set or an
//! error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::options::Options;

fuzz_target!(|data: &[u8]| {
    // Options are separated by 0xff, a name from its value by 0xfe (no
    // value: `-o name` of pg_recvlogical).
    let pairs: Vec<(String, Option<&[u8]>)> = data
        .split(|&b| b == 0xff)
        .map(|item| match item.iter().position(|&b| b == 0xfe) {
            Some(at) => (
                String::from_utf8_lossy(&item[..at]).into_owned(),
                Some(&item[at + 1..]),
            ),
            None => (String::from_utf8_lossy(item).into_owned(), None),
        })
        .collect();
    let _ = Options::parse(pairs.iter().map(|(n, v)| (n.as_str(), *v)));
});
