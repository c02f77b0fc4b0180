//! Decoding statistics' pure bookkeeping: the counters of one slot and
//! the record of a finished transaction (`Counters`, `TxnRecord`), which
//! entry of a table belongs to which slot (`table.rs`) and the live view of
//! a slot's reorder buffer (`live.rs`). The extension publishes them into
//! shared or backend-local memory (its `stats` module).

pub mod live;
pub mod table;

use crate::model::ChangeKind;
use crate::rules::route::{Route, Skip};

/// Worst recent transactions kept per slot.
pub const WORST_KEPT: usize = 8;

/// One finished transaction, as `worst_transactions()` and the `largest_txn_*`
/// columns report it: what the decoding session counted for it (see
/// `TxnState` in `plugin/state.rs`) and the reorder buffer's facts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TxnRecord {
    pub xid: u32,
    /// Changes decoded, emitted or not (with subtransactions).
    pub changes: u64,
    /// JSON bytes written for it (all its blocks when streamed).
    pub bytes: u64,
    pub spilled: bool,
    pub streamed: bool,
    /// WAL between the transaction's first change and its commit record.
    pub wal_span: u64,
    /// From its commit to its output, in microseconds.
    pub commit_to_emit_us: i64,
    pub commit_time: i64,
}

/// Counters of one slot. Plain data: lives in shared memory as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Counters {
    pub txns_decoded: u64,
    pub txns_emitted: u64,
    pub txns_skipped_empty: u64,
    pub changes_seen: u64,
    pub changes_emitted: u64,
    pub filtered_by_table: u64,
    pub filtered_by_action: u64,
    pub filtered_by_row_filter: u64,
    pub filtered_by_origin: u64,
    pub updates_to_insert: u64,
    pub updates_to_delete: u64,
    pub bytes_emitted: u64,
    pub streamed_txns: u64,
    pub prepared_txns: u64,
    pub peak_reorder_buffer_bytes: u64,
    pub largest: TxnRecord,
    pub max_wal_span: u64,
    pub max_commit_to_emit_us: i64,
    /// The transactions with the longest commit-to-emit delay, worst first.
    pub worst: [TxnRecord; WORST_KEPT],
}

impl Counters {
    /// Counts `items` changes that went through the routing decision: why
    /// they were left out, or the UPDATE a row filter transformed. The
    /// one place the reasons become counters.
    pub fn count_route(&mut self, route: &Route, items: u64) {
        match route {
            Route::Skip(Skip::Action) => self.filtered_by_action += items,
            Route::Skip(Skip::Table) => self.filtered_by_table += items,
            Route::Skip(Skip::RowFilter) => self.filtered_by_row_filter += items,
            // pubjson's own progress rows are no one's changes.
            Route::Skip(Skip::Internal) => {}
            Route::Emit(emit) => match (emit.transformed_from, emit.kind) {
                (Some(_), Some(ChangeKind::Insert)) => self.updates_to_insert += items,
                (Some(_), Some(ChangeKind::Delete)) => self.updates_to_delete += items,
                _ => {}
            },
        }
    }

    /// Adds `delta` (counts of one publishing interval) to these totals.
    pub fn merge(&mut self, delta: &Counters) {
        self.txns_decoded += delta.txns_decoded;
        self.txns_emitted += delta.txns_emitted;
        self.txns_skipped_empty += delta.txns_skipped_empty;
        self.changes_seen += delta.changes_seen;
        self.changes_emitted += delta.changes_emitted;
        self.filtered_by_table += delta.filtered_by_table;
        self.filtered_by_action += delta.filtered_by_action;
        self.filtered_by_row_filter += delta.filtered_by_row_filter;
        self.filtered_by_origin += delta.filtered_by_origin;
        self.updates_to_insert += delta.updates_to_insert;
        self.updates_to_delete += delta.updates_to_delete;
        self.bytes_emitted += delta.bytes_emitted;
        self.streamed_txns += delta.streamed_txns;
        self.prepared_txns += delta.prepared_txns;
        self.peak_reorder_buffer_bytes = self
            .peak_reorder_buffer_bytes
            .max(delta.peak_reorder_buffer_bytes);
        self.max_wal_span = self.max_wal_span.max(delta.max_wal_span);
        self.max_commit_to_emit_us = self.max_commit_to_emit_us.max(delta.max_commit_to_emit_us);
        if delta.largest.changes > self.largest.changes {
            self.largest = delta.largest;
        }
        for record in delta.worst.iter().filter(|r| r.xid != 0) {
            self.note_worst(*record);
        }
    }

    /// Records a finished transaction in the maxima and the worst list.
    pub fn note_transaction(&mut self, record: TxnRecord) {
        self.max_wal_span = self.max_wal_span.max(record.wal_span);
        self.max_commit_to_emit_us = self.max_commit_to_emit_us.max(record.commit_to_emit_us);
        if record.changes > self.largest.changes {
            self.largest = record;
        }
        self.note_worst(record);
    }

    fn note_worst(&mut self, record: TxnRecord) {
        // Keep the list sorted by delay, worst first; empty slots have xid 0.
        let position = self
            .worst
            .iter()
            .position(|r| r.xid == 0 || record.commit_to_emit_us > r.commit_to_emit_us);
        if let Some(i) = position {
            self.worst.copy_within(i..WORST_KEPT - 1, i + 1);
            self.worst[i] = record;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(xid: u32, changes: u64, delay: i64) -> TxnRecord {
        TxnRecord {
            xid,
            changes,
            commit_to_emit_us: delay,
            ..TxnRecord::default()
        }
    }

    #[test]
    fn worst_list_keeps_the_longest_delays_in_order() {
        let mut c = Counters::default();
        for (i, delay) in [5, 50, 1, 30, 70, 2, 9, 100, 3, 60, 40].iter().enumerate() {
            c.note_transaction(record(i as u32 + 1, *delay as u64, *delay));
        }
        let delays: Vec<i64> = c.worst.iter().map(|r| r.commit_to_emit_us).collect();
        assert_eq!(delays, vec![100, 70, 60, 50, 40, 30, 9, 5]);
        assert_eq!(c.largest.changes, 100);
        assert_eq!(c.max_commit_to_emit_us, 100);
    }

    #[test]
    fn routes_are_counted_by_reason() {
        use crate::rules::route::Emit;
        let mut c = Counters::default();
        c.count_route(&Route::Skip(Skip::Action), 2);
        c.count_route(&Route::Skip(Skip::Table), 3);
        c.count_route(&Route::Skip(Skip::RowFilter), 1);
        c.count_route(&Route::Skip(Skip::Internal), 9);
        let transformed = |kind| Emit {
            kind: Some(kind),
            transformed_from: Some(ChangeKind::Update),
            ..Emit::default()
        };
        c.count_route(&Route::Emit(transformed(ChangeKind::Insert)), 1);
        c.count_route(&Route::Emit(transformed(ChangeKind::Delete)), 1);
        c.count_route(&Route::Emit(Emit::default()), 5);
        assert_eq!(
            (
                c.filtered_by_action,
                c.filtered_by_table,
                c.filtered_by_row_filter,
                c.updates_to_insert,
                c.updates_to_delete
            ),
            (2, 3, 1, 1, 1)
        );
    }

    #[test]
    fn merge_adds_counts_and_keeps_maxima() {
        let mut total = Counters {
            changes_seen: 3,
            peak_reorder_buffer_bytes: 10,
            ..Counters::default()
        };
        let mut delta = Counters {
            changes_seen: 4,
            peak_reorder_buffer_bytes: 7,
            ..Counters::default()
        };
        delta.note_transaction(record(9, 12, 5));
        total.merge(&delta);
        assert_eq!(total.changes_seen, 7);
        assert_eq!(total.peak_reorder_buffer_bytes, 10);
        assert_eq!(total.largest.xid, 9);
        assert_eq!(total.worst[0].xid, 9);
        assert_eq!(total.worst[1].xid, 0);
    }
}
