//! The documentation's examples, run against the test cluster: every
//! ```` ```sql ```` block of README.md and docs/*.md that is directly
//! followed by an ```` ```output ```` block is fed to `psql -X` in a
//! database of its document's own (a ```` ```sh ```` block so followed is
//! run by `sh -e`, with the word `mydb` naming that database), and what it
//! prints must equal the output block once values that vary (LSNs, times,
//! sizes, and the fields an example names) are masked on both sides. The convention is described
//! in docs/development.md ("Tested examples"). The test also checks that
//! every relative link between the documents names an existing file and
//! heading, so that a renamed option or function breaks the build rather
//! than the reader's click.
//!
//! `PUBJSON_DOCS=formats` runs only the documents whose name contains
//! `formats`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pubjson_e2e::{note_skip, pg_bin, server_major, Server};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use regex::Regex;

/// A block of a document, in order, as far as examples are concerned.
#[derive(Debug)]
enum Block {
    /// A fenced code block: its info string (`sql`, `output`, ...).
    Code {
        info: String,
        text: String,
        line: usize,
    },
    /// An HTML block (a `<!-- docs-test ... -->` directive).
    Html { text: String, line: usize },
    /// Anything else: prose, headings, tables, lists.
    Other,
}

/// What runs an example's block.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// `psql -X -q`, the block on its standard input.
    #[default]
    Psql,
    /// `sh -e -c`, the PostgreSQL programs first on the PATH, `mydb`
    /// replaced by the document's database.
    Shell,
}

/// One example: SQL (or shell commands) shown to the reader, its expected
/// output, and what the directive before it adds.
#[derive(Debug, Default)]
struct Example {
    line: usize,
    runner: Runner,
    sql: String,
    expected: String,
    directive: Directive,
}

/// `<!-- docs-test` ... `-->` before an example's SQL block, one
/// `key: value` per line; `setup:` takes every line after it.
#[derive(Debug, Default, Clone)]
struct Directive {
    /// Extra psql switches (`-At`).
    psql: Vec<String>,
    /// Fields whose values vary: JSON keys, columns of a table, rows of
    /// expanded display.
    mask: BTreeSet<String>,
    /// Oldest PostgreSQL major the example's output holds for.
    min_major: Option<u32>,
    /// Output plugins besides pubjson the example needs (`wal2json`):
    /// skipped (and reported) where the server has none.
    needs: Vec<String>,
    /// Run silently before the example (must succeed).
    setup: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// README.md and every docs/*.md, in a stable order.
fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The document as a sequence of blocks (code and HTML blocks inside
/// lists count too; they are what examples are made of).
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.trim().to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                current = Some(Block::Code {
                    info,
                    text: String::new(),
                    line: line_of(text, range.start),
                });
            }
            Event::Start(Tag::HtmlBlock) => {
                current = Some(Block::Html {
                    text: String::new(),
                    line: line_of(text, range.start),
                });
            }
            Event::Text(t) | Event::Html(t) => match &mut current {
                Some(Block::Code { text, .. }) | Some(Block::Html { text, .. }) => {
                    text.push_str(&t)
                }
                _ => {}
            },
            Event::End(TagEnd::CodeBlock) | Event::End(TagEnd::HtmlBlock) => {
                out.extend(current.take());
            }
            Event::Start(
                Tag::Paragraph | Tag::Heading { .. } | Tag::Table(_) | Tag::BlockQuote(_),
            ) if current.is_none() => out.push(Block::Other),
            _ => {}
        }
    }
    out
}

fn parse_directive(text: &str, doc: &str, line: usize) -> Directive {
    let body = text
        .trim()
        .strip_prefix("<!-- docs-test")
        .and_then(|b| b.strip_suffix("-->"))
        .unwrap_or_else(|| {
            panic!("{doc}:{line}: a docs-test directive is `<!-- docs-test ... -->`")
        });
    let mut d = Directive::default();
    let mut lines = body.lines();
    for l in lines.by_ref() {
        let l = l.trim();
        if l.is_empty() {
            continue;
        }
        let (key, value) = l
            .split_once(':')
            .unwrap_or_else(|| panic!("{doc}:{line}: directive line {l:?} is not `key: value`"));
        let value = value.trim();
        match key.trim() {
            "psql" => d.psql = value.split_whitespace().map(String::from).collect(),
            "mask" => d.mask = value.split(',').map(|s| s.trim().to_string()).collect(),
            "versions" => {
                d.min_major = Some(
                    value
                        .strip_suffix('+')
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("{doc}:{line}: versions is `N+`")),
                )
            }
            "needs" => {
                d.needs = value.split(',').map(|s| s.trim().to_string()).collect();
                assert!(
                    d.needs.iter().all(|n| n == "wal2json"),
                    "{doc}:{line}: needs names wal2json only"
                );
            }
            "setup" => {
                d.setup = lines.by_ref().collect::<Vec<_>>().join("\n");
                break;
            }
            other => panic!("{doc}:{line}: unknown directive key {other:?}"),
        }
    }
    d
}

/// The examples of a document. A `sql` block directly followed by any
/// code block other than `output`, and an `output` block that does not
/// follow a `sql` block, are mistakes the test reports.
fn examples(doc: &str, text: &str) -> Vec<Example> {
    let bs = blocks(text);
    let mut out = Vec::new();
    for (i, b) in bs.iter().enumerate() {
        let Block::Code { info, text, line } = b else {
            continue;
        };
        let first_word = info.split_whitespace().next().unwrap_or("");
        let prev = i.checked_sub(1).map(|p| &bs[p]);
        let next = bs.get(i + 1);
        if first_word == "output" {
            assert!(
                matches!(prev, Some(Block::Code { info, .. }) if info == "sql" || info == "sh"),
                "{doc}:{line}: an `output` block must directly follow the `sql` or `sh` block it shows"
            );
            continue;
        }
        let runner = match first_word {
            "sql" => Runner::Psql,
            "sh" => Runner::Shell,
            _ => continue,
        };
        let Some(Block::Code {
            info: next_info,
            text: expected,
            ..
        }) = next
        else {
            continue;
        };
        if runner == Runner::Shell && next_info != "output" {
            continue;
        }
        assert_eq!(
            next_info, "output",
            "{doc}:{line}: a `sql` block followed directly by a `{next_info}` block: \
             mark its output `output` (it is then tested) or put prose between them"
        );
        let directive = match prev {
            Some(Block::Html { text, line }) if text.trim_start().starts_with("<!-- docs-test") => {
                parse_directive(text, doc, *line)
            }
            _ => Directive::default(),
        };
        out.push(Example {
            line: *line,
            runner,
            sql: text.clone(),
            expected: expected.clone(),
            directive,
        });
    }
    for b in &bs {
        if let Block::Html { text, line } = b {
            if text.contains("docs-test") {
                let attached = out
                    .iter()
                    .any(|e| e.line > *line && e.line <= line + text.lines().count() + 1);
                assert!(
                    attached,
                    "{doc}:{line}: a docs-test directive must directly precede a `sql` block with output"
                );
            }
        }
    }
    out
}

/// The masks every example gets: values no two runs share.
struct Masks {
    lsn: Regex,
    time: Regex,
    interval: Regex,
    size: Regex,
    psql_location: Regex,
    spaces: Regex,
    dashes: Regex,
}

impl Masks {
    fn new() -> Masks {
        let re = |s: &str| Regex::new(s).expect("mask regex");
        Masks {
            lsn: re(r"\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b"),
            time: re(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}(:\d{2})?)?"),
            interval: re(r"\b\d{2}:\d{2}:\d{2}\.\d+\b"),
            size: re(r"\b\d+(\.\d+)? (bytes|kB|MB|GB)\b"),
            psql_location: re(r"(?m)^psql:<stdin>:\d+: "),
            spaces: re(r"[ \t]+"),
            dashes: re(r"-{2,}"),
        }
    }

    /// The LSNs of `text`, in the order they appear, as numbers.
    fn lsns(&self, text: &str) -> Vec<u64> {
        self.lsn
            .find_iter(text)
            .map(|m| {
                let (hi, lo) = m.as_str().split_once('/').expect("X/Y");
                (u64::from_str_radix(hi, 16).expect("hex") << 32)
                    | u64::from_str_radix(lo, 16).expect("hex")
            })
            .collect()
    }

    /// Applies every mask, then normalizes what psql's alignment adds.
    fn apply(&self, text: &str, fields: &BTreeSet<String>) -> String {
        let text = self.psql_location.replace_all(text, "");
        let text = mask_fields(&text, fields);
        let text = self.lsn.replace_all(&text, "<lsn>");
        let text = self.time.replace_all(&text, "<time>");
        let text = self.interval.replace_all(&text, "<interval>");
        let text = self.size.replace_all(&text, "<size>");
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                let l = self.spaces.replace_all(l.trim(), " ");
                self.dashes.replace_all(&l, "-").into_owned()
            })
            .collect();
        lines.join("\n").trim().to_string()
    }
}

/// Where the page's LSNs and the server's come in opposite orders: LSN
/// values differ from run to run, but their order does not, and a reader
/// relies on it (format 3's skip rule compares them). The `i`-th LSN of
/// the page and of the server are compared with every later one; equal
/// on one side and ordered on the other is allowed (two adjacent records
/// share a position unless another session's record came between).
fn lsn_order_conflict(page: &[u64], server: &[u64]) -> Option<String> {
    let text = |v: u64| format!("{:X}/{:X}", v >> 32, v & 0xffff_ffff);
    for i in 0..page.len().min(server.len()) {
        for j in i + 1..page.len().min(server.len()) {
            let (p, s) = (page[i].cmp(&page[j]), server[i].cmp(&server[j]));
            if p != s && p != std::cmp::Ordering::Equal && s != std::cmp::Ordering::Equal {
                return Some(format!(
                    "LSN {} and LSN {} of the output: the page shows {} and {}, the server {} and {}",
                    i + 1,
                    j + 1,
                    text(page[i]),
                    text(page[j]),
                    text(server[i]),
                    text(server[j])
                ));
            }
        }
    }
    None
}

/// Replaces the values of the named fields by `<name>`: JSON members,
/// columns of psql's aligned tables and rows of its expanded display.
fn mask_fields(text: &str, fields: &BTreeSet<String>) -> String {
    if fields.is_empty() {
        return text.to_string();
    }
    let mut text = text.to_string();
    for f in fields {
        let json = Regex::new(&format!(
            r#""{}":\s*("(?:[^"\\]|\\.)*"|[^,}}\]]*)"#,
            regex::escape(f)
        ))
        .expect("field regex");
        text = json
            .replace_all(&text, format!("\"{f}\":<{f}>").as_str())
            .into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    // Columns of the aligned table being read, if any.
    let mut columns: Option<Vec<String>> = None;
    let mut expanded_field: Option<String> = None;
    for (i, line) in lines.iter().enumerate() {
        let is_rule = |l: &str| !l.is_empty() && l.chars().all(|c| c == '-' || c == '+');
        if lines.get(i + 1).is_some_and(|n| is_rule(n)) && line.contains('|') {
            columns = Some(line.split('|').map(|c| c.trim().to_string()).collect());
            out.push(line.to_string());
            continue;
        }
        if line.trim().is_empty() || line.starts_with('(') {
            columns = None;
        }
        if let Some(cols) = &columns {
            if !is_rule(line) {
                let cells: Vec<String> = line
                    .split('|')
                    .enumerate()
                    .map(|(n, cell)| match cols.get(n) {
                        Some(c) if fields.contains(c) => format!(" <{c}> "),
                        _ => cell.to_string(),
                    })
                    .collect();
                out.push(cells.join("|"));
                continue;
            }
        }
        // Expanded display: `name | value`, continued by `     | more`.
        if let Some((name, _)) = line.split_once('|') {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with("-[") {
                expanded_field = fields.contains(name).then(|| name.to_string());
                if let Some(f) = &expanded_field {
                    out.push(format!("{name} | <{f}>"));
                    continue;
                }
            } else if name.is_empty() && expanded_field.is_some() {
                continue;
            }
        } else {
            expanded_field = None;
        }
        out.push(line.to_string());
    }
    out.join("\n")
}

/// Runs `sql` through psql in `db`; returns what the user would see
/// (standard output and errors, in order).
fn psql(db: &str, extra: &[String], sql: &str, stop_on_error: bool) -> (bool, String) {
    let mut cmd = Command::new(pg_bin("psql"));
    cmd.args(["-X", "-q", "-d", db]);
    if stop_on_error {
        cmd.args(["-v", "ON_ERROR_STOP=1"]);
    }
    cmd.args(extra)
        // What the documents assume of a session; see docs/development.md.
        .env("PGTZ", "UTC")
        .env("PGDATESTYLE", "ISO, MDY")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("PGOPTIONS");
    // One pipe for both streams keeps errors where psql printed them.
    let (reader, writer) = std::io::pipe().expect("pipe");
    cmd.stdin(Stdio::piped())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer);
    let mut child = cmd.spawn().expect("start psql");
    drop(cmd);
    let mut stdin = child.stdin.take().expect("psql stdin");
    let sql = sql.to_string();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(sql.as_bytes());
    });
    let mut output = String::new();
    std::io::Read::read_to_string(&mut { reader }, &mut output).expect("read psql output");
    let status = child.wait().expect("psql");
    feeder.join().expect("feeding psql");
    (status.success(), output)
}

/// Runs `script` with `sh -e` against database `db` (the word `mydb` in
/// it), the server's programs first on the PATH and the session settings
/// psql examples get; returns what it printed (both streams, in order).
/// A script still running after 60 s is killed with its children.
fn shell(db: &str, script: &str) -> (bool, String) {
    let mydb = Regex::new(r"\bmydb\b").expect("regex");
    let script = mydb.replace_all(script, db).into_owned();
    let path = format!(
        "{}:{}",
        pubjson_e2e::pg_bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-e", "-c", &script])
        .env("PATH", path)
        .env("PSQLRC", "/dev/null")
        .env("PGTZ", "UTC")
        .env("PGDATESTYLE", "ISO, MDY")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("PGOPTIONS")
        .env_remove("PGDATABASE")
        .stdin(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let (reader, writer) = std::io::pipe().expect("pipe");
    cmd.stdout(writer.try_clone().expect("pipe")).stderr(writer);
    let mut child = cmd.spawn().expect("start sh");
    drop(cmd);
    let pid = child.id();
    let collector = std::thread::spawn(move || {
        let mut output = String::new();
        std::io::Read::read_to_string(&mut { reader }, &mut output).expect("read sh output");
        output
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("sh") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            panic!("the shell example ran longer than 60 s:\n{script}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status.success(), collector.join().expect("collector"))
}

#[test]
fn examples_match_the_server() {
    let server = Server::main();
    let major = server_major(&mut server.connect("postgres"));
    let masks = Masks::new();
    let only = std::env::var("PUBJSON_DOCS").unwrap_or_default();
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in documents() {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        if !name.contains(&only) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read document");
        let examples = examples(&name, &text);
        if examples.is_empty() {
            continue;
        }
        let stem = name
            .trim_end_matches(".md")
            .to_lowercase()
            .replace('-', "_");
        let db = format!("pubjson_docs_{stem}");
        drop(server.fresh_database(&db));
        for ex in &examples {
            if ex.directive.min_major.is_some_and(|m| major < m) {
                note_skip(
                    &format!("docs {name}:{}", ex.line),
                    &format!(
                        "the example's output is that of PostgreSQL {}+",
                        ex.directive.min_major.unwrap_or(0)
                    ),
                );
                continue;
            }
            if !ex.directive.needs.is_empty() && !pubjson_e2e::wal2json_installed() {
                note_skip(
                    &format!("docs {name}:{}", ex.line),
                    "the example needs wal2json, which is not installed for this server",
                );
                continue;
            }
            if !ex.directive.setup.trim().is_empty() {
                let (ok, out) = psql(&db, &[], &ex.directive.setup, true);
                assert!(ok, "{name}:{}: the example's setup failed:\n{out}", ex.line);
            }
            let (_, actual) = match ex.runner {
                Runner::Psql => psql(&db, &ex.directive.psql, &ex.sql, false),
                Runner::Shell => shell(&db, &ex.sql),
            };
            ran += 1;
            let want = masks.apply(&ex.expected, &ex.directive.mask);
            let got = masks.apply(&actual, &ex.directive.mask);
            let order = lsn_order_conflict(&masks.lsns(&ex.expected), &masks.lsns(&actual));
            if let (true, Some(order)) = (want == got, &order) {
                failures.push(format!(
                    "{name}:{}: the example's LSNs are out of order: {order}\n\
                     --- server (as psql printed it)\n{actual}",
                    ex.line
                ));
            } else if want != got {
                failures.push(format!(
                    "{name}:{}: the example's output differs.\n--- document (masked)\n{want}\n\
                     --- server (masked)\n{got}\n--- server (as psql printed it)\n{actual}",
                    ex.line
                ));
            }
        }
        server.drop_database(&db).unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!("docs: {ran} examples run on PostgreSQL {major}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if only.is_empty() {
        assert!(
            ran >= 20,
            "only {ran} documentation examples were found and run"
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`, `-1`, `-2`... for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    let html_id = Regex::new(r#"<a (?:id|name)="([^"]+)""#).expect("regex");
    for cap in html_id.captures_iter(text) {
        out.insert(cap[1].to_string());
    }
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = &mut heading {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let h = heading.take().unwrap_or_default();
                let slug: String = h
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    slug.clone()
                } else {
                    format!("{slug}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Needs no server: scripts/test.sh runs it once, not once per PostgreSQL
/// major (`version_independent::` in its name).
mod version_independent {
    use super::*;

    #[test]
    fn links_between_documents_resolve() {
        let root = repo_root();
        let mut broken = Vec::new();
        let mut checked = 0;
        for path in documents() {
            let text = std::fs::read_to_string(&path).expect("read document");
            let name = path
                .strip_prefix(&root)
                .expect("in the repo")
                .display()
                .to_string();
            let mut has_h1 = false;
            for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
                match event {
                    Event::Start(Tag::Heading {
                        level: HeadingLevel::H1,
                        ..
                    }) => has_h1 = true,
                    Event::Start(Tag::Link { dest_url, .. }) => {
                        let url = dest_url.to_string();
                        if url.contains("://") || url.starts_with("mailto:") {
                            continue;
                        }
                        checked += 1;
                        let (file, anchor) = url.split_once('#').unwrap_or((&url, ""));
                        let target = if file.is_empty() {
                            path.clone()
                        } else {
                            path.parent().expect("dir").join(file)
                        };
                        if !target.exists() {
                            broken
                                .push(format!("{name}: link {url}: no file {}", target.display()));
                            continue;
                        }
                        if !anchor.is_empty() {
                            let t = std::fs::read_to_string(&target).unwrap_or_default();
                            if !anchors(&t).contains(anchor) {
                                broken.push(format!("{name}: link {url}: no heading #{anchor}"));
                            }
                        }
                    }
                    _ => {}
                }
            }
            assert!(has_h1, "{name} has no title");
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
        assert!(checked > 50, "only {checked} links checked");
    }
}
