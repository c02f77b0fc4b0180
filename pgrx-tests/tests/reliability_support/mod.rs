//! The reliability suite's own cluster (it crashes and restarts the server,
//! so it never touches the shared test cluster), connections to it, a
//! pg_recvlogical wrapper that can be SIGKILLed, and a small PRNG.

use postgres::{Client, Config, NoTls};
use pubjson_e2e::describe_error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The suite's cluster lives under `$PUBJSON_TMP/pubjson-rel` (default `/tmp`).
pub fn root() -> String {
    pubjson_e2e::cluster_dir("rel")
}
pub fn pgdata() -> String {
    format!("{}/data", root())
}
pub fn socket() -> String {
    format!("{}/socket", root())
}
pub const PORT: u16 = 54331;

pub fn pg_bin_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("PUBJSON_PG_BIN")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "/usr/lib/postgresql/15/bin".to_string()),
    )
}

fn cluster_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster.sh")
}

fn run_cluster_script(action: &str) {
    let out = Command::new("bash")
        .arg(cluster_script())
        .arg(action)
        .env("PUBJSON_PGDATA", pgdata())
        .env("PUBJSON_SOCKET", socket())
        .env("PUBJSON_PORT", PORT.to_string())
        .env("PG_BIN", pg_bin_dir())
        .output()
        .expect("run scripts/cluster.sh");
    assert!(
        out.status.success(),
        "scripts/cluster.sh {action} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The server refuses to start while pubjson.so is missing from the
/// library directory (output_plugin_libraries lists it), e.g. during a
/// `cargo pgrx install` run elsewhere: wait for it.
fn wait_plugin_installed() {
    let libdir = Command::new(pg_bin_dir().join("pg_config"))
        .arg("--pkglibdir")
        .output()
        .expect("pg_config --pkglibdir");
    let so = PathBuf::from(String::from_utf8_lossy(&libdir.stdout).trim()).join("pubjson.so");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !so.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `pg_ctl -m <mode> restart` of the private cluster (waits until it accepts
/// connections again).
pub fn pg_ctl_restart(mode: &str) {
    wait_plugin_installed();
    let out = Command::new("runuser")
        .args([
            "-u",
            "postgres",
            "--",
            "env",
            "RUST_BACKTRACE=1",
            "RUST_LIB_BACKTRACE=1",
        ])
        .arg(pg_bin_dir().join("pg_ctl"))
        .args(["-D", &pgdata(), "-m", mode, "-w", "-t", "120", "-l"])
        .arg(format!("{}/server.log", root()))
        .arg("restart")
        .stdin(Stdio::null())
        .output()
        .expect("run pg_ctl");
    assert!(
        out.status.success(),
        "pg_ctl -m {mode} restart failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wait_connectable(Duration::from_secs(120));
}

/// Waits until a connection to the `postgres` database succeeds (after a
/// crash the postmaster runs recovery first).
pub fn wait_connectable(timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(mut c) = try_connect("postgres", "postgres") {
            if c.simple_query("select 1").is_ok() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not come back within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held for the whole of a test: the tests restart the server, so they run
/// one at a time. The cluster is destroyed and created afresh once per
/// process, started by each test and stopped when the last guard drops.
pub struct Cluster {
    _guard: MutexGuard<'static, ()>,
}

pub fn cluster() -> Cluster {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    static FRESH: OnceLock<()> = OnceLock::new();
    FRESH.get_or_init(|| run_cluster_script("destroy"));
    wait_plugin_installed();
    run_cluster_script("start");
    wait_connectable(Duration::from_secs(60));
    Cluster { _guard: guard }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Stop it even when the test failed; the next test starts it again.
        let _ = Command::new("bash")
            .arg(cluster_script())
            .arg("stop")
            .env("PUBJSON_PGDATA", pgdata())
            .env("PUBJSON_SOCKET", socket())
            .env("PUBJSON_PORT", PORT.to_string())
            .env("PG_BIN", pg_bin_dir())
            .output();
    }
}

pub fn try_connect(dbname: &str, user: &str) -> Result<Client, postgres::Error> {
    Config::new()
        .host(&socket())
        .port(PORT)
        .user(user)
        .dbname(dbname)
        .application_name("pubjson-reliability")
        .connect_timeout(Duration::from_secs(10))
        .connect(NoTls)
}

pub fn connect(dbname: &str) -> Client {
    try_connect(dbname, "postgres").unwrap_or_else(|e| {
        panic!(
            "connect to {dbname} on {}:{PORT}: {}",
            socket(),
            describe_error(&e)
        )
    })
}

pub fn connect_as(dbname: &str, user: &str) -> Client {
    try_connect(dbname, user)
        .unwrap_or_else(|e| panic!("connect to {dbname} as {user}: {}", describe_error(&e)))
}

/// A fresh database `name` (dropped first, with its slots).
pub fn fresh_db(name: &str) -> Client {
    let mut c = connect("postgres");
    for row in c
        .query(
            "select slot_name from pg_replication_slots where database = $1",
            &[&name],
        )
        .expect("pg_replication_slots")
    {
        let slot: String = row.get(0);
        let _ = c.execute("select pg_drop_replication_slot($1)", &[&slot]);
    }
    c.batch_execute(&format!("drop database if exists {name} with (force)"))
        .expect("drop database");
    c.batch_execute(&format!("create database {name}"))
        .expect("create database");
    connect(name)
}

pub fn exec(c: &mut Client, sql: &str) {
    if let Err(e) = c.batch_execute(sql) {
        panic!("{sql}: {}", describe_error(&e));
    }
}

pub fn one_string(c: &mut Client, sql: &str) -> String {
    match c.query_one(sql, &[]) {
        Ok(r) => r.get(0),
        Err(e) => panic!("{sql}: {}", describe_error(&e)),
    }
}

pub fn db_error(e: &postgres::Error) -> (String, String, Option<String>) {
    match e.as_db_error() {
        Some(d) => (
            d.code().code().to_string(),
            d.message().to_string(),
            d.detail().map(str::to_string),
        ),
        None => ("(no SQLSTATE)".into(), e.to_string(), None),
    }
}

// ---------------------------------------------------------------------------
// pg_recvlogical on the private cluster
// ---------------------------------------------------------------------------

pub struct Recv {
    child: Option<Child>,
    pub file: PathBuf,
    pub stderr_file: PathBuf,
}

impl Recv {
    pub fn start(db: &str, slot: &str, file: &Path, opts: &[&str], extra: &[&str]) -> Recv {
        let stderr_file = file.with_extension("stderr");
        let stderr = std::fs::File::create(&stderr_file).expect("create stderr file");
        let mut cmd = Command::new(pg_bin_dir().join("pg_recvlogical"));
        cmd.args([
            "-h",
            &socket(),
            "-p",
            &PORT.to_string(),
            "-U",
            "postgres",
            "-d",
            db,
        ])
        .args([
            "-S",
            slot,
            "--start",
            "--no-loop",
            "-F",
            "0",
            "-s",
            "1",
            "-f",
        ])
        .arg(file);
        for o in opts {
            cmd.arg("-o").arg(o);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd.spawn().expect("start pg_recvlogical");
        Recv {
            child: Some(child),
            file: file.to_path_buf(),
            stderr_file,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGKILL (only this process, by its pid).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for it to exit by itself; `None` on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Some(s) = c.try_wait().expect("try_wait") {
                self.child = None;
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.kill9();
    }
}

// ---------------------------------------------------------------------------
// Misc
// ---------------------------------------------------------------------------

/// xorshift64*: deterministic workloads without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn soak() -> bool {
    std::env::var("PUBJSON_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Parses an LSN `X/Y` into a number.
pub fn lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap_or_else(|| panic!("bad LSN {s:?}"));
    (u64::from_str_radix(hi, 16).expect("LSN") << 32) | u64::from_str_radix(lo, 16).expect("LSN")
}

impl Recv {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}
