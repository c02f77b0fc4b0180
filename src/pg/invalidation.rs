//! Cache invalidation: PostgreSQL's relcache and syscache callbacks for the
//! relation cache (`relation.rs`) and the publications (`publication.rs`).
//!
//! The callbacks only queue invalidations; the caches apply them on their
//! next lookup, so a callback that fires in the middle of building an entry
//! can never see a half-borrowed cache. They cannot be unregistered and
//! PostgreSQL has a fixed number of slots for them: each set is registered
//! once per backend.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::pg_sys;
use pgrx::prelude::*;

#[derive(Default)]
struct PendingInvalidations {
    all: bool,
    relids: Vec<pg_sys::Oid>,
}

thread_local! {
    static PENDING: RefCell<PendingInvalidations> = RefCell::new(PendingInvalidations::default());
    static RELATION_CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Set whenever PENDING gets something: checking it is all a lookup costs
/// when nothing was invalidated (every change looks its relation up twice).
/// A plain static, not a thread-local: a shared library reaches its
/// thread-locals through a call to `__tls_get_addr`, and a backend has one
/// thread, so relaxed loads and stores are all the ordering it needs.
static ANY_PENDING: AtomicBool = AtomicBool::new(false);

#[pg_guard]
unsafe extern "C-unwind" fn relcache_invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    invalidate_relation(relid);
}

/// Queues the invalidation of one cached relation (InvalidOid: all).
pub fn invalidate_relation(relid: pg_sys::Oid) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if relid == pg_sys::InvalidOid {
            p.all = true;
        } else if !p.all {
            p.relids.push(relid);
        }
    });
    ANY_PENDING.store(true, Ordering::Relaxed);
}

#[pg_guard]
unsafe extern "C-unwind" fn syscache_invalidated(_arg: pg_sys::Datum, _cacheid: i32, _hash: u32) {
    // Types and schemas change rarely: start over.
    invalidate_all_relations();
}

/// Queues the invalidation of every cached relation.
pub fn invalidate_all_relations() {
    PENDING.with(|p| p.borrow_mut().all = true);
    ANY_PENDING.store(true, Ordering::Relaxed);
}

/// Registers the invalidation callbacks, once per backend (they cannot be
/// unregistered and PostgreSQL has a fixed number of slots for them).
pub fn register_relation_callbacks() {
    if RELATION_CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: plain registrations of functions with the signatures
    // PostgreSQL expects; they live as long as the library is loaded.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relcache_invalidated), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            Some(syscache_invalidated),
            pg_sys::Datum::from(0),
        );
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::NAMESPACEOID as i32,
            Some(syscache_invalidated),
            pg_sys::Datum::from(0),
        );
    }
}

thread_local! {
    static PUBLICATIONS_STALE: Cell<bool> = const { Cell::new(true) };
    static CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn publication_invalidated(
    _arg: pg_sys::Datum,
    _cacheid: i32,
    _hash: u32,
) {
    PUBLICATIONS_STALE.with(|s| s.set(true));
    invalidate_all_relations();
}

#[pg_guard]
unsafe extern "C-unwind" fn publication_map_invalidated(
    _arg: pg_sys::Datum,
    _cacheid: i32,
    _hash: u32,
) {
    // No way to tell which relation a hash value belongs to: drop them all.
    invalidate_all_relations();
}

/// PostgreSQL 18 tells publication changes that affect a relation's
/// published form (e.g. a renamed publication) through its own message.
#[cfg(feature = "pg18")]
#[pg_guard]
unsafe extern "C-unwind" fn relsync_invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    invalidate_relation(relid);
}

pub fn register_publication_callbacks() {
    if CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registrations of functions with the signature PostgreSQL expects.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PUBLICATIONOID as i32,
            Some(publication_invalidated),
            pg_sys::Datum::from(0),
        );
        for cache in [
            pg_sys::SysCacheIdentifier::PUBLICATIONRELMAP,
            pg_sys::SysCacheIdentifier::PUBLICATIONNAMESPACEMAP,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(publication_map_invalidated),
                pg_sys::Datum::from(0),
            );
        }
        #[cfg(feature = "pg18")]
        pg_sys::CacheRegisterRelSyncCallback(Some(relsync_invalidated), pg_sys::Datum::from(0));
    }
}

/// Takes the queued relation invalidations: `None` when nothing was
/// invalidated, `Some(None)` for all relations, else the relations.
#[inline]
pub fn take_pending() -> Option<Option<Vec<pg_sys::Oid>>> {
    if !ANY_PENDING.load(Ordering::Relaxed) {
        return None;
    }
    Some(take_queued())
}

/// The queue itself, emptied: `None` for all relations.
#[cold]
fn take_queued() -> Option<Vec<pg_sys::Oid>> {
    ANY_PENDING.store(false, Ordering::Relaxed);
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    (!pending.all).then_some(pending.relids)
}

/// Forgets invalidations queued for an earlier decoding session.
pub fn clear_pending() {
    PENDING.with(|p| *p.borrow_mut() = PendingInvalidations::default());
    ANY_PENDING.store(false, Ordering::Relaxed);
}

/// Marks the loaded publications stale (a new decoding session loads them anew).
pub fn mark_publications_stale() {
    PUBLICATIONS_STALE.with(|s| s.set(true));
}

/// Whether the publications must be loaded again; clears the mark.
pub fn take_publications_stale() -> bool {
    PUBLICATIONS_STALE.with(|s| s.replace(false))
}
