//! Format 3's `DDL` object (pure code): what the capture message of
//! `src/api/ddl.sql` (prefix [`DDL_PREFIX`]) becomes. docs/ddl.md is the
//! user's description.
//!
//! The message's content is JSON text written by the event trigger, but any
//! role may emit a message with that prefix (`pg_logical_emit_message` is
//! PUBLIC), so it is parsed here as untrusted input: a content that is not
//! the trigger's shape is not a DDL event (the decoder then writes it as an
//! ordinary message). Every string is decoded and written again with the
//! format's own encoder, so the output is valid JSON in every server
//! encoding (the bytes of a non-UTF-8 database go through the same ASCII
//! rewrite as every format 3 message). PostgreSQL's JSON output escapes
//! only ASCII characters (`escape_json`), so decoding `\uXXXX` never turns
//! database text into UTF-8 bytes the rewrite would misread.

use crate::text::json::{push_json_string, push_lsn, push_u64};

/// The prefix of the capture message.
pub const DDL_PREFIX: &[u8] = b"pubjson.ddl";

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

fn parse(s: &[u8]) -> Option<Json> {
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
pub fn parse_event(content: &[u8]) -> Option<DdlEvent> {
    let Json::Object(m) = parse(content)? else {
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
    })
}

fn push_text(out: &mut Vec<u8>, key: &[u8], v: Option<&[u8]>) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    match v {
        Some(v) => push_json_string(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn push_number(out: &mut Vec<u8>, key: &[u8], v: Option<i64>) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    match v {
        Some(v) if v < 0 => {
            out.push(b'-');
            push_u64(out, v.unsigned_abs());
        }
        Some(v) => push_u64(out, v as u64),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes the `DDL` object: `relations` holds the R objects (format 3's
/// `relation_object`) of the changed tables the consumer is shown.
pub fn ddl_object(
    out: &mut Vec<u8>,
    event: &DdlEvent,
    stream_xid: Option<u32>,
    lsn: u64,
    relations: &[Vec<u8>],
) {
    out.extend_from_slice(b"{\"action\":\"DDL\"");
    if let Some(xid) = stream_xid {
        out.extend_from_slice(b",\"xid\":");
        push_u64(out, xid as u64);
    }
    out.extend_from_slice(b",\"lsn\":\"");
    push_lsn(out, lsn);
    out.push(b'"');
    push_text(out, b"event", Some(&event.event));
    push_text(out, b"tag", Some(&event.tag));
    push_text(out, b"command", event.command.as_deref());
    if event.command_truncated {
        out.extend_from_slice(b",\"command_truncated\":true");
    }
    if event.command_redacted {
        out.extend_from_slice(b",\"command_redacted\":true");
    }
    push_text(out, b"role", Some(&event.role));
    push_text(out, b"search_path", Some(&event.search_path));
    out.extend_from_slice(b",\"objects\":[");
    for (n, o) in event.objects.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.push(b'{');
        // push_text writes a leading comma: the first member is written
        // into a scratch and its comma dropped.
        let start = out.len();
        push_text(out, b"type", o.object_type.as_deref());
        out.remove(start);
        push_text(out, b"schema", o.schema.as_deref());
        push_text(out, b"identity", o.identity.as_deref());
        push_number(out, b"oid", o.oid.map(i64::from));
        push_number(out, b"classid", o.classid.map(i64::from));
        push_number(out, b"subid", o.subid.map(i64::from));
        if !event.is_drop() {
            push_text(out, b"tag", o.tag.as_deref());
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"publications\":[");
    for (n, p) in event.publications.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        push_json_string(out, p);
    }
    out.extend_from_slice(b"],\"relations\":[");
    for (n, r) in relations.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r);
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever text the trigger's JSON carries (any Unicode, quotes,
        /// backslashes, control characters), the DDL object is valid JSON
        /// with the same strings and numbers.
        #[test]
        fn any_strings_round_trip(
            tag in any::<String>(),
            command in any::<String>(),
            identity in any::<String>(),
            path in any::<String>(),
            oid in any::<u32>(),
            subid in any::<i32>(),
        ) {
            let content = serde_json::json!({
                "event": "ddl_command_end", "tag": tag, "command": command,
                "role": "r", "search_path": path,
                "objects": [{"type": "table", "schema": null, "identity": identity,
                             "oid": oid.to_string(), "classid": 1259, "subid": subid, "tag": tag}],
                "relations": [oid],
            });
            let bytes = serde_json::to_vec(&content).expect("serializes");
            let event = parse_event(&bytes).expect("the trigger's shape");
            prop_assert_eq!(&event.relations, &vec![oid]);
            let mut out = Vec::new();
            ddl_object(&mut out, &event, None, 1, &[]);
            let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
            prop_assert_eq!(&v["tag"], &content["tag"]);
            prop_assert_eq!(&v["command"], &content["command"]);
            prop_assert_eq!(&v["search_path"], &content["search_path"]);
            prop_assert_eq!(&v["objects"][0]["identity"], &content["objects"][0]["identity"]);
            prop_assert_eq!(v["objects"][0]["oid"].as_u64(), Some(oid as u64));
            prop_assert_eq!(v["objects"][0]["subid"].as_i64(), Some(subid as i64));
            prop_assert_eq!(&v["objects"][0]["schema"], &serde_json::Value::Null);
        }

        /// Arbitrary bytes never panic the parser, and what it accepts
        /// renders as valid JSON.
        #[test]
        fn any_bytes_are_safe(content in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(event) = parse_event(&content) {
                let mut out = Vec::new();
                ddl_object(&mut out, &event, Some(1), 1, &[]);
                prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
            }
        }
    }

    const TRIGGER_OUTPUT: &[u8] = br#"{"event" : "ddl_command_end", "tag" : "ALTER TABLE", "command" : "ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1", "role" : "bob", "search_path" : "\"$user\", public", "objects" : [{"type" : "table", "schema" : "public", "identity" : "public.\"we\"\"ird\\\"", "oid" : "16420", "classid" : "1259", "subid" : 0, "tag" : "ALTER TABLE"}], "relations" : ["16420"]}"#;

    #[test]
    fn parses_the_trigger_output() {
        let e = parse_event(TRIGGER_OUTPUT).expect("the trigger's shape");
        assert_eq!(e.event, b"ddl_command_end");
        assert_eq!(e.tag, b"ALTER TABLE");
        assert_eq!(
            e.command.as_deref(),
            Some(&b"ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1"[..])
        );
        assert_eq!(e.search_path, b"\"$user\", public");
        assert_eq!(e.relations, vec![16420]);
        assert_eq!(e.objects.len(), 1);
        let o = &e.objects[0];
        assert_eq!(o.identity.as_deref(), Some(&b"public.\"we\"\"ird\\\""[..]));
        assert_eq!(
            (o.oid, o.classid, o.subid),
            (Some(16420), Some(1259), Some(0))
        );
        assert!(!e.is_drop());
    }

    #[test]
    fn renders_valid_json_with_the_same_strings() {
        let e = parse_event(TRIGGER_OUTPUT).expect("the trigger's shape");
        let mut out = Vec::new();
        ddl_object(
            &mut out,
            &e,
            Some(7),
            0x1_0000_0010,
            &[b"{\"action\":\"R\"}".to_vec()],
        );
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["action"], "DDL");
        assert_eq!(v["xid"], 7);
        assert_eq!(v["lsn"], "1/10");
        assert_eq!(v["tag"], "ALTER TABLE");
        assert_eq!(
            v["command"],
            "ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1"
        );
        assert_eq!(v["role"], "bob");
        assert_eq!(v["objects"][0]["type"], "table");
        assert_eq!(v["objects"][0]["identity"], "public.\"we\"\"ird\\\"");
        assert_eq!(v["objects"][0]["oid"], 16420);
        assert_eq!(v["objects"][0]["tag"], "ALTER TABLE");
        assert_eq!(v["relations"][0]["action"], "R");
    }

    #[test]
    fn drops_have_no_subcommand_tags() {
        let content = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"DROP TABLE t","role":"r","search_path":"public","objects":[{"type":"table","schema":"public","identity":"public.t","oid":"5","classid":"1259","subid":0}],"relations":[]}"#;
        let e = parse_event(content).expect("a drop");
        assert!(e.drops_table());
        assert!(e.publications.is_empty());
        let mut rendered = Vec::new();
        ddl_object(&mut rendered, &parse_event(br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":["a\"b"]}"#).expect("drop"), None, 1, &[]);
        let r: serde_json::Value = serde_json::from_slice(&rendered).expect("valid JSON");
        assert_eq!(r["publications"], serde_json::json!(["a\"b"]));
        let with_pubs = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":["a","b c"]}"#;
        let p = parse_event(with_pubs).expect("publications");
        assert_eq!(p.publications, vec![b"a".to_vec(), b"b c".to_vec()]);
        let bad = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":[1]}"#;
        assert_eq!(parse_event(bad), None);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert!(v.get("xid").is_none());
        assert!(v["objects"][0].get("tag").is_none());
        assert_eq!(v["relations"], serde_json::json!([]));
    }

    #[test]
    fn a_redacted_or_withheld_command_says_so() {
        let redacted = br#"{"event":"ddl_command_end","tag":"CREATE USER MAPPING","command":"CREATE USER MAPPING FOR r SERVER s OPTIONS (password '[redacted]')","command_truncated":false,"command_redacted":true,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse_event(redacted).expect("redacted");
        assert!(e.command_redacted);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(v["command_redacted"], true);
        assert_eq!(
            v["command"],
            "CREATE USER MAPPING FOR r SERVER s OPTIONS (password '[redacted]')"
        );
        let withheld = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":null,"command_truncated":false,"command_redacted":true,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse_event(withheld).expect("withheld");
        assert_eq!(e.command, None);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert!(v["command"].is_null());
        assert_eq!(v["command_redacted"], true);
        // Neither flag: no key.
        let plain = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"c","role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let mut out = Vec::new();
        ddl_object(&mut out, &parse_event(plain).expect("plain"), None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert!(v.get("command_redacted").is_none());
        let bad = br#"{"event":"ddl_command_end","tag":"T","command":"C","command_redacted":1,"role":"r","search_path":"p","objects":[]}"#;
        assert!(parse_event(bad).is_none());
    }

    #[test]
    fn a_truncated_command_says_so() {
        let cut = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE","command_truncated":true,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse_event(cut).expect("the trigger's shape");
        assert!(e.command_truncated);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["command_truncated"], true);
        let whole = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE","command_truncated":false,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse_event(whole).expect("the trigger's shape");
        assert!(!e.command_truncated);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert!(v.get("command_truncated").is_none());
        let bad = br#"{"event":"ddl_command_end","tag":"T","command":"C","command_truncated":"yes","role":"r","search_path":"p","objects":[]}"#;
        assert_eq!(parse_event(bad), None);
    }

    #[test]
    fn null_members_and_escapes() {
        let content = br#"{"event":"ddl_command_end","tag":"GRANT","command":"\u0001\ud83d\ude00\u00e9","role":"r","search_path":"","objects":[{"type":"SCHEMA","schema":null,"identity":null,"oid":null,"classid":null,"subid":null,"tag":"GRANT"}],"relations":[]}"#;
        let e = parse_event(content).expect("nulls are allowed");
        assert_eq!(
            e.command.as_deref(),
            Some("\u{1}\u{1F600}\u{e9}".as_bytes())
        );
        assert_eq!(e.objects[0].oid, None);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["objects"][0]["oid"], serde_json::Value::Null);
        assert_eq!(v["command"], "\u{1}\u{1F600}\u{e9}");
    }

    #[test]
    fn database_bytes_pass_through_to_the_encoder() {
        // A LATIN1 database's é (0xE9) is not UTF-8: the encoder escapes it
        // (the ASCII rewrite converts it later), the output stays JSON.
        let mut content =
            br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE TABLE "#.to_vec();
        content.push(0xE9);
        content.extend_from_slice(
            br#" ()","role":"r","search_path":"p","objects":[],"relations":[]}"#,
        );
        let e = parse_event(&content).expect("raw bytes in strings");
        assert_eq!(e.command.as_deref().and_then(<[u8]>::last), Some(&b')'));
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
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
            assert_eq!(parse_event(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
