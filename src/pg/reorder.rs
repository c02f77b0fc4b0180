//! The decoding session's reorder buffer, read for the live view
//! (`stats/live.rs`): its top-level transactions with their
//! subtransactions, and where the WAL the decoder may read ends.

use std::marker::PhantomData;
use std::ptr::NonNull;

use pgrx::pg_sys;

use crate::pg::output::Writer;
use crate::pg::port::{dlist_elements, RBTXN_SPILLED, RBTXN_STREAMED};
use pubjson_core::stats::live::ReorderTxn;

/// A decoding context's reorder buffer, borrowed for one callback.
///
/// Construction invariant: made from a [`Writer`] borrowed for `'a`, so the
/// buffer is the running callback's, and it stays valid and unchanged for
/// `'a` (the decoder runs none of its code while a callback runs, and the
/// borrow keeps our own code from writing output meanwhile).
pub struct Reorder<'a> {
    rb: NonNull<pg_sys::ReorderBuffer>,
    _ctx: PhantomData<&'a pg_sys::ReorderBuffer>,
}

impl<'a> Reorder<'a> {
    /// The reorder buffer of the callback `writer` writes for.
    pub fn of(writer: &'a Writer<'_>) -> Self {
        let ctx = writer.context();
        Reorder {
            // SAFETY: the writer's context is the running callback's
            // (Writer's construction invariant), valid while it is
            // borrowed; StartupDecodingContext allocates its reorder buffer
            // (ReorderBufferAllocate, never NULL) before any callback runs,
            // and it is freed only after the last one.
            rb: unsafe { NonNull::new_unchecked(ctx.as_ref().reorder) },
            _ctx: PhantomData,
        }
    }

    fn rb(&self) -> &'a pg_sys::ReorderBuffer {
        // SAFETY: the running callback's reorder buffer, valid and unchanged
        // for 'a (construction invariant).
        unsafe { self.rb.as_ref() }
    }

    /// Bytes of changes held in memory (all transactions).
    pub fn size(&self) -> u64 {
        self.rb().size as u64
    }

    /// The top-level transactions, oldest first LSN first (the order of
    /// `toplevel_by_lsn`), appended to `out`.
    pub fn pending(&self, out: &mut Vec<ReorderTxn>) {
        let rb = self.rb();
        // SAFETY: toplevel_by_lsn is a valid dlist (dlist_init'ed by
        // ReorderBufferAllocate) linking ReorderBufferTXNs through their
        // `node` member; it is unchanged for 'a (construction invariant).
        let tops = unsafe {
            dlist_elements::<pg_sys::ReorderBufferTXN>(
                &rb.toplevel_by_lsn,
                std::mem::offset_of!(pg_sys::ReorderBufferTXN, node),
            )
        };
        for top in tops {
            // SAFETY: an element of toplevel_by_lsn is a live top-level
            // ReorderBufferTXN (removed from the list before it is freed),
            // unchanged for 'a.
            let top = unsafe { &*top };
            let mut txn = ReorderTxn {
                xid: top.xid.into_inner(),
                first_lsn: top.first_lsn,
                subxacts: top.nsubtxns,
                streamed: top.txn_flags & RBTXN_STREAMED != 0,
                ..ReorderTxn::default()
            };
            add_entries(&mut txn, top);
            // SAFETY: a top-level transaction's `subtxns` is a valid dlist
            // (dlist_init'ed with the transaction) linking its
            // subtransactions through their `node` member (a transaction
            // is in one list at a time); unchanged for 'a.
            let subs = unsafe {
                dlist_elements::<pg_sys::ReorderBufferTXN>(
                    &top.subtxns,
                    std::mem::offset_of!(pg_sys::ReorderBufferTXN, node),
                )
            };
            for sub in subs {
                // SAFETY: an element of `subtxns` is a live subtransaction
                // (ReorderBufferCleanupTXN unlinks it before freeing it),
                // unchanged for 'a.
                add_entries(&mut txn, unsafe { &*sub });
            }
            out.push(txn);
        }
    }
}

fn add_entries(txn: &mut ReorderTxn, part: &pg_sys::ReorderBufferTXN) {
    txn.changes += part.nentries;
    txn.changes_in_memory += part.nentries_mem;
    txn.bytes_in_memory += part.size as u64;
    txn.spilled |= part.txn_flags & RBTXN_SPILLED != 0;
}

/// The end of the WAL a decoder can read now: flushed WAL on a primary,
/// replayed WAL on a standby (what the walsender and the SQL functions
/// wait for).
pub fn readable_wal_end() -> u64 {
    // SAFETY: both read shared positions under their own spinlocks; NULL
    // asks for no timeline.
    unsafe {
        if pg_sys::RecoveryInProgress() {
            pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut())
        } else {
            pg_sys::GetFlushRecPtr(std::ptr::null_mut())
        }
    }
}
