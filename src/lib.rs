//! pubjson: a PostgreSQL logical decoding output plugin that emits
//! wal2json-compatible JSON.
//!
//! Layout: `plugin` holds the callbacks and everything that touches
//! PostgreSQL during decoding; `output` holds the pure JSON encoders;
//! `stats` the decoding statistics and their SQL functions.

#[cfg(not(panic = "unwind"))]
compile_error!(
    "pubjson must be built with panic = \"unwind\": pgrx turns panics into PostgreSQL ERRORs"
);

pub mod api;
pub mod output;
pub mod plugin;
pub mod stats;

pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // pgrx writes the Rust backtrace it captures for an error into the
    // error's DETAIL, which clients receive, whenever RUST_BACKTRACE is set
    // in the server's environment. RUST_LIB_BACKTRACE=0 turns those
    // captures off (it overrides RUST_BACKTRACE for them) before the first
    // one: std reads the variables once per process. Backends are
    // single-threaded, so changing the environment here is sound.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    stats::init();
}
