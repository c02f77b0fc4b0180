//! Transactions: BEGIN and COMMIT, streamed in-progress transactions (block
//! start and stop, abort, commit) and two-phase commit (PREPARE, COMMIT
//! PREPARED, ROLLBACK PREPARED). The objects are the format's; this module
//! decides when each is due and keeps the books.

use pubjson_core::output::control::TwoPhaseEvent;
use pubjson_core::output::format::{PreparedTxn, StreamedCommit};

use crate::pg::handles::Txn;
use crate::pg::output::Writer;
use crate::pg::port::timestamptz_text;
use crate::plugin::state::DecodingState;

/// A committed transaction's replay starts.
pub fn begin(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    state.emitter.start_txn(writer, txn, true);
}

/// A committed transaction's replay ends.
pub fn commit(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>, commit_lsn: u64) {
    let mut record = state
        .emitter
        .records()
        .finish(txn.xid())
        .unwrap_or_default();
    let emitted = record.begun;
    state.emitter.update_progress(writer, !emitted);
    if emitted {
        let (info, items) = (&record.info, record.items_emitted);
        state
            .emitter
            .write(writer, Some(&mut record.bytes_emitted), |format, sink| {
                format.commit(sink, info, commit_lsn, items)
            });
    }
    // Without a BEGIN (deferred and never due) the transaction leaves no trace.
    let produced = record.items_emitted > 0;
    state.finish_txn_stats(txn, &record, produced);
}

/// A block of an in-progress transaction starts.
pub fn stream_start(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    state.emitter.enter_block(writer, txn);
}

/// The block ends.
pub fn stream_stop(state: &mut DecodingState, writer: &mut Writer<'_>) {
    state.emitter.leave_block(writer);
}

/// A streamed transaction, or one of its subtransactions, aborted. An
/// aborted transaction is not counted as decoded (its changes and bytes are
/// in the slot's totals): its record goes.
pub fn stream_abort(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    abort_lsn: u64,
) {
    let top = txn.top_xid();
    let xid = txn.xid();
    let records = state.emitter.records();
    let mut ended = if xid == top {
        records.finish(top)
    } else {
        None
    };
    let emitted = match &ended {
        Some(record) => record.streamed_output,
        None => records.get(top).is_some_and(|r| r.streamed_output),
    };
    state.emitter.update_progress(writer, !emitted);
    if emitted || state.emitter.reports_empty() {
        let write = |format: &mut dyn pubjson_core::output::format::OutputFormat,
                     sink: &mut dyn pubjson_core::output::format::Sink| {
            format.stream_abort(sink, top, xid, abort_lsn)
        };
        match ended.as_mut() {
            Some(record) => state
                .emitter
                .write(writer, Some(&mut record.bytes_emitted), write),
            None => {
                // The subtransaction's bytes are its top-level's.
                let mut bytes = 0;
                state.emitter.write(writer, Some(&mut bytes), write);
                if let Some(record) = state.emitter.records().get(top) {
                    record.bytes_emitted += bytes;
                }
            }
        }
    }
    state.live.touch();
    state.publish_stats();
}

/// A streamed transaction committed: everything streamed for it applies.
pub fn stream_commit(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    commit_lsn: u64,
) {
    let xid = txn.xid();
    let mut record = state.emitter.records().finish(xid).unwrap_or_default();
    let emitted = record.streamed_output;
    state.emitter.update_progress(writer, !emitted);
    state.count_streamed_txn();
    if emitted || state.emitter.reports_empty() {
        let timestamp = timestamptz_text(txn.commit_time());
        let commit = StreamedCommit {
            xid,
            commit_lsn,
            end_lsn: txn.end_lsn(),
            timestamp: &timestamp,
            commit_time: txn.commit_time(),
            changes: record.items_emitted,
        };
        state
            .emitter
            .write(writer, Some(&mut record.bytes_emitted), |format, sink| {
                format.stream_commit(sink, &commit)
            });
    }
    state.finish_txn_stats(txn, &record, emitted);
}

/// A transaction being decoded at PREPARE time starts. Prepared
/// transactions are never skipped as empty (as in pgoutput): after a restart
/// the plugin could not tell whether the COMMIT PREPARED it is about to send
/// belongs to a transaction the consumer has seen.
pub fn begin_prepare(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    state.emitter.start_txn(writer, txn, false);
    if let Some(record) = state.emitter.records().current() {
        record.prepared = true;
    }
}

/// PREPARE TRANSACTION: the transaction's changes end (`streamed`: they were
/// streamed), then a `P` object.
pub fn prepare(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    prepare_lsn: u64,
    streamed: bool,
) {
    let mut record = state
        .emitter
        .records()
        .finish(txn.xid())
        .unwrap_or_default();
    state.emitter.update_progress(writer, false);
    let timestamp = timestamptz_text(txn.commit_time());
    let prepared = PreparedTxn {
        changes: record.items_emitted,
        ..prepared_txn(txn, &timestamp)
    };
    state
        .emitter
        .write(writer, Some(&mut record.bytes_emitted), |format, sink| {
            format.prepare(sink, &prepared, prepare_lsn, streamed)
        });
    let emitted = if streamed {
        state.count_streamed_txn();
        record.streamed_output
    } else {
        record.items_emitted > 0
    };
    state.count_prepared_txn();
    state.finish_txn_stats(txn, &record, emitted);
}

/// COMMIT PREPARED.
pub fn commit_prepared(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    commit_lsn: u64,
) {
    state.emitter.update_progress(writer, false);
    two_phase(
        state,
        writer,
        txn,
        TwoPhaseEvent::CommitPrepared,
        commit_lsn,
    );
}

/// ROLLBACK PREPARED.
pub fn rollback_prepared(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    state.emitter.update_progress(writer, false);
    two_phase(
        state,
        writer,
        txn,
        TwoPhaseEvent::RollbackPrepared,
        txn.final_lsn(),
    );
}

fn prepared_txn<'a>(txn: Txn<'a>, timestamp: &'a [u8]) -> PreparedTxn<'a> {
    PreparedTxn {
        xid: txn.xid(),
        gid: txn.gid(),
        end_lsn: txn.end_lsn(),
        timestamp,
        time: txn.commit_time(),
        changes: 0,
    }
}

fn two_phase(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    event: TwoPhaseEvent,
    lsn: u64,
) {
    let timestamp = timestamptz_text(txn.commit_time());
    let prepared = prepared_txn(txn, &timestamp);
    // The transaction was counted at its PREPARE.
    state.emitter.write(writer, None, |format, sink| {
        format.two_phase(sink, event, &prepared, lsn)
    });
}
