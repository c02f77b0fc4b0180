//! The backfill message (pure code): how `pubjson.backfill()` hands a chunk
//! of a table's rows to the decoder through the WAL.
//!
//! Each chunk is one transaction that reads its rows `FOR SHARE`, writes
//! them in one transactional logical message with prefix [`PREFIX`], and
//! records the message's SHA-256 ([`digest`]) in its row of
//! `pubjson.backfill_progress`, a table only the extension's owner can
//! write. The decoder sees that row's change first (the message is written
//! after it) and decodes a message only when the transaction recorded its
//! digest: a message anybody else writes with the prefix (every role may
//! call `pg_logical_emit_message`) is ignored, never deformed as tuples.
//!
//! Layout (integers little-endian):
//!
//! | bytes | what |
//! |---|---|
//! | 4 | [`MAGIC`] |
//! | 4 | the relation's OID (the table the rows are read from) |
//! | 1 | flags: [`FIRST`] (the backfill's first chunk), [`LAST`] (its last) |
//! | 8 | rows read by the backfill so far, this chunk's included |
//! | 4 | the OID of the relation the markers name: the table, or the partitioned table whose backfill reads it partition by partition |
//! | 4 | rows in this chunk, then each as a 4-byte length and the row: a composite datum of the relation's row type (a heap tuple header and its data, detoasted) |

use sha2::{Digest, Sha256};

/// The logical message prefix of backfill chunks.
pub const PREFIX: &[u8] = b"pubjson.backfill";

/// The first bytes of a backfill message (and its layout's version).
pub const MAGIC: &[u8; 4] = b"PJB2";

/// Flag: the chunk is the backfill's first (a `backfill start` object).
pub const FIRST: u8 = 1;
/// Flag: the chunk is the backfill's last (a `backfill end` object).
pub const LAST: u8 = 2;

const HEADER_LEN: usize = 4 + 4 + 1 + 8 + 4 + 4;

/// One chunk, as written and as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub relid: u32,
    /// The relation the start and end markers name.
    pub marker_relid: u32,
    pub first: bool,
    pub last: bool,
    /// Rows read by the backfill so far, this chunk's included.
    pub rows_so_far: u64,
    /// The rows' bytes, each a composite datum of the relation's row type.
    pub rows: Vec<&'a [u8]>,
}

/// Why message bytes are not a backfill chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// Not [`MAGIC`]: another layout, or not a backfill message.
    UnknownLayout,
    /// Shorter than its header or its rows say.
    Truncated,
    /// Bytes after the last row.
    TrailingBytes,
}

/// The largest message a chunk writes (1000 MiB): below PostgreSQL's
/// allocation limit (1 GB less one byte, the largest `bytea` the message is
/// passed as) and its largest WAL record (1020 MiB), with room for the
/// record's headers and the prefix.
pub const MAX_MESSAGE: usize = 1000 << 20;

/// A message built row by row, its header written last (the flags and the
/// count are known only when the chunk ends): one buffer, no copy of the
/// rows gathered first.
#[derive(Debug, Clone, Default)]
pub struct ChunkBuilder {
    bytes: Vec<u8>,
    rows: u32,
}

impl ChunkBuilder {
    pub fn new() -> Self {
        ChunkBuilder {
            bytes: vec![0; HEADER_LEN],
            rows: 0,
        }
    }

    /// The message's length so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The length the message would have with a row of `row_len` bytes more.
    pub fn len_with(&self, row_len: usize) -> usize {
        self.bytes.len() + 4 + row_len
    }

    pub fn push(&mut self, row: &[u8]) {
        self.bytes
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(row);
        self.rows += 1;
    }

    /// The message's bytes.
    pub fn finish(mut self, relid: u32, marker_relid: u32, flags: u8, rows_so_far: u64) -> Vec<u8> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&relid.to_le_bytes());
        header.push(flags);
        header.extend_from_slice(&rows_so_far.to_le_bytes());
        header.extend_from_slice(&marker_relid.to_le_bytes());
        header.extend_from_slice(&self.rows.to_le_bytes());
        self.bytes[..HEADER_LEN].copy_from_slice(&header);
        self.bytes
    }
}

/// The bytes of a message carrying `rows` (see the module comment).
pub fn encode(
    relid: u32,
    marker_relid: u32,
    flags: u8,
    rows_so_far: u64,
    rows: &[&[u8]],
) -> Vec<u8> {
    let mut builder = ChunkBuilder::new();
    for row in rows {
        builder.push(row);
    }
    builder.finish(relid, marker_relid, flags, rows_so_far)
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], ChunkError> {
    if bytes.len() < n {
        return Err(ChunkError::Truncated);
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn take_u32(bytes: &mut &[u8]) -> Result<u32, ChunkError> {
    let b = take(bytes, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a message's bytes back (the rows are borrowed, not copied).
pub fn parse(content: &[u8]) -> Result<Chunk<'_>, ChunkError> {
    let mut rest = content;
    if take(&mut rest, 4).map_err(|_| ChunkError::UnknownLayout)? != MAGIC {
        return Err(ChunkError::UnknownLayout);
    }
    let relid = take_u32(&mut rest)?;
    let flags = take(&mut rest, 1)?[0];
    let so_far = take(&mut rest, 8)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(so_far);
    let marker_relid = take_u32(&mut rest)?;
    let count = take_u32(&mut rest)? as usize;
    // Each row needs at least its length: a count the bytes cannot hold is
    // refused before anything is allocated for it.
    if count > rest.len() / 4 {
        return Err(ChunkError::Truncated);
    }
    let mut rows = Vec::with_capacity(count);
    for _ in 0..count {
        let len = take_u32(&mut rest)? as usize;
        rows.push(take(&mut rest, len)?);
    }
    if !rest.is_empty() {
        return Err(ChunkError::TrailingBytes);
    }
    Ok(Chunk {
        relid,
        marker_relid,
        first: flags & FIRST != 0,
        last: flags & LAST != 0,
        rows_so_far: u64::from_le_bytes(word),
        rows,
    })
}

/// A snapshot as `pg_current_snapshot()` writes it (`xmin:xmax:xip,...`,
/// 64-bit transaction ids): which transactions' changes it sees. A chunk
/// reads it to tell the rows of its own snapshot from the newer versions
/// PostgreSQL returns for rows it waited for (`src/api/backfill.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotXids {
    xmin: u64,
    xmax: u64,
    xip: Vec<u64>,
}

impl SnapshotXids {
    pub fn parse(text: &str) -> Option<SnapshotXids> {
        let mut parts = text.split(':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let xip = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<Vec<u64>>>()?,
        };
        if parts.next().is_some() || xmin > xmax {
            return None;
        }
        Some(SnapshotXids { xmin, xmax, xip })
    }

    /// Whether a row version written by `xmin` (a 32-bit xid, as the
    /// `xmin` column shows it) is one this snapshot sees. The 32 bits are
    /// placed as PostgreSQL compares xids: up to 2^31 behind `xmax`, else
    /// at or after it (a transaction that began after the snapshot, whose
    /// version a chunk waited for: not seen). Special xids (invalid,
    /// bootstrap, frozen: below 3) are seen; a frozen row's original xmin
    /// may be taken for a newer one: only ever "not seen", never the other
    /// way.
    pub fn sees(&self, xmin: u32) -> bool {
        if xmin < 3 {
            return true;
        }
        let xmax_low = self.xmax as u32;
        if xmin.wrapping_sub(xmax_low) < 1 << 31 {
            return false;
        }
        let behind = xmax_low.wrapping_sub(xmin) as u64;
        let Some(full) = self.xmax.checked_sub(behind) else {
            return false;
        };
        full < self.xmin || !self.xip.contains(&full)
    }
}

/// The SHA-256 of a message's content: what its progress row records.
pub fn digest(content: &[u8]) -> [u8; 32] {
    Sha256::digest(content).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_chunk_reads_back_as_written() {
        let rows: [&[u8]; 3] = [b"one", b"", b"three\0bytes"];
        let bytes = encode(16384, 16380, FIRST | LAST, 3, &rows);
        assert_eq!(&bytes[..4], MAGIC);
        assert_eq!(
            parse(&bytes),
            Ok(Chunk {
                relid: 16384,
                marker_relid: 16380,
                first: true,
                last: true,
                rows_so_far: 3,
                rows: rows.to_vec(),
            })
        );
        let empty = encode(7, 7, LAST, 10, &[]);
        let chunk = parse(&empty).unwrap();
        assert!(!chunk.first && chunk.last && chunk.rows.is_empty());
        assert_eq!(chunk.rows_so_far, 10);
    }

    #[test]
    fn other_bytes_are_refused() {
        let bytes = encode(1, 1, 0, 1, &[b"row"]);
        assert_eq!(parse(b""), Err(ChunkError::UnknownLayout));
        assert_eq!(parse(b"PJB1rest"), Err(ChunkError::UnknownLayout));
        for cut in 4..bytes.len() {
            assert_eq!(parse(&bytes[..cut]), Err(ChunkError::Truncated), "{cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(parse(&longer), Err(ChunkError::TrailingBytes));
        // A count no bytes back.
        let mut huge = encode(1, 1, 0, 0, &[]);
        huge[21..25].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse(&huge), Err(ChunkError::Truncated));
    }

    #[test]
    fn the_digest_is_sha256() {
        // SHA-256 of "abc" (FIPS 180-2's example).
        assert_eq!(
            digest(b"abc")[..8],
            [0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea]
        );
    }

    #[test]
    fn a_snapshot_sees_what_committed_before_it() {
        // Epoch 1: 64-bit ids 2^32 + n.
        let e = 1u64 << 32;
        let text = format!("{}:{}:{},{}", e + 100, e + 110, e + 102, e + 105);
        let s = SnapshotXids::parse(&text).unwrap();
        assert!(s.sees(2), "frozen");
        assert!(s.sees(99) && s.sees(101) && s.sees(109));
        assert!(!s.sees(102) && !s.sees(105), "running");
        assert!(!s.sees(110) && !s.sees(111), "at or after xmax");
        assert!(!s.sees(110 + (1 << 30)), "far after xmax");
        // An xid of the previous epoch, just below the wrap.
        let s = SnapshotXids::parse(&format!("{}:{}:", e + 5, e + 8)).unwrap();
        assert!(s.sees(u32::MAX - 3));
        assert!(!s.sees(8));
        // Epoch 0: nothing below 0.
        let s = SnapshotXids::parse("10:20:").unwrap();
        assert!(s.sees(9) && s.sees(15) && !s.sees(u32::MAX));
        assert!(!s.sees(20));
        let s = SnapshotXids::parse("10:20:15").unwrap();
        assert!(!s.sees(15) && s.sees(14));
        for bad in ["", "1", "1:2", "x:2:", "1:2:3:4", "5:4:", "1:2:a"] {
            assert_eq!(SnapshotXids::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_builder_writes_what_encode_writes() {
        let mut b = ChunkBuilder::new();
        assert!(b.is_empty());
        assert_eq!(b.len_with(3), HEADER_LEN + 7);
        b.push(b"one");
        b.push(b"");
        assert_eq!((b.rows(), b.len()), (2, HEADER_LEN + 7 + 4));
        assert_eq!(
            b.finish(5, 6, LAST, 9),
            encode(5, 6, LAST, 9, &[b"one", b""])
        );
    }

    proptest! {
        #[test]
        fn any_rows_round_trip(
            relid: u32,
            marker_relid: u32,
            flags in 0u8..4,
            so_far: u64,
            rows in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        ) {
            let borrowed: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
            let bytes = encode(relid, marker_relid, flags, so_far, &borrowed);
            let chunk = parse(&bytes).unwrap();
            prop_assert_eq!(chunk.relid, relid);
            prop_assert_eq!(chunk.marker_relid, marker_relid);
            prop_assert_eq!(chunk.first, flags & FIRST != 0);
            prop_assert_eq!(chunk.last, flags & LAST != 0);
            prop_assert_eq!(chunk.rows_so_far, so_far);
            prop_assert_eq!(chunk.rows, borrowed);
        }

        #[test]
        fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&bytes);
        }
    }
}
