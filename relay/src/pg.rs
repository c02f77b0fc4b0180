//! A replication connection to PostgreSQL: socket or TCP, TLS as libpq's
//! `sslmode` says (rustls), authentication (trust, password, MD5,
//! SCRAM-SHA-256), simple queries and the `START_REPLICATION` copy stream.
//! The messages themselves are built and parsed by `postgres-protocol`;
//! only CopyBothResponse, which it does not know, is framed here.

use crate::conninfo::{pgpass_lookup, ConnInfo, Host, SslMode};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::{self, Message};
use postgres_protocol::message::frontend;
use std::fmt;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::{TcpStream, UnixStream};

/// What PostgreSQL said in an ErrorResponse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerError {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " (DETAIL: {d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, " (HINT: {h})")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub enum PgError {
    /// Connecting or the connection failed.
    Io(String),
    /// The server refused something.
    Server(ServerError),
    /// TLS setup or handshake.
    Tls(String),
    /// Something the relay cannot do (an authentication method, a
    /// password it does not have) or the server said something unexpected.
    Protocol(String),
}

impl PgError {
    /// Errors that a retry cannot cure: the configuration or the server's
    /// setup must change (authentication, privileges, a missing database
    /// or slot, a refused plugin option, TLS verification).
    pub fn is_permanent(&self) -> bool {
        match self {
            PgError::Server(e) => {
                let class = e.code.get(..2).unwrap_or("");
                matches!(class, "28" | "42" | "3D" | "22" | "0A") || e.code == "55000"
            }
            PgError::Tls(_) => true,
            PgError::Protocol(m) => m.starts_with("authentication:"),
            PgError::Io(_) => false,
        }
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Io(m) | PgError::Tls(m) | PgError::Protocol(m) => f.write_str(m),
            PgError::Server(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PgError {}

fn server_error(fields: &mut backend::ErrorFields<'_>) -> ServerError {
    let mut e = ServerError::default();
    let mut localized = String::new();
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'S' => localized = value,
            b'V' => e.severity = value,
            b'C' => e.code = value,
            b'M' => e.message = value,
            b'D' => e.detail = Some(value),
            b'H' => e.hint = Some(value),
            _ => {}
        }
    }
    if e.severity.is_empty() {
        e.severity = localized;
    }
    e
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A backend message, or the CopyBothResponse `postgres-protocol` does not
/// parse.
enum Backend {
    Message(Message),
    CopyBoth,
}

/// A connection in `replication=database` mode, ready for queries.
pub struct PgConnection {
    reader: ReadHalf<Box<dyn Stream>>,
    writer: WriteHalf<Box<dyn Stream>>,
    inbuf: BytesMut,
    out: BytesMut,
    pub backend_pid: i32,
    pub server_version_num: u32,
    /// Where it connected, for messages.
    pub peer: String,
    pub tls: bool,
}

/// One row of a simple query's result (text values, `None` for NULL).
pub type Row = Vec<Option<String>>;

fn io_err(what: &str, e: io::Error) -> PgError {
    PgError::Io(format!("{what}: {e}"))
}

impl PgConnection {
    /// Connects to the first host of `ci` that accepts, as libpq does,
    /// with `replication=database` and `application_name`.
    pub async fn connect(ci: &ConnInfo, application_name: &str) -> Result<PgConnection, PgError> {
        let mut last = None;
        for (host, port) in &ci.hosts {
            let attempt = async {
                match ci.sslmode {
                    // libpq's allow: without TLS first, with it if refused.
                    SslMode::Allow => {
                        match Self::connect_one(ci, host, *port, false, application_name).await {
                            Err(PgError::Server(e))
                                if e.code == "28000" && matches!(host, Host::Tcp { .. }) =>
                            {
                                Self::connect_one(ci, host, *port, true, application_name).await
                            }
                            other => other,
                        }
                    }
                    SslMode::Disable => {
                        Self::connect_one(ci, host, *port, false, application_name).await
                    }
                    _ => Self::connect_one(ci, host, *port, true, application_name).await,
                }
            };
            let result = match ci.connect_timeout {
                Some(t) => match tokio::time::timeout(t, attempt).await {
                    Ok(r) => r,
                    Err(_) => Err(PgError::Io(format!(
                        "connection to {host} port {port} timed out after {t:?}"
                    ))),
                },
                None => attempt.await,
            };
            match result {
                Ok(c) => return Ok(c),
                // A server that answered with an error has the final word.
                Err(e @ PgError::Server(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| PgError::Io("no host to connect to".into())))
    }

    async fn connect_one(
        ci: &ConnInfo,
        host: &Host,
        port: u16,
        try_tls: bool,
        application_name: &str,
    ) -> Result<PgConnection, PgError> {
        let peer = format!("{host} port {port}");
        let (stream, tls): (Box<dyn Stream>, bool) = match host {
            Host::Socket(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                let s = UnixStream::connect(&path).await.map_err(|e| {
                    io_err(
                        &format!(
                            "connection to server on socket \"{}\" failed",
                            path.display()
                        ),
                        e,
                    )
                })?;
                // libpq never uses TLS on a Unix socket.
                (Box::new(s), false)
            }
            Host::Tcp { connect, name } => {
                let mut s = TcpStream::connect((connect.as_str(), port))
                    .await
                    .map_err(|e| io_err(&format!("connection to server at {peer} failed"), e))?;
                let _ = s.set_nodelay(true);
                if try_tls && ci.sslmode != SslMode::Disable {
                    let mut req = BytesMut::new();
                    frontend::ssl_request(&mut req);
                    s.write_all(&req)
                        .await
                        .map_err(|e| io_err("SSL request", e))?;
                    let answer = s.read_u8().await.map_err(|e| io_err("SSL request", e))?;
                    match answer {
                        b'S' => {
                            let tls = crate::tls::connect(ci, name, s).await?;
                            (Box::new(tls), true)
                        }
                        b'N' if matches!(ci.sslmode, SslMode::Allow | SslMode::Prefer) => (Box::new(s), false),
                        b'N' => {
                            return Err(PgError::Tls(format!(
                                "server at {peer} does not support SSL, but SSL was required (sslmode={:?})",
                                ci.sslmode
                            )))
                        }
                        other => {
                            return Err(PgError::Protocol(format!(
                                "received invalid response to SSL negotiation: {:?}",
                                other as char
                            )))
                        }
                    }
                } else {
                    (Box::new(s), false)
                }
            }
        };
        let (reader, writer) = tokio::io::split(stream);
        let mut conn = PgConnection {
            reader,
            writer,
            inbuf: BytesMut::with_capacity(64 * 1024),
            out: BytesMut::new(),
            backend_pid: 0,
            server_version_num: 0,
            peer,
            tls,
        };
        conn.startup(ci, host, port, application_name).await?;
        Ok(conn)
    }

    fn password(ci: &ConnInfo, host: &Host, port: u16) -> Option<String> {
        if let Some(p) = &ci.password {
            return Some(p.clone());
        }
        let file = ci.passfile.as_ref()?;
        let text = std::fs::read_to_string(file).ok()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(file) {
                if meta.permissions().mode() & 0o077 != 0 {
                    log::warn!(
                        "password file \"{}\" has group or world access; permissions should be u=rw (0600) or less",
                        file.display()
                    );
                    return None;
                }
            }
        }
        pgpass_lookup(&text, host, port, &ci.dbname, &ci.user)
    }

    async fn startup(
        &mut self,
        ci: &ConnInfo,
        host: &Host,
        port: u16,
        application_name: &str,
    ) -> Result<(), PgError> {
        let mut params: Vec<(&str, &str)> = vec![
            ("user", &ci.user),
            ("database", &ci.dbname),
            ("replication", "database"),
            (
                "application_name",
                ci.application_name.as_deref().unwrap_or(application_name),
            ),
        ];
        if let Some(o) = &ci.options {
            params.push(("options", o));
        }
        frontend::startup_message(params, &mut self.out)
            .map_err(|e| io_err("startup message", e))?;
        self.flush().await?;
        let mut scram: Option<ScramSha256> = None;
        loop {
            match self.read().await? {
                Backend::Message(Message::AuthenticationOk) => {}
                Backend::Message(Message::AuthenticationCleartextPassword) => {
                    let pw = Self::password(ci, host, port).ok_or_else(no_password)?;
                    frontend::password_message(pw.as_bytes(), &mut self.out).map_err(|e| io_err("password", e))?;
                    self.flush().await?;
                }
                Backend::Message(Message::AuthenticationMd5Password(body)) => {
                    let pw = Self::password(ci, host, port).ok_or_else(no_password)?;
                    let hash = md5_hash(ci.user.as_bytes(), pw.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.out).map_err(|e| io_err("password", e))?;
                    self.flush().await?;
                }
                Backend::Message(Message::AuthenticationSasl(body)) => {
                    let mut mechanisms = body.mechanisms();
                    let mut has_scram = false;
                    while let Ok(Some(m)) = mechanisms.next() {
                        has_scram |= m == SCRAM_SHA_256;
                    }
                    if !has_scram {
                        return Err(PgError::Protocol(
                            "authentication: the server offers no SASL mechanism the relay supports (SCRAM-SHA-256)".into(),
                        ));
                    }
                    let pw = Self::password(ci, host, port).ok_or_else(no_password)?;
                    // Without channel binding ("n"): accepted whether or not
                    // the server offers SCRAM-SHA-256-PLUS.
                    let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.out)
                        .map_err(|e| io_err("SASL", e))?;
                    self.flush().await?;
                    scram = Some(s);
                }
                Backend::Message(Message::AuthenticationSaslContinue(body)) => {
                    let s = scram.as_mut().ok_or_else(|| PgError::Protocol("unexpected SASL message".into()))?;
                    s.update(body.data())
                        .map_err(|e| PgError::Protocol(format!("authentication: SCRAM: {e}")))?;
                    frontend::sasl_response(s.message(), &mut self.out).map_err(|e| io_err("SASL", e))?;
                    self.flush().await?;
                }
                Backend::Message(Message::AuthenticationSaslFinal(body)) => {
                    let s = scram.as_mut().ok_or_else(|| PgError::Protocol("unexpected SASL message".into()))?;
                    s.finish(body.data()).map_err(|e| {
                        PgError::Protocol(format!("authentication: the server's SCRAM signature is invalid: {e}"))
                    })?;
                }
                Backend::Message(
                    Message::AuthenticationGss
                    | Message::AuthenticationSspi
                    | Message::AuthenticationKerberosV5
                    | Message::AuthenticationScmCredential
                    | Message::AuthenticationGssContinue(_),
                ) => {
                    return Err(PgError::Protocol(
                        "authentication: the server asks for GSSAPI/SSPI authentication, which the relay does not support (use scram-sha-256, md5, password or trust)".into(),
                    ))
                }
                Backend::Message(Message::BackendKeyData(k)) => self.backend_pid = k.process_id(),
                Backend::Message(Message::ParameterStatus(p)) => {
                    if p.name().ok() == Some("server_version") {
                        if let Ok(v) = p.value() {
                            self.server_version_num = parse_server_version(v);
                        }
                    }
                }
                Backend::Message(Message::NoticeResponse(_)) => {}
                Backend::Message(Message::ReadyForQuery(_)) => return Ok(()),
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(PgError::Server(server_error(&mut body.fields())))
                }
                _ => return Err(PgError::Protocol("unexpected message during the startup".into())),
            }
        }
    }

    async fn flush(&mut self) -> Result<(), PgError> {
        let out = self.out.split();
        self.writer
            .write_all(&out)
            .await
            .map_err(|e| io_err(&format!("write to {}", self.peer), e))?;
        self.writer
            .flush()
            .await
            .map_err(|e| io_err(&format!("write to {}", self.peer), e))
    }

    /// The next backend message. Cancel-safe: what was read stays in the
    /// buffer.
    async fn read(&mut self) -> Result<Backend, PgError> {
        loop {
            if let Some(header) =
                backend::Header::parse(&self.inbuf).map_err(|e| PgError::Protocol(e.to_string()))?
            {
                let total = header.len() as usize + 1;
                if header.tag() == b'W' && self.inbuf.len() >= total {
                    self.inbuf.advance(total);
                    return Ok(Backend::CopyBoth);
                }
                if header.tag() != b'W' {
                    if let Some(m) = Message::parse(&mut self.inbuf)
                        .map_err(|e| PgError::Protocol(e.to_string()))?
                    {
                        return Ok(Backend::Message(m));
                    }
                }
            }
            if self.inbuf.capacity() - self.inbuf.len() < 8192 {
                self.inbuf.reserve(64 * 1024);
            }
            let n = self
                .reader
                .read_buf(&mut self.inbuf)
                .await
                .map_err(|e| io_err(&format!("read from {}", self.peer), e))?;
            if n == 0 {
                return Err(PgError::Io(format!(
                    "server at {} closed the connection unexpectedly",
                    self.peer
                )));
            }
        }
    }

    /// Runs `sql` with the simple query protocol; its rows.
    pub async fn query(&mut self, sql: &str) -> Result<Vec<Row>, PgError> {
        frontend::query(sql, &mut self.out).map_err(|e| io_err("query", e))?;
        self.flush().await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.read().await? {
                Backend::Message(Message::DataRow(row)) => {
                    let buf = row.buffer();
                    let mut ranges = row.ranges();
                    let mut values = Vec::new();
                    while let Ok(Some(r)) = ranges.next() {
                        values.push(r.map(|r| String::from_utf8_lossy(&buf[r]).into_owned()));
                    }
                    rows.push(values);
                }
                Backend::Message(Message::ErrorResponse(body)) => {
                    error = Some(server_error(&mut body.fields()))
                }
                Backend::Message(Message::ReadyForQuery(_)) => {
                    return match error {
                        Some(e) => Err(PgError::Server(e)),
                        None => Ok(rows),
                    }
                }
                _ => {}
            }
        }
    }

    /// `START_REPLICATION SLOT slot LOGICAL 0/0 (options)`: from the
    /// slot's confirmed position.
    pub async fn start_replication(
        mut self,
        slot: &str,
        options: &[(String, String)],
    ) -> Result<ReplicationStream, PgError> {
        let mut sql = format!("START_REPLICATION SLOT {} LOGICAL 0/0", quote_ident(slot));
        if !options.is_empty() {
            let list: Vec<String> = options
                .iter()
                .map(|(k, v)| format!("{} {}", quote_ident(k), quote_literal(v)))
                .collect();
            sql.push_str(&format!(" ({})", list.join(", ")));
        }
        frontend::query(&sql, &mut self.out).map_err(|e| io_err("query", e))?;
        self.flush().await?;
        loop {
            match self.read().await? {
                Backend::CopyBoth => return Ok(ReplicationStream { conn: self }),
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(PgError::Server(server_error(&mut body.fields())))
                }
                Backend::Message(Message::NoticeResponse(_)) => {}
                _ => {
                    return Err(PgError::Protocol(
                        "unexpected answer to START_REPLICATION".into(),
                    ))
                }
            }
        }
    }
}

fn no_password() -> PgError {
    PgError::Protocol(
        "authentication: the server asks for a password and none was given (password in the connection string, PGPASSWORD or the password file)".into(),
    )
}

/// `160015` from `16.15` (`server_version`'s text).
fn parse_server_version(v: &str) -> u32 {
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    major * 10000 + minor
}

pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// What a walsender sends while streaming.
#[derive(Debug)]
pub enum Replication {
    /// An output message of the plugin at `lsn` (`dataStart`).
    Data { lsn: u64, payload: Bytes },
    /// A keepalive: the server has sent everything up to `wal_end`.
    Keepalive { wal_end: u64, reply_requested: bool },
}

/// The copy stream of `START_REPLICATION`.
pub struct ReplicationStream {
    conn: PgConnection,
}

/// Microseconds since 2000-01-01, PostgreSQL's clock.
pub fn pg_now_micros() -> i64 {
    const UNIX_TO_PG_EPOCH_US: i64 = 946_684_800_000_000;
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
        - UNIX_TO_PG_EPOCH_US
}

impl ReplicationStream {
    /// Where it is connected, and whether through TLS.
    pub fn peer(&self) -> String {
        format!(
            "{}, {}",
            self.conn.peer,
            if self.conn.tls { "TLS" } else { "no TLS" }
        )
    }

    /// The next message; `Ok(None)` when the server ended the stream.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Result<Option<Replication>, PgError> {
        loop {
            match self.conn.read().await? {
                Backend::Message(Message::CopyData(body)) => {
                    let mut data = body.into_bytes();
                    match data.first() {
                        Some(b'w') if data.len() >= 25 => {
                            data.advance(1);
                            let lsn = data.get_u64();
                            let _wal_end = data.get_u64();
                            let _send_time = data.get_i64();
                            return Ok(Some(Replication::Data { lsn, payload: data }));
                        }
                        Some(b'k') if data.len() >= 18 => {
                            data.advance(1);
                            let wal_end = data.get_u64();
                            let _send_time = data.get_i64();
                            let reply_requested = data.get_u8() != 0;
                            return Ok(Some(Replication::Keepalive {
                                wal_end,
                                reply_requested,
                            }));
                        }
                        _ => {
                            return Err(PgError::Protocol(
                                "unexpected CopyData message from the walsender".into(),
                            ))
                        }
                    }
                }
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(PgError::Server(server_error(&mut body.fields())))
                }
                Backend::Message(Message::CopyDone) => return Ok(None),
                Backend::Message(Message::NoticeResponse(_) | Message::ParameterStatus(_)) => {}
                _ => {
                    return Err(PgError::Protocol(
                        "unexpected message while streaming".into(),
                    ))
                }
            }
        }
    }

    /// A Standby Status Update: `confirmed` as written, flushed and
    /// applied (reporting more as written would stop the keepalives an
    /// idle slot's progress needs).
    pub async fn send_status(
        &mut self,
        confirmed: u64,
        reply_requested: bool,
    ) -> Result<(), PgError> {
        let mut data = BytesMut::with_capacity(34);
        data.put_u8(b'r');
        data.put_u64(confirmed);
        data.put_u64(confirmed);
        data.put_u64(confirmed);
        data.put_i64(pg_now_micros());
        data.put_u8(reply_requested as u8);
        frontend::CopyData::new(data.freeze())
            .map_err(|e| io_err("status update", e))?
            .write(&mut self.conn.out);
        self.conn.flush().await
    }

    /// Ends streaming (CopyDone) and the connection, after a last status
    /// update; waits at most `timeout` for the server to agree.
    pub async fn finish(mut self, confirmed: u64, timeout: Duration) {
        let end = async {
            self.send_status(confirmed, false).await?;
            frontend::copy_done(&mut self.conn.out);
            self.conn.flush().await?;
            // The server answers CopyDone with its own, then the result of
            // START_REPLICATION; data still in flight comes first.
            loop {
                match self.conn.read().await? {
                    Backend::Message(Message::ReadyForQuery(_)) => break,
                    Backend::Message(Message::ErrorResponse(body)) => {
                        return Err(PgError::Server(server_error(&mut body.fields())))
                    }
                    _ => {}
                }
            }
            frontend::terminate(&mut self.conn.out);
            self.conn.flush().await
        };
        if let Ok(Err(e)) = tokio::time::timeout(timeout, end).await {
            log::debug!("ending the replication connection: {e}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn versions_quoting_and_permanence() {
        assert_eq!(parse_server_version("16.15"), 160015);
        assert_eq!(parse_server_version("18.6 (Debian 18.6-1)"), 180006);
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        let e = |code: &str| {
            PgError::Server(ServerError {
                code: code.into(),
                ..Default::default()
            })
        };
        assert!(e("28P01").is_permanent());
        assert!(e("42704").is_permanent());
        assert!(e("42501").is_permanent());
        assert!(e("22023").is_permanent());
        assert!(!e("57P01").is_permanent());
        assert!(!e("53300").is_permanent());
        assert!(!PgError::Io("x".into()).is_permanent());
    }
}
