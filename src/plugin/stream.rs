//! Transactions: BEGIN and COMMIT, streamed in-progress transactions (block
//! start and stop, abort, commit) and two-phase commit (PREPARE, COMMIT
//! PREPARED, ROLLBACK PREPARED). The objects are the format's; this module
//! decides when each is due and keeps the books.

use crate::output::format::PreparedTxn;
use crate::pg::handles::{Txn, Writer};
use crate::pg::port::timestamptz_text;
use crate::plugin::state::{DecodingState, StreamBlock};
use crate::plugin::txn::{ensure_begun, output, start_txn, update_progress};

/// A committed transaction's replay starts.
pub fn begin(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    start_txn(state, txn);
    if !state.opts.skip_empty_xacts {
        ensure_begun(state, writer);
    }
}

/// A committed transaction's replay ends.
pub fn commit(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>, commit_lsn: u64) {
    let emitted = state.txn.begun;
    update_progress(state, writer, !emitted);
    if emitted {
        state
            .format
            .commit(output!(state, writer), &state.txn.info, commit_lsn);
    }
    // Without a BEGIN (deferred and never due) the transaction leaves no trace.
    state.finish_txn_stats(txn);
}

/// A block of an in-progress transaction starts.
pub fn stream_start(state: &mut DecodingState, writer: &mut Writer<'_>, txn: Txn<'_>) {
    let xid = txn.xid();
    state.txn.info.xid = xid;
    state.txn.info.origin = txn.origin();
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
        state.format.stream_stop(output!(state, writer), block.xid);
    }
}

/// A streamed transaction, or one of its subtransactions, aborted.
pub fn stream_abort(
    state: &mut DecodingState,
    writer: &mut Writer<'_>,
    txn: Txn<'_>,
    abort_lsn: u64,
) {
    let top = txn.top_xid();
    let xid = txn.xid();
    let emitted = state.streamed_with_output.contains(&top);
    if xid == top {
        state.streamed_with_output.remove(&top);
    }
    update_progress(state, writer, !emitted);
    if emitted || !state.opts.skip_empty_xacts {
        state
            .format
            .stream_abort(output!(state, writer), top, xid, abort_lsn);
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
    let emitted = state.streamed_with_output.remove(&xid);
    update_progress(state, writer, !emitted);
    state.stats.streamed_txns += 1;
    // Streamed changes were counted block by block.
    state.txn.items_emitted = emitted as u64;
    if emitted || !state.opts.skip_empty_xacts {
        let timestamp = timestamptz_text(txn.commit_time());
        state.format.stream_commit(
            output!(state, writer),
            xid,
            commit_lsn,
            txn.end_lsn(),
            &timestamp,
            txn.commit_time(),
        );
    }
    state.finish_txn_stats(txn);
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
    let emitted = streamed && state.streamed_with_output.remove(&txn.xid());
    update_progress(state, writer, false);
    let timestamp = timestamptz_text(txn.commit_time());
    let prepared = prepared_txn(txn, &timestamp);
    state
        .format
        .prepare(output!(state, writer), &prepared, prepare_lsn, streamed);
    if streamed {
        state.stats.streamed_txns += 1;
        // Streamed changes were counted block by block.
        state.txn.items_emitted = emitted as u64;
    }
    state.stats.prepared_txns += 1;
    state.finish_txn_stats(txn);
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

use crate::output::control::TwoPhaseEvent;

fn prepared_txn<'a>(txn: Txn<'a>, timestamp: &'a [u8]) -> PreparedTxn<'a> {
    PreparedTxn {
        xid: txn.xid(),
        gid: txn.gid(),
        end_lsn: txn.end_lsn(),
        timestamp,
        time: txn.commit_time(),
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
    state
        .format
        .two_phase(output!(state, writer), event, &prepared, lsn);
}
