//! Connections to a server: the shared test cluster or a test's own
//! cluster, fresh databases, and server errors as the tests compare them.

use crate::env::pg_env;
use crate::wait::retry;
use postgres::error::DbError;
use postgres::{Client, Config, NoTls, SimpleQueryMessage};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Where a PostgreSQL server listens (a socket directory and a port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

impl Server {
    /// The shared test cluster (`PGHOST`, `PGPORT`).
    pub fn main() -> Server {
        let env = pg_env();
        Server {
            host: env.host,
            port: env.port,
        }
    }

    pub fn new(host: &str, port: u16) -> Server {
        Server {
            host: host.to_string(),
            port,
        }
    }

    /// The connection settings for `dbname` as `user`.
    pub fn config(&self, dbname: &str, user: &str) -> Config {
        let mut config = Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(user)
            .dbname(dbname)
            .application_name("pubjson-e2e")
            .connect_timeout(Duration::from_secs(10));
        config
    }

    pub fn try_connect(&self, dbname: &str, user: &str) -> Result<Client, postgres::Error> {
        self.config(dbname, user).connect(NoTls)
    }

    /// Connects to `dbname` as `postgres`; panics when it cannot.
    pub fn connect(&self, dbname: &str) -> Client {
        self.connect_as(dbname, "postgres")
    }

    pub fn connect_as(&self, dbname: &str, user: &str) -> Client {
        self.try_connect(dbname, user).unwrap_or_else(|e| {
            panic!(
                "cannot connect to database {dbname} as {user} on {}:{}: {}",
                self.host,
                self.port,
                describe_error(&e)
            )
        })
    }

    /// Connects, retrying for `timeout` (the server may be starting or
    /// restarting after a crash).
    pub fn connect_retrying(&self, dbname: &str, timeout: Duration) -> Client {
        retry(timeout, || self.try_connect(dbname, "postgres")).unwrap_or_else(|e| {
            panic!(
                "cannot connect to database {dbname} on {}:{} within {timeout:?}: {}",
                self.host,
                self.port,
                describe_error(&e)
            )
        })
    }

    /// A connection that keeps the notices (WARNINGs etc.) the server sends.
    pub fn connect_keeping_notices(&self, dbname: &str, user: &str) -> Conn {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&notices);
        let client = self
            .config(dbname, user)
            .notice_callback(move |n| lock(&sink).push(n))
            .connect(NoTls)
            .unwrap_or_else(|e| {
                panic!(
                    "cannot connect to database {dbname} as {user} on {}:{}: {}",
                    self.host,
                    self.port,
                    describe_error(&e)
                )
            });
        Conn { client, notices }
    }

    /// Waits until the server accepts connections and answers a query
    /// (after a crash the postmaster runs recovery first).
    pub fn wait_connectable(&self, timeout: Duration) {
        retry(timeout, || {
            self.try_connect("postgres", "postgres")?
                .simple_query("select 1")
                .map(drop)
        })
        .unwrap_or_else(|e| {
            panic!(
                "the server on {}:{} did not accept connections within {timeout:?}: {e}",
                self.host, self.port
            )
        });
    }

    /// Drops database `name` with its replication slots (retrying while a
    /// walsender releases one), if it exists.
    pub fn drop_database(&self, name: &str) -> Result<(), String> {
        let mut admin = retry(Duration::from_secs(30), || {
            self.try_connect("postgres", "postgres")
        })
        .map_err(|e| format!("cannot connect to drop database {name}: {e}"))?;
        retry(Duration::from_secs(15), || {
            admin.execute(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots \
                 where database = $1",
                &[&name],
            )
        })
        .map_err(|e| format!("dropping the slots of {name}: {}", describe_error(&e)))?;
        admin
            .batch_execute(&format!("drop database if exists {name} with (force)"))
            .map_err(|e| format!("drop database {name}: {}", describe_error(&e)))
    }

    /// A new, empty database `name` (an earlier one is dropped first, with
    /// its slots); returns a connection to it.
    pub fn fresh_database(&self, name: &str) -> Client {
        self.drop_database(name).unwrap_or_else(|e| panic!("{e}"));
        exec(
            &mut self.connect("postgres"),
            &format!("create database {name}"),
        );
        self.connect_retrying(name, Duration::from_secs(20))
    }

    /// [`Self::fresh_database`] with `create extension pubjson`.
    pub fn fresh_database_with_pubjson(&self, name: &str) -> Client {
        let mut c = self.fresh_database(name);
        exec(&mut c, "create extension pubjson");
        c
    }
}

/// The server's major version (15, 16, 17, 18).
pub fn server_major(client: &mut Client) -> u32 {
    let num: String = client
        .query_one("select current_setting('server_version_num')", &[])
        .unwrap_or_else(|e| panic!("server_version_num: {}", describe_error(&e)))
        .get(0);
    num.parse::<u32>().expect("server_version_num") / 10000
}

/// Drops replication slot `slot` if it exists, retrying for `timeout`
/// while it is active (a walsender may still be releasing it).
pub fn drop_slot(
    client: &mut Client,
    slot: &str,
    timeout: Duration,
) -> Result<(), postgres::Error> {
    retry(timeout, || {
        client
            .execute(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots \
                 where slot_name = $1",
                &[&slot],
            )
            .map(drop)
    })
}

/// A client plus the notices (WARNINGs etc.) the server sent it.
pub struct Conn {
    pub client: Client,
    notices: Arc<Mutex<Vec<DbError>>>,
}

impl Conn {
    /// Notices received since the last call, as `SEVERITY: message`.
    pub fn take_notices(&mut self) -> Vec<String> {
        self.take_notice_errors()
            .iter()
            .map(|n| format!("{}: {}", n.severity(), n.message()))
            .collect()
    }

    /// Notices received since the last call, whole.
    pub fn take_notice_errors(&mut self) -> Vec<DbError> {
        std::mem::take(&mut *lock(&self.notices))
    }

    /// Runs SQL with the simple-query protocol; panics with the server's
    /// error.
    pub fn exec(&mut self, sql: &str) {
        exec(&mut self.client, sql);
    }

    /// The rows `sql` returns, as text, through the simple-query protocol:
    /// no statement is prepared, so the client library runs no catalog
    /// queries of its own.
    pub fn simple(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, postgres::Error> {
        Ok(self
            .client
            .simple_query(sql)?
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect())
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs SQL with the simple-query protocol; panics with the server's error.
pub fn exec(client: &mut Client, sql: &str) {
    if let Err(e) = client.batch_execute(sql) {
        panic!(
            "SQL failed: {}\n  {}",
            describe_error(&e),
            crate::truncate(sql, 2000)
        );
    }
}

/// The first column of the single row `sql` returns.
pub fn one_string(client: &mut Client, sql: &str) -> String {
    match client.query_one(sql, &[]) {
        Ok(r) => r.get(0),
        Err(e) => panic!("{sql}: {}", describe_error(&e)),
    }
}

/// `SEVERITY SQLSTATE: message` (plus detail) of a server error, or the
/// error itself.
pub fn describe_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
            if let Some(d) = db.detail() {
                s += &format!(" DETAIL: {d}");
            }
            s
        }
        None => e.to_string(),
    }
}

/// The SQLSTATE of a server error (`no SQLSTATE: ...` for other errors).
pub fn sqlstate(e: &postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// A server error, reduced to what the tests compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbErr {
    pub code: String,
    pub message: String,
    pub detail: String,
    pub context: String,
}

impl fmt::Display for DbErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERROR {}: {}", self.code, self.message)?;
        if !self.detail.is_empty() {
            write!(f, " (DETAIL: {})", self.detail)?;
        }
        if !self.context.is_empty() {
            write!(f, " (CONTEXT: {})", self.context.replace('\n', " | "))?;
        }
        Ok(())
    }
}

pub fn db_err(e: &postgres::Error) -> DbErr {
    match e.as_db_error() {
        Some(d) => DbErr {
            code: d.code().code().to_string(),
            message: d.message().to_string(),
            detail: d.detail().unwrap_or("").to_string(),
            context: d.where_().unwrap_or("").to_string(),
        },
        None => DbErr {
            code: String::new(),
            message: format!("{e} (no error from the server: did the backend crash?)"),
            detail: String::new(),
            context: String::new(),
        },
    }
}
