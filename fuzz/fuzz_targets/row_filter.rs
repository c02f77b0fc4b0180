//! pgoutput's row-filter verdict against its rules, stated independently:
//! an UPDATE whose old row leaves and new row enters the filter becomes an
//! INSERT, the reverse a DELETE; a change is sent only when a row it sends
//! matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pubjson_core::model::ChangeKind;
use pubjson_core::rules::row_filter::{filter_verdict, FilterVerdict};

fn matched(b: u8) -> Option<bool> {
    match b % 3 {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    }
}

fuzz_target!(|data: [u8; 3]| {
    let kind = [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete][data[0] as usize % 3];
    let (old, new) = (matched(data[1]), matched(data[2]));
    let verdict = filter_verdict(kind, old, new);
    let expected = match (kind, old, new) {
        (ChangeKind::Insert, _, Some(true)) | (ChangeKind::Delete, Some(true), _) => Some(kind),
        (ChangeKind::Update, Some(true), Some(true)) => Some(ChangeKind::Update),
        (ChangeKind::Update, Some(false), Some(true)) => Some(ChangeKind::Insert),
        (ChangeKind::Update, Some(true), Some(false)) => Some(ChangeKind::Delete),
        // One row only (no old row in the WAL): that row decides.
        (ChangeKind::Update, None, Some(true)) | (ChangeKind::Update, Some(true), None) => {
            Some(ChangeKind::Update)
        }
        _ => None,
    };
    match (verdict, expected) {
        (FilterVerdict::Drop, None) => {}
        (
            FilterVerdict::Emit {
                kind: emitted,
                transformed,
            },
            Some(e),
        ) => {
            assert_eq!(emitted, e);
            assert_eq!(transformed, emitted != kind);
        }
        (v, e) => panic!("{kind:?} old={old:?} new={new:?}: {v:?}, expected {e:?}"),
    }
});
