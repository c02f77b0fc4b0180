//! Unit tests of the Debezium format: every record parsed with serde_json
//! and compared with what Debezium 3.6 writes.
