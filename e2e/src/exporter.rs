//! Debian's Prometheus PostgreSQL exporter (`prometheus-postgres-exporter`)
//! run against a test server with pubjson's query file
//! (`monitoring/pubjson-exporter-queries.yaml`), and its `/metrics`
//! endpoint scraped over the loopback interface, as Prometheus would.

use crate::env::scratch_dir;
use crate::server::Server;
use crate::wait::retry;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where Debian's package installs the exporter.
const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";

/// The repository's root (the e2e crate's parent directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// The query file the exporter loads.
pub fn query_file() -> PathBuf {
    repo_root().join("monitoring/pubjson-exporter-queries.yaml")
}

/// A running exporter; killed when dropped.
pub struct Exporter {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Exporter {
    /// Starts the exporter on a free loopback port, connecting to `dbname`
    /// on `server` as `user` (over the server's Unix socket), with the
    /// query file and `extra_args` (e.g. `--auto-discover-databases`).
    /// `server_major` 17 and later also get `--no-collector.bgwriter`:
    /// Debian 12's exporter (0.11) reads pg_stat_bgwriter columns that 17
    /// moved to pg_stat_checkpointer, and that collector's error would hide
    /// nothing of pubjson's but fill the log.
    pub fn start(
        server: &Server,
        user: &str,
        dbname: &str,
        server_major: u32,
        extra_args: &[&str],
        name: &str,
    ) -> Exporter {
        assert!(
            Path::new(EXPORTER).exists(),
            "{EXPORTER} is missing: scripts/install-deps.sh installs Debian's \
             prometheus-postgres-exporter package"
        );
        let port = free_port();
        let log = scratch_dir(&format!("exporter-{name}")).join("exporter.log");
        let log_file = std::fs::File::create(&log).expect("exporter log");
        let mut cmd = Command::new(EXPORTER);
        cmd.env(
            "DATA_SOURCE_NAME",
            format!(
                "host={} port={} user={user} dbname={dbname} sslmode=disable",
                server.host, server.port
            ),
        )
        .arg(format!("--extend.query-path={}", query_file().display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file);
        if server_major >= 17 {
            cmd.arg("--no-collector.bgwriter");
        }
        let child = cmd.spawn().expect("start prometheus-postgres-exporter");
        Exporter { child, port, log }
    }

    /// The exporter's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The scrape `m` reached the server (`pg_up` is 1) and no query of it
    /// failed (`pg_exporter_last_scrape_error` is 0; the log says which).
    pub fn assert_up(&self, m: &Metrics) {
        assert_eq!(m.value("pg_up", &[]), 1.0);
        assert_eq!(
            m.value("pg_exporter_last_scrape_error", &[]),
            0.0,
            "{}",
            self.log_text()
        );
    }

    /// Fetches `/metrics` (retrying while the exporter starts up) and
    /// parses it.
    pub fn scrape(&mut self) -> Metrics {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let body = retry(Duration::from_secs(30), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the exporter exited ({status}): {}", self.log_text());
            }
            ureq::get(&url)
                .timeout(Duration::from_secs(30))
                .call()
                .map_err(|e| e.to_string())?
                .into_string()
                .map_err(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("GET {url}: {e}\n{}", self.log_text()));
        Metrics::parse(&body)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One scrape: the exposition text and its samples.
pub struct Metrics {
    pub text: String,
    pub scrape: prometheus_parse::Scrape,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("exposition format");
        Metrics {
            text: text.to_string(),
            scrape,
        }
    }

    /// The samples of `metric` whose labels include every pair of `labels`.
    pub fn find(&self, metric: &str, labels: &[(&str, &str)]) -> Vec<&prometheus_parse::Sample> {
        self.scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .collect()
    }

    /// The value of the one sample of `metric` with `labels`; panics when
    /// there is none or more than one.
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.find(metric, labels);
        assert!(
            found.len() == 1,
            "{} samples of {metric}{labels:?}; the pubjson lines scraped:\n{}",
            found.len(),
            self.lines("pubjson_")
        );
        sample_value(found[0])
    }

    /// The `# TYPE` of `metric` as the exposition declares it.
    pub fn declared_type(&self, metric: &str) -> Option<&str> {
        let prefix = format!("# TYPE {metric} ");
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
    }

    /// The metric lines starting with `prefix`, for failure messages.
    pub fn lines(&self, prefix: &str) -> String {
        self.text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Checks the type and help text of every metric named `prefix...`:
    /// counters end in `_total`, the rest are gauges. Returns how many
    /// metrics there were.
    pub fn assert_types(&self, prefix: &str) -> usize {
        let mut names: Vec<&str> = self
            .scrape
            .samples
            .iter()
            .map(|s| s.metric.as_str())
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        names.dedup();
        for name in &names {
            let expected = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            assert_eq!(self.declared_type(name), Some(expected), "{name}");
            assert!(
                self.scrape.docs.get(*name).is_some_and(|h| !h.is_empty()),
                "{name} has no HELP"
            );
        }
        names.len()
    }

    /// Checks the scrape that page `doc` quotes in the block after
    /// `<!-- exporter-scrape: {test} -->`: every quoted line must match a
    /// sample of this scrape by metric and labels, leaving out `server`
    /// (pages omit it: it names the test's socket) and the values of `pid`
    /// and `xid` (they differ from run to run). Values are not compared.
    pub fn check_quoted(&self, doc: &str, test: &str) {
        let text = std::fs::read_to_string(repo_root().join(doc)).expect(doc);
        let marker = format!("<!-- exporter-scrape: {test} -->");
        let Some((_, after)) = text.split_once(&marker) else {
            panic!("{doc} has no {marker}");
        };
        let block = after
            .split_once("```text\n")
            .and_then(|(_, b)| b.split_once("```"))
            .map(|(b, _)| b)
            .unwrap_or_else(|| panic!("{doc}: no text block after {marker}"));
        let quoted = Metrics::parse(block);
        assert!(!quoted.scrape.samples.is_empty(), "{doc}: empty block");
        let varying = ["pid", "xid"];
        for q in &quoted.scrape.samples {
            let mut quoted_keys: Vec<&String> = q.labels.keys().collect();
            quoted_keys.sort();
            let matches = self.find(&q.metric, &[]).into_iter().any(|s| {
                let mut keys: Vec<&String> = s.labels.keys().filter(|k| *k != "server").collect();
                keys.sort();
                keys == quoted_keys
                    && q.labels
                        .iter()
                        .all(|(k, v)| varying.contains(&k.as_str()) || s.labels.get(k) == Some(v))
            });
            assert!(
                matches,
                "{doc} quotes {} {:?}, not in the scrape:\n{}",
                q.metric,
                q.labels,
                self.lines("pubjson_")
            );
        }
    }
}

/// A sample's value, whatever its type.
pub fn sample_value(s: &prometheus_parse::Sample) -> f64 {
    use prometheus_parse::Value;
    match &s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{}: not a single value: {other:?}", s.metric),
    }
}
