//! Clusters of a test's own (made by scripts/cluster.sh, under
//! `$PUBJSON_TMP`, with the server of `$PUBJSON_PG_BIN` or of another
//! major) and physical standbys, for tests that restart or crash a server
//! or need a second one, and pg_upgrade between two such clusters.

use crate::env::{pg_bin, pg_bin_dir};
use crate::server::Server;
use postgres::Client;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn cluster_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster.sh")
}

/// Runs a command; panics with its output when it fails.
pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `program` run as the `postgres` OS user (servers refuse root), with
/// RUST_BACKTRACE set as scripts/cluster.sh sets it: pgrx would attach Rust
/// backtraces to the errors it re-raises, and the tests prove pubjson keeps
/// them away from clients.
pub fn as_postgres(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", "env"])
        .args(["RUST_BACKTRACE=1", "RUST_LIB_BACKTRACE=1"])
        .arg(program)
        .stdin(Stdio::null());
    c
}

/// The server refuses to start while pubjson.so is missing from the
/// library directory (output_plugin_libraries lists it), e.g. during an
/// install run elsewhere: wait for it (in the tree of the programs in
/// `bin`).
fn wait_plugin_installed(bin: &Path) {
    let libdir = Command::new(bin.join("pg_config"))
        .arg("--pkglibdir")
        .output()
        .expect("pg_config --pkglibdir");
    let so = PathBuf::from(String::from_utf8_lossy(&libdir.stdout).trim()).join("pubjson.so");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !so.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What happens to an [`ExtraCluster`] when it goes out of scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtEnd {
    /// Stopped and removed.
    Destroy,
    /// Stopped; its data stays for the next test of the process.
    Stop,
}

/// Where an extra cluster of a suite lives: its directory under the
/// cluster root ([`crate::cluster_dir`]) and its port. Every suite's
/// clusters have names and ports of their own, so suites run at once.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub name: &'static str,
    pub port: u16,
}

impl Place {
    pub const fn new(name: &'static str, port: u16) -> Place {
        Place { name, port }
    }

    pub fn root(self) -> String {
        crate::cluster_dir(self.name)
    }

    /// [`ExtraCluster::start`] here.
    pub fn start(self) -> ExtraCluster {
        ExtraCluster::start(&self.root(), self.port)
    }

    /// [`ExtraCluster::create_with`] here.
    pub fn create_with(self, bin: &Path, initdb_args: &[&str]) -> ExtraCluster {
        ExtraCluster::create_with(&self.root(), self.port, bin, initdb_args)
    }

    /// [`Standby::start_of`] `primary` here.
    pub fn standby_of(self, primary: &Server) -> Standby {
        Standby::start_of(primary, &self.root(), self.port)
    }

    /// [`Standby::start_with`] `primary` here, with `settings`.
    pub fn standby_with(self, primary: &Server, settings: &str) -> Standby {
        Standby::start_with(primary, &self.root(), self.port, settings)
    }

    /// The cluster here for one test that crashes and restarts it, held
    /// until the guard drops: such tests of a process run one at a time.
    /// The cluster is destroyed and created afresh the first time a process
    /// takes it, started by each test and stopped (kept) at its end.
    pub fn take(self) -> SerialCluster {
        static SERIAL: Mutex<()> = Mutex::new(());
        static FRESH: Mutex<BTreeSet<&str>> = Mutex::new(BTreeSet::new());
        let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        if crate::server::lock(&FRESH).insert(self.name) {
            ExtraCluster::destroy(&self.root(), self.port);
        }
        SerialCluster {
            cluster: ExtraCluster::reuse(&self.root(), self.port),
            _guard: guard,
        }
    }
}

/// A cluster one test holds for its whole run ([`Place::take`]).
pub struct SerialCluster {
    // Dropped first: stopped before the next test may start it.
    cluster: ExtraCluster,
    _guard: MutexGuard<'static, ()>,
}

impl SerialCluster {
    /// `pg_ctl -m <mode> restart`; waits until it accepts connections again.
    pub fn pg_ctl_restart(&self, mode: &str) {
        self.cluster.pg_ctl_restart(mode);
    }

    pub fn server(&self) -> Server {
        self.cluster.server()
    }

    pub fn connect(&self, db: &str) -> Client {
        self.cluster.connect(db)
    }
}

/// A cluster made by scripts/cluster.sh in `root` (data in `root/data`,
/// socket in `root/socket`), listening on `port`.
pub struct ExtraCluster {
    pub root: String,
    pub socket: String,
    pub port: u16,
    /// The server's programs: `$PUBJSON_PG_BIN` unless made by
    /// [`Self::create_with`].
    pub bin: PathBuf,
    /// Also listens on TCP, 127.0.0.1:`port` ([`Self::start_listening`]).
    pub listens: bool,
    at_end: AtEnd,
}

impl ExtraCluster {
    /// A new cluster (an earlier one in `root` is destroyed first),
    /// destroyed on drop.
    pub fn start(root: &str, port: u16) -> ExtraCluster {
        let cl = ExtraCluster::at(root, port, AtEnd::Destroy);
        cl.script("destroy");
        cl.start_server();
        cl
    }

    /// A new cluster that also listens on TCP on 127.0.0.1:`port` (trust
    /// authentication, for clients that cannot use a Unix socket: JDBC),
    /// destroyed on drop.
    pub fn start_listening(root: &str, port: u16) -> ExtraCluster {
        let mut cl = ExtraCluster::at(root, port, AtEnd::Destroy);
        cl.listens = true;
        cl.script("destroy");
        cl.start_server();
        cl
    }

    /// The cluster in `root`, created if missing, started, and stopped (not
    /// removed) on drop.
    pub fn reuse(root: &str, port: u16) -> ExtraCluster {
        let cl = ExtraCluster::at(root, port, AtEnd::Stop);
        cl.start_server();
        cl
    }

    /// Removes the cluster in `root` (stopping it first) if there is one.
    pub fn destroy(root: &str, port: u16) {
        ExtraCluster::at(root, port, AtEnd::Stop).script("destroy");
    }

    /// A new cluster of the PostgreSQL whose programs are in `bin` (e.g.
    /// another major than the one under test, [`crate::pg_bin_dir_of`]),
    /// made by initdb with `initdb_args` added, with the settings of
    /// scripts/cluster.sh, and not started (an earlier one in `root` is
    /// destroyed first). Destroyed on drop. [`Self::start_server`] starts
    /// it.
    pub fn create_with(root: &str, port: u16, bin: &Path, initdb_args: &[&str]) -> ExtraCluster {
        let mut cl = ExtraCluster::at(root, port, AtEnd::Destroy);
        cl.bin = bin.to_path_buf();
        cl.script("destroy");
        run(cl
            .script_command("init")
            .env("PUBJSON_INITDB_ARGS", initdb_args.join(" ")));
        cl
    }

    fn at(root: &str, port: u16, at_end: AtEnd) -> ExtraCluster {
        ExtraCluster {
            root: root.to_string(),
            socket: format!("{root}/socket"),
            port,
            bin: pg_bin_dir(),
            listens: false,
            at_end,
        }
    }

    /// Starts the server (creating the cluster if it is missing) and waits
    /// until it accepts connections.
    pub fn start_server(&self) {
        wait_plugin_installed(&self.bin);
        self.script("start");
        self.server().wait_connectable(Duration::from_secs(60));
    }

    /// Stops the server (fast shutdown: with a shutdown checkpoint).
    pub fn stop_server(&self) {
        self.script("stop");
    }

    /// Appends `lines` to the cluster's postgresql.conf (read at the next
    /// start or reload).
    pub fn append_conf(&self, lines: &str) {
        use std::io::Write;
        let path = format!("{}/postgresql.conf", self.pgdata());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(lines.as_bytes()))
            .unwrap_or_else(|e| panic!("append to {path}: {e}"));
    }

    pub fn pgdata(&self) -> String {
        format!("{}/data", self.root)
    }

    pub fn server(&self) -> Server {
        Server::new(&self.socket, self.port)
    }

    pub fn connect(&self, db: &str) -> Client {
        self.server().connect(db)
    }

    fn script_command(&self, action: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(cluster_script())
            .arg(action)
            .env("PUBJSON_PGDATA", self.pgdata())
            .env("PUBJSON_SOCKET", &self.socket)
            .env("PUBJSON_PORT", self.port.to_string())
            .env(
                "PUBJSON_LISTEN",
                if self.listens { "127.0.0.1" } else { "" },
            )
            .env("PG_BIN", &self.bin);
        cmd
    }

    /// `scripts/cluster.sh <action>` for this cluster.
    pub fn script(&self, action: &str) {
        run(&mut self.script_command(action));
    }

    /// Restarts the server (after ALTER SYSTEM of a postmaster setting).
    pub fn restart(&self) {
        self.script("restart");
    }

    /// `pg_ctl -m <mode> restart` (`immediate`: without a checkpoint, as
    /// after a crash); waits until it accepts connections again.
    pub fn pg_ctl_restart(&self, mode: &str) {
        wait_plugin_installed(&self.bin);
        run(as_postgres(self.bin.join("pg_ctl"))
            .args(["-D", &self.pgdata(), "-m", mode, "-w", "-t", "120", "-l"])
            .arg(format!("{}/server.log", self.root))
            .arg("restart"));
        self.server().wait_connectable(Duration::from_secs(120));
    }

    /// `pg_ctl -m <mode> stop` (`immediate`: as if the server crashed);
    /// waits until it has stopped. It stays stopped (and is removed or
    /// kept on drop as before).
    pub fn pg_ctl_stop(&self, mode: &str) {
        run(as_postgres(pg_bin("pg_ctl"))
            .args(["-D", &self.pgdata(), "-m", mode, "-w", "-t", "120"])
            .arg("stop"));
    }
}

impl Drop for ExtraCluster {
    fn drop(&mut self) {
        // Even when the test failed; never panics.
        let action = match self.at_end {
            AtEnd::Destroy => "destroy",
            AtEnd::Stop => "stop",
        };
        let _ = self.script_command(action).output();
    }
}

/// What a pg_upgrade run gave.
pub struct PgUpgrade {
    pub success: bool,
    /// Its standard output, then its standard error.
    pub output: String,
}

/// `pg_upgrade` (of `new`'s programs) from `old` to `new`, both stopped,
/// with `extra` arguments (`--check`), run as the `postgres` user in
/// `workdir`, which it is given: pg_upgrade needs a writable current
/// directory, puts its servers' sockets there (ports: the clusters' own)
/// and writes its reports there (`update_extensions.sql`). Its logs go to
/// `new`'s `pg_upgrade_output.d`, kept when it fails.
pub fn pg_upgrade(
    old: &ExtraCluster,
    new: &ExtraCluster,
    workdir: &Path,
    extra: &[&str],
) -> PgUpgrade {
    run(Command::new("chown").arg("postgres:").arg(workdir));
    let mut cmd = as_postgres(new.bin.join("pg_upgrade"));
    cmd.current_dir(workdir)
        .arg("--old-bindir")
        .arg(&old.bin)
        .arg("--new-bindir")
        .arg(&new.bin)
        .args([
            "--old-datadir",
            &old.pgdata(),
            "--new-datadir",
            &new.pgdata(),
        ])
        .args([
            "--old-port",
            &old.port.to_string(),
            "--new-port",
            &new.port.to_string(),
        ])
        .arg("--socketdir")
        .arg(workdir)
        .args(["--username", "postgres"])
        .args(extra);
    // Its connections name host and port; nothing of the shared test
    // cluster's environment applies.
    for var in ["PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGAPPNAME"] {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    PgUpgrade {
        success: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
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
    /// A standby of `primary`, in `root` on `port` (hot_standby_feedback
    /// off, max_standby_streaming_delay 1s).
    pub fn start_of(primary: &Server, root: &str, port: u16) -> Standby {
        Standby::start_with(primary, root, port, "")
    }

    /// [`Self::start_of`], with `settings` (postgresql.conf lines) added
    /// after the `primary_conninfo` that `pg_basebackup -R` wrote to
    /// postgresql.auto.conf, so that they override it and the defaults
    /// above (e.g. a `primary_conninfo` with `dbname`, `primary_slot_name`,
    /// `hot_standby_feedback = on` for slot synchronization).
    pub fn start_with(primary: &Server, root: &str, port: u16, settings: &str) -> Standby {
        let sb = Standby {
            root: root.to_string(),
            data: format!("{root}/data"),
            socket: format!("{root}/socket"),
            port,
        };
        sb.teardown();
        std::fs::create_dir_all(&sb.socket).expect("mkdir standby socket");
        run(Command::new("chown").args(["-R", "postgres:", root]));
        run(as_postgres(pg_bin("pg_basebackup")).args([
            "-h",
            &primary.host,
            "-p",
            &primary.port.to_string(),
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
            "\n# pubjson test standby\nport = {}\nunix_socket_directories = '{}'\nhot_standby = on\n\
             max_standby_streaming_delay = 1s\nhot_standby_feedback = off\nwal_receiver_status_interval = 1s\n",
            sb.port, sb.socket
        );
        let path = format!("{}/postgresql.conf", sb.data);
        let mut text = std::fs::read_to_string(&path).expect("read standby postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&path, text).expect("write standby postgresql.conf");
        if !settings.is_empty() {
            let path = format!("{}/postgresql.auto.conf", sb.data);
            let mut text = std::fs::read_to_string(&path).expect("read postgresql.auto.conf");
            text.push_str(&format!("\n# pubjson test standby settings\n{settings}\n"));
            std::fs::write(&path, text).expect("write postgresql.auto.conf");
        }
        run(as_postgres(pg_bin("pg_ctl")).args([
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

    pub fn server(&self) -> Server {
        Server::new(&self.socket, self.port)
    }

    pub fn connect(&self, db: &str) -> Client {
        self.server().connect(db)
    }

    /// `pg_ctl promote`: waits until the standby has left recovery and
    /// accepts writes (it stays where it is and is removed on drop).
    pub fn promote(&self) {
        run(as_postgres(pg_bin("pg_ctl")).args(["-D", &self.data, "-w", "-t", "120", "promote"]));
        let mut c = self
            .server()
            .connect_retrying("postgres", Duration::from_secs(60));
        crate::server::wait_true(
            &mut c,
            "the promoted standby out of recovery",
            Duration::from_secs(60),
            "select not pg_is_in_recovery()",
            &[],
        );
    }

    fn teardown(&self) {
        if std::path::Path::new(&format!("{}/PG_VERSION", self.data)).exists() {
            let _ = as_postgres(pg_bin("pg_ctl"))
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
