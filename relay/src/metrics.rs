//! The relay's Prometheus metrics (prefix `pubjson_relay_`, units in the
//! names as the exporters' conventions want them) and its health, served
//! over HTTP: `/metrics` and `/health`.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SideLabel {
    pub side: &'static str,
}

/// Every metric, updated by the relay's loop.
pub struct Metrics {
    registry: Registry,
    pub events: Counter,
    pub event_bytes: Counter,
    pub transactions: Counter,
    pub unacknowledged: Gauge,
    pub broker_errors: Counter,
    pub reconnects: Family<SideLabel, Counter>,
    pub lag_bytes: Gauge,
    pub lag_seconds: Gauge<f64, AtomicU64>,
    pub confirmed_lsn: Gauge,
    pub received_lsn: Gauge,
    pub duplicates: Counter,
    pub skipped: Counter,
    pub streaming: Gauge,
    health: Health,
}

/// Whether the relay is streaming into a reachable broker, and why not.
#[derive(Default)]
struct Health {
    streaming: AtomicBool,
    broker_ok: AtomicBool,
    problem: Mutex<Option<String>>,
}

impl Metrics {
    pub fn new(slot: &str, broker: &str) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix_and_labels(
            "pubjson_relay",
            [
                (
                    std::borrow::Cow::Borrowed("slot_name"),
                    std::borrow::Cow::Owned(slot.to_string()),
                ),
                (
                    std::borrow::Cow::Borrowed("broker"),
                    std::borrow::Cow::Owned(broker.to_string()),
                ),
            ]
            .into_iter(),
        );
        let m = Metrics {
            events: Counter::default(),
            event_bytes: Counter::default(),
            transactions: Counter::default(),
            unacknowledged: Gauge::default(),
            broker_errors: Counter::default(),
            reconnects: Family::default(),
            lag_bytes: Gauge::default(),
            lag_seconds: Gauge::default(),
            confirmed_lsn: Gauge::default(),
            received_lsn: Gauge::default(),
            duplicates: Counter::default(),
            skipped: Counter::default(),
            streaming: Gauge::default(),
            registry: Registry::default(),
            health: Health::default(),
        };
        registry.register("events", "Events the broker acknowledged", m.events.clone());
        registry.register(
            "event_bytes",
            "Bytes of events the broker acknowledged",
            m.event_bytes.clone(),
        );
        registry.register(
            "transactions",
            "Transactions whose events the broker acknowledged",
            m.transactions.clone(),
        );
        registry.register(
            "unacknowledged_events",
            "Events sent to the broker and not yet acknowledged",
            m.unacknowledged.clone(),
        );
        registry.register(
            "broker_errors",
            "Events the broker refused or did not acknowledge in time",
            m.broker_errors.clone(),
        );
        registry.register(
            "reconnects",
            "Connections made again after a failure, by side (postgresql, broker)",
            m.reconnects.clone(),
        );
        registry.register(
            "slot_lag_bytes",
            "WAL the server has sent or can send beyond the position the relay confirmed",
            m.lag_bytes.clone(),
        );
        registry.register("slot_lag_seconds", "Age of the oldest transaction received and not yet acknowledged by the broker (0 when none waits)", m.lag_seconds.clone());
        registry.register(
            "confirmed_lsn",
            "The position last confirmed to PostgreSQL, as a number",
            m.confirmed_lsn.clone(),
        );
        registry.register(
            "received_lsn",
            "The newest WAL position the server reported, as a number",
            m.received_lsn.clone(),
        );
        registry.register(
            "duplicate_events",
            "Events the broker reported as duplicates (JetStream's de-duplication)",
            m.duplicates.clone(),
        );
        registry.register(
            "skipped_events",
            "Events not sent again because the broker already stored them (found at start)",
            m.skipped.clone(),
        );
        registry.register(
            "streaming",
            "1 while the relay streams from the slot into the broker",
            m.streaming.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    pub fn set_streaming(&self, on: bool) {
        self.health.streaming.store(on, Ordering::Relaxed);
        self.streaming.set(on as i64);
        if on {
            self.set_problem(None);
        }
    }

    pub fn set_broker_ok(&self, ok: bool) {
        self.health.broker_ok.store(ok, Ordering::Relaxed);
    }

    /// What keeps the relay from streaming (shown by `/health`).
    pub fn set_problem(&self, problem: Option<String>) {
        if let Ok(mut p) = self.health.problem.lock() {
            *p = problem;
        }
    }

    pub fn reconnect(&self, side: &'static str) {
        self.reconnects.get_or_create(&SideLabel { side }).inc();
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// `(healthy, explanation)`.
    pub fn health(&self) -> (bool, String) {
        let streaming = self.health.streaming.load(Ordering::Relaxed);
        let broker = self.health.broker_ok.load(Ordering::Relaxed);
        if streaming && broker {
            return (true, "ok: streaming\n".to_string());
        }
        let problem = self.health.problem.lock().ok().and_then(|p| p.clone());
        let why = match (streaming, broker, problem) {
            (_, _, Some(p)) => p,
            (false, _, None) => "not streaming from PostgreSQL".to_string(),
            (true, false, None) => "the broker is not reachable".to_string(),
            (true, true, None) => String::new(),
        };
        (false, format!("unhealthy: {why}\n"))
    }

    fn respond(&self, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let (status, ctype, body) = match req.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.text(),
            ),
            "/health" | "/healthz" => {
                let (ok, text) = self.health();
                (
                    if ok {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    },
                    "text/plain; charset=utf-8",
                    text,
                )
            }
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found: try /metrics or /health\n".into(),
            ),
        };
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp
    }
}

/// Binds `addr` (an error when it cannot) and serves the endpoint in the
/// background.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let m = metrics.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let m = m.clone();
                    async move { Ok::<_, Infallible>(m.respond(&req)) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_and_health() {
        let m = Metrics::new("s1", "nats");
        m.events.inc_by(3);
        m.reconnect("postgresql");
        m.lag_seconds.set(1.5);
        let text = m.text();
        for line in [
            "pubjson_relay_events_total{slot_name=\"s1\",broker=\"nats\"} 3",
            "pubjson_relay_reconnects_total{slot_name=\"s1\",broker=\"nats\",side=\"postgresql\"} 1",
            "pubjson_relay_slot_lag_seconds{slot_name=\"s1\",broker=\"nats\"} 1.5",
            "pubjson_relay_unacknowledged_events{slot_name=\"s1\",broker=\"nats\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!m.health().0);
        m.set_streaming(true);
        assert!(!m.health().0);
        m.set_broker_ok(true);
        assert_eq!(m.health(), (true, "ok: streaming\n".to_string()));
        m.set_streaming(false);
        m.set_problem(Some("replication slot \"x\" does not exist".into()));
        assert!(m.health().1.contains("does not exist"));
    }
}
