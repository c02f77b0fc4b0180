use super::v1;
use super::v2;
use super::*;
use crate::model::{
    ChangeHeader, ChangeKind, ChangeSource, ReplicaIdentity, TupleValues, TxnInfo, Value,
};
use crate::options::Options;
use crate::output::test_values::OneValue;
use crate::text::encoding::ServerEncoding;
use crate::text::json::json_string;
use crate::text::json::tests::text;
use proptest::prelude::*;

/// A tuple of literal text values; `None` is NULL, `Some("<toast>")` an unchanged TOAST value.
struct Literal(Vec<Option<&'static str>>);

impl TupleValues for Literal {
    fn is_null(&self, c: &ColumnMeta) -> bool {
        self.0[c.attr_index].is_none()
    }
    fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
        self.0[c.attr_index] == Some("<toast>")
    }
    /// Every value as its output function's text.
    fn value<'a>(&'a self, c: &'a ColumnMeta) -> Value<'a> {
        Value::OutputText(self.text(c))
    }
    fn text(&self, c: &ColumnMeta) -> &[u8] {
        self.0[c.attr_index].unwrap_or_default().as_bytes()
    }
}

fn column(i: usize, name: &str, ty: &str, kind: ValueKind, pk: bool) -> ColumnMeta {
    ColumnMeta {
        attr_index: i,
        attnum: i as i16 + 1,
        name_json: json_string(name.as_bytes()),
        type_json: json_string(ty.as_bytes()),
        type_oid_text: b"23".to_vec(),
        kind,
        not_null: pk,
        default_json: None,
        in_primary_key: pk,
        in_identity_key: pk,
        is_varlena: kind == ValueKind::Text,
        domain_base: None,
        attlen: if kind == ValueKind::Text { -1 } else { 8 },
        byval: kind != ValueKind::Text,
        details: None,
    }
}

fn relation() -> RelationMeta {
    RelationMeta {
        relid: 16384,
        schema: b"public".to_vec(),
        table: b"t".to_vec(),
        server_encoding: ServerEncoding::Utf8,
        schema_json: json_string(b"public"),
        table_json: json_string(b"t"),
        columns: vec![
            column(0, "id", "integer", ValueKind::Number, true),
            column(1, "name", "text", ValueKind::Text, false),
            column(2, "ok", "boolean", ValueKind::Bool, false),
        ],
        has_primary_key: true,
        has_identity_index: true,
        identity: ReplicaIdentity::Default,
        unique_indexes: Vec::new(),
    }
}

fn s(v: &[u8]) -> &str {
    std::str::from_utf8(v).unwrap()
}

#[test]
fn v2_insert_default_options() {
    let opts = Options {
        format_version: 2,
        ..Options::default()
    };
    let f = v2::Format2::new(&opts);
    let mut out = Vec::new();
    let new = Literal(vec![Some("1"), Some("a\"b"), Some("t")]);
    let r = f
        .v2_change(
            &mut out,
            &TxnInfo::default(),
            0,
            &ChangeHeader::plain(ChangeKind::Insert),
            &relation(),
            &Default::default(),
            Some(&new),
            None,
        )
        .unwrap();
    assert_eq!(r, None);
    assert_eq!(
        s(&out),
        r#"{"action":"I","schema":"public","table":"t","columns":[{"name":"id","type":"integer","value":1},{"name":"name","type":"text","value":"a\"b"},{"name":"ok","type":"boolean","value":true}]}"#
    );
}

#[test]
fn v2_update_identity_from_new_tuple_and_pk() {
    let opts = Options {
        format_version: 2,
        include_pk: true,
        include_types: false,
        ..Options::default()
    };
    let f = v2::Format2::new(&opts);
    let mut out = Vec::new();
    let new = Literal(vec![Some("1"), Some("<toast>"), None]);
    f.v2_change(
        &mut out,
        &TxnInfo::default(),
        0,
        &ChangeHeader::plain(ChangeKind::Update),
        &relation(),
        &Default::default(),
        Some(&new),
        None,
    )
    .unwrap();
    assert_eq!(
        s(&out),
        r#"{"action":"U","schema":"public","table":"t","columns":[{"name":"id","value":1},{"name":"ok","value":null}],"identity":[{"name":"id","value":1}],"pk":[{"name":"id"}]}"#
    );
}

#[test]
fn v2_delete_without_identity_is_skipped_with_warning() {
    let opts = Options {
        format_version: 2,
        ..Options::default()
    };
    let f = v2::Format2::new(&opts);
    let mut rel = relation();
    rel.has_identity_index = false;
    rel.has_primary_key = false;
    assert_eq!(
        f.v2_skip_reason(ChangeKind::Delete, &rel, false, false)
            .unwrap(),
        "no tuple identifier for DELETE in table \"public\".\"t\""
    );
    assert_eq!(
        f.v2_skip_reason(ChangeKind::Update, &rel, false, false)
            .unwrap(),
        "no tuple data for UPDATE in table \"public\".\"t\""
    );
    assert_eq!(
        f.v2_skip_reason(ChangeKind::Insert, &rel, true, false),
        None
    );
}

#[test]
fn v2_transaction_and_message_fields() {
    let opts = Options {
        format_version: 2,
        include_xids: true,
        include_timestamp: true,
        include_lsn: true,
        include_origin: true,
        ..Options::default()
    };
    let f = v2::Format2::new(&opts);
    let txn = TxnInfo {
        xid: 7,
        origin: 0,
        timestamp: b"2024-01-01 00:00:00+00".to_vec(),
        commit_time: 0,
        final_lsn: 0x10,
        end_lsn: 0x1_0000_0020,
    };
    let mut out = Vec::new();
    f.v2_begin(&mut out, &txn);
    out.push(b'\n');
    f.v2_commit(&mut out, &txn, 0x10);
    out.push(b'\n');
    f.v2_message(&mut out, None, None, 0x30, b"p", b"c\0d");
    assert_eq!(
        s(&out),
        "{\"action\":\"B\",\"xid\":7,\"timestamp\":\"2024-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"1/20\"}\n\
         {\"action\":\"C\",\"xid\":7,\"timestamp\":\"2024-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"1/20\"}\n\
         {\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"origin\":null,\"lsn\":\"0/30\",\"transactional\":false,\"prefix\":\"p\",\"content\":\"c\\u0000d\"}"
    );
}

#[test]
fn v1_cached_arrays_match_fresh_rendering() {
    // One relation reused across changes (arrays cached once every
    // column is printed) against a fresh relation per change.
    let tuples: Vec<Vec<Option<&'static str>>> = vec![
        vec![Some("1"), Some("a"), Some("t")],
        vec![Some("2"), Some("<toast>"), Some("f")],
        vec![Some("3"), None, None],
        vec![None, Some("b"), Some("t")],
        vec![Some("4"), Some("c"), Some("f")],
    ];
    for pretty in [false, true] {
        let opts = Options {
            pretty_print: pretty,
            include_pk: true,
            include_type_oids: true,
            include_not_null: true,
            include_default: true,
            include_column_positions: true,
            ..Options::default()
        };
        let f = v1::Format1::new(&opts);
        let shared = relation();
        let shared_cache = v1::Rendered::default();
        for (i, values) in tuples.iter().chain(tuples.iter()).enumerate() {
            for kind in [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete] {
                let render = |rel: &RelationMeta, cache: &v1::Rendered| {
                    let mut out = Vec::new();
                    let new = Literal(values.clone());
                    let old = Literal(values.clone());
                    let (new, old): (Option<&dyn TupleValues>, Option<&dyn TupleValues>) =
                        match kind {
                            ChangeKind::Insert => (Some(&new), None),
                            ChangeKind::Update => (Some(&new), Some(&old)),
                            ChangeKind::Delete => (None, Some(&old)),
                        };
                    f.v1_change(
                        &mut out,
                        i as u64 + 1,
                        &ChangeHeader::plain(kind),
                        rel,
                        cache,
                        new,
                        old,
                    )
                    .unwrap();
                    out
                };
                assert_eq!(
                    render(&shared, &shared_cache),
                    render(&relation(), &Default::default()),
                    "{kind:?} {values:?}"
                );
            }
        }
    }
}

#[test]
fn v1_document_plain_and_pretty() {
    for pretty in [false, true] {
        let opts = Options {
            pretty_print: pretty,
            include_pk: true,
            ..Options::default()
        };
        let f = v1::Format1::new(&opts);
        let mut out = Vec::new();
        f.v1_begin(&mut out, &TxnInfo::default());
        let new = Literal(vec![Some("2"), None, Some("f")]);
        f.v1_change(
            &mut out,
            1,
            &ChangeHeader::plain(ChangeKind::Insert),
            &relation(),
            &Default::default(),
            Some(&new),
            None,
        )
        .unwrap();
        let old = Literal(vec![Some("2"), None, None]);
        f.v1_change(
            &mut out,
            2,
            &ChangeHeader::plain(ChangeKind::Delete),
            &relation(),
            &Default::default(),
            None,
            Some(&old),
        )
        .unwrap();
        f.v1_commit(&mut out);
        let expected = if pretty {
            "{\n\t\"change\": [\n\t\t{\n\t\t\t\"kind\": \"insert\",\n\t\t\t\"schema\": \"public\",\n\t\t\t\"table\": \"t\",\n\
             \t\t\t\"columnnames\": [\"id\", \"name\", \"ok\"],\n\t\t\t\"columntypes\": [\"integer\", \"text\", \"boolean\"],\n\
             \t\t\t\"columnvalues\": [2, null, false],\n\t\t\t\"pk\": {\n\t\t\t\t\"pknames\": [\"id\"],\n\t\t\t\t\"pktypes\": [\"integer\"]\n\t\t\t}\n\t\t}\n\
             \t\t,{\n\t\t\t\"kind\": \"delete\",\n\t\t\t\"schema\": \"public\",\n\t\t\t\"table\": \"t\",\n\
             \t\t\t\"pk\": {\n\t\t\t\t\"pknames\": [\"id\"],\n\t\t\t\t\"pktypes\": [\"integer\"]\n\t\t\t},\n\
             \t\t\t\"oldkeys\": {\n\t\t\t\t\"keynames\": [\"id\"],\n\t\t\t\t\"keytypes\": [\"integer\"],\n\t\t\t\t\"keyvalues\": [2]\n\t\t\t}\n\t\t}\n\t]\n}"
        } else {
            "{\"change\":[{\"kind\":\"insert\",\"schema\":\"public\",\"table\":\"t\",\"columnnames\":[\"id\",\"name\",\"ok\"],\
             \"columntypes\":[\"integer\",\"text\",\"boolean\"],\"columnvalues\":[2,null,false],\"pk\":{\"pknames\":[\"id\"],\"pktypes\":[\"integer\"]}}\
             ,{\"kind\":\"delete\",\"schema\":\"public\",\"table\":\"t\",\"pk\":{\"pknames\":[\"id\"],\"pktypes\":[\"integer\"]},\
             \"oldkeys\":{\"keynames\":[\"id\"],\"keytypes\":[\"integer\"],\"keyvalues\":[2]}}]}"
        };
        assert_eq!(s(&out), expected, "pretty={pretty}");
    }
}

/// A tuple whose second column a column list hides.
struct Masked(Literal);
impl TupleValues for Masked {
    fn is_visible(&self, c: &ColumnMeta) -> bool {
        c.attr_index != 1
    }
    fn is_null(&self, c: &ColumnMeta) -> bool {
        self.0.is_null(c)
    }
    fn is_unchanged_toast(&self, c: &ColumnMeta) -> bool {
        self.0.is_unchanged_toast(c)
    }
    fn value<'a>(&'a self, c: &'a ColumnMeta) -> Value<'a> {
        self.0.value(c)
    }
    fn text(&self, c: &ColumnMeta) -> &[u8] {
        self.0.text(c)
    }
}

#[test]
fn transformed_changes_are_marked_and_column_lists_apply() {
    let opts = Options {
        format_version: 2,
        include_types: false,
        ..Options::default()
    };
    let f2 = v2::Format2::new(&opts);
    let mut out = Vec::new();
    let new = Masked(Literal(vec![Some("1"), Some("hidden"), Some("t")]));
    f2.v2_change(
        &mut out,
        &TxnInfo::default(),
        0,
        &ChangeHeader {
            kind: ChangeKind::Insert,
            transformed_from: Some(ChangeKind::Update),
            stream_xid: Some(12),
            source: ChangeSource::Wal,
        },
        &relation(),
        &Default::default(),
        Some(&new),
        None,
    )
    .unwrap();
    assert_eq!(
        s(&out),
        r#"{"action":"I","transformedfrom":"U","xid":12,"schema":"public","table":"t","columns":[{"name":"id","value":1},{"name":"ok","value":true}]}"#
    );
    let opts = Options {
        include_types: false,
        ..Options::default()
    };
    let f1 = v1::Format1::new(&opts);
    let mut out = Vec::new();
    let old = Masked(Literal(vec![Some("1"), Some("hidden"), Some("t")]));
    f1.v1_change(
        &mut out,
        1,
        &ChangeHeader {
            kind: ChangeKind::Delete,
            transformed_from: Some(ChangeKind::Update),
            stream_xid: Some(12),
            source: ChangeSource::Wal,
        },
        &relation(),
        &Default::default(),
        None,
        Some(&old),
    )
    .unwrap();
    assert_eq!(
        s(&out),
        r#"{"kind":"delete","transformedfrom":"update","xid":12,"schema":"public","table":"t","oldkeys":{"keynames":["id"],"keyvalues":[1]}}"#
    );
}

#[test]
fn v1_not_null_without_types_is_an_empty_array() {
    let opts = Options {
        include_types: false,
        include_not_null: true,
        ..Options::default()
    };
    let f = v1::Format1::new(&opts);
    let mut out = Vec::new();
    let new = Literal(vec![Some("1"), None, Some("t")]);
    f.v1_change(
        &mut out,
        1,
        &ChangeHeader::plain(ChangeKind::Insert),
        &relation(),
        &Default::default(),
        Some(&new),
        None,
    )
    .unwrap();
    assert_eq!(
        s(&out),
        r#"{"kind":"insert","schema":"public","table":"t","columnnames":["id","name","ok"],"columnoptionals":[],"columnvalues":[1,null,true]}"#
    );
    let opts = Options {
        include_not_null: true,
        include_column_positions: true,
        ..Options::default()
    };
    let f = v1::Format1::new(&opts);
    let mut out = Vec::new();
    f.v1_change(
        &mut out,
        1,
        &ChangeHeader::plain(ChangeKind::Insert),
        &relation(),
        &Default::default(),
        Some(&new),
        None,
    )
    .unwrap();
    assert_eq!(
        s(&out),
        r#"{"kind":"insert","schema":"public","table":"t","columnnames":["id","name","ok"],"columntypes":["integer","text","boolean"],"columnpositions":[1,2,3],"columnoptionals":[false,true,true],"columnvalues":[1,null,true]}"#
    );
}

/// One column of a random relation, with its value in the row.
#[derive(Debug, Clone)]
struct RandomColumn {
    name: String,
    type_name: String,
    default: Option<String>,
    value: Option<String>,
}

fn random_column() -> impl Strategy<Value = RandomColumn> {
    (
        text(8),
        text(6),
        proptest::option::of(text(6)),
        proptest::option::weighted(0.75, text(20)),
    )
        .prop_map(|(name, type_name, default, value)| RandomColumn {
            name,
            type_name,
            default,
            value,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// Random relations and values, every option combination: the output
    /// always parses as JSON and carries the values unchanged.
    #[test]
    fn random_rows_always_give_valid_json(
        columns in proptest::collection::vec(random_column(), 1..=5),
        (schema, table) in (text(6), text(6)),
        format_version in 1u8..=2,
        flags in proptest::array::uniform10(any::<bool>()),
        kind in proptest::sample::select(
            &[ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete][..]
        ),
        (prefix, content) in (text(5), text(10)),
    ) {
        let values: Vec<Option<&'static str>> = columns
            .iter()
            .map(|c| c.value.clone().map(|v| &*Box::leak(v.into_boxed_str())))
            .collect();
        let mut rel = relation();
        rel.schema = schema.into_bytes();
        rel.table = table.into_bytes();
        rel.schema_json = json_string(&rel.schema);
        rel.table_json = json_string(&rel.table);
        rel.columns = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut meta = column(i, &c.name, &c.type_name, ValueKind::Text, i == 0);
                meta.default_json = c.default.as_ref().map(|d| json_string(d.as_bytes()));
                meta
            })
            .collect();
        let [pretty_print, include_xids, include_lsn, include_pk, include_types, include_type_oids, include_not_null, include_default, include_column_positions, include_schemas] =
            flags;
        let opts = Options {
            format_version,
            pretty_print,
            include_xids,
            include_lsn,
            include_pk,
            include_types,
            include_type_oids,
            include_not_null,
            include_default,
            include_column_positions,
            include_schemas,
            ..Options::default()
        };
        let f1 = v1::Format1::new(&opts);
        let f2 = v2::Format2::new(&opts);
        let new = Literal(values.clone());
        let old = Literal(values.clone());
        let header = ChangeHeader::plain(kind);
        let mut out = Vec::new();
        let (new_arg, old_arg): (Option<&dyn TupleValues>, Option<&dyn TupleValues>) =
            match kind {
                ChangeKind::Insert => (Some(&new), None),
                ChangeKind::Update => (Some(&new), Some(&old)),
                ChangeKind::Delete => (None, Some(&old)),
            };
        if opts.format_version == 1 {
            f1.v1_begin(&mut out, &TxnInfo::default());
            f1.v1_change(
                &mut out,
                1,
                &header,
                &rel,
                &Default::default(),
                new_arg,
                old_arg,
            )
            .unwrap();
            f1.v1_message(&mut out, 2, true, None, prefix.as_bytes(), content.as_bytes());
            f1.v1_commit(&mut out);
        } else {
            f2.v2_change(
                &mut out,
                &TxnInfo::default(),
                0,
                &header,
                &rel,
                &Default::default(),
                new_arg,
                old_arg,
            )
            .unwrap();
        }
        let doc: serde_json::Value = serde_json::from_slice(&out)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&out))))?;
        // The first column's value comes back as written.
        if opts.format_version == 2 && kind != ChangeKind::Delete {
            let first = &doc["columns"][0];
            prop_assert_eq!(first["name"].as_str(), Some(columns[0].name.as_str()));
            prop_assert_eq!(first["value"].as_str(), values[0]);
        }
    }
}

#[test]
fn v1_skip_reasons() {
    let opts = Options::default();
    let f = v1::Format1::new(&opts);
    let mut rel = relation();
    assert_eq!(
        f.v1_skip_reason(ChangeKind::Insert, &rel, false, false)
            .unwrap(),
        "no tuple data for INSERT in table \"t\""
    );
    rel.has_identity_index = false;
    assert_eq!(
        f.v1_skip_reason(ChangeKind::Update, &rel, true, false)
            .unwrap(),
        "table \"t\" without primary key or replica identity is nothing"
    );
    rel.identity = ReplicaIdentity::Full;
    assert_eq!(
        f.v1_skip_reason(ChangeKind::Delete, &rel, false, true),
        None
    );
}

#[test]
fn numbers_follow_wal2json_rules() {
    let mut out = Vec::new();
    push_text_value(&mut out, ValueKind::Number, b"NaN", false).unwrap();
    out.push(b' ');
    push_text_value(&mut out, ValueKind::Number, b"-Infinity", true).unwrap();
    out.push(b' ');
    push_text_value(&mut out, ValueKind::Number, b"1.50", true).unwrap();
    out.push(b' ');
    push_text_value(&mut out, ValueKind::Bytea, b"\\xdead", false).unwrap();
    assert_eq!(s(&out), "null \"-Infinity\" \"1.50\" \"dead\"");
    assert_eq!(
        push_text_value(&mut out, ValueKind::Number, b"abc", false),
        Err(EncodeError::NotANumber("abc".into()))
    );
}

/// wal2json's encoding of `value` in a column of `kind`.
fn encoded(kind: ValueKind, value: Value<'_>, text: &str, numbers_as_strings: bool) -> String {
    let col = column(0, "c", "t", kind, false);
    let mut out = Vec::new();
    let tuple = OneValue::scalar(value, text.as_bytes());
    push_value(&mut out, &tuple, &col, numbers_as_strings).unwrap();
    s(&out).to_string()
}

/// The same column written from its output function's text alone.
fn from_text(kind: ValueKind, text: &str, numbers_as_strings: bool) -> String {
    let mut out = Vec::new();
    push_text_value(&mut out, kind, text.as_bytes(), numbers_as_strings).unwrap();
    s(&out).to_string()
}

fn numeric_body(words: &[u16]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

#[test]
fn binary_values_print_as_their_output_function_text() {
    use ValueKind::{Bool, Number, Text};
    for nas in [false, true] {
        for (v, text) in [
            (i16::MIN as i64, "-32768"),
            (i64::MIN, "-9223372036854775808"),
            (u32::MAX as i64, "4294967295"),
            (0, "0"),
        ] {
            assert_eq!(
                encoded(Number, Value::Int(v), text, nas),
                from_text(Number, text, nas)
            );
        }
        for (b, text) in [(true, "t"), (false, "f")] {
            assert_eq!(
                encoded(Bool, Value::Bool(b), text, nas),
                from_text(Bool, text, nas)
            );
        }
        let text = "a\"b\\c\n\u{1}/é";
        assert_eq!(
            encoded(Text, Value::Text(text.as_bytes()), text, nas),
            from_text(Text, text, nas)
        );
        // numeric's digits: 1.50 keeps its scale; NaN is null (a string
        // with numeric-data-types-as-string), like the text "NaN".
        let cases: [(&[u16], &str); 4] = [
            (&[0x8000 | (2 << 7), 1, 5000], "1.50"),
            (&[0x8000 | 0x2000, 7], "-7"),
            (&[0xC000], "NaN"),
            (&[0xF000], "-Infinity"),
        ];
        for (words, text) in cases {
            let body = numeric_body(words);
            assert_eq!(
                encoded(Number, Value::Numeric(&body), text, nas),
                from_text(Number, text, nas),
                "{text}"
            );
        }
        for text in ["1.5", "NaN", "-Infinity", "1e+100"] {
            assert_eq!(
                encoded(Number, Value::Float(text.as_bytes()), text, nas),
                from_text(Number, text, nas)
            );
        }
        // Output function text (any other type) by the column's kind.
        assert_eq!(
            encoded(
                ValueKind::Bytea,
                Value::OutputText(b"\\xdead"),
                "\\xdead",
                nas
            ),
            "\"dead\""
        );
    }
    // timestamp_out / timestamptz_out in ISO DateStyle (and UTC).
    assert_eq!(
        encoded(Text, Value::Timestamp(0), "", false),
        "\"2000-01-01 00:00:00\""
    );
    assert_eq!(
        encoded(Text, Value::TimestampTz(1_500_000), "", false),
        "\"2000-01-01 00:00:01.5+00\""
    );
    assert_eq!(
        encoded(Text, Value::TimestampTz(i64::MAX), "", false),
        "\"infinity\""
    );
}

#[test]
fn unreadable_or_foreign_values_use_the_output_function_text() {
    use ValueKind::{Number, Text};
    // A numeric or jsonb whose binary form is not understood.
    assert_eq!(
        encoded(Number, Value::Numeric(&[0xff]), "12.5", false),
        "12.5"
    );
    assert_eq!(
        encoded(Number, Value::Numeric(&[0xff]), "12.5", true),
        "\"12.5\""
    );
    assert_eq!(
        encoded(Text, Value::Jsonb(&[1, 2]), "{\"a\": 1}", false),
        r#""{\"a\": 1}""#
    );
    // A timestamp this does not print (before the Julian epoch).
    assert_eq!(
        encoded(Text, Value::Timestamp(i64::MIN + 1), "4714-11-24 BC", false),
        "\"4714-11-24 BC\""
    );
    // Binary forms wal2json never prints itself: the text, by kind.
    assert_eq!(
        encoded(Text, Value::Date(0), "2000-01-01", false),
        "\"2000-01-01\""
    );
    assert_eq!(
        encoded(
            ValueKind::Bytea,
            Value::Bytea(b"\xde\xad"),
            "\\xdead",
            false
        ),
        "\"dead\""
    );
    assert_eq!(
        encoded(Text, Value::Json(b"{\"a\": 1}"), "{\"a\": 1}", false),
        r#""{\"a\": 1}""#
    );
    // A value whose kind is not the column's (a domain over int4 is text).
    assert_eq!(encoded(Text, Value::Int(5), "5", false), "\"5\"");
    assert_eq!(encoded(Text, Value::Bool(true), "t", false), "\"t\"");
    // An unparsable number is an error, as in wal2json.
    let col = column(0, "c", "t", Number, false);
    let tuple = OneValue::scalar(Value::OutputText(b"abc"), b"abc");
    assert!(push_value(&mut Vec::new(), &tuple, &col, false).is_err());
}
