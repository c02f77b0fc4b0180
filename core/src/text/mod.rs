//! Text primitives shared by PostgreSQL's side and the formats (pure
//! code): JSON strings and numbers (`json.rs`), names and type names as
//! JSON (`type_name.rs`), the output of databases that are not UTF-8
//! rewritten as ASCII JSON and the names in server messages
//! (`encoding.rs`, `conversions.rs`). They depend only on the model.
pub mod conversions;
pub mod encoding;
pub mod json;
pub mod sql_redact;
pub mod type_name;
