//! Per-slot decoding state: the parsed options and the session's routing
//! rules, the emitter (the format and its output, the transactions'
//! records), the relation cache and publications, the tuple buffers, and
//! the statistics with the live view.
//!
//! The callback shims (`callbacks.rs`) own the state's lifetime: it is a
//! Rust value owned by the decoding context's memory context (dropped when
//! PostgreSQL frees `ctx->context`, which also happens when decoding
//! through the SQL functions ends in an ERROR and `shutdown_cb` is never
//! called), lent to one callback at a time. Its fields are the decoding
//! core's (`plugin/`) alone; it counts and emits through its methods.

use pgrx::pg_sys;

use pubjson_core::options::Options;
use pubjson_core::output::format::OutputFormat;
use pubjson_core::rules::route::{Route, SessionRules};
use pubjson_core::stats::live::{LiveTracker, ReorderTxn};
use pubjson_core::stats::table::SlotKey;

use crate::pg::handles::{ChangeMemory, Txn};
use crate::pg::port::current_timestamp;
use crate::pg::publication::Publications;
use crate::pg::relation::RelationCache;
use crate::pg::tuple::DeformBuffers;
use crate::plugin::emitter::Emitter;
use crate::plugin::txn_records::TxnState;
use crate::stats::{self, Counters, TxnRecord};

pub struct DecodingState {
    pub(super) opts: Options,
    /// The session's side of every routing decision.
    pub(super) rules: SessionRules,
    /// The format and everything written with it.
    pub(super) emitter: Emitter,
    pub(super) relations: RelationCache,
    /// The publications named by publication_names, if any.
    pub(super) publications: Option<Publications>,
    pub(super) new_tuple: DeformBuffers,
    pub(super) old_tuple: DeformBuffers,
    /// Reset after every change, so output functions and detoasting never
    /// accumulate memory across a transaction.
    pub(super) change_memory: ChangeMemory,
    /// The slot (name, database, plugin) under which statistics are published.
    pub(super) slot: SlotKey,
    /// Counts since the last publication (see `stats.rs`).
    stats: Counters,
    /// The live view's side of the session (see `stats/live.rs`).
    pub(super) live: LiveTracker,
    /// The reorder buffer's transactions, read when sampling (kept to reuse
    /// its allocation).
    pub(super) live_scratch: Vec<ReorderTxn>,
    /// PostgreSQL's page callback of the WAL reader, which ours calls
    /// (`None` when ours is not installed).
    pub(super) page_read: pg_sys::XLogPageReadCB,
}

impl DecodingState {
    /// `format`: the one the options chose (its type rendering already
    /// given to `relations`).
    pub fn new(
        opts: Options,
        format: Box<dyn OutputFormat>,
        change_memory: ChangeMemory,
        relations: RelationCache,
        slot: SlotKey,
    ) -> Self {
        DecodingState {
            rules: SessionRules::new(&opts, format.events()),
            emitter: Emitter::new(format, &opts),
            relations,
            publications: opts.publication_names.as_deref().map(Publications::new),
            new_tuple: DeformBuffers::default(),
            old_tuple: DeformBuffers::default(),
            change_memory,
            slot,
            stats: Counters::default(),
            live: LiveTracker::default(),
            live_scratch: Vec::new(),
            page_read: None,
            opts,
        }
    }

    /// `n` changes were decoded (emitted or not): in the statistics and in
    /// the record of the transaction being delivered, if `of_txn`.
    pub(super) fn count_seen(&mut self, n: u64, of_txn: bool) {
        self.stats.changes_seen += n;
        if of_txn {
            if let Some(record) = self.emitter.records().current() {
                record.changes_seen += n;
            }
        }
    }

    /// `n` changes went through the routing decision (`route`).
    pub(super) fn count_route(&mut self, route: &Route, n: u64) {
        self.stats.count_route(route, n);
    }

    /// A change left out by its origin (`filter_by_origin_cb`).
    pub(super) fn count_filtered_by_origin(&mut self) {
        self.stats.filtered_by_origin += 1;
    }

    /// The reorder buffer's size seen at a change: its peak.
    pub(super) fn note_reorder_buffer(&mut self, bytes: u64) {
        self.stats.peak_reorder_buffer_bytes = self.stats.peak_reorder_buffer_bytes.max(bytes);
    }

    pub(super) fn count_streamed_txn(&mut self) {
        self.stats.streamed_txns += 1;
    }

    pub(super) fn count_prepared_txn(&mut self) {
        self.stats.prepared_txns += 1;
    }

    /// Publishes the counts gathered since the last call.
    pub(super) fn publish_stats(&mut self) {
        let (bytes, items) = self.emitter.take_written();
        self.stats.bytes_emitted += bytes;
        self.stats.changes_emitted += items;
        if self.stats != Counters::default() {
            stats::publish(&self.slot, &self.stats);
            self.stats = Counters::default();
        }
    }

    /// Records a finished (committed, prepared or streamed) transaction in
    /// the statistics and publishes them: `record` is what this session
    /// counted for it, `emitted` whether it produced output.
    pub(super) fn finish_txn_stats(&mut self, txn: Txn<'_>, record: &TxnState, emitted: bool) {
        let now = current_timestamp();
        if !txn.streamed() {
            // A streamed transaction's replay is spread over its blocks,
            // with other work between them: no measure of the rate.
            self.live.rate.note(
                record.changes_seen,
                record.bytes_emitted,
                now - record.replay_start,
            );
        }
        // It leaves the reorder buffer: the next sample shows that.
        self.live.touch();
        let finished = TxnRecord {
            xid: txn.xid(),
            changes: record.changes_seen,
            bytes: record.bytes_emitted,
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
        self.stats.note_transaction(finished);
        self.publish_stats();
    }
}
