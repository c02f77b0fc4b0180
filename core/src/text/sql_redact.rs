//! What DDL capture may show of the statement text (pure code): the
//! client's query string with every value that may be a credential
//! replaced (docs/ddl.md, "What `command` leaves out").
//!
//! PostgreSQL's parser splits the string into statements and names each
//! one's kind (`pg::sql_parse`); this module decides, per statement, what
//! is kept, and rewrites the text. The values replaced are string
//! constants (every form: `'…'`, `E'…'`, `U&'…'`, `N'…'`, `B'…'`,
//! `X'…'`, `$tag$…$tag$`) and comments, because every place a credential
//! can be written is one: `OPTIONS (password '…')`, `CONNECTION '…'`,
//! `PASSWORD '…'`, a `DO` body, an argument. Whether a backslash escapes
//! inside `'…'` depends on `standard_conforming_strings` as it was when
//! the server parsed the string, which a later `SET` in the same string
//! may have changed: the constants of both readings are replaced, so
//! every byte of a constant under either is.

/// What the server's parser says a statement is, as far as its text may
/// carry a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// A definition the catalogs show to every role (a table, index, view,
    /// type, trigger, policy, grant, comment, drop, ...): its constants
    /// are not credentials by PostgreSQL's own standard.
    Catalog,
    /// A command whose constants are credentials by design: user mappings,
    /// foreign servers and wrappers, foreign tables and `IMPORT FOREIGN
    /// SCHEMA` (their `OPTIONS`), subscriptions (`CONNECTION`), roles
    /// (`PASSWORD`), settings (`SET`, `ALTER SYSTEM`, `ALTER ROLE/DATABASE
    /// ... SET`).
    Credential,
    /// Code: `CREATE FUNCTION` / `CREATE PROCEDURE` (whose body
    /// `pg_proc` shows to every role) and `DO`, whose dynamic SQL may set
    /// a credential.
    Routine,
    /// Anything else: data nothing stores (`CALL`, queries and DML, `CREATE
    /// TABLE AS`, `COPY`, ...) or a kind this list does not know.
    Other,
}

/// One statement of a query string: its bytes `start..end` (as the
/// parser's `stmt_location` and `stmt_len` give them) and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement {
    pub start: usize,
    pub end: usize,
    pub kind: StatementKind,
}

/// What replaces a string constant.
pub const REDACTED_CONSTANT: &[u8] = b"'[redacted]'";
/// What replaces a comment.
pub const REDACTED_COMMENT: &[u8] = b"/*[redacted]*/";

/// Words that make code (a routine's body, a `DO` block) count as
/// credential-bearing (matched
/// without regard to case in its constants and comments): any dynamic SQL
/// that sets a credential names one of them.
const ROUTINE_CREDENTIAL_WORDS: &[&[u8]] = &[
    b"password",
    b"passwd",
    b"secret",
    b"mapping",
    b"server",
    b"wrapper",
    b"subscription",
    b"connection",
    b"conninfo",
    b"options",
    b"dblink",
    b"sslkey",
    b"alter system",
];

/// Command tags (`pg_event_trigger_ddl_commands().command_tag`, the
/// event's tag) of the commands that carry credentials. When a captured
/// command is one of them, every statement of its query string loses its
/// constants, whatever its kind: the value may reach the command through
/// any of them (an argument of `CALL`, an expression that runs a
/// function).
pub fn is_credential_tag(tag: &[u8]) -> bool {
    matches!(
        tag,
        b"CREATE USER MAPPING"
            | b"ALTER USER MAPPING"
            | b"CREATE SERVER"
            | b"ALTER SERVER"
            | b"CREATE FOREIGN DATA WRAPPER"
            | b"ALTER FOREIGN DATA WRAPPER"
            | b"CREATE SUBSCRIPTION"
            | b"ALTER SUBSCRIPTION"
            | b"CREATE FOREIGN TABLE"
            | b"ALTER FOREIGN TABLE"
            | b"IMPORT FOREIGN SCHEMA"
    )
}

/// The statement text DDL capture writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub text: Vec<u8>,
    /// Whether anything was replaced.
    pub redacted: bool,
}

/// The query string with the values of every statement that may carry a
/// credential replaced: all statements' when `credential_command`, else
/// those of [`StatementKind::Credential`] and [`StatementKind::Other`]
/// statements, and of [`StatementKind::Routine`] statements whose
/// constants or comments name a [`ROUTINE_CREDENTIAL_WORDS`] word. The
/// bytes no statement covers (`;`, empty statements) are treated as
/// [`StatementKind::Other`]. `statements` are in order and do not
/// overlap (the parser's); a statement outside the string is clipped.
pub fn redact(query: &[u8], statements: &[Statement], credential_command: bool) -> Shown {
    let mut out = Vec::with_capacity(query.len());
    let mut redacted = false;
    let mut at = 0;
    let mut emit = |out: &mut Vec<u8>, start: usize, end: usize, kind: StatementKind| {
        let part = &query[start..end];
        let values = value_ranges(part);
        let strip = credential_command
            || match kind {
                StatementKind::Catalog => false,
                StatementKind::Credential | StatementKind::Other => true,
                StatementKind::Routine => values
                    .iter()
                    .any(|v| names_credential_word(&part[v.start..v.end])),
            };
        if strip && !values.is_empty() {
            redacted = true;
            replace_values(out, part, &values);
        } else {
            out.extend_from_slice(part);
        }
    };
    for s in statements {
        let start = s.start.clamp(at, query.len());
        let end = s.end.clamp(start, query.len());
        if start > at {
            emit(&mut out, at, start, StatementKind::Other);
        }
        emit(&mut out, start, end, s.kind);
        at = end;
    }
    if at < query.len() {
        emit(&mut out, at, query.len(), StatementKind::Other);
    }
    Shown {
        text: out,
        redacted,
    }
}

/// Whether `text` holds one of [`ROUTINE_CREDENTIAL_WORDS`], in any case.
fn names_credential_word(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    ROUTINE_CREDENTIAL_WORDS
        .iter()
        .any(|w| lower.windows(w.len()).any(|x| x == *w))
}

/// A constant or a comment: bytes `start..end` of the text lexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Value {
    start: usize,
    end: usize,
    comment: bool,
}

/// The constants and comments of `text` under both readings of `'…'`
/// (backslash an escape or not), merged where they overlap; a merged
/// range that holds a constant under either reading is a constant.
fn value_ranges(text: &[u8]) -> Vec<Value> {
    let mut all = lex_values(text, true);
    if text.contains(&b'\\') {
        all.extend(lex_values(text, false));
        all.sort_by_key(|v| (v.start, v.end));
    }
    let mut merged: Vec<Value> = Vec::with_capacity(all.len());
    for v in all {
        match merged.last_mut() {
            Some(last) if v.start < last.end => {
                last.end = last.end.max(v.end);
                last.comment &= v.comment;
            }
            _ => merged.push(v),
        }
    }
    merged
}

fn replace_values(out: &mut Vec<u8>, text: &[u8], values: &[Value]) {
    let mut at = 0;
    for v in values {
        out.extend_from_slice(&text[at..v.start]);
        out.extend_from_slice(if v.comment {
            REDACTED_COMMENT
        } else {
            REDACTED_CONSTANT
        });
        at = v.end;
    }
    out.extend_from_slice(&text[at..]);
}

/// PostgreSQL's `ident_start` (bytes of 0x80 and above are letters to its
/// lexer, so multibyte characters of every server encoding are).
fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// PostgreSQL's `ident_cont`.
fn ident_cont(b: u8) -> bool {
    ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// The end of a quoted run that starts after its opening quote at `i`:
/// `''` is a quote inside it; `backslash`: `\` escapes the next byte. An
/// unterminated run ends the text.
fn quoted_end(text: &[u8], mut i: usize, quote: u8, backslash: bool) -> usize {
    while i < text.len() {
        match text[i] {
            b'\\' if backslash => i += 2,
            b if b == quote => {
                if text.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return i + 1;
                }
            }
            _ => i += 1,
        }
    }
    text.len()
}

/// The tag of a dollar quote starting at `i` (`$tag$`, tag empty or an
/// identifier without `$`), as its length including both `$`.
fn dollar_tag(text: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if let Some(&b) = text.get(j) {
        if b != b'$' {
            if !ident_start(b) {
                return None;
            }
            j += 1;
            while text.get(j).is_some_and(|&b| ident_cont(b) && b != b'$') {
                j += 1;
            }
        }
    }
    (text.get(j) == Some(&b'$')).then_some(j + 1 - i)
}

/// The string constants and comments of `text`, as PostgreSQL's lexer
/// finds them; `standard_strings`: `standard_conforming_strings` on (a
/// backslash in `'…'` is an ordinary character).
fn lex_values(text: &[u8], standard_strings: bool) -> Vec<Value> {
    let mut values = Vec::new();
    let constant = |start, end| Value {
        start,
        end,
        comment: false,
    };
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        match b {
            b'-' if text.get(i + 1) == Some(&b'-') => {
                let end = text[i..]
                    .iter()
                    .position(|&c| c == b'\n' || c == b'\r')
                    .map_or(text.len(), |p| i + p);
                values.push(Value {
                    start: i,
                    end,
                    comment: true,
                });
                i = end;
            }
            b'/' if text.get(i + 1) == Some(&b'*') => {
                // Nested, as PostgreSQL's are.
                let start = i;
                let mut depth = 0usize;
                while i < text.len() {
                    if text[i] == b'/' && text.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if text[i] == b'*' && text.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                values.push(Value {
                    start,
                    end: i.min(text.len()),
                    comment: true,
                });
            }
            b'\'' => {
                let end = quoted_end(text, i + 1, b'\'', !standard_strings);
                values.push(constant(i, end));
                i = end;
            }
            b'"' => i = quoted_end(text, i + 1, b'"', false),
            b'$' => {
                if let Some(tag_len) = dollar_tag(text, i) {
                    let tag = &text[i..i + tag_len];
                    let body = i + tag_len;
                    let end = text[body..]
                        .windows(tag_len)
                        .position(|w| w == tag)
                        .map_or(text.len(), |p| body + p + tag_len);
                    values.push(constant(i, end));
                    i = end;
                } else {
                    // A parameter ($1) or a lone $.
                    i += 1;
                    while text.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                }
            }
            _ if ident_start(b) || b.is_ascii_digit() => {
                // A word: a keyword, identifier or number, or the prefix
                // of a constant (E'', N'', B'', X'', U&'' and U&"").
                let start = i;
                let prefixed = |i: usize| text.get(i) == Some(&b'\'');
                match b.to_ascii_lowercase() {
                    b'e' if prefixed(i + 1) => {
                        let end = quoted_end(text, i + 2, b'\'', true);
                        values.push(constant(start, end));
                        i = end;
                        continue;
                    }
                    b'n' | b'b' | b'x' if prefixed(i + 1) => {
                        let end = quoted_end(text, i + 2, b'\'', !standard_strings);
                        values.push(constant(start, end));
                        i = end;
                        continue;
                    }
                    b'u' if text.get(i + 1) == Some(&b'&') && prefixed(i + 2) => {
                        let end = quoted_end(text, i + 3, b'\'', false);
                        values.push(constant(start, end));
                        i = end;
                        continue;
                    }
                    b'u' if text.get(i + 1) == Some(&b'&') && text.get(i + 2) == Some(&b'"') => {
                        i = quoted_end(text, i + 3, b'"', false);
                        continue;
                    }
                    _ => {}
                }
                i += 1;
                while text.get(i).is_some_and(|&c| ident_cont(c)) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(kind: StatementKind, q: &[u8]) -> Vec<Statement> {
        vec![Statement {
            start: 0,
            end: q.len(),
            kind,
        }]
    }

    fn shown(q: &str, kind: StatementKind) -> String {
        let s = redact(q.as_bytes(), &one(kind, q.as_bytes()), false);
        String::from_utf8(s.text).unwrap()
    }

    #[test]
    fn catalog_statements_are_kept() {
        let q = "CREATE TABLE t (a text DEFAULT 'x' CHECK (a <> 'y')) -- note";
        let s = redact(
            q.as_bytes(),
            &one(StatementKind::Catalog, q.as_bytes()),
            false,
        );
        assert_eq!(s.text, q.as_bytes());
        assert!(!s.redacted);
    }

    #[test]
    fn user_mapping_options_are_replaced() {
        assert_eq!(
            shown(
                "CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password 'hunter2')",
                StatementKind::Credential
            ),
            "CREATE USER MAPPING FOR bob SERVER s OPTIONS (user '[redacted]', password '[redacted]')"
        );
    }

    #[test]
    fn every_constant_form_is_replaced() {
        for q in [
            "'a'",
            "'it''s'",
            "E'a\\'b'",
            "e'a\\\\'",
            "N'x'",
            "B'0101'",
            "X'ff'",
            "U&'d\\0061t'",
            "u&'x'",
            "$$a'b$$",
            "$body$ $$ ' $body$",
            "$x1$ a $x1$",
        ] {
            assert_eq!(shown(q, StatementKind::Other), "'[redacted]'", "{q}");
        }
    }

    #[test]
    fn identifiers_and_parameters_are_not_constants() {
        assert_eq!(
            shown("SELECT \"pass'word\", $1, a$b$", StatementKind::Other),
            "SELECT \"pass'word\", $1, a$b$"
        );
        // A word ending in E before a quote is an identifier, then a constant.
        assert_eq!(
            shown("SELECT typE'x'", StatementKind::Other),
            "SELECT typE'[redacted]'"
        );
        assert_eq!(
            shown("SELECT U&\"a'b\" 'c'", StatementKind::Other),
            "SELECT U&\"a'b\" '[redacted]'"
        );
    }

    #[test]
    fn comments_are_replaced() {
        assert_eq!(
            shown(
                "ALTER SERVER s OPTIONS (SET host 'h') -- was 'x'\n/* a /* nested */ b */;",
                StatementKind::Credential
            ),
            "ALTER SERVER s OPTIONS (SET host '[redacted]') /*[redacted]*/\n/*[redacted]*/;"
        );
    }

    #[test]
    fn unterminated_values_run_to_the_end() {
        assert_eq!(
            shown("SELECT 'abc", StatementKind::Other),
            "SELECT '[redacted]'"
        );
        assert_eq!(
            shown("SELECT $q$ abc", StatementKind::Other),
            "SELECT '[redacted]'"
        );
        assert_eq!(
            shown("SELECT /* abc", StatementKind::Other),
            "SELECT /*[redacted]*/"
        );
    }

    #[test]
    fn both_readings_of_backslashes_are_covered() {
        // standard_conforming_strings on: 'a\' then ', ' then 'pw';
        // off: 'a\', ' then b then an unterminated constant. Either way
        // no byte of "pw" is left.
        let q = "SELECT 'a\\', 'pw'";
        let s = shown(q, StatementKind::Other);
        assert!(!s.contains("pw"), "{s}");
        let q = "SELECT 'a\\' || 'secret-pw' || 'c'";
        let s = shown(q, StatementKind::Other);
        assert!(!s.contains("secret"), "{s}");
    }

    #[test]
    fn routines_are_kept_unless_their_body_names_a_credential() {
        let plain = "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'";
        assert_eq!(shown(plain, StatementKind::Routine), plain);
        let secret = "CREATE PROCEDURE p() LANGUAGE plpgsql AS $$BEGIN EXECUTE 'ALTER USER MAPPING FOR public SERVER s OPTIONS (SET PASSWORD ''x'')'; END$$";
        assert_eq!(
            shown(secret, StatementKind::Routine),
            "CREATE PROCEDURE p() LANGUAGE plpgsql AS '[redacted]'"
        );
    }

    #[test]
    fn a_credential_command_redacts_every_statement() {
        let q = b"CREATE TABLE t (a text DEFAULT 'k'); CALL set_pw('pw')";
        let statements = [
            Statement {
                start: 0,
                end: 35,
                kind: StatementKind::Catalog,
            },
            Statement {
                start: 36,
                end: q.len(),
                kind: StatementKind::Other,
            },
        ];
        let s = redact(q, &statements, false);
        assert_eq!(
            s.text,
            b"CREATE TABLE t (a text DEFAULT 'k'); CALL set_pw('[redacted]')".to_vec()
        );
        let s = redact(q, &statements, true);
        assert_eq!(
            s.text,
            b"CREATE TABLE t (a text DEFAULT '[redacted]'); CALL set_pw('[redacted]')".to_vec()
        );
        assert!(s.redacted);
    }

    #[test]
    fn gaps_are_treated_as_other() {
        // An empty statement between two is not a parser statement; its
        // comment goes.
        let q = b"CREATE TABLE a (); /* pw */ ; CREATE TABLE b ()";
        let statements = [
            Statement {
                start: 0,
                end: 17,
                kind: StatementKind::Catalog,
            },
            Statement {
                start: 29,
                end: q.len(),
                kind: StatementKind::Catalog,
            },
        ];
        let s = redact(q, &statements, false);
        assert_eq!(
            s.text,
            b"CREATE TABLE a (); /*[redacted]*/ ; CREATE TABLE b ()".to_vec()
        );
    }

    #[test]
    fn credential_tags() {
        assert!(is_credential_tag(b"ALTER USER MAPPING"));
        assert!(is_credential_tag(b"CREATE SUBSCRIPTION"));
        assert!(is_credential_tag(b"IMPORT FOREIGN SCHEMA"));
        assert!(!is_credential_tag(b"DROP USER MAPPING"));
        assert!(!is_credential_tag(b"CREATE TABLE"));
    }

    proptest! {
        // Whatever surrounds it and however backslashes are read, no byte
        // of a secret written as any constant form survives in a
        // statement whose values are replaced, and the text outside
        // constants and comments is kept.
        #[test]
        fn no_secret_survives(
            before in "[A-Za-z0-9 (),;=.*/\n-]{0,40}",
            secret in "[A-Za-z0-9]{6,12}",
            form in 0usize..7,
            after in "[A-Za-z0-9 (),;=.*/\n-]{0,40}",
        ) {
            // Text around the value without quotes of its own: whatever it
            // opens (a comment) only swallows the value into itself.
            let marker = format!("ZZ{secret}ZZ");
            let constant = match form {
                0 => format!("'{marker}'"),
                1 => format!("E'{marker}\\''"),
                2 => format!("$$ {marker} $$"),
                3 => format!("$t$ '{marker}' $t$"),
                4 => format!("U&'{marker}'"),
                5 => format!("N'{marker}'"),
                _ => format!("/* {marker} */"),
            };
            let q = format!("{before} OPTIONS (password {constant}) {after}");
            let statements = one(StatementKind::Credential, q.as_bytes());
            let s = redact(q.as_bytes(), &statements, false);
            let text = String::from_utf8_lossy(&s.text).to_string();
            prop_assert!(!text.contains(&marker), "{q:?} -> {text:?}");
            prop_assert!(s.redacted);
        }

        #[test]
        fn lexing_never_panics_and_ranges_are_ordered(text in proptest::collection::vec(any::<u8>(), 0..200)) {
            for standard in [true, false] {
                let values = lex_values(&text, standard);
                let mut at = 0;
                for v in &values {
                    prop_assert!(v.start >= at && v.end >= v.start && v.end <= text.len());
                    at = v.end;
                }
            }
            let statements = one(StatementKind::Other, &text);
            let _ = redact(&text, &statements, false);
        }
    }
}
