//! Output encoding: JSON primitives and the wal2json formats (pure code).
pub mod control;
pub mod conversions;
pub mod datetime;
pub mod encoding;
pub mod json;
pub mod jsonb;
pub mod numeric;
pub mod wal2json;
