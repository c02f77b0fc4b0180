//! The whole SQL surface of the extension (schema `pubjson`): the decoding
//! statistics functions (`stats_functions.rs`) and the files below.
//!
//! `schema_guard.sql` opens the extension script (and, as a copy, every
//! upgrade script): it refuses a schema `pubjson` that a role other than a
//! superuser owns or may create objects in, or that holds any object that
//! is not part of the extension (CREATE EXTENSION uses an existing schema as
//! it finds it; issue 23).
//!
//! `conflicts.sql` holds the replication conflict inspection functions
//! (`pubjson.publication_risks`, `pubjson.subscription_status`,
//! `pubjson.standby_conflicts`) and the internal helper
//! `pubjson._slot_invalidation` (also used by `pubjson.decoding_stats`, see
//! `stats_functions.rs`); they are plain SQL/PL/pgSQL, so this module only includes the
//! file into the generated extension script, after the one C function they
//! call (`recovery.rs`: the startup process's WAL receipt time).
//!
//! `ddl.sql` holds DDL capture's switch (`pubjson.enable_ddl_capture`,
//! `pubjson.disable_ddl_capture`; see docs/ddl.md), after the event
//! triggers' function `pubjson._ddl_event` (its shim `event_trigger.rs`,
//! the capture `ddl_capture.rs`, in Rust for its cost); `plugin::ddl`
//! decodes its messages.
//!
//! Safe code but for the event trigger's shim: what reads PostgreSQL's
//! memory is behind `pg/`.
//!
//! Every SQL and PL/pgSQL function pins `SET search_path = pg_catalog,
//! pg_temp`, so nothing on the caller's search_path can stand in for a
//! function or operator they use (PostgreSQL's "Security Considerations for
//! Extensions"); `e2e/tests/sql_security.rs` checks it with planted
//! look-alikes.
//!
//! The same text is installed for every supported major (15 to 18): columns
//! that only newer servers have are read as `to_jsonb(row) ->> 'column'`
//! (NULL where absent), so no per-version file or `cfg` is needed, and the
//! functions return the same columns everywhere (NULL where the server does
//! not track a value).

mod backfill;
mod ddl_capture;
mod event_trigger;
mod recovery;
mod stats_functions;

pgrx::extension_sql_file!("schema_guard.sql", name = "schema_guard", bootstrap);
pgrx::extension_sql_file!(
    "backfill.sql",
    name = "backfill",
    requires = [backfill_start, backfill_chunk, backfill_running]
);
pgrx::extension_sql_file!(
    "conflicts.sql",
    name = "conflicts",
    requires = [replay_receipt_time]
);
pgrx::extension_sql_file!(
    "ddl.sql",
    name = "ddl",
    requires = ["conflicts", "decoding_stats_view", ddl_event]
);

/// The extension's settings that exist in every process that loads it
/// (`_PG_init`); the statistics' setting exists only when preloaded.
pub fn define_settings() {
    ddl_capture::define_settings();
}
