//! Decoding of changes, truncates and messages: the publication rules (when
//! `publication_names` is given), then the wal2json formats. Shared by the
//! committed-transaction and streamed-block callbacks.

use std::ffi::CStr;
use std::os::raw::c_char;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::output::wal2json::{ChangeHeader, ChangeKind, EncodeError, TupleValues, Wal2JsonFormat};
use crate::plugin::publication::{row_filter_matches, FILTER_DELETE, FILTER_INSERT, FILTER_UPDATE};
use crate::plugin::relation::RelationEntry;
use crate::plugin::row_filter::{filter_verdict, FilterVerdict};
use crate::plugin::state::{state, DecodingState, V1_FLUSH_BYTES};
use crate::plugin::tuple::{is_external_ondisk, tuple_desc_attrs};
use crate::plugin::txn::{
    ensure_begun, ensure_timestamp, flush, in_change_memory, update_progress,
};

fn raise_encode_error(err: EncodeError) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
        err.to_string()
    );
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
    /// A decoded tuple, `Absent` when NULL.
    fn heap(tuple: pg_sys::HeapTuple) -> Row {
        if tuple.is_null() {
            Row::Absent
        } else {
            Row::Heap(tuple)
        }
    }

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

/// An INSERT/UPDATE/DELETE, committed (`streamed` false) or in a streamed block.
///
/// # Safety
/// Valid pointers from a change or stream_change callback.
pub unsafe fn decode_change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
    streamed: bool,
) {
    // SAFETY: valid pointers from PostgreSQL for the duration of the call.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        let Some(kind) = change_kind((*change).action) else {
            return;
        };
        state.stats.changes_seen += 1;
        state.txn.changes_seen += 1;
        let reorder_size = (*(*ctx).reorder).size as u64;
        if reorder_size > state.stats.peak_reorder_buffer_bytes {
            state.stats.peak_reorder_buffer_bytes = reorder_size;
        }
        let actions = state.opts.actions;
        let wanted = match kind {
            ChangeKind::Insert => actions.insert,
            ChangeKind::Update => actions.update,
            ChangeKind::Delete => actions.delete,
        };
        if !wanted {
            state.stats.filtered_by_action += 1;
            return;
        }
        let lsn = (*change).lsn;
        // In a streamed block every change names its own (sub)transaction.
        let stream_xid = streamed.then(|| (*(*change).txn).xid.into_inner());
        let new_tuple = change_tuple((*change).data.tp.newtuple);
        let old_tuple = change_tuple((*change).data.tp.oldtuple);
        state.relations.collect_garbage();

        in_change_memory(state, |state| {
            if state.publications.is_some() {
                publish_change(
                    ctx, state, relation, kind, stream_xid, lsn, new_tuple, old_tuple,
                );
                return;
            }
            let entry = state.relations.get(relation, &state.opts, None);
            emit_decoded(
                ctx, state, lsn, kind, stream_xid, &entry, relation, None, new_tuple, old_tuple,
            );
        });
    }
}

/// Emits a change as decoded (wal2json mode, or a table its publications
/// publish as itself without a row filter), unless wal2json's table
/// options (`add-tables`, `filter-tables`) leave the relation out.
///
/// # Safety
/// `relation` is the change's open relation; the tuples are its own.
#[allow(clippy::too_many_arguments)]
unsafe fn emit_decoded(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    lsn: u64,
    kind: ChangeKind,
    stream_xid: Option<u32>,
    entry: &RelationEntry,
    relation: pg_sys::Relation,
    column_mask: Option<&[bool]>,
    new_tuple: pg_sys::HeapTuple,
    old_tuple: pg_sys::HeapTuple,
) {
    if !entry.wanted {
        state.stats.filtered_by_table += 1;
        return;
    }
    let header = ChangeHeader {
        kind,
        transformed_from: None,
        stream_xid,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        emit_change(
            ctx,
            state,
            lsn,
            header,
            entry,
            relation,
            column_mask,
            Row::heap(new_tuple),
            Row::heap(old_tuple),
        );
    }
}

/// Applies the publications to a change, as pgoutput_change() does: actions,
/// partition root, row filter (with the UPDATE transformation) and column list.
///
/// # Safety
/// Called from the change callback, inside the per-change memory context.
#[allow(clippy::too_many_arguments)]
unsafe fn publish_change(
    ctx: *mut pg_sys::LogicalDecodingContext,
    state: &mut DecodingState,
    relation: pg_sys::Relation,
    kind: ChangeKind,
    stream_xid: Option<u32>,
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
            state.stats.filtered_by_table += 1;
            return;
        };
        let (published, filter_index) = match kind {
            ChangeKind::Insert => (info.actions.insert, FILTER_INSERT),
            ChangeKind::Update => (info.actions.update, FILTER_UPDATE),
            ChangeKind::Delete => (info.actions.delete, FILTER_DELETE),
        };
        // pgoutput sends no DELETE without an old tuple (REPLICA IDENTITY NOTHING).
        if !published || (kind == ChangeKind::Delete && old_tuple.is_null()) {
            state.stats.filtered_by_action += 1;
            return;
        }
        let via_ancestor = info.publish_as_relid != (*relation).rd_id;
        if !via_ancestor && info.row_filters[filter_index].is_null() {
            // Published as itself, no row filter: nothing needs a slot; the
            // decoded tuples are printed as in wal2json mode, through the
            // column list. (A decoded INSERT has no old tuple, a DELETE no
            // new one.)
            emit_decoded(
                ctx,
                state,
                lsn,
                kind,
                stream_xid,
                &entry,
                relation,
                Some(&info.column_mask),
                new_tuple,
                old_tuple,
            );
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

        match verdict {
            FilterVerdict::Drop => state.stats.filtered_by_row_filter += 1,
            FilterVerdict::Emit {
                kind: ChangeKind::Insert,
                transformed: true,
            } => state.stats.updates_to_insert += 1,
            FilterVerdict::Emit {
                kind: ChangeKind::Delete,
                transformed: true,
            } => state.stats.updates_to_delete += 1,
            FilterVerdict::Emit { .. } => {}
        }
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
            if !target.wanted {
                state.stats.filtered_by_table += 1;
            } else {
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
                let header = ChangeHeader {
                    kind: emitted,
                    transformed_from: transformed.then_some(kind),
                    stream_xid,
                };
                emit_change(
                    ctx,
                    state,
                    lsn,
                    header,
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
        let attrs = tuple_desc_attrs(desc);
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
    header: ChangeHeader,
    entry: &RelationEntry,
    rel: pg_sys::Relation,
    column_mask: Option<&[bool]>,
    new: Row,
    old: Row,
) {
    let meta = &entry.meta;
    let kind = header.kind;
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
        state.stats.changes_emitted += 1;
        state.txn.items_emitted += 1;
        let mut new_values = match new {
            Row::Absent => None,
            Row::Heap(t) => Some(state.new_tuple.deform(rel, t, entry, column_mask)),
            Row::Slot(s) => Some(state.new_tuple.load_slot(s, entry, column_mask)),
        };
        let mut old_values = match old {
            Row::Absent => None,
            Row::Heap(t) => Some(state.old_tuple.deform(rel, t, entry, column_mask)),
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
                    &header,
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
                    &header,
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

/// A TRUNCATE of one or more relations.
///
/// # Safety
/// Valid pointers from a truncate or stream_truncate callback; `relations`
/// has `nrelations` entries.
pub unsafe fn decode_truncate(
    ctx: *mut pg_sys::LogicalDecodingContext,
    nrelations: i32,
    relations: *mut pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
    streamed: bool,
) {
    // SAFETY: valid pointers from PostgreSQL; `relations` has `nrelations` entries.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        // Each table truncated is one change (format 2 writes one object
        // per table).
        let tables = nrelations.max(0) as u64;
        state.stats.changes_seen += tables;
        state.txn.changes_seen += tables;
        // wal2json's format 1 has no truncate element.
        if !state.opts.actions.truncate || state.opts.format_version == 1 {
            state.stats.filtered_by_action += tables;
            return;
        }
        let lsn = (*change).lsn;
        let stream_xid = streamed.then(|| (*(*change).txn).xid.into_inner());
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
                        state.stats.filtered_by_table += 1;
                        continue;
                    };
                    let via_root = (*(*relation).rd_rel).relispartition
                        && info.publish_as_relid != (*relation).rd_id;
                    if via_root {
                        state.stats.filtered_by_table += 1;
                        continue;
                    }
                    if !info.actions.truncate {
                        state.stats.filtered_by_action += 1;
                        continue;
                    }
                }
                if !entry.wanted {
                    state.stats.filtered_by_table += 1;
                    continue;
                }
                ensure_begun(ctx, state);
                ensure_timestamp(state);
                let format = Wal2JsonFormat::new(&state.opts);
                state.txn.items_emitted += 1;
                state.stats.changes_emitted += 1;
                format.v2_truncate(
                    &mut state.out,
                    &state.txn.info,
                    stream_xid,
                    lsn,
                    &entry.meta,
                );
                flush(ctx, state, true);
            }
        });
    }
}

/// A logical decoding message (pg_logical_emit_message).
///
/// # Safety
/// Valid pointers from a message or stream_message callback; `content` has
/// `content_size` bytes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn decode_message(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    lsn: pg_sys::XLogRecPtr,
    transactional: bool,
    prefix: *const c_char,
    content_size: pg_sys::Size,
    content: *const c_char,
    streamed: bool,
) {
    // SAFETY: valid pointers from PostgreSQL; `content` has `content_size` bytes.
    unsafe {
        let state = state(ctx);
        update_progress(ctx, state, false);
        let prefix = CStr::from_ptr(prefix).to_bytes();
        // A message is a change (of its transaction, if transactional).
        state.stats.changes_seen += 1;
        if transactional {
            state.txn.changes_seen += 1;
        }
        if !state.opts.messages_enabled() || !state.opts.message_prefix_wanted(prefix) {
            state.stats.filtered_by_action += 1;
            return;
        }
        state.stats.changes_emitted += 1;
        let content: &[u8] = if content_size == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(content as *const u8, content_size)
        };
        // A streamed message belongs to the block's top-level transaction.
        let stream_xid =
            (streamed && transactional && !txn.is_null()).then(|| (*txn).xid.into_inner());
        if transactional {
            state.txn.items_emitted += 1;
        }
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
                stream_xid,
                prefix,
                content,
            );
            if state.opts.write_in_chunks || !transactional {
                flush(ctx, state, true);
            }
        } else {
            let txn_info = transactional.then_some(&state.txn.info);
            format.v2_message(&mut state.out, txn_info, stream_xid, lsn, prefix, content);
            flush(ctx, state, true);
        }
    }
}
