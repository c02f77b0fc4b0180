//! Streamed in-progress transactions and two-phase commit: the block
//! framing, aborts, commits and PREPARE/COMMIT PREPARED/ROLLBACK PREPARED
//! (objects described in `output/control.rs`).

use pgrx::pg_sys;

use crate::output::control::{self, TwoPhaseEvent};
use crate::output::wal2json::Wal2JsonFormat;
use crate::plugin::state::{finish_txn_stats, state, StreamBlock};
use crate::plugin::txn::{ensure_begun, flush, start_txn, timestamp_text, update_progress};

/// The top-level transaction of `txn` (itself when it is top-level).
///
/// # Safety
/// `txn` is valid.
unsafe fn top_level(txn: *mut pg_sys::ReorderBufferTXN) -> *mut pg_sys::ReorderBufferTXN {
    // SAFETY: toptxn is NULL or a valid top-level transaction.
    unsafe {
        if (*txn).toptxn.is_null() {
            txn
        } else {
            (*txn).toptxn
        }
    }
}

/// A block of an in-progress transaction starts.
///
/// # Safety
/// Valid pointers from the stream_start callback.
pub unsafe fn stream_start(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: plain field reads of a valid transaction.
    unsafe {
        let state = state(ctx);
        let xid = (*txn).xid.into_inner();
        state.txn.info.xid = xid;
        state.txn.info.origin = (*txn).origin_id;
        state.stream_block = Some(StreamBlock { xid, begun: false });
        if !state.opts.skip_empty_xacts {
            ensure_begun(ctx, state);
        }
    }
}

/// The block ends: format 2 writes `E`, format 1 closes the block's document.
///
/// # Safety
/// Valid pointers from the stream_stop callback.
pub unsafe fn stream_stop(ctx: *mut pg_sys::LogicalDecodingContext) {
    // SAFETY: writes through the context PostgreSQL passed in.
    unsafe {
        let state = state(ctx);
        let Some(block) = state.stream_block.take() else {
            return;
        };
        if !block.begun {
            return;
        }
        if state.opts.format_version == 1 {
            Wal2JsonFormat::new(&state.opts).v1_commit(&mut state.out);
        } else {
            control::stream_stop(&mut state.out, block.xid);
        }
        flush(ctx, state, true);
    }
}

/// A streamed transaction, or one of its subtransactions, aborted.
///
/// # Safety
/// Valid pointers from the stream_abort callback.
pub unsafe fn stream_abort(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    abort_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: plain field reads of valid transactions.
    unsafe {
        let state = state(ctx);
        let top = (*top_level(txn)).xid.into_inner();
        let xid = (*txn).xid.into_inner();
        let emitted = state.streamed_with_output.contains(&top);
        if xid == top {
            state.streamed_with_output.remove(&top);
        }
        update_progress(ctx, state, !emitted);
        if emitted || !state.opts.skip_empty_xacts {
            control::stream_abort(&mut state.out, top, xid, abort_lsn);
            flush(ctx, state, true);
        }
        state.publish_stats();
    }
}

/// A streamed transaction committed: everything streamed for it applies.
///
/// # Safety
/// Valid pointers from the stream_commit callback.
pub unsafe fn stream_commit(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: plain field reads of a valid transaction.
    unsafe {
        let state = state(ctx);
        let xid = (*txn).xid.into_inner();
        let emitted = state.streamed_with_output.remove(&xid);
        update_progress(ctx, state, !emitted);
        state.stats.streamed_txns += 1;
        // Streamed changes were counted block by block.
        state.txn.items_emitted = emitted as u64;
        if emitted || !state.opts.skip_empty_xacts {
            let timestamp = timestamp_text((*txn).xact_time.commit_time);
            control::stream_commit(&mut state.out, xid, commit_lsn, (*txn).end_lsn, &timestamp);
            flush(ctx, state, true);
        }
        finish_txn_stats(state, txn);
    }
}

/// The gid of a prepared transaction.
///
/// # Safety
/// `txn` is valid.
unsafe fn gid(txn: *mut pg_sys::ReorderBufferTXN) -> Vec<u8> {
    // SAFETY: gid is NULL or a NUL-terminated string owned by the transaction.
    unsafe {
        if (*txn).gid.is_null() {
            Vec::new()
        } else {
            std::ffi::CStr::from_ptr((*txn).gid).to_bytes().to_vec()
        }
    }
}

/// Writes a P/CP/RP object for `txn`.
///
/// # Safety
/// Called from a two-phase callback with valid pointers.
unsafe fn write_two_phase(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    event: TwoPhaseEvent,
    lsn: u64,
) {
    // SAFETY: plain field reads of a valid transaction; a normal write.
    unsafe {
        let state = state(ctx);
        let timestamp = timestamp_text((*txn).xact_time.commit_time);
        control::two_phase(
            &mut state.out,
            event,
            (*txn).xid.into_inner(),
            &gid(txn),
            lsn,
            (*txn).end_lsn,
            &timestamp,
        );
        flush(ctx, state, true);
    }
}

/// A transaction being decoded at PREPARE time starts. Prepared
/// transactions are never skipped as empty (as in pgoutput): after a restart
/// the plugin could not tell whether the COMMIT PREPARED it is about to send
/// belongs to a transaction the consumer has seen.
///
/// # Safety
/// Valid pointers from the begin_prepare callback.
pub unsafe fn begin_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        start_txn(state, txn);
        ensure_begun(ctx, state);
    }
}

/// PREPARE TRANSACTION: the transaction's changes end, then a `P` object.
///
/// # Safety
/// Valid pointers from the prepare callback.
pub unsafe fn prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        if state.opts.format_version == 1 {
            Wal2JsonFormat::new(&state.opts).v1_commit(&mut state.out);
            flush(ctx, state, true);
        }
        write_two_phase(
            ctx,
            txn,
            TwoPhaseEvent::Prepare { streamed: false },
            prepare_lsn,
        );
        // write_two_phase borrowed the state itself: borrow it anew.
        let state = crate::plugin::state::state(ctx);
        state.stats.prepared_txns += 1;
        finish_txn_stats(state, txn);
    }
}

/// PREPARE TRANSACTION of a transaction whose changes were streamed.
///
/// # Safety
/// Valid pointers from the stream_prepare callback.
pub unsafe fn stream_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        let emitted = state.streamed_with_output.remove(&(*txn).xid.into_inner());
        update_progress(ctx, state, false);
        write_two_phase(
            ctx,
            txn,
            TwoPhaseEvent::Prepare { streamed: true },
            prepare_lsn,
        );
        // write_two_phase borrowed the state itself: borrow it anew.
        let state = crate::plugin::state::state(ctx);
        state.stats.streamed_txns += 1;
        state.stats.prepared_txns += 1;
        // Streamed changes were counted block by block.
        state.txn.items_emitted = emitted as u64;
        finish_txn_stats(state, txn);
    }
}

/// COMMIT PREPARED.
///
/// # Safety
/// Valid pointers from the commit_prepared callback.
pub unsafe fn commit_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        update_progress(ctx, state(ctx), false);
        write_two_phase(ctx, txn, TwoPhaseEvent::CommitPrepared, commit_lsn);
    }
}

/// ROLLBACK PREPARED.
///
/// # Safety
/// Valid pointers from the rollback_prepared callback.
pub unsafe fn rollback_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        update_progress(ctx, state(ctx), false);
        write_two_phase(ctx, txn, TwoPhaseEvent::RollbackPrepared, (*txn).final_lsn);
    }
}
