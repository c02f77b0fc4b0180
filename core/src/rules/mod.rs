//! What is published, and as what, as pure functions: the routing
//! decision every event goes through (`route.rs`), and pgoutput's rules it
//! relies on: which columns a table publishes (`column_list.rs`) and what a
//! row filter's verdict makes of a change (`row_filter.rs`).

pub mod column_list;
pub mod route;
pub mod row_filter;
