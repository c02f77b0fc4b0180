//! Format 3's DDL events: a transactional message with the capture prefix
//! (`src/api/ddl.sql`) becomes a `DDL` object (`output::v3::ddl`) whose
//! `relations` are the changed tables' R objects, described here from the
//! relation cache with the catalog as it is at the message (so a DDL event
//! and the next R object never disagree). With `publication_names`, the
//! event is shown only when its tables are published (docs/ddl.md).
//!
//! Any role may write a message with the capture prefix
//! (`pg_logical_emit_message` is PUBLIC), so a message is a DDL event only
//! when it agrees with the catalog at its position ([`agrees_with_catalog`]):
//! a forged drop of a table that still exists, or a forged command naming
//! tables that do not, is not one.

use pgrx::prelude::*;

use crate::pg::handles::{relation_exists, with_table, Txn, Writer};
use crate::plugin::state::DecodingState;
use crate::plugin::txn::{begin_item, current_txn};
use pubjson_core::output::format::Sink;
use pubjson_core::output::v3::ddl::{ddl_object, parse_event, DdlEvent};
use pubjson_core::output::v3::relation_object;

/// Writes the DDL object of a capture message; `false` when `content` is
/// not a capture message (the caller writes it as an ordinary message).
pub fn decode_ddl(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Option<Txn<'_>>,
    lsn: u64,
    content: &[u8],
    streamed: bool,
) -> bool {
    let Some(event) = parse_event(content) else {
        return false;
    };
    if !agrees_with_catalog(&event, txn) {
        warning!(
            "pubjson: a message with prefix \"pubjson.ddl\" that does not agree with the catalog is not a DDL event"
        );
        return false;
    }
    state.relations.collect_garbage();
    let filtered = state.publications.is_some();
    // The tables to describe: without publications each changed table;
    // with them each published one, or the root it is published as
    // (publish_via_partition_root: its rows come under the root's name).
    let mut targets: Vec<u32> = Vec::new();
    let relations = &mut state.relations;
    let opts = &state.opts;
    let publications = &mut state.publications;
    state.change_memory.run(|| {
        for &relid in &event.relations {
            let target = with_table(relid, |rel| {
                if !filtered {
                    return Some(relid);
                }
                let entry = relations.get(rel, opts, publications.as_mut());
                let info = entry.publish.as_ref()?;
                Some(info.publish_as_relid.to_u32())
            });
            if let Some(Some(target)) = target {
                if !targets.contains(&target) {
                    targets.push(target);
                }
            }
        }
    });
    // Their R objects, with the publication's column list.
    let mut descriptions = Vec::new();
    state.change_memory.run(|| {
        for &relid in &targets {
            with_table(relid, |rel| {
                let entry = relations.get(rel, opts, publications.as_mut());
                let visible: Vec<bool> = match entry.publish.as_ref().filter(|_| filtered) {
                    None => vec![true; entry.meta.columns.len()],
                    Some(info) => entry
                        .meta
                        .columns
                        .iter()
                        .map(|c| info.column_mask.get(c.attr_index).copied().unwrap_or(false))
                        .collect(),
                };
                let mut object = Vec::new();
                relation_object(&mut object, &entry.meta, &visible);
                descriptions.push(object);
            });
        }
    });
    let published = !targets.is_empty();
    // A dropped table is no longer in the catalog at the message: the
    // trigger named the publications that published it.
    let dropped_published = event.drops_table()
        && state.opts.publication_names.as_ref().is_some_and(|names| {
            event
                .publications
                .iter()
                .any(|p| names.iter().any(|n| n == p))
        });
    if filtered && !published && !dropped_published {
        state.stats.filtered_by_table += 1;
        return true;
    }
    let stream_xid = match txn {
        Some(txn) if streamed => Some(txn.xid()),
        _ => None,
    };
    begin_item(state, writer);
    let record = current_txn(&mut state.txns);
    let mut sink = state.sink.output(writer, Some(&mut record.bytes_emitted));
    ddl_object(sink.buf(), &event, stream_xid, lsn, &descriptions);
    state.format.object_written(&mut sink);
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
