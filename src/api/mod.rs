//! SQL-level operator functions shipped with the extension (schema `pubjson`).
//!
//! `conflicts.sql` holds the replication conflict inspection functions
//! (`pubjson.publication_risks`, `pubjson.subscription_status`,
//! `pubjson.standby_conflicts`) and the internal helper
//! `pubjson._slot_invalidation` (also used by `pubjson.decoding_stats`, see
//! `stats.rs`); they are plain SQL/PL/pgSQL, so this module only includes the
//! file into the generated extension script.
//!
//! The same text is installed for every supported major (15 to 18): columns
//! that only newer servers have are read as `to_jsonb(row) ->> 'column'`
//! (NULL where absent), so no per-version file or `cfg` is needed, and the
//! functions return the same columns everywhere (NULL where the server does
//! not track a value).

pgrx::extension_sql_file!("conflicts.sql", name = "conflicts");
