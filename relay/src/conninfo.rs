//! libpq's connection settings: a `key=value` string or a `postgresql://`
//! URI, completed from the `PG*` environment variables and libpq's
//! defaults, as `psql` and `pg_recvlogical` read them (pure; the caller
//! passes the environment in).
//!
//! Supported keys: `host`, `hostaddr`, `port`, `dbname`, `user`,
//! `password`, `passfile`, `sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
//! `application_name`, `options`, `connect_timeout`, `channel_binding`
//! (`disable` or `prefer`: the relay never binds the channel, see
//! docs/relay.md). Any other key is an error, so that a setting the relay
//! would ignore is never silently dropped.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// `sslmode`, with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, ConnInfoError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(ConnInfoError(format!(
                    "invalid sslmode value: \"{other}\" (disable, allow, prefer, require, verify-ca or verify-full)"
                )))
            }
        })
    }
}

/// Where to connect: a Unix socket directory or a TCP host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// The directory of the socket `.s.PGSQL.<port>`.
    Socket(PathBuf),
    /// A host name or address, and the name TLS checks (`host`, even when
    /// `hostaddr` gives the address connected to).
    Tcp { connect: String, name: String },
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Socket(dir) => write!(f, "socket {}", dir.display()),
            Host::Tcp { connect, name } if connect == name => write!(f, "host {name}"),
            Host::Tcp { connect, name } => write!(f, "host {name} ({connect})"),
        }
    }
}

/// The resolved settings of one connection.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// Hosts tried in order, each with its port.
    pub hosts: Vec<(Host, u16)>,
    pub user: String,
    pub dbname: String,
    pub password: Option<String>,
    pub passfile: Option<PathBuf>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub sslcert: Option<PathBuf>,
    pub sslkey: Option<PathBuf>,
    pub application_name: Option<String>,
    pub options: Option<String>,
    pub connect_timeout: Option<Duration>,
}

// No password in debug output or logs.
impl fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnInfo")
            .field("hosts", &self.hosts)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("sslmode", &self.sslmode)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfoError(pub String);

impl fmt::Display for ConnInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnInfoError {}

fn err(msg: impl Into<String>) -> ConnInfoError {
    ConnInfoError(msg.into())
}

const KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "connect_timeout",
    "channel_binding",
];

/// The environment variable of each key, as libpq names them.
const ENV: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("dbname", "PGDATABASE"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("passfile", "PGPASSFILE"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("application_name", "PGAPPNAME"),
    ("options", "PGOPTIONS"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("channel_binding", "PGCHANNELBINDING"),
];

/// Splits `s` into its `key=value` pairs (libpq's syntax: values may be
/// single-quoted, with `\'` and `\\` escapes inside or outside quotes).
pub fn parse_key_values(s: &str) -> Result<Vec<(String, String)>, ConnInfoError> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(err(format!(
                "missing \"=\" after \"{key}\" in connection info string"
            )));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => {
                        return Err(err("unterminated quoted string in connection info string"))
                    }
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => {
                            return Err(err("unterminated quoted string in connection info string"))
                        }
                    },
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        value.push(n);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

fn percent_decode(s: &str) -> Result<String, ConnInfoError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| err(format!("invalid percent-encoded token: \"{s}\"")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| err(format!("invalid percent-encoded token: \"{s}\"")))
}

/// The pairs of a `postgresql://` or `postgres://` URI.
pub fn parse_uri(uri: &str) -> Result<Vec<(String, String)>, ConnInfoError> {
    let rest = uri
        .strip_prefix("postgresql://")
        .or_else(|| uri.strip_prefix("postgres://"))
        .ok_or_else(|| err("not a postgresql:// URI"))?;
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match main.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (main, None),
    };
    let mut out = Vec::new();
    let hostlist = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            match userinfo.split_once(':') {
                Some((u, p)) => {
                    out.push(("user".to_string(), percent_decode(u)?));
                    out.push(("password".to_string(), percent_decode(p)?));
                }
                None if !userinfo.is_empty() => {
                    out.push(("user".to_string(), percent_decode(userinfo)?))
                }
                None => {}
            }
            hosts
        }
        None => authority,
    };
    if !hostlist.is_empty() {
        let mut hosts = Vec::new();
        let mut ports = Vec::new();
        for item in hostlist.split(',') {
            // [v6addr]:port, host:port, host
            let (h, p) = if let Some(v6) = item.strip_prefix('[') {
                let (addr, tail) = v6
                    .split_once(']')
                    .ok_or_else(|| err(format!("invalid IPv6 host in URI: \"{item}\"")))?;
                (
                    addr.to_string(),
                    tail.strip_prefix(':').unwrap_or("").to_string(),
                )
            } else {
                match item.rsplit_once(':') {
                    Some((h, p)) => (percent_decode(h)?, p.to_string()),
                    None => (percent_decode(item)?, String::new()),
                }
            };
            hosts.push(h);
            ports.push(p);
        }
        out.push(("host".to_string(), hosts.join(",")));
        if ports.iter().any(|p| !p.is_empty()) {
            out.push(("port".to_string(), ports.join(",")));
        }
    }
    if let Some(db) = path.filter(|p| !p.is_empty()) {
        out.push(("dbname".to_string(), percent_decode(db)?));
    }
    if let Some(q) = query {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| err(format!("missing \"=\" in URI query parameter \"{pair}\"")))?;
            out.push((percent_decode(k)?, percent_decode(v)?));
        }
    }
    Ok(out)
}

/// The settings of `conninfo` (a `key=value` string, a URI, or empty),
/// completed from `env` (a variable's value) and libpq's defaults; `home`
/// locates `~/.pgpass` and `~/.postgresql/` as libpq does.
pub fn resolve(
    conninfo: &str,
    env: &dyn Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
) -> Result<ConnInfo, ConnInfoError> {
    let trimmed = conninfo.trim();
    let pairs = if trimmed.starts_with("postgresql://") || trimmed.starts_with("postgres://") {
        parse_uri(trimmed)?
    } else {
        parse_key_values(trimmed)?
    };
    let mut given: BTreeMap<&str, String> = BTreeMap::new();
    for (k, v) in &pairs {
        let key = KEYS
            .iter()
            .find(|known| **known == k.as_str())
            .ok_or_else(|| {
                err(format!(
                    "invalid connection option \"{k}\" (the relay supports: {})",
                    KEYS.join(", ")
                ))
            })?;
        given.insert(key, v.clone());
    }
    let get = |key: &str| -> Option<String> {
        given.get(key).cloned().or_else(|| {
            ENV.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, var)| env(var))
                .filter(|v| !v.is_empty())
        })
    };
    let user = match get("user") {
        Some(u) => u,
        None => env("USER")
            .filter(|u| !u.is_empty())
            .ok_or_else(|| err("no user name: set user in the connection string or PGUSER"))?,
    };
    let dbname = get("dbname").unwrap_or_else(|| user.clone());
    let host_list = get("host").unwrap_or_default();
    let addr_list = get("hostaddr").unwrap_or_default();
    let port_list = get("port").unwrap_or_default();
    let split = |s: &str| -> Vec<String> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split(',').map(|p| p.trim().to_string()).collect()
        }
    };
    let mut names = split(&host_list);
    let addrs = split(&addr_list);
    if names.is_empty() {
        names = if addrs.is_empty() {
            // libpq's default: Debian's socket directory.
            vec!["/var/run/postgresql".to_string()]
        } else {
            vec![String::new(); addrs.len()]
        };
    }
    if !addrs.is_empty() && addrs.len() != names.len() {
        return Err(err(format!(
            "could not match {} host names to {} hostaddr values",
            names.len(),
            addrs.len()
        )));
    }
    let ports = split(&port_list);
    if ports.len() > 1 && ports.len() != names.len() {
        return Err(err(format!(
            "could not match {} port numbers to {} hosts",
            ports.len(),
            names.len()
        )));
    }
    let mut hosts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let port_text = match ports.len() {
            0 => "5432",
            1 => ports[0].as_str(),
            _ => ports[i].as_str(),
        };
        let port_text = if port_text.is_empty() {
            "5432"
        } else {
            port_text
        };
        let port: u16 = port_text
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| err(format!("invalid port number: \"{port_text}\"")))?;
        let addr = addrs.get(i).filter(|a| !a.is_empty());
        let host = match addr {
            Some(a) => Host::Tcp {
                connect: a.clone(),
                name: if name.is_empty() {
                    a.clone()
                } else {
                    name.clone()
                },
            },
            None if name.starts_with('/') => Host::Socket(PathBuf::from(name)),
            None if name.is_empty() => {
                return Err(err("empty host name in the host list"));
            }
            None => Host::Tcp {
                connect: name.clone(),
                name: name.clone(),
            },
        };
        hosts.push((host, port));
    }
    let sslmode = SslMode::parse(&get("sslmode").unwrap_or_else(|| "prefer".to_string()))?;
    let dot_postgresql = home.as_ref().map(|h| h.join(".postgresql"));
    let default_file = |name: &str| dot_postgresql.as_ref().map(|d| d.join(name));
    let sslrootcert = get("sslrootcert")
        .map(PathBuf::from)
        .or_else(|| default_file("root.crt").filter(|p| p.exists()));
    let sslcert = get("sslcert")
        .map(PathBuf::from)
        .or_else(|| default_file("postgresql.crt").filter(|p| p.exists()));
    let sslkey = get("sslkey")
        .map(PathBuf::from)
        .or_else(|| default_file("postgresql.key").filter(|p| p.exists()));
    let connect_timeout = match get("connect_timeout") {
        None => None,
        Some(t) => {
            let secs: i64 = t
                .parse()
                .map_err(|_| err(format!("invalid connect_timeout value: \"{t}\"")))?;
            // libpq: zero or negative means wait forever; 1 is taken as 2.
            (secs > 0).then(|| Duration::from_secs(secs.max(2) as u64))
        }
    };
    match get("channel_binding").as_deref() {
        None | Some("disable") | Some("prefer") => {}
        Some("require") => {
            return Err(err(
                "channel_binding=require is not supported by the relay (it authenticates with SCRAM-SHA-256 without channel binding)",
            ))
        }
        Some(other) => {
            return Err(err(format!(
                "invalid channel_binding value: \"{other}\""
            )))
        }
    }
    let passfile = get("passfile")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".pgpass")));
    Ok(ConnInfo {
        hosts,
        user,
        dbname,
        password: get("password"),
        passfile,
        sslmode,
        sslrootcert,
        sslcert,
        sslkey,
        application_name: get("application_name"),
        options: get("options"),
        connect_timeout,
    })
}

/// The password for `host`/`port`/`dbname`/`user` in a `.pgpass` file's
/// text (libpq's format: `host:port:db:user:password`, `*` matches
/// anything, `\:` and `\\` escaped; a socket host matches `localhost`).
pub fn pgpass_lookup(
    text: &str,
    host: &Host,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    let host_name = match host {
        Host::Socket(_) => "localhost".to_string(),
        Host::Tcp { name, .. } => name.clone(),
    };
    let port = port.to_string();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() != 5 {
            continue;
        }
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        if matches(&fields[0], &host_name)
            && matches(&fields[1], &port)
            && matches(&fields[2], dbname)
            && matches(&fields[3], user)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn key_values_with_quotes_and_escapes() {
        let pairs =
            parse_key_values(r"host=/tmp  port = 5433 password='a b\'c' options=-c\ x=1").unwrap();
        assert_eq!(
            pairs,
            vec![
                ("host".into(), "/tmp".into()),
                ("port".into(), "5433".into()),
                ("password".into(), "a b'c".into()),
                ("options".into(), "-c x=1".into()),
            ]
        );
        assert!(parse_key_values("host").is_err());
        assert!(parse_key_values("password='x").is_err());
        assert_eq!(parse_key_values("  ").unwrap(), vec![]);
    }

    #[test]
    fn uri_with_hosts_ports_and_parameters() {
        let pairs =
            parse_uri("postgresql://us%40r:p%3Ass@h1:5433,[::1]:5434/my%20db?sslmode=require&application_name=x")
                .unwrap();
        assert_eq!(
            pairs,
            vec![
                ("user".into(), "us@r".into()),
                ("password".into(), "p:ss".into()),
                ("host".into(), "h1,::1".into()),
                ("port".into(), "5433,5434".into()),
                ("dbname".into(), "my db".into()),
                ("sslmode".into(), "require".into()),
                ("application_name".into(), "x".into()),
            ]
        );
        assert_eq!(parse_uri("postgres://").unwrap(), vec![]);
        let sock = resolve("postgresql:///db?host=/run/pg&user=u", &|_| None, None).unwrap();
        assert_eq!(sock.hosts, vec![(Host::Socket("/run/pg".into()), 5432)]);
        assert_eq!(sock.dbname, "db");
    }

    #[test]
    fn environment_fills_what_the_string_does_not_say() {
        let env = env_of(&[
            ("PGHOST", "/sock"),
            ("PGPORT", "6000"),
            ("PGUSER", "alice"),
            ("PGPASSWORD", "secret"),
            ("PGSSLMODE", "disable"),
        ]);
        let ci = resolve("dbname=shop", &env, None).unwrap();
        assert_eq!(ci.hosts, vec![(Host::Socket("/sock".into()), 6000)]);
        assert_eq!(ci.user, "alice");
        assert_eq!(ci.dbname, "shop");
        assert_eq!(ci.password.as_deref(), Some("secret"));
        assert_eq!(ci.sslmode, SslMode::Disable);
        // The string wins over the environment.
        let ci = resolve(
            "host=db.example port=5432 user=bob sslmode=verify-full",
            &env,
            None,
        )
        .unwrap();
        assert_eq!(
            ci.hosts,
            vec![(
                Host::Tcp {
                    connect: "db.example".into(),
                    name: "db.example".into()
                },
                5432
            )]
        );
        assert_eq!(ci.user, "bob");
        assert_eq!(ci.dbname, "bob");
        assert_eq!(ci.sslmode, SslMode::VerifyFull);
        // No password in debug output.
        assert!(!format!("{:?}", resolve("", &env, None).unwrap()).contains("secret"));
    }

    #[test]
    fn defaults_and_errors() {
        let env = env_of(&[("USER", "root")]);
        let ci = resolve("", &env, None).unwrap();
        assert_eq!(
            ci.hosts,
            vec![(Host::Socket("/var/run/postgresql".into()), 5432)]
        );
        assert_eq!((ci.user.as_str(), ci.dbname.as_str()), ("root", "root"));
        assert_eq!(ci.sslmode, SslMode::Prefer);
        assert!(resolve("", &|_| None, None)
            .unwrap_err()
            .0
            .contains("no user name"));
        assert!(resolve("sslmode=sometimes", &env, None)
            .unwrap_err()
            .0
            .contains("sslmode"));
        assert!(resolve("port=0", &env, None)
            .unwrap_err()
            .0
            .contains("port"));
        assert!(resolve("bogus=1", &env, None)
            .unwrap_err()
            .0
            .contains("\"bogus\""));
        assert!(resolve("channel_binding=require", &env, None).is_err());
        let ci = resolve("host=a,b port=1,2 hostaddr=127.0.0.1,127.0.0.2", &env, None).unwrap();
        assert_eq!(
            ci.hosts[1],
            (
                Host::Tcp {
                    connect: "127.0.0.2".into(),
                    name: "b".into()
                },
                2
            )
        );
        assert!(resolve("host=a,b port=1,2,3", &env, None).is_err());
        assert_eq!(
            resolve("connect_timeout=1", &env, None)
                .unwrap()
                .connect_timeout,
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            resolve("connect_timeout=0", &env, None)
                .unwrap()
                .connect_timeout,
            None
        );
    }

    #[test]
    fn pgpass_matching() {
        let text = "# comment\nother:*:*:*:no\nlocalhost:5432:db:u:sock\\:pw\n*:*:*:u:any\n";
        let sock = Host::Socket("/tmp".into());
        assert_eq!(
            pgpass_lookup(text, &sock, 5432, "db", "u").as_deref(),
            Some("sock:pw")
        );
        let tcp = Host::Tcp {
            connect: "10.0.0.1".into(),
            name: "h".into(),
        };
        assert_eq!(
            pgpass_lookup(text, &tcp, 5432, "db", "u").as_deref(),
            Some("any")
        );
        assert_eq!(pgpass_lookup(text, &tcp, 5432, "db", "v"), None);
    }
}
