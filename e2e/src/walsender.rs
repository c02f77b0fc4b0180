//! A minimal client of PostgreSQL's logical replication protocol, the way
//! production consumers read a slot (not through pg_recvlogical): a
//! `replication=database` connection, `START_REPLICATION SLOT ... LOGICAL`,
//! then `CopyData` messages — `XLogData` ('w') with the plugin's output and
//! primary keepalives ('k', answered when the server asks) — and Standby
//! Status Updates ('r') carrying the position the consumer confirms.
//!
//! Only what the test clusters need: a Unix socket (or TCP), trust
//! authentication, protocol 3.0, no TLS. The wire format lives in [`wire`]:
//! pure functions over bytes, unit-tested below without a server.
//!
//! ```no_run
//! # use pubjson_e2e::{Server, Walsender};
//! # use std::time::Duration;
//! let mut ws = Walsender::connect(&Server::main(), "mydb");
//! ws.start("s", &[("format-version", "3")], 0).unwrap();
//! while let Some(m) = ws.next_message(Duration::from_secs(5)).unwrap() {
//!     for object in m.text().split('\n') { /* process */ }
//!     ws.confirm(m.lsn).unwrap();
//! }
//! ws.close();
//! ```

use crate::server::{unique_application_name, wait_clients_gone, Server, RELEASE_TIMEOUT};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long connecting and starting may take on a loaded machine.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A fault the suites inject into a walsender streaming to a consumer
/// (tests/streaming.rs through pg_recvlogical, tests/walsender.rs through
/// [`Walsender`]), each followed by a reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalsenderFault {
    /// `pg_terminate_backend` of the walsender: the server keeps running.
    TerminateWalsender,
    /// SIGKILL of the walsender: the postmaster restarts every backend,
    /// as after a crash.
    KillWalsender,
    /// `pg_ctl restart -m immediate`: stop without a checkpoint, then start.
    ImmediateRestart,
}

impl WalsenderFault {
    /// A short name, for names of databases and files.
    pub fn name(self) -> &'static str {
        match self {
            WalsenderFault::TerminateWalsender => "terminate",
            WalsenderFault::KillWalsender => "kill",
            WalsenderFault::ImmediateRestart => "immediate",
        }
    }
}

/// The tests of a suite that reconnects after each [`WalsenderFault`]:
/// `reconnect_after_walsender_terminated`, `reconnect_after_walsender_killed`
/// and `reconnect_after_immediate_restart`, each calling the suite's
/// `$run(fault)`.
#[macro_export]
macro_rules! walsender_fault_tests {
    ($run:ident) => {
        #[test]
        fn reconnect_after_walsender_terminated() {
            $run($crate::WalsenderFault::TerminateWalsender);
        }

        #[test]
        fn reconnect_after_walsender_killed() {
            $run($crate::WalsenderFault::KillWalsender);
        }

        #[test]
        fn reconnect_after_immediate_restart() {
            $run($crate::WalsenderFault::ImmediateRestart);
        }
    };
}

/// An error of the replication connection.
#[derive(Debug)]
pub enum WalsenderError {
    /// The server sent an ErrorResponse (or a FATAL while streaming).
    Server(ServerError),
    /// The connection failed or was closed by the server without an
    /// error message (a killed walsender, a crashed server).
    Io(io::Error),
    /// The server ended streaming (CopyDone, CommandComplete) or sent
    /// something this client does not expect.
    Protocol(String),
}

impl WalsenderError {
    /// The SQLSTATE of a server error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            WalsenderError::Server(e) => Some(&e.code),
            _ => None,
        }
    }
}

impl fmt::Display for WalsenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalsenderError::Server(e) => write!(f, "{e}"),
            WalsenderError::Io(e) => write!(f, "connection: {e}"),
            WalsenderError::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

impl std::error::Error for WalsenderError {}

impl From<io::Error> for WalsenderError {
    fn from(e: io::Error) -> Self {
        WalsenderError::Io(e)
    }
}

/// The fields of an ErrorResponse (or NoticeResponse) the tests look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerError {
    /// `ERROR`, `FATAL`, ... (the non-localized field 'V' when sent).
    pub severity: String,
    /// The SQLSTATE ('C').
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " DETAIL: {d}")?;
        }
        Ok(())
    }
}

/// One output message of the plugin (an `XLogData` message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData {
    /// `dataStart`: the message's LSN, what a consumer confirms once it
    /// has processed the message.
    pub lsn: u64,
    /// `walEnd`: the end of the WAL the server has.
    pub wal_end: u64,
    /// `sendTime`, microseconds since 2000-01-01.
    pub send_time: i64,
    /// The plugin's output.
    pub payload: Vec<u8>,
}

impl XLogData {
    /// The payload as text; panics when it is not UTF-8 (pubjson's
    /// output always is, in every database encoding).
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.payload).unwrap_or_else(|e| {
            panic!(
                "message at {} is not UTF-8 ({e}): {}",
                lsn_text(self.lsn),
                String::from_utf8_lossy(&self.payload)
            )
        })
    }
}

/// The contents of a `CopyData` message from a walsender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyMessage {
    XLogData(XLogData),
    /// Primary keepalive: `reply_requested` asks for a status update now.
    Keepalive {
        wal_end: u64,
        send_time: i64,
        reply_requested: bool,
    },
}

/// `X/Y`, as PostgreSQL prints an LSN.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Now, in microseconds since PostgreSQL's epoch (2000-01-01 UTC).
fn pg_now() -> i64 {
    const UNIX_TO_PG_EPOCH_US: i64 = 946_684_800_000_000;
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    since_unix - UNIX_TO_PG_EPOCH_US
}

/// The frontend/backend protocol's messages, built and parsed from bytes.
pub mod wire {
    use super::{CopyMessage, ServerError, XLogData};

    /// Protocol 3.0.
    pub const PROTOCOL_VERSION: i32 = 196_608;
    /// Larger messages are taken for a framing error (PostgreSQL's own
    /// limit for a message is 1 GB).
    pub const MAX_MESSAGE: usize = 1 << 30;

    fn with_length(tag: Option<u8>, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(body.len() + 5);
        out.extend(tag);
        out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// The StartupMessage: protocol 3.0 and `name`/`value` parameters.
    pub fn startup_message(params: &[(&str, &str)]) -> Vec<u8> {
        let mut body = PROTOCOL_VERSION.to_be_bytes().to_vec();
        for (name, value) in params {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        with_length(None, &body)
    }

    /// A simple Query ('Q').
    pub fn query(sql: &str) -> Vec<u8> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        with_length(Some(b'Q'), &body)
    }

    /// CopyData ('d') around `data`.
    pub fn copy_data(data: &[u8]) -> Vec<u8> {
        with_length(Some(b'd'), data)
    }

    /// CopyDone ('c').
    pub fn copy_done() -> Vec<u8> {
        with_length(Some(b'c'), &[])
    }

    /// Terminate ('X').
    pub fn terminate() -> Vec<u8> {
        with_length(Some(b'X'), &[])
    }

    /// A Standby Status Update ('r'), inside its CopyData.
    pub fn standby_status_update(
        written: u64,
        flushed: u64,
        applied: u64,
        client_time: i64,
        reply_requested: bool,
    ) -> Vec<u8> {
        let mut data = vec![b'r'];
        data.extend_from_slice(&written.to_be_bytes());
        data.extend_from_slice(&flushed.to_be_bytes());
        data.extend_from_slice(&applied.to_be_bytes());
        data.extend_from_slice(&client_time.to_be_bytes());
        data.push(reply_requested as u8);
        copy_data(&data)
    }

    /// A backend message's type, its body and the bytes it takes.
    pub type Frame<'a> = (u8, &'a [u8], usize);

    /// The first whole backend message in `buf`; `Ok(None)` while it is
    /// incomplete.
    pub fn split_message(buf: &[u8]) -> Result<Option<Frame<'_>>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if len < 4 || len as usize > MAX_MESSAGE {
            return Err(format!(
                "message of type {:?} with length {len}",
                buf[0] as char
            ));
        }
        let total = 1 + len as usize;
        if buf.len() < total {
            return Ok(None);
        }
        Ok(Some((buf[0], &buf[5..total], total)))
    }

    fn be_u64(b: &[u8]) -> u64 {
        u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
    }

    /// The body of a CopyData message from a walsender.
    pub fn parse_copy_data(body: &[u8]) -> Result<CopyMessage, String> {
        match body.first() {
            Some(b'w') if body.len() >= 25 => Ok(CopyMessage::XLogData(XLogData {
                lsn: be_u64(&body[1..]),
                wal_end: be_u64(&body[9..]),
                send_time: be_u64(&body[17..]) as i64,
                payload: body[25..].to_vec(),
            })),
            Some(b'k') if body.len() == 18 => Ok(CopyMessage::Keepalive {
                wal_end: be_u64(&body[1..]),
                send_time: be_u64(&body[9..]) as i64,
                reply_requested: body[17] != 0,
            }),
            Some(t) => Err(format!(
                "CopyData of type {:?} with {} bytes",
                *t as char,
                body.len()
            )),
            None => Err("empty CopyData".to_string()),
        }
    }

    /// The fields of an ErrorResponse or NoticeResponse body.
    pub fn parse_error_fields(body: &[u8]) -> ServerError {
        let mut e = ServerError::default();
        let mut localized_severity = String::new();
        let mut rest = body;
        while let Some((&field, tail)) = rest.split_first() {
            if field == 0 {
                break;
            }
            let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
            let value = String::from_utf8_lossy(&tail[..end]).into_owned();
            rest = tail.get(end + 1..).unwrap_or(&[]);
            match field {
                b'S' => localized_severity = value,
                b'V' => e.severity = value,
                b'C' => e.code = value,
                b'M' => e.message = value,
                b'D' => e.detail = Some(value),
                _ => {}
            }
        }
        if e.severity.is_empty() {
            e.severity = localized_severity;
        }
        e
    }

    /// `name` as a double-quoted identifier.
    pub fn quote_ident(name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }

    /// `value` as a single-quoted literal.
    pub fn quote_literal(value: &str) -> String {
        format!("'{}'", value.replace('\'', "''"))
    }

    /// `START_REPLICATION SLOT "slot" LOGICAL X/Y ("name" 'value', ...)`.
    pub fn start_replication(slot: &str, start_lsn: u64, options: &[(&str, &str)]) -> String {
        let mut sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {}",
            quote_ident(slot),
            super::lsn_text(start_lsn)
        );
        if !options.is_empty() {
            let opts: Vec<String> = options
                .iter()
                .map(|(n, v)| format!("{} {}", quote_ident(n), quote_literal(v)))
                .collect();
            sql += &format!(" ({})", opts.join(", "));
        }
        sql
    }
}

enum Socket {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Socket {
    fn open(server: &Server) -> io::Result<Socket> {
        if server.host.starts_with('/') {
            let path = format!("{}/.s.PGSQL.{}", server.host, server.port);
            UnixStream::connect(path).map(Socket::Unix)
        } else {
            let s = TcpStream::connect((server.host.as_str(), server.port))?;
            s.set_nodelay(true)?;
            Ok(Socket::Tcp(s))
        }
    }

    fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Socket::Unix(s) => s.set_read_timeout(Some(t)),
            Socket::Tcp(s) => s.set_read_timeout(Some(t)),
        }
    }

    fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Socket::Unix(s) => s.set_write_timeout(Some(t)),
            Socket::Tcp(s) => s.set_write_timeout(Some(t)),
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Unix(s) => s.read(buf),
            Socket::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Unix(s) => s.write(buf),
            Socket::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Unix(s) => s.flush(),
            Socket::Tcp(s) => s.flush(),
        }
    }
}

/// A replication connection to one database. Dropping it closes the
/// socket without waiting; [`Walsender::close`] also waits until the
/// server has let go of the walsender and its slot.
pub struct Walsender {
    socket: Socket,
    /// Bytes received and not yet parsed: `inbuf[pos..]`.
    inbuf: Vec<u8>,
    pos: usize,
    server: Server,
    /// Its `application_name`, unique in the run (found in
    /// `pg_stat_activity`).
    pub application_name: String,
    /// The walsender's process id (BackendKeyData).
    pub pid: i32,
    streaming: bool,
    /// The highest LSN received (reported as written).
    received: u64,
    /// The last LSN confirmed (reported as flushed and applied).
    confirmed: u64,
    closed: bool,
}

impl Walsender {
    /// Connects to `db` on `server` as `postgres`; panics when it cannot.
    pub fn connect(server: &Server, db: &str) -> Walsender {
        Walsender::try_connect(server, db, "postgres")
            .unwrap_or_else(|e| panic!("replication connection to {db} on {server:?}: {e}"))
    }

    /// Connects to `db` on `server` as `user` (trust authentication).
    pub fn try_connect(server: &Server, db: &str, user: &str) -> Result<Walsender, WalsenderError> {
        let application_name = unique_application_name("walsender");
        let mut ws = Walsender {
            socket: Socket::open(server)?,
            inbuf: Vec::new(),
            pos: 0,
            server: server.clone(),
            application_name,
            pid: 0,
            streaming: false,
            received: 0,
            confirmed: 0,
            closed: false,
        };
        let startup = wire::startup_message(&[
            ("user", user),
            ("database", db),
            ("replication", "database"),
            ("application_name", &ws.application_name.clone()),
        ]);
        ws.send(&startup)?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        loop {
            let (tag, body) = ws.read_until(deadline, "the startup")?;
            match tag {
                b'R' => {
                    let code = body
                        .get(..4)
                        .map(|b| i32::from_be_bytes(b.try_into().unwrap()));
                    if code != Some(0) {
                        return Err(WalsenderError::Protocol(format!(
                            "authentication request {code:?}: only trust authentication is \
                             supported (the test clusters trust local connections)"
                        )));
                    }
                }
                b'K' if body.len() >= 4 => {
                    ws.pid = i32::from_be_bytes(body[..4].try_into().unwrap());
                }
                b'S' | b'N' | b'v' => {}
                b'Z' => return Ok(ws),
                b'E' => return Err(WalsenderError::Server(wire::parse_error_fields(&body))),
                other => {
                    return Err(WalsenderError::Protocol(format!(
                        "unexpected message {:?} during the startup",
                        other as char
                    )))
                }
            }
        }
    }

    /// `START_REPLICATION SLOT slot LOGICAL start_lsn (options)`: the
    /// server starts sending from the slot's confirmed position, or from
    /// `start_lsn` when that is later (transactions that committed before
    /// it are skipped). A server error (an unknown option, a slot in use)
    /// leaves the connection usable.
    pub fn start(
        &mut self,
        slot: &str,
        options: &[(&str, &str)],
        start_lsn: u64,
    ) -> Result<(), WalsenderError> {
        assert!(!self.streaming, "already streaming");
        let sql = wire::start_replication(slot, start_lsn, options);
        self.send(&wire::query(&sql))?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut error = None;
        loop {
            let (tag, body) = self.read_until(deadline, "START_REPLICATION")?;
            match tag {
                b'W' => {
                    self.streaming = true;
                    self.confirmed = self.confirmed.max(start_lsn);
                    return Ok(());
                }
                b'E' => error = Some(wire::parse_error_fields(&body)),
                b'Z' => {
                    return Err(WalsenderError::Server(error.unwrap_or_else(|| {
                        ServerError {
                            message: format!("{sql}: ReadyForQuery without CopyBothResponse"),
                            ..ServerError::default()
                        }
                    })))
                }
                b'N' | b'S' => {}
                other => {
                    return Err(WalsenderError::Protocol(format!(
                        "unexpected message {:?} after {sql}",
                        other as char
                    )))
                }
            }
        }
    }

    /// The next output message, answering keepalives meanwhile; `Ok(None)`
    /// when none arrived within `timeout`. An error ends the stream: the
    /// walsender reported an error (terminated, ...) or is gone.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<XLogData>, WalsenderError> {
        assert!(self.streaming, "next_message before start");
        let deadline = Instant::now() + timeout;
        loop {
            let Some((tag, body)) = self.read_message(deadline)? else {
                return Ok(None);
            };
            match tag {
                b'd' => match wire::parse_copy_data(&body).map_err(WalsenderError::Protocol)? {
                    CopyMessage::XLogData(m) => {
                        self.received = self.received.max(m.lsn);
                        return Ok(Some(m));
                    }
                    CopyMessage::Keepalive {
                        reply_requested, ..
                    } => {
                        if reply_requested {
                            self.send_status(false)?;
                        }
                    }
                },
                b'E' => {
                    self.streaming = false;
                    return Err(WalsenderError::Server(wire::parse_error_fields(&body)));
                }
                b'N' | b'S' => {}
                other => {
                    self.streaming = false;
                    return Err(WalsenderError::Protocol(format!(
                        "the server ended streaming (message {:?})",
                        other as char
                    )));
                }
            }
        }
    }

    /// Confirms `lsn` (reported as flushed and applied) at once: the slot
    /// may release the WAL before it, and a new session starts after it.
    pub fn confirm(&mut self, lsn: u64) -> Result<(), WalsenderError> {
        self.confirmed = lsn;
        self.send_status(false)
    }

    /// The last LSN confirmed.
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    fn send_status(&mut self, reply_requested: bool) -> Result<(), WalsenderError> {
        let msg = wire::standby_status_update(
            self.received.max(self.confirmed),
            self.confirmed,
            self.confirmed,
            pg_now(),
            reply_requested,
        );
        self.send(&msg)
    }

    /// Ends the session: CopyDone (draining what the server still sends
    /// until it is ready again), Terminate, then waits until the server has
    /// let go of the walsender and its slot. Works on a connection the
    /// server has already dropped (nothing to wait for then).
    pub fn close(mut self) {
        self.end_session();
        let Ok(mut client) = self.server.try_connect("postgres", "postgres") else {
            return; // a server that does not accept connections holds nothing of it
        };
        wait_clients_gone(&mut client, &self.application_name, RELEASE_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn end_session(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.streaming && self.send(&wire::copy_done()).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while let Ok(Some((tag, _))) = self.read_message(deadline) {
                if matches!(tag, b'Z' | b'E') {
                    break;
                }
            }
        }
        self.streaming = false;
        self.terminate();
    }

    /// Terminate, best effort, and the socket closed.
    fn terminate(&mut self) {
        let _ = self.socket.set_write_timeout(Duration::from_millis(50));
        let _ = self.socket.write_all(&wire::terminate());
        self.socket.shutdown();
    }

    /// Sends `bytes`. While the server does not take them (it may be
    /// blocked sending to this client, e.g. its last error), what it sends
    /// is read and kept, so that neither side waits for the other forever.
    /// When the server has closed the connection, the error is the one it
    /// sent before closing, if any (a terminated walsender's FATAL), rather
    /// than the broken pipe; what else it had sent is dropped with the
    /// session.
    fn send(&mut self, bytes: &[u8]) -> Result<(), WalsenderError> {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut sent = 0;
        let failure = loop {
            if sent == bytes.len() {
                return Ok(());
            }
            if let Err(e) = self.socket.set_write_timeout(Duration::from_millis(50)) {
                break e;
            }
            match self.socket.write(&bytes[sent..]) {
                Ok(0) => {
                    break io::Error::new(io::ErrorKind::WriteZero, "the server takes nothing")
                }
                Ok(n) => sent += n,
                Err(e) if blocked(&e) => {
                    if Instant::now() >= deadline {
                        break io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the server took nothing for {SETUP_TIMEOUT:?}"),
                        );
                    }
                    if let Err(WalsenderError::Io(e)) = self.fill(Duration::from_millis(1)) {
                        break e;
                    }
                }
                Err(e) => break e,
            }
        };
        self.streaming = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(Some((tag, body))) = self.read_message(deadline) {
            if tag == b'E' {
                return Err(WalsenderError::Server(wire::parse_error_fields(&body)));
            }
        }
        Err(failure.into())
    }

    /// A message, or an error naming `what` when none comes by `deadline`.
    fn read_until(
        &mut self,
        deadline: Instant,
        what: &str,
    ) -> Result<(u8, Vec<u8>), WalsenderError> {
        self.read_message(deadline)?.ok_or_else(|| {
            WalsenderError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer from the server during {what}"),
            ))
        })
    }

    /// Reads what arrives within `wait` (at least 1 ms) into the buffer;
    /// false when nothing did. The end of the connection is an error.
    fn fill(&mut self, wait: Duration) -> Result<bool, WalsenderError> {
        let mut chunk = [0u8; 64 * 1024];
        // A zero timeout would mean "block forever".
        self.socket
            .set_read_timeout(wait.max(Duration::from_millis(1)))?;
        match self.socket.read(&mut chunk) {
            Ok(0) => {
                self.streaming = false;
                Err(WalsenderError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )))
            }
            Ok(n) => {
                self.inbuf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if blocked(&e) => Ok(false),
            Err(e) => {
                self.streaming = false;
                Err(e.into())
            }
        }
    }

    /// The next backend message, or `None` at `deadline`.
    fn read_message(&mut self, deadline: Instant) -> Result<Option<(u8, Vec<u8>)>, WalsenderError> {
        loop {
            if let Some((tag, body, used)) =
                wire::split_message(&self.inbuf[self.pos..]).map_err(WalsenderError::Protocol)?
            {
                let body = body.to_vec();
                self.pos += used;
                if self.pos == self.inbuf.len() {
                    self.inbuf.clear();
                    self.pos = 0;
                } else if self.pos > 1 << 20 {
                    self.inbuf.drain(..self.pos);
                    self.pos = 0;
                }
                return Ok(Some((tag, body)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.fill(deadline - now)?;
        }
    }
}

/// A read or write that timed out (or was interrupted): try again.
fn blocked(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

impl Drop for Walsender {
    fn drop(&mut self) {
        // Never blocks long or panics (a failing test may be unwinding).
        if !self.closed {
            self.closed = true;
            self.terminate();
        }
    }
}

/// Whether the plugin of `slot` accepts `options` (e.g. one a newer pubjson
/// added): false when starting to decode fails with 22023 naming one of
/// them as unknown. Decodes through `pg_logical_slot_peek_changes` (at most
/// one change; nothing is consumed).
pub fn plugin_accepts(client: &mut postgres::Client, slot: &str, options: &[(&str, &str)]) -> bool {
    let flat: Vec<&str> = options.iter().flat_map(|(n, v)| [*n, *v]).collect();
    match client.query(
        "select 1 from pg_logical_slot_peek_changes($1, NULL, 1, VARIADIC $2::text[])",
        &[&slot, &flat],
    ) {
        Ok(_) => true,
        Err(e)
            if e.code().map(|c| c.code()) == Some("22023")
                && options.iter().any(|(n, _)| {
                    let m = e.as_db_error().map(|d| d.message()).unwrap_or("");
                    m.contains(&format!("\"{n}\"")) && m.contains("unknown")
                }) =>
        {
            false
        }
        Err(e) => panic!(
            "decoding {slot} with {options:?}: {}",
            crate::server::describe_error(&e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::wire::*;
    use super::*;

    #[test]
    fn startup_message_layout() {
        let m = startup_message(&[("user", "postgres"), ("replication", "database")]);
        let mut expected = Vec::new();
        let body = b"\x00\x03\x00\x00user\0postgres\0replication\0database\0\0";
        expected.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        expected.extend_from_slice(body);
        assert_eq!(m, expected);
    }

    #[test]
    fn frontend_messages() {
        assert_eq!(query("SELECT 1"), b"Q\0\0\0\x0dSELECT 1\0".to_vec());
        assert_eq!(copy_done(), b"c\0\0\0\x04".to_vec());
        assert_eq!(terminate(), b"X\0\0\0\x04".to_vec());
        assert_eq!(copy_data(b"ab"), b"d\0\0\0\x06ab".to_vec());
    }

    #[test]
    fn status_update_layout() {
        let m = standby_status_update(0x1_0000_0002, 0x3, 0x4, -5, true);
        let mut expected = b"d\0\0\0\x26r".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 4]);
        expected.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb]);
        expected.push(1);
        assert_eq!(m, expected);
        assert_eq!(m.len(), 1 + 4 + 1 + 8 * 4 + 1);
    }

    #[test]
    fn messages_split_only_when_whole() {
        let mut buf = b"Z\0\0\0\x05I".to_vec();
        buf.extend_from_slice(b"d\0\0\0\x07abc");
        assert_eq!(split_message(&buf), Ok(Some((b'Z', &b"I"[..], 6))));
        assert_eq!(split_message(&buf[6..]), Ok(Some((b'd', &b"abc"[..], 8))));
        for cut in 0..6 {
            assert_eq!(split_message(&buf[..cut]), Ok(None), "cut at {cut}");
        }
        for cut in 6..buf.len() {
            assert_eq!(split_message(&buf[6..cut]), Ok(None), "cut at {cut}");
        }
        // An empty body; lengths below 4 or beyond 1 GB are framing errors.
        assert_eq!(split_message(b"c\0\0\0\x04"), Ok(Some((b'c', &b""[..], 5))));
        assert!(split_message(b"d\0\0\0\x03").is_err());
        assert!(split_message(b"d\xff\xff\xff\xff").is_err());
        assert!(split_message(b"d\x40\0\0\x01").is_err());
    }

    #[test]
    fn xlogdata_and_keepalive() {
        let mut w = vec![b'w'];
        w.extend_from_slice(&0x0000_0001_0000_00a0u64.to_be_bytes());
        w.extend_from_slice(&0x0000_0001_0000_00b0u64.to_be_bytes());
        w.extend_from_slice(&42i64.to_be_bytes());
        w.extend_from_slice(b"{\"action\":\"B\"}\n{\"action\":\"C\"}");
        let CopyMessage::XLogData(x) = parse_copy_data(&w).unwrap() else {
            panic!("not XLogData")
        };
        assert_eq!(
            (x.lsn, x.wal_end, x.send_time),
            (0x1_0000_00a0, 0x1_0000_00b0, 42)
        );
        assert_eq!(x.text(), "{\"action\":\"B\"}\n{\"action\":\"C\"}");
        assert_eq!(lsn_text(x.lsn), "1/A0");

        // An empty payload is an XLogData too.
        assert!(
            matches!(parse_copy_data(&w[..25]), Ok(CopyMessage::XLogData(x)) if x.payload.is_empty())
        );
        assert!(parse_copy_data(&w[..24]).is_err());

        let mut k = vec![b'k'];
        k.extend_from_slice(&7u64.to_be_bytes());
        k.extend_from_slice(&8i64.to_be_bytes());
        k.push(1);
        assert_eq!(
            parse_copy_data(&k),
            Ok(CopyMessage::Keepalive {
                wal_end: 7,
                send_time: 8,
                reply_requested: true
            })
        );
        assert!(parse_copy_data(&k[..17]).is_err());
        assert!(parse_copy_data(b"x123").is_err());
        assert!(parse_copy_data(b"").is_err());
    }

    #[test]
    fn error_fields() {
        let body = b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0Ffile.c\0\0";
        let e = parse_error_fields(body);
        assert_eq!(e.severity, "FATAL");
        assert_eq!(e.code, "57P01");
        assert_eq!(
            e.message,
            "terminating connection due to administrator command"
        );
        assert_eq!(e.detail, None);
        // Localized severity only; a detail; a body cut short.
        let e = parse_error_fields(b"SFEHLER\0C22023\0Mbad\0Dmore\0\0");
        assert_eq!(
            (e.severity.as_str(), e.detail.as_deref()),
            ("FEHLER", Some("more"))
        );
        let e = parse_error_fields(b"C42");
        assert_eq!(e.code, "42");
        assert_eq!(
            WalsenderError::Server(parse_error_fields(body)).sqlstate(),
            Some("57P01")
        );
    }

    #[test]
    fn start_replication_quotes() {
        assert_eq!(
            start_replication("s", 0, &[]),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
        );
        assert_eq!(
            start_replication(
                "a\"b",
                0x2_0000_1234,
                &[("format-version", "3"), ("x", "it's")]
            ),
            "START_REPLICATION SLOT \"a\"\"b\" LOGICAL 2/1234 (\"format-version\" '3', \"x\" 'it''s')"
        );
    }
}
