//! PostgreSQL's logical decoding scenarios through pubjson: pubjson's own
//! isolation specs (`e2e/isolation/*.spec`, after the interleavings of
//! contrib/test_decoding's specs), each run with `isolationtester` on a
//! cluster of its own, every decoding call compared across test_decoding,
//! pgoutput and pubjson's formats 2 and 3 (see `pubjson_e2e::isolation`).
//! Without isolationtester for the server under test, each test notes a
//! skip naming what is missing.
//!
//! Run: `scripts/install.sh && scripts/cluster.sh start &&
//! eval "$(scripts/cluster.sh env)" && cargo test -p pubjson-e2e --test isolation`
//! (`PUBJSON_ISO_SHOW=1` prints isolationtester's output of every run).

use pubjson_e2e::isolation::run_spec;
use pubjson_e2e::Place;

/// Runs spec `name` on its own cluster at `port`; each spec must compare at
/// least `min_changes` changes of test_decoding with pubjson's.
fn spec(name: &'static str, port: u16, min_changes: usize) {
    let Some(t) = run_spec(Place::new(name, port), name) else {
        return;
    };
    assert!(
        t.changes >= min_changes,
        "{name}: {} changes compared, the scenario decodes at least {min_changes}: {t:?}",
        t.changes
    );
}

#[test]
fn invalidation_distribution() {
    spec("invalidation_distribution", 54370, 15);
}

#[test]
fn concurrent_ddl_dml() {
    spec("concurrent_ddl_dml", 54371, 50);
}

#[test]
fn catalog_change_snapshot() {
    spec("catalog_change_snapshot", 54372, 2);
}

#[test]
fn subxact_without_top() {
    spec("subxact_without_top", 54373, 1);
}

#[test]
fn mxact() {
    spec("mxact", 54374, 4);
}

#[test]
fn oldest_xmin() {
    spec("oldest_xmin", 54375, 1);
}

#[test]
fn delayed_startup() {
    spec("delayed_startup", 54376, 2);
}

#[test]
fn ondisk_startup() {
    spec("ondisk_startup", 54377, 3);
}

#[test]
fn snapshot_transfer() {
    spec("snapshot_transfer", 54378, 4);
}

#[test]
fn skip_snapshot_restore() {
    spec("skip_snapshot_restore", 54379, 2);
}
