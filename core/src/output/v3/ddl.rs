//! Format 3's `DDL` object (pure code): a DDL event (DDL capture's
//! message, read by [`crate::protocol::ddl`]) as format 3 writes it.
//! docs/ddl.md is the user's description.
//!
//! Every string of the event is written again with the format's own
//! encoder, so the output is valid JSON in every server encoding (the bytes
//! of a non-UTF-8 database go through the same ASCII rewrite as every
//! format 3 message).

use crate::protocol::ddl::DdlEvent;
use crate::text::json::{push_json_string, push_lsn, push_u64};

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
    use crate::protocol::ddl::parse;
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
            let event = parse(&bytes).expect("the trigger's shape");
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
            if let Some(event) = parse(&content) {
                let mut out = Vec::new();
                ddl_object(&mut out, &event, Some(1), 1, &[]);
                prop_assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
            }
        }
    }

    const TRIGGER_OUTPUT: &[u8] = br#"{"event" : "ddl_command_end", "tag" : "ALTER TABLE", "command" : "ALTER TABLE \"we\"\"ird\\\" ADD b int;\nSELECT 1", "role" : "bob", "search_path" : "\"$user\", public", "objects" : [{"type" : "table", "schema" : "public", "identity" : "public.\"we\"\"ird\\\"", "oid" : "16420", "classid" : "1259", "subid" : 0, "tag" : "ALTER TABLE"}], "relations" : ["16420"]}"#;

    #[test]
    fn renders_valid_json_with_the_same_strings() {
        let e = parse(TRIGGER_OUTPUT).expect("the trigger's shape");
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
        let e = parse(content).expect("a drop");
        assert!(e.drops_table());
        assert!(e.publications.is_empty());
        let mut rendered = Vec::new();
        ddl_object(&mut rendered, &parse(br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":["a\"b"]}"#).expect("drop"), None, 1, &[]);
        let r: serde_json::Value = serde_json::from_slice(&rendered).expect("valid JSON");
        assert_eq!(r["publications"], serde_json::json!(["a\"b"]));
        let with_pubs = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":["a","b c"]}"#;
        let p = parse(with_pubs).expect("publications");
        assert_eq!(p.publications, vec![b"a".to_vec(), b"b c".to_vec()]);
        let bad = br#"{"event":"sql_drop","tag":"DROP TABLE","command":"c","role":"r","search_path":"p","objects":[],"publications":[1]}"#;
        assert_eq!(parse(bad), None);
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
        let e = parse(redacted).expect("redacted");
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
        let e = parse(withheld).expect("withheld");
        assert_eq!(e.command, None);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert!(v["command"].is_null());
        assert_eq!(v["command_redacted"], true);
        // Neither flag: no key.
        let plain = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"c","role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let mut out = Vec::new();
        ddl_object(&mut out, &parse(plain).expect("plain"), None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert!(v.get("command_redacted").is_none());
        let bad = br#"{"event":"ddl_command_end","tag":"T","command":"C","command_redacted":1,"role":"r","search_path":"p","objects":[]}"#;
        assert!(parse(bad).is_none());
    }

    #[test]
    fn a_truncated_command_says_so() {
        let cut = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE","command_truncated":true,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse(cut).expect("the trigger's shape");
        assert!(e.command_truncated);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["command_truncated"], true);
        let whole = br#"{"event":"ddl_command_end","tag":"CREATE TABLE","command":"CREATE","command_truncated":false,"role":"r","search_path":"p","objects":[],"relations":[]}"#;
        let e = parse(whole).expect("the trigger's shape");
        assert!(!e.command_truncated);
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert!(v.get("command_truncated").is_none());
        let bad = br#"{"event":"ddl_command_end","tag":"T","command":"C","command_truncated":"yes","role":"r","search_path":"p","objects":[]}"#;
        assert_eq!(parse(bad), None);
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
        let e = parse(&content).expect("raw bytes in strings");
        assert_eq!(e.command.as_deref().and_then(<[u8]>::last), Some(&b')'));
        let mut out = Vec::new();
        ddl_object(&mut out, &e, None, 1, &[]);
        assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok());
    }
}
