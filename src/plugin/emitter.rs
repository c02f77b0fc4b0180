//! What a decoding session writes, and when: the output format, the buffer
//! it writes into (handed to PostgreSQL by `pg::output`), the record of
//! each transaction being delivered, the deferred BEGIN (and its
//! streamed-block twin) and the progress updates of PostgreSQL 15. Every
//! write goes through [`Emitter::write`], which charges its bytes to the
//! transaction they belong to.

use pubjson_core::model::TxnInfo;
use pubjson_core::options::Options;
use pubjson_core::output::format::{OutputFormat, Sink};

use crate::pg::error;
use crate::pg::handles::Txn;
use crate::pg::output::{OutputBuffer, Writer};
use crate::pg::port::{current_timestamp, timestamptz_text};
use crate::plugin::txn_records::{Transactions, TxnState};

/// A block of an in-progress transaction being streamed.
struct StreamBlock {
    /// The top-level transaction.
    xid: u32,
    /// The block's start has been written (deferred like BEGIN).
    begun: bool,
}

pub struct Emitter {
    /// The output format, chosen once from the options.
    format: Box<dyn OutputFormat>,
    /// Output not yet handed to PostgreSQL.
    buffer: OutputBuffer,
    /// The transactions begun or streamed, by top-level xid.
    txns: Transactions,
    /// The streamed block being decoded, if any.
    block: Option<StreamBlock>,
    skip_empty_xacts: bool,
    include_timestamp: bool,
    /// Items written since the statistics were last published.
    items_written: u64,
    /// Changes since the last progress update (PG15's keepalive logic;
    /// PostgreSQL 16+ updates progress itself).
    #[cfg(feature = "pg15")]
    changes_since_progress: u32,
}

impl Emitter {
    pub fn new(format: Box<dyn OutputFormat>, opts: &Options) -> Self {
        Emitter {
            format,
            buffer: OutputBuffer::for_database(),
            txns: Transactions::default(),
            block: None,
            skip_empty_xacts: opts.skip_empty_xacts,
            include_timestamp: opts.include_timestamp,
            items_written: 0,
            #[cfg(feature = "pg15")]
            changes_since_progress: 0,
        }
    }

    pub fn format(&self) -> &dyn OutputFormat {
        &*self.format
    }

    /// The records of the transactions being delivered.
    pub fn records(&mut self) -> &mut Transactions {
        &mut self.txns
    }

    /// Bytes handed to PostgreSQL and items written since the last call
    /// (for the statistics' `bytes_emitted` and `changes_emitted`).
    pub fn take_written(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.buffer.bytes_written),
            std::mem::take(&mut self.items_written),
        )
    }

    /// Hands what `f` writes with the format to PostgreSQL, charging its
    /// bytes to `txn_bytes` (the record of the transaction they belong to;
    /// `None`: output of no transaction).
    pub fn write<R>(
        &mut self,
        writer: &mut Writer<'_>,
        txn_bytes: Option<&mut u64>,
        f: impl FnOnce(&mut dyn OutputFormat, &mut dyn Sink) -> R,
    ) -> R {
        f(
            &mut *self.format,
            &mut self.buffer.output(writer, txn_bytes),
        )
    }

    /// Writes an item of no transaction (a non-transactional message).
    pub fn item_outside<R>(
        &mut self,
        writer: &mut Writer<'_>,
        f: impl FnOnce(&mut dyn OutputFormat, &mut dyn Sink) -> R,
    ) -> R {
        self.items_written += 1;
        self.write(writer, None, f)
    }

    /// [`Self::write`], charged to the transaction being delivered, if any.
    pub fn write_current<R>(
        &mut self,
        writer: &mut Writer<'_>,
        f: impl FnOnce(&mut dyn OutputFormat, &mut dyn Sink) -> R,
    ) -> R {
        let bytes = self.txns.current().map(|r| &mut r.bytes_emitted);
        f(&mut *self.format, &mut self.buffer.output(writer, bytes))
    }

    /// Lets the walsender send keepalives during long runs of changes that
    /// produce no output (PostgreSQL 15 leaves this to the plugin).
    pub fn update_progress(&mut self, writer: &mut Writer<'_>, skipped_xact: bool) {
        #[cfg(feature = "pg15")]
        {
            self.changes_since_progress += 1;
            if writer.end_xact() || self.changes_since_progress >= 100 {
                writer.update_progress(skipped_xact);
                self.changes_since_progress = 0;
            }
        }
        #[cfg(not(feature = "pg15"))]
        let _ = (writer, skipped_xact);
    }

    /// A transaction's replay starts (BEGIN, or BEGIN PREPARE): its record;
    /// its BEGIN is written at once unless `deferrable` and skip-empty-xacts
    /// defers it to its first item.
    pub fn start_txn(&mut self, writer: &mut Writer<'_>, txn: Txn<'_>, deferrable: bool) {
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
        self.txns.start(txn.xid(), record);
        if !(deferrable && self.skip_empty_xacts) {
            self.ensure_begun(writer);
        }
    }

    /// A block of in-progress `txn` starts; its start is written at once
    /// unless skip-empty-xacts defers it to its first item.
    pub fn enter_block(&mut self, writer: &mut Writer<'_>, txn: Txn<'_>) {
        let xid = txn.xid();
        let record = self.txns.enter_block(xid, current_timestamp());
        record.info.xid = xid;
        record.info.origin = txn.origin();
        self.block = Some(StreamBlock { xid, begun: false });
        if !self.skip_empty_xacts {
            self.ensure_begun(writer);
        }
    }

    /// The block ends: its end is written if its start was.
    pub fn leave_block(&mut self, writer: &mut Writer<'_>) {
        let Some(block) = self.block.take() else {
            return;
        };
        if block.begun {
            self.write_current(writer, |format, sink| format.stream_stop(sink, block.xid));
        }
        self.txns.leave();
    }

    /// Whether streamed changes are being delivered (inside a block).
    pub fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// Whether a transaction that wrote nothing is still reported
    /// (skip-empty-xacts off).
    pub fn reports_empty(&self) -> bool {
        !self.skip_empty_xacts
    }

    /// Renders the commit timestamp (session time zone, ISO style) once
    /// per transaction.
    fn ensure_timestamp(include_timestamp: bool, record: &mut TxnState) {
        if !include_timestamp || record.timestamp_ready {
            return;
        }
        record.info.timestamp = timestamptz_text(record.info.commit_time);
        record.timestamp_ready = true;
    }

    /// Writes the transaction's BEGIN output (or, inside a streamed block,
    /// the block's start) if it has not been written yet. With
    /// skip-empty-xacts this runs at the first emitted item: deferred
    /// BEGIN.
    fn ensure_begun(&mut self, writer: &mut Writer<'_>) {
        let Some(record) = self.txns.current() else {
            return;
        };
        if let Some(block) = self.block.as_mut() {
            if block.begun {
                return;
            }
            block.begun = true;
            // "first": the first block of this transaction the consumer sees.
            let first = !record.streamed_output;
            record.streamed_output = true;
            self.format.stream_start(
                &mut self.buffer.output(writer, Some(&mut record.bytes_emitted)),
                block.xid,
                first,
            );
            return;
        }
        if record.begun {
            return;
        }
        record.begun = true;
        Self::ensure_timestamp(self.include_timestamp, record);
        // A format that writes the database's name and could not read it
        // at startup (a walsender's has no transaction) gets it now.
        if self.format.wants_database_name() {
            if let Some(name) = crate::pg::port::database_name() {
                self.format.database_name(&name);
            }
        }
        self.format.begin(
            &mut self.buffer.output(writer, Some(&mut record.bytes_emitted)),
            &record.info,
            record.first_lsn,
        );
    }

    /// Writes an item of the transaction being delivered (a change, a
    /// truncated table, a transactional message, a DDL event, a backfill
    /// marker): its BEGIN (or block start) first, when not written yet;
    /// then what `f` writes, given the transaction's facts. Counts the item
    /// and its bytes, in the transaction's record and for the statistics.
    pub fn item<R>(
        &mut self,
        writer: &mut Writer<'_>,
        f: impl FnOnce(&mut dyn OutputFormat, &mut dyn Sink, &TxnInfo) -> R,
    ) -> R {
        self.ensure_begun(writer);
        let Some(record) = self.txns.current() else {
            error::internal("pubjson: a change was delivered outside its transaction");
        };
        Self::ensure_timestamp(self.include_timestamp, record);
        record.items_emitted += 1;
        self.items_written += 1;
        f(
            &mut *self.format,
            &mut self.buffer.output(writer, Some(&mut record.bytes_emitted)),
            &record.info,
        )
    }
}
