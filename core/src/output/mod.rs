//! The output formats (pure code): the format chosen for a session
//! ([`format_for`], the interface and what every format shares in
//! `format.rs`), wal2json's formats 1 and 2 (`wal2json/`), pubjson's
//! format 3 (`v3/`), Debezium's change events (`debezium/`), the
//! streaming and two-phase objects (`control.rs`),
//! and the value encoders they use: jsonb from its binary form
//! (`jsonb.rs`), numeric and timestamp text (`numeric.rs`, `datetime.rs`).
//! The JSON and encoding primitives PostgreSQL's side uses too are in
//! [`crate::text`] (re-exported here for the formats).
//!
//! A format is a module implementing [`format::OutputFormat`] and one arm
//! in [`format_for`]; it encodes the [`Value`](crate::model::Value)s of
//! the rows it is given its own way.
pub mod control;
pub mod datetime;
pub mod debezium;
pub mod format;
pub mod jsonb;
pub mod numeric;
#[cfg(test)]
pub mod test_values;
pub mod v3;
pub mod wal2json;

use crate::options::Options;
use format::OutputFormat;

/// The format the options ask for: the only place that looks at
/// `format-version` (which option parsing has checked).
pub fn format_for(opts: &Options) -> Box<dyn OutputFormat> {
    match opts.format_version {
        crate::options::FORMAT_DEBEZIUM => Box::new(debezium::FormatDebezium::new(opts)),
        1 => Box::new(wal2json::v1::Format1::new(opts)),
        2 => Box::new(wal2json::v2::Format2::new(opts)),
        _ => Box::new(v3::Format3::new(opts)),
    }
}
