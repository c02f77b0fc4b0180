//! Decoding statistics per slot (their SQL functions are in `api/stats_functions.rs`): what the plugin saw, filtered, transformed
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

pub mod live;
mod shmem;
pub mod table;

use std::cell::RefCell;
use std::collections::HashSet;

use pgrx::{PgLogLevel, PgSqlErrorCode};

use live::LiveView;
use table::{Placement, SlotEntry, SlotKey};

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
    with_entry(slot, |entry| entry.counters.merge(delta));
}

/// Replaces the live view of `slot` with `view` (a new sample).
pub fn publish_live(slot: &SlotKey, view: &LiveView) {
    with_entry(slot, |entry| entry.live = *view);
}

/// The decoding session of process `pid` ends: its live view goes.
pub fn end_live(slot: &SlotKey, pid: i32) {
    let clear = |entries: &mut [SlotEntry]| {
        if let Some(i) = table::find(entries, slot) {
            if entries[i].live.owner_pid == pid {
                entries[i].live = LiveView::default();
            }
        }
    };
    if shmem::with_table(clear).is_none() {
        LOCAL.with(|l| clear(&mut l.borrow_mut()));
    }
}

/// Runs `f` on the entry of `slot`: in shared memory when pubjson is
/// preloaded (nothing when the table has no room: a WARNING says so once),
/// else in this backend's own table, grown as needed.
fn with_entry(slot: &SlotKey, f: impl FnOnce(&mut SlotEntry)) {
    let mut f = Some(f);
    let placement = shmem::with_table(|entries| {
        let placement = table::place(entries, slot, shmem::slot_exists);
        if let Placement::Existing(i) | Placement::Claimed(i) = placement {
            if let Some(f) = f.take() {
                f(&mut entries[i]);
            }
        }
        placement
    });
    match placement {
        Some(Placement::Full) => warn_untracked(slot),
        Some(_) => {}
        None => LOCAL.with(|l| {
            let mut local = l.borrow_mut();
            let i = match table::place(&mut local, slot, shmem::slot_exists) {
                Placement::Existing(i) | Placement::Claimed(i) => i,
                Placement::Full => {
                    local.push(SlotEntry {
                        state: table::EntryState::InUse,
                        slot: *slot,
                        ..SlotEntry::default()
                    });
                    local.len() - 1
                }
            };
            if let Some(f) = f.take() {
                f(&mut local[i]);
            }
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

/// One slot's statistics as read.
pub struct SlotStats {
    pub slot_name: String,
    pub counters: Counters,
    pub live: LiveView,
}

/// Whether the counters live in shared memory: pubjson was preloaded
/// (`shared_preload_libraries`), so every backend runs the library the
/// postmaster loaded at its start.
pub fn shared() -> bool {
    shmem::attached()
}

/// The totals of the slots that exist: `(shared, per slot)`, by slot name.
/// Entries of slots that no longer exist are reclaimed on the way.
pub fn snapshot() -> (bool, Vec<SlotStats>) {
    let mut copied: Vec<(SlotKey, Counters, LiveView)> = Vec::with_capacity(shmem::capacity());
    let shared = shmem::with_table(|entries| {
        table::reclaim(entries, shmem::slot_exists);
        // No allocation under the lock: `copied` has room for every entry.
        copied.extend(table::in_use(entries).map(|e| (e.slot, e.counters, e.live)));
    })
    .is_some();
    if !shared {
        LOCAL.with(|l| {
            let mut local = l.borrow_mut();
            table::reclaim(&mut local, shmem::slot_exists);
            local.retain(|e| e.state == table::EntryState::InUse);
            copied.extend(local.iter().map(|e| (e.slot, e.counters, e.live)));
        });
    }
    let mut rows: Vec<SlotStats> = copied
        .into_iter()
        .map(|(slot, counters, live)| SlotStats {
            slot_name: slot.name_text(),
            counters,
            live,
        })
        .collect();
    rows.sort_by(|a, b| a.slot_name.cmp(&b.slot_name));
    (shared, rows)
}

/// Clears the statistics of every slot (`None`) or of one.
pub fn reset(slot_name: Option<&str>) {
    let forget = |entries: &mut [SlotEntry]| match slot_name {
        None => table::clear(entries),
        Some(name) => {
            table::forget(entries, name.as_bytes());
        }
    };
    LOCAL.with(|l| forget(&mut l.borrow_mut()));
    WARNED.with(|w| w.borrow_mut().clear());
    shmem::with_table(forget);
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
