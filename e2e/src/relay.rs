//! pubjson-relay as the suites run it (a process with a configuration
//! file, its metrics and health endpoint), the brokers read back with real
//! consumers (async-nats, rdkafka), and a replica of the source tables
//! built from what the broker holds: format 3's objects, or the Debezium
//! format's values (`before`/`after`), each with its consumer's rule for
//! Kafka's duplicates.
//!
//! The relay binary is the one cargo built beside the test binaries
//! (`cargo build -p pubjson-relay --profile e2e`, which scripts/test.sh
//! runs), or `$PUBJSON_RELAY_BIN`.

use crate::brokers::free_port;
use crate::server::Server;
use crate::wait::{poll, wait_for};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The relay's executable.
pub fn relay_bin() -> PathBuf {
    if let Ok(p) = std::env::var("PUBJSON_RELAY_BIN") {
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    // target/<profile>/deps/<test> -> target/<profile>/pubjson-relay
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("pubjson-relay"))
        .expect("target directory");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p pubjson-relay --profile e2e` (scripts/test.sh does), or set PUBJSON_RELAY_BIN",
        bin.display()
    );
    bin
}

/// `conninfo` for a database of `server` (Unix socket, as postgres).
pub fn conninfo(server: &Server, db: &str) -> String {
    format!(
        "host={} port={} user=postgres dbname={db} sslmode=disable",
        server.host, server.port
    )
}

/// A running relay, killed on drop.
pub struct RelayProcess {
    child: Option<Child>,
    pub log: PathBuf,
    pub port: u16,
    config: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl RelayProcess {
    /// Starts the relay with `config` (TOML text, written to `dir`),
    /// `args` and the environment `env`; its endpoint on a free port.
    pub fn start(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> RelayProcess {
        std::fs::create_dir_all(dir).expect("relay directory");
        let path = dir.join("relay.toml");
        std::fs::write(&path, config).expect("write relay.toml");
        let mut r = RelayProcess {
            child: None,
            log: dir.join("relay.log"),
            port: 0,
            config: path,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        self.port = free_port();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("relay log");
        let err = out.try_clone().expect("relay log");
        let mut cmd = Command::new(relay_bin());
        cmd.arg("--config")
            .arg(&self.config)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(&self.args)
            .env("PUBJSON_RELAY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Nothing of the shared cluster's environment: the configuration
        // says where to connect.
        for var in [
            "PGHOST",
            "PGPORT",
            "PGUSER",
            "PGDATABASE",
            "PGPASSWORD",
            "PGSSLMODE",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("start pubjson-relay"));
    }

    /// Starts it again (same configuration) after it exited or was killed.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` on the endpoint: (status, body); None when it does not
    /// answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        match ureq::get(&url).timeout(Duration::from_secs(5)).call() {
            Ok(r) => {
                let status = r.status();
                Some((status, r.into_string().unwrap_or_default()))
            }
            Err(ureq::Error::Status(code, r)) => Some((code, r.into_string().unwrap_or_default())),
            Err(_) => None,
        }
    }

    /// Waits until `/health` says ok.
    pub fn wait_healthy(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((200, _)) = self.get("/health") {
                return;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "the relay exited ({status}) before it was healthy:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the relay was not healthy within {timeout:?}: {:?}\n{}",
                self.get("/health"),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of metric `name` (summed over its label sets).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics")?;
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).ok()?;
        let values: Vec<f64> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for the relay to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let status = poll("the relay to exit", timeout, || self.try_exit());
        self.child = None;
        status
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        self.wait_exit(timeout)
    }

    /// SIGTERM, then asserts that the relay drained and exited cleanly
    /// (its log in the failure): the end of every test that ran it.
    pub fn stop(&mut self) {
        let status = self.terminate(Duration::from_secs(60));
        assert!(
            status.success(),
            "the relay exited with {status}:\n{}",
            self.log_text()
        );
    }

    /// SIGKILL: no chance to drain or confirm.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Runs the relay to its exit (for configurations it must refuse):
/// status and output.
pub fn run_relay(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> (Option<i32>, String) {
    let mut cmd = Command::new(relay_bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in ["PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start pubjson-relay");
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return (status.code(), text);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the relay did not exit within {timeout:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One record read back from a broker.
#[derive(Debug, Clone)]
pub struct Record {
    /// Subject (NATS) or topic (Kafka).
    pub dest: String,
    pub partition: i32,
    /// Kafka's record key; NATS's `Pubjson-Key` header.
    pub key: Option<String>,
    /// The relay's `Pubjson-Event` header.
    pub event: Option<String>,
    pub relay: Option<String>,
    /// The `Pubjson-Xid` header.
    pub xid: Option<String>,
    /// No value: Kafka's null, NATS's empty message with
    /// `Pubjson-Tombstone` (the Debezium format's tombstone).
    pub tombstone: bool,
    /// The payload's JSON (null for a tombstone).
    pub object: Value,
    /// The payload as it came.
    pub raw: Vec<u8>,
}

impl Record {
    /// The `(commit LSN, index)` of a committed event's identity.
    pub fn position(&self) -> Option<(u64, u32)> {
        let (lsn, index) = self.event.as_deref()?.split_once(':')?;
        Some((crate::lsn(lsn), index.parse().ok()?))
    }

    pub fn action(&self) -> &str {
        self.object["action"].as_str().unwrap_or("")
    }

    /// The Debezium format's value without Kafka Connect's schema (its
    /// `payload` when `schemas.enable` is on); null for a tombstone.
    pub fn envelope(&self) -> &Value {
        match (&self.object["schema"], &self.object["payload"]) {
            (Value::Object(_), payload @ Value::Object(_)) => payload,
            _ => &self.object,
        }
    }

    /// The Debezium format's `op` (`c`, `u`, ...), or `BEGIN`/`END` of a
    /// transaction record; "" for a tombstone.
    pub fn op(&self) -> &str {
        let e = self.envelope();
        e["op"].as_str().or(e["status"].as_str()).unwrap_or("")
    }
}

/// A broker message's payload as a record's JSON: empty is a tombstone.
fn payload_json(where_: &str, payload: &[u8]) -> Value {
    if payload.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(payload).unwrap_or_else(|e| {
        panic!(
            "message on {where_} is not JSON ({e}): {}",
            String::from_utf8_lossy(payload)
        )
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Creates JetStream stream `stream` at `url` storing `subjects` (file
/// storage).
pub fn create_jetstream_stream(url: &str, stream: &str, subjects: &[&str]) {
    runtime().block_on(async {
        let client = async_nats::connect(url).await.expect("connect to NATS");
        let js = async_nats::jetstream::new(client);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: stream.to_string(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("create the stream");
    })
}

/// Every message of JetStream stream `stream` at `url`, in stream order.
pub fn read_jetstream(url: &str, stream: &str) -> Vec<Record> {
    use futures_util::StreamExt;
    runtime().block_on(async {
        let client = async_nats::connect(url).await.expect("connect to NATS");
        let js = async_nats::jetstream::new(client);
        let mut s = js.get_stream(stream).await.expect("the stream");
        let info = s.info().await.expect("stream info").clone();
        let mut out = Vec::new();
        if info.state.messages == 0 {
            return out;
        }
        let consumer = s
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .expect("ordered consumer");
        let mut messages = consumer.messages().await.expect("messages");
        while (out.len() as u64) < info.state.messages {
            let m = tokio::time::timeout(Duration::from_secs(30), messages.next())
                .await
                .expect("JetStream delivered nothing for 30 s")
                .expect("stream ended")
                .expect("message");
            let header = |name: &str| {
                m.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
            };
            out.push(Record {
                dest: m.subject.to_string(),
                partition: 0,
                key: header("Pubjson-Key"),
                event: header("Pubjson-Event"),
                relay: header("Pubjson-Relay"),
                xid: header("Pubjson-Xid"),
                tombstone: header("Pubjson-Tombstone").as_deref() == Some("true"),
                object: payload_json(m.subject.as_str(), &m.payload),
                raw: m.payload.to_vec(),
            });
            let _ = m.ack().await;
        }
        out
    })
}

/// Every record of the topics whose names start with `prefix`, read
/// partition by partition from the beginning (by assignment: a consumer
/// group would take long to join on tansu); each partition in order.
pub fn read_kafka(bootstrap: &str, prefix: &str) -> Vec<Record> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "pubjson-e2e-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("Kafka consumer");
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(30))
        .expect("Kafka metadata");
    // Every partition assigned at once, read until each reaches the high
    // watermark it had when reading started; records bucketed by the
    // partition they say they come from.
    let mut tpl = TopicPartitionList::new();
    let mut remaining: HashMap<(String, i32), i64> = HashMap::new();
    let mut spans: HashMap<(String, i32), (i64, i64)> = HashMap::new();
    for topic in md.topics().iter().filter(|t| t.name().starts_with(prefix)) {
        for p in topic.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(topic.name(), p.id(), Duration::from_secs(30))
                .expect("watermarks");
            if high > low {
                tpl.add_partition_offset(topic.name(), p.id(), Offset::Offset(low))
                    .expect("partition");
                remaining.insert((topic.name().to_string(), p.id()), high);
                spans.insert((topic.name().to_string(), p.id()), (low, high));
            }
        }
    }
    let mut by_partition: BTreeMap<(String, i32), Vec<Record>> = BTreeMap::new();
    if remaining.is_empty() {
        return Vec::new();
    }
    consumer.assign(&tpl).expect("assign");
    // Until every partition reached its high watermark, then until nothing
    // came for 2 s: tansu's high watermark can trail the records it holds.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut quiet_since = Instant::now();
    while !remaining.is_empty() || quiet_since.elapsed() < Duration::from_secs(2) {
        assert!(
            Instant::now() < deadline,
            "reading Kafka stalled: still to read {remaining:?}"
        );
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("Kafka message");
        quiet_since = Instant::now();
        let part = (m.topic().to_string(), m.partition());
        if let Some(high) = remaining.get(&part).copied() {
            if m.offset() + 1 >= high {
                remaining.remove(&part);
            }
        }
        let mut event = None;
        let mut relay = None;
        let mut xid = None;
        if let Some(h) = m.headers() {
            for i in 0..h.count() {
                let header = h.get(i);
                let value = header
                    .value
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                match header.key {
                    "pubjson-event" => event = value,
                    "pubjson-relay" => relay = value,
                    "pubjson-xid" => xid = value,
                    _ => {}
                }
            }
        }
        let raw = m.payload().map(<[u8]>::to_vec);
        by_partition.entry(part.clone()).or_default().push(Record {
            key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
            event,
            relay,
            xid,
            tombstone: raw.is_none(),
            object: payload_json(&part.0, raw.as_deref().unwrap_or_default()),
            raw: raw.unwrap_or_default(),
            dest: part.0,
            partition: part.1,
        });
    }
    for ((topic, partition), records) in &by_partition {
        let offsets = spans
            .get(&(topic.clone(), *partition))
            .copied()
            .unwrap_or((0, 0));
        if (records.len() as i64) < offsets.1 - offsets.0 {
            eprintln!(
                "Kafka {topic} [{partition}]: offsets {} to {} hold {} records",
                offsets.0,
                offsets.1,
                records.len()
            );
        }
    }
    let out: Vec<Record> = by_partition.into_values().flatten().collect();
    out
}

/// Kafka's at-least-once duplicates, removed by the documented rule: in
/// each partition, among one relay's records, a record whose
/// `(lsn, index)` is not after the last one kept is a duplicate. Returns the records kept and the number
/// dropped; panics if a dropped record is not a copy of one kept (the rule
/// would then lose data).
pub fn drop_kafka_duplicates(records: Vec<Record>) -> (Vec<Record>, usize) {
    let mut last: HashMap<(String, i32, Option<String>), (u64, u32)> = HashMap::new();
    let mut seen: HashMap<(String, i32, Option<String>, String), Value> = HashMap::new();
    let mut kept = Vec::new();
    let mut dropped = 0;
    for r in records {
        let pos = r
            .position()
            .unwrap_or_else(|| panic!("record without an event position: {r:?}"));
        let part = (r.dest.clone(), r.partition, r.relay.clone());
        let event = r.event.clone().unwrap_or_default();
        if last.get(&part).is_some_and(|l| pos <= *l) {
            let earlier = seen.get(&(part.0.clone(), part.1, part.2.clone(), event.clone()));
            assert_eq!(
                earlier,
                Some(&r.object),
                "a record the rule drops was not sent before: {r:?}"
            );
            dropped += 1;
            continue;
        }
        last.insert(part.clone(), pos);
        seen.insert((part.0, part.1, part.2, event), r.object.clone());
        kept.push(r);
    }
    (kept, dropped)
}

/// The Debezium format's Kafka duplicates, removed by its rule (its
/// identities are in change order, so two transactions' events
/// interleave): in each partition, per relay and transaction
/// (`pubjson-xid`; records without it, messages outside transactions, are
/// one group), a record whose `(lsn, index)` is not after the last one kept
/// is a duplicate. Returns the records kept and the number dropped; panics
/// if a dropped record is not a copy of one kept (but for what says when
/// it was written, [`debezium_copy`]).
pub fn drop_kafka_duplicates_by_transaction(records: Vec<Record>) -> (Vec<Record>, usize) {
    type Group = (String, i32, Option<String>, Option<String>);
    let mut last: HashMap<Group, (u64, u32)> = HashMap::new();
    let mut seen: HashMap<(String, i32, Option<String>, String), Value> = HashMap::new();
    let mut kept = Vec::new();
    let mut dropped = 0;
    for r in records {
        let pos = r
            .position()
            .unwrap_or_else(|| panic!("record without an event position: {r:?}"));
        let group = (r.dest.clone(), r.partition, r.relay.clone(), r.xid.clone());
        let event = r.event.clone().unwrap_or_default();
        let copy = (r.dest.clone(), r.partition, r.relay.clone(), event);
        if last.get(&group).is_some_and(|l| pos <= *l) {
            assert_eq!(
                seen.get(&copy),
                Some(&debezium_copy(&r)),
                "a record the rule drops was not sent before: {r:?}"
            );
            dropped += 1;
            continue;
        }
        last.insert(group, pos);
        seen.insert(copy, debezium_copy(&r));
        kept.push(r);
    }
    (kept, dropped)
}

/// A Debezium format record's value as a copy sent again has it: without
/// the event's own `ts_ms`/`ts_us`/`ts_ns` (when it was written) and
/// `source.sequence` (whose last commit a new session does not know).
pub fn debezium_copy(r: &Record) -> Value {
    let mut v = r.envelope().clone();
    if let Some(o) = v.as_object_mut() {
        if o.contains_key("source") {
            for k in ["ts_ms", "ts_us", "ts_ns"] {
                o.remove(k);
            }
        }
        if let Some(source) = o.get_mut("source").and_then(Value::as_object_mut) {
            source.remove("sequence");
        }
    }
    v
}

/// Checks that no two records have the same identity (per relay and
/// partition: a truncate goes to every partition): exactly once.
pub fn assert_no_duplicates(records: &[Record]) {
    let mut seen: HashMap<(Option<String>, i32, String), &Record> = HashMap::new();
    for r in records {
        if let Some(e) = &r.event {
            if let Some(first) = seen.insert((r.relay.clone(), r.partition, e.clone()), r) {
                panic!("event {e} stored twice:\n{first:?}\n{r:?}");
            }
        }
    }
}

/// A table's rows keyed by their primary key's JSON text.
pub type Rows = BTreeMap<String, Value>;

/// The replica: schema.table -> rows.
pub type Replica = BTreeMap<String, Rows>;

/// The replica built from `records` as a consumer of the broker would:
/// rows keyed by the columns `key_of(table)` names; a transaction's
/// changes applied at its `C` (or `CP` of its `P`) when the transaction
/// events are among the records, else at once (everything the relay
/// publishes without them committed: two-phase off). Each record is
/// applied in the order given; per key that is the broker's order.
pub fn build_replica(records: &[Record], key_of: &dyn Fn(&str) -> Vec<String>) -> Replica {
    let with_transactions = records.iter().any(|r| matches!(r.action(), "C" | "B"));
    let mut replica = Replica::new();
    let mut groups: HashMap<u64, Vec<&Record>> = HashMap::new();
    let mut prepared: HashMap<String, Vec<&Record>> = HashMap::new();
    for r in records {
        match r.action() {
            "I" | "U" | "D" | "T" | "F" if with_transactions => {
                let (lsn, _) = r.position().expect("event position");
                groups.entry(lsn).or_default().push(r);
            }
            "I" | "U" | "D" | "T" | "F" => apply(&mut replica, r, key_of),
            "C" => {
                let (lsn, _) = r.position().expect("event position");
                for c in groups.remove(&lsn).unwrap_or_default() {
                    apply(&mut replica, c, key_of);
                }
            }
            "P" => {
                let (lsn, _) = r.position().expect("event position");
                let gid = r.object["gid"].as_str().expect("gid").to_string();
                prepared.insert(gid, groups.remove(&lsn).unwrap_or_default());
            }
            "CP" => {
                let gid = r.object["gid"].as_str().expect("gid");
                for c in prepared.remove(gid).unwrap_or_default() {
                    apply(&mut replica, c, key_of);
                }
            }
            "RP" => {
                let gid = r.object["gid"].as_str().expect("gid");
                prepared.remove(gid);
            }
            _ => {}
        }
    }
    replica
}

fn table_of(o: &Value) -> String {
    format!(
        "{}.{}",
        o["schema"].as_str().unwrap_or(""),
        o["table"].as_str().unwrap_or("")
    )
}

fn key_text(row: &Value, cols: &[String]) -> String {
    let key: Vec<&Value> = cols.iter().map(|c| &row[c.as_str()]).collect();
    serde_json::to_string(&key).expect("key")
}

fn apply(replica: &mut Replica, r: &Record, key_of: &dyn Fn(&str) -> Vec<String>) {
    let o = &r.object;
    let table = table_of(o);
    let cols = key_of(&table);
    let rows = replica.entry(table).or_default();
    match r.action() {
        "I" | "F" => {
            rows.insert(key_text(&o["new"], &cols), o["new"].clone());
        }
        "U" => {
            let new = &o["new"];
            let old_key = key_text(if o["old"].is_object() { &o["old"] } else { new }, &cols);
            let mut row = rows.remove(&old_key).unwrap_or(Value::Null);
            if !row.is_object() {
                row = Value::Object(Default::default());
            }
            if let (Some(stored), Some(fields)) = (row.as_object_mut(), new.as_object()) {
                for (k, v) in fields {
                    stored.insert(k.clone(), v.clone());
                }
            }
            rows.insert(key_text(new, &cols), row);
        }
        "D" => {
            rows.remove(&key_text(&o["old"], &cols));
        }
        "T" => rows.clear(),
        _ => {}
    }
}

/// The Debezium format's placeholder of an unchanged TOAST value.
pub const UNAVAILABLE: &str = "__debezium_unavailable_value";

/// The replica built from the Debezium format's records (without
/// Kafka Connect's schemas): inserts and backfilled rows (`c`, `r`) put
/// `after`, updates (`u`) merge it (a value left unchanged, the
/// placeholder, keeps the one stored), deletes (`d`) remove `before`'s
/// key, truncates (`t`) empty the table; tombstones and messages change
/// nothing. With transaction records (`END`) among them, each
/// transaction's events are applied at its `END`, in the order of the
/// `END`s' commit positions (records read from several Kafka partitions);
/// without, in the order given (a JetStream stream's, commit order).
pub fn build_debezium_replica(records: &[Record], key_of: &dyn Fn(&str) -> Vec<String>) -> Replica {
    let mut replica = Replica::new();
    let ends: Vec<&Record> = records.iter().filter(|r| r.op() == "END").collect();
    if ends.is_empty() {
        for r in records {
            apply_debezium(&mut replica, r, key_of);
        }
        return replica;
    }
    let mut by_xid: HashMap<&str, Vec<&Record>> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| !matches!(r.op(), "BEGIN" | "END"))
    {
        if let Some(xid) = r.xid.as_deref() {
            by_xid.entry(xid).or_default().push(r);
        }
    }
    let mut order: Vec<(u64, &str)> = ends
        .iter()
        .map(|r| {
            let id = r.envelope()["id"].as_str().expect("END's id");
            let (xid, lsn) = id.split_once(':').expect("XID:LSN");
            (lsn.parse().expect("END's LSN"), xid)
        })
        .collect();
    order.sort();
    order.dedup();
    for (_, xid) in order {
        let mut events = by_xid.remove(xid).unwrap_or_default();
        events.sort_by_key(|r| r.position());
        for r in events {
            apply_debezium(&mut replica, r, key_of);
        }
    }
    replica
}

fn apply_debezium(replica: &mut Replica, r: &Record, key_of: &dyn Fn(&str) -> Vec<String>) {
    let e = r.envelope();
    let op = r.op();
    if !matches!(op, "c" | "r" | "u" | "d" | "t") {
        return;
    }
    let table = format!(
        "{}.{}",
        e["source"]["schema"].as_str().unwrap_or(""),
        e["source"]["table"].as_str().unwrap_or("")
    );
    let cols = key_of(&table);
    let rows = replica.entry(table).or_default();
    match op {
        "c" | "r" => {
            rows.insert(key_text(&e["after"], &cols), e["after"].clone());
        }
        "u" => {
            let after = &e["after"];
            let key = key_text(after, &cols);
            let mut row = rows.remove(&key).unwrap_or(Value::Null);
            if !row.is_object() {
                row = Value::Object(Default::default());
            }
            if let (Some(stored), Some(fields)) = (row.as_object_mut(), after.as_object()) {
                for (k, v) in fields {
                    if v.as_str() != Some(UNAVAILABLE) {
                        stored.insert(k.clone(), v.clone());
                    }
                }
            }
            rows.insert(key, row);
        }
        "d" => {
            rows.remove(&key_text(&e["before"], &cols));
        }
        _ => rows.clear(),
    }
}

/// The table's rows as format 3 writes them (`to_jsonb` of each row gives
/// the same JSON for the types the workloads use), keyed like the replica.
pub fn source_rows(client: &mut postgres::Client, table: &str, key: &[&str]) -> Rows {
    let rows = client
        .query(&format!("SELECT to_jsonb(t)::text FROM {table} t"), &[])
        .unwrap_or_else(|e| panic!("read {table}: {e}"));
    let cols: Vec<String> = key.iter().map(|s| s.to_string()).collect();
    rows.iter()
        .map(|r| {
            let v: Value = serde_json::from_str(r.get::<_, &str>(0)).expect("row JSON");
            (key_text(&v, &cols), v)
        })
        .collect()
}

/// Waits until slot `slot` has confirmed the server's current WAL position
/// (everything written before this call is in the broker).
pub fn wait_caught_up(client: &mut postgres::Client, slot: &str, timeout: Duration) {
    let target: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .expect("current WAL position")
        .get(0);
    wait_for(&format!("slot {slot} to confirm {target}"), timeout, || {
        client
            .query_one(
                "SELECT coalesce(confirmed_flush_lsn >= $1::text::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2",
                &[&target, &slot],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
    });
}

/// The relay suites' table: `CREATE TABLE {name} (id int PRIMARY KEY,
/// grp int, v text, big text)` with `big` stored out of line (TOAST), so
/// that updates that leave it alone send it as `unchanged`.
pub fn create_workload_table(client: &mut postgres::Client, name: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE {name} (id int PRIMARY KEY, grp int, v text, big text);
             ALTER TABLE {name} ALTER big SET STORAGE EXTERNAL;"
        ))
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// A workload of [`run_workload`].
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    pub db: &'a str,
    pub table: &'a str,
    pub seed: u64,
    /// Rows of a large transaction.
    pub large: u32,
    pub two_phase: bool,
    pub truncates: bool,
}

/// What a workload did, for the failure messages.
#[derive(Debug, Default, Clone)]
pub struct WorkloadStats {
    pub transactions: u64,
    pub failed: u64,
    pub large: u64,
    pub prepared: u64,
}

/// A seeded workload on `table` of `db`: small transactions of inserts,
/// updates (some of the TOASTed column) and deletes, large ones (`large`
/// rows, streamed when the slot streams), rolled-back ones, savepoints
/// rolled back, two-phase ones (`two_phase`: committed or rolled back
/// prepared) and, with `truncates`, a rare TRUNCATE; at most about 200
/// transactions a second, so that a run's WAL stays small. Runs until `stop`
/// (surviving server restarts: a failed transaction is counted and the
/// next one goes on), then commits any prepared transaction a crash left
/// and inserts ten rows, so that the table is never empty at the end.
pub fn run_workload(
    server: &Server,
    w: &Workload,
    stop: &std::sync::atomic::AtomicBool,
) -> WorkloadStats {
    use std::sync::atomic::Ordering;
    let Workload {
        db,
        table,
        seed,
        large,
        two_phase,
        truncates,
    } = *w;
    let mut rng = crate::SeededRng::new(seed);
    let mut client = None;
    let mut stats = WorkloadStats::default();
    let mut next_id: i32 = 1;
    let mut gid = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = server.writer_client(&mut client, db, || {}) else {
            continue;
        };
        let kind = rng.below(100);
        let mut sql = String::from("BEGIN;");
        let mut end = "COMMIT;".to_string();
        let mut then: Option<String> = None;
        let ops = |rng: &mut crate::SeededRng, sql: &mut String, next_id: &mut i32, n: u64| {
            for _ in 0..n {
                match rng.below(10) {
                    0..=4 => {
                        sql.push_str(&format!(
                            "INSERT INTO {table} VALUES ({}, {}, 'v{}', repeat('b', {}));",
                            *next_id,
                            rng.below(4),
                            rng.below(1000),
                            if rng.chance(10) { 5000 } else { 10 }
                        ));
                        *next_id += 1;
                    }
                    5..=6 => sql.push_str(&format!(
                        "UPDATE {table} SET v = 'u{}' WHERE id = {};",
                        rng.below(1000),
                        1 + rng.below(*next_id as u64)
                    )),
                    7 => sql.push_str(&format!(
                        "UPDATE {table} SET big = repeat('c', {}) WHERE id = {};",
                        3000 + rng.below(3000),
                        1 + rng.below(*next_id as u64)
                    )),
                    _ => sql.push_str(&format!(
                        "DELETE FROM {table} WHERE id = {};",
                        1 + rng.below(*next_id as u64)
                    )),
                }
            }
        };
        match kind {
            0..=69 => {
                let n = 1 + rng.below(5);
                ops(&mut rng, &mut sql, &mut next_id, n);
            }
            70..=71 => {
                sql.push_str(&format!(
                    "INSERT INTO {table} SELECT g, g % 4, 'l' || g, 'x' FROM generate_series({}, {}) g;",
                    next_id,
                    next_id + large as i32 - 1
                ));
                next_id += large as i32;
                stats.large += 1;
            }
            75..=81 => {
                let n = 1 + rng.below(5);
                ops(&mut rng, &mut sql, &mut next_id, n);
                end = "ROLLBACK;".into();
            }
            82..=89 => {
                ops(&mut rng, &mut sql, &mut next_id, 1);
                sql.push_str("SAVEPOINT s;");
                ops(&mut rng, &mut sql, &mut next_id, 2);
                sql.push_str("ROLLBACK TO SAVEPOINT s;");
                ops(&mut rng, &mut sql, &mut next_id, 1);
            }
            90..=97 if two_phase => {
                let n = 1 + rng.below(4);
                ops(&mut rng, &mut sql, &mut next_id, n);
                gid += 1;
                let g = format!("relay-{seed}-{gid}");
                end = format!("PREPARE TRANSACTION '{g}';");
                then = Some(if rng.chance(75) {
                    format!("COMMIT PREPARED '{g}'")
                } else {
                    format!("ROLLBACK PREPARED '{g}'")
                });
                stats.prepared += 1;
            }
            98..=99 if truncates => sql.push_str(&format!("TRUNCATE {table};")),
            _ => ops(&mut rng, &mut sql, &mut next_id, 1),
        }
        sql.push_str(&end);
        let result = c.batch_execute(&sql).and_then(|_| match &then {
            Some(t) => c.batch_execute(t),
            None => Ok(()),
        });
        match result {
            Ok(()) => {
                stats.transactions += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => {
                stats.failed += 1;
                let _ = c.batch_execute("ROLLBACK");
            }
        }
    }
    // Prepared transactions a crash left between PREPARE and COMMIT.
    let mut c = server.connect_retrying(db, Duration::from_secs(120));
    let gids: Vec<String> = c
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()",
            &[],
        )
        .expect("prepared transactions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for g in gids {
        c.batch_execute(&format!("COMMIT PREPARED '{g}'"))
            .expect("commit prepared");
    }
    // Rows to compare at the end, whatever a late TRUNCATE left.
    c.batch_execute(&format!(
        "INSERT INTO {table} SELECT g, g % 4, 'end' || g, 'e' FROM generate_series({next_id}, {}) g ON CONFLICT DO NOTHING",
        next_id + 9
    ))
    .expect("last rows");
    stats
}

/// The seed of a randomized relay test: `$PUBJSON_RELAY_SEED`, else from
/// the clock (printed, so that a failure can be run again).
pub fn seed() -> u64 {
    let seed = std::env::var("PUBJSON_RELAY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("relay workload seed: PUBJSON_RELAY_SEED={seed}");
    seed
}
