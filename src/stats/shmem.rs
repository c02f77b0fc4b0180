//! The shared-memory statistics table, present when pubjson is in
//! `shared_preload_libraries`.
//!
//! Size: `pubjson.max_tracked_slots` entries (a postmaster setting whose
//! default is `max_replication_slots`), reserved at server start through
//! `shmem_request_hook` and set up in `shmem_startup_hook`.
//!
//! Layout: a [`Header`] followed by `capacity` [`SlotEntry`]s (see
//! `table.rs`; zeroed memory is a table of free entries).
//!
//! Locking: one LWLock (tranche `pubjson_stats`) guards the header and every
//! entry. Each access holds it exclusively, for a short critical section
//! that copies about 1.5 kB per entry and neither allocates nor
//! raises an error; a decoding backend takes it once per transaction it
//! publishes and per live-view sample (at most five a second while busy), a reader once per call. While holding it a backend may take
//! `ReplicationSlotControlLock` (shared, to see whether a slot still
//! exists), never the other way round, so the two cannot deadlock.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

use pgrx::pg_sys;
use pgrx::prelude::*;

use pubjson_core::stats::table::{SlotEntry, SlotKey, NAME_LEN};

const TRANCHE: &std::ffi::CStr = c"pubjson_stats";
const SHMEM_NAME: &std::ffi::CStr = c"pubjson statistics";
/// `max_replication_slots`' own upper limit (MAX_BACKENDS).
const MAX_SETTING: c_int = pg_sys::MAX_BACKENDS as c_int;

#[repr(C)]
struct Header {
    /// Entries following the header.
    capacity: usize,
}

/// `pubjson.max_tracked_slots`: written by PostgreSQL's GUC machinery
/// (postmaster context: fixed once the server runs).
static mut MAX_TRACKED_SLOTS: c_int = 0;

static TABLE: AtomicPtr<Header> = AtomicPtr::new(std::ptr::null_mut());
static LOCK: AtomicPtr<pg_sys::LWLock> = AtomicPtr::new(std::ptr::null_mut());
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// `_PG_init` while preloading: defines the setting and installs the hooks
/// that reserve and set up the table.
pub fn init() {
    // SAFETY: `_PG_init` runs once per process, in the postmaster while it
    // loads shared_preload_libraries (single-threaded); the setting's
    // variable is a static that lives as long as the process; the previous
    // hooks are saved before ours replace them and are called first.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        pg_sys::DefineCustomIntVariable(
            c"pubjson.max_tracked_slots".as_ptr(),
            c"Replication slots whose pubjson decoding statistics are kept in shared memory."
                .as_ptr(),
            c"Defaults to max_replication_slots. Entries of dropped slots are reused; a slot \
              decoded while every entry belongs to an existing slot is not tracked (a WARNING \
              says so once per session)."
                .as_ptr(),
            &raw mut MAX_TRACKED_SLOTS,
            pg_sys::max_replication_slots,
            0,
            MAX_SETTING,
            pg_sys::GucContext::PGC_POSTMASTER,
            0,
            None,
            None,
            None,
        );
        pg_sys::MarkGUCPrefixReserved(c"pubjson".as_ptr());

        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shmem);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup_shmem);
    }
}

fn capacity_setting() -> usize {
    // SAFETY: read after the GUC machinery set it; postmaster context, so
    // it never changes while the server runs.
    usize::try_from(unsafe { MAX_TRACKED_SLOTS }).unwrap_or(0)
}

/// Bytes of the header plus `capacity` entries (entries start at an offset
/// aligned for them).
fn table_size(capacity: usize) -> usize {
    entries_offset() + capacity * std::mem::size_of::<SlotEntry>()
}

fn entries_offset() -> usize {
    std::mem::size_of::<Header>().next_multiple_of(std::mem::align_of::<SlotEntry>())
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shmem() {
    // SAFETY: called by the postmaster once, after preloading; the previous
    // hook (if any) was saved by `init`.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev());
        }
        pg_sys::RequestAddinShmemSpace(table_size(capacity_setting()));
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn startup_shmem() {
    // SAFETY: called once shared memory exists (in the postmaster, and in
    // every backend under EXEC_BACKEND), holding AddinShmemInitLock as
    // PostgreSQL's own modules do (MainLWLockArray[21], the index pgrx's
    // shared memory uses on every supported version); the space and the
    // tranche were requested in `request_shmem`; zeroed memory is a valid
    // empty table.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| prev());
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let capacity = capacity_setting();
        let size = table_size(capacity);
        let mut found = false;
        let header =
            pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size, &mut found).cast::<Header>();
        if !found {
            std::ptr::write_bytes(header.cast::<u8>(), 0, size);
            (*header).capacity = capacity;
        }
        let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
        LOCK.store(lock, Ordering::Release);
        TABLE.store(header, Ordering::Release);
        pg_sys::LWLockRelease(init_lock);
    }
}

/// Whether the table exists: the postmaster preloaded pubjson (every
/// backend runs its copy of the library).
pub fn attached() -> bool {
    !TABLE.load(Ordering::Acquire).is_null()
}

/// Entries of the shared table (0 without it).
pub fn capacity() -> usize {
    let header = TABLE.load(Ordering::Acquire);
    if header.is_null() {
        return 0;
    }
    // SAFETY: set once at startup, never changed afterwards.
    unsafe { (*header).capacity }
}

/// Releases the table's LWLock when the access ends, also when it ends in
/// an ERROR unwinding through it (as pgrx's own LWLock guards do: once
/// PostgreSQL's error recovery has released every LWLock, interrupts are
/// no longer held off and there is nothing left to release).
struct Held(*mut pg_sys::LWLock);

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: the lock was acquired by `with_table` in this process.
        unsafe {
            if pg_sys::InterruptHoldoffCount > 0 {
                pg_sys::LWLockRelease(self.0);
            }
        }
    }
}

/// Runs `f` on the shared table's entries, holding its lock exclusively;
/// `None` when the server has no shared table (pubjson not preloaded).
pub fn with_table<R>(f: impl FnOnce(&mut [SlotEntry]) -> R) -> Option<R> {
    let header = TABLE.load(Ordering::Acquire);
    let lock = LOCK.load(Ordering::Acquire);
    if header.is_null() || lock.is_null() {
        return None;
    }
    // SAFETY: `header` points at the table set up in `startup_shmem`
    // (`capacity` entries after the header, in shared memory that lives as
    // long as the server); the exclusive LWLock makes this the only
    // reference to the entries until `Held` releases it.
    unsafe {
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let _held = Held(lock);
        let entries = header
            .cast::<u8>()
            .add(entries_offset())
            .cast::<SlotEntry>();
        Some(f(std::slice::from_raw_parts_mut(
            entries,
            (*header).capacity,
        )))
    }
}

/// Whether `slot` (name, database and output plugin) exists now.
pub fn slot_exists(slot: &SlotKey) -> bool {
    let mut name = [0 as c_char; NAME_LEN];
    for (dst, src) in name.iter_mut().zip(slot.name()) {
        *dst = *src as c_char;
    }
    // SAFETY: `name` is NUL-terminated (a SlotKey name is shorter than
    // NAME_LEN). SearchNamedReplicationSlot takes ReplicationSlotControlLock
    // itself and returns an element of the slot array, which lives as long
    // as the server. A slot's name, database and plugin do not change while
    // it exists; read while another backend creates or drops a slot of
    // this name they may not match, and the entry is then freed, which is
    // right for a slot being created (it starts from zero) or dropped.
    unsafe {
        let found = pg_sys::SearchNamedReplicationSlot(name.as_ptr(), true);
        if found.is_null() {
            return false;
        }
        // Copies, not references: another backend may write the slot.
        let database = std::ptr::read_volatile(&raw const (*found).data.database);
        let plugin = std::ptr::read_volatile(&raw const (*found).data.plugin);
        let plugin = plugin
            .data
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8);
        database.to_u32() == slot.database() && plugin.eq(slot.plugin().iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use pubjson_core::stats::table::{EntryState, SlotEntry, SlotKey};
    use pubjson_core::stats::Counters;

    #[test]
    fn zeroed_memory_is_a_free_table() {
        // SAFETY (test): SlotEntry is plain data whose all-zero bit pattern
        // is valid (integers, bools, an enum whose 0 is `Free`); the shared
        // table is initialised exactly this way.
        let entry: SlotEntry = unsafe { std::mem::zeroed() };
        assert_eq!(entry.state, EntryState::Free);
        assert_eq!(entry.slot, SlotKey::default());
        assert_eq!(entry.counters, Counters::default());
    }
}
