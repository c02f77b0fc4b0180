//! pgoutput's publication decisions as pure functions: which columns a
//! table publishes (`column_list.rs`) and what a row filter's verdict makes
//! of a change (`row_filter.rs`).

pub mod column_list;
pub mod row_filter;
