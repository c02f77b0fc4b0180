//! pubjson: a PostgreSQL logical decoding output plugin that emits
//! wal2json-compatible JSON.
//!
//! Layout (from the top down; nothing imports upwards): `plugin` holds the
//! callback shims and the safe decoding core; `pg` the PostgreSQL edge
//! (safe handles, catalog reads, publications, tuples as typed values,
//! ports); `output` the formats, which encode those values; `text` the
//! JSON and encoding primitives both of them use, `model` the relations,
//! changes and values they share (importing nothing), `rules` pgoutput's
//! publication decisions, `options` the option parser and `backfill` the
//! backfill message's bytes (all pure); `stats` the decoding statistics;
//! `api` the SQL surface.

#[cfg(not(panic = "unwind"))]
compile_error!(
    "pubjson must be built with panic = \"unwind\": pgrx turns panics into PostgreSQL ERRORs"
);

pub mod api;
pub mod pg;
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
    api::define_settings();
    stats::init();
}
