//! Where the extra clusters of `conflicts.rs` (and of the suites that
//! borrow them) live, and shorthands for the main test cluster. The
//! clusters themselves, connections and waiting come from the support
//! library.

use crate::{try_drop_slots, ExtraCluster, Place, Server, Slots, Standby};
use postgres::Client;
use std::time::Duration;

/// The subscriber of the conflict tests.
pub const SUB: Place = Place::new("sub", 54332);
/// The standby of the main cluster.
pub const STANDBY: Place = Place::new("standby", 54333);
/// A primary of its own for the logical-slot-on-standby test (16+), so that
/// nothing else on the main cluster holds back the catalog horizon, and its
/// standby.
pub const LS_PRIMARY: Place = Place::new("lsprimary", 54335);
pub const LS_STANDBY: Place = Place::new("lsstandby", 54336);
/// The subscriber of the parallel apply test (16+).
pub const PAR_SUB: Place = Place::new("parsub", 54338);
/// A cluster of its own for the WAL-removal invalidation test.
pub const WAL: Place = Place::new("walremoved", 54337);

/// server_version_num of the connected server (150000 and up).
pub fn server_version(c: &mut Client) -> i32 {
    c.query_one("select current_setting('server_version_num')::int", &[])
        .expect("server_version_num")
        .get(0)
}

/// Waits (bounded) until the standby's startup process has published the
/// receipt time it counts the streaming delay from
/// (`pubjson._replay_receipt_time()` not NULL). It does so only when it is
/// caught up and the WAL receiver's newest chunk starts where replay stands
/// (`WaitForWALToBecomeAvailable`); on a loaded machine the receiver can be
/// a chunk ahead every time, so this commits a transaction on the primary
/// (a commit record each) until it has. Until then `standby_conflicts()`
/// reports the budget as an upper bound, not exact.
pub fn await_replay_receipt_time(primary: &mut Client, standby: &mut Client) {
    crate::poll(
        "the startup process published its receipt time",
        Duration::from_secs(30),
        || {
            primary
                .batch_execute("begin; select pg_catalog.txid_current(); commit")
                .expect("commit on the primary");
            std::thread::sleep(Duration::from_millis(100));
            standby
                .query_one("select pubjson._replay_receipt_time() is not null", &[])
                .ok()?
                .get::<_, bool>(0)
                .then_some(())
        },
    );
}

/// (socket directory, port) of the main test cluster.
pub fn main_cluster() -> (String, u16) {
    let server = Server::main();
    (server.host, server.port)
}

pub fn connect_main(db: &str) -> Client {
    Server::main().connect(db)
}

/// Drops and recreates `db` on the given server, with the extension.
pub fn fresh_db(host: &str, port: u16, db: &str, extension: bool) -> Client {
    let server = Server::new(host, port);
    if extension {
        server.fresh_database_with_pubjson(db)
    } else {
        server.fresh_database(db)
    }
}

/// A standby of the main cluster at [`STANDBY`].
pub fn standby_of_main() -> Standby {
    STANDBY.standby_of(&Server::main())
}

/// A subscriber of the main cluster at `place`: a fresh database `subdb`
/// with pubjson and `ddl` (its tables), for a subscription whose slot on the
/// main cluster is `slot`. Bound as `let (cluster, cleanup, client)`, they
/// drop in reverse: the connection, then the slot, then the cluster.
pub fn subscriber(place: Place, slot: &str, ddl: &str) -> (ExtraCluster, SlotCleanup, Client) {
    let cluster = place.start();
    let cleanup = SlotCleanup(slot.to_string());
    let mut client = cluster.server().fresh_database_with_pubjson("subdb");
    crate::exec(&mut client, ddl);
    (cluster, cleanup, client)
}

/// Drops a replication slot on the main cluster on drop (if it exists).
pub struct SlotCleanup(pub String);

impl Drop for SlotCleanup {
    fn drop(&mut self) {
        let mut c = connect_main("postgres");
        // Bounded: a failing test may be unwinding.
        let _ = try_drop_slots(&mut c, Slots::Named(&self.0), Duration::from_secs(10));
    }
}
