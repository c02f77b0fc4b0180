//! The relay's loop: read the slot, publish every event, and confirm to
//! PostgreSQL a position only once the broker has acknowledged every
//! event before it (acknowledgements are taken in publishing order, so
//! the confirmed position is always behind a gap-free acknowledged
//! prefix). Reconnects to either side with backoff; drains on shutdown.

use crate::config::{BrokerKind, Settings};
use crate::conninfo::ConnInfo;
use crate::format::{Boundary, Event, EventId, Format, FormatKind};
use crate::metrics::Metrics;
use crate::pg::{quote_ident, PgConnection, PgError, Replication, ReplicationStream};
use crate::route::{nats_subject, Naming, Router};
use crate::sink::{
    stream_subjects, AckFuture, Acked, KafkaSink, NatsSink, Sink, SinkError, Stored,
};
use futures_util::stream::{FuturesOrdered, StreamExt};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Why the relay stopped for good.
#[derive(Debug)]
pub struct Fatal(pub String);

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

enum SessionError {
    Pg(PgError),
    Broker(SinkError),
    Fatal(String),
}

impl From<PgError> for SessionError {
    fn from(e: PgError) -> Self {
        SessionError::Pg(e)
    }
}

enum SessionEnd {
    Shutdown,
    ServerEnded,
}

/// One entry of the acknowledgement queue.
struct Done {
    acked: Option<Acked>,
    events: u64,
    bytes: u64,
    boundary: Option<Boundary>,
}

/// An entry of the acknowledgement queue: an event's acknowledgement, or
/// none for a boundary whose transaction's events all went nowhere, and
/// what it completes. A plain struct rather than a boxed `async` block:
/// one allocation less per event.
struct Pending {
    ack: Option<AckFuture>,
    bytes: u64,
    boundary: Option<Boundary>,
}

impl Future for Pending {
    type Output = Result<Done, SinkError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let acked = match self.ack.as_mut() {
            Some(ack) => match ack.as_mut().poll(cx) {
                Poll::Ready(result) => Some(result?),
                Poll::Pending => return Poll::Pending,
            },
            None => None,
        };
        Poll::Ready(Ok(Done {
            acked,
            events: u64::from(acked.is_some()),
            bytes: if acked.is_some() { self.bytes } else { 0 },
            boundary: self.boundary,
        }))
    }
}

/// Events the stream already holds, found when the relay starts after an
/// outage longer than JetStream's de-duplication window: not sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Nothing to leave out.
    Nothing,
    /// Format 3 (identities in commit order): committed events up to and
    /// including this one.
    Through(EventId),
    /// The Debezium format (identities in change order): every event until
    /// the one at `last`, the last stored, whose transaction began after
    /// every transaction ending at or before `after` (its `Pubjson-After`)
    /// was published. Sent again from a position at or before `after`,
    /// the events before it are the ones stored, in the same order; a
    /// boundary past `after` is the end of its transaction, where leaving
    /// out stops in any case.
    Until { last: (u64, u32), after: u64 },
}

impl Resume {
    /// What the stream's last event of this relay says, for `format`.
    pub fn from_stored(format: FormatKind, stored: &Stored) -> Resume {
        let (lsn, index) = stored.event;
        match (format, stored.after) {
            (FormatKind::V3, _) => Resume::Through(EventId::Committed { lsn, index }),
            (FormatKind::Debezium, Some(after)) => Resume::Until {
                last: (lsn, index),
                after,
            },
            // Without its header the event cannot be placed: send again.
            (FormatKind::Debezium, None) => Resume::Nothing,
        }
    }

    /// A session streams from `confirmed`: a transaction confirmed
    /// already is not sent again, nothing of it to leave out.
    pub fn session_from(self, confirmed: u64) -> Resume {
        match self {
            Resume::Until { after, .. } if confirmed > after => Resume::Nothing,
            other => other,
        }
    }

    /// Whether `id` (with `boundary`) is left out; moves past the end.
    pub fn skips(&mut self, id: EventId, boundary: Option<&Boundary>) -> bool {
        match (*self, id) {
            (Resume::Through(upto), EventId::Committed { .. }) => id <= upto,
            (Resume::Until { last, .. }, EventId::AtLsn { lsn, index }) if (lsn, index) == last => {
                *self = Resume::Nothing;
                true
            }
            (Resume::Until { after, .. }, _) if boundary.is_some_and(|b| b.lsn > after) => {
                *self = Resume::Nothing;
                false
            }
            (Resume::Until { .. }, EventId::AtLsn { .. }) => true,
            _ => false,
        }
    }
}

pub struct Relay {
    settings: Settings,
    ci: ConnInfo,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    sink: Option<Arc<Sink>>,
    /// Events in the broker already (found at start; JetStream only).
    resume: Resume,
    scanned: bool,
    /// The position last confirmed to PostgreSQL.
    confirmed: u64,
    /// Events sent on a NATS connection the relay gave up, their
    /// acknowledgement not received: the server may still store them
    /// (from its socket buffers, a frozen server once it runs again) after
    /// what the next connection sends. They are sent again first, in
    /// order, so that each is stored once and in its place whatever
    /// arrives when; the next session decodes the same events again after
    /// them, but a prepared transaction rolled back meanwhile is decoded
    /// without its changes, which then exist only here.
    orphans: Vec<(Arc<str>, Event)>,
}

impl Relay {
    pub fn new(
        settings: Settings,
        ci: ConnInfo,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> Relay {
        Relay {
            settings,
            ci,
            metrics,
            shutdown,
            sink: None,
            resume: Resume::Nothing,
            scanned: false,
            confirmed: 0,
            orphans: Vec::new(),
        }
    }

    fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Sleeps `d` unless shutdown comes first; true when it did.
    async fn pause(&mut self, d: Duration) -> bool {
        let mut rx = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => false,
            _ = rx.wait_for(|s| *s) => true,
        }
    }

    /// Runs until shutdown (Ok) or an error no retry can cure.
    pub async fn run(mut self) -> Result<(), Fatal> {
        // The format's options are checked before anything connects.
        self.format()
            .plugin_options(&self.settings.options)
            .map_err(|e| Fatal(e.0))?;
        let mut backoff = self.settings.reconnect_min;
        loop {
            if self.stopping() {
                return Ok(());
            }
            if self.sink.is_none() {
                let mut stop = self.shutdown.clone();
                let connected = tokio::select! {
                    c = self.connect_sink() => c,
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                };
                match connected {
                    Ok(s) => {
                        self.sink = Some(Arc::new(s));
                        self.metrics.set_broker_ok(true);
                    }
                    Err(e) if e.permanent => return Err(Fatal(e.message)),
                    Err(e) => {
                        log::error!("{e}; retrying in {backoff:?}");
                        self.metrics.set_problem(Some(e.message));
                        self.metrics.set_broker_ok(false);
                        self.metrics.reconnect("broker");
                        if self.pause(backoff).await {
                            return Ok(());
                        }
                        backoff = (backoff * 2).min(self.settings.reconnect_max);
                        continue;
                    }
                }
            }
            let started = Instant::now();
            let mut stop = self.shutdown.clone();
            let grace = self.settings.drain_timeout + Duration::from_secs(5);
            // Connecting and preparing can wait on an unresponsive server:
            // a shutdown then ends them (streaming has its own drain).
            let result = tokio::select! {
                r = self.session() => r,
                _ = async { stop.wait_for(|s| *s).await.ok(); tokio::time::sleep(grace).await } => Ok(SessionEnd::Shutdown),
            };
            self.metrics.set_streaming(false);
            // A session that streamed a while resets the backoff.
            if started.elapsed() > Duration::from_secs(10) {
                backoff = self.settings.reconnect_min;
            }
            match result {
                Ok(SessionEnd::Shutdown) => return Ok(()),
                Ok(SessionEnd::ServerEnded) => {
                    log::warn!("the server ended replication; reconnecting");
                    self.metrics.reconnect("postgresql");
                }
                Err(SessionError::Pg(e)) if e.is_permanent() => {
                    return Err(Fatal(explain_pg(&e, &self.settings)))
                }
                Err(SessionError::Pg(e)) => {
                    log::error!("PostgreSQL: {e}; reconnecting in {backoff:?}");
                    self.metrics.set_problem(Some(format!("PostgreSQL: {e}")));
                    self.metrics.reconnect("postgresql");
                }
                Err(SessionError::Broker(e)) if e.permanent => return Err(Fatal(e.message)),
                Err(SessionError::Broker(e)) => {
                    log::error!("broker: {e}; reconnecting in {backoff:?}");
                    self.metrics.broker_errors.inc();
                    self.metrics.set_problem(Some(format!("broker: {e}")));
                    self.metrics.set_broker_ok(false);
                    self.metrics.reconnect("broker");
                    if let Some(s) = self.sink.take() {
                        s.abandon();
                    }
                }
                Err(SessionError::Fatal(m)) => return Err(Fatal(m)),
            }
            if self.pause(backoff).await {
                return Ok(());
            }
            backoff = (backoff * 2).min(self.settings.reconnect_max);
        }
    }

    /// The format's reader (record keys for Kafka).
    fn format(&self) -> Box<dyn Format> {
        self.settings
            .format
            .build(self.settings.broker == BrokerKind::Kafka)
    }

    async fn connect_sink(&mut self) -> Result<Sink, SinkError> {
        let topic_prefix = self.format().topic_prefix(&self.settings.options);
        let s = &self.settings;
        match s.broker {
            BrokerKind::Nats => {
                let nats = s.nats.as_ref().ok_or_else(|| SinkError {
                    message: "no [nats] settings".into(),
                    permanent: true,
                })?;
                let mut templates = vec![s.routes.table.source()];
                for t in [
                    &s.routes.transactions,
                    &s.routes.messages,
                    &s.routes.ddl,
                    &s.routes.relations,
                ]
                .into_iter()
                .flatten()
                {
                    templates.push(t.source());
                }
                // Placeholders other than schema and table are filled in
                // per database: the stream covers their fixed prefixes.
                let subjects = match topic_prefix {
                    _ if !nats.create_stream => Vec::new(),
                    // The format's topics: the prefix, and what is under it.
                    Some(prefix) => {
                        let subject = nats_subject(&prefix);
                        vec![subject.clone(), format!("{subject}.>")]
                    }
                    None => stream_subjects(&templates)?,
                };
                let sink = NatsSink::connect(
                    nats,
                    subjects,
                    s.max_in_flight,
                    &s.relay_id,
                    self.metrics.clone(),
                )
                .await?;
                if !self.scanned {
                    // Where this relay's events end in the stream: events
                    // up to there are not sent again once JetStream's
                    // de-duplication window no longer covers them.
                    match sink.last_stored(&s.relay_id).await? {
                        Some(stored) => {
                            let age = SystemTime::now()
                                .duration_since(stored.stored)
                                .unwrap_or_default();
                            let id = stored.event;
                            // Within the window, message ids do the work
                            // (and also cover events stored out of order
                            // around a failure).
                            if age > sink.duplicate_window() * 9 / 10 {
                                log::info!("the stream holds this relay's events up to {id:?} (stored {age:?} ago): not sending them again");
                                self.resume = Resume::from_stored(s.format, &stored);
                            } else {
                                log::info!("the stream holds this relay's events up to {id:?}; JetStream drops any sent again");
                            }
                        }
                        None => {
                            log::info!("no event of relay {} in stream {}", s.relay_id, nats.stream)
                        }
                    }
                    self.scanned = true;
                }
                Ok(Sink::Nats(Box::new(sink)))
            }
            BrokerKind::Kafka => {
                let kafka = s.kafka.as_ref().ok_or_else(|| SinkError {
                    message: "no [kafka] settings".into(),
                    permanent: true,
                })?;
                Ok(Sink::Kafka(
                    KafkaSink::connect(kafka, s.max_in_flight, &s.relay_id).await?,
                ))
            }
        }
    }

    /// Checks the slot (creating it if asked); its confirmed position and
    /// the database's name.
    async fn prepare_slot(&self, conn: &mut PgConnection) -> Result<(u64, String), SessionError> {
        let slot = &self.settings.slot;
        // The slot name was checked to be [a-z0-9_]: safe as a literal.
        let sql = format!(
            "SELECT plugin, slot_type, database, confirmed_flush_lsn, current_database() \
             FROM pg_catalog.pg_replication_slots WHERE slot_name = '{slot}'"
        );
        let mut rows = conn.query(&sql).await?;
        if rows.is_empty() {
            if !self.settings.create_slot {
                return Err(SessionError::Fatal(format!(
                    "replication slot \"{slot}\" does not exist: create it (SELECT pg_create_logical_replication_slot('{slot}', 'pubjson')) or start the relay with --create-slot"
                )));
            }
            let mut create = format!(
                "CREATE_REPLICATION_SLOT {} LOGICAL pubjson (SNAPSHOT 'nothing'",
                quote_ident(slot)
            );
            if self.settings.two_phase {
                create.push_str(", TWO_PHASE");
            }
            create.push(')');
            match conn.query(&create).await {
                Ok(_) => log::info!("created replication slot \"{slot}\" with pubjson"),
                // Created meanwhile (another relay): use it.
                Err(PgError::Server(e)) if e.code == "42710" => {}
                Err(e) => return Err(e.into()),
            }
            rows = conn.query(&sql).await?;
        }
        let row = rows
            .first()
            .ok_or_else(|| SessionError::Fatal(format!("replication slot \"{slot}\" vanished")))?;
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let (plugin, kind, database, confirmed, current) =
            (text(0), text(1), text(2), text(3), text(4));
        if kind != "logical" {
            return Err(SessionError::Fatal(format!(
                "replication slot \"{slot}\" is a {kind} slot, not a logical one"
            )));
        }
        if plugin != "pubjson" {
            return Err(SessionError::Fatal(format!(
                "replication slot \"{slot}\" uses the output plugin \"{plugin}\", not pubjson: the relay reads pubjson's output (create a slot with pubjson)"
            )));
        }
        if database != current {
            return Err(SessionError::Fatal(format!(
                "replication slot \"{slot}\" belongs to database \"{database}\", not \"{current}\": connect to that database (dbname)"
            )));
        }
        Ok((crate::format::parse_lsn(&confirmed).unwrap_or(0), current))
    }

    async fn session(&mut self) -> Result<SessionEnd, SessionError> {
        let mut conn = PgConnection::connect(&self.ci, "pubjson-relay").await?;
        let (slot_confirmed, database) = self.prepare_slot(&mut conn).await?;
        self.confirmed = self.confirmed.max(slot_confirmed);
        self.resume = self.resume.session_from(slot_confirmed);
        let mut format = self.format();
        let options = format
            .plugin_options(&self.settings.options)
            .map_err(|e| SessionError::Fatal(e.0))?;
        let naming = match self.settings.broker {
            BrokerKind::Kafka => Naming::Kafka,
            BrokerKind::Nats => Naming::Nats,
        };
        let mut router = Router::new(
            self.settings.routes.clone(),
            naming,
            &database,
            &self.settings.slot,
        );
        let mut stream = conn
            .start_replication(&self.settings.slot, &options)
            .await?;
        log::info!(
            "streaming slot \"{}\" of database \"{database}\" in format {} from {} ({})",
            self.settings.slot,
            self.settings.format.name(),
            crate::format::lsn_text(self.confirmed),
            stream.peer()
        );
        format.session_start();
        self.metrics.set_streaming(true);
        self.metrics.confirmed_lsn.set(self.confirmed as i64);
        let result = self
            .stream_loop(&mut stream, format.as_mut(), &mut router)
            .await;
        match result {
            Ok(SessionEnd::Shutdown) | Err(SessionError::Broker(_)) => {
                stream.finish(self.confirmed, Duration::from_secs(5)).await;
            }
            _ => {}
        }
        result
    }

    async fn stream_loop(
        &mut self,
        stream: &mut ReplicationStream,
        format: &mut dyn Format,
        router: &mut Router,
    ) -> Result<SessionEnd, SessionError> {
        let sink = self
            .sink
            .clone()
            .ok_or_else(|| SessionError::Fatal("no broker connection".into()))?;
        self.send_orphans(&sink).await?;
        // What each entry of the acknowledgement queue sent (NATS only).
        let mut sent = VecDeque::new();
        let result = self
            .stream_events(stream, format, router, &sink, &mut sent)
            .await;
        if let (Err(SessionError::Broker(_)), Sink::Nats(_)) = (&result, &*sink) {
            self.orphans = sent.into_iter().flatten().collect();
        }
        result
    }

    /// Sends [`Self::orphans`] again on the new connection and waits until
    /// the broker has acknowledged every one.
    async fn send_orphans(&mut self, sink: &Sink) -> Result<(), SessionError> {
        if self.orphans.is_empty() {
            return Ok(());
        }
        log::info!(
            "sending again the {} events not acknowledged on the connection given up",
            self.orphans.len()
        );
        let timeout = self.publish_timeout();
        let mut acks: FuturesOrdered<crate::sink::AckFuture> = FuturesOrdered::new();
        for (dest, ev) in &self.orphans {
            let relay_id = &self.settings.relay_id;
            let ack = start_publish(sink, dest, ev, relay_id, timeout, &mut acks, |_| {}).await??;
            acks.push_back(ack);
        }
        while let Some(result) = acks.next().await {
            result.map_err(SessionError::Broker)?;
        }
        self.orphans.clear();
        Ok(())
    }

    /// How long a publish may wait to start (and JetStream for its
    /// acknowledgement).
    fn publish_timeout(&self) -> Duration {
        match &self.settings.nats {
            Some(n) => n.ack_timeout,
            None => self
                .settings
                .kafka
                .as_ref()
                .map(|k| k.delivery_timeout)
                .unwrap_or(Duration::from_secs(60)),
        }
    }

    async fn stream_events(
        &mut self,
        stream: &mut ReplicationStream,
        format: &mut dyn Format,
        router: &mut Router,
        sink: &Sink,
        sent: &mut VecDeque<Option<(Arc<str>, Event)>>,
    ) -> Result<SessionEnd, SessionError> {
        let keep_sent = matches!(sink, Sink::Nats(_));
        let relay_id = self.settings.relay_id.clone();
        let max_in_flight = self.settings.max_in_flight;
        let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
        // Commit times of the boundaries waiting for acknowledgements.
        let mut waiting_times: VecDeque<Option<SystemTime>> = VecDeque::new();
        let mut server_end = self.confirmed;
        // Every transaction ending at or before this position has been
        // sent (boundaries and keepalives seen): an event's `after`.
        let mut frontier = self.confirmed;
        let mut events = Vec::new();
        let mut tick = tokio::time::interval(self.settings.status_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        let mut sent_status = self.confirmed;
        let publish_timeout = self.publish_timeout();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|s| *s) => {
                    log::info!("shutting down: waiting for {} events to be acknowledged", pending.len());
                    let deadline = tokio::time::Instant::now() + self.settings.drain_timeout;
                    loop {
                        match tokio::time::timeout_at(deadline, pending.next()).await {
                            Ok(Some(Ok(done))) => self.acknowledged(done, &mut waiting_times),
                            Ok(Some(Err(e))) => {
                                log::error!("broker: {e}; confirming what was acknowledged before it");
                                break;
                            }
                            Ok(None) => break,
                            Err(_) => {
                                log::warn!("drain timeout: {} events not acknowledged are sent again by the next run", pending.len());
                                break;
                            }
                        }
                    }
                    self.metrics.unacknowledged.set(0);
                    log::info!("confirmed {} to PostgreSQL", crate::format::lsn_text(self.confirmed));
                    return Ok(SessionEnd::Shutdown);
                }
                Some(result) = pending.next(), if !pending.is_empty() => {
                    match result {
                        Ok(done) => self.acknowledged(done, &mut waiting_times),
                        Err(e) => return Err(SessionError::Broker(e)),
                    }
                    sent.pop_front();
                    self.metrics.unacknowledged.set(pending.len() as i64);
                }
                _ = tick.tick() => {
                    if sink.is_broken() {
                        return Err(SessionError::Broker(SinkError {
                            message: "the connection to the broker was lost".into(),
                            permanent: false,
                        }));
                    }
                    stream.send_status(self.confirmed, false).await?;
                    sent_status = self.confirmed;
                    let lag = waiting_times
                        .front()
                        .and_then(|t| *t)
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .map(|d| d.as_secs_f64())
                        .unwrap_or(0.0);
                    self.metrics.lag_seconds.set(lag);
                    self.metrics.lag_bytes.set(server_end.saturating_sub(self.confirmed) as i64);
                }
                message = stream.next(), if pending.len() < max_in_flight => {
                    match message? {
                        None => return Ok(SessionEnd::ServerEnded),
                        Some(Replication::Keepalive { wal_end, reply_requested }) => {
                            server_end = server_end.max(wal_end);
                            frontier = frontier.max(wal_end);
                            self.metrics.received_lsn.set(server_end as i64);
                            // Everything decoded so far is acknowledged and no
                            // transaction is half sent: the server's position
                            // can be confirmed (an idle or filtered slot then
                            // holds no WAL).
                            if pending.is_empty() && !format.in_transaction() && wal_end > self.confirmed {
                                self.confirmed = wal_end;
                                self.metrics.confirmed_lsn.set(self.confirmed as i64);
                            }
                            if reply_requested || (self.confirmed > sent_status && pending.is_empty()) {
                                stream.send_status(self.confirmed, false).await?;
                                sent_status = self.confirmed;
                            }
                        }
                        Some(Replication::Data { lsn, payload }) => {
                            server_end = server_end.max(lsn);
                            events.clear();
                            format
                                .message(lsn, &payload, &mut events)
                                .map_err(|e| SessionError::Fatal(format!("{e} (at {})", crate::format::lsn_text(lsn))))?;
                            for mut ev in events.drain(..) {
                                if let Some(b) = ev.boundary {
                                    waiting_times.push_back(b.commit_time);
                                }
                                let skip = self.resume.skips(ev.id, ev.boundary.as_ref());
                                let dest = router.route(&ev.dest).map_err(|e| SessionError::Fatal(e.0))?;
                                let boundary = ev.boundary;
                                if let EventId::AtLsn { .. } = ev.id {
                                    ev.after = Some(frontier);
                                }
                                if let Some(b) = boundary {
                                    frontier = frontier.max(b.lsn);
                                }
                                match dest {
                                    Some(dest) if !skip => {
                                        let bytes = ev.payload.len() as u64;
                                        let started = start_publish(sink, &dest, &ev, &relay_id, publish_timeout, &mut pending, |done| {
                                            self.acknowledged(done, &mut waiting_times);
                                            sent.pop_front();
                                        })
                                        .await?;
                                        // Sent or perhaps sent: an orphan if the
                                        // connection is given up before its
                                        // acknowledgement.
                                        sent.push_back(keep_sent.then(|| (dest.clone(), ev)));
                                        let ack = started?;
                                        pending.push_back(Pending { ack: Some(ack), bytes, boundary });
                                    }
                                    _ => {
                                        if skip {
                                            self.metrics.skipped.inc();
                                        }
                                        if boundary.is_some() {
                                            sent.push_back(None);
                                            pending.push_back(Pending { ack: None, bytes: 0, boundary });
                                        }
                                    }
                                }
                            }
                            self.metrics.unacknowledged.set(pending.len() as i64);
                        }
                    }
                }
            }
        }
    }

    fn acknowledged(&mut self, done: Done, waiting_times: &mut VecDeque<Option<SystemTime>>) {
        if let Some(a) = done.acked {
            self.metrics.events.inc_by(done.events);
            self.metrics.event_bytes.inc_by(done.bytes);
            if a.duplicate {
                self.metrics.duplicates.inc();
            }
        }
        if let Some(b) = done.boundary {
            waiting_times.pop_front();
            self.metrics.transactions.inc();
            if b.lsn > self.confirmed {
                self.confirmed = b.lsn;
                self.metrics.confirmed_lsn.set(self.confirmed as i64);
            }
        }
    }
}

/// Starts publishing `ev` to `dest` within `timeout`, handing the
/// acknowledgements of `acks` that come meanwhile to `on_ack`. One message
/// can hold more events than the client has permits for (a large
/// transaction is published whole at its commit), and a waiting
/// acknowledgement gives its permit back only when polled: without this
/// the publish would wait for them forever. `Err`: an acknowledgement
/// failed; `Ok(Err)`: this publish did not start (it may have been sent).
async fn start_publish<T>(
    sink: &Sink,
    dest: &str,
    ev: &Event,
    relay_id: &str,
    timeout: Duration,
    acks: &mut FuturesOrdered<impl Future<Output = Result<T, SinkError>>>,
    mut on_ack: impl FnMut(T),
) -> Result<Result<crate::sink::AckFuture, SessionError>, SessionError> {
    let publish = tokio::time::timeout(timeout, sink.publish(dest, ev, relay_id));
    tokio::pin!(publish);
    let started = loop {
        tokio::select! {
            biased;
            started = &mut publish => break started,
            Some(result) = acks.next(), if !acks.is_empty() => {
                on_ack(result.map_err(SessionError::Broker)?);
            }
        }
    };
    Ok(match started {
        Ok(started) => started.map_err(SessionError::Broker),
        Err(_) => Err(SessionError::Broker(SinkError {
            message: format!("publishing to {dest} did not start within {timeout:?}"),
            permanent: false,
        })),
    })
}

/// A permanent PostgreSQL error, with what to do about it.
fn explain_pg(e: &PgError, settings: &Settings) -> String {
    if let PgError::Server(s) = e {
        let hint = match s.code.as_str() {
            "42501" => " (the relay's user needs the REPLICATION attribute: ALTER ROLE ... WITH REPLICATION)",
            "28000" => " (pg_hba.conf must allow a replication connection for this user and database: a \"replication\" line is not enough for a logical slot, the database must be allowed too)",
            "28P01" => " (check the password: PGPASSWORD, password in the connection string, or the password file)",
            "3D000" => " (check dbname in the connection string or PGDATABASE)",
            "42704" => " (check the slot name, or start the relay with --create-slot)",
            "22023" => " (a plugin option was refused: check [source.options] / --option)",
            _ => "",
        };
        return format!(
            "PostgreSQL refused the relay for slot \"{}\": {s}{hint}",
            settings.slot
        );
    }
    format!("PostgreSQL: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: u64, index: u32) -> EventId {
        EventId::AtLsn { lsn, index }
    }

    fn boundary(lsn: u64) -> Boundary {
        Boundary {
            lsn,
            commit_time: None,
        }
    }

    fn stored(event: (u64, u32), after: Option<u64>) -> Stored {
        Stored {
            event,
            after,
            stored: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn format_3_leaves_out_what_is_at_or_before_the_last_stored() {
        let mut r = Resume::from_stored(FormatKind::V3, &stored((0x200, 2), None));
        let c = |lsn, index| EventId::Committed { lsn, index };
        assert!(r.skips(c(0x100, 9), None));
        assert!(r.skips(c(0x200, 2), Some(&boundary(0x230))));
        assert!(!r.skips(c(0x200, 3), None));
        assert!(!r.skips(c(0x300, 0), None));
        assert!(!r.skips(EventId::None, None));
        assert_eq!(r.session_from(0x500), r, "ordered: nothing to undo");
    }

    #[test]
    fn debezium_leaves_out_events_until_the_last_stored() {
        // The stream's last event is (0x250, 1), published after every
        // transaction ending at or before 0x200 had been sent.
        let last = stored((0x250, 1), Some(0x200));
        let mut r = Resume::from_stored(FormatKind::Debezium, &last).session_from(0x180);
        // Sent again from 0x180: a transaction that ended at 0x200
        // (positions before the last one's, and after it: change order).
        assert!(r.skips(at(0x190, 0), None));
        assert!(r.skips(at(0x300, 0), None));
        // Its end (a boundary event publishes nothing): confirmed as
        // usual, and leaving out goes on.
        assert!(!r.skips(EventId::None, Some(&boundary(0x200))));
        assert_ne!(r, Resume::Nothing);
        // Then the last one's transaction, up to that event.
        assert!(r.skips(at(0x240, 0), None));
        assert!(r.skips(at(0x250, 1), None));
        assert_eq!(r, Resume::Nothing);
        assert!(!r.skips(at(0x250, 2), None));
        assert!(!r.skips(at(0x260, 0), Some(&boundary(0x270))));
    }

    #[test]
    fn debezium_stops_leaving_out_at_the_end_of_the_last_ones_transaction() {
        let last = stored((0x250, 1), Some(0x200));
        let mut r = Resume::from_stored(FormatKind::Debezium, &last);
        assert!(r.skips(at(0x240, 0), None));
        // The event never came (other options): its transaction's end is
        // past `after`; from there everything is sent.
        assert!(!r.skips(at(0x290, EventId::END_INDEX), Some(&boundary(0x290))));
        assert_eq!(r, Resume::Nothing);
        assert!(!r.skips(at(0x300, 0), None));
        let mut r = Resume::from_stored(FormatKind::Debezium, &last);
        assert!(!r.skips(EventId::None, Some(&boundary(0x290))));
        assert!(!r.skips(at(0x300, 0), None));
    }

    #[test]
    fn debezium_leaves_out_nothing_when_the_transaction_was_confirmed() {
        let last = stored((0x250, 1), Some(0x200));
        let r = Resume::from_stored(FormatKind::Debezium, &last);
        assert_eq!(r.session_from(0x200), r);
        let mut later = r.session_from(0x201);
        assert_eq!(later, Resume::Nothing);
        assert!(!later.skips(at(0x300, 0), None));
        // Without its Pubjson-After the event cannot be placed.
        assert_eq!(
            Resume::from_stored(FormatKind::Debezium, &stored((0x250, 1), None)),
            Resume::Nothing
        );
    }
}
