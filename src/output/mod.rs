//! Output encoding: JSON primitives and the wal2json formats (pure code).
pub mod control;
pub mod json;
pub mod wal2json;
