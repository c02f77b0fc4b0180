//! Short byte strings rendered once and appended to every change (a
//! relation's `"name":` keys, its `"relid"`, `"schema"` and `"table"`),
//! kept so that appending one is a fixed-size copy (pure code).
//!
//! Appending a slice whose length the compiler does not know is a call to
//! `memcpy`; for the few bytes of a column's key that call costs more than
//! the copy. [`Pieces`] keeps every piece in one buffer followed by
//! [`FIXED_COPY`] bytes of slack, so a piece of up to that length is
//! appended by copying a whole `FIXED_COPY`-byte block (a few vector
//! moves) and cutting the output back to the piece.

/// How many bytes a fixed-size copy moves: longer pieces are copied by
/// length.
pub const FIXED_COPY: usize = 64;

/// Byte strings appended by index (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Pieces {
    /// The pieces one after another, then `FIXED_COPY` zero bytes.
    bytes: Vec<u8>,
    /// Where each piece starts in `bytes`, and its length.
    spans: Vec<(usize, usize)>,
}

impl Pieces {
    pub fn new<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Pieces {
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        for piece in pieces {
            spans.push((bytes.len(), piece.len()));
            bytes.extend_from_slice(piece);
        }
        bytes.resize(bytes.len() + FIXED_COPY, 0);
        Pieces { bytes, spans }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Piece `i`.
    pub fn get(&self, i: usize) -> &[u8] {
        let (start, len) = self.spans[i];
        &self.bytes[start..start + len]
    }

    /// Appends piece `i` to `out`.
    #[inline(always)]
    pub fn push(&self, out: &mut Vec<u8>, i: usize) {
        self.push_from(out, i, 0);
    }

    /// Appends piece `i` without its first `skip` bytes (at most its
    /// length) to `out`.
    #[inline(always)]
    pub fn push_from(&self, out: &mut Vec<u8>, i: usize, skip: usize) {
        let (start, len) = self.spans[i];
        let (start, len) = (start + skip, len - skip);
        if len <= FIXED_COPY {
            // In bounds: the slack follows the last piece.
            let end = out.len() + len;
            out.extend_from_slice(&self.bytes[start..start + FIXED_COPY]);
            out.truncate(end);
        } else {
            out.extend_from_slice(&self.bytes[start..start + len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pieces_are_appended_whole_and_alone() {
        let long = vec![b'x'; FIXED_COPY + 5];
        let exact = vec![b'y'; FIXED_COPY];
        let p = Pieces::new([&b"\"id\":"[..], b"", &long[..], &exact[..], b"\"last\":"]);
        assert_eq!(p.len(), 5);
        let mut out = b"{".to_vec();
        for i in [0, 1, 2, 3, 4, 0] {
            p.push(&mut out, i);
        }
        p.push_from(&mut out, 4, 1);
        p.push_from(&mut out, 2, FIXED_COPY + 5);
        let mut want = b"{\"id\":".to_vec();
        want.extend_from_slice(&long);
        want.extend_from_slice(&exact);
        want.extend_from_slice(b"\"last\":\"id\":last\":");
        assert_eq!(out, want);
        assert_eq!(p.get(4), b"\"last\":");
        assert!(Pieces::new([]).is_empty());
    }

    proptest! {
        #[test]
        fn any_pieces_in_any_order(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..10),
            order in proptest::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 0..20),
            prefix in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let p = Pieces::new(pieces.iter().map(|v| &v[..]));
            let mut out = prefix.clone();
            let mut want = prefix;
            for (i, skip) in order {
                let i = i.index(pieces.len());
                let skip = skip.index(pieces[i].len() + 1);
                p.push_from(&mut out, i, skip);
                want.extend_from_slice(&pieces[i][skip..]);
                prop_assert_eq!(p.get(i), &pieces[i][..]);
            }
            prop_assert_eq!(out, want);
        }
    }
}
