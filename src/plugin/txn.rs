//! Transaction bookkeeping and writing: the output sink the formats write
//! into, progress updates, deferred BEGIN (and its streamed-block twin), the
//! per-change memory context.

use crate::model::TxnInfo;
use crate::output::format::Sink;
use crate::pg::handles::{Txn, Writer};
use crate::pg::port::{current_timestamp, timestamptz_text};
use crate::pg::server_encoding::OutputText;
use crate::plugin::state::DecodingState;
use crate::stats::Counters;

/// The decoding context's writer behind the formats' [`Sink`]: each write
/// hands the buffer to PostgreSQL (rewritten as ASCII outside UTF-8, see
/// [`OutputText`]) and counts the bytes handed over.
pub struct Output<'s, 'w> {
    pub buf: &'s mut Vec<u8>,
    pub text: &'s mut OutputText,
    pub writer: &'s mut Writer<'w>,
    pub stats: &'s mut Counters,
    pub txn_bytes: &'s mut u64,
}

impl Output<'_, '_> {
    fn count(&mut self, written: usize) {
        self.stats.bytes_emitted += written as u64;
        *self.txn_bytes += written as u64;
        self.buf.clear();
    }
}

impl Sink for Output<'_, '_> {
    fn buf(&mut self) -> &mut Vec<u8> {
        self.buf
    }

    fn write(&mut self, last: bool) {
        let bytes = self.text.prepare(self.buf);
        self.writer.write(bytes, last);
        let written = bytes.len();
        self.count(written);
    }

    fn write_at(&mut self, lsn: u64) {
        let bytes = self.text.prepare(self.buf);
        self.writer.write_at(bytes, lsn);
        let written = bytes.len();
        self.count(written);
    }
}

/// The [`Output`] of a state: a macro, so that the format (another field of
/// the state) can be borrowed beside it.
macro_rules! output {
    ($state:expr, $writer:expr) => {
        &mut $crate::plugin::txn::Output {
            buf: &mut $state.out,
            text: &mut $state.output_text,
            writer: &mut *$writer,
            stats: &mut $state.stats,
            txn_bytes: &mut $state.txn.bytes_emitted,
        }
    };
}
pub(crate) use output;

/// Lets the walsender send keepalives during long runs of changes that
/// produce no output (PostgreSQL 15 leaves this to the plugin).
pub fn update_progress(state: &mut DecodingState, writer: &mut Writer<'_>, skipped_xact: bool) {
    #[cfg(feature = "pg15")]
    {
        state.changes_since_progress += 1;
        if writer.end_xact() || state.changes_since_progress >= 100 {
            writer.update_progress(skipped_xact);
            state.changes_since_progress = 0;
        }
    }
    #[cfg(not(feature = "pg15"))]
    let _ = (state, writer, skipped_xact);
}

/// Remembers the transaction's facts when its replay starts.
pub fn start_txn(state: &mut DecodingState, txn: Txn<'_>) {
    state.txn.info = TxnInfo {
        xid: txn.xid(),
        origin: txn.origin(),
        timestamp: std::mem::take(&mut state.txn.info.timestamp),
        commit_time: txn.commit_time(),
        final_lsn: txn.final_lsn(),
        end_lsn: txn.end_lsn(),
    };
    state.txn.first_lsn = txn.first_lsn();
    state.txn.commit_time = txn.commit_time();
    state.txn.info.timestamp.clear();
    state.txn.timestamp_ready = false;
    state.txn.begun = false;
    state.txn.changes_seen = 0;
    state.txn.items_emitted = 0;
    state.txn.bytes_emitted = 0;
    state.txn.replay_start = current_timestamp();
}

/// Renders the commit timestamp (session time zone, ISO style) once per transaction.
pub fn ensure_timestamp(state: &mut DecodingState) {
    if !state.opts.include_timestamp || state.txn.timestamp_ready {
        return;
    }
    state.txn.info.timestamp = timestamptz_text(state.txn.commit_time);
    state.txn.timestamp_ready = true;
}

/// Writes the transaction's BEGIN output (or, inside a streamed block, the
/// block's start) if it has not been written yet. With skip-empty-xacts
/// this runs at the first emitted change: deferred BEGIN.
pub fn ensure_begun(state: &mut DecodingState, writer: &mut Writer<'_>) {
    if let Some(block) = state.stream_block.as_mut() {
        if block.begun {
            return;
        }
        block.begun = true;
        let xid = block.xid;
        // "first": the first block of this transaction the consumer sees.
        let first = state.streamed_with_output.insert(xid);
        state
            .format
            .stream_start(output!(state, writer), xid, first);
        return;
    }
    if state.txn.begun {
        return;
    }
    state.txn.begun = true;
    ensure_timestamp(state);
    let first_lsn = state.txn.first_lsn;
    state
        .format
        .begin(output!(state, writer), &state.txn.info, first_lsn);
}
