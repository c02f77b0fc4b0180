//! Output encoding (pure code): the format chosen for a session
//! (`format.rs`), wal2json's formats 1 and 2 (`wal2json/`), the streaming
//! and two-phase objects (`control.rs`) and the JSON primitives.
pub mod control;
pub mod datetime;
pub mod format;
pub mod json;
pub mod jsonb;
pub mod numeric;
pub mod wal2json;
