//! Helpers for `conflicts.rs`: connections to the main test cluster and to
//! extra clusters (a logical subscriber, a physical standby) started for one
//! test and destroyed by Drop guards.

#![allow(dead_code)]

use postgres::{Client, Config, NoTls};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn sub_root() -> String {
    pubjson_e2e::cluster_dir("sub")
}
pub const SUB_PORT: u16 = 54332;
pub fn standby_root() -> String {
    pubjson_e2e::cluster_dir("standby")
}
pub const STANDBY_PORT: u16 = 54333;
/// A primary of its own for the logical-slot-on-standby test (16+), so that
/// nothing else on the main cluster holds back the catalog horizon.
pub fn ls_primary_root() -> String {
    pubjson_e2e::cluster_dir("lsprimary")
}
pub const LS_PRIMARY_PORT: u16 = 54335;
pub fn ls_standby_root() -> String {
    pubjson_e2e::cluster_dir("lsstandby")
}
pub const LS_STANDBY_PORT: u16 = 54336;

/// The subscriber of the parallel apply test (16+).
pub fn par_sub_root() -> String {
    pubjson_e2e::cluster_dir("parsub")
}
pub const PAR_SUB_PORT: u16 = 54338;

/// A cluster of its own for the WAL-removal invalidation test.
pub fn wal_root() -> String {
    pubjson_e2e::cluster_dir("walremoved")
}
pub const WAL_PORT: u16 = 54337;

/// server_version_num of the connected server (150000 and up).
pub fn server_version(c: &mut Client) -> i32 {
    c.query_one("select current_setting('server_version_num')::int", &[])
        .expect("server_version_num")
        .get(0)
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `scripts/cluster.sh start && eval \"$(scripts/cluster.sh env)\"`")
    })
}

/// (socket directory, port) of the main test cluster.
pub fn main_cluster() -> (String, u16) {
    (var("PGHOST"), var("PGPORT").parse().expect("PGPORT"))
}

pub fn pg_bin(program: &str) -> String {
    format!("{}/{program}", var("PUBJSON_PG_BIN"))
}

pub fn connect(host: &str, port: u16, db: &str, user: &str) -> Result<Client, postgres::Error> {
    Config::new()
        .host(host)
        .port(port)
        .user(user)
        .dbname(db)
        .application_name("pubjson-conflicts")
        .connect_timeout(Duration::from_secs(10))
        .connect(NoTls)
}

pub fn connect_main(db: &str) -> Client {
    let (host, port) = main_cluster();
    connect(&host, port, db, "postgres").unwrap_or_else(|e| panic!("connect to main {db}: {e}"))
}

/// Drops and recreates `db` on the given server, with the extension.
pub fn fresh_db(host: &str, port: u16, db: &str, extension: bool) -> Client {
    let mut admin = connect(host, port, "postgres", "postgres").expect("connect postgres db");
    admin
        .batch_execute(&format!("drop database if exists {db} with (force)"))
        .expect("drop database");
    admin
        .batch_execute(&format!("create database {db}"))
        .expect("create database");
    let mut c = connect(host, port, db, "postgres").expect("connect test db");
    if extension {
        c.batch_execute("create extension pubjson")
            .expect("create extension");
    }
    c
}

pub fn sqlstate(e: &postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// Polls `f` every 100 ms until it returns Some; panics after `timeout`.
pub fn poll<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn as_postgres(program: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", program]);
    c
}

fn cluster_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster.sh")
}

/// An extra cluster made by scripts/cluster.sh; destroyed on drop.
pub struct ExtraCluster {
    pub root: String,
    pub socket: String,
    pub port: u16,
}

impl ExtraCluster {
    pub fn start(root: &str, port: u16) -> ExtraCluster {
        let cl = ExtraCluster {
            root: root.to_string(),
            socket: format!("{root}/socket"),
            port,
        };
        cl.script("destroy");
        cl.script("start");
        cl
    }

    fn script(&self, action: &str) {
        let mut cmd = Command::new(cluster_script());
        cmd.arg(action)
            .env("PUBJSON_PGDATA", format!("{}/data", self.root))
            .env("PUBJSON_SOCKET", &self.socket)
            .env("PUBJSON_PORT", self.port.to_string());
        run(&mut cmd);
    }

    pub fn connect(&self, db: &str) -> Client {
        connect(&self.socket, self.port, db, "postgres")
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.root))
    }

    /// Restarts the server (after ALTER SYSTEM of a postmaster setting).
    pub fn restart(&self) {
        self.script("restart");
    }
}

impl Drop for ExtraCluster {
    fn drop(&mut self) {
        let mut cmd = Command::new(cluster_script());
        cmd.arg("destroy")
            .env("PUBJSON_PGDATA", format!("{}/data", self.root))
            .env("PUBJSON_SOCKET", &self.socket)
            .env("PUBJSON_PORT", self.port.to_string());
        let _ = cmd.output();
    }
}

/// A physical standby (pg_basebackup -R); stopped and removed on drop.
pub struct Standby {
    pub root: String,
    pub data: String,
    pub socket: String,
    pub port: u16,
}

impl Standby {
    /// A standby of the main cluster at STANDBY_ROOT / STANDBY_PORT.
    pub fn start() -> Standby {
        let (host, port) = main_cluster();
        Standby::start_of(&host, port, &standby_root(), STANDBY_PORT)
    }

    /// A standby of the server at (`host`, `port`), in `root` on `sb_port`
    /// (hot_standby_feedback off, max_standby_streaming_delay 1s).
    pub fn start_of(host: &str, port: u16, root: &str, sb_port: u16) -> Standby {
        let sb = Standby {
            root: root.to_string(),
            data: format!("{root}/data"),
            socket: format!("{root}/socket"),
            port: sb_port,
        };
        sb.teardown();
        std::fs::create_dir_all(&sb.socket).expect("mkdir standby socket");
        run(Command::new("chown").args(["-R", "postgres:", root]));
        run(as_postgres(&pg_bin("pg_basebackup")).args([
            "-h",
            host,
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-D",
            &sb.data,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ]));
        let conf = format!(
            "\n# pubjson conflicts test standby\nport = {}\nunix_socket_directories = '{}'\nhot_standby = on\n\
             max_standby_streaming_delay = 1s\nhot_standby_feedback = off\nwal_receiver_status_interval = 1s\n",
            sb.port, sb.socket
        );
        let path = format!("{}/postgresql.conf", sb.data);
        let mut text = std::fs::read_to_string(&path).expect("read standby postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&path, text).expect("write standby postgresql.conf");
        run(as_postgres(&pg_bin("pg_ctl")).args([
            "-D",
            &sb.data,
            "-l",
            &format!("{root}/server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ]));
        sb
    }

    pub fn connect(&self, db: &str) -> Client {
        connect(&self.socket, self.port, db, "postgres")
            .unwrap_or_else(|e| panic!("connect standby: {e}"))
    }

    fn teardown(&self) {
        if std::path::Path::new(&format!("{}/PG_VERSION", self.data)).exists() {
            let _ = as_postgres(&pg_bin("pg_ctl"))
                .args(["-D", &self.data, "-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Drops a replication slot on the main cluster on drop (if it exists).
pub struct SlotCleanup(pub String);

impl Drop for SlotCleanup {
    fn drop(&mut self) {
        let mut c = connect_main("postgres");
        for _ in 0..50 {
            let r = c.execute(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1",
                &[&self.0],
            );
            if r.is_ok() {
                return;
            }
            // still active: the walsender is exiting
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
