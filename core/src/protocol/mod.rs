//! The in-band messages between the extension's SQL side and the decoder:
//! each protocol's prefix, its writer (used by the SQL functions) and its
//! reader (used by decoding) live side by side, with round-trip tests.
//!
//! - [`backfill`]: a chunk of `pubjson.backfill()`, its rows and markers;
//! - [`ddl`]: DDL capture's event of one DDL command.

pub mod backfill;
pub mod ddl;
