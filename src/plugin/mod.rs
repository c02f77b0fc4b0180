//! The decoding core: what pubjson does with each decoding event. The
//! callback shims (`callbacks.rs`) turn PostgreSQL's pointers into safe
//! handles (`pg/handles.rs`) and call safe code: transactions, streaming
//! and two-phase (`transactions.rs`), changes, truncates and messages
//! (`decode.rs`), the bookkeeping and output sink (`txn.rs`), the
//! per-slot state with its per-transaction records (`state.rs`) and the
//! live view's samples of the reorder buffer (`sampling.rs`).

mod callbacks;
mod ddl;
mod decode;
mod sampling;
mod state;
mod transactions;
mod txn;

use pgrx::pg_sys;
use pgrx::prelude::*;

/// Entry point PostgreSQL looks up when a slot uses `pubjson`.
///
/// # Safety
/// Called by PostgreSQL with a valid callback table.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn _PG_output_plugin_init(cb: *mut pg_sys::OutputPluginCallbacks) {
    // SAFETY: forwarded unchanged from PostgreSQL.
    unsafe { callbacks::register(cb) }
}
