//! The output plugin callbacks: thin `#[pg_guard]` shims that turn
//! PostgreSQL's raw pointers into safe values and call the decoding code
//! (`decode.rs`, `stream.rs`).
//!
//! `#[pg_guard]` turns a Rust panic into a PostgreSQL ERROR and lets a
//! PostgreSQL ERROR unwind through Rust frames safely, so no callback can
//! crash the backend.

use std::ffi::CStr;
use std::os::raw::c_char;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::output::wal2json::Wal2JsonFormat;
use crate::plugin::options::{OptionError, OptionErrorKind, Options, OriginFilter};
use crate::plugin::relation::register_invalidation_callbacks;
use crate::plugin::state::{finish_txn_stats, state, DecodingState};
use crate::plugin::txn::{ensure_begun, flush, start_txn, update_progress};
use crate::plugin::{decode, stream};
use crate::stats::{self, table::SlotKey};

/// Fills PostgreSQL's callback table.
///
/// # Safety
/// `cb` must point to the `OutputPluginCallbacks` PostgreSQL passes in.
pub unsafe fn register(cb: *mut pg_sys::OutputPluginCallbacks) {
    // SAFETY: PostgreSQL hands us a valid, zeroed callback table.
    let cb = unsafe { &mut *cb };
    cb.startup_cb = Some(startup);
    cb.shutdown_cb = Some(shutdown);
    cb.begin_cb = Some(begin_txn);
    cb.change_cb = Some(change);
    cb.truncate_cb = Some(truncate);
    cb.commit_cb = Some(commit_txn);
    cb.message_cb = Some(message);
    cb.filter_by_origin_cb = Some(filter_by_origin);
    cb.stream_start_cb = Some(stream_start);
    cb.stream_stop_cb = Some(stream_stop);
    cb.stream_change_cb = Some(stream_change);
    cb.stream_truncate_cb = Some(stream_truncate);
    cb.stream_message_cb = Some(stream_message);
    cb.stream_abort_cb = Some(stream_abort);
    cb.stream_commit_cb = Some(stream_commit);
    cb.stream_prepare_cb = Some(stream_prepare);
    cb.begin_prepare_cb = Some(begin_prepare);
    cb.prepare_cb = Some(prepare);
    cb.commit_prepared_cb = Some(commit_prepared);
    cb.rollback_prepared_cb = Some(rollback_prepared);
}

fn raise_option_error(err: OptionError) -> ! {
    let code = match err.kind {
        OptionErrorKind::InvalidParameterValue => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        OptionErrorKind::InvalidName => PgSqlErrorCode::ERRCODE_INVALID_NAME,
        OptionErrorKind::FeatureNotSupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        OptionErrorKind::SyntaxError => PgSqlErrorCode::ERRCODE_SYNTAX_ERROR,
    };
    let mut report = pgrx::pg_sys::panic::ErrorReport::new(code, err.message, "pubjson startup");
    if let Some(hint) = err.hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Reads `ctx->output_plugin_options` (a List of DefElem with String args).
///
/// # Safety
/// `list` is NIL or a valid List of DefElem nodes.
unsafe fn read_option_list(list: *mut pg_sys::List) -> Vec<(String, Option<Vec<u8>>)> {
    let mut options = Vec::new();
    if list.is_null() {
        return options;
    }
    // SAFETY: a valid List of DefElem; String nodes carry a C string.
    unsafe {
        let cells = std::slice::from_raw_parts((*list).elements, (*list).length as usize);
        for cell in cells {
            let elem = cell.ptr_value as *mut pg_sys::DefElem;
            let name = CStr::from_ptr((*elem).defname)
                .to_string_lossy()
                .into_owned();
            let arg = (*elem).arg;
            let value = if arg.is_null() {
                None
            } else if (*arg).type_ == pg_sys::NodeTag::T_String {
                let s = arg as *mut pg_sys::String;
                Some(CStr::from_ptr((*s).sval).to_bytes().to_vec())
            } else {
                ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("option \"{name}\" must have a string value")
                );
            };
            options.push((name, value));
        }
    }
    options
}

/// Drops the state when `ctx->context` is reset or deleted.
#[pg_guard]
unsafe extern "C-unwind" fn drop_state(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` is the Box pointer leaked in `startup`, dropped exactly once.
    drop(unsafe { Box::from_raw(arg as *mut DecodingState) });
}

#[pg_guard]
unsafe extern "C-unwind" fn startup(
    ctx: *mut pg_sys::LogicalDecodingContext,
    opt: *mut pg_sys::OutputPluginOptions,
    is_init: bool,
) {
    // SAFETY: PostgreSQL passes a valid context and options struct; the
    // memory contexts created here are children of ctx->context.
    unsafe {
        let raw = read_option_list((*ctx).output_plugin_options);
        let opts = Options::parse(raw.iter().map(|(n, v)| (n.as_str(), v.as_deref())))
            .unwrap_or_else(|e| raise_option_error(e));

        (*opt).output_type = pg_sys::OutputPluginOutputType::OUTPUT_PLUGIN_TEXTUAL_OUTPUT;

        if is_init {
            // Creating the slot: nothing is decoded for output (as pgoutput).
            (*ctx).streaming = false;
            (*ctx).twophase = false;
        } else {
            // The stream callbacks are registered, so PostgreSQL offers
            // streaming; use it only when asked for.
            (*ctx).streaming &= opts.streaming;
            if opts.two_phase {
                if !(*ctx).twophase {
                    ereport!(
                        ERROR,
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        "two-phase commit requested, but not supported by output plugin"
                    );
                }
                (*ctx).twophase_opt_given = true;
            }
        }

        let change_memory = pg_sys::AllocSetContextCreateInternal(
            (*ctx).context,
            c"pubjson change".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let cache_memory = pg_sys::AllocSetContextCreateInternal(
            (*ctx).context,
            c"pubjson relation cache".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        register_invalidation_callbacks();
        let state = Box::into_raw(Box::new(DecodingState::new(
            opts,
            change_memory,
            cache_memory,
        )));

        let callback = pg_sys::MemoryContextAlloc(
            (*ctx).context,
            std::mem::size_of::<pg_sys::MemoryContextCallback>(),
        ) as *mut pg_sys::MemoryContextCallback;
        callback.write(pg_sys::MemoryContextCallback {
            func: Some(drop_state),
            arg: state as *mut std::ffi::c_void,
            next: std::ptr::null_mut(),
        });
        pg_sys::MemoryContextRegisterResetCallback((*ctx).context, callback);
        if !(*ctx).slot.is_null() {
            let data = &(*(*ctx).slot).data;
            let name = CStr::from_ptr(data.name.data.as_ptr()).to_bytes();
            (*state).slot = SlotKey::new(
                name,
                data.database.to_u32(),
                CStr::from_ptr(data.plugin.data.as_ptr()).to_bytes(),
            );
            if is_init {
                // A new slot: statistics recorded under its name belong
                // to a dropped one.
                stats::slot_created(name);
            }
        }
        (*ctx).output_plugin_private = state as *mut std::ffi::c_void;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shutdown(ctx: *mut pg_sys::LogicalDecodingContext) {
    // The state itself is dropped with ctx->context (see drop_state).
    // SAFETY: startup has run whenever shutdown is called.
    unsafe { state(ctx).publish_stats() };
}

#[pg_guard]
unsafe extern "C-unwind" fn begin_txn(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        start_txn(state, txn);
        if !state.opts.skip_empty_xacts {
            ensure_begun(ctx, state);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn commit_txn(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        let emitted = state.txn.begun;
        update_progress(ctx, state, !emitted);
        if !emitted {
            // Deferred BEGIN never happened: the transaction leaves no trace.
            finish_txn_stats(state, txn);
            return;
        }
        let format = Wal2JsonFormat::new(&state.opts);
        if state.opts.format_version == 1 {
            format.v1_commit(&mut state.out);
            flush(ctx, state, true);
        } else if state.opts.include_transaction {
            format.v2_commit(&mut state.out, &state.txn.info, commit_lsn);
            flush(ctx, state, true);
        }
        // Do not keep a huge format-1 buffer around after a big transaction.
        if state.out.capacity() > 16 * 1024 * 1024 {
            state.out = Vec::with_capacity(8192);
        }
        finish_txn_stats(state, txn);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { decode::decode_change(ctx, relation, change, false) }
}

#[pg_guard]
unsafe extern "C-unwind" fn truncate(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    nrelations: i32,
    relations: *mut pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { decode::decode_truncate(ctx, nrelations, relations, change, false) }
}

#[pg_guard]
unsafe extern "C-unwind" fn message(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    lsn: pg_sys::XLogRecPtr,
    transactional: bool,
    prefix: *const c_char,
    content_size: pg_sys::Size,
    content: *const c_char,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe {
        decode::decode_message(
            ctx,
            txn,
            lsn,
            transactional,
            prefix,
            content_size,
            content,
            false,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_start(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::stream_start(ctx, txn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_stop(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::stream_stop(ctx) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { decode::decode_change(ctx, relation, change, true) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_truncate(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    nrelations: i32,
    relations: *mut pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { decode::decode_truncate(ctx, nrelations, relations, change, true) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_message(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    lsn: pg_sys::XLogRecPtr,
    transactional: bool,
    prefix: *const c_char,
    content_size: pg_sys::Size,
    content: *const c_char,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe {
        decode::decode_message(
            ctx,
            txn,
            lsn,
            transactional,
            prefix,
            content_size,
            content,
            true,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_abort(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    abort_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::stream_abort(ctx, txn, abort_lsn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_commit(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::stream_commit(ctx, txn, commit_lsn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::stream_prepare(ctx, txn, prepare_lsn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::begin_prepare(ctx, txn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::prepare(ctx, txn, prepare_lsn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn commit_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::commit_prepared(ctx, txn, commit_lsn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn rollback_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    _prepare_end_lsn: pg_sys::XLogRecPtr,
    _prepare_time: pg_sys::TimestampTz,
) {
    // SAFETY: pointers straight from PostgreSQL.
    unsafe { stream::rollback_prepared(ctx, txn) }
}

#[pg_guard]
unsafe extern "C-unwind" fn filter_by_origin(
    ctx: *mut pg_sys::LogicalDecodingContext,
    origin_id: pg_sys::RepOriginId,
) -> bool {
    // SAFETY: valid context from PostgreSQL.
    let state = unsafe { state(ctx) };
    let filtered = origin_id != 0
        && (state.opts.origin == OriginFilter::None
            || state.opts.filter_origins.contains(&(origin_id as u32)));
    if filtered {
        state.stats.filtered_by_origin += 1;
    }
    filtered
}
