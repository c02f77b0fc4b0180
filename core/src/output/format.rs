//! The output format: chosen once per decoding session
//! ([`crate::output::format_for`]),
//! it owns everything about the bytes: the framing of transactions,
//! changes, truncates, messages, streamed blocks and two-phase events, and
//! when the buffered output is handed to PostgreSQL (its flush policy).
//!
//! The decoding core calls an [`OutputFormat`] for every event and never
//! asks which format it is. Adding a format means a module implementing
//! [`OutputFormat`] and one arm in [`crate::output::format_for`].
//!
//! Pure code: the formats write into a [`Sink`], which the decoding core
//! backs with PostgreSQL's output writer (and the tests with a vector).

use crate::model::{
    BackfillMarker, ChangeHeader, ChangeKind, EncodeError, RelationMeta, TupleValues, TxnInfo,
};
use crate::output::control::{self, TwoPhaseEvent};
use crate::protocol::ddl::DdlEvent;
pub use crate::rules::route::FormatEvents;

/// Where a format writes.
pub trait Sink {
    /// The output being built, not yet handed to PostgreSQL.
    fn buf(&mut self) -> &mut Vec<u8>;
    /// Hands the buffer to PostgreSQL as one write; `last` ends the output
    /// message (false: format 1's large documents, written in pieces).
    fn write(&mut self, last: bool);
    /// `write(true)`, the write reported at `lsn` (a deferred BEGIN carries
    /// the transaction's first LSN).
    fn write_at(&mut self, lsn: u64);
}

pub use crate::model::{RelationRender, TypeName, TypeRendering};

/// The largest output buffer a format keeps after a transaction; format 1
/// also writes a transaction's document in pieces past this many bytes
/// (split between two changes), so a huge transaction never hits
/// PostgreSQL's 1 GB allocation limit.
pub const FLUSH_BYTES: usize = 16 * 1024 * 1024;

/// The typed formats' reason to leave a change out: a row it must show
/// and did not get (an INSERT or UPDATE without its new tuple, a DELETE
/// without its old key), in wal2json's words: [`Format::skip_reason`]
/// unless a format says otherwise (formats 1 and 2 do).
#[inline]
pub fn missing_tuple_reason(
    kind: ChangeKind,
    rel: &RelationMeta,
    has_new: bool,
    has_old: bool,
) -> Option<String> {
    let what = match kind {
        ChangeKind::Insert | ChangeKind::Update if !has_new => "no tuple data for",
        ChangeKind::Delete if !has_old => "no tuple identifier for",
        _ => return None,
    };
    Some(format!(
        "{what} {} in table {}",
        kind.command(),
        crate::text::encoding::qualified_name(rel)
    ))
}

/// Drops an output buffer that a large transaction grew past
/// [`FLUSH_BYTES`], once its content has been written.
pub fn shrink_after_transaction(buf: &mut Vec<u8>) {
    if buf.capacity() > FLUSH_BYTES {
        *buf = Vec::with_capacity(8192);
    }
}

/// One INSERT/UPDATE/DELETE as the formats see it.
pub struct ChangeContext<'a> {
    pub txn: &'a TxnInfo,
    /// The change's LSN.
    pub lsn: u64,
    pub header: &'a ChangeHeader,
    pub rel: &'a RelationMeta,
    /// The format's renderings of `rel`.
    pub render: &'a RelationRender,
    pub new: Option<&'a dyn TupleValues>,
    pub old: Option<&'a dyn TupleValues>,
}

/// A prepared transaction, as two-phase objects describe it.
pub struct PreparedTxn<'a> {
    pub xid: u32,
    pub gid: &'a [u8],
    pub end_lsn: u64,
    /// The prepare or commit time, as `timestamptz_to_str` prints it.
    pub timestamp: &'a [u8],
    /// The same time (microseconds since 2000-01-01 UTC).
    pub time: i64,
    /// At PREPARE: the items emitted for it (see [`OutputFormat::commit`]);
    /// 0 for COMMIT PREPARED and ROLLBACK PREPARED.
    pub changes: u64,
}

/// A streamed transaction's commit.
pub struct StreamedCommit<'a> {
    pub xid: u32,
    pub commit_lsn: u64,
    pub end_lsn: u64,
    /// The commit time, as `timestamptz_to_str` prints it.
    pub timestamp: &'a [u8],
    /// The same time (microseconds since 2000-01-01 UTC).
    pub commit_time: i64,
    /// The items emitted for it across its blocks (see
    /// [`OutputFormat::commit`]).
    pub changes: u64,
}

/// A table a DDL event describes: its new description, and which of its
/// columns the consumer is shown (a publication's column list).
pub struct DdlTable<'a> {
    pub rel: &'a RelationMeta,
    pub visible: &'a [bool],
}

/// One output format: the events of a decoding session, in order.
pub trait OutputFormat {
    /// How column types are named and classified (read by the catalog reader).
    fn type_rendering(&self) -> TypeRendering;

    /// What the format writes beyond rows and messages: the routing
    /// decision leaves out the events it has no object for.
    fn events(&self) -> FormatEvents;

    /// Whether the format writes the database's name and does not know it
    /// yet: the core then passes it ([`Self::database_name`]) as soon as
    /// it can read the catalog.
    fn wants_database_name(&self) -> bool {
        false
    }

    /// The current database's name.
    fn database_name(&mut self, _name: &[u8]) {}

    /// A transaction's first output (deferred to its first emitted item with
    /// skip-empty-xacts).
    fn begin(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, first_lsn: u64);

    /// The end of a transaction that has begun; `changes`: the items
    /// (changes, truncated tables, transactional messages) emitted for it,
    /// as the core's record of the transaction counts them.
    fn commit(&mut self, sink: &mut dyn Sink, txn: &TxnInfo, commit_lsn: u64, changes: u64);

    /// Why the format leaves a change out (wal2json's WARNING), if it does:
    /// by default the typed formats' rule, [`missing_tuple_reason`].
    fn skip_reason(
        &self,
        kind: ChangeKind,
        rel: &RelationMeta,
        has_new: bool,
        has_old: bool,
    ) -> Option<String> {
        missing_tuple_reason(kind, rel, has_new, has_old)
    }

    /// One INSERT/UPDATE/DELETE that [`Self::skip_reason`] let through.
    /// Returns a WARNING to raise after it is written.
    fn change(
        &mut self,
        sink: &mut dyn Sink,
        change: &ChangeContext<'_>,
    ) -> Result<Option<String>, EncodeError>;

    /// One truncated relation ([`FormatEvents::truncate`]).
    fn truncate(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        stream_xid: Option<u32>,
        lsn: u64,
        rel: &RelationMeta,
    );

    /// A logical decoding message; `txn` matters only when `transactional`.
    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        sink: &mut dyn Sink,
        txn: &TxnInfo,
        transactional: bool,
        stream_xid: Option<u32>,
        lsn: u64,
        prefix: &[u8],
        content: &[u8],
    );

    /// The start or the end of a relation's backfill
    /// ([`FormatEvents::backfill`]): the backfilled rows between them
    /// arrive through [`Self::change`] with
    /// [`ChangeSource::Backfill`](crate::model::ChangeSource).
    fn backfill_marker(
        &mut self,
        _sink: &mut dyn Sink,
        _stream_xid: Option<u32>,
        _rel: &RelationMeta,
        _marker: BackfillMarker,
    ) {
    }

    /// A DDL event ([`FormatEvents::ddl`]) of the transaction being
    /// decoded, with the tables it describes.
    fn ddl(
        &mut self,
        _sink: &mut dyn Sink,
        _stream_xid: Option<u32>,
        _lsn: u64,
        _event: &DdlEvent,
        _tables: &[DdlTable<'_>],
    ) {
    }

    /// The item being written (a change, a truncated table, a message, a
    /// DDL event) was cut short by an ERROR that PostgreSQL caught: its
    /// transaction rolled back while it was decoded at PREPARE or streamed.
    /// The core has taken back the item's bytes not yet handed over; the
    /// format forgets whatever it noted as written for the item (format
    /// 3: the R objects it may have written before it).
    fn item_interrupted(&mut self) {}

    /// A streamed block's first output; `first` when it is the first block
    /// of the transaction the consumer sees.
    fn stream_start(&mut self, sink: &mut dyn Sink, xid: u32, first: bool);

    /// The end of a streamed block that has begun.
    fn stream_stop(&mut self, sink: &mut dyn Sink, xid: u32);

    /// A streamed (sub)transaction aborted.
    fn stream_abort(&mut self, sink: &mut dyn Sink, xid: u32, subxid: u32, lsn: u64) {
        control::stream_abort(sink.buf(), xid, subxid, lsn);
        sink.write(true);
    }

    /// A streamed transaction committed.
    fn stream_commit(&mut self, sink: &mut dyn Sink, commit: &StreamedCommit) {
        control::stream_commit(
            sink.buf(),
            commit.xid,
            commit.commit_lsn,
            commit.end_lsn,
            commit.timestamp,
        );
        sink.write(true);
    }

    /// PREPARE TRANSACTION, after the transaction's changes (`streamed`:
    /// they were streamed before).
    fn prepare(&mut self, sink: &mut dyn Sink, txn: &PreparedTxn, lsn: u64, streamed: bool) {
        self.two_phase(sink, TwoPhaseEvent::Prepare { streamed }, txn, lsn);
    }

    /// A `P`, `CP` or `RP` object.
    fn two_phase(
        &mut self,
        sink: &mut dyn Sink,
        event: TwoPhaseEvent,
        txn: &PreparedTxn,
        lsn: u64,
    ) {
        control::two_phase(
            sink.buf(),
            event,
            txn.xid,
            txn.gid,
            lsn,
            txn.end_lsn,
            txn.timestamp,
        );
        sink.write(true);
    }
}
