//! pg_recvlogical as a consumer: started on a slot, streaming into a file,
//! interrupted (SIGINT) or killed, and the lines it wrote.

use crate::env::{pg_bin, pg_env};
use crate::server::{unique_application_name, wait_clients_gone, Server, RELEASE_TIMEOUT};
use postgres::Client;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `pg_recvlogical --start`; killed on drop.
///
/// Whenever its process has ended (stopped, killed, exited by itself), the
/// methods that reap it also wait until the server has let go of it: its
/// walsender gone and the slot released (found by a `PGAPPNAME` of its
/// own), so that the slot can be dropped, or streamed from again, at once.
pub struct RecvLogical {
    child: Option<Child>,
    server: Server,
    application_name: String,
    pub file: PathBuf,
    pub stderr_file: PathBuf,
}

impl RecvLogical {
    /// Streams `slot` of the test database on the shared cluster into
    /// `file`, with `-o` options (`None` value: `-o name`).
    pub fn start(
        slot: &str,
        file: &Path,
        opts: &[(&str, Option<&str>)],
        extra_args: &[&str],
    ) -> RecvLogical {
        RecvLogical::start_in(&pg_env().dbname, slot, file, opts, extra_args)
    }

    /// [`Self::start`] for a slot of database `dbname`.
    pub fn start_in(
        dbname: &str,
        slot: &str,
        file: &Path,
        opts: &[(&str, Option<&str>)],
        extra_args: &[&str],
    ) -> RecvLogical {
        let env = pg_env();
        let opts: Vec<String> = opts
            .iter()
            .map(|(name, value)| match value {
                Some(v) => format!("{name}={v}"),
                None => name.to_string(),
            })
            .collect();
        let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
        let server = Server::new(&env.host, env.port);
        let database = (env.user.as_str(), dbname);
        RecvLogical::start_on(&server, database, slot, file, &opts, extra_args)
    }

    /// [`RecvLogical::start_in`] with format 3 and no other option.
    pub fn format3_in(dbname: &str, slot: &str, file: &Path) -> RecvLogical {
        RecvLogical::start_in(dbname, slot, file, &[("format-version", Some("3"))], &[])
    }

    /// Streams `slot` of `(user, dbname)` on `server` into `file` (fsync
    /// off, a status update every second), with `-o` options given as
    /// `name` or `name=value`.
    pub fn start_on(
        server: &Server,
        (user, dbname): (&str, &str),
        slot: &str,
        file: &Path,
        opts: &[&str],
        extra_args: &[&str],
    ) -> RecvLogical {
        let stderr_file = file.with_extension("stderr");
        let stderr = std::fs::File::create(&stderr_file).expect("create stderr file");
        let application_name = unique_application_name("recv");
        let mut cmd = command(server, (user, dbname));
        cmd.env("PGAPPNAME", &application_name)
            .args(["-S", slot])
            .args(["--start", "--no-loop", "-F", "0", "-s", "1", "-f"])
            .arg(file);
        for o in opts {
            cmd.arg("-o").arg(o);
        }
        // The batching under test, where the test leaves it to the default.
        if let Some(bytes) = crate::env::format3_batch_bytes() {
            let format3 = opts.contains(&"format-version=3");
            if format3 && !opts.iter().any(|o| o.starts_with("batch-bytes")) {
                cmd.arg("-o").arg(format!("batch-bytes={bytes}"));
            }
        }
        cmd.args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start pg_recvlogical: {e}"));
        RecvLogical {
            child: Some(child),
            server: server.clone(),
            application_name,
            file: file.to_path_buf(),
            stderr_file,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Waits until its file holds `marker` (e.g. a message emitted after
    /// the transactions of interest); panics when it exits first or after
    /// `timeout`.
    pub fn wait_received(&mut self, marker: &str, timeout: Duration) {
        crate::wait::wait_for(&format!("{marker} received"), timeout, || {
            assert!(self.running(), "pg_recvlogical exited: {}", self.stderr());
            std::fs::read_to_string(&self.file)
                .unwrap_or_default()
                .contains(marker)
        });
    }

    /// Its process id while it has not been waited for.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until it exits by itself (e.g. `--endpos`); `None` on timeout.
    pub fn try_wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                self.wait_released(RELEASE_TIMEOUT)
                    .unwrap_or_else(|e| panic!("{e}"));
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until it exits by itself; panics after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        assert!(self.child.is_some(), "pg_recvlogical already stopped");
        self.try_wait_exit(timeout).unwrap_or_else(|| {
            panic!(
                "pg_recvlogical did not exit within {timeout:?}; stderr:\n{}",
                self.stderr()
            )
        })
    }

    /// Waits until it exits by itself; after `timeout` panics with
    /// `still_runs` (what it means that it still runs) and its stderr.
    /// Returns its exit status and stderr.
    pub fn exit_within(&mut self, timeout: Duration, still_runs: &str) -> (ExitStatus, String) {
        let status = self
            .try_wait_exit(timeout)
            .unwrap_or_else(|| panic!("{still_runs}: {}", self.stderr()));
        (status, self.stderr())
    }

    /// Polls, while pg_recvlogical runs, until `pubjson.pending_transactions()`
    /// read through `client` shows transaction `xid` of `slot` with at least
    /// `at_least` changes (`what` names it on timeout); returns how many.
    pub fn wait_pending(
        &mut self,
        client: &mut Client,
        what: &str,
        (slot, xid): (&str, &str),
        at_least: i64,
    ) -> i64 {
        crate::wait::poll(what, Duration::from_secs(60), || {
            assert!(self.running(), "pg_recvlogical exited: {}", self.stderr());
            let r = client
                .query(
                    "select changes from pubjson.pending_transactions()
                      where slot_name = $1 and xid::text = $2",
                    &[&slot, &xid],
                )
                .ok()?;
            r.first()
                .map(|r| r.get::<_, i64>(0))
                .filter(|&n| n >= at_least)
        })
    }

    /// Sends SIGINT (pg_recvlogical flushes its file and exits).
    pub fn interrupt(&self) {
        let pid = self.pid().expect("pg_recvlogical already stopped");
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -INT {pid} failed");
    }

    /// SIGINT, then waits for the exit. pg_recvlogical 15 flushes its file
    /// but does not send a last feedback message, so what it wrote is
    /// confirmed only if a status update (`-s`) went out before: wait for
    /// the slot's confirmed_flush_lsn first when that matters.
    pub fn stop(&mut self) -> ExitStatus {
        self.interrupt();
        self.wait_exit(Duration::from_secs(30))
    }

    /// SIGKILL (only this process, by its pid); then waits until the
    /// server has let go of it.
    pub fn kill9(&mut self) {
        if self.kill_process() {
            self.wait_released(RELEASE_TIMEOUT)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Kills and reaps the process; false when it had been reaped already.
    fn kill_process(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = child.kill();
        let _ = child.wait();
        true
    }

    /// Waits until the server side of this client is gone: its walsender
    /// has exited and released the slot. A server that does not accept
    /// connections (stopped, crashed, restarting) holds nothing of it.
    fn wait_released(&self, timeout: Duration) -> Result<(), String> {
        let Ok(mut client) = self.server.try_connect("postgres", "postgres") else {
            return Ok(());
        };
        wait_clients_gone(&mut client, &self.application_name, timeout)
    }
}

impl Drop for RecvLogical {
    fn drop(&mut self) {
        // Never panics (a failing test may be unwinding); a shorter wait.
        if self.kill_process() {
            let _ = self.wait_released(Duration::from_secs(10));
        }
    }
}

/// `pg_recvlogical` connected to `(user, dbname)` on `server`, for the
/// caller to add its arguments (a one-shot run: `--create-slot`,
/// `--start` with `--endpos`...).
pub fn command(server: &Server, (user, dbname): (&str, &str)) -> Command {
    let mut cmd = Command::new(pg_bin("pg_recvlogical"));
    cmd.args(["-h", &server.host, "-p", &server.port.to_string()])
        .args(["-U", user, "-d", dbname]);
    cmd
}

/// `pg_recvlogical` connected to the test database of the shared cluster.
pub fn command_for_test_db() -> Command {
    let env = pg_env();
    command(&Server::new(&env.host, env.port), (&env.user, &env.dbname))
}

/// The complete lines of a file being written (an unterminated last line is
/// left out).
pub fn complete_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(str::to_string)
        .collect()
}

/// The JSON objects of `file`'s complete lines, once it holds at least
/// `commits` `C` objects (polled for up to 30 s; panics after that).
pub fn wait_commits(file: &Path, commits: usize) -> Vec<serde_json::Value> {
    let lines = crate::wait::poll(
        &format!("{commits} commits in {}", file.display()),
        Duration::from_secs(30),
        || {
            let lines = complete_lines(file);
            let received = lines
                .iter()
                .filter(|l| l.contains(r#""action":"C""#))
                .count();
            (received >= commits).then_some(lines)
        },
    );
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}
