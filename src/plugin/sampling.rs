//! Sampling the reorder buffer for the live view (`stats/live.rs` decides
//! when; this module reads the buffer and publishes). Safe code: the
//! callback shims call it from `filter_by_origin_cb` and from the WAL
//! reader's page callback.

use std::collections::HashSet;

use crate::pg::output::Writer;
use crate::pg::port::{current_timestamp, my_pid};
use crate::pg::reorder::Reorder;
use crate::plugin::state::DecodingState;
use crate::stats;
use pubjson_core::stats::live;

/// A change is about to be queued: sample if the last sample is old enough.
pub fn change_decoded(state: &mut DecodingState, writer: &Writer<'_>) {
    if let Some(now) = state.live.change_due(current_timestamp) {
        sample(state, writer, now);
    }
}

/// The decoder has read all the WAL there is: sample if anything changed
/// since the last sample, so the view stays right while it waits.
pub fn caught_up(state: &mut DecodingState, writer: &Writer<'_>) {
    let reorder = Reorder::of(writer);
    state.live_scratch.clear();
    reorder.pending(&mut state.live_scratch);
    let shape = live::shape(reorder.size(), &state.live_scratch);
    if state.live.caught_up_due(shape) {
        publish(state, reorder.size(), current_timestamp());
    }
}

fn sample(state: &mut DecodingState, writer: &Writer<'_>, now: i64) {
    let reorder = Reorder::of(writer);
    state.live_scratch.clear();
    reorder.pending(&mut state.live_scratch);
    publish(state, reorder.size(), now);
}

/// Publishes the transactions in `state.live_scratch`.
fn publish(state: &mut DecodingState, reorder_buffer_bytes: u64, now: i64) {
    if state.slot.name().is_empty() {
        return;
    }
    // Records of transactions PostgreSQL discarded without a callback go.
    let pending: HashSet<u32> = state.live_scratch.iter().map(|t| t.xid).collect();
    state.emitter.records().retain_pending(&pending);
    let txns = state.emitter.records();
    let view = state.live.sample(
        now,
        my_pid(),
        reorder_buffer_bytes,
        &state.live_scratch,
        |xid| txns.changes_streamed(xid),
    );
    stats::publish_live(&state.slot, &view);
}

/// The decoding session ends (normally; after an ERROR readers recognise
/// the view as stale: its owner no longer decodes the slot).
pub fn session_ended(state: &DecodingState) {
    if !state.slot.name().is_empty() {
        stats::end_live(&state.slot, my_pid());
    }
}
