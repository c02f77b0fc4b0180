//! The table of per-slot statistics: which entry belongs to which slot,
//! when an entry is claimed, reclaimed and freed. Pure bookkeeping over a
//! slice of entries: the same code serves the shared-memory table (a fixed
//! number of entries, see `shmem.rs`) and the backend-local one (grown on
//! demand, see `stats.rs`).
//!
//! Rules:
//! - a slot is its name, database and output plugin ([`SlotKey`]): a slot
//!   recreated under the same name with another plugin or in another
//!   database is another slot;
//! - an entry is claimed the first time a slot publishes counts, and freed
//!   when the slot is created again ([`forget`], called by the plugin's
//!   startup callback at slot creation, so a recreated slot starts from
//!   zero), when its statistics are reset, or when its slot no longer
//!   exists ([`reclaim`]: when the table is read, and before giving up on a
//!   full table);
//! - a full table of existing slots leaves the newcomer untracked
//!   ([`Placement::Full`]; the caller warns).
//!
//! An entry is plain data, valid when zeroed (a zeroed entry is free), so
//! the shared table is initialised by zeroing it. Per-slot data beyond the
//! counters (the live view of the slot's reorder buffer) are further fields
//! of [`SlotEntry`]: [`free`] resets the whole entry.

use super::live::LiveView;
use super::Counters;

/// Bytes of a slot or plugin name, with its terminating NUL (NAMEDATALEN).
pub const NAME_LEN: usize = 64;

/// A replication slot as the statistics know it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C)]
pub struct SlotKey {
    name: [u8; NAME_LEN],
    plugin: [u8; NAME_LEN],
    database: u32,
}

impl Default for SlotKey {
    fn default() -> Self {
        SlotKey {
            name: [0; NAME_LEN],
            plugin: [0; NAME_LEN],
            database: 0,
        }
    }
}

fn fixed(bytes: &[u8]) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    // PostgreSQL names are shorter than NAMEDATALEN; a longer input is cut
    // to fit, NUL-terminated.
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bytes.len())
        .min(NAME_LEN - 1);
    out[..end].copy_from_slice(&bytes[..end]);
    out
}

fn until_nul(bytes: &[u8; NAME_LEN]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    &bytes[..end]
}

impl SlotKey {
    pub fn new(name: &[u8], database: u32, plugin: &[u8]) -> SlotKey {
        SlotKey {
            name: fixed(name),
            plugin: fixed(plugin),
            database,
        }
    }

    pub fn name(&self) -> &[u8] {
        until_nul(&self.name)
    }

    /// The name as text (slot names are ASCII: `[a-z0-9_]`).
    pub fn name_text(&self) -> String {
        String::from_utf8_lossy(self.name()).into_owned()
    }

    pub fn plugin(&self) -> &[u8] {
        until_nul(&self.plugin)
    }

    pub fn database(&self) -> u32 {
        self.database
    }
}

/// Whether an entry holds a slot's statistics. `Free` is 0: zeroed memory
/// is a free entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(u8)]
pub enum EntryState {
    #[default]
    Free = 0,
    InUse = 1,
}

/// One slot's statistics.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct SlotEntry {
    pub state: EntryState,
    pub slot: SlotKey,
    pub counters: Counters,
    /// The reorder buffer of the session decoding the slot, as of its last
    /// sample (see `stats/live.rs`).
    pub live: LiveView,
}

/// Where a slot's counts go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Placement {
    /// The slot's entry.
    Existing(usize),
    /// A free entry, now the slot's (its counters start from zero).
    Claimed(usize),
    /// Every entry belongs to an existing slot: this one is not tracked.
    Full,
}

/// Resets an entry to free (all of it, including data added later).
pub fn free(entry: &mut SlotEntry) {
    *entry = SlotEntry::default();
}

pub fn find(entries: &[SlotEntry], slot: &SlotKey) -> Option<usize> {
    entries
        .iter()
        .position(|e| e.state == EntryState::InUse && e.slot == *slot)
}

/// The entry for `slot`: its own, else a free one, else one freed by
/// reclaiming entries of slots that no longer exist.
pub fn place(
    entries: &mut [SlotEntry],
    slot: &SlotKey,
    slot_exists: impl FnMut(&SlotKey) -> bool,
) -> Placement {
    if let Some(i) = find(entries, slot) {
        return Placement::Existing(i);
    }
    let claim = |entries: &mut [SlotEntry], i: usize| {
        entries[i] = SlotEntry {
            state: EntryState::InUse,
            slot: *slot,
            ..SlotEntry::default()
        };
        Placement::Claimed(i)
    };
    if let Some(i) = first_free(entries) {
        return claim(entries, i);
    }
    reclaim(entries, slot_exists);
    match first_free(entries) {
        Some(i) => claim(entries, i),
        None => Placement::Full,
    }
}

fn first_free(entries: &[SlotEntry]) -> Option<usize> {
    entries.iter().position(|e| e.state == EntryState::Free)
}

/// Frees the entries of slots that no longer exist; returns how many.
pub fn reclaim(entries: &mut [SlotEntry], mut slot_exists: impl FnMut(&SlotKey) -> bool) -> usize {
    let mut freed = 0;
    for e in entries.iter_mut() {
        if e.state == EntryState::InUse && !slot_exists(&e.slot) {
            free(e);
            freed += 1;
        }
    }
    freed
}

/// Frees every entry of a slot named `name` (whatever its database or
/// plugin): the slot is being created anew, or its statistics reset.
pub fn forget(entries: &mut [SlotEntry], name: &[u8]) -> usize {
    let mut freed = 0;
    for e in entries.iter_mut() {
        if e.state == EntryState::InUse && e.slot.name() == name {
            free(e);
            freed += 1;
        }
    }
    freed
}

/// Frees every entry.
pub fn clear(entries: &mut [SlotEntry]) {
    entries.iter_mut().for_each(free);
}

/// The entries in use.
pub fn in_use(entries: &[SlotEntry]) -> impl Iterator<Item = &SlotEntry> {
    entries.iter().filter(|e| e.state == EntryState::InUse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn key(name: &str) -> SlotKey {
        SlotKey::new(name.as_bytes(), 5, b"pubjson")
    }

    fn counts(n: u64) -> Counters {
        Counters {
            txns_decoded: n,
            ..Counters::default()
        }
    }

    /// Publishes `n` transactions for `name` as the decoding backend does.
    fn publish(
        entries: &mut [SlotEntry],
        name: &str,
        n: u64,
        existing: &HashSet<SlotKey>,
    ) -> Placement {
        let placement = place(entries, &key(name), |s| existing.contains(s));
        match placement {
            Placement::Existing(i) | Placement::Claimed(i) => entries[i].counters.merge(&counts(n)),
            Placement::Full => {}
        }
        placement
    }

    fn decoded(entries: &[SlotEntry], name: &str) -> Option<u64> {
        find(entries, &key(name)).map(|i| entries[i].counters.txns_decoded)
    }

    #[test]
    fn a_slot_keeps_its_entry_and_adds_up() {
        let mut table = vec![SlotEntry::default(); 3];
        let live: HashSet<_> = [key("a"), key("b")].into();
        assert_eq!(publish(&mut table, "a", 2, &live), Placement::Claimed(0));
        assert_eq!(publish(&mut table, "b", 1, &live), Placement::Claimed(1));
        assert_eq!(publish(&mut table, "a", 3, &live), Placement::Existing(0));
        assert_eq!(decoded(&table, "a"), Some(5));
        assert_eq!(decoded(&table, "b"), Some(1));
        assert_eq!(in_use(&table).count(), 2);
    }

    #[test]
    fn a_full_table_reclaims_entries_of_dropped_slots() {
        let mut table = vec![SlotEntry::default(); 2];
        let mut live: HashSet<_> = [key("a"), key("b")].into();
        publish(&mut table, "a", 1, &live);
        publish(&mut table, "b", 7, &live);
        // "a" is dropped, "c" created: c takes a's entry, b keeps its counts.
        live.remove(&key("a"));
        live.insert(key("c"));
        assert_eq!(publish(&mut table, "c", 4, &live), Placement::Claimed(0));
        assert_eq!(decoded(&table, "a"), None);
        assert_eq!(decoded(&table, "b"), Some(7));
        assert_eq!(decoded(&table, "c"), Some(4));
    }

    #[test]
    fn a_table_full_of_existing_slots_leaves_the_newcomer_untracked() {
        let mut table = vec![SlotEntry::default(); 2];
        let live: HashSet<_> = [key("a"), key("b"), key("c")].into();
        publish(&mut table, "a", 1, &live);
        publish(&mut table, "b", 1, &live);
        assert_eq!(publish(&mut table, "c", 1, &live), Placement::Full);
        assert_eq!(decoded(&table, "a"), Some(1));
        assert_eq!(decoded(&table, "b"), Some(1));
    }

    #[test]
    fn many_slots_created_and_dropped_never_exhaust_the_table() {
        // The case: 70 slots decoded and dropped one after another,
        // a table of 64; then a new slot is still tracked.
        let mut table = vec![SlotEntry::default(); 64];
        for i in 0..70 {
            let name = format!("s{i}");
            let live: HashSet<_> = [key(&name)].into();
            assert!(matches!(
                publish(&mut table, &name, 1, &live),
                Placement::Claimed(_)
            ));
        }
        let live: HashSet<_> = [key("new")].into();
        assert!(matches!(
            publish(&mut table, "new", 1, &live),
            Placement::Claimed(_)
        ));
        reclaim(&mut table, |s| live.contains(s));
        assert_eq!(in_use(&table).count(), 1);
    }

    #[test]
    fn a_recreated_slot_starts_from_zero() {
        let mut table = vec![SlotEntry::default(); 4];
        let live: HashSet<_> = [key("a"), key("b")].into();
        publish(&mut table, "a", 9, &live);
        publish(&mut table, "b", 2, &live);
        // Dropped and created again under the same name: the startup
        // callback at creation forgets the name.
        assert_eq!(forget(&mut table, b"a"), 1);
        assert_eq!(decoded(&table, "a"), None);
        publish(&mut table, "a", 1, &live);
        assert_eq!(decoded(&table, "a"), Some(1));
        assert_eq!(decoded(&table, "b"), Some(2));
    }

    #[test]
    fn same_name_with_another_plugin_or_database_is_another_slot() {
        let mut table = vec![SlotEntry::default(); 4];
        let old = key("a");
        let other_plugin = SlotKey::new(b"a", 5, b"pgoutput");
        let other_database = SlotKey::new(b"a", 6, b"pubjson");
        table[0] = SlotEntry {
            state: EntryState::InUse,
            slot: old,
            counters: counts(3),
            ..SlotEntry::default()
        };
        // Only the new incarnation exists: reading reclaims the old entry.
        for now in [other_plugin, other_database] {
            let mut t = table.clone();
            assert_eq!(reclaim(&mut t, |s| *s == now), 1);
            assert_eq!(in_use(&t).count(), 0);
        }
        assert_eq!(reclaim(&mut table, |s| *s == old), 0);
    }

    #[test]
    fn clear_and_forget_free_whole_entries() {
        let mut table = vec![SlotEntry::default(); 2];
        let live: HashSet<_> = [key("a"), key("b")].into();
        publish(&mut table, "a", 1, &live);
        publish(&mut table, "b", 1, &live);
        assert_eq!(forget(&mut table, b"nope"), 0);
        clear(&mut table);
        assert_eq!(in_use(&table).count(), 0);
        assert_eq!(table[0].slot, SlotKey::default());
        assert_eq!(table[0].counters, Counters::default());
    }

    #[test]
    fn names_round_trip_and_long_input_is_cut() {
        let k = SlotKey::new(b"my_slot", 1, b"pubjson");
        assert_eq!(k.name(), b"my_slot");
        assert_eq!(k.name_text(), "my_slot");
        assert_eq!(k.plugin(), b"pubjson");
        assert_eq!(k.database(), 1);
        let long = "x".repeat(80);
        assert_eq!(
            SlotKey::new(long.as_bytes(), 1, b"p").name().len(),
            NAME_LEN - 1
        );
        // A C string buffer: stops at the NUL.
        assert_eq!(SlotKey::new(b"ab\0cd", 1, b"p").name(), b"ab");
    }
}
