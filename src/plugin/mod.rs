//! The decoding core: what pubjson does with each decoding event. The
//! callback shims (`callbacks.rs`) turn PostgreSQL's pointers into safe
//! handles (`pg/handles.rs`) and call safe code: transactions, streaming
//! and two-phase (`transactions.rs`); row changes, truncates, messages and
//! backfill chunks (`events.rs`) and DDL events (`ddl.rs`), each through
//! the routing decision (`pubjson_core::rules::route`); what is written and
//! when: the format, deferred BEGIN, progress (`emitter.rs`); the
//! transactions' records (`txn_records.rs`); the per-slot state that holds
//! it all and counts (`state.rs`); the live view's samples of the reorder
//! buffer (`sampling.rs`).

mod callbacks;
mod ddl;
mod emitter;
mod events;
mod sampling;
mod state;
mod transactions;
mod txn_records;

// The output plugin's entry point, which PostgreSQL looks up by name.
pub use callbacks::_PG_output_plugin_init;
