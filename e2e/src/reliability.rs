//! The reliability suite's own cluster: it crashes and restarts the server,
//! so it never touches the shared test cluster. Everything else comes from
//! the support library.

use crate::cluster::SerialCluster;
use crate::{cluster_dir, Place, RecvLogical, Server};
use postgres::Client;
use std::time::Duration;

/// The suite's cluster lives under `$PUBJSON_TMP/pubjson-rel` (default `/tmp`).
pub fn root() -> String {
    cluster_dir("rel")
}
pub const PORT: u16 = 54331;

pub fn server() -> Server {
    Server::new(&format!("{}/socket", root()), PORT)
}

/// The suite's cluster, held for the whole of a test: the tests restart
/// the server, so they run one at a time ([`Place::take`]).
pub type Cluster = SerialCluster;

pub fn cluster() -> Cluster {
    Place::new("rel", PORT).take()
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
