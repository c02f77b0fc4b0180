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

mod shmem;

use std::cell::RefCell;
use std::collections::HashSet;

use pgrx::PgSqlErrorCode;

use crate::pg::error::Report;

use pubjson_core::stats::live::LiveView;
use pubjson_core::stats::table::{self, Placement, SlotEntry, SlotKey};
pub use pubjson_core::stats::{Counters, TxnRecord};

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
    Report::new(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "pubjson does not track decoding statistics of replication slot \"{}\"",
            slot.name_text()
        ),
    )
    .detail(format!(
        "All {capacity} entries of pubjson.max_tracked_slots belong to existing slots: \
         this slot is decoded but not counted until an entry is free."
    ))
    .hint(
        "Raise pubjson.max_tracked_slots (takes effect at server restart), \
         or drop replication slots that are no longer used.",
    )
    .warning();
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
