//! Decoding of changes, truncates and messages: the publication rules (when
//! `publication_names` is given), then the format. One function serves
//! the committed-transaction and the streamed-block callbacks of each kind
//! (as pgoutput's do).

use std::rc::Rc;

use pgrx::prelude::*;

use crate::pg::handles::{Change, OpenedRel, OwnedTuple, Rel, Tuple, Txn, Writer};
use crate::pg::publication::PublishedRows;
use crate::pg::relation::InCallback;
use crate::pg::relation::RelationEntry;
use crate::pg::tuple::Row;
use crate::plugin::state::DecodingState;
use crate::plugin::txn::{begin_item, current_txn, update_progress};
use pubjson_core::model::{
    BackfillMarker, ChangeHeader, ChangeKind, ChangeSource, EncodeError, TupleValues, TxnInfo,
};
use pubjson_core::output::format::ChangeContext;
use pubjson_core::protocol::backfill;
use pubjson_core::rules::row_filter::FilterVerdict;

fn raise_encode_error(err: EncodeError) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
        err.to_string()
    );
}

/// An INSERT/UPDATE/DELETE, committed (`streamed` false) or in a streamed block.
pub fn decode_change(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    relation: Rel<'_>,
    change: Change<'_>,
    streamed: bool,
) {
    update_progress(state, writer, false);
    let Some(kind) = change.kind() else {
        return;
    };
    state.stats.changes_seen += 1;
    let streaming = state.stream_block.is_some();
    if let Some(record) = state.txns.current() {
        record.changes_seen += 1;
        // Sent now: the live view counts it as decoded, no longer held.
        record.changes_streamed += streaming as u64;
    }
    let reorder_size = writer.reorder_buffer_size();
    if reorder_size > state.stats.peak_reorder_buffer_bytes {
        state.stats.peak_reorder_buffer_bytes = reorder_size;
    }
    let decoded = Decoded {
        kind,
        lsn: change.lsn(),
        // In a streamed block every change names its own (sub)transaction.
        stream_xid: streamed.then(|| change.xid()),
        rows: RowsFrom::Change(change),
    };
    state.relations.collect_garbage();
    state
        .change_memory
        .run(|| publish_change(state, writer, relation, decoded));
}

/// A change to publish: what it is, where, and its rows.
struct Decoded<'a> {
    kind: ChangeKind,
    lsn: u64,
    stream_xid: Option<u32>,
    rows: RowsFrom<'a>,
}

/// Where the rows of a change come from.
enum RowsFrom<'a> {
    /// An INSERT/UPDATE/DELETE record: its new and old tuples.
    Change(Change<'a>),
    /// A row of a backfill chunk: an INSERT's new tuple.
    Backfill(Tuple<'a>),
}

impl<'a> RowsFrom<'a> {
    fn source(&self) -> ChangeSource {
        match self {
            RowsFrom::Change(_) => ChangeSource::Wal,
            RowsFrom::Backfill(_) => ChangeSource::Backfill,
        }
    }

    /// The new and the old tuple.
    fn tuples(self) -> (Option<Tuple<'a>>, Option<Tuple<'a>>) {
        match self {
            RowsFrom::Change(change) => change.rows(),
            RowsFrom::Backfill(row) => (Some(row), None),
        }
    }
}

/// pgoutput_change()'s decisions, in its order: the relation's
/// publications, their actions, the partition root, the row filter (with
/// its UPDATE transformation); then wal2json's table options. A change of
/// `pubjson.backfill_progress` is pubjson's own: it authorizes its
/// transaction's backfill message and is never emitted.
fn publish_change(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    relation: Rel<'_>,
    decoded: Decoded<'_>,
) {
    let Decoded {
        kind,
        lsn,
        stream_xid,
        rows,
    } = decoded;
    let source = rows.source();
    let (new, old) = rows.tuples();
    let entry = state
        .relations
        .get(relation, &state.opts, state.publications.as_mut());
    if entry.backfill_progress {
        let recorded = new.and_then(|new| state.new_tuple.backfill_digest(relation, new, &entry));
        if let (Some(recorded), Some(record)) = (recorded, state.txns.current()) {
            record.backfill_digests.push(recorded);
        }
        return;
    }
    // wal2json's `actions`; a backfilled row is a row's state, not an action.
    let actions = state.opts.actions;
    let wanted = source == ChangeSource::Backfill
        || match kind {
            ChangeKind::Insert => actions.insert,
            ChangeKind::Update => actions.update,
            ChangeKind::Delete => actions.delete,
        };
    if !wanted {
        state.stats.filtered_by_action += 1;
        return;
    }
    let info = match (&state.publications, entry.publish.as_ref()) {
        (None, _) => {
            // wal2json mode: the change as decoded. pgoutput's rules (row
            // filter, partition root, column list) need a publication.
            if !entry.wanted {
                state.stats.filtered_by_table += 1;
                return;
            }
            let (new, old) = match kind {
                ChangeKind::Insert => (new, None),
                ChangeKind::Update => (new, old),
                ChangeKind::Delete => (None, old),
            };
            let change = ChangeToEmit {
                lsn,
                header: ChangeHeader {
                    kind,
                    transformed_from: None,
                    stream_xid,
                    source,
                },
                entry: &entry,
                column_mask: None,
                new: new.map_or(Row::Absent, |t| Row::Heap(relation, t)),
                old: old.map_or(Row::Absent, |t| Row::Heap(relation, t)),
            };
            emit_change(state, writer, change);
            return;
        }
        (Some(_), None) => {
            state.stats.filtered_by_table += 1;
            return;
        }
        (Some(_), Some(info)) => {
            // pgoutput sends no DELETE without an old tuple (REPLICA
            // IDENTITY NOTHING).
            if !info.publishes(kind) || (kind == ChangeKind::Delete && old.is_none()) {
                state.stats.filtered_by_action += 1;
                return;
            }
            Some(info)
        }
    };
    let mut rows = PublishedRows::new(info, relation, kind, old, new);
    let verdict = rows.verdict(kind);
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
        let target = if rows.via_ancestor() {
            state
                .relations
                .get(rows.target(), &state.opts, state.publications.as_mut())
        } else {
            Rc::clone(&entry)
        };
        if target.wanted {
            let (new, old) = rows.rows(emitted);
            let change = ChangeToEmit {
                lsn,
                header: ChangeHeader {
                    kind: emitted,
                    transformed_from: transformed.then_some(kind),
                    stream_xid,
                    source,
                },
                entry: &target,
                column_mask: info.map(|info| &info.column_mask[..]),
                new,
                old,
            };
            emit_change(state, writer, change);
        } else {
            state.stats.filtered_by_table += 1;
        }
    }
    rows.release();
}

/// A change on its way to the format: where it is, what it is, its
/// relation (with the published columns) and its rows.
struct ChangeToEmit<'e, 'r> {
    lsn: u64,
    header: ChangeHeader,
    entry: &'e RelationEntry,
    /// The publication's column list, if any.
    column_mask: Option<&'e [bool]>,
    new: Row<'r>,
    old: Row<'r>,
}

/// Writes one INSERT/UPDATE/DELETE in the session's format, unless the
/// format skips it (missing identity), in which case its WARNING is raised.
fn emit_change(state: &mut DecodingState, writer: &mut Writer<'_>, change: ChangeToEmit<'_, '_>) {
    let ChangeToEmit {
        lsn,
        header,
        entry,
        column_mask,
        new,
        old,
    } = change;
    let meta = &entry.meta;
    let skip = state
        .format
        .skip_reason(header.kind, meta, new.is_present(), old.is_present());
    if let Some(warning) = skip {
        warning!("{}", warning);
        return;
    }
    begin_item(state, writer);
    let record = current_txn(&mut state.txns);
    let new_values = state.new_tuple.load(new, entry, column_mask);
    let old_values = state.old_tuple.load(old, entry, column_mask);
    let change = ChangeContext {
        txn: &record.info,
        lsn,
        header: &header,
        rel: meta,
        render: &entry.render,
        new: new_values.as_ref().map(|t| t as &dyn TupleValues),
        old: old_values.as_ref().map(|t| t as &dyn TupleValues),
    };
    let warning = state
        .format
        .change(
            &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
            &change,
        )
        .unwrap_or_else(|e| raise_encode_error(e));
    if let Some(w) = warning {
        warning!("{}", w);
    }
}

/// A TRUNCATE of one or more relations.
pub fn decode_truncate(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    relations: &[Rel<'_>],
    change: Change<'_>,
    streamed: bool,
) {
    update_progress(state, writer, false);
    // Each table truncated is one change (format 2 writes one object per
    // table).
    let tables = relations.len() as u64;
    state.stats.changes_seen += tables;
    if let Some(record) = state.txns.current() {
        record.changes_seen += tables;
    }
    if !state.opts.actions.truncate || !state.format.writes_truncate() {
        state.stats.filtered_by_action += tables;
        return;
    }
    let lsn = change.lsn();
    let stream_xid = streamed.then(|| change.xid());
    state.relations.collect_garbage();
    state.change_memory.run(|| {
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
                let via_root = relation.is_partition() && info.publish_as_relid != relation.oid();
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
            begin_item(state, writer);
            let record = current_txn(&mut state.txns);
            state.format.truncate(
                &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
                &record.info,
                stream_xid,
                lsn,
                &entry.meta,
            );
        }
    });
}

/// A logical decoding message (pg_logical_emit_message). `catalog` is set
/// for a transactional one (its callback may read the catalogs).
#[allow(clippy::too_many_arguments)]
pub fn decode_message(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Option<Txn<'_>>,
    catalog: Option<InCallback<'_>>,
    lsn: u64,
    transactional: bool,
    prefix: &[u8],
    content: &[u8],
    streamed: bool,
) {
    update_progress(state, writer, false);
    if transactional && prefix == backfill::PREFIX {
        if let (Some(txn), Some(catalog)) = (txn, catalog) {
            let stream_xid = streamed.then(|| txn.xid());
            decode_backfill(state, writer, catalog, lsn, stream_xid, content);
        }
        return;
    }
    // A message is a change (of its transaction, if transactional).
    state.stats.changes_seen += 1;
    if transactional {
        if let Some(record) = state.txns.current() {
            record.changes_seen += 1;
        }
    }
    // Format 3 writes DDL capture messages as DDL objects, whatever the
    // message options (formats 1 and 2 keep wal2json's ordinary message).
    if transactional
        && prefix == pubjson_core::output::v3::ddl::DDL_PREFIX
        && state.opts.format_version == 3
        && crate::plugin::ddl::decode_ddl(state, writer, txn, lsn, content, streamed)
    {
        return;
    }
    // The capture prefix is an ordinary message (formats 1 and 2, and a
    // format 3 message that is not a DDL event) only for a consumer that
    // names it in add-msg-prefixes.
    if prefix == pubjson_core::output::v3::ddl::DDL_PREFIX
        && !state.opts.add_msg_prefixes.iter().any(|p| p == prefix)
    {
        state.stats.filtered_by_action += 1;
        return;
    }
    if !state.opts.messages_enabled() || !state.opts.message_prefix_wanted(prefix) {
        state.stats.filtered_by_action += 1;
        return;
    }
    // A streamed message belongs to the block's top-level transaction.
    let stream_xid = match txn {
        Some(txn) if streamed && transactional => Some(txn.xid()),
        _ => None,
    };
    if !transactional {
        // Outside any transaction: its bytes are no transaction's.
        state.stats.changes_emitted += 1;
        state.format.message(
            &mut state.sink.output(writer, None),
            &NO_TXN,
            false,
            None,
            lsn,
            prefix,
            content,
        );
        return;
    }
    begin_item(state, writer);
    let record = current_txn(&mut state.txns);
    state.format.message(
        &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
        &record.info,
        true,
        stream_xid,
        lsn,
        prefix,
        content,
    );
}

/// A chunk of `pubjson.backfill()` (see `pubjson_core::protocol::backfill`): its rows are
/// published as INSERTs of its relation, with [`ChangeSource::Backfill`],
/// between the format's start and end markers on the first and last chunk.
/// Decoded only when its transaction's progress row recorded its digest.
fn decode_backfill(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    catalog: InCallback<'_>,
    lsn: u64,
    stream_xid: Option<u32>,
    content: &[u8],
) {
    let digest = backfill::digest(content);
    let Some(record) = state.txns.current() else {
        return;
    };
    let Some(at) = record
        .backfill_digests
        .iter()
        .position(|(_, recorded)| *recorded == digest)
    else {
        warning!(
            "pubjson: ignored a message with prefix \"pubjson.backfill\" that pubjson.backfill() did not write"
        );
        return;
    };
    let (relid, _) = record.backfill_digests.swap_remove(at);
    let chunk = match backfill::parse(content) {
        Ok(chunk) if chunk.relid == relid => chunk,
        _ => {
            warning!("pubjson: ignored a backfill message of an unknown layout");
            return;
        }
    };
    let rows = chunk.rows.len() as u64;
    state.stats.changes_seen += rows;
    record.changes_seen += rows;
    if !state.format.writes_backfill() {
        state.stats.filtered_by_action += rows;
        return;
    }
    state.relations.collect_garbage();
    state.change_memory.run(|| {
        let Some(opened) = OpenedRel::open(catalog, relid) else {
            return;
        };
        let relation = opened.rel();
        let entry = state
            .relations
            .get(relation, &state.opts, state.publications.as_mut());
        // The markers of a relation the consumer gets rows of; they name
        // the relation the backfill was asked for (a partitioned table,
        // whose partitions' rows these are).
        let marked = entry.wanted && (state.publications.is_none() || entry.publish.is_some());
        let marker_rel = if (chunk.first || chunk.last) && chunk.marker_relid != relid {
            OpenedRel::open(catalog, chunk.marker_relid)
        } else {
            None
        };
        let marker_entry = marker_rel.as_ref().map(|opened| {
            state
                .relations
                .get(opened.rel(), &state.opts, state.publications.as_mut())
        });
        let mark = |state: &mut DecodingState, writer: &mut Writer<'_>, marker| {
            if marked {
                begin_item(state, writer);
                let record = current_txn(&mut state.txns);
                state.format.backfill_marker(
                    &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
                    stream_xid,
                    &marker_entry.as_ref().unwrap_or(&entry).meta,
                    marker,
                );
            }
        };
        if chunk.first {
            mark(state, writer, BackfillMarker::Start);
        }
        for row in &chunk.rows {
            let Some(owned) = OwnedTuple::from_composite(relation, row) else {
                warning!("pubjson: ignored a backfilled row that is not a row of its table");
                continue;
            };
            let decoded = Decoded {
                kind: ChangeKind::Insert,
                lsn,
                stream_xid,
                rows: RowsFrom::Backfill(owned.tuple()),
            };
            publish_change(state, writer, relation, decoded);
        }
        if chunk.last {
            mark(
                state,
                writer,
                BackfillMarker::End {
                    rows: chunk.rows_so_far,
                },
            );
        }
    });
}

/// What a non-transactional message is given as its transaction (the
/// formats read it only for transactional ones).
static NO_TXN: TxnInfo = TxnInfo {
    xid: 0,
    origin: 0,
    timestamp: Vec::new(),
    commit_time: 0,
    final_lsn: 0,
    end_lsn: 0,
};
