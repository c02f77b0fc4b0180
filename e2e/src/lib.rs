//! pubjson's end-to-end test support, used by every suite in `tests/`.
//!
//! The suites are client-driven: they talk to real servers with the
//! `postgres` client and real programs (pg_recvlogical, pg_basebackup,
//! pg_ctl), never from inside the server. Most run against the shared test
//! cluster named by the `PG*` variables (`eval "$(scripts/cluster.sh
//! env)"`); those that crash, restart or add servers start clusters of
//! their own under `$PUBJSON_TMP`.
//!
//! - [`env`]: the environment (cluster variables, server programs and
//!   those of other majors, directories for clusters and scratch files,
//!   skipped checks);
//! - [`server`]: connections, fresh databases, slots and databases dropped
//!   once the server has let go of them, server errors;
//! - [`wait`]: polling with a deadline;
//! - [`cluster`]: clusters of a test's own (also of another major) and
//!   physical standbys, pg_upgrade between two clusters;
//! - [`recvlogical`]: pg_recvlogical as a consumer;
//! - [`rng`]: seeded randomness for workloads;
//! - [`ddl_replica`]: docs/ddl.md's consumer algorithm as code, keeping
//!   a replica database's tables in step with format 3's `R` and `DDL`
//!   objects;
//! - [`debezium`]: the Debezium differential: Debezium 3.6's connector
//!   (embedded engine, through `e2e/debezium/capture.py`) and pubjson's
//!   `debezium` format over the same WAL, compared record by record; and
//!   Debezium's own description of tables (`e2e/debezium/describe.py`),
//!   which the format's schema change events are checked against;
//! - [`debezium_replica`]: docs/debezium.md's consumer of schema change
//!   events as code, keeping a replica database's tables in step;
//! - [`differential`]: the comparison with wal2json (slot pairs, option
//!   matrix, row diffs);
//! - [`exporter`]: Debian's Prometheus PostgreSQL exporter with pubjson's
//!   query file, scraped over loopback;
//! - [`change_stream`]: transactions of changes with each value as
//!   PostgreSQL text, the one form every reader below gives, whatever
//!   plugin wrote the stream;
//! - [`pgoutput_proto`]: pgoutput's binary protocol (version 1) decoded;
//! - [`pubjson_reader`]: pubjson's format-2 and format-3 rows read
//!   (streamed blocks put back together, prepared transactions as
//!   committed);
//! - [`test_decoding_reader`]: test_decoding's rows read, as raw change
//!   letters per transaction or whole rows with their values;
//! - [`stream_comparison`]: two such streams compared, transaction by
//!   transaction and change by change;
//! - [`pgoutput_scenario`]: the scenario harness of the pgoutput
//!   differential suite (`tests/publications.rs`): a database and slots of
//!   its own, both plugins peeked, decoded and compared;
//! - [`isolation`]: PostgreSQL's decoding scenarios as isolation specs,
//!   run with isolationtester and compared across test_decoding, pgoutput
//!   and pubjson's formats 2 and 3;
//! - [`conflicts`]: where the extra clusters of the conflicts suite (a
//!   subscriber, standbys, primaries of their own) live, and shorthands for
//!   the main test cluster;
//! - [`reliability`]: the reliability suite's private cluster, which its
//!   tests crash and restart one at a time;
//! - [`brokers`]: NATS (JetStream) and tansu (Kafka protocol) on
//!   loopback, installed by scripts/install-brokers.sh;
//! - [`relay`]: pubjson-relay as a process, the brokers read back, the
//!   replica built from them;
//! - [`walsender`]: a client of the logical replication protocol (what
//!   production consumers speak), reading a slot message by message and
//!   confirming positions itself.
//!
//! Run: `scripts/cluster.sh start && eval "$(scripts/cluster.sh env)" &&
//! cargo test -p pubjson-e2e` (add `-- --nocapture` for the per-case row
//! counts; `PUBJSON_E2E_SHOW=<part of a case label>` prints that case's
//! rows). `tests/docs.rs` runs the examples of README.md and docs/ (see
//! "Tested examples" in docs/development.md).

pub mod brokers;
pub mod change_stream;
pub mod cluster;
pub mod conflicts;
pub mod ddl_replica;
pub mod debezium;
pub mod debezium_replica;
pub mod differential;
pub mod env;
pub mod exporter;
pub mod isolation;
pub mod pgoutput_proto;
pub mod pgoutput_scenario;
pub mod pubjson_reader;
pub mod recvlogical;
pub mod relay;
pub mod reliability;
pub mod rng;
pub mod server;
pub mod stream_comparison;
pub mod test_decoding_reader;
pub mod wait;
pub mod walsender;

pub use cluster::{pg_upgrade, ExtraCluster, PgUpgrade, Place, SerialCluster, Standby};
pub use ddl_replica::SchemaReplica;
pub use differential::*;
pub use env::{
    cluster_dir, major_of, note_skip, pg_bin, pg_bin_dir, pg_bin_dir_of, pg_env,
    pubjson_missing_from, scratch_dir, soak, tmp_root, PgEnv,
};
pub use exporter::{Exporter, Metrics};
pub use recvlogical::{complete_lines, wait_commits, RecvLogical};
pub use rng::SeededRng;
pub use server::{
    alter_system, column, db_err, describe_backend, describe_error, drop_slot, exec, get_format3,
    get_objects, get_texts, json_lines, message_lines, one_row, one_string, peek_texts,
    pubjson_slot, rows, server_major, sqlstate, suite_database, try_drop_slots, wait_clients_gone,
    wait_replayed, wait_slot_released, wait_true, wait_wal_flushed, Conn, DbErr, Server, Slots,
    RELEASE_TIMEOUT,
};
pub use wait::{poll, retry, wait_for};
pub use walsender::{lsn_text, Walsender, WalsenderError, WalsenderFault, XLogData};

/// The first ten keys of `map` that `other` does not have, for failure
/// messages comparing a replica with its table.
pub fn keys_not_in<K: Ord + Clone, V, W>(
    map: &std::collections::BTreeMap<K, V>,
    other: &std::collections::BTreeMap<K, W>,
) -> Vec<K> {
    map.keys()
        .filter(|k| !other.contains_key(k))
        .take(10)
        .cloned()
        .collect()
}

/// Shortens long text for failure messages.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Parses an LSN `X/Y` into a number.
pub fn lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap_or_else(|| panic!("bad LSN {s:?}"));
    (u64::from_str_radix(hi, 16).expect("LSN") << 32) | u64::from_str_radix(lo, 16).expect("LSN")
}
