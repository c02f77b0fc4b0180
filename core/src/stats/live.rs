//! The live view of a slot's reorder buffer (pure code): what a decoding
//! session holds back right now, published for `pubjson.pending_transactions()`
//! and the current totals of `pubjson.decoding_stats()`.
//!
//! The output plugin's callbacks run when a transaction is replayed (at
//! commit, or when it is streamed), so they cannot see a batch transaction
//! building up. The decoder therefore samples the reorder buffer itself
//! ([`LiveTracker`] decides when) from two places PostgreSQL calls while it
//! decodes: `filter_by_origin_cb`, called for every decoded change before it
//! is queued, and the WAL reader's page callback, called whenever the
//! decoder needs more WAL (see `pg/reorder.rs`). Sampling is rate-limited
//! while the decoder is busy ([`SAMPLE_INTERVAL_US`]); when it has read all
//! the WAL there is and is about to wait, one more sample makes the view
//! complete before it goes quiet (a transaction idle in its session shows
//! every change it made).

use std::collections::{HashMap, HashSet};

/// Transactions listed per slot: the oldest ones (by first LSN). The view
/// also counts all of them ([`LiveView::pending_txns`]).
pub const PENDING_KEPT: usize = 16;

/// Least time between two samples while the decoder is busy: at most five
/// samples a second.
pub const SAMPLE_INTERVAL_US: i64 = 200_000;

/// Changes between two looks at the clock while the decoder is busy.
const CLOCK_EVERY: u32 = 16;

/// Replay history that counts towards the rate: older transactions' weight
/// is halved whenever the history exceeds this many microseconds of replay.
const RATE_WINDOW_US: f64 = 30_000_000.0;

/// The fewest changes a transaction needs for its replay to count towards
/// the rate. A small transaction's replay time is its fixed cost (BEGIN and
/// COMMIT, the first catalog reads of a relation in a session), not its
/// changes': measured on five one-row transactions, a slot's rate forecast
/// 0.76 s for a 20,000-row transaction that took 6.7 ms.
pub const RATE_MIN_CHANGES: u64 = 1000;

/// A top-level transaction as the reorder buffer holds it (with its
/// subtransactions), read by `pg/reorder.rs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReorderTxn {
    pub xid: u32,
    pub first_lsn: u64,
    /// Changes held (in memory and on disk), including internal ones
    /// (TOAST chunks, invalidations).
    pub changes: u64,
    pub changes_in_memory: u64,
    pub bytes_in_memory: u64,
    pub subxacts: u32,
    /// Part of it was written to disk (`logical_decoding_work_mem`).
    pub spilled: bool,
    /// Part of it was streamed to the consumer already.
    pub streamed: bool,
}

/// One pending transaction as published.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct PendingTxn {
    pub xid: u32,
    pub subxacts: u32,
    pub first_lsn: u64,
    /// When this decoding session first saw it (at sampling resolution).
    pub first_seen: i64,
    /// Changes held in the reorder buffer now.
    pub changes_held: u64,
    pub changes_in_memory: u64,
    pub bytes_in_memory: u64,
    /// Changes already sent in streamed blocks.
    pub changes_streamed: u64,
    pub spilled: bool,
    pub streamed: bool,
}

/// A slot's reorder buffer as of one sample. Plain data, valid when zeroed
/// (no owner: nothing to show); lives in the shared statistics table.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct LiveView {
    /// The decoding backend (0: no session has published). Readers show the
    /// view only while this process still decodes the slot.
    pub owner_pid: i32,
    /// Transactions in `txns` (the oldest `PENDING_KEPT`).
    pub kept: u32,
    /// All pending top-level transactions.
    pub pending_txns: u32,
    pub as_of: i64,
    pub reorder_buffer_bytes: u64,
    /// First sight of the oldest pending transaction (0 when none).
    pub oldest_first_seen: i64,
    /// This session's measured replay rate (0: not measured yet).
    pub replay_changes_per_sec: f64,
    pub replay_bytes_per_sec: f64,
    pub txns: [PendingTxn; PENDING_KEPT],
}

impl LiveView {
    pub fn kept_txns(&self) -> &[PendingTxn] {
        &self.txns[..(self.kept as usize).min(PENDING_KEPT)]
    }
}

/// Measured replay speed of a slot's output: changes and bytes per second
/// of replay time, over recent transactions (older ones fade out).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayRate {
    changes: f64,
    bytes: f64,
    micros: f64,
}

impl ReplayRate {
    /// A transaction of `changes` changes and `bytes` bytes took
    /// `micros` from its BEGIN to its COMMIT being written; only one of at
    /// least [`RATE_MIN_CHANGES`] counts.
    pub fn note(&mut self, changes: u64, bytes: u64, micros: i64) {
        if changes < RATE_MIN_CHANGES || micros <= 0 {
            return;
        }
        self.changes += changes as f64;
        self.bytes += bytes as f64;
        self.micros += micros as f64;
        while self.micros > RATE_WINDOW_US {
            self.changes /= 2.0;
            self.bytes /= 2.0;
            self.micros /= 2.0;
        }
    }

    /// Changes per second (0 until a transaction was measured).
    pub fn changes_per_sec(&self) -> f64 {
        if self.micros > 0.0 {
            self.changes * 1e6 / self.micros
        } else {
            0.0
        }
    }

    pub fn bytes_per_sec(&self) -> f64 {
        if self.micros > 0.0 {
            self.bytes * 1e6 / self.micros
        } else {
            0.0
        }
    }
}

/// The decoding session's side of the live view.
#[derive(Debug, Default)]
pub struct LiveTracker {
    last_sample: i64,
    /// Changes since the clock was last read.
    changes_unclocked: u32,
    /// Something may have changed since the last sample.
    dirty: bool,
    /// Fingerprint of the buffer at the last sample, to notice transactions
    /// that vanished without a callback (aborts).
    last_shape: (u64, u32, u32),
    first_seen: HashMap<u32, i64>,
    pub rate: ReplayRate,
}

impl LiveTracker {
    /// A change was decoded (`filter_by_origin_cb`): `Some(now)` when a
    /// sample is due. The clock (`clock`, microseconds) is read every
    /// [`CLOCK_EVERY`] changes only.
    pub fn change_due(&mut self, clock: impl FnOnce() -> i64) -> Option<i64> {
        self.dirty = true;
        self.changes_unclocked += 1;
        if self.changes_unclocked < CLOCK_EVERY {
            return None;
        }
        self.changes_unclocked = 0;
        let now = clock();
        (now - self.last_sample >= SAMPLE_INTERVAL_US).then_some(now)
    }

    /// The decoder has read all WAL there is and is about to wait: a sample
    /// is due when something changed since the last one (`shape`: the
    /// buffer's fingerprint now, see [`shape`]).
    pub fn caught_up_due(&mut self, shape: (u64, u32, u32)) -> bool {
        self.dirty || shape != self.last_shape
    }

    /// Something happened that the next sample should show (a transaction
    /// was replayed, streamed or aborted).
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    /// Builds the view from the buffer's transactions (oldest first, as the
    /// reorder buffer lists them) and forgets transactions no longer there.
    /// `changes_streamed`: the changes of a top-level xid sent in streamed
    /// blocks so far (the decoding session's record of it).
    pub fn sample(
        &mut self,
        now: i64,
        owner_pid: i32,
        reorder_buffer_bytes: u64,
        txns: &[ReorderTxn],
        changes_streamed: impl Fn(u32) -> u64,
    ) -> LiveView {
        self.last_sample = now;
        self.dirty = false;
        self.last_shape = shape(reorder_buffer_bytes, txns);
        // Forget transactions no longer in the buffer (one set, not a scan
        // of the buffer per remembered transaction).
        let present: HashSet<u32> = txns.iter().map(|t| t.xid).collect();
        self.first_seen.retain(|xid, _| present.contains(xid));
        let mut view = LiveView {
            owner_pid,
            as_of: now,
            reorder_buffer_bytes,
            pending_txns: u32::try_from(txns.len()).unwrap_or(u32::MAX),
            replay_changes_per_sec: self.rate.changes_per_sec(),
            replay_bytes_per_sec: self.rate.bytes_per_sec(),
            ..LiveView::default()
        };
        for (slot, t) in view.txns.iter_mut().zip(txns) {
            let first_seen = *self.first_seen.entry(t.xid).or_insert(now);
            *slot = PendingTxn {
                xid: t.xid,
                subxacts: t.subxacts,
                first_lsn: t.first_lsn,
                first_seen,
                changes_held: t.changes,
                changes_in_memory: t.changes_in_memory,
                bytes_in_memory: t.bytes_in_memory,
                changes_streamed: changes_streamed(t.xid),
                spilled: t.spilled,
                streamed: t.streamed,
            };
            view.kept += 1;
        }
        // Transactions beyond the kept ones still get their first sight.
        for t in txns.iter().skip(PENDING_KEPT) {
            self.first_seen.entry(t.xid).or_insert(now);
        }
        view.oldest_first_seen = txns
            .iter()
            .filter_map(|t| self.first_seen.get(&t.xid))
            .min()
            .copied()
            .unwrap_or(0);
        view
    }
}

/// The fingerprint [`LiveTracker::caught_up_due`] compares: bytes in
/// memory, transactions, the oldest one.
pub fn shape(reorder_buffer_bytes: u64, txns: &[ReorderTxn]) -> (u64, u32, u32) {
    (
        reorder_buffer_bytes,
        u32::try_from(txns.len()).unwrap_or(u32::MAX),
        txns.first().map_or(0, |t| t.xid),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(xid: u32, changes: u64) -> ReorderTxn {
        ReorderTxn {
            xid,
            first_lsn: u64::from(xid) * 100,
            changes,
            changes_in_memory: changes,
            bytes_in_memory: changes * 10,
            ..ReorderTxn::default()
        }
    }

    #[test]
    fn busy_decoding_samples_at_most_five_times_a_second() {
        let mut t = LiveTracker::default();
        let mut samples = 0;
        let mut clock_reads = 0;
        // One change every millisecond for two seconds.
        for ms in 0..2000i64 {
            let now = 1_000_000 + ms * 1000;
            let clock = || {
                clock_reads += 1;
                now
            };
            if let Some(at) = t.change_due(clock) {
                assert_eq!(at, now);
                t.sample(at, 1, 0, &[], |_| 0);
                samples += 1;
            }
        }
        assert_eq!(samples, 10);
        assert_eq!(clock_reads, 2000 / CLOCK_EVERY as i32);
    }

    #[test]
    fn catching_up_samples_once_after_changes_then_stays_quiet() {
        let mut t = LiveTracker::default();
        t.sample(1_000_000, 1, 0, &[], |_| 0);
        // A burst of changes within the interval: no sample while busy.
        for i in 1..50 {
            assert_eq!(t.change_due(|| 1_000_000 + i), None);
        }
        let shape_now = shape(500, &[txn(7, 50)]);
        assert!(t.caught_up_due(shape_now));
        let view = t.sample(1_000_100, 1, 500, &[txn(7, 50)], |_| 0);
        assert_eq!(view.txns[0].changes_held, 50);
        // Waiting again without news: nothing to do.
        assert!(!t.caught_up_due(shape_now));
        // A transaction vanished without a callback (an abort): resample.
        assert!(t.caught_up_due(shape(0, &[])));
        // A replayed transaction marks the view for the next wait.
        t.touch();
        assert!(t.caught_up_due(shape_now));
    }

    #[test]
    fn first_sight_is_kept_until_the_transaction_leaves() {
        let mut t = LiveTracker::default();
        let v = t.sample(10, 1, 0, &[txn(5, 1)], |_| 0);
        assert_eq!(v.txns[0].first_seen, 10);
        let v = t.sample(20, 1, 0, &[txn(5, 2), txn(6, 1)], |_| 0);
        assert_eq!((v.txns[0].first_seen, v.txns[1].first_seen), (10, 20));
        assert_eq!(v.oldest_first_seen, 10);
        let v = t.sample(30, 1, 0, &[txn(6, 1)], |_| 0);
        assert_eq!(v.kept, 1);
        assert_eq!(v.oldest_first_seen, 20);
        // xid 5 is gone: seen again later, it is new.
        let v = t.sample(40, 1, 0, &[txn(5, 1), txn(6, 1)], |_| 0);
        assert_eq!(v.txns[0].first_seen, 40);
        assert_eq!(v.oldest_first_seen, 20);
    }

    #[test]
    fn the_oldest_transactions_are_kept_and_all_are_counted() {
        let mut t = LiveTracker::default();
        let txns: Vec<ReorderTxn> = (1..=40).map(|x| txn(x, 1)).collect();
        let v = t.sample(5, 9, 123, &txns, |_| 0);
        assert_eq!(v.pending_txns, 40);
        assert_eq!(v.kept as usize, PENDING_KEPT);
        assert_eq!(v.kept_txns().last().unwrap().xid, PENDING_KEPT as u32);
        assert_eq!((v.owner_pid, v.as_of, v.reorder_buffer_bytes), (9, 5, 123));
    }

    #[test]
    fn streamed_changes_follow_their_transaction() {
        let mut t = LiveTracker::default();
        let streamed = |xid: u32| if xid == 8 { 150 } else { 0 };
        let v = t.sample(1, 1, 0, &[txn(8, 3), txn(9, 2)], streamed);
        assert_eq!(
            (v.txns[0].changes_streamed, v.txns[0].changes_held),
            (150, 3)
        );
        assert_eq!(v.txns[1].changes_streamed, 0);
    }

    #[test]
    fn small_transactions_leave_the_rate_unmeasured() {
        // The demo's slot: one-row transactions of about 40 us each, then
        // a 20,000-row one replayed in 6.7 ms.
        let mut r = ReplayRate::default();
        for _ in 0..5 {
            r.note(1, 300, 40);
        }
        assert_eq!(r.changes_per_sec(), 0.0, "no forecast from them");
        r.note(20_000, 1_500_000, 6_700);
        let forecast_s = 20_000.0 / r.changes_per_sec();
        assert!((forecast_s - 0.0067).abs() < 1e-9, "{forecast_s}");
    }

    #[test]
    fn replay_rate_follows_recent_transactions() {
        let mut r = ReplayRate::default();
        assert_eq!(r.changes_per_sec(), 0.0);
        r.note(1000, 50_000, 1_000_000);
        assert_eq!(r.changes_per_sec(), 1000.0);
        assert_eq!(r.bytes_per_sec(), 50_000.0);
        // Empty, small or instantaneous transactions say nothing about
        // the cost of a change.
        r.note(0, 0, 5);
        r.note(RATE_MIN_CHANGES - 1, 10, 1_000_000);
        r.note(10_000, 10, 0);
        assert_eq!(r.changes_per_sec(), 1000.0);
        // A long run at another speed takes over.
        for _ in 0..20 {
            r.note(20_000, 0, 10_000_000);
        }
        assert!(
            (r.changes_per_sec() - 2000.0).abs() < 50.0,
            "{}",
            r.changes_per_sec()
        );
    }
}
