//! Transactions: BEGIN and COMMIT, streamed in-progress transactions (block
//! start and stop, abort, commit) and two-phase commit (PREPARE, COMMIT
//! PREPARED, ROLLBACK PREPARED). The objects are the format's; this module
//! decides when each is due and keeps the books.

use crate::pg::handles::{Txn, Writer};
use crate::pg::port::{current_timestamp, timestamptz_text};
use crate::plugin::state::{DecodingState, StreamBlock};
use crate::plugin::txn::{ensure_begun, start_txn, update_progress};
use pubjson_core::output::control::TwoPhaseEvent;
use pubjson_core::output::format::{PreparedTxn, StreamedCommit};

/// A committed transaction's replay starts.
pub fn begin(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    start_txn(state, txn);
    if !state.opts.skip_empty_xacts {
        ensure_begun(state, writer);
    }
}

/// A committed transaction's replay ends.
pub fn commit(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>, commit_lsn: u64) {
    let mut record = state.txns.finish(txn.xid()).unwrap_or_default();
    let emitted = record.begun;
    update_progress(state, writer, !emitted);
    if emitted {
        state.format.commit(
            &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
            &record.info,
            commit_lsn,
            record.items_emitted,
        );
    }
    // Without a BEGIN (deferred and never due) the transaction leaves no trace.
    let produced = record.items_emitted > 0;
    state.finish_txn_stats(txn, &record, produced);
}

/// A block of an in-progress transaction starts.
pub fn stream_start(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    let xid = txn.xid();
    let record = state.txns.enter_block(xid, current_timestamp());
    record.info.xid = xid;
    record.info.origin = txn.origin();
    state.stream_block = Some(StreamBlock { xid, begun: false });
    if !state.opts.skip_empty_xacts {
        ensure_begun(state, writer);
    }
}

/// The block ends.
pub fn stream_stop(state: &mut DecodingState, writer: &mut Writer<'_>) {
    let Some(block) = state.stream_block.take() else {
        return;
    };
    if block.begun {
        let bytes = state.txns.current().map(|r| &mut r.bytes_emitted);
        state
            .format
            .stream_stop(&mut state.sink.output(writer, bytes), block.xid);
    }
    state.txns.leave();
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
    let mut ended = if xid == top {
        state.txns.finish(top)
    } else {
        None
    };
    let emitted = match &ended {
        Some(record) => record.streamed_output,
        None => state.txns.get(top).is_some_and(|r| r.streamed_output),
    };
    update_progress(state, writer, !emitted);
    if emitted || !state.opts.skip_empty_xacts {
        let bytes = match ended.as_mut() {
            Some(record) => Some(&mut record.bytes_emitted),
            None => state.txns.get(top).map(|r| &mut r.bytes_emitted),
        };
        state
            .format
            .stream_abort(&mut state.sink.output(writer, bytes), top, xid, abort_lsn);
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
    let mut record = state.txns.finish(xid).unwrap_or_default();
    let emitted = record.streamed_output;
    update_progress(state, writer, !emitted);
    state.stats.streamed_txns += 1;
    if emitted || !state.opts.skip_empty_xacts {
        let timestamp = timestamptz_text(txn.commit_time());
        let commit = StreamedCommit {
            xid,
            commit_lsn,
            end_lsn: txn.end_lsn(),
            timestamp: &timestamp,
            commit_time: txn.commit_time(),
            changes: record.items_emitted,
        };
        state.format.stream_commit(
            &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
            &commit,
        );
    }
    state.finish_txn_stats(txn, &record, emitted);
}

/// A transaction being decoded at PREPARE time starts. Prepared
/// transactions are never skipped as empty (as in pgoutput): after a restart
/// the plugin could not tell whether the COMMIT PREPARED it is about to send
/// belongs to a transaction the consumer has seen.
pub fn begin_prepare(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    start_txn(state, txn);
    ensure_begun(state, writer);
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
    let mut record = state.txns.finish(txn.xid()).unwrap_or_default();
    update_progress(state, writer, false);
    let timestamp = timestamptz_text(txn.commit_time());
    let prepared = PreparedTxn {
        changes: record.items_emitted,
        ..prepared_txn(txn, &timestamp)
    };
    state.format.prepare(
        &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
        &prepared,
        prepare_lsn,
        streamed,
    );
    let emitted = if streamed {
        state.stats.streamed_txns += 1;
        record.streamed_output
    } else {
        record.items_emitted > 0
    };
    state.stats.prepared_txns += 1;
    state.finish_txn_stats(txn, &record, emitted);
}

/// COMMIT PREPARED.
pub fn commit_prepared(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    commit_lsn: u64,
) {
    update_progress(state, writer, false);
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
    update_progress(state, writer, false);
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
    state
        .format
        .two_phase(&mut state.sink.output(writer, None), event, &prepared, lsn);
}
