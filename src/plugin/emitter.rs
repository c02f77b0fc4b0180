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
use crate::pg::port::{current_timestamp, timestamptz_text, transaction_rolled_back};
use crate::plugin::txn_records::{Transactions, TxnState};

/// A block of an in-progress transaction being streamed.
struct StreamBlock {
    /// The top-level transaction.
    xid: u32,
    /// The block's start has been written (deferred like BEGIN).
    begun: bool,
}

/// Where the item being written started. PostgreSQL catches the ERROR
/// that cuts an item short when its transaction rolls back while it is
/// decoded at PREPARE or streamed (a catalog lookup fails: "concurrent
/// abort", ReorderBufferProcessTXN) and goes on with the transaction's
/// end, so what the item had written must go (see
/// [`Emitter::recover_interrupted_item`]).
struct ItemMark {
    buf_len: usize,
    /// `OutputBuffer::writes` then: a write since emptied the buffer.
    writes: u64,
    items_emitted: u64,
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
    /// The item being written, until it is complete.
    open_item: Option<ItemMark>,
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
            open_item: None,
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
    ///
    /// `None`, and nothing written, for a transaction decoded at PREPARE
    /// that has rolled back since: what PostgreSQL still delivers of it
    /// depends on what this session's caches hold (a catalog lookup for it
    /// fails), so every session writes none of it, and its `P` counts
    /// what was written before the rollback.
    pub fn item<R>(
        &mut self,
        writer: &mut Writer<'_>,
        f: impl FnOnce(&mut dyn OutputFormat, &mut dyn Sink, &TxnInfo) -> R,
    ) -> Option<R> {
        let rolled_back = |r: &mut TxnState| r.prepared && transaction_rolled_back(r.info.xid);
        if self.txns.current().is_some_and(rolled_back) {
            return None;
        }
        self.ensure_begun(writer);
        let Some(record) = self.txns.current() else {
            error::internal("pubjson: a change was delivered outside its transaction");
        };
        Self::ensure_timestamp(self.include_timestamp, record);
        self.open_item = Some(ItemMark {
            buf_len: self.buffer.buf.len(),
            writes: self.buffer.writes,
            items_emitted: record.items_emitted,
        });
        record.items_emitted += 1;
        self.items_written += 1;
        let written = f(
            &mut *self.format,
            &mut self.buffer.output(writer, Some(&mut record.bytes_emitted)),
            &record.info,
        );
        self.open_item = None;
        Some(written)
    }

    /// Takes back an item that an ERROR cut short (see [`ItemMark`]): its
    /// bytes not yet handed over, its count, and what the format noted.
    /// Called as every callback starts; the ERROR cannot have been any
    /// other, since any other ends the decoding session and its state.
    pub fn recover_interrupted_item(&mut self) {
        let Some(mark) = self.open_item.take() else {
            return;
        };
        if self.buffer.writes == mark.writes {
            self.buffer.buf.truncate(mark.buf_len);
        } else {
            // Handed over up to a complete object of the item (format 3's
            // batch was full after an R object): the rest is the item's.
            self.buffer.buf.clear();
        }
        if let Some(record) = self.txns.current() {
            record.items_emitted = mark.items_emitted;
        }
        self.items_written = self.items_written.saturating_sub(1);
        self.format.item_interrupted();
    }
}
