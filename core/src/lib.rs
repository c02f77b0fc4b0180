//! pubjson's pure core: everything the output plugin decides and writes
//! that needs no PostgreSQL. The extension (`pubjson`, one directory up)
//! reads PostgreSQL's memory and calls into this crate; the fuzz targets
//! and the unit tests use it alone.
//!
//! - [`model`]: relations, columns, kinds of change, transaction facts,
//!   the typed values of a row (imports nothing);
//! - [`options`]: the output plugin's options, parsed and checked;
//! - [`output`]: the output formats behind one interface, and the value
//!   encoders they use;
//! - [`rules`]: pgoutput's publication rules and the routing decision
//!   every event goes through;
//! - [`text`]: JSON and encoding primitives, what DDL capture may show of
//!   a statement;
//! - [`protocol`]: the in-band messages the extension's SQL side writes and
//!   the decoder reads (backfill chunks, DDL capture's events);
//! - [`stats`]: the decoding statistics' bookkeeping.
//!
//! Layers, from the top down (a module imports only from those below):
//! `output` and `stats`; `rules`; `protocol`; `text`; `options`, `model`.

pub mod model;
pub mod options;
pub mod output;
pub mod protocol;
pub mod rules;
pub mod stats;
pub mod text;
