//! The reliability suite's own cluster: it crashes and restarts the server,
//! so it never touches the shared test cluster. Everything else comes from
//! the support library.

use crate::{cluster_dir, ExtraCluster, RecvLogical, Server};
use postgres::Client;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// The suite's cluster lives under `$PUBJSON_TMP/pubjson-rel` (default `/tmp`).
pub fn root() -> String {
    cluster_dir("rel")
}
pub const PORT: u16 = 54331;

pub fn server() -> Server {
    Server::new(&format!("{}/socket", root()), PORT)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held for the whole of a test: the tests restart the server, so they run
/// one at a time. The cluster is destroyed and created afresh once per
/// process, started by each test and stopped when the guard drops.
pub struct Cluster {
    // Dropped first: stopped before the next test may start it.
    cluster: ExtraCluster,
    _guard: MutexGuard<'static, ()>,
}

impl Cluster {
    /// `pg_ctl -m <mode> restart`; waits until it accepts connections again.
    pub fn pg_ctl_restart(&self, mode: &str) {
        self.cluster.pg_ctl_restart(mode);
    }
}

pub fn cluster() -> Cluster {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    static FRESH: OnceLock<()> = OnceLock::new();
    FRESH.get_or_init(|| ExtraCluster::destroy(&root(), PORT));
    Cluster {
        cluster: ExtraCluster::reuse(&root(), PORT),
        _guard: guard,
    }
}

pub fn wait_connectable(timeout: Duration) {
    server().wait_connectable(timeout);
}

pub fn try_connect(dbname: &str, user: &str) -> Result<Client, postgres::Error> {
    server().try_connect(dbname, user)
}

pub fn connect(dbname: &str) -> Client {
    server().connect(dbname)
}

pub fn connect_as(dbname: &str, user: &str) -> Client {
    server().connect_as(dbname, user)
}

/// A fresh database `name` (dropped first, with its slots).
pub fn fresh_db(name: &str) -> Client {
    server().fresh_database(name)
}

/// pg_recvlogical on the suite's cluster, streaming `slot` of `db` into
/// `file` (`opts` as `name` or `name=value`).
pub fn recv_start(
    db: &str,
    slot: &str,
    file: &std::path::Path,
    opts: &[&str],
    extra: &[&str],
) -> RecvLogical {
    RecvLogical::start_on(&server(), ("postgres", db), slot, file, opts, extra)
}
