//! The events within a transaction: row changes, truncates, logical
//! messages and backfill chunks (DDL events are `ddl.rs`'s). Each goes
//! through the routing decision (`pubjson_core::rules::route`), which says
//! whether it is emitted and as what, then to the format. One function
//! serves the committed-transaction and the streamed-block callbacks of
//! each kind (as pgoutput's do).

use std::rc::Rc;

use pubjson_core::model::{
    BackfillMarker, ChangeHeader, ChangeKind, ChangeSource, TupleValues, TxnInfo,
};
use pubjson_core::output::format::ChangeContext;
use pubjson_core::protocol::{backfill, ddl};
use pubjson_core::rules::route::{route, Event, Route};
use pubjson_core::rules::row_filter::FilterVerdict;

use crate::pg::error::{self, Report};
use crate::pg::handles::{Change, InCallback, OpenedRel, OwnedTuple, Rel, Tuple, Txn};
use crate::pg::output::Writer;
use crate::pg::publication::PublishedRows;
use crate::pg::relation::RelationEntry;
use crate::pg::reorder::Reorder;
use crate::pg::tuple::Row;
use crate::plugin::state::DecodingState;

/// An INSERT/UPDATE/DELETE, committed or in a streamed block (change_cb
/// and stream_change_cb: which one, the block being decoded says, as
/// pgoutput's `in_streaming` does).
pub fn decode_change(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    relation: Rel<'_>,
    change: Change<'_>,
) {
    state.emitter.update_progress(writer, false);
    let Some(kind) = change.kind() else {
        return;
    };
    state.count_seen(1, true);
    let streamed = state.emitter.in_block();
    if streamed {
        if let Some(record) = state.emitter.records().current() {
            // Sent now: the live view counts it as decoded, no longer held.
            record.changes_streamed += 1;
        }
    }
    state.note_reorder_buffer(Reorder::of(writer).size());
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
        .run(|| publish_row(state, writer, relation, decoded));
}

/// A row to publish: what it is, where, and its rows.
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

/// A row change or a backfilled row, routed, then written. A change of
/// `pubjson.backfill_progress` is pubjson's own: it authorizes its
/// transaction's backfill message and is never emitted.
fn publish_row(
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
    if entry.rules.internal {
        let recorded = new.and_then(|new| {
            state
                .new_tuple
                .backfill_digest(relation, new, &entry.meta, &entry.plans)
        });
        if let (Some(recorded), Some(record)) = (recorded, state.emitter.records().current()) {
            record.backfill_digests.push(recorded);
        }
    }
    let event = match source {
        ChangeSource::Wal => Event::Change {
            kind,
            has_old: old.is_some(),
        },
        ChangeSource::Backfill => Event::BackfillRow,
    };
    // With publications, the rows as pgoutput prepares them (kept as
    // decoded, or in slots converted to the published root's layout and
    // through the row filter): made when the decision comes to the row
    // filter, which it does for every row it may emit.
    let info = entry
        .publish
        .as_ref()
        .filter(|_| state.publications.is_some());
    let mut published: Option<PublishedRows<'_>> = None;
    let decision = route(&state.rules, Some(&entry.rules), event, |kind| {
        published
            .insert(PublishedRows::new(info, relation, kind, old, new))
            .verdict(kind)
    });
    state.count_route(&decision, 1);
    if let Route::Emit(emit) = decision {
        let emitted = emit.kind.unwrap_or(kind);
        let (target, new, old) = match published.as_ref() {
            Some(rows) => {
                let target = if rows.via_ancestor() {
                    state
                        .relations
                        .get(rows.target(), &state.opts, state.publications.as_mut())
                } else {
                    Rc::clone(&entry)
                };
                let (new, old) = rows.rows(emitted);
                (target, new, old)
            }
            // wal2json's mode: the change as decoded, the rows its kind has.
            None => {
                let (new, old) = match kind {
                    ChangeKind::Insert => (new, None),
                    ChangeKind::Update => (new, old),
                    ChangeKind::Delete => (None, old),
                };
                let new = new.map_or(Row::Absent, |t| Row::Heap(relation, t));
                let old = old.map_or(Row::Absent, |t| Row::Heap(relation, t));
                (Rc::clone(&entry), new, old)
            }
        };
        let column_mask = emit
            .column_list
            .then(|| entry.publish.as_ref().map(|info| &info.column_mask[..]))
            .flatten();
        emit_change(
            state,
            writer,
            ChangeToEmit {
                lsn,
                header: ChangeHeader {
                    kind: emitted,
                    transformed_from: emit.transformed_from,
                    stream_xid,
                    source,
                },
                entry: &target,
                column_mask,
                new,
                old,
            },
        );
    }
    if let Some(rows) = published {
        rows.release();
    }
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
    let skip =
        state
            .emitter
            .format()
            .skip_reason(header.kind, meta, new.is_present(), old.is_present());
    if let Some(warning) = skip {
        error::warn(warning);
        return;
    }
    let new_values = state.new_tuple.load(new, &entry.plans, column_mask);
    let old_values = state.old_tuple.load(old, &entry.plans, column_mask);
    let written = state.emitter.item(writer, |format, sink, txn| {
        let change = ChangeContext {
            txn,
            lsn,
            header: &header,
            rel: meta,
            render: &entry.render,
            new: new_values.as_ref().map(|t| t as &dyn TupleValues),
            old: old_values.as_ref().map(|t| t as &dyn TupleValues),
        };
        format.change(sink, &change)
    });
    match written {
        Some(Ok(Some(warning))) => error::warn(warning),
        Some(Ok(None)) | None => {}
        Some(Err(e)) => Report::from(e).error(),
    }
}

/// A TRUNCATE of one or more relations: each truncated table is one change
/// (format 2 writes one object per table), routed on its own. Committed or
/// in a streamed block, as [`decode_change`].
pub fn decode_truncate(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    relations: &[Rel<'_>],
    change: Change<'_>,
) {
    state.emitter.update_progress(writer, false);
    state.count_seen(relations.len() as u64, true);
    let lsn = change.lsn();
    let stream_xid = state.emitter.in_block().then(|| change.xid());
    state.relations.collect_garbage();
    state.change_memory.run(|| {
        for &relation in relations {
            let entry = state
                .relations
                .get(relation, &state.opts, state.publications.as_mut());
            let decision = route(&state.rules, Some(&entry.rules), Event::Truncate, |_| {
                FilterVerdict::Drop
            });
            state.count_route(&decision, 1);
            if let Route::Emit(_) = decision {
                state.emitter.item(writer, |format, sink, txn| {
                    format.truncate(sink, txn, stream_xid, lsn, &entry.meta)
                });
            }
        }
    });
}

/// A logical decoding message (pg_logical_emit_message). `catalog` is set
/// for a transactional one (its callback may read the catalogs). A
/// transactional one is committed or in a streamed block, as
/// [`decode_change`]; a non-transactional one is decoded as its record is
/// read, never inside a block.
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
) {
    state.emitter.update_progress(writer, false);
    let streamed = state.emitter.in_block();
    if transactional && prefix == backfill::PREFIX {
        if let (Some(txn), Some(catalog)) = (txn, catalog) {
            let stream_xid = streamed.then(|| txn.xid());
            decode_backfill(state, writer, catalog, lsn, stream_xid, content);
        }
        return;
    }
    // A message is a change (of its transaction, if transactional).
    state.count_seen(1, transactional);
    // A DDL capture message of this transaction is a DDL event when the
    // format writes them and it is one; else an ordinary message.
    if transactional
        && prefix == ddl::PREFIX
        && state.rules.format.ddl
        && crate::plugin::ddl::decode_ddl(state, writer, txn, lsn, content, streamed)
    {
        return;
    }
    let decision = route(&state.rules, None, Event::Message { prefix }, |_| {
        FilterVerdict::Drop
    });
    state.count_route(&decision, 1);
    if let Route::Skip(_) = decision {
        return;
    }
    if !transactional {
        // Outside any transaction: its bytes are no transaction's.
        state.emitter.item_outside(writer, |format, sink| {
            format.message(sink, &NO_TXN, false, None, lsn, prefix, content)
        });
        return;
    }
    // A streamed message belongs to the block's top-level transaction.
    let stream_xid = match txn {
        Some(txn) if streamed => Some(txn.xid()),
        _ => None,
    };
    state.emitter.item(writer, |format, sink, info| {
        format.message(sink, info, true, stream_xid, lsn, prefix, content)
    });
}

/// A chunk of `pubjson.backfill()` (see `protocol::backfill`): its rows are
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
    let Some(record) = state.emitter.records().current() else {
        return;
    };
    let Some(at) = record
        .backfill_digests
        .iter()
        .position(|(_, recorded)| *recorded == digest)
    else {
        error::warn(
            "pubjson: ignored a message with prefix \"pubjson.backfill\" that pubjson.backfill() did not write",
        );
        return;
    };
    let (relid, _) = record.backfill_digests.swap_remove(at);
    let chunk = match backfill::parse(content) {
        Ok(chunk) if chunk.relid == relid => chunk,
        _ => {
            error::warn("pubjson: ignored a backfill message of an unknown layout");
            return;
        }
    };
    state.count_seen(chunk.rows.len() as u64, true);
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
        let marked = matches!(
            route(
                &state.rules,
                Some(&entry.rules),
                Event::BackfillMarker,
                |_| { FilterVerdict::Drop }
            ),
            Route::Emit(_)
        );
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
        let marker_meta = &marker_entry.as_ref().unwrap_or(&entry).meta;
        let mark = |state: &mut DecodingState, writer: &mut Writer<'_>, marker| {
            if marked {
                state.emitter.item(writer, |format, sink, _| {
                    format.backfill_marker(sink, stream_xid, marker_meta, marker)
                });
            }
        };
        if chunk.first {
            mark(state, writer, BackfillMarker::Start);
        }
        for row in &chunk.rows {
            let Some(owned) = OwnedTuple::from_composite(relation, row) else {
                error::warn("pubjson: ignored a backfilled row that is not a row of its table");
                continue;
            };
            let decoded = Decoded {
                kind: ChangeKind::Insert,
                lsn,
                stream_xid,
                rows: RowsFrom::Backfill(owned.tuple()),
            };
            publish_row(state, writer, relation, decoded);
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
