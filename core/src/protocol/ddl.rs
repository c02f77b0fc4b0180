//! DDL capture's message (prefix [`PREFIX`]): written by the event
//! trigger's function (`pubjson._ddl_event`, src/api/ddl_capture.rs) as a
//! transactional logical message, read back by the decoder, which gives it
//! to the format as a DDL event (format 3's `DDL` object). docs/ddl.md is
//! the user's description.
//!
//! The content is JSON text in the server's encoding. Any role may emit a
//! message with the prefix (`pg_logical_emit_message` is PUBLIC), so
//! [`parse`] reads it as untrusted input: a content that is not the
//! trigger's shape is not a DDL event (the decoder then treats it as an
//! ordinary message). Strings are decoded to their bytes, so a format
//! writes them again with its own encoder: the output is valid JSON in
//! every server encoding (PostgreSQL's JSON output, like [`write`], escapes
//! only ASCII characters, so decoding `\uXXXX` never turns database text
//! into UTF-8 bytes a non-UTF-8 database's rewrite would misread).

use crate::text::json::{push_escaped_text, push_i64, push_u64};

/// The prefix of the capture message.
pub const PREFIX: &[u8] = b"pubjson.ddl";

/// The most characters of a statement a message carries: every command of
/// a multi-statement query string carries the whole string, and a large
/// migration script must not make each of its commands write it again.
pub const COMMAND_CHARS: usize = 65536;

/// What a message says of the statement that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Outside a client's query (no statement text exists).
    NoStatement,
    /// Withheld: `pubjson.ddl_capture_command` is `none`, or the text
    /// could not be analysed (`text::sql_redact`).
    Withheld,
    Text {
        text: Vec<u8>,
        /// Cut at [`COMMAND_CHARS`].
        truncated: bool,
        /// Values that may be credentials were replaced.
        redacted: bool,
    },
}

/// One object a `ddl_command_end` event's commands created or changed (a
/// row of `pg_event_trigger_ddl_commands()`), its text in the server's
/// encoding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandObject {
    pub classid: u32,
    pub objid: u32,
    pub subid: i32,
    /// The subcommand's own tag.
    pub tag: Option<Vec<u8>>,
    pub object_type: Option<Vec<u8>>,
    pub schema: Option<Vec<u8>>,
    pub identity: Option<Vec<u8>>,
}

/// The `objects` array of a `ddl_command_end` message (a `sql_drop`
/// event's comes as JSON from its SQL query, in the same shape without
/// `tag`).
pub fn objects_json(objects: &[CommandObject]) -> Vec<u8> {
    let mut out = b"[".to_vec();
    for (i, o) in objects.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"type\":");
        push_nullable(&mut out, o.object_type.as_deref());
        out.extend_from_slice(b",\"schema\":");
        push_nullable(&mut out, o.schema.as_deref());
        out.extend_from_slice(b",\"identity\":");
        push_nullable(&mut out, o.identity.as_deref());
        out.extend_from_slice(b",\"oid\":");
        push_u64(&mut out, o.objid.into());
        out.extend_from_slice(b",\"classid\":");
        push_u64(&mut out, o.classid.into());
        out.extend_from_slice(b",\"subid\":");
        push_i64(&mut out, o.subid.into());
        out.extend_from_slice(b",\"tag\":");
        push_nullable(&mut out, o.tag.as_deref());
        out.push(b'}');
    }
    out.push(b']');
    out
}

fn push_nullable(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        Some(s) => push_escaped_text(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// The parts of one message.
pub struct Message<'a> {
    /// `ddl_command_end` or `sql_drop`.
    pub event: &'a [u8],
    /// The command tag.
    pub tag: &'a [u8],
    pub command: &'a Command,
    pub role: &'a [u8],
    pub search_path: &'a [u8],
    /// The objects, a JSON array ([`objects_json`]).
    pub objects: &'a [u8],
    /// OIDs of the tables the command changed.
    pub relations: &'a [u32],
    /// For a DROP: the publications that published a dropped table, a JSON
    /// array of strings.
    pub publications: &'a [u8],
    /// The (sub)transaction that ran the command (0: none has an xid): the
    /// decoder gives a streamed event the subtransaction's xid, so that a
    /// consumer drops it with a rolled-back savepoint.
    pub xid: u32,
}

/// The message's content (what [`parse`] reads), in the server's
/// encoding.
pub fn write(m: &Message<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + m.objects.len());
    out.extend_from_slice(b"{\"event\":");
    push_escaped_text(&mut out, m.event);
    out.extend_from_slice(b",\"tag\":");
    push_escaped_text(&mut out, m.tag);
    out.extend_from_slice(b",\"command\":");
    let (truncated, redacted) = match m.command {
        Command::Text {
            text,
            truncated,
            redacted,
        } => {
            push_escaped_text(&mut out, text);
            (*truncated, *redacted)
        }
        Command::NoStatement => {
            out.extend_from_slice(b"null");
            (false, false)
        }
        Command::Withheld => {
            out.extend_from_slice(b"null");
            (false, true)
        }
    };
    out.extend_from_slice(b",\"command_truncated\":");
    out.extend_from_slice(if truncated { b"true" } else { b"false" });
    out.extend_from_slice(b",\"command_redacted\":");
    out.extend_from_slice(if redacted { b"true" } else { b"false" });
    out.extend_from_slice(b",\"role\":");
    push_escaped_text(&mut out, m.role);
    out.extend_from_slice(b",\"search_path\":");
    push_escaped_text(&mut out, m.search_path);
    out.extend_from_slice(b",\"objects\":");
    out.extend_from_slice(m.objects);
    out.extend_from_slice(b",\"relations\":[");
    for (i, relid) in m.relations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(&mut out, (*relid).into());
    }
    out.extend_from_slice(b"],\"publications\":");
    out.extend_from_slice(m.publications);
    out.extend_from_slice(b",\"xid\":");
    push_u64(&mut out, m.xid.into());
    out.push(b'}');
    out
}

/// A JSON value of the capture message (strings as decoded bytes, in the
/// database encoding).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    /// The number's text, as written.
    Number(Vec<u8>),
    String(Vec<u8>),
    Array(Vec<Json>),
    Object(Vec<(Vec<u8>, Json)>),
}

/// The capture message has two levels of nesting below the top object;
/// anything deeper is not its shape.
const MAX_DEPTH: usize = 4;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.skip_ws();
        (self.s.get(self.i) == Some(&b)).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8], value: Json) -> Option<Json> {
        let end = self.i.checked_add(word.len())?;
        (self.s.get(self.i..end) == Some(word)).then(|| {
            self.i = end;
            value
        })
    }

    fn value(&mut self, depth: usize) -> Option<Json> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_ws();
        match *self.s.get(self.i)? {
            b'n' => self.literal(b"null", Json::Null),
            b't' => self.literal(b"true", Json::Bool(true)),
            b'f' => self.literal(b"false", Json::Bool(false)),
            b'"' => self.string().map(Json::String),
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                if self.eat(b']').is_some() {
                    return Some(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if self.eat(b']').is_some() {
                        return Some(Json::Array(items));
                    }
                    self.eat(b',')?;
                }
            }
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                if self.eat(b'}').is_some() {
                    return Some(Json::Object(members));
                }
                loop {
                    self.skip_ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return None;
                    }
                    let key = self.string()?;
                    self.eat(b':')?;
                    members.push((key, self.value(depth + 1)?));
                    if self.eat(b'}').is_some() {
                        return Some(Json::Object(members));
                    }
                    self.eat(b',')?;
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                self.i += 1;
                while matches!(
                    self.s.get(self.i),
                    Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                ) {
                    self.i += 1;
                }
                let text = &self.s[start..self.i];
                // Only integers: the message's numbers are OIDs and
                // sub-ids; anything else is not its shape.
                let digits = text.strip_prefix(b"-").unwrap_or(text);
                (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit))
                    .then(|| Json::Number(text.to_vec()))
            }
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.i.checked_add(4)?;
        let hex = self.s.get(self.i..end)?;
        let text = std::str::from_utf8(hex).ok()?;
        let v = u32::from_str_radix(text, 16).ok()?;
        self.i = end;
        Some(v)
    }

    /// A string at `self.i` (its opening quote), decoded.
    fn string(&mut self) -> Option<Vec<u8>> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let b = *self.s.get(self.i)?;
            self.i += 1;
            match b {
                b'"' => return Some(out),
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code) {
                                // A surrogate pair.
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return None;
                                }
                                self.i += 2;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return None;
                                }
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            }
                            let c = char::from_u32(code)?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return None,
                    }
                }
                // A raw control character is not JSON.
                0x00..=0x1f => return None,
                _ => out.push(b),
            }
        }
    }
}

fn parse_json(s: &[u8]) -> Option<Json> {
    let mut p = Parser { s, i: 0 };
    let v = p.value(0)?;
    p.skip_ws();
    (p.i == s.len()).then_some(v)
}

/// One object a DDL command created, changed or dropped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DdlObject {
    /// `pg_event_trigger_ddl_commands().object_type` (or the dropped
    /// object's), e.g. `table`, `index`, `table column`.
    pub object_type: Option<Vec<u8>>,
    pub schema: Option<Vec<u8>>,
    /// The object's identity (`schema.name`, quoted where needed).
    pub identity: Option<Vec<u8>>,
    pub oid: Option<u32>,
    pub classid: Option<u32>,
    pub subid: Option<i32>,
    /// The subcommand's own tag (ddl_command_end only).
    pub tag: Option<Vec<u8>>,
}

/// A capture message, decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DdlEvent {
    /// `ddl_command_end` or `sql_drop`.
    pub event: Vec<u8>,
    /// The command tag (`CREATE TABLE`, `ALTER TABLE`, `DROP TABLE`, ...).
    pub tag: Vec<u8>,
    /// The statement text (`current_query()`: the client's whole query
    /// string) with every value that may be a credential replaced; `None`
    /// when withheld or outside a client's statement.
    pub command: Option<Vec<u8>>,
    /// The trigger cut `command` to its first 65536 characters.
    pub command_truncated: bool,
    /// Values of `command` were replaced, or all of it withheld.
    pub command_redacted: bool,
    pub role: Vec<u8>,
    pub search_path: Vec<u8>,
    pub objects: Vec<DdlObject>,
    /// OIDs of the tables whose definition the command changed.
    pub relations: Vec<u32>,
    /// For a DROP: the publications that published a table it dropped.
    pub publications: Vec<Vec<u8>>,
    /// The (sub)transaction that ran the command, when the message says
    /// (and it had an xid).
    pub xid: Option<u32>,
}

impl DdlEvent {
    /// A DROP command's event: its tables are gone from the catalog.
    pub fn is_drop(&self) -> bool {
        self.event == b"sql_drop"
    }

    /// Whether the command dropped a table (or partitioned table).
    pub fn drops_table(&self) -> bool {
        self.is_drop()
            && self.objects.iter().any(|o| {
                matches!(
                    o.object_type.as_deref(),
                    Some(b"table" | b"partitioned table")
                )
            })
    }
}

fn text(v: &Json) -> Option<Option<Vec<u8>>> {
    match v {
        Json::Null => Some(None),
        Json::String(s) => Some(Some(s.clone())),
        _ => None,
    }
}

/// An integer, written as a JSON number or as a string of digits
/// (json_build_object writes an `oid` as a string).
fn integer<T: std::str::FromStr>(v: &Json) -> Option<Option<T>> {
    let digits = match v {
        Json::Null => return Some(None),
        Json::Number(n) => n,
        Json::String(s) => s,
        _ => return None,
    };
    std::str::from_utf8(digits).ok()?.parse().ok().map(Some)
}

fn member<'j>(members: &'j [(Vec<u8>, Json)], key: &[u8]) -> Option<&'j Json> {
    members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn object(v: &Json) -> Option<DdlObject> {
    let Json::Object(m) = v else {
        return None;
    };
    let opt = |key: &[u8]| member(m, key).unwrap_or(&Json::Null);
    Some(DdlObject {
        object_type: text(opt(b"type"))?,
        schema: text(opt(b"schema"))?,
        identity: text(opt(b"identity"))?,
        oid: integer(opt(b"oid"))?,
        classid: integer(opt(b"classid"))?,
        subid: integer(opt(b"subid"))?,
        tag: text(opt(b"tag"))?,
    })
}

/// Decodes a capture message's content; `None` when it is not the
/// trigger's shape (see the module comment).
pub fn parse(content: &[u8]) -> Option<DdlEvent> {
    let Json::Object(m) = parse_json(content)? else {
        return None;
    };
    let required = |key: &[u8]| match member(&m, key) {
        Some(Json::String(s)) => Some(s.clone()),
        _ => None,
    };
    let event = required(b"event")?;
    if event != b"ddl_command_end" && event != b"sql_drop" {
        return None;
    }
    let Some(Json::Array(objects)) = member(&m, b"objects") else {
        return None;
    };
    let relations = match member(&m, b"relations") {
        None => Vec::new(),
        Some(Json::Array(r)) => r
            .iter()
            .map(|v| integer::<u32>(v).and_then(|o| o))
            .collect::<Option<Vec<_>>>()?,
        Some(_) => return None,
    };
    let publications = match member(&m, b"publications") {
        None => Vec::new(),
        Some(Json::Array(p)) => p
            .iter()
            .map(|v| match v {
                Json::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
        Some(_) => return None,
    };
    let flag = |key: &[u8]| match member(&m, key) {
        None | Some(Json::Bool(false)) => Some(false),
        Some(Json::Bool(true)) => Some(true),
        Some(_) => None,
    };
    Some(DdlEvent {
        publications,
        command_truncated: flag(b"command_truncated")?,
        command_redacted: flag(b"command_redacted")?,
        event,
        tag: required(b"tag")?,
        command: text(member(&m, b"command")?)?,
        role: required(b"role")?,
        search_path: required(b"search_path")?,
        objects: objects.iter().map(object).collect::<Option<Vec<_>>>()?,
        relations,
        xid: match member(&m, b"xid") {
            None => None,
            Some(v) => integer::<u32>(v)?.filter(|&x| x != 0),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(text: &[u8], truncated: bool, redacted: bool) -> Command {
        Command::Text {
            text: text.to_vec(),
            truncated,
            redacted,
        }
    }

    fn message<'a>(command: &'a Command, objects: &'a [u8], relations: &'a [u32]) -> Message<'a> {
        Message {
            event: b"ddl_command_end",
            tag: b"CREATE TABLE",
            command,
            role: b"alice",
            search_path: b"\"$user\", public",
            objects,
            relations,
            publications: b"[]",
            xid: 0,
        }
    }

    #[test]
    fn message_has_every_key_in_order() {
        let command = text(b"create table \"t\" (a int);\n", false, false);
        let m = write(&message(
            &command,
            b"[{\"type\":\"table\"}]",
            &[16384, 16390],
        ));
        assert_eq!(
            m,
            b"{\"event\":\"ddl_command_end\",\"tag\":\"CREATE TABLE\",\
\"command\":\"create table \\\"t\\\" (a int);\\n\",\"command_truncated\":false,\
\"command_redacted\":false,\"role\":\"alice\",\"search_path\":\"\\\"$user\\\", public\",\
\"objects\":[{\"type\":\"table\"}],\"relations\":[16384,16390],\"publications\":[],\"xid\":0}"
                .to_vec()
        );
    }

    #[test]
    fn no_statement_withheld_and_cut_statements() {
        let cases = [
            (Command::NoStatement, None, false, false),
            (Command::Withheld, None, false, true),
            (
                text(b"alter", true, false),
                Some(&b"alter"[..]),
                true,
                false,
            ),
            (
                text(b"x '[redacted]'", false, true),
                Some(&b"x '[redacted]'"[..]),
                false,
                true,
            ),
        ];
        for (command, shown, truncated, redacted) in cases {
            let m = write(&message(&command, b"[]", &[]));
            let e = parse(&m).expect("a capture message");
            assert_eq!(e.command.as_deref(), shown, "{command:?}");
            assert_eq!(
                (e.command_truncated, e.command_redacted),
                (truncated, redacted)
            );
        }
    }

    #[test]
    fn what_is_written_is_read_back() {
        // Non-ASCII bytes of a non-UTF-8 server encoding (LATIN1 "é" is
        // 0xE9) stay as they are, as json_build_object leaves them.
        let objects = objects_json(&[CommandObject {
            classid: 1259,
            objid: 16384,
            subid: -3,
            tag: Some(b"CREATE TABLE".to_vec()),
            object_type: Some(b"table".to_vec()),
            schema: None,
            identity: Some(b"public.\xe9".to_vec()),
        }]);
        let command = text(b"create table t (\xe9 int)", false, false);
        let m = write(&message(&command, &objects, &[16384]));
        assert!(m.windows(2).any(|w| w == b"(\xe9"));
        let e = parse(&m).expect("a capture message");
        assert_eq!(e.relations, vec![16384]);
        assert_eq!(e.command, Some(b"create table t (\xe9 int)".to_vec()));
        let o = &e.objects[0];
        assert_eq!(
            (o.oid, o.classid, o.subid),
            (Some(16384), Some(1259), Some(-3))
        );
        assert_eq!(o.schema, None);
        assert_eq!(o.identity.as_deref(), Some(&b"public.\xe9"[..]));
        assert_eq!(o.tag.as_deref(), Some(&b"CREATE TABLE"[..]));
    }

    proptest! {
        /// Whatever bytes the names and the statement hold, the message
        /// reads back as written.
        #[test]
        fn any_message_round_trips(
            tag in proptest::collection::vec(1u8.., 0..40),
            statement in proptest::collection::vec(any::<u8>(), 0..80),
            identity in proptest::collection::vec(1u8.., 0..40),
            role in proptest::collection::vec(1u8.., 0..20),
            objid in any::<u32>(),
            subid in any::<i32>(),
            relations in proptest::collection::vec(any::<u32>(), 0..4),
            drop in any::<bool>(),
        ) {
            let objects = objects_json(&[CommandObject {
                classid: 1259,
                objid,
                subid,
                tag: Some(tag.clone()),
                object_type: Some(b"table".to_vec()),
                schema: Some(b"public".to_vec()),
                identity: Some(identity.clone()),
            }]);
            let command = text(&statement, false, false);
            let m = Message {
                event: if drop { b"sql_drop" } else { b"ddl_command_end" },
                tag: &tag,
                command: &command,
                role: &role,
                search_path: b"public",
                objects: &objects,
                relations: &relations,
                publications: b"[\"p\"]",
                xid: objid,
            };
            let e = parse(&write(&m)).expect("what write writes parses");
            prop_assert_eq!(e.is_drop(), drop);
            prop_assert_eq!(&e.tag, &tag);
            prop_assert_eq!(e.command.as_deref(), Some(&statement[..]));
            prop_assert_eq!(&e.role, &role);
            prop_assert_eq!(&e.relations, &relations);
            prop_assert_eq!(&e.publications, &vec![b"p".to_vec()]);
            prop_assert_eq!(e.objects[0].identity.as_deref(), Some(&identity[..]));
            prop_assert_eq!(e.objects[0].oid, Some(objid));
            prop_assert_eq!(e.objects[0].subid, Some(subid));
            prop_assert_eq!(e.xid, (objid != 0).then_some(objid));
        }

        /// Arbitrary bytes never panic the parser.
        #[test]
        fn any_bytes_are_safe(content in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&content);
        }
    }

    const TRIGGER_OUTPUT: &[u8] = br#"{"event" : "ddl_command_end", "tag" : "ALTER TABLE", "command" : "ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1", "role" : "bob", "search_path" : "\"$user\", public", "objects" : [{"type" : "table", "schema" : "public", "identity" : "public.\"we\"\"ird\\\"", "oid" : "16420", "classid" : "1259", "subid" : 0, "tag" : "ALTER TABLE"}], "relations" : ["16420"]}"#;

    #[test]
    fn parses_json_build_object_output() {
        let e = parse(TRIGGER_OUTPUT).expect("the trigger's shape");
        assert_eq!(e.event, b"ddl_command_end");
        assert_eq!(e.tag, b"ALTER TABLE");
        assert_eq!(
            e.command.as_deref(),
            Some(&b"ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1"[..])
        );
        assert_eq!(e.search_path, b"\"$user\", public");
        assert_eq!(e.relations, vec![16420]);
        let o = &e.objects[0];
        assert_eq!(o.identity.as_deref(), Some(&b"public.\"we\"\"ird\\\""[..]));
        assert_eq!(
            (o.oid, o.classid, o.subid),
            (Some(16420), Some(1259), Some(0))
        );
        assert!(!e.is_drop());
    }

    #[test]
    fn drops_and_publications() {
        let content = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"DROP TABLE t","role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.t","oid":"5","classid":"1259","subid":0}],"relations":[]}"#;
        let e = parse(content).expect("a drop");
        assert!(e.drops_table());
        assert!(e.publications.is_empty());
        let with_pubs = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":["a","b c"]}"#;
        let p = parse(with_pubs).expect("publications");
        assert_eq!(p.publications, vec![b"a".to_vec(), b"b c".to_vec()]);
        let bad = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":[1]}"#;
        assert_eq!(parse(bad), None);
    }

    #[test]
    fn flags_must_be_booleans() {
        for key in ["command_truncated", "command_redacted"] {
            let bad = format!(
                r#"{{"event":"ddl_command_end","tag":"T","command":"C","{key}":"yes","role":"r","search_path":"p","objects":[]}}"#
            );
            assert_eq!(parse(bad.as_bytes()), None, "{key}");
        }
    }

    #[test]
    fn null_members_and_escapes() {
        let content = br#"{"event":"ddl_command_end","tag":"GRANT","command":"\u0001\ud83d\ude00\u00e9","role":"r","search_path":"","objects":[{"type":"SCHEMA","schema":null,"identity":null,"oid":null,"classid":null,"subid":null,"tag":"GRANT"}],"relations":[]}"#;
        let e = parse(content).expect("nulls are allowed");
        assert_eq!(
            e.command.as_deref(),
            Some("\u{1}\u{1F600}\u{e9}".as_bytes())
        );
        assert_eq!(e.objects[0].oid, None);
    }

    #[test]
    fn other_contents_are_not_events() {
        for bad in [
            &b""[..],
            b"null",
            b"[]",
            b"{}",
            b"not json",
            br#"{"event":"ddl_command_end"}"#,
            br#"{"event":"other","tag":"t","command":"c","role":"r","search_path":"p","objects":[]}"#,
            br#"{"event":"sql_drop","tag":"t","command":"c","role":"r","search_path":"p","objects":[1]}"#,
            br#"{"event":"sql_drop","tag":"t","command":"c","role":"r","search_path":"p","objects":[],"relations":["x"]}"#,
            br#"{"event":"sql_drop","tag":"t","command":"c","role":"r","search_path":"p","objects":[]} x"#,
            br#"{"event":"sql_drop","tag":"t","command":"c","role":"r","search_path":"p","objects":[],"relations":[1.5]}"#,
            b"{\"event\":\"sql_drop\",\"tag\":\"t\x01\",\"command\":\"c\",\"role\":\"r\",\"search_path\":\"p\",\"objects\":[]}",
            br#"{"event":"sql_drop","tag":"\ud800","command":"c","role":"r","search_path":"p","objects":[]}"#,
            br#"{"a":[[[[[[[[1]]]]]]]]}"#,
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
