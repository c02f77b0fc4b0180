//! The output plugin callbacks: thin `#[pg_guard]` shims that turn
//! PostgreSQL's raw pointers into safe values and call the formats.
//!
//! `#[pg_guard]` turns a Rust panic into a PostgreSQL ERROR and lets a
//! PostgreSQL ERROR unwind through Rust frames safely, so no callback can
//! crash the backend.

use std::ffi::CStr;
use std::os::raw::c_char;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::output::wal2json::{ChangeKind, EncodeError, TupleValues, Wal2JsonFormat};
use crate::plugin::options::{OptionError, OptionErrorKind, Options, OriginFilter};
use crate::plugin::publication::{row_filter_matches, FILTER_DELETE, FILTER_INSERT, FILTER_UPDATE};
use crate::plugin::relation::{register_invalidation_callbacks, RelationEntry};
use crate::plugin::row_filter::{filter_verdict, FilterVerdict};
use crate::plugin::state::{DecodingState, V1_FLUSH_BYTES};
use crate::plugin::tuple::is_external_ondisk;

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
}

/// The state `startup` stored in the context.
///
/// # Safety
/// `ctx` must be a decoding context whose startup callback has run.
unsafe fn state<'a>(ctx: *mut pg_sys::LogicalDecodingContext) -> &'a mut DecodingState {
    // SAFETY: startup stores a valid DecodingState pointer before any other
    // callback can run, and it lives until ctx->context is freed.
    unsafe { &mut *((*ctx).output_plugin_private as *mut DecodingState) }
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

fn raise_encode_error(err: EncodeError) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
        err.to_string()
    );
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
    _is_init: bool,
) {
    // SAFETY: PostgreSQL passes a valid context and options struct; the
    // memory contexts created here are children of ctx->context.
    unsafe {
        let raw = read_option_list((*ctx).output_plugin_options);
        let opts = Options::parse(raw.iter().map(|(n, v)| (n.as_str(), v.as_deref())))
            .unwrap_or_else(|e| raise_option_error(e));

        (*opt).output_type = pg_sys::OutputPluginOutputType::OUTPUT_PLUGIN_TEXTUAL_OUTPUT;

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
        (*ctx).output_plugin_private = state as *mut std::ffi::c_void;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shutdown(_ctx: *mut pg_sys::LogicalDecodingContext) {
    // The state is dropped with ctx->context (see drop_state).
}

/// Hands the buffered output to PostgreSQL as one write.
///
/// # Safety
/// Must be called from a decoding callback with its context.
unsafe fn flush(ctx: *mut pg_sys::LogicalDecodingContext, state: &mut DecodingState, last: bool) {
    // SAFETY: the prepare/append/write sequence every output plugin uses;
    // ctx->out is a valid StringInfo between prepare and write.
    unsafe {
        pg_sys::OutputPluginPrepareWrite(ctx, last);
        pg_sys::appendBinaryStringInfo(
            (*ctx).out,
            state.out.as_ptr() as *const c_char,
            state.out.len() as i32,
        );
        pg_sys::OutputPluginWrite(ctx, last);
    }
    state.out.clear();
}

/// Lets the walsender send keepalives during long runs of changes that
/// produce no output (PostgreSQL 15 leaves this to the plugin).
///
/// # Safety
/// Must be called from a decoding callback with its context.
unsafe fn update_progress(
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
unsafe fn start_txn(state: &mut DecodingState, txn: *mut pg_sys::ReorderBufferTXN) {
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
}

/// Renders the commit timestamp (session time zone, ISO style) once per transaction.
fn ensure_timestamp(state: &mut DecodingState) {
    if !state.opts.include_timestamp || state.txn.timestamp_ready {
        return;
    }
    // SAFETY: timestamptz_to_str returns a static buffer, copied at once.
    let text = unsafe { CStr::from_ptr(pg_sys::timestamptz_to_str(state.txn.commit_time)) };
    state.txn.info.timestamp = text.to_bytes().to_vec();
    state.txn.timestamp_ready = true;
}

/// Writes the transaction's BEGIN output if it has not been written yet.
///
/// # Safety
/// Must be called from a decoding callback with its context.
unsafe fn ensure_begun(ctx: *mut pg_sys::LogicalDecodingContext, state: &mut DecodingState) {
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
unsafe fn write_at(ctx: *mut pg_sys::LogicalDecodingContext, state: &mut DecodingState, lsn: u64) {
    // SAFETY: write_location is a plain field read by the writer callbacks.
    unsafe {
        let saved = (*ctx).write_location;
        (*ctx).write_location = lsn;
        flush(ctx, state, true);
        (*ctx).write_location = saved;
    }
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
    _txn: *mut pg_sys::ReorderBufferTXN,
    commit_lsn: pg_sys::XLogRecPtr,
) {
    // SAFETY: valid pointers from PostgreSQL.
    unsafe {
        let state = state(ctx);
        let emitted = state.txn.begun;
        update_progress(ctx, state, !emitted);
        if !emitted {
            // Deferred BEGIN never happened: the transaction leaves no trace.
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
    }
}

/// Runs `f` in the per-change memory context and resets it afterwards.
///
/// # Safety
/// Must be called from a decoding callback.
unsafe fn in_change_memory<R>(
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
        pg_sys::MemoryContextReset(memory);
        result
    }
}

/// The HeapTuple inside a change's tuple buffer (NULL when absent).
///
/// # Safety
/// `buf` is NULL or a valid ReorderBufferTupleBuf.
#[cfg(any(feature = "pg15", feature = "pg16"))]
unsafe fn change_tuple(buf: *mut pg_sys::ReorderBufferTupleBuf) -> pg_sys::HeapTuple {
    if buf.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: non-NULL buffer; its `tuple` field is the HeapTupleData.
        unsafe { &mut (*buf).tuple }
    }
}

#[cfg(not(any(feature = "pg15", feature = "pg16")))]
unsafe fn change_tuple(tuple: pg_sys::HeapTuple) -> pg_sys::HeapTuple {
    tuple
}

/// Where the rows of a change come from.
#[derive(Clone, Copy)]
enum Row {
    Absent,
    /// The decoded tuple itself (wal2json mode).
    Heap(pg_sys::HeapTuple),
    /// A slot, possibly converted to an ancestor's layout (publication mode).
    Slot(*mut pg_sys::TupleTableSlot),
}

impl Row {
    fn is_present(self) -> bool {
        !matches!(self, Row::Absent)
    }
}

fn change_kind(action: pg_sys::ReorderBufferChangeType::Type) -> Option<ChangeKind> {
    match action {
        pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INSERT => Some(ChangeKind::Insert),
        pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_UPDATE => Some(ChangeKind::Update),
        pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_DELETE => Some(ChangeKind::Delete),
        _ => None,
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: valid pointers from PostgreSQL for the duration of the call.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        let Some(kind) = change_kind((*change).action) else {
            return;
        };
        let actions = state.opts.actions;
        let wanted = match kind {
            ChangeKind::Insert => actions.insert,
            ChangeKind::Update => actions.update,
            ChangeKind::Delete => actions.delete,
        };
        if !wanted {
            return;
        }
        let lsn = (*change).lsn;
        let new_tuple = change_tuple((*change).data.tp.newtuple);
        let old_tuple = change_tuple((*change).data.tp.oldtuple);
        state.relations.collect_garbage();

        in_change_memory(state, |state| {
            if state.publications.is_some() {
                publish_change(ctx, state, relation, kind, lsn, new_tuple, old_tuple);
                return;
            }
            let entry = state.relations.get(relation, &state.opts, None);
            if !entry.wanted {
                return;
            }
            let row = |t: pg_sys::HeapTuple| {
                if t.is_null() {
                    Row::Absent
                } else {
                    Row::Heap(t)
                }
            };
            emit_change(
                ctx,
                state,
                lsn,
                kind,
                None,
                &entry,
                relation,
                None,
                row(new_tuple),
                row(old_tuple),
            );
        });
    }
}

/// Applies the publications to a change, as pgoutput_change() does: actions,
/// partition root, row filter (with the UPDATE transformation) and column list.
///
/// # Safety
/// Called from the change callback, inside the per-change memory context.
unsafe fn publish_change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    relation: pg_sys::Relation,
    kind: ChangeKind,
    lsn: u64,
    new_tuple: pg_sys::HeapTuple,
    old_tuple: pg_sys::HeapTuple,
) {
    // SAFETY: slots, relations and executor state come from the relation's
    // publication entry and are used as pgoutput uses them; every temporary
    // slot and the ancestor relation are released before returning.
    unsafe {
        let entry = state
            .relations
            .get(relation, &state.opts, state.publications.as_mut());
        let Some(info) = entry.publish.as_ref() else {
            return;
        };
        let (published, filter_index) = match kind {
            ChangeKind::Insert => (info.actions.insert, FILTER_INSERT),
            ChangeKind::Update => (info.actions.update, FILTER_UPDATE),
            ChangeKind::Delete => (info.actions.delete, FILTER_DELETE),
        };
        // pgoutput sends no DELETE without an old tuple (REPLICA IDENTITY NOTHING).
        if !published || (kind == ChangeKind::Delete && old_tuple.is_null()) {
            return;
        }
        let mut old_slot = std::ptr::null_mut();
        let mut new_slot = std::ptr::null_mut();
        if !old_tuple.is_null() {
            pg_sys::ExecStoreHeapTuple(old_tuple, info.old_slot, false);
            old_slot = info.old_slot;
        }
        if !new_tuple.is_null() {
            pg_sys::ExecStoreHeapTuple(new_tuple, info.new_slot, false);
            new_slot = info.new_slot;
        }

        let via_ancestor = info.publish_as_relid != (*relation).rd_id;
        let target_rel = if via_ancestor {
            pg_sys::RelationIdGetRelation(info.publish_as_relid)
        } else {
            relation
        };
        let mut temporary_slots = Vec::new();
        if !info.attrmap.is_null() {
            for slot in [&mut old_slot, &mut new_slot] {
                if !slot.is_null() {
                    let converted =
                        pg_sys::MakeTupleTableSlot((*target_rel).rd_att, &pg_sys::TTSOpsVirtual);
                    *slot = pg_sys::execute_attr_map_slot(info.attrmap, *slot, converted);
                    temporary_slots.push(converted);
                }
            }
        }

        let verdict = if info.row_filters[filter_index].is_null() {
            FilterVerdict::Emit {
                kind,
                transformed: false,
            }
        } else {
            let mut filtered_new = new_slot;
            if kind == ChangeKind::Update && !old_slot.is_null() && !new_slot.is_null() {
                if let Some(merged) = with_old_toast_values(target_rel, old_slot, new_slot) {
                    temporary_slots.push(merged);
                    filtered_new = merged;
                }
            }
            let old_match =
                (!old_slot.is_null()).then(|| row_filter_matches(info, filter_index, old_slot));
            let new_match = (!filtered_new.is_null())
                .then(|| row_filter_matches(info, filter_index, filtered_new));
            let verdict = filter_verdict(kind, old_match, new_match);
            if let FilterVerdict::Emit {
                kind: ChangeKind::Insert,
                transformed: true,
            } = verdict
            {
                // An UPDATE turned INSERT carries the row with its TOAST values.
                new_slot = filtered_new;
            }
            verdict
        };

        if let FilterVerdict::Emit {
            kind: emitted,
            transformed,
        } = verdict
        {
            let target = if via_ancestor {
                state
                    .relations
                    .get(target_rel, &state.opts, state.publications.as_mut())
            } else {
                std::rc::Rc::clone(&entry)
            };
            if target.wanted {
                let slot_row = |s: *mut pg_sys::TupleTableSlot| {
                    if s.is_null() {
                        Row::Absent
                    } else {
                        Row::Slot(s)
                    }
                };
                let new_row = if emitted == ChangeKind::Delete {
                    Row::Absent
                } else {
                    slot_row(new_slot)
                };
                let old_row = if emitted == ChangeKind::Insert {
                    Row::Absent
                } else {
                    slot_row(old_slot)
                };
                emit_change(
                    ctx,
                    state,
                    lsn,
                    emitted,
                    transformed.then_some(kind),
                    &target,
                    target_rel,
                    Some(&info.column_mask),
                    new_row,
                    old_row,
                );
            }
        }

        for slot in temporary_slots {
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        if via_ancestor {
            pg_sys::RelationClose(target_rel);
        }
    }
}

/// pgoutput's handling of unchanged TOAST values before an UPDATE's new row
/// is filtered: a replica identity column only logged in the old row is
/// copied into a virtual copy of the new row. `None` when nothing to copy.
///
/// # Safety
/// Both slots hold tuples with `rel`'s layout.
unsafe fn with_old_toast_values(
    rel: pg_sys::Relation,
    old_slot: *mut pg_sys::TupleTableSlot,
    new_slot: *mut pg_sys::TupleTableSlot,
) -> Option<*mut pg_sys::TupleTableSlot> {
    // SAFETY: both slots are fully deformed first; the virtual slot copies
    // the value arrays of the relation's descriptor.
    unsafe {
        pg_sys::slot_getallattrs(new_slot);
        pg_sys::slot_getallattrs(old_slot);
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let attrs = (*desc).attrs.as_slice(natts);
        let new_values = std::slice::from_raw_parts((*new_slot).tts_values, natts);
        let new_nulls = std::slice::from_raw_parts((*new_slot).tts_isnull, natts);
        let old_values = std::slice::from_raw_parts((*old_slot).tts_values, natts);
        let old_nulls = std::slice::from_raw_parts((*old_slot).tts_isnull, natts);
        let mut merged: *mut pg_sys::TupleTableSlot = std::ptr::null_mut();
        for i in 0..natts {
            if new_nulls[i] || old_nulls[i] || attrs[i].attlen != -1 {
                continue;
            }
            if is_external_ondisk(new_values[i]) && !is_external_ondisk(old_values[i]) {
                if merged.is_null() {
                    merged = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
                    pg_sys::ExecClearTuple(merged);
                    std::ptr::copy_nonoverlapping(new_values.as_ptr(), (*merged).tts_values, natts);
                    std::ptr::copy_nonoverlapping(new_nulls.as_ptr(), (*merged).tts_isnull, natts);
                }
                *(*merged).tts_values.add(i) = old_values[i];
                *(*merged).tts_isnull.add(i) = false;
            }
        }
        if merged.is_null() {
            return None;
        }
        pg_sys::ExecStoreVirtualTuple(merged);
        Some(merged)
    }
}

/// Writes one INSERT/UPDATE/DELETE in the active format, unless wal2json
/// would skip it (missing identity), in which case its WARNING is raised.
///
/// # Safety
/// Called from the change callback; `rel` is the relation `entry` describes
/// and the rows have its layout.
#[allow(clippy::too_many_arguments)]
unsafe fn emit_change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    lsn: u64,
    kind: ChangeKind,
    transformed_from: Option<ChangeKind>,
    entry: &RelationEntry,
    rel: pg_sys::Relation,
    column_mask: Option<&[bool]>,
    new: Row,
    old: Row,
) {
    let meta = &entry.meta;
    let format = Wal2JsonFormat::new(&state.opts);
    let skip = if state.opts.format_version == 1 {
        format.v1_skip_reason(kind, meta, new.is_present(), old.is_present())
    } else {
        format.v2_skip_reason(kind, meta, new.is_present(), old.is_present())
    };
    if let Some(warning) = skip {
        warning!("{}", warning);
        return;
    }
    // SAFETY: the rows are valid tuples/slots of `rel` (see the contract).
    unsafe {
        ensure_begun(ctx, state);
        ensure_timestamp(state);
        let mut new_values = match new {
            Row::Absent => None,
            Row::Heap(t) => Some(state.new_tuple.deform(rel, t, entry)),
            Row::Slot(s) => Some(state.new_tuple.load_slot(s, entry, column_mask)),
        };
        let mut old_values = match old {
            Row::Absent => None,
            Row::Heap(t) => Some(state.old_tuple.deform(rel, t, entry)),
            Row::Slot(s) => Some(state.old_tuple.load_slot(s, entry, column_mask)),
        };
        let new_dyn = new_values.as_mut().map(|t| t as &mut dyn TupleValues);
        let old_dyn = old_values.as_mut().map(|t| t as &mut dyn TupleValues);
        let format = Wal2JsonFormat::new(&state.opts);
        if state.opts.format_version == 1 {
            state.txn.nr_changes += 1;
            format
                .v1_change(
                    &mut state.out,
                    state.txn.nr_changes,
                    kind,
                    transformed_from,
                    meta,
                    new_dyn,
                    old_dyn,
                )
                .unwrap_or_else(|e| raise_encode_error(e));
            if state.opts.write_in_chunks || state.out.len() >= V1_FLUSH_BYTES {
                let last = state.opts.write_in_chunks;
                flush(ctx, state, last);
            }
        } else {
            let warning = format
                .v2_change(
                    &mut state.out,
                    &state.txn.info,
                    lsn,
                    kind,
                    transformed_from,
                    meta,
                    new_dyn,
                    old_dyn,
                )
                .unwrap_or_else(|e| raise_encode_error(e));
            flush(ctx, state, true);
            if let Some(w) = warning {
                warning!("{}", w);
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn truncate(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    nrelations: i32,
    relations: *mut pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    // SAFETY: valid pointers from PostgreSQL; `relations` has `nrelations` entries.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        // wal2json's format 1 has no truncate element.
        if !state.opts.actions.truncate || state.opts.format_version == 1 {
            return;
        }
        let lsn = (*change).lsn;
        let relations = std::slice::from_raw_parts(relations, nrelations as usize);
        state.relations.collect_garbage();
        in_change_memory(state, |state| {
            for &relation in relations {
                let entry = state
                    .relations
                    .get(relation, &state.opts, state.publications.as_mut());
                if state.publications.is_some() {
                    // pgoutput: publications must publish truncate, and a
                    // partition published via its root is not sent itself.
                    let Some(info) = entry.publish.as_ref() else {
                        continue;
                    };
                    let via_root = (*(*relation).rd_rel).relispartition
                        && info.publish_as_relid != (*relation).rd_id;
                    if !info.actions.truncate || via_root {
                        continue;
                    }
                }
                if !entry.wanted {
                    continue;
                }
                ensure_begun(ctx, state);
                ensure_timestamp(state);
                let format = Wal2JsonFormat::new(&state.opts);
                format.v2_truncate(&mut state.out, &state.txn.info, lsn, &entry.meta);
                flush(ctx, state, true);
            }
        });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn message(
    ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    lsn: pg_sys::XLogRecPtr,
    transactional: bool,
    prefix: *const c_char,
    content_size: pg_sys::Size,
    content: *const c_char,
) {
    // SAFETY: valid pointers from PostgreSQL; `content` has `content_size` bytes.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        let prefix = CStr::from_ptr(prefix).to_bytes();
        if !state.opts.messages_enabled() || !state.opts.message_prefix_wanted(prefix) {
            return;
        }
        let content: &[u8] = if content_size == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(content as *const u8, content_size)
        };
        if transactional {
            ensure_begun(ctx, state);
            ensure_timestamp(state);
        }
        let format = Wal2JsonFormat::new(&state.opts);
        if state.opts.format_version == 1 {
            if transactional {
                state.txn.nr_changes += 1;
            }
            format.v1_message(
                &mut state.out,
                state.txn.nr_changes,
                transactional,
                prefix,
                content,
            );
            if state.opts.write_in_chunks || !transactional {
                flush(ctx, state, true);
            }
        } else {
            let txn_info = transactional.then_some(&state.txn.info);
            format.v2_message(&mut state.out, txn_info, lsn, prefix, content);
            flush(ctx, state, true);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn filter_by_origin(
    ctx: *mut pg_sys::LogicalDecodingContext,
    origin_id: pg_sys::RepOriginId,
) -> bool {
    // SAFETY: valid context from PostgreSQL.
    let state = unsafe { state(ctx) };
    origin_id != 0
        && (state.opts.origin == OriginFilter::None
            || state.opts.filter_origins.contains(&(origin_id as u32)))
}
