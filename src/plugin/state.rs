//! Per-slot decoding state: the parsed options, the output buffer, the
//! relation cache and what the current transaction has emitted so far.
//!
//! The state is a Rust value owned by the decoding context's memory context:
//! a reset callback drops it when PostgreSQL frees `ctx->context`, which also
//! happens when decoding through the SQL functions ends in an ERROR (and
//! `shutdown_cb` is never called).

use std::collections::HashSet;

use pgrx::pg_sys;

use crate::output::wal2json::TxnInfo;
use crate::plugin::options::Options;
use crate::plugin::publication::Publications;
use crate::plugin::relation::RelationCache;
use crate::plugin::server_encoding::OutputText;
use crate::plugin::tuple::DeformBuffers;
use crate::stats::table::SlotKey;
use crate::stats::{self, Counters, TxnRecord};

/// Format 1 keeps a transaction in one document; past this many bytes the
/// document is written in several pieces (split between two changes), so a
/// huge transaction never hits PostgreSQL's 1 GB allocation limit.
pub const V1_FLUSH_BYTES: usize = 16 * 1024 * 1024;

/// The transaction being replayed.
#[derive(Default)]
pub struct TxnState {
    pub info: TxnInfo,
    pub first_lsn: u64,
    pub commit_time: i64,
    /// Whether the timestamp text has been rendered into `info.timestamp`.
    pub timestamp_ready: bool,
    /// The BEGIN output has been written (at once, or deferred until the
    /// first emitted change when skip-empty-xacts is on).
    pub begun: bool,
    /// Elements in the format-1 `change` array so far.
    pub nr_changes: u64,
    /// Changes decoded (emitted or not), items emitted (changes, truncates,
    /// messages) and bytes emitted, for the statistics.
    pub changes_seen: u64,
    pub items_emitted: u64,
    pub bytes_emitted: u64,
}

/// A block of an in-progress transaction being streamed.
pub struct StreamBlock {
    /// The top-level transaction.
    pub xid: u32,
    /// The block's `S` object has been written (deferred like BEGIN).
    pub begun: bool,
}

pub struct DecodingState {
    pub opts: Options,
    /// Output not yet handed to PostgreSQL.
    pub out: Vec<u8>,
    /// How `out` is handed over (rewritten as ASCII outside UTF-8).
    pub output_text: OutputText,
    pub txn: TxnState,
    pub relations: RelationCache,
    /// The publications named by publication_names, if any.
    pub publications: Option<Publications>,
    pub new_tuple: DeformBuffers,
    pub old_tuple: DeformBuffers,
    /// Reset after every change, so output functions and detoasting never
    /// accumulate memory across a transaction.
    pub change_memory: pg_sys::MemoryContext,
    /// Changes since the last progress update (PG15's keepalive logic;
    /// PostgreSQL 16+ updates progress itself).
    #[cfg(feature = "pg15")]
    pub changes_since_progress: u32,
    /// The streamed block being decoded, if any.
    pub stream_block: Option<StreamBlock>,
    /// Streamed transactions that have emitted something: their abort or
    /// commit must be reported; the others leave no trace.
    pub streamed_with_output: HashSet<u32>,
    /// The slot (name, database, plugin) under which statistics are published.
    pub slot: SlotKey,
    /// Counts since the last publication (see `stats.rs`).
    pub stats: Counters,
}

impl DecodingState {
    pub fn new(
        opts: Options,
        change_memory: pg_sys::MemoryContext,
        cache_memory: pg_sys::MemoryContext,
    ) -> Self {
        DecodingState {
            out: Vec::with_capacity(8192),
            output_text: OutputText::for_database(),
            txn: TxnState::default(),
            relations: RelationCache::new(cache_memory),
            publications: opts.publication_names.as_deref().map(Publications::new),
            new_tuple: DeformBuffers::default(),
            old_tuple: DeformBuffers::default(),
            change_memory,
            #[cfg(feature = "pg15")]
            changes_since_progress: 0,
            stream_block: None,
            streamed_with_output: HashSet::new(),
            slot: SlotKey::default(),
            stats: Counters::default(),
            opts,
        }
    }
}

impl DecodingState {
    /// Publishes the counts gathered since the last call.
    pub fn publish_stats(&mut self) {
        if self.stats != Counters::default() {
            stats::publish(&self.slot, &self.stats);
            self.stats = Counters::default();
        }
    }
}

/// `RBTXN_IS_SERIALIZED | RBTXN_IS_SERIALIZED_CLEAR`, `RBTXN_IS_STREAMED`.
const RBTXN_SPILLED: u32 = 0x0004 | 0x0008;
const RBTXN_STREAMED: u32 = 0x0010;

/// Records a finished (committed, prepared or streamed) transaction in the
/// statistics and publishes them.
///
/// # Safety
/// `txn` is valid.
pub unsafe fn finish_txn_stats(state: &mut DecodingState, txn: *mut pg_sys::ReorderBufferTXN) {
    let emitted = state.txn.items_emitted > 0;
    // SAFETY: plain field reads of a valid transaction.
    let record = unsafe {
        TxnRecord {
            xid: (*txn).xid.into_inner(),
            changes: state.txn.changes_seen,
            bytes: state.txn.bytes_emitted,
            spilled: (*txn).txn_flags & RBTXN_SPILLED != 0,
            streamed: (*txn).txn_flags & RBTXN_STREAMED != 0,
            wal_span: (*txn).end_lsn.saturating_sub((*txn).first_lsn),
            commit_to_emit_us: pg_sys::GetCurrentTimestamp() - (*txn).xact_time.commit_time,
            commit_time: (*txn).xact_time.commit_time,
        }
    };
    state.stats.txns_decoded += 1;
    if emitted {
        state.stats.txns_emitted += 1;
    } else {
        state.stats.txns_skipped_empty += 1;
    }
    state.stats.note_transaction(record);
    state.txn.changes_seen = 0;
    state.txn.items_emitted = 0;
    state.txn.bytes_emitted = 0;
    state.publish_stats();
}

/// The state `startup` stored in the context.
///
/// # Safety
/// `ctx` must be a decoding context whose startup callback has run.
pub unsafe fn state<'a>(ctx: *mut pg_sys::LogicalDecodingContext) -> &'a mut DecodingState {
    // SAFETY: startup stores a valid DecodingState pointer before any other
    // callback can run, and it lives until ctx->context is freed.
    unsafe { &mut *((*ctx).output_plugin_private as *mut DecodingState) }
}
