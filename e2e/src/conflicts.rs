//! Where the extra clusters of `conflicts.rs` (and of the suites that
//! borrow them) live, and shorthands for the main test cluster. The
//! clusters themselves, connections and waiting come from the support
//! library.

use crate::{try_drop_slots, Server, Slots, Standby};
use postgres::Client;
use std::time::Duration;

pub fn sub_root() -> String {
    crate::cluster_dir("sub")
}
pub const SUB_PORT: u16 = 54332;
pub fn standby_root() -> String {
    crate::cluster_dir("standby")
}
pub const STANDBY_PORT: u16 = 54333;
/// A primary of its own for the logical-slot-on-standby test (16+), so that
/// nothing else on the main cluster holds back the catalog horizon.
pub fn ls_primary_root() -> String {
    crate::cluster_dir("lsprimary")
}
pub const LS_PRIMARY_PORT: u16 = 54335;
pub fn ls_standby_root() -> String {
    crate::cluster_dir("lsstandby")
}
pub const LS_STANDBY_PORT: u16 = 54336;

/// The subscriber of the parallel apply test (16+).
pub fn par_sub_root() -> String {
    crate::cluster_dir("parsub")
}
pub const PAR_SUB_PORT: u16 = 54338;

/// A cluster of its own for the WAL-removal invalidation test.
pub fn wal_root() -> String {
    crate::cluster_dir("walremoved")
}
pub const WAL_PORT: u16 = 54337;

/// server_version_num of the connected server (150000 and up).
pub fn server_version(c: &mut Client) -> i32 {
    c.query_one("select current_setting('server_version_num')::int", &[])
        .expect("server_version_num")
        .get(0)
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

/// A standby of the main cluster at `standby_root()` / STANDBY_PORT.
pub fn standby_of_main() -> Standby {
    Standby::start_of(&Server::main(), &standby_root(), STANDBY_PORT)
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
