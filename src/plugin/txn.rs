//! Writing output and the transaction bookkeeping around it: flushing the
//! buffer, progress updates, deferred BEGIN (and its streamed-block twin),
//! the per-change memory context.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::output::control;
use crate::output::wal2json::Wal2JsonFormat;
use crate::plugin::state::DecodingState;

/// Hands the buffered output to PostgreSQL as one write.
///
/// # Safety
/// Must be called from a decoding callback with its context.
pub unsafe fn flush(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    last: bool,
) {
    let bytes = state.output_text.prepare(&state.out);
    // SAFETY: the prepare/append/write sequence every output plugin uses;
    // ctx->out is a valid StringInfo between prepare and write.
    unsafe {
        pg_sys::OutputPluginPrepareWrite(ctx, last);
        append_to_string_info((*ctx).out, bytes);
        pg_sys::OutputPluginWrite(ctx, last);
    }
    state.stats.bytes_emitted += bytes.len() as u64;
    state.txn.bytes_emitted += bytes.len() as u64;
    state.out.clear();
}

/// appendBinaryStringInfo(), without a guarded FFI call when the buffer
/// (reused from write to write) already has room, which is nearly always.
///
/// # Safety
/// `info` must be a valid StringInfo.
unsafe fn append_to_string_info(info: pg_sys::StringInfo, bytes: &[u8]) {
    // SAFETY: a valid StringInfo has `maxlen` bytes at `data`, `len` of them
    // used plus the terminating NUL; enlargeStringInfo makes room for
    // `bytes.len()` more (or raises an ERROR past MaxAllocSize).
    unsafe {
        let free = ((*info).maxlen - (*info).len - 1) as usize;
        if bytes.len() > free {
            pg_sys::enlargeStringInfo(info, bytes.len() as i32);
        }
        let end = (*info).data.add((*info).len as usize);
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), end, bytes.len());
        (*info).len += bytes.len() as i32;
        *end.add(bytes.len()) = 0;
    }
}

/// Lets the walsender send keepalives during long runs of changes that
/// produce no output (PostgreSQL 15 leaves this to the plugin).
///
/// # Safety
/// Must be called from a decoding callback with its context.
pub unsafe fn update_progress(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    skipped_xact: bool,
) {
    #[cfg(feature = "pg15")]
    // SAFETY: OutputPluginUpdateProgress accepts any decoding context.
    unsafe {
        state.changes_since_progress += 1;
        if (*ctx).end_xact || state.changes_since_progress >= 100 {
            pg_sys::OutputPluginUpdateProgress(ctx, skipped_xact);
            state.changes_since_progress = 0;
        }
    }
    #[cfg(not(feature = "pg15"))]
    let _ = (ctx, state, skipped_xact);
}

/// Remembers the transaction's facts when its replay starts.
///
/// # Safety
/// `txn` must be valid.
pub unsafe fn start_txn(state: &mut DecodingState, txn: *mut pg_sys::ReorderBufferTXN) {
    // SAFETY: reading plain fields of a valid ReorderBufferTXN.
    unsafe {
        state.txn.info.xid = (*txn).xid.into_inner();
        state.txn.info.origin = (*txn).origin_id;
        state.txn.info.final_lsn = (*txn).final_lsn;
        state.txn.info.end_lsn = (*txn).end_lsn;
        state.txn.first_lsn = (*txn).first_lsn;
        state.txn.commit_time = (*txn).xact_time.commit_time;
    }
    state.txn.info.timestamp.clear();
    state.txn.timestamp_ready = false;
    state.txn.begun = false;
    state.txn.nr_changes = 0;
    state.txn.changes_seen = 0;
    state.txn.items_emitted = 0;
    state.txn.bytes_emitted = 0;
}

/// `timestamptz_to_str()`: ISO style in the session time zone, as wal2json prints it.
pub fn timestamp_text(timestamp: i64) -> Vec<u8> {
    // SAFETY: timestamptz_to_str returns a static buffer, copied at once.
    unsafe { CStr::from_ptr(pg_sys::timestamptz_to_str(timestamp)) }
        .to_bytes()
        .to_vec()
}

/// Renders the commit timestamp (session time zone, ISO style) once per transaction.
pub fn ensure_timestamp(state: &mut DecodingState) {
    if !state.opts.include_timestamp || state.txn.timestamp_ready {
        return;
    }
    state.txn.info.timestamp = timestamp_text(state.txn.commit_time);
    state.txn.timestamp_ready = true;
}

/// Writes the transaction's BEGIN output (or, inside a streamed block, the
/// block's `S` object) if it has not been written yet. With
/// skip-empty-xacts this runs at the first emitted change: deferred BEGIN.
///
/// # Safety
/// Must be called from a decoding callback with its context.
pub unsafe fn ensure_begun(ctx: *mut pg_sys::LogicalDecodingContext, state: &mut DecodingState) {
    if let Some(block) = state.stream_block.as_mut() {
        if block.begun {
            return;
        }
        block.begun = true;
        let xid = block.xid;
        // "first": the first block of this transaction the consumer sees.
        let first = state.streamed_with_output.insert(xid);
        state.txn.nr_changes = 0;
        control::stream_start_open(&mut state.out, xid, first);
        if state.opts.format_version == 1 {
            state.out.extend_from_slice(b",\"change\":[");
            if state.opts.write_in_chunks {
                // SAFETY: as for every write.
                unsafe { flush(ctx, state, true) };
            }
        } else {
            state.out.push(b'}');
            // SAFETY: as for every write.
            unsafe { flush(ctx, state, true) };
        }
        return;
    }
    if state.txn.begun {
        return;
    }
    state.txn.begun = true;
    ensure_timestamp(state);
    let format = Wal2JsonFormat::new(&state.opts);
    if state.opts.format_version == 1 {
        format.v1_begin(&mut state.out, &state.txn.info);
        if state.opts.write_in_chunks {
            // SAFETY: as for every write; the BEGIN chunk carries the
            // transaction's first LSN, as it would without deferral.
            unsafe { write_at(ctx, state, state.txn.first_lsn) };
        }
    } else if state.opts.include_transaction {
        format.v2_begin(&mut state.out, &state.txn.info);
        // SAFETY: as above.
        unsafe { write_at(ctx, state, state.txn.first_lsn) };
    }
}

/// Flushes with `ctx->write_location` temporarily set to `lsn`.
///
/// # Safety
/// Must be called from a decoding callback with its context.
pub unsafe fn write_at(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    lsn: u64,
) {
    // SAFETY: write_location is a plain field read by the writer callbacks.
    unsafe {
        let saved = (*ctx).write_location;
        (*ctx).write_location = lsn;
        flush(ctx, state, true);
        (*ctx).write_location = saved;
    }
}

/// Runs `f` in the per-change memory context and resets it afterwards.
///
/// # Safety
/// Must be called from a decoding callback.
pub unsafe fn in_change_memory<R>(
    state: &mut DecodingState,
    f: impl FnOnce(&mut DecodingState) -> R,
) -> R {
    let memory = state.change_memory;
    // SAFETY: switching to (and resetting) our own context; if `f` raises an
    // ERROR, PostgreSQL's error recovery restores CurrentMemoryContext.
    unsafe {
        let old = pg_sys::MemoryContextSwitchTo(memory);
        let result = f(state);
        pg_sys::MemoryContextSwitchTo(old);
        // What MemoryContextReset() itself checks first: a context with no
        // children and no palloc since its last reset has nothing to free
        // (saves a guarded FFI call for changes that allocate nothing).
        if !(*memory).isReset || !(*memory).firstchild.is_null() {
            pg_sys::MemoryContextReset(memory);
        }
        result
    }
}
