//! The publication row-filter decision, as pgoutput makes it (pure code).
//!
//! For an UPDATE both the old and the new row are tested when the old row
//! is known:
//!
//! | old row  | new row  | emitted                      |
//! |----------|----------|------------------------------|
//! | no match | no match | nothing                      |
//! | no match | match    | INSERT of the new row        |
//! | match    | no match | DELETE of the old row's key  |
//! | match    | match    | UPDATE                       |
//!
//! Without an old row (the replica identity did not change) only the new row
//! is tested. NULL counts as no match.

use crate::model::ChangeKind;

/// What to emit for a change after its row filter ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterVerdict {
    Drop,
    /// Emit as `kind`; `transformed` when an UPDATE became an INSERT or DELETE.
    Emit {
        kind: ChangeKind,
        transformed: bool,
    },
}

/// Decides a change's fate from the filter results of its rows (`None`:
/// that row does not exist for this change).
pub fn filter_verdict(
    kind: ChangeKind,
    old_match: Option<bool>,
    new_match: Option<bool>,
) -> FilterVerdict {
    let emit = |k| FilterVerdict::Emit {
        kind: k,
        transformed: k != kind,
    };
    let single = |m: Option<bool>| {
        if m == Some(true) {
            emit(kind)
        } else {
            FilterVerdict::Drop
        }
    };
    match kind {
        ChangeKind::Insert => single(new_match),
        ChangeKind::Delete => single(old_match),
        ChangeKind::Update => match (old_match, new_match) {
            (Some(false), Some(false)) => FilterVerdict::Drop,
            (Some(false), Some(true)) => emit(ChangeKind::Insert),
            (Some(true), Some(false)) => emit(ChangeKind::Delete),
            (Some(true), Some(true)) => emit(ChangeKind::Update),
            (None, m) | (m, None) => single(m),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;
    use FilterVerdict::*;

    #[test]
    fn the_four_update_cases() {
        assert_eq!(filter_verdict(Update, Some(false), Some(false)), Drop);
        assert_eq!(
            filter_verdict(Update, Some(false), Some(true)),
            Emit {
                kind: Insert,
                transformed: true
            }
        );
        assert_eq!(
            filter_verdict(Update, Some(true), Some(false)),
            Emit {
                kind: Delete,
                transformed: true
            }
        );
        assert_eq!(
            filter_verdict(Update, Some(true), Some(true)),
            Emit {
                kind: Update,
                transformed: false
            }
        );
    }

    #[test]
    fn single_row_changes() {
        assert_eq!(
            filter_verdict(Update, None, Some(true)),
            Emit {
                kind: Update,
                transformed: false
            }
        );
        assert_eq!(filter_verdict(Update, None, Some(false)), Drop);
        assert_eq!(
            filter_verdict(Insert, None, Some(true)),
            Emit {
                kind: Insert,
                transformed: false
            }
        );
        assert_eq!(filter_verdict(Insert, None, Some(false)), Drop);
        assert_eq!(
            filter_verdict(Delete, Some(true), None),
            Emit {
                kind: Delete,
                transformed: false
            }
        );
        assert_eq!(filter_verdict(Delete, Some(false), None), Drop);
    }
}
