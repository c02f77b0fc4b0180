//! Transaction bookkeeping and writing: the output sink the formats write
//! into, progress updates, deferred BEGIN (and its streamed-block twin), the
//! per-change memory context.

use pgrx::prelude::*;

use crate::model::TxnInfo;
use crate::output::format::Sink;
use crate::pg::handles::{Txn, Writer};
use crate::pg::port::{current_timestamp, timestamptz_text};
use crate::pg::server_encoding::OutputText;
use crate::plugin::state::{DecodingState, Transactions, TxnState};

/// The output not yet handed to PostgreSQL and how it is handed over: one
/// field of the state, so that it can be borrowed beside the format.
pub struct OutputBuffer {
    pub buf: Vec<u8>,
    /// How `buf` is handed over (rewritten as ASCII outside UTF-8).
    pub text: OutputText,
    /// Bytes handed over since the statistics were last published.
    pub bytes_written: u64,
}

impl OutputBuffer {
    pub fn for_database() -> Self {
        OutputBuffer {
            buf: Vec::with_capacity(8192),
            text: OutputText::for_database(),
            bytes_written: 0,
        }
    }

    /// The sink a format writes into through `writer`, charging the bytes
    /// to `txn_bytes` (the record of the transaction they belong to; `None`:
    /// output of no transaction, e.g. a non-transactional message).
    pub fn output<'s, 'w>(
        &'s mut self,
        writer: &'s mut Writer<'w>,
        txn_bytes: Option<&'s mut u64>,
    ) -> Output<'s, 'w> {
        Output {
            buffer: self,
            writer,
            txn_bytes,
        }
    }
}

/// The decoding context's writer behind the formats' [`Sink`]: each write
/// hands the buffer to PostgreSQL (rewritten as ASCII outside UTF-8, see
/// [`OutputText`]) and counts the bytes handed over (`Output::count`): the
/// statistics' JSON bytes.
pub struct Output<'s, 'w> {
    buffer: &'s mut OutputBuffer,
    writer: &'s mut Writer<'w>,
    txn_bytes: Option<&'s mut u64>,
}

impl Output<'_, '_> {
    fn count(&mut self, written: usize) {
        self.buffer.bytes_written += written as u64;
        if let Some(bytes) = self.txn_bytes.as_deref_mut() {
            *bytes += written as u64;
        }
        self.buffer.buf.clear();
    }
}

impl Sink for Output<'_, '_> {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buffer.buf
    }

    fn write(&mut self, last: bool) {
        let message = self.buffer.text.prepare(&mut self.buffer.buf);
        let written = message.len();
        self.writer.write(message, last);
        self.count(written);
    }

    fn write_at(&mut self, lsn: u64) {
        let message = self.buffer.text.prepare(&mut self.buffer.buf);
        let written = message.len();
        self.writer.write_at(message, lsn);
        self.count(written);
    }
}

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

/// A transaction's replay starts (BEGIN, or BEGIN PREPARE): its record.
pub fn start_txn(state: &mut DecodingState, txn: Txn<'_>) {
    let record = TxnState {
        info: TxnInfo {
            xid: txn.xid(),
            origin: txn.origin(),
            timestamp: Vec::new(),
            commit_time: txn.commit_time(),
            final_lsn: txn.final_lsn(),
            end_lsn: txn.end_lsn(),
        },
        first_lsn: txn.first_lsn(),
        replay_start: current_timestamp(),
        ..TxnState::default()
    };
    state.txns.start(txn.xid(), record);
}

/// Renders the commit timestamp (session time zone, ISO style) once per transaction.
pub fn ensure_timestamp(include_timestamp: bool, record: &mut TxnState) {
    if !include_timestamp || record.timestamp_ready {
        return;
    }
    record.info.timestamp = timestamptz_text(record.info.commit_time);
    record.timestamp_ready = true;
}

/// Writes the transaction's BEGIN output (or, inside a streamed block, the
/// block's start) if it has not been written yet. With skip-empty-xacts
/// this runs at the first emitted change: deferred BEGIN.
pub fn ensure_begun(state: &mut DecodingState, writer: &mut Writer<'_>) {
    let Some(record) = state.txns.current() else {
        return;
    };
    if let Some(block) = state.stream_block.as_mut() {
        if block.begun {
            return;
        }
        block.begun = true;
        // "first": the first block of this transaction the consumer sees.
        let first = !record.streamed_output;
        record.streamed_output = true;
        state.format.stream_start(
            &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
            block.xid,
            first,
        );
        return;
    }
    if record.begun {
        return;
    }
    record.begun = true;
    ensure_timestamp(state.opts.include_timestamp, record);
    if state.format.wants_database_name() {
        if let Some(name) = crate::pg::port::database_name() {
            state.format.database_name(&name);
        }
    }
    state.format.begin(
        &mut state.sink.output(writer, Some(&mut record.bytes_emitted)),
        &record.info,
        record.first_lsn,
    );
}

/// An item of the current transaction (a change, a truncated table, a
/// transactional message) is about to be written: its BEGIN (or block
/// start) first, its timestamp, and the counts.
pub fn begin_item(state: &mut DecodingState, writer: &mut Writer<'_>) {
    ensure_begun(state, writer);
    state.stats.changes_emitted += 1;
    if let Some(record) = state.txns.current() {
        ensure_timestamp(state.opts.include_timestamp, record);
        record.items_emitted += 1;
    }
}

/// The record of the transaction whose item is being written.
pub fn current_txn(txns: &mut Transactions) -> &mut TxnState {
    match txns.current() {
        Some(record) => record,
        None => {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "pubjson: a change was delivered outside its transaction"
            );
        }
    }
}
