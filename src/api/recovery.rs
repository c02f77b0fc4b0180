//! `pubjson._replay_receipt_time()`: the startup process's `XLogReceiptTime`
//! while it replays streamed WAL, which `standby_conflicts()` and
//! `standby_queries_at_risk()` (conflicts.sql) count the
//! `max_standby_streaming_delay` budget from.
//!
//! PostgreSQL keeps `XLogReceiptTime` in the startup process's memory, but
//! each time it sets it from a streamed chunk (`WaitForWALToBecomeAvailable`:
//! replay caught up with the chunk the WAL receiver flushed last) it also
//! stores the same value in shared memory (`SetCurrentChunkStartTime`), which
//! `GetCurrentChunkReplayStartTime()` reads under the recovery spinlock. WAL
//! restored from the archive or read from pg_wal sets only the private
//! variable: the SQL side uses this value only while the WAL receiver
//! streams.

use pgrx::prelude::*;

mod sql {
    use super::*;

    /// When the startup process last found new streamed WAL while caught up
    /// (its `XLogReceiptTime` for streamed WAL); NULL when the server is not
    /// in recovery or has replayed no streamed WAL yet.
    #[pg_extern(volatile, parallel_safe, name = "_replay_receipt_time")]
    fn replay_receipt_time() -> Option<TimestampWithTimeZone> {
        crate::pg::session::streamed_wal_receipt_time()
            .and_then(|t| TimestampWithTimeZone::try_from(t).ok())
    }
}
