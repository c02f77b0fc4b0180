//! SQL-level operator functions shipped with the extension (schema `pubjson`).
//!
//! `conflicts.sql` holds the replication conflict inspection functions
//! (`pubjson.publication_risks`, `pubjson.subscription_status`,
//! `pubjson.standby_conflicts`); they are plain SQL/PL/pgSQL, so this module
//! only includes the file into the generated extension script.

pgrx::extension_sql_file!("conflicts.sql", name = "conflicts");
