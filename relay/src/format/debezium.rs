//! The Debezium format (docs/debezium.md) read into broker events: each
//! line `{"destination":TOPIC,"key":KEY,"value":VALUE}` is one event for
//! TOPIC, its key and value published as the line has them (slices of the
//! message, not re-encoded); a null value is a tombstone, a null key no
//! key.
//!
//! Identities ([`EventId::AtLsn`]): an event's `source.lsn` and its index
//! among the events of its transaction at that position (a truncate of
//! several tables, an update of the key written as a delete, its tombstone
//! and a create, a `BEGIN` record and its first event share one; an event
//! without a `source`, a tombstone, takes the position of the event before
//! it). An `END` record is [`EventId::END_INDEX`] at its commit's end,
//! where the next transaction's first event may start. The same in every
//! session, whatever the batching.
//!
//! Boundaries (positions the relay may confirm once everything before is
//! acknowledged): an `END` record's commit end with
//! `provide.transaction.metadata`; without it, the end of a transaction is
//! known when the next transaction (or a message outside transactions)
//! starts, from its `source.sequence`, whose first element is the last
//! commit's end: an event that publishes nothing ([`Dest::Nowhere`])
//! carries it, ahead of the next transaction's events. The last transaction
//! before a quiet spell is confirmed by the server's keepalives (which never
//! point past a commit whose transaction is still being sent). A message
//! outside transactions is its own boundary, at its position.

use super::{lines, Boundary, Dest, Event, EventId, Format, FormatError};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    destination: Cow<'a, str>,
    #[serde(borrow)]
    key: &'a RawValue,
    #[serde(borrow)]
    value: &'a RawValue,
}

/// What the relay reads of a value: a change's or message's `op` and
/// `source`, a transaction record's `status`, `id` and `ts_ms`.
#[derive(Deserialize, Default)]
struct Envelope<'a> {
    #[serde(borrow)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow)]
    source: Option<Source<'a>>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    ts_ms: Option<i64>,
}

/// A value as the line has it: the envelope itself, or (`schemas.enable`)
/// Kafka Connect's `{"schema":...,"payload":ENVELOPE}`. Read in one pass.
#[derive(Deserialize)]
struct Value<'a> {
    #[serde(borrow)]
    payload: Option<Envelope<'a>>,
    #[serde(borrow)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow)]
    source: Option<Source<'a>>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    ts_ms: Option<i64>,
}

impl<'a> Value<'a> {
    fn envelope(self) -> Envelope<'a> {
        match self.payload {
            Some(p) if self.op.is_none() && self.status.is_none() && self.source.is_none() => p,
            _ => Envelope {
                op: self.op,
                source: self.source,
                status: self.status,
                id: self.id,
                ts_ms: self.ts_ms,
            },
        }
    }
}

#[derive(Deserialize)]
struct Source<'a> {
    lsn: Option<u64>,
    #[serde(rename = "txId")]
    tx_id: Option<u64>,
    /// `["<last commit's end>","<lsn>"]`, as a JSON string: read only
    /// when needed.
    #[serde(borrow)]
    sequence: Option<&'a RawValue>,
    /// The commit time.
    ts_us: Option<i64>,
}

/// The transaction whose events are being read.
struct Open {
    xid: u32,
    /// Its `BEGIN` record was read (`provide.transaction.metadata`): its
    /// `END` closes it.
    framed: bool,
    /// The position of the last event, and the index the next event at
    /// that position gets.
    lsn: u64,
    next_index: u32,
    commit_time: Option<SystemTime>,
}

pub struct Debezium {
    txn: Option<Open>,
    /// Destinations, interned: one allocation per topic, not per event.
    names: HashMap<Box<str>, Arc<str>>,
    /// Events outside transactions without a position of their own: the
    /// message's position and how many came at it.
    loose: (u64, u32),
}

impl Debezium {
    pub fn new() -> Debezium {
        Debezium {
            txn: None,
            names: HashMap::new(),
            loose: (0, 0),
        }
    }

    fn name(&mut self, destination: &str) -> Arc<str> {
        if let Some(n) = self.names.get(destination) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(destination);
        self.names.insert(destination.into(), n.clone());
        n
    }

    /// The next index at `lsn` in the open transaction.
    fn position(open: &mut Open, lsn: u64) -> u32 {
        if lsn == open.lsn {
            let index = open.next_index;
            open.next_index = open.next_index.saturating_add(1);
            index
        } else {
            open.lsn = lsn;
            open.next_index = 1;
            0
        }
    }

    /// A transaction without `END` records ends where the next one (or a
    /// message outside transactions) starts: its end, `previous_commit`
    /// (the `source.sequence` of what starts), is confirmed once its
    /// events are acknowledged.
    fn close_unframed(&mut self, previous_commit: Option<u64>, out: &mut Vec<Event>) {
        let Some(open) = self.txn.take() else {
            return;
        };
        if let Some(lsn) = previous_commit {
            out.push(Event {
                dest: Dest::Nowhere,
                payload: Bytes::new(),
                tombstone: false,
                id: EventId::None,
                key: None,
                xid: Some(open.xid),
                all_partitions: false,
                boundary: Some(Boundary {
                    lsn,
                    commit_time: open.commit_time,
                }),
                action: "end",
                after: None,
            });
        }
    }

    fn line(
        &mut self,
        xlog_lsn: u64,
        payload: &Bytes,
        start: usize,
        end: usize,
        out: &mut Vec<Event>,
    ) -> Result<(), FormatError> {
        let text = &payload[start..end];
        let line: Line<'_> = serde_json::from_slice(text).map_err(|e| {
            bad(
                &format!("is not a record of the Debezium format ({e})"),
                text,
            )
        })?;
        // Where key and value are in the message: published as they are.
        let base = payload.as_ptr() as usize;
        let range = |raw: &RawValue| {
            let from = raw.get().as_ptr() as usize - base;
            from..from + raw.get().len()
        };
        let key = (line.key.get() != "null").then(|| payload.slice(range(line.key)));
        let tombstone = line.value.get() == "null";
        let env = if tombstone {
            Envelope::default()
        } else {
            serde_json::from_str::<Value<'_>>(line.value.get())
                .map_err(|e| bad(&format!("has a value that is not an object ({e})"), text))?
                .envelope()
        };
        let dest = Dest::Named(self.name(&line.destination));
        let mut ev = Event {
            dest,
            payload: if tombstone {
                Bytes::new()
            } else {
                payload.slice(range(line.value))
            },
            tombstone,
            id: EventId::None,
            key,
            xid: None,
            all_partitions: false,
            boundary: None,
            action: if tombstone {
                "tombstone"
            } else {
                action(env.op.as_deref())
            },
            after: None,
        };
        match (env.status.as_deref(), env.id.as_deref(), &env.source) {
            (Some(status @ ("BEGIN" | "END")), Some(id), _) => {
                let (xid, lsn) = transaction_id(id).ok_or_else(|| {
                    bad(
                        "is a transaction record with an id that is not XID:LSN",
                        text,
                    )
                })?;
                ev.xid = Some(xid);
                if status == "BEGIN" {
                    self.close_unframed(None, out);
                    self.txn = Some(Open {
                        xid,
                        framed: true,
                        lsn,
                        next_index: 1,
                        commit_time: None,
                    });
                    ev.id = EventId::AtLsn { lsn, index: 0 };
                    ev.action = "BEGIN";
                } else {
                    self.txn = None;
                    ev.id = EventId::AtLsn {
                        lsn,
                        index: EventId::END_INDEX,
                    };
                    ev.boundary = Some(Boundary {
                        lsn,
                        commit_time: env.ts_ms.and_then(|ms| unix_time(ms.saturating_mul(1000))),
                    });
                    ev.action = "END";
                }
            }
            (_, _, Some(source)) => {
                let lsn = source
                    .lsn
                    .ok_or_else(|| bad("has a source without lsn", text))?;
                let previous_commit = || source.sequence.and_then(last_commit);
                let commit_time = source.ts_us.and_then(unix_time);
                match source.tx_id {
                    Some(xid) => {
                        let xid = u32::try_from(xid)
                            .map_err(|_| bad("has a txId that is not a transaction id", text))?;
                        if self.txn.as_ref().is_some_and(|t| t.xid != xid) {
                            self.close_unframed(previous_commit(), out);
                        }
                        let open = self.txn.get_or_insert(Open {
                            xid,
                            framed: false,
                            lsn,
                            next_index: 0,
                            commit_time,
                        });
                        if commit_time.is_some() {
                            open.commit_time = commit_time;
                        }
                        let index = Self::position(open, lsn);
                        ev.xid = Some(xid);
                        ev.id = EventId::AtLsn { lsn, index };
                    }
                    None => {
                        // A message outside transactions: on its own, at
                        // its position (decoded between transactions).
                        self.close_unframed(previous_commit(), out);
                        ev.id = EventId::AtLsn { lsn, index: 0 };
                        ev.boundary = Some(Boundary {
                            lsn,
                            commit_time: None,
                        });
                    }
                }
            }
            _ => match self.txn.as_mut() {
                // A tombstone (or a record without a source) follows the
                // event it belongs to.
                Some(open) => {
                    let lsn = open.lsn;
                    let index = Self::position(open, lsn);
                    ev.xid = Some(open.xid);
                    ev.id = EventId::AtLsn { lsn, index };
                }
                None => {
                    // Outside any transaction: at the message's position.
                    if self.loose.0 != xlog_lsn {
                        self.loose = (xlog_lsn, 0);
                    }
                    ev.id = EventId::AtLsn {
                        lsn: xlog_lsn,
                        index: self.loose.1,
                    };
                    self.loose.1 = self.loose.1.saturating_add(1);
                }
            },
        }
        out.push(ev);
        Ok(())
    }
}

impl Default for Debezium {
    fn default() -> Self {
        Self::new()
    }
}

fn bad(what: &str, line: &[u8]) -> FormatError {
    let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    FormatError(format!("Debezium format line {what}: {shown}"))
}

fn action(op: Option<&str>) -> &'static str {
    match op {
        Some("c") => "c",
        Some("u") => "u",
        Some("d") => "d",
        Some("r") => "r",
        Some("t") => "t",
        Some("m") => "m",
        _ => "other",
    }
}

/// Debezium's transaction id `"XID:LSN"`.
fn transaction_id(id: &str) -> Option<(u32, u64)> {
    let (xid, lsn) = id.split_once(':')?;
    Some((xid.parse().ok()?, lsn.parse().ok()?))
}

/// The first element of `source.sequence`, a JSON string holding
/// `["123","456"]` or `[null,"456"]`.
fn last_commit(sequence: &RawValue) -> Option<u64> {
    let text: Cow<'_, str> = serde_json::from_str(sequence.get()).ok()?;
    let (first, _): (Option<Cow<'_, str>>, Option<Cow<'_, str>>) =
        serde_json::from_str(&text).ok()?;
    first?.parse().ok()
}

/// Microseconds since 1970 as a time.
fn unix_time(micros: i64) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(u64::try_from(micros).ok()?))
}

/// The option `name` among the user's.
fn option<'u>(user: &'u [(String, String)], name: &str) -> Option<&'u str> {
    user.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl Format for Debezium {
    fn plugin_options(
        &self,
        user: &[(String, String)],
    ) -> Result<Vec<(String, String)>, FormatError> {
        let mut opts = Vec::with_capacity(user.len() + 1);
        let mut has_version = false;
        for (k, v) in user {
            if k == "format-version" {
                if !v.eq_ignore_ascii_case("debezium") {
                    return Err(FormatError(format!(
                        "the relay reads format-version debezium here (the format setting); option format-version={v} contradicts it"
                    )));
                }
                has_version = true;
            }
            opts.push((k.clone(), v.clone()));
        }
        if !has_version {
            opts.insert(0, ("format-version".to_string(), "debezium".to_string()));
        }
        match option(user, "topic.prefix") {
            None | Some("") => Err(FormatError(
                "the Debezium format needs topic.prefix, which names every topic as in Debezium: -o topic.prefix=NAME, or \"topic.prefix\" = \"NAME\" in [source.options]".into(),
            )),
            Some(p) if !p.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) => {
                Err(FormatError(format!(
                    "topic.prefix \"{p}\" is invalid: letters, digits, '.', '_' and '-' (Kafka's topic names)"
                )))
            }
            Some(_) => Ok(opts),
        }
    }

    fn topic_prefix(&self, user: &[(String, String)]) -> Option<String> {
        option(user, "topic.prefix").map(str::to_string)
    }

    fn session_start(&mut self) {
        self.txn = None;
        self.loose = (0, 0);
    }

    fn message(
        &mut self,
        lsn: u64,
        payload: &Bytes,
        out: &mut Vec<Event>,
    ) -> Result<(), FormatError> {
        for (start, end) in lines(payload) {
            self.line(lsn, payload, start, end, out)?;
        }
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        // Between a BEGIN and its END. Without transaction records the end
        // is not marked: keepalives are confirmed, which is safe (a
        // keepalive's position is never past the commit of a transaction
        // being sent, which a restart therefore sends again).
        self.txn.as_ref().is_some_and(|t| t.framed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // pubjson's own output for one workload (pg_logical_slot_peek_changes
    // on PostgreSQL 16): schemas off without and with transaction
    // records, and schemas on. Two transactions' lines are never in one
    // message, but the reader works line by line.
    const PLAIN: &str = include_str!("testdata/debezium_plain.jsonl");
    const METADATA: &str = include_str!("testdata/debezium_metadata.jsonl");
    const SCHEMAS: &str = include_str!("testdata/debezium_schemas.jsonl");

    fn read(f: &mut Debezium, messages: &[&str]) -> Vec<Event> {
        let mut out = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            f.message(i as u64, &Bytes::copy_from_slice(m.as_bytes()), &mut out)
                .unwrap();
        }
        out
    }

    /// `(action, lsn, index, boundary, xid)` of each event; an `END`'s
    /// index is `E`.
    type Summary = (&'static str, u64, u32, Option<u64>, Option<u32>);
    const E: u32 = EventId::END_INDEX;

    fn summary(evs: &[Event]) -> Vec<Summary> {
        evs.iter()
            .map(|e| {
                let (lsn, index) = match e.id {
                    EventId::AtLsn { lsn, index } => (lsn, index),
                    _ => (0, 0),
                };
                (e.action, lsn, index, e.boundary.map(|b| b.lsn), e.xid)
            })
            .collect()
    }

    #[test]
    fn without_transaction_records_boundaries_come_from_the_next_transaction() {
        let evs = read(&mut Debezium::new(), &[PLAIN]);
        let (t1, t2, t3, t4) = (Some(2369), Some(2370), Some(2371), Some(2374));
        assert_eq!(
            summary(&evs),
            vec![
                ("c", 170168864, 0, None, t1),
                ("c", 170169088, 0, None, t1),
                // An update of the key: delete, tombstone, create at one
                // position.
                ("d", 170169216, 0, None, t1),
                ("tombstone", 170169216, 1, None, t1),
                ("c", 170169216, 2, None, t1),
                ("d", 170169368, 0, None, t1),
                ("tombstone", 170169368, 1, None, t1),
                // The next transaction's sequence says where 2369 ended.
                ("end", 0, 0, Some(170169480), t1),
                ("c", 170169480, 0, None, t2),
                // A message outside transactions ends 2370 (at its own
                // position, which it names as the last commit) and is
                // its own boundary.
                ("end", 0, 0, Some(170169656), t2),
                ("m", 170169656, 0, Some(170169656), None),
                // A truncate of two tables: one position.
                ("t", 170174664, 0, None, t3),
                ("t", 170174664, 1, None, t3),
                ("m", 170174768, 0, None, t3),
                ("end", 0, 0, Some(170175344), t3),
                ("c", 171116664, 0, None, t4),
                ("d", 171116888, 0, None, t4),
                ("tombstone", 171116888, 1, None, t4),
            ]
        );
        assert!(evs
            .iter()
            .filter(|e| e.action == "end")
            .all(|e| e.dest == Dest::Nowhere && e.payload.is_empty()));
        let tombstone = &evs[3];
        assert!(tombstone.tombstone && tombstone.payload.is_empty());
        assert_eq!(tombstone.key.as_deref(), Some(&br#"{"id":2}"#[..]));
        assert_eq!(tombstone.dest, Dest::Named(Arc::from("shop.public.t")));
        // Keys and values as the line has them; no key for a keyless table.
        let first = PLAIN.lines().next().unwrap();
        assert!(first.contains(std::str::from_utf8(&evs[0].payload).unwrap()));
        assert!(evs[0]
            .payload
            .starts_with(br#"{"before":null,"after":{"id":1,"v":"a"}"#));
        assert!(evs[0].payload.ends_with(b"}") && !evs[0].tombstone);
        assert_eq!(evs[8].key, None);
        assert_eq!(evs[8].dest, Dest::Named(Arc::from("shop.public.k")));
        assert_eq!(evs[10].dest, Dest::Named(Arc::from("shop.message")));
        assert_eq!(evs[10].key.as_deref(), Some(&br#"{"prefix":"pfx"}"#[..]));
        // The commit time of what ends, for the lag.
        assert!(evs[7].boundary.unwrap().commit_time.is_some());
    }

    #[test]
    fn transaction_records_frame_and_end_transactions() {
        let mut f = Debezium::new();
        let evs = read(&mut f, &[METADATA]);
        let s = summary(&evs);
        // BEGIN shares its first event's position, before it.
        assert_eq!(s[0], ("BEGIN", 170168864, 0, None, Some(2369)));
        assert_eq!(s[1], ("c", 170168864, 1, None, Some(2369)));
        // END at the commit's end, where the next transaction starts: the
        // index keeps them apart.
        assert_eq!(s[7], ("tombstone", 170169368, 1, None, Some(2369)));
        assert_eq!(s[8], ("END", 170169480, E, Some(170169480), Some(2369)));
        assert_eq!(s[9], ("BEGIN", 170169480, 0, None, Some(2370)));
        assert_eq!(s[10], ("c", 170169480, 1, None, Some(2370)));
        assert_eq!(s[11], ("END", 170169592, E, Some(170169592), Some(2370)));
        assert_eq!(s[12], ("m", 170169656, 0, Some(170169656), None));
        assert_eq!(s[13], ("BEGIN", 170174664, 0, None, Some(2371)));
        assert_eq!(s[14], ("t", 170174664, 1, None, Some(2371)));
        assert_eq!(s[15], ("t", 170174664, 2, None, Some(2371)));
        // No boundaries other than the END records' and the message's.
        assert_eq!(
            evs.iter().filter(|e| e.boundary.is_some()).count(),
            5,
            "{s:?}"
        );
        assert!(evs.iter().all(|e| e.dest != Dest::Nowhere));
        assert_eq!(evs[8].dest, Dest::Named(Arc::from("shop.transaction")));
        assert_eq!(
            evs[8].key.as_deref(),
            Some(&br#"{"id":"2369:170169480"}"#[..])
        );
        // Identities are unique.
        let mut ids: Vec<_> = evs.iter().map(|e| e.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), evs.len());
        // Between a BEGIN and its END the relay does not take keepalives.
        let mut f = Debezium::new();
        let lines: Vec<&str> = METADATA.lines().collect();
        read(&mut f, &lines[..3]);
        assert!(f.in_transaction());
        read(&mut f, &lines[3..9]);
        assert!(!f.in_transaction());
        let mut plain = Debezium::new();
        read(&mut plain, &PLAIN.lines().take(2).collect::<Vec<_>>());
        assert!(
            !plain.in_transaction(),
            "nothing marks the end: keepalives go"
        );
    }

    #[test]
    fn schemas_on_give_the_same_events_with_their_schemas() {
        let evs = read(&mut Debezium::new(), &[SCHEMAS]);
        assert_eq!(
            summary(&evs),
            vec![
                ("BEGIN", 171116664, 0, None, Some(2374)),
                ("c", 171116664, 1, None, Some(2374)),
                ("d", 171116888, 0, None, Some(2374)),
                ("tombstone", 171116888, 1, None, Some(2374)),
                ("END", 171117000, E, Some(171117000), Some(2374)),
            ]
        );
        // Key and value byte for byte, schema included: the line is
        // `{"destination":..,"key":KEY,"value":VALUE}`.
        for (line, ev) in SCHEMAS.lines().zip(&evs) {
            let value: &[u8] = if ev.tombstone { b"null" } else { &ev.payload };
            let rebuilt = format!(
                "{{\"destination\":\"{}\",\"key\":{},\"value\":{}}}",
                match &ev.dest {
                    Dest::Named(n) => n.to_string(),
                    _ => String::new(),
                },
                std::str::from_utf8(ev.key.as_deref().unwrap()).unwrap(),
                std::str::from_utf8(value).unwrap()
            );
            assert_eq!(rebuilt, line);
            assert!(ev.tombstone || ev.payload.starts_with(br#"{"schema":"#));
        }
    }

    #[test]
    fn messages_cut_anywhere_give_the_same_events() {
        let lines: Vec<&str> = METADATA.lines().chain(PLAIN.lines()).collect();
        let whole = summary(&read(&mut Debezium::new(), &[&lines.join("\n")]));
        for cut in [1, 2, 3, 5] {
            let messages: Vec<String> = lines.chunks(cut).map(|c| c.join("\n")).collect();
            let refs: Vec<&str> = messages.iter().map(String::as_str).collect();
            assert_eq!(summary(&read(&mut Debezium::new(), &refs)), whole);
        }
    }

    #[test]
    fn a_new_session_numbers_again_from_where_it_starts() {
        let lines: Vec<&str> = PLAIN.lines().collect();
        let mut f = Debezium::new();
        let first = summary(&read(&mut f, &lines[..5]));
        f.session_start();
        // The same transaction sent again: the same identities.
        let again = summary(&read(&mut f, &lines[..5]));
        assert_eq!(first, again);
    }

    #[test]
    fn options_and_bad_input() {
        let f = Debezium::new();
        let opts = |list: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = list
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            f.plugin_options(&owned)
        };
        assert_eq!(
            opts(&[("topic.prefix", "shop")]).unwrap(),
            vec![
                ("format-version".to_string(), "debezium".to_string()),
                ("topic.prefix".to_string(), "shop".to_string())
            ]
        );
        assert!(opts(&[("format-version", "Debezium"), ("topic.prefix", "a")]).is_ok());
        assert!(opts(&[]).unwrap_err().0.contains("needs topic.prefix"));
        assert!(opts(&[("topic.prefix", "a b")])
            .unwrap_err()
            .0
            .contains("invalid"));
        assert!(opts(&[("format-version", "3"), ("topic.prefix", "a")])
            .unwrap_err()
            .0
            .contains("contradicts"));
        assert_eq!(
            f.topic_prefix(&[("topic.prefix".into(), "shop".into())]),
            Some("shop".into())
        );
        let mut f = Debezium::new();
        for text in [
            "not json",
            r#"{"destination":"a","key":null}"#,
            r#"{"destination":"a","key":null,"value":[1]}"#,
            r#"{"destination":"a","key":null,"value":{"status":"END","id":"x"}}"#,
            r#"{"destination":"a","key":null,"value":{"op":"c","source":{"txId":1}}}"#,
            r#"{"destination":"a","key":null,"value":{"op":"c","source":{"lsn":1,"txId":-1}}}"#,
        ] {
            f.session_start();
            let mut out = Vec::new();
            let e = f.message(0, &Bytes::from(text), &mut out).unwrap_err();
            assert!(e.0.starts_with("Debezium format line"), "{text}: {e}");
        }
        // A record without a source outside any transaction: placed at the
        // message's position.
        let mut out = Vec::new();
        f.message(
            7,
            &Bytes::from("{\"destination\":\"a\",\"key\":null,\"value\":{}}\n{\"destination\":\"a\",\"key\":null,\"value\":{}}"),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            summary(&out),
            vec![("other", 7, 0, None, None), ("other", 7, 1, None, None)]
        );
    }
}
