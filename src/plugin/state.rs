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
use crate::plugin::tuple::DeformBuffers;

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
    pub txn: TxnState,
    pub relations: RelationCache,
    /// The publications named by publication_names, if any.
    pub publications: Option<Publications>,
    pub new_tuple: DeformBuffers,
    pub old_tuple: DeformBuffers,
    /// Reset after every change, so output functions and detoasting never
    /// accumulate memory across a transaction.
    pub change_memory: pg_sys::MemoryContext,
    /// Changes since the last progress update (PG15's keepalive logic).
    pub changes_since_progress: u32,
    /// The streamed block being decoded, if any.
    pub stream_block: Option<StreamBlock>,
    /// Streamed transactions that have emitted something: their abort or
    /// commit must be reported; the others leave no trace.
    pub streamed_with_output: HashSet<u32>,
}

impl DecodingState {
    pub fn new(
        opts: Options,
        change_memory: pg_sys::MemoryContext,
        cache_memory: pg_sys::MemoryContext,
    ) -> Self {
        DecodingState {
            out: Vec::with_capacity(8192),
            txn: TxnState::default(),
            relations: RelationCache::new(cache_memory),
            publications: opts.publication_names.as_deref().map(Publications::new),
            new_tuple: DeformBuffers::default(),
            old_tuple: DeformBuffers::default(),
            change_memory,
            changes_since_progress: 0,
            stream_block: None,
            streamed_with_output: HashSet::new(),
            opts,
        }
    }
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
