//! Decoding statistics per slot: what the plugin saw, filtered, transformed
//! and emitted, and how large transactions behaved in the reorder buffer.
//!
//! The decoding backend counts into its state and publishes the counts at
//! the end of every transaction: into the shared table (`shmem.rs`) when
//! pubjson is in `shared_preload_libraries`, so any session can read them,
//! and otherwise into backend-local totals: `pubjson.decoding_stats()` then
//! says so (`source = 'this backend'`) and shows what the calling backend
//! itself decoded, which covers `pg_logical_slot_get_changes`.
//!
//! Which entry belongs to which slot (`table.rs`): a slot created anew
//! starts from zero, entries of slots that no longer exist are reclaimed,
//! and a slot the shared table has no room for is reported once per
//! session with a WARNING.
//!
//! Decoding is counted each time it happens: `pg_logical_slot_peek_changes`
//! counts what it decodes every time it is called, and so does decoding the
//! same transactions again after a restart from the slot's restart_lsn.

mod shmem;
pub mod table;

use std::cell::RefCell;
use std::collections::HashSet;

use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel, PgSqlErrorCode};

use table::{Placement, SlotEntry, SlotKey};

/// Worst recent transactions kept per slot.
pub const WORST_KEPT: usize = 8;

/// One transaction, as the reorder-buffer view reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TxnRecord {
    pub xid: u32,
    pub changes: u64,
    /// Reorder-buffer bytes of the transaction (with subtransactions).
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

thread_local! {
    /// What this backend decoded, per slot (the view without preloading;
    /// grown as needed).
    static LOCAL: RefCell<Vec<SlotEntry>> = const { RefCell::new(Vec::new()) };
    /// Slots this backend has already warned about (not tracked: the shared
    /// table is full).
    static WARNED: RefCell<HashSet<SlotKey>> = RefCell::new(HashSet::new());
}

/// `_PG_init`: when loaded at server start, the setting and the shared table.
pub fn init() {
    shmem::init();
}

/// The startup callback of a slot being created: whatever was recorded
/// under its name belonged to a dropped slot, so the new one starts from
/// zero.
pub fn slot_created(name: &[u8]) {
    LOCAL.with(|l| table::forget(&mut l.borrow_mut(), name));
    WARNED.with(|w| w.borrow_mut().retain(|s| s.name() != name));
    shmem::with_table(|entries| table::forget(entries, name));
}

/// Adds a decoding session's counts for `slot` to the totals.
pub fn publish(slot: &SlotKey, delta: &Counters) {
    let placement = shmem::with_table(|entries| {
        let placement = table::place(entries, slot, shmem::slot_exists);
        if let Placement::Existing(i) | Placement::Claimed(i) = placement {
            entries[i].counters.merge(delta);
        }
        placement
    });
    match placement {
        Some(Placement::Full) => warn_untracked(slot),
        Some(_) => {}
        // Not preloaded: this backend's own table, grown as needed.
        None => LOCAL.with(|l| {
            let mut local = l.borrow_mut();
            let i = match table::place(&mut local, slot, shmem::slot_exists) {
                Placement::Existing(i) | Placement::Claimed(i) => i,
                Placement::Full => {
                    local.push(SlotEntry {
                        state: table::EntryState::InUse,
                        slot: *slot,
                        counters: Counters::default(),
                    });
                    local.len() - 1
                }
            };
            local[i].counters.merge(delta);
        }),
    }
}

/// Once per session and slot: the shared table has no room for `slot`.
fn warn_untracked(slot: &SlotKey) {
    if !WARNED.with(|w| w.borrow_mut().insert(*slot)) {
        return;
    }
    let capacity = shmem::capacity();
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "pubjson does not track decoding statistics of replication slot \"{}\"",
            slot.name_text()
        ),
        "pubjson statistics",
    )
    .set_detail(format!(
        "All {capacity} entries of pubjson.max_tracked_slots belong to existing slots: \
         this slot is decoded but not counted until an entry is free."
    ))
    .set_hint(
        "Raise pubjson.max_tracked_slots (takes effect at server restart), \
         or drop replication slots that are no longer used.",
    )
    .report(PgLogLevel::WARNING);
}

/// The totals of the slots that exist: `(shared, per slot)`, by slot name.
/// Entries of slots that no longer exist are reclaimed on the way.
fn snapshot() -> (bool, Vec<(String, Counters)>) {
    let mut copied: Vec<(SlotKey, Counters)> = Vec::with_capacity(shmem::capacity());
    let shared = shmem::with_table(|entries| {
        table::reclaim(entries, shmem::slot_exists);
        // No allocation under the lock: `copied` has room for every entry.
        copied.extend(table::in_use(entries).map(|e| (e.slot, e.counters)));
    })
    .is_some();
    if !shared {
        LOCAL.with(|l| {
            let mut local = l.borrow_mut();
            table::reclaim(&mut local, shmem::slot_exists);
            local.retain(|e| e.state == table::EntryState::InUse);
            copied.extend(local.iter().map(|e| (e.slot, e.counters)));
        });
    }
    let mut rows: Vec<(String, Counters)> = copied
        .into_iter()
        .map(|(slot, counters)| (slot.name_text(), counters))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    (shared, rows)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The SQL functions. They land in schema `pubjson`, the extension's schema
/// (`pubjson.control`), in which CREATE EXTENSION runs the script; a
/// `#[pg_schema]` module would make the script run `CREATE SCHEMA IF NOT
/// EXISTS pubjson`, which fails for the schema CREATE EXTENSION created.
mod sql {
    use super::*;

    /// Raw per-slot decoding counters (see `pubjson.decoding_stats()`).
    ///
    /// Parallel restricted: without preloading it reads the calling
    /// backend's own counters, which a parallel worker does not have.
    #[pg_extern(volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn decoding_counters() -> TableIterator<
        'static,
        (
            name!(slot_name, String),
            name!(source, String),
            name!(txns_decoded, i64),
            name!(txns_emitted, i64),
            name!(txns_skipped_empty, i64),
            name!(changes_seen, i64),
            name!(changes_emitted, i64),
            name!(filtered_by_table, i64),
            name!(filtered_by_action, i64),
            name!(filtered_by_row_filter, i64),
            name!(filtered_by_origin, i64),
            name!(updates_to_insert, i64),
            name!(updates_to_delete, i64),
            name!(bytes_emitted, i64),
            name!(streamed_txns, i64),
            name!(prepared_txns, i64),
            name!(peak_reorder_buffer_bytes, i64),
            name!(largest_txn_xid, i64),
            name!(largest_txn_changes, i64),
            name!(largest_txn_bytes, i64),
            name!(largest_txn_spilled, bool),
            name!(largest_txn_streamed, bool),
            name!(max_wal_span_bytes, i64),
            name!(max_commit_to_emit_ms, f64),
        ),
    > {
        let (shared, rows) = snapshot();
        let source = if shared {
            "shared memory"
        } else {
            "this backend"
        };
        TableIterator::new(rows.into_iter().map(move |(name, c)| {
            (
                name,
                source.to_owned(),
                to_i64(c.txns_decoded),
                to_i64(c.txns_emitted),
                to_i64(c.txns_skipped_empty),
                to_i64(c.changes_seen),
                to_i64(c.changes_emitted),
                to_i64(c.filtered_by_table),
                to_i64(c.filtered_by_action),
                to_i64(c.filtered_by_row_filter),
                to_i64(c.filtered_by_origin),
                to_i64(c.updates_to_insert),
                to_i64(c.updates_to_delete),
                to_i64(c.bytes_emitted),
                to_i64(c.streamed_txns),
                to_i64(c.prepared_txns),
                to_i64(c.peak_reorder_buffer_bytes),
                c.largest.xid as i64,
                to_i64(c.largest.changes),
                to_i64(c.largest.bytes),
                c.largest.spilled,
                c.largest.streamed,
                to_i64(c.max_wal_span),
                c.max_commit_to_emit_us as f64 / 1000.0,
            )
        }))
    }

    /// The transactions with the longest commit-to-emit delay, per slot.
    #[pg_extern(volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn worst_transactions() -> TableIterator<
        'static,
        (
            name!(slot_name, String),
            name!(rank, i32),
            name!(xid, i64),
            name!(changes, i64),
            name!(bytes, i64),
            name!(spilled, bool),
            name!(streamed, bool),
            name!(wal_span_bytes, i64),
            name!(commit_to_emit_ms, f64),
            name!(committed_at, Option<TimestampWithTimeZone>),
        ),
    > {
        let (_, rows) = snapshot();
        let mut out = Vec::new();
        for (name, c) in rows {
            for (i, r) in c.worst.iter().filter(|r| r.xid != 0).enumerate() {
                out.push((
                    name.clone(),
                    i as i32 + 1,
                    r.xid as i64,
                    to_i64(r.changes),
                    to_i64(r.bytes),
                    r.spilled,
                    r.streamed,
                    to_i64(r.wal_span),
                    r.commit_to_emit_us as f64 / 1000.0,
                    TimestampWithTimeZone::try_from(r.commit_time).ok(),
                ));
            }
        }
        TableIterator::new(out)
    }

    /// Clears the statistics (all slots, or one); superuser only.
    #[pg_extern(volatile)]
    fn reset_stats(slot_name: default!(Option<String>, "NULL")) -> bool {
        // SAFETY: reads the current role's superuser flag.
        if !unsafe { pg_sys::superuser() } {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "must be superuser to reset pubjson statistics"
            );
        }
        let forget = |entries: &mut [SlotEntry]| match &slot_name {
            None => table::clear(entries),
            Some(name) => {
                table::forget(entries, name.as_bytes());
            }
        };
        LOCAL.with(|l| forget(&mut l.borrow_mut()));
        WARNED.with(|w| w.borrow_mut().clear());
        shmem::with_table(forget);
        true
    }
}

pgrx::extension_sql!(
    r#"
-- Decoding statistics joined with PostgreSQL's own figures for the slot.
-- One text for PostgreSQL 15 to 18: pg_replication_slots columns newer than
-- 15 are read as to_jsonb(r) ->> 'column' (NULL where the server has none):
-- conflicting (16+, with 17's meaning: see pubjson._slot_conflicting),
-- invalidation_reason and inactive_since (17+). On a
-- standby (16+ can decode there) retained WAL counts from the replay
-- position. The search_path is pinned (and every name qualified besides):
-- the caller's path must not decide which to_jsonb or = runs.
CREATE FUNCTION pubjson.decoding_stats()
RETURNS TABLE (
    slot_name text, source text,
    txns_decoded bigint, txns_emitted bigint, txns_skipped_empty bigint,
    changes_seen bigint, changes_emitted bigint,
    filtered_by_table bigint, filtered_by_action bigint, filtered_by_row_filter bigint, filtered_by_origin bigint,
    updates_to_insert bigint, updates_to_delete bigint,
    bytes_emitted bigint, streamed_txns bigint, prepared_txns bigint,
    peak_reorder_buffer_bytes bigint,
    largest_txn_xid bigint, largest_txn_changes bigint, largest_txn_bytes bigint,
    largest_txn_spilled boolean, largest_txn_streamed boolean,
    max_wal_span_bytes bigint, max_commit_to_emit_ms double precision,
    spill_txns bigint, spill_count bigint, spill_bytes bigint,
    stream_txns bigint, stream_count bigint, stream_bytes bigint,
    total_txns bigint, total_bytes bigint,
    active boolean, restart_lsn pg_lsn, confirmed_flush_lsn pg_lsn,
    retained_wal_bytes numeric, wal_status text, safe_wal_size bigint,
    conflicting boolean, invalidation_reason text, inactive_since timestamptz
)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.slot_name, c.source,
           c.txns_decoded, c.txns_emitted, c.txns_skipped_empty,
           c.changes_seen, c.changes_emitted,
           c.filtered_by_table, c.filtered_by_action, c.filtered_by_row_filter, c.filtered_by_origin,
           c.updates_to_insert, c.updates_to_delete,
           c.bytes_emitted, c.streamed_txns, c.prepared_txns,
           c.peak_reorder_buffer_bytes,
           c.largest_txn_xid, c.largest_txn_changes, c.largest_txn_bytes,
           c.largest_txn_spilled, c.largest_txn_streamed,
           c.max_wal_span_bytes, c.max_commit_to_emit_ms,
           s.spill_txns, s.spill_count, s.spill_bytes,
           s.stream_txns, s.stream_count, s.stream_bytes,
           s.total_txns, s.total_bytes,
           r.active, r.restart_lsn, r.confirmed_flush_lsn,
           pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END,
               r.restart_lsn),
           r.wal_status, r.safe_wal_size,
           pubjson._slot_conflicting(j.slot),
           pubjson._slot_invalidation(j.slot),
           (j.slot OPERATOR(pg_catalog.->>) 'inactive_since')::pg_catalog.timestamptz
      FROM pubjson.decoding_counters() c
      LEFT JOIN pg_catalog.pg_stat_replication_slots s
             ON s.slot_name OPERATOR(pg_catalog.=) c.slot_name
      LEFT JOIN pg_catalog.pg_replication_slots r
             ON r.slot_name OPERATOR(pg_catalog.=) c.slot_name
      CROSS JOIN LATERAL (SELECT pg_catalog.to_jsonb(r) AS slot) j
$$;

-- Reading statistics follows PostgreSQL's convention: pg_read_all_stats
-- (which pg_monitor includes).
GRANT USAGE ON SCHEMA pubjson TO pg_read_all_stats;
REVOKE ALL ON FUNCTION pubjson.decoding_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.decoding_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.worst_transactions() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.reset_stats(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.decoding_counters() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.decoding_stats() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.worst_transactions() TO pg_read_all_stats;
"#,
    name = "decoding_stats_view",
    requires = [
        decoding_counters,
        worst_transactions,
        reset_stats,
        "conflicts"
    ]
);

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
