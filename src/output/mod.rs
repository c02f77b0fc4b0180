//! Output encoding (pure code): the format chosen for a session
//! ([`format_for`], the interface in `format.rs`), wal2json's formats 1 and 2 (`wal2json/`), the streaming
//! and two-phase objects (`control.rs`) and the JSON primitives.
pub mod control;
pub mod conversions;
pub mod datetime;
pub mod encoding;
pub mod format;
pub mod json;
pub mod jsonb;
pub mod numeric;
pub mod type_name;
pub mod v3;
pub mod wal2json;

use crate::options::Options;
use format::OutputFormat;

/// The format the options ask for: the only place that looks at
/// `format-version` (which option parsing has checked).
pub fn format_for(opts: &Options) -> Box<dyn OutputFormat> {
    match opts.format_version {
        1 => Box::new(wal2json::v1::Format1::new(opts)),
        2 => Box::new(wal2json::v2::Format2::new(opts)),
        _ => Box::new(v3::Format3::new(opts)),
    }
}
