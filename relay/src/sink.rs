//! The brokers: NATS JetStream (async-nats) and Kafka (rdkafka, the
//! idempotent producer with `acks=all`). Publishing an event gives a
//! future that resolves when the broker has acknowledged it (JetStream's
//! PubAck, Kafka's delivery report).

use crate::config::{KafkaSettings, NatsSettings};
use crate::format::{lsn_text, parse_lsn, Event};
use crate::metrics::Metrics;
use async_nats::jetstream::{self, context::PublishErrorKind, stream::StorageType};
use async_nats::HeaderMap;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

#[derive(Debug)]
pub struct SinkError {
    pub message: String,
    /// Retrying cannot help (a setting must change).
    pub permanent: bool,
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SinkError {}

fn transient(message: String) -> SinkError {
    SinkError {
        message,
        permanent: false,
    }
}

fn permanent(message: String) -> SinkError {
    SinkError {
        message,
        permanent: true,
    }
}

/// What an acknowledgement said.
#[derive(Debug, Clone, Copy, Default)]
pub struct Acked {
    /// The broker had the event already (JetStream's de-duplication).
    pub duplicate: bool,
}

pub type AckFuture = Pin<Box<dyn Future<Output = Result<Acked, SinkError>> + Send>>;

pub enum Sink {
    Nats(Box<NatsSink>),
    Kafka(KafkaSink),
}

impl Sink {
    pub async fn publish(
        &self,
        dest: &str,
        ev: &Event,
        relay_id: &str,
    ) -> Result<AckFuture, SinkError> {
        match self {
            Sink::Nats(s) => s.publish(dest, ev, relay_id).await,
            Sink::Kafka(s) => s.publish(dest, ev, relay_id).await,
        }
    }

    /// The connection was lost: the sink must be replaced (NATS: the
    /// client does not reconnect by itself, see [`NatsSink::connect`]).
    pub fn is_broken(&self) -> bool {
        match self {
            Sink::Nats(s) => s.broken.load(Ordering::Relaxed),
            Sink::Kafka(_) => false,
        }
    }

    /// Lets go of everything unsent (Kafka: purges librdkafka's queues, so
    /// that dropping the producer does not wait for them).
    pub fn abandon(&self) {
        if let Sink::Kafka(k) = self {
            k.producer.purge(PurgeConfig::default().queue().inflight());
        }
    }
}

/// The identity headers of an event: `Pubjson-Relay` and `Pubjson-Event`
/// (its [`crate::format::EventId::text`]); JetStream's `Nats-Msg-Id` is both.
fn id_text(ev: &Event) -> Option<String> {
    ev.id.text()
}

// ---------------------------------------------------------------- NATS

pub struct NatsSink {
    js: jetstream::Context,
    broken: Arc<AtomicBool>,
    stream: String,
    settings: NatsSettings,
    /// What an acknowledgement that found no stream asks about (see
    /// [`missing_stream`]): shared, so that a publish clones one `Arc`.
    stream_check: Arc<(jetstream::Context, String)>,
}

/// The stream's subjects for the templates' destinations: each template's
/// tokens up to the first placeholder, then `>`.
pub fn stream_subjects(templates: &[&str]) -> Result<Vec<String>, SinkError> {
    let mut out: Vec<String> = Vec::new();
    for t in templates {
        let fixed: Vec<&str> = t.split('.').take_while(|tok| !tok.contains('{')).collect();
        let subject = if fixed.len() == t.split('.').count() {
            t.to_string()
        } else if fixed.is_empty() {
            return Err(permanent(format!(
                "subject template \"{t}\" starts with a placeholder: create the JetStream stream yourself (with subjects covering it) and set [nats] create_stream = false"
            )));
        } else {
            format!("{}.>", fixed.join("."))
        };
        if !out.contains(&subject) {
            out.push(subject);
        }
    }
    // A subject covered by another's `prefix.>` is left out.
    let all = out.clone();
    out.retain(|s| {
        !all.iter()
            .any(|o| o != s && o.ends_with(".>") && s.starts_with(&o[..o.len() - 1]))
    });
    Ok(out)
}

impl NatsSink {
    pub async fn connect(
        settings: &NatsSettings,
        subjects: Vec<String>,
        max_in_flight: usize,
        relay_id: &str,
        metrics: Arc<Metrics>,
    ) -> Result<NatsSink, SinkError> {
        let broken = Arc::new(AtomicBool::new(false));
        let flag = broken.clone();
        // The client never reconnects by itself: after a reconnect it
        // would send what it had buffered, possibly after events the
        // server lost with the old connection, and a key's events could
        // be stored out of order. The relay replaces the client instead
        // and sends again, in order, from its confirmed position.
        let mut opts = async_nats::ConnectOptions::new()
            .name(format!("pubjson-relay {relay_id}"))
            .connection_timeout(Duration::from_secs(5))
            .reconnect_delay_callback({
                // Called before each attempt: the first is the initial
                // connection, every later one a reconnect.
                let calls = AtomicUsize::new(0);
                move |_| {
                    if calls.fetch_add(1, Ordering::Relaxed) == 0 {
                        Duration::ZERO
                    } else {
                        Duration::from_secs(24 * 3600)
                    }
                }
            })
            .event_callback(move |event| {
                let m = metrics.clone();
                let flag = flag.clone();
                async move {
                    if let async_nats::Event::Disconnected = event {
                        flag.store(true, Ordering::Relaxed);
                        m.set_broker_ok(false);
                    }
                }
            });
        if let Some(creds) = &settings.credentials {
            opts = opts.credentials_file(creds).await.map_err(|e| {
                permanent(format!(
                    "NATS credentials file \"{}\": {e}",
                    creds.display()
                ))
            })?;
        }
        let client = opts
            .connect(settings.url.as_str())
            .await
            .map_err(|e| transient(format!("cannot connect to NATS at {}: {e}", settings.url)))?;
        let js = jetstream::context::ContextBuilder::new()
            .timeout(settings.ack_timeout)
            .ack_timeout(settings.ack_timeout)
            // A publish waits for a permit beyond this many unacknowledged
            // messages; the relay takes acknowledgements meanwhile (one
            // replication message may hold many more events than
            // max_in_flight, which bounds messages read ahead).
            .max_ack_inflight(max_in_flight + 1024)
            .build(client);
        let not_found = |e: &jetstream::context::GetStreamError| {
            matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
        };
        match js.get_stream(&settings.stream).await {
            Ok(_) => {}
            Err(e) if not_found(&e) && settings.create_stream => {
                let config = jetstream::stream::Config {
                    name: settings.stream.clone(),
                    subjects: subjects.clone(),
                    storage: StorageType::File,
                    duplicate_window: settings.duplicate_window,
                    allow_direct: true,
                    ..Default::default()
                };
                js.create_stream(config).await.map_err(|e| {
                    transient(format!("cannot create JetStream stream {} for {subjects:?}: {e}", settings.stream))
                })?;
                log::info!("created JetStream stream {} for subjects {subjects:?}", settings.stream);
            }
            Err(e) if not_found(&e) => {
                return Err(permanent(format!(
                    "JetStream stream {} does not exist ({e}); create it or set [nats] create_stream = true",
                    settings.stream
                )))
            }
            Err(e) => return Err(transient(format!("JetStream at {}: {e}", settings.url))),
        }
        Ok(NatsSink {
            stream_check: Arc::new((js.clone(), settings.stream.clone())),
            js,
            broken,
            stream: settings.stream.clone(),
            settings: settings.clone(),
        })
    }

    async fn publish(
        &self,
        subject: &str,
        ev: &Event,
        relay_id: &str,
    ) -> Result<AckFuture, SinkError> {
        let mut headers = HeaderMap::new();
        headers.insert("Pubjson-Relay", relay_id);
        if let Some(id) = id_text(ev) {
            headers.insert("Nats-Msg-Id", format!("{relay_id}:{id}").as_str());
            headers.insert("Pubjson-Event", id.as_str());
        }
        if let Some(xid) = ev.xid {
            headers.insert("Pubjson-Xid", xid.to_string().as_str());
        }
        // A record key (the Debezium format's) and a null value: NATS has
        // neither, so headers carry them.
        if let Some(key) = &ev.key {
            headers.insert("Pubjson-Key", String::from_utf8_lossy(key).as_ref());
        }
        if ev.tombstone {
            headers.insert("Pubjson-Tombstone", "true");
        }
        if let Some(after) = ev.after {
            headers.insert("Pubjson-After", lsn_text(after).as_str());
        }
        let publish = jetstream::message::PublishMessage::build()
            .payload(ev.payload.clone())
            .headers(headers);
        let ack = self
            .js
            .send_publish(subject.to_string(), publish)
            .await
            .map_err(|e| nats_publish_error(subject, e))?;
        let subject = subject.to_string();
        let check = self.stream_check.clone();
        Ok(Box::pin(async move {
            match ack.await {
                Ok(a) => Ok(Acked {
                    duplicate: a.duplicate,
                }),
                Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                    let (js, stream) = &*check;
                    // Boxed: inline, its state would size every
                    // acknowledgement's future (30% more CPU per event).
                    Err(Box::pin(missing_stream(js, stream, &subject)).await)
                }
                Err(e) => Err(nats_publish_error(&subject, e)),
            }
        }))
    }

    /// The last event this relay stored in the stream: read backwards
    /// from the stream's end, over at most `recovery_scan` messages (other
    /// relays' included).
    pub async fn last_stored(&self, relay_id: &str) -> Result<Option<Stored>, SinkError> {
        let mut stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| transient(format!("JetStream stream {}: {e}", self.stream)))?;
        let info = stream
            .info()
            .await
            .map_err(|e| transient(format!("JetStream stream {}: {e}", self.stream)))?
            .clone();
        let (first, last) = (info.state.first_sequence, info.state.last_sequence);
        if last == 0 {
            return Ok(None);
        }
        let mut seq = last;
        let mut scanned = 0;
        while seq >= first.max(1) && scanned < self.settings.recovery_scan {
            scanned += 1;
            let got = if info.config.allow_direct {
                stream.direct_get(seq).await.map_err(|e| e.to_string())
            } else {
                stream.get_raw_message(seq).await.map_err(|e| e.to_string())
            };
            match got {
                Ok(m) => {
                    let mine = m.headers.get("Pubjson-Relay").map(|v| v.as_str()) == Some(relay_id);
                    let event = m
                        .headers
                        .get("Pubjson-Event")
                        .and_then(|v| parse_position(v.as_str()));
                    if let (true, Some(event)) = (mine, event) {
                        let stored = SystemTime::UNIX_EPOCH
                            + Duration::from_nanos(m.time.unix_timestamp_nanos().max(0) as u64);
                        let after = m
                            .headers
                            .get("Pubjson-After")
                            .and_then(|v| parse_lsn(v.as_str()));
                        return Ok(Some(Stored {
                            event,
                            after,
                            stored,
                        }));
                    }
                }
                // A deleted message: go on.
                Err(e) if e.contains("not found") || e.contains("no message") => {}
                Err(e) => {
                    return Err(transient(format!(
                        "reading JetStream stream {}: {e}",
                        self.stream
                    )))
                }
            }
            seq -= 1;
        }
        Ok(None)
    }

    pub fn duplicate_window(&self) -> Duration {
        self.settings.duplicate_window
    }
}

/// The last event of a relay in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Its `Pubjson-Event`: `(lsn, index)`, read as the relay's format
    /// numbers events ([`crate::format::EventId::Committed`] or
    /// [`crate::format::EventId::AtLsn`]).
    pub event: (u64, u32),
    /// Its `Pubjson-After` ([`crate::format::EventId::AtLsn`] events).
    pub after: Option<u64>,
    /// When the stream stored it.
    pub stored: SystemTime,
}

/// `X/Y:i` back to `(lsn, index)`.
pub fn parse_position(text: &str) -> Option<(u64, u32)> {
    let (lsn, index) = text.split_once(':')?;
    Some((parse_lsn(lsn)?, index.parse().ok()?))
}

/// No stream answered a publish to `subject`: a configuration error if
/// the relay's stream does not cover it (or is gone), a transient one if
/// it does (a restarted server answers before JetStream has loaded its
/// streams).
async fn missing_stream(js: &jetstream::Context, stream: &str, subject: &str) -> SinkError {
    let subjects = match js.get_stream(stream).await {
        Ok(mut s) => match s.info().await {
            Ok(info) => info.config.subjects.clone(),
            Err(e) => return transient(format!("JetStream stream {stream}: {e}")),
        },
        Err(e) => return transient(format!("JetStream stream {stream}: {e}")),
    };
    if subjects
        .iter()
        .any(|pattern| subject_matches(pattern, subject))
    {
        transient(format!(
            "JetStream did not store {subject} yet (its stream {stream} is loading)"
        ))
    } else {
        permanent(format!(
            "JetStream stream {stream} does not store subject {subject} (its subjects: {subjects:?}): the stream's subjects must cover every subject the relay writes"
        ))
    }
}

/// NATS subject matching: `*` is one token, a final `>` one or more.
fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for p in pattern.split('.') {
        match (p, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (p, Some(t)) if p == t => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

fn nats_publish_error(subject: &str, e: jetstream::context::PublishError) -> SinkError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => permanent(format!(
            "no JetStream stream stores subject {subject}: the stream's subjects must cover every subject the relay writes"
        )),
        PublishErrorKind::MaxPayloadExceeded => permanent(format!(
            "an event for {subject} is larger than the NATS server's max_payload: raise it"
        )),
        _ => transient(format!("JetStream publish to {subject}: {e}")),
    }
}

// --------------------------------------------------------------- Kafka

pub struct KafkaSink {
    producer: FutureProducer,
    timeout: Duration,
    partitions: Mutex<HashMap<String, i32>>,
}

impl KafkaSink {
    pub async fn connect(
        settings: &KafkaSettings,
        max_in_flight: usize,
        relay_id: &str,
    ) -> Result<KafkaSink, SinkError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &settings.brokers)
            .set("client.id", format!("pubjson-relay-{relay_id}"))
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "message.timeout.ms",
                settings.delivery_timeout.as_millis().to_string(),
            )
            .set("linger.ms", "5")
            .set(
                "queue.buffering.max.messages",
                (max_in_flight * 2).max(100_000).to_string(),
            )
            .set("queue.buffering.max.kbytes", "1048576");
        for (k, v) in &settings.properties {
            config.set(k, v);
        }
        let producer: FutureProducer = config
            .create()
            .map_err(|e| permanent(format!("Kafka producer configuration: {e}")))?;
        // Reach a broker before streaming: a wrong address is reported now.
        let client_producer = producer.clone();
        let brokers = settings.brokers.clone();
        tokio::task::spawn_blocking(move || {
            client_producer
                .client()
                .fetch_metadata(None, Duration::from_secs(10))
        })
        .await
        .map_err(|e| transient(format!("Kafka metadata: {e}")))?
        .map_err(|e| transient(format!("cannot reach Kafka at {brokers}: {e}")))?;
        Ok(KafkaSink {
            producer,
            timeout: settings.delivery_timeout,
            partitions: Mutex::new(HashMap::new()),
        })
    }

    async fn partition_count(&self, topic: &str) -> Result<i32, SinkError> {
        if let Some(n) = self
            .partitions
            .lock()
            .ok()
            .and_then(|p| p.get(topic).copied())
        {
            return Ok(n);
        }
        for _ in 0..50 {
            let producer = self.producer.clone();
            let t = topic.to_string();
            let md = tokio::task::spawn_blocking(move || {
                producer
                    .client()
                    .fetch_metadata(Some(&t), Duration::from_secs(10))
            })
            .await
            .map_err(|e| transient(format!("Kafka metadata: {e}")))?
            .map_err(|e| transient(format!("Kafka metadata of {topic}: {e}")))?;
            let n = md
                .topics()
                .first()
                .map(|t| t.partitions().len() as i32)
                .unwrap_or(0);
            if n > 0 {
                if let Ok(mut p) = self.partitions.lock() {
                    p.insert(topic.to_string(), n);
                }
                return Ok(n);
            }
            // Being created (auto-creation): ask again.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(transient(format!("Kafka topic {topic} has no partitions")))
    }

    async fn send(
        &self,
        topic: &str,
        ev: &Event,
        headers: OwnedHeaders,
        partition: Option<i32>,
    ) -> Result<AckFuture, SinkError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
        // A tombstone has no value at all (Kafka's null, not empty).
        if !ev.tombstone {
            record = record.payload(&ev.payload[..]);
        }
        if let Some(k) = &ev.key {
            record = record.key(&k[..]);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        loop {
            // A record the producer did not take comes back, to be offered
            // again (its headers are not copied per attempt).
            match self.producer.send_result(record) {
                Ok(delivery) => {
                    let topic = topic.to_string();
                    return Ok(Box::pin(async move {
                        match delivery.await {
                            Ok(Ok(_)) => Ok(Acked::default()),
                            Ok(Err((e, _))) => Err(transient(format!("Kafka delivery to {topic}: {e}"))),
                            Err(_) => Err(transient(format!("Kafka delivery to {topic}: the producer went away"))),
                        }
                    }));
                }
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    if tokio::time::Instant::now() > deadline {
                        return Err(transient(format!("Kafka producer queue full for {:?}", self.timeout)));
                    }
                    record = back;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                    return Err(permanent(format!(
                        "an event for {topic} is larger than message.max.bytes: raise it ([kafka.properties])"
                    )))
                }
                Err((e, _)) => return Err(transient(format!("Kafka produce to {topic}: {e}"))),
            }
        }
    }

    async fn publish(
        &self,
        topic: &str,
        ev: &Event,
        relay_id: &str,
    ) -> Result<AckFuture, SinkError> {
        let mut headers = OwnedHeaders::new().insert(Header {
            key: "pubjson-relay",
            value: Some(relay_id),
        });
        if let Some(id) = id_text(ev) {
            headers = headers.insert(Header {
                key: "pubjson-event",
                value: Some(id.as_str()),
            });
        }
        if let Some(xid) = ev.xid {
            headers = headers.insert(Header {
                key: "pubjson-xid",
                value: Some(xid.to_string().as_str()),
            });
        }
        if !ev.all_partitions {
            // A record without a key goes to partition 0, not to one the
            // partitioner picks at random: sent again after a restart it
            // lands where the first copy is, so the duplicate rule sees
            // it, and a keyless table's changes keep their order.
            let partition = ev.key.is_none().then_some(0);
            return self.send(topic, ev, headers, partition).await;
        }
        let n = self.partition_count(topic).await?;
        let mut acks = Vec::with_capacity(n as usize);
        for p in 0..n {
            acks.push(self.send(topic, ev, headers.clone(), Some(p)).await?);
        }
        Ok(Box::pin(async move {
            for a in acks {
                a.await?;
            }
            Ok(Acked::default())
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::EventId;

    #[test]
    fn nats_subject_matching() {
        for (pattern, subject, expected) in [
            ("dbz.>", "dbz.public.t", true),
            ("dbz.>", "dbz", false),
            ("dbz.*.t", "dbz.public.t", true),
            ("dbz.*", "dbz.public.t", false),
            ("pubjson.db.tx", "pubjson.db.tx", true),
            ("pubjson.db.tx", "pubjson.db.tx.more", false),
            ("pubjson.db", "pubjson.db.tx", false),
            (">", "a", true),
        ] {
            assert_eq!(
                subject_matches(pattern, subject),
                expected,
                "{pattern} {subject}"
            );
        }
    }

    #[test]
    fn subjects_of_templates() {
        assert_eq!(
            stream_subjects(&[
                "pubjson.{database}.{schema}.{table}",
                "pubjson.{database}.tx",
                "other.tx"
            ])
            .unwrap(),
            vec!["pubjson.>".to_string(), "other.tx".to_string()]
        );
        assert!(stream_subjects(&["{database}.x"]).unwrap_err().permanent);
        assert_eq!(parse_position("1/A:3"), Some(((1 << 32) | 10, 3)));
        assert_eq!(
            parse_position("0/A:4294967295"),
            Some((10, EventId::END_INDEX))
        );
        assert_eq!(parse_position("s1:2:3"), None);
    }
}
