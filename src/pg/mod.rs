//! The PostgreSQL edge: everything that reads PostgreSQL's memory during
//! decoding, behind safe functions. Safe handles on the callbacks'
//! arguments (`handles.rs`), the relation cache and its catalog reads
//! (`relation.rs`), publications with their executor state and row filters
//! (`publication.rs`), decoded tuples as values for the formats
//! (`tuple.rs`), the database encoding and its conversion to UTF-8
//! (`server_encoding.rs`), cache invalidation callbacks (`invalidation.rs`) and ports
//! of PostgreSQL macros and inline functions (`port.rs`).
//!
//! Every `unsafe` block here names the invariant it relies on; the decoding
//! core (`plugin/`, but for its callback shims) has none.

pub mod catalog;
pub mod columns;
pub mod error;
pub mod event_trigger;
pub mod handles;
pub mod invalidation;
pub mod logical_message;
pub mod output;
pub mod port;
pub mod publication;
pub mod relation;
pub mod reorder;
pub mod server_encoding;
pub mod session;
pub mod settings;
pub mod spi;
pub mod sql_parse;
pub mod tuple;
