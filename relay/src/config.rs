//! The relay's settings: a TOML file, then environment variables, then
//! command-line flags, each overriding the one before (clap reads the
//! flags and their `PUBJSON_RELAY_*` variables). The merge and the checks
//! are pure; every setting is described in docs/relay.md.

use crate::format::FormatKind;
use crate::route::{Naming, Routes, Template};
use clap::Parser;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn cerr(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// The command line (each flag also read from its variable).
#[derive(Parser, Debug, Default)]
#[command(
    name = "pubjson-relay",
    version,
    about = "Relays a pubjson replication slot into NATS JetStream or Kafka, confirming to PostgreSQL only what the broker has acknowledged",
    after_help = "Settings: docs/relay.md. Connection: a libpq connection string or URI, completed from PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ... as psql does."
)]
pub struct Flags {
    /// TOML configuration file.
    #[arg(long, short = 'c', env = "PUBJSON_RELAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// libpq connection string or URI of the database whose slot is read.
    #[arg(long, short = 'd', env = "PUBJSON_RELAY_SOURCE")]
    pub source: Option<String>,
    /// The replication slot (created with pubjson when --create-slot).
    #[arg(long, short = 'S', env = "PUBJSON_RELAY_SLOT")]
    pub slot: Option<String>,
    /// Create the slot when it does not exist.
    #[arg(long, env = "PUBJSON_RELAY_CREATE_SLOT")]
    pub create_slot: Option<Option<bool>>,
    /// The plugin's output format the relay reads: 3 or debezium.
    #[arg(long, env = "PUBJSON_RELAY_FORMAT")]
    pub format: Option<String>,
    /// A plugin option, NAME=VALUE (NAME alone: true); repeatable.
    #[arg(long = "option", short = 'o', value_name = "NAME=VALUE")]
    pub options: Vec<String>,
    /// nats or kafka.
    #[arg(long, env = "PUBJSON_RELAY_BROKER")]
    pub broker: Option<String>,
    /// NATS server URL(s), comma-separated.
    #[arg(long, env = "PUBJSON_RELAY_NATS_URL")]
    pub nats_url: Option<String>,
    /// The JetStream stream.
    #[arg(long, env = "PUBJSON_RELAY_NATS_STREAM")]
    pub nats_stream: Option<String>,
    /// NATS credentials file (.creds).
    #[arg(long, env = "PUBJSON_RELAY_NATS_CREDENTIALS")]
    pub nats_credentials: Option<PathBuf>,
    /// Kafka bootstrap servers, comma-separated.
    #[arg(long, env = "PUBJSON_RELAY_KAFKA_BROKERS")]
    pub kafka_brokers: Option<String>,
    /// A librdkafka property, NAME=VALUE; repeatable.
    #[arg(long = "kafka-property", value_name = "NAME=VALUE")]
    pub kafka_properties: Vec<String>,
    /// Subject/topic template of row changes.
    #[arg(long, env = "PUBJSON_RELAY_TOPIC")]
    pub topic: Option<String>,
    /// Subject/topic of transaction events (B, C, P, CP, RP, A).
    #[arg(long, env = "PUBJSON_RELAY_TRANSACTION_TOPIC")]
    pub transaction_topic: Option<String>,
    /// Subject/topic of logical decoding messages.
    #[arg(long, env = "PUBJSON_RELAY_MESSAGE_TOPIC")]
    pub message_topic: Option<String>,
    /// Subject/topic of DDL events.
    #[arg(long, env = "PUBJSON_RELAY_DDL_TOPIC")]
    pub ddl_topic: Option<String>,
    /// Subject/topic of relation descriptions (R).
    #[arg(long, env = "PUBJSON_RELAY_RELATION_TOPIC")]
    pub relation_topic: Option<String>,
    /// Address of the metrics and health endpoint (host:port).
    #[arg(long, env = "PUBJSON_RELAY_LISTEN")]
    pub listen: Option<String>,
    /// This relay's name in message ids and headers (default: the slot).
    #[arg(long, env = "PUBJSON_RELAY_ID")]
    pub relay_id: Option<String>,
    /// Check the configuration and exit.
    #[arg(long)]
    pub check: bool,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub source: SourceFile,
    #[serde(default)]
    pub broker: BrokerFile,
    #[serde(default)]
    pub nats: NatsFile,
    #[serde(default)]
    pub kafka: KafkaFile,
    #[serde(default)]
    pub topics: TopicsFile,
    #[serde(default)]
    pub relay: RelayFile,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    pub conninfo: Option<String>,
    pub slot: Option<String>,
    pub create_slot: Option<bool>,
    pub two_phase: Option<bool>,
    pub format: Option<String>,
    #[serde(default)]
    pub options: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct BrokerFile {
    pub kind: Option<String>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct NatsFile {
    pub url: Option<String>,
    pub stream: Option<String>,
    pub create_stream: Option<bool>,
    pub duplicate_window: Option<String>,
    pub ack_timeout: Option<String>,
    pub credentials: Option<PathBuf>,
    pub recovery_scan: Option<u64>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct KafkaFile {
    pub brokers: Option<String>,
    pub delivery_timeout: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct TopicsFile {
    pub table: Option<String>,
    pub transactions: Option<String>,
    pub messages: Option<String>,
    pub ddl: Option<String>,
    pub relations: Option<String>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct RelayFile {
    pub id: Option<String>,
    pub listen: Option<String>,
    pub max_in_flight: Option<usize>,
    pub status_interval: Option<String>,
    pub drain_timeout: Option<String>,
    pub reconnect_min: Option<String>,
    pub reconnect_max: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerKind {
    Nats,
    Kafka,
}

#[derive(Debug, Clone)]
pub struct NatsSettings {
    pub url: String,
    pub stream: String,
    pub create_stream: bool,
    pub duplicate_window: Duration,
    pub ack_timeout: Duration,
    pub credentials: Option<PathBuf>,
    pub recovery_scan: u64,
}

#[derive(Clone)]
pub struct KafkaSettings {
    pub brokers: String,
    pub delivery_timeout: Duration,
    pub properties: BTreeMap<String, String>,
}

// Properties may hold passwords (sasl.password): never printed.
impl fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("delivery_timeout", &self.delivery_timeout)
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A connection string, which may hold a password: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// The checked settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub conninfo: Secret,
    pub slot: String,
    pub create_slot: bool,
    pub two_phase: bool,
    pub format: FormatKind,
    pub options: Vec<(String, String)>,
    pub broker: BrokerKind,
    pub nats: Option<NatsSettings>,
    pub kafka: Option<KafkaSettings>,
    pub routes: Routes,
    pub relay_id: String,
    pub listen: Option<SocketAddr>,
    pub max_in_flight: usize,
    pub status_interval: Duration,
    pub drain_timeout: Duration,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
}

fn duration(
    name: &str,
    value: Option<&String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => humantime::parse_duration(v).map_err(|e| {
            cerr(format!(
                "{name}: invalid duration \"{v}\" ({e}); write e.g. \"500ms\", \"30s\", \"2h\""
            ))
        }),
    }
}

fn value_text(name: &str, v: &toml::Value) -> Result<String, ConfigError> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Float(f) => f.to_string(),
        _ => {
            return Err(cerr(format!(
                "{name}: a string, number or boolean is expected"
            )))
        }
    })
}

fn pair(flag: &str, text: &str, default_true: bool) -> Result<(String, String), ConfigError> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        None if default_true && !text.is_empty() => Ok((text.to_string(), "true".to_string())),
        _ => Err(cerr(format!("{flag}: expected NAME=VALUE, got \"{text}\""))),
    }
}

/// Slot names as PostgreSQL allows them.
fn check_slot(slot: &str) -> Result<(), ConfigError> {
    if slot.is_empty()
        || slot.len() > 63
        || !slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(cerr(format!(
            "slot name \"{slot}\" is invalid: replication slot names may only contain lower case letters, numbers and the underscore character (at most 63)"
        )));
    }
    Ok(())
}

/// Merges the file's text (if any) and the flags into checked settings.
pub fn settings(file_text: Option<&str>, flags: &Flags) -> Result<Settings, ConfigError> {
    let file: File = match file_text {
        Some(t) => toml::from_str(t).map_err(|e| cerr(format!("configuration file: {e}")))?,
        None => File::default(),
    };
    let slot = flags
        .slot
        .clone()
        .or(file.source.slot)
        .ok_or_else(|| cerr("no slot: set --slot, PUBJSON_RELAY_SLOT or [source] slot"))?;
    check_slot(&slot)?;
    let broker_text = flags.broker.clone().or(file.broker.kind).ok_or_else(|| {
        cerr("no broker: set --broker, PUBJSON_RELAY_BROKER or [broker] kind to nats or kafka")
    })?;
    let broker = match broker_text.as_str() {
        "nats" | "jetstream" => BrokerKind::Nats,
        "kafka" => BrokerKind::Kafka,
        other => {
            return Err(cerr(format!(
                "unknown broker \"{other}\": the relay writes to nats (JetStream) or kafka"
            )))
        }
    };
    let mut options = Vec::new();
    for (k, v) in &file.source.options {
        options.push((k.clone(), value_text(&format!("[source.options] {k}"), v)?));
    }
    for o in &flags.options {
        let (k, v) = pair("--option", o, true)?;
        options.retain(|(name, _)| *name != k);
        options.push((k, v));
    }
    // The format: the setting, else the one format-version names, else 3.
    let format_text = flags.format.clone().or(file.source.format);
    let format = match &format_text {
        Some(text) => FormatKind::parse(text).ok_or_else(|| {
            cerr(format!(
                "unknown format \"{text}\": the relay reads format 3 or debezium"
            ))
        })?,
        None => options
            .iter()
            .rev()
            .find(|(k, _)| k == "format-version")
            .and_then(|(_, v)| FormatKind::parse(v))
            .unwrap_or(FormatKind::V3),
    };
    if format == FormatKind::Debezium {
        // Debezium names its own topics; pubjson delivers its events at
        // commit only.
        let topics = [
            (
                "--topic / [topics] table",
                flags.topic.is_some() || file.topics.table.is_some(),
            ),
            (
                "--transaction-topic / [topics] transactions",
                flags.transaction_topic.is_some() || file.topics.transactions.is_some(),
            ),
            (
                "--message-topic / [topics] messages",
                flags.message_topic.is_some() || file.topics.messages.is_some(),
            ),
            (
                "--ddl-topic / [topics] ddl",
                flags.ddl_topic.is_some() || file.topics.ddl.is_some(),
            ),
            (
                "--relation-topic / [topics] relations",
                flags.relation_topic.is_some() || file.topics.relations.is_some(),
            ),
        ];
        if let Some((name, _)) = topics.iter().find(|(_, set)| *set) {
            return Err(cerr(format!(
                "{name} does not apply to the Debezium format: each record names its topic (<topic.prefix>.<schema>.<table>, <topic.prefix>.transaction, <topic.prefix>.message)"
            )));
        }
        if file.source.two_phase == Some(true) {
            return Err(cerr(
                "[source] two_phase does not apply to the Debezium format: pubjson delivers every transaction at its commit (Debezium's events cannot take a change back)",
            ));
        }
    }
    let naming = match broker {
        BrokerKind::Nats => Naming::Nats,
        BrokerKind::Kafka => Naming::Kafka,
    };
    let t = |text: Option<String>, table_level: bool| -> Result<Option<Template>, ConfigError> {
        text.filter(|s| !s.is_empty())
            .map(|s| Template::parse(&s, naming, table_level).map_err(|e| cerr(e.0)))
            .transpose()
    };
    let table = t(
        Some(
            flags
                .topic
                .clone()
                .or(file.topics.table)
                .unwrap_or_else(|| "pubjson.{database}.{schema}.{table}".to_string()),
        ),
        true,
    )?
    .ok_or_else(|| cerr("the table topic template may not be empty"))?;
    let routes = Routes {
        table,
        transactions: t(
            flags.transaction_topic.clone().or(file.topics.transactions),
            false,
        )?,
        messages: t(flags.message_topic.clone().or(file.topics.messages), false)?,
        ddl: t(flags.ddl_topic.clone().or(file.topics.ddl), false)?,
        relations: t(
            flags.relation_topic.clone().or(file.topics.relations),
            false,
        )?,
    };
    let nats = match broker {
        BrokerKind::Nats => {
            let stream = flags
                .nats_stream
                .clone()
                .or(file.nats.stream)
                .unwrap_or_else(|| "PUBJSON".into());
            if stream.is_empty()
                || !stream
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(cerr(format!(
                    "NATS stream name \"{stream}\" is invalid (letters, digits, '_' and '-')"
                )));
            }
            Some(NatsSettings {
                url: flags
                    .nats_url
                    .clone()
                    .or(file.nats.url)
                    .unwrap_or_else(|| "nats://127.0.0.1:4222".into()),
                stream,
                create_stream: file.nats.create_stream.unwrap_or(true),
                duplicate_window: duration(
                    "[nats] duplicate_window",
                    file.nats.duplicate_window.as_ref(),
                    Duration::from_secs(2 * 3600),
                )?,
                ack_timeout: duration(
                    "[nats] ack_timeout",
                    file.nats.ack_timeout.as_ref(),
                    Duration::from_secs(30),
                )?,
                credentials: flags.nats_credentials.clone().or(file.nats.credentials),
                recovery_scan: file.nats.recovery_scan.unwrap_or(100_000),
            })
        }
        BrokerKind::Kafka => None,
    };
    let kafka = match broker {
        BrokerKind::Kafka => {
            let mut properties = BTreeMap::new();
            for (k, v) in &file.kafka.properties {
                properties.insert(
                    k.clone(),
                    value_text(&format!("[kafka.properties] {k}"), v)?,
                );
            }
            for p in &flags.kafka_properties {
                let (k, v) = pair("--kafka-property", p, false)?;
                properties.insert(k, v);
            }
            for fixed in ["enable.idempotence", "acks", "bootstrap.servers"] {
                if properties.contains_key(fixed) {
                    return Err(cerr(format!(
                        "Kafka property {fixed} is set by the relay (the idempotent producer with acks=all; brokers through [kafka] brokers)"
                    )));
                }
            }
            Some(KafkaSettings {
                brokers: flags
                    .kafka_brokers
                    .clone()
                    .or(file.kafka.brokers)
                    .unwrap_or_else(|| "127.0.0.1:9092".into()),
                delivery_timeout: duration(
                    "[kafka] delivery_timeout",
                    file.kafka.delivery_timeout.as_ref(),
                    Duration::from_secs(120),
                )?,
                properties,
            })
        }
        BrokerKind::Nats => None,
    };
    let listen = flags
        .listen
        .clone()
        .or(file.relay.listen)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>()
                .map_err(|_| cerr(format!("listen: \"{s}\" is not an address:port")))
        })
        .transpose()?;
    let relay_id = flags
        .relay_id
        .clone()
        .or(file.relay.id)
        .unwrap_or_else(|| slot.clone());
    if relay_id.is_empty()
        || !relay_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
    {
        return Err(cerr(format!(
            "relay id \"{relay_id}\" is invalid (letters, digits, '_' and '-')"
        )));
    }
    let max_in_flight = file.relay.max_in_flight.unwrap_or(10_000);
    if max_in_flight == 0 {
        return Err(cerr("[relay] max_in_flight must be at least 1"));
    }
    let reconnect_min = duration(
        "[relay] reconnect_min",
        file.relay.reconnect_min.as_ref(),
        Duration::from_millis(100),
    )?;
    let reconnect_max = duration(
        "[relay] reconnect_max",
        file.relay.reconnect_max.as_ref(),
        Duration::from_secs(30),
    )?;
    if reconnect_min > reconnect_max {
        return Err(cerr("[relay] reconnect_min is larger than reconnect_max"));
    }
    let create_slot = match flags.create_slot {
        Some(Some(b)) => b,
        Some(None) => true,
        None => file.source.create_slot.unwrap_or(false),
    };
    Ok(Settings {
        conninfo: Secret(
            flags
                .source
                .clone()
                .or(file.source.conninfo)
                .unwrap_or_default(),
        ),
        slot,
        create_slot,
        two_phase: file.source.two_phase.unwrap_or(false),
        format,
        options,
        broker,
        nats,
        kafka,
        routes,
        relay_id,
        listen,
        max_in_flight,
        status_interval: duration(
            "[relay] status_interval",
            file.relay.status_interval.as_ref(),
            Duration::from_secs(1),
        )?,
        drain_timeout: duration(
            "[relay] drain_timeout",
            file.relay.drain_timeout.as_ref(),
            Duration::from_secs(30),
        )?,
        reconnect_min,
        reconnect_max,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["pubjson-relay"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).unwrap()
    }

    #[test]
    fn file_then_flags() {
        let file = r#"
[source]
conninfo = "host=/tmp dbname=shop"
slot = "from_file"
[source.options]
publication_names = "p1"
streaming = true
[broker]
kind = "kafka"
[kafka]
brokers = "k:9092"
[kafka.properties]
"linger.ms" = 10
[topics]
table = "cdc.{schema}.{table}"
transactions = "cdc.tx"
[relay]
max_in_flight = 5
drain_timeout = "5s"
"#;
        let s = settings(
            Some(file),
            &flags(&[
                "--slot",
                "from_flag",
                "-o",
                "publication_names=p2",
                "-o",
                "two_phase",
            ]),
        )
        .unwrap();
        assert_eq!(s.slot, "from_flag");
        assert_eq!(s.relay_id, "from_flag");
        assert_eq!(s.conninfo.0, "host=/tmp dbname=shop");
        assert_eq!(
            s.options,
            vec![
                ("streaming".into(), "true".into()),
                ("publication_names".into(), "p2".into()),
                ("two_phase".into(), "true".into())
            ]
        );
        assert_eq!(s.broker, BrokerKind::Kafka);
        let k = s.kafka.unwrap();
        assert_eq!(k.brokers, "k:9092");
        assert_eq!(k.properties["linger.ms"], "10");
        assert_eq!(s.routes.table.source(), "cdc.{schema}.{table}");
        assert!(s.routes.transactions.is_some() && s.routes.messages.is_none());
        assert_eq!(s.max_in_flight, 5);
        assert_eq!(s.drain_timeout, Duration::from_secs(5));
    }

    #[test]
    fn clear_errors() {
        let e = |file: Option<&str>, args: &[&str]| settings(file, &flags(args)).unwrap_err().0;
        assert!(e(None, &["--broker", "nats"]).contains("no slot"));
        assert!(e(None, &["--slot", "s"]).contains("no broker"));
        assert!(e(None, &["--slot", "s", "--broker", "rabbitmq"])
            .contains("unknown broker \"rabbitmq\""));
        assert!(e(None, &["--slot", "Bad-Slot", "--broker", "nats"]).contains("slot name"));
        assert!(e(Some("[source]\nslott = 1"), &[]).contains("unknown field"));
        assert!(e(
            None,
            &["--slot", "s", "--broker", "nats", "--topic", "a.{x}"]
        )
        .contains("unknown placeholder"));
        assert!(e(
            Some("[relay]\ndrain_timeout = \"soon\""),
            &["--slot", "s", "--broker", "nats"]
        )
        .contains("invalid duration"));
        assert!(e(
            None,
            &[
                "--slot",
                "s",
                "--broker",
                "kafka",
                "--kafka-property",
                "acks=1"
            ]
        )
        .contains("acks"));
        assert!(e(
            None,
            &["--slot", "s", "--broker", "nats", "--listen", "nowhere"]
        )
        .contains("listen"));
        assert!(e(
            None,
            &["--slot", "s", "--broker", "nats", "--nats-stream", "a.b"]
        )
        .contains("stream name"));
    }

    #[test]
    fn defaults() {
        let s = settings(
            None,
            &flags(&["--slot", "s", "--broker", "nats", "--create-slot"]),
        )
        .unwrap();
        assert!(s.create_slot);
        let n = s.nats.unwrap();
        assert_eq!(
            (n.url.as_str(), n.stream.as_str()),
            ("nats://127.0.0.1:4222", "PUBJSON")
        );
        assert_eq!(
            s.routes.table.source(),
            "pubjson.{database}.{schema}.{table}"
        );
        assert_eq!(s.listen, None);
        assert_eq!(s.status_interval, Duration::from_secs(1));
        let s = settings(
            None,
            &flags(&["--slot", "s", "--broker", "nats", "--create-slot=false"]),
        )
        .unwrap();
        assert!(!s.create_slot);
    }

    #[test]
    fn the_format_from_its_setting_or_format_version() {
        let base = ["--slot", "s", "--broker", "kafka"];
        let with = |extra: &[&str]| {
            let mut a = base.to_vec();
            a.extend_from_slice(extra);
            settings(None, &flags(&a))
        };
        assert_eq!(with(&[]).unwrap().format, FormatKind::V3);
        assert_eq!(
            with(&["--format", "debezium"]).unwrap().format,
            FormatKind::Debezium
        );
        assert_eq!(
            with(&["-o", "format-version=debezium"]).unwrap().format,
            FormatKind::Debezium
        );
        assert_eq!(
            settings(Some("[source]\nformat = \"Debezium\""), &flags(&base))
                .unwrap()
                .format,
            FormatKind::Debezium
        );
        assert!(with(&["--format", "2"])
            .unwrap_err()
            .0
            .contains("unknown format \"2\""));
        assert!(with(&["--format", "debezium", "--topic", "x.{table}"])
            .unwrap_err()
            .0
            .contains("does not apply to the Debezium format"));
        assert!(settings(
            Some("[source]\ntwo_phase = true\nformat = \"debezium\""),
            &flags(&base)
        )
        .unwrap_err()
        .0
        .contains("two_phase"));
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let s = settings(
            None,
            &flags(&[
                "--slot",
                "s",
                "--broker",
                "kafka",
                "--kafka-property",
                "sasl.password=hunter2",
                "-d",
                "password=hunter2",
            ]),
        )
        .unwrap();
        assert!(!format!("{:?}", s).contains("hunter2"));
    }
}
