//! The decoding statistics' SQL functions (`pubjson.decoding_counters()`,
//! `worst_transactions()`, `reset_stats()`), the `decoding_stats()` view
//! function over them, and the live view `pending_transactions()` over
//! `_pending_transactions()`. The counting and the shared-memory table are
//! `src/stats.rs` and `src/stats/`.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::stats;

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A PostgreSQL timestamp (0: none).
fn timestamp(t: i64) -> Option<TimestampWithTimeZone> {
    if t == 0 {
        None
    } else {
        TimestampWithTimeZone::try_from(t).ok()
    }
}

/// The SQL functions. They land in schema `pubjson`, the extension's schema
/// (`pubjson.control`), in which CREATE EXTENSION runs the script; a
/// `#[pg_schema]` module would make the script run `CREATE SCHEMA IF NOT
/// EXISTS pubjson`, which fails for the schema CREATE EXTENSION created.
mod sql {
    use super::*;

    /// Raw per-slot decoding counters (see `pubjson.decoding_stats()`).
    ///
    /// Parallel restricted: without preloading it reads the calling
    /// backend's own counters, which a parallel worker does not have.
    #[pg_extern(volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn decoding_counters() -> TableIterator<
        'static,
        (
            name!(slot_name, String),
            name!(source, String),
            name!(txns_decoded, i64),
            name!(txns_emitted, i64),
            name!(txns_skipped_empty, i64),
            name!(changes_seen, i64),
            name!(changes_emitted, i64),
            name!(filtered_by_table, i64),
            name!(filtered_by_action, i64),
            name!(filtered_by_row_filter, i64),
            name!(filtered_by_origin, i64),
            name!(updates_to_insert, i64),
            name!(updates_to_delete, i64),
            name!(bytes_emitted, i64),
            name!(streamed_txns, i64),
            name!(prepared_txns, i64),
            name!(peak_reorder_buffer_bytes, i64),
            name!(largest_txn_xid, i64),
            name!(largest_txn_changes, i64),
            name!(largest_txn_bytes, i64),
            name!(largest_txn_spilled, bool),
            name!(largest_txn_streamed, bool),
            name!(max_wal_span_bytes, i64),
            name!(max_commit_to_emit_ms, f64),
            name!(live_pid, Option<i32>),
            name!(live_as_of, Option<TimestampWithTimeZone>),
            name!(pending_txns, i32),
            name!(reorder_buffer_bytes, i64),
            name!(oldest_pending_first_seen, Option<TimestampWithTimeZone>),
        ),
    > {
        let (shared, rows) = stats::snapshot();
        let source = if shared {
            "shared memory"
        } else {
            "this backend"
        };
        TableIterator::new(rows.into_iter().map(move |row| {
            let c = row.counters;
            let live = row.live;
            (
                row.slot_name,
                source.to_owned(),
                to_i64(c.txns_decoded),
                to_i64(c.txns_emitted),
                to_i64(c.txns_skipped_empty),
                to_i64(c.changes_seen),
                to_i64(c.changes_emitted),
                to_i64(c.filtered_by_table),
                to_i64(c.filtered_by_action),
                to_i64(c.filtered_by_row_filter),
                to_i64(c.filtered_by_origin),
                to_i64(c.updates_to_insert),
                to_i64(c.updates_to_delete),
                to_i64(c.bytes_emitted),
                to_i64(c.streamed_txns),
                to_i64(c.prepared_txns),
                to_i64(c.peak_reorder_buffer_bytes),
                c.largest.xid as i64,
                to_i64(c.largest.changes),
                to_i64(c.largest.bytes),
                c.largest.spilled,
                c.largest.streamed,
                to_i64(c.max_wal_span),
                c.max_commit_to_emit_us as f64 / 1000.0,
                (live.owner_pid != 0).then_some(live.owner_pid),
                timestamp(live.as_of),
                i32::try_from(live.pending_txns).unwrap_or(i32::MAX),
                to_i64(live.reorder_buffer_bytes),
                timestamp(live.oldest_first_seen),
            )
        }))
    }

    /// The transactions held in the reorder buffers of pubjson's decoding
    /// sessions, as last sampled (see `pubjson.pending_transactions()`,
    /// which keeps the rows of sessions still decoding their slot).
    #[pg_extern(volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn _pending_transactions() -> TableIterator<
        'static,
        (
            name!(slot_name, String),
            name!(decoder_pid, i32),
            name!(as_of, Option<TimestampWithTimeZone>),
            name!(replay_changes_per_sec, Option<f64>),
            name!(replay_bytes_per_sec, Option<f64>),
            name!(xid, i64),
            name!(subtransactions, i32),
            name!(first_lsn, i64),
            name!(first_seen, Option<TimestampWithTimeZone>),
            name!(changes_held, i64),
            name!(changes_in_memory, i64),
            name!(bytes_in_memory, i64),
            name!(changes_streamed, i64),
            name!(spilled, bool),
            name!(streamed, bool),
        ),
    > {
        let (_, rows) = stats::snapshot();
        let mut out = Vec::new();
        for row in rows.iter().filter(|r| r.live.owner_pid != 0) {
            let live = &row.live;
            let rate = |r: f64| (r > 0.0).then_some(r);
            for t in live.kept_txns() {
                out.push((
                    row.slot_name.clone(),
                    live.owner_pid,
                    timestamp(live.as_of),
                    rate(live.replay_changes_per_sec),
                    rate(live.replay_bytes_per_sec),
                    i64::from(t.xid),
                    i32::try_from(t.subxacts).unwrap_or(i32::MAX),
                    to_i64(t.first_lsn),
                    timestamp(t.first_seen),
                    to_i64(t.changes_held),
                    to_i64(t.changes_in_memory),
                    to_i64(t.bytes_in_memory),
                    to_i64(t.changes_streamed),
                    t.spilled,
                    t.streamed,
                ));
            }
        }
        TableIterator::new(out)
    }

    /// The transactions with the longest commit-to-emit delay, per slot.
    #[pg_extern(volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn worst_transactions() -> TableIterator<
        'static,
        (
            name!(slot_name, String),
            name!(rank, i32),
            name!(xid, i64),
            name!(changes, i64),
            name!(bytes, i64),
            name!(spilled, bool),
            name!(streamed, bool),
            name!(wal_span_bytes, i64),
            name!(commit_to_emit_ms, f64),
            name!(committed_at, Option<TimestampWithTimeZone>),
        ),
    > {
        let (_, rows) = stats::snapshot();
        let mut out = Vec::new();
        for row in rows {
            let name = row.slot_name;
            for (i, r) in row.counters.worst.iter().filter(|r| r.xid != 0).enumerate() {
                out.push((
                    name.clone(),
                    i as i32 + 1,
                    r.xid as i64,
                    to_i64(r.changes),
                    to_i64(r.bytes),
                    r.spilled,
                    r.streamed,
                    to_i64(r.wal_span),
                    r.commit_to_emit_us as f64 / 1000.0,
                    TimestampWithTimeZone::try_from(r.commit_time).ok(),
                ));
            }
        }
        TableIterator::new(out)
    }

    /// The library this session runs: pubjson's version, the PostgreSQL
    /// version whose headers it was built with, and whether it is the copy
    /// the postmaster preloaded (which every session and walsender runs;
    /// otherwise each session loads the file it finds when it first needs
    /// it). `extversion` tells only the SQL objects' version.
    #[pg_extern(stable, parallel_safe)]
    fn library_version() -> TableIterator<
        'static,
        (
            name!(version, String),
            name!(built_for, String),
            name!(preloaded, bool),
        ),
    > {
        TableIterator::once((
            env!("CARGO_PKG_VERSION").to_owned(),
            format!("PostgreSQL {}", pg_sys::PG_VERSION.to_string_lossy()),
            stats::shared(),
        ))
    }

    /// Clears the statistics (all slots, or one); superuser only.
    #[pg_extern(volatile)]
    fn reset_stats(slot_name: default!(Option<String>, "NULL")) -> bool {
        if !crate::pg::session::is_superuser() {
            crate::pg::error::Report::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "must be superuser to reset pubjson statistics",
            )
            .error();
        }
        stats::reset(slot_name.as_deref());
        true
    }
}

pgrx::extension_sql!(
    r#"
-- Decoding statistics joined with PostgreSQL's own figures for the slot:
-- a row for every slot with counters and for every pubjson slot (one that
-- has not decoded anything yet has NULL counters: its retained WAL is what
-- a monitor must not miss). One text for PostgreSQL 15 to 18:
-- pg_replication_slots columns newer than 15 are read as
-- to_jsonb(r) ->> 'column' (NULL where the server has none):
-- conflicting (16+, with 17's meaning: see pubjson._slot_conflicting),
-- invalidation_reason and inactive_since (17+). On a
-- standby (16+ can decode there) retained WAL counts from the replay
-- position. The search_path is pinned (and every name qualified besides):
-- the caller's path must not decide which to_jsonb or = runs.
CREATE FUNCTION pubjson.decoding_stats()
RETURNS TABLE (
    slot_name text, source text,
    txns_decoded bigint, txns_emitted bigint, txns_skipped_empty bigint,
    changes_seen bigint, changes_emitted bigint,
    filtered_by_table bigint, filtered_by_action bigint, filtered_by_row_filter bigint, filtered_by_origin bigint,
    updates_to_insert bigint, updates_to_delete bigint,
    bytes_emitted bigint, streamed_txns bigint, prepared_txns bigint,
    peak_reorder_buffer_bytes bigint,
    largest_txn_xid bigint, largest_txn_changes bigint, largest_txn_bytes bigint,
    largest_txn_spilled boolean, largest_txn_streamed boolean,
    max_wal_span_bytes bigint, max_commit_to_emit_ms double precision,
    spill_txns bigint, spill_count bigint, spill_bytes bigint,
    stream_txns bigint, stream_count bigint, stream_bytes bigint,
    total_txns bigint, total_bytes bigint,
    active boolean, restart_lsn pg_lsn, confirmed_flush_lsn pg_lsn,
    retained_wal_bytes numeric, wal_status text, safe_wal_size bigint,
    conflicting boolean, invalidation_reason text, inactive_since timestamptz,
    pending_txns integer, reorder_buffer_bytes bigint, oldest_pending_age interval,
    live_as_of timestamptz
)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    WITH c AS MATERIALIZED (SELECT * FROM pubjson.decoding_counters()),
         n AS (SELECT c.slot_name FROM c
               UNION
               SELECT p.slot_name::pg_catalog.text FROM pg_catalog.pg_replication_slots p
                WHERE p.plugin OPERATOR(pg_catalog.=) 'pubjson')
    SELECT n.slot_name, c.source,
           c.txns_decoded, c.txns_emitted, c.txns_skipped_empty,
           c.changes_seen, c.changes_emitted,
           c.filtered_by_table, c.filtered_by_action, c.filtered_by_row_filter, c.filtered_by_origin,
           c.updates_to_insert, c.updates_to_delete,
           c.bytes_emitted, c.streamed_txns, c.prepared_txns,
           c.peak_reorder_buffer_bytes,
           c.largest_txn_xid, c.largest_txn_changes, c.largest_txn_bytes,
           c.largest_txn_spilled, c.largest_txn_streamed,
           c.max_wal_span_bytes, c.max_commit_to_emit_ms,
           s.spill_txns, s.spill_count, s.spill_bytes,
           s.stream_txns, s.stream_count, s.stream_bytes,
           s.total_txns, s.total_bytes,
           r.active, r.restart_lsn, r.confirmed_flush_lsn,
           pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END,
               r.restart_lsn),
           r.wal_status, r.safe_wal_size,
           pubjson._slot_conflicting(j.slot),
           pubjson._slot_invalidation(j.slot),
           (j.slot OPERATOR(pg_catalog.->>) 'inactive_since')::pg_catalog.timestamptz,
           -- The live view counts while its session still decodes the
           -- slot; a slot nobody decodes holds nothing back; a session
           -- that has not sampled yet is unknown (NULL).
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.pending_txns
                WHEN NOT r.active THEN 0 END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.reorder_buffer_bytes
                WHEN NOT r.active THEN 0 END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid
                THEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) c.oldest_pending_first_seen END,
           CASE WHEN r.active_pid OPERATOR(pg_catalog.=) c.live_pid THEN c.live_as_of END
      FROM n
      LEFT JOIN c ON c.slot_name OPERATOR(pg_catalog.=) n.slot_name
      LEFT JOIN pg_catalog.pg_stat_replication_slots s
             ON s.slot_name OPERATOR(pg_catalog.=) n.slot_name
      LEFT JOIN pg_catalog.pg_replication_slots r
             ON r.slot_name OPERATOR(pg_catalog.=) n.slot_name
      CROSS JOIN LATERAL (SELECT pg_catalog.to_jsonb(r) AS slot) j
     ORDER BY n.slot_name
$$;

-- What the reorder buffers of pubjson's decoding sessions hold back now,
-- one row per top-level transaction (the 16 oldest per slot), with the
-- session that owns it (pg_stat_activity by backend_xid, as far as the
-- caller may see it), the WAL its slot retains because of it and the delay
-- its commit will add to the transactions behind it at the slot's measured
-- replay rate. Rows of a decoder that no longer decodes its slot (ended,
-- or failed) are left out.
CREATE FUNCTION pubjson.pending_transactions()
RETURNS TABLE (
    slot_name text, xid xid, first_lsn pg_lsn, first_seen timestamptz, age interval,
    changes bigint, changes_in_memory bigint, bytes_in_memory bigint,
    spilled boolean, spilled_changes bigint, streamed boolean, streamed_changes bigint,
    subtransactions integer,
    pid integer, usename name, application_name text, client_addr inet,
    xact_start timestamptz, state text, query text,
    retained_wal_bytes numeric, replay_changes_per_sec double precision,
    forecast_commit_delay interval,
    decoder_pid integer, as_of timestamptz
)
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    SELECT p.slot_name, x.xid,
           '0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) p.first_lsn::pg_catalog.numeric,
           p.first_seen, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) p.first_seen,
           p.changes_held OPERATOR(pg_catalog.+) p.changes_streamed,
           p.changes_in_memory, p.bytes_in_memory,
           p.spilled,
           CASE WHEN p.spilled THEN p.changes_held OPERATOR(pg_catalog.-) p.changes_in_memory ELSE 0 END,
           p.streamed, p.changes_streamed, p.subtransactions,
           a.pid, a.usename, a.application_name, a.client_addr, a.xact_start, a.state, a.query,
           pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END,
               '0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) p.first_lsn::pg_catalog.numeric),
           p.replay_changes_per_sec,
           pg_catalog.make_interval(secs =>
               p.changes_held::pg_catalog.float8 OPERATOR(pg_catalog./) p.replay_changes_per_sec),
           p.decoder_pid, p.as_of
      FROM pubjson._pending_transactions() p
      JOIN pg_catalog.pg_replication_slots r
        ON r.slot_name OPERATOR(pg_catalog.=) p.slot_name
       AND r.active_pid OPERATOR(pg_catalog.=) p.decoder_pid
      CROSS JOIN LATERAL (SELECT p.xid::pg_catalog.text::pg_catalog.xid AS xid) x
      LEFT JOIN pg_catalog.pg_stat_activity a
        ON a.backend_xid OPERATOR(pg_catalog.=) x.xid
     ORDER BY p.slot_name, p.first_lsn
$$;

-- Reading statistics follows PostgreSQL's convention: pg_read_all_stats
-- (which pg_monitor includes).
GRANT USAGE ON SCHEMA pubjson TO pg_read_all_stats;
REVOKE ALL ON FUNCTION pubjson.decoding_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.decoding_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.worst_transactions() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.reset_stats(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson._pending_transactions() FROM PUBLIC;
REVOKE ALL ON FUNCTION pubjson.pending_transactions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson._pending_transactions() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.pending_transactions() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.decoding_counters() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.decoding_stats() TO pg_read_all_stats;
GRANT EXECUTE ON FUNCTION pubjson.worst_transactions() TO pg_read_all_stats;
REVOKE ALL ON FUNCTION pubjson.library_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pubjson.library_version() TO pg_read_all_stats;
"#,
    name = "decoding_stats_view",
    requires = [
        decoding_counters,
        _pending_transactions,
        worst_transactions,
        reset_stats,
        library_version,
        "conflicts"
    ]
);
