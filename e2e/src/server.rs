//! Connections to a server: the shared test cluster or a test's own
//! cluster, fresh databases, and server errors as the tests compare them.

use crate::env::pg_env;
use crate::wait::{poll, retry};
use postgres::error::DbError;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, SimpleQueryMessage};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// An application name no other client of this run has, for the `kind`
/// of client (`recv` for pg_recvlogical, `walsender` for the protocol
/// client): `pubjson-e2e-{kind}-{pid}-{n}`, so that a test finds that
/// client's backend, and only it, in `pg_stat_activity`.
pub fn unique_application_name(kind: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "pubjson-e2e-{kind}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Where a PostgreSQL server listens (a socket directory and a port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

impl Server {
    /// Runs this tree's client program `program` (pg_dump, psql, ...) on
    /// database `db` of this server as `postgres`, with `args`; fails with
    /// its stderr unless it succeeds. Gives its output.
    pub fn run_client(&self, program: &str, db: &str, args: &[&str]) -> String {
        let port = self.port.to_string();
        let out = std::process::Command::new(crate::env::pg_bin(program))
            .args(["-h", &self.host, "-p", &port, "-U", "postgres", "-d", db])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {db} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{program}'s output: {e}"))
    }

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

    /// A writer's connection to `dbname` as `postgres` that survives server
    /// restarts: `client` while it is open; otherwise one attempt to
    /// connect (a new client is stored in `client` and `on_connect` called,
    /// or a failure waits 50 ms) and `None`, so that the writer checks
    /// whether to stop before it tries again.
    pub fn writer_client<'a>(
        &self,
        client: &'a mut Option<Client>,
        dbname: &str,
        on_connect: impl FnOnce(),
    ) -> Option<&'a mut Client> {
        if client.as_ref().is_some_and(|c| !c.is_closed()) {
            return client.as_mut();
        }
        match self.try_connect(dbname, "postgres") {
            Ok(c) => {
                on_connect();
                *client = Some(c);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
        None
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

    /// Kills backend `pid` with SIGKILL and waits until the server has been
    /// through the crash restart that causes (the postmaster ends every
    /// other backend, then accepts connections again): a connection opened
    /// before the kill must have been ended, so that the server accepting
    /// connections afterwards is the restarted one, not the old one that
    /// has not yet noticed.
    pub fn kill9_backend(&self, pid: i32) {
        let mut witness = self.connect("postgres");
        let status = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {pid}: {status}");
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        while witness.simple_query("select 1").is_ok() {
            assert!(
                Instant::now() < deadline,
                "the server did not restart within {RELEASE_TIMEOUT:?} after backend {pid} was killed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait_connectable(Duration::from_secs(120));
    }

    /// Drops database `name` with its replication slots, if it exists:
    /// waits until every slot of it is released, drops them, rolls back
    /// its prepared transactions (a test that failed may have left some,
    /// and they keep even `DROP DATABASE ... WITH (FORCE)` from running),
    /// then drops the database, ending its sessions (`WITH (FORCE)`,
    /// retried while one is still exiting).
    pub fn drop_database(&self, name: &str) -> Result<(), String> {
        let mut admin = retry(Duration::from_secs(30), || {
            self.try_connect("postgres", "postgres")
        })
        .map_err(|e| format!("cannot connect to drop database {name}: {e}"))?;
        try_drop_slots(&mut admin, Slots::OfDatabase(name), RELEASE_TIMEOUT)?;
        let prepared: Vec<String> = admin
            .query(
                "select gid from pg_prepared_xacts where database = $1",
                &[&name],
            )
            .map_err(|e| format!("pg_prepared_xacts: {}", describe_error(&e)))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !prepared.is_empty() {
            let mut db = self
                .try_connect(name, "postgres")
                .map_err(|e| format!("cannot connect to {name}: {e}"))?;
            for gid in &prepared {
                db.batch_execute(&format!("rollback prepared '{}'", gid.replace('\'', "''")))
                    .map_err(|e| format!("rollback prepared {gid}: {}", describe_error(&e)))?;
            }
        }
        let deadline = Instant::now() + RELEASE_TIMEOUT;
        loop {
            match admin.batch_execute(&format!("drop database if exists {name} with (force)")) {
                Ok(()) => return Ok(()),
                // "is being accessed by other users": a session did not
                // exit within the server's own 5 s.
                Err(e) if sqlstate(&e) == "55006" && Instant::now() < deadline => {}
                Err(e) => return Err(format!("drop database {name}: {}", describe_error(&e))),
            }
        }
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

/// How long the server may take to let go of what an ended client held: a
/// walsender noticing that its client is gone and releasing the slot, a
/// backend exiting. Generous, for a loaded 2-core machine; reached only
/// when something really holds on.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Which replication slots to drop.
#[derive(Debug, Clone, Copy)]
pub enum Slots<'a> {
    /// The slot of this name.
    Named(&'a str),
    /// Every slot of this database.
    OfDatabase(&'a str),
    /// Every slot whose name matches this LIKE pattern.
    NamedLike(&'a str),
}

impl Slots<'_> {
    fn condition(&self) -> &'static str {
        match self {
            Slots::Named(_) => "slot_name = $1",
            Slots::OfDatabase(_) => "database = $1",
            Slots::NamedLike(_) => "slot_name like $1",
        }
    }

    fn param(&self) -> &str {
        match self {
            Slots::Named(s) | Slots::OfDatabase(s) | Slots::NamedLike(s) => s,
        }
    }
}

impl fmt::Display for Slots<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slots::Named(s) => write!(f, "slot {s}"),
            Slots::OfDatabase(d) => write!(f, "the slots of database {d}"),
            Slots::NamedLike(p) => write!(f, "the slots named like {p}"),
        }
    }
}

/// Drops replication slot `slot` if it exists, once no process holds it:
/// a client that streamed from it may have exited while its walsender
/// still holds the slot for a moment (ERROR 55006 "is active for PID").
/// Panics after [`RELEASE_TIMEOUT`], naming the process that holds it.
pub fn drop_slot(client: &mut Client, slot: &str) {
    try_drop_slots(client, Slots::Named(slot), RELEASE_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
}

/// Drops `slots`, waiting (bounded by `timeout`) until each is released;
/// the error says which slot is still held and by what.
pub fn try_drop_slots(
    client: &mut Client,
    slots: Slots<'_>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let held = format!(
        "select slot_name::text, active_pid from pg_replication_slots where {} and active_pid is not null",
        slots.condition()
    );
    let drop = format!(
        "select pg_drop_replication_slot(slot_name) from pg_replication_slots \
         where {} and active_pid is null",
        slots.condition()
    );
    loop {
        // Drop what is free now; a slot taken again in between (55006)
        // is waited for like the others.
        match client.execute(drop.as_str(), &[&slots.param()]) {
            Ok(_) => {}
            Err(e) if sqlstate(&e) == "55006" => {}
            Err(e) => return Err(format!("dropping {slots}: {}", describe_error(&e))),
        }
        let rows = client
            .query(held.as_str(), &[&slots.param()])
            .map_err(|e| format!("reading pg_replication_slots: {}", describe_error(&e)))?;
        let Some(row) = rows.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            let (slot, pid): (String, i32) = (row.get(0), row.get(1));
            return Err(format!(
                "{slots}: slot {slot} is still held by PID {pid} after {timeout:?}: {}",
                describe_backend(client, pid)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no process holds replication slot `slot` (or it is gone):
/// e.g. a backend whose decoding call failed releases its slot only after
/// it has sent the error. Panics after [`RELEASE_TIMEOUT`] naming the holder.
pub fn wait_slot_released(client: &mut Client, slot: &str) {
    let held = retry(RELEASE_TIMEOUT, || {
        let pid: Option<i32> = client
            .query_opt(
                "select active_pid from pg_replication_slots where slot_name = $1",
                &[&slot],
            )
            .unwrap_or_else(|e| panic!("reading pg_replication_slots: {}", describe_error(&e)))
            .and_then(|row| row.get(0));
        pid.map_or(Ok(()), Err)
    });
    if let Err(pid) = held {
        panic!(
            "slot {slot} is still held by PID {pid} after {RELEASE_TIMEOUT:?}: {}",
            describe_backend(client, pid)
        );
    }
}

/// What `pg_stat_activity` says of backend `pid`, for timeout messages.
pub fn describe_backend(client: &mut Client, pid: i32) -> String {
    match client.query_opt(
        "select concat_ws(', ', backend_type, 'application_name ' || application_name, \
                'state ' || state, 'waits on ' || wait_event_type || ':' || wait_event, \
                'started ' || (now() - backend_start)::text || ' ago', 'query ' || left(query, 200)) \
           from pg_stat_activity where pid = $1",
        &[&pid],
    ) {
        Ok(Some(row)) => row.get(0),
        Ok(None) => "no longer in pg_stat_activity".to_string(),
        Err(e) => format!("pg_stat_activity: {}", describe_error(&e)),
    }
}

/// Waits until no backend of `application_name` is left on the server and
/// no such backend holds a replication slot: the server's side of a client
/// that has exited (its walsender notices only on its next read or write).
pub fn wait_clients_gone(
    client: &mut Client,
    application_name: &str,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let row = client
            .query_opt(
                "select a.pid, s.slot_name::text from pg_stat_activity a \
                   full join pg_replication_slots s on s.active_pid = a.pid \
                  where a.application_name = $1 \
                     or (s.active_pid is not null and a.pid is null) \
                  limit 1",
                &[&application_name],
            )
            .map_err(|e| format!("reading pg_stat_activity: {}", describe_error(&e)))?;
        let Some(row) = row else { return Ok(()) };
        if Instant::now() >= deadline {
            let (pid, slot): (Option<i32>, Option<String>) = (row.get(0), row.get(1));
            return Err(format!(
                "the server side of client {application_name} did not end within {timeout:?}: \
                 PID {pid:?} holding slot {slot:?}: {}",
                pid.map(|p| describe_backend(client, p)).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// `ALTER SYSTEM SET {setting}`, then `pg_reload_conf()`: the server takes
/// the setting soon after (a test waits for its effect).
pub fn alter_system(client: &mut Client, setting: &str) {
    exec(client, &format!("alter system set {setting}"));
    exec(client, "select pg_reload_conf()");
}

/// A fresh database `{prefix}{name}` with pubjson on the shared cluster
/// (suites that give each test a database of its own): its name and a
/// connection.
pub fn suite_database(prefix: &str, name: &str) -> (String, Client) {
    let dbname = format!("{prefix}{name}");
    let client = Server::main().fresh_database_with_pubjson(&dbname);
    (dbname, client)
}

/// Creates the logical slot `name` of pubjson, serialized with the other
/// suites ([`crate::serialize`]).
pub fn pubjson_slot(c: &mut Client, name: &str) {
    let _serial = crate::serialize();
    c.execute(
        "select pg_create_logical_replication_slot($1, 'pubjson')",
        &[&name],
    )
    .unwrap_or_else(|e| panic!("slot {name}: {}", describe_error(&e)));
}

/// Decodes `slot` (consuming) with `opts` (names and values): the rows'
/// `data`. A decoding call reads only flushed WAL: what committed is, what
/// is still open may not be yet ([`wait_wal_flushed`]).
pub fn get_texts(c: &mut Client, slot: &str, opts: &[&str]) -> Vec<String> {
    decode_texts(c, "pg_logical_slot_get_changes", slot, opts)
}

/// [`get_texts`] without consuming (`pg_logical_slot_peek_changes`).
pub fn peek_texts(c: &mut Client, slot: &str, opts: &[&str]) -> Vec<String> {
    decode_texts(c, "pg_logical_slot_peek_changes", slot, opts)
}

fn decode_texts(c: &mut Client, function: &str, slot: &str, opts: &[&str]) -> Vec<String> {
    exec(c, "select txid_current()");
    let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    c.query(
        &format!("select data from {function}($1, NULL, NULL, VARIADIC $2::text[])"),
        &[&slot, &opts],
    )
    .unwrap_or_else(|e| panic!("{function}: {}", describe_error(&e)))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// [`get_texts`] where every row is one JSON object (format 2).
pub fn get_objects(c: &mut Client, slot: &str, opts: &[&str]) -> Vec<serde_json::Value> {
    get_texts(c, slot, opts)
        .iter()
        .map(|text| serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect()
}

/// The lines of messages that hold one JSON object per line, in order:
/// format 3's (SQL rows, walsender messages; `batch-bytes`), and format
/// 2's rows, one object each.
pub fn message_lines<S: AsRef<str>>(messages: &[S]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.as_ref().split('\n'))
        .map(String::from)
        .collect()
}

/// The objects of [`message_lines`].
pub fn json_lines<S: AsRef<str>>(messages: &[S]) -> Vec<serde_json::Value> {
    message_lines(messages)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// [`get_texts`] with format 3 and the `extra` options: its objects.
pub fn get_format3(c: &mut Client, slot: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut opts = vec!["format-version", "3"];
    opts.extend_from_slice(extra);
    json_lines(&get_texts(c, slot, &opts))
}

/// The first column of the single row `sql` returns.
pub fn one_string(client: &mut Client, sql: &str) -> String {
    match client.query_one(sql, &[]) {
        Ok(r) => r.get(0),
        Err(e) => panic!("{sql}: {}", describe_error(&e)),
    }
}

/// The single row `sql` returns (extended protocol, no parameters); panics
/// with the server's error or when there is not exactly one row.
pub fn one_row(client: &mut Client, sql: &str) -> Row {
    client
        .query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)))
}

/// The rows `sql` returns (extended protocol, no parameters); panics with
/// the server's error.
pub fn rows(client: &mut Client, sql: &str) -> Vec<Row> {
    client
        .query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)))
}

/// The first column of every row `sql` returns with `params`; panics with
/// the server's error.
pub fn column<T: postgres::types::FromSqlOwned>(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Vec<T> {
    client
        .query(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Polls until `sql`, one boolean, is true; a failed query counts as not
/// yet (a standby that is starting, a connection that is recovering).
pub fn wait_true(
    client: &mut Client,
    what: &str,
    timeout: Duration,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) {
    poll(what, timeout, || {
        let r = client.query_one(sql, params).ok()?;
        r.get::<_, bool>(0).then_some(())
    })
}

/// Waits (up to 30 s) until the WAL written so far is flushed: decoding
/// reads only flushed WAL, and a backend flushes neither its abort record,
/// nor an open transaction's records, nor the commit of a transaction that
/// wrote nothing before it (such as `select txid_current()`). The WAL
/// writer flushes up to the last such commit within `wal_writer_delay`,
/// but a partial page of anything else only when more WAL comes: one such
/// commit after `written` has it flush past `written`.
pub fn wait_wal_flushed(client: &mut Client) {
    let written = one_string(client, "select pg_current_wal_insert_lsn()::text");
    exec(client, "select txid_current()");
    wait_true(
        client,
        &format!("the WAL to be flushed up to {written}"),
        Duration::from_secs(30),
        "select pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
        &[&written],
    )
}

/// Waits (up to 30 s) until the standby behind `standby` has replayed the
/// WAL up to `lsn` (`X/Y`); `what` names it in the timeout message.
pub fn wait_replayed(standby: &mut Client, what: &str, lsn: &str) {
    wait_true(
        standby,
        what,
        Duration::from_secs(30),
        "select pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
        &[&lsn],
    )
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
