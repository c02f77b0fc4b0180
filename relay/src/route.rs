//! Where events go: subject (NATS) or topic (Kafka) templates, with the
//! schema and table names escaped so that any name gives a valid,
//! distinct token (pure).
//!
//! Escaping (both brokers): ASCII letters, digits and `_` stay; every
//! other byte of the name's UTF-8 becomes `-` and two upper-case hex
//! digits (`order items` → `order-20items`, `-` → `-2D`). The result is a
//! valid NATS token (no `.`, `*`, `>` or blank) and valid in a Kafka topic
//! name (`[A-Za-z0-9._-]`), and two names never give the same token.
//!
//! A destination the format names itself (the Debezium format's topic) is
//! Kafka's topic as it is; its NATS subject is [`nats_subject`].

use crate::format::{Dest, TableName};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// `name` escaped into one token.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("-{b:02X}"));
        }
    }
    out
}

/// The NATS subject of a Kafka topic name: `.` separates tokens in both,
/// so `shop.public.orders` stays `shop.public.orders` (and
/// `shop.public.>` subscribes to a schema). What NATS refuses is written
/// with `%`, which no topic name holds: an empty token (a name that starts
/// or ends with `.`, or holds `..`) becomes `%`, and a byte outside
/// `[A-Za-z0-9_-]` within a token `%` and two hex digits. Two topics never
/// share a subject.
pub fn nats_subject(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len());
    for (i, token) in topic.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        if token.is_empty() {
            out.push('%');
        }
        for b in token.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// A topic name Kafka takes: 1 to 249 of `[A-Za-z0-9._-]`, not `.` or `..`.
fn kafka_topic_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= KAFKA_MAX_TOPIC
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Database,
    Schema,
    Table,
    Slot,
}

/// A destination template: text with `{database}`, `{schema}`, `{table}`
/// and `{slot}` (escaped when filled in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
    source: String,
}

/// Which broker's naming rules a template must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Nats,
    Kafka,
}

impl Template {
    /// Parses `text`; `table_level`: whether `{schema}` and `{table}` may
    /// appear (only in the per-table template).
    pub fn parse(text: &str, naming: Naming, table_level: bool) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| TemplateError(format!("template \"{text}\": unclosed {{")))?;
            let piece = match &rest[open + 1..close] {
                "database" => Piece::Database,
                "slot" => Piece::Slot,
                "schema" if table_level => Piece::Schema,
                "table" if table_level => Piece::Table,
                "schema" | "table" => {
                    return Err(TemplateError(format!(
                        "template \"{text}\": {{schema}} and {{table}} only apply to the table template"
                    )))
                }
                other => {
                    return Err(TemplateError(format!(
                        "template \"{text}\": unknown placeholder {{{other}}} (use {{database}}, {{schema}}, {{table}}, {{slot}})"
                    )))
                }
            };
            pieces.push(piece);
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        // The fixed text must itself be valid for the broker.
        for p in &pieces {
            if let Piece::Text(t) = p {
                let ok = match naming {
                    Naming::Nats => t
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>'),
                    Naming::Kafka => t
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
                };
                if !ok {
                    return Err(TemplateError(match naming {
                        Naming::Nats => format!("subject template \"{text}\": its fixed text may not contain blanks, * or >"),
                        Naming::Kafka => format!("topic template \"{text}\": its fixed text may only contain letters, digits, '.', '_' and '-'"),
                    }));
                }
            }
        }
        if naming == Naming::Nats
            && (text.starts_with('.') || text.ends_with('.') || text.contains(".."))
        {
            return Err(TemplateError(format!(
                "subject template \"{text}\": empty token"
            )));
        }
        if pieces.is_empty() {
            return Err(TemplateError("empty template".into()));
        }
        Ok(Template {
            pieces,
            source: text.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The destination for `table` (None for the non-table templates).
    pub fn fill(&self, database: &str, slot: &str, table: Option<&TableName>) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Database => out.push_str(&escape(database)),
                Piece::Slot => out.push_str(&escape(slot)),
                Piece::Schema => {
                    out.push_str(&escape(table.map(|t| t.schema.as_str()).unwrap_or("")))
                }
                Piece::Table => {
                    out.push_str(&escape(table.map(|t| t.table.as_str()).unwrap_or("")))
                }
            }
        }
        out
    }
}

/// The templates of one relay.
#[derive(Debug, Clone)]
pub struct Routes {
    pub table: Template,
    pub transactions: Option<Template>,
    pub messages: Option<Template>,
    pub ddl: Option<Template>,
    pub relations: Option<Template>,
}

/// Routes filled in for one database and slot, with the table destinations
/// cached.
pub struct Router {
    routes: Routes,
    database: String,
    slot: String,
    fixed: [Option<Arc<str>>; 4],
    tables: HashMap<TableName, Arc<str>>,
    /// Destinations named by the format, checked (Kafka) or mapped (NATS).
    named: HashMap<Arc<str>, Arc<str>>,
    naming: Naming,
}

/// Kafka's limit on a topic name's length.
const KAFKA_MAX_TOPIC: usize = 249;

impl Router {
    pub fn new(routes: Routes, naming: Naming, database: &str, slot: &str) -> Router {
        let fill =
            |t: &Option<Template>| t.as_ref().map(|t| Arc::from(t.fill(database, slot, None)));
        let fixed = [
            fill(&routes.transactions),
            fill(&routes.messages),
            fill(&routes.ddl),
            fill(&routes.relations),
        ];
        Router {
            routes,
            database: database.to_string(),
            slot: slot.to_string(),
            fixed,
            tables: HashMap::new(),
            named: HashMap::new(),
            naming,
        }
    }

    /// Where `dest` goes; `Ok(None)` when the user routes it nowhere.
    pub fn route(&mut self, dest: &Dest) -> Result<Option<Arc<str>>, TemplateError> {
        let name = match dest {
            Dest::Table(t) => {
                if let Some(s) = self.tables.get(t) {
                    return Ok(Some(s.clone()));
                }
                let s: Arc<str> =
                    Arc::from(self.routes.table.fill(&self.database, &self.slot, Some(t)));
                if self.naming == Naming::Kafka && s.len() > KAFKA_MAX_TOPIC {
                    return Err(TemplateError(format!(
                        "topic name for table \"{}\".\"{}\" is longer than Kafka's {KAFKA_MAX_TOPIC} characters: {s}",
                        t.schema, t.table
                    )));
                }
                self.tables.insert(t.clone(), s.clone());
                return Ok(Some(s));
            }
            Dest::Transactions => self.fixed[0].clone(),
            Dest::Messages => self.fixed[1].clone(),
            Dest::Ddl => self.fixed[2].clone(),
            Dest::Relations => self.fixed[3].clone(),
            Dest::Named(topic) => {
                if let Some(s) = self.named.get(topic) {
                    return Ok(Some(s.clone()));
                }
                let s: Arc<str> = match self.naming {
                    Naming::Kafka if kafka_topic_ok(topic) => topic.clone(),
                    Naming::Kafka => {
                        return Err(TemplateError(format!(
                            "\"{topic}\" is not a Kafka topic name (1 to {KAFKA_MAX_TOPIC} letters, digits, '.', '_' and '-')"
                        )))
                    }
                    Naming::Nats => Arc::from(nats_subject(topic)),
                };
                self.named.insert(topic.clone(), s.clone());
                Some(s)
            }
            Dest::Nowhere => None,
        };
        Ok(name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escaping_byte_by_byte() {
        assert_eq!(escape("orders"), "orders");
        assert_eq!(escape("Order_Items2"), "Order_Items2");
        assert_eq!(escape("order items"), "order-20items");
        assert_eq!(escape("a.b*c>d"), "a-2Eb-2Ac-3Ed");
        assert_eq!(escape("x-y"), "x-2Dy");
        assert_eq!(escape("é"), "-C3-A9");
        assert_eq!(escape(""), "");
    }

    proptest! {
        #[test]
        fn escaped_names_are_valid_tokens_and_distinct(a in ".{0,12}", b in ".{0,12}") {
            let (ea, eb) = (escape(&a), escape(&b));
            prop_assert!(ea.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'));
            prop_assert_eq!(a == b, ea == eb);
        }
    }

    #[test]
    fn templates_fill_and_check() {
        let t = Template::parse("pubjson.{database}.{schema}.{table}", Naming::Nats, true).unwrap();
        let name = TableName {
            schema: "public".into(),
            table: "my table".into(),
        };
        assert_eq!(
            t.fill("shop", "s1", Some(&name)),
            "pubjson.shop.public.my-20table"
        );
        assert!(Template::parse("a.{nope}", Naming::Nats, true).is_err());
        assert!(Template::parse("a.{table}", Naming::Nats, false).is_err());
        assert!(Template::parse("a b.{table}", Naming::Nats, true).is_err());
        assert!(Template::parse("a.*", Naming::Nats, true).is_err());
        assert!(Template::parse("a..{table}", Naming::Nats, true).is_err());
        assert!(Template::parse("a/{table}", Naming::Kafka, true).is_err());
        assert!(Template::parse("cdc_{slot}-x.{table}", Naming::Kafka, true).is_ok());
        assert!(Template::parse("{", Naming::Kafka, true).is_err());
    }

    #[test]
    fn topics_as_nats_subjects() {
        assert_eq!(nats_subject("shop.public.orders"), "shop.public.orders");
        assert_eq!(nats_subject("shop.public.a-b_C9"), "shop.public.a-b_C9");
        // Empty tokens: a table `.x`, `x.`, `a..b`.
        assert_eq!(nats_subject("shop.public..x"), "shop.public.%.x");
        assert_eq!(nats_subject("shop.public.x."), "shop.public.x.%");
        assert_eq!(nats_subject("shop.public.a...b"), "shop.public.a.%.%.b");
        assert_eq!(nats_subject(".shop"), "%.shop");
        // Outside Kafka's names (never from pubjson): escaped, not lost.
        assert_eq!(nats_subject("a b.c*>"), "a%20b.c%2A%3E");
        assert_eq!(nats_subject("%"), "%25");
    }

    proptest! {
        #[test]
        fn topic_subjects_are_valid_and_distinct(a in "[a-z._-]{0,8}", b in "[a-z._-]{0,8}") {
            let (sa, sb) = (nats_subject(&a), nats_subject(&b));
            prop_assert!(sa.split('.').all(|t| !t.is_empty() && !t.contains(['*', '>', ' '])));
            prop_assert_eq!(a == b, sa == sb);
        }
    }

    #[test]
    fn named_destinations_checked_for_kafka_mapped_for_nats() {
        let routes = || Routes {
            table: Template::parse("p.{schema}.{table}", Naming::Kafka, true).unwrap(),
            transactions: None,
            messages: None,
            ddl: None,
            relations: None,
        };
        let mut kafka = Router::new(routes(), Naming::Kafka, "d", "s");
        let named = |s: &str| Dest::Named(Arc::from(s));
        assert_eq!(
            &*kafka.route(&named("shop.public..x")).unwrap().unwrap(),
            "shop.public..x"
        );
        assert!(kafka.route(&named("a b")).is_err());
        assert!(kafka.route(&named(&"x".repeat(250))).is_err());
        assert_eq!(kafka.route(&Dest::Nowhere).unwrap(), None);
        let mut nats = Router::new(routes(), Naming::Nats, "d", "s");
        assert_eq!(
            &*nats.route(&named("shop.public..x")).unwrap().unwrap(),
            "shop.public.%.x"
        );
        assert_eq!(
            &*nats.route(&named("shop.public..x")).unwrap().unwrap(),
            "shop.public.%.x"
        );
    }

    #[test]
    fn router_caches_and_drops_unrouted() {
        let routes = Routes {
            table: Template::parse("p.{schema}.{table}", Naming::Kafka, true).unwrap(),
            transactions: Some(Template::parse("p.{database}.tx", Naming::Kafka, false).unwrap()),
            messages: None,
            ddl: None,
            relations: None,
        };
        let mut r = Router::new(routes, Naming::Kafka, "d b", "s");
        let t = Dest::Table(TableName {
            schema: "s".into(),
            table: "t".into(),
        });
        assert_eq!(&*r.route(&t).unwrap().unwrap(), "p.s.t");
        assert_eq!(
            &*r.route(&Dest::Transactions).unwrap().unwrap(),
            "p.d-20b.tx"
        );
        assert_eq!(r.route(&Dest::Messages).unwrap(), None);
        let long = Dest::Table(TableName {
            schema: "s".into(),
            table: "ü".repeat(60),
        });
        assert!(r.route(&long).is_err());
    }
}
