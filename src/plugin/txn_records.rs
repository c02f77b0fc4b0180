//! The record of each top-level transaction this decoding session is
//! delivering: what it has seen and emitted so far (its BEGIN or streamed
//! block written, its items and bytes), which the statistics and the live
//! view read, and the backfill messages its progress rows authorized.

use std::collections::{HashMap, HashSet};

use pubjson_core::model::TxnInfo;

/// One top-level transaction of this decoding session: the one being
/// replayed at its commit (or PREPARE), or a streamed one between its
/// blocks. Subtransactions count for their top-level transaction.
#[derive(Default)]
pub struct TxnState {
    pub info: TxnInfo,
    pub first_lsn: u64,
    /// Whether the timestamp text has been rendered into `info.timestamp`.
    pub timestamp_ready: bool,
    /// The BEGIN output has been written (at once, or deferred until the
    /// first emitted change when skip-empty-xacts is on).
    pub begun: bool,
    /// Decoded at its PREPARE (two-phase): its items are left out once it
    /// has rolled back (see `Emitter::item`).
    pub prepared: bool,
    /// A streamed block of it has been written: its abort or commit must be
    /// reported, and its next block is not its first.
    pub streamed_output: bool,
    /// Changes decoded (emitted or not: INSERT/UPDATE/DELETE, each table of
    /// a TRUNCATE, transactional messages), for the statistics.
    pub changes_seen: u64,
    /// INSERT/UPDATE/DELETE sent in streamed blocks (the live view's
    /// `changes_streamed`).
    pub changes_streamed: u64,
    /// Items emitted (changes, truncated tables, messages).
    pub items_emitted: u64,
    /// JSON bytes written for it (see `Output`).
    pub bytes_emitted: u64,
    /// When its replay began (the clock at BEGIN or its first streamed
    /// block), for the replay rate.
    pub replay_start: i64,
    /// The backfill messages its `pubjson.backfill_progress` changes
    /// recorded (relation, SHA-256 of the message), not yet decoded: the
    /// only ones decoded (`src/backfill.rs`).
    pub backfill_digests: Vec<(u32, [u8; 32])>,
}

/// The session's transactions by top-level xid: a record is made at a
/// transaction's BEGIN or first streamed block and dropped at its commit,
/// abort or PREPARE. Streamed blocks of different transactions interleave
/// (and a committed transaction can be replayed between two of them), so
/// each keeps its own. The record of the transaction being delivered is
/// kept apart from the others, so that a change finds it without a lookup.
#[derive(Default)]
pub struct Transactions {
    /// The transaction whose changes are being delivered, replayed (BEGIN
    /// to COMMIT) or streamed (block start to stop), with its record.
    current: Option<(u32, TxnState)>,
    /// The others: streamed transactions between their blocks.
    parked: HashMap<u32, TxnState>,
}

impl Transactions {
    /// `xid`'s replay starts: a fresh record, the current one.
    pub fn start(&mut self, xid: u32, record: TxnState) -> &mut TxnState {
        self.leave();
        self.parked.remove(&xid);
        &mut self.current.insert((xid, record)).1
    }

    /// A block of streamed `xid` starts: its record (made now for its
    /// first block) becomes the current one.
    pub fn enter_block(&mut self, xid: u32, now: i64) -> &mut TxnState {
        self.leave();
        let record = self.parked.remove(&xid).unwrap_or_else(|| TxnState {
            replay_start: now,
            ..TxnState::default()
        });
        &mut self.current.insert((xid, record)).1
    }

    /// The changes of the current transaction have all been delivered (its
    /// block ended, or its replay reached its end).
    pub fn leave(&mut self) {
        if let Some((xid, record)) = self.current.take() {
            self.parked.insert(xid, record);
        }
    }

    /// The record of the transaction whose changes are being delivered.
    pub fn current(&mut self) -> Option<&mut TxnState> {
        self.current.as_mut().map(|(_, record)| record)
    }

    pub fn get(&mut self, xid: u32) -> Option<&mut TxnState> {
        match &mut self.current {
            Some((current, record)) if *current == xid => Some(record),
            _ => self.parked.get_mut(&xid),
        }
    }

    /// INSERT/UPDATE/DELETE of `xid` sent in streamed blocks so far.
    pub fn changes_streamed(&self, xid: u32) -> u64 {
        let record = match &self.current {
            Some((current, record)) if *current == xid => Some(record),
            _ => self.parked.get(&xid),
        };
        record.map_or(0, |r| r.changes_streamed)
    }

    /// `xid` ended (committed, aborted, prepared): its record goes.
    pub fn finish(&mut self, xid: u32) -> Option<TxnState> {
        match self.current.take() {
            Some((current, record)) if current == xid => Some(record),
            other => {
                self.current = other;
                self.parked.remove(&xid)
            }
        }
    }

    /// Drops the records of transactions that are no longer pending
    /// (`pending`: the reorder buffer's top-level xids), which PostgreSQL
    /// discarded without a callback; the current one stays.
    pub fn retain_pending(&mut self, pending: &HashSet<u32>) {
        self.parked.retain(|xid, _| pending.contains(xid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_transactions_keep_their_own_records() {
        let mut txns = Transactions::default();
        txns.enter_block(7, 100).changes_seen += 5;
        txns.leave();
        assert!(txns.current().is_none());
        // A committed transaction replayed between two blocks of 7.
        txns.start(9, TxnState::default()).changes_seen += 1;
        assert_eq!(txns.current().map(|r| r.changes_seen), Some(1));
        assert_eq!(txns.finish(9).map(|r| r.changes_seen), Some(1));
        assert!(txns.current().is_none());
        let again = txns.enter_block(7, 200);
        again.changes_seen += 3;
        // Its replay started at its first block.
        assert_eq!(again.replay_start, 100);
        txns.leave();
        assert_eq!(txns.finish(7).map(|r| r.changes_seen), Some(8));
        assert!(txns.finish(7).is_none());
    }

    #[test]
    fn a_new_replay_of_an_xid_starts_from_zero() {
        let mut txns = Transactions::default();
        txns.start(5, TxnState::default()).items_emitted = 4;
        txns.leave();
        txns.start(5, TxnState::default());
        assert_eq!(txns.current().map(|r| r.items_emitted), Some(0));
    }

    #[test]
    fn records_of_vanished_transactions_go_but_the_current_one_stays() {
        let mut txns = Transactions::default();
        txns.enter_block(1, 0).changes_streamed = 10;
        txns.leave();
        txns.enter_block(2, 0).changes_streamed = 20;
        txns.leave();
        txns.start(3, TxnState::default());
        txns.retain_pending(&HashSet::from([2]));
        assert_eq!(
            (
                txns.changes_streamed(1),
                txns.changes_streamed(2),
                txns.get(3).is_some()
            ),
            (0, 20, true)
        );
    }
}
