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

use pubjson_e2e::isolation::{run_spec, Totals};
use pubjson_e2e::Place;

/// Runs spec `name` on its own cluster at `port`; each spec must compare at
/// least `min_changes` changes of test_decoding with pubjson's.
fn spec(name: &'static str, port: u16, min_changes: usize) -> Option<Totals> {
    let t = run_spec(Place::new(name, port), name)?;
    assert!(
        t.changes >= min_changes,
        "{name}: {} changes compared, the scenario decodes at least {min_changes}: {:?}",
        t.changes,
        (t.permutations, t.decode_calls, t.txns)
    );
    Some(t)
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

/// Also: a creation cancelled or terminated while it waits leaves no slot.
#[test]
fn slot_creation_error() {
    let Some(t) = spec("slot_creation_error", 54380, 3) else {
        return;
    };
    // The view of the slots after the cancel, after the termination: empty.
    let last_view = |out: &str| {
        let at = out.rfind("step s1_view_slots").expect("s1_view_slots ran");
        out[at..].contains("(0 rows)")
    };
    assert!(
        t.outputs[0].contains("canceling statement due to user request")
            && last_view(&t.outputs[0]),
        "{}",
        t.outputs[0]
    );
    assert!(
        t.outputs[1].contains("iso_pj") && t.outputs[1].contains("iso_td"),
        "{}",
        t.outputs[1]
    );
    assert!(last_view(&t.outputs[2]), "{}", t.outputs[2]);
}

/// Also: pubjson did stream (a block or more per permutation).
#[test]
fn concurrent_stream() {
    let Some(t) = spec("concurrent_stream", 54381, 2002) else {
        return;
    };
    assert!(
        t.streamed_blocks >= 2,
        "nothing was streamed: {}",
        t.streamed_blocks
    );
}

/// Also: pubjson decoded the prepared transaction as one (P, then CP).
#[test]
fn twophase_snapshot() {
    let Some(t) = spec("twophase_snapshot", 54382, 2) else {
        return;
    };
    assert_eq!(t.commits_prepared, 1, "pubjson's COMMIT PREPARED events");
}
