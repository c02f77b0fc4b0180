//! Per-slot decoding state: the parsed options, the chosen format, the
//! output buffer, the relation cache and what the current transaction has
//! emitted so far.
//!
//! The callback shims (`callbacks.rs`) own the state's lifetime: it is a
//! Rust value owned by the decoding context's memory context (dropped when
//! PostgreSQL frees `ctx->context`, which also happens when decoding
//! through the SQL functions ends in an ERROR and `shutdown_cb` is never
//! called), lent to one callback at a time.

use std::collections::HashSet;

use pgrx::pg_sys;

use crate::model::TxnInfo;
use crate::options::Options;
use crate::output::format::OutputFormat;
use crate::pg::handles::{ChangeMemory, Txn};
use crate::pg::port::current_timestamp;
use crate::pg::publication::Publications;
use crate::pg::relation::RelationCache;
use crate::pg::server_encoding::OutputText;
use crate::pg::tuple::DeformBuffers;
use crate::stats::live::{LiveTracker, ReorderTxn};
use crate::stats::table::SlotKey;
use crate::stats::{self, Counters, TxnRecord};

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
    /// Changes decoded (emitted or not), items emitted (changes, truncates,
    /// messages) and bytes emitted, for the statistics.
    pub changes_seen: u64,
    pub items_emitted: u64,
    pub bytes_emitted: u64,
    /// When its replay began (the clock at BEGIN), for the replay rate.
    pub replay_start: i64,
}

/// A block of an in-progress transaction being streamed.
pub struct StreamBlock {
    /// The top-level transaction.
    pub xid: u32,
    /// The block's start has been written (deferred like BEGIN).
    pub begun: bool,
}

pub struct DecodingState {
    pub opts: Options,
    /// The output format, chosen once from the options.
    pub format: Box<dyn OutputFormat>,
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
    pub change_memory: ChangeMemory,
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
    /// The live view's side of the session (see `stats/live.rs`).
    pub live: LiveTracker,
    /// The reorder buffer's transactions, read when sampling (kept to reuse
    /// its allocation).
    pub live_scratch: Vec<ReorderTxn>,
    /// PostgreSQL's page callback of the WAL reader, which ours calls
    /// (`None` when ours is not installed).
    pub page_read: pg_sys::XLogPageReadCB,
}

impl DecodingState {
    pub fn new(
        opts: Options,
        change_memory: ChangeMemory,
        relations: RelationCache,
        slot: SlotKey,
    ) -> Self {
        DecodingState {
            format: crate::output::format_for(&opts),
            out: Vec::with_capacity(8192),
            output_text: OutputText::for_database(),
            txn: TxnState::default(),
            relations,
            publications: opts.publication_names.as_deref().map(Publications::new),
            new_tuple: DeformBuffers::default(),
            old_tuple: DeformBuffers::default(),
            change_memory,
            #[cfg(feature = "pg15")]
            changes_since_progress: 0,
            stream_block: None,
            streamed_with_output: HashSet::new(),
            slot,
            stats: Counters::default(),
            live: LiveTracker::default(),
            live_scratch: Vec::new(),
            page_read: None,
            opts,
        }
    }

    /// Publishes the counts gathered since the last call.
    pub fn publish_stats(&mut self) {
        if self.stats != Counters::default() {
            stats::publish(&self.slot, &self.stats);
            self.stats = Counters::default();
        }
    }

    /// Records a finished (committed, prepared or streamed) transaction in
    /// the statistics and publishes them.
    pub fn finish_txn_stats(&mut self, txn: Txn<'_>) {
        let emitted = self.txn.items_emitted > 0;
        let now = current_timestamp();
        if !txn.streamed() {
            // Streamed transactions replay their last part only here.
            self.live.rate.note(
                self.txn.changes_seen,
                self.txn.bytes_emitted,
                now - self.txn.replay_start,
            );
        }
        // It leaves the reorder buffer: the next sample shows that.
        self.live.touch();
        let record = TxnRecord {
            xid: txn.xid(),
            changes: self.txn.changes_seen,
            bytes: self.txn.bytes_emitted,
            spilled: txn.spilled(),
            streamed: txn.streamed(),
            wal_span: txn.end_lsn().saturating_sub(txn.first_lsn()),
            commit_to_emit_us: now - txn.commit_time(),
            commit_time: txn.commit_time(),
        };
        self.stats.txns_decoded += 1;
        if emitted {
            self.stats.txns_emitted += 1;
        } else {
            self.stats.txns_skipped_empty += 1;
        }
        self.stats.note_transaction(record);
        self.txn.changes_seen = 0;
        self.txn.items_emitted = 0;
        self.txn.bytes_emitted = 0;
        self.publish_stats();
    }
}
