//! pubjson's pure modules, compiled without PostgreSQL: the same source
//! files as the extension's (`#[path]`), so the fuzz targets exercise the
//! code that ships. That these compile here at all also checks that they
//! stay pure (no pgrx, nothing from `pg/` or `plugin/`).
#![allow(dead_code, unused_imports)]

#[path = "../../src/model.rs"]
pub mod model;
#[path = "../../src/options.rs"]
pub mod options;
#[path = "../../src/output/mod.rs"]
pub mod output;
#[path = "../../src/rules/mod.rs"]
pub mod rules;
#[path = "../../src/text/mod.rs"]
pub mod text;
