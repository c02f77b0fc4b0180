//! The plugin's output format, as the relay reads it: each output message
//! becomes broker events, each with where it goes (a table, the
//! transaction or message stream...), its record key, its identity for
//! de-duplication and, on the event that ends a transaction, the position
//! the relay may confirm once every event so far is acknowledged.
//!
//! A format is one implementation of [`Format`]; nothing else in the relay
//! depends on which one runs (format 3, `format3.rs`; Debezium's change
//! events, `debezium.rs`), and [`FormatKind::build`] is the only place that
//! names them. See docs/relay.md "Formats" for what adding one takes.

pub mod debezium;
pub mod format3;

use bytes::Bytes;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// Which output format of the plugin the relay reads (the `format`
/// setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    /// Format 3 (docs/format3.md): the relay names destinations and keys.
    V3,
    /// `format-version` `debezium` (docs/debezium.md): each line names its
    /// own topic, key and value.
    Debezium,
}

impl FormatKind {
    /// The setting's value (`3`, `debezium`).
    pub fn parse(text: &str) -> Option<FormatKind> {
        match text.to_ascii_lowercase().as_str() {
            "3" => Some(FormatKind::V3),
            "debezium" => Some(FormatKind::Debezium),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FormatKind::V3 => "3",
            FormatKind::Debezium => "debezium",
        }
    }

    /// The format's reader for one relay; `kafka`: the destination is
    /// Kafka (format 3 computes record keys only for it).
    pub fn build(self, kafka: bool) -> Box<dyn Format> {
        match self {
            FormatKind::V3 => Box::new(format3::Format3::new(kafka)),
            FormatKind::Debezium => Box::new(debezium::Debezium::new()),
        }
    }
}

/// A table, as the format names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub schema: String,
    pub table: String,
}

/// Where an event goes; the router turns it into a subject or topic (or
/// drops it when its template is not set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// A row change (or truncate, backfill row) of a table.
    Table(TableName),
    /// Transaction boundaries and outcomes (B, C, P, CP, RP, A).
    Transactions,
    /// Logical decoding messages (`pg_logical_emit_message`).
    Messages,
    /// DDL events.
    Ddl,
    /// Relation descriptions (`R`).
    Relations,
    /// A destination the format names itself (the Debezium format's
    /// topic), interned by the format: Kafka's topic as it is, a NATS
    /// subject after [`crate::route::nats_subject`].
    Named(Arc<str>),
    /// Published nowhere: an event that only carries a boundary (a position
    /// the format learned after the events before it were sent).
    Nowhere,
}

/// What identifies an event across sessions, for de-duplication: the same
/// change decoded again after a reconnect has the same identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventId {
    /// The `index`-th event (from 0, the `B`) of the transaction whose
    /// commit (or prepare) record is at `lsn`; index 0 for events that
    /// stand alone (`CP`, `RP`, a streamed `C`, a message outside a
    /// transaction).
    Committed { lsn: u64, index: u32 },
    /// The `seq`-th change (from 0) of subtransaction `subxid` of the
    /// streamed, still running transaction `xid`: held by the format until
    /// the transaction ends, then numbered as `Committed`.
    Streamed { xid: u32, subxid: u32, seq: u32 },
    /// The `index`-th event (from 0) at WAL position `lsn` within its
    /// transaction: the Debezium format's `source.lsn`, where several
    /// events share a position (a truncate of several tables, an update of
    /// the key written as a delete, its tombstone and a create; a `BEGIN`
    /// record carries its first event's); an `END` record has index
    /// [`EventId::END_INDEX`] at its commit's end. The same in every
    /// session, but ordered by change position, not by commit: two
    /// transactions' events interleave (docs/relay.md, the duplicate rule).
    AtLsn { lsn: u64, index: u32 },
    /// Not de-duplicated (relation descriptions, which a new session sends
    /// again anyway).
    None,
}

impl EventId {
    /// The index of a Debezium `END` record: after every event at its
    /// position (the next transaction's first event can start where the
    /// commit record ends).
    pub const END_INDEX: u32 = u32::MAX;

    /// The text used as JetStream's `Nats-Msg-Id` (after the relay's id)
    /// and in Kafka's headers.
    pub fn text(&self) -> Option<String> {
        match self {
            EventId::Committed { lsn, index } | EventId::AtLsn { lsn, index } => {
                Some(format!("{:X}/{:X}:{index}", lsn >> 32, lsn & 0xffff_ffff))
            }
            EventId::Streamed { xid, subxid, seq } => Some(format!("s{xid}:{subxid}:{seq}")),
            EventId::None => None,
        }
    }
}

/// A position the relay may confirm once this event and every one before
/// it are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    pub lsn: u64,
    /// The commit time of what ends here, for the lag in seconds.
    pub commit_time: Option<SystemTime>,
}

/// One event for the broker.
#[derive(Debug, Clone)]
pub struct Event {
    pub dest: Dest,
    /// The object as published (empty for a tombstone).
    pub payload: Bytes,
    /// The value is null (the Debezium format's tombstone after a delete):
    /// Kafka's record has no value; NATS's message is empty, with the
    /// header `Pubjson-Tombstone`.
    pub tombstone: bool,
    pub id: EventId,
    /// The record key: format 3's replica identity columns as a JSON
    /// object (when the format was asked for keys), the Debezium format's
    /// key as the line has it (also in NATS's `Pubjson-Key` header).
    pub key: Option<Bytes>,
    /// The (sub)transaction, when the object names one.
    pub xid: Option<u32>,
    /// The event goes to every partition of its topic (a truncate, which
    /// every key's order must see).
    pub all_partitions: bool,
    pub boundary: Option<Boundary>,
    /// The object's action (`I`, `C`...; Debezium's `op`, `BEGIN`,
    /// `END`), for the log and the tests.
    pub action: &'static str,
    /// Set by the relay before publishing an [`EventId::AtLsn`] event to
    /// JetStream: every transaction ending at or before this position was
    /// published before it (the `Pubjson-After` header, read back when a
    /// relay starts after a long outage).
    pub after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

/// An output format of the plugin.
pub trait Format: Send {
    /// The options for `START_REPLICATION`: the user's, checked, with
    /// what the format needs added (its `format-version`).
    fn plugin_options(
        &self,
        user: &[(String, String)],
    ) -> Result<Vec<(String, String)>, FormatError>;

    /// The fixed part of every destination the format names itself, as
    /// a topic (`shop` for the Debezium format's `topic.prefix` `shop`:
    /// `shop` and `shop.*`); None when the relay's templates name them.
    fn topic_prefix(&self, _user: &[(String, String)]) -> Option<String> {
        None
    }

    /// A new decoding session starts (each connection): forget what only
    /// lived in the last one (relation descriptions, open transactions).
    fn session_start(&mut self);

    /// The events of one output message at `lsn`, appended to `out`.
    fn message(
        &mut self,
        lsn: u64,
        payload: &Bytes,
        out: &mut Vec<Event>,
    ) -> Result<(), FormatError>;

    /// Inside a transaction that has not ended (between `B` and its end):
    /// a keepalive's position may not be confirmed then.
    fn in_transaction(&self) -> bool;
}

/// The lines of an output message, as `(start, end)` byte ranges (empty
/// lines left out): format 3's objects and the Debezium format's records
/// are one a line.
pub fn lines(payload: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        while start < payload.len() {
            let end = payload[start..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(payload.len(), |i| start + i);
            let line = (start, end);
            start = end + 1;
            if end > line.0 {
                return Some(line);
            }
        }
        None
    })
}

/// `X/Y` as a number.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// `X/Y`, as PostgreSQL prints an LSN.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trip_and_ids() {
        assert_eq!(parse_lsn("0/16B3748"), Some(0x16B3748));
        assert_eq!(parse_lsn("1A/0"), Some(0x1A << 32));
        assert_eq!(parse_lsn("x"), None);
        assert_eq!(lsn_text(0x1_0000_00FF), "1/FF");
        assert_eq!(
            EventId::Committed {
                lsn: 0x16B3748,
                index: 3
            }
            .text()
            .unwrap(),
            "0/16B3748:3"
        );
        assert_eq!(
            EventId::Streamed {
                xid: 7,
                subxid: 8,
                seq: 0
            }
            .text()
            .unwrap(),
            "s7:8:0"
        );
        assert!(EventId::Committed { lsn: 1, index: 9 } < EventId::Committed { lsn: 2, index: 0 });
        assert_eq!(EventId::None.text(), None);
    }
}
