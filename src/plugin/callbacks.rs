//! The output plugin callbacks: thin `#[pg_guard]` shims that turn
//! PostgreSQL's raw pointers into safe handles (`pg/handles.rs`) once, lend
//! the slot's state to the call, and call the safe decoding code
//! (`events.rs`, `ddl.rs`, `transactions.rs`).
//!
//! `#[pg_guard]` turns a Rust panic into a PostgreSQL ERROR and lets a
//! PostgreSQL ERROR unwind through Rust frames safely, so no callback can
//! crash the backend.

use std::ffi::CStr;
use std::os::raw::c_char;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgList, PgMemoryContexts};

use crate::pg::error::{self, Report};
use crate::pg::handles::{message_parts, Change, ChangeMemory, InCallback, Rel, Txn};
use crate::pg::output::Writer;
use crate::pg::port::alloc_set_context;
use crate::pg::relation::RelationCache;
use crate::pg::reorder::readable_wal_end;
use crate::plugin::state::DecodingState;
use crate::plugin::{events, sampling, transactions};
use crate::stats;
use pubjson_core::options::{Options, OriginFilter};
use pubjson_core::stats::table::SlotKey;

/// Entry point PostgreSQL looks up when a slot uses `pubjson`: fills its
/// callback table.
///
/// # Safety
/// Called by PostgreSQL with a valid, zeroed callback table.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn _PG_output_plugin_init(cb: *mut pg_sys::OutputPluginCallbacks) {
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
    cb.stream_change_cb = Some(change);
    cb.stream_truncate_cb = Some(truncate);
    cb.stream_message_cb = Some(message);
    cb.stream_abort_cb = Some(stream_abort);
    cb.stream_commit_cb = Some(stream_commit);
    cb.stream_prepare_cb = Some(stream_prepare);
    cb.begin_prepare_cb = Some(begin_prepare);
    cb.prepare_cb = Some(prepare);
    cb.commit_prepared_cb = Some(commit_prepared);
    cb.rollback_prepared_cb = Some(rollback_prepared);
}

/// Reads `ctx->output_plugin_options` (a List of DefElem with String args).
///
/// # Safety
/// `list` is NIL or a valid List of DefElem nodes.
unsafe fn read_option_list(list: *mut pg_sys::List) -> Vec<(String, Option<Vec<u8>>)> {
    // SAFETY: the caller promises NIL or a valid List of DefElem nodes,
    // which PgList only reads.
    let list = unsafe { PgList::<pg_sys::DefElem>::from_pg(list) };
    let mut options = Vec::new();
    for elem in list.iter_ptr() {
        // SAFETY: a DefElem's name is a C string; its arg is NULL or a node,
        // and a String node carries a C string.
        unsafe {
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
                Report::new(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("option \"{name}\" must have a string value"),
                )
                .error();
            };
            options.push((name, value));
        }
    }
    options
}

/// Lends the slot's state and the context's writer to `f`; neither outlives
/// the call.
///
/// # Safety
/// `ctx` is the running callback's decoding context, and its startup
/// callback has run.
unsafe fn with_state<R>(
    ctx: *mut pg_sys::LogicalDecodingContext,
    f: impl FnOnce(&mut DecodingState, &mut Writer<'_>) -> R,
) -> R {
    // SAFETY: startup stores a valid DecodingState before any other callback
    // can run; it lives until ctx->context is freed, after the last
    // callback. Callbacks do not nest, so this is its only borrow. The
    // state is a separate allocation from the context the writer uses.
    unsafe {
        let state = &mut *((*ctx).output_plugin_private as *mut DecodingState);
        state.emitter.recover_interrupted_item();
        let mut writer = Writer::new(ctx);
        f(state, &mut writer)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn startup(
    ctx: *mut pg_sys::LogicalDecodingContext,
    opt: *mut pg_sys::OutputPluginOptions,
    is_init: bool,
) {
    // SAFETY: PostgreSQL passes a valid context and options struct; the
    // memory contexts created here are children of ctx->context, and the
    // state is dropped when ctx->context is reset or deleted.
    unsafe {
        let raw = read_option_list((*ctx).output_plugin_options);
        let opts = Options::parse(raw.iter().map(|(n, v)| (n.as_str(), v.as_deref())))
            .unwrap_or_else(|e| Report::from(e).error());

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
                    Report::new(
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        "two-phase commit requested, but not supported by output plugin",
                    )
                    .error();
                }
                (*ctx).twophase_opt_given = true;
            }
        }

        let change_memory = ChangeMemory::new(alloc_set_context((*ctx).context, c"pubjson change"));
        let cache_memory = alloc_set_context((*ctx).context, c"pubjson relation cache");
        let mut format = pubjson_core::output::format_for(&opts);
        // Known now through the SQL functions; a walsender's startup has
        // no transaction: then at the first BEGIN (plugin/emitter.rs).
        if format.wants_database_name() {
            if let Some(name) = crate::pg::port::database_name() {
                format.database_name(&name);
            }
        }
        let relations = RelationCache::new(cache_memory, format.type_rendering());
        let mut slot = SlotKey::default();
        if !(*ctx).slot.is_null() {
            let data = &(*(*ctx).slot).data;
            let name = CStr::from_ptr(data.name.data.as_ptr()).to_bytes();
            slot = SlotKey::new(
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
        let live_view = !is_init && !slot.name().is_empty();
        let mut state = DecodingState::new(opts, format, change_memory, relations, slot);
        if live_view {
            // Sample the reorder buffer before the decoder waits for WAL
            // (see `page_read`).
            let routine = &mut (*(*ctx).reader).routine;
            state.page_read = routine.page_read;
            routine.page_read = Some(page_read);
        }
        let state = PgMemoryContexts::For((*ctx).context).leak_and_drop_on_delete(state);
        (*ctx).output_plugin_private = state as *mut std::ffi::c_void;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shutdown(ctx: *mut pg_sys::LogicalDecodingContext) {
    // The state itself is dropped with ctx->context (see startup).
    // SAFETY: startup has run whenever shutdown is called.
    unsafe {
        with_state(ctx, |state, _| {
            state.publish_stats();
            sampling::session_ended(state);
        })
    };
}

#[pg_guard]
unsafe extern "C-unwind" fn begin_txn(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: begin_cb's arguments: `ctx` is the running decoding context, whose startup callback
    // has run, and `txn` the transaction being replayed, kept until the callback returns. Every
    // callback below passes its own arguments on the same way, with what PostgreSQL guarantees
    // for them said at each.
    unsafe { with_state(ctx, |s, w| transactions::begin(s, w, Txn::new(txn))) }
}

#[pg_guard]
unsafe extern "C-unwind" fn commit_txn(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: commit_cb's arguments: `ctx` is the running decoding context, whose startup callback
    // has run, and `txn` the committed transaction; logical.c keeps both until the callback
    // returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::commit(s, w, Txn::new(txn), commit_lsn)
        })
    }
}

/// change_cb and stream_change_cb (the block being decoded tells them
/// apart, see [`events::decode_change`]).
#[pg_guard]
unsafe extern "C-unwind" fn change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: (stream_)change_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run; `relation` is the changed relation, which ReorderBufferProcessTXN opened
    // and keeps open, and `change` the change being replayed, freed only after the callback
    // returns. The handles and the lent state are used only inside this call: what Rel::new,
    // Change::new and with_state require.
    unsafe {
        let (relation, change) = (Rel::new(relation), Change::new(change));
        with_state(ctx, |s, w| events::decode_change(s, w, relation, change))
    }
}

/// truncate_cb and stream_truncate_cb.
#[pg_guard]
unsafe extern "C-unwind" fn truncate(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    nrelations: i32,
    relations: *mut pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: (stream_)truncate_cb's arguments: `ctx` is the running decoding context, whose
    // startup callback has run; `relations` is ReorderBufferProcessTXN's array of `nrelations`
    // relations it opened for the callback, and `change` the TRUNCATE being replayed, both kept
    // until the callback returns. The handles and the lent state are used only inside this call:
    // what Rel::slice, Change::new and with_state require.
    unsafe {
        let (relations, change) = (Rel::slice(relations, nrelations), Change::new(change));
        with_state(ctx, |s, w| {
            events::decode_truncate(s, w, &relations, change)
        })
    }
}

/// message_cb and stream_message_cb.
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
    // SAFETY: (stream_)message_cb's arguments: `ctx` is the running decoding context, whose
    // startup callback has run; `txn` is NULL for a non-transactional message, else the
    // message's transaction (Txn::new); `prefix` is NUL-terminated and `content` has
    // `content_size` bytes, both kept (in the WAL record or the queued change) until the callback
    // returns (message_parts). A transactional message's callback runs inside its transaction's
    // replay (InCallback::of_transactional_message). All are used only inside this call.
    unsafe {
        let txn = (!txn.is_null()).then(|| Txn::new(txn));
        // A transactional message is replayed inside its transaction.
        let catalog = txn
            .filter(|_| transactional)
            .map(|txn| InCallback::of_transactional_message(txn));
        let (prefix, content) = message_parts(prefix, content, content_size);
        with_state(ctx, |s, w| {
            events::decode_message(s, w, txn, catalog, lsn, transactional, prefix, content)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_start(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: stream_start_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the transaction whose block of changes starts, kept until the
    // callback returns.
    unsafe { with_state(ctx, |s, w| transactions::stream_start(s, w, Txn::new(txn))) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_stop(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: stream_stop_cb's context: `ctx` is the running decoding context, whose startup
    // callback has run; valid until the callback returns.
    unsafe { with_state(ctx, transactions::stream_stop) }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_abort(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    abort_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: stream_abort_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the (sub)transaction aborted, freed only after the callback
    // returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::stream_abort(s, w, Txn::new(txn), abort_lsn)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_commit(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: stream_commit_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the streamed transaction committed, freed only after the callback
    // returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::stream_commit(s, w, Txn::new(txn), commit_lsn)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn stream_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: stream_prepare_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the streamed transaction prepared, kept until the callback
    // returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::prepare(s, w, Txn::new(txn), prepare_lsn, true)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin_prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
) {
    // SAFETY: begin_prepare_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the transaction being prepared, kept until the callback returns.
    unsafe { with_state(ctx, |s, w| transactions::begin_prepare(s, w, Txn::new(txn))) }
}

#[pg_guard]
unsafe extern "C-unwind" fn prepare(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    prepare_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: prepare_cb's arguments: `ctx` is the running decoding context, whose startup callback
    // has run, and `txn` the prepared transaction, kept until the callback returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::prepare(s, w, Txn::new(txn), prepare_lsn, false)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn commit_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: commit_prepared_cb's arguments: `ctx` is the running decoding context, whose startup
    // callback has run, and `txn` the transaction committed (rebuilt by the reorder buffer for the
    // callback), kept until it returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::commit_prepared(s, w, Txn::new(txn), commit_lsn)
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn rollback_prepared(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    _prepare_end_lsn: pg_sys::XLogRecPtr,
    _prepare_time: pg_sys::TimestampTz,
) {
    // SAFETY: rollback_prepared_cb's arguments: `ctx` is the running decoding context, whose
    // startup callback has run, and `txn` the transaction rolled back, kept until the callback
    // returns.
    unsafe {
        with_state(ctx, |s, w| {
            transactions::rollback_prepared(s, w, Txn::new(txn))
        })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn filter_by_origin(
    ctx: *mut pg_sys::LogicalDecodingContext,
    origin_id: pg_sys::RepOriginId,
) -> bool {
    // SAFETY: filter_by_origin_cb's context: `ctx` is the running decoding context, whose startup
    // callback has run (decode.c calls it with the slot's decoding context while it reads WAL, no
    // other callback running).
    unsafe {
        with_state(ctx, |state, writer| {
            let filtered = origin_filtered(state, origin_id);
            if !filtered {
                // Called for every decoded change before it is queued: the
                // live view's regular look at the reorder buffer.
                sampling::change_decoded(state, writer);
            }
            filtered
        })
    }
}

/// The WAL reader's page callback, in front of PostgreSQL's own (saved in
/// `DecodingState::page_read`): when the decoder asks for WAL beyond what
/// exists it is about to wait, so the live view gets its last sample first.
#[pg_guard]
unsafe extern "C-unwind" fn page_read(
    reader: *mut pg_sys::XLogReaderState,
    target_page: pg_sys::XLogRecPtr,
    req_len: std::ffi::c_int,
    target_rec: pg_sys::XLogRecPtr,
    buf: *mut c_char,
) -> std::ffi::c_int {
    // SAFETY: StartupDecodingContext allocates the reader with the decoding
    // context as its private data, and startup installed this callback
    // after storing the state; no output callback is running (WAL is read
    // between them), so lending the state is its only borrow.
    let original = unsafe {
        let ctx = (*reader).private_data as *mut pg_sys::LogicalDecodingContext;
        with_state(ctx, |state, writer| {
            let wanted_end = target_page.saturating_add(u64::try_from(req_len).unwrap_or(0));
            if wanted_end > readable_wal_end() {
                sampling::caught_up(state, writer);
            }
            state.page_read
        })
    };
    let Some(original) = original else {
        // Startup installs this callback only after saving PostgreSQL's.
        error::internal("pubjson: the WAL reader's page callback is missing");
    };
    // SAFETY: PostgreSQL's own callback with the arguments it was given;
    // the boundary turns its ERRORs into Rust unwinding.
    unsafe {
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            original(reader, target_page, req_len, target_rec, buf)
        })
    }
}

/// Whether changes from `origin_id` are left out (`origin` and `filter-origins`).
fn origin_filtered(state: &mut DecodingState, origin_id: u16) -> bool {
    let filtered = origin_id != 0
        && (state.opts.origin == OriginFilter::None
            || state.opts.filter_origins.contains(&(origin_id as u32)));
    if filtered {
        state.count_filtered_by_origin();
    }
    filtered
}
