//! Format 3's encoder, byte by byte, and the property that every object
//! parses with serde_json.

use super::value::{is_json_number, push_array, push_base64, push_compact_json, push_value, Style};
use super::*;
use crate::model::ValueKind;
use crate::model::{ChangeHeader, ChangeSource, Value};
use crate::options::Batching;
use crate::output::format::{ChangeContext, RelationRender, StreamedCommit};
use crate::output::jsonb::tests::{any_value as any_jsonb, encode as encode_jsonb, num, V};
use crate::output::test_values::{Elements, OneValue};
use crate::text::encoding::ServerEncoding;
use crate::text::json::json_string;
use crate::text::json::tests::{bytes, text};
use proptest::prelude::*;
use serde_json::{json, Value as Json};

fn st(numbers_as_strings: bool) -> Style {
    Style {
        numbers_as_strings,
        ascii: false,
    }
}

fn value(v: Value<'_>) -> String {
    let mut out = Vec::new();
    push_value(&mut out, v, st(false)).unwrap();
    String::from_utf8(out).unwrap()
}

fn numeric(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

#[test]
fn numbers_keep_postgres_digits_and_specials_are_strings() {
    assert_eq!(value(Value::Int(-32768)), "-32768");
    assert_eq!(value(Value::Int(i64::MIN)), "-9223372036854775808");
    assert_eq!(value(Value::Int(4_294_967_295)), "4294967295");
    for text in ["1.5", "-0", "1e+100", "1.5e-07", "3.4028235e+38", "0"] {
        assert_eq!(value(Value::Float(text.as_bytes())), text);
    }
    assert_eq!(value(Value::Float(b"NaN")), r#""NaN""#);
    assert_eq!(value(Value::Float(b"Infinity")), r#""Infinity""#);
    assert_eq!(value(Value::Float(b"-Infinity")), r#""-Infinity""#);
    // Anything not in JSON's number grammar stays valid JSON as a string.
    assert_eq!(value(Value::Float(b".5")), r#"".5""#);
    // numeric from its binary form: 1.50 keeps its scale.
    assert_eq!(
        value(Value::Numeric(&numeric(&[0x8000 | (2 << 7), 1, 5000]))),
        "1.50"
    );
    assert_eq!(value(Value::Numeric(&numeric(&[0x8000 | 0x2000, 7]))), "-7");
    assert_eq!(value(Value::Numeric(&numeric(&[0xC000]))), r#""NaN""#);
    assert_eq!(value(Value::Numeric(&numeric(&[0xD000]))), r#""Infinity""#);
    assert_eq!(value(Value::Numeric(&numeric(&[0xF000]))), r#""-Infinity""#);
    // Unreadable: nothing written, the caller uses the output function.
    let mut out = b"x".to_vec();
    assert!(push_value(&mut out, Value::Numeric(&[0xff]), st(false)).is_err());
    assert_eq!(out, b"x");
    // numeric-data-types-as-string quotes them all.
    let mut out = Vec::new();
    push_value(&mut out, Value::Int(5), st(true)).unwrap();
    push_value(&mut out, Value::Float(b"2.5"), st(true)).unwrap();
    push_value(
        &mut out,
        Value::Numeric(&numeric(&[0x8000 | 0x2000, 7])),
        st(true),
    )
    .unwrap();
    assert_eq!(out, br#""5""2.5""-7""#);
}

#[test]
fn json_number_grammar() {
    for ok in ["0", "-0", "12", "1.0", "1e5", "1E+5", "-1.25e-10"] {
        assert!(is_json_number(ok.as_bytes()), "{ok}");
    }
    for bad in [
        "", "-", "01", "1.", ".1", "+1", "1e", "1e+", "NaN", "1 ", "0x10",
    ] {
        assert!(!is_json_number(bad.as_bytes()), "{bad}");
    }
}

#[test]
fn bools_strings_and_hostile_text() {
    assert_eq!(value(Value::Bool(true)), "true");
    assert_eq!(value(Value::Bool(false)), "false");
    assert_eq!(
        value(Value::Text(b"a\"b\\c\n\t\x01/\xe2\x80\xa8")),
        "\"a\\\"b\\\\c\\n\\t\\u0001/\u{2028}\""
    );
    // Invalid UTF-8 becomes \u00XX (the server-encoding layer converts it).
    assert_eq!(value(Value::Text(b"\xff")), r#""\u00ff""#);
}

#[test]
fn json_is_embedded_on_one_line() {
    let doc = b" {\"a\" : [1, 2,\n 3],\t\"s\": \"x y\\\" \\n z\"}\r\n";
    let got = value(Value::Json(doc));
    assert_eq!(got, r#"{"a":[1,2,3],"s":"x y\" \n z"}"#);
    assert!(!got.contains('\n'));
    let mut out = Vec::new();
    push_compact_json(&mut out, b"\"only a string\"");
    assert_eq!(out, br#""only a string""#);
}

#[test]
fn json_null_and_wrapper_objects_are_wrapped() {
    assert_eq!(
        super::value::WRAPPER_OPEN,
        [&b"{\""[..], super::value::WRAPPER_KEY, b"\":"].concat()
    );
    // The JSON null document is not SQL NULL (written `null`).
    assert_eq!(value(Value::Json(b" null ")), r#"{"$json":null}"#);
    let mut body = Vec::new();
    encode_jsonb(&V::Null, &mut body, 32);
    assert_eq!(value(Value::Jsonb(&body)), r#"{"$json":null}"#);
    // An object with a $json member (however its name is escaped) would
    // read as a wrapper: wrapped too.
    for doc in [
        r#"{"$json":1}"#,
        r#"{"a":[{"$json":2}],"$json":{"x":null}}"#,
        r#"{"\u0024js\u006fn":3}"#,
        r#"{"$json":1,"$json":2}"#,
    ] {
        assert_eq!(
            value(Value::Json(doc.as_bytes())),
            format!(r#"{{"$json":{doc}}}"#),
            "{doc}"
        );
    }
    let mut body = Vec::new();
    encode_jsonb(&V::Obj(vec![(b"$json".to_vec(), V::Null)]), &mut body, 32);
    assert_eq!(value(Value::Jsonb(&body)), r#"{"$json":{"$json":null}}"#);
    // Everything else is as it is: nested nulls, other names, strings.
    for doc in [
        "[null]",
        r#"{"a":null}"#,
        r#"{"a":{"$json":1}}"#,
        r#"["$json",{"b":"$json"}]"#,
        r#"{"$jso\n":1}"#,
        r#"{"$JSON":1}"#,
        r#"{"$jsonx":1}"#,
        r#"{"$js":1,"json":2}"#,
        r#"{"x":"\"$json\""}"#,
        r#""null""#,
        "0",
    ] {
        assert_eq!(value(Value::Json(doc.as_bytes())), doc, "{doc}");
    }
    // Marked for the ASCII rewrite: the same decisions.
    let mut out = Vec::new();
    push_value(
        &mut out,
        Value::Json(br#"{"\u0024json":"\\"}"#),
        Style {
            numbers_as_strings: false,
            ascii: true,
        },
    )
    .unwrap();
    assert_eq!(out, b"{\"$json\":{\"\0u0024json\":\"\0\0\"}}");
}

#[test]
fn intervals_are_iso8601_strings() {
    let v = Value::Interval {
        months: 0,
        days: -1,
        micros: -7_384_000_000,
    };
    assert_eq!(value(v), r#""P-1DT-2H-3M-4S""#);
    let zero = Value::Interval {
        months: 0,
        days: 0,
        micros: 0,
    };
    assert_eq!(value(zero), r#""PT0S""#);
}

#[test]
fn jsonb_is_embedded_compact() {
    let doc = V::Obj(vec![
        (
            b"k".to_vec(),
            V::Arr(vec![num("1.50"), V::Null, V::Bool(true)]),
        ),
        (
            b"nested \"q\"".to_vec(),
            V::Obj(vec![(b"x".to_vec(), V::Str(b"line\nbreak".to_vec()))]),
        ),
    ]);
    let mut body = Vec::new();
    encode_jsonb(&doc, &mut body, 32);
    assert_eq!(
        value(Value::Jsonb(&body)),
        r#"{"k":[1.50,null,true],"nested \"q\"":{"x":"line\nbreak"}}"#
    );
    let mut out = Vec::new();
    assert!(push_value(&mut out, Value::Jsonb(&[1, 2]), st(false)).is_err());
    assert!(out.is_empty());
}

#[test]
fn bytea_is_base64() {
    let mut out = Vec::new();
    push_base64(&mut out, b"");
    push_base64(&mut out, b"f");
    push_base64(&mut out, b"fo");
    push_base64(&mut out, b"foo");
    push_base64(&mut out, b"foob");
    push_base64(&mut out, &[0, 0xff, 0xfe, 0x80]);
    assert_eq!(out, br#""""Zg==""Zm8=""Zm9v""Zm9vYg==""AP/+gA==""#);
}

#[test]
fn timestamps_and_dates_are_iso_8601() {
    let t = (9467 * 86_400 + 11 * 3600 + 12 * 60 + 50) * 1_000_000 + 120_197;
    assert_eq!(
        value(Value::TimestampTz(t)),
        r#""2025-12-02T11:12:50.120197Z""#
    );
    assert_eq!(
        value(Value::Timestamp(t)),
        r#""2025-12-02T11:12:50.120197""#
    );
    assert_eq!(value(Value::TimestampTz(i64::MAX)), r#""infinity""#);
    assert_eq!(value(Value::Timestamp(i64::MIN)), r#""-infinity""#);
    assert_eq!(value(Value::Date(9467)), r#""2025-12-02""#);
    assert_eq!(value(Value::Date(-746_117)), r#""-000043-03-15""#);
    assert_eq!(value(Value::Date(i32::MAX)), r#""infinity""#);
    assert_eq!(value(Value::Date(i32::MIN)), r#""-infinity""#);
    let mut out = Vec::new();
    assert!(push_value(&mut out, Value::Date(-3_000_000), st(false)).is_err());
    assert!(out.is_empty());
}

fn array(dims: &[usize], elements: &[Option<i64>]) -> String {
    let mut out = Vec::new();
    push_array(&mut out, dims, |out, i| -> Result<(), ()> {
        match elements[i] {
            Some(v) => push_value(out, Value::Int(v), st(false)).map_err(|_| ()),
            None => {
                out.extend_from_slice(b"null");
                Ok(())
            }
        }
    })
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn arrays_nest_per_dimension_with_nulls() {
    assert_eq!(array(&[], &[]), "[]");
    assert_eq!(array(&[0], &[]), "[]");
    assert_eq!(array(&[3], &[Some(1), None, Some(3)]), "[1,null,3]");
    let six: Vec<_> = (1..=6).map(Some).collect();
    assert_eq!(array(&[2, 3], &six), "[[1,2,3],[4,5,6]]");
    assert_eq!(array(&[3, 2], &six), "[[1,2],[3,4],[5,6]]");
    let eight: Vec<_> = (1..=8).map(|i| (i % 3 != 0).then_some(i)).collect();
    assert_eq!(
        array(&[2, 2, 2], &eight),
        "[[[1,2],[null,4]],[[5,null],[7,8]]]"
    );
}

/// A test value: owned, turned into a [`Value`] when written.
#[derive(Debug, Clone)]
enum T {
    Null,
    Toast,
    Int(i64),
    Text(Vec<u8>),
    Json(Vec<u8>),
    Bytea(Vec<u8>),
    Ts(i64),
    Num(Vec<u8>),
}

struct Row {
    values: Vec<T>,
    visible: Vec<bool>,
}

impl Row {
    fn new(values: Vec<T>) -> Self {
        let visible = vec![true; values.len()];
        Row { values, visible }
    }
}

impl TupleValues for Row {
    fn is_visible(&self, c: &ColumnMeta) -> bool {
        self.visible[c.attr_index]
    }
    fn is_null(&self, c: &ColumnMeta) -> bool {
        matches!(self.values[c.attr_index], T::Null)
    }
    fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
        matches!(self.values[c.attr_index], T::Toast)
    }
    fn image(&self, c: &ColumnMeta) -> Option<crate::model::Image<'_>> {
        use crate::model::Image;
        match &self.values[c.attr_index] {
            T::Int(i) | T::Ts(i) => Some(Image::Word(*i as u64)),
            T::Text(b) | T::Json(b) | T::Bytea(b) | T::Num(b) => Some(Image::Bytes(b)),
            T::Null | T::Toast => None,
        }
    }
    fn value<'a>(&'a self, c: &'a ColumnMeta) -> Value<'a> {
        match &self.values[c.attr_index] {
            T::Int(i) => Value::Int(*i),
            T::Text(t) => Value::Text(t),
            T::Json(t) => Value::Json(t),
            T::Bytea(b) => Value::Bytea(b),
            T::Ts(t) => Value::TimestampTz(*t),
            T::Num(b) => Value::Numeric(b),
            T::Null | T::Toast => unreachable!("not a value"),
        }
    }
    /// What an output function would print, for the fallback.
    fn text(&self, c: &ColumnMeta) -> &[u8] {
        match &self.values[c.attr_index] {
            T::Text(b) | T::Json(b) => b,
            _ => b"<text>",
        }
    }
}

fn column(i: usize, name: &[u8], ty: &str, oid: u32, key: bool) -> ColumnMeta {
    ColumnMeta {
        attr_index: i,
        attnum: i as i16 + 1,
        name_json: json_string(name),
        type_json: json_string(ty.as_bytes()),
        type_oid_text: oid.to_string().into_bytes(),
        kind: ValueKind::Text,
        not_null: key,
        default_json: None,
        in_primary_key: key,
        in_identity_key: key,
        // Every test column may hold an unchanged TOAST value.
        is_varlena: true,
        domain_base: None,
        attlen: -1,
        byval: false,
        details: None,
    }
}

fn relation(identity: ReplicaIdentity) -> RelationMeta {
    RelationMeta {
        relid: 16384,
        schema: b"public".to_vec(),
        table: b"t".to_vec(),
        server_encoding: ServerEncoding::Utf8,
        schema_json: json_string(b"public"),
        table_json: json_string(b"t"),
        columns: vec![
            column(0, b"id", "integer", 23, true),
            column(1, b"name", "text", 25, false),
            column(2, b"body", "text", 25, false),
        ],
        has_primary_key: true,
        has_identity_index: identity != ReplicaIdentity::Full,
        identity,
        unique_indexes: Vec::new(),
    }
}

/// The default options with one object per message (`batch-bytes` 0), so
/// that each of [`Messages`]'s messages is one object.
fn unbatched() -> Options {
    Options {
        batching: Batching::Off,
        ..Options::default()
    }
}

/// A sink that keeps every output message.
#[derive(Default)]
struct Messages {
    buf: Vec<u8>,
    written: Vec<String>,
}

impl Sink for Messages {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    fn write(&mut self, last: bool) {
        assert!(last, "format 3 writes whole messages");
        let message = String::from_utf8(std::mem::take(&mut self.buf)).unwrap();
        // Every message is JSON and one line.
        serde_json::from_str::<Json>(&message).unwrap_or_else(|e| panic!("{e}: {message}"));
        assert!(!message.contains('\n'));
        self.written.push(message);
    }
    fn write_at(&mut self, _lsn: u64) {
        self.write(true);
    }
}

fn txn() -> TxnInfo {
    TxnInfo {
        xid: 740,
        origin: 0,
        timestamp: Vec::new(),
        // 2025-12-02 11:12:50.120197 UTC
        commit_time: (9467 * 86_400 + 11 * 3600 + 12 * 60 + 50) * 1_000_000 + 120_197,
        final_lsn: 0x16B_3748,
        end_lsn: 0x16B_3778,
    }
}

#[allow(clippy::too_many_arguments)]
fn change(
    f: &mut Format3,
    sink: &mut Messages,
    rel: &RelationMeta,
    render: &RelationRender,
    header: ChangeHeader,
    new: Option<&mut Row>,
    old: Option<&mut Row>,
) {
    let txn = txn();
    let change = ChangeContext {
        txn: &txn,
        lsn: 0,
        header: &header,
        rel,
        render,
        new: new.map(|r| &*r as &dyn TupleValues),
        old: old.map(|r| &*r as &dyn TupleValues),
    };
    let warning = f.change(sink, &change).unwrap();
    assert_eq!(warning, None);
}

fn row(id: i64, name: &str, body: T) -> Row {
    Row::new(vec![T::Int(id), T::Text(name.as_bytes().to_vec()), body])
}

const R_DEFAULT: &str = r#"{"action":"R","relid":16384,"schema":"public","table":"t","identity":"default","columns":[{"name":"id","attnum":1,"type":"integer","typeoid":23,"key":true,"nullable":false},{"name":"name","attnum":2,"type":"text","typeoid":25,"key":false,"nullable":true},{"name":"body","attnum":3,"type":"text","typeoid":25,"key":false,"nullable":true}]}"#;

#[test]
fn a_transaction_with_r_once_and_every_change_kind() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default);
    let render = RelationRender::default();
    f.begin(&mut sink, &txn(), 1);
    let plain = ChangeHeader::plain;
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Insert),
        Some(&mut row(1, "a", T::Null)),
        None,
    );
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Insert),
        Some(&mut row(2, "b\"", T::Text(b"x".to_vec()))),
        None,
    );
    // An UPDATE whose body was an unchanged TOAST value, key unchanged.
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Update),
        Some(&mut row(2, "c", T::Toast)),
        None,
    );
    // The key changed: old carries the identity.
    let mut old = Row::new(vec![T::Int(2), T::Null, T::Null]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Update),
        Some(&mut row(3, "c", T::Toast)),
        Some(&mut old),
    );
    let mut old = Row::new(vec![T::Int(3), T::Null, T::Null]);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Delete),
        None,
        Some(&mut old),
    );
    f.truncate(&mut sink, &txn(), None, 0, &rel);
    f.message(&mut sink, &txn(), true, None, 0x20, b"p", b"hello");
    // The count is the core's (its record of the transaction).
    f.commit(&mut sink, &txn(), 0x16B_3748, 7);
    let want = [
        r#"{"action":"B","xid":740,"lsn":"0/16B3748","timestamp":"2025-12-02T11:12:50.120197Z"}"#,
        R_DEFAULT,
        r#"{"action":"I","relid":16384,"schema":"public","table":"t","new":{"id":1,"name":"a","body":null}}"#,
        r#"{"action":"I","relid":16384,"schema":"public","table":"t","new":{"id":2,"name":"b\"","body":"x"}}"#,
        r#"{"action":"U","relid":16384,"schema":"public","table":"t","new":{"id":2,"name":"c"},"unchanged":["body"]}"#,
        r#"{"action":"U","relid":16384,"schema":"public","table":"t","new":{"id":3,"name":"c"},"old":{"id":2},"unchanged":["body"]}"#,
        r#"{"action":"D","relid":16384,"schema":"public","table":"t","old":{"id":3}}"#,
        r#"{"action":"T","relid":16384,"schema":"public","table":"t"}"#,
        r#"{"action":"M","transactional":true,"lsn":"0/20","prefix":"p","content":"hello"}"#,
        r#"{"action":"C","xid":740,"lsn":"0/16B3748","nextlsn":"0/16B3778","timestamp":"2025-12-02T11:12:50.120197Z","changes":7}"#,
    ];
    assert_eq!(sink.written, want);
    // The relation is known in the next transaction.
    f.begin(&mut sink, &txn(), 1);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        plain(ChangeKind::Insert),
        Some(&mut row(9, "z", T::Null)),
        None,
    );
    f.message(&mut sink, &txn(), false, None, 0x30, b"p", b"\x00\xff");
    f.commit(&mut sink, &txn(), 0x16B_3748, 1);
    assert_eq!(sink.written.len(), 14);
    assert!(sink.written[11].starts_with(r#"{"action":"I""#));
    assert_eq!(
        sink.written[12],
        r#"{"action":"M","transactional":false,"lsn":"0/30","prefix":"p","content":"\u0000\u00ff"}"#
    );
    assert!(sink.written[13].ends_with(r#""changes":1}"#));
}

#[test]
fn changed_compares_values_not_what_they_render_as() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Full);
    let render = RelationRender::default();
    let header = ChangeHeader::plain(ChangeKind::Update);
    let json = |t: &str| T::Json(t.as_bytes().to_vec());
    // json's blanks are not rendered, but the value changed; the JSON
    // null document became SQL NULL; an equal value is unchanged.
    let cases = [
        (
            json(r#"{"a": 1}"#),
            json(r#"{"a":1}"#),
            r#""changed":["body"]"#,
        ),
        (json("null"), T::Null, r#""changed":["body"]"#),
        (T::Null, json("null"), r#""changed":["body"]"#),
        (json("null"), json("null"), r#""changed":[]"#),
    ];
    for (n, (before, after, changed)) in cases.into_iter().enumerate() {
        change(
            &mut f,
            &mut sink,
            &rel,
            &render,
            header,
            Some(&mut row(1, "a", after)),
            Some(&mut row(1, "a", before)),
        );
        let written = sink.written.last().unwrap();
        assert!(written.contains(changed), "case {n}: {written}");
    }
    assert!(sink.written[2].contains(
        r#""new":{"id":1,"name":"a","body":null},"old":{"id":1,"name":"a","body":{"$json":null}}"#
    ));
}

#[test]
fn r_columns_have_attnum_and_a_domains_base_type() {
    let mut rel = relation(ReplicaIdentity::Default);
    // A dropped column before "body": attnums are not positions.
    rel.columns[2].attnum = 5;
    rel.columns[1].type_json = json_string(b"public.email");
    rel.columns[1].type_oid_text = b"16390".to_vec();
    rel.columns[1].domain_base = Some((json_string(b"character varying(64)"), 1043));
    let mut out = Vec::new();
    relation_object(&mut out, &rel, &[true, true, true]);
    let r: Json = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        r["columns"],
        json!([
            {"name": "id", "attnum": 1, "type": "integer", "typeoid": 23, "key": true, "nullable": false},
            {"name": "name", "attnum": 2, "type": "public.email", "typeoid": 16390,
             "basetype": "character varying(64)", "basetypeoid": 1043, "key": false, "nullable": true},
            {"name": "body", "attnum": 5, "type": "text", "typeoid": 25, "key": false, "nullable": true}
        ])
    );
}

#[test]
fn full_identity_completes_toast_and_lists_changed_columns() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Full);
    let render = RelationRender::default();
    let mut old = row(1, "a", T::Text(b"big".to_vec()));
    let header = ChangeHeader::plain(ChangeKind::Update);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        header,
        Some(&mut row(1, "b", T::Toast)),
        Some(&mut old),
    );
    assert!(sink.written[0].contains(r#""identity":"full""#));
    assert!(sink.written[0].contains(
        r#"{"name":"name","attnum":2,"type":"text","typeoid":25,"key":true,"nullable":true}"#
    ));
    assert_eq!(
        sink.written[1],
        r#"{"action":"U","relid":16384,"schema":"public","table":"t","new":{"id":1,"name":"b","body":"big"},"old":{"id":1,"name":"a","body":"big"},"changed":["name"]}"#
    );
    // Nothing changed, a NULL appears: changed lists exactly that.
    let mut old = row(1, "b", T::Text(b"big".to_vec()));
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        header,
        Some(&mut row(1, "b", T::Null)),
        Some(&mut old),
    );
    assert!(
        sink.written[2].ends_with(r#","changed":["body"]}"#),
        "{}",
        sink.written[2]
    );
    let mut old = row(1, "b", T::Null);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        header,
        Some(&mut row(1, "b", T::Null)),
        Some(&mut old),
    );
    assert!(sink.written[3].ends_with(r#","changed":[]}"#));
    // A DELETE under FULL carries the whole old row, no changed list.
    let mut old = row(1, "b", T::Null);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeHeader::plain(ChangeKind::Delete),
        None,
        Some(&mut old),
    );
    assert_eq!(
        sink.written[4],
        r#"{"action":"D","relid":16384,"schema":"public","table":"t","old":{"id":1,"name":"b","body":null}}"#
    );
}

/// An item cut short by an ERROR PostgreSQL caught (its transaction
/// rolled back while decoded): the core takes back the unsent bytes, R
/// object included, and the format describes the relation again before
/// its next change, cache entry unchanged.
#[test]
fn an_interrupted_item_describes_its_relation_again() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default);
    let insert = ChangeHeader::plain(ChangeKind::Insert);
    let render = RelationRender::default();
    let insert_row = |f: &mut Format3, sink: &mut Messages, id| {
        let mut new = row(id, "a", T::Null);
        change(f, sink, &rel, &render, insert, Some(&mut new), None);
    };
    insert_row(&mut f, &mut sink, 1);
    assert_eq!(
        sink.written,
        [R_DEFAULT.to_string(), sink.written[1].clone()]
    );
    // Without an interruption the relation is not described again.
    insert_row(&mut f, &mut sink, 2);
    assert_eq!(sink.written.len(), 3);
    f.item_interrupted();
    insert_row(&mut f, &mut sink, 3);
    assert_eq!(sink.written[3], R_DEFAULT);
    assert!(sink.written[4].contains(r#""id":3"#), "{}", sink.written[4]);
    // Once.
    insert_row(&mut f, &mut sink, 4);
    assert_eq!(sink.written.len(), 6);
}

#[test]
fn r_is_resent_exactly_when_the_description_changes() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default);
    let insert = ChangeHeader::plain(ChangeKind::Insert);
    let render = RelationRender::default();
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        insert,
        Some(&mut row(1, "a", T::Null)),
        None,
    );
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        insert,
        Some(&mut row(2, "a", T::Null)),
        None,
    );
    assert_eq!(sink.written.len(), 3);
    // An invalidation rebuilds the cache entry: same description, no R.
    let rebuilt = RelationRender::default();
    change(
        &mut f,
        &mut sink,
        &rel,
        &rebuilt,
        insert,
        Some(&mut row(3, "a", T::Null)),
        None,
    );
    assert_eq!(sink.written.len(), 4);
    // A retyped column: R again, once.
    let mut retyped = rel.clone();
    retyped.columns[1].type_json = json_string(b"character varying(10)");
    retyped.columns[1].type_oid_text = b"1043".to_vec();
    let render2 = RelationRender::default();
    for id in 4..6 {
        change(
            &mut f,
            &mut sink,
            &retyped,
            &render2,
            insert,
            Some(&mut row(id, "a", T::Null)),
            None,
        );
    }
    assert_eq!(sink.written.len(), 7);
    assert!(sink.written[4].contains("character varying(10)"));
    // A column list (the publication changed): R describes only what is published.
    let mut published = row(6, "a", T::Null);
    published.visible = vec![true, false, true];
    change(
        &mut f,
        &mut sink,
        &retyped,
        &render2,
        insert,
        Some(&mut published),
        None,
    );
    assert_eq!(
        sink.written[7],
        r#"{"action":"R","relid":16384,"schema":"public","table":"t","identity":"default","columns":[{"name":"id","attnum":1,"type":"integer","typeoid":23,"key":true,"nullable":false},{"name":"body","attnum":3,"type":"text","typeoid":25,"key":false,"nullable":true}]}"#
    );
    assert_eq!(
        sink.written[8],
        r#"{"action":"I","relid":16384,"schema":"public","table":"t","new":{"id":6,"body":null}}"#
    );
    // Identity, renamed, dropped, added columns all differ from the last R.
    let mut changed = [
        relation(ReplicaIdentity::Full),
        rel.clone(),
        rel.clone(),
        rel.clone(),
    ];
    changed[1].columns[2].name_json = json_string(b"renamed");
    changed[2].columns.pop();
    changed[3]
        .columns
        .push(column(3, b"added", "integer", 23, false));
    for (n, rel) in changed.iter().enumerate() {
        let before = sink.written.len();
        let render = RelationRender::default();
        let mut values = vec![T::Int(1), T::Null, T::Null, T::Null];
        values.truncate(rel.columns.len().max(3));
        let mut r = Row::new(values);
        change(&mut f, &mut sink, rel, &render, insert, Some(&mut r), None);
        assert_eq!(sink.written.len(), before + 2, "case {n}");
        assert!(sink.written[before].starts_with(r#"{"action":"R""#));
    }
    // Another relation has its own R.
    let mut other = rel.clone();
    other.relid = 16400;
    other.table_json = json_string(b"u");
    let render3 = RelationRender::default();
    change(
        &mut f,
        &mut sink,
        &other,
        &render3,
        insert,
        Some(&mut row(1, "a", T::Null)),
        None,
    );
    assert!(sink.written[sink.written.len() - 2].contains(r#""relid":16400"#));
    // A new session (a new Format3) describes every relation again.
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    change(
        &mut f,
        &mut sink,
        &rel,
        &RelationRender::default(),
        insert,
        Some(&mut row(1, "a", T::Null)),
        None,
    );
    assert_eq!(sink.written[0], R_DEFAULT);
}

#[test]
fn streaming_two_phase_and_transformed_changes() {
    let mut f = Format3::new(&unbatched());
    let mut sink = Messages::default();
    let rel = relation(ReplicaIdentity::Default);
    let render = RelationRender::default();
    f.stream_start(&mut sink, 800, true);
    let header = ChangeHeader {
        kind: ChangeKind::Insert,
        transformed_from: Some(ChangeKind::Update),
        stream_xid: Some(801),
        source: ChangeSource::Wal,
    };
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        header,
        Some(&mut row(1, "a", T::Null)),
        None,
    );
    f.stream_stop(&mut sink, 800);
    f.stream_start(&mut sink, 800, false);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeHeader::plain_in(ChangeKind::Insert, Some(800)),
        Some(&mut row(2, "a", T::Null)),
        None,
    );
    f.stream_stop(&mut sink, 800);
    f.stream_abort(&mut sink, 800, 801, 0x40);
    let commit = StreamedCommit {
        xid: 800,
        commit_lsn: 0x50,
        end_lsn: 0x60,
        timestamp: b"ignored",
        commit_time: txn().commit_time,
        changes: 2,
    };
    f.stream_commit(&mut sink, &commit);
    let want = [
        r#"{"action":"S","xid":800,"first":true}"#,
        R_DEFAULT,
        r#"{"action":"I","xid":801,"transformedfrom":"U","relid":16384,"schema":"public","table":"t","new":{"id":1,"name":"a","body":null}}"#,
        r#"{"action":"E","xid":800}"#,
        r#"{"action":"S","xid":800,"first":false}"#,
        r#"{"action":"I","xid":800,"relid":16384,"schema":"public","table":"t","new":{"id":2,"name":"a","body":null}}"#,
        r#"{"action":"E","xid":800}"#,
        r#"{"action":"A","xid":800,"subxid":801,"lsn":"0/40"}"#,
        r#"{"action":"C","xid":800,"streamed":true,"lsn":"0/50","nextlsn":"0/60","timestamp":"2025-12-02T11:12:50.120197Z","changes":2}"#,
    ];
    assert_eq!(sink.written, want);

    // Two-phase: B, the change, P with its count; then CP and RP.
    sink.written.clear();
    f.begin(&mut sink, &txn(), 1);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeHeader::plain(ChangeKind::Insert),
        Some(&mut row(3, "a", T::Null)),
        None,
    );
    let prepared = PreparedTxn {
        xid: 740,
        gid: b"g\"1",
        end_lsn: 0x80,
        timestamp: b"ignored",
        time: 0,
        changes: 1,
    };
    f.prepare(&mut sink, &prepared, 0x70, false);
    f.two_phase(&mut sink, TwoPhaseEvent::CommitPrepared, &prepared, 0x90);
    f.two_phase(&mut sink, TwoPhaseEvent::RollbackPrepared, &prepared, 0x90);
    assert_eq!(
        sink.written[2],
        r#"{"action":"P","xid":740,"gid":"g\"1","lsn":"0/70","nextlsn":"0/80","timestamp":"2000-01-01T00:00:00Z","streamed":false,"changes":1}"#
    );
    assert_eq!(
        sink.written[3],
        r#"{"action":"CP","xid":740,"gid":"g\"1","lsn":"0/90","nextlsn":"0/80","timestamp":"2000-01-01T00:00:00Z"}"#
    );
    assert!(sink.written[4].starts_with(r#"{"action":"RP""#));
    // A streamed prepare counts the streamed changes.
    f.stream_start(&mut sink, 740, true);
    change(
        &mut f,
        &mut sink,
        &rel,
        &render,
        ChangeHeader::plain_in(ChangeKind::Insert, Some(740)),
        Some(&mut row(4, "a", T::Null)),
        None,
    );
    f.stream_stop(&mut sink, 740);
    f.prepare(&mut sink, &prepared, 0x70, true);
    assert!(sink
        .written
        .last()
        .unwrap()
        .ends_with(r#""streamed":true,"changes":1}"#));
}

#[test]
fn origin_and_skip_reasons() {
    let opts = Options {
        include_origin: true,
        ..unbatched()
    };
    let mut f = Format3::new(&opts);
    let mut sink = Messages::default();
    let mut t = txn();
    t.origin = 3;
    f.begin(&mut sink, &t, 1);
    assert!(sink.written[0].ends_with(r#","origin":3}"#));
    let rel = relation(ReplicaIdentity::Nothing);
    assert_eq!(f.skip_reason(ChangeKind::Update, &rel, true, false), None);
    assert_eq!(
        f.skip_reason(ChangeKind::Delete, &rel, false, false)
            .as_deref(),
        Some(r#"no tuple identifier for DELETE in table "public"."t""#)
    );
    assert!(f
        .skip_reason(ChangeKind::Insert, &rel, false, false)
        .is_some());
}

/// Any test value a row can hold.
fn any_cell() -> impl Strategy<Value = T> {
    prop_oneof![
        Just(T::Null),
        Just(T::Toast),
        any::<i64>().prop_map(T::Int),
        text(20).prop_map(|s| T::Text(s.into_bytes())),
        bytes(20).prop_map(T::Text),
        bytes(20).prop_map(T::Bytea),
        prop_oneof![
            (-211_000_000_000_000_000i64..9_000_000_000_000_000_000).prop_map(T::Ts),
            Just(T::Ts(i64::MAX)),
            Just(T::Ts(i64::MIN)),
        ],
        proptest::sample::select(
            &[
                [0x8000u16 | (2 << 7), 1, 5000],
                [0xC000, 0, 0],
                [0xD000, 0, 0]
            ][..]
        )
        .prop_map(|w| T::Num(numeric(&w[..if w[0] & 0xC000 == 0xC000 { 1 } else { 3 }]))),
        any_jsonb().prop_map(|v| {
            // json's text: jsonb's text form, which is valid JSON when its
            // strings are valid UTF-8.
            let mut body = Vec::new();
            encode_jsonb(&v, &mut body, 32);
            let mut text = Vec::new();
            crate::output::jsonb::jsonb_text(&body, &mut text);
            if serde_json::from_slice::<Json>(&text).is_ok() {
                T::Json(text)
            } else {
                T::Json(b"{\"fallback\": [1, \"a\"]}".to_vec())
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_object_parses_and_round_trips(
        names in proptest::collection::vec(text(8), 3),
        new in proptest::collection::vec(any_cell(), 3),
        old in proptest::collection::vec(any_cell(), 3),
        full in any::<bool>(),
        kind in proptest::sample::select(&[ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete][..]),
    ) {
        let mut rel = relation(if full { ReplicaIdentity::Full } else { ReplicaIdentity::Default });
        for (c, n) in rel.columns.iter_mut().zip(&names) {
            c.name_json = json_string(n.as_bytes());
        }
        let mut f = Format3::new(&unbatched());
        // Messages checks that every message parses and is one line.
        let mut sink = Messages::default();
        let mut new_row = Row::new(new.clone());
        let mut old_row = Row::new(old.into_iter().map(|v| if matches!(v, T::Toast) { T::Null } else { v }).collect());
        let (n, o) = match kind {
            ChangeKind::Insert => (Some(&mut new_row), None),
            ChangeKind::Update => (Some(&mut new_row), Some(&mut old_row)),
            ChangeKind::Delete => (None, Some(&mut old_row)),
        };
        change(&mut f, &mut sink, &rel, &RelationRender::default(), ChangeHeader::plain(kind), n, o);
        let object: Json = serde_json::from_str(sink.written.last().unwrap()).unwrap();
        if kind != ChangeKind::Delete {
            let new_obj = object["new"].as_object().unwrap();
            for (i, v) in new.iter().enumerate() {
                let key = &names[i];
                // Duplicate generated names collapse in a JSON object.
                if names.iter().filter(|n| *n == key).count() > 1 {
                    continue;
                }
                match v {
                    T::Null => prop_assert_eq!(&new_obj[key], &Json::Null),
                    T::Int(i) => prop_assert_eq!(&new_obj[key], &json!(i)),
                    T::Text(t) => {
                        if let Ok(s) = std::str::from_utf8(t) {
                            if !s.contains('\0') {
                                prop_assert_eq!(&new_obj[key], &json!(s));
                            }
                        }
                    }
                    T::Toast => {
                        let completed = full && kind == ChangeKind::Update;
                        prop_assert_eq!(new_obj.contains_key(key), completed && !matches!(old_row.values[i], T::Null));
                    }
                    _ => prop_assert!(new_obj.contains_key(key)),
                }
            }
        }
    }

    #[test]
    fn base64_matches_rfc_4648(data in bytes(64)) {
        let mut out = Vec::new();
        push_base64(&mut out, &data);
        let s: String = serde_json::from_slice(&out).unwrap();
        use base64::Engine;
        prop_assert_eq!(s, base64::engine::general_purpose::STANDARD.encode(&data));
    }

    #[test]
    fn numbers_are_json_numbers_or_strings(text in "[-+.eE0-9a-zA-Z]{0,12}") {
        let mut out = Vec::new();
        push_value(&mut out, Value::Float(text.as_bytes()), st(false)).unwrap();
        let v: Json = serde_json::from_slice(&out).unwrap();
        prop_assert!(v.is_number() || v == json!(text));
    }

    #[test]
    fn arrays_of_any_shape_parse(dims in proptest::collection::vec(0usize..4, 0..4), seed in any::<u64>()) {
        let total: usize = if dims.is_empty() { 0 } else { dims.iter().product() };
        let elements: Vec<Option<i64>> = (0..total)
            .map(|i| (!(seed >> (i % 64)) & 1 == 1).then_some(i as i64))
            .collect();
        let got: Json = serde_json::from_str(&array(&dims, &elements)).unwrap();
        // Walk down the first dimension's shape.
        let mut level = &got;
        for (d, &len) in dims.iter().enumerate() {
            if total == 0 {
                break;
            }
            let items = level.as_array().unwrap();
            prop_assert_eq!(items.len(), len, "dimension {}", d);
            level = &items[0];
        }
    }
}

fn column_value(tuple: &OneValue<'_>, style: Style) -> String {
    let col = column(0, b"c", "t", 25, false);
    let mut out = Vec::new();
    super::value::push_column(&mut out, tuple, &col, style);
    String::from_utf8(out).unwrap()
}

fn scalar<'v>(value: Value<'v>, text: &'v [u8]) -> OneValue<'v> {
    OneValue {
        value: Some(value),
        text,
        array: None,
    }
}

#[test]
fn unreadable_binary_forms_fall_back_to_the_output_function_text() {
    // numeric: the digits as a number; jsonb: the document; others: a string.
    assert_eq!(
        column_value(&scalar(Value::Numeric(&[0xff]), b"12.50"), st(false)),
        "12.50"
    );
    assert_eq!(
        column_value(&scalar(Value::Numeric(&[0xff]), b"12.50"), st(true)),
        r#""12.50""#
    );
    assert_eq!(
        column_value(&scalar(Value::Jsonb(&[1, 2]), br#"{"a": null}"#), st(false)),
        r#"{"a":null}"#
    );
    assert_eq!(
        column_value(&scalar(Value::Jsonb(&[1, 2]), b"null"), st(false)),
        r#"{"$json":null}"#
    );
    assert_eq!(
        column_value(
            &scalar(Value::Date(-3_000_000), b"6244-01-01 BC"),
            st(false)
        ),
        r#""6244-01-01 BC""#
    );
    // Any other type: its output function's text as a string.
    assert_eq!(
        column_value(&scalar(Value::OutputText(b"(1,\"a\")"), b""), st(false)),
        r#""(1,\"a\")""#
    );
}

#[test]
fn arrays_are_read_element_by_element() {
    let array = |elements: Vec<Option<Value<'static>>>, texts, dims, default_bounds| OneValue {
        value: None,
        text: b"[0:1]={1,2}",
        array: Some(Elements {
            dims,
            default_bounds,
            elements,
            texts,
        }),
    };
    let ints = array(
        vec![
            Some(Value::Int(1)),
            None,
            Some(Value::Int(3)),
            Some(Value::Int(4)),
        ],
        vec![b"1", b"", b"3", b"4"],
        vec![2, 2],
        true,
    );
    assert_eq!(column_value(&ints, st(false)), "[[1,null],[3,4]]");
    assert_eq!(column_value(&ints, st(true)), r#"[["1",null],["3","4"]]"#);
    // Lower bounds other than 1: the text form, which shows them.
    let bounded = array(vec![], vec![], vec![2], false);
    assert_eq!(column_value(&bounded, st(false)), r#""[0:1]={1,2}""#);
    // An element whose binary form is unreadable: its own text.
    let numerics = array(
        vec![Some(Value::Numeric(&[0xff])), Some(Value::Text(b"x"))],
        vec![b"1.5", b"x"],
        vec![2],
        true,
    );
    assert_eq!(column_value(&numerics, st(false)), r#"[1.5,"x"]"#);
    // json elements are marked for the ASCII rewrite like columns.
    let docs = array(
        vec![Some(Value::Json(br#"{"k": "\u00e9"}"#))],
        vec![br#"{"k": "\u00e9"}"#],
        vec![1],
        true,
    );
    let ascii = Style {
        numbers_as_strings: false,
        ascii: true,
    };
    assert_eq!(column_value(&docs, ascii), "[{\"k\":\"\0u00e9\"}]");
    assert_eq!(column_value(&docs, st(false)), r#"[{"k":"\u00e9"}]"#);
    // A row that cannot read the array: its text.
    let unread = OneValue {
        value: None,
        text: b"{1,2}",
        array: None,
    };
    assert_eq!(column_value(&unread, st(false)), r#""{1,2}""#);
}

/// A sink that keeps every output message as handed over (batched
/// messages hold several lines).
#[derive(Default)]
struct Batches {
    buf: Vec<u8>,
    written: Vec<Vec<u8>>,
}

impl Sink for Batches {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    fn write(&mut self, last: bool) {
        assert!(last, "format 3 writes whole messages");
        self.written.push(std::mem::take(&mut self.buf));
    }
    fn write_at(&mut self, _lsn: u64) {
        self.write(true);
    }
}

/// One event of a decoding session, for the batching properties.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A transaction: B, this many inserts, a transactional M, C.
    Transaction(usize),
    /// A streamed block of this many inserts (S ... E), then A.
    StreamedBlockAborted(usize),
    /// A streamed block, then the streamed commit.
    StreamedBlockCommitted(usize),
    /// B, this many inserts, P; then CP.
    Prepared(usize),
    /// A message outside any transaction.
    Message,
}

fn any_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0..40usize).prop_map(Event::Transaction),
        (0..40usize).prop_map(Event::StreamedBlockAborted),
        (0..40usize).prop_map(Event::StreamedBlockCommitted),
        (0..10usize).prop_map(Event::Prepared),
        Just(Event::Message),
    ]
}

/// Plays `events` into format 3 with `batching`; returns the messages.
fn play(events: &[Event], batching: Batching) -> Vec<Vec<u8>> {
    let opts = Options {
        batching,
        ..Options::default()
    };
    let mut f = Format3::new(&opts);
    let mut sink = Batches::default();
    let rel = relation(ReplicaIdentity::Default);
    let render = RelationRender::default();
    let inserts = |f: &mut Format3, sink: &mut Batches, n: usize, stream_xid: Option<u32>| {
        for i in 0..n {
            let txn = txn();
            let header = ChangeHeader::plain_in(ChangeKind::Insert, stream_xid);
            let new = row(i as i64, &"x".repeat(i), T::Null);
            let change = ChangeContext {
                txn: &txn,
                lsn: 0,
                header: &header,
                rel: &rel,
                render: &render,
                new: Some(&new as &dyn TupleValues),
                old: None,
            };
            f.change(sink, &change).unwrap();
        }
    };
    for (k, event) in events.iter().enumerate() {
        let xid = 900 + k as u32;
        match *event {
            Event::Transaction(n) => {
                f.begin(&mut sink, &txn(), 1);
                inserts(&mut f, &mut sink, n, None);
                f.message(&mut sink, &txn(), true, None, 0x20, b"p", b"in");
                f.commit(&mut sink, &txn(), 0x30, n as u64 + 1);
            }
            Event::StreamedBlockAborted(n) | Event::StreamedBlockCommitted(n) => {
                f.stream_start(&mut sink, xid, true);
                inserts(&mut f, &mut sink, n, Some(xid));
                f.stream_stop(&mut sink, xid);
                if let Event::StreamedBlockAborted(_) = event {
                    f.stream_abort(&mut sink, xid, xid, 0x40);
                } else {
                    let commit = StreamedCommit {
                        xid,
                        commit_lsn: 0x50,
                        end_lsn: 0x60,
                        timestamp: b"",
                        commit_time: 0,
                        changes: n as u64,
                    };
                    f.stream_commit(&mut sink, &commit);
                }
            }
            Event::Prepared(n) => {
                f.begin(&mut sink, &txn(), 1);
                inserts(&mut f, &mut sink, n, None);
                let prepared = PreparedTxn {
                    xid,
                    gid: b"g",
                    end_lsn: 0x80,
                    timestamp: b"",
                    time: 0,
                    changes: n as u64,
                };
                f.prepare(&mut sink, &prepared, 0x70, false);
                f.two_phase(&mut sink, TwoPhaseEvent::CommitPrepared, &prepared, 0x90);
            }
            Event::Message => f.message(&mut sink, &txn(), false, None, 0x30, b"p", b"out"),
        }
    }
    assert!(sink.buf.is_empty(), "nothing is held after a boundary");
    sink.written
}

fn lines(messages: &[Vec<u8>]) -> Vec<&[u8]> {
    messages
        .iter()
        .flat_map(|m| m.split(|&b| b == b'\n'))
        .collect()
}

fn action(object: &[u8]) -> String {
    let v: Json = serde_json::from_slice(object).unwrap();
    v["action"].as_str().unwrap().to_owned()
}

#[test]
fn batches_end_at_every_boundary_and_hold_whole_objects() {
    let events = [
        Event::Transaction(3),
        Event::Message,
        Event::StreamedBlockAborted(2),
        Event::StreamedBlockCommitted(0),
        Event::Prepared(1),
        Event::Transaction(0),
    ];
    let one_per_message = play(&events, Batching::Off);
    assert!(one_per_message.iter().all(|m| !m.contains(&b'\n')));
    // A batch larger than anything here: one message per boundary.
    let batched = play(&events, Batching::UpTo(1 << 20));
    let ends: Vec<String> = batched
        .iter()
        .map(|m| action(m.rsplit(|&b| b == b'\n').next().unwrap()))
        .collect();
    assert_eq!(ends, ["C", "M", "E", "A", "E", "C", "P", "CP", "C"]);
    let firsts: Vec<String> = batched
        .iter()
        .map(|m| action(m.split(|&b| b == b'\n').next().unwrap()))
        .collect();
    assert_eq!(firsts, ["B", "M", "S", "A", "S", "C", "B", "CP", "B"]);
    // The same objects, in the same order, byte for byte.
    assert_eq!(lines(&batched), lines(&one_per_message));
    // No message ends with a newline or holds an empty line.
    assert!(batched
        .iter()
        .all(|m| !m.is_empty() && !m.ends_with(b"\n") && !m.windows(2).any(|w| w == b"\n\n")));
}

#[test]
fn a_batch_is_handed_over_once_it_holds_its_bytes() {
    let events = [Event::Transaction(30)];
    let unbatched = play(&events, Batching::Off);
    let sizes: Vec<usize> = unbatched.iter().map(|m| m.len()).collect();
    for bound in [1, 150, 400, 1000] {
        let batched = play(&events, Batching::UpTo(bound));
        assert_eq!(lines(&batched), lines(&unbatched), "bound {bound}");
        for (i, m) in batched.iter().enumerate() {
            let last = m.rsplit(|&b| b == b'\n').next().unwrap();
            let before_last = m.len() - last.len();
            // Below the bound until its last object was added...
            assert!(before_last < bound || before_last == 0, "bound {bound}");
            // ...and at or above it when handed over, unless a boundary
            // (the C) ended it.
            let last_message = i + 1 == batched.len();
            assert!(
                m.len() >= bound || last_message,
                "bound {bound}: {}",
                m.len()
            );
        }
    }
    // Batching 1 byte is one object per message.
    assert_eq!(play(&events, Batching::UpTo(1)), unbatched);
    assert!(sizes.iter().all(|&s| s > 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the events and the bound: the lines of the batched
    /// messages are the unbatched messages, every line is one JSON object,
    /// and a message never continues past a boundary.
    #[test]
    fn batching_changes_only_how_objects_are_grouped(
        events in proptest::collection::vec(any_event(), 0..8),
        bound in 1usize..5000,
    ) {
        let unbatched = play(&events, Batching::Off);
        let batched = play(&events, Batching::UpTo(bound));
        prop_assert_eq!(lines(&batched), lines(&unbatched));
        for m in &batched {
            let objects: Vec<&[u8]> = m.split(|&b| b == b'\n').collect();
            for (i, o) in objects.iter().enumerate() {
                let is_boundary = matches!(
                    action(o).as_str(),
                    "C" | "E" | "A" | "P" | "CP" | "RP"
                ) || (action(o) == "M" && o.windows(21).any(|w| w == b"\"transactional\":false"));
                prop_assert!(!is_boundary || i + 1 == objects.len(), "boundary inside a message");
            }
        }
    }
}
