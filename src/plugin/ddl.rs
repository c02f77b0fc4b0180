//! DDL events: a transactional message with DDL capture's prefix
//! (`protocol::ddl`) becomes the format's DDL event, with the new
//! description of each table it changed, read here from the relation cache
//! with the catalog as it is at the message (so a DDL event and the next R
//! object never disagree). Each table, and the event as a whole, go
//! through the routing decision: with `publication_names`, the event is
//! shown only when its tables are published (docs/ddl.md).
//!
//! Any role may write a message with the capture prefix
//! (`pg_logical_emit_message` is PUBLIC), so a message is a DDL event only
//! when it agrees with the catalog at its position ([`agrees_with_catalog`]):
//! a forged drop of a table that still exists, or a forged command naming
//! tables that do not, is not one.

use std::rc::Rc;

use pubjson_core::output::format::DdlTable;
use pubjson_core::protocol::ddl::{self, DdlEvent};
use pubjson_core::rules::route::{route, Event, Route};
use pubjson_core::rules::row_filter::FilterVerdict;

use crate::pg::error;
use crate::pg::handles::{relation_exists, with_table, Txn};
use crate::pg::output::Writer;
use crate::pg::relation::RelationEntry;
use crate::plugin::state::DecodingState;

/// Writes the DDL event of a capture message; `false` when `content` is
/// not one (the caller treats it as an ordinary message).
pub fn decode_ddl(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Option<Txn<'_>>,
    lsn: u64,
    content: &[u8],
    streamed: bool,
) -> bool {
    let Some(event) = ddl::parse(content) else {
        return false;
    };
    if !agrees_with_catalog(&event, txn) {
        error::warn(
            "pubjson: a message with prefix \"pubjson.ddl\" that does not agree with the catalog is not a DDL event",
        );
        return false;
    }
    state.relations.collect_garbage();
    // The tables to describe: each changed table the routing shows, as
    // itself or as the root it is published as (publish_via_partition_root:
    // its rows come under the root's name), once each, with the columns
    // the consumer is shown.
    let mut tables: Vec<(Rc<RelationEntry>, bool)> = Vec::new();
    let relations = &mut state.relations;
    let opts = &state.opts;
    let publications = &mut state.publications;
    let rules = &state.rules;
    state.change_memory.run(|| {
        for &relid in &event.relations {
            with_table(relid, |rel| {
                let entry = relations.get(rel, opts, publications.as_mut());
                let decision = route(rules, Some(&entry.rules), Event::DdlTable, |_| {
                    FilterVerdict::Drop
                });
                let Route::Emit(emit) = decision else {
                    return;
                };
                let target = match entry.publish.as_ref() {
                    Some(info) if emit.as_root => info.publish_as_relid.to_u32(),
                    _ => relid,
                };
                if tables.iter().any(|(t, _)| t.meta.relid == target) {
                    return;
                }
                let described = if target == relid {
                    Some(entry.clone())
                } else {
                    with_table(target, |root| {
                        relations.get(root, opts, publications.as_mut())
                    })
                };
                if let Some(described) = described {
                    tables.push((described, emit.column_list));
                }
            });
        }
    });
    let decision = route(
        &state.rules,
        None,
        Event::Ddl {
            tables_shown: tables.len(),
            drops_table: event.drops_table(),
            dropped_from: &event.publications,
        },
        |_| FilterVerdict::Drop,
    );
    state.count_route(&decision, 1);
    if let Route::Skip(_) = decision {
        return true;
    }
    // In a streamed block, the (sub)transaction that ran the command, as a
    // change names its own: a consumer drops the event with a rolled-back
    // savepoint (an `A` of that subtransaction). An xid the transaction
    // does not know (a forged message) is not taken.
    let stream_xid = match txn {
        Some(txn) if streamed => Some(
            event
                .xid
                .filter(|&xid| txn.has_xid(xid))
                .unwrap_or(txn.xid()),
        ),
        _ => None,
    };
    // Per table, the columns the consumer is shown: a publication's column
    // list, or all of them.
    let visible: Vec<Vec<bool>> = tables
        .iter()
        .map(|(entry, column_list)| match entry.publish.as_ref() {
            Some(info) if *column_list => entry
                .meta
                .columns
                .iter()
                .map(|c| info.column_mask.get(c.attr_index).copied().unwrap_or(false))
                .collect(),
            _ => vec![true; entry.meta.columns.len()],
        })
        .collect();
    let described: Vec<DdlTable<'_>> = tables
        .iter()
        .zip(&visible)
        .map(|((entry, _), visible)| DdlTable {
            rel: &entry.meta,
            visible,
        })
        .collect();
    state.emitter.item(writer, |format, sink, _| {
        format.ddl(sink, stream_xid, lsn, &event, &described)
    });
    true
}

/// `pg_class`'s OID: the `classid` of relations.
const RELATION_RELATION_ID: u32 = 1259;

/// Whether a capture message agrees with the catalog as it is at the
/// message (the transaction's own earlier changes included):
///
/// - a `sql_drop` event comes from a transaction that changed the
///   catalogs, names every table it dropped as a `pg_class` object, and
///   every relation it names as dropped is gone;
/// - any other names only relations that exist (its `pg_class` objects,
///   columns included, and its `relations`).
///
/// The trigger's own messages always agree (a dropped object is deleted
/// before `sql_drop` fires; `pg_event_trigger_ddl_commands()` leaves out
/// objects dropped since). So a forged message can neither drop a
/// consumer's existing table nor announce tables that do not exist; the
/// descriptions in `relations` are read from the catalog in any case.
fn agrees_with_catalog(event: &DdlEvent, txn: Option<Txn<'_>>) -> bool {
    let Some(txn) = txn else {
        return false;
    };
    let drop = event.is_drop();
    if drop && (!txn.has_catalog_changes() || !event.relations.is_empty()) {
        return false;
    }
    for o in &event.objects {
        let table = matches!(
            o.object_type.as_deref(),
            Some(b"table" | b"partitioned table")
        );
        let in_pg_class = o.classid == Some(RELATION_RELATION_ID);
        if table && !(in_pg_class && o.oid.is_some() && o.subid.unwrap_or(0) == 0) {
            return false;
        }
        // A column's table exists at a ddl_command_end; a dropped column
        // (DROP TYPE ... CASCADE) says nothing about its table.
        if !in_pg_class || (drop && o.subid.unwrap_or(0) != 0) {
            continue;
        }
        let Some(oid) = o.oid else {
            return false;
        };
        if relation_exists(oid) != Some(!drop) {
            return false;
        }
    }
    event
        .relations
        .iter()
        .all(|&relid| relation_exists(relid) == Some(true))
}
