//! The logical decoding output plugin: callback table, options, decoding
//! state and the per-relation cache.

mod callbacks;
pub mod column_list;
mod decode;
pub mod options;
mod publication;
mod relation;
pub mod row_filter;
pub mod server_encoding;
mod state;
mod stream;
mod tuple;
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
